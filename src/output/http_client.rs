//! `http_client` output: sends each message as the body of a request. A message counts as
//! delivered once the server answered with a success status; connection failures, 5xx and
//! 429 are retried with backoff, other 4xx are reported as rejected.

use async_trait::async_trait;
use http::{HeaderMap, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::connect::http_client::HttpClient;
use crate::message::Batch;

crate::http_client_config! {
    #[derive(Debug, Clone, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct HttpClientOutputConfig {
        /// HTTP method.
        #[serde(default = "crate::connect::http_client::default_post")]
        pub verb: String,
        /// Requests allowed at once.
        #[serde(default = "default_max_in_flight")]
        pub max_in_flight: usize,
        /// How messages are grouped into writes (each message is still its own request).
        #[serde(default)]
        pub batching: BatchPolicy,
        /// Send metadata whose key starts with one of these prefixes as request headers.
        #[serde(default)]
        pub metadata_headers: Vec<String>,
    }
}

fn default_max_in_flight() -> usize {
    64
}

impl Spec for HttpClientOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "http_client",
        kind: Kind::Output,
        summary: "Sends each message as the body of an HTTP request.",
        examples: &[Example {
            title: "Forward to a webhook",
            yaml: "input:\n  stdin: {}\noutput:\n  http_client:\n    url: http://127.0.0.1:8080/hook\n    verb: POST\n    headers: {Content-Type: application/json}\n    retries: 5\n    max_in_flight: 16\n",
        }],
    };
}

impl BuildOutput for HttpClientOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(HttpClientOutput {
                client: self.client(&self.verb, cx)?,
                metadata_headers: self.metadata_headers.clone(),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

pub struct HttpClientOutput {
    client: HttpClient,
    metadata_headers: Vec<String>,
}

#[async_trait]
impl Output for HttpClientOutput {
    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        for (i, msg) in batch.iter().enumerate() {
            let mut headers = HeaderMap::new();
            for (k, v) in msg.metadata() {
                if self
                    .metadata_headers
                    .iter()
                    .any(|p| k.starts_with(p.as_str()))
                {
                    if let (Ok(name), Ok(value)) = (
                        http::HeaderName::from_bytes(k.as_bytes()),
                        HeaderValue::from_str(&v.to_text()),
                    ) {
                        headers.insert(name, value);
                    }
                }
            }
            // The message's own media type unless the config or its metadata set one.
            if !headers.contains_key(http::header::CONTENT_TYPE)
                && !self.client.sets_header(&http::header::CONTENT_TYPE)
            {
                if let Ok(value) = HeaderValue::from_str(&msg.content_type()) {
                    headers.insert(http::header::CONTENT_TYPE, value);
                }
            }
            self.client
                .send(Some((batch, i)), Some(msg.payload().clone()), &headers)
                .await?;
        }
        Ok(())
    }

    fn connects_per_write(&self) -> bool {
        true
    }
}
