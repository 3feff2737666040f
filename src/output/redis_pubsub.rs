//! `redis_pubsub` output: publishes each message to a Redis channel.
//!
//! Delivery: a write succeeds once Redis accepted every PUBLISH of the batch; Redis
//! delivers to the subscribers connected at that moment and keeps nothing.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::RwLock;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::Interp;
use crate::connect::redis::{classify, client, connect, validate};
use crate::connect::TlsConfig;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisPubSubOutputConfig {
    /// Server URL (`redis://127.0.0.1:6379`, `rediss://` for TLS).
    pub url: String,
    /// TLS settings (on for a `rediss://` URL, or with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// The channel to write to (interpolated per message).
    pub channel: Interp,
    /// Writes allowed at once.
    #[serde(default = "super::redis_streams::default_max_in_flight")]
    pub max_in_flight: usize,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
}

impl Spec for RedisPubSubOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "redis_pubsub",
        kind: Kind::Output,
        summary: "Publishes messages to a Redis pub/sub channel.",
        examples: &[Example {
            title: "Publish to a channel",
            yaml: "input:\n  stdin: {}\noutput:\n  redis_pubsub:\n    url: redis://127.0.0.1:6379\n    channel: events\n",
        }],
    };
}

impl BuildOutput for RedisPubSubOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        validate(&self.url, &self.tls).map_err(|e| cx.error(e))?;
        if self.channel.source().is_empty() {
            return Err(cx.error("`channel` is empty"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        if let Some(channel) = self.channel.static_value() {
            cx.refuse_reserved("channel", |r| r.check_channel(channel, false))?;
        }
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(RedisPubSubOutput {
                config: self.clone(),
                egress: cx.egress_addresses(std::slice::from_ref(&self.url), 6379)?,
                reserved: cx.reserved_per_message(&self.channel),
                conn: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

pub struct RedisPubSubOutput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: RedisPubSubOutputConfig,
    /// For a posted stream whose channel is made per message, the names each channel is
    /// checked against before it is published to.
    reserved: Option<crate::reserved::ReservedNames>,
    conn: RwLock<Option<MultiplexedConnection>>,
}

#[async_trait]
impl Output for RedisPubSubOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        let client = client(&self.config.url, &self.config.tls)
            .map_err(|e| ConnectorError::rejected(e.to_string()))?;
        *self.conn.write().await = Some(connect(&client, StdDuration::from_secs(10)).await?);
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Some(mut conn) = self.conn.read().await.clone() else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let mut pipe = redis::pipe();
        for (i, msg) in batch.iter().enumerate() {
            let channel = self.config.channel.field(batch, i, "channel")?;
            if let Some(reserved) = &self.reserved {
                reserved
                    .check_channel(&channel, false)
                    .map_err(|e| ConnectorError::rejected(format!("`channel`: {e}")))?;
            }
            pipe.cmd("PUBLISH")
                .arg(channel)
                .arg(&msg.payload()[..])
                .ignore();
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|e| classify(e, "PUBLISH failed"))
    }
}
