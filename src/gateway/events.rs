//! The gateway's event bus: what went wrong for whom (auth failures, limits hit, expired
//! keys, upstream errors, streams that fail), for subscribers such as webhooks (see
//! `hooks.rs`). Publishing never waits: a subscriber that falls behind misses events
//! rather than slowing requests.

use serde::Serialize;
use tokio::sync::broadcast;

pub use crate::apidef::handlers::EventKind;

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub kind: EventKind,
    pub api_id: String,
    /// The key involved, by id (never the key itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    pub message: String,
    pub path: String,
    /// Unix milliseconds.
    pub at: i64,
}

/// Events are dropped for a subscriber more than this many behind.
const CAPACITY: usize = 1024;

#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Event>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl EventBus {
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    pub fn publish(
        &self,
        kind: EventKind,
        api_id: &str,
        key_id: Option<&str>,
        path: &str,
        message: impl Into<String>,
    ) {
        metrics::counter!(crate::metrics::GATEWAY_EVENTS, "api_id" => api_id.to_owned(), "event" => kind.as_str())
            .increment(1);
        // No subscriber is not an error.
        let _ = self.tx.send(Event {
            kind,
            api_id: api_id.to_owned(),
            key_id: key_id.map(str::to_owned),
            message: message.into(),
            path: path.to_owned(),
            at: chrono::Utc::now().timestamp_millis(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_see_events() {
        let bus = EventBus::default();
        let mut rx = bus.subscribe();
        bus.publish(
            EventKind::QuotaExceeded,
            "pets",
            Some("k1"),
            "/pets",
            "quota",
        );
        let e = rx.recv().await.unwrap();
        assert_eq!(e.kind, EventKind::QuotaExceeded);
        assert_eq!(e.key_id.as_deref(), Some("k1"));
        // Publishing with nobody listening is fine.
        drop(rx);
        bus.publish(EventKind::AuthFailure, "pets", None, "/pets", "no key");
    }

    #[test]
    fn names_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_name(kind.as_str()), Some(kind));
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.as_str());
        }
        assert_eq!(EventKind::from_name("nope"), None);
    }
}
