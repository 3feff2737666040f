//! A time budget for mappings that arrive as data. A tenant's mapping may loop a million
//! times over a million items; running it to the end would hold a serving thread for
//! seconds. Such mappings run under a deadline that the executor checks as it goes (every
//! few lambda calls, method calls and function calls), ending the run with an error once
//! it has passed. The operator's mappings run without one.
//!
//! Each single step is already bounded (ranges hold at most a million items, strings
//! and buffers at most a few hundred megabytes), so a run ends soon after its deadline.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long one run of a tenant's mapping may take: one message through a `mapping`
/// processor, one playground run.
pub const TENANT: Duration = Duration::from_millis(250);

/// How long compiling a tenant's mapping may take, constant parts computed included.
/// Compiling happens once per stream start (or playground run), off the serving threads.
pub const TENANT_COMPILE: Duration = Duration::from_secs(2);

/// Steps between two reads of the clock.
const STEPS_PER_CHECK: u32 = 64;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static STEPS: Cell<u32> = const { Cell::new(STEPS_PER_CHECK) };
}

/// Runs under a budget until dropped; the budget of an enclosing run still applies
/// (a mapping that runs another, as `bloblang()` does, gets the earlier deadline).
#[must_use]
pub struct Guard {
    previous: Option<Option<Instant>>,
    deadline: Option<Instant>,
}

impl Guard {
    /// Whether this run's deadline has passed (a run that failed for lack of time).
    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Starts a run under `limit` (none: the operator's mapping, or no change).
pub fn start(limit: Option<Duration>) -> Guard {
    let Some(limit) = limit else {
        return Guard {
            previous: None,
            deadline: None,
        };
    };
    let deadline = Instant::now() + limit;
    let previous = DEADLINE.with(|d| d.get());
    let next = previous.map_or(deadline, |p| p.min(deadline));
    DEADLINE.with(|d| d.set(Some(next)));
    Guard {
        previous: Some(previous),
        deadline: Some(next),
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            DEADLINE.with(|d| d.set(previous));
        }
    }
}

/// A run past its deadline.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "the mapping ran out of time: a mapping that arrives as data may run for {} ms at a time",
    TENANT.as_millis()
)]
pub struct OverBudget;

/// Counts one step of the run on this thread, failing once its deadline has passed.
#[inline]
pub fn step() -> Result<(), OverBudget> {
    DEADLINE.with(|d| match d.get() {
        None => Ok(()),
        Some(deadline) => STEPS.with(|s| {
            let left = s.get() - 1;
            if left > 0 {
                s.set(left);
                return Ok(());
            }
            s.set(STEPS_PER_CHECK);
            if Instant::now() >= deadline {
                Err(OverBudget)
            } else {
                Ok(())
            }
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_fails_once_its_deadline_passes_and_the_outer_one_still_holds() {
        assert!(step().is_ok(), "no budget: no limit");
        let outer = start(Some(Duration::from_millis(20)));
        {
            let _inner = start(Some(Duration::from_secs(60)));
            std::thread::sleep(Duration::from_millis(30));
            let failed = (0..=STEPS_PER_CHECK).any(|_| step().is_err());
            assert!(failed, "the outer deadline applies inside");
        }
        let failed = (0..=STEPS_PER_CHECK).any(|_| step().is_err());
        assert!(failed);
        drop(outer);
        assert!((0..=STEPS_PER_CHECK).all(|_| step().is_ok()));
    }
}
