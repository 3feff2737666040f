//! The gateway (`sluice gateway`): serves APIs defined as OpenAPI documents with
//! `x-sluice-api-gateway`, runs each request through the steps of its API and proxies
//! what no step answered to the API's upstream (the phases in order: `request`). Its own
//! API, under `/sluice/`, manages keys and reloads; `/ping`, `/ready` and `/metrics`
//! report on it.

pub mod admin;
pub mod api;
pub mod auth;
pub mod config;
pub mod events;
pub mod hooks;
pub mod keys;
mod lockout;
pub mod middleware;
pub mod proxy;
pub mod reply;
mod request;
pub mod response_cache;
pub mod services;
mod shared;
pub mod streams;
pub mod table;
pub mod upstream;

pub use shared::Shared;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::connect::tls::TlsError;
use crate::http::{self as h, HttpResponse};
use crate::limit::{self, Limiter};
use crate::server::{self, Service, Timeouts};
use crate::store::Store;
use crate::webhook::{Deliverer, Templates};
use config::GatewayConfig;
use events::EventBus;
use keys::Keys;
use proxy::Proxy;
use request::Serving;
use response_cache::ResponseCache;
use services::Services;
use streams::StreamHost;
use table::{ApiTable, Sources};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("redis: {0}")]
    Redis(#[from] limit::LimitError),
    #[error("tls: {0}")]
    Tls(#[from] TlsError),
    #[error("tls: `tls.cert_file` and `tls.key_file` are needed, or `tls.certificate_id`")]
    NoIdentity,
    #[error("tls: `tls.certificate_id`: no stored certificate `{0}`")]
    NoStoredCertificate(String),
    #[error("tls: `tls.certificate_id`: the stored certificate `{0}` has no private key")]
    NoStoredKey(String),
    #[error("tls: `tls.certificate_id`: the key of the stored certificate `{id}`: {source}")]
    SealedKey {
        id: String,
        #[source]
        source: crate::store::seal::OpenError,
    },
    #[error("proxy: {0}")]
    Proxy(#[source] TlsError),
    #[error("webhooks: {0}")]
    Webhooks(#[from] crate::webhook::DeliveryError),
    #[error("{0}")]
    Listen(#[from] std::io::Error),
    #[error("{0}")]
    Bus(String),
}

/// A started gateway.
pub struct Gateway {
    pub shared: Arc<Shared>,
    pub address: SocketAddr,
    /// Where `/metrics`, `/ready` and the gateway API are served.
    pub control_address: SocketAddr,
    listener: std::net::TcpListener,
    control: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    store: Store,
    /// Sends the queued webhooks, when `webhooks.enabled`.
    deliverer: Option<Deliverer>,
}

impl Gateway {
    /// Opens the store, connects to Redis, loads the APIs and binds the listener.
    pub async fn start(config: GatewayConfig) -> Result<Gateway, StartError> {
        if config.store.url == crate::store::DEFAULT_URL
            && std::path::Path::new("sluice.db").is_file()
        {
            tracing::warn!(
                "./sluice.db is where earlier versions kept the gateway's default store; the default is now ./data/sluice.db, shared with the dashboard: move the file there, or set `store.url: sqlite://sluice.db`"
            );
        }
        let store = Store::open_configured(&config.store.url).await?;
        Self::start_with_store(config, store).await
    }

    /// As [`start`](Gateway::start), on a store that is already open (`sluice serve`
    /// shares one with its dashboard); `store.url` is then not read.
    pub async fn start_with_store(
        config: GatewayConfig,
        store: Store,
    ) -> Result<Gateway, StartError> {
        let limiter = match &config.redis.url {
            Some(url) => {
                let prefix = config
                    .redis
                    .prefix
                    .clone()
                    .unwrap_or_else(|| config::LIMIT_KEY_PREFIX.into());
                Limiter::redis(url, &prefix).await?
            }
            None => Limiter::local(),
        };
        let tls = if config.tls.enabled {
            Some(tls_acceptor(&config.tls, &store).await?)
        } else {
            None
        };
        let proxy = Proxy::new(&config.proxy).map_err(StartError::Proxy)?;
        let metrics = config.metrics.enabled.then(crate::metrics::install);
        let config_webhooks = config.webhooks.clone();
        let sealer = config
            .store_secret
            .as_deref()
            .map(crate::store::seal::Sealer::new);
        let events = EventBus::default();
        let (listener, address) = server::bind_shared(&config.listen.socket()).await?;
        let (control, control_address) = server::bind(&config.control.socket()).await?;
        // The config was checked when read: a bad entry cannot reach here, and the
        // policy without entries refuses the most.
        let egress = Arc::new(
            crate::egress::EgressPolicy::new(&config.streaming.egress)
                .unwrap_or_default()
                .with_own_listener(address)
                .with_own_listener(control_address)
                .with_reserved(&config.reserved_names()),
        );
        let node = streams::cluster::node_id(config.cluster.node_id.as_deref(), config.listen.port);
        let bus = config
            .cluster
            .bus
            .build(&node, config.secret.as_deref())
            .map_err(StartError::Bus)?;
        let table = ApiTable::new(Sources {
            dir: config.apps.path.clone(),
            store: config.store.apis.then(|| store.clone()),
            options: crate::apidef::CompileOptions {
                allow_unsafe: config.streaming.allow_unsafe.clone(),
                egress: Some(egress.clone()),
            },
        });
        let keys = Keys::new(
            store.clone(),
            config.keys.cache_ttl.0,
            config.secret.as_deref(),
        );
        let services = Services {
            keys,
            limiter,
            proxy,
            cache: ResponseCache::default(),
            events: events.clone(),
            streams: StreamHost::new(
                events,
                streams::StreamSettings {
                    enabled: config.streaming.enabled,
                    drain: config.streaming.drain_timeout.0,
                    max_client_streams: config.streaming.max_client_streams,
                    client_idle_timeout: config.streaming.client_idle_timeout.0,
                    org_max_client_streams: config.streaming.org_max_client_streams,
                    org_max_inflight_bytes: config.streaming.org_max_inflight_bytes,
                    org_cpu_share: config.streaming.org_cpu_share,
                    max_connect_failures: config.streaming.max_connect_failures.max(1),
                    egress,
                    node,
                    bus,
                },
            ),
            tls: tls.is_some(),
            config,
        };
        let shared = Arc::new(Shared {
            failed_secrets: lockout::FailedSecrets::new(
                services.config.control.failed_secrets_per_minute,
            ),
            services,
            table,
            metrics,
            reload_now: tokio::sync::Notify::new(),
            ready: AtomicBool::new(false),
        });
        // Streams start once the serving threads run (see `serve`).
        shared.table.refresh(true).await;
        let deliverer = match config_webhooks.enabled {
            true => Some(
                Deliverer::new(store.clone(), config_webhooks, sealer)?
                    .with_egress(shared.streams.egress())?,
            ),
            false => None,
        };
        Ok(Gateway {
            shared,
            address,
            control_address,
            listener,
            control,
            tls,
            deliverer,
            store,
        })
    }

    /// Starts the event handlers' dispatcher and the delivery worker; both end at
    /// `stop`. With `store_secret`, both open what the dashboard sealed.
    fn start_webhooks(&mut self, stop: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let config = &self.shared.config.webhooks;
        let deliverer = self.deliverer.take();
        let dispatcher = hooks::Dispatcher::new(
            self.store.clone(),
            Templates::new(config.templates.clone()),
            self.shared
                .config
                .store_secret
                .as_deref()
                .map(crate::store::seal::Sealer::new),
            config,
            deliverer.as_ref().map(Deliverer::waker),
        );
        let events = self.shared.events.subscribe();
        let mut tasks = vec![tokio::spawn(dispatcher.run(
            self.shared.clone(),
            events,
            stop.clone(),
        ))];
        if let Some(deliverer) = deliverer {
            tasks.push(tokio::spawn(deliverer.run(stop.clone())));
        }
        tasks
    }

    /// Serves until `stop`; in-flight requests then finish.
    pub async fn serve(mut self, stop: CancellationToken) {
        let shared = self.shared.clone();
        let reloader = tokio::spawn(reload_loop(shared.clone(), stop.clone()));
        let health = tokio::spawn(watch_health(shared.clone(), stop.clone()));
        let webhooks = self.start_webhooks(&stop);

        let timeouts = Timeouts {
            header: shared.config.http.header_read_timeout.0,
            body: shared.config.http.body_read_timeout.0,
        };
        let control = tokio::spawn(server::serve_connections(
            self.control,
            None,
            timeouts,
            Arc::new(Control(shared.clone())),
            None,
            server::ConnLimit::new(CONTROL_CONNECTIONS),
            stop.clone(),
        ));
        info!(address = %self.control_address, "Gateway control listening.");
        let service: Service = Arc::new(Serving(shared));
        let placement: server::Placement = {
            let shared = self.shared.clone();
            Arc::new(move |path| {
                let table = shared.table.current();
                let api = table.route(path)?;
                shared.streams.home(api, path)
            })
        };
        info!(address = %self.address, tls = self.tls.is_some(), "Gateway listening.");
        // One thread per core, each with a runtime and a listener of its own: a request
        // lives on one thread from accept to upstream and back. Streams, reloads and the
        // gateway's housekeeping run on the caller's runtime.
        let workers = self
            .shared
            .config
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let limit = match self.shared.config.listen.max_connections {
            Some(n) => server::ConnLimit::new(n),
            None => server::ConnLimit::from_descriptors(),
        };
        let mut threads = Vec::new();
        let mut first = Some(self.listener);
        let (runtime_tx, mut runtime_rx) = tokio::sync::mpsc::unbounded_channel();
        // A serving thread keeps its runtime, and the streams on it, until released.
        let release = CancellationToken::new();
        for i in 0..workers.max(1) {
            let listener = match first.take() {
                Some(l) => l,
                None => match server::shared_listener(self.address) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "Cannot open another listener.");
                        break;
                    }
                },
            };
            let (tls, service, stop) = (self.tls.clone(), service.clone(), stop.clone());
            let placement = placement.clone();
            let limit = limit.clone();
            let runtime_tx = runtime_tx.clone();
            let release = release.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("sluice-gw-{i}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            tracing::error!(error = %e, "Cannot start a worker runtime.");
                            return;
                        }
                    };
                    streams::serving_thread(i);
                    let _ = runtime_tx.send((i, rt.handle().clone()));
                    drop(runtime_tx);
                    rt.block_on(async move {
                        let _ = listener.set_nonblocking(true);
                        match tokio::net::TcpListener::from_std(listener) {
                            Ok(l) => {
                                let placement = Some(placement);
                                server::serve_connections(
                                    l, tls, timeouts, service, placement, limit, stop,
                                )
                                .await
                            }
                            Err(e) => tracing::error!(error = %e, "Cannot listen."),
                        }
                        release.cancelled().await;
                    });
                });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => tracing::error!(error = %e, "Cannot start a worker thread."),
            }
        }
        drop(runtime_tx);
        let mut runtimes = Vec::new();
        while let Some(started) = runtime_rx.recv().await {
            runtimes.push(started);
        }
        runtimes.sort_by_key(|(i, _)| *i);
        self.shared.streams.run_on(runtimes);
        self.shared
            .streams
            .sync(self.shared.table.current().all())
            .await;
        // Ready once the APIs' streams run: before, a stream path would find no stream.
        self.shared.ready.store(true, Ordering::Release);
        stop.cancelled().await;
        // Draining: no new connections (the listeners close with `stop`), out of the load
        // balancer's rotation, and every open stream told to come back after a moment,
        // through the load balancer to another node, where it resumes with its last id.
        self.shared.ready.store(false, Ordering::Release);
        let told = self.shared.streams.leases.restart_all(RESTART_RETRY);
        metrics::counter!(crate::metrics::STREAM_CONNECTIONS_RESTARTED).increment(told as u64);
        info!(
            connections = told,
            "Draining: open streams were told to reconnect."
        );
        reloader.abort();
        health.abort();
        for task in webhooks {
            let _ = task.await;
        }
        let _ = control.await;
        // Streams stop first: their open SSE and WebSocket responses end with them, so
        // that the connections can finish.
        self.shared.streams.stop_all().await;
        release.cancel();
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

/// When a client of a draining gateway is told to come back (SSE `retry:`): soon, since
/// the load balancer sends it to another node.
const RESTART_RETRY: Duration = Duration::from_secs(1);

/// Connections the control port holds open at once: Prometheus and operators.
const CONTROL_CONNECTIONS: usize = 256;

/// The gateway's control port: `/ping`, `/ready`, `/metrics` and the gateway API.
struct Control(Arc<Shared>);

impl server::Serve for Control {
    fn call(
        &self,
        req: http::Request<h::Body>,
        peer: SocketAddr,
    ) -> futures::future::BoxFuture<'_, HttpResponse> {
        let gw = &*self.0;
        let req = request::watch_body(gw, req);
        let path = req.uri().path();
        if let Some(own) = gw.own_answer(path) {
            return Box::pin(std::future::ready(own));
        }
        if crate::apidef::listen_rest("/sluice", path).is_some() {
            return Box::pin(admin::handle(gw, req, peer));
        }
        let resp = reply::error(
            StatusCode::NOT_FOUND,
            "the control port serves /ping, /ready, /metrics and /sluice/",
        );
        Box::pin(std::future::ready(resp))
    }
}

/// The TLS identity: PEM files, or a certificate the dashboard stored.
async fn tls_acceptor(
    tls: &config::TlsConfig,
    store: &Store,
) -> Result<tokio_rustls::TlsAcceptor, StartError> {
    if let Some(id) = &tls.certificate_id {
        let record = store
            .cert_by_fingerprint(id)
            .await?
            .ok_or_else(|| StartError::NoStoredCertificate(id.clone()))?;
        let sealed = record
            .key_sealed
            .ok_or_else(|| StartError::NoStoredKey(id.clone()))?;
        let secret = tls.store_secret.as_deref().unwrap_or_default();
        let key = crate::store::seal::Sealer::new(secret)
            .open(&sealed)
            .map_err(|source| StartError::SealedKey {
                id: id.clone(),
                source,
            })?;
        let from = format!("the stored certificate `{id}`");
        return Ok(server::tls_acceptor_from_pem(
            record.pem.as_bytes(),
            &key,
            "tls.certificate_id",
            &from,
        )?);
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Ok(server::tls_acceptor(cert, key)?),
        _ => Err(StartError::NoIdentity),
    }
}

/// Checks the sources for changes every `apps.poll_interval`, or at once when asked.
async fn reload_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let interval = shared.config.apps.poll_interval.0;
    let mut last_collect = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shared.reload_now.notified() => {}
            _ = stop.cancelled() => return,
        }
        shared.reload(false).await;
        shared.streams.leases.expire();
        // Idle per-client streams, and open connections against the stored keys, are
        // looked at about once a second.
        if last_collect.elapsed() >= Duration::from_secs(1) {
            last_collect = Instant::now();
            shared.streams.collect_idle().await;
            shared.review_leases().await;
        }
    }
}

impl Shared {
    /// The control port's answer to `/ping`, `/ready` and `/metrics`.
    fn own_answer(&self, path: &str) -> Option<HttpResponse> {
        Some(match path {
            "/ping" => h::text(StatusCode::OK, "pong"),
            "/ready" if self.ready.load(Ordering::Acquire) => h::text(StatusCode::OK, "OK"),
            "/ready" => h::text(StatusCode::SERVICE_UNAVAILABLE, "loading\n"),
            "/metrics" => match &self.metrics {
                Some(handle) => server::metrics_response(handle),
                None => reply::error(StatusCode::NOT_FOUND, "metrics are disabled"),
            },
            _ => return None,
        })
    }
}

/// Raises a `stream_error` event each time one of the APIs' streams changes state for the
/// worse (failing, or stopped after failing) or recovers, until `stop`.
pub async fn watch_health(
    shared: Arc<crate::gateway::shared::Shared>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut changes = crate::stream::health::Health::global().subscribe();
    loop {
        let change = tokio::select! {
            c = changes.recv() => c,
            _ = stop.cancelled() => return,
        };
        let change = match change {
            Ok(c) => c,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if let Some((api_id, stream, message)) = shared.streams.health_event(&change) {
            shared.events.publish(
                crate::gateway::events::EventKind::StreamError,
                &api_id,
                None,
                &stream,
                message,
            );
        }
    }
}
