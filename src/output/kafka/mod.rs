//! `kafka` output: produces each message as a record.
//!
//! Delivery: a write succeeds once the broker confirmed every record of the batch (with
//! `ack_replicas: true`, once all in-sync replicas have it). Records are handed to
//! librdkafka together and confirmed together, so a batch costs one round-trip. A fixed
//! topic without headers takes librdkafka's batch call (`batch.rs`); an interpolated topic
//! or headers take the crate's record-by-record `send`.
//!
//! Every record of a write shares one counter (the write's slot) that librdkafka's
//! delivery reports count down; the write waits once for the batch, not once per record
//! (no channel, future or reference count per record).

mod batch;

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use once_cell::sync::OnceCell;
use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Notify;

use self::batch::{Record, TopicHandle};
use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::Interp;
use crate::connect::kafka::{client_config, validate};
use crate::connect::{MetadataConfig, MetadataFilter, SaslConfig, TlsConfig};
use crate::duration::Duration;
use crate::message::{Batch, Message};

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    /// Hash of the key (as the Java client), random partition for records without a key.
    #[default]
    Murmur2Random,
    /// CRC32 hash of the key, random partition for records without a key.
    ConsistentRandom,
    /// A random partition for every record.
    Random,
    /// FNV-1a hash of the key (as Sarama, the Go client), random without a key.
    Fnv1aRandom,
}

impl Partitioner {
    fn as_str(self) -> &'static str {
        match self {
            Partitioner::Murmur2Random => "murmur2_random",
            Partitioner::ConsistentRandom => "consistent_random",
            Partitioner::Random => "random",
            Partitioner::Fnv1aRandom => "fnv1a_random",
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaOutputConfig {
    /// Bootstrap brokers (`host:9092`); an entry may hold several, comma-separated.
    pub addresses: Vec<String>,
    /// The topic to write to (interpolated per message).
    pub topic: Interp,
    /// The record key (interpolated per message); absent: no key.
    #[serde(default)]
    pub key: Option<Interp>,
    /// How a partition is picked for a record.
    #[serde(default)]
    pub partitioner: Partitioner,
    /// Write every record to this partition instead.
    #[serde(default)]
    pub partition: Option<i32>,
    /// The client id brokers see.
    #[serde(default = "crate::connect::kafka::default_client_id")]
    pub client_id: String,
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    #[serde(default)]
    pub compression: Compression,
    /// Writes allowed at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Exactly one copy of each record per write attempt, in order, even when the client
    /// retries on its own (needs `ack_replicas`).
    #[serde(default)]
    pub idempotent_write: bool,
    /// Wait for all in-sync replicas to have a record, not only the partition leader.
    #[serde(default)]
    pub ack_replicas: bool,
    /// How long the client keeps trying to deliver a record before the write fails (and
    /// the runtime sends it again).
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// Which metadata to send as record headers.
    #[serde(default)]
    pub metadata: MetadataConfig,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
    /// TLS settings.
    #[serde(default)]
    pub tls: TlsConfig,
    /// SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    #[serde(default)]
    pub sasl: SaslConfig,
}

fn default_max_in_flight() -> usize {
    64
}
fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

impl Spec for KafkaOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "kafka",
        kind: Kind::Output,
        summary: "Produces messages to a Kafka topic; a write succeeds once the broker confirmed it.",
        examples: &[Example {
            title: "Keyed records with headers",
            yaml: "input:\n  stdin: {}\noutput:\n  kafka:\n    addresses: [127.0.0.1:9092]\n    topic: orders\n    key: customer-1\n    compression: lz4\n    ack_replicas: true\n    idempotent_write: true\n    metadata:\n      include_patterns: ['.*']\n      exclude_patterns: ['^kafka_']\n    batching:\n      count: 100\n      period: 10ms\n",
        }],
    };
}

impl BuildOutput for KafkaOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        validate(&self.addresses, &self.tls, &self.sasl).map_err(|e| cx.error(e))?;
        if self.topic.source().is_empty() {
            return Err(cx.error("`topic` is empty"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        if self.idempotent_write && !self.ack_replicas {
            return Err(cx.error("`idempotent_write` needs `ack_replicas: true`"));
        }
        if self.partition.is_some_and(|p| p < 0) {
            return Err(cx.error("`partition` must not be negative"));
        }
        let headers = self.metadata.compile().map_err(|e| cx.error(e))?;
        // The producer is made when the stream starts (see `connect`): librdkafka starts
        // connecting as soon as it exists, and building only checks.
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(KafkaOutput {
                config: self.clone(),
                egress: cx
                    .egress_addresses(&crate::connect::split_addresses(&self.addresses), 9092)?,
                client: OnceCell::new(),
                topic: self.topic.clone(),
                key: self.key.clone(),
                partition: self.partition,
                headers,
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

impl KafkaOutputConfig {
    fn producer(&self) -> Result<ThreadedProducer<Deliveries>, String> {
        let mut c = client_config(&self.addresses, &self.client_id, &self.tls, &self.sasl);
        c.set("partitioner", self.partitioner.as_str())
            .set(
                "compression.codec",
                match self.compression {
                    Compression::None => "none",
                    Compression::Gzip => "gzip",
                    Compression::Snappy => "snappy",
                    Compression::Lz4 => "lz4",
                    Compression::Zstd => "zstd",
                },
            )
            .set("acks", if self.ack_replicas { "all" } else { "1" })
            .set("enable.idempotence", self.idempotent_write.to_string())
            .set(
                "message.timeout.ms",
                self.timeout.0.as_millis().max(1).to_string(),
            )
            // Batches are formed by the stream; do not wait for more on top of that.
            .set("linger.ms", "1")
            // Connect to every broker of the cluster up front. With sparse connections
            // librdkafka spaces out connections to brokers nothing needs yet (50 ms at the
            // default reconnect backoff), and the start-up check below waited that long
            // for a broker to ask; a producer talks to most brokers anyway.
            .set("enable.sparse.connections", "false");
        // Creating a producer only allocates; it connects in the background.
        ThreadedProducer::from_config_and_context(&c, Deliveries::new(self.max_in_flight))
            .map_err(|e| format!("cannot create Kafka producer: {e}"))
    }
}

/// Routes librdkafka's delivery reports to the write they belong to.
///
/// Each write in flight claims a slot, and its records carry the slot's index as their
/// opaque: handing a record over touches no shared counter. (An `Arc` per record cost an
/// atomic increment on a cache line the polling thread keeps writing, per message.)
struct Deliveries {
    slots: Box<[Slot]>,
    free: Mutex<Vec<usize>>,
    freed: Notify,
}

/// One write's delivery state.
#[derive(Default)]
struct Slot {
    /// Records not yet settled, plus one while the write holds the slot.
    remaining: AtomicUsize,
    /// The first failure of the write's records.
    failure: Mutex<Option<ConnectorError>>,
    /// Woken when only the write's hold is left.
    done: Notify,
}

impl Deliveries {
    fn new(slots: usize) -> Self {
        Deliveries {
            slots: (0..slots).map(|_| Slot::default()).collect(),
            free: Mutex::new((0..slots).rev().collect()),
            freed: Notify::new(),
        }
    }

    /// A slot for a write of `records` records; waits while every slot is taken (only
    /// after writes were cancelled with records still unreported).
    async fn claim(&self, records: usize) -> Claim<'_> {
        loop {
            // Registered before looking, so a slot freed in between is not missed.
            let freed = self.freed.notified();
            if let Some(slot) = self.free.lock().pop() {
                let s = &self.slots[slot];
                *s.failure.lock() = None;
                s.remaining.store(records + 1, Ordering::Release);
                return Claim {
                    deliveries: self,
                    slot,
                    unsent: records,
                };
            }
            freed.await;
        }
    }

    /// Settles `count` of a slot's records (or the write's hold); the last one frees it.
    fn settle(&self, slot: usize, count: usize, failure: Option<ConnectorError>) {
        // Opaques come from `claim` only; an unknown one has nothing to settle.
        let Some(s) = self.slots.get(slot) else {
            return;
        };
        if let Some(f) = failure {
            s.failure.lock().get_or_insert(f);
        }
        let left = s
            .remaining
            .fetch_sub(count, Ordering::AcqRel)
            .saturating_sub(count);
        if left == 0 {
            self.free.lock().push(slot);
            self.freed.notify_one();
        } else if left == 1 {
            // Only the hold is left: every record is settled. (If the write already gave
            // up its hold, the wake-up is a stale one its successor tolerates.)
            s.done.notify_one();
        }
    }
}

/// A write's hold on its slot. Dropping it (the write was cancelled) gives up the hold
/// and the records never handed over, so the slot is freed once the others are reported.
struct Claim<'a> {
    deliveries: &'a Deliveries,
    slot: usize,
    /// Records not handed to librdkafka (nor settled) yet.
    unsent: usize,
}

impl Claim<'_> {
    /// The opaque of the next record handed over.
    fn opaque(&self) -> usize {
        self.slot
    }

    /// One more record is librdkafka's (it will be reported) or settled.
    fn sent(&mut self) {
        self.unsent -= 1;
    }

    /// Settles a record librdkafka did not take: no report will come for it.
    fn fail(&mut self, failure: ConnectorError) {
        self.sent();
        self.deliveries.settle(self.slot, 1, Some(failure));
    }

    /// Waits until every record is reported; the first failure, if any.
    async fn wait(self) -> Result<(), ConnectorError> {
        let s = &self.deliveries.slots[self.slot];
        while s.remaining.load(Ordering::Acquire) > 1 {
            s.done.notified().await;
        }
        let failure = s.failure.lock().take();
        failure.map_or(Ok(()), Err)
        // Dropping `self` gives the slot back.
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.deliveries.settle(self.slot, self.unsent + 1, None);
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, slot: usize) {
        self.settle(slot, 1, result.as_ref().err().map(|(e, _)| classify(e)));
    }
}

struct KafkaOutput {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: KafkaOutputConfig,
    /// Made by the first `connect`.
    client: OnceCell<Client>,
    topic: Interp,
    key: Option<Interp>,
    partition: Option<i32>,
    headers: MetadataFilter,
}

struct Client {
    producer: ThreadedProducer<Deliveries>,
    /// The fixed topic, when records carry no headers (the batch call cannot set them).
    batched: Option<TopicHandle<Deliveries>>,
}

fn classify(e: &KafkaError) -> ConnectorError {
    let text = format!("Kafka delivery failed: {e}");
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge)
        | Some(RDKafkaErrorCode::InvalidMessage)
        | Some(RDKafkaErrorCode::InvalidRecord) => ConnectorError::rejected(text),
        Some(RDKafkaErrorCode::MessageTimedOut)
        | Some(RDKafkaErrorCode::AllBrokersDown)
        | Some(RDKafkaErrorCode::BrokerTransportFailure) => ConnectorError::not_connected(text),
        _ => ConnectorError::transient(text),
    }
}

impl KafkaOutput {
    fn client(&self) -> Result<&Client, ConnectorError> {
        self.client
            .get()
            .ok_or_else(|| ConnectorError::not_connected("the Kafka producer is not started"))
    }

    fn record<'a>(
        &'a self,
        msg: &'a Message,
        topic: &'a str,
        key: Option<&'a str>,
        slot: usize,
    ) -> BaseRecord<'a, str, [u8], usize> {
        let mut r = BaseRecord::with_opaque_to(topic, slot).payload(&msg.payload()[..]);
        if let Some(key) = key {
            r = r.key(key);
        }
        if let Some(p) = self.partition {
            r = r.partition(p);
        }
        if self.headers.carries(msg) {
            let mut h = OwnedHeaders::new();
            for (k, v) in self.headers.pairs(msg) {
                h = h.insert(rdkafka::message::Header {
                    key: k,
                    value: Some(v.as_bytes()),
                });
            }
            r = r.headers(h);
        }
        r
    }

    /// Hands one record to librdkafka; gives it back when librdkafka's local queue is
    /// full. Not async: the usual case costs no future per record.
    fn try_enqueue<'a>(
        producer: &ThreadedProducer<Deliveries>,
        record: BaseRecord<'a, str, [u8], usize>,
        claim: &mut Claim<'_>,
    ) -> Option<BaseRecord<'a, str, [u8], usize>> {
        match producer.send(record) {
            Ok(()) => claim.sent(),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                return Some(back)
            }
            // Not queued, so no report will come: settled here.
            Err((e, _)) => claim.fail(classify(&e)),
        }
        None
    }

    /// Writes a batch to one topic with librdkafka's batch call; records its queue had no
    /// room for are handed over again as reports drain it.
    async fn write_batched(
        &self,
        producer: &ThreadedProducer<Deliveries>,
        topic: &TopicHandle<Deliveries>,
        batch: &Batch,
    ) -> Result<(), ConnectorError> {
        let keys = self.keys(batch)?;
        let mut claim = producer.context().claim(batch.len()).await;
        let mut pending: Vec<usize> = (0..batch.len()).collect();
        while !pending.is_empty() {
            let records = pending.iter().map(|&i| Record {
                payload: &batch[i].payload()[..],
                key: keys.get(i).map(|k| k.as_bytes()),
            });
            let outcomes = topic.produce(records, self.partition, claim.opaque());
            let mut full = Vec::new();
            for (&i, outcome) in pending.iter().zip(outcomes) {
                match outcome {
                    None => claim.sent(),
                    Some(RDKafkaErrorCode::QueueFull) => full.push(i),
                    // Not queued, so no report will come: settled here.
                    Some(code) => claim.fail(classify(&KafkaError::MessageProduction(code))),
                }
            }
            pending = full;
            if !pending.is_empty() {
                queue_room().await;
            }
        }
        claim.wait().await
    }

    /// Every message's key; none without `key`.
    fn keys(&self, batch: &Batch) -> Result<Vec<Cow<'_, str>>, ConnectorError> {
        self.key
            .as_ref()
            .map_or(Ok(Vec::new()), |k| Ok(k.fields(batch, "key")?))
    }
}

/// Waits while librdkafka's local queue is full: its polling thread drains the queue as
/// delivery reports come back.
async fn queue_room() {
    tokio::time::sleep(StdDuration::from_millis(2)).await;
}

#[async_trait]
impl Output for KafkaOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        // The client connects by itself; this asks a broker for metadata so that the
        // stream reports "not connected" while none answers.
        // Asking about the one fixed topic is cheaper than about all of them, and warms
        // the client's cache for the first write.
        let made = self.client.get_or_try_init(|| {
            let producer = self
                .config
                .producer()
                .map_err(ConnectorError::not_connected)?;
            // Records of one topic without headers go to librdkafka a batch at a time.
            let batched = match self.topic.static_value() {
                Some(topic) if self.headers.is_empty() => TopicHandle::new(&producer, topic),
                _ => None,
            };
            Ok::<_, ConnectorError>(Client { producer, batched })
        })?;
        let client = made.producer.clone();
        let topic = self.topic.static_value().map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            client
                .client()
                .fetch_metadata(topic.as_deref(), StdDuration::from_secs(3))
                .map(|_| ())
        })
        .await
        .map_err(|e| ConnectorError::transient(e.to_string()))?
        .map_err(|e| ConnectorError::not_connected("Kafka is unreachable").with_source(e))
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Client { producer, batched } = self.client()?;
        // Records of a batch that carries a trace context need their headers: they take
        // the path of one record at a time.
        if let Some(topic) = batched
            .as_ref()
            .filter(|_| !batch.iter().any(|m| self.headers.carries(m)))
        {
            return self.write_batched(producer, topic, batch).await;
        }
        let topics = self.topic.fields(batch, "topic")?;
        let keys = self.keys(batch)?;
        let mut claim = producer.context().claim(batch.len()).await;
        for (i, m) in batch.iter().enumerate() {
            let key = keys.get(i).map(|k| &**k);
            let record = self.record(m, &topics[i], key, claim.opaque());
            let mut pending = Self::try_enqueue(producer, record, &mut claim);
            while let Some(record) = pending {
                queue_room().await;
                pending = Self::try_enqueue(producer, record, &mut claim);
            }
        }
        claim.wait().await
    }

    async fn close(&self) {
        if let Some(client) = self.client.get() {
            let p = client.producer.clone();
            let _ = tokio::task::spawn_blocking(move || p.flush(StdDuration::from_secs(10))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(d: &Deliveries) -> usize {
        d.free.lock().len()
    }

    /// A write of one record on `claim`, which must hold `slot`: reported, it ends well.
    async fn one_record_goes_through(d: &Deliveries, mut claim: Claim<'_>, slot: usize) {
        assert_eq!(claim.opaque(), slot);
        claim.sent();
        d.settle(slot, 1, None);
        assert!(claim.wait().await.is_ok());
    }

    #[tokio::test]
    async fn a_write_ends_when_its_records_are_reported_and_frees_its_slot() {
        let d = Deliveries::new(2);
        let mut claim = d.claim(3).await;
        for _ in 0..3 {
            claim.sent();
        }
        let slot = claim.opaque();
        assert_eq!(free(&d), 1);
        d.settle(slot, 1, None);
        d.settle(slot, 1, None);
        // One record still unreported: the write does not end.
        let mut waiting = Box::pin(claim.wait());
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        d.settle(slot, 1, None);
        assert!(waiting.await.is_ok());
        assert_eq!(free(&d), 2);
    }

    #[tokio::test]
    async fn the_first_failure_fails_the_write_and_a_reused_slot_starts_clean() {
        let d = Deliveries::new(1);
        let mut claim = d.claim(2).await;
        let slot = claim.opaque();
        claim.sent();
        claim.fail(ConnectorError::rejected("first"));
        d.settle(slot, 1, Some(ConnectorError::transient("second")));
        let e = claim.wait().await.unwrap_err();
        assert!(e.to_string().contains("first"), "{e}");
        one_record_goes_through(&d, d.claim(1).await, slot).await;
    }

    #[tokio::test]
    async fn a_cancelled_write_frees_its_slot_once_its_handed_records_are_reported() {
        let d = Deliveries::new(1);
        let mut claim = d.claim(5).await;
        let slot = claim.opaque();
        claim.sent();
        claim.sent();
        // Cancelled with two records in librdkafka's hands and three never handed over.
        drop(claim);
        assert_eq!(free(&d), 0);
        let mut next = Box::pin(d.claim(1));
        assert!(futures::poll!(next.as_mut()).is_pending());
        d.settle(slot, 1, None);
        assert!(futures::poll!(next.as_mut()).is_pending());
        d.settle(slot, 1, None);
        one_record_goes_through(&d, next.await, slot).await;
        assert_eq!(free(&d), 1);
    }

    #[tokio::test]
    async fn an_empty_write_ends_at_once() {
        let d = Deliveries::new(1);
        assert!(d.claim(0).await.wait().await.is_ok());
        assert_eq!(free(&d), 1);
    }

    #[test]
    fn a_report_for_an_unknown_slot_changes_nothing() {
        let d = Deliveries::new(1);
        d.settle(7, 1, None);
        assert_eq!(free(&d), 1);
    }
}
