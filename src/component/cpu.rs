//! The CPU share of a group of streams (one organisation's posted streams).
//!
//! The time their tasks run is charged to one meter that earns `cores` seconds of work
//! per second; while the group has used more than that, its tasks are not polled until
//! the meter has caught up. A busy stream (a generator without interval, a loop that
//! runs for as long as its input asks) thus takes at most its organisation's share of
//! the host whatever its config says, and the threads that serve requests stay free for
//! everyone else. Scheduling holds the share, not a check of the config: forty streams
//! of one organisation share its cores as one stream would.
//!
//! What is charged is the wall time of each poll of a task (time the thread was
//! preempted included, so never less than the CPU it used) and the time of the work a
//! task hands to the blocking pool (see [`charged`]).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

/// Credit a group earns while idle: after a quiet spell, its next work runs at once for
/// up to this much wall time's worth of its share.
const BURST: Duration = Duration::from_millis(100);

/// The shortest wait of a task over its share. Waiting for the exact moment the meter
/// catches up would wake every throttled task of the group on each timer tick only for
/// one of them to run; a coarser step keeps that overhead small, and the credit earned
/// meanwhile is kept (up to [`BURST`]), so the share is not lowered by it.
const QUANTUM: Duration = Duration::from_millis(10);

/// The most cores a share may be: more than any host has, so a larger setting can only
/// be a mistake.
pub const MAX_CORES: f64 = 4096.0;

/// Work charged to a group of streams, against the cores it may use.
#[derive(Debug)]
pub struct CpuShare {
    cores: f64,
    /// Wall-time nanoseconds one nanosecond of work costs: `1 / cores`.
    cost: f64,
    base: Instant,
    /// Nanoseconds after `base` at which the work charged so far is paid for. A moment
    /// earlier than [`BURST`] before now counts as that moment: idle time earns no more.
    paid_at: AtomicU64,
    charged_ns: AtomicU64,
    throttled_ns: AtomicU64,
    charged: metrics::Counter,
    throttled: metrics::Counter,
}

impl CpuShare {
    /// A share of `cores` (above 0; clamped to [`MAX_CORES`]), reporting its charged and
    /// throttled time under `labels`.
    pub fn new(cores: f64, labels: Vec<(&'static str, String)>) -> Arc<Self> {
        let cores = if cores.is_finite() && cores > 0.0 {
            cores.min(MAX_CORES)
        } else {
            MAX_CORES
        };
        Arc::new(CpuShare {
            cores,
            cost: 1.0 / cores,
            base: Instant::now(),
            paid_at: AtomicU64::new(0),
            charged_ns: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            charged: metrics::counter!(crate::metrics::ORG_CPU, &labels),
            throttled: metrics::counter!(crate::metrics::ORG_CPU_THROTTLED, &labels),
        })
    }

    /// The cores the group may use.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Charges `work` to the group.
    pub fn charge(&self, work: Duration) {
        let ns = u64::try_from(work.as_nanos()).unwrap_or(u64::MAX);
        // `as` saturates: a charge too large to count is the largest one.
        let cost = (ns as f64 * self.cost) as u64;
        let floor = self.now_ns().saturating_sub(nanos(BURST));
        let _ = self
            .paid_at
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |at| {
                Some(at.max(floor).saturating_add(cost))
            });
        let total = self.charged_ns.fetch_add(ns, Ordering::Relaxed) + ns;
        self.charged.absolute(total / 1_000_000_000);
    }

    /// How long the group must wait before it runs again: `None` within its share.
    pub fn debt(&self) -> Option<Duration> {
        let at = self.paid_at.load(Ordering::Acquire);
        let now = self.now_ns();
        (at > now).then(|| Duration::from_nanos(at - now))
    }

    /// Work charged so far.
    pub fn charged(&self) -> Duration {
        Duration::from_nanos(self.charged_ns.load(Ordering::Relaxed))
    }

    /// Time the group's tasks have waited over their share so far, added up over tasks.
    pub fn throttled(&self) -> Duration {
        Duration::from_nanos(self.throttled_ns.load(Ordering::Relaxed))
    }

    fn waited(&self, d: Duration) {
        let ns = nanos(d);
        let total = self.throttled_ns.fetch_add(ns, Ordering::Relaxed) + ns;
        self.throttled.absolute(total / 1_000_000_000);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

thread_local! {
    /// The share of the task being polled on this thread, for work it hands elsewhere.
    static CURRENT: RefCell<Option<Arc<CpuShare>>> = const { RefCell::new(None) };
}

/// The share of the task being polled on this thread, if it is held to one.
pub fn current() -> Option<Arc<CpuShare>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Sets [`CURRENT`] for the length of a poll and puts the previous one back after.
struct Entered(Option<Arc<CpuShare>>);

impl Entered {
    fn new(share: &Arc<CpuShare>) -> Self {
        Entered(CURRENT.with(|c| c.replace(Some(share.clone()))))
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// `work` charging the time it takes to the share of the task that calls this (none
/// outside a metered task): for work handed to the blocking pool, whose time no poll
/// of the task measures.
pub fn charged<R>(work: impl FnOnce() -> R) -> impl FnOnce() -> R {
    let share = current();
    move || {
        let start = Instant::now();
        let out = work();
        if let Some(share) = share {
            share.charge(start.elapsed());
        }
        out
    }
}

/// A task held to a share: each poll is charged, and while the share is used up the
/// task waits instead of being polled.
pub struct Metered<F> {
    inner: Pin<Box<F>>,
    share: Arc<CpuShare>,
    /// The wait over the share, and since when, while there is one.
    wait: Option<(Pin<Box<tokio::time::Sleep>>, Instant)>,
}

impl<F: Future> Metered<F> {
    pub fn new(inner: F, share: Arc<CpuShare>) -> Self {
        Metered {
            inner: Box::pin(inner),
            share,
            wait: None,
        }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        loop {
            if let Some((sleep, since)) = &mut this.wait {
                ready!(sleep.as_mut().poll(cx));
                this.share.waited(since.elapsed());
                this.wait = None;
            }
            // Other tasks of the group may have run meanwhile: look again.
            match this.share.debt() {
                Some(debt) => {
                    let sleep = tokio::time::sleep(debt.max(QUANTUM));
                    this.wait = Some((Box::pin(sleep), Instant::now()));
                }
                None => break,
            }
        }
        let _entered = Entered::new(&this.share);
        let start = Instant::now();
        let out = this.inner.as_mut().poll(cx);
        this.share.charge(start.elapsed());
        out
    }
}

impl<F> Drop for Metered<F> {
    fn drop(&mut self) {
        // Stopped while waiting (the stream was aborted): the wait still counts.
        if let Some((_, since)) = self.wait.take() {
            self.share.waited(since.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that keeps its thread busy for `slice` per poll and never waits, for
    /// `polls` polls.
    async fn busy(slice: Duration, polls: u32) {
        for _ in 0..polls {
            let start = Instant::now();
            while start.elapsed() < slice {
                std::hint::spin_loop();
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn busy_tasks_together_take_no_more_than_the_share() {
        let share = CpuShare::new(0.25, vec![("org_id", "cpu-unit-test".into())]);
        let started = Instant::now();
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(Metered::new(
                    busy(Duration::from_millis(1), 100),
                    share.clone(),
                ))
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let wall = started.elapsed();
        let charged = share.charged();
        // 400 ms of work at a quarter of a core takes 1.6 s of wall time, less what the
        // first burst ran on credit.
        assert!(charged >= Duration::from_millis(400), "{charged:?}");
        let least = charged.mul_f64(4.0).saturating_sub(BURST);
        assert!(wall >= least, "{wall:?} for {charged:?} of work");
        assert!(share.throttled() > Duration::ZERO);
    }

    #[tokio::test]
    async fn a_task_within_its_share_is_not_held_and_blocking_work_is_charged() {
        let share = CpuShare::new(1.0, vec![("org_id", "cpu-unit-test-2".into())]);
        let charged_inside = Metered::new(
            async {
                let work = charged(|| std::thread::sleep(Duration::from_millis(30)));
                tokio::task::spawn_blocking(work).await.unwrap();
            },
            share.clone(),
        );
        charged_inside.await;
        assert!(
            share.charged() >= Duration::from_millis(30),
            "{:?}",
            share.charged()
        );
        assert_eq!(share.throttled(), Duration::ZERO);
        // Outside a metered task nothing is charged.
        assert!(current().is_none());
        charged(|| ())();
    }

    #[test]
    fn a_share_that_is_not_a_positive_number_is_the_most() {
        assert_eq!(CpuShare::new(f64::NAN, vec![]).cores(), MAX_CORES);
        assert_eq!(CpuShare::new(0.0, vec![]).cores(), MAX_CORES);
        assert_eq!(CpuShare::new(1e9, vec![]).cores(), MAX_CORES);
        assert_eq!(CpuShare::new(0.5, vec![]).cores(), 0.5);
    }
}
