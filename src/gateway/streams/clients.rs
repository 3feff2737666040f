//! Per-client stream instances: a stream with `$sluice_context.` placeholders runs one
//! instance per distinct set of resolved values, started by the first request that needs
//! it, stopped once no client has used it for the idle time, and capped in number.
//!
//! An organisation's quota is held under concurrency: an instance takes its place in
//! its organisation's count (one lock for the look and the increment) before it is
//! built, and keeps it until it has stopped, so first requests arriving together on
//! every serving thread cannot start more than the quota between them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use parking_lot::Mutex;
use serde_json::Value;
use tracing::{info, warn};

use crate::apidef::node_of;
use crate::apidef::streaming::ApiStream;
use crate::component::cpu::CpuShare;
use crate::config::yaml::Document;
use crate::egress::EgressPolicy;
use crate::gateway::api::Api;
use crate::gateway::reply::error;
use crate::http::{self as h, HttpResponse};
use crate::stream::budget::MemoryBudget;
use crate::stream::config::stream_from_node;
use crate::stream::failures::GiveUp;
use crate::stream::{RunningStream, Stream, StreamEnv};

/// One running instance.
pub struct Instance {
    pub env: StreamEnv,
    stream: String,
    running: Mutex<Option<RunningStream>>,
    usage: Arc<Usage>,
    /// Its place in its organisation's count, given back once it is dropped (stopped).
    _slot: Slot,
}

/// The per-client instances one organisation's APIs run, all APIs together.
#[derive(Default)]
pub struct OrgInstances {
    count: Mutex<usize>,
}

impl OrgInstances {
    /// A place for one more instance, or `None` when `quota` (if any) is reached. The
    /// count is read and raised under one lock, so two callers cannot both take the
    /// last place.
    pub fn take(self: &Arc<Self>, quota: Option<usize>) -> Option<Slot> {
        let mut count = self.count.lock();
        if quota.is_some_and(|quota| *count >= quota) {
            return None;
        }
        *count += 1;
        Some(Slot(self.clone()))
    }

    /// The instances running (or starting, or stopping) now.
    pub fn len(&self) -> usize {
        *self.count.lock()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One instance's place in its organisation's count.
pub struct Slot(Arc<OrgInstances>);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut count = self.0.count.lock();
        *count = count.saturating_sub(1);
    }
}

impl Instance {
    /// Counts a request as active until the returned guard (kept by its response body)
    /// drops.
    pub fn enter(&self) -> Active {
        self.usage.enter()
    }
}

/// Who uses an instance: the requests and open responses now (an SSE connection counts
/// until it closes), and when the last one came or went.
struct Usage {
    active: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl Usage {
    fn new() -> Arc<Self> {
        Arc::new(Usage {
            active: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        })
    }

    fn enter(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::SeqCst);
        *self.last_used.lock() = Instant::now();
        Active(self.clone())
    }

    /// Whether no one has used the instance for `idle`. The idle time runs from the last
    /// client's leaving, not its arrival: a client connected for longer than `idle` keeps
    /// its instance for `idle` after it goes, so that its reconnect finds it.
    fn idle_for(&self, idle: Duration) -> bool {
        // The lock is taken first: a client leaving sets the time under it, after its
        // count went down.
        let last_used = self.last_used.lock();
        self.active.load(Ordering::SeqCst) == 0 && last_used.elapsed() >= idle
    }
}

/// Holds an instance active.
pub struct Active(Arc<Usage>);

impl Drop for Active {
    fn drop(&mut self) {
        let mut last_used = self.0.last_used.lock();
        self.0.active.fetch_sub(1, Ordering::SeqCst);
        *last_used = Instant::now();
    }
}

/// What bounds the instances of one API.
pub struct Limits {
    /// Instances the API may run at once.
    pub api: usize,
    /// The instances the organisation's APIs run, which a new one is counted in.
    pub org: Arc<OrgInstances>,
    /// The organisation's quota on instances, for an API it posted.
    pub org_quota: Option<usize>,
    /// The organisation's in-flight memory, which new instances share.
    pub budget: Option<Arc<MemoryBudget>>,
    /// The organisation's CPU share, which new instances are held to.
    pub cpu: Option<Arc<CpuShare>>,
    /// When the instances' inputs stop trying to connect.
    pub give_up: Option<GiveUp>,
    /// Where the instances of a posted API may connect.
    pub egress: Arc<EgressPolicy>,
}

/// The instances of one API, by stream and resolved config.
#[derive(Default)]
pub struct Clients {
    instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
}

impl Clients {
    /// The instance of `stream` for `resolved`, started if there is none; a 4xx or 503
    /// answer when it cannot be.
    pub fn get_or_start(
        &self,
        api: &Api,
        stream: &ApiStream,
        resolved: &Value,
        limits: &Limits,
    ) -> Result<Arc<Instance>, HttpResponse> {
        let key = (stream.name.clone(), resolved.to_string());
        let mut instances = self.instances.lock();
        if let Some(found) = instances.get(&key) {
            return Ok(found.clone());
        }
        // Taken before anything is built and kept by the instance: a refusal below, or a
        // build that fails, gives it back as it drops.
        let Some(slot) = limits.org.take(limits.org_quota) else {
            let quota = limits.org_quota.unwrap_or_default();
            warn!(api_id = %api.id, stream = %stream.name, quota, "Per-client stream refused: the organisation's quota is reached.");
            return Err(error(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("the organisation's quota of {quota} per-client stream instances (`max_client_streams`) is reached; try again once one is idle"),
            ));
        };
        if instances.len() >= limits.api {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many per-client streams run for this API; try again later",
            ));
        }
        let doc = Document {
            file: format!("{} ({})", api.source, stream.name).into(),
            root: node_of(resolved),
        };
        let path = format!("x-sluice-streaming.streams.{}", stream.name);
        let read = || stream_from_node(&doc, &doc.root, &path);
        // Definitions that came as data keep their mappings away from the host.
        let config = if api.posted() {
            crate::config::mapped::sandboxed(read)
        } else {
            read()
        }
        .map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))?;
        // Instances share their stream's name: their health is each one's own, not the
        // process's (the API's status counts them).
        let mut env = StreamEnv::standalone()
            .with_owner(&api.id, &api.org_id)
            .with_budget(limits.budget.clone())
            .with_cpu(limits.cpu.clone())
            .with_give_up(limits.give_up.clone())
            .with_health(Arc::default());
        if api.posted() {
            env = env.posted(limits.egress.clone());
        }
        let name = format!("{}.{}", api.id, stream.name);
        let built = Stream::build(&name, &config, &env)
            .map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))?;
        info!(api_id = %api.id, stream = %stream.name, "Per-client stream started.");
        let instance = Arc::new(Instance {
            env,
            stream: stream.name.clone(),
            running: Mutex::new(Some(built.start())),
            usage: Usage::new(),
            _slot: slot,
        });
        instances.insert(key, instance.clone());
        Ok(instance)
    }

    /// Stops the instances idle for longer than `idle`, or every instance of the streams
    /// `only` names (they changed or went).
    pub async fn stop(&self, idle: Option<Duration>, only: &[String], drain: Duration) {
        let stopping: Vec<Arc<Instance>> = {
            let mut instances = self.instances.lock();
            let mut out = Vec::new();
            instances.retain(|(stream, _), inst| {
                let idle_out = idle.is_some_and(|idle| inst.usage.idle_for(idle));
                let keep = !idle_out && !only.contains(stream);
                if !keep {
                    out.push(inst.clone());
                }
                keep
            });
            out
        };
        for inst in stopping {
            let running = inst.running.lock().take();
            if let Some(running) = running {
                running.stop(drain).await;
            }
            info!(stream = %inst.stream, "Per-client stream stopped.");
        }
    }

    pub fn len(&self) -> usize {
        self.instances.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `resp` with its body holding `active` until the body ends or is dropped.
pub fn tracked(resp: HttpResponse, active: Active) -> HttpResponse {
    resp.map(|body| {
        h::boxed(Tracked {
            inner: body,
            _active: active,
        })
    })
}

struct Tracked {
    inner: h::Body,
    _active: Active,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = h::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, h::BoxError>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_taking_places_together_get_no_more_than_the_quota() {
        let org = Arc::new(OrgInstances::default());
        let barrier = Arc::new(std::sync::Barrier::new(16));
        let taken: Vec<Option<Slot>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    let (org, barrier) = (org.clone(), barrier.clone());
                    s.spawn(move || {
                        barrier.wait();
                        org.take(Some(5))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(taken.iter().filter(|t| t.is_some()).count(), 5);
        assert_eq!(org.len(), 5);
        // A place is given back when its instance goes; without a quota there is no cap.
        drop(taken);
        assert!(org.is_empty());
        let all: Vec<_> = (0..8).map(|_| org.take(None)).collect();
        assert!(all.iter().all(Option::is_some));
    }

    #[test]
    fn the_idle_time_runs_from_the_last_client_leaving() {
        let idle = Duration::from_millis(50);
        let usage = Usage::new();
        assert!(!usage.idle_for(idle), "a new instance is not idle");
        let first = usage.enter();
        let second = usage.enter();
        // Connected for longer than the idle time.
        std::thread::sleep(idle * 2);
        assert!(!usage.idle_for(idle), "an instance in use is never idle");
        drop(first);
        assert!(!usage.idle_for(idle), "one client is still there");
        drop(second);
        assert!(
            !usage.idle_for(idle),
            "the last client just left: the instance stays for the idle time"
        );
        std::thread::sleep(idle * 2);
        assert!(
            usage.idle_for(idle),
            "no one came back within the idle time"
        );
    }
}
