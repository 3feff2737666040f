//! `redis_streams` output: appends each message to a Redis stream (XADD).
//!
//! Delivery: a write succeeds once Redis answered every XADD of the batch (sent as one
//! pipeline).

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
use crate::connect::{MetadataConfig, MetadataFilter, TlsConfig};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisStreamsOutputConfig {
    /// Server URL (`redis://127.0.0.1:6379/0`, `rediss://` for TLS).
    pub url: String,
    /// TLS settings (on for a `rediss://` URL, or with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// The stream to write to (interpolated per message).
    pub stream: Interp,
    /// The field that holds the payload.
    #[serde(default = "crate::connect::redis::default_body_key")]
    pub body_key: String,
    /// Trim the stream to about this many entries (0: no trimming).
    #[serde(default)]
    pub max_length: usize,
    /// Which metadata to add as entry fields.
    #[serde(default)]
    pub metadata: MetadataConfig,
    /// Writes allowed at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
}

pub(crate) fn default_max_in_flight() -> usize {
    64
}

impl Spec for RedisStreamsOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "redis_streams",
        kind: Kind::Output,
        summary: "Appends messages to a Redis stream.",
        examples: &[Example {
            title: "Append to a capped stream",
            yaml: "input:\n  stdin: {}\noutput:\n  redis_streams:\n    url: redis://127.0.0.1:6379\n    stream: events\n    max_length: 100000\n",
        }],
    };
}

impl BuildOutput for RedisStreamsOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        validate(&self.url, &self.tls).map_err(|e| cx.error(e))?;
        if self.stream.source().is_empty() || self.body_key.is_empty() {
            return Err(cx.error("`stream` and `body_key` must not be empty"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        let fields = self.metadata.compile().map_err(|e| cx.error(e))?;
        let stream = &self.stream;
        cx.refuse_reserved("stream", |r| match stream.static_value() {
            Some(s) => r.check_key(s),
            None => r.check_key_template(stream.source()),
        })?;
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(RedisStreamsOutput {
                config: self.clone(),
                egress: cx.egress_addresses(std::slice::from_ref(&self.url), 6379)?,
                fields,
                reserved: cx.reserved_per_message(stream),
                conn: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

pub struct RedisStreamsOutput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: RedisStreamsOutputConfig,
    fields: MetadataFilter,
    /// For a posted stream whose stream key is made per message, the names each key is
    /// checked against before it is written to.
    reserved: Option<crate::reserved::ReservedNames>,
    conn: RwLock<Option<MultiplexedConnection>>,
}

#[async_trait]
impl Output for RedisStreamsOutput {
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
        let c = &self.config;
        let mut pipe = redis::pipe();
        for (i, msg) in batch.iter().enumerate() {
            let stream = c.stream.field(batch, i, "stream")?;
            if let Some(reserved) = &self.reserved {
                reserved
                    .check_key(&stream)
                    .map_err(|e| ConnectorError::rejected(format!("`stream`: {e}")))?;
            }
            let cmd = pipe.cmd("XADD").arg(stream);
            if c.max_length > 0 {
                cmd.arg("MAXLEN").arg("~").arg(c.max_length);
            }
            cmd.arg("*").arg(&c.body_key).arg(&msg.payload()[..]);
            for (k, v) in self.fields.pairs(msg) {
                cmd.arg(k).arg(v);
            }
            cmd.ignore();
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|e| classify(e, "XADD failed"))
    }
}
