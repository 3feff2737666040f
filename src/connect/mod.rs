//! What the broker connectors share: TLS and SASL settings, address lists, the NATS and
//! AMQP 1.0 connections, and the hand-off of acknowledgements to async broker calls.

pub mod amqp;
pub mod amqp1;
pub mod http_client;
pub mod kafka;
pub mod metadata;
pub mod mqtt;
pub mod nats;
pub mod outbound;
pub mod redis;
pub mod sasl;
pub mod tls;

use tokio::runtime::Handle;

pub use metadata::{MetadataConfig, MetadataFilter};
pub use sasl::{SaslConfig, SaslMechanism};
pub use tls::TlsConfig;

/// Flattens address lists as users write them: several entries, each possibly holding
/// comma-separated addresses (`["a:9092,b:9092", "c:9092"]`). Blanks are dropped.
pub fn split_addresses(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|e| e.split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs an acknowledgement's async broker call. A [`crate::component::SourceAck`] is a plain
/// closure that may be called from any task, so it captures the runtime it was created on
/// rather than relying on being inside one when it runs.
#[derive(Clone)]
pub struct AckSpawner(Handle);

impl AckSpawner {
    /// Captures the current runtime; call from async code (a connector's `connect`).
    pub fn current() -> Self {
        AckSpawner(Handle::current())
    }

    pub fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.0.spawn(fut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_on_commas_and_drop_blanks() {
        let got = split_addresses(&["a:1, b:2".into(), "".into(), "c:3,".into()]);
        assert_eq!(got, vec!["a:1", "b:2", "c:3"]);
    }
}
