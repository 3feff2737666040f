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

/// The running state of one retry sequence.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    current: StdDuration,
    elapsed: StdDuration,
}

impl Backoff {
    pub fn new(config: BackoffConfig) -> Self {
        Backoff {
            current: config.initial_interval.0,
            config,
            elapsed: StdDuration::ZERO,
        }
    }

    /// The next wait, or `None` once `max_elapsed_time` is used up.
    pub fn next_delay(&mut self) -> Option<StdDuration> {
        let max_elapsed = self.config.max_elapsed_time.0;
        if !max_elapsed.is_zero() && self.elapsed >= max_elapsed {
            return None;
        }
        let base = self.current.min(self.config.max_interval.0);
        // Up to 20% jitter so that many clients do not retry in step.
        let jitter = base.mul_f64(rand::thread_rng().gen_range(0.0..0.2));
        let delay = base + jitter;
        self.current = self.current.saturating_mul(2);
        self.elapsed += delay;
        Some(delay)
    }

    pub fn reset(&mut self) {
        self.current = self.config.initial_interval.0;
        self.elapsed = StdDuration::ZERO;
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
}
