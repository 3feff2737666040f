//! The live tail: a sample of the messages a stream's outputs delivered, for the
//! console. It is off until someone asks (`open`), closes by itself shortly after the
//! last ask, keeps at most `KEEP` messages and samples at most one write in
//! `EVERY_MS`, so an open tail costs a busy stream next to nothing and a closed one a
//! single atomic load per write.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::message::Batch;

/// The most messages a tail keeps.
pub const KEEP: usize = 50;
/// The least time between two samples, in milliseconds.
pub const EVERY_MS: i64 = 100;
/// How long a tail stays open after it was last asked for, in milliseconds.
pub const OPEN_MS: i64 = 30_000;
/// The most payload bytes kept of a message.
pub const PAYLOAD_BYTES: usize = 2048;

/// One sampled message.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Increases by one per sample of this stream.
    pub seq: u64,
    /// Unix milliseconds.
    pub at: i64,
    /// The payload, cut at `PAYLOAD_BYTES`.
    pub payload: Vec<u8>,
    pub truncated: bool,
    /// Metadata as text.
    pub metadata: Vec<(String, String)>,
}

/// The tail of one stream.
#[derive(Default)]
pub struct Tap {
    /// Unix milliseconds until which samples are taken; 0 when closed.
    open_until: AtomicI64,
    last: AtomicI64,
    seq: AtomicU64,
    kept: Mutex<VecDeque<Sample>>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Tap {
    /// Takes a sample of a delivered batch when the tail is open and the last sample
    /// is old enough.
    pub fn offer(&self, batch: &Batch) {
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return;
        }
        let now = now_ms();
        if now > until {
            // Nobody asked for a while: close, and forget what was kept.
            self.open_until.store(0, Ordering::Relaxed);
            self.kept.lock().clear();
            return;
        }
        let last = self.last.load(Ordering::Relaxed);
        if now - last < EVERY_MS
            || self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let Some(msg) = batch.first() else {
            return;
        };
        let payload = msg.payload();
        let cut = payload.len().min(PAYLOAD_BYTES);
        let sample = Sample {
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            at: now,
            payload: payload[..cut].to_vec(),
            truncated: cut < payload.len(),
            metadata: msg
                .metadata()
                .iter()
                .map(|(k, v)| (k.clone(), v.to_text()))
                .collect(),
        };
        let mut kept = self.kept.lock();
        if kept.len() == KEEP {
            kept.pop_front();
        }
        kept.push_back(sample);
    }

    /// Opens the tail (or keeps it open) for `OPEN_MS` and returns the samples after
    /// `after`.
    pub fn read(&self, after: u64) -> Vec<Sample> {
        self.open_until.store(now_ms() + OPEN_MS, Ordering::Relaxed);
        self.kept
            .lock()
            .iter()
            .filter(|s| s.seq > after)
            .cloned()
            .collect()
    }
}

type Registry = RwLock<HashMap<String, Arc<Tap>>>;

fn registry() -> &'static Registry {
    static TAPS: OnceLock<Registry> = OnceLock::new();
    TAPS.get_or_init(Default::default)
}

/// The tail of stream `name`, made on first use; a stream started again under the same
/// name keeps it.
pub fn of(name: &str) -> Arc<Tap> {
    if let Some(tap) = registry().read().get(name) {
        return tap.clone();
    }
    registry()
        .write()
        .entry(name.to_owned())
        .or_default()
        .clone()
}

/// The tail of stream `name`, if a stream of that name was built in this process.
pub fn find(name: &str) -> Option<Arc<Tap>> {
    registry().read().get(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[test]
    fn samples_only_while_open_and_bounded() {
        let tap = Tap::default();
        let batch = vec![Message::new(b"hello".to_vec())];
        tap.offer(&batch);
        assert!(tap.read(0).is_empty(), "closed: nothing taken");
        // Opened by the read: the next write is sampled, one within EVERY_MS is not.
        tap.offer(&batch);
        tap.offer(&batch);
        let got = tap.read(0);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, b"hello");
        assert!(tap.read(got[0].seq).is_empty());
        // At most KEEP, the newest.
        for i in 0..(KEEP + 5) {
            tap.last.store(0, Ordering::Relaxed);
            tap.offer(&vec![Message::new(format!("m{i}").into_bytes())]);
        }
        let got = tap.read(0);
        assert_eq!(got.len(), KEEP);
        assert_eq!(
            got.last().unwrap().payload,
            format!("m{}", KEEP + 4).as_bytes()
        );
        // Big payloads are cut.
        tap.last.store(0, Ordering::Relaxed);
        tap.offer(&vec![Message::new(vec![b'x'; PAYLOAD_BYTES + 10])]);
        let last = tap.read(0).pop().unwrap();
        assert!(last.truncated);
        assert_eq!(last.payload.len(), PAYLOAD_BYTES);
        // Closed after OPEN_MS without a read: nothing kept, nothing taken.
        tap.open_until.store(1, Ordering::Relaxed);
        tap.offer(&batch);
        assert!(tap.kept.lock().is_empty());
    }

    #[test]
    fn one_tap_per_stream_name() {
        let a = of("tap-test.a");
        assert!(Arc::ptr_eq(&a, &of("tap-test.a")));
        assert!(find("tap-test.b").is_none());
    }
}
