//! The batching policy any output accepts: flush at a message count, a byte size or after
//! a period, whichever comes first.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::duration::Duration;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BatchPolicy {
    /// Flush once this many messages are waiting (0: no count limit).
    pub count: usize,
    /// Flush once the waiting payloads reach this many bytes (0: no size limit).
    pub byte_size: usize,
    /// Flush waiting messages this long after the first arrived (unset: no timer).
    pub period: Option<Duration>,
}

impl BatchPolicy {
    /// No policy: every incoming batch is written as it arrives.
    pub fn is_noop(&self) -> bool {
        self.count <= 1 && self.byte_size == 0 && self.period.is_none()
    }

    /// The most reads (transactions) one flush holds. A count bounds them, as every read
    /// brings at least one message; without one, a flush goes out at `fallback` reads, so
    /// that an input waiting for its reads to settle never waits on a flush that waits
    /// for more reads.
    pub fn max_reads(&self, fallback: usize) -> usize {
        if self.is_noop() {
            1
        } else if self.count > 0 {
            self.count
        } else {
            fallback.max(1)
        }
    }

    /// Whether `messages` waiting messages of `bytes` total must be flushed now.
    pub fn is_full(&self, messages: usize, bytes: usize) -> bool {
        self.is_noop()
            || (self.count > 0 && messages >= self.count)
            || (self.byte_size > 0 && bytes >= self.byte_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_by_count_or_bytes() {
        let p = BatchPolicy {
            count: 3,
            byte_size: 100,
            period: None,
        };
        assert!(!p.is_full(2, 50));
        assert!(p.is_full(3, 1));
        assert!(p.is_full(1, 100));
        assert!(BatchPolicy::default().is_full(1, 0));
    }

    #[test]
    fn period_only_policy_waits_for_the_timer() {
        let p = BatchPolicy {
            count: 0,
            byte_size: 0,
            period: Some(Duration::from_secs(1)),
        };
        assert!(!p.is_noop());
        assert!(!p.is_full(1000, 1 << 20));
    }

    #[test]
    fn a_flush_holds_at_most_count_reads_or_else_the_fallback() {
        assert_eq!(BatchPolicy::default().max_reads(64), 1);
        let counted = BatchPolicy {
            count: 500,
            byte_size: 0,
            period: Some(Duration::from_secs(1)),
        };
        assert_eq!(counted.max_reads(64), 500);
        let sized = BatchPolicy {
            count: 0,
            byte_size: 1 << 20,
            period: None,
        };
        assert_eq!(sized.max_reads(64), 64);
    }
}
