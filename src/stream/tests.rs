//! The runtime's own promises, checked with components made for the purpose: stopping a
//! stream stops all of its tasks, a batch waiting to be sent again holds up neither
//! reading nor shutdown, failed batches wait in a bounded queue without any being lost,
//! and a writer that reconnects still settles the writes it has under way.
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
    /// Refuse every write as an output that stopped for good.
    stopped: AtomicBool,
}

impl Sink {
    fn written(&self) -> Vec<String> {
        self.written.lock().clone()
    }
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
        if sink.stopped.load(Ordering::SeqCst) {
            sink.failed.notify_one();
            return Err(ConnectorError::new(
                crate::component::ErrorKind::Stopped,
                "the output stopped",
            ));
        }
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
        metrics: NodeMetrics::new(labels("output", Kind::Output)),
        tap: Default::default(),
        halted: Default::default(),
        stream: "t".into(),
        health: Default::default(),
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
            metrics: NodeMetrics::new(labels("processor", Kind::Processor)),
        })
        .collect();
    let writer = writer_node(output, 1);
    Stream {
        name: "t".into(),
        inputs: vec![InputNode {
            id: "t/input".into(),
            input: Box::new(input),
            metrics: NodeMetrics::new(labels("input", Kind::Input)),
            inflight: Arc::new(InFlight::default()),
            budget: None,
            give_up: None,
            stream: "t".into(),
            halted: writer.halted.clone(),
            health: Default::default(),
            stream_labels: vec![("stream", "t".to_owned())],
        }],
        processors,
        threads,
        output: OutputTree::Writer(writer),
        capacity,
        readiness,
        health: Default::default(),
        labels: vec![("stream", "t".to_owned())],
        cancel: CancellationToken::new(),
        cpu: None,
        spans: None,
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

/// Takes longer over earlier messages, so that parallel workers finish out of order;
/// filters `skip`.
struct Uneven;

#[async_trait]
impl Processor for Uneven {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let n: u64 = std::str::from_utf8(batch[0].payload())
            .unwrap()
            .parse()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100 - n)).await;
        if n % 7 == 3 {
            return Vec::new();
        }
        vec![batch.clone(), batch]
    }
}

#[tokio::test(start_paused = true)]
async fn parallel_workers_keep_the_order_of_messages() {
    let (input, tx, _) = feed();
    for i in 0..40 {
        tx.send(msg(&i.to_string())).unwrap();
    }
    drop(tx);
    let sink = Arc::new(Sink::default());
    let mut running = stream(
        input,
        vec![Box::new(Uneven)],
        4,
        SinkOutput(sink.clone()),
        4,
    )
    .start();
    running.finished().await;
    let expected: Vec<String> = (0..40)
        .filter(|n| n % 7 != 3)
        .flat_map(|n| [n.to_string(), n.to_string()])
        .collect();
    assert_eq!(sink.written(), expected);
}

#[tokio::test(start_paused = true)]
async fn new_reads_go_on_while_a_failed_batch_waits_to_be_sent_again() {
    let sink = Arc::new(Sink::default());
    sink.fail_next.store(1, Ordering::SeqCst);
    let (input, tx, _) = feed();
    let running = stream(input, vec![], 1, SinkOutput(sink.clone()), 4).start();
    tx.send(msg("a")).unwrap();
    // `a` failed and now waits out its back-off before it is sent again; `b` arrives
    // meanwhile and must not wait behind it.
    sink.failed.notified().await;
    tx.send(msg("b")).unwrap();
    wait_until("both written", || sink.written().len() == 2).await;
    assert_eq!(sink.written(), ["b", "a"]);
    drop(tx);
    let report = running.stop(Duration::from_secs(10)).await;
    assert_eq!(report.abandoned, 0);
}

#[tokio::test(start_paused = true)]
async fn failed_batches_wait_in_a_bounded_queue_and_none_is_lost() {
    let sink = Arc::new(Sink::default());
    sink.failing.store(true, Ordering::SeqCst);
    let (input, tx, reads) = feed();
    let sent: Vec<String> = (0..100).map(|i| format!("{i:03}")).collect();
    for text in &sent {
        tx.send(msg(text)).unwrap();
    }
    drop(tx);
    let mut running = stream(input, vec![], 1, SinkOutput(sink.clone()), 1).start();
    // Every write fails for a while: batches go round between the output and the input's
    // queue of batches to send again, and the input goes on reading meanwhile, up to as
    // many unsettled batches as the stream can hold, and no further: one being handed
    // over, one in the channel, one being written and one waiting to be.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(reads.load(Ordering::SeqCst), 4, "batches read");
    assert_eq!(running.in_flight(), 4, "batches in flight");
    sink.failing.store(false, Ordering::SeqCst);
    if tokio::time::timeout(Duration::from_secs(600), running.finished())
        .await
        .is_err()
    {
        panic!(
            "the stream never drained: {} in flight",
            running.in_flight()
        );
    }
    let mut written = sink.written();
    written.sort();
    assert_eq!(written, sent, "every message exactly once");
}

#[tokio::test(start_paused = true)]
async fn a_stopping_stream_does_not_wait_for_an_output_that_stopped() {
    let sink = Arc::new(Sink::default());
    sink.stopped.store(true, Ordering::SeqCst);
    let (input, tx, _) = feed();
    let running = stream(input, vec![], 1, SinkOutput(sink.clone()), 4).start();
    tx.send(msg("never taken")).unwrap();
    sink.failed.notified().await;
    // Sending the batch again cannot help: it is settled as failed at once, so the
    // stream stops well before its deadline with nothing abandoned at it.
    let report = running.stop(Duration::from_secs(3600)).await;
    assert_eq!(report.abandoned, 0, "{report:?}");
    assert!(sink.written().is_empty());
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
    let task = tokio::spawn(node.run(rx, Arc::new(Readiness::default()), 4));
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

#[tokio::test(start_paused = true)]
async fn a_flush_without_a_count_goes_out_before_its_input_runs_out_of_room() {
    // Batching by size only, with messages far too small to fill it: the input may have
    // only so many batches unsettled, so the flush goes out once it holds as many reads
    // as a channel does, and the stream keeps moving.
    let sink = Arc::new(Sink::default());
    let (input, tx, _) = feed();
    let sent: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    for text in &sent {
        tx.send(msg(text)).unwrap();
    }
    let mut stream = stream(input, vec![], 1, SinkOutput(sink.clone()), 2);
    if let OutputTree::Writer(node) = &mut stream.output {
        node.writer.batching = BatchPolicy {
            count: 0,
            byte_size: 1 << 20,
            period: None,
        };
    }
    let running = stream.start();
    wait_until("all ten written", || sink.written().len() == 10).await;
    assert_eq!(sink.written(), sent);
    drop(tx);
    assert_eq!(running.stop(Duration::from_secs(10)).await.abandoned, 0);
}

/// The standard labels of a test node.
fn labels(component: &str, kind: Kind) -> Vec<(&'static str, String)> {
    vec![
        ("stream", "t".to_owned()),
        ("component", component.to_owned()),
        ("kind", kind.as_str().to_owned()),
        ("type", "test".to_owned()),
    ]
}

/// Reads one batch that waits for a synchronous reply in `slot`.
struct Replying {
    slot: Option<crate::message::ReplySlot>,
}

#[async_trait]
impl Input for Replying {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        match self.slot.take() {
            Some(slot) => Ok(ReadBatch::unacked(msg("asked")).with_reply(slot)),
            None => Err(ConnectorError::end_of_input()),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_sync_response_processor_answers_with_the_messages_at_its_step() {
    for threads in [1, 3] {
        let slot = crate::message::ReplySlot::for_processors();
        let answer: crate::processor::ProcessorConfig =
            serde_yaml::from_str("sync_response: {}").unwrap();
        let later: crate::processor::ProcessorConfig =
            serde_yaml::from_str("mapping: 'root = \"stored\"'").unwrap();
        let cx = crate::component::BuildContext::new("t", Default::default(), Default::default());
        let sink = Arc::new(Sink::default());
        let mut running = stream(
            Replying {
                slot: Some(slot.clone()),
            },
            vec![
                answer.kind.build(&cx).unwrap(),
                later.kind.build(&cx).unwrap(),
            ],
            threads,
            SinkOutput(sink.clone()),
            4,
        )
        .start();
        running.finished().await;
        assert_eq!(sink.written(), vec!["stored".to_string()]);
        let reply = slot.take().expect("the processor replied");
        assert_eq!(&reply[0].payload()[..], b"asked", "threads: {threads}");
    }
}

/// Reads one batch and reports how it was settled; like an HTTP source, it deals with
/// failures itself, so nothing is sent again.
struct Once {
    batch: Option<Batch>,
    settled: Option<tokio::sync::oneshot::Sender<Outcome>>,
}

#[async_trait]
impl Input for Once {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        match (self.batch.take(), self.settled.take()) {
            (Some(batch), Some(tx)) => Ok(ReadBatch::new(batch, move |o| {
                let _ = tx.send(o);
            })),
            _ => Err(ConnectorError::end_of_input()),
        }
    }

    fn handles_nacks(&self) -> bool {
        true
    }
}

#[tokio::test(start_paused = true)]
async fn batches_split_from_one_read_settle_it_together() {
    for failures in [0, 1] {
        let (tx, settled) = tokio::sync::oneshot::channel();
        let input = Once {
            batch: Some(vec![
                Message::new("a"),
                Message::new("b"),
                Message::new("c"),
            ]),
            settled: Some(tx),
        };
        let split: crate::processor::ProcessorConfig =
            serde_yaml::from_str("split: {size: 1}").unwrap();
        let cx = crate::component::BuildContext::new("t", Default::default(), Default::default());
        let sink = Arc::new(Sink::default());
        sink.fail_next.store(failures, Ordering::SeqCst);
        let mut running = stream(
            input,
            vec![split.kind.build(&cx).unwrap()],
            1,
            SinkOutput(sink.clone()),
            4,
        )
        .start();
        running.finished().await;
        let outcome = settled.await.expect("the read was settled");
        if failures == 0 {
            assert_eq!(outcome, Outcome::Delivered);
            assert_eq!(sink.written(), vec!["a", "b", "c"]);
        } else {
            // One of the three batches failed: the read as a whole did.
            assert!(!outcome.is_success(), "{outcome:?}");
            assert_eq!(sink.written(), vec!["b", "c"]);
        }
    }
}

#[test]
fn only_what_an_input_hands_on_unchanged_to_one_hub_output_has_its_history() {
    let stream = |yaml: &str| {
        let root = crate::stream::config::parse_str("t.yaml", yaml).unwrap();
        root.streams.into_values().next().unwrap()
    };
    let direct = "input:\n  kafka: {addresses: ['k:9092'], topics: [t], consumer_group: g}\noutput:\n  http_server: {stream_path: /e, delivery: broadcast, id_metadata: kafka_offset}\n";
    assert!(super::hands_on_unchanged(&stream(direct)));
    let mapped = direct.replace(
        "output:",
        "pipeline:\n  processors:\n    - mapping: 'root = this'\noutput:",
    );
    assert!(!super::hands_on_unchanged(&stream(&mapped)));
    let routed = direct.replace(
        "output:\n  http_server:",
        "output:\n  broker:\n    outputs:\n      - drop: {}\n      - http_server:",
    );
    assert!(!super::hands_on_unchanged(&stream(&routed)));
    let attached = direct.replace(
        "consumer_group: g}",
        "consumer_group: g}\n  processors:\n    - mapping: 'root = this'",
    );
    assert!(!super::hands_on_unchanged(&stream(&attached)));
}
