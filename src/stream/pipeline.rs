//! The pipeline node: runs the processors over each transaction, in order, and passes
//! on what they return (or settles the ack as filtered when nothing is left).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::mpsc;
use tracing::{Instrument, Span};

use crate::component::Processor;
use crate::message::{Ack, Batch, Outcome, ReplySlot, Transaction};
use crate::metrics::{NodeMetrics, Stage};
use crate::telemetry;

pub struct ProcessorNode {
    pub processor: Box<dyn Processor>,
    pub metrics: NodeMetrics,
}

/// Runs every processor over a batch; returns what is left.
pub async fn process_all(nodes: &[ProcessorNode], batch: Batch) -> Vec<Batch> {
    let mut batches = vec![batch];
    for node in nodes {
        let mut next = Vec::with_capacity(batches.len());
        for batch in batches {
            let n = batch.len();
            node.metrics.received_messages.increment(n as u64);
            // The traces the batch's messages belong to (none when traces are off).
            let traces = telemetry::batch_parents(&batch);
            let began = (!traces.is_empty()).then(SystemTime::now);
            let start = Instant::now();
            let out = node.processor.process(batch).await;
            node.metrics.latency.record(start.elapsed().as_secs_f64());
            let mut sent = 0;
            let mut failed = 0;
            for b in out.into_iter().filter(|b| !b.is_empty()) {
                let errored = b.iter().filter(|m| m.error().is_some()).count();
                failed += errored;
                node.metrics.errors(Stage::Process, errored as u64);
                // No byte counts here: sizing a message a processor made structured would
                // serialize it on every step.
                sent += b.len();
                next.push(b);
            }
            node.metrics.sent_messages.increment(sent as u64);
            if let Some(began) = began {
                telemetry::processed(&traces, node.metrics.component(), began, failed);
            }
            if sent < n {
                node.metrics.discarded("filtered", (n - sent) as u64);
            }
        }
        batches = next;
        if batches.is_empty() {
            break;
        }
    }
    batches
}

/// Spawns the pipeline into the stream's task set: it processes transactions from `rx`
/// until it closes. Being the stream's tasks, its workers are stopped with the stream.
///
/// With more than one thread, batches go to the workers in turn and their results are
/// taken from the workers in the same turn, so what leaves the pipeline keeps the order
/// in which it came in while the processors run on several cores.
pub fn spawn(
    nodes: Arc<Vec<ProcessorNode>>,
    rx: mpsc::Receiver<Transaction>,
    tx: mpsc::Sender<Transaction>,
    threads: usize,
    tasks: &mut super::Tasks,
    span: &Span,
) {
    if threads <= 1 {
        tasks.spawn(worker(nodes, rx, tx).instrument(span.clone()));
        return;
    }
    let mut to_workers = Vec::with_capacity(threads);
    let mut from_workers = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (in_tx, in_rx) = mpsc::channel(1);
        let (out_tx, out_rx) = mpsc::channel(1);
        tasks.spawn(ordered_worker(nodes.clone(), in_rx, out_tx).instrument(span.clone()));
        to_workers.push(in_tx);
        from_workers.push(out_rx);
    }
    tasks.spawn(deal(rx, to_workers).instrument(span.clone()));
    tasks.spawn(gather(from_workers, tx).instrument(span.clone()));
}

/// The most transactions the pipeline holds at once besides its input channel: one in a
/// lone worker; with several, one in each worker and in each worker's two channels, and
/// one each in the dealer and the gatherer.
pub fn holds(threads: usize) -> usize {
    if threads <= 1 {
        1
    } else {
        threads.saturating_mul(3).saturating_add(2)
    }
}

/// What one transaction became: its batches, each with a share of its ack.
fn outcome(batches: Vec<Batch>, ack: Ack) -> Vec<Transaction> {
    let n = batches.len();
    if n == 0 {
        ack.resolve(Outcome::Filtered);
        return Vec::new();
    }
    let mut ack = Some(ack);
    batches
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let share = if i + 1 == n {
                ack.take().expect("the last batch takes the ack")
            } else {
                ack.as_ref().expect("kept until the last batch").clone()
            };
            Transaction::new(b, share)
        })
        .collect()
}

async fn worker(
    nodes: Arc<Vec<ProcessorNode>>,
    mut rx: mpsc::Receiver<Transaction>,
    tx: mpsc::Sender<Transaction>,
) {
    while let Some(Transaction { batch, ack }) = rx.recv().await {
        let reply = ack.reply_slot().cloned();
        let out = ReplySlot::scope(reply, process_all(&nodes, batch)).await;
        for t in outcome(out, ack) {
            // A send fails only when the output side is gone; the dropped ack then nacks.
            let _ = tx.send(t).await;
        }
    }
}

/// Hands transactions to the workers in turn.
async fn deal(mut rx: mpsc::Receiver<Transaction>, workers: Vec<mpsc::Sender<Transaction>>) {
    for turn in (0..workers.len()).cycle() {
        let Some(t) = rx.recv().await else {
            return;
        };
        if workers[turn].send(t).await.is_err() {
            return;
        }
    }
}

async fn ordered_worker(
    nodes: Arc<Vec<ProcessorNode>>,
    mut rx: mpsc::Receiver<Transaction>,
    tx: mpsc::Sender<Vec<Transaction>>,
) {
    while let Some(Transaction { batch, ack }) = rx.recv().await {
        let reply = ack.reply_slot().cloned();
        let out = ReplySlot::scope(reply, process_all(&nodes, batch)).await;
        // Sent even when empty (everything filtered), to keep the gatherer's turn.
        if tx.send(outcome(out, ack)).await.is_err() {
            return;
        }
    }
}

/// Takes the workers' results in the turn they were dealt. A worker that ended ends the
/// pipeline: the dealer closes every worker at once, and the turn that comes to a closed
/// worker comes after every result dealt before the close.
async fn gather(mut workers: Vec<mpsc::Receiver<Vec<Transaction>>>, tx: mpsc::Sender<Transaction>) {
    for turn in (0..workers.len()).cycle() {
        let Some(transactions) = workers[turn].recv().await else {
            return;
        };
        for t in transactions {
            if tx.send(t).await.is_err() {
                return;
            }
        }
    }
}
