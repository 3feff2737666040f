//! The delivery hub behind the HTTP stream outputs (`http_server`, `websocket_server`):
//! connected clients (SSE streams, WebSockets, waiting GETs) subscribe to it, and the
//! output's `write` publishes each batch to one client (`round_robin`) or to all of them
//! (`broadcast`).
//!
//! Delivery is confirmed, not assumed: a client's transport calls [`Delivery::written`]
//! once the bytes went to its connection, and `publish` returns only then. A delivery the
//! transport drops unwritten (the client went away, a write failed) goes to the next client
//! with fresh ids; with no client connected `publish` waits, so the stream is held back
//! rather than losing anything.
//!
//! Every event gets an id, monotonic per hub, and the last events are kept in a bounded
//! replay buffer (count and age). A client reconnecting with the id it saw last receives
//! what it missed, or a `gap` event when the buffer no longer holds it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use metrics::{counter, gauge, Counter, Gauge};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::filter::{Filter, Tally};
use super::outbox::{Inbox, Offered, Queue, SlowClients, SlowPolicy};
use crate::duration::Duration;
use crate::message::{Batch, Message};
use crate::metrics as m;
use crate::value::Value;

/// How a hub spreads messages over its clients.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Each message goes to exactly one client, in turn.
    #[default]
    RoundRobin,
    /// Each message goes to every connected client.
    Broadcast,
}

/// The bounded buffer that reconnecting clients replay from.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// Events kept; 0 turns resuming off (every resume is told about a gap).
    #[serde(default = "default_replay_size")]
    pub size: usize,
    /// Events older than this are dropped from the buffer.
    #[serde(default = "default_replay_age")]
    pub max_age: Duration,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            size: default_replay_size(),
            max_age: default_replay_age(),
        }
    }
}

fn default_replay_size() -> usize {
    1024
}

fn default_replay_age() -> Duration {
    Duration::from_secs(300)
}

pub(crate) use super::event::gap;
pub use super::event::{Chunk, Delivery, Event, GAP_EVENT};

/// The transports a route serves, for metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Sse,
    RawStream,
    WebSocket,
    Get,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::RawStream => "raw_bytes",
            Transport::WebSocket => "websocket",
            Transport::Get => "http",
        }
    }
}

/// `publish` gave up: the stream is stopping and no client took the messages.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the stream is stopping and no client took the messages")]
pub struct Stopped;

/// Analytics of one route and transport, registered once when the output is built.
pub struct RouteMetrics {
    pub connection_attempts: Counter,
    pub active: Gauge,
    pub delivered_messages: Counter,
    pub delivered_bytes: Counter,
    pub write_errors: Counter,
    pub replayed: Counter,
    /// Messages a subscriber's filter withheld from it (see [`super::filter`]).
    pub filtered: Counter,
    /// Messages withheld from a subscriber because its filter failed on them.
    pub filter_errors: Counter,
    /// Messages dropped from a slow client's queue (`drop_oldest`).
    pub slow_dropped: Counter,
    /// Slow clients disconnected (`disconnect`, or `hold` past the write timeout).
    pub slow_disconnected: Counter,
}

impl RouteMetrics {
    /// `labels` are the output's standard metric labels.
    pub fn new(
        mut labels: Vec<(&'static str, String)>,
        route: &str,
        transport: Transport,
    ) -> Arc<Self> {
        // The route comes from config, so it is a bounded label; the client never is.
        labels.push(("route", route.to_owned()));
        labels.push(("transport", transport.as_str().to_owned()));
        Arc::new(RouteMetrics {
            connection_attempts: counter!(m::HTTP_STREAM_CONNECTION_ATTEMPTS, &labels),
            active: gauge!(m::HTTP_STREAM_ACTIVE_CONNECTIONS, &labels),
            delivered_messages: counter!(m::HTTP_STREAM_DELIVERED_MESSAGES, &labels),
            delivered_bytes: counter!(m::HTTP_STREAM_DELIVERED_BYTES, &labels),
            write_errors: counter!(m::HTTP_STREAM_WRITE_ERRORS, &labels),
            replayed: counter!(m::HTTP_STREAM_REPLAYED_EVENTS, &labels),
            filtered: counter!(m::HTTP_STREAM_FILTERED_MESSAGES, &labels),
            filter_errors: counter!(m::HTTP_STREAM_FILTER_ERRORS, &labels),
            slow_dropped: counter!(m::HTTP_STREAM_SLOW_DROPPED, &labels),
            slow_disconnected: counter!(m::HTTP_STREAM_SLOW_DISCONNECTED, &labels),
        })
    }

    fn tally(&self, tally: Tally) {
        if tally.withheld > 0 {
            self.filtered.increment(tally.withheld);
        }
        if tally.failed > 0 {
            self.filter_errors.increment(tally.failed);
        }
    }

    /// Counts a confirmed write of `chunk`.
    pub fn delivered(&self, chunk: &Chunk) {
        self.delivered_messages.increment(chunk.messages() as u64);
        self.delivered_bytes.increment(chunk.payload_bytes() as u64);
    }
}

/// How a hub behaves. A hub kept across a change of its stream is kept only when these
/// are the same.
#[derive(Debug, Clone, PartialEq)]
pub struct HubOptions {
    pub mode: DeliveryMode,
    pub replay: ReplayConfig,
    /// Metadata key whose value names the SSE event.
    pub event_key: Option<String>,
    /// Metadata key holding each message's position in its broker (broadcast only): it
    /// becomes the event id, the same on every node that reads the broker, so a client
    /// resumes on any node. Unset, ids are the hub's own count.
    pub id_key: Option<String>,
    /// How long a client may take to accept and write a delivery before it is dropped
    /// as dead and its messages go elsewhere.
    pub write_timeout: std::time::Duration,
    /// Deliveries queued per client (`hold`).
    pub queue: usize,
    /// What happens to a client that does not read (broadcast only, but for `hold`).
    pub slow: SlowClients,
}

impl Default for HubOptions {
    fn default() -> Self {
        HubOptions {
            mode: DeliveryMode::RoundRobin,
            replay: ReplayConfig::default(),
            event_key: None,
            id_key: None,
            write_timeout: std::time::Duration::from_secs(10),
            queue: 64,
            slow: SlowClients::default(),
        }
    }
}

struct Slot {
    conn: u64,
    queue: Arc<Queue>,
    metrics: Arc<RouteMetrics>,
    /// A client that resumed from a position this node has not reached yet (it came from
    /// a node further along): events up to this id are not sent to it again.
    seen_through: Option<u64>,
    /// Who the client is, as the hub's filter sees it (`@caller`); null without one.
    caller: Value,
}

struct Stored {
    event: Arc<Event>,
    at: Instant,
    /// The connection that received it (round robin), or 0 for every client (broadcast).
    conn: u64,
    /// A resuming client took it over (and was sent it) while its first write was still
    /// unconfirmed: that write failing later must not send it a second time.
    taken_over: bool,
    /// The message, when the hub filters: a resuming client is matched against it.
    msg: Option<Message>,
}

struct State {
    next_id: u64,
    /// Connected clients, in the order they joined (so by connection number).
    clients: Vec<Slot>,
    /// The connection served last: round robin goes on with the next one after it, which
    /// stays right when clients join or leave in between.
    cursor: u64,
    replay: VecDeque<Stored>,
    next_conn: u64,
    /// Broadcast only: each client gets the messages this check admits for it. Part of
    /// the state, not the options: a change of the stream changes it for the clients
    /// connected.
    filter: Option<Filter>,
}

pub struct Hub {
    opts: HubOptions,
    state: Mutex<State>,
    joined: Notify,
    /// Cancelled when the hub is retired: its clients' connections end. The stream that
    /// writes to it may stop without retiring it (a change keeps it for the next).
    retired: CancellationToken,
    /// Whether a reader of the cluster's bus feeds it already: one per hub, for as long
    /// as the hub lives, whichever stream writes to it.
    fed: std::sync::atomic::AtomicBool,
    /// Where a client resuming from before the replay buffer is caught up from, when
    /// the ids are positions in a broker that keeps what came before.
    /// Replaced by each version of the stream that writes to the hub: a version that
    /// reads another source, or processes what it reads, must not leave resuming clients
    /// the earlier version's.
    history: Mutex<Option<Arc<dyn super::record::History>>>,
    /// Clients being caught up from the history now.
    pub(crate) catching_up: std::sync::atomic::AtomicUsize,
    /// Catch-ups started in the current second (its start, and how many): each one
    /// opens a reader on the broker, so clients that connect and leave at once are
    /// held to a rate, not only to how many read at the same time.
    pub(crate) catch_up_starts: Mutex<(Instant, usize)>,
}

/// A connected client's end of the hub. Dropping it leaves the hub; whatever was queued
/// for it and not written goes to other clients.
pub struct Subscription {
    hub: Arc<Hub>,
    conn: u64,
    pub rx: Inbox,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.leave(self.conn);
    }
}

impl Hub {
    /// A hub whose clients are served until `retired` is cancelled.
    pub fn new(opts: HubOptions, retired: CancellationToken) -> Arc<Self> {
        // Ids start at the current time in microseconds, so they keep growing across
        // restarts and a client resuming with an id from an earlier run is told of the
        // gap instead of being matched to an unrelated event.
        // With broker positions as ids, the broker numbers them.
        let base = if opts.id_key.is_some() {
            0
        } else {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(1)
                .max(1)
        };
        Arc::new(Hub {
            opts,
            state: Mutex::new(State {
                next_id: base,
                clients: Vec::new(),
                cursor: 0,
                replay: VecDeque::new(),
                next_conn: 1,
                filter: None,
            }),
            joined: Notify::new(),
            retired,
            fed: Default::default(),
            history: Mutex::new(None),
            catching_up: Default::default(),
            catch_up_starts: Mutex::new((Instant::now(), 0)),
        })
    }

    /// Gives the hub the history that clients resuming from before its replay buffer
    /// catch up from (none: they are not caught up), in place of any earlier one. Only
    /// for a broadcast hub whose ids are broker positions.
    pub fn set_history(&self, history: Option<Arc<dyn super::record::History>>) {
        let fits = |h: &Arc<dyn super::record::History>| {
            self.opts.mode == DeliveryMode::Broadcast
                && self.opts.id_key.as_deref() == Some(h.position_key())
        };
        *self.history.lock() = history.filter(fits);
    }

    pub(crate) fn history(&self) -> Option<Arc<dyn super::record::History>> {
        self.history.lock().clone()
    }

    /// The position a client resuming after `last` must be caught up from through the
    /// history, when this hub has one: `last` is before what the replay buffer holds,
    /// or past what this hub was given yet (a node that just started, or lags behind
    /// the one the client came from: the broker has what came after `last`).
    pub fn behind(&self, last: &str) -> Option<u64> {
        self.history.lock().as_ref()?;
        let last = last.trim().parse::<u64>().ok().filter(|&p| p < u64::MAX)?;
        let mut st = self.state.lock();
        self.expire(&mut st);
        let kept_from = st
            .replay
            .front()
            .and_then(|s| s.event.id)
            .unwrap_or(st.next_id);
        (last + 1 < kept_from || last >= st.next_id).then_some(last)
    }

    /// `msg` as the event this hub makes of it, with its position as id: for a message
    /// read from the history.
    /// `msg` as the event this hub makes of it for the client `caller`, with its
    /// position as id: for a message read from the history. The event is `None` when the
    /// hub's filter withholds it from the client.
    pub(crate) fn past_event(
        &self,
        msg: &Message,
        caller: &mut Value,
    ) -> Option<(u64, Option<Arc<Event>>)> {
        let id = position(msg, self.opts.id_key.as_deref()?).filter(|&p| p < u64::MAX)?;
        let filter = self.state.lock().filter.clone();
        if let Some(filter) = filter {
            let (budget, mut tally) = (filter.publish_budget(), Tally::default());
            if !filter.decide(&mut filter.view(msg), caller, &budget, &mut tally) {
                return Some((id, None));
            }
        }
        Some((id, Some(self.event(msg, Some(id)))))
    }

    /// The event of `msg` under `id`: its name and media type from its metadata.
    fn event(&self, msg: &crate::message::Message, id: Option<u64>) -> Arc<Event> {
        let name = self
            .opts
            .event_key
            .as_deref()
            .and_then(|k| msg.meta_str(k))
            .map(|n| n.replace(['\r', '\n'], " ").into_boxed_str());
        let content_type = match msg.meta(crate::message::CONTENT_TYPE) {
            Some(crate::value::Value::String(t)) if !t.trim().is_empty() => Some(t.as_str().into()),
            _ => None,
        };
        Arc::new(Event {
            id,
            name,
            data: msg.payload().clone(),
            content_type,
        })
    }

    /// Sets the check that decides which messages each client gets (broadcast only),
    /// for the next message published; `None` sends every message to every client.
    pub fn set_filter(&self, filter: Option<Filter>) {
        self.state.lock().filter = filter;
    }

    /// Whether the hub filters per client.
    pub fn filters(&self) -> bool {
        self.state.lock().filter.is_some()
    }

    pub fn mode(&self) -> DeliveryMode {
        self.opts.mode
    }

    pub fn options(&self) -> &HubOptions {
        &self.opts
    }

    /// Cancelled when the hub is retired: a client's connection ends with it.
    pub fn retired(&self) -> &CancellationToken {
        &self.retired
    }

    /// True for the first caller only: that one starts the hub's bus reader.
    pub fn start_feeding(&self) -> bool {
        !self.fed.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    pub fn clients(&self) -> usize {
        self.state.lock().clients.len()
    }

    /// Connects a client. With `last_event_id`, the events it missed (still in the
    /// buffer) are queued first, or a gap notice when they are not.
    pub fn subscribe(
        self: &Arc<Self>,
        last_event_id: Option<&str>,
        metrics: Arc<RouteMetrics>,
    ) -> Subscription {
        self.subscribe_as(last_event_id, metrics, Value::Null)
    }

    /// As [`subscribe`](Self::subscribe), for the client `caller` (see
    /// [`super::caller`]): a filtering hub sends it what its filter admits for it.
    pub fn subscribe_as(
        self: &Arc<Self>,
        last_event_id: Option<&str>,
        metrics: Arc<RouteMetrics>,
        mut caller: Value,
    ) -> Subscription {
        let (queue, rx) = Queue::new();
        let mut st = self.state.lock();
        let conn = st.next_conn;
        st.next_conn += 1;
        let mut seen_through = None;
        if let Some(last) = last_event_id {
            seen_through = self.ahead(&st, last.trim());
            let mut events = self.resume(&mut st, last.trim(), conn);
            if let Some(filter) = &st.filter {
                let tally = admitted(filter, &st.replay, &mut events, &mut caller);
                metrics.tally(tally);
            }
            if !events.is_empty() {
                let replayed = events.iter().filter(|e| e.id.is_some()).count();
                metrics.replayed.increment(replayed as u64);
                // The channel is new and empty, so this cannot fail for lack of room.
                let _ = queue.push(Delivery::unconfirmed(Arc::new(Chunk::new(events))));
            }
        }
        st.clients.push(Slot {
            conn,
            queue,
            metrics,
            seen_through,
            caller,
        });
        drop(st);
        self.joined.notify_waiters();
        Subscription {
            hub: self.clone(),
            conn,
            rx,
        }
    }

    /// With broker positions as ids: the position of a client that resumes from one this
    /// node has not reached yet (another node gave it), which is no gap.
    fn ahead(&self, st: &State, last: &str) -> Option<u64> {
        let last = last.parse::<u64>().ok()?;
        self.is_ahead(st, last).then_some(last)
    }

    fn is_ahead(&self, st: &State, last: u64) -> bool {
        self.opts.id_key.is_some() && last >= st.next_id
    }

    /// What a client resuming after `last` missed, as events to queue first.
    fn resume(&self, st: &mut State, last: &str, conn: u64) -> Vec<Arc<Event>> {
        self.expire(st);
        let oldest = st.replay.front().and_then(|s| s.event.id);
        let Ok(last) = last.parse::<u64>() else {
            return vec![gap(last, oldest)];
        };
        if self.is_ahead(st, last) {
            return Vec::new();
        }
        if last >= st.next_id {
            // An id this hub never gave (another run, or made up).
            return vec![gap(&last.to_string(), oldest)];
        }
        match self.opts.mode {
            DeliveryMode::Broadcast => {
                let first_missing = last + 1;
                let mut out = Vec::new();
                let kept_from = oldest.unwrap_or(st.next_id);
                if first_missing < kept_from && first_missing < st.next_id {
                    out.push(gap(&last.to_string(), oldest));
                }
                out.extend(
                    st.replay
                        .iter()
                        .filter(|s| s.event.id.is_some_and(|id| id > last))
                        .map(|s| s.event.clone()),
                );
                out
            }
            DeliveryMode::RoundRobin => {
                // Each event went to one connection: the one that got `last` was this
                // client's, so it missed exactly what that connection got after it.
                let Some(owner) = st
                    .replay
                    .iter()
                    .find(|s| s.event.id == Some(last))
                    .map(|s| s.conn)
                else {
                    return vec![gap(&last.to_string(), oldest)];
                };
                // Its old connection may not have noticed the hang-up yet: stop feeding it.
                st.clients.retain(|c| {
                    let old = c.conn == owner;
                    if old {
                        c.queue.close();
                    }
                    !old
                });
                let mut out = Vec::new();
                for s in st.replay.iter_mut() {
                    if s.conn == owner && s.event.id.is_some_and(|id| id > last) {
                        // The new connection owns them now, so a second resume finds them.
                        s.conn = conn;
                        s.taken_over = true;
                        out.push(s.event.clone());
                    }
                }
                // The resumed connection also owns `last`, so resuming from it works again.
                for s in st.replay.iter_mut() {
                    if s.event.id == Some(last) {
                        s.conn = conn;
                    }
                }
                out
            }
        }
    }

    fn leave(&self, conn: u64) {
        let mut st = self.state.lock();
        if let Some(i) = st.clients.iter().position(|c| c.conn == conn) {
            st.clients.remove(i).queue.close();
        }
    }

    fn expire(&self, st: &mut State) {
        let max_age = self.opts.replay.max_age.0;
        let size = self.opts.replay.size;
        while st.replay.len() > size {
            st.replay.pop_front();
        }
        while st.replay.front().is_some_and(|s| s.at.elapsed() > max_age) {
            st.replay.pop_front();
        }
    }

    /// Gives the batch ids and keeps it for resuming; `conn` is who receives it.
    fn assign(&self, st: &mut State, batch: &Batch, conn: u64) -> Arc<Chunk> {
        let now = Instant::now();
        let mut events = Vec::with_capacity(batch.len());
        for msg in batch {
            let id = match &self.opts.id_key {
                None => {
                    let id = st.next_id;
                    st.next_id += 1;
                    Some(id)
                }
                // A message behind the last position (a redelivery) or without one goes
                // without an id: the client's last id stays the furthest position.
                Some(key) => position(msg, key)
                    .filter(|&p| p >= st.next_id && p < u64::MAX)
                    .inspect(|&p| st.next_id = p + 1),
            };
            let event = self.event(msg, id);
            if self.opts.replay.size > 0 && id.is_some() {
                st.replay.push_back(Stored {
                    event: event.clone(),
                    at: now,
                    conn,
                    taken_over: false,
                    msg: st.filter.is_some().then(|| msg.clone()),
                });
            }
            events.push(event);
        }
        self.expire(st);
        Arc::new(Chunk::new(events))
    }

    /// After a failed write: true when a resuming client already took the chunk's events
    /// over (they were replayed to it), so they must not be sent again.
    fn taken_over(&self, chunk: &Chunk) -> bool {
        let st = self.state.lock();
        chunk.events.iter().filter_map(|e| e.id).all(|id| {
            st.replay
                .iter()
                .any(|s| s.event.id == Some(id) && s.taken_over)
        })
    }

    /// Forgets events that were never written, so a resume does not replay them.
    fn unassign(&self, chunk: &Chunk) {
        let ids = chunk.events.iter().filter_map(|e| e.id);
        let (Some(first), Some(last)) = (ids.clone().min(), ids.max()) else {
            return;
        };
        let mut st = self.state.lock();
        st.replay
            .retain(|s| !s.event.id.is_some_and(|id| id >= first && id <= last));
        if self.opts.id_key.is_some() {
            // Sent again, the messages keep their positions.
            st.next_id = st.next_id.min(first);
        }
    }

    fn stopped(&self) -> Stopped {
        Stopped
    }

    /// Resolves when the writer stops (`stop`) or the hub is retired.
    async fn halted(&self, stop: &CancellationToken) {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = self.retired.cancelled() => {}
        }
    }

    /// Waits until at least one client is connected.
    async fn wait_for_client(&self, stop: &CancellationToken) -> Result<(), Stopped> {
        loop {
            let joined = self.joined.notified();
            tokio::pin!(joined);
            joined.as_mut().enable();
            if !self.state.lock().clients.is_empty() {
                return Ok(());
            }
            tokio::select! {
                _ = joined => {}
                _ = self.halted(stop) => return Err(self.stopped()),
            }
        }
    }

    /// Lets a client that did not keep up go: it ends after what is queued for it.
    fn evict(&self, conn: u64, metrics: &RouteMetrics) {
        metrics.slow_disconnected.increment(1);
        self.leave(conn);
    }

    /// Delivers `batch`: returns once a client wrote it (round robin) or every client
    /// connected when it was sent did, at least one successfully (broadcast).
    pub async fn publish(&self, batch: &Batch) -> Result<(), Stopped> {
        self.publish_until(batch, &self.retired).await
    }

    /// As [`publish`](Self::publish), giving up while waiting for a client once `stop`
    /// (the writing stream's shutdown) is cancelled: the hub may outlive its writer.
    pub async fn publish_until(
        &self,
        batch: &Batch,
        stop: &CancellationToken,
    ) -> Result<(), Stopped> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.opts.mode {
            DeliveryMode::RoundRobin => self.publish_one(batch, stop).await,
            DeliveryMode::Broadcast => self.publish_all(batch, stop).await,
        }
    }

    async fn publish_one(&self, batch: &Batch, stop: &CancellationToken) -> Result<(), Stopped> {
        loop {
            let picked = {
                let mut st = self.state.lock();
                if st.clients.is_empty() {
                    None
                } else {
                    let i = st
                        .clients
                        .iter()
                        .position(|c| c.conn > st.cursor)
                        .unwrap_or(0);
                    let c = &st.clients[i];
                    let picked = (c.conn, c.queue.clone(), c.metrics.clone());
                    st.cursor = picked.0;
                    Some(picked)
                }
            };
            let Some((conn, queue, metrics)) = picked else {
                self.wait_for_client(stop).await?;
                continue;
            };
            tokio::select! {
                p = tokio::time::timeout(self.opts.write_timeout, queue.room(self.opts.queue.max(1))) => match p {
                    Ok(Ok(())) => {}
                    // Gone meanwhile: try the next one.
                    Ok(Err(_)) => continue,
                    Err(_) => {
                        metrics.write_errors.increment(1);
                        self.evict(conn, &metrics);
                        continue;
                    }
                },
                _ = self.halted(stop) => return Err(self.stopped()),
            };
            let (chunk, written) = {
                let mut st = self.state.lock();
                let chunk = self.assign(&mut st, batch, conn);
                let (delivery, written) = Delivery::confirmed(chunk.clone());
                // Queued under the lock so that every client's queue is in id order; a
                // client gone meanwhile drops it, a failed write below.
                let _ = queue.push(delivery);
                (chunk, written)
            };
            match tokio::time::timeout(self.opts.write_timeout, written).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(_)) if self.taken_over(&chunk) => return Ok(()),
                Ok(Err(_)) => {
                    metrics.write_errors.increment(1);
                    self.unassign(&chunk);
                }
                Err(_) => {
                    // Too slow: the receiver is dropped below, so the client sees the
                    // delivery as withdrawn and skips it.
                    metrics.write_errors.increment(1);
                    self.evict(conn, &metrics);
                    if self.taken_over(&chunk) {
                        return Ok(());
                    }
                    self.unassign(&chunk);
                }
            }
        }
    }

    async fn publish_all(&self, batch: &Batch, stop: &CancellationToken) -> Result<(), Stopped> {
        loop {
            // The clients connected now, and the first connection that joins after.
            let Some((targets, joining)) = self.targets(batch) else {
                self.wait_for_client(stop).await?;
                continue;
            };
            if targets.is_empty() {
                // Connected clients' filters all said no: kept for those that resume.
                let mut st = self.state.lock();
                let chunk = self.assign(&mut st, batch, 0);
                self.hand_to_late(&mut st, joining, &chunk, batch);
                return Ok(());
            }
            if self.opts.slow.policy != SlowPolicy::Hold {
                self.hand_over(batch, targets, joining);
                return Ok(());
            }
            let timeout = self.opts.write_timeout;
            let cap = self.opts.queue.max(1);
            let reserved = tokio::select! {
                r = futures::future::join_all(targets.into_iter().map(|t| async move {
                    match tokio::time::timeout(timeout, t.queue.room(cap)).await {
                        Ok(Ok(())) => Some((t.conn, t.queue, t.metrics, t.mask)),
                        Ok(Err(_)) => None,
                        Err(_) => {
                            t.metrics.write_errors.increment(1);
                            self.evict(t.conn, &t.metrics);
                            None
                        }
                    }
                })) => r,
                _ = self.halted(stop) => return Err(self.stopped()),
            };
            let reserved: Vec<_> = reserved.into_iter().flatten().collect();
            if reserved.is_empty() {
                continue;
            }
            let mut waits = Vec::with_capacity(reserved.len());
            let taken_late;
            let chunk = {
                let mut st = self.state.lock();
                let chunk = self.assign(&mut st, batch, 0);
                for (conn, queue, metrics, mask) in reserved {
                    let Some(mine) = catch_up(&mut st, conn, &admitted_of(&chunk, &mask)) else {
                        // It had all of these from another node: taken, for it.
                        waits.push((conn, None, metrics));
                        continue;
                    };
                    let (delivery, written) = Delivery::confirmed(mine);
                    // A client gone meanwhile drops it: a failed write below.
                    let _ = queue.push(delivery);
                    waits.push((conn, Some(written), metrics));
                }
                taken_late = self.hand_to_late(&mut st, joining, &chunk, batch);
                chunk
            };
            let results = futures::future::join_all(waits.into_iter().map(
                |(conn, written, metrics)| async move {
                    let Some(written) = written else {
                        return true;
                    };
                    match tokio::time::timeout(timeout, written).await {
                        Ok(Ok(())) => true,
                        Ok(Err(_)) => {
                            metrics.write_errors.increment(1);
                            false
                        }
                        Err(_) => {
                            metrics.write_errors.increment(1);
                            self.evict(conn, &metrics);
                            false
                        }
                    }
                },
            ))
            .await;
            // A client that joined meanwhile has it queued: sent again, it would come twice.
            if taken_late || results.iter().any(|ok| *ok) {
                return Ok(());
            }
            // Nobody took it: send it again, with new ids, once someone is there.
            self.unassign(&chunk);
        }
    }

    /// Broadcasts `batch` under a policy that does not hold the producer for slow
    /// clients: each target's share is queued within its bounds, nobody is waited for.
    fn hand_over(&self, batch: &Batch, targets: Vec<Target>, joining: u64) {
        let mut st = self.state.lock();
        let chunk = self.assign(&mut st, batch, 0);
        let mut cut = Vec::new();
        for t in targets {
            let Some(mine) = catch_up(&mut st, t.conn, &admitted_of(&chunk, &t.mask)) else {
                continue;
            };
            if !self.offer(&t.queue, &t.metrics, mine) {
                cut.push(t.conn);
            }
        }
        st.clients.retain(|c| !cut.contains(&c.conn));
        self.hand_to_late(&mut st, joining, &chunk, batch);
    }

    /// Queues `chunk` for a client within the slow-client bounds, nobody waiting for it;
    /// false when the client was cut for it (`disconnect`).
    fn offer(&self, queue: &Queue, metrics: &RouteMetrics, chunk: Arc<Chunk>) -> bool {
        match queue.offer(Delivery::unconfirmed(chunk), &self.opts.slow) {
            Offered::Queued | Offered::Gone => true,
            Offered::Dropped(n) => {
                metrics.slow_dropped.increment(n);
                true
            }
            Offered::Full => {
                metrics.slow_disconnected.increment(1);
                queue.cut();
                false
            }
        }
    }

    /// Hands `chunk` (of `batch`) to the clients that joined from connection `joining`
    /// on, while the broadcast made room at the others: they resumed before its events
    /// had ids, so the replay buffer could not give them these, and they would miss them.
    /// Sent as a replay is, with nobody waiting (each client's filter applied); a client
    /// with no room left is let go, to resume again. Whether one was handed any of it.
    fn hand_to_late(
        &self,
        st: &mut State,
        joining: u64,
        chunk: &Arc<Chunk>,
        batch: &Batch,
    ) -> bool {
        let late: Vec<u64> = st
            .clients
            .iter()
            .map(|c| c.conn)
            .filter(|&conn| conn >= joining)
            .collect();
        let mut taken = false;
        for conn in late {
            let mine = admitted_of(chunk, &mask_for(st, conn, batch));
            if mine.events.is_empty() {
                continue;
            }
            let Some(mine) = catch_up(st, conn, &mine) else {
                continue;
            };
            let Some(slot) = st.clients.iter().find(|c| c.conn == conn) else {
                continue;
            };
            let kept = match self.opts.slow.policy {
                SlowPolicy::Hold => {
                    let room = slot.queue.len() < self.opts.queue.max(1);
                    room && slot.queue.push(Delivery::unconfirmed(mine)).is_ok()
                }
                _ => self.offer(&slot.queue.clone(), &slot.metrics.clone(), mine),
            };
            if kept {
                taken = true;
            } else {
                if let Some(i) = st.clients.iter().position(|c| c.conn == conn) {
                    st.clients.remove(i).queue.close();
                }
            }
        }
        taken
    }

    /// The clients a broadcast of `batch` goes to, each with the messages its filter
    /// admits (`None`: all of them); `None` when no client is connected. A client whose
    /// filter admits none of them is not a target.
    fn targets(&self, batch: &Batch) -> Option<(Vec<Target>, u64)> {
        let mut st = self.state.lock();
        if st.clients.is_empty() {
            return None;
        }
        let joining = st.next_conn;
        let State {
            clients, filter, ..
        } = &mut *st;
        let Some(filter) = filter else {
            return Some((
                clients
                    .iter()
                    .map(|c| Target {
                        conn: c.conn,
                        queue: c.queue.clone(),
                        metrics: c.metrics.clone(),
                        mask: None,
                    })
                    .collect(),
                joining,
            ));
        };
        let budget = filter.publish_budget();
        let mut views: Vec<_> = batch.iter().map(|m| filter.view(m)).collect();
        let mut targets = Vec::new();
        for c in clients.iter_mut() {
            let mut tally = Tally::default();
            let mask: Vec<bool> = views
                .iter_mut()
                .map(|view| filter.decide(view, &mut c.caller, &budget, &mut tally))
                .collect();
            c.metrics.tally(tally);
            if mask.iter().any(|a| *a) {
                targets.push(Target {
                    conn: c.conn,
                    queue: c.queue.clone(),
                    metrics: c.metrics.clone(),
                    mask: (!mask.iter().all(|a| *a)).then_some(mask),
                });
            }
        }
        Some((targets, joining))
    }
}

/// Which messages of `batch` the hub's filter admits for client `conn`; `None`: all
/// (the hub does not filter).
fn mask_for(st: &mut State, conn: u64, batch: &Batch) -> Option<Vec<bool>> {
    let State {
        clients, filter, ..
    } = st;
    let filter = filter.as_ref()?;
    let Some(slot) = clients.iter_mut().find(|c| c.conn == conn) else {
        return Some(vec![false; batch.len()]);
    };
    let budget = filter.publish_budget();
    let mut tally = Tally::default();
    let mask = batch
        .iter()
        .map(|m| filter.decide(&mut filter.view(m), &mut slot.caller, &budget, &mut tally))
        .collect();
    slot.metrics.tally(tally);
    Some(mask)
}

/// A client a broadcast goes to.
struct Target {
    conn: u64,
    queue: Arc<Queue>,
    metrics: Arc<RouteMetrics>,
    /// Which messages of the batch its filter admits; `None`: all.
    mask: Option<Vec<bool>>,
}

/// The events of `chunk` a target's filter admitted (`mask`; `None`: all).
fn admitted_of(chunk: &Arc<Chunk>, mask: &Option<Vec<bool>>) -> Arc<Chunk> {
    match mask {
        Some(mask) => Arc::new(Chunk::new(
            chunk
                .events
                .iter()
                .zip(mask)
                .filter(|(_, admitted)| **admitted)
                .map(|(e, _)| e.clone())
                .collect(),
        )),
        None => chunk.clone(),
    }
}

/// Keeps the events of a resume that `filter` admits for `caller`; notices stay. The
/// events are the replay buffer's, in its order.
fn admitted(
    filter: &Filter,
    replay: &VecDeque<Stored>,
    events: &mut Vec<Arc<Event>>,
    caller: &mut Value,
) -> Tally {
    let budget = filter.publish_budget();
    let mut tally = Tally::default();
    let mut stored = replay.iter();
    events.retain(|e| {
        let Some(id) = e.id else {
            return true;
        };
        let Some(msg) = stored
            .find(|s| s.event.id == Some(id))
            .and_then(|s| s.msg.as_ref())
        else {
            return false;
        };
        filter.decide(&mut filter.view(msg), caller, &budget, &mut tally)
    });
    tally
}

/// A message's broker position, from metadata `key`: a number, or text of one. A
/// mapping can set it to anything; the largest `u64` is no position (nothing follows it).
fn position(msg: &crate::message::Message, key: &str) -> Option<u64> {
    match msg.meta(key)? {
        crate::value::Value::Int(n) => u64::try_from(*n).ok(),
        crate::value::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// What client `conn` gets of `chunk`: all of it, or (when it resumed ahead of this
/// node) only what lies past its position, or `None` when it had it all.
fn catch_up(st: &mut State, conn: u64, chunk: &Arc<Chunk>) -> Option<Arc<Chunk>> {
    let Some(slot) = st.clients.iter_mut().find(|c| c.conn == conn) else {
        // Gone meanwhile: its delivery fails as any other to a client that left.
        return Some(chunk.clone());
    };
    let Some(seen) = slot.seen_through else {
        return Some(chunk.clone());
    };
    let newer: Vec<Arc<Event>> = chunk
        .events
        .iter()
        .filter(|e| e.id.is_some_and(|id| id > seen))
        .cloned()
        .collect();
    if newer.is_empty() {
        return None;
    }
    slot.seen_through = None;
    Some(Arc::new(Chunk::new(newer)))
}

/// Parses `?a=b&c=d` into its value for `key`.
pub fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    let query = query?;
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn metrics() -> Arc<RouteMetrics> {
        RouteMetrics::new(Vec::new(), "/r", Transport::Sse)
    }

    fn hub(mode: DeliveryMode) -> Arc<Hub> {
        Hub::new(
            HubOptions {
                mode,
                ..Default::default()
            },
            CancellationToken::new(),
        )
    }

    fn batch(s: &str) -> Batch {
        vec![Message::new(s.to_owned())]
    }

    /// Acknowledges every delivery of `sub` and records what it saw.
    fn drain(mut sub: Subscription) -> tokio::task::JoinHandle<Vec<String>> {
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(d) = sub.rx.recv().await {
                for e in &d.chunk.events {
                    seen.push(String::from_utf8_lossy(&e.data).into_owned());
                }
                d.written();
                if seen.iter().any(|s| s == "end") {
                    break;
                }
            }
            seen
        })
    }

    #[tokio::test]
    async fn round_robin_gives_each_message_to_one_client_in_turn() {
        let hub = hub(DeliveryMode::RoundRobin);
        let a = drain(hub.subscribe(None, metrics()));
        let b = drain(hub.subscribe(None, metrics()));
        for i in 0..4 {
            hub.publish(&batch(&i.to_string())).await.unwrap();
        }
        hub.publish(&batch("end")).await.unwrap();
        hub.publish(&batch("end")).await.unwrap();
        assert_eq!(a.await.unwrap(), ["0", "2", "end"]);
        assert_eq!(b.await.unwrap(), ["1", "3", "end"]);
    }

    #[tokio::test]
    async fn broadcast_gives_every_message_to_every_client() {
        let hub = hub(DeliveryMode::Broadcast);
        let a = drain(hub.subscribe(None, metrics()));
        let b = drain(hub.subscribe(None, metrics()));
        hub.publish(&batch("x")).await.unwrap();
        hub.publish(&batch("end")).await.unwrap();
        assert_eq!(a.await.unwrap(), ["x", "end"]);
        assert_eq!(b.await.unwrap(), ["x", "end"]);
    }

    fn spawn_publish(hub: &Arc<Hub>, batch: Batch) -> tokio::task::JoinHandle<Result<(), Stopped>> {
        let hub = hub.clone();
        tokio::spawn(async move { hub.publish(&batch).await })
    }

    fn filtered(src: &str, env: &crate::mapping::Env) -> Arc<Hub> {
        let mapping = crate::mapping::Mapping::compile(src, env).unwrap();
        let hub = Hub::new(
            HubOptions {
                mode: DeliveryMode::Broadcast,
                ..Default::default()
            },
            CancellationToken::new(),
        );
        hub.set_filter(Some(Filter::new(src, Arc::new(mapping))));
        hub
    }

    /// A hub that sends each client its tenant's events.
    fn by_tenant() -> Arc<Hub> {
        filtered(
            "this.tenant == @caller.claims.tenant",
            &crate::mapping::Env::default(),
        )
    }

    fn tenant(t: &str) -> Value {
        Value::from(serde_json::json!({"claims": {"tenant": t}}))
    }

    fn of(t: &str, n: usize) -> Message {
        Message::new(format!(r#"{{"tenant":"{t}","n":{n}}}"#))
    }

    /// The tenant and number of each event a subscriber got.
    async fn got(sub: &mut Subscription, count: usize) -> Vec<String> {
        let mut seen = Vec::new();
        while seen.len() < count {
            let d = sub.rx.recv().await.unwrap();
            for e in &d.chunk.events {
                let v: serde_json::Value = serde_json::from_slice(&e.data).unwrap();
                seen.push(format!("{}{}", v["tenant"].as_str().unwrap(), v["n"]));
            }
            d.written();
        }
        seen
    }

    #[tokio::test]
    async fn a_filter_gives_each_client_only_what_it_admits_for_that_client() {
        let hub = by_tenant();
        let m = metrics();
        let mut a1 = hub.subscribe_as(None, m.clone(), tenant("a"));
        let mut b = hub.subscribe_as(None, m.clone(), tenant("b"));
        let mut a2 = hub.subscribe_as(None, m.clone(), tenant("a"));
        // One batch with events of both tenants and of one nobody is connected for.
        let publishing = spawn_publish(&hub, vec![of("a", 1), of("b", 2), of("c", 3), of("a", 4)]);
        assert_eq!(got(&mut a1, 2).await, ["a1", "a4"]);
        assert_eq!(got(&mut a2, 2).await, ["a1", "a4"]);
        assert_eq!(got(&mut b, 1).await, ["b2"]);
        publishing.await.unwrap().unwrap();
        // A message nobody connected is admitted for is published at once.
        tokio::time::timeout(
            std::time::Duration::from_secs(1),
            hub.publish(&vec![of("z", 5)]),
        )
        .await
        .expect("not held for a client")
        .unwrap();
        assert!(b.rx.try_recv().is_none());
    }

    #[tokio::test]
    async fn a_resuming_client_replays_only_what_its_filter_admits() {
        let hub = by_tenant();
        let mut a = hub.subscribe_as(None, metrics(), tenant("a"));
        let publishing = spawn_publish(&hub, vec![of("a", 1)]);
        let d = a.rx.recv().await.unwrap();
        let last = d.chunk.events[0].id.unwrap();
        d.written();
        publishing.await.unwrap().unwrap();
        drop(a);
        // While it is away, with another tenant's client connected.
        let _b = drain(hub.subscribe_as(None, metrics(), tenant("b")));
        let batch = vec![of("b", 2), of("a", 3), of("b", 4), of("a", 5)];
        hub.publish(&batch).await.unwrap();
        let mut back = hub.subscribe_as(Some(&last.to_string()), metrics(), tenant("a"));
        assert_eq!(got(&mut back, 2).await, ["a3", "a5"]);
        // And someone claiming no tenant gets nothing of either.
        let mut nobody = hub.subscribe_as(Some(&last.to_string()), metrics(), Value::Null);
        assert!(nobody.rx.try_recv().is_none());
    }

    #[tokio::test]
    async fn a_new_filter_decides_from_the_next_message_for_the_clients_connected() {
        let hub = by_tenant();
        let mut a = hub.subscribe_as(None, metrics(), tenant("a"));
        let publishing = spawn_publish(&hub, vec![of("a", 1), of("b", 2)]);
        assert_eq!(got(&mut a, 1).await, ["a1"]);
        publishing.await.unwrap().unwrap();
        let everything = "true";
        let mapping = crate::mapping::Mapping::compile(everything, &Default::default()).unwrap();
        hub.set_filter(Some(Filter::new(everything, Arc::new(mapping))));
        let publishing = spawn_publish(&hub, vec![of("a", 3), of("b", 4)]);
        assert_eq!(got(&mut a, 2).await, ["a3", "b4"]);
        publishing.await.unwrap().unwrap();
    }

    fn broadcasting(slow: SlowClients) -> Arc<Hub> {
        Hub::new(
            HubOptions {
                mode: DeliveryMode::Broadcast,
                slow,
                ..Default::default()
            },
            CancellationToken::new(),
        )
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_loses_its_oldest_not_the_others_time() {
        let hub = broadcasting(SlowClients {
            policy: SlowPolicy::DropOldest,
            max_messages: 3,
            max_bytes: 1 << 20,
        });
        let fast = drain(hub.subscribe(None, metrics()));
        let mut slow = hub.subscribe(None, metrics());
        // The producer is never held for the client that does not read.
        for i in 0..10 {
            tokio::time::timeout(
                std::time::Duration::from_secs(1),
                hub.publish(&batch(&i.to_string())),
            )
            .await
            .expect("held for a slow client")
            .unwrap();
            // The fast client reads as it comes.
            tokio::task::yield_now().await;
        }
        hub.publish(&batch("end")).await.unwrap();
        assert_eq!(fast.await.unwrap().len(), 11);
        let mut seen = Vec::new();
        while let Some(d) = slow.rx.try_recv() {
            for e in &d.chunk.events {
                seen.push(match e.name.as_deref() {
                    Some(GAP_EVENT) => "gap".to_owned(),
                    _ => String::from_utf8_lossy(&e.data).into_owned(),
                });
            }
        }
        assert_eq!(seen, ["gap", "8", "9", "end"]);
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_is_disconnected_and_resumes_what_it_missed() {
        let hub = broadcasting(SlowClients {
            policy: SlowPolicy::Disconnect,
            max_messages: 2,
            max_bytes: 1 << 20,
        });
        let fast = drain(hub.subscribe(None, metrics()));
        let mut slow = hub.subscribe(None, metrics());
        let first = spawn_publish(&hub, batch("0"));
        let d = slow.rx.recv().await.unwrap();
        let last = d.chunk.events[0].id.unwrap();
        d.written();
        first.await.unwrap().unwrap();
        for i in 1..5 {
            hub.publish(&batch(&i.to_string())).await.unwrap();
            tokio::task::yield_now().await;
        }
        // Cut at the third message it did not take: its connection ends.
        let mut got = Vec::new();
        while let Some(d) = slow.rx.recv().await {
            got.extend(d.chunk.events.iter().map(|e| e.data.clone()));
        }
        assert!(got.is_empty(), "{got:?}");
        // Resuming, it is sent what it missed from the replay buffer.
        let mut back = hub.subscribe(Some(&last.to_string()), metrics());
        let d = back.rx.try_recv().unwrap();
        let missed: Vec<_> = d
            .chunk
            .events
            .iter()
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .collect();
        assert_eq!(missed, ["1", "2", "3", "4"]);
        drop(back);
        hub.publish(&batch("end")).await.unwrap();
        assert_eq!(fast.await.unwrap().len(), 6);
    }

    #[tokio::test]
    async fn a_client_that_resumes_while_a_broadcast_waits_for_room_gets_it_too() {
        let hub = Hub::new(
            HubOptions {
                mode: DeliveryMode::Broadcast,
                queue: 1,
                ..Default::default()
            },
            CancellationToken::new(),
        );
        let mut first = hub.subscribe(None, metrics());
        let mut ids = Vec::new();
        for m in ["m0", "m1"] {
            let publishing = {
                let hub = hub.clone();
                tokio::spawn(async move { hub.publish(&batch(m)).await })
            };
            let d = first.rx.recv().await.unwrap();
            ids.push(d.chunk.events[0].id.unwrap());
            d.written();
            publishing.await.unwrap().unwrap();
        }
        // Its queue of one holds the replay of m1: the next broadcast waits for room.
        let mut slow = hub.subscribe(Some(&ids[0].to_string()), metrics());
        let publishing = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.publish(&batch("m2")).await })
        };
        tokio::task::yield_now().await;
        // Meanwhile a client comes back from another connection, where it saw m1.
        let mut late = hub.subscribe(Some(&ids[1].to_string()), metrics());
        slow.rx.recv().await.unwrap().written();
        for sub in [&mut first, &mut slow] {
            let d = sub.rx.recv().await.unwrap();
            assert_eq!(d.chunk.events[0].data, "m2");
            d.written();
        }
        publishing.await.unwrap().unwrap();
        let publishing = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.publish(&batch("m3")).await })
        };
        let mut got = Vec::new();
        while got.last().is_none_or(|m| m != "m3") {
            let d = late.rx.recv().await.unwrap();
            got.extend(d.chunk.events.iter().map(|e| e.data.clone()));
            d.written();
        }
        assert_eq!(got, ["m2", "m3"], "the client that resumed meanwhile");
        for sub in [&mut first, &mut slow] {
            sub.rx.recv().await.unwrap().written();
        }
        publishing.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_slow_tenant_filter_withholds_instead_of_holding_the_hub() {
        // A filter posted by a tenant runs under its budget: one publish's checks over
        // all clients take one run's time at most, and what they could not decide is
        // withheld (the filter fails closed).
        let slow = "range(0, 1000000).map_each(x -> x * 2).length() > 0 && this.tenant == @caller.claims.tenant";
        let hub = filtered(slow, &crate::mapping::Env::default().sandboxed());
        let m = metrics();
        let subs: Vec<_> = (0..50)
            .map(|_| hub.subscribe_as(None, m.clone(), tenant("a")))
            .collect();
        let started = std::time::Instant::now();
        hub.publish(&vec![of("a", 1)]).await.unwrap();
        assert!(
            started.elapsed() < crate::mapping::budget::TENANT * 8,
            "{:?}",
            started.elapsed()
        );
        drop(subs);
    }

    #[tokio::test]
    async fn publish_waits_for_a_client_and_a_dropped_delivery_goes_elsewhere() {
        let hub = hub(DeliveryMode::RoundRobin);
        let publishing = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.publish(&batch("m")).await })
        };
        // The first client takes the delivery and goes away without writing it.
        let mut first = hub.subscribe(None, metrics());
        let d = first.rx.recv().await.unwrap();
        drop(d);
        drop(first);
        let second = drain(hub.subscribe(None, metrics()));
        publishing.await.unwrap().unwrap();
        hub.publish(&batch("end")).await.unwrap();
        assert_eq!(second.await.unwrap(), ["m", "end"]);
    }

    #[tokio::test]
    async fn shutdown_with_no_client_is_an_error_not_a_hang() {
        let token = CancellationToken::new();
        let hub = Hub::new(HubOptions::default(), token.clone());
        token.cancel();
        assert!(hub.publish(&batch("m")).await.is_err());
    }

    #[tokio::test]
    async fn round_robin_resume_replays_what_the_connection_missed() {
        let hub = hub(DeliveryMode::RoundRobin);
        let mut sub = hub.subscribe(None, metrics());
        let publishing = {
            let hub = hub.clone();
            tokio::spawn(async move {
                for i in 0..3 {
                    hub.publish(&batch(&i.to_string())).await.unwrap();
                }
            })
        };
        let mut ids = Vec::new();
        for _ in 0..3 {
            let d = sub.rx.recv().await.unwrap();
            ids.push(d.chunk.events[0].id.unwrap());
            d.written();
        }
        publishing.await.unwrap();
        drop(sub);
        // The client only read the first one before its connection died.
        let mut again = hub.subscribe(Some(&ids[0].to_string()), metrics());
        let d = again.rx.recv().await.unwrap();
        let got: Vec<_> = d.chunk.events.iter().map(|e| e.id.unwrap()).collect();
        assert_eq!(got, ids[1..]);
    }

    #[tokio::test]
    async fn resume_beyond_the_buffer_is_told_about_the_gap() {
        let hub = Hub::new(
            HubOptions {
                mode: DeliveryMode::Broadcast,
                replay: ReplayConfig {
                    size: 2,
                    max_age: Duration::from_secs(60),
                },
                ..Default::default()
            },
            CancellationToken::new(),
        );
        let mut sub = hub.subscribe(None, metrics());
        let mut first = None;
        for i in 0..5 {
            let publishing = {
                let hub = hub.clone();
                tokio::spawn(async move { hub.publish(&batch(&i.to_string())).await })
            };
            let d = sub.rx.recv().await.unwrap();
            first.get_or_insert(d.chunk.events[0].id.unwrap());
            d.written();
            publishing.await.unwrap().unwrap();
        }
        let mut again = hub.subscribe(Some(&first.unwrap().to_string()), metrics());
        let d = again.rx.recv().await.unwrap();
        let names: Vec<_> = d.chunk.events.iter().map(|e| e.name.clone()).collect();
        assert_eq!(names[0].as_deref(), Some(GAP_EVENT));
        let data: Vec<_> = d.chunk.events[1..].iter().map(|e| e.data.clone()).collect();
        assert_eq!(data, ["3", "4"]);
    }

    /// A broadcast hub whose ids are the `pos` metadata.
    fn positioned() -> Arc<Hub> {
        Hub::new(
            HubOptions {
                mode: DeliveryMode::Broadcast,
                id_key: Some("pos".into()),
                ..Default::default()
            },
            CancellationToken::new(),
        )
    }

    fn at(pos: i64, s: &str) -> Batch {
        let mut m = Message::new(s.to_owned());
        m.set_meta("pos", pos);
        vec![m]
    }

    /// Publishes `batches` to `hub` with one client that writes all; the ids it saw.
    async fn ids_of(hub: &Arc<Hub>, batches: Vec<Batch>) -> Vec<Option<u64>> {
        let mut sub = hub.subscribe(None, metrics());
        let n = batches.len();
        let publishing = {
            let hub = hub.clone();
            tokio::spawn(async move {
                for b in batches {
                    hub.publish(&b).await.unwrap();
                }
            })
        };
        let mut ids = Vec::new();
        for _ in 0..n {
            let d = sub.rx.recv().await.unwrap();
            ids.extend(d.chunk.events.iter().map(|e| e.id));
            d.written();
        }
        publishing.await.unwrap();
        ids
    }

    #[tokio::test]
    async fn broker_positions_are_the_ids_and_a_redelivery_goes_without_one() {
        let hub = positioned();
        let ids = ids_of(
            &hub,
            vec![at(5, "a"), at(6, "b"), at(6, "b again"), at(9, "c")],
        )
        .await;
        assert_eq!(ids, [Some(5), Some(6), None, Some(9)]);
        // Resuming from a position replays what came after it, by position.
        let mut again = hub.subscribe(Some("5"), metrics());
        let d = again.rx.recv().await.unwrap();
        let got: Vec<_> = d.chunk.events.iter().map(|e| e.id).collect();
        assert_eq!(got, [Some(6), Some(9)]);
    }

    #[tokio::test]
    async fn a_client_from_a_node_further_along_gets_no_gap_and_nothing_twice() {
        let hub = positioned();
        ids_of(&hub, vec![at(1, "a")]).await;
        // It saw up to 3 on another node; this one is at 1.
        let ahead = hub.subscribe(Some("3"), metrics());
        let seen = drain(ahead);
        for (pos, text) in [(2, "b"), (3, "c"), (4, "d"), (5, "end")] {
            hub.publish(&at(pos, text)).await.unwrap();
        }
        assert_eq!(seen.await.unwrap(), ["d", "end"]);
    }

    #[tokio::test]
    async fn the_largest_position_a_mapping_can_write_is_no_position() {
        let hub = positioned();
        let max = u64::MAX.to_string();
        let mut last = Message::new("x");
        last.set_meta("pos", max.as_str());
        // Overflowing past it would panic the publisher and the client would wait forever.
        let ids = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            ids_of(&hub, vec![at(1, "a"), vec![last], at(2, "b")]),
        )
        .await
        .expect("every message delivered");
        assert_eq!(ids, [Some(1), None, Some(2)]);
    }

    #[test]
    fn positions_come_from_numbers_or_text() {
        let mut m = Message::new("x");
        m.set_meta("pos", "42");
        assert_eq!(position(&m, "pos"), Some(42));
        m.set_meta("pos", -1);
        assert_eq!(position(&m, "pos"), None);
        assert_eq!(position(&m, "other"), None);
    }
}
