//! Exponential backoff with jitter, for reconnects and retries.

use std::time::Duration as StdDuration;

use rand::Rng;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::duration::Duration;

/// A backoff policy as users configure it.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BackoffConfig {
    /// Wait before the first retry.
    pub initial_interval: Duration,
    /// Longest wait between two retries.
    pub max_interval: Duration,
    /// Give up once this much time has passed since the first failure (0s: never).
    pub max_elapsed_time: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial_interval: Duration::from_millis(500),
            max_interval: Duration::from_secs(3),
            max_elapsed_time: Duration::from_secs(0),
        }
    }
}

/// The running state of one retry sequence: waits that grow from an initial one by
/// doubling up to a cap, with optional jitter, until an elapsed-time or attempt budget is
/// used up. Every back-off in the runtime and its components is one of these.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: StdDuration,
    max: StdDuration,
    /// Up to this fraction of each wait is added at random.
    jitter: f64,
    /// Give up once the waits add up to this much (zero: never).
    max_elapsed: StdDuration,
    /// Give up after this many waits (`None`: never).
    max_attempts: Option<u32>,
    current: StdDuration,
    elapsed: StdDuration,
    attempts: u32,
}

impl Backoff {
    /// The policy a user configured, with up to 20% jitter so that many clients do not
    /// retry in step.
    pub fn new(config: BackoffConfig) -> Self {
        Backoff::exponential(config.initial_interval.0, config.max_interval.0)
            .with_jitter(0.2)
            .with_max_elapsed(config.max_elapsed_time.0)
    }

    /// Waits of `initial`, doubling up to `max`, without jitter or limits.
    pub fn exponential(initial: StdDuration, max: StdDuration) -> Self {
        Backoff {
            initial,
            max,
            jitter: 0.0,
            max_elapsed: StdDuration::ZERO,
            max_attempts: None,
            current: initial,
            elapsed: StdDuration::ZERO,
            attempts: 0,
        }
    }

    /// Adds up to `fraction` (at most 1) of each wait at random (0: exact waits).
    pub fn with_jitter(mut self, fraction: f64) -> Self {
        self.jitter = fraction.clamp(0.0, 1.0);
        self
    }

    /// Gives up once the waits add up to `limit` (zero: never).
    pub fn with_max_elapsed(mut self, limit: StdDuration) -> Self {
        self.max_elapsed = limit;
        self
    }

    /// Gives up after `attempts` waits.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Waits handed out since the start or the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The next wait, or `None` once the elapsed-time or attempt budget is used up.
    pub fn next_delay(&mut self) -> Option<StdDuration> {
        if !self.max_elapsed.is_zero() && self.elapsed >= self.max_elapsed {
            return None;
        }
        if self.max_attempts.is_some_and(|max| self.attempts >= max) {
            return None;
        }
        let base = self.current.min(self.max);
        let delay = if self.jitter > 0.0 {
            base.saturating_add(base.mul_f64(rand::thread_rng().gen_range(0.0..self.jitter)))
        } else {
            base
        };
        self.current = self.current.saturating_mul(2);
        self.elapsed = self.elapsed.saturating_add(delay);
        self.attempts += 1;
        Some(delay)
    }

    pub fn reset(&mut self) {
        self.current = self.initial;
        self.elapsed = StdDuration::ZERO;
        self.attempts = 0;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(BackoffConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_and_resets() {
        let mut b = Backoff::new(BackoffConfig {
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_millis(400),
            max_elapsed_time: Duration::from_secs(0),
        });
        let d: Vec<_> = (0..5).map(|_| b.next_delay().unwrap()).collect();
        assert!(d[0] >= StdDuration::from_millis(100) && d[0] < StdDuration::from_millis(121));
        assert!(d[2] >= StdDuration::from_millis(400));
        assert!(d[4] < StdDuration::from_millis(481));
        b.reset();
        assert!(b.next_delay().unwrap() < StdDuration::from_millis(121));
    }

    #[test]
    fn gives_up_after_max_elapsed() {
        let mut b = Backoff::new(BackoffConfig {
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_millis(100),
            max_elapsed_time: Duration::from_millis(250),
        });
        let mut n = 0;
        while b.next_delay().is_some() {
            n += 1;
        }
        assert!((2..=3).contains(&n));
    }

    fn ms(n: u64) -> StdDuration {
        StdDuration::from_millis(n)
    }

    #[test]
    fn without_jitter_waits_double_exactly_up_to_the_cap() {
        let mut b = Backoff::exponential(ms(50), ms(300));
        let d: Vec<_> = (0..6).map(|_| b.next_delay().unwrap()).collect();
        assert_eq!(d, [ms(50), ms(100), ms(200), ms(300), ms(300), ms(300)]);
        assert_eq!(b.attempts(), 6);
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.next_delay(), Some(ms(50)));
    }

    #[test]
    fn jitter_adds_at_most_its_fraction() {
        let mut b = Backoff::exponential(ms(100), ms(100)).with_jitter(0.5);
        for _ in 0..100 {
            let d = b.next_delay().unwrap();
            assert!(d >= ms(100) && d < ms(150), "{d:?}");
        }
    }

    #[test]
    fn gives_up_after_max_attempts_until_reset() {
        let mut b = Backoff::exponential(ms(1), ms(8)).with_max_attempts(3);
        assert_eq!(
            [
                b.next_delay(),
                b.next_delay(),
                b.next_delay(),
                b.next_delay()
            ],
            [Some(ms(1)), Some(ms(2)), Some(ms(4)), None]
        );
        b.reset();
        assert_eq!(b.next_delay(), Some(ms(1)));
        let mut none = Backoff::exponential(ms(1), ms(8)).with_max_attempts(0);
        assert_eq!(none.next_delay(), None);
    }

    #[test]
    fn a_long_sequence_saturates_instead_of_overflowing() {
        let mut b = Backoff::exponential(StdDuration::from_secs(1), StdDuration::MAX);
        for _ in 0..200 {
            assert!(b.next_delay().is_some());
        }
    }
}
