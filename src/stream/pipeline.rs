//! The pipeline node: runs the processors over each transaction, in order, and passes
//! on what they return (or settles the ack as filtered when nothing is left).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinSet;
use tracing::{Instrument, Span};

use crate::component::Processor;
use crate::message::{Batch, Outcome, Transaction};
use crate::metrics::{NodeMetrics, Stage};

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
            let start = Instant::now();
            let out = node.processor.process(batch).await;
            node.metrics.latency.record(start.elapsed().as_secs_f64());
            let mut sent = 0;
            for b in out.into_iter().filter(|b| !b.is_empty()) {
                let errored = b.iter().filter(|m| m.error().is_some()).count();
                node.metrics.errors(Stage::Process, errored as u64);
                // No byte counts here: sizing a message a processor made structured would
                // serialize it on every step.
                sent += b.len();
                next.push(b);
            }
            node.metrics.sent_messages.increment(sent as u64);
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

/// Spawns `threads` workers into the stream's task set; they process transactions from
/// `rx` until it closes. Being the stream's tasks, they are stopped with the stream.
pub fn spawn(
    nodes: Arc<Vec<ProcessorNode>>,
    rx: mpsc::Receiver<Transaction>,
    tx: mpsc::Sender<Transaction>,
    threads: usize,
    tasks: &mut JoinSet<()>,
    span: &Span,
) {
    if threads <= 1 {
        tasks.spawn(worker(nodes, Source::Own(rx), tx).instrument(span.clone()));
        return;
    }
    let shared = Arc::new(Mutex::new(rx));
    for _ in 0..threads {
        let source = Source::Shared(shared.clone());
        tasks.spawn(worker(nodes.clone(), source, tx.clone()).instrument(span.clone()));
    }
}

enum Source {
    Own(mpsc::Receiver<Transaction>),
    Shared(Arc<Mutex<mpsc::Receiver<Transaction>>>),
}

impl Source {
    async fn recv(&mut self) -> Option<Transaction> {
        match self {
            Source::Own(rx) => rx.recv().await,
            Source::Shared(rx) => rx.lock().await.recv().await,
        }
    }
}

async fn worker(nodes: Arc<Vec<ProcessorNode>>, mut rx: Source, tx: mpsc::Sender<Transaction>) {
    while let Some(Transaction { batch, ack }) = rx.recv().await {
        let mut batches = process_all(&nodes, batch).await;
        let Some(last) = batches.pop() else {
            ack.resolve(Outcome::Filtered);
            continue;
        };
        for b in batches {
            // A send fails only when the output side is gone; the dropped ack then nacks.
            let _ = tx.send(Transaction::new(b, ack.clone())).await;
        }
        let _ = tx.send(Transaction::new(last, ack)).await;
    }
}
