//! The bus on Redis Streams: one stream per topic, trimmed to about `max_len` entries.
//! Publishing waits for Redis's answer to every XADD. A node's broadcast reader follows
//! the stream from its end when it starts (XREAD); round robin readers share a consumer
//! group per topic, and a node takes over what a node that died left unacknowledged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply,
};
use redis::{AsyncCommands, Client};
use tracing::warn;

use super::{
    decode, encode_meta, keep_reading, pause, RedisBusConfig, Seal, ACK_WAIT, IDLE_CHECK, READ_WAIT,
};
use crate::component::bus::{Bus, Feed, HistoryError, Past};
use crate::component::ConnectorError;
use crate::connect::redis::{classify, connect, entries_after, entry_position};
use crate::message::{Batch, Message};

/// The entry fields of a message: its payload and its metadata (JSON).
const BODY: &str = "body";
const META: &str = "meta";
/// The signature of the node that published it.
const SIGNATURE: &str = "sig";
/// The consumer group the nodes share for round robin.
const GROUP: &str = "sluice-bus";
/// Where a fed message carries its position: the entry id as one number (see
/// [`entry_position`]), the same on every node.
const POSITION_KEY: &str = "sluice_bus_position";
/// How often a round robin reader looks for entries a dead node left unacknowledged.
const CLAIM_EVERY: Duration = Duration::from_secs(5);

pub struct RedisBus {
    config: RedisBusConfig,
    node: String,
    client: Client,
    seal: Seal,
    publisher: tokio::sync::OnceCell<MultiplexedConnection>,
}

impl RedisBus {
    /// Reads the TLS files, if any; connects later.
    pub fn new(
        config: RedisBusConfig,
        node: &str,
        seal: Seal,
    ) -> Result<Self, crate::connect::redis::SetupError> {
        let client = crate::connect::redis::client(&config.url, &config.tls)?;
        Ok(RedisBus {
            config,
            node: node.to_owned(),
            client,
            seal,
            publisher: tokio::sync::OnceCell::new(),
        })
    }

    fn key(&self, topic: &str) -> String {
        format!("{}{topic}", self.config.key_prefix)
    }

    /// Reads until `feed.stop` (`Ok`) or until Redis fails. A broadcast reader goes on
    /// after `cursor`, the last entry it handed over, which it keeps up to date.
    async fn run(
        &self,
        feed: &Feed,
        cursor: &parking_lot::Mutex<String>,
    ) -> Result<(), ConnectorError> {
        // A blocking read holds its connection: each feed has one of its own.
        let mut conn = connect(&self.client, READ_WAIT + Duration::from_secs(5)).await?;
        let key = self.key(&feed.topic);
        if feed.shared {
            return self.run_shared(&mut conn, &key, feed).await;
        }
        let block = READ_WAIT.as_millis() as usize;
        loop {
            let opts = StreamReadOptions::default().count(100).block(block);
            let (keys, ids) = ([key.as_str()], [cursor.lock().clone()]);
            let read = conn.xread_options::<_, _, StreamReadReply>(&keys, &ids, &opts);
            let reply = tokio::select! {
                _ = feed.stop.cancelled() => return Ok(()),
                reply = read => reply.map_err(|e| classify(e, "XREAD failed"))?,
            };
            for entry in reply.keys.into_iter().flat_map(|k| k.ids) {
                *cursor.lock() = entry.id.clone();
                let Some(msg) = self.seal.open(&feed.topic, message(&entry)) else {
                    continue;
                };
                let batch = vec![msg];
                let written = tokio::select! {
                    _ = feed.stop.cancelled() => return Ok(()),
                    written = feed.sink.write(&batch) => written,
                };
                if let Err(e) = written {
                    if feed.stop.is_cancelled() {
                        return Ok(());
                    }
                    // Broadcast into this node's own clients only: nothing to give back.
                    warn!(error = %e, "A message from the bus was not delivered.");
                }
            }
        }
    }

    /// Round robin: one entry at a time through the shared group, and only while the node
    /// has a client; acknowledged once a client took it.
    async fn run_shared(
        &self,
        conn: &mut MultiplexedConnection,
        key: &str,
        feed: &Feed,
    ) -> Result<(), ConnectorError> {
        let created: Result<(), _> = conn.xgroup_create_mkstream(key, GROUP, "$").await;
        if let Err(e) = created {
            if e.code() != Some("BUSYGROUP") {
                return Err(classify(e, "XGROUP CREATE failed"));
            }
        }
        let mut claimed_at = Instant::now() - CLAIM_EVERY;
        loop {
            if !(feed.ready)() {
                if pause(&feed.stop, IDLE_CHECK).await {
                    return Ok(());
                }
                continue;
            }
            let mut entries = Vec::new();
            if claimed_at.elapsed() >= CLAIM_EVERY {
                claimed_at = Instant::now();
                let opts = StreamAutoClaimOptions::default().count(1);
                let reply: StreamAutoClaimReply = conn
                    .xautoclaim_options(
                        key,
                        GROUP,
                        &self.node,
                        ACK_WAIT.as_millis() as u64,
                        "0-0",
                        opts,
                    )
                    .await
                    .map_err(|e| classify(e, "XAUTOCLAIM failed"))?;
                entries = reply.claimed;
            }
            if entries.is_empty() {
                let opts = StreamReadOptions::default()
                    .group(GROUP, &self.node)
                    .count(1)
                    .block(READ_WAIT.as_millis() as usize);
                let (keys, ids) = ([key], [">"]);
                let read = conn.xread_options::<_, _, StreamReadReply>(&keys, &ids, &opts);
                let reply = tokio::select! {
                    _ = feed.stop.cancelled() => return Ok(()),
                    reply = read => reply.map_err(|e| classify(e, "XREADGROUP failed"))?,
                };
                entries = reply.keys.into_iter().flat_map(|k| k.ids).collect();
            }
            for entry in entries {
                let Some(msg) = self.seal.open(&feed.topic, message(&entry)) else {
                    // Taken by no node: acknowledged so that it is not handed out again.
                    let acked: Result<i64, _> = conn.xack(key, GROUP, &[&entry.id]).await;
                    if let Err(e) = acked {
                        warn!(error = %e, "Acknowledging a message of the bus failed.");
                    }
                    continue;
                };
                let batch = vec![msg];
                let written = tokio::select! {
                    _ = feed.stop.cancelled() => return Ok(()),
                    written = feed.sink.write(&batch) => written,
                };
                match written {
                    Ok(()) => {
                        let acked: Result<i64, _> = conn.xack(key, GROUP, &[&entry.id]).await;
                        if let Err(e) = acked {
                            // Claimed again by a node later: a duplicate, not a loss.
                            warn!(error = %e, "Acknowledging a message of the bus failed.");
                        }
                    }
                    Err(e) => {
                        if feed.stop.is_cancelled() {
                            return Ok(());
                        }
                        // Left pending: claimed again after the ack wait.
                        warn!(error = %e, "A message from the bus was not delivered; it comes again.");
                    }
                }
            }
        }
    }
}

impl RedisBus {
    /// The entries of `topic` after the one at position `after`, up to the last there is
    /// now.
    async fn read_back(&self, topic: &str, after: u64) -> Result<Past, HistoryError> {
        let conn = connect(&self.client, std::time::Duration::from_secs(10))
            .await
            .map_err(|e| HistoryError::failed("connecting to the bus", e))?;
        let past = entries_after(conn, self.key(topic), after, message).await?;
        Ok(self.seal.open_past(topic.to_owned(), past))
    }
}

/// The message an entry carries, with its position.
fn message(entry: &StreamId) -> Message {
    let bytes = |field: &str| match entry.map.get(field) {
        Some(redis::Value::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    let signature = bytes(SIGNATURE).and_then(|s| String::from_utf8(s).ok());
    let mut msg = decode(
        bytes(BODY).unwrap_or_default().into(),
        bytes(META).as_deref(),
        signature.as_deref(),
    );
    if let Some(position) = entry_position(&entry.id) {
        msg.set_meta(POSITION_KEY, position as i64);
    }
    msg
}

impl Bus for RedisBus {
    fn publish<'a>(
        &'a self,
        topic: &'a str,
        batch: &'a Batch,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        async move {
            let conn = self
                .publisher
                .get_or_try_init(|| connect(&self.client, Duration::from_secs(10)))
                .await?;
            let key = self.key(topic);
            let mut pipe = redis::pipe();
            for msg in batch {
                let cmd = pipe
                    .cmd("XADD")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(self.config.max_len)
                    .arg("*")
                    .arg(BODY)
                    .arg(msg.payload().as_ref());
                let meta = encode_meta(msg);
                if let Some(signature) = self.seal.sign(topic, msg.payload(), meta.as_deref()) {
                    cmd.arg(SIGNATURE).arg(signature);
                }
                if let Some(meta) = meta {
                    cmd.arg(META).arg(meta);
                }
            }
            // A topic no longer written (its API gone) does not stay in Redis for good.
            pipe.cmd("EXPIRE")
                .arg(&key)
                .arg(self.config.max_age.0.as_secs().max(1))
                .ignore();
            pipe.query_async::<()>(&mut conn.clone())
                .await
                .map_err(|e| classify(e, "publishing to the bus failed"))
        }
        .boxed()
    }

    fn feed(self: Arc<Self>, feed: Feed) -> BoxFuture<'static, ()> {
        async move {
            // From the stream's start on this node: entry ids begin with their time.
            let from = feed
                .from
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let cursor = parking_lot::Mutex::new(format!("{from}-0"));
            keep_reading(&feed, || self.run(&feed, &cursor)).await
        }
        .boxed()
    }

    fn position_key(&self) -> Option<&'static str> {
        Some(POSITION_KEY)
    }

    fn history(
        self: Arc<Self>,
        topic: String,
        after: u64,
    ) -> BoxFuture<'static, Result<Past, HistoryError>> {
        async move { self.read_back(&topic, after).await }.boxed()
    }

    fn kind(&self) -> &'static str {
        "redis_streams"
    }
}
