//! Engine throughput: messages per second through generate -> three pass-through
//! processors -> drop, in batches of 1 and of 64, the cost of one channel hop, of the
//! copy of a batch kept for sending it again, and of a `mutation` on such a batch.
//!
//! Run with `cargo bench --bench engine`. Throughput is reported as elements/second;
//! divide 1/throughput for the per-message cost.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::sync::mpsc;

use sluice::message::{Ack, Message, Outcome, Transaction};
use sluice::stream::config::parse_str;
use sluice::stream::{Stream, StreamEnv};

const MESSAGES: u64 = 200_000;

fn pipeline_config(batch_size: u64) -> sluice::stream::StreamConfig {
    let yaml = format!(
        "input:\n  generate:\n    payload: '{{\"id\":1,\"name\":\"benchmark\"}}'\n    interval: 0s\n    count: {MESSAGES}\n    batch_size: {batch_size}\npipeline:\n  processors:\n    - noop: {{}}\n    - noop: {{}}\n    - noop: {{}}\noutput:\n  drop: {{}}\n"
    );
    let mut root = parse_str("bench.yaml", &yaml).expect("valid bench config");
    root.streams.remove("bench").expect("one stream")
}

async fn run_stream(config: &sluice::stream::StreamConfig) {
    let env = StreamEnv::standalone();
    let stream = Stream::build("bench", config, &env).expect("stream builds");
    let mut running = stream.start();
    running.finished().await;
}

fn pipeline(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("pipeline_three_noops");
    group.throughput(Throughput::Elements(MESSAGES));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for batch in [1u64, 64] {
        let config = pipeline_config(batch);
        group.bench_with_input(BenchmarkId::new("batch", batch), &config, |b, config| {
            b.to_async(&rt).iter(|| run_stream(config));
        });
    }
    group.finish();
}

/// One hop: single-message transactions sent through a bounded channel to a task that
/// receives and acknowledges them. `create_and_ack` does the same work without the
/// channel, so the difference between the two is the cost of the hop itself. On a
/// current-thread runtime the figure is the channel's own cost; on two worker threads it
/// includes waking the other thread.
fn channel_hop(c: &mut Criterion) {
    const N: u64 = 200_000;
    let payload = bytes::Bytes::from_static(b"{\"id\":1}");
    let mut group = c.benchmark_group("channel_hop");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    group.bench_function("create_and_ack", |b| {
        b.iter(|| {
            for _ in 0..N {
                let t = Transaction::new(vec![Message::new(payload.clone())], Ack::noop());
                std::hint::black_box(&t);
                t.ack.resolve(Outcome::Delivered);
            }
        });
    });
    for (name, rt) in [
        ("through_channel_current_thread", single),
        (
            "through_channel_two_threads",
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        ),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                let (tx, mut rx) = mpsc::channel::<Transaction>(64);
                let consumer = tokio::spawn(async move {
                    while let Some(t) = rx.recv().await {
                        t.ack.resolve(Outcome::Delivered);
                    }
                });
                for _ in 0..N {
                    let t = Transaction::new(vec![Message::new(payload.clone())], Ack::noop());
                    if tx.send(t).await.is_err() {
                        break;
                    }
                }
                drop(tx);
                let _ = consumer.await;
            });
        });
    }
    group.finish();
}

/// 64 messages as read from a broker, each with `payload` and the metadata a connector
/// sets (subject, partition, offset).
fn broker_batch(payload: &[u8]) -> Vec<Message> {
    (0..64)
        .map(|i| {
            Message::new(bytes::Bytes::copy_from_slice(payload))
                .with_meta("nats_subject", "orders.created")
                .with_meta("kafka_partition", "3")
                .with_meta("kafka_offset", i.to_string())
        })
        .collect()
}

/// The copy an input that cannot take a nack keeps of every batch, to send it again if
/// delivery fails.
fn batch_copy(c: &mut Criterion) {
    let batch = broker_batch(&[b'x'; 100]);
    let mut group = c.benchmark_group("batch_copy");
    group.throughput(Throughput::Elements(batch.len() as u64));
    group.bench_function("64_messages_3_metadata", |b| {
        b.iter(|| std::hint::black_box(batch.clone()))
    });
    // What a broker input does per message, all told: make the message with one
    // metadata entry, keep the copy, drop both once delivered.
    let payload = bytes::Bytes::from(vec![b'x'; 100]);
    group.bench_function("64_messages_read_copied_dropped", |b| {
        b.iter(|| {
            let batch: Vec<Message> = (0..64)
                .map(|_| Message::new(payload.clone()).with_meta("nats_subject", "orders.created"))
                .collect();
            let copy = batch.clone();
            drop(std::hint::black_box(batch));
            drop(std::hint::black_box(copy));
        })
    });
    group.finish();
}

/// A `mutation` that leaves the metadata alone, on 64 broker-like messages whose metadata
/// a kept copy of the batch shares (what a stream with processors holds).
fn mutation(c: &mut Criterion) {
    let env = sluice::mapping::Env::default();
    let mapping = sluice::mapping::Mapping::compile("root.seen = true", &env).expect("compiles");
    let read = broker_batch(br#"{"id":1}"#);
    let mut group = c.benchmark_group("mutation");
    group.throughput(Throughput::Elements(read.len() as u64));
    group.bench_function("64_messages_shared_metadata", |b| {
        b.iter_batched(
            || read.clone(),
            |mut batch| {
                for i in 0..batch.len() {
                    mapping.mutate_in(&mut batch, i).expect("maps");
                }
                batch
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, pipeline, channel_hop, batch_copy, mutation);
criterion_main!(benches);
