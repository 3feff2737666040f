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
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use metrics::{counter, gauge, Counter, Gauge};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::duration::Duration;
use crate::message::Batch;
use crate::metrics as m;

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

/// One event as clients see it.
#[derive(Debug)]
pub struct Event {
    /// None for notices (a gap) that must not move the client's last seen id.
    pub id: Option<u64>,
    pub name: Option<Box<str>>,
    pub data: Bytes,
    /// The media type the message declared (its `content-type` metadata), if any.
    pub content_type: Option<Box<str>>,
}

impl Event {
    /// The media type of the event's data: the declared one, else what the data is.
    pub fn content_type(&self) -> &str {
        self.content_type
            .as_deref()
            .unwrap_or_else(|| crate::message::sniff_content_type(&self.data))
    }
}

/// The name of the notice sent when a resume cannot be served in full.
pub const GAP_EVENT: &str = "gap";

/// Events handed to a client in one go, with their wire forms computed once (a broadcast
/// shares one chunk between all clients).
#[derive(Debug)]
pub struct Chunk {
    pub events: Vec<Arc<Event>>,
    sse: OnceLock<Bytes>,
    lines: OnceLock<Bytes>,
}

impl Chunk {
    pub fn new(events: Vec<Arc<Event>>) -> Self {
        Chunk {
            events,
            sse: OnceLock::new(),
            lines: OnceLock::new(),
        }
    }

    /// Messages in the chunk that count as deliveries (notices do not).
    pub fn messages(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e.id.is_some() || e.name.as_deref() != Some(GAP_EVENT))
            .count()
    }

    pub fn payload_bytes(&self) -> usize {
        self.events.iter().map(|e| e.data.len()).sum()
    }

    /// Server-Sent Events framing: `id:`, `event:` when named, one `data:` per line.
    pub fn sse(&self) -> &Bytes {
        self.sse.get_or_init(|| {
            let mut buf = BytesMut::with_capacity(self.payload_bytes() + 32 * self.events.len());
            for e in &self.events {
                encode_sse(e, &mut buf);
            }
            buf.freeze()
        })
    }

    /// One message per line, without ids.
    pub fn lines(&self) -> &Bytes {
        self.lines.get_or_init(|| {
            let mut buf = BytesMut::with_capacity(self.payload_bytes() + self.events.len());
            for e in self.events.iter().filter(|e| e.id.is_some()) {
                buf.put_slice(&e.data);
                buf.put_u8(b'\n');
            }
            buf.freeze()
        })
    }
}

fn encode_sse(e: &Event, buf: &mut BytesMut) {
    if let Some(id) = e.id {
        buf.put_slice(b"id: ");
        buf.put_slice(id.to_string().as_bytes());
        buf.put_u8(b'\n');
    }
    if let Some(name) = &e.name {
        buf.put_slice(b"event: ");
        buf.put_slice(name.as_bytes());
        buf.put_u8(b'\n');
    }
    // SSE ends a line at CRLF, LF or CR; each payload line becomes its own `data:` field so
    // the client rebuilds the payload joined by LF.
    let data = &e.data[..];
    let mut start = 0;
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'\n' || data[i] == b'\r' {
            buf.put_slice(b"data: ");
            buf.put_slice(&data[start..i]);
            buf.put_u8(b'\n');
            if data[i] == b'\r' && data.get(i + 1) == Some(&b'\n') {
                i += 1;
            }
            start = i + 1;
        }
        i += 1;
    }
    buf.put_slice(b"data: ");
    buf.put_slice(&data[start..]);
    buf.put_slice(b"\n\n");
}

/// A chunk on its way to one client. Dropping it unwritten reports a failed write, and the
/// publisher hands the messages to another client.
pub struct Delivery {
    pub chunk: Arc<Chunk>,
    done: Option<oneshot::Sender<()>>,
}

impl Delivery {
    /// True when the publisher stopped waiting for this client (it was too slow), so
    /// writing it now would duplicate what another client got.
    pub fn is_withdrawn(&self) -> bool {
        self.done.as_ref().is_some_and(|d| d.is_closed())
    }

    /// Takes the confirmation out, for transports that confirm later (after hyper took
    /// the frame). None for replays, which nobody waits for.
    pub fn into_done(mut self) -> Option<oneshot::Sender<()>> {
        self.done.take()
    }

    /// The bytes went to the client's connection.
    pub fn written(mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

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
        })
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
    /// Deliveries queued per client.
    pub queue: usize,
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
        }
    }
}

struct Slot {
    conn: u64,
    tx: mpsc::Sender<Delivery>,
    metrics: Arc<RouteMetrics>,
    /// A client that resumed from a position this node has not reached yet (it came from
    /// a node further along): events up to this id are not sent to it again.
    seen_through: Option<u64>,
}

struct Stored {
    event: Arc<Event>,
    at: Instant,
    /// The connection that received it (round robin), or 0 for every client (broadcast).
    conn: u64,
    /// A resuming client took it over (and was sent it) while its first write was still
    /// unconfirmed: that write failing later must not send it a second time.
    taken_over: bool,
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
    history: OnceLock<Arc<dyn super::record::History>>,
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
    pub rx: mpsc::Receiver<Delivery>,
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
            }),
            joined: Notify::new(),
            retired,
            fed: Default::default(),
            history: OnceLock::new(),
            catching_up: Default::default(),
            catch_up_starts: Mutex::new((Instant::now(), 0)),
        })
    }

    /// Gives the hub the history that clients resuming from before its replay buffer
    /// catch up from. Only for a broadcast hub whose ids are broker positions.
    pub fn set_history(&self, history: Arc<dyn super::record::History>) {
        let same_key = self.opts.id_key.as_deref() == Some(history.position_key());
        if self.opts.mode == DeliveryMode::Broadcast && same_key {
            let _ = self.history.set(history);
        }
    }

    pub(crate) fn history(&self) -> Option<&Arc<dyn super::record::History>> {
        self.history.get()
    }

    /// The position a client resuming after `last` must be caught up from through the
    /// history, when this hub has one: `last` is before what the replay buffer holds,
    /// or past what this hub was given yet (a node that just started, or lags behind
    /// the one the client came from: the broker has what came after `last`).
    pub fn behind(&self, last: &str) -> Option<u64> {
        self.history.get()?;
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
    pub(crate) fn past_event(&self, msg: &crate::message::Message) -> Option<Arc<Event>> {
        let id = position(msg, self.opts.id_key.as_deref()?).filter(|&p| p < u64::MAX)?;
        Some(self.event(msg, Some(id)))
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
        let (tx, rx) = mpsc::channel(self.opts.queue.max(1));
        let mut st = self.state.lock();
        let conn = st.next_conn;
        st.next_conn += 1;
        let mut seen_through = None;
        if let Some(last) = last_event_id {
            seen_through = self.ahead(&st, last.trim());
            let events = self.resume(&mut st, last.trim(), conn);
            if !events.is_empty() {
                let replayed = events.iter().filter(|e| e.id.is_some()).count();
                metrics.replayed.increment(replayed as u64);
                // The channel is new and empty, so this cannot fail for lack of room.
                let _ = tx.try_send(Delivery {
                    chunk: Arc::new(Chunk::new(events)),
                    done: None,
                });
            }
        }
        st.clients.push(Slot {
            conn,
            tx,
            metrics,
            seen_through,
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
                st.clients.retain(|c| c.conn != owner);
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
            st.clients.remove(i);
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

    fn evict(&self, conn: u64) {
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
                    let picked = (c.conn, c.tx.clone(), c.metrics.clone());
                    st.cursor = picked.0;
                    Some(picked)
                }
            };
            let Some((conn, tx, metrics)) = picked else {
                self.wait_for_client(stop).await?;
                continue;
            };
            let permit = tokio::select! {
                p = tokio::time::timeout(self.opts.write_timeout, tx.reserve_owned()) => match p {
                    Ok(Ok(p)) => p,
                    // Gone meanwhile: try the next one.
                    Ok(Err(_)) => continue,
                    Err(_) => {
                        metrics.write_errors.increment(1);
                        self.evict(conn);
                        continue;
                    }
                },
                _ = self.halted(stop) => return Err(self.stopped()),
            };
            let (done, written) = oneshot::channel();
            let chunk = {
                let mut st = self.state.lock();
                let chunk = self.assign(&mut st, batch, conn);
                // Sent under the lock so that every client's queue is in id order.
                permit.send(Delivery {
                    chunk: chunk.clone(),
                    done: Some(done),
                });
                chunk
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
                    self.evict(conn);
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
            let (targets, joining): (Vec<_>, u64) = {
                let st = self.state.lock();
                let targets = st
                    .clients
                    .iter()
                    .map(|c| (c.conn, c.tx.clone(), c.metrics.clone()))
                    .collect();
                (targets, st.next_conn)
            };
            if targets.is_empty() {
                self.wait_for_client(stop).await?;
                continue;
            }
            let timeout = self.opts.write_timeout;
            let reserved = tokio::select! {
                r = futures::future::join_all(targets.into_iter().map(|(conn, tx, metrics)| async move {
                    match tokio::time::timeout(timeout, tx.reserve_owned()).await {
                        Ok(Ok(p)) => Some((conn, p, metrics)),
                        Ok(Err(_)) => None,
                        Err(_) => {
                            metrics.write_errors.increment(1);
                            self.evict(conn);
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
                for (conn, permit, metrics) in reserved {
                    let Some(mine) = catch_up(&mut st, conn, &chunk) else {
                        // It had all of these from another node: taken, for it.
                        waits.push((conn, None, metrics));
                        continue;
                    };
                    let (done, written) = oneshot::channel();
                    permit.send(Delivery {
                        chunk: mine,
                        done: Some(done),
                    });
                    waits.push((conn, Some(written), metrics));
                }
                taken_late = hand_to_late(&mut st, joining, &chunk);
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
                            self.evict(conn);
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

/// Hands `chunk` to the clients that joined from connection `joining` on, while the
/// broadcast made room at the others: they resumed before its events had ids, so the
/// replay buffer could not give them these, and they would miss them. Sent as a replay
/// is, with nobody waiting; a client with no room left is let go, to resume again.
/// Whether one was handed any of it.
fn hand_to_late(st: &mut State, joining: u64, chunk: &Arc<Chunk>) -> bool {
    let late: Vec<u64> = st
        .clients
        .iter()
        .map(|c| c.conn)
        .filter(|&conn| conn >= joining)
        .collect();
    let mut taken = false;
    for conn in late {
        let Some(mine) = catch_up(st, conn, chunk) else {
            continue;
        };
        let delivery = Delivery {
            chunk: mine,
            done: None,
        };
        let sent = st
            .clients
            .iter()
            .find(|c| c.conn == conn)
            .is_some_and(|c| c.tx.try_send(delivery).is_ok());
        if sent {
            taken = true;
        } else {
            st.clients.retain(|c| c.conn != conn);
        }
    }
    taken
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

pub(crate) fn gap(last: &str, oldest: Option<u64>) -> Arc<Event> {
    let data = serde_json::json!({
        "last_event_id": last,
        "oldest_available": oldest.map(|id| id.to_string()),
        "message": "some events after last_event_id are no longer available",
    });
    Arc::new(Event {
        id: None,
        name: Some(GAP_EVENT.into()),
        data: Bytes::from(data.to_string()),
        content_type: None,
    })
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

    #[test]
    fn sse_framing_splits_lines_and_names_events() {
        let chunk = Chunk::new(vec![Arc::new(Event {
            id: Some(7),
            name: Some("tick".into()),
            data: Bytes::from_static(b"a\nb\r\nc\rd"),
            content_type: None,
        })]);
        assert_eq!(
            &chunk.sse()[..],
            b"id: 7\nevent: tick\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
        );
        assert_eq!(&chunk.lines()[..], b"a\nb\r\nc\rd\n");
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
