//! `amqp_0_9` input: consumes a queue of an AMQP 0.9.1 broker (RabbitMQ).
//!
//! Delivery: at least once. Each message is acked to the broker once every output
//! confirmed it; a failed delivery is nacked with requeue (after `nack_delay`, so that a
//! failing output does not spin), a rejected one is rejected without requeue (to the
//! queue's dead-letter exchange, if it has one). Unacked messages of a lost connection
//! go back to the queue.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, Consumer};
use schemars::JsonSchema;
use serde::Deserialize;
use tracing::warn;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::amqp::{classify, connect, headers_to_meta, validate};
use crate::connect::{AckSpawner, TlsConfig};
use crate::duration::Duration;
use crate::message::{Batch, Message, Outcome};

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QueueDeclare {
    /// Declare the queue (create it when missing).
    pub enabled: bool,
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted once its last consumer goes.
    pub auto_delete: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The exchange to bind the queue to.
    pub exchange: String,
    /// The binding's routing key.
    #[serde(default)]
    pub key: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AmqpInputConfig {
    /// Broker URLs (`amqp://user:pass@host:5672/vhost`, `amqps://` for TLS); the first
    /// that answers is used.
    pub urls: Vec<String>,
    /// TLS settings (on for `amqps://` URLs, or for all with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// The queue to consume.
    pub queue: String,
    /// Whether and how to declare the queue.
    #[serde(default)]
    pub queue_declare: QueueDeclare,
    /// Bindings to declare for the queue.
    #[serde(default)]
    pub bindings_declare: Vec<Binding>,
    /// The consumer tag; empty: the broker picks one.
    #[serde(default)]
    pub consumer_tag: String,
    /// Unacknowledged messages the broker sends ahead, at most.
    #[serde(default = "default_prefetch")]
    pub prefetch_count: u16,
    /// Wait before requeueing a message whose delivery failed.
    #[serde(default = "default_nack_delay")]
    pub nack_delay: Duration,
}

fn default_prefetch() -> u16 {
    64
}
fn default_nack_delay() -> Duration {
    Duration::from_secs(1)
}

impl Spec for AmqpInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "amqp_0_9",
        kind: Kind::Input,
        summary: "Consumes an AMQP 0.9.1 queue (RabbitMQ); acks after delivery, requeues on failure.",
        examples: &[Example {
            title: "Declare a durable queue bound to an exchange",
            yaml: "input:\n  amqp_0_9:\n    urls: ['amqp://guest:guest@127.0.0.1:5672/']\n    queue: orders\n    queue_declare: {enabled: true, durable: true}\n    bindings_declare:\n      - {exchange: amq.topic, key: 'orders.#'}\n    prefetch_count: 32\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for AmqpInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        validate(&self.urls, &self.tls).map_err(|e| cx.error(e))?;
        if self.queue.is_empty() {
            return Err(cx.error("`queue` is empty"));
        }
        if self.prefetch_count == 0 {
            return Err(cx.error("`prefetch_count` must be at least 1"));
        }
        Ok(InputBuild::Leaf(Box::new(AmqpInput {
            config: self.clone(),
            egress: cx.egress_addresses(&crate::connect::split_addresses(&self.urls), 5672)?,
            session: None,
            labels: cx.metric_labels(),
        })))
    }
}

struct Session {
    conn: Connection,
    consumer: Consumer,
    spawner: AckSpawner,
    /// Reads the queue's depth for the lag metric while the session lasts.
    lag: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.lag.abort();
    }
}

/// How often the queue's depth is read for the lag metric.
const LAG_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the depth of `queue` (its messages ready for delivery) into
/// `sluice_input_lag_messages` every [`LAG_PERIOD`], on a channel of its own, until
/// aborted or the channel fails.
async fn watch_lag(channel: lapin::Channel, queue: String, labels: Vec<(&'static str, String)>) {
    let mut labels = labels;
    labels.push(("topic", queue.clone()));
    labels.push(("partition", String::new()));
    let gauge = metrics::gauge!(crate::metrics::INPUT_LAG, &labels);
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    loop {
        match channel
            .queue_declare(&queue, passive, FieldTable::default())
            .await
        {
            Ok(q) => gauge.set(f64::from(q.message_count())),
            // A failed passive declare closes the channel: nothing more to read.
            Err(e) => {
                tracing::debug!(error = %e, "AMQP queue depth unavailable.");
                return;
            }
        }
        tokio::time::sleep(LAG_PERIOD).await;
    }
}

pub struct AmqpInput {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: AmqpInputConfig,
    session: Option<Session>,
    /// The input's metric labels, for its queue's depth.
    labels: Vec<(&'static str, String)>,
}

fn to_message(d: &Delivery) -> Message {
    let mut m = Message::new(d.data.clone());
    headers_to_meta(d.properties.headers().as_ref(), &mut m);
    m.set_meta("amqp_exchange", d.exchange.as_str());
    m.set_meta("amqp_routing_key", d.routing_key.as_str());
    m.set_meta("amqp_redelivered", d.redelivered);
    m.set_meta("amqp_delivery_tag", d.delivery_tag as i64);
    if let Some(ct) = d.properties.content_type() {
        m.set_meta("amqp_content_type", ct.as_str());
    }
    if let Some(id) = d.properties.message_id() {
        m.set_meta("amqp_message_id", id.as_str());
    }
    m
}

#[async_trait]
impl Input for AmqpInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        self.session = None;
        let c = &self.config;
        let conn = connect(&c.urls, &c.tls).await?;
        let channel = conn
            .create_channel()
            .await
            .map_err(|e| classify(e, "cannot open channel"))?;
        channel
            .basic_qos(c.prefetch_count, BasicQosOptions::default())
            .await
            .map_err(|e| classify(e, "cannot set prefetch"))?;
        if c.queue_declare.enabled {
            let options = QueueDeclareOptions {
                durable: c.queue_declare.durable,
                auto_delete: c.queue_declare.auto_delete,
                ..Default::default()
            };
            channel
                .queue_declare(&c.queue, options, FieldTable::default())
                .await
                .map_err(|e| classify(e, "cannot declare queue"))?;
        }
        for b in &c.bindings_declare {
            channel
                .queue_bind(
                    &c.queue,
                    &b.exchange,
                    &b.key,
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| classify(e, "cannot bind queue"))?;
        }
        let consumer = channel
            .basic_consume(
                &c.queue,
                &c.consumer_tag,
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| classify(e, "cannot consume"))?;
        let depth = conn
            .create_channel()
            .await
            .map_err(|e| classify(e, "cannot open channel"))?;
        let lag = tokio::spawn(watch_lag(depth, c.queue.clone(), self.labels.clone()));
        self.session = Some(Session {
            conn,
            consumer,
            spawner: AckSpawner::current(),
            lag,
        });
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(session) = &mut self.session else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let first = match session.consumer.next().await {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                self.session = None;
                // A failed consumer stream means the channel is gone, whatever the error.
                return Err(ConnectorError::not_connected(format!(
                    "consume failed: {e}"
                )));
            }
            None => {
                self.session = None;
                return Err(ConnectorError::not_connected("consumer cancelled"));
            }
        };
        let mut deliveries = vec![first];
        while deliveries.len() < self.config.prefetch_count as usize {
            match session.consumer.next().now_or_never() {
                Some(Some(Ok(d))) => deliveries.push(d),
                _ => break,
            }
        }
        let batch: Batch = deliveries.iter().map(to_message).collect();
        let ackers: Vec<_> = deliveries.into_iter().map(|d| d.acker).collect();
        let spawner = session.spawner.clone();
        let delay: StdDuration = self.config.nack_delay.0;
        Ok(ReadBatch::new(batch, move |outcome: Outcome| {
            spawner.spawn(async move {
                if matches!(outcome, Outcome::Errored(_)) {
                    tokio::time::sleep(delay).await;
                }
                for acker in ackers {
                    let result = match &outcome {
                        Outcome::Delivered | Outcome::Filtered => {
                            acker.ack(BasicAckOptions::default()).await
                        }
                        Outcome::Errored(_) => {
                            acker
                                .nack(BasicNackOptions {
                                    multiple: false,
                                    requeue: true,
                                })
                                .await
                        }
                        Outcome::Rejected(_) => {
                            acker.reject(BasicRejectOptions { requeue: false }).await
                        }
                    };
                    if let Err(e) = result {
                        // The channel is gone; the broker requeues what was not acked.
                        warn!(error = %e, "AMQP ack failed.");
                    }
                }
            });
        }))
    }

    fn handles_nacks(&self) -> bool {
        true
    }

    async fn close(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.conn.close(200, "closing").await;
        }
    }
}
