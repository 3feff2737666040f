//! The hand-written side of `benches/pipeline.sh`, and its tools. The mapping the script
//! measures,
//!
//! ```text
//! root = this
//! root.b = this.a.uppercase()
//! root.n = this.x * 2
//! ```
//!
//! is written here once over `serde_json::Value` ([`map`]) and used by the baselines:
//!
//! - `map`: NDJSON from standard input to standard output, buffered;
//! - `kafka-loop ADDR IN OUT N`: consumes `N` records of `IN`, maps them and produces
//!   them to `OUT` (rdkafka, as the `kafka` input and output use it), then prints its time
//!   and peak memory;
//! - `nats-loop URL IN OUT`: subscribes to `IN`, maps and publishes to `OUT` until killed
//!   (async-nats, as the `nats` input and output use it).
//!
//! The script's tools: `gen N` (the data set, the same bytes every time), `check N [FILE]`
//! (the output of a run: `N` lines, one of them sampled and checked), `free-port`,
//! `kafka-fill`, `kafka-create`, `kafka-check`, `kafka-delete`, `await-metrics` (the end
//! of a `sluice run` from its `/metrics`) and `nats-drive` (feeds a NATS pipeline and
//! times it from its output subject).
//!
//! A bench target without the test harness, as the other benches: `cargo build --release
//! --bench pipeline_baseline` builds it with the release profile next to `sluice`, and
//! `cargo test --all-targets` (which runs it with no command) only checks that it builds.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["map"] => map_stdio(),
        ["gen", n] => generate(parse(n)),
        ["check", n] => check(parse(n), std::io::stdin().lock()),
        ["check", n, file] => std::fs::File::open(file)
            .map_err(|e| format!("{file}: {e}").into())
            .and_then(|f| check(parse(n), BufReader::with_capacity(1 << 20, f))),
        ["free-port"] => free_port(),
        ["kafka-fill", addr, topic, file] => kafka_fill(addr, topic, file),
        ["kafka-create", addr, topics @ ..] => kafka_create(addr, topics),
        ["kafka-delete", addr, topics @ ..] => kafka_delete(addr, topics),
        ["kafka-check", addr, topic, n] => kafka_check(addr, topic, parse(n)),
        ["kafka-loop", addr, from, to, n] => kafka_loop(addr, from, to, parse(n)),
        ["await-metrics", url, pid, n] => await_metrics(url, parse(pid), parse(n)),
        ["nats-loop", url, from, to] => nats_loop(url, from, to),
        ["nats-drive", url, to, from, n, file] => nats_drive(url, to, from, parse(n), file),
        // No command, or the harness options `cargo bench` and `cargo test` pass:
        // nothing to do.
        [] => Ok(()),
        [first, ..] if first.starts_with('-') => Ok(()),
        _ => Err(format!("unknown arguments: {args:?} (see the top of the source)").into()),
    };
    if let Err(e) = result {
        eprintln!("pipeline_baseline: {e}");
        std::process::exit(1);
    }
}

fn parse<T: std::str::FromStr>(s: &str) -> T {
    s.parse().unwrap_or_else(|_| {
        eprintln!("pipeline_baseline: not a number: {s}");
        std::process::exit(2)
    })
}

/// The mapping, by hand: the whole document, `b` the upper-cased `a`, `n` twice `x`.
fn map(line: &[u8]) -> Result<Vec<u8>> {
    let mut doc: Value = serde_json::from_slice(line)?;
    let obj = doc.as_object_mut().ok_or("not an object")?;
    let b = obj
        .get("a")
        .and_then(Value::as_str)
        .ok_or("no string `a`")?
        .to_uppercase();
    let n = obj
        .get("x")
        .and_then(Value::as_i64)
        .ok_or("no integer `x`")?
        * 2;
    obj.insert("b".into(), b.into());
    obj.insert("n".into(), n.into());
    Ok(serde_json::to_vec(&doc)?)
}

/// Baseline 1: NDJSON from standard input to standard output.
fn map_stdio() -> Result {
    let mut input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        if body.is_empty() {
            continue;
        }
        out.write_all(&map(body)?)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// The data set: `n` lines of about 142 bytes, `a` a string of 112 to 136 characters
/// (letters, digits, spaces, punctuation that JSON need not escape), `x` below 100 000.
/// A fixed seed: every run writes the same bytes.
fn generate(n: usize) -> Result {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_";
    let mut state = 0x5eed_1234_abcd_0001u64;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut line = Vec::with_capacity(256);
    for _ in 0..n {
        line.clear();
        line.extend_from_slice(br#"{"a":""#);
        let len = 112 + (next() % 25) as usize;
        for _ in 0..len {
            line.push(CHARS[(next() % CHARS.len() as u64) as usize]);
        }
        line.extend_from_slice(br#"","x":"#);
        line.extend_from_slice((next() % 100_000).to_string().as_bytes());
        line.extend_from_slice(b"}\n");
        out.write_all(&line)?;
    }
    out.flush()?;
    Ok(())
}

/// Whether one output document is the mapping of an input one: `b` is `a` upper-cased,
/// `n` is twice `x` (as an integer or a float of that value).
fn check_doc(doc: &[u8]) -> Result {
    let text = String::from_utf8_lossy(doc);
    let v: Value = serde_json::from_slice(doc).map_err(|e| format!("{e}: {text}"))?;
    let field = |k: &str| v.get(k).ok_or_else(|| format!("no `{k}` in {text}"));
    let a = field("a")?.as_str().ok_or("`a` is not a string")?;
    let x = field("x")?.as_f64().ok_or("`x` is not a number")?;
    if field("b")?.as_str() != Some(a.to_uppercase().as_str()) {
        return Err(format!("`b` is not `a` upper-cased: {text}").into());
    }
    if field("n")?.as_f64() != Some(x * 2.0) {
        return Err(format!("`n` is not twice `x`: {text}").into());
    }
    Ok(())
}

/// Checks a run's output: exactly `n` non-empty lines, and the middle one mapped right.
/// Prints the sampled line.
fn check(n: usize, mut input: impl BufRead) -> Result {
    let (mut count, mut sample) = (0usize, None);
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line == b"\n" {
            continue;
        }
        if count == n / 2 {
            sample = Some(line.strip_suffix(b"\n").unwrap_or(&line).to_vec());
        }
        count += 1;
    }
    if count != n {
        return Err(format!("{count} lines, expected {n}").into());
    }
    let sample = sample.ok_or("no lines")?;
    check_doc(&sample)?;
    println!("{}", String::from_utf8_lossy(&sample));
    Ok(())
}

/// A port nothing listens on now, for a `sluice run`'s `/metrics`.
fn free_port() -> Result {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    println!("{}", l.local_addr()?.port());
    Ok(())
}

/// Peak resident memory of this process so far, in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

// ---- Kafka ----------------------------------------------------------------------------

fn admin(addr: &str) -> Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", addr)
        .create()?)
}

fn kafka_create(addr: &str, topics: &[&str]) -> Result {
    let new: Vec<_> = topics
        .iter()
        .map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(1)))
        .collect();
    for r in rt().block_on(admin(addr)?.create_topics(&new, &AdminOptions::new()))? {
        r.map_err(|(t, e)| format!("create {t}: {e}"))?;
    }
    Ok(())
}

fn kafka_delete(addr: &str, topics: &[&str]) -> Result {
    for r in rt().block_on(admin(addr)?.delete_topics(topics, &AdminOptions::new()))? {
        r.map_err(|(t, e)| format!("delete {t}: {e}"))?;
    }
    Ok(())
}

/// Counts delivery reports; wakes the sending thread as they arrive.
struct Deliveries {
    done: AtomicUsize,
    failed: AtomicUsize,
    first_error: Mutex<Option<String>>,
    sender: std::thread::Thread,
}

struct Counting(Arc<Deliveries>);

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
            self.0
                .first_error
                .lock()
                .unwrap()
                .get_or_insert_with(|| e.to_string());
        }
        self.0.done.fetch_add(1, Ordering::AcqRel);
        self.0.sender.unpark();
    }
}

/// Records sent but not yet confirmed, at most: 64 batches of 100, what the `kafka`
/// output allows by default (`max_in_flight: 64`) and the bare loops of
/// `benches/brokers.rs` use.
const UNCONFIRMED: usize = 64 * 100;

/// A producer that counts its delivery reports (librdkafka's callbacks, no future per
/// record), configured as the `kafka` output configures its own.
fn producer(addr: &str) -> Result<(ThreadedProducer<Counting>, Arc<Deliveries>)> {
    let deliveries = Arc::new(Deliveries {
        done: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        first_error: Mutex::new(None),
        sender: std::thread::current(),
    });
    let p = ThreadedProducer::from_config_and_context(
        ClientConfig::new()
            .set("bootstrap.servers", addr)
            .set("linger.ms", "1")
            .set("acks", "1")
            .set("enable.sparse.connections", "false"),
        Counting(deliveries.clone()),
    )?;
    Ok((p, deliveries))
}

/// Sends one record, waiting while `UNCONFIRMED` are in flight or the client's queue is
/// full. `queued` counts the records sent.
fn send(
    p: &ThreadedProducer<Counting>,
    d: &Deliveries,
    topic: &str,
    payload: &[u8],
    queued: &mut usize,
) -> Result {
    while *queued - d.done.load(Ordering::Acquire) >= UNCONFIRMED {
        std::thread::park_timeout(Duration::from_millis(10));
    }
    loop {
        match p.send(BaseRecord::<(), _, ()>::to(topic).payload(payload)) {
            Ok(()) => {
                *queued += 1;
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                std::thread::park_timeout(Duration::from_millis(1))
            }
            Err((e, _)) => return Err(format!("produce: {e}").into()),
        }
    }
}

/// Waits until every record sent was confirmed; fails if any was not delivered.
fn confirmed(d: &Deliveries, queued: usize) -> Result {
    while d.done.load(Ordering::Acquire) < queued {
        std::thread::park_timeout(Duration::from_millis(10));
    }
    match d.failed.load(Ordering::Relaxed) {
        0 => Ok(()),
        n => Err(format!(
            "{n} records not delivered, the first: {}",
            d.first_error.lock().unwrap().as_deref().unwrap_or("?")
        )
        .into()),
    }
}

/// Creates `topic` and writes every line of `file` to it, as fast as the client goes.
fn kafka_fill(addr: &str, topic: &str, file: &str) -> Result {
    kafka_create(addr, &[topic])?;
    let data = std::fs::read(file)?;
    let (p, d) = producer(addr)?;
    let mut queued = 0;
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        send(&p, &d, topic, line, &mut queued)?;
    }
    confirmed(&d, queued)?;
    println!("{queued}");
    Ok(())
}

/// Checks a topic written by a run: exactly `n` records, and the middle one mapped
/// right. Reads the whole topic (tansu's high watermark can be short of the last offset,
/// so it does not count): a few seconds for a million records.
fn kafka_check(addr: &str, topic: &str, n: usize) -> Result {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", format!("check-{topic}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    c.assign(&tpl)?;
    let (mut count, mut sample, mut moved) = (0usize, None, Instant::now());
    loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if count == n / 2 {
                    sample = Some(m.payload().unwrap_or_default().to_vec());
                }
                count += 1;
                moved = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => return Err(format!("{topic}: {e}").into()),
            None if moved.elapsed() > Duration::from_secs(30) => {
                return Err(format!("{topic}: nothing read for 30s after {count}").into())
            }
            None => {}
        }
    }
    if count != n {
        return Err(format!("{topic} holds {count} records, expected {n}").into());
    }
    let sample = sample.ok_or("no records")?;
    check_doc(&sample)?;
    println!("{}", String::from_utf8_lossy(&sample));
    Ok(())
}

/// Baseline for kafka -> mapping -> kafka: a consumer in a fresh group from the oldest
/// record (librdkafka's default prefetching, as the `kafka` input), a producer counting
/// delivery reports (as the `kafka` output). Times from its start to the last of `n`
/// confirmations and prints `seconds peak_kib`.
fn kafka_loop(addr: &str, from: &str, to: &str, n: usize) -> Result {
    let start = Instant::now();
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", format!("bare-{to}"))
        .set("auto.offset.reset", "earliest")
        .create()?;
    c.subscribe(&[from])?;
    let (p, d) = producer(addr)?;
    let mut queued = 0;
    while queued < n {
        let Some(m) = c.poll(Duration::from_millis(100)) else {
            if start.elapsed() > Duration::from_secs(300) {
                return Err(format!("only {queued} of {n} records after 300s").into());
            }
            continue;
        };
        let out = map(m?.payload().unwrap_or_default())?;
        send(&p, &d, to, &out, &mut queued)?;
    }
    confirmed(&d, queued)?;
    println!("{:.6} {}", start.elapsed().as_secs_f64(), peak_kib());
    Ok(())
}

/// Polls a `sluice run`'s `/metrics` until its outputs have sent `n` messages. Fails
/// when process `pid` is gone, or when the count has not moved for a minute.
fn await_metrics(url: &str, pid: u32, n: u64) -> Result {
    let addr = url
        .strip_prefix("http://")
        .and_then(|s| s.split('/').next())
        .ok_or("the url must be http://host:port/metrics")?;
    let (mut seen, mut moved) = (0, Instant::now());
    loop {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(format!("sluice exited after {seen} of {n} messages").into());
        }
        // Each look costs the process under test a render of its metrics: a few
        // tens of microseconds, 50 times a second.
        if let Ok(text) = http_get(addr, "/metrics") {
            let sent = sent_by_outputs(&text);
            if sent >= n {
                return Ok(());
            }
            if sent > seen {
                (seen, moved) = (sent, Instant::now());
            }
        }
        if moved.elapsed() > Duration::from_secs(60) {
            return Err(format!("stuck at {seen} of {n} messages").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    // HTTP/1.0: the body is not chunked and ends with the connection.
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}

/// Messages the outputs have delivered, from a Prometheus text page.
fn sent_by_outputs(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("sluice_component_sent_messages_total{"))
        .filter(|l| l.contains("kind=\"output\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

// ---- NATS -----------------------------------------------------------------------------

/// Baseline for nats -> mapping -> nats: takes what the subscription holds (up to 1000
/// messages), maps and publishes each, then flushes once (as the `nats` output confirms
/// a batch), until killed.
fn nats_loop(url: &str, from: &str, to: &str) -> Result {
    use futures::{FutureExt, StreamExt};
    rt().block_on(async {
        let c = async_nats::connect(url).await?;
        let mut sub = c.subscribe(from.to_owned()).await?;
        c.flush().await?;
        let to = async_nats::Subject::from(to);
        while let Some(first) = sub.next().await {
            c.publish(to.clone(), map(&first.payload)?.into()).await?;
            for _ in 1..1000 {
                let Some(Some(m)) = sub.next().now_or_never() else {
                    break;
                };
                c.publish(to.clone(), map(&m.payload)?.into()).await?;
            }
            c.flush().await?;
        }
        Ok(())
    })
}

/// Messages the feeder may publish beyond what has come out of the pipeline: as in
/// `benches/brokers.rs`, core NATS drops messages for a subscriber that falls too far
/// behind, and a feeder that outran the pipeline would measure those drops.
const AHEAD: u64 = 40_000;

/// What `nats-drive` sees come out of the pipeline.
struct Outlet {
    /// Messages received, probes included.
    got: AtomicU64,
    /// `got` when the feed started (the probes before it); `u64::MAX` until then.
    base: AtomicU64,
    /// When the `n`th message of the feed came out.
    done_at: Mutex<Option<Instant>>,
    /// The middle message of the feed.
    sample: Mutex<Option<bytes::Bytes>>,
}

/// Drives a NATS pipeline (`sluice run` or `nats-loop`, already started) that reads `to`
/// and writes `from`: publishes a probe until one comes back out (the pipeline is
/// subscribed), then publishes the lines of `file`, never more than `AHEAD` beyond what
/// came out and flushing every 1000, and times from the first publish to the `n`th
/// message out. Checks that exactly `n` came out and the middle one is mapped right;
/// prints `seconds`, then the sample.
fn nats_drive(url: &str, to: &str, from: &str, n: u64, file: &str) -> Result {
    use futures::StreamExt;
    let data = bytes::Bytes::from(std::fs::read(file)?);
    let lines: Vec<bytes::Bytes> = data
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .take(n as usize)
        .map(|l| data.slice_ref(l))
        .collect();
    if (lines.len() as u64) < n {
        return Err(format!("{file} holds {} lines, fewer than {n}", lines.len()).into());
    }
    rt().block_on(async move {
        let c = async_nats::connect(url).await?;
        let mut sub = c.subscribe(from.to_owned()).await?;
        c.flush().await?;
        let out = Arc::new(Outlet {
            got: AtomicU64::new(0),
            base: AtomicU64::new(u64::MAX),
            done_at: Mutex::new(None),
            sample: Mutex::new(None),
        });
        let counter = tokio::spawn({
            let out = out.clone();
            async move {
                while let Some(m) = sub.next().await {
                    let seen = out.got.fetch_add(1, Ordering::AcqRel) + 1;
                    let base = out.base.load(Ordering::Acquire);
                    if base == u64::MAX {
                        continue;
                    }
                    if seen - base == n / 2 + 1 {
                        *out.sample.lock().unwrap() = Some(m.payload);
                    }
                    if seen - base == n {
                        *out.done_at.lock().unwrap() = Some(Instant::now());
                    }
                }
            }
        });
        let probe = bytes::Bytes::from_static(br#"{"a":"probe","x":1}"#);
        let ready_by = Instant::now() + Duration::from_secs(30);
        while out.got.load(Ordering::Acquire) == 0 {
            if Instant::now() > ready_by {
                return Err("the pipeline did not pass a probe on in 30s".into());
            }
            c.publish(to.to_owned(), probe.clone()).await?;
            c.flush().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Late probes come out before the feed starts.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let base = out.got.load(Ordering::Acquire);
        out.base.store(base, Ordering::Release);
        let came_out = || out.got.load(Ordering::Acquire) - base;

        let start = Instant::now();
        let subject = async_nats::Subject::from(to);
        for (i, line) in lines.into_iter().enumerate() {
            let i = i as u64;
            if i % 1000 == 0 {
                while i.saturating_sub(came_out()) > AHEAD {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            c.publish(subject.clone(), line).await?;
            if i % 1000 == 999 {
                c.flush().await?;
            }
        }
        c.flush().await?;
        // All `n` out, or fewer once nothing came for two seconds.
        let (mut count, mut moved) = (0, Instant::now());
        let done_at = loop {
            if let Some(t) = *out.done_at.lock().unwrap() {
                break t;
            }
            let now = came_out();
            if now > count {
                (count, moved) = (now, Instant::now());
            } else if moved.elapsed() > Duration::from_secs(2) {
                return Err(format!("{now} of {n} messages came out (the rest dropped?)").into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // None beyond `n` should follow.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let count = came_out();
        counter.abort();
        if count != n {
            return Err(format!("{count} messages came out, expected {n}").into());
        }
        let sample = out.sample.lock().unwrap().take().ok_or("no sample")?;
        check_doc(&sample)?;
        println!("{:.6}", (done_at - start).as_secs_f64());
        println!("{}", String::from_utf8_lossy(&sample));
        Ok(())
    })
}
