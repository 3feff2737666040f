//! The stream manager of the gateway: runs the streams of every API that has
//! `x-sluice-streaming`, each API on a route table of its own, and keeps them in step with
//! the API table. A changed API restarts only the streams whose config changed, so the
//! clients of the others stay connected.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use http::StatusCode;
use parking_lot::RwLock;
use serde_json::Value;
use tracing::{error, info};

use super::api::Api;
use super::middleware::error;
use super::table::Table;
use crate::http::{self as h, HttpRequest, HttpResponse};
use crate::stream::manager::Manager;
use crate::stream::StreamEnv;

/// The running streams of one API.
struct ApiStreams {
    env: StreamEnv,
    /// The streams running, by name, with the config each was started from.
    running: tokio::sync::Mutex<(Manager, BTreeMap<String, Value>)>,
}

pub struct StreamHost {
    enabled: bool,
    drain: Duration,
    apis: RwLock<HashMap<String, Arc<ApiStreams>>>,
}

impl StreamHost {
    /// `drain` bounds how long a stopped stream may finish its in-flight messages.
    pub fn new(enabled: bool, drain: Duration) -> Self {
        StreamHost {
            enabled,
            drain,
            apis: RwLock::new(HashMap::new()),
        }
    }

    /// The stream middleware: the handler of the stream route `rest` of `api`, or the
    /// request back when no stream serves that path.
    // The request comes back by value: boxing it would cost every proxied request an
    // allocation.
    #[allow(clippy::result_large_err)]
    pub fn divert(
        &self,
        api: &Api,
        rest: &str,
        req: HttpRequest,
    ) -> Result<BoxFuture<'static, HttpResponse>, HttpRequest> {
        if api.streams.is_empty() {
            return Err(req);
        }
        let path = h::normalize(rest);
        if !self.enabled {
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
        match streams.env.routes.get(&path) {
            Some(handler) => Ok(handler.call(req)),
            None => Err(req),
        }
    }

    /// Brings the running streams in line with `table`: starts new and changed streams,
    /// stops removed and changed ones. Failures are logged; the API's other streams run.
    pub async fn sync(&self, table: &Table) {
        if !self.enabled {
            return;
        }
        let gone: Vec<(String, Arc<ApiStreams>)> = {
            let apis = self.apis.read();
            apis.iter()
                .filter(|(id, _)| table.get(id).is_none_or(|api| api.streams.is_empty()))
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect()
        };
        for (id, streams) in gone {
            self.apis.write().remove(&id);
            let mut running = streams.running.lock().await;
            let names: Vec<String> = running.1.keys().cloned().collect();
            for name in names {
                running.0.stop(&name, self.drain).await;
                info!(api_id = %id, stream = %name, "Stream stopped: its API is gone.");
            }
            running.1.clear();
        }
        for api in table.apis().filter(|a| !a.streams.is_empty()) {
            let streams = self
                .apis
                .write()
                .entry(api.id.clone())
                .or_insert_with(|| {
                    let env = StreamEnv::standalone();
                    Arc::new(ApiStreams {
                        running: tokio::sync::Mutex::new((
                            Manager::new(env.clone()),
                            BTreeMap::new(),
                        )),
                        env,
                    })
                })
                .clone();
            sync_api(api, &streams, self.drain).await;
        }
    }

    /// Stops every stream, each draining for up to the drain time.
    pub async fn stop_all(&self) {
        let all: Vec<Arc<ApiStreams>> = self.apis.write().drain().map(|(_, s)| s).collect();
        for streams in all {
            let mut running = streams.running.lock().await;
            let names: Vec<String> = running.1.keys().cloned().collect();
            for name in names {
                running.0.stop(&name, self.drain).await;
            }
            running.1.clear();
        }
    }
}

async fn sync_api(api: &Api, streams: &ApiStreams, drain: Duration) {
    let mut guard = streams.running.lock().await;
    let (manager, configs) = &mut *guard;
    let wanted: BTreeMap<&str, &super::api::streaming::ApiStream> =
        api.streams.iter().map(|s| (s.name.as_str(), s)).collect();
    // Stop what went or changed first, so that a changed stream's paths are free.
    let stale: Vec<String> = configs
        .iter()
        .filter(|(name, raw)| wanted.get(name.as_str()).is_none_or(|s| &s.raw != *raw))
        .map(|(name, _)| name.clone())
        .collect();
    for name in stale {
        manager.stop(&stream_name(&api.id, &name), drain).await;
        configs.remove(&name);
        info!(api_id = %api.id, stream = %name, "Stream stopped.");
    }
    for (name, stream) in wanted {
        if configs.contains_key(name) {
            continue;
        }
        match manager.start(&stream_name(&api.id, name), &stream.config) {
            Ok(()) => {
                configs.insert(name.to_owned(), stream.raw.clone());
                info!(api_id = %api.id, stream = %name, "Stream started.");
            }
            Err(e) => {
                error!(api_id = %api.id, stream = %name, error = %e, "Stream failed to start.");
            }
        }
    }
}

/// A stream's name in logs and metrics: the API id and the stream's own name.
fn stream_name(api_id: &str, stream: &str) -> String {
    format!("{api_id}.{stream}")
}
