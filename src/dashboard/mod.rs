//! The dashboard (`sluice dashboard`): the management API under `/api` for assets,
//! certificates, webhooks, APIs (plain OpenAPI and streaming), organisations, users and
//! keys, the developer portal (products, apps, their webhook subscriptions and the events
//! published to them) and the log of webhook deliveries, on the shared [`Store`]. APIs it accepts are written to the store, where every
//! gateway using the same store picks them up.
//!
//! Two applications on shared parts: `manage/` is the management API (one file per
//! resource) and the web console's files, `portal/` the developer portal (its handlers
//! over its rules in `portal::domain` and `portal::keys`). Shared by both: `router.rs`
//! holds the route table, `request.rs` what a handler gets and gives back, `error.rs`
//! the one error rendering, `auth.rs` who is calling, `openapi.rs` the API's own
//! OpenAPI document and `responses.rs` the error answers its operations share.

pub mod auth;
pub mod config;
pub mod error;
pub mod ids;
pub mod manage;
pub mod openapi;
pub mod portal;
pub mod request;
pub mod responses;
pub mod router;

use std::net::SocketAddr;
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::server::{self, Service, Timeouts};
use crate::store::seal::Sealer;
use crate::store::{Store, StoreError};
use crate::webhook::{Deliverer, DeliveryError};
use auth::NewAdmin;
use config::DashboardConfig;
use manage::ManageState;
use portal::{developers, PortalState};

/// What every request shares: the store, the config, the sealer, the route table and
/// the signals to this process's gateway and delivery worker; and what each of the two
/// applications keeps for itself.
pub struct State {
    pub store: Store,
    pub config: DashboardConfig,
    /// Seals certificate private keys and the portal's secrets; `None` without a
    /// configured secret.
    pub sealer: Option<Sealer>,
    pub routes: Vec<router::Route>,
    /// Signalled (`notify_one`) after every API this dashboard creates, replaces or
    /// deletes, for one listener in the same process: a gateway there can reload at once
    /// instead of at its next poll.
    pub api_changed: tokio::sync::Notify,
    /// Wakes this process's delivery worker (`notify_one`) when deliveries are queued, so
    /// they go out at once rather than at its next poll. Without a worker (`webhooks`
    /// disabled) nobody listens, and another process's worker finds them by polling.
    pub deliveries_queued: Arc<tokio::sync::Notify>,
    /// Where posted streams may connect (`streaming.egress`, this dashboard's listener
    /// refused too).
    pub egress: Arc<crate::egress::EgressPolicy>,
    pub manage: ManageState,
    pub portal: PortalState,
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Listen(#[from] std::io::Error),
    #[error("webhooks: {0}")]
    Webhooks(#[from] DeliveryError),
}

/// Opens the configured store (the default one's directory is created when missing).
pub async fn open_store(config: &DashboardConfig) -> Result<Store, StartError> {
    Ok(Store::open_configured(&config.store.url).await?)
}

/// A started dashboard: its store is open and migrated, its listener bound.
pub struct Dashboard {
    pub state: Arc<State>,
    /// Where it listens (the real port when the config said 0).
    pub address: SocketAddr,
    /// The first organisation's admin, when this start created it: its key is shown to
    /// the operator once and never again.
    pub bootstrapped: Option<NewAdmin>,
    listener: tokio::net::TcpListener,
    /// The delivery worker, run by [`serve`](Dashboard::serve) when `webhooks.enabled`.
    deliverer: Option<Deliverer>,
}

impl Dashboard {
    /// Opens the configured store (creating `./data` for the default one), creates the
    /// first organisation when the store has none, and binds the listener.
    pub async fn start(config: DashboardConfig) -> Result<Dashboard, StartError> {
        let store = open_store(&config).await?;
        Dashboard::with_store(config, store).await
    }

    /// As [`start`](Dashboard::start), on a store that is already open (`sluice serve`
    /// shares one with its gateway).
    pub async fn with_store(
        config: DashboardConfig,
        store: Store,
    ) -> Result<Dashboard, StartError> {
        let bootstrapped =
            auth::bootstrap(&store, &config.admin.org, config.admin.key.as_deref()).await?;
        store.mark_instance_org().await?;
        let sealer = config.secret.as_deref().map(Sealer::new);
        let (listener, address) = server::bind(&config.listen.socket()).await?;
        // Checked when the config was read; the policy without entries refuses the most.
        let egress = Arc::new(
            crate::egress::EgressPolicy::new(&config.streaming.egress)
                .unwrap_or_default()
                .with_own_listener(address),
        );
        let deliverer = if config.webhooks.enabled {
            Some(
                Deliverer::new(store.clone(), config.webhooks.clone(), sealer.clone())?
                    .with_egress(egress.clone())?,
            )
        } else {
            None
        };
        // Checked when the config was read.
        let accounts = developers::Accounts::new(config.portal.proxies().unwrap_or_default());
        let state = Arc::new(State {
            egress,
            sealer,
            store,
            config,
            routes: router::routes(),
            api_changed: tokio::sync::Notify::new(),
            deliveries_queued: deliverer
                .as_ref()
                .map_or_else(Default::default, Deliverer::waker),
            manage: ManageState::new(),
            portal: PortalState { accounts },
        });
        Ok(Dashboard {
            state,
            address,
            bootstrapped,
            listener,
            deliverer,
        })
    }

    /// Serves, and sends webhook deliveries when `webhooks.enabled`, until `stop`;
    /// requests and delivery attempts in flight then finish.
    pub async fn serve(self, stop: CancellationToken) {
        let worker = self.deliverer.map(|d| tokio::spawn(d.run(stop.clone())));
        let timeouts = Timeouts {
            header: self.state.config.http.header_read_timeout.0,
            body: self.state.config.http.body_read_timeout.0,
        };
        let state = self.state.clone();
        let service: Service = Arc::new(move |req, peer: SocketAddr| {
            let state = state.clone();
            async move { router::handle(state, req, peer.ip()).await }.boxed()
        });
        info!(address = %self.address, "Dashboard listening.");
        let limit = server::ConnLimit::from_descriptors();
        server::serve_connections(self.listener, None, timeouts, service, None, limit, stop).await;
        if let Some(worker) = worker {
            let _ = worker.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The in-process use `sluice serve` makes: a store opened by the caller, port 0, a
    /// key from the config, and a signal when an API changes.
    #[tokio::test]
    async fn runs_in_process_on_a_given_store_and_signals_api_changes() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let mut config = DashboardConfig::default();
        config.listen.port = 0;
        config.admin.key = Some("in-process-key-0123456789".into());
        let dashboard = Dashboard::with_store(config, store).await.unwrap();
        let admin = dashboard.bootstrapped.clone().expect("a first admin");
        assert_eq!(admin.key, "in-process-key-0123456789");
        let address = dashboard.address;
        let state = dashboard.state.clone();
        let stop = CancellationToken::new();
        let serving = tokio::spawn(dashboard.serve(stop.clone()));

        let api = serde_json::json!({
            "openapi": "3.0.3",
            "info": {"title": "t", "version": "1"},
            "paths": {},
            // A documentation address: posted upstreams may not be on loopback.
            "x-sluice-api-gateway": {"upstream": {"url": "http://203.0.113.9"}}
        });
        let resp = reqwest::Client::new()
            .post(format!("http://{address}/api/apis/oas"))
            .header("Authorization", "in-process-key-0123456789")
            .json(&api)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        tokio::time::timeout(Duration::from_secs(5), state.api_changed.notified())
            .await
            .expect("the change is signalled");
        assert_eq!(state.store.list_apis().await.unwrap().len(), 1);
        stop.cancel();
        serving.await.unwrap();
    }
}
