//! What every request of the gateway may need, shared by all of them: the config, the
//! API table, keys, limits, the proxy, the cache, events and streams.

use std::sync::atomic::AtomicBool;

use metrics_exporter_prometheus::PrometheusHandle;

use super::config::GatewayConfig;
use super::events::EventBus;
use super::keys::Keys;
use super::lockout::FailedSecrets;
use super::middleware::cache::ResponseCache;
use super::proxy::Proxy;
use super::streams::StreamHost;
use super::table::ApiTable;
use crate::limit::Limiter;

/// Everything a request may need, shared by all of them.
pub struct Shared {
    pub config: GatewayConfig,
    pub table: ApiTable,
    pub keys: Keys,
    pub limiter: Limiter,
    pub proxy: Proxy,
    pub cache: ResponseCache,
    pub events: EventBus,
    pub metrics: Option<PrometheusHandle>,
    /// The streams of the APIs (`x-sluice-streaming`), when streaming is on.
    pub streams: StreamHost,
    /// Wakes the reload loop at once (the gateway API's reload).
    pub reload_now: tokio::sync::Notify,
    pub(super) ready: AtomicBool,
    pub(super) tls: bool,
    /// Wrong secrets sent to the gateway API, per client address.
    pub(super) failed_secrets: FailedSecrets,
}

impl Shared {
    /// Reloads the APIs when a source changed (or `force`), then their streams.
    pub async fn reload(&self, force: bool) {
        if self.table.refresh(force).await {
            let table = self.table.current();
            for api in table.apis() {
                self.cache.forget_api(&api.id);
            }
            // Connections to an API that went are told why before its streams stop.
            self.review_leases().await;
            self.streams.sync(&table).await;
        }
    }

    /// Ends the open stream connections whose key or API no longer lets them in; run
    /// before a change to a key is answered, and every second.
    pub async fn review_leases(&self) {
        let table = self.table.current();
        if let Err(e) = self.streams.leases.review(&self.keys, &table).await {
            tracing::warn!(error = %e, "Open stream connections could not be reviewed; they are at the next try.");
        }
    }
}
