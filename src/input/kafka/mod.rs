//! `kafka` input: consumes topics as a member of a consumer group, or reads explicit
//! partitions.
//!
//! Delivery: at least once. Offsets are stored for commit only up to the first message of
//! each partition that is not yet acknowledged, so a crash or a rebalance never skips a
//! message: the next owner of a partition starts at the oldest unacknowledged one (and
//! may see some messages again). librdkafka commits the stored offsets every
//! `commit_period`, when partitions are revoked, and on close.

mod config;
mod history;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use futures::FutureExt;
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Message as _, Offset, TopicPartitionList};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

pub use config::KafkaInputConfig;

use super::{BuildInput, InputBuild};
use crate::component::{BuildContext, BuildError, ConnectorError, Input, ReadBatch};
use crate::connect::kafka::{client_config, TopicSpec};
use crate::message::{Batch, Message, Outcome};

type PartKey = (Arc<str>, i32);

/// Offsets of one partition read but not yet acknowledged.
struct PartState {
    /// Identifies this ownership of the partition: acks from before a rebalance that
    /// took it away must not touch the state of a later assignment.
    epoch: u64,
    pending: BTreeSet<i64>,
    /// One past the highest offset read.
    next: i64,
    /// The offset last stored for commit.
    stored: i64,
}

impl PartState {
    /// The offset to commit: the oldest unacknowledged message, or past everything read.
    fn commit_point(&self) -> i64 {
        self.pending.first().copied().unwrap_or(self.next)
    }
}

#[derive(Default)]
struct Shared {
    parts: Mutex<HashMap<PartKey, PartState>>,
    /// Woken when acknowledgements free room below `checkpoint_limit`.
    freed: Notify,
    epochs: AtomicU64,
    /// The high watermark of each partition by topic, from the client's statistics.
    high: Mutex<HashMap<String, HashMap<i32, i64>>>,
    /// The input's metric labels, for its consumer lag.
    labels: Vec<(&'static str, String)>,
    /// Where a group with nothing committed starts: the oldest record, or the newest.
    from_oldest: bool,
}

pub struct Ctx {
    shared: Arc<Shared>,
}

impl ClientContext for Ctx {
    fn stats(&self, stats: Statistics) {
        let mut high = self.shared.high.lock();
        for (topic, t) in stats.topics {
            for (p, part) in &t.partitions {
                // Partition -1 is librdkafka's own (unassigned messages).
                if *p < 0 {
                    continue;
                }
                if part.hi_offset >= 0 {
                    high.entry(topic.clone())
                        .or_default()
                        .insert(*p, part.hi_offset);
                }
                let mut labels = self.shared.labels.clone();
                labels.push(("topic", topic.clone()));
                labels.push(("partition", p.to_string()));
                metrics::gauge!(crate::metrics::INPUT_LAG, &labels)
                    .set(partition_lag(part, self.shared.from_oldest) as f64);
            }
        }
    }
}

/// What this consumer has not had acknowledged downstream in a partition: the high
/// watermark minus the offset it stored on acknowledgement, else minus the group's
/// committed offset; with neither yet (a new group) in a partition it reads, everything
/// from where the group starts (the oldest record kept, or nothing behind when it starts
/// at the newest). A partition it does not read (another member's) has no lag of its own.
fn partition_lag(part: &rdkafka::statistics::Partition, from_oldest: bool) -> i64 {
    if part.consumer_lag_stored >= 0 {
        return part.consumer_lag_stored;
    }
    if part.consumer_lag >= 0 {
        return part.consumer_lag;
    }
    let reading = part.fetch_state == "active";
    if reading && part.committed_offset < 0 && from_oldest && part.lo_offset >= 0 {
        return (part.hi_offset - part.lo_offset).max(0);
    }
    0
}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // What was acknowledged is already stored and gets committed with the
            // revocation; the rest is the next owner's to read again.
            let mut parts = self.shared.parts.lock();
            for e in tpl.elements() {
                parts.retain(|(t, p), _| !(&**t == e.topic() && *p == e.partition()));
            }
            info!(partitions = tpl.count(), "Kafka partitions revoked.");
            self.shared.freed.notify_waiters();
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            info!(partitions = tpl.count(), "Kafka partitions assigned.");
        }
    }
}

type Consumer_ = StreamConsumer<Ctx>;

impl BuildInput for KafkaInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        let topics = self.parsed_topics().map_err(|e| cx.error(e))?;
        Ok(InputBuild::Leaf(Box::new(KafkaInput {
            config: self.clone(),
            egress: cx.egress_addresses(&crate::connect::split_addresses(&self.addresses), 9092)?,
            topics,
            consumer: None,
            shared: Arc::new(Shared {
                labels: cx.metric_labels(),
                from_oldest: self.start_from_oldest,
                ..Shared::default()
            }),
            held: None,
        })))
    }
}

/// The message a record carries: its payload, headers and where it is.
fn message_of(m: &BorrowedMessage<'_>) -> Message {
    let mut msg = Message::new(bytes::Bytes::copy_from_slice(
        m.payload().unwrap_or_default(),
    ));
    if let Some(headers) = m.headers() {
        for h in headers.iter() {
            let v = h.value.map(String::from_utf8_lossy).unwrap_or_default();
            msg.set_meta(h.key, v.into_owned());
        }
    }
    if let Some(k) = m.key() {
        msg.set_meta("kafka_key", String::from_utf8_lossy(k).into_owned());
    }
    msg.set_meta("kafka_topic", m.topic());
    msg.set_meta("kafka_partition", m.partition() as i64);
    msg.set_meta("kafka_offset", m.offset());
    if let Some(ms) = m.timestamp().to_millis() {
        msg.set_meta("kafka_timestamp_unix", ms / 1000);
        msg.set_meta("kafka_timestamp_ms", ms);
    }
    msg
}

/// A message taken from the client and where it came from.
struct Received {
    msg: Message,
    key: PartKey,
    offset: i64,
}

pub struct KafkaInput {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: KafkaInputConfig,
    topics: Vec<TopicSpec>,
    consumer: Option<Arc<Consumer_>>,
    shared: Arc<Shared>,
    /// A message read while its partition was at `checkpoint_limit`: kept here, not in a
    /// future's local, so that a cancelled read cannot lose it.
    held: Option<Received>,
}

impl KafkaInput {
    fn create(&self) -> Result<Consumer_, ConnectorError> {
        let c = &self.config;
        let mut cc = client_config(&c.addresses, &c.client_id, &c.tls, &c.sasl);
        cc.set("group.id", &c.consumer_group)
            .set(
                "auto.offset.reset",
                if c.start_from_oldest {
                    "earliest"
                } else {
                    "latest"
                },
            )
            // Offsets are stored by the acks (enable.auto.offset.store=false) and
            // librdkafka commits what is stored, periodically and on revoke/close.
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set(
                "auto.commit.interval.ms",
                c.commit_period.0.as_millis().max(1).to_string(),
            )
            .set("queued.min.messages", c.fetch_buffer_cap.to_string())
            .set("statistics.interval.ms", "5000");
        if let Some(instance) = &c.instance_id {
            cc.set("group.instance.id", instance);
        }
        cc.create_with_context(Ctx {
            shared: self.shared.clone(),
        })
        .map_err(|e| ConnectorError::rejected("cannot create Kafka consumer").with_source(e))
    }

    fn take(&self, m: &BorrowedMessage<'_>) -> Received {
        let mut msg = message_of(m);
        let high = self
            .shared
            .high
            .lock()
            .get(m.topic())
            .and_then(|parts| parts.get(&m.partition()))
            .copied();
        if let Some(h) = high {
            msg.set_meta("kafka_lag", (h - m.offset() - 1).max(0));
        }
        Received {
            msg,
            key: (Arc::from(m.topic()), m.partition()),
            offset: m.offset(),
        }
    }

    /// Records `r` as pending in its partition; false (and nothing recorded) when the
    /// partition is at `checkpoint_limit`.
    fn admit(&self, r: &Received, epochs: &mut Vec<(PartKey, u64, Vec<i64>)>) -> bool {
        let mut parts = self.shared.parts.lock();
        let state = parts.entry(r.key.clone()).or_insert_with(|| PartState {
            epoch: self.shared.epochs.fetch_add(1, Ordering::Relaxed),
            pending: BTreeSet::new(),
            next: r.offset,
            stored: -1,
        });
        if state.pending.len() >= self.config.checkpoint_limit {
            return false;
        }
        state.pending.insert(r.offset);
        state.next = state.next.max(r.offset + 1);
        match epochs
            .iter_mut()
            .find(|(k, e, _)| *k == r.key && *e == state.epoch)
        {
            Some((_, _, offsets)) => offsets.push(r.offset),
            None => epochs.push((r.key.clone(), state.epoch, vec![r.offset])),
        }
        true
    }

    fn pending_in(&self, key: &PartKey) -> usize {
        self.shared
            .parts
            .lock()
            .get(key)
            .map_or(0, |s| s.pending.len())
    }
}

fn classify(e: KafkaError) -> ConnectorError {
    let text = format!("Kafka consumer error: {e}");
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::AllBrokersDown) | Some(RDKafkaErrorCode::BrokerTransportFailure) => {
            ConnectorError::not_connected(text)
        }
        _ => ConnectorError::transient(text),
    }
}

/// Settles acknowledged offsets and stores the new commit points.
fn settle(shared: &Shared, consumer: &Consumer_, acked: Vec<(PartKey, u64, Vec<i64>)>) {
    let mut to_store = Vec::new();
    {
        let mut parts = shared.parts.lock();
        for (key, epoch, offsets) in acked {
            let Some(state) = parts.get_mut(&key).filter(|s| s.epoch == epoch) else {
                // The partition moved to another consumer meanwhile; it reads these again.
                continue;
            };
            for o in offsets {
                state.pending.remove(&o);
            }
            let point = state.commit_point();
            if point > state.stored {
                state.stored = point;
                to_store.push((key, point));
            }
        }
    }
    // Outside the lock: librdkafka takes its own locks, and its rebalance callback takes ours.
    // The list form stores the offset as given: the next one to read (the single-offset
    // call would add one to it).
    if !to_store.is_empty() {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in &to_store {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset));
        }
        if let Err(e) = consumer.store_offsets(&tpl) {
            debug!(error = %e, "Offsets not stored (partition no longer assigned).");
        }
    }
    shared.freed.notify_waiters();
}

#[async_trait]
impl Input for KafkaInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        if let Some(consumer) = self.consumer.clone() {
            // librdkafka reconnects by itself: only check that a broker answers again.
            return tokio::task::spawn_blocking(move || {
                consumer
                    .fetch_metadata(None, StdDuration::from_secs(3))
                    .map(|_| ())
            })
            .await
            .map_err(|e| ConnectorError::transient(e.to_string()))?
            .map_err(|e| ConnectorError::not_connected("Kafka is unreachable").with_source(e));
        }
        let consumer = self.create()?;
        let explicit = self.topics.iter().all(|t| t.partitions.is_some());
        if explicit {
            let mut tpl = TopicPartitionList::new();
            for t in &self.topics {
                for p in t.partitions.iter().flatten() {
                    tpl.add_partition_offset(&t.topic, *p, Offset::Stored)
                        .map_err(|e| ConnectorError::rejected(e.to_string()))?;
                }
            }
            consumer
                .assign(&tpl)
                .map_err(|e| ConnectorError::rejected("cannot assign partitions").with_source(e))?;
        } else {
            let names: Vec<&str> = self.topics.iter().map(|t| t.topic.as_str()).collect();
            consumer
                .subscribe(&names)
                .map_err(|e| ConnectorError::rejected("cannot subscribe").with_source(e))?;
        }
        let consumer = Arc::new(consumer);
        // Fail the connect (and retry with backoff) while no broker answers.
        let probe = consumer.clone();
        tokio::task::spawn_blocking(move || probe.fetch_metadata(None, StdDuration::from_secs(3)))
            .await
            .map_err(|e| ConnectorError::transient(e.to_string()))?
            .map_err(|e| ConnectorError::not_connected("Kafka is unreachable").with_source(e))?;
        self.consumer = Some(consumer);
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(consumer) = self.consumer.clone() else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let mut acked = Vec::new();
        let mut batch: Batch = Vec::new();
        // A message held back by `checkpoint_limit` goes first, once its partition has room.
        loop {
            if let Some(r) = self.held.take() {
                if self.admit(&r, &mut acked) {
                    batch.push(r.msg);
                    break;
                }
                let key = r.key.clone();
                self.held = Some(r);
                let freed = self.shared.freed.notified();
                tokio::pin!(freed);
                freed.as_mut().enable();
                if self.pending_in(&key) >= self.config.checkpoint_limit {
                    freed.await;
                }
                continue;
            }
            let m = consumer.recv().await.map_err(classify)?;
            let r = self.take(&m);
            if self.admit(&r, &mut acked) {
                batch.push(r.msg);
                break;
            }
            self.held = Some(r);
        }
        while batch.len() < self.config.max_batch {
            let Some(next) = consumer.recv().now_or_never() else {
                break;
            };
            match next {
                Ok(m) => {
                    let r = self.take(&m);
                    if !self.admit(&r, &mut acked) {
                        self.held = Some(r);
                        break;
                    }
                    batch.push(r.msg);
                }
                Err(e) => {
                    warn!(error = %e, "Kafka consumer error.");
                    break;
                }
            }
        }
        let shared = self.shared.clone();
        Ok(ReadBatch::new(batch, move |outcome: Outcome| {
            // Errored reaches here only when the stream was aborted: leave the offsets
            // uncommitted so that the messages are read again.
            if !matches!(outcome, Outcome::Errored(_)) {
                settle(&shared, &consumer, acked);
            }
        }))
    }

    fn history(&self) -> Option<Arc<dyn crate::http::history::History>> {
        match self.topics.as_slice() {
            [topic] => Some(Arc::new(history::KafkaHistory {
                config: self.config.clone(),
                topic: topic.clone(),
                egress: self.egress.clone(),
            })),
            _ => None,
        }
    }

    async fn close(&mut self) {
        if let Some(consumer) = self.consumer.take() {
            // Dropping the last handle closes the consumer, which commits what is stored.
            let _ = tokio::task::spawn_blocking(move || drop(consumer)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default())
    }

    #[test]
    fn commit_point_waits_for_the_oldest_pending() {
        let mut s = PartState {
            epoch: 0,
            pending: [5, 6, 7].into_iter().collect(),
            next: 8,
            stored: -1,
        };
        assert_eq!(s.commit_point(), 5);
        s.pending.remove(&6);
        assert_eq!(s.commit_point(), 5);
        s.pending.remove(&5);
        assert_eq!(s.commit_point(), 7);
        s.pending.remove(&7);
        assert_eq!(s.commit_point(), 8);
    }

    #[test]
    fn config_validation() {
        let ok: KafkaInputConfig =
            serde_yaml::from_str("{addresses: ['a:9092'], topics: ['t'], consumer_group: g}")
                .unwrap();
        assert!(ok.build(&cx()).is_ok());
        for bad in [
            "{addresses: [], topics: [t], consumer_group: g}",
            "{addresses: [a], topics: ['t', 'u:1'], consumer_group: g}",
            "{addresses: [a], topics: ['t:x'], consumer_group: g}",
            "{addresses: [a], topics: [t], consumer_group: g, checkpoint_limit: 0}",
            "{addresses: [a], topics: [t], consumer_group: g, sasl: {mechanism: PLAIN}}",
        ] {
            let c: KafkaInputConfig = serde_yaml::from_str(bad).unwrap();
            assert!(c.build(&cx()).is_err(), "{bad}");
        }
    }
}
