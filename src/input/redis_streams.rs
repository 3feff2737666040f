//! `redis_streams` input: reads Redis streams as a member of a consumer group.
//!
//! Delivery: at least once. An entry is acknowledged (XACK) once every output confirmed
//! it. After a reconnect the consumer first reads its own pending entries (delivered to
//! it but never acknowledged) before new ones, so a lost connection loses nothing.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use futures::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply,
};
use redis::AsyncCommands;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::redis::{
    classify, client, connect, entries_after, entry_position, validate, value_text,
};
use crate::connect::{AckSpawner, TlsConfig};
use crate::duration::Duration;
use crate::http::history::{History, HistoryError, Past};
use crate::message::{Batch, Message, Outcome};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisStreamsInputConfig {
    /// Server URL (`redis://127.0.0.1:6379/0`, `rediss://` for TLS).
    pub url: String,
    /// TLS settings (on for a `rediss://` URL, or with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// The stream keys to read.
    pub streams: Vec<String>,
    /// The consumer group; created when missing.
    pub consumer_group: String,
    /// This consumer's name in the group; keep it stable so that its pending entries are
    /// read again after a restart.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// Create missing streams along with the group.
    #[serde(default = "default_true")]
    pub create_streams: bool,
    /// Where a new group starts: the oldest entry (true) or only new ones (false).
    #[serde(default = "default_true")]
    pub start_from_oldest: bool,
    /// The field holding the payload; other fields become metadata.
    #[serde(default = "crate::connect::redis::default_body_key")]
    pub body_key: String,
    /// Entries per read, at most.
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// How long one read blocks waiting for entries.
    #[serde(default = "default_block")]
    pub timeout: Duration,
    /// Take over entries that another consumer of the group received but left
    /// unacknowledged for at least this long (XAUTOCLAIM), so that a consumer which died
    /// for good does not strand them. Keep it well above the time a delivery takes: an
    /// entry still in flight for longer is taken and delivered again. Absent: only this
    /// consumer's own pending entries are read again.
    #[serde(default)]
    pub claim_idle_after: Option<Duration>,
}

fn default_client_id() -> String {
    "sluice".into()
}
fn default_true() -> bool {
    true
}
fn default_limit() -> usize {
    64
}
fn default_block() -> Duration {
    Duration::from_secs(1)
}

impl Spec for RedisStreamsInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "redis_streams",
        kind: Kind::Input,
        summary: "Reads Redis streams in a consumer group; XACKs after delivery.",
        examples: &[Example {
            title: "Consume a stream in a group",
            yaml: "input:\n  redis_streams:\n    url: redis://127.0.0.1:6379\n    streams: [orders]\n    consumer_group: sluice\n    client_id: sluice-1\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for RedisStreamsInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        validate(&self.url, &self.tls).map_err(|e| cx.error(e))?;
        if self.streams.is_empty() || self.streams.iter().any(String::is_empty) {
            return Err(cx.error("`streams` must list at least one key"));
        }
        for (i, key) in self.streams.iter().enumerate() {
            cx.refuse_reserved(&format!("streams[{i}]"), |r| r.check_key(key))?;
        }
        if self.consumer_group.is_empty() || self.client_id.is_empty() {
            return Err(cx.error("`consumer_group` and `client_id` must not be empty"));
        }
        if self.limit == 0 {
            return Err(cx.error("`limit` must be at least 1"));
        }
        if self.claim_idle_after.is_some_and(|d| d.0.is_zero()) {
            return Err(cx.error(
                "`claim_idle_after` must be above zero: it would take entries other consumers are still working on",
            ));
        }
        Ok(InputBuild::Leaf(Box::new(RedisStreamsInput {
            config: self.clone(),
            egress: cx.egress_addresses(std::slice::from_ref(&self.url), 6379)?,
            session: None,
        })))
    }
}

type Entries = Vec<(String, String, Message)>;

struct Session {
    rx: mpsc::Receiver<Result<Entries, ConnectorError>>,
    acks: MultiplexedConnection,
    spawner: AckSpawner,
    reader: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

pub struct RedisStreamsInput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: RedisStreamsInputConfig,
    session: Option<Session>,
}

fn entries(reply: StreamReadReply, body_key: &str) -> Entries {
    let mut out = Vec::new();
    for key in reply.keys {
        push_entries(&mut out, &key.key, key.ids, body_key);
    }
    out
}

fn push_entries(out: &mut Entries, key: &str, ids: Vec<StreamId>, body_key: &str) {
    for entry in ids {
        let msg = message_of(key, &entry, body_key);
        out.push((key.to_owned(), entry.id, msg));
    }
}

/// The message entry `entry` of stream `key` carries: the `body_key` field as payload,
/// the other fields and where it is as metadata.
fn message_of(key: &str, entry: &StreamId, body_key: &str) -> Message {
    let mut msg = Message::default();
    for (field, value) in &entry.map {
        if field == body_key {
            if let redis::Value::BulkString(b) = value {
                msg.set_payload(b.clone());
            }
        } else if let Some(text) = value_text(value) {
            msg.set_meta(field.as_str(), text);
        }
    }
    msg.set_meta("redis_stream", key);
    msg.set_meta("redis_stream_id", entry.id.as_str());
    if let Some(position) = entry_position(&entry.id) {
        msg.set_meta("redis_stream_position", position as i64);
    }
    msg
}

/// The one stream an input reads, read again by entry position for resuming clients.
#[derive(Clone)]
struct StreamHistory {
    config: RedisStreamsInputConfig,
    key: String,
    egress: crate::egress::Egress,
}

impl History for StreamHistory {
    fn after(&self, after: u64) -> futures::future::BoxFuture<'static, Result<Past, HistoryError>> {
        let this = self.clone();
        async move {
            this.egress.check().await?;
            let client = client(&this.config.url, &this.config.tls)
                .map_err(|e| HistoryError::failed("opening a client", e))?;
            let conn = connect(&client, StdDuration::from_secs(10))
                .await
                .map_err(|e| HistoryError::failed("connecting", e))?;
            let (key, body_key) = (this.key.clone(), this.config.body_key.clone());
            entries_after(conn, this.key, after, move |e| {
                message_of(&key, e, &body_key)
            })
            .await
        }
        .boxed()
    }

    fn position_key(&self) -> &str {
        "redis_stream_position"
    }
}

/// Claims, for this consumer, every entry of `key` that has been pending with another
/// consumer for at least `idle`, and hands them on in batches of `limit`.
async fn claim_stale(
    conn: &mut MultiplexedConnection,
    config: &RedisStreamsInputConfig,
    key: &str,
    idle: StdDuration,
    tx: &mpsc::Sender<Result<Entries, ConnectorError>>,
) -> Result<(), ()> {
    let mut start = "0-0".to_owned();
    loop {
        let opts = StreamAutoClaimOptions::default().count(config.limit);
        let reply: Result<StreamAutoClaimReply, _> = conn
            .xautoclaim_options(
                key,
                &config.consumer_group,
                &config.client_id,
                idle.as_millis() as u64,
                &start,
                opts,
            )
            .await;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(classify(e, "XAUTOCLAIM failed"))).await;
                return Err(());
            }
        };
        let mut batch = Vec::new();
        push_entries(&mut batch, key, reply.claimed, &config.body_key);
        if !batch.is_empty() && tx.send(Ok(batch)).await.is_err() {
            return Err(());
        }
        // "0-0": the scan went round the whole pending list.
        if reply.next_stream_id == "0-0" {
            return Ok(());
        }
        start = reply.next_stream_id;
    }
}

/// Reads in its own task so that a cancelled `read` never drops a reply: an entry
/// delivered by XREADGROUP is only read again by this consumer's pending scan.
async fn reader(
    mut conn: MultiplexedConnection,
    config: RedisStreamsInputConfig,
    tx: mpsc::Sender<Result<Entries, ConnectorError>>,
) {
    let keys = &config.streams;
    // This consumer's pending entries first, from each key's cursor (an id read is not
    // asked for again); then ">": new entries.
    let mut cursors: Option<Vec<String>> = Some(vec!["0".to_owned(); keys.len()]);
    let new_ids = vec![">".to_owned(); keys.len()];
    let claim_idle = config.claim_idle_after.map(|d| d.0);
    // Scans for stale entries at most once per idle period: an entry cannot become
    // claimable sooner than that after the previous scan.
    let mut last_claim: Option<tokio::time::Instant> = None;
    loop {
        if let (Some(idle), None) = (claim_idle, &cursors) {
            if last_claim.is_none_or(|t| t.elapsed() >= idle) {
                for key in keys {
                    if claim_stale(&mut conn, &config, key, idle, &tx)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                last_claim = Some(tokio::time::Instant::now());
            }
        }
        let mut opts = StreamReadOptions::default()
            .group(&config.consumer_group, &config.client_id)
            .count(config.limit);
        if cursors.is_none() {
            opts = opts.block(config.timeout.0.as_millis() as usize);
        }
        let ids = cursors.as_ref().unwrap_or(&new_ids);
        let reply: Result<StreamReadReply, _> = conn.xread_options(keys, ids, &opts).await;
        match reply {
            Ok(reply) => {
                let batch = entries(reply, &config.body_key);
                if let Some(cursors) = &mut cursors {
                    for (key, id, _) in &batch {
                        if let Some(i) = keys.iter().position(|k| k == key) {
                            cursors[i] = id.clone();
                        }
                    }
                }
                if batch.is_empty() {
                    cursors = None;
                    continue;
                }
                if tx.send(Ok(batch)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(classify(e, "XREADGROUP failed"))).await;
                return;
            }
        }
    }
}

#[async_trait]
impl Input for RedisStreamsInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        self.session = None;
        let c = &self.config;
        let client = client(&c.url, &c.tls).map_err(|e| ConnectorError::rejected(e.to_string()))?;
        let read_timeout = c.timeout.0 + StdDuration::from_secs(5);
        let mut conn = connect(&client, read_timeout).await?;
        let acks = connect(&client, StdDuration::from_secs(5)).await?;
        let start = if c.start_from_oldest { "0" } else { "$" };
        for key in &c.streams {
            let created: Result<(), _> = if c.create_streams {
                conn.xgroup_create_mkstream(key, &c.consumer_group, start)
                    .await
            } else {
                conn.xgroup_create(key, &c.consumer_group, start).await
            };
            if let Err(e) = created {
                // BUSYGROUP: the group exists already, which is the usual case.
                if e.code() != Some("BUSYGROUP") {
                    return Err(classify(e, "cannot create consumer group"));
                }
            }
        }
        let (tx, rx) = mpsc::channel(1);
        let reader = tokio::spawn(reader(conn, c.clone(), tx));
        self.session = Some(Session {
            rx,
            acks,
            spawner: AckSpawner::current(),
            reader,
        });
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(session) = &mut self.session else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let entries = match session.rx.recv().await {
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                self.session = None;
                return Err(e);
            }
            None => {
                self.session = None;
                return Err(ConnectorError::not_connected("reader stopped"));
            }
        };
        let mut batch: Batch = Vec::with_capacity(entries.len());
        let mut ids: Vec<(String, String)> = Vec::with_capacity(entries.len());
        for (key, id, msg) in entries {
            batch.push(msg);
            ids.push((key, id));
        }
        let mut acks = session.acks.clone();
        let spawner = session.spawner.clone();
        let group = self.config.consumer_group.clone();
        Ok(ReadBatch::new(batch, move |outcome: Outcome| {
            // Errored reaches here only when the stream was aborted: leave the entries
            // pending so that they are read again.
            if matches!(outcome, Outcome::Errored(_)) {
                return;
            }
            spawner.spawn(async move {
                let mut pipe = redis::pipe();
                for (key, id) in &ids {
                    pipe.xack(key, &group, &[id]).ignore();
                }
                if let Err(e) = pipe.query_async::<()>(&mut acks).await {
                    // Still pending: read again by this consumer after a reconnect.
                    warn!(error = %e, "XACK failed.");
                }
            });
        }))
    }

    fn history(&self) -> Option<std::sync::Arc<dyn History>> {
        match self.config.streams.as_slice() {
            [key] => Some(std::sync::Arc::new(StreamHistory {
                config: self.config.clone(),
                key: key.clone(),
                egress: self.egress.clone(),
            })),
            _ => None,
        }
    }
}
