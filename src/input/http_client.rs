//! `http_client` input: polls a URL and turns each successful answer into a message.
//!
//! `rate_limit` is the polling interval. Delivery: nothing to acknowledge to the server;
//! a failed batch is sent again by the runtime. Failed polls are retried with backoff.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderMap;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::{Instant, MissedTickBehavior};

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::http_client::HttpClient;
use crate::duration::Duration;
use crate::message::Message;

crate::http_client_config! {
    #[derive(Debug, Clone, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct HttpClientInputConfig {
        /// HTTP method of each poll.
        #[serde(default = "crate::connect::http_client::default_get")]
        pub verb: String,
        /// Body sent with each poll.
        #[serde(default)]
        pub body: Option<String>,
        /// Polling interval: the wait between two requests.
        #[serde(default = "default_rate_limit")]
        pub rate_limit: Duration,
        /// Skip answers with an empty body instead of making empty messages.
        #[serde(default = "yes")]
        pub drop_empty_bodies: bool,
    }
}

fn default_rate_limit() -> Duration {
    Duration::from_secs(1)
}

fn yes() -> bool {
    true
}

impl Spec for HttpClientInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "http_client",
        kind: Kind::Input,
        summary: "Polls a URL and makes a message of each answer.",
        examples: &[Example {
            title: "Poll a status endpoint every 30 seconds",
            yaml: "input:\n  http_client:\n    url: http://127.0.0.1:8080/status\n    verb: GET\n    headers: {Accept: application/json}\n    rate_limit: 30s\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for HttpClientInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        Ok(InputBuild::Leaf(Box::new(HttpClientInput {
            client: self.client(&self.verb, cx)?,
            body: self.body.clone().map(Bytes::from),
            interval: self.rate_limit.0,
            drop_empty: self.drop_empty_bodies,
            ticker: None,
        })))
    }
}

pub struct HttpClientInput {
    client: HttpClient,
    body: Option<Bytes>,
    interval: StdDuration,
    drop_empty: bool,
    ticker: Option<tokio::time::Interval>,
}

#[async_trait]
impl Input for HttpClientInput {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        loop {
            if !self.interval.is_zero() {
                let interval = self.interval;
                let ticker = self.ticker.get_or_insert_with(|| {
                    let mut t = tokio::time::interval_at(Instant::now(), interval);
                    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    t
                });
                ticker.tick().await;
            }
            let resp = self
                .client
                .send(None, self.body.clone(), &HeaderMap::new())
                .await?;
            if resp.body.is_empty() && self.drop_empty {
                continue;
            }
            let mut msg = Message::new(resp.body);
            msg.set_meta("http_status_code", resp.status.as_u16().to_string());
            for (k, v) in &resp.headers {
                if let Ok(v) = v.to_str() {
                    msg.set_meta(k.as_str(), v);
                }
            }
            return Ok(ReadBatch::unacked(vec![msg]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_url() {
        let cfg: HttpClientInputConfig =
            serde_yaml::from_str("{url: 'http://127.0.0.1:1/x'}").unwrap();
        assert_eq!(cfg.verb, "GET");
        assert_eq!(cfg.rate_limit, Duration::from_secs(1));
        assert_eq!(cfg.retries, 3);
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_ok());
        let bad: HttpClientInputConfig = serde_yaml::from_str("{url: 'nope'}").unwrap();
        assert!(bad.build(&cx).is_err());
    }

    #[test]
    fn unknown_field_is_refused() {
        assert!(
            serde_yaml::from_str::<HttpClientInputConfig>("{url: 'http://x/', batching: {}}")
                .is_err()
        );
    }
}
