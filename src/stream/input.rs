//! The input node: connects with backoff, reads, attaches an ack to every batch, sends
//! failed batches again (for sources that cannot take nacks), and on shutdown stops
//! reading but stays until everything it sent is settled.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::backoff::Backoff;
use crate::component::{ErrorKind, Input, ReadBatch, SourceAck};
use crate::message::{batch_bytes, Ack, Batch, Outcome, ReplySlot, Transaction};
use crate::metrics::{NodeMetrics, Stage};

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

/// Wait before sending a batch again: 50ms doubling per attempt, at most 5s.
fn retry_delay(attempt: u32) -> std::time::Duration {
    let ms = 50u64.saturating_mul(1 << attempt.saturating_sub(1).min(7));
    std::time::Duration::from_millis(ms.min(5_000))
}

struct Retry {
    batch: Batch,
    ack: SourceAck,
    reply: Option<ReplySlot>,
    attempt: u32,
}

pub struct InputNode {
    pub id: String,
    pub input: Box<dyn Input>,
    pub metrics: NodeMetrics,
    pub inflight: Arc<InFlight>,
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
    pub async fn run(
        mut self,
        tx: mpsc::Sender<Transaction>,
        cancel: CancellationToken,
        readiness: Arc<Readiness>,
        straight: bool,
    ) {
        let (retry_tx, mut retry_rx) = mpsc::unbounded_channel::<Retry>();
        let resend = match (self.input.handles_nacks(), straight) {
            (true, _) => Resend::Source,
            (false, false) => Resend::Copy,
            (false, true) => Resend::Returned,
        };
        let mut reading = self.connect(&cancel, &readiness).await;
        let mut read_backoff = Backoff::default();
        loop {
            if !reading && self.inflight.get() == 0 {
                break;
            }
            tokio::select! {
                biased;
                Some(retry) = retry_rx.recv() => {
                    if tx.is_closed() {
                        (retry.ack)(Outcome::errored("the stream stopped before delivery"));
                        self.inflight.dec();
                        continue;
                    }
                    self.metrics.retries.increment(1);
                    tokio::time::sleep(retry_delay(retry.attempt)).await;
                    debug!(attempt = retry.attempt, "Sending a failed batch again.");
                    let t = self.transaction(retry.batch, retry.ack, retry.reply, retry.attempt, resend, &retry_tx);
                    let _ = tx.send(t).await;
                }
                _ = cancel.cancelled(), if reading => {
                    info!("Input stopping: no new reads; draining in-flight messages.");
                    reading = false;
                }
                _ = self.inflight.wait_zero(), if !reading => {}
                read = self.input.read(), if reading => match read {
                    Ok(ReadBatch { batch, ack, reply }) => {
                        read_backoff.reset();
                        if batch.is_empty() {
                            ack(Outcome::Filtered);
                            continue;
                        }
                        self.metrics.received_messages.increment(batch.len() as u64);
                        self.metrics.received_bytes.increment(batch_bytes(&batch) as u64);
                        self.metrics.batch_size.record(batch.len() as f64);
                        self.inflight.inc();
                        let t = self.transaction(batch, ack, reply, 0, resend, &retry_tx);
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
                        ErrorKind::Transient | ErrorKind::Rejected => {
                            self.metrics.error(Stage::Read);
                            let delay = read_backoff.next_delay().unwrap_or_default();
                            warn!(error = %e, retry_in = ?delay, "Read failed.");
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => {}
                                _ = cancel.cancelled() => {}
                            }
                        }
                    },
                },
            }
        }
        self.input.close().await;
        readiness.set(&self.id, false);
        self.metrics.connected.set(0.0);
    }

    /// Connects with backoff; false if the stream stopped first.
    async fn connect(&mut self, cancel: &CancellationToken, readiness: &Readiness) -> bool {
        let mut backoff = Backoff::default();
        loop {
            match self.input.connect().await {
                Ok(()) => {
                    readiness.set(&self.id, true);
                    self.metrics.connected.set(1.0);
                    info!("Input connected.");
                    return true;
                }
                Err(e) if e.kind == ErrorKind::EndOfInput => return false,
                Err(e) => {
                    self.metrics.error(Stage::Connect);
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
    /// to be sent again when delivery failed and the source cannot take a nack.
    fn transaction(
        &self,
        batch: Batch,
        source_ack: SourceAck,
        reply: Option<ReplySlot>,
        attempt: u32,
        resend: Resend,
        retry_tx: &mpsc::UnboundedSender<Retry>,
    ) -> Transaction {
        let inflight = self.inflight.clone();
        let metrics = self.metrics.clone();
        let settle = move |ack: SourceAck, outcome: Outcome| {
            ack(outcome);
            inflight.dec();
        };
        let callback: Box<dyn FnOnce(Outcome, Option<Batch>) + Send> = if resend == Resend::Source {
            Box::new(move |outcome, _| settle(source_ack, outcome))
        } else {
            let copy = (resend == Resend::Copy).then(|| batch.clone());
            let n = batch.len();
            let retry_tx = retry_tx.clone();
            let retry_reply = reply.clone();
            Box::new(move |outcome, returned| match outcome {
                Outcome::Errored(ref reason) => match copy.or(returned) {
                    Some(batch) => {
                        debug!(%reason, attempt, "Delivery failed; the batch will be sent again.");
                        let retry = Retry {
                            batch,
                            ack: source_ack,
                            reply: retry_reply,
                            attempt: attempt + 1,
                        };
                        if let Err(mpsc::error::SendError(retry)) = retry_tx.send(retry) {
                            // The input node is gone (the stream was aborted): report the loss.
                            settle(retry.ack, outcome);
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
