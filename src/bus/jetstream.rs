//! The bus on NATS JetStream: one stream (created when missing) whose subjects are the
//! topics. Publishing waits for the stream's acknowledgement. A node's broadcast reader
//! is a durable consumer of its own, so a restarted node goes on where it stopped; round
//! robin readers share one durable consumer per topic.

use std::sync::Arc;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::{self, stream, AckKind, Context};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tracing::warn;

use super::{
    decode, encode_meta, keep_reading, pause, JetStreamBusConfig, Seal, ACK_WAIT, IDLE_CHECK,
    INACTIVE,
};
use crate::component::bus::{Bus, Feed, HistoryError, Past};
use crate::component::ConnectorError;
use crate::connect::nats::{messages_after, NatsConn};
use crate::egress::Egress;
use crate::message::Batch;

/// The header that carries a message's metadata across the bus.
const META_HEADER: &str = "Sluice-Metadata";
/// The header that carries the signature of the node that published it.
const SIGNATURE_HEADER: &str = "Sluice-Signature";
/// Where a fed message carries its stream sequence: the same on every node.
const POSITION_KEY: &str = "sluice_bus_sequence";

pub struct JetStreamBus {
    config: JetStreamBusConfig,
    node: String,
    seal: Seal,
    context: tokio::sync::OnceCell<Context>,
}

impl JetStreamBus {
    pub fn new(config: JetStreamBusConfig, node: &str, seal: Seal) -> Self {
        JetStreamBus {
            config,
            node: node.to_owned(),
            seal,
            context: tokio::sync::OnceCell::new(),
        }
    }

    /// The JetStream context, connecting and creating the stream the first time. A
    /// failed attempt is tried again by the next caller; once connected, the client
    /// reconnects by itself.
    async fn context(&self) -> Result<&Context, ConnectorError> {
        self.context
            .get_or_try_init(|| async {
                let c = &self.config;
                // The operator's own setting: the streams' egress policy is not the bus's.
                let conn =
                    NatsConn::connect(&c.urls, &c.tls, &c.auth, "sluice-bus", &Egress::open())
                        .await?;
                let js = jetstream::new(conn.client);
                js.get_or_create_stream(stream::Config {
                    name: c.stream.clone(),
                    subjects: vec![format!("{}.>", c.subject_prefix)],
                    max_age: c.max_age.0,
                    num_replicas: c.replicas,
                    max_bytes: i64::try_from(c.max_bytes).unwrap_or(i64::MAX),
                    storage: stream::StorageType::File,
                    discard: stream::DiscardPolicy::Old,
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    ConnectorError::not_connected(format!(
                        "cannot open the bus's stream `{}`",
                        c.stream
                    ))
                    .with_source(e)
                })?;
                Ok(js)
            })
            .await
    }

    fn subject(&self, topic: &str) -> String {
        format!("{}.{topic}", self.config.subject_prefix)
    }

    /// The consumer `feed` reads through: the node's own, or the one the nodes share.
    async fn consumer(&self, feed: &Feed) -> Result<PullConsumer, ConnectorError> {
        let js = self.context().await?;
        let stream = js.get_stream(&self.config.stream).await.map_err(|e| {
            ConnectorError::not_connected("cannot open the bus's stream").with_source(e)
        })?;
        let name = if feed.shared {
            format!("bus-{}", feed.topic)
        } else {
            format!("bus-{}-{}", feed.topic, self.node)
        };
        // A new reader starts with what is published from now on (a node's own: from
        // the stream's start there); an existing durable one goes on where it stopped.
        let deliver_policy = if feed.shared {
            DeliverPolicy::New
        } else {
            let nanos = feed
                .from
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i128);
            match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
                Ok(start_time) => DeliverPolicy::ByStartTime { start_time },
                Err(_) => DeliverPolicy::New,
            }
        };
        let config = pull::Config {
            durable_name: Some(name.clone()),
            deliver_policy,
            ack_policy: AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            filter_subject: self.subject(&feed.topic),
            inactive_threshold: INACTIVE,
            ..Default::default()
        };
        stream
            .get_or_create_consumer(&name, config)
            .await
            .map_err(|e| {
                ConnectorError::not_connected("cannot open the bus's reader").with_source(e)
            })
    }

    /// Reads until `feed.stop` (`Ok`) or until the bus fails.
    async fn run(&self, feed: &Feed) -> Result<(), ConnectorError> {
        let consumer = self.consumer(feed).await?;
        if feed.shared {
            return self.run_shared(&consumer, feed).await;
        }
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| ConnectorError::not_connected("cannot read the bus").with_source(e))?;
        // The furthest sequence handed over: a message the bus gives again (its ack wait
        // passed while the hub waited for a client) is acknowledged, not sent twice.
        let mut handed = 0u64;
        loop {
            let next = tokio::select! {
                _ = feed.stop.cancelled() => return Ok(()),
                next = messages.next() => next,
            };
            let m = match next {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    return Err(
                        ConnectorError::not_connected("reading the bus failed").with_source(e)
                    )
                }
                None => return Err(ConnectorError::not_connected("the bus's reader closed")),
            };
            let sequence = m.info().map_or(0, |i| i.stream_sequence);
            if sequence != 0 && sequence <= handed {
                if let Err(e) = m.ack().await {
                    warn!(error = %e, "Acknowledging a message of the bus failed.");
                }
                continue;
            }
            handed = handed.max(sequence);
            if !hand_over(m, feed, &self.seal).await {
                return Ok(());
            }
        }
    }

    /// Round robin: takes one message at a time, and only while the node has a client.
    async fn run_shared(&self, consumer: &PullConsumer, feed: &Feed) -> Result<(), ConnectorError> {
        loop {
            if !(feed.ready)() {
                if pause(&feed.stop, IDLE_CHECK).await {
                    return Ok(());
                }
                continue;
            }
            let batch = consumer
                .fetch()
                .max_messages(1)
                .expires(super::READ_WAIT)
                .messages();
            let mut batch = tokio::select! {
                _ = feed.stop.cancelled() => return Ok(()),
                batch = batch => batch.map_err(|e| {
                    ConnectorError::not_connected("reading the bus failed").with_source(e)
                })?,
            };
            while let Some(m) = batch.next().await {
                let m = m.map_err(|e| {
                    ConnectorError::not_connected(format!("reading the bus failed: {e}"))
                })?;
                if !hand_over(m, feed, &self.seal).await {
                    return Ok(());
                }
            }
        }
    }
}

impl JetStreamBus {
    /// The messages of `topic` after stream sequence `after`, through what it holds now.
    async fn read_back(&self, topic: &str, after: u64) -> Result<Past, HistoryError> {
        let js = self
            .context()
            .await
            .map_err(|e| HistoryError::failed("connecting to the bus", e))?;
        let past =
            messages_after(js, &self.config.stream, self.subject(topic), after, message).await?;
        Ok(self.seal.open_past(topic.to_owned(), past))
    }
}

/// The message a bus message carries, with its stream sequence as position.
fn message(m: &jetstream::Message) -> crate::message::Message {
    let header = |name: &str| m.headers.as_ref().and_then(|h| h.get(name));
    let meta = header(META_HEADER).map(|v| v.as_str().as_bytes().to_vec());
    let signature = header(SIGNATURE_HEADER).map(|v| v.as_str());
    let mut msg = decode(m.payload.clone(), meta.as_deref(), signature);
    if let Ok(info) = m.info() {
        msg.set_meta(POSITION_KEY, info.stream_sequence as i64);
    }
    msg
}

/// Gives one message to the sink and acknowledges it once taken; `false` once the feed
/// stops (the message is then left to the bus, which gives it out again). A message
/// without a good signature is acknowledged and dropped.
async fn hand_over(m: jetstream::Message, feed: &Feed, seal: &Seal) -> bool {
    let Some(msg) = seal.open(&feed.topic, message(&m)) else {
        if let Err(e) = m.ack().await {
            warn!(error = %e, "Acknowledging a message of the bus failed.");
        }
        return true;
    };
    let batch = vec![msg];
    let written = tokio::select! {
        _ = feed.stop.cancelled() => return false,
        written = feed.sink.write(&batch) => written,
    };
    let kind = match written {
        Ok(()) => AckKind::Ack,
        Err(e) => {
            if feed.stop.is_cancelled() {
                return false;
            }
            warn!(error = %e, "A message from the bus was not delivered; it comes again.");
            AckKind::Nak(Some(std::time::Duration::from_secs(1)))
        }
    };
    if let Err(e) = m.ack_with(kind).await {
        // The bus gives the message out again after its ack wait: a duplicate, not a loss.
        warn!(error = %e, "Acknowledging a message of the bus failed.");
    }
    true
}

impl Bus for JetStreamBus {
    fn publish<'a>(
        &'a self,
        topic: &'a str,
        batch: &'a Batch,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        async move {
            let js = self.context().await?;
            let subject = self.subject(topic);
            let mut acks = Vec::with_capacity(batch.len());
            for msg in batch {
                let mut headers = async_nats::HeaderMap::new();
                let meta = encode_meta(msg);
                if let Some(meta) = &meta {
                    headers.insert(META_HEADER, meta.as_str());
                }
                if let Some(signature) = self.seal.sign(topic, msg.payload(), meta.as_deref()) {
                    headers.insert(SIGNATURE_HEADER, signature.as_str());
                }
                let ack = js
                    .publish_with_headers(subject.clone(), headers, msg.payload().clone())
                    .await
                    .map_err(|e| {
                        ConnectorError::not_connected("publishing to the bus failed").with_source(e)
                    })?;
                acks.push(ack);
            }
            // Sent together, then every acknowledgement awaited: one round trip a batch.
            for ack in acks {
                ack.await.map_err(|e| {
                    ConnectorError::transient("the bus did not take a message").with_source(e)
                })?;
            }
            Ok(())
        }
        .boxed()
    }

    fn feed(self: Arc<Self>, feed: Feed) -> BoxFuture<'static, ()> {
        async move { keep_reading(&feed, || self.run(&feed)).await }.boxed()
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
        "nats_jetstream"
    }
}
