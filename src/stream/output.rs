//! Output nodes. A writer node batches transactions by its policy, writes up to
//! `max_in_flight` batches at once and settles each ack with the write's result. A router
//! node hands transactions to its children (each a full output node) by its pattern.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::component::{ConnectorError, ErrorKind, Output, Router, Writer};
use crate::message::{batch_bytes, Ack, Batch, Outcome, Transaction};
use crate::metrics::{NodeMetrics, Stage};
use crate::telemetry;

use super::readiness::Readiness;
use super::tap::Tap;

pub struct WriterNode {
    pub id: String,
    pub writer: Writer,
    pub metrics: NodeMetrics,
    /// The stream's live tail, offered what this node delivered.
    pub tap: Arc<Tap>,
    /// Set when the output stopped for good, for the inputs not to send batches again.
    pub halted: Arc<AtomicBool>,
    /// The stream's name, and where its health is kept.
    pub stream: Arc<str>,
    pub health: Arc<super::health::Health>,
}

/// A batch being written and the acks it settles: one per transaction in it, with the
/// range of its messages (to hand each synchronous source its own reply), and its size
/// in bytes (counted as transactions join it, for `byte_size` and the metrics).
#[derive(Default)]
struct Flush {
    batch: Batch,
    acks: Vec<(Ack, std::ops::Range<usize>)>,
    bytes: usize,
}

impl WriterNode {
    /// Runs the writer until its channel closes and everything is written. `capacity`, the
    /// stream's channel capacity, bounds the reads in a flush whose policy has no count.
    pub async fn run(
        self,
        mut rx: mpsc::Receiver<Transaction>,
        readiness: Arc<Readiness>,
        capacity: usize,
    ) {
        let WriterNode {
            id,
            writer,
            metrics,
            tap,
            halted,
            stream,
            health,
        } = self;
        let output = writer.output;
        let policy = writer.batching;
        let max_in_flight = writer.max_in_flight.max(1);
        let max_reads = policy.max_reads(capacity);
        let mut pending = Flush::default();
        let mut deadline: Option<TokioInstant> = None;
        // One timer, re-armed when a batch starts waiting, rather than a new one per turn.
        let timer = tokio::time::sleep(std::time::Duration::from_secs(3600));
        tokio::pin!(timer);
        let mut writes = FuturesUnordered::new();
        // While not connected: the connection attempt under way, and the waits between
        // attempts. Writes already under way are polled meanwhile, so their acks settle.
        let mut connected = false;
        let mut attempt: Option<Pin<Box<dyn Future<Output = ConnectResult> + Send + '_>>> = None;
        let mut backoff = Backoff::default();
        let mut next_wait: Option<std::time::Duration> = None;
        let mut open = true;
        loop {
            if !open && writes.is_empty() && pending.acks.is_empty() {
                break;
            }
            if !connected && attempt.is_none() {
                if pending.acks.is_empty() && writes.is_empty() && rx.is_closed() && rx.is_empty() {
                    // Nothing left to deliver and nothing more will come: do not wait on a
                    // broker that is down.
                    break;
                }
                attempt = Some(Box::pin(connect_after(&*output, next_wait.take())));
            }
            tokio::select! {
                result = poll_attempt(&mut attempt), if attempt.is_some() => {
                    attempt = None;
                    if !output.connects_per_write() {
                        metrics.connection_attempt(result.is_ok());
                    }
                    match result {
                        Ok(()) => {
                            connected = true;
                            backoff.reset();
                            readiness.set(&id, true);
                            health.up(&stream, &id);
                            metrics.connected.set(1.0);
                            info!("Output connected.");
                        }
                        Err(e) => {
                            metrics.error(Stage::Connect);
                            health.down(&stream, &id, e.to_string());
                            let delay = backoff.next_delay().unwrap_or_default();
                            warn!(error = %e, retry_in = ?delay, "Output failed to connect.");
                            next_wait = Some(delay);
                        }
                    }
                }
                t = rx.recv(), if connected && open && writes.len() < max_in_flight => match t {
                    Some(Transaction { batch, ack }) => {
                        let start = pending.batch.len();
                        pending.bytes += batch_bytes(&batch);
                        if start == 0 {
                            // The usual case: the batch is the flush, no copy.
                            pending.batch = batch;
                        } else {
                            pending.batch.extend(batch);
                        }
                        pending.acks.push((ack, start..pending.batch.len()));
                        if deadline.is_none() {
                            deadline = policy.period.map(|p| TokioInstant::now() + p.0);
                            if let Some(d) = deadline {
                                timer.as_mut().reset(d);
                            }
                        }
                        if policy.is_full(pending.batch.len(), pending.bytes)
                            || pending.acks.len() >= max_reads
                        {
                            writes.push(write(&*output, take(&mut pending, &mut deadline), &metrics, &tap, &halted));
                        }
                    }
                    None => {
                        open = false;
                        if !pending.acks.is_empty() {
                            writes.push(write(&*output, take(&mut pending, &mut deadline), &metrics, &tap, &halted));
                        }
                    }
                },
                _ = &mut timer, if connected && deadline.is_some() && writes.len() < max_in_flight => {
                    writes.push(write(&*output, take(&mut pending, &mut deadline), &metrics, &tap, &halted));
                }
                Some(lost) = writes.next(), if !writes.is_empty() => {
                    if lost && connected {
                        connected = false;
                        readiness.set(&id, false);
                        health.down(&stream, &id, "the connection was lost".into());
                        metrics.connected.set(0.0);
                    }
                }
            }
        }
        drop(attempt);
        output.close().await;
        readiness.set(&id, false);
        metrics.connected.set(0.0);
        drop(writes);
        // Some clients join threads of their own when dropped (librdkafka's producer waits
        // up to 100 ms for its polling thread): not on a runtime worker, which the tasks of
        // other streams share.
        tokio::task::spawn_blocking(move || drop(output));
    }
}

fn take(pending: &mut Flush, deadline: &mut Option<TokioInstant>) -> Flush {
    *deadline = None;
    std::mem::take(pending)
}

/// Writes one flush and settles its acks. Returns true if the connection was lost.
async fn write(
    output: &dyn Output,
    mut flush: Flush,
    metrics: &NodeMetrics,
    tap: &Tap,
    halted: &AtomicBool,
) -> bool {
    let (n, bytes) = (flush.batch.len(), flush.bytes);
    metrics.received_messages.increment(n as u64);
    metrics.received_bytes.increment(bytes as u64);
    metrics.batch_size.record(n as f64);
    // The messages leave carrying the send's trace context (when traces are on).
    let sending = telemetry::Sending::start(
        &mut flush.batch,
        metrics.label("stream"),
        metrics.component(),
    );
    let start = Instant::now();
    let result = output.write(&flush.batch).await;
    metrics.latency.record(start.elapsed().as_secs_f64());
    sending.end(result.as_ref().err().map(|e| e.to_string()).as_deref());
    match result {
        Ok(()) => {
            metrics.sent_messages.increment(n as u64);
            metrics.sent_bytes.increment(bytes as u64);
            tap.offer(&flush.batch);
            for (ack, range) in flush.acks {
                ack.offer_reply(&flush.batch[range]);
                ack.resolve(Outcome::Delivered);
            }
            false
        }
        Err(e) => {
            metrics.error(Stage::Write);
            if e.kind == ErrorKind::Stopped {
                // Said once by the stream's shutdown, not once per batch.
                debug!(error = %e, messages = n, "Write refused: the output stopped.");
                halted.store(true, Ordering::Relaxed);
            } else {
                warn!(error = %e, messages = n, "Write failed.");
            }
            let outcome = e.outcome();
            // Each transaction's messages go back with its ack, unchanged: an input that
            // sends failures again needs no copy of its own (ranges are in order, so
            // taking them from the end leaves each one whole).
            let mut batch = flush.batch;
            for (ack, range) in flush.acks.into_iter().rev() {
                let messages = if range.start == 0 {
                    std::mem::take(&mut batch)
                } else {
                    batch.split_off(range.start)
                };
                ack.resolve_returning(outcome.clone(), messages);
            }
            e.kind == ErrorKind::NotConnected
        }
    }
}

type ConnectResult = Result<(), ConnectorError>;

/// One connection attempt, after `wait`. Outputs wait for a connection: the stream's input
/// is held back by the bounded channels meanwhile (backpressure), and shutdown's deadline
/// still applies.
async fn connect_after(output: &dyn Output, wait: Option<std::time::Duration>) -> ConnectResult {
    if let Some(wait) = wait {
        tokio::time::sleep(wait).await;
    }
    output.connect().await
}

/// The attempt under way; never ready without one.
async fn poll_attempt(
    attempt: &mut Option<Pin<Box<dyn Future<Output = ConnectResult> + Send + '_>>>,
) -> ConnectResult {
    match attempt {
        Some(attempt) => attempt.await,
        None => std::future::pending().await,
    }
}

pub struct RouterNode {
    pub router: Box<dyn Router>,
    pub children: Vec<mpsc::Sender<Transaction>>,
    pub metrics: NodeMetrics,
}

impl RouterNode {
    pub async fn run(mut self, mut rx: mpsc::Receiver<Transaction>) {
        while let Some(t) = rx.recv().await {
            let n = t.batch.len() as u64;
            self.metrics.received_messages.increment(n);
            self.router.route(t, &self.children).await;
            self.metrics.sent_messages.increment(n);
        }
        // Dropping the children's senders lets them drain and stop.
    }
}
