//! The cluster bus as the HTTP outputs see it. A stream whose producer and consumer are
//! both HTTP clients runs on every gateway node; with `cluster.bus` set, its `http_server`
//! and `websocket_server` outputs publish what they are given to the bus instead of to
//! their own clients, and every node feeds its clients from the bus, so a POST on one node
//! reaches the clients of all of them. The bus itself (NATS JetStream or Redis Streams) is
//! built in the top-level `bus` module.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{ConnectorError, Output};
pub use crate::http::history::{HistoryError, Past};
use crate::message::Batch;

/// A bus carrying the messages of one topic between the nodes of a cluster.
pub trait Bus: Send + Sync {
    /// Publishes `batch` on `topic`; returns once the bus holds every message of it.
    fn publish<'a>(
        &'a self,
        topic: &'a str,
        batch: &'a Batch,
    ) -> BoxFuture<'a, Result<(), ConnectorError>>;

    /// Hands the messages published on `feed.topic` to `feed.sink` until `feed.stop` is
    /// cancelled, each acknowledged to the bus once the sink took it.
    fn feed(self: Arc<Self>, feed: Feed) -> BoxFuture<'static, ()>;

    /// The metadata key under which fed messages carry their position on the bus, the
    /// same on every node, when the bus has positions.
    fn position_key(&self) -> Option<&'static str>;

    /// The messages of `topic` after position `after`, oldest first, through the newest
    /// there is now, each with its position: for a client that resumes from before its
    /// node's replay buffer.
    fn history(
        self: Arc<Self>,
        topic: String,
        after: u64,
    ) -> BoxFuture<'static, Result<Past, HistoryError>>;

    /// The bus's kind, for logs and errors (`nats_jetstream`, `redis_streams`).
    fn kind(&self) -> &'static str;
}

impl std::fmt::Debug for dyn Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bus({})", self.kind())
    }
}

/// What one node reads from the bus, and where it goes.
pub struct Feed {
    pub topic: String,
    /// Each message to one node of the cluster (round robin), instead of to every node.
    pub shared: bool,
    pub sink: Arc<dyn Output>,
    /// Whether the sink has clients now: a shared feed takes no message while it has
    /// none, so that another node's clients get it.
    pub ready: Arc<dyn Fn() -> bool + Send + Sync>,
    pub stop: CancellationToken,
    /// Where a node's broadcast reader that is new starts: at the messages published
    /// from this time on (the stream's start on the node, a little before), so that a
    /// POST answered on another node just after the stream started here is not missed.
    pub from: std::time::SystemTime,
}

/// The topic of the hub output at document path `path` of stream `stream`: short, and
/// made of characters every bus takes in a subject or key.
pub fn topic(stream: &str, path: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(stream.as_bytes())
        .chain_update([0])
        .chain_update(path.as_bytes())
        .finalize();
    hex::encode(&digest[..12])
}

/// A bus whose topics are those of one scope (an organisation): the same stream and
/// output of another scope has another topic, so an API id used again by another
/// organisation never reads what the first one's stream left on the bus.
pub struct Scoped {
    inner: Arc<dyn Bus>,
    scope: String,
}

impl Scoped {
    pub fn wrap(inner: Arc<dyn Bus>, scope: &str) -> Arc<dyn Bus> {
        Arc::new(Scoped {
            inner,
            scope: scope.to_owned(),
        })
    }

    fn topic(&self, topic: &str) -> String {
        self::topic(&self.scope, topic)
    }
}

impl Bus for Scoped {
    fn publish<'a>(
        &'a self,
        topic: &'a str,
        batch: &'a Batch,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        let topic = self.topic(topic);
        Box::pin(async move { self.inner.publish(&topic, batch).await })
    }

    fn feed(self: Arc<Self>, mut feed: Feed) -> BoxFuture<'static, ()> {
        feed.topic = self.topic(&feed.topic);
        self.inner.clone().feed(feed)
    }

    fn position_key(&self) -> Option<&'static str> {
        self.inner.position_key()
    }

    fn history(
        self: Arc<Self>,
        topic: String,
        after: u64,
    ) -> BoxFuture<'static, Result<Past, HistoryError>> {
        let topic = self.topic(&topic);
        self.inner.clone().history(topic, after)
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_tell_streams_and_outputs_apart_and_stay_plain() {
        let a = topic("api.s", "output.http_server");
        assert_eq!(a, topic("api.s", "output.http_server"));
        assert_ne!(a, topic("api.s", "output.broker.outputs[1].http_server"));
        // The separator keeps `a.b` + `c` apart from `a` + `.bc`.
        assert_ne!(topic("a.b", "c"), topic("a", ".bc"));
        assert_eq!(a.len(), 24);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        // An organisation's scope keeps its topics apart from another's.
        assert_ne!(topic("org-a", &a), topic("org-b", &a));
    }
}
