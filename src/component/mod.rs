//! The contracts between the runtime and the components it runs.
//!
//! The runtime owns the loops: connecting with backoff, reading, retries, acknowledgement,
//! shutdown and the standard metrics. A component only says how to connect, read, process
//! or write, and classifies its failures with [`ConnectorError`] so that the runtime can
//! pick reconnect, retry or stop without reading error text.

pub mod bus;
pub mod cpu;
pub mod registry;
pub mod resources;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::http::Routes;
use tokio::sync::mpsc;

use crate::batching::BatchPolicy;
use crate::egress::{Egress, EgressError, EgressPolicy, EgressTarget};
use crate::message::{Batch, Message, Outcome, ReplySlot, Transaction};

/// The three kinds of node in a stream graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Input,
    Processor,
    Output,
    Cache,
    RateLimit,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Processor => "processor",
            Kind::Output => "output",
            Kind::Cache => "cache",
            Kind::RateLimit => "rate_limit",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a failure means for the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The connection is gone: reconnect with backoff, then go on.
    NotConnected,
    /// The source has nothing more to give: the input ends cleanly.
    EndOfInput,
    /// A transient failure (I/O, timeout, a 5xx): retry with backoff.
    Transient,
    /// The data was refused and sending it again cannot help (a 4xx, a bad record).
    Rejected,
    /// The output stopped with its stream and takes nothing more (an HTTP server output
    /// with no client left to serve): sources that take nacks get one, and the runtime
    /// does not send the batch again.
    Stopped,
}

/// A classified connector failure: what failed, and the library error that caused it
/// (its text follows the message, after a colon).
#[derive(Debug, thiserror::Error)]
#[error("{message}{}", .source.as_ref().map(|s| format!(": {s}")).unwrap_or_default())]
pub struct ConnectorError {
    pub kind: ErrorKind,
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConnectorError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ConnectorError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub fn not_connected(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotConnected, message)
    }

    pub fn end_of_input() -> Self {
        Self::new(ErrorKind::EndOfInput, "end of input")
    }

    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, message)
    }

    pub fn rejected(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Rejected, message)
    }

    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The outcome a failed write reports to the input.
    pub fn outcome(&self) -> Outcome {
        match self.kind {
            ErrorKind::Rejected => Outcome::rejected(self),
            _ => Outcome::errored(self),
        }
    }
}

impl From<crate::config::mapped::FieldError> for ConnectorError {
    fn from(e: crate::config::mapped::FieldError) -> Self {
        ConnectorError::rejected(e.0)
    }
}

impl From<EgressError> for ConnectorError {
    fn from(e: EgressError) -> Self {
        match e {
            // A name that does not resolve may resolve later.
            EgressError::Unresolved { .. } => ConnectorError::not_connected(e.to_string()),
            _ => ConnectorError::rejected(e.to_string()),
        }
    }
}

impl From<crate::http::hub::Stopped> for ConnectorError {
    fn from(e: crate::http::hub::Stopped) -> Self {
        ConnectorError::new(ErrorKind::Stopped, e.to_string())
    }
}

/// Acknowledges a read to its source: commit an offset, answer an HTTP request, ack a
/// broker message. Called once, with the worst outcome of everything the read became.
pub type SourceAck = Box<dyn FnOnce(Outcome) + Send>;

/// What one read produced.
pub struct ReadBatch {
    pub batch: Batch,
    pub ack: SourceAck,
    /// Set by sources that answer with the delivered messages (a synchronous HTTP reply).
    pub reply: Option<ReplySlot>,
}

impl ReadBatch {
    pub fn new(batch: Batch, ack: impl FnOnce(Outcome) + Send + 'static) -> Self {
        ReadBatch {
            batch,
            ack: Box::new(ack),
            reply: None,
        }
    }

    /// For sources that have nothing to acknowledge to (a generator, a file).
    pub fn unacked(batch: Batch) -> Self {
        ReadBatch::new(batch, |_| {})
    }

    pub fn with_reply(mut self, slot: ReplySlot) -> Self {
        self.reply = Some(slot);
        self
    }
}

/// A source of messages.
#[async_trait]
pub trait Input: Send {
    /// Opens the connection. Retried with backoff until it succeeds or the stream stops.
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// The next batch and how to acknowledge it. Must be cancel safe: the runtime drops a
    /// pending read when the stream stops.
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError>;

    async fn close(&mut self) {}

    /// True when the source deals with failures itself (answers 502, redelivers); otherwise
    /// the runtime sends a failed batch again with backoff.
    fn handles_nacks(&self) -> bool {
        false
    }

    /// Where what this input read before can be read again by position, the messages
    /// made as `read` makes them: for HTTP clients resuming from before their replay
    /// buffer. `None` for inputs without positions.
    fn history(&self) -> Option<Arc<dyn crate::http::history::History>> {
        None
    }
}

/// Transforms batches. Failures are set on the messages (see [`Message::set_error`]),
/// never dropped; returning no batches means everything was filtered on purpose.
#[async_trait]
pub trait Processor: Send + Sync {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let mut out = Vec::with_capacity(batch.len());
        for mut msg in batch {
            match self.process_message(&mut msg).await {
                Ok(true) => out.push(msg),
                Ok(false) => {}
                Err(e) => {
                    msg.set_error(e.to_string());
                    out.push(msg);
                }
            }
        }
        if out.is_empty() {
            Vec::new()
        } else {
            vec![out]
        }
    }

    /// Per-message processing for processors that do not need the whole batch. Returns
    /// whether the message goes on.
    async fn process_message(&self, _msg: &mut Message) -> Result<bool, ProcessError> {
        Ok(true)
    }
}

/// A processor's failure on one message, set on the message as its error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProcessError(pub String);

impl ProcessError {
    pub fn new(message: impl fmt::Display) -> Self {
        ProcessError(message.to_string())
    }
}

/// A sink of messages. Writes may run concurrently up to the output's `max_in_flight`.
#[async_trait]
pub trait Output: Send + Sync {
    async fn connect(&self) -> Result<(), ConnectorError> {
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError>;

    async fn close(&self) {}

    /// Whether every write makes its own connections and counts them in the node's
    /// connection analytics (an HTTP client: one per request tried), so the runtime
    /// must not count `connect` as an attempt too.
    fn connects_per_write(&self) -> bool {
        false
    }
}

/// A leaf output and how the runtime drives it.
pub struct Writer {
    pub output: Box<dyn Output>,
    /// Writes allowed at once.
    pub max_in_flight: usize,
    pub batching: BatchPolicy,
}

/// Routes transactions to child outputs (brokers, fallback, retry, switch). Each child is
/// a full output node with its own batching and concurrency, reached through its channel.
#[async_trait]
pub trait Router: Send {
    async fn route(&mut self, t: Transaction, children: &[mpsc::Sender<Transaction>]);
}

/// Sends `t` to `child` and waits for the child's outcome (the caller's ack stays
/// unresolved until then).
pub async fn deliver_and_wait(child: &mpsc::Sender<Transaction>, batch: Batch) -> Outcome {
    let (ack, rx) = crate::message::Ack::channel();
    if child.send(Transaction::new(batch, ack)).await.is_err() {
        return Outcome::errored("output is shut down");
    }
    rx.await
        .unwrap_or_else(|_| Outcome::errored("output went away before answering"))
}

/// A failure to build a component from a valid-looking config (a bad URL, an unreadable
/// file, a path already served).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: {message}")]
pub struct BuildError {
    /// Document path of the component, e.g. `output.broker.outputs[1].http_client`.
    pub path: String,
    pub message: String,
}

/// What a component may use while it is built: kept small on purpose. What only some
/// components need is handed to them by their own builder (the hub outputs get the
/// cluster bus and the input's history as their wiring that way).
#[derive(Clone)]
pub struct BuildContext {
    /// Which component is being built, in which stream.
    pub id: Identity,
    /// Where HTTP-serving components mount their handlers.
    pub routes: Arc<Routes>,
    /// The caches, rate limits and component resources components may name.
    pub resources: Arc<resources::Resources>,
    /// When the stream stops.
    pub lifecycle: Lifecycle,
    /// Where the stream may connect.
    pub reach: Reach,
    /// What the stream's build took so far, checked as it goes.
    claims: Claims,
}

/// Which component is being built, in which stream: for labels, logs and errors.
#[derive(Clone)]
pub struct Identity {
    /// The stream's name.
    pub stream: Arc<str>,
    /// The API and organisation of a stream a gateway runs for an API.
    pub owner: Option<Arc<crate::metrics::StreamOwner>>,
    /// The component's path in its document (`input.http_server`), for errors.
    pub path: String,
    /// The component's name in metrics and logs: its label, or else its path.
    pub component: String,
    /// Its kind and type key, for metric labels.
    pub kind: Kind,
    pub type_name: &'static str,
}

/// How the stream's components learn that it stops.
#[derive(Clone, Default)]
pub struct Lifecycle {
    /// Cancelled when the stream starts shutting down.
    pub shutdown: CancellationToken,
    /// Set once an output of the stream stopped for good ([`ErrorKind::Stopped`]): a
    /// failed batch is then not sent again, so that stopping does not wait out its
    /// deadline for deliveries that cannot happen.
    pub halted: Arc<std::sync::atomic::AtomicBool>,
}

/// Where the stream may connect.
#[derive(Clone, Default)]
pub struct Reach {
    /// `None` for the operator's own streams, the `streaming.egress` policy for streams
    /// posted by organisations.
    pub policy: Option<Arc<EgressPolicy>>,
    /// The named hosts this build's components connect to, for a dry run to resolve.
    targets: Arc<parking_lot::Mutex<Vec<EgressTarget>>>,
}

/// What the build of one stream took so far.
#[derive(Clone, Default)]
struct Claims {
    /// Labels already used in this stream (they name metrics, so they must be unique).
    labels: Arc<parking_lot::Mutex<std::collections::HashSet<String>>>,
    /// Component resources being built around this component, to refuse a resource that
    /// refers to itself.
    resource_trail: Vec<String>,
}

impl BuildContext {
    pub fn new(stream: &str, routes: Arc<Routes>, shutdown: CancellationToken) -> Self {
        BuildContext {
            id: Identity {
                stream: stream.into(),
                owner: None,
                path: String::new(),
                component: String::new(),
                kind: Kind::Input,
                type_name: "",
            },
            routes,
            resources: Default::default(),
            lifecycle: Lifecycle {
                shutdown,
                halted: Default::default(),
            },
            reach: Reach::default(),
            claims: Claims::default(),
        }
    }

    /// The same context for a stream of a gateway's API: its metrics are labelled with
    /// the API and its organisation.
    pub fn with_owner(mut self, owner: Option<Arc<crate::metrics::StreamOwner>>) -> Self {
        self.id.owner = owner;
        self
    }

    /// The labels naming the stream in its metrics.
    pub fn stream_labels(&self) -> Vec<(&'static str, String)> {
        crate::metrics::stream_labels(&self.id.stream, self.id.owner.as_deref())
    }

    /// The same context for a stream posted by an organisation, held to `policy`.
    pub fn with_egress(mut self, policy: Option<Arc<EgressPolicy>>) -> Self {
        self.reach.policy = policy;
        self
    }

    /// What a component that connects to `targets` (host, port) checks when it
    /// connects. A literal address the policy refuses is an error now; names are
    /// recorded for [`egress_targets`](Self::egress_targets).
    pub fn egress_to(&self, targets: Vec<(String, u16)>) -> Result<Egress, BuildError> {
        let Some(policy) = &self.reach.policy else {
            return Ok(Egress::open());
        };
        for (host, port) in &targets {
            match policy.check_literal(host, *port) {
                Err(e) => return Err(self.error(e)),
                Ok(Some(())) => {}
                Ok(None) => self.reach.targets.lock().push(EgressTarget {
                    path: self.id.path.clone(),
                    host: host.clone(),
                    port: *port,
                }),
            }
        }
        Ok(Egress::new(Some(policy.clone()), targets))
    }

    /// [`egress_to`](Self::egress_to) for addresses as connectors take them
    /// (`nats://h:4222`, `h:9092`), with `default_port` where none is written. For the
    /// operator's streams nothing is parsed here: the connector reports a bad address.
    pub fn egress_addresses(
        &self,
        addresses: &[String],
        default_port: u16,
    ) -> Result<Egress, BuildError> {
        if self.reach.policy.is_none() {
            return Ok(Egress::open());
        }
        let mut targets = Vec::new();
        for a in addresses {
            targets.push(crate::egress::host_port(a, default_port).map_err(|e| self.error(e))?);
        }
        self.egress_to(targets)
    }

    /// The named hosts recorded while building (see [`egress_to`](Self::egress_to)).
    pub fn egress_targets(&self) -> Vec<EgressTarget> {
        self.reach.targets.lock().clone()
    }

    /// The same context with these resources to look names up in.
    pub fn with_resources(mut self, resources: Arc<resources::Resources>) -> Self {
        self.resources = resources;
        self
    }

    /// The context for building the component resource `kind`/`label` in place of a
    /// reference to it; refuses a resource that (through others) refers to itself.
    pub fn entering_resource(&self, kind: Kind, label: &str) -> Result<Self, BuildError> {
        let id = format!("{kind} resource `{label}`");
        if self.claims.resource_trail.contains(&id) {
            let mut cycle = self.claims.resource_trail.clone();
            cycle.push(id);
            return Err(self.error(format!(
                "resources refer to each other in a loop: {}",
                cycle.join(" -> ")
            )));
        }
        let mut cx = self.clone();
        cx.claims.resource_trail.push(id);
        Ok(cx)
    }

    /// Records a component's label; a label used twice in one stream is an error.
    pub fn claim_label(&self, label: &str) -> Result<(), BuildError> {
        if self.claims.labels.lock().insert(label.to_owned()) {
            Ok(())
        } else {
            Err(self.error(format!("label `{label}` is used twice in this stream")))
        }
    }

    /// The context for a component below this one.
    pub fn child(&self, path: impl Into<String>) -> Self {
        let mut cx = self.clone();
        cx.id.path = path.into();
        cx
    }

    /// The context for building one component.
    pub fn for_component(
        &self,
        path: String,
        component: String,
        kind: Kind,
        type_name: &'static str,
    ) -> Self {
        let mut cx = self.clone();
        cx.id.path = path;
        cx.id.component = component;
        cx.id.kind = kind;
        cx.id.type_name = type_name;
        cx
    }

    /// The standard labels of this component's metrics.
    pub fn metric_labels(&self) -> Vec<(&'static str, String)> {
        let mut labels = self.stream_labels();
        labels.extend([
            ("component", self.id.component.clone()),
            ("kind", self.id.kind.as_str().to_owned()),
            ("type", self.id.type_name.to_owned()),
        ]);
        labels
    }

    /// Who owns what this component mounts: `stream/path`.
    pub fn owner(&self) -> String {
        format!("{}/{}", self.id.stream, self.id.path)
    }

    pub fn error(&self, message: impl fmt::Display) -> BuildError {
        BuildError {
            path: self.id.path.clone(),
            message: message.to_string(),
        }
    }

    /// For a posted stream, refuses field `field` of the component when `check` finds
    /// that it names the cluster bus's subjects, streams or keys (see
    /// [`crate::reserved`]); the operator's own streams use any name.
    pub fn refuse_reserved(
        &self,
        field: &str,
        check: impl FnOnce(&crate::reserved::ReservedNames) -> Result<(), crate::reserved::Refused>,
    ) -> Result<(), BuildError> {
        let Some(policy) = &self.reach.policy else {
            return Ok(());
        };
        check(policy.reserved()).map_err(|e| BuildError {
            path: format!("{}.{field}", self.id.path),
            message: e.to_string(),
        })
    }

    /// The names a posted stream's `field`, made per message, is checked against each
    /// time it is rendered; `None` for the operator's streams and for a field that is the
    /// same for every message (checked once, when built).
    pub fn reserved_per_message(
        &self,
        field: &crate::config::Interp,
    ) -> Option<crate::reserved::ReservedNames> {
        let policy = self.reach.policy.as_ref()?;
        field
            .static_value()
            .is_none()
            .then(|| policy.reserved().clone())
    }
}

/// Documentation of a component, shown by `sluice list` and checked by tests.
#[derive(Debug, Clone, Copy)]
pub struct ComponentSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub summary: &'static str,
    /// Complete stream configs that use the component; each is linted in the tests.
    pub examples: &'static [Example],
}

#[derive(Debug, Clone, Copy)]
pub struct Example {
    pub title: &'static str,
    pub yaml: &'static str,
}
