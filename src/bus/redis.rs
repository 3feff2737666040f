//! The bus on Redis Streams: one stream per topic, trimmed to about `max_len` entries.
//! Publishing waits for Redis's answer to every XADD. A node's broadcast reader follows
//! the stream from its end when it starts (XREAD); round robin readers share a consumer
//! group per topic, and a node takes over what a node that died left unacknowledged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply,
};
use redis::{AsyncCommands, Client};
use tracing::warn;

use super::{
    decode, encode_meta, keep_reading, pause, RedisBusConfig, ACK_WAIT, IDLE_CHECK, READ_WAIT,
};
use crate::component::bus::{Bus, Feed, Past};
use crate::component::ConnectorError;
use crate::connect::redis::{classify, connect};
use crate::message::{Batch, Message};

/// The entry fields of a message: its payload and its metadata (JSON).
const BODY: &str = "body";
const META: &str = "meta";
/// The consumer group the nodes share for round robin.
const GROUP: &str = "sluice-bus";
/// Where a fed message carries its position: the entry id as one number (milliseconds
/// shifted left by 22 bits, plus the sequence), the same on every node.
const POSITION_KEY: &str = "sluice_bus_position";
/// How often a round robin reader looks for entries a dead node left unacknowledged.
const CLAIM_EVERY: Duration = Duration::from_secs(5);

pub struct RedisBus {
    config: RedisBusConfig,
    node: String,
    client: Client,
    publisher: tokio::sync::OnceCell<MultiplexedConnection>,
}

impl RedisBus {
    /// Reads the TLS files, if any; connects later.
    pub fn new(config: RedisBusConfig, node: &str) -> Result<Self, String> {
        let client = crate::connect::redis::client(&config.url, &config.tls)
            .map_err(|e| format!("cluster.bus.redis_streams: {e}"))?;
        Ok(RedisBus {
            config,
            node: node.to_owned(),
            client,
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
                let batch = vec![message(&entry)];
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
                let batch = vec![message(&entry)];
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
    /// The entries of `topic` after the one at position `after`, read in pages up to
    /// the last entry there is now.
    async fn read_back(&self, topic: &str, after: u64) -> Result<Past, ConnectorError> {
        let mut conn = connect(&self.client, std::time::Duration::from_secs(10)).await?;
        let key = self.key(topic);
        let info: redis::Value = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, "XINFO STREAM failed"))?;
        let field = |name: &str| stream_info_field(&info, name);
        let after_id = entry_id(after);
        // Trimmed (or deleted) entries after `after`: Redis 7 records the newest of them.
        let complete = match field("max-deleted-entry-id").as_deref().and_then(id_parts) {
            Some(deleted) => deleted <= (after >> 22, after & SEQ_MASK),
            None => false,
        };
        let Some(end) = field("last-generated-id") else {
            return Ok(Past {
                complete,
                messages: futures::stream::empty().boxed(),
            });
        };
        let pages = futures::stream::unfold(
            (conn, format!("({after_id}"), false),
            move |(mut conn, from, done)| {
                let (key, end) = (key.clone(), end.clone());
                async move {
                    if done {
                        return None;
                    }
                    let page: Result<redis::streams::StreamRangeReply, _> =
                        conn.xrange_count(&key, &from, &end, PAGE).await;
                    match page {
                        Err(e) => Some((vec![Err(e.to_string())], (conn, from, true))),
                        Ok(page) => {
                            let last = page.ids.last().map(|e| format!("({}", e.id));
                            let done = page.ids.len() < PAGE || last.is_none();
                            let messages = page.ids.iter().map(|e| Ok(message(e))).collect();
                            Some((messages, (conn, last.unwrap_or(from), done)))
                        }
                    }
                }
            },
        );
        Ok(Past {
            complete,
            messages: pages.flat_map(futures::stream::iter).boxed(),
        })
    }
}

/// Entries read back at once.
const PAGE: usize = 256;
/// The sequence part of a position.
const SEQ_MASK: u64 = (1 << 22) - 1;

/// The entry id at `position` (see [`position`]).
fn entry_id(position: u64) -> String {
    format!("{}-{}", position >> 22, position & SEQ_MASK)
}

/// An entry id's milliseconds and sequence.
fn id_parts(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// A text field of an `XINFO STREAM` reply (a flat list of names and values, or a map).
fn stream_info_field(info: &redis::Value, name: &str) -> Option<String> {
    let pairs: Vec<(&redis::Value, &redis::Value)> = match info {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        redis::Value::Map(items) => items.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| crate::connect::redis::value_text(k).as_deref() == Some(name))
        .and_then(|(_, v)| crate::connect::redis::value_text(v))
}

/// The message an entry carries, with its position.
fn message(entry: &StreamId) -> Message {
    let bytes = |field: &str| match entry.map.get(field) {
        Some(redis::Value::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    let mut msg = decode(
        bytes(BODY).unwrap_or_default().into(),
        bytes(META).as_deref(),
    );
    if let Some(position) = position(&entry.id) {
        msg.set_meta(POSITION_KEY, position as i64);
    }
    msg
}

/// An entry id (`<ms>-<seq>`) as one growing number, when it fits: milliseconds below
/// 2^41 (the year 2039) and fewer than 2^22 entries in one millisecond.
fn position(id: &str) -> Option<u64> {
    let (ms, seq) = id_parts(id)?;
    (ms < 1 << 41 && seq <= SEQ_MASK).then_some((ms << 22) | seq)
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
                if let Some(meta) = encode_meta(msg) {
                    cmd.arg(META).arg(meta);
                }
            }
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
    ) -> BoxFuture<'static, Result<Past, String>> {
        async move {
            self.read_back(&topic, after)
                .await
                .map_err(|e| e.to_string())
        }
        .boxed()
    }

    fn kind(&self) -> &'static str {
        "redis_streams"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_become_growing_positions_where_they_fit() {
        let a = position("1700000000000-0").unwrap();
        let b = position("1700000000000-1").unwrap();
        let c = position("1700000000001-0").unwrap();
        assert!(a < b && b < c);
        assert_eq!(position(&format!("1700000000000-{}", 1u64 << 22)), None);
        assert_eq!(position(&format!("{}-0", 1u64 << 41)), None);
        assert_eq!(position("nonsense"), None);
        assert_eq!(entry_id(b), "1700000000000-1");
        assert_eq!(position(&entry_id(c)), Some(c));
    }
}
