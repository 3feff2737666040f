//! `nats_jetstream` input: consumes a JetStream stream through a pull consumer, durable
//! when `durable` is set.
//!
//! Delivery: at least once. A message is acked to the server only once every output
//! confirmed it; a failed delivery is nacked and the server redelivers it after
//! `nak_delay`; a message that was never answered is redelivered after `ack_wait`. A
//! message still being worked on (an output that waits, a slow pipeline) is kept alive:
//! every half `ack_wait` the server is told it is in progress, so that it is not given
//! to another consumer (or this one) again meanwhile. A durable consumer keeps its
//! position on the server across restarts.

use std::time::Duration as StdDuration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::{AckKind, Message as JsMessage};
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::nats::{headers_to_meta, messages_after, validate, NatsAuth, NatsConn};
use crate::connect::{AckSpawner, TlsConfig};
use crate::duration::Duration;
use crate::http::history::{History, HistoryError, Past};
use crate::message::{Message, Outcome};

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Deliver {
    /// Every message the stream holds.
    #[default]
    All,
    /// Starting with the last message of the stream.
    Last,
    /// Only messages published after the consumer was created.
    New,
    /// The last message of each subject.
    LastPerSubject,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsJetStreamInputConfig {
    /// Server URLs (`nats://host:4222`).
    pub urls: Vec<String>,
    /// The JetStream stream to consume.
    pub stream: String,
    /// Only messages of this subject (wildcards allowed); all of the stream's when unset.
    #[serde(default)]
    pub subject: Option<String>,
    /// Name of a durable consumer: the server remembers its position, and inputs with the
    /// same name share the messages. Unset: an ephemeral consumer, removed when idle.
    #[serde(default)]
    pub durable: Option<String>,
    /// Where a new consumer starts: `all`, `last`, `new` or `last_per_subject`.
    #[serde(default)]
    pub deliver: Deliver,
    /// How long the server waits for an ack before it redelivers.
    #[serde(default = "default_ack_wait")]
    pub ack_wait: Duration,
    /// How long the server waits before redelivering a message whose delivery failed.
    #[serde(default = "default_nak_delay")]
    pub nak_delay: Duration,
    /// Messages delivered but not yet acked, at most.
    #[serde(default = "default_max_ack_pending")]
    pub max_ack_pending: i64,
    /// Largest batch made of messages that are already waiting.
    #[serde(default = "super::nats::default_max_batch")]
    pub max_batch: usize,
    /// TLS settings.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Authentication.
    #[serde(default)]
    pub auth: NatsAuth,
}

fn default_ack_wait() -> Duration {
    Duration::from_secs(30)
}
fn default_nak_delay() -> Duration {
    Duration::from_secs(1)
}
fn default_max_ack_pending() -> i64 {
    1024
}

/// How long `close` waits for acks already handed over to go out.
const ACK_DRAIN: StdDuration = StdDuration::from_secs(5);

impl Spec for NatsJetStreamInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "nats_jetstream",
        kind: Kind::Input,
        summary: "Consumes a JetStream stream with a pull consumer; acks after delivery.",
        examples: &[Example {
            title: "A durable consumer of one subject",
            yaml: "input:\n  nats_jetstream:\n    urls: [nats://127.0.0.1:4222]\n    stream: ORDERS\n    subject: orders.created\n    durable: sluice\n    deliver: all\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for NatsJetStreamInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        validate(&self.urls, &self.tls, &self.auth).map_err(|e| cx.error(e))?;
        if self.stream.is_empty() {
            return Err(cx.error("`stream` is empty"));
        }
        cx.refuse_reserved("stream", |r| r.check_stream(&self.stream))?;
        if let Some(subject) = &self.subject {
            cx.refuse_reserved("subject", |r| r.check_subject(subject))?;
        }
        if self.max_batch == 0 || self.max_ack_pending <= 0 {
            return Err(cx.error("`max_batch` and `max_ack_pending` must be at least 1"));
        }
        Ok(InputBuild::Leaf(Box::new(JetStreamInput {
            config: self.clone(),
            name: cx.owner(),
            egress: cx.egress_addresses(&crate::connect::split_addresses(&self.urls), 4222)?,
            conn: None,
            messages: None,
            acks: TaskTracker::new(),
            labels: cx.metric_labels(),
            lag: None,
            closing: tokio_util::sync::CancellationToken::new(),
        })))
    }
}

/// How often the consumer's pending count is read for the lag metric.
const LAG_PERIOD: StdDuration = StdDuration::from_secs(5);

/// Reads the consumer's lag into `sluice_input_lag_messages` every [`LAG_PERIOD`], until
/// aborted: what it has not been given yet (pending) and what it was given and has not
/// acknowledged (ack pending), so that a consumer stuck on a blocked output shows what it
/// holds instead of 0.
async fn watch_lag(consumer: PullConsumer, stream: String, labels: Vec<(&'static str, String)>) {
    let mut labels = labels;
    labels.push(("topic", stream));
    labels.push(("partition", String::new()));
    let gauge = metrics::gauge!(crate::metrics::INPUT_LAG, &labels);
    loop {
        match consumer.get_info().await {
            Ok(info) => gauge.set((info.num_pending + info.num_ack_pending as u64) as f64),
            Err(e) => debug!(error = %e, "JetStream consumer info unavailable."),
        }
        tokio::time::sleep(LAG_PERIOD).await;
    }
}

/// Tells the server every `every` that the messages of a batch are still being worked on,
/// until the batch is settled (or the input closes, or the server cannot be told).
async fn keep_alive(
    ackers: std::sync::Arc<Vec<async_nats::jetstream::message::Acker>>,
    every: StdDuration,
    settled: tokio_util::sync::CancellationToken,
) {
    let every = every.max(StdDuration::from_millis(100));
    loop {
        tokio::select! {
            _ = settled.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        for acker in ackers.iter() {
            if settled.is_cancelled() {
                return;
            }
            if let Err(e) = acker.ack_with(AckKind::Progress).await {
                debug!(error = %e, "JetStream in-progress ack failed.");
                return;
            }
        }
    }
}

pub struct JetStreamInput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: NatsJetStreamInputConfig,
    name: String,
    conn: Option<NatsConn>,
    messages: Option<(pull::Stream, AckSpawner)>,
    /// Acks spawned and not yet handed to the client: `close` waits for them.
    acks: TaskTracker,
    /// The input's metric labels, and the task that reads its consumer's lag.
    labels: Vec<(&'static str, String)>,
    lag: Option<tokio::task::JoinHandle<()>>,
    /// Ends the keep-alives of the batches in hand when the input closes.
    closing: tokio_util::sync::CancellationToken,
}

impl JetStreamInput {
    async fn open(&mut self) -> Result<pull::Stream, ConnectorError> {
        let c = &self.config;
        if self.conn.is_none() {
            self.conn =
                Some(NatsConn::connect(&c.urls, &c.tls, &c.auth, &self.name, &self.egress).await?);
        }
        let Some(conn) = &mut self.conn else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        conn.wait_up(StdDuration::from_secs(5)).await?;
        let js = async_nats::jetstream::new(conn.client.clone());
        let stream = js.get_stream(&c.stream).await.map_err(|e| {
            ConnectorError::not_connected(format!("cannot open stream `{}`: {e}", c.stream))
        })?;
        let config = pull::Config {
            durable_name: c.durable.clone(),
            deliver_policy: match c.deliver {
                Deliver::All => DeliverPolicy::All,
                Deliver::Last => DeliverPolicy::Last,
                Deliver::New => DeliverPolicy::New,
                Deliver::LastPerSubject => DeliverPolicy::LastPerSubject,
            },
            ack_policy: AckPolicy::Explicit,
            ack_wait: c.ack_wait.0,
            max_ack_pending: c.max_ack_pending,
            filter_subject: c.subject.clone().unwrap_or_default(),
            ..Default::default()
        };
        let consumer: PullConsumer = match &c.durable {
            Some(name) => stream.get_or_create_consumer(name, config).await,
            None => stream.create_consumer(config).await,
        }
        .map_err(|e| ConnectorError::not_connected("cannot create consumer").with_source(e))?;
        if let Some(old) = self.lag.take() {
            old.abort();
        }
        self.lag = Some(tokio::spawn(watch_lag(
            consumer.clone(),
            c.stream.clone(),
            self.labels.clone(),
        )));
        consumer
            .messages()
            .await
            .map_err(|e| ConnectorError::not_connected("cannot pull messages").with_source(e))
    }
}

/// The stream this input reads, read again by stream sequence for resuming clients:
/// each read is an ephemeral consumer of its own, on a connection of its own.
#[derive(Clone)]
struct JetStreamHistory {
    config: NatsJetStreamInputConfig,
    name: String,
    egress: crate::egress::Egress,
}

impl JetStreamHistory {
    async fn read(&self, after: u64) -> Result<Past, HistoryError> {
        let c = &self.config;
        let conn = NatsConn::connect(&c.urls, &c.tls, &c.auth, &self.name, &self.egress)
            .await
            .map_err(|e| HistoryError::failed("connecting", e))?;
        let js = async_nats::jetstream::new(conn.client);
        let subject = c.subject.clone().unwrap_or_default();
        messages_after(&js, &c.stream, subject, after, to_message).await
    }
}

impl History for JetStreamHistory {
    fn after(&self, after: u64) -> futures::future::BoxFuture<'static, Result<Past, HistoryError>> {
        let this = self.clone();
        async move { this.read(after).await }.boxed()
    }

    fn position_key(&self) -> &str {
        "nats_sequence_stream"
    }
}

fn to_message(m: &JsMessage) -> Message {
    let mut msg = Message::new(m.payload.clone());
    headers_to_meta(m.headers.as_ref(), &mut msg);
    msg.set_meta("nats_subject", m.subject.as_str());
    if let Ok(info) = m.info() {
        msg.set_meta("nats_stream", info.stream);
        msg.set_meta("nats_consumer", info.consumer);
        msg.set_meta("nats_sequence_stream", info.stream_sequence as i64);
        msg.set_meta("nats_sequence_consumer", info.consumer_sequence as i64);
        msg.set_meta("nats_num_delivered", info.delivered);
        msg.set_meta("nats_num_pending", info.pending as i64);
        msg.set_meta("nats_timestamp_unix", info.published.unix_timestamp());
    }
    msg
}

#[async_trait]
impl Input for JetStreamInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.messages = None;
        let stream = self.open().await?;
        self.messages = Some((stream, AckSpawner::current()));
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some((stream, spawner)) = &mut self.messages else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let first = match stream.next().await {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                self.messages = None;
                return Err(ConnectorError::not_connected("pull failed").with_source(e));
            }
            None => {
                self.messages = None;
                return Err(ConnectorError::not_connected("consumer closed"));
            }
        };
        let mut raw = vec![first];
        while raw.len() < self.config.max_batch {
            match stream.next().now_or_never() {
                Some(Some(Ok(m))) => raw.push(m),
                _ => break,
            }
        }
        let batch = raw.iter().map(to_message).collect();
        let ackers: std::sync::Arc<Vec<_>> =
            std::sync::Arc::new(raw.into_iter().map(|m| m.split().1).collect());
        let spawner = spawner.clone();
        let acks = self.acks.clone();
        let nak_delay = self.config.nak_delay.0;
        let settled = self.closing.child_token();
        spawner.spawn(keep_alive(
            ackers.clone(),
            self.config.ack_wait.0 / 2,
            settled.clone(),
        ));
        Ok(ReadBatch::new(batch, move |outcome: Outcome| {
            settled.cancel();
            let kind = match outcome {
                Outcome::Delivered | Outcome::Filtered => AckKind::Ack,
                Outcome::Errored(_) => AckKind::Nak(Some(nak_delay)),
                // Redelivering a message that was refused cannot help.
                Outcome::Rejected(ref reason) => {
                    warn!(%reason, messages = ackers.len(), "Messages rejected; terminating their delivery.");
                    AckKind::Term
                }
            };
            spawner.spawn(acks.track_future(async move {
                for acker in ackers.iter() {
                    if let Err(e) = acker.ack_with(kind).await {
                        // The server redelivers after `ack_wait`: a duplicate, not a loss.
                        warn!(error = %e, "JetStream ack failed.");
                    }
                }
            }));
        }))
    }

    fn handles_nacks(&self) -> bool {
        true
    }

    fn history(&self) -> Option<std::sync::Arc<dyn History>> {
        Some(std::sync::Arc::new(JetStreamHistory {
            config: self.config.clone(),
            name: format!("{} (resume)", self.name),
            egress: self.egress.clone(),
        }))
    }

    async fn close(&mut self) {
        self.messages = None;
        self.closing.cancel();
        self.closing = tokio_util::sync::CancellationToken::new();
        if let Some(lag) = self.lag.take() {
            lag.abort();
        }
        // The acks of delivered messages run as tasks of their own: the flush below carries
        // only those already handed to the client, and a process that exits after `close`
        // loses the rest (the server then delivers those messages again).
        self.acks.close();
        let _ = tokio::time::timeout(ACK_DRAIN, self.acks.wait()).await;
        self.acks.reopen();
        if let Some(conn) = self.conn.take() {
            let _ = conn.client.flush().await;
        }
    }
}
