//! Throughput of sluice pipelines against bare client loops written with the same crates,
//! on the local brokers (scripts/brokers.sh), with 100-byte messages. Each case runs a bare
//! loop and a sluice pipeline alternately (`BENCH_ROUNDS` pairs, default 5), prints every
//! pair and ends with the median ratio sluice / bare per case. Run with
//! `benches/brokers.sh` (or `cargo bench --bench brokers`); `BENCH_SCALE=0.2` shortens it,
//! `BENCH_ONLY=kafka` picks one broker, `BENCH_DEBUG=1` prints time to first message and
//! batch sizes.
//!
//! Both sides do the same work: produce = every message confirmed as the connector
//! defines it (Kafka delivery reports, NATS flush, MQTT QoS 1 PUBACK); consume = every
//! message received (and, for sluice, passed through the stream to a `drop` output).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use metrics_exporter_prometheus::PrometheusHandle;
use sluice::stream::{Stream, StreamEnv};

const SIZE: usize = 100;

fn payload() -> String {
    "x".repeat(SIZE)
}

fn scale(n: usize) -> usize {
    let s: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * s) as usize).max(1000) / 100 * 100
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// Messages the stream's outputs have written so far, from the metrics.
fn sent(handle: &PrometheusHandle, stream: &str) -> u64 {
    let needle = format!("stream=\"{stream}\"");
    handle
        .render()
        .lines()
        .filter(|l| l.starts_with("sluice_component_sent_messages_total{"))
        .filter(|l| l.contains(&needle) && l.contains("kind=\"output\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Runs a stream until its outputs wrote `n` messages; returns the time. As in the bare
/// loops, the clock stops at the last confirmed write: stopping the stream (and closing
/// its clients) comes after.
async fn run_sluice(yaml: &str, n: u64) -> Duration {
    let (handle, name, stream, _) = build(yaml);
    let start = Instant::now();
    let running = stream.start();
    let deadline = start + Duration::from_secs(300);
    let mut first = None;
    let mut rendered = start;
    loop {
        tokio::time::sleep(POLL).await;
        // Rendering the metrics costs CPU the stream under test needs: look at the count
        // when nothing is in flight (the end of a run shows as that) or now and then.
        let since = rendered.elapsed();
        if !(running.in_flight() == 0 && since >= 2 * POLL || since >= RENDER) {
            continue;
        }
        rendered = Instant::now();
        let got = sent(&handle, &name);
        if got > 0 && first.is_none() {
            first = Some(start.elapsed());
        }
        if got >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sluice did not finish: {got} of {n}"
        );
    }
    let elapsed = start.elapsed();
    if std::env::var("BENCH_DEBUG").is_ok() {
        eprintln!("first message seen after {first:?}");
        print_batch_sizes(&handle, &name);
    }
    running.stop(Duration::from_secs(10)).await;
    elapsed
}

/// The metrics, a unique name, the stream of a one-stream config and its environment.
fn build(yaml: &str) -> (PrometheusHandle, String, Stream, StreamEnv) {
    let handle = sluice::metrics::install();
    let root = sluice::stream::config::parse_str("bench.yaml", yaml).expect("bench config");
    let (_, config) = root.streams.into_iter().next().expect("a stream");
    let name = unique("bench");
    let env = StreamEnv::standalone();
    let stream = Stream::build(&name, &config, &env).expect("builds");
    (handle, name, stream, env)
}

/// With BENCH_DEBUG: the mean batch size each node of the stream saw.
fn print_batch_sizes(handle: &PrometheusHandle, stream: &str) {
    let text = handle.render();
    let value = |metric: &str, component: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(metric) && l.contains(stream))
            .filter(|l| l.contains(&format!("component=\"{component}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let mut components: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("sluice_component_batch_size_messages_count") && l.contains(stream)
        })
        .filter_map(|l| l.split("component=\"").nth(1)?.split('"').next())
        .collect();
    components.dedup();
    for c in components {
        let sum = value("sluice_component_batch_size_messages_sum", c);
        let count = value("sluice_component_batch_size_messages_count", c);
        eprintln!(
            "{c}: {count} batches, mean {:.1} messages",
            sum / count.max(1.0)
        );
    }
}

/// How often a run looks whether it is done, which costs next to nothing; it adds at
/// most this much to a run.
const POLL: Duration = Duration::from_millis(1);

/// How often a run renders the metrics while messages are in flight (the end of a run
/// shows as nothing in flight): a render costs CPU the stream under test would otherwise
/// have, and grows with every stream the process ran.
const RENDER: Duration = Duration::from_millis(250);

/// How often a consume run reads the count: its feeder waits on it.
const PROGRESS: Duration = Duration::from_millis(10);

/// How many messages a consumer under test has passed on, as last seen; a feeder that
/// must not run too far ahead of it reads this.
type Progress = Arc<AtomicU64>;

/// Starts a consuming stream, waits until it is subscribed, then starts `feed` (which
/// publishes `n` messages) and times how long the stream takes to pass them on. `progress`
/// follows the stream's count as the run polls it.
async fn sluice_consume(
    yaml: &str,
    n: usize,
    case: &str,
    progress: Progress,
    feed: impl std::future::Future<Output = tokio::task::JoinHandle<()>>,
) -> Duration {
    let (handle, name, stream, env) = build(yaml);
    let running = stream.start();
    while !env.readiness.not_ready().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The subscription is sent right after connecting; let the server register it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let feeder = feed.await;
    let elapsed = wait_consumed(&handle, &name, n as u64, case, &progress).await;
    if std::env::var("BENCH_DEBUG").is_ok() {
        print_batch_sizes(&handle, &name);
    }
    feeder.await.unwrap();
    running.stop(Duration::from_secs(5)).await;
    elapsed
}

/// Waits until a consuming stream wrote `n` messages and returns the time. A broker
/// that drops messages for a slow consumer (core NATS; Mosquitto past its queue limit)
/// can leave fewer: once nothing arrived for two seconds the run ends, says how many
/// were lost, and returns the time `n` would take at the rate seen.
async fn wait_consumed(
    handle: &PrometheusHandle,
    name: &str,
    n: u64,
    case: &str,
    progress: &Progress,
) -> Duration {
    let start = Instant::now();
    let (mut got, mut last_progress) = (0, start);
    while got < n {
        tokio::time::sleep(PROGRESS).await;
        let now = sent(handle, name);
        progress.store(now, Ordering::Release);
        if now > got {
            (got, last_progress) = (now, Instant::now());
        } else if last_progress.elapsed() > Duration::from_secs(2) {
            assert!(got > 0, "{case}: nothing arrived");
            println!(
                "{case}: {} of {n} dropped by the broker (slow consumer)",
                n - got
            );
            return at_rate_seen(start, last_progress, got, n);
        }
    }
    last_progress - start
}

/// The time `n` messages would take at the rate of the `got` that had arrived by `last`.
fn at_rate_seen(start: Instant, last: Instant, got: u64, n: u64) -> Duration {
    (last - start).mul_f64(n as f64 / got as f64)
}

/// Runs `bare` and `sluice` alternately, `rounds()` pairs, prints each pair and returns
/// the case's median ratio. The machine's speed drifts from one second to the next (the
/// brokers share its two cores); a bare run and a sluice run made back to back see about
/// the same machine.
async fn paired(
    name: &'static str,
    n: usize,
    mut bare: impl AsyncFnMut() -> Duration,
    mut sluice: impl AsyncFnMut() -> Duration,
) -> (String, f64) {
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let mut ratios = Vec::new();
    for round in 0..rounds() {
        // Every other pair runs sluice first: a broker that slows down as a run goes on
        // (tansu's memory grows) would otherwise always count against the second side.
        let (b, s) = if round % 2 == 0 {
            let b = rate(bare().await);
            (b, rate(sluice().await))
        } else {
            let s = rate(sluice().await);
            (rate(bare().await), s)
        };
        println!(
            "{name:<16} n={n:<7} bare {b:>10.0} msg/s   sluice {s:>10.0} msg/s   ratio {:>5.1}%",
            s / b * 100.0
        );
        ratios.push(s / b);
    }
    ratios.sort_by(f64::total_cmp);
    (name.into(), ratios[ratios.len() / 2])
}

/// Pairs per case (`BENCH_ROUNDS`, default 5): single pairs swing by 10-20% on a machine
/// the brokers share.
fn rounds() -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5usize)
        .max(1)
}

/// Times a stream of `n` generated messages into `output` (its YAML, indented as under
/// `output:`), as [`run_sluice`] does.
async fn sluice_produce(output: &str, n: usize) -> Duration {
    let yaml = format!("input:\n{}output:\n{output}", generate(n));
    run_sluice(&yaml, n as u64).await
}

fn generate(n: usize) -> String {
    format!(
        "  generate:\n    payload: {}\n    count: {}\n    batch_size: 100\n    interval: 0s\n",
        payload(),
        n
    )
}

mod kafka {
    use super::*;
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::ClientContext;
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::FromClientConfigAndContext;
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::error::KafkaError;
    use rdkafka::producer::{
        BaseRecord, DeliveryResult, FutureProducer, FutureRecord, ProducerContext, ThreadedProducer,
    };
    use rdkafka::types::RDKafkaErrorCode;
    use rdkafka::util::Timeout;
    use rdkafka::ClientConfig;
    use std::sync::atomic::AtomicUsize;

    pub fn addr() -> Option<String> {
        std::env::var("SLUICE_KAFKA_ADDR").ok().or_else(|| {
            std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/target/brokers/kafka.addr"
            ))
            .ok()
            .map(|s| s.trim().to_owned())
        })
    }

    fn admin(addr: &str) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", addr)
            .create()
            .unwrap()
    }

    /// Deletes a topic once its runs are over: the broker keeps records in memory, and a
    /// bench writes gigabytes.
    async fn delete(addr: &str, name: &str) {
        admin(addr)
            .delete_topics(&[name], &AdminOptions::new())
            .await
            .unwrap();
    }

    async fn topic(addr: &str) -> String {
        let name = unique("bench");
        admin(addr)
            .create_topics(
                &[NewTopic::new(&name, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            )
            .await
            .unwrap();
        name
    }

    /// The bare loop: windows of 100 sends, 64 windows in flight (what the output does).
    async fn bare_produce(addr: &str, topic: &str, n: usize) -> Duration {
        let p: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", addr)
            .set("linger.ms", "1")
            .set("acks", "1")
            .create()
            .unwrap();
        let body = payload();
        let start = Instant::now();
        let mut windows = FuturesUnordered::new();
        for _ in 0..n / 100 {
            if windows.len() >= 64 {
                windows.next().await;
            }
            let sends: Vec<_> = (0..100)
                .map(|_| {
                    p.send(
                        FutureRecord::<(), _>::to(topic).payload(body.as_bytes()),
                        Timeout::Never,
                    )
                })
                .collect();
            windows.push(async move {
                for r in futures::future::join_all(sends).await {
                    r.map_err(|(e, _)| e).unwrap();
                }
            });
        }
        while windows.next().await.is_some() {}
        start.elapsed()
    }

    /// Counts delivery reports for the callback loop.
    #[derive(Default)]
    struct Reports {
        done: AtomicUsize,
        failed: AtomicUsize,
        wake: tokio::sync::Notify,
    }

    struct Counting(Arc<Reports>);

    impl ClientContext for Counting {}

    impl ProducerContext for Counting {
        type DeliveryOpaque = ();
        fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
            if result.is_err() {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
            self.0.done.fetch_add(1, Ordering::AcqRel);
            self.0.wake.notify_one();
        }
    }

    /// The leaner bare loop: librdkafka's delivery callbacks counted, no future per
    /// record, at most 64 x 100 records unconfirmed (what the output allows).
    async fn bare_produce_callbacks(addr: &str, topic: &str, n: usize) -> Duration {
        let reports = Arc::new(Reports::default());
        let p: ThreadedProducer<Counting> = ThreadedProducer::from_config_and_context(
            ClientConfig::new()
                .set("bootstrap.servers", addr)
                .set("linger.ms", "1")
                .set("acks", "1"),
            Counting(reports.clone()),
        )
        .unwrap();
        let body = payload();
        let start = Instant::now();
        let mut queued = 0;
        while queued < n {
            while queued - reports.done.load(Ordering::Acquire) >= 64 * 100 {
                reports.wake.notified().await;
            }
            match p.send(BaseRecord::<(), _, ()>::to(topic).payload(body.as_bytes())) {
                Ok(()) => queued += 1,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                Err((e, _)) => panic!("bare produce: {e}"),
            }
        }
        while reports.done.load(Ordering::Acquire) < n {
            reports.wake.notified().await;
        }
        let elapsed = start.elapsed();
        assert_eq!(
            reports.failed.load(Ordering::Relaxed),
            0,
            "bare produce failed"
        );
        elapsed
    }

    async fn bare_consume(addr: &str, topic: &str, n: usize) -> Duration {
        let c: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", addr)
            .set("group.id", unique("bare"))
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        c.subscribe(&[topic]).unwrap();
        let start = Instant::now();
        c.recv().await.unwrap();
        if std::env::var("BENCH_DEBUG").is_ok() {
            eprintln!("bare: first message after {:?}", start.elapsed());
        }
        for _ in 1..n {
            c.recv().await.unwrap();
        }
        start.elapsed()
    }

    pub async fn run(out: &mut Vec<(String, f64)>) {
        let Some(addr) = addr() else {
            panic!("kafka: no broker address: run scripts/brokers.sh, or BENCH_ONLY=nats|mqtt");
        };
        // Producing runs at a million messages a second or more: a run of 200 000 would
        // be as much start-up (connecting, learning the topic's leader) as throughput.
        // Consuming is several times slower; it reads the first `n` of them.
        let (produced, n) = (scale(1_000_000), scale(200_000));
        let t1 = topic(&addr).await;
        let mut filled = false;
        let produce = paired(
            "kafka produce",
            produced,
            async || {
                // Against the faster of two bare loops: per-record futures (the usual way
                // to use the crate) and counted delivery callbacks (what the output does).
                // The first run also fills `t1` for the consume runs.
                let first = if filled { topic(&addr).await } else { t1.clone() };
                filled = true;
                let futures = bare_produce(&addr, &first, produced).await;
                if first != t1 {
                    delete(&addr, &first).await;
                }
                let t = topic(&addr).await;
                let callbacks = bare_produce_callbacks(&addr, &t, produced).await;
                delete(&addr, &t).await;
                println!(
                    "kafka produce    bare with a future per record {:.0} msg/s, with callbacks {:.0} msg/s",
                    produced as f64 / futures.as_secs_f64(),
                    produced as f64 / callbacks.as_secs_f64()
                );
                futures.min(callbacks)
            },
            async || {
                let t = topic(&addr).await;
                let output = format!(
                    "  kafka:\n    addresses: ['{addr}']\n    topic: {t}\n    max_in_flight: 64\n"
                );
                let elapsed = sluice_produce(&output, produced).await;
                delete(&addr, &t).await;
                elapsed
            },
        )
        .await;
        let consume = paired(
            "kafka consume",
            n,
            async || bare_consume(&addr, &t1, n).await,
            async || {
                let yaml = format!(
                    "input:\n  kafka:\n    addresses: ['{addr}']\n    topics: [{t1}]\n    consumer_group: {}\noutput:\n  drop: {{}}\n",
                    unique("sluice")
                );
                run_sluice(&yaml, n as u64).await
            },
        )
        .await;
        delete(&addr, &t1).await;
        out.push(produce);
        out.push(consume);
    }
}

mod nats {
    use super::*;

    const URL: &str = "nats://127.0.0.1:4222";

    async fn bare_produce(subject: &str, n: usize) -> Duration {
        let c = async_nats::connect(URL).await.unwrap();
        let body = bytes::Bytes::from(payload());
        let start = Instant::now();
        for i in 0..n {
            c.publish(subject.to_owned(), body.clone()).await.unwrap();
            if i % 100 == 99 {
                c.flush().await.unwrap();
            }
        }
        c.flush().await.unwrap();
        start.elapsed()
    }

    /// Messages the feeder may publish beyond what the consumer has passed on. Core NATS
    /// drops messages for a consumer that falls too far behind (the client's 65536-message
    /// subscription buffer, the server's pending limit); a feeder that outruns the consumer
    /// would measure those drops, not the consumer. Far more than a consumer takes between
    /// two looks at its progress, so it never waits for want of messages.
    const AHEAD: u64 = 40_000;

    /// Publishes `n` messages in the background, in bursts of 1000, never more than
    /// `AHEAD` past the consumer's `progress`; the consumer's time is what is measured.
    async fn feed(subject: String, n: usize, progress: Progress) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let c = async_nats::connect(URL).await.unwrap();
            let body = bytes::Bytes::from(payload());
            for i in 0..n as u64 {
                if i % 1000 == 0 {
                    while i.saturating_sub(progress.load(Ordering::Acquire)) > AHEAD {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                c.publish(subject.clone(), body.clone()).await.unwrap();
                if i % 1000 == 999 {
                    c.flush().await.unwrap();
                }
            }
            c.flush().await.unwrap();
        })
    }

    async fn bare_consume(n: usize) -> Duration {
        let subject = unique("bench");
        let c = async_nats::connect(URL).await.unwrap();
        let mut sub = c.subscribe(subject.clone()).await.unwrap();
        c.flush().await.unwrap();
        let progress = Progress::default();
        let start = Instant::now();
        let feeder = feed(subject, n, progress.clone()).await;
        for got in 1..=n as u64 {
            sub.next().await.unwrap();
            if got % 1000 == 0 {
                progress.store(got, Ordering::Release);
            }
        }
        let elapsed = start.elapsed();
        feeder.await.unwrap();
        elapsed
    }

    pub async fn run(out: &mut Vec<(String, f64)>) {
        if async_nats::connect(URL).await.is_err() {
            panic!("nats: no server on 4222: run scripts/brokers.sh, or BENCH_ONLY=kafka|mqtt");
        }
        let n = scale(300_000);
        let produce = paired(
            "nats produce",
            n,
            async || bare_produce(&unique("bench"), n).await,
            async || {
                let output = format!(
                    "  nats:\n    urls: [{URL}]\n    subject: {}\n",
                    unique("bench")
                );
                sluice_produce(&output, n).await
            },
        )
        .await;
        let consume = paired(
            "nats consume",
            n,
            async || bare_consume(n).await,
            async || {
                let subject = unique("bench");
                let yaml = format!(
                    "input:\n  nats:\n    urls: [{URL}]\n    subject: {subject}\noutput:\n  drop: {{}}\n"
                );
                let progress = Progress::default();
                let feeder = feed(subject, n, progress.clone());
                sluice_consume(&yaml, n, "nats consume", progress, feeder).await
            },
        )
        .await;
        out.push(produce);
        out.push(consume);
    }
}

mod mqtt {
    use super::*;
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

    fn client(id: &str) -> (AsyncClient, rumqttc::EventLoop) {
        let mut o = MqttOptions::new(id, "127.0.0.1", 1883);
        o.set_keep_alive(Duration::from_secs(30));
        o.set_inflight(100);
        AsyncClient::new(o, 10_000)
    }

    /// QoS 1: done when every PUBACK is back (the consume runs' feeder, timed).
    async fn bare_produce(topic: &str, n: usize) -> Duration {
        let start = Instant::now();
        feed(topic.to_owned(), n).await.await.unwrap();
        start.elapsed()
    }

    /// A QoS 1 publisher in the background; returns once it is connected.
    async fn feed(topic: String, n: usize) -> tokio::task::JoinHandle<()> {
        let (c, mut el) = client(&unique("feed"));
        tokio::spawn(async move {
            let body = payload();
            let pub_task = tokio::spawn(async move {
                for _ in 0..n {
                    c.publish(&topic, QoS::AtLeastOnce, false, body.clone())
                        .await
                        .unwrap();
                }
                c
            });
            let mut acked = 0;
            while acked < n {
                match el.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => acked += 1,
                    Ok(_) => {}
                    Err(e) => panic!("feeder: {e}"),
                }
            }
            let _ = pub_task.await;
        })
    }

    async fn bare_consume(n: usize) -> Duration {
        let topic = unique("bench");
        let (c, mut el) = client(&unique("bare-sub"));
        c.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = el.poll().await.unwrap() {
                break;
            }
        }
        let start = Instant::now();
        let feeder = feed(topic, n).await;
        let (mut got, mut last) = (0, start);
        while got < n {
            // Mosquitto drops messages for a subscriber that falls behind, or cuts it off:
            // as for the pipeline (`wait_consumed`), the run then ends and `n` is timed at
            // the rate seen.
            let lost = match tokio::time::timeout(Duration::from_secs(2), el.poll()).await {
                Ok(Ok(Event::Incoming(Packet::Publish(_)))) => {
                    (got, last) = (got + 1, Instant::now());
                    continue;
                }
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => format!("cut off by the broker ({e})"),
                Err(_) => "dropped by the broker (slow consumer)".to_owned(),
            };
            assert!(got > 0, "mqtt bare consume: nothing arrived, {lost}");
            println!("mqtt consume: bare: {} of {n} {lost}", n - got);
            break;
        }
        feeder.await.unwrap();
        at_rate_seen(start, last, got as u64, n as u64)
    }

    pub async fn run(out: &mut Vec<(String, f64)>) {
        if std::net::TcpStream::connect("127.0.0.1:1883").is_err() {
            panic!("mqtt: no broker on 1883: run scripts/brokers.sh, or BENCH_ONLY=kafka|nats");
        }
        let n = scale(50_000);
        let produce = paired(
            "mqtt produce",
            n,
            async || bare_produce(&unique("bench"), n).await,
            async || {
                let output = format!(
                    "  mqtt:\n    urls: [tcp://127.0.0.1:1883]\n    topic: {}\n    qos: 1\n",
                    unique("bench")
                );
                sluice_produce(&output, n).await
            },
        )
        .await;
        let consume = paired(
            "mqtt consume",
            n,
            async || bare_consume(n).await,
            async || {
                let topic = unique("bench");
                let yaml = format!("input:\n  mqtt:\n    urls: [tcp://127.0.0.1:1883]\n    topics: [{topic}]\n    qos: 1\noutput:\n  drop: {{}}\n");
                // QoS 1 paces the feeder by itself: no progress to follow.
                let progress = Progress::default();
                sluice_consume(&yaml, n, "mqtt consume", progress, feed(topic, n)).await
            },
        )
        .await;
        out.push(produce);
        out.push(consume);
    }
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) this is a
    // build check only, not a minutes-long measurement in a debug build.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut out = Vec::new();
        if only.is_empty() || only == "kafka" {
            kafka::run(&mut out).await;
        }
        if only.is_empty() || only == "nats" {
            nats::run(&mut out).await;
        }
        if only.is_empty() || only == "mqtt" {
            mqtt::run(&mut out).await;
        }
        println!();
        for (case, ratio) in &out {
            let target = if case.starts_with("kafka") { 0.9 } else { 0.7 };
            let verdict = if *ratio >= target { "meets" } else { "BELOW" };
            println!(
                "{case:<16} {:>5.1}% of bare, median of {} pairs ({verdict} the {:.0}% target)",
                ratio * 100.0,
                rounds(),
                target * 100.0
            );
        }
    });
}
