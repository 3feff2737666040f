//! The runtime's own promises, checked with components made for the purpose: stopping a
//! stream stops all of its tasks, and a writer that reconnects still settles the writes
//! it has under way.
//!
//! Time is paused in these tests: tokio moves the clock on whenever every task waits, so
//! back-offs of seconds take no real time and what happens first is decided by order,
//! not by speed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::batching::BatchPolicy;
use crate::component::{ConnectorError, Input, Output, Processor, ReadBatch, Writer};
use crate::message::{Ack, Batch, Message, Outcome};

/// Reads the batches the test sends it; ends when the test drops its sender.
struct Feed {
    rx: mpsc::UnboundedReceiver<Batch>,
    reads: Arc<AtomicUsize>,
}

fn feed() -> (Feed, mpsc::UnboundedSender<Batch>, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let reads = Arc::new(AtomicUsize::new(0));
    let feed = Feed {
        rx,
        reads: reads.clone(),
    };
    (feed, tx, reads)
}

#[async_trait]
impl Input for Feed {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        match self.rx.recv().await {
            Some(batch) => {
                self.reads.fetch_add(1, Ordering::SeqCst);
                Ok(ReadBatch::unacked(batch))
            }
            None => Err(ConnectorError::end_of_input()),
        }
    }
}

/// Records what it writes; fails writes while told to.
#[derive(Default)]
struct Sink {
    written: Mutex<Vec<String>>,
    /// Fail every write while set.
    failing: AtomicBool,
    /// Fail this many writes, then go back to working.
    fail_next: AtomicUsize,
    /// Told once for every failed write.
    failed: Notify,
}

struct SinkOutput(Arc<Sink>);

#[async_trait]
impl Output for SinkOutput {
    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let sink = &self.0;
        let fail_one = sink
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail_one || sink.failing.load(Ordering::SeqCst) {
            sink.failed.notify_one();
            return Err(ConnectorError::transient("the sink is failing"));
        }
        let mut written = sink.written.lock();
        for m in batch {
            written.push(String::from_utf8_lossy(m.payload()).into_owned());
        }
        Ok(())
    }
}

/// Never finishes a batch; `live` counts the calls under way (one clone each).
struct Stuck {
    live: Arc<()>,
    entered: Arc<AtomicUsize>,
}

#[async_trait]
impl Processor for Stuck {
    async fn process(&self, _batch: Batch) -> Vec<Batch> {
        let _held = self.live.clone();
        self.entered.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

fn msg(text: &str) -> Batch {
    vec![Message::new(text.to_owned())]
}

fn writer_node(output: impl Output + 'static, max_in_flight: usize) -> WriterNode {
    WriterNode {
        id: "t/output".into(),
        writer: Writer {
            output: Box::new(output),
            max_in_flight,
            batching: BatchPolicy::default(),
        },
        metrics: NodeMetrics::new("t", "output", Kind::Output, "test"),
    }
}

/// A stream of one input, `processors` run by `threads` workers, and one writer.
fn stream(
    input: impl Input + 'static,
    processors: Vec<Box<dyn Processor>>,
    threads: usize,
    output: impl Output + 'static,
    capacity: usize,
) -> Stream {
    let readiness = Arc::new(Readiness::default());
    let processors = processors
        .into_iter()
        .map(|processor| ProcessorNode {
            processor,
            metrics: NodeMetrics::new("t", "processor", Kind::Processor, "test"),
        })
        .collect();
    Stream {
        name: "t".into(),
        inputs: vec![InputNode {
            id: "t/input".into(),
            input: Box::new(input),
            metrics: NodeMetrics::new("t", "input", Kind::Input, "test"),
            inflight: Arc::new(InFlight::default()),
        }],
        processors,
        threads,
        output: OutputTree::Writer(writer_node(output, 1)),
        capacity,
        readiness,
        cancel: CancellationToken::new(),
    }
}

/// Waits until `done` holds, failing the test if it does not within a minute of (paused)
/// time.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .is_err()
    {
        panic!("never happened: {what}");
    }
}

#[tokio::test(start_paused = true)]
async fn stopping_a_stream_stops_its_pipeline_workers() {
    let live = Arc::new(());
    let entered = Arc::new(AtomicUsize::new(0));
    let (input, tx, _) = feed();
    for i in 0..4 {
        tx.send(msg(&i.to_string())).unwrap();
    }
    let stuck = Stuck {
        live: live.clone(),
        entered: entered.clone(),
    };
    let sink = Arc::new(Sink::default());
    let running = stream(input, vec![Box::new(stuck)], 2, SinkOutput(sink), 4).start();
    wait_until("both workers hold a batch", || {
        entered.load(Ordering::SeqCst) == 2
    })
    .await;
    let report = running.stop(Duration::from_secs(1)).await;
    assert!(report.abandoned > 0, "{report:?}");
    assert_eq!(
        Arc::strong_count(&live),
        1,
        "a pipeline worker outlived the stream it belongs to"
    );
}

/// Connects once; every later connect fails. A write of `slow` waits for `gate`, a write
/// of `fail` loses the connection.
#[derive(Default)]
struct Flaky {
    connects: AtomicUsize,
    gate: Notify,
}

struct FlakyOutput(Arc<Flaky>);

#[async_trait]
impl Output for FlakyOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        match self.0.connects.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(()),
            _ => Err(ConnectorError::not_connected("the broker is down")),
        }
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        match &batch[0].payload()[..] {
            b"slow" => {
                self.0.gate.notified().await;
                Ok(())
            }
            _ => Err(ConnectorError::not_connected("connection reset")),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_reconnecting_writer_still_settles_its_writes_under_way() {
    let flaky = Arc::new(Flaky::default());
    let node = writer_node(FlakyOutput(flaky.clone()), 2);
    let (tx, rx) = mpsc::channel(4);
    let task = tokio::spawn(node.run(rx, Arc::new(Readiness::default())));
    let (slow, slow_done) = Ack::channel();
    tx.send(Transaction::new(msg("slow"), slow)).await.unwrap();
    let (fail, fail_done) = Ack::channel();
    tx.send(Transaction::new(msg("fail"), fail)).await.unwrap();
    assert!(matches!(fail_done.await, Ok(Outcome::Errored(_))));
    // The writer is reconnecting now, and cannot: the write still under way finishes all
    // the same and must be settled.
    flaky.gate.notify_one();
    let settled = tokio::time::timeout(Duration::from_secs(600), slow_done).await;
    assert_eq!(
        settled.expect("the write under way was never settled").ok(),
        Some(Outcome::Delivered)
    );
    drop(tx);
    tokio::time::timeout(Duration::from_secs(600), task)
        .await
        .expect("the writer stops once nothing is left")
        .unwrap();
}
