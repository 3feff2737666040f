//! The heavier processors against a comparable one, in one run: `jq` against `mapping`
//! doing the same edits, `dedupe` on a memory cache against a mapping that reads the same
//! key, and `group_by` against a `switch` with the same checks. Each side processes the
//! same batch of 64 JSON messages.
//!
//! Run with `cargo bench --bench processors`: it prints messages per second for each side
//! and the ratio (the processor's time / the comparison's time), the median of rounds
//! timed alternately so that load from elsewhere falls on both.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::cache::CacheConfig;
use sluice::component::resources::Resources;
use sluice::component::{BuildContext, Processor};
use sluice::message::{Batch, Message};
use sluice::processor::ProcessorConfig;

const BATCH: usize = 64;

fn batch(seed: usize) -> Batch {
    (0..BATCH)
        .map(|i| {
            let n = seed * BATCH + i;
            Message::new(format!(
                r#"{{"id":"order-{}","name":"widget {n}","price":{},"qty":{},"kind":"{}"}}"#,
                // Half the ids repeat, for dedupe.
                n / 2,
                (n % 97) as f64 + 0.5,
                n % 7 + 1,
                ["book", "food", "tool", "toy"][n % 4]
            ))
        })
        .collect()
}

fn context() -> BuildContext {
    let cx = BuildContext::new("bench", Default::default(), Default::default());
    let cache: CacheConfig =
        serde_yaml::from_str("{label: seen, memory: {default_ttl: 1h}}").expect("cache config");
    let mut r = Resources::default();
    r.add_cache("seen", cache.kind.build(&cx).expect("memory cache"));
    cx.with_resources(Arc::new(r))
}

fn processor(cx: &BuildContext, yaml: &str) -> Box<dyn Processor> {
    let config: ProcessorConfig = serde_yaml::from_str(yaml).expect("processor config");
    config.kind.build(cx).expect("processor builds")
}

struct Case {
    name: &'static str,
    subject: Box<dyn Processor>,
    baseline_name: &'static str,
    baseline: Box<dyn Processor>,
    /// Fresh input per call (dedupe must see new keys, or it drops everything).
    fresh: bool,
}

fn cases(cx: &BuildContext) -> Vec<Case> {
    vec![
        Case {
            name: "jq",
            subject: processor(cx, "jq: {query: '{id: .id, total: (.price * .qty), name: (.name | ascii_upcase)}'}"),
            baseline_name: "mapping",
            baseline: processor(cx, "mapping: |\n  root.id = this.id\n  root.total = this.price * this.qty\n  root.name = this.name.uppercase()\n"),
            fresh: false,
        },
        Case {
            name: "dedupe",
            subject: processor(cx, "dedupe: {cache: seen, key: '${! this.id }'}"),
            baseline_name: "mapping (key)",
            baseline: processor(cx, "mapping: 'root = this.id'"),
            fresh: true,
        },
        Case {
            name: "group_by",
            subject: processor(cx, "group_by:\n  - check: 'this.kind == \"book\"'\n  - check: 'this.kind == \"food\"'\n  - check: 'this.kind == \"tool\"'\n"),
            baseline_name: "switch",
            baseline: processor(cx, "switch:\n  - check: 'this.kind == \"book\"'\n    processors: [{noop: {}}]\n  - check: 'this.kind == \"food\"'\n    processors: [{noop: {}}]\n  - check: 'this.kind == \"tool\"'\n    processors: [{noop: {}}]\n"),
            fresh: false,
        },
    ]
}

fn numbers_as_floats(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(numbers_as_floats).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), numbers_as_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Time per batch over `n` calls.
fn round(
    rt: &tokio::runtime::Runtime,
    p: &dyn Processor,
    inputs: &mut dyn FnMut() -> Batch,
    n: u32,
) -> Duration {
    let batches: Vec<Batch> = (0..n).map(|_| inputs()).collect();
    let t = Instant::now();
    for b in batches {
        black_box(rt.block_on(p.process(b)));
    }
    t.elapsed() / n
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cx = context();
    // Checks that both sides of the jq case agree, or the comparison means nothing.
    let cases = cases(&cx);
    let a = rt.block_on(cases[0].subject.process(batch(0)));
    let b = rt.block_on(cases[0].baseline.process(batch(0)));
    // jq keeps `3.0` a float where the mapping gives the integer `3`: compare numbers as
    // numbers.
    let parse = |m: &Message| {
        serde_json::from_slice::<serde_json::Value>(m.payload())
            .ok()
            .map(|v| numbers_as_floats(&v))
    };
    assert_eq!(
        a[0].iter().map(parse).collect::<Vec<_>>(),
        b[0].iter().map(parse).collect::<Vec<_>>()
    );
    // Each case's sides do the work they are said to, or the ratio compares unlike work:
    // dedupe keeps the first of each repeated id (half of them), the others pass
    // everything on as their comparison does.
    for case in &cases {
        let count = |out: Vec<Batch>| out.iter().map(Vec::len).sum::<usize>();
        let s = count(rt.block_on(case.subject.process(batch(1))));
        let b = count(rt.block_on(case.baseline.process(batch(1))));
        let want = if case.name == "dedupe" { BATCH / 2 } else { b };
        assert_eq!(
            (s, b),
            (want, BATCH),
            "{}: not the work compared",
            case.name
        );
    }
    // `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) the checks
    // above are the test, not a measurement in a debug build.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }

    println!("processor / comparison, {BATCH}-message batches (median of 21 alternating rounds):");
    let mut seed = 0usize;
    for case in &cases {
        let mut next = || {
            if case.fresh {
                seed += 1;
            }
            batch(seed)
        };
        let n = 200;
        let mut ratios = Vec::new();
        let (mut ts, mut tb) = (Vec::new(), Vec::new());
        for _ in 0..21 {
            let s = round(&rt, &*case.subject, &mut next, n);
            let b = round(&rt, &*case.baseline, &mut next, n);
            ratios.push(s.as_secs_f64() / b.as_secs_f64());
            ts.push(s);
            tb.push(b);
        }
        ratios.sort_by(f64::total_cmp);
        ts.sort();
        tb.sort();
        let rate = |d: Duration| BATCH as f64 / d.as_secs_f64();
        println!(
            "  {:<9} {:>10.0} msg/s   {:<14} {:>10.0} msg/s   ratio {:.2}",
            case.name,
            rate(ts[ts.len() / 2]),
            case.baseline_name,
            rate(tb[tb.len() / 2]),
            ratios[ratios.len() / 2]
        );
    }
}
