//! Each running stream's health: whether it is starting, running, failing (with its last
//! error) or stopped, from what its inputs and outputs say as they connect, fail and
//! connect again. Kept for the process (the dashboard of `sluice serve` reads what its
//! gateway runs), exported as metrics, and announced on every change of state to whoever
//! subscribed (the gateway raises `stream_error` events from it).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::broadcast;

/// Where a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Started; some input or output has not connected yet.
    Starting,
    /// Every input and output is connected.
    Running,
    /// An input or output failed to connect or lost its connection, and tries again.
    Failing,
    /// Stopped: taken down, or given up (with why).
    Stopped,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Starting,
        State::Running,
        State::Failing,
        State::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Failing => "failing",
            State::Stopped => "stopped",
        }
    }
}

/// One input or output of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Component {
    /// `<stream>/<path in the config>`.
    pub id: String,
    pub connected: bool,
    /// Why it is not, when it failed.
    pub error: Option<String>,
}

/// A stream's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct StreamHealth {
    pub state: State,
    /// The last failure, kept after a recovery.
    pub last_error: Option<String>,
    /// Times it went from failing back to running.
    pub recoveries: u64,
    /// Failed connections and lost connections, all components together.
    pub failures: u64,
    /// When it entered its state, in unix milliseconds.
    pub since: i64,
    pub components: Vec<Component>,
}

/// A change of a stream's state, as subscribers get it.
#[derive(Debug, Clone)]
pub struct Change {
    pub stream: String,
    pub from: State,
    pub health: StreamHealth,
}

/// The health of the streams of this process.
pub struct Health {
    streams: Mutex<BTreeMap<String, Entry>>,
    changes: broadcast::Sender<Change>,
}

/// A stream's health and the labels naming it in the metrics.
struct Entry {
    health: StreamHealth,
    labels: Vec<(&'static str, String)>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            streams: Mutex::new(BTreeMap::new()),
            changes: broadcast::channel(256).0,
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Health {
    /// The process's registry.
    pub fn global() -> Arc<Health> {
        static GLOBAL: OnceLock<Arc<Health>> = OnceLock::new();
        GLOBAL.get_or_init(Arc::default).clone()
    }

    /// Every change of state from now on. A subscriber that falls behind loses the
    /// oldest changes, never blocks a stream.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// A stream starts with these inputs and outputs, none connected yet; `labels` name
    /// it in the metrics.
    pub fn starting(
        &self,
        stream: &str,
        components: Vec<String>,
        labels: Vec<(&'static str, String)>,
    ) {
        let health = StreamHealth {
            state: State::Starting,
            last_error: None,
            recoveries: 0,
            failures: 0,
            since: now_ms(),
            components: components
                .into_iter()
                .map(|id| Component {
                    id,
                    connected: false,
                    error: None,
                })
                .collect(),
        };
        let from = self
            .streams
            .lock()
            .insert(
                stream.to_owned(),
                Entry {
                    health: health.clone(),
                    labels: labels.clone(),
                },
            )
            .map_or(State::Stopped, |old| old.health.state);
        self.announce(stream, &labels, from, health);
    }

    /// Component `id` of `stream` connected.
    pub fn up(&self, stream: &str, id: &str) {
        self.update(stream, |h| {
            let c = component(h, id);
            c.connected = true;
            c.error = None;
        });
    }

    /// Component `id` of `stream` failed to connect, or lost its connection.
    pub fn down(&self, stream: &str, id: &str, error: String) {
        self.update(stream, |h| {
            h.failures += 1;
            h.last_error = Some(format!("{id}: {error}"));
            let c = component(h, id);
            c.connected = false;
            c.error = Some(error);
        });
    }

    /// `stream` stopped; `why` when it gave up rather than being taken down.
    pub fn stopped(&self, stream: &str, why: Option<String>) {
        self.update(stream, |h| {
            h.state = State::Stopped;
            if let Some(why) = why {
                h.last_error = Some(why);
            }
        });
    }

    /// Forgets `stream` (its API went).
    pub fn forget(&self, stream: &str) {
        let gone = self.streams.lock().remove(stream);
        if let Some(old) = gone {
            set_state_gauges(&old.labels, None);
        }
    }

    /// The health of `stream`.
    pub fn get(&self, stream: &str) -> Option<StreamHealth> {
        self.streams.lock().get(stream).map(|e| e.health.clone())
    }

    fn update(&self, stream: &str, change: impl FnOnce(&mut StreamHealth)) {
        let (from, health, labels) = {
            let mut streams = self.streams.lock();
            let Some(entry) = streams.get_mut(stream) else {
                return;
            };
            let h = &mut entry.health;
            let from = h.state;
            change(h);
            if h.state != State::Stopped {
                h.state = derived(h);
            }
            if h.state == from {
                return;
            }
            h.since = now_ms();
            if from == State::Failing && h.state == State::Running {
                h.recoveries += 1;
                metrics::counter!(crate::metrics::STREAM_RECOVERIES, &entry.labels).increment(1);
            }
            (from, h.clone(), entry.labels.clone())
        };
        self.announce(stream, &labels, from, health);
    }

    fn announce(
        &self,
        stream: &str,
        labels: &[(&'static str, String)],
        from: State,
        health: StreamHealth,
    ) {
        set_state_gauges(labels, Some(health.state));
        // No subscriber is no error: nobody listens.
        let _ = self.changes.send(Change {
            stream: stream.to_owned(),
            from,
            health,
        });
    }
}

/// The state the components make: failing if any failed, running once all connected.
fn derived(h: &StreamHealth) -> State {
    if h.components.iter().any(|c| c.error.is_some()) {
        State::Failing
    } else if h.components.iter().all(|c| c.connected) {
        State::Running
    } else {
        State::Starting
    }
}

/// Component `id` of `h`, added when the stream did not list it at start.
fn component<'a>(h: &'a mut StreamHealth, id: &str) -> &'a mut Component {
    let i = match h.components.iter().position(|c| c.id == id) {
        Some(i) => i,
        None => {
            h.components.push(Component {
                id: id.to_owned(),
                connected: false,
                error: None,
            });
            h.components.len() - 1
        }
    };
    &mut h.components[i]
}

/// `sluice_stream_state{stream, state}`: 1 for the stream's state, 0 for the others;
/// all 0 once it is forgotten.
fn set_state_gauges(labels: &[(&'static str, String)], state: Option<State>) {
    for s in State::ALL {
        let mut labels = labels.to_vec();
        labels.push(("state", s.as_str().to_owned()));
        metrics::gauge!(crate::metrics::STREAM_STATE, &labels).set(if Some(s) == state {
            1.0
        } else {
            0.0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn states_follow_the_components_and_every_change_is_announced() {
        let health = Health::default();
        let mut changes = health.subscribe();
        health.starting(
            "s",
            vec!["s/in".into(), "s/out".into()],
            vec![("stream", "s".into())],
        );
        assert_eq!(health.get("s").unwrap().state, State::Starting);
        health.up("s", "s/in");
        assert_eq!(health.get("s").unwrap().state, State::Starting);
        health.up("s", "s/out");
        assert_eq!(health.get("s").unwrap().state, State::Running);
        health.down("s", "s/out", "connection refused".into());
        health.down("s", "s/out", "connection refused".into());
        let failing = health.get("s").unwrap();
        assert_eq!(failing.state, State::Failing);
        assert_eq!(failing.failures, 2);
        assert_eq!(
            failing.last_error.as_deref(),
            Some("s/out: connection refused")
        );
        health.up("s", "s/out");
        let back = health.get("s").unwrap();
        assert_eq!((back.state, back.recoveries), (State::Running, 1));
        assert_eq!(
            back.last_error.as_deref(),
            Some("s/out: connection refused")
        );
        health.stopped("s", Some("gave up".into()));
        // A stopped stream stays stopped whatever a component says late.
        health.up("s", "s/in");
        assert_eq!(health.get("s").unwrap().state, State::Stopped);

        let mut seen = Vec::new();
        while let Ok(c) = changes.try_recv() {
            seen.push((c.from, c.health.state));
        }
        assert_eq!(
            seen,
            [
                (State::Stopped, State::Starting),
                (State::Starting, State::Running),
                (State::Running, State::Failing),
                (State::Failing, State::Running),
                (State::Running, State::Stopped),
            ],
            "one announcement per change, none for a failure repeated"
        );
        health.forget("s");
        assert!(health.get("s").is_none());
        // Unknown streams are ignored.
        health.up("nope", "nope/in");
        assert!(health.get("nope").is_none());
    }
}
