//! The in-memory backend: a small GCRA over a sharded map.
//!
//! Not `governor`: one governor limiter holds one quota for all its keys, so buckets with
//! differing rates (each key has its own) would need a limiter per distinct rate, and a
//! quota changed at run time a new limiter; its answers also do not carry the remaining count
//! and reset the `X-RateLimit-*` headers need, and its clock does not follow tokio's paused
//! time, which the tests use. The algorithm itself is a few lines.
//!
//! Each check locks one of [`SHARDS`] short mutexes (never across an await) and allocates
//! only when a bucket is first seen. A bucket whose TAT (or quota period) has passed carries
//! no state, so shards sweep such entries when they grow, keeping memory proportional to
//! the buckets in use.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{units_ceil, Decision, Gcra, LimitError, Rate};

/// Number of independently locked shards; a power of two.
const SHARDS: usize = 64;
/// A shard sweeps idle entries once it holds at least this many (and then at twice the
/// live count), so the sweep's cost is spread over the inserts that made it necessary.
const MIN_SWEEP: usize = 1024;
const NANO: Duration = Duration::from_nanos(1);

/// Rate limits and quotas kept in this process's memory. Cheap to clone: clones share state.
#[derive(Clone)]
pub struct LocalLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    /// Time zero of the nanosecond clock the buckets use.
    epoch: Instant,
    /// Seed of the shard hash, so that bucket names chosen by clients cannot pile onto one
    /// shard.
    seed: u64,
    /// Each bucket's TAT, in nanoseconds since `epoch`.
    rates: Table<u64>,
    quotas: Table<Period>,
}

/// A quota period in progress.
#[derive(Debug, Clone, Copy)]
struct Period {
    count: u64,
    /// End of the period, in nanoseconds since `epoch`.
    ends: u64,
}

/// State that becomes worthless at some instant, after which it may be dropped.
trait Expiring {
    fn live(&self, now: u64) -> bool;
}

impl Expiring for u64 {
    fn live(&self, now: u64) -> bool {
        *self > now
    }
}

impl Expiring for Period {
    fn live(&self, now: u64) -> bool {
        self.ends > now
    }
}

struct Table<V> {
    shards: Box<[Shard<V>]>,
    min_sweep: usize,
}

/// Aligned to keep two shards' locks off one cache line.
#[repr(align(128))]
struct Shard<V>(Mutex<ShardMap<V>>);

struct ShardMap<V> {
    /// Bucket names are made by the gateway from API, operation and key ids, never
    /// taken from a request: a fast hash serves (SipHash was a tenth of a limit check).
    map: HashMap<Box<str>, V, foldhash::fast::RandomState>,
    /// Sweep before the insert that would reach this length.
    sweep_at: usize,
}

impl<V: Expiring + Copy> Table<V> {
    fn new(min_sweep: usize) -> Self {
        Table {
            shards: (0..SHARDS)
                .map(|_| {
                    Shard(Mutex::new(ShardMap {
                        map: HashMap::default(),
                        sweep_at: min_sweep,
                    }))
                })
                .collect(),
            min_sweep,
        }
    }

    /// Runs `decide` on the bucket's current state (maybe stale, maybe absent) under its
    /// shard's lock, and stores the state it returns, if any.
    fn update<R>(
        &self,
        hash: u64,
        bucket: &str,
        now: u64,
        decide: impl FnOnce(Option<V>) -> (R, Option<V>),
    ) -> R {
        let mut shard = self.shards[hash as usize & (SHARDS - 1)].0.lock();
        if let Some(slot) = shard.map.get_mut(bucket) {
            let (r, new) = decide(Some(*slot));
            if let Some(v) = new {
                *slot = v;
            }
            return r;
        }
        let (r, new) = decide(None);
        if let Some(v) = new {
            shard.insert(bucket, v, now, self.min_sweep);
        }
        r
    }

    fn remove(&self, hash: u64, bucket: &str) {
        self.shards[hash as usize & (SHARDS - 1)]
            .0
            .lock()
            .map
            .remove(bucket);
    }

    fn sweep(&self, now: u64) {
        for shard in self.shards.iter() {
            shard.0.lock().sweep(now, self.min_sweep);
        }
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().map.len()).sum()
    }
}

impl<V: Expiring> ShardMap<V> {
    fn insert(&mut self, bucket: &str, v: V, now: u64, min_sweep: usize) {
        if self.map.len() + 1 >= self.sweep_at {
            self.sweep(now, min_sweep);
        }
        self.map.insert(Box::from(bucket), v);
    }

    fn sweep(&mut self, now: u64, min_sweep: usize) {
        self.map.retain(|_, v| v.live(now));
        let live = self.map.len();
        // A burst of buckets that has passed should not pin its table's memory.
        if self.map.capacity() > 4 * live.max(min_sweep) {
            self.map.shrink_to(2 * live);
        }
        self.sweep_at = min_sweep.max(2 * live);
    }
}

impl LocalLimiter {
    /// An empty limiter.
    pub fn new() -> Self {
        Self::with_min_sweep(MIN_SWEEP)
    }

    fn with_min_sweep(min_sweep: usize) -> Self {
        LocalLimiter {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                seed: std::collections::hash_map::RandomState::new().hash_one(0u8),
                rates: Table::new(min_sweep),
                quotas: Table::new(min_sweep),
            }),
        }
    }

    /// Nanoseconds since the epoch; tokio's clock, so paused time in tests moves it.
    fn now(&self) -> u64 {
        let d = Instant::now().saturating_duration_since(self.inner.epoch);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    fn hash(&self, bucket: &str) -> u64 {
        xxhash_rust::xxh64::xxh64(bucket.as_bytes(), self.inner.seed)
    }

    /// One request against the bucket's rate. Allowed requests consume; refused ones do not.
    pub fn check_rate(&self, bucket: &str, rate: Rate) -> Result<Decision, LimitError> {
        self.rate(bucket, rate, true)
    }

    /// What [`check_rate`](Self::check_rate) would answer, consuming nothing: for limits
    /// that count only some outcomes (failed sign-ins), checked before and counted after.
    pub fn peek_rate(&self, bucket: &str, rate: Rate) -> Result<Decision, LimitError> {
        self.rate(bucket, rate, false)
    }

    fn rate(&self, bucket: &str, rate: Rate, consume: bool) -> Result<Decision, LimitError> {
        rate.validate()?;
        let g = Gcra::new(rate, NANO);
        let now = self.now();
        let limit = rate.rate;
        Ok(self
            .inner
            .rates
            .update(self.hash(bucket), bucket, now, |tat| {
                let tat = tat.unwrap_or(now).max(now);
                let new_tat = tat.saturating_add(g.interval);
                let ahead = new_tat - now;
                if ahead > g.allowance {
                    let refused = Decision {
                        allowed: false,
                        limit,
                        remaining: 0,
                        reset: Duration::from_nanos(tat - now),
                        retry_after: Some(Duration::from_nanos(ahead - g.allowance)),
                    };
                    return (refused, None);
                }
                let allowed = Decision {
                    allowed: true,
                    limit,
                    remaining: g.remaining(ahead),
                    reset: Duration::from_nanos(ahead),
                    retry_after: None,
                };
                (allowed, consume.then_some(new_tat))
            }))
    }

    /// One request against the bucket's quota: at most `max` per `renewal`, counted from the
    /// first request of the period; refused requests do not count.
    pub fn check_quota(
        &self,
        bucket: &str,
        max: u64,
        renewal: Duration,
    ) -> Result<Decision, LimitError> {
        if renewal.is_zero() {
            return Err(LimitError::InvalidQuota);
        }
        let renewal = units_ceil(renewal, NANO);
        let now = self.now();
        Ok(self
            .inner
            .quotas
            .update(self.hash(bucket), bucket, now, |period| {
                let refused = |left: u64| Decision {
                    allowed: false,
                    limit: max,
                    remaining: 0,
                    reset: Duration::from_nanos(left),
                    retry_after: Some(Duration::from_nanos(left)),
                };
                let allowed = |count: u64, left: u64| Decision {
                    allowed: true,
                    limit: max,
                    remaining: max - count,
                    reset: Duration::from_nanos(left),
                    retry_after: None,
                };
                match period.filter(|p| p.live(now)) {
                    Some(p) if p.count >= max => (refused(p.ends - now), None),
                    Some(p) => {
                        let p = Period {
                            count: p.count + 1,
                            ends: p.ends,
                        };
                        (allowed(p.count, p.ends - now), Some(p))
                    }
                    // A refused request does not start a period.
                    None if max == 0 => (refused(renewal), None),
                    None => {
                        let p = Period {
                            count: 1,
                            ends: now.saturating_add(renewal),
                        };
                        (allowed(1, renewal), Some(p))
                    }
                }
            }))
    }

    /// Forgets the bucket's rate and quota state.
    pub fn reset(&self, bucket: &str) {
        let hash = self.hash(bucket);
        self.inner.rates.remove(hash, bucket);
        self.inner.quotas.remove(hash, bucket);
    }

    /// Drops every bucket that carries no state any more. Shards also do this on their own
    /// as they grow; this is for callers that want memory back at a time of their choosing.
    pub fn evict_idle(&self) {
        let now = self.now();
        self.inner.rates.sweep(now);
        self.inner.quotas.sweep(now);
    }

    /// Entries held, rate and quota together, including idle ones not yet swept.
    pub fn len(&self) -> usize {
        self.inner.rates.len() + self.inner.quotas.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for LocalLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LocalLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimiter")
            .field("entries", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    fn per_minute(rate: u64) -> Rate {
        Rate::new(rate, Duration::from_secs(60)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn burst_edge_is_exact() {
        let l = LocalLimiter::new();
        for left in (0..5).rev() {
            let d = l.check_rate("k", per_minute(5)).unwrap();
            assert!(d.allowed);
            assert_eq!((d.limit, d.remaining, d.retry_after), (5, left, None));
            assert_eq!(d.reset, Duration::from_secs(12 * (5 - left)));
        }
        let d = l.check_rate("k", per_minute(5)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after, Some(Duration::from_secs(12)));
        assert_eq!(d.reset, Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn refused_requests_do_not_consume() {
        let l = LocalLimiter::new();
        for _ in 0..5 {
            assert!(l.check_rate("k", per_minute(5)).unwrap().allowed);
        }
        for _ in 0..100 {
            assert!(!l.check_rate("k", per_minute(5)).unwrap().allowed);
        }
        // Were refusals counted, the bucket would still be empty after one interval.
        advance(Duration::from_secs(12)).await;
        let d = l.check_rate("k", per_minute(5)).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        assert!(!l.check_rate("k", per_minute(5)).unwrap().allowed);
    }

    #[tokio::test(start_paused = true)]
    async fn refills_one_interval_at_a_time() {
        let l = LocalLimiter::new();
        for _ in 0..5 {
            l.check_rate("k", per_minute(5)).unwrap();
        }
        advance(Duration::from_secs(11)).await;
        let d = l.check_rate("k", per_minute(5)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
        advance(Duration::from_secs(1)).await;
        assert!(l.check_rate("k", per_minute(5)).unwrap().allowed);
        // After a full period of silence the whole burst is back.
        advance(Duration::from_secs(60)).await;
        for left in (0..5).rev() {
            assert_eq!(l.check_rate("k", per_minute(5)).unwrap().remaining, left);
        }
        assert!(!l.check_rate("k", per_minute(5)).unwrap().allowed);
    }

    #[tokio::test(start_paused = true)]
    async fn buckets_are_independent() {
        let l = LocalLimiter::new();
        assert!(l.check_rate("a", per_minute(1)).unwrap().allowed);
        assert!(!l.check_rate("a", per_minute(1)).unwrap().allowed);
        assert!(l.check_rate("b", per_minute(1)).unwrap().allowed);
        // Rate and quota state of one name are separate too.
        let q = l.check_quota("a", 1, Duration::from_secs(60)).unwrap();
        assert!(q.allowed);
    }

    #[tokio::test(start_paused = true)]
    async fn quota_counts_and_renews() {
        let l = LocalLimiter::new();
        let hour = Duration::from_secs(3600);
        for left in (0..3).rev() {
            let d = l.check_quota("k", 3, hour).unwrap();
            assert!(d.allowed);
            assert_eq!((d.limit, d.remaining, d.reset), (3, left, hour));
        }
        advance(Duration::from_secs(600)).await;
        for _ in 0..10 {
            let d = l.check_quota("k", 3, hour).unwrap();
            assert!(!d.allowed);
            assert_eq!(d.reset, Duration::from_secs(3000));
            assert_eq!(d.retry_after, Some(Duration::from_secs(3000)));
        }
        advance(Duration::from_secs(3000)).await;
        // A new period starts with the first request after the old one ended.
        advance(Duration::from_secs(100)).await;
        let d = l.check_quota("k", 3, hour).unwrap();
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset), (2, hour));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_quota_refuses_without_starting_a_period() {
        let l = LocalLimiter::new();
        let d = l.check_quota("k", 0, Duration::from_secs(60)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(60)));
        assert!(l.is_empty());
        assert!(matches!(
            l.check_quota("k", 1, Duration::ZERO),
            Err(LimitError::InvalidQuota)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn reset_forgets_rate_and_quota() {
        let l = LocalLimiter::new();
        assert!(l.check_rate("k", per_minute(1)).unwrap().allowed);
        assert!(
            l.check_quota("k", 1, Duration::from_secs(60))
                .unwrap()
                .allowed
        );
        l.reset("k");
        assert!(l.is_empty());
        assert!(l.check_rate("k", per_minute(1)).unwrap().allowed);
        assert!(
            l.check_quota("k", 1, Duration::from_secs(60))
                .unwrap()
                .allowed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_buckets_are_evicted() {
        let l = LocalLimiter::with_min_sweep(8);
        let names: Vec<String> = (0..10_000).map(|i| format!("k{i}")).collect();
        for n in &names {
            l.check_rate(n, per_minute(10)).unwrap();
        }
        assert_eq!(l.len(), 10_000);
        // One interval (6s) later every bucket's TAT has passed: none carries state.
        advance(Duration::from_secs(6)).await;
        l.evict_idle();
        assert!(l.is_empty());

        // Without an explicit sweep, growth sweeps: a steady stream of new names never
        // holds much more than the live ones.
        for (i, n) in names.iter().enumerate() {
            l.check_rate(n, per_minute(10)).unwrap();
            if i % 100 == 99 {
                advance(Duration::from_secs(6)).await;
            }
        }
        assert!(l.len() < 100 + SHARDS * 8 * 2, "{} entries held", l.len());
    }

    #[tokio::test]
    async fn a_peek_consumes_nothing() {
        let l = LocalLimiter::new();
        let rate = Rate::new(2, Duration::from_secs(60)).unwrap();
        for _ in 0..5 {
            assert!(l.peek_rate("b", rate).unwrap().allowed);
        }
        assert!(l.check_rate("b", rate).unwrap().allowed);
        assert!(l.check_rate("b", rate).unwrap().allowed);
        assert!(!l.peek_rate("b", rate).unwrap().allowed);
        assert!(!l.check_rate("b", rate).unwrap().allowed);
    }

    #[test]
    fn rates_that_do_not_divide_evenly_keep_the_burst() {
        let l = LocalLimiter::new();
        let rate = Rate::new(3, Duration::from_secs(1)).unwrap();
        let allowed = (0..10)
            .filter(|_| l.check_rate("k", rate).unwrap().allowed)
            .count();
        // Not paused: real time passes, but far less than the 333ms a refill takes.
        assert_eq!(allowed, 3);
    }

    #[tokio::test]
    async fn clones_share_state() {
        let a = LocalLimiter::new();
        let b = a.clone();
        assert!(a.check_rate("k", per_minute(1)).unwrap().allowed);
        assert!(!b.check_rate("k", per_minute(1)).unwrap().allowed);
    }
}
