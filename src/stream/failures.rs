//! Streams that failed for good: an input that could not connect after a set number of
//! attempts in a row gives up instead of trying forever, and its stream ends; the reason
//! is kept here for whoever runs the streams to show.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// The streams that gave up, by name, with why.
#[derive(Debug, Default)]
pub struct Failures {
    failed: Mutex<BTreeMap<String, String>>,
}

impl Failures {
    pub fn record(&self, stream: &str, reason: String) {
        self.failed.lock().insert(stream.to_owned(), reason);
    }

    /// Forgets a stream (it was stopped or started again).
    pub fn clear(&self, stream: &str) {
        self.failed.lock().remove(stream);
    }

    pub fn list(&self) -> BTreeMap<String, String> {
        self.failed.lock().clone()
    }
}

/// When an input stops trying to connect, and where that is recorded.
#[derive(Debug, Clone)]
pub struct GiveUp {
    /// Failed connection attempts in a row after which the input gives up.
    pub after: u32,
    pub failures: Arc<Failures>,
}
