//! The input node: connects with backoff, reads, attaches an ack to every batch, sends
//! failed batches again (for sources that cannot take nacks), and on shutdown stops
//! reading but stays until everything it sent is settled.
//!
//! A failed batch waits out its back-off in a queue of the node's own, so reading and
//! shutdown go on meanwhile. That queue is bounded without ever being full: an input that
//! sends failures again admits a read only with one of a fixed number of permits, which
//! the batch keeps until it is settled, and the queue has room for as many.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::backoff::Backoff;
use crate::component::{ConnectorError, ErrorKind, Input, ReadBatch, SourceAck};
use crate::message::{batch_bytes, Ack, Batch, Outcome, ReplySlot, Transaction};
use crate::metrics::{NodeMetrics, Stage};

use super::budget::{MemoryBudget, NoRoom};
use super::failures::GiveUp;
use super::readiness::Readiness;

/// Batches read but not yet settled with their source.
#[derive(Default)]
pub struct InFlight {
    count: AtomicUsize,
    zero: Notify,
}

impl InFlight {
    pub fn get(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    fn inc(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn dec(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.zero.notify_waiters();
        }
    }

    async fn wait_zero(&self) {
        loop {
            let notified = self.zero.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.get() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Waits before sending a failed batch again: 50ms doubling per attempt, at most 5s.
fn resend_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(50), Duration::from_secs(5))
}

/// A batch as read, with what settling it or sending it again takes.
struct Read {
    batch: Batch,
    ack: SourceAck,
    reply: Option<ReplySlot>,
    /// The batch's own sequence of waits, started at its first failure.
    backoff: Option<Backoff>,
    /// Held from the read until the batch is settled: its room in the resend queue.
    permit: Option<OwnedSemaphorePermit>,
    /// Held from the read until the batch is settled: its bytes in the memory budget.
    held: Option<OwnedSemaphorePermit>,
}

/// Failed batches waiting out their back-off, earliest first (a counter keeps batches due
/// at the same instant in the order they failed).
#[derive(Default)]
struct Resends {
    queue: BTreeMap<(Instant, u64), Read>,
    next: u64,
}

impl Resends {
    fn push(&mut self, due: Instant, retry: Read) {
        self.queue.insert((due, self.next), retry);
        self.next += 1;
    }

    fn first_due(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|((due, _), _)| *due)
    }

    fn pop(&mut self) -> Option<Read> {
        self.queue.pop_first().map(|(_, retry)| retry)
    }
}

pub struct InputNode {
    pub id: String,
    pub input: Box<dyn Input>,
    pub metrics: NodeMetrics,
    pub inflight: Arc<InFlight>,
    /// The in-flight memory this stream shares with others, if it is held to one.
    pub budget: Option<Arc<MemoryBudget>>,
    /// When to stop trying to connect, if ever.
    pub give_up: Option<GiveUp>,
    /// The stream's name, under which a give-up is recorded.
    pub stream: Arc<str>,
    /// Where the stream's health is kept.
    pub health: Arc<super::health::Health>,
    /// The labels naming the stream in its metrics.
    pub stream_labels: Vec<(&'static str, String)>,
    /// Set when an output of the stream stopped for good: failed batches are then
    /// settled as failed instead of being sent again.
    pub halted: Arc<AtomicBool>,
}

/// Who sends a failed batch again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// The source: it takes nacks (answers 502, redelivers).
    Source,
    /// The runtime, from a copy kept until the batch is settled.
    Copy,
    /// The runtime, from the messages the failed write hands back: the stream is a
    /// straight line to one writer (no processors, no router), so they come back as read.
    Returned,
}

impl InputNode {
    /// Runs the node until it stops reading and everything it read is settled. `limit`
    /// is the most batches it keeps unsettled when it sends failed ones again itself:
    /// what the rest of the stream can hold, so it holds back only while failed batches
    /// wait out their back-off.
    pub async fn run(
        mut self,
        tx: mpsc::Sender<Transaction>,
        cancel: CancellationToken,
        readiness: Arc<Readiness>,
        straight: bool,
        limit: usize,
    ) {
        let resend = match (self.input.handles_nacks(), straight) {
            (true, _) => Resend::Source,
            (false, false) => Resend::Copy,
            (false, true) => Resend::Returned,
        };
        let limit = limit.max(1);
        // A source that takes nacks never hands a batch back: its reads need no permit.
        let admission = (resend != Resend::Source).then(|| Arc::new(Semaphore::new(limit)));
        let mut permit: Option<OwnedSemaphorePermit> = None;
        let (retry_tx, mut retry_rx) = mpsc::channel::<Read>(limit);
        let mut resends = Resends::default();
        // One timer for the earliest resend, re-armed as the queue changes.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut reading = self.connect(&cancel, &readiness).await;
        let mut read_backoff = Backoff::default();
        // After a failed read, no read before this instant (other work goes on).
        let mut read_after: Option<Instant> = None;
        // Messages of failed batches settled as failed because the output stopped for good.
        let mut halted_messages = 0usize;
        loop {
            if !reading && self.inflight.get() == 0 {
                break;
            }
            let admitted = admission.is_none() || permit.is_some();
            tokio::select! {
                biased;
                Some(mut retry) = retry_rx.recv() => {
                    if tx.is_closed() || self.halted.load(Ordering::Relaxed) {
                        if !tx.is_closed() {
                            halted_messages += retry.batch.len();
                        }
                        self.abandon(retry);
                        continue;
                    }
                    self.metrics.retries.increment(1);
                    let delay = retry
                        .backoff
                        .get_or_insert_with(resend_backoff)
                        .next_delay()
                        .unwrap_or_default();
                    resends.push(Instant::now() + delay, retry);
                    if let Some(due) = resends.first_due() {
                        timer.as_mut().reset(due);
                    }
                }
                () = &mut timer, if resends.first_due().is_some() => {
                    let Some(retry) = resends.pop() else { continue };
                    if let Some(due) = resends.first_due() {
                        timer.as_mut().reset(due);
                    }
                    if tx.is_closed() || self.halted.load(Ordering::Relaxed) {
                        if !tx.is_closed() {
                            halted_messages += retry.batch.len();
                        }
                        self.abandon(retry);
                        continue;
                    }
                    let attempt = retry.backoff.as_ref().map_or(0, Backoff::attempts);
                    debug!(attempt, "Sending a failed batch again.");
                    let t = self.transaction(retry, resend, &retry_tx);
                    let _ = tx.send(t).await;
                }
                _ = cancel.cancelled(), if reading => {
                    info!("Input stopping: no new reads; draining in-flight messages.");
                    reading = false;
                }
                _ = self.inflight.wait_zero(), if !reading => {}
                Some(p) = admit(admission.as_ref()), if reading && !admitted => {
                    permit = Some(p);
                }
                read = read_at(&mut *self.input, read_after), if reading && admitted => match read {
                    Ok(ReadBatch { mut batch, ack, reply }) => {
                        read_backoff.reset();
                        read_after = None;
                        if batch.is_empty() {
                            ack(Outcome::Filtered);
                            continue;
                        }
                        crate::telemetry::received(&mut batch, &self.stream, self.metrics.component());
                        let bytes = batch_bytes(&batch);
                        self.metrics.received_messages.increment(batch.len() as u64);
                        self.metrics.received_bytes.increment(bytes as u64);
                        self.metrics.batch_size.record(batch.len() as f64);
                        let held = match &self.budget {
                            None => None,
                            Some(budget) => match budget.reserve(bytes, &cancel).await {
                                Ok(held) => Some(held),
                                Err(e @ NoRoom::TooLarge { .. }) => {
                                    error!(error = %e, "Read refused: over the in-flight memory quota.");
                                    self.metrics.discarded("memory_quota", batch.len() as u64);
                                    ack(Outcome::rejected(e.to_string()));
                                    continue;
                                }
                                Err(e @ NoRoom::Stopped) => {
                                    ack(Outcome::errored(e.to_string()));
                                    reading = false;
                                    continue;
                                }
                            },
                        };
                        self.inflight.inc();
                        let read = Read { batch, ack, reply, backoff: None, permit: permit.take(), held };
                        let t = self.transaction(read, resend, &retry_tx);
                        self.metrics.sent_messages.increment(t.batch.len() as u64);
                        if tx.send(t).await.is_err() {
                            // The rest of the graph is gone (aborted): the dropped ack nacks.
                            reading = false;
                        }
                    }
                    Err(e) => match e.kind {
                        ErrorKind::EndOfInput => {
                            info!("Input reached its end.");
                            reading = false;
                        }
                        ErrorKind::NotConnected => {
                            warn!(error = %e, "Input lost its connection; reconnecting.");
                            self.metrics.error(Stage::Read);
                            readiness.set(&self.id, false);
                            self.metrics.connected.set(0.0);
                            reading = self.connect(&cancel, &readiness).await;
                        }
                        ErrorKind::Transient | ErrorKind::Rejected | ErrorKind::Stopped => {
                            self.metrics.error(Stage::Read);
                            let delay = read_backoff.next_delay().unwrap_or_default();
                            warn!(error = %e, retry_in = ?delay, "Read failed.");
                            read_after = Some(Instant::now() + delay);
                        }
                    },
                },
            }
        }
        if halted_messages > 0 {
            // Once, rather than once per batch: sending them again could not help.
            warn!(
                messages = halted_messages,
                "Messages not delivered: the output stopped with the stream."
            );
            self.metrics
                .discarded("output_stopped", halted_messages as u64);
        }
        self.input.close().await;
        readiness.set(&self.id, false);
        self.metrics.connected.set(0.0);
    }

    /// Settles a failed batch that can no longer be sent (the stream stopped).
    fn abandon(&self, retry: Read) {
        (retry.ack)(Outcome::errored("the stream stopped before delivery"));
        self.inflight.dec();
    }

    /// Connects with backoff; false if the stream stopped first.
    async fn connect(&mut self, cancel: &CancellationToken, readiness: &Readiness) -> bool {
        let mut backoff = Backoff::default();
        loop {
            match self.input.connect().await {
                Ok(()) => {
                    readiness.set(&self.id, true);
                    self.health.up(&self.stream, &self.id);
                    self.metrics.connected.set(1.0);
                    info!("Input connected.");
                    return true;
                }
                Err(e) if e.kind == ErrorKind::EndOfInput => return false,
                Err(e) => {
                    self.metrics.error(Stage::Connect);
                    self.health.down(&self.stream, &self.id, e.to_string());
                    if let Some(give_up) = &self.give_up {
                        if backoff.attempts() + 1 >= give_up.after {
                            let reason = format!(
                                "the input failed to connect {} times in a row and gave up: {e}",
                                give_up.after
                            );
                            error!(stream = %self.stream, error = %e, attempts = give_up.after, "Input gave up connecting; the stream is stopped.");
                            metrics::counter!(crate::metrics::STREAM_FAILURES, &self.stream_labels)
                                .increment(1);
                            self.health.stopped(&self.stream, Some(reason.clone()));
                            give_up.failures.record(&self.stream, reason);
                            return false;
                        }
                    }
                    let delay = backoff.next_delay().unwrap_or_default();
                    warn!(error = %e, retry_in = ?delay, "Input failed to connect.");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = cancel.cancelled() => return false,
                    }
                }
            }
        }
    }

    /// Wraps a batch in a transaction whose ack settles the source, or queues the batch
    /// to be sent again when delivery failed and the source cannot take a nack. The read's
    /// permit (its room in the queue) is given back once the batch is settled.
    fn transaction(
        &self,
        read: Read,
        resend: Resend,
        retry_tx: &mpsc::Sender<Read>,
    ) -> Transaction {
        let Read {
            batch,
            ack: source_ack,
            reply,
            backoff,
            permit,
            held,
        } = read;
        let inflight = self.inflight.clone();
        let metrics = self.metrics.clone();
        let settle = move |ack: SourceAck, outcome: Outcome| {
            ack(outcome);
            inflight.dec();
        };
        let callback: Box<dyn FnOnce(Outcome, Option<Batch>) + Send> = if resend == Resend::Source {
            Box::new(move |outcome, _| {
                settle(source_ack, outcome);
                drop(held);
            })
        } else {
            let copy = (resend == Resend::Copy).then(|| batch.clone());
            let n = batch.len();
            let retry_tx = retry_tx.clone();
            let retry_reply = reply.clone();
            Box::new(move |outcome, returned| match outcome {
                Outcome::Errored(ref reason) => match copy.or(returned) {
                    Some(batch) => {
                        let attempt = backoff.as_ref().map_or(0, Backoff::attempts);
                        debug!(%reason, attempt, "Delivery failed; the batch will be sent again.");
                        let retry = Read {
                            batch,
                            ack: source_ack,
                            reply: retry_reply,
                            backoff,
                            permit,
                            held,
                        };
                        match retry_tx.try_send(retry) {
                            Ok(()) => {}
                            // The input node is gone (the stream was aborted): report the loss.
                            Err(TrySendError::Closed(retry)) => settle(retry.ack, outcome),
                            Err(TrySendError::Full(retry)) => {
                                // Cannot happen while every queued batch holds one of as
                                // many permits as the queue has room; never drop quietly.
                                error!(messages = n, "The queue of batches to send again is full.");
                                metrics.discarded("resend_queue_full", n as u64);
                                settle(retry.ack, outcome);
                            }
                        }
                    }
                    // Dropped before any write (the stream was aborted): nothing to send.
                    None => settle(source_ack, outcome),
                },
                Outcome::Rejected(ref reason) => {
                    error!(%reason, messages = n, "Messages rejected by the output and not retried.");
                    metrics.discarded("rejected", n as u64);
                    settle(source_ack, outcome);
                }
                _ => settle(source_ack, outcome),
            })
        };
        let ack = Ack::returning(callback, reply);
        Transaction::new(batch, ack)
    }
}

/// A permit to admit one more read; never ready without `admission`.
async fn admit(admission: Option<&Arc<Semaphore>>) -> Option<OwnedSemaphorePermit> {
    match admission {
        Some(admission) => admission.clone().acquire_owned().await.ok(),
        None => std::future::pending().await,
    }
}

/// The next read, once `after` has passed.
async fn read_at(
    input: &mut dyn Input,
    after: Option<Instant>,
) -> Result<ReadBatch, ConnectorError> {
    if let Some(after) = after {
        tokio::time::sleep_until(after).await;
    }
    input.read().await
}
