//! `redis_pubsub` input: subscribes to Redis pub/sub channels (or patterns).
//!
//! Delivery: at most once. Redis pub/sub keeps nothing: a message published while this
//! input is disconnected is not delivered to it. Use `redis_streams` for durability.

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::redis::{classify, client, validate};
use crate::connect::TlsConfig;
use crate::message::{Batch, Message};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisPubSubInputConfig {
    /// Server URL (`redis://127.0.0.1:6379`, `rediss://` for TLS).
    pub url: String,
    /// TLS settings (on for a `rediss://` URL, or with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// Channels to subscribe to.
    pub channels: Vec<String>,
    /// Treat `channels` as glob patterns (PSUBSCRIBE).
    #[serde(default)]
    pub use_patterns: bool,
}

impl Spec for RedisPubSubInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "redis_pubsub",
        kind: Kind::Input,
        summary: "Subscribes to Redis pub/sub channels (at most once).",
        examples: &[Example {
            title: "Subscribe to a pattern",
            yaml: "input:\n  redis_pubsub:\n    url: redis://127.0.0.1:6379\n    channels: ['events.*']\n    use_patterns: true\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for RedisPubSubInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        validate(&self.url, &self.tls).map_err(|e| cx.error(e))?;
        if self.channels.is_empty() || self.channels.iter().any(String::is_empty) {
            return Err(cx.error("`channels` must list at least one channel"));
        }
        for (i, channel) in self.channels.iter().enumerate() {
            cx.refuse_reserved(&format!("channels[{i}]"), |r| {
                r.check_channel(channel, self.use_patterns)
            })?;
        }
        Ok(InputBuild::Leaf(Box::new(RedisPubSubInput {
            config: self.clone(),
            egress: cx.egress_addresses(std::slice::from_ref(&self.url), 6379)?,
            stream: None,
        })))
    }
}

pub struct RedisPubSubInput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: RedisPubSubInputConfig,
    stream: Option<redis::aio::PubSubStream>,
}

const MAX_BATCH: usize = 64;

fn to_message(m: &redis::Msg) -> Message {
    let mut msg = Message::new(bytes::Bytes::copy_from_slice(m.get_payload_bytes()));
    msg.set_meta("redis_pubsub_channel", m.get_channel_name());
    if let Ok(p) = m.get_pattern::<String>() {
        msg.set_meta("redis_pubsub_pattern", p);
    }
    msg
}

#[async_trait]
impl Input for RedisPubSubInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        self.stream = None;
        let client = client(&self.config.url, &self.config.tls)
            .map_err(|e| ConnectorError::rejected(e.to_string()))?;
        let mut pubsub = client
            .get_async_pubsub()
            .await
            .map_err(|e| classify(e, "cannot connect to Redis"))?;
        for ch in &self.config.channels {
            if self.config.use_patterns {
                pubsub.psubscribe(ch).await
            } else {
                pubsub.subscribe(ch).await
            }
            .map_err(|e| classify(e, "cannot subscribe"))?;
        }
        self.stream = Some(pubsub.into_on_message());
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(stream) = &mut self.stream else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let Some(first) = stream.next().await else {
            self.stream = None;
            return Err(ConnectorError::not_connected("Redis connection lost"));
        };
        let mut batch: Batch = vec![to_message(&first)];
        while batch.len() < MAX_BATCH {
            match stream.next().now_or_never() {
                Some(Some(m)) => batch.push(to_message(&m)),
                _ => break,
            }
        }
        Ok(ReadBatch::unacked(batch))
    }
}
