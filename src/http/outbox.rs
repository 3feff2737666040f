//! A connected client's queue in a hub, and what the hub does with a client that does
//! not read ([`SlowClients`]): hold the producer for it, drop its oldest messages, or
//! disconnect it.
//!
//! The hub queues deliveries; the client's transport takes them as it writes. With
//! `hold` the queue is bounded in deliveries and the producer waits for room (up to the
//! write timeout, past which the client is disconnected); with `drop_oldest` and
//! `disconnect` the producer never waits: the queue is bounded in messages and bytes,
//! and a client past either bound loses its oldest messages (told by a `gap` notice
//! ahead of what it gets next) or its connection (it resumes with its last event id).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Notify;

use super::event::{Chunk, Delivery};

/// What happens to a client that does not read.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum SlowPolicy {
    /// The producer waits for the client, up to `write_timeout` for each message; past
    /// that the client is disconnected. Nothing is dropped for a client that keeps up
    /// within that time.
    #[default]
    Hold,
    /// The producer never waits: a client whose queue is full loses its oldest queued
    /// messages and is sent an `event: gap` notice in their place.
    DropOldest,
    /// The producer never waits: a client whose queue is full is disconnected; it
    /// resumes with its last event id.
    Disconnect,
}

impl SlowPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SlowPolicy::Hold => "hold",
            SlowPolicy::DropOldest => "drop_oldest",
            SlowPolicy::Disconnect => "disconnect",
        }
    }
}

/// The slow-client policy of an HTTP stream output (`slow_clients:`).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SlowClients {
    /// `hold` (default), `drop_oldest` or `disconnect`.
    #[serde(default)]
    pub policy: SlowPolicy,
    /// With `drop_oldest` and `disconnect`: messages queued for one client at most.
    #[serde(default = "default_max_messages")]
    pub max_messages: usize,
    /// With `drop_oldest` and `disconnect`: payload bytes queued for one client at most.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
}

impl Default for SlowClients {
    fn default() -> Self {
        SlowClients {
            policy: SlowPolicy::default(),
            max_messages: default_max_messages(),
            max_bytes: default_max_bytes(),
        }
    }
}

fn default_max_messages() -> usize {
    1024
}

fn default_max_bytes() -> usize {
    1 << 20
}

/// Bounds that leave a client's queue no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("`slow_clients.max_messages` and `max_bytes` must be at least 1")]
pub struct NoRoom;

impl SlowClients {
    /// The bounds are usable: a queue must hold at least one message.
    pub fn check(&self) -> Result<(), NoRoom> {
        if self.max_messages == 0 || self.max_bytes == 0 {
            return Err(NoRoom);
        }
        Ok(())
    }
}

/// The client left: nothing more can be queued for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

/// What [`Queue::offer`] did with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    Queued,
    /// Queued after dropping this many older messages (`drop_oldest`).
    Dropped(u64),
    /// The queue is full and the client is to be disconnected (`disconnect`).
    Full,
    Gone,
}

/// A client's queue, shared by the hub (which queues) and the client's [`Inbox`].
pub struct Queue {
    state: Mutex<State>,
    /// Woken when there is room again (the client took a delivery, or left).
    room: Notify,
}

#[derive(Default)]
struct State {
    items: VecDeque<Delivery>,
    messages: usize,
    bytes: usize,
    waker: Option<Waker>,
    /// The hub let the client go: its inbox ends once what is queued is taken.
    closed: bool,
    /// The client left.
    gone: bool,
    /// Messages dropped since the client last took a delivery, and the first one's id:
    /// a `gap` notice goes ahead of what it takes next.
    dropped: u64,
    first_dropped: Option<u64>,
}

impl State {
    fn take(&mut self) -> Option<Delivery> {
        let d = self.items.pop_front()?;
        self.messages -= d.chunk.messages();
        self.bytes -= d.chunk.payload_bytes();
        Some(d)
    }

    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

impl Queue {
    /// A queue and the client's end of it.
    pub fn new() -> (Arc<Queue>, Inbox) {
        let queue = Arc::new(Queue {
            state: Mutex::new(State::default()),
            room: Notify::new(),
        });
        (queue.clone(), Inbox { queue })
    }

    /// Waits until fewer than `cap` deliveries are queued (`hold`).
    pub async fn room(&self, cap: usize) -> Result<(), Gone> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let st = self.state.lock();
                if st.gone || st.closed {
                    return Err(Gone);
                }
                if st.items.len() < cap {
                    return Ok(());
                }
            }
            room.await;
        }
    }

    /// Queues `d` (`hold`, after [`room`](Self::room)); a client that left drops it,
    /// which its publisher sees as a failed write.
    pub fn push(&self, d: Delivery) -> Result<(), Gone> {
        let mut st = self.state.lock();
        if st.gone || st.closed {
            return Err(Gone);
        }
        st.messages += d.chunk.messages();
        st.bytes += d.chunk.payload_bytes();
        st.items.push_back(d);
        st.wake();
        Ok(())
    }

    /// Queues `d` within `bounds` (`drop_oldest`, `disconnect`), never waiting.
    pub fn offer(&self, d: Delivery, bounds: &SlowClients) -> Offered {
        let mut st = self.state.lock();
        if st.gone || st.closed {
            return Offered::Gone;
        }
        let (messages, bytes) = (d.chunk.messages(), d.chunk.payload_bytes());
        let over = |st: &State| {
            !st.items.is_empty()
                && (st.messages + messages > bounds.max_messages
                    || st.bytes + bytes > bounds.max_bytes)
        };
        let mut dropped = 0u64;
        if over(&st) {
            if bounds.policy == SlowPolicy::Disconnect {
                return Offered::Full;
            }
            while over(&st) {
                let Some(old) = st.take() else { break };
                dropped += old.chunk.messages() as u64;
                let first = old.chunk.events.iter().find_map(|e| e.id);
                st.first_dropped = st.first_dropped.or(first);
            }
            st.dropped += dropped;
        }
        st.messages += messages;
        st.bytes += bytes;
        st.items.push_back(d);
        st.wake();
        if dropped > 0 {
            Offered::Dropped(dropped)
        } else {
            Offered::Queued
        }
    }

    /// The hub let the client go: its inbox ends after what is queued.
    pub fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        st.wake();
        drop(st);
        self.room.notify_waiters();
    }

    /// The hub disconnects the client now: what is queued is dropped (a resume brings
    /// it back) and its inbox ends.
    pub fn cut(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        let dropped = std::mem::take(&mut st.items);
        st.messages = 0;
        st.bytes = 0;
        st.wake();
        drop(st);
        drop(dropped);
        self.room.notify_waiters();
    }

    pub fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The client's end of its queue. Dropping it (the client left) drops what is queued,
/// which the publishers waiting for it see as failed writes.
pub struct Inbox {
    queue: Arc<Queue>,
}

impl Inbox {
    /// The next delivery; `None` once the hub let the client go and it took what was
    /// queued.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let mut st = self.queue.state.lock();
        if let Some(notice) = gap_notice(&mut st) {
            return Poll::Ready(Some(notice));
        }
        if let Some(d) = st.take() {
            drop(st);
            self.queue.room.notify_waiters();
            return Poll::Ready(Some(d));
        }
        if st.closed {
            return Poll::Ready(None);
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    pub async fn recv(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next delivery when one is queued.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        let mut st = self.queue.state.lock();
        if let Some(notice) = gap_notice(&mut st) {
            return Some(notice);
        }
        let d = st.take();
        drop(st);
        if d.is_some() {
            self.queue.room.notify_waiters();
        }
        d
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let mut st = self.queue.state.lock();
        st.gone = true;
        let dropped = std::mem::take(&mut st.items);
        drop(st);
        drop(dropped);
        self.queue.room.notify_waiters();
    }
}

/// The `gap` notice for what was dropped from the queue, once.
fn gap_notice(st: &mut State) -> Option<Delivery> {
    if st.dropped == 0 {
        return None;
    }
    let dropped = std::mem::take(&mut st.dropped);
    let first = st.first_dropped.take();
    let notice = super::event::gap_notice(serde_json::json!({
        "message": "messages were dropped because this client did not read them in time; reconnect with the last event id to be sent them",
        "dropped": dropped,
        "first_dropped_id": first.map(|id| id.to_string()),
    }));
    Some(Delivery::unconfirmed(Arc::new(Chunk::new(vec![notice]))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::event::Event;
    use bytes::Bytes;

    fn delivery(id: u64, bytes: usize) -> Delivery {
        Delivery::unconfirmed(Arc::new(Chunk::new(vec![Arc::new(Event {
            id: Some(id),
            name: None,
            data: Bytes::from(vec![b'x'; bytes]),
            content_type: None,
        })])))
    }

    fn bounds(policy: SlowPolicy, max_messages: usize, max_bytes: usize) -> SlowClients {
        SlowClients {
            policy,
            max_messages,
            max_bytes,
        }
    }

    fn ids(inbox: &mut Inbox) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(d) = inbox.try_recv() {
            for e in &d.chunk.events {
                out.push(match e.id {
                    Some(id) => id.to_string(),
                    None => {
                        let v: serde_json::Value = serde_json::from_slice(&e.data).unwrap();
                        format!(
                            "gap:{}:{}",
                            v["dropped"],
                            v["first_dropped_id"].as_str().unwrap()
                        )
                    }
                });
            }
        }
        out
    }

    #[test]
    fn drop_oldest_keeps_the_newest_within_both_bounds_and_says_what_went() {
        let (q, mut inbox) = Queue::new();
        let b = bounds(SlowPolicy::DropOldest, 3, 1000);
        for id in 1..=3 {
            assert_eq!(q.offer(delivery(id, 10), &b), Offered::Queued);
        }
        assert_eq!(q.offer(delivery(4, 10), &b), Offered::Dropped(1));
        assert_eq!(q.offer(delivery(5, 10), &b), Offered::Dropped(1));
        assert_eq!(ids(&mut inbox), ["gap:2:1", "3", "4", "5"]);
        // Bytes bound too: one large message pushes out all the small ones.
        let b = bounds(SlowPolicy::DropOldest, 100, 50);
        for id in 6..=8 {
            q.offer(delivery(id, 10), &b);
        }
        assert_eq!(q.offer(delivery(9, 45), &b), Offered::Dropped(3));
        assert_eq!(ids(&mut inbox), ["gap:3:6", "9"]);
        // A single message above the bound still goes (alone): nothing else to drop.
        assert_eq!(q.offer(delivery(10, 500), &b), Offered::Queued);
    }

    #[test]
    fn disconnect_reports_a_full_queue_and_cut_ends_the_inbox() {
        let (q, mut inbox) = Queue::new();
        let b = bounds(SlowPolicy::Disconnect, 2, 1000);
        assert_eq!(q.offer(delivery(1, 1), &b), Offered::Queued);
        assert_eq!(q.offer(delivery(2, 1), &b), Offered::Queued);
        assert_eq!(q.offer(delivery(3, 1), &b), Offered::Full);
        q.cut();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(inbox.poll_recv(&mut cx), Poll::Ready(None)));
        assert_eq!(q.offer(delivery(4, 1), &b), Offered::Gone);
    }

    #[tokio::test]
    async fn hold_waits_for_room_and_a_client_that_leaves_frees_the_producer() {
        let (q, mut inbox) = Queue::new();
        q.push(delivery(1, 1)).unwrap();
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.room(1).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert!(inbox.recv().await.is_some());
        assert_eq!(waiting.await.unwrap(), Ok(()));
        q.push(delivery(2, 1)).unwrap();
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.room(1).await })
        };
        drop(inbox);
        assert_eq!(waiting.await.unwrap(), Err(Gone));
        assert_eq!(q.push(delivery(3, 1)), Err(Gone));
    }

    #[test]
    fn bounds_of_zero_are_refused() {
        assert!(bounds(SlowPolicy::DropOldest, 0, 10).check().is_err());
        assert!(SlowClients::default().check().is_ok());
    }
}
