//! What a request reads on its way through the gateway, apart from the table that routed
//! it: the config, keys, limits, the proxy, the cache, events and streams. The steps of
//! the chain see this and nothing of the control plane (reloads, readiness, the gateway
//! API's lockout), which [`super::Shared`] adds around it.

use super::config::GatewayConfig;
use super::events::EventBus;
use super::keys::Keys;
use super::proxy::Proxy;
use super::response_cache::ResponseCache;
use super::streams::StreamHost;
use crate::limit::Limiter;

pub struct Services {
    pub config: GatewayConfig,
    pub keys: Keys,
    pub limiter: Limiter,
    pub proxy: Proxy,
    pub cache: ResponseCache,
    pub events: EventBus,
    /// The streams of the APIs (`x-sluice-streaming`), when streaming is on.
    pub streams: StreamHost,
    /// Whether clients reach the gateway over TLS, for what the proxy tells the upstream.
    pub tls: bool,
}
