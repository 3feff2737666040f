//! `http` processor: calls a URL with each message (or a fixed `body`) and replaces the
//! payload with the answer. A failed call flags the message with the error and keeps its
//! original content, so `catch` or the output can deal with it.

use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderMap;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::connect::http_client::HttpClient;
use crate::message::Batch;

crate::http_client_config! {
    #[derive(Debug, Clone, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct HttpProcessorConfig {
        /// HTTP method.
        #[serde(default = "crate::connect::http_client::default_post")]
        pub verb: String,
        /// A fixed request body; by default the message's payload is sent.
        #[serde(default)]
        pub body: Option<String>,
    }
}

impl Spec for HttpProcessorConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "http",
        kind: Kind::Processor,
        summary: "Calls a URL with each message and replaces the payload with the answer.",
        examples: &[Example {
            title: "Enrich through a lookup service",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - http:\n        url: http://127.0.0.1:8080/enrich\n        verb: POST\n        headers: {Content-Type: application/json}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for HttpProcessorConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(HttpProcessor {
            client: self.client(&self.verb, cx)?,
            body: self.body.clone().map(Bytes::from),
        }))
    }
}

pub struct HttpProcessor {
    client: HttpClient,
    body: Option<Bytes>,
}

#[async_trait]
impl Processor for HttpProcessor {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        for i in 0..batch.len() {
            let body = self
                .body
                .clone()
                .unwrap_or_else(|| batch[i].payload().clone());
            // The request is built from the message as it was (interpolated url/headers).
            let result = self
                .client
                .send(Some((&batch, i)), Some(body), &HeaderMap::new())
                .await;
            let msg = &mut batch[i];
            match result {
                Ok(resp) => {
                    msg.set_payload(resp.body);
                    msg.set_meta("http_status_code", resp.status.as_u16().to_string());
                }
                // The message keeps its content and carries the error.
                Err(e) => msg.set_error(format!("http: {e}")),
            }
        }
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn failed_call_flags_the_message_and_keeps_it() {
        let cfg: HttpProcessorConfig =
            serde_yaml::from_str("{url: 'http://127.0.0.1:1/', retries: 0}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        let p = cfg.build(&cx).unwrap();
        let out = p.process(vec![Message::new("orig")]).await;
        let m = &out[0][0];
        assert_eq!(&m.payload()[..], b"orig");
        assert!(
            m.error().unwrap().contains("127.0.0.1:1"),
            "{:?}",
            m.error()
        );
    }
}
