//! The partition a `kafka` input reads, read again by offset for HTTP clients that resume
//! from before their replay buffer (`id_metadata: kafka_offset`). Offsets are positions
//! only within one partition, so this serves an input of one topic with one partition
//! (or one named partition); otherwise reading back fails and the client gets the `gap`
//! notice.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Message as _, Offset, TopicPartitionList};

use super::{message_of, KafkaInputConfig};
use crate::connect::kafka::{client_config, TopicSpec};
use crate::http::history::{History, HistoryError, Past};

/// How long one read back may wait for the next record before the catch-up ends there.
const READ_WAIT: StdDuration = StdDuration::from_secs(10);

#[derive(Clone)]
pub(super) struct KafkaHistory {
    pub config: KafkaInputConfig,
    pub topic: TopicSpec,
    pub egress: crate::egress::Egress,
}

impl KafkaHistory {
    async fn read(self, after: u64) -> Result<Past, HistoryError> {
        self.egress.check().await?;
        let c = &self.config;
        let mut cc = client_config(&c.addresses, &c.client_id, &c.tls, &c.sasl);
        // A group of its own that commits nothing: the input's group is not moved.
        cc.set(
            "group.id",
            format!(
                "{}-resume-{}",
                c.consumer_group,
                uuid::Uuid::new_v4().simple()
            ),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // One reader per resuming client: a small prefetch, not librdkafka's 64 MB.
        .set("queued.max.messages.kbytes", "1024")
        .set("queued.min.messages", "1000")
        .set("enable.partition.eof", "true");
        let consumer: StreamConsumer = cc
            .create()
            .map_err(|e| HistoryError::failed("creating a reader", e))?;
        let consumer = Arc::new(consumer);
        let topic = self.topic.topic.clone();
        let named = self.topic.partitions.clone();
        let probe = consumer.clone();
        let (partition, low, high) = tokio::task::spawn_blocking(move || {
            let wait = StdDuration::from_secs(5);
            let partition = match named.as_deref() {
                Some([one]) => *one,
                Some(_) => {
                    return Err(HistoryError::NoPositions(
                        "offsets of several partitions are no positions".into(),
                    ))
                }
                None => {
                    let meta = probe
                        .fetch_metadata(Some(&topic), wait)
                        .map_err(|e| HistoryError::failed("reading the topic's metadata", e))?;
                    let count = meta.topics().first().map_or(0, |t| t.partitions().len());
                    if count != 1 {
                        return Err(HistoryError::NoPositions(format!(
                            "`{topic}` has {count} partitions: offsets are no positions"
                        )));
                    }
                    0
                }
            };
            let (low, high) = probe
                .fetch_watermarks(&topic, partition, wait)
                .map_err(|e| HistoryError::failed("reading the partition's offsets", e))?;
            Ok::<_, HistoryError>((partition, low, high))
        })
        .await
        .map_err(|e| HistoryError::failed("reading the partition's offsets", e))??;
        let from = i64::try_from(after).unwrap_or(i64::MAX).saturating_add(1);
        // The topic's retention dropped messages after `after`.
        let complete = from >= low;
        let from = from.max(low);
        if from >= high {
            return Ok(Past {
                complete,
                messages: futures::stream::empty().boxed(),
            });
        }
        let mut assigned = TopicPartitionList::new();
        assigned
            .add_partition_offset(&self.topic.topic, partition, Offset::Offset(from))
            .map_err(|e| HistoryError::failed("naming the partition", e))?;
        consumer
            .assign(&assigned)
            .map_err(|e| HistoryError::failed("assigning the partition", e))?;
        // Up to the last offset there was when it started. Offsets have holes (compacted
        // topics, transaction markers), so the end is that offset, the partition's end,
        // or a read that waits too long; never a count.
        let last = high - 1;
        let messages =
            futures::stream::unfold((consumer, false), move |(consumer, done)| async move {
                if done {
                    return None;
                }
                match tokio::time::timeout(READ_WAIT, consumer.recv()).await {
                    Ok(Ok(m)) => {
                        let reached = m.offset() >= last;
                        Some((Ok(message_of(&m)), (consumer, reached)))
                    }
                    Ok(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | Err(_) => None,
                    Ok(Err(e)) => Some((
                        Err(HistoryError::failed("reading a record", e)),
                        (consumer, true),
                    )),
                }
            });
        Ok(Past {
            complete,
            messages: messages.boxed(),
        })
    }
}

impl History for KafkaHistory {
    fn after(&self, after: u64) -> BoxFuture<'static, Result<Past, HistoryError>> {
        self.clone().read(after).boxed()
    }

    fn position_key(&self) -> &str {
        "kafka_offset"
    }
}
