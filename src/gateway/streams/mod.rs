//! The stream manager of the gateway: runs the streams of every API that has
//! `x-sluice-streaming`, each API on a route table of its own, and keeps them in step with
//! the API table. A changed API restarts only the streams whose config changed, so the
//! clients of the others stay connected. Streams with `$sluice_context.` placeholders
//! run per client (see [`clients`]).

// Requests and refusals travel by value: boxing them would cost every request an
// allocation.
#![allow(clippy::result_large_err)]

mod changes;
pub mod clients;
pub mod cluster;
pub mod context;
pub mod leases;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use http::StatusCode;
use parking_lot::RwLock;
use serde_json::Value;
use tracing::{error, info};

use super::api::Api;
use super::reply::error;
use crate::component::cpu::CpuShare;
use crate::egress::EgressPolicy;
use crate::http::{self as h, HttpRequest, HttpResponse};
use crate::stream::budget::MemoryBudget;
use crate::stream::failures::GiveUp;
use crate::stream::manager::Manager;
use crate::stream::StreamEnv;

/// How long a changed stream's new version may take to start, beyond the old one's drain,
/// while requests for its routes wait.
const CHANGE_START: Duration = Duration::from_secs(5);

/// The running streams of one API.
struct ApiStreams {
    /// The organisation that owns the API, whose quotas its streams count against.
    org: String,
    env: StreamEnv,
    /// The streams running, by name, with the config each was started from.
    running: tokio::sync::Mutex<(Manager, BTreeMap<String, Value>)>,
    /// The per-client instances, and the config each per-client stream had.
    clients: clients::Clients,
    templates: parking_lot::Mutex<BTreeMap<String, Value>>,
    /// The serving thread each running stream is on (its index, see [`serving_thread`],
    /// and its runtime), by stream name.
    homes: RwLock<HashMap<String, (usize, tokio::runtime::Handle)>>,
    /// The changes of the API's streams being applied, and the requests they wait for.
    changes: changes::Changes,
}

thread_local! {
    /// Which serving thread this is, an index into [`StreamHost::run_on`]'s runtimes.
    static SERVING: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Marks the calling thread as the serving thread with this index (before it gives its
/// runtime to [`StreamHost::run_on`]).
pub fn serving_thread(index: usize) {
    SERVING.set(Some(index));
}

/// How the stream manager runs streams.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    pub enabled: bool,
    /// How long a stopped stream may finish its in-flight messages.
    pub drain: Duration,
    /// Per-client instances an API may run at once.
    pub max_client_streams: usize,
    /// A per-client instance no client used for this long is stopped.
    pub client_idle_timeout: Duration,
    /// Per-client instances one organisation's APIs may run at once, together.
    pub org_max_client_streams: usize,
    /// Bytes one organisation's streams may hold in flight, together.
    pub org_max_inflight_bytes: usize,
    /// Cores one organisation's posted streams may use, together.
    pub org_cpu_share: f64,
    /// Failed connections in a row after which an input of a posted stream gives up.
    pub max_connect_failures: u32,
    /// Where the streams of posted APIs may connect (`streaming.egress`).
    pub egress: Arc<EgressPolicy>,
    /// This node's name in the cluster ([`cluster::node_id`]).
    pub node: String,
    /// The cluster's bus (`cluster.bus`), for the streams fed by HTTP clients.
    pub bus: Option<Arc<dyn crate::component::bus::Bus>>,
}

pub struct StreamHost {
    settings: StreamSettings,
    /// Where a stream that fails to start is reported (`stream_error`).
    events: crate::gateway::events::EventBus,
    apis: RwLock<HashMap<String, Arc<ApiStreams>>>,
    /// The runtimes of the serving threads: streams run there, beside the requests
    /// that feed and read them, instead of a thread away.
    /// Each with the index its thread was marked with ([`serving_thread`]).
    runtimes: RwLock<Vec<(usize, tokio::runtime::Handle)>>,
    next_runtime: std::sync::atomic::AtomicUsize,
    /// Each organisation's in-flight memory, shared by all its streams.
    budgets: parking_lot::Mutex<HashMap<String, Arc<MemoryBudget>>>,
    /// Each organisation's CPU share, shared by all its posted streams.
    cpu: parking_lot::Mutex<HashMap<String, Arc<CpuShare>>>,
    /// The per-client instances each organisation's APIs run, counted where they start.
    instances: parking_lot::Mutex<HashMap<String, Arc<clients::OrgInstances>>>,
    /// The open connections a key or a token let in, reviewed for as long as they last.
    pub leases: leases::Leases,
}

impl StreamHost {
    pub fn new(events: crate::gateway::events::EventBus, settings: StreamSettings) -> Self {
        StreamHost {
            settings,
            events,
            apis: RwLock::new(HashMap::new()),
            runtimes: RwLock::new(Vec::new()),
            next_runtime: std::sync::atomic::AtomicUsize::new(0),
            budgets: parking_lot::Mutex::new(HashMap::new()),
            cpu: parking_lot::Mutex::new(HashMap::new()),
            instances: parking_lot::Mutex::new(HashMap::new()),
            leases: leases::Leases::default(),
        }
    }

    /// The in-flight memory of organisation `org`'s streams.
    fn budget(&self, org: &str) -> Arc<MemoryBudget> {
        self.budgets
            .lock()
            .entry(org.to_owned())
            .or_insert_with(|| MemoryBudget::new(self.settings.org_max_inflight_bytes))
            .clone()
    }

    /// The CPU share of organisation `org`'s posted streams.
    fn cpu(&self, org: &str) -> Arc<CpuShare> {
        self.cpu
            .lock()
            .entry(org.to_owned())
            .or_insert_with(|| {
                CpuShare::new(
                    self.settings.org_cpu_share,
                    vec![("org_id", org.to_owned())],
                )
            })
            .clone()
    }

    /// The count of the per-client instances organisation `org`'s APIs run.
    fn org_instances(&self, org: &str) -> Arc<clients::OrgInstances> {
        self.instances
            .lock()
            .entry(org.to_owned())
            .or_default()
            .clone()
    }

    /// Where the streams of posted APIs may connect.
    pub fn egress(&self) -> Arc<EgressPolicy> {
        self.settings.egress.clone()
    }

    /// Where streams started from now on run: the serving threads' runtimes, in turn,
    /// each with the index its thread was marked with by [`serving_thread`].
    pub fn run_on(&self, runtimes: Vec<(usize, tokio::runtime::Handle)>) {
        *self.runtimes.write() = runtimes;
    }

    /// The runtime for the next stream and its thread's index, if serving threads gave
    /// theirs.
    fn runtime(&self) -> Option<(usize, tokio::runtime::Handle)> {
        let runtimes = self.runtimes.read();
        if runtimes.is_empty() {
            return None;
        }
        let i = self
            .next_runtime
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(runtimes[i % runtimes.len()].clone())
    }

    /// The runtime a connection whose first request is for `path` (routed to `api`) is
    /// best served on: that of the stream serving the path, when it runs on another serving thread than this.
    /// Its requests and the stream then meet on one thread, with no wake-up across
    /// threads per message.
    pub fn home(&self, api: &Api, path: &str) -> Option<tokio::runtime::Handle> {
        if !self.settings.enabled || api.streams.is_empty() {
            return None;
        }
        let rest = h::normalize(api.below(path)?);
        let stream = api
            .streams
            .iter()
            .find(|s| !s.per_client && s.paths.contains(&rest))?;
        let streams = self.apis.read().get(&api.id)?.clone();
        let homes = streams.homes.read();
        let (index, handle) = homes.get(&stream.name)?;
        (SERVING.get() != Some(*index)).then(|| handle.clone())
    }

    /// Stops the per-client instances that no client used for the idle time.
    pub async fn collect_idle(&self) {
        let all: Vec<Arc<ApiStreams>> = self.apis.read().values().cloned().collect();
        for streams in all {
            streams
                .clients
                .stop(
                    Some(self.settings.client_idle_timeout),
                    &[],
                    self.settings.drain,
                )
                .await;
        }
    }

    /// The streams of `api_id` that stopped for good, with why.
    pub fn failed_streams(&self, api_id: &str) -> BTreeMap<String, String> {
        let Some(streams) = self.apis.read().get(api_id).cloned() else {
            return BTreeMap::new();
        };
        let Some(give_up) = &streams.env.give_up else {
            return BTreeMap::new();
        };
        // Recorded under the full stream name; shown under the API's own.
        let prefix = format!("{api_id}.");
        give_up
            .failures
            .list()
            .into_iter()
            .map(|(name, why)| (name.strip_prefix(&prefix).unwrap_or(&name).to_owned(), why))
            .collect()
    }

    /// The API and stream a health change is about, with the event's message; `None` for
    /// a stream of no API here, or a change that raises no event.
    pub(crate) fn health_event(
        &self,
        change: &crate::stream::health::Change,
    ) -> Option<(String, String, String)> {
        let apis = self.apis.read();
        // The longest API id the name starts with: ids may hold dots.
        let api_id = apis
            .keys()
            .filter(|id| {
                change
                    .stream
                    .strip_prefix(id.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
            })
            .max_by_key(|id| id.len())?
            .clone();
        let stream = change.stream[api_id.len() + 1..].to_owned();
        let message = health_message(&stream, change)?;
        Some((api_id, stream, message))
    }

    /// The state of each of `api_id`'s streams `names` that runs on this gateway.
    pub fn states<'a>(
        &self,
        api_id: &str,
        names: impl Iterator<Item = &'a str>,
    ) -> BTreeMap<String, &'static str> {
        let Some(streams) = self.apis.read().get(api_id).cloned() else {
            return BTreeMap::new();
        };
        let health = &streams.env.health;
        names
            .filter_map(|name| {
                let state = health.get(&stream_name(api_id, name))?.state;
                Some((name.to_owned(), state.as_str()))
            })
            .collect()
    }

    /// The per-client instances running for `api_id`.
    pub fn client_streams(&self, api_id: &str) -> usize {
        self.apis.read().get(api_id).map_or(0, |s| s.clients.len())
    }

    /// The stream middleware: the handler of the stream route `rest` of `api`, or the
    /// request back when no stream serves that path.
    pub fn divert(
        &self,
        api: &Api,
        rest: &str,
        req: HttpRequest,
        caller: &context::Caller<'_>,
    ) -> Result<BoxFuture<'static, HttpResponse>, HttpRequest> {
        if api.streams.is_empty() {
            return Err(req);
        }
        let path = h::normalize(rest);
        if !self.settings.enabled {
            if api.stream_paths.contains(&path) {
                let resp = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "streaming is disabled on this gateway (set `streaming.enabled: true` or SLUICE_GW_STREAMING_ENABLED=true)",
                );
                return Ok(async move { resp }.boxed());
            }
            return Err(req);
        }
        let Some(streams) = self.apis.read().get(&api.id).cloned() else {
            return Err(req);
        };
        if let Some(stream) = api
            .streams
            .iter()
            .find(|s| s.per_client && s.paths.contains(&path))
        {
            let resolved = match context::resolve(&stream.raw, &req, caller) {
                Ok(v) => v,
                Err(e) => {
                    let resp = error(StatusCode::BAD_REQUEST, &e);
                    return Ok(async move { resp }.boxed());
                }
            };
            let limits = clients::Limits {
                api: self.settings.max_client_streams,
                org: self.org_instances(&streams.org),
                org_quota: api.posted().then_some(self.settings.org_max_client_streams),
                budget: streams.env.budget.clone(),
                cpu: streams.env.cpu.clone(),
                give_up: streams.env.give_up.clone(),
                egress: self.settings.egress.clone(),
            };
            let instance = match streams
                .clients
                .get_or_start(api, stream, &resolved, &limits)
            {
                Ok(i) => i,
                Err(resp) => return Ok(async move { resp }.boxed()),
            };
            let Some(handler) = instance.env.routes.get(&path) else {
                return Err(req);
            };
            let active = instance.enter();
            let served = self.call(handler.as_ref(), api, rest, req, caller);
            return Ok(async move { clients::tracked(served.await, active) }.boxed());
        }
        // A publish is counted until answered, so that a change of its stream waits for
        // it; a GET may stay open, on a hub that outlives the change.
        let served = (req.method() != http::Method::GET).then(|| streams.changes.serve());
        match streams.env.routes.get(&path) {
            Some(handler) => {
                let answer = self.call(handler.as_ref(), api, rest, req, caller);
                Ok(match served {
                    Some(served) => async move {
                        let resp = answer.await;
                        drop(served);
                        resp
                    }
                    .boxed(),
                    None => answer,
                })
            }
            // A stream being changed has taken its routes down until its new version is
            // up: its requests wait for that instead of missing.
            None if streams.changes.is_changing() && api.stream_paths.contains(&path) => {
                drop(served);
                let handler =
                    streams
                        .changes
                        .after(streams.env.routes.clone(), path, self.change_wait());
                Ok(self.call(&handler, api, rest, req, caller))
            }
            None => Err(req),
        }
    }

    /// How long a request waits for a stream being changed: its old version's drain and
    /// a start.
    fn change_wait(&self) -> Duration {
        self.settings.drain + CHANGE_START
    }

    /// `handler`'s answer to `req`, held to a lease: the connection ends once the lease no
    /// longer holds ([`leases`]). A WebSocket finds the lease's ending in the request; any
    /// other answer's body is ended by it.
    fn call(
        &self,
        handler: &dyn h::Handler,
        api: &Api,
        rest: &str,
        mut req: HttpRequest,
        caller: &context::Caller<'_>,
    ) -> BoxFuture<'static, HttpResponse> {
        let token_expires = caller
            .claims
            .and_then(|c| c.get("exp"))
            .and_then(Value::as_f64)
            .map(|exp| exp as i64);
        // Only a GET stays open (an event stream, a long poll, a WebSocket); a publish
        // is answered at once and needs no lease.
        if req.method() != http::Method::GET {
            return handler.call(req);
        }
        let ending = self.leases.open(leases::Terms {
            api_id: api.id.clone(),
            key_id: caller.key_id.map(str::to_owned),
            method: req.method().clone(),
            rest: rest.to_owned(),
            token_expires,
            authenticated: caller.key_id.is_some()
                || caller.identity.is_some()
                || caller.claims.is_some(),
            key_meta: caller.meta.map(leases::meta_print),
        });
        req.extensions_mut().insert(ending.clone());
        // Who the client is, for an output that filters per client (`@caller`).
        req.extensions_mut()
            .insert(crate::http::caller::Caller::from(caller));
        let answer = handler.call(req);
        async move {
            let resp = answer.await;
            if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                resp
            } else {
                crate::http::ending::govern(resp, ending)
            }
        }
        .boxed()
    }

    /// Brings the running streams in line with `served` (the APIs of the table): starts
    /// new and changed streams, stops removed and changed ones. Failures are logged; the
    /// API's other streams run.
    pub async fn sync(&self, served: &[Arc<Api>]) {
        if !self.settings.enabled {
            return;
        }
        let streaming: HashSet<&str> = served
            .iter()
            .filter(|api| !api.streams.is_empty())
            .map(|api| api.id.as_str())
            .collect();
        let gone: Vec<(String, Arc<ApiStreams>)> = {
            let apis = self.apis.read();
            apis.iter()
                .filter(|(id, _)| !streaming.contains(id.as_str()))
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect()
        };
        for (id, streams) in gone {
            self.apis.write().remove(&id);
            streams.stop(&id, self.settings.drain).await;
            info!(api_id = %id, "Streams stopped: their API is gone.");
        }
        for api in served.iter().filter(|a| !a.streams.is_empty()) {
            // An API that moved between a file and the store runs under the other
            // policy: its streams start again in a new environment.
            let moved = self
                .apis
                .read()
                .get(&api.id)
                .filter(|s| s.env.egress.is_some() != api.posted())
                .cloned();
            if let Some(old) = moved {
                self.apis.write().remove(&api.id);
                old.stop(&api.id, self.settings.drain).await;
            }
            let budget = api.posted().then(|| self.budget(&api.org_id));
            let cpu = api.posted().then(|| self.cpu(&api.org_id));
            let streams =
                self.apis
                    .write()
                    .entry(api.id.clone())
                    .or_insert_with(|| {
                        let give_up = api.posted().then(|| GiveUp {
                            after: self.settings.max_connect_failures,
                            failures: Arc::default(),
                        });
                        let mut env =
                            StreamEnv::standalone()
                                .with_owner(&api.id, &api.org_id)
                                .with_budget(budget)
                                .with_cpu(cpu)
                                .with_give_up(give_up)
                                .with_bus(self.settings.bus.clone().map(|bus| {
                                    crate::component::bus::Scoped::wrap(bus, &api.org_id)
                                }));
                        if api.posted() {
                            env = env.posted(self.settings.egress.clone());
                        }
                        // Hubs outlive a change of their stream, so its clients stay.
                        let env = env.with_hubs(Arc::default());
                        Arc::new(ApiStreams {
                            org: api.org_id.clone(),
                            running: tokio::sync::Mutex::new((
                                Manager::new(env.clone()),
                                BTreeMap::new(),
                            )),
                            env,
                            clients: clients::Clients::default(),
                            templates: parking_lot::Mutex::new(BTreeMap::new()),
                            homes: RwLock::new(HashMap::new()),
                            changes: changes::Changes::default(),
                        })
                    })
                    .clone();
            sync_api(api, &streams, &self.settings, &self.events, || {
                self.runtime()
            })
            .await;
        }
    }

    /// Stops every stream, each draining for up to the drain time.
    pub async fn stop_all(&self) {
        let all: Vec<(String, Arc<ApiStreams>)> = self.apis.write().drain().collect();
        for (id, streams) in all {
            streams.stop(&id, self.settings.drain).await;
        }
    }
}

impl ApiStreams {
    /// Stops every stream of the API, per-client instances included.
    async fn stop(&self, api_id: &str, drain: Duration) {
        let templates: Vec<String> = self.templates.lock().keys().cloned().collect();
        self.clients.stop(None, &templates, drain).await;
        let mut running = self.running.lock().await;
        let (manager, configs) = &mut *running;
        for name in std::mem::take(configs).into_keys() {
            let full = stream_name(api_id, &name);
            manager.stop(&full, drain).await;
            manager.env().health.forget(&full);
        }
    }
}

async fn sync_api(
    api: &Api,
    streams: &ApiStreams,
    settings: &StreamSettings,
    events: &crate::gateway::events::EventBus,
    runtime: impl Fn() -> Option<(usize, tokio::runtime::Handle)>,
) {
    // Per-client streams whose template changed or went lose their instances.
    let changed: Vec<String> = {
        let mut templates = streams.templates.lock();
        let now: BTreeMap<String, Value> = api
            .streams
            .iter()
            .filter(|s| s.per_client)
            .map(|s| (s.name.clone(), s.raw.clone()))
            .collect();
        let changed = templates
            .iter()
            .filter(|(name, raw)| now.get(*name) != Some(*raw))
            .map(|(name, _)| name.clone())
            .collect();
        *templates = now;
        changed
    };
    if !changed.is_empty() {
        streams.clients.stop(None, &changed, settings.drain).await;
    }
    let mut guard = streams.running.lock().await;
    let (manager, configs) = &mut *guard;
    let wanted: BTreeMap<&str, &crate::apidef::streaming::ApiStream> = api
        .streams
        .iter()
        .filter(|s| !s.per_client)
        .map(|s| (s.name.as_str(), s))
        .collect();
    // Stop what went or changed first, so that a changed stream's paths are free.
    let stale: Vec<String> = configs
        .iter()
        .filter(|(name, raw)| wanted.get(name.as_str()).is_none_or(|s| &s.raw != *raw))
        .map(|(name, _)| name.clone())
        .collect();
    // A changed stream is swapped for its new version: its hubs, with their clients,
    // wait for the new version, and so do requests for its routes, which come down
    // before the old version drains (so that none reaches a stream that is stopping).
    let changed: Vec<String> = stale
        .iter()
        .filter(|name| wanted.contains_key(name.as_str()))
        .cloned()
        .collect();
    let hubs = streams.env.hubs.clone().unwrap_or_default();
    if !changed.is_empty() {
        streams.changes.begin();
        for name in &changed {
            let full = stream_name(&api.id, name);
            hubs.hold(&full);
            manager.env().routes.unmount_owned_by(&format!("{full}/"));
        }
        streams.changes.quiesce(settings.drain).await;
    }
    for name in stale {
        manager
            .stop(&stream_name(&api.id, &name), settings.drain)
            .await;
        if let Some(give_up) = &streams.env.give_up {
            give_up.failures.clear(&stream_name(&api.id, &name));
        }
        manager.env().health.forget(&stream_name(&api.id, &name));
        configs.remove(&name);
        streams.homes.write().remove(&name);
        info!(api_id = %api.id, stream = %name, "Stream stopped.");
    }
    for (name, stream) in wanted {
        if configs.contains_key(name) {
            continue;
        }
        // The stream's tasks are spawned on the runtime entered here.
        let home = runtime();
        let started = {
            let _entered = home.as_ref().map(|(_, h)| h.enter());
            let config =
                cluster::for_node(&stream.config, &settings.node, &stream_name(&api.id, name));
            manager.start(&stream_name(&api.id, name), &config)
        };
        match started {
            Ok(()) => {
                configs.insert(name.to_owned(), stream.raw.clone());
                if let Some(home) = home {
                    streams.homes.write().insert(name.to_owned(), home);
                }
                info!(api_id = %api.id, stream = %name, "Stream started.");
            }
            Err(e) => {
                if changed.iter().any(|c| c == name) {
                    count_change(&api.id, "failed");
                }
                error!(api_id = %api.id, stream = %name, error = %e, "Stream failed to start.");
                events.publish(
                    crate::gateway::events::EventKind::StreamError,
                    &api.id,
                    None,
                    name,
                    format!("stream `{name}` failed to start: {e}"),
                );
            }
        }
    }
    for name in &changed {
        let settled = hubs.settle(&stream_name(&api.id, name));
        if configs.contains_key(name) {
            let outcome = if settled.retired == 0 {
                "live"
            } else {
                "clients_ended"
            };
            count_change(&api.id, outcome);
            info!(api_id = %api.id, stream = %name, hubs_kept = settled.kept, hubs_retired = settled.retired, "Stream changed.");
        }
    }
    if !changed.is_empty() {
        streams.changes.end();
    }
}

/// Counts a change of one of `api_id`'s streams (`live`, `clients_ended`, `failed`).
fn count_change(api_id: &str, outcome: &'static str) {
    metrics::counter!(crate::metrics::STREAM_CHANGES, "api_id" => api_id.to_owned(), "outcome" => outcome)
        .increment(1);
}

/// What a `stream_error` event says of a change, if it says anything.
fn health_message(stream: &str, change: &crate::stream::health::Change) -> Option<String> {
    use crate::stream::health::State;
    let why = change
        .health
        .last_error
        .as_deref()
        .unwrap_or("no error recorded");
    match (change.from, change.health.state) {
        (_, State::Failing) => Some(format!("stream `{stream}` is failing: {why}")),
        (State::Failing, State::Stopped) => {
            Some(format!("stream `{stream}` stopped after failing: {why}"))
        }
        (State::Failing, State::Running) => Some(format!(
            "stream `{stream}` recovered ({} recoveries so far)",
            change.health.recoveries
        )),
        _ => None,
    }
}

/// Whether an API came as data (through the dashboard or the gateway's API), so that
/// its organisation's quotas apply; the operator's own files are trusted.
/// A stream's name in logs and metrics: the API id and the stream's own name.
fn stream_name(api_id: &str, stream: &str) -> String {
    format!("{api_id}.{stream}")
}
