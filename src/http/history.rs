//! Catching up a client that resumes from before its hub's replay buffer. Where a hub's
//! event ids are positions in a broker that keeps what came before (the cluster's bus),
//! the events the buffer no longer holds are read back from the broker by position; the
//! client then joins the hub's live events from the position it reached, with no gap and
//! nothing twice. Bounded: a few catch-ups per hub at once and a few started a second,
//! each of a bounded length, read as a stream (never held whole). A client past the
//! first two bounds waits its turn, as the clients of a node that drains all come back
//! at once; one that waits too long, or is further behind than one catch-up reads, gets
//! a `gap` notice as before.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{self, BoxStream};
use futures::StreamExt;

use super::hub::{gap, Event, Hub, RouteMetrics, Subscription};
pub use super::record::{History, HistoryError, Past};
use crate::value::Value;

/// Clients of one hub caught up at once; more wait their turn.
pub const MAX_AT_ONCE: usize = 16;
/// Catch-ups one hub starts in a second at most; more wait their turn.
pub const MAX_STARTS_PER_SECOND: usize = 32;
/// How long a client waits for its turn; then it resumes with a `gap` notice.
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a client that waits for a catch-up to end looks again.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(20);
/// Events one catch-up reads at most; a client further behind gets a `gap` notice for
/// the rest.
pub const MAX_EVENTS: usize = 100_000;

/// One client's catch-up: the events it missed, then the position it reached.
pub struct CatchUp {
    hub: Arc<Hub>,
    reached: u64,
    /// Who the client is, for a filtering hub (see [`Hub::subscribe_as`]).
    caller: Value,
    /// Locked only through `&mut self`: the lock makes the catch-up `Sync`, as a
    /// response body must be, around a stream that is only `Send`.
    events: parking_lot::Mutex<BoxStream<'static, Step>>,
}

/// One message read back: its event, or only its position when the hub's filter
/// withholds it from this client (the client has still reached it).
enum Step {
    Event(Arc<Event>),
    Withheld(u64),
}

impl CatchUp {
    /// The catch-up of the client `caller` resuming after `last`, when its hub must read
    /// that from its history. It reads once its turn comes.
    pub fn start(hub: &Arc<Hub>, last: &str, caller: Value) -> Option<CatchUp> {
        let after = hub.behind(last)?;
        let history = hub.history()?;
        let for_events = hub.clone();
        let for_filter = caller.clone();
        let events = stream::once(Turn::wait(hub.clone()))
            .flat_map(move |turn| {
                let Some(turn) = turn else {
                    // No turn in time: joining the live events tells of the gap.
                    return stream::empty().boxed();
                };
                let hub = for_events.clone();
                let caller = for_filter.clone();
                stream::once(history.after(after))
                    .flat_map(move |past| Self::events(&hub, after, past, caller.clone()))
                    // The turn is given back when the catch-up is over.
                    .map(move |event| {
                        let _ = &turn;
                        event
                    })
                    .boxed()
            })
            .boxed();
        Some(CatchUp {
            hub: hub.clone(),
            reached: after,
            caller,
            events: parking_lot::Mutex::new(events),
        })
    }

    /// The events of what the history holds after `after`, for the client `caller`.
    fn events(
        hub: &Arc<Hub>,
        after: u64,
        past: Result<Past, HistoryError>,
        mut caller: Value,
    ) -> BoxStream<'static, Step> {
        match past {
            Ok(past) => {
                let hub = hub.clone();
                let notice = (!past.complete).then(|| Step::Event(gap(&after.to_string(), None)));
                let events = past
                    .messages
                    .take(MAX_EVENTS)
                    // A failed read ends the catch-up; joining the live events then tells
                    // the client of what it still misses.
                    .take_while(|m| futures::future::ready(m.is_ok()))
                    .filter_map(move |m| {
                        let step = m.ok().and_then(|m| {
                            let (at, event) = hub.past_event(&m, &mut caller)?;
                            Some(event.map_or(Step::Withheld(at), Step::Event))
                        });
                        futures::future::ready(step)
                    });
                stream::iter(notice).chain(events).boxed()
            }
            Err(e) => {
                tracing::warn!(error = %e, "Reading a resuming client's events back failed.");
                stream::empty().boxed()
            }
        }
    }

    /// The next event to send, `None` once caught up.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Arc<Event>>> {
        loop {
            return match self.events.get_mut().poll_next_unpin(cx) {
                Poll::Ready(Some(Step::Withheld(at))) => {
                    self.reached = self.reached.max(at);
                    continue;
                }
                Poll::Ready(Some(Step::Event(event))) => {
                    if let Some(id) = event.id {
                        self.reached = self.reached.max(id);
                    }
                    Poll::Ready(Some(event))
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    pub async fn next(&mut self) -> Option<Arc<Event>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Joins the hub's live events from the position the client reached.
    pub fn join(mut self, metrics: Arc<RouteMetrics>) -> Subscription {
        let caller = std::mem::take(&mut self.caller);
        self.hub
            .subscribe_as(Some(&self.reached.to_string()), metrics, caller)
    }
}

/// A place among a hub's catch-ups, given back when dropped.
struct Turn(Arc<Hub>);

impl Turn {
    /// Waits for a place among the catch-ups of `hub`: `None` when none came within
    /// [`MAX_WAIT`].
    async fn wait(hub: Arc<Hub>) -> Option<Turn> {
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        loop {
            let wait = match Turn::take(&hub) {
                Ok(turn) => return Some(turn),
                Err(wait) => wait,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return None;
            }
            tokio::time::sleep_until((now + wait).min(deadline)).await;
        }
    }

    /// A place now, or how long to wait before looking again.
    fn take(hub: &Arc<Hub>) -> Result<Turn, std::time::Duration> {
        let second = std::time::Duration::from_secs(1);
        let mut starts = hub.catch_up_starts.lock();
        if starts.0.elapsed() >= second {
            *starts = (std::time::Instant::now(), 0);
        }
        if starts.1 >= MAX_STARTS_PER_SECOND {
            return Err(second.saturating_sub(starts.0.elapsed()));
        }
        if hub.catching_up.fetch_add(1, Ordering::AcqRel) >= MAX_AT_ONCE {
            hub.catching_up.fetch_sub(1, Ordering::AcqRel);
            return Err(LOOK_AGAIN);
        }
        starts.1 += 1;
        Ok(Turn(hub.clone()))
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.catching_up.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Duration;
    use crate::http::hub::{DeliveryMode, HubOptions, ReplayConfig, Transport, GAP_EVENT};
    use crate::message::Message;
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use tokio_util::sync::CancellationToken;

    /// A broker that holds positions `first..=last`, and knows whether it dropped any.
    struct Kept {
        first: u64,
        last: u64,
        complete: bool,
    }

    impl History for Kept {
        fn after(&self, after: u64) -> BoxFuture<'static, Result<Past, HistoryError>> {
            let messages: Vec<_> = (self.first.max(after + 1)..=self.last)
                .map(|p| Ok(Message::new(format!("m{p}")).with_meta("pos", p as i64)))
                .collect();
            let complete = self.complete;
            Box::pin(async move {
                Ok(Past {
                    complete,
                    messages: stream::iter(messages).boxed(),
                })
            })
        }

        fn position_key(&self) -> &str {
            "pos"
        }
    }

    fn metrics() -> Arc<RouteMetrics> {
        RouteMetrics::new(Vec::new(), "/t", Transport::Sse)
    }

    /// A broadcast hub with positions as ids, a buffer of 2, and one client, that was
    /// given positions 10 to 20.
    async fn hub_at_20(history: Kept) -> (Arc<Hub>, Subscription) {
        let hub = Hub::new(
            HubOptions {
                mode: DeliveryMode::Broadcast,
                id_key: Some("pos".into()),
                replay: ReplayConfig {
                    size: 2,
                    max_age: Duration::from_secs(60),
                },
                ..Default::default()
            },
            CancellationToken::new(),
        );
        hub.set_history(Some(Arc::new(history)));
        let mut live = hub.subscribe(None, metrics());
        for p in 10..=20 {
            let publishing = {
                let hub = hub.clone();
                let batch = vec![Message::new(format!("m{p}")).with_meta("pos", p as i64)];
                tokio::spawn(async move { hub.publish(&batch).await })
            };
            live.rx.recv().await.unwrap().written();
            publishing.await.unwrap().unwrap();
        }
        (hub, live)
    }

    async fn ids(mut catch_up: CatchUp) -> (Vec<Option<u64>>, Subscription) {
        let mut ids = Vec::new();
        while let Some(e) = catch_up.next().await {
            ids.push(e.id);
        }
        (ids, catch_up.join(metrics()))
    }

    #[tokio::test]
    async fn a_client_behind_the_buffer_gets_the_past_from_the_history_then_the_live_events() {
        let kept = Kept {
            first: 1,
            last: 20,
            complete: true,
        };
        let (hub, _live) = hub_at_20(kept).await;
        // Within the buffer (19, 20 kept): no history needed.
        assert!(CatchUp::start(&hub, "18", Value::Null).is_none());
        assert!(CatchUp::start(&hub, "not a position", Value::Null).is_none());
        // Ahead of this node: what the broker has after it (nothing here), then live.
        let (ahead, _sub) = ids(CatchUp::start(&hub, "25", Value::Null).unwrap()).await;
        assert!(ahead.is_empty());
        let (got, mut sub) = ids(CatchUp::start(&hub, "5", Value::Null).unwrap()).await;
        assert_eq!(got, (6..=20).map(Some).collect::<Vec<_>>());
        assert_eq!(hub.catching_up.load(Ordering::Acquire), 0);
        // Joined at 20: nothing again, and the next live event.
        let publishing = {
            let hub = hub.clone();
            let batch = vec![Message::new("m21").with_meta("pos", 21i64)];
            tokio::spawn(async move { hub.publish(&batch).await })
        };
        let d = sub.rx.recv().await.unwrap();
        let live: Vec<_> = d.chunk.events.iter().map(|e| e.id).collect();
        assert_eq!(live, [Some(21)]);
        d.written();
        drop(_live);
        publishing.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_version_of_the_stream_without_a_history_takes_the_earlier_ones_away() {
        let kept = Kept {
            first: 1,
            last: 20,
            complete: true,
        };
        let (hub, _live) = hub_at_20(kept).await;
        assert!(CatchUp::start(&hub, "5", Value::Null).is_some());
        // The stream changed (another source, or processors now): the hub is kept, its
        // catch-up from the old source is not.
        hub.set_history(None);
        assert!(CatchUp::start(&hub, "5", Value::Null).is_none());
    }

    #[tokio::test]
    async fn what_the_broker_dropped_is_a_gap_notice_first() {
        let kept = Kept {
            first: 8,
            last: 20,
            complete: false,
        };
        let (hub, _live) = hub_at_20(kept).await;
        let mut catch_up = CatchUp::start(&hub, "3", Value::Null).unwrap();
        let first = catch_up.next().await.unwrap();
        assert_eq!(first.name.as_deref(), Some(GAP_EVENT));
        assert_eq!(first.id, None);
        let (rest, _sub) = ids(catch_up).await;
        assert_eq!(rest, (8..=20).map(Some).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn catch_ups_at_once_are_bounded_and_more_wait_their_turn() {
        let kept = Kept {
            first: 1,
            last: 20,
            complete: true,
        };
        let (hub, _live) = hub_at_20(kept).await;
        let mut held: Vec<_> = (0..MAX_AT_ONCE)
            .map(|_| CatchUp::start(&hub, "1", Value::Null).unwrap())
            .collect();
        for catch_up in &mut held {
            assert_eq!(catch_up.next().await.unwrap().id, Some(2));
        }
        // One more waits its turn, rather than being told of a gap: the clients of a
        // node that drains come back all at once.
        let mut waiting = CatchUp::start(&hub, "1", Value::Null).unwrap();
        assert!(waiting.next().now_or_never().is_none());
        assert_eq!(hub.catching_up.load(Ordering::Acquire), MAX_AT_ONCE);
        held.pop();
        assert_eq!(waiting.next().await.unwrap().id, Some(2));
        drop((held, waiting));
        assert_eq!(hub.catching_up.load(Ordering::Acquire), 0);
    }
}
