//! A time budget for mappings that arrive as data. A tenant's mapping may loop a million
//! times over a million items; running it to the end would hold a serving thread for
//! seconds. Such mappings run under a deadline that the executor checks as it goes (every
//! few lambda calls, method calls and function calls), ending the run with an error once
//! it has passed. The operator's mappings run without one.
//!
//! Each single step is already bounded (ranges hold at most a million items, strings
//! and buffers at most a few hundred megabytes), so a run ends soon after its deadline.
//!
//! Time alone does not bound memory: a value that doubles each step (`x + x` in a fold,
//! `[x, x]`, JSON of JSON) reaches gigabytes within a few dozen steps. So the runs that
//! have a deadline also hold every value they build to [`TENANT_VALUE`] bytes, checked
//! where values are built (as they are built when one step could make many times its
//! inputs), and what they store in their document, variables and metadata to
//! [`TENANT_STORED`] bytes in all.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::value::Value;

/// How long one run of a tenant's mapping may take: one message through a `mapping`
/// processor, one playground run.
pub const TENANT: Duration = Duration::from_millis(250);

/// How long compiling a tenant's mapping may take, constant parts computed included.
/// Compiling happens once per stream start (or playground run), off the serving threads.
pub const TENANT_COMPILE: Duration = Duration::from_secs(2);

/// The most memory one value a tenant's mapping builds may take, as
/// [`Value::size_within`] counts it (its text and bytes, about 40 bytes a value, 24 a key
/// and 720 an object): what the single steps already allow (`repeat()` up to 64 MiB, `range()` of a
/// million numbers) and room for rebuilding the documents a tenant's stream takes, within
/// what a run has time to build anyway.
pub const TENANT_VALUE: usize = 64 << 20;

/// The most one run of a tenant's mapping may store in its document, variables and
/// metadata, counted at each assignment (a value overwritten still counts): two values of
/// the largest size, where assigning one value again and again would fill memory.
pub const TENANT_STORED: usize = 2 * TENANT_VALUE;

/// Steps between two reads of the clock.
const STEPS_PER_CHECK: u32 = 64;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static STEPS: Cell<u32> = const { Cell::new(STEPS_PER_CHECK) };
    /// What the run on this thread has stored so far (see [`store`]).
    static STORED: Cell<usize> = const { Cell::new(0) };
}

/// Runs under a budget until dropped; the budget of an enclosing run still applies
/// (a mapping that runs another, as `bloblang()` does, gets the earlier deadline).
#[must_use]
pub struct Guard {
    previous: Option<Option<Instant>>,
    deadline: Option<Instant>,
    /// The enclosing run's count of stored bytes, given back when this one ends.
    stored: usize,
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
            stored: 0,
        };
    };
    let deadline = Instant::now() + limit;
    let previous = DEADLINE.with(|d| d.get());
    let next = previous.map_or(deadline, |p| p.min(deadline));
    DEADLINE.with(|d| d.set(Some(next)));
    Guard {
        previous: Some(previous),
        deadline: Some(next),
        stored: STORED.with(|s| s.replace(0)),
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            DEADLINE.with(|d| d.set(previous));
            STORED.with(|s| s.set(self.stored));
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

/// A value past [`TENANT_VALUE`], or stores past [`TENANT_STORED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TooLarge {
    #[error(
        "the mapping built a value larger than {TENANT_VALUE} bytes: a mapping that arrives as data may build values of at most {} MiB",
        TENANT_VALUE >> 20
    )]
    Value,
    #[error(
        "the mapping stored more than {TENANT_STORED} bytes in its document, variables and metadata: a mapping that arrives as data may store at most {} MiB per run",
        TENANT_STORED >> 20
    )]
    Stored,
}

impl From<TooLarge> for String {
    fn from(e: TooLarge) -> String {
        e.to_string()
    }
}

/// The most bytes one value built on this thread may take: `None` outside a budgeted run
/// (the operator's mappings are not held to it).
#[inline]
pub fn value_cap() -> Option<usize> {
    DEADLINE.with(|d| d.get()).map(|_| TENANT_VALUE)
}

/// Fails when a value of `bytes` (as [`Value::size_within`] counts them) is past the cap:
/// for a step that knows what it will build before building it.
#[inline]
pub fn fits(bytes: usize) -> Result<(), TooLarge> {
    match value_cap() {
        Some(cap) if bytes > cap => Err(TooLarge::Value),
        _ => Ok(()),
    }
}

/// Fails when `v` takes more than the cap. The walk stops at the cap, so it costs at most
/// what building a value of that size did.
pub fn check(v: &Value) -> Result<(), TooLarge> {
    match value_cap() {
        Some(cap) if v.size_within(cap).is_none() => Err(TooLarge::Value),
        _ => Ok(()),
    }
}

/// Counts `v`, about to be stored in the run's document, variables or metadata, against
/// [`TENANT_STORED`].
pub fn store(v: &Value) -> Result<(), TooLarge> {
    if value_cap().is_none() {
        return Ok(());
    }
    let stored = STORED.with(|s| s.get());
    let room = TENANT_STORED.saturating_sub(stored);
    let size = v.size_within(room).ok_or(TooLarge::Stored)?;
    STORED.with(|s| s.set(stored + size));
    Ok(())
}

/// Counts what one step builds as it builds it, for steps whose result can be many times
/// the size of their inputs (each item a lambda gives, each piece of a split): the step
/// stops at the cap instead of finishing a value it would then refuse. Counts nothing
/// outside a budgeted run.
#[derive(Debug)]
pub struct Meter {
    left: Option<usize>,
}

impl Default for Meter {
    fn default() -> Self {
        Meter::new()
    }
}

impl Meter {
    pub fn new() -> Meter {
        Meter { left: value_cap() }
    }

    /// Counts `bytes` more.
    #[inline]
    pub fn add(&mut self, bytes: usize) -> Result<(), TooLarge> {
        if let Some(left) = &mut self.left {
            *left = left.checked_sub(bytes).ok_or(TooLarge::Value)?;
        }
        Ok(())
    }

    /// Counts `v` (all of it) more.
    pub fn add_value(&mut self, v: &Value) -> Result<(), TooLarge> {
        if let Some(left) = &mut self.left {
            *left -= v.size_within(*left).ok_or(TooLarge::Value)?;
        }
        Ok(())
    }

    /// Counts a string of `len` bytes, as an item of an array.
    #[inline]
    pub fn add_text(&mut self, len: usize) -> Result<(), TooLarge> {
        self.add(crate::value::NODE.saturating_add(len))
    }

    /// Counts a key of an object (not its value).
    #[inline]
    pub fn add_key(&mut self, key: &str) -> Result<(), TooLarge> {
        self.add(crate::value::KEY.saturating_add(key.len()))
    }
}

/// Fails when `parts` together take more than the cap: for a step whose result holds a
/// copy of each (`concat`, `merge`), checked before it copies them.
pub fn fits_together<'v>(parts: impl IntoIterator<Item = &'v Value>) -> Result<(), TooLarge> {
    let mut meter = Meter::new();
    if meter.left.is_some() {
        for part in parts {
            meter.add_value(part)?;
        }
    }
    Ok(())
}

/// Whether values built on this thread are held to a cap (a tenant's run).
#[inline]
pub fn limited() -> bool {
    value_cap().is_some()
}

/// The items as an array, counted one by one as they are made: a step that makes many
/// small values out of text (a split, the matches of a pattern) stops at the cap rather
/// than after making them all.
pub fn collect(items: impl IntoIterator<Item = Value>) -> Result<Vec<Value>, TooLarge> {
    let mut meter = Meter::new();
    meter.add(crate::value::NODE)?;
    let mut out = Vec::new();
    for item in items {
        meter.add_value(&item)?;
        out.push(item);
    }
    Ok(out)
}

/// The entries as an object, counted one by one as [`collect`] counts items.
pub fn collect_object(
    entries: impl IntoIterator<Item = (String, Value)>,
) -> Result<crate::value::Object, TooLarge> {
    let mut meter = Meter::new();
    meter.add(crate::value::NODE)?;
    let mut out = crate::value::Object::new();
    for (k, v) in entries {
        if out.is_empty() {
            meter.add(crate::value::OBJECT)?;
        }
        meter.add_key(&k)?;
        meter.add_value(&v)?;
        out.insert(k, v);
    }
    Ok(out)
}

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
