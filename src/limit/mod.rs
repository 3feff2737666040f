//! Rate limits and quotas: the gateway's per key, per API and per operation, and the
//! `rate_limit_resources` of streams.
//!
//! A [`Limiter`] answers one question per request: may this request pass the bucket's
//! rate (or quota), and what should the client be told about it. Buckets are named by the
//! caller (`key:abc`, `api:petstore`, `api:petstore:getPet`, ...); each name has one rate
//! state and one quota state.
//!
//! Two backends give the same answers:
//! - [`Limiter::local`] keeps the state in this process's memory;
//! - [`Limiter::redis`] keeps it in Redis, so that every gateway sharing that Redis enforces
//!   one combined, exact limit. Each check is one atomic Lua script that reads the Redis
//!   server's clock, so gateways with skewed clocks still agree.
//!
//! Rates use the generic cell rate algorithm (GCRA) with a burst equal to the rate: with
//! `rate` requests `per` duration, `rate` requests may arrive at once, after which one more
//! is let through every `per / rate`. The bucket is a single timestamp, its theoretical
//! arrival time (TAT): the moment at which the bucket would be empty again. A request is
//! allowed when pushing the TAT one interval further keeps it within `per` of now.
//!
//! Quotas count requests in fixed periods: a period starts with the first request after the
//! previous one ended, and at most `max` requests pass until it ends.

mod local;
mod redis;

use std::time::Duration;

pub use self::local::LocalLimiter;
pub use self::redis::RedisLimiter;

/// How long a Redis limiter waits for a connection or an answer before the check fails.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// A rate: at most `rate` requests at once, refilled evenly over `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests allowed per `per`; also the burst size.
    pub rate: u64,
    /// The period over which `rate` requests are refilled.
    pub per: Duration,
}

impl Rate {
    /// A rate of `rate` requests per `per`. Both must be above zero.
    pub fn new(rate: u64, per: Duration) -> Result<Self, LimitError> {
        let r = Rate { rate, per };
        r.validate()?;
        Ok(r)
    }

    fn validate(&self) -> Result<(), LimitError> {
        if self.rate == 0 || self.per.is_zero() {
            return Err(LimitError::InvalidRate {
                rate: self.rate,
                per: self.per,
            });
        }
        Ok(())
    }
}

/// The answer to one check, with what the client is told in the `X-RateLimit-*` and
/// `Retry-After` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The bucket's limit (the rate, or the quota's maximum): `X-RateLimit-Limit`.
    pub limit: u64,
    /// Requests left after this one: `X-RateLimit-Remaining`.
    pub remaining: u64,
    /// For a rate, how long until the whole burst is available again; for a quota, how long
    /// until it renews: `X-RateLimit-Reset`.
    pub reset: Duration,
    /// When refused, how long until one request would pass: `Retry-After` (the caller
    /// rounds it up to whole seconds). `None` when allowed.
    pub retry_after: Option<Duration>,
}

/// Why a check could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// Redis refused the connection or the command, or answered something unexpected.
    #[error("rate limit store (Redis): {0}")]
    Redis(String),
    /// Redis did not answer in time.
    #[error("rate limit store (Redis) did not answer within {0:?}")]
    Timeout(Duration),
    /// A rate that cannot be enforced.
    #[error("a rate of {rate} per {per:?} cannot be enforced: both must be above zero")]
    InvalidRate {
        /// The requests per period given.
        rate: u64,
        /// The period given.
        per: Duration,
    },
    /// A quota whose renewal period is zero.
    #[error("a quota must renew after a period above zero")]
    InvalidQuota,
}

/// Rate limits and quotas, kept in memory or in Redis. Cheap to clone: clones share state.
#[derive(Clone, Debug)]
pub enum Limiter {
    /// State in this process's memory.
    Local(LocalLimiter),
    /// State in Redis, shared by every limiter using the same Redis and prefix.
    Redis(RedisLimiter),
}

impl Limiter {
    /// A limiter that keeps its state in this process.
    pub fn local() -> Self {
        Limiter::Local(LocalLimiter::new())
    }

    /// A limiter that keeps its state in Redis at `url`, under keys starting with `prefix`
    /// (taken verbatim, so end it with a separator such as `sluice:limit:`). Connects now and
    /// fails if Redis cannot be reached within [`DEFAULT_REDIS_TIMEOUT`].
    pub async fn redis(url: &str, prefix: &str) -> Result<Self, LimitError> {
        Ok(Limiter::Redis(
            RedisLimiter::connect(url, prefix, DEFAULT_REDIS_TIMEOUT).await?,
        ))
    }

    /// As [`Limiter::redis`], with `timeout` bounding the connection and every check.
    pub async fn redis_with_timeout(
        url: &str,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, LimitError> {
        Ok(Limiter::Redis(
            RedisLimiter::connect(url, prefix, timeout).await?,
        ))
    }

    /// One request against the bucket's rate. Allowed requests consume; refused ones do not.
    // The Redis exchanges are boxed here and below: their futures are large, and every
    // request's future would otherwise carry their room even when counting in memory.
    pub async fn check_rate(&self, bucket: &str, rate: Rate) -> Result<Decision, LimitError> {
        match self {
            Limiter::Local(l) => l.check_rate(bucket, rate),
            Limiter::Redis(r) => Box::pin(r.check_rate(bucket, rate)).await,
        }
    }

    /// One request against the bucket's quota: at most `max` per `renewal`, counted from the
    /// first request of the period; refused requests do not count.
    pub async fn check_quota(
        &self,
        bucket: &str,
        max: u64,
        renewal: Duration,
    ) -> Result<Decision, LimitError> {
        match self {
            Limiter::Local(l) => l.check_quota(bucket, max, renewal),
            Limiter::Redis(r) => Box::pin(r.check_quota(bucket, max, renewal)).await,
        }
    }

    /// Forgets a bucket's counters, rate and quota (used when a key's quota is reset or the
    /// key is deleted).
    pub async fn reset(&self, bucket: &str) -> Result<(), LimitError> {
        match self {
            Limiter::Local(l) => {
                l.reset(bucket);
                Ok(())
            }
            Limiter::Redis(r) => r.reset(bucket).await,
        }
    }
}

/// A rate's GCRA parameters in one clock unit (nanoseconds in memory, microseconds in Redis,
/// whose Lua numbers are doubles and hold whole microseconds of the epoch exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gcra {
    /// Time between two requests at the steady rate.
    interval: u64,
    /// How far ahead of now the TAT may run: `interval * rate`. Using this rather than `per`
    /// keeps the burst exactly `rate` when `per` does not divide evenly.
    allowance: u64,
}

impl Gcra {
    fn new(rate: Rate, unit: Duration) -> Self {
        let per = rate.per.as_nanos() / unit.as_nanos().max(1);
        let per = u64::try_from(per).unwrap_or(u64::MAX);
        // Faster than one request per unit cannot be expressed; it is enforced as one per unit.
        let interval = (per / rate.rate).max(1);
        Gcra {
            interval,
            allowance: interval.saturating_mul(rate.rate),
        }
    }

    /// Requests still available when the TAT runs `ahead` of now.
    fn remaining(&self, ahead: u64) -> u64 {
        self.allowance.saturating_sub(ahead) / self.interval
    }
}

/// `d` in whole `unit`s, rounded up so that a client waiting that long is never early.
fn units_ceil(d: Duration, unit: Duration) -> u64 {
    let unit = unit.as_nanos().max(1);
    u64::try_from(d.as_nanos().div_ceil(unit)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_parameters_keep_the_burst_exact() {
        let g = Gcra::new(
            Rate::new(5, Duration::from_secs(60)).unwrap(),
            Duration::from_nanos(1),
        );
        assert_eq!(g.interval, 12_000_000_000);
        assert_eq!(g.allowance, 60_000_000_000);
        // 3 per second does not divide a second evenly: the allowance is 3 whole intervals.
        let g = Gcra::new(
            Rate::new(3, Duration::from_secs(1)).unwrap(),
            Duration::from_micros(1),
        );
        assert_eq!((g.interval, g.allowance), (333_333, 999_999));
        assert_eq!(g.remaining(0), 3);
        assert_eq!(g.remaining(333_333), 2);
    }

    #[test]
    fn zero_rates_are_rejected() {
        assert!(matches!(
            Rate::new(0, Duration::from_secs(1)),
            Err(LimitError::InvalidRate { .. })
        ));
        assert!(Rate::new(1, Duration::ZERO).is_err());
    }

    #[test]
    fn units_round_up() {
        assert_eq!(
            units_ceil(Duration::from_nanos(1), Duration::from_millis(1)),
            1
        );
        assert_eq!(
            units_ceil(Duration::from_millis(2), Duration::from_millis(1)),
            2
        );
    }
}
