//! The hubs of a set of streams (a gateway API's), kept across a change of a stream so
//! that its connected clients stay connected: the changed stream stops, draining what it
//! has in flight into the hub, and the new one takes the same hub over, with its clients,
//! replay buffer and event ids. A hub is kept for the new stream only when the output at
//! the same place serves the same routes with the same hub settings; any other is
//! retired, which ends its clients' connections.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::http::hub::{Hub, HubOptions};

/// The hubs of the running streams, by stream.
#[derive(Default)]
pub struct Hubs {
    streams: Mutex<HashMap<String, StreamHubs>>,
}

#[derive(Default)]
struct StreamHubs {
    /// The stream is being changed: when it stops, its hubs wait for the new one.
    held: bool,
    hubs: Vec<Kept>,
}

struct Kept {
    /// The output's place in the stream and the routes it serves.
    place: String,
    hub: Arc<Hub>,
    /// Whether the stream running now (or being built) writes to it.
    claimed: bool,
}

impl Kept {
    fn retire(self) {
        self.hub.retired().cancel();
    }
}

/// What [`Hubs::settle`] did with a changed stream's hubs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Hubs the new stream took over, with their clients.
    pub kept: usize,
    /// Hubs the new stream has no use for: their clients' connections ended.
    pub retired: usize,
}

impl Hubs {
    /// The hub for the output at `place` (its document path and routes) of `stream`: the
    /// one its earlier version left, when held for it with the same `opts`, else a new one.
    pub fn hub(&self, stream: &str, place: &str, opts: HubOptions) -> Arc<Hub> {
        let mut streams = self.streams.lock();
        let entry = streams.entry(stream.to_owned()).or_default();
        if let Some(kept) = entry
            .hubs
            .iter_mut()
            .find(|k| !k.claimed && k.place == place && *k.hub.options() == opts)
        {
            kept.claimed = true;
            return kept.hub.clone();
        }
        let hub = Hub::new(opts, CancellationToken::new());
        entry.hubs.push(Kept {
            place: place.to_owned(),
            hub: hub.clone(),
            claimed: true,
        });
        hub
    }

    /// `stream` is about to be changed: when it stops, its hubs are kept for the new
    /// version until [`settle`](Self::settle).
    pub fn hold(&self, stream: &str) {
        self.streams
            .lock()
            .entry(stream.to_owned())
            .or_default()
            .held = true;
    }

    /// `stream` stopped: its hubs are retired, unless it is being changed, in which case
    /// they wait, unclaimed, for the new version.
    pub fn stopped(&self, stream: &str) {
        let mut streams = self.streams.lock();
        let Some(entry) = streams.get_mut(stream) else {
            return;
        };
        if entry.held {
            for kept in &mut entry.hubs {
                kept.claimed = false;
            }
            return;
        }
        if let Some(entry) = streams.remove(stream) {
            entry.hubs.into_iter().for_each(Kept::retire);
        }
    }

    /// The change of `stream` is done (the new version started, or failed to): the hubs
    /// it did not take over are retired.
    pub fn settle(&self, stream: &str) -> Settled {
        let mut streams = self.streams.lock();
        let Some(entry) = streams.get_mut(stream) else {
            return Settled::default();
        };
        entry.held = false;
        let (kept, unused): (Vec<Kept>, Vec<Kept>) = std::mem::take(&mut entry.hubs)
            .into_iter()
            .partition(|k| k.claimed);
        let settled = Settled {
            kept: kept.len(),
            retired: unused.len(),
        };
        unused.into_iter().for_each(Kept::retire);
        if kept.is_empty() {
            streams.remove(stream);
        } else if let Some(entry) = streams.get_mut(stream) {
            entry.hubs = kept;
        }
        settled
    }

    /// `stream` failed to build: whatever hubs it made or took are retired.
    pub fn failed(&self, stream: &str) {
        if let Some(entry) = self.streams.lock().remove(stream) {
            entry.hubs.into_iter().for_each(Kept::retire);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Hubs {
        fn len(&self) -> usize {
            self.streams.lock().values().map(|s| s.hubs.len()).sum()
        }
    }

    fn opts(size: usize) -> HubOptions {
        HubOptions {
            replay: crate::http::hub::ReplayConfig {
                size,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_changed_stream_takes_over_its_hub_with_the_same_settings() {
        let hubs = Hubs::default();
        let first = hubs.hub("s", "output|/events", opts(10));
        hubs.hold("s");
        hubs.stopped("s");
        assert!(!first.retired().is_cancelled());
        let second = hubs.hub("s", "output|/events", opts(10));
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(
            hubs.settle("s"),
            Settled {
                kept: 1,
                retired: 0
            }
        );
        assert!(!second.retired().is_cancelled());
        assert_eq!(hubs.len(), 1);
    }

    #[test]
    fn other_settings_or_routes_get_a_new_hub_and_the_old_one_is_retired() {
        let hubs = Hubs::default();
        let a = hubs.hub("s", "output|/a", opts(10));
        let b = hubs.hub("s", "output|/b", opts(10));
        hubs.hold("s");
        hubs.stopped("s");
        let a2 = hubs.hub("s", "output|/a", opts(20));
        let b2 = hubs.hub("s", "output|/b2", opts(10));
        assert!(!Arc::ptr_eq(&a, &a2) && !Arc::ptr_eq(&b, &b2));
        assert_eq!(
            hubs.settle("s"),
            Settled {
                kept: 2,
                retired: 2
            }
        );
        assert!(a.retired().is_cancelled() && b.retired().is_cancelled());
        assert!(!a2.retired().is_cancelled() && !b2.retired().is_cancelled());
    }

    #[test]
    fn a_stream_stopped_for_good_or_failing_to_build_retires_its_hubs() {
        let hubs = Hubs::default();
        let a = hubs.hub("s", "output|/a", opts(10));
        hubs.stopped("s");
        assert!(a.retired().is_cancelled());
        assert_eq!(hubs.len(), 0);

        let b = hubs.hub("t", "output|/b", opts(10));
        hubs.hold("t");
        hubs.stopped("t");
        let b2 = hubs.hub("t", "output|/b", opts(10));
        hubs.failed("t");
        assert!(b.retired().is_cancelled() && b2.retired().is_cancelled());
        assert_eq!(hubs.len(), 0);
    }
}
