//! `http` processor: calls a URL with each message (or a fixed `body`) and replaces the
//! payload with the answer. A failed call flags the message with the error and keeps its
//! original content, so `catch` or the output can deal with it.

use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderMap;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::config::component::Spec;
use crate::http::client::HttpClient;
use crate::message::Message;

crate::http_client_config! {
    #[derive(Debug, Clone, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct HttpProcessorConfig {
        /// HTTP method.
        #[serde(default = "crate::http::client::default_post")]
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
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let body = self.body.clone().unwrap_or_else(|| msg.payload().clone());
        let resp = self
            .client
            .send(Some(body), &HeaderMap::new())
            .await
            .map_err(|e| ProcessError::new(format!("http: {e}")))?;
        msg.set_payload(resp.body);
        msg.set_meta("http_status_code", resp.status.as_u16().to_string());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
