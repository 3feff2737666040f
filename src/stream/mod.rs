//! Stream graphs: a [`StreamConfig`] is built into nodes (inputs, one pipeline, an output
//! tree) joined by bounded channels, started as tasks, and stopped with a drain deadline.

mod attached;
pub mod bounds;
pub mod budget;
pub mod config;
pub mod failures;
pub mod health;
mod input;
pub mod manager;
mod output;
mod pipeline;
pub mod readiness;
pub mod resources;
pub mod schema;
pub mod tap;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info_span, Instrument};

pub use config::{ResourcesConfig, RootConfig, StreamConfig};
pub use input::InFlight;
pub use pipeline::{process_all, ProcessorNode};
pub use readiness::Readiness;

use crate::component::cpu::{CpuShare, Metered};
use crate::component::resources::Resources;
use crate::component::{BuildContext, BuildError, Kind};
use crate::egress::{EgressPolicy, EgressTarget};
use crate::http::Routes;
use crate::input::{InputBuild, InputConfig, InputKind};
use crate::message::Transaction;
use crate::metrics::NodeMetrics;
use crate::output::hub::HubWiring;
use crate::output::{OutputBuild, OutputConfig, OutputKind};
use crate::processor::{self, ProcessorConfig};

use input::InputNode;
use output::{RouterNode, WriterNode};

/// A stream whose components are built and ready to start.
pub struct Stream {
    name: Arc<str>,
    inputs: Vec<InputNode>,
    processors: Vec<ProcessorNode>,
    threads: usize,
    output: OutputTree,
    capacity: usize,
    readiness: Arc<Readiness>,
    health: Arc<health::Health>,
    /// The labels naming the stream in its metrics.
    labels: Vec<(&'static str, String)>,
    cancel: CancellationToken,
    /// The CPU share its tasks are held to, if any.
    cpu: Option<Arc<CpuShare>>,
    /// For a posted stream with traces on, its organisation's span budget.
    spans: Option<Arc<crate::telemetry::SpanBudget>>,
}

/// The tasks of a stream, each held to the stream's CPU share when it has one.
pub(crate) struct Tasks {
    set: JoinSet<()>,
    cpu: Option<Arc<CpuShare>>,
    /// The span budget the tasks' spans are held to (a posted stream's).
    spans: Option<Arc<crate::telemetry::SpanBudget>>,
}

impl Tasks {
    fn new(cpu: Option<Arc<CpuShare>>) -> Self {
        Tasks {
            set: JoinSet::new(),
            cpu,
            spans: None,
        }
    }

    pub(crate) fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let task = crate::telemetry::within(self.spans.clone(), task);
        match &self.cpu {
            Some(share) => {
                self.set.spawn(Metered::new(task, share.clone()));
            }
            None => {
                self.set.spawn(task);
            }
        }
    }
}

enum OutputTree {
    Writer(WriterNode),
    Router(RouterNodeParts, Vec<OutputTree>),
}

struct RouterNodeParts {
    router: Box<dyn crate::component::Router>,
    metrics: NodeMetrics,
}

/// Everything a stream needs from the process that runs it.
#[derive(Clone)]
pub struct StreamEnv {
    pub routes: Arc<Routes>,
    pub readiness: Arc<Readiness>,
    /// The parent of the stream's own token: cancelling it stops the stream.
    pub shutdown: CancellationToken,
    /// The resources shared by the streams (those at the top of their config file).
    pub resources: Arc<Resources>,
    /// The in-flight memory the streams share with others (their organisation's), if
    /// they are held to one.
    pub budget: Option<Arc<budget::MemoryBudget>>,
    /// When inputs stop trying to connect; unset, they try for as long as the stream runs.
    pub give_up: Option<failures::GiveUp>,
    /// Where the streams may connect: `None` for the operator's own, the
    /// `streaming.egress` policy for streams posted by organisations.
    pub egress: Option<Arc<EgressPolicy>>,
    /// The cluster's bus (`cluster.bus`), which carries the streams fed by HTTP clients
    /// to the HTTP clients of every gateway node.
    pub bus: Option<Arc<dyn crate::component::bus::Bus>>,
    /// Where the streams' health is kept: the process's registry.
    pub health: Arc<health::Health>,
    /// The API and organisation, for streams a gateway runs for an API.
    pub owner: Option<Arc<crate::metrics::StreamOwner>>,
    /// The CPU share the streams' tasks are held to (their organisation's), if any.
    pub cpu: Option<Arc<CpuShare>>,
    /// Where the streams' hubs are kept across a change of a stream, so that its HTTP
    /// clients stay connected; unset, a hub ends with its stream.
    pub hubs: Option<Arc<crate::output::hubs::Hubs>>,
}

impl StreamEnv {
    /// The environment of streams run by this process alone: nothing shared, the
    /// process's health registry.
    pub fn standalone() -> Self {
        Self::new(Routes::new(), health::Health::global())
    }

    /// The environment of streams that are built to be checked and never run: their
    /// health is nobody's.
    fn dry_run(routes: &Arc<Routes>) -> Self {
        Self::new(routes.clone(), Arc::default())
    }

    /// The one place an environment is made: serving on `routes`, health kept in
    /// `health`, and nothing else set; the `with_*` methods add the rest.
    fn new(routes: Arc<Routes>, health: Arc<health::Health>) -> Self {
        StreamEnv {
            routes,
            readiness: Arc::new(Readiness::default()),
            shutdown: CancellationToken::new(),
            resources: Arc::default(),
            budget: None,
            give_up: None,
            egress: None,
            bus: None,
            health,
            owner: None,
            cpu: None,
            hubs: None,
        }
    }

    /// The same environment for the streams of the gateway's API `api_id`: their
    /// metrics name the API and organisation apart from the stream.
    pub fn with_owner(mut self, api_id: &str, org_id: &str) -> Self {
        self.owner = Some(Arc::new(crate::metrics::StreamOwner {
            api_id: api_id.to_owned(),
            org_id: org_id.to_owned(),
        }));
        self
    }

    /// The same environment keeping its streams' health in `health` instead of the
    /// process's registry.
    pub fn with_health(mut self, health: Arc<health::Health>) -> Self {
        self.health = health;
        self
    }

    /// The same environment with inputs that give up connecting as `give_up` says.
    pub fn with_give_up(mut self, give_up: Option<failures::GiveUp>) -> Self {
        self.give_up = give_up;
        self
    }

    /// The same environment with its streams' reads held to `budget`.
    pub fn with_budget(mut self, budget: Option<Arc<budget::MemoryBudget>>) -> Self {
        self.budget = budget;
        self
    }

    /// The same environment with its streams' tasks held to `share`.
    pub fn with_cpu(mut self, share: Option<Arc<CpuShare>>) -> Self {
        self.cpu = share;
        self
    }

    /// The same environment keeping its streams' hubs in `hubs` across their changes.
    pub fn with_hubs(mut self, hubs: Arc<crate::output::hubs::Hubs>) -> Self {
        self.hubs = Some(hubs);
        self
    }

    /// The same environment with the cluster's bus.
    pub fn with_bus(mut self, bus: Option<Arc<dyn crate::component::bus::Bus>>) -> Self {
        self.bus = bus;
        self
    }

    /// The same environment for streams posted by organisations, held to `policy`.
    pub fn posted(mut self, policy: Arc<EgressPolicy>) -> Self {
        self.egress = Some(policy);
        self
    }

    /// The same environment with `config`'s resources built and shared by its streams.
    /// Errors are placed at the resource's path from the top of the file.
    pub fn with_resources(mut self, config: &ResourcesConfig) -> Result<Self, Vec<BuildError>> {
        let cx = BuildContext::new("", self.routes.clone(), self.shutdown.clone());
        self.resources = config.build(None, &cx, "")?;
        Ok(self)
    }
}

/// Whether every message of the stream comes from an HTTP client (`http_server`, or a
/// `broker` of them): on a cluster such a stream reaches the HTTP clients of other nodes
/// only over the bus.
pub fn fed_by_http(input: &InputConfig) -> bool {
    match &input.kind {
        InputKind::HttpServer(_) => true,
        InputKind::Broker(b) => !b.inputs.is_empty() && b.inputs.iter().all(fed_by_http),
        _ => false,
    }
}

/// Whether the stream hands what its one input reads, unchanged and whole, to one
/// output: then the input's record of what it read is the output's too.
fn hands_on_unchanged(config: &StreamConfig) -> bool {
    !matches!(
        config.input.kind,
        InputKind::Broker(_) | InputKind::Resource(_)
    ) && config.input.processors.is_empty()
        && config.pipeline.processors.is_empty()
        && config.output.processors.is_empty()
        && matches!(
            config.output.kind,
            OutputKind::HttpServer(_) | OutputKind::WebsocketServer(_)
        )
}

/// Whether some output of the tree serves HTTP clients from a hub (`http_server`,
/// `websocket_server`).
pub fn serves_http(output: &OutputConfig) -> bool {
    any_output(output, &|kind| {
        matches!(
            kind,
            OutputKind::HttpServer(_) | OutputKind::WebsocketServer(_)
        )
    })
}

/// Whether `leaf` holds for some output of the tree (below `broker`, `fallback` and
/// `switch`).
pub fn any_output(output: &OutputConfig, leaf: &dyn Fn(&OutputKind) -> bool) -> bool {
    match &output.kind {
        OutputKind::Broker(o) => o.outputs.iter().any(|o| any_output(o, leaf)),
        OutputKind::Fallback(o) => o.0.iter().any(|o| any_output(o, leaf)),
        OutputKind::Switch(o) => o.cases.iter().any(|c| any_output(&c.output, leaf)),
        kind => leaf(kind),
    }
}

/// Whether, on a cluster of gateways without a bus, a message posted to one node would
/// reach the HTTP clients of that node only.
pub fn node_local(config: &StreamConfig) -> bool {
    fed_by_http(&config.input) && serves_http(&config.output)
}

fn node_id(stream: &str, path: &str) -> String {
    format!("{stream}/{path}")
}

impl Stream {
    /// Builds every component; nothing runs and nothing is mounted if any fails. The error
    /// is the first of the stream's problems; [`Stream::validate`] reports them all.
    pub fn build(name: &str, config: &StreamConfig, env: &StreamEnv) -> Result<Stream, BuildError> {
        Self::build_all(name, config, env).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Checks everything building would check, on private routes, and reports every
    /// problem. Nothing connects, nothing runs and nothing outlives the call: components
    /// open connections and files when a stream starts, not when it is built.
    pub fn validate(name: &str, config: &StreamConfig, routes: &Arc<Routes>) -> Vec<BuildError> {
        Self::validate_over(name, config, routes, Arc::default())
    }

    /// [`Stream::validate`] for a stream whose file shares `resources`.
    pub fn validate_over(
        name: &str,
        config: &StreamConfig,
        routes: &Arc<Routes>,
        resources: Arc<Resources>,
    ) -> Vec<BuildError> {
        let env = StreamEnv {
            resources,
            ..StreamEnv::dry_run(routes)
        };
        Self::build_all(name, config, &env)
            .err()
            .unwrap_or_default()
    }

    /// [`Stream::validate`] for a stream posted by an organisation: literal addresses
    /// are checked against `policy`, and the named hosts the components would connect to
    /// come back for the caller to resolve and check.
    pub fn validate_posted(
        name: &str,
        config: &StreamConfig,
        routes: &Arc<Routes>,
        policy: Arc<EgressPolicy>,
    ) -> (Vec<BuildError>, Vec<EgressTarget>) {
        let env = StreamEnv::dry_run(routes).posted(policy);
        let cx = Self::context(name, &env);
        let errors = Self::build_in(name, config, &env, cx.clone())
            .err()
            .unwrap_or_default();
        // Nothing was started: what building mounted goes with the built stream.
        (errors, cx.egress_targets())
    }

    /// The context every component of a stream is built in.
    fn context(name: &str, env: &StreamEnv) -> BuildContext {
        BuildContext::new(name, env.routes.clone(), env.shutdown.child_token())
            .with_egress(env.egress.clone())
            .with_owner(env.owner.clone())
    }

    fn build_all(
        name: &str,
        config: &StreamConfig,
        env: &StreamEnv,
    ) -> Result<Stream, Vec<BuildError>> {
        Self::build_in(name, config, env, Self::context(name, env))
    }

    fn build_in(
        name: &str,
        config: &StreamConfig,
        env: &StreamEnv,
        cx: BuildContext,
    ) -> Result<Stream, Vec<BuildError>> {
        // Every client that may speak TLS (brokers, HTTP) is built below: settle the
        // process's rustls provider once, before any of them.
        crate::connect::tls::install_crypto_provider();
        let cancel = cx.lifecycle.shutdown.clone();
        let resources = config
            .resources
            .build(Some(env.resources.clone()), &cx, "")?;
        let cx = cx.with_resources(resources);
        let mut errors = Vec::new();
        let mut inputs = Vec::new();
        build_inputs(&config.input, "input", &cx, env, &mut inputs, &mut errors);
        let mut processors = Vec::new();
        for (i, p) in config.pipeline.processors.iter().enumerate() {
            let path = format!("pipeline.processors[{i}]");
            processors.extend(collect(build_processor(p, &path, &cx), &mut errors));
        }
        let wiring = HubWiring {
            bus: env.bus.clone().filter(|_| fed_by_http(&config.input)),
            history: inputs
                .first()
                .filter(|_| hands_on_unchanged(config))
                .and_then(|i| i.input.history()),
            hubs: env.hubs.clone(),
        };
        let output = build_output(&config.output, "output", &cx, env, &wiring, &mut errors);
        match output {
            Some(output) if errors.is_empty() => Ok(Stream {
                name: name.into(),
                inputs,
                processors,
                threads: config.pipeline.workers(),
                output,
                capacity: config.channel_capacity.max(1),
                readiness: env.readiness.clone(),
                health: env.health.clone(),
                labels: cx.stream_labels(),
                cancel,
                cpu: env.cpu.clone(),
                // Posted streams only: the operator's own record every span.
                spans: env.egress.as_ref().and_then(|_| {
                    crate::telemetry::org_budget(env.owner.as_ref().map_or("", |o| &o.org_id))
                }),
            }),
            _ => {
                env.routes.unmount_owned_by(&format!("{name}/"));
                env.readiness.remove_prefix(&format!("{name}/"));
                Err(errors)
            }
        }
    }

    /// The most batches one input's reads can have unsettled in this stream at once: the
    /// one it is handing over, a full channel before each node, one in each pipeline
    /// worker and router, and in each writer a flush filling up and `max_in_flight` being
    /// written. An input that sends failed batches again keeps to this many (see the input
    /// node), so it holds back only while some of them wait out their back-off.
    fn inflight_limit(&self) -> usize {
        let pipeline = if self.processors.is_empty() {
            0
        } else {
            self.capacity.saturating_add(pipeline::holds(self.threads))
        };
        1usize
            .saturating_add(self.capacity)
            .saturating_add(pipeline)
            .saturating_add(self.output.holds(self.capacity))
    }

    /// Spawns the stream's tasks.
    pub fn start(self) -> RunningStream {
        self.health.starting(
            &self.name,
            self.readiness.ids(&format!("{}/", self.name)),
            self.labels.clone(),
        );
        let mut tasks = Tasks::new(self.cpu.clone());
        tasks.spans = self.spans.clone();
        let span = info_span!("stream", stream = %self.name);
        // Messages reach the one writer as the input read them: a failed write can hand
        // them back (see the input node).
        let straight = self.processors.is_empty() && matches!(self.output, OutputTree::Writer(_));
        let (out_tx, out_rx) = mpsc::channel::<Transaction>(self.capacity);
        let inflight: Vec<_> = self.inputs.iter().map(|i| i.inflight.clone()).collect();
        let limit = self.inflight_limit();
        let input_task = |node: InputNode, tx: mpsc::Sender<Transaction>| {
            let node_span = info_span!(parent: &span, "node", component = %node.id, kind = "input");
            node.run(
                tx,
                self.cancel.clone(),
                self.readiness.clone(),
                straight,
                limit,
            )
            .instrument(node_span)
        };
        let mut inputs = self.inputs;
        match self.output {
            OutputTree::Writer(node) if straight && inputs.len() == 1 => {
                // One input writing to one output runs as one task: its batches stay on
                // one thread instead of crossing to another core at every hand-over.
                let output = writer_task(node, out_rx, &self.readiness, self.capacity, &span);
                let input = input_task(inputs.remove(0), out_tx);
                tasks.spawn(async move {
                    tokio::join!(output, input);
                });
            }
            output => {
                spawn_output(
                    output,
                    out_rx,
                    &mut tasks,
                    &self.readiness,
                    self.capacity,
                    &span,
                );
                let proc_tx = if self.processors.is_empty() {
                    out_tx
                } else {
                    let (tx, rx) = mpsc::channel(self.capacity);
                    let nodes = Arc::new(self.processors);
                    let pipeline_span = info_span!(parent: &span, "pipeline");
                    pipeline::spawn(nodes, rx, out_tx, self.threads, &mut tasks, &pipeline_span);
                    tx
                };
                for node in inputs {
                    tasks.spawn(input_task(node, proc_tx.clone()));
                }
            }
        }
        let active = crate::metrics::stream_active(&self.labels);
        active.set(1.0);
        RunningStream {
            name: self.name,
            tasks: tasks.set,
            inflight,
            cancel: self.cancel,
            health: self.health,
            labels: self.labels,
        }
    }
}

/// Keeps a build's value, or its error for the report.
fn collect<T>(result: Result<T, BuildError>, errors: &mut Vec<BuildError>) -> Option<T> {
    result.map_err(|e| errors.push(e)).ok()
}

impl OutputTree {
    /// The most batches of one input this part of the output can hold at once.
    fn holds(&self, capacity: usize) -> usize {
        match self {
            OutputTree::Writer(node) => {
                let flushes = node.writer.max_in_flight.max(1).saturating_add(1);
                flushes.saturating_mul(node.writer.batching.max_reads(capacity))
            }
            OutputTree::Router(_, children) => children.iter().fold(1, |n: usize, child| {
                n.saturating_add(capacity)
                    .saturating_add(child.holds(capacity))
            }),
        }
    }
}

fn build_inputs(
    config: &InputConfig,
    path: &str,
    cx: &BuildContext,
    env: &StreamEnv,
    out: &mut Vec<InputNode>,
    errors: &mut Vec<BuildError>,
) {
    let path = format!("{path}.{}", config.type_name());
    let cx = cx.for_component(
        path.clone(),
        config.display_name(&path),
        Kind::Input,
        config.type_name(),
    );
    let cx = match &config.kind {
        InputKind::Resource(r) => match cx.entering_resource(Kind::Input, &r.0) {
            Ok(cx) => cx,
            Err(e) => return errors.push(e),
        },
        _ => cx,
    };
    if let Some(label) = &config.label {
        collect(cx.claim_label(label), errors);
    }
    let Some(built) = collect(config.kind.build(&cx), errors) else {
        return;
    };
    let Some(built) = attach_to_input(built, config, &path, &cx, errors) else {
        return;
    };
    match built {
        InputBuild::Leaf(input) => {
            let id = node_id(&cx.id.stream, &config.display_name(&path));
            env.readiness.register(&id);
            out.push(InputNode {
                metrics: NodeMetrics::new(cx.metric_labels()),
                id,
                input,
                inflight: Arc::new(InFlight::default()),
                budget: env.budget.clone(),
                give_up: env.give_up.clone(),
                stream: cx.id.stream.clone(),
                halted: cx.lifecycle.halted.clone(),
                health: env.health.clone(),
                stream_labels: cx.stream_labels(),
            });
        }
        InputBuild::Merge(children) => {
            for (i, child) in children.iter().enumerate() {
                build_inputs(child, &format!("{path}.inputs[{i}]"), &cx, env, out, errors);
            }
        }
    }
}

/// The `processors` of an input or output, built at `{path}.processors`.
fn attached_chain(
    processors: &[ProcessorConfig],
    path: &str,
    cx: &BuildContext,
    errors: &mut Vec<BuildError>,
) -> Option<processor::chain::Chain> {
    collect(
        processor::chain::Chain::build(processors, cx, &format!("{path}.processors")),
        errors,
    )
}

/// Wraps an input leaf in its `processors`. A `broker`'s own processors apply to what
/// each of its inputs reads, after their own.
fn attach_to_input(
    built: InputBuild,
    config: &InputConfig,
    path: &str,
    cx: &BuildContext,
    errors: &mut Vec<BuildError>,
) -> Option<InputBuild> {
    if config.processors.is_empty() {
        return Some(built);
    }
    match built {
        InputBuild::Leaf(inner) => {
            let chain = attached_chain(&config.processors, path, cx, errors)?;
            Some(InputBuild::Leaf(Box::new(attached::ProcessedInput {
                inner,
                chain,
            })))
        }
        InputBuild::Merge(children) => Some(InputBuild::Merge(
            children
                .into_iter()
                .map(|mut child| {
                    child.processors.extend(config.processors.iter().cloned());
                    child
                })
                .collect(),
        )),
    }
}

/// Wraps an output (a writer, or a router before it routes) in its `processors`.
fn attach_to_output(
    built: OutputBuild,
    config: &OutputConfig,
    path: &str,
    cx: &BuildContext,
    errors: &mut Vec<BuildError>,
) -> Option<OutputBuild> {
    if config.processors.is_empty() {
        return Some(built);
    }
    let chain = attached_chain(&config.processors, path, cx, errors)?;
    Some(match built {
        OutputBuild::Writer(mut writer) => {
            let inner = std::mem::replace(&mut writer.output, Box::new(crate::output::drop::Drop));
            writer.output = Box::new(attached::ProcessedOutput { inner, chain });
            OutputBuild::Writer(writer)
        }
        OutputBuild::Router(inner, children) => OutputBuild::Router(
            Box::new(attached::ProcessedRouter { inner, chain }),
            children,
        ),
    })
}

/// Builds one processor with its metrics, as a pipeline node.
pub fn build_processor(
    config: &ProcessorConfig,
    path: &str,
    cx: &BuildContext,
) -> Result<ProcessorNode, BuildError> {
    let path = format!("{path}.{}", config.type_name());
    let name = config.display_name(&path);
    let cx = cx.for_component(path, name.clone(), Kind::Processor, config.type_name());
    if let Some(label) = &config.label {
        cx.claim_label(label)?;
    }
    let processor = config.kind.build(&cx)?;
    Ok(ProcessorNode {
        processor,
        metrics: NodeMetrics::new(cx.metric_labels()),
    })
}

/// Builds the output tree; its hub outputs get `wiring`.
fn build_output(
    config: &OutputConfig,
    path: &str,
    cx: &BuildContext,
    env: &StreamEnv,
    wiring: &HubWiring,
    errors: &mut Vec<BuildError>,
) -> Option<OutputTree> {
    let path = format!("{path}.{}", config.type_name());
    let name = config.display_name(&path);
    let cx = cx.for_component(path.clone(), name.clone(), Kind::Output, config.type_name());
    let cx = match &config.kind {
        OutputKind::Resource(r) => match cx.entering_resource(Kind::Output, &r.0) {
            Ok(cx) => cx,
            Err(e) => {
                errors.push(e);
                return None;
            }
        },
        _ => cx,
    };
    let metrics = NodeMetrics::new(cx.metric_labels());
    if let Some(label) = &config.label {
        collect(cx.claim_label(label), errors);
    }
    let built = collect(config.kind.build_wired(&cx, wiring), errors)?;
    match attach_to_output(built, config, &path, &cx, errors)? {
        OutputBuild::Writer(writer) => {
            let id = node_id(&cx.id.stream, &name);
            env.readiness.register(&id);
            Some(OutputTree::Writer(WriterNode {
                id,
                writer,
                metrics,
                tap: tap::of(&cx.id.stream),
                halted: cx.lifecycle.halted.clone(),
                stream: cx.id.stream.clone(),
                health: env.health.clone(),
            }))
        }
        OutputBuild::Router(router, children) => {
            // Every child is built, so that each one's problems are reported.
            let children: Vec<_> = children
                .iter()
                .map(|(child_path, child)| {
                    let sep = if child_path.starts_with('[') { "" } else { "." };
                    let path = format!("{path}{sep}{child_path}");
                    build_output(child, &path, &cx, env, wiring, errors)
                })
                .collect();
            let children = children.into_iter().collect::<Option<Vec<_>>>()?;
            Some(OutputTree::Router(
                RouterNodeParts { router, metrics },
                children,
            ))
        }
    }
}

fn spawn_output(
    tree: OutputTree,
    rx: mpsc::Receiver<Transaction>,
    tasks: &mut Tasks,
    readiness: &Arc<Readiness>,
    capacity: usize,
    span: &tracing::Span,
) {
    match tree {
        OutputTree::Writer(node) => {
            tasks.spawn(writer_task(node, rx, readiness, capacity, span));
        }
        OutputTree::Router(parts, children) => {
            let senders = children
                .into_iter()
                .map(|child| {
                    let (tx, child_rx) = mpsc::channel(capacity);
                    spawn_output(child, child_rx, tasks, readiness, capacity, span);
                    tx
                })
                .collect();
            let node = RouterNode {
                router: parts.router,
                children: senders,
                metrics: parts.metrics,
            };
            tasks.spawn(node.run(rx).instrument(span.clone()));
        }
    }
}

/// The run of one writer node, in its span.
fn writer_task(
    node: WriterNode,
    rx: mpsc::Receiver<Transaction>,
    readiness: &Arc<Readiness>,
    capacity: usize,
    span: &tracing::Span,
) -> impl std::future::Future<Output = ()> {
    let node_span = info_span!(parent: span, "node", component = %node.id, kind = "output");
    node.run(rx, readiness.clone(), capacity)
        .instrument(node_span)
}

/// A started stream.
pub struct RunningStream {
    name: Arc<str>,
    tasks: JoinSet<()>,
    inflight: Vec<Arc<InFlight>>,
    cancel: CancellationToken,
    health: Arc<health::Health>,
    labels: Vec<(&'static str, String)>,
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopReport {
    /// Batches that were still undelivered at the deadline.
    pub abandoned: usize,
}

impl RunningStream {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Batches read but not yet settled.
    pub fn in_flight(&self) -> usize {
        self.inflight.iter().map(|i| i.get()).sum()
    }

    /// Waits until the stream ends by itself (its inputs ran out and everything drained).
    pub async fn finished(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }

    /// Stops reading, drains in-flight messages for up to `timeout`, then aborts what is
    /// left and reports how many batches were abandoned.
    pub async fn stop(mut self, timeout: Duration) -> StopReport {
        self.cancel.cancel();
        let drained = tokio::time::timeout(timeout, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        let abandoned = if drained { 0 } else { self.in_flight() };
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        crate::metrics::stream_active(&self.labels).set(0.0);
        self.health.stopped(&self.name, None);
        StopReport { abandoned }
    }

    /// The token that stops this stream's inputs.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}
