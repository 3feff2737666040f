//! What the gateway's tasks share: what requests read ([`Services`]), the table of APIs
//! that routes them, and the control plane around both (reloads, readiness, the gateway
//! API's lockout, the metrics handle).

use std::sync::atomic::AtomicBool;

use metrics_exporter_prometheus::PrometheusHandle;

use super::lockout::FailedSecrets;
use super::services::Services;
use super::table::ApiTable;

/// Everything the gateway's tasks share. It reads as its [`Services`] (`shared.keys`),
/// which are what a request may need besides the table.
pub struct Shared {
    pub services: Services,
    pub table: ApiTable,
    pub metrics: Option<PrometheusHandle>,
    /// Wakes the reload loop at once (the gateway API's reload).
    pub reload_now: tokio::sync::Notify,
    pub(super) ready: AtomicBool,
    /// Wrong secrets sent to the gateway API, per client address.
    pub(super) failed_secrets: FailedSecrets,
}

impl std::ops::Deref for Shared {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
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
            self.streams.sync(table.all()).await;
        }
    }

    /// Ends the open stream connections whose key or API no longer lets them in; run
    /// before a change to a key is answered, and every second.
    pub async fn review_leases(&self) {
        let table = self.table.current();
        if let Err(e) = self.streams.leases.review(&self.keys, table.all()).await {
            tracing::warn!(error = %e, "Open stream connections could not be reviewed; they are at the next try.");
        }
    }
}
