//! The in-memory rate check, which runs on every gateway request: one hot bucket (every
//! request under one key), and 10k buckets visited in turn (many keys, each cold in cache).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::limit::{Limiter, LocalLimiter, Rate};

fn local(c: &mut Criterion) {
    // A rate high enough that most checks pass, as under normal load.
    let rate = Rate::new(1_000_000_000, Duration::from_secs(1)).unwrap();
    let mut g = c.benchmark_group("limit_local");
    g.throughput(Throughput::Elements(1));

    let l = LocalLimiter::new();
    g.bench_function("check_rate_one_bucket", |b| {
        b.iter(|| black_box(l.check_rate(black_box("key:hot"), rate).unwrap()))
    });

    let l = LocalLimiter::new();
    let names: Vec<String> = (0..10_000).map(|i| format!("key:{i:05}")).collect();
    let mut i = 0;
    g.bench_function("check_rate_10k_buckets", |b| {
        b.iter(|| {
            i = (i + 1) % names.len();
            black_box(l.check_rate(&names[i], rate).unwrap())
        })
    });

    // Through the `Limiter` enum and its async method, as the gateway calls it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let l = Limiter::local();
    g.bench_function("limiter_check_rate_one_bucket", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(l.check_rate("key:hot", rate).await.unwrap()) })
    });
    g.finish();
}

criterion_group!(benches, local);
criterion_main!(benches);
