//! A rolling restart behind a real load balancer: three gateway nodes of one cluster (one
//! PostgreSQL store, a JetStream bus) behind HAProxy, restarted one by one with SIGTERM
//! while 300 SSE clients read a broadcast stream through HAProxy and a producer posts to
//! it. A client whose node drains comes back through HAProxy with `Last-Event-ID` after
//! the `retry:` it was given, as a browser's `EventSource` does, and resumes on another
//! node: every acknowledged message reaches every client once, in order.
//! `--nocapture` prints the figures.
//!
//! HAProxy is the Debian package `haproxy`, which `scripts/brokers.sh` installs; without
//! it the test fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::common;

use common::cluster::{api, Cluster, NATS, REDIS};
use common::harness::Gw;
use common::postgres::with_postgres;

const CLIENTS: usize = 300;
/// How often the producer posts the next message.
const EVERY: Duration = Duration::from_millis(50);
/// How long a step of the test may take: a node to stop or start, the clients to come
/// back or catch up.
const STEP: Duration = Duration::from_secs(30);
/// Where the stream takes messages and where its clients read them.
const PUBLISH: &str = "/live/publish";
const EVENTS: &str = "/live/events";

/// The HAProxy config in front of the gateway nodes: clients connect to `front`, the
/// state of the nodes is read at `stats`, and `nodes` are each node's address (its APIs'
/// port) and control port. The test runs it on loopback ports; `docs/cluster.md` shows it
/// with the addresses of an example cluster.
fn haproxy_config(front: &str, stats: &str, nodes: &[(String, u16)]) -> String {
    let mut servers = String::new();
    for (n, (address, control)) in nodes.iter().enumerate() {
        servers.push_str(&format!(
            "    server gw{} {address} check port {control}\n",
            n + 1
        ));
    }
    format!(
        "global
    # Two descriptors a client, one on each side: raise it with the open-file limit.
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    # A stream is quiet between events; its heartbeat (every 15 s) keeps it open.
    timeout client 1m
    timeout server 1m
    # A WebSocket, once upgraded.
    timeout tunnel 1h
    timeout http-request 10s
    timeout http-keep-alive 10s
    timeout queue 10s
    timeout check 1s
    # A node that refuses the connection (it is draining, or down and not yet marked
    # so) costs a retry on another node, not an error.
    retries 3
    option redispatch 1

frontend gateway
    bind {front}
    default_backend gateways

backend gateways
    balance roundrobin
    # A node is in the rotation while its control port answers /ready with 200: a
    # draining node stops answering and is taken out, a started one is taken back once
    # its streams run.
    option httpchk GET /ready
    http-check expect status 200
    default-server inter 500ms fall 1 rise 1
{servers}
listen stats
    bind {stats}
    stats enable
    stats uri /stats
"
    )
}

/// The HAProxy executable, or a failure that says how to get it.
fn haproxy_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|dir| dir.join("haproxy"))
        .find(|bin| bin.is_file())
        .unwrap_or_else(|| {
            panic!(
                "HAProxy is not installed and this test runs the nodes behind it: run \
                 scripts/brokers.sh, which installs the Debian package `haproxy`"
            )
        })
}

/// HAProxy running the config of [`haproxy_config`] in front of some nodes.
struct Haproxy {
    /// Killed when the test ends.
    _child: Child,
    port: u16,
    stats: u16,
    http: reqwest::Client,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    async fn start(bin: &Path, nodes: &[Gw]) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let (port, stats) = (common::free_port(), common::free_port());
        let nodes: Vec<(String, u16)> = nodes
            .iter()
            .map(|n| (format!("127.0.0.1:{}", n.port), n.control_port))
            .collect();
        let config = dir.path().join("haproxy.cfg");
        let text = haproxy_config(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{stats}"),
            &nodes,
        );
        std::fs::write(&config, text).unwrap();
        let checked = std::process::Command::new(bin)
            .args(["-c", "-q", "-f"])
            .arg(&config)
            .output()
            .expect("run haproxy -c");
        assert!(
            checked.status.success(),
            "HAProxy refuses the config: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let log = dir.path().join("haproxy.log");
        // In the foreground, so that it is the child that is killed at the end.
        let child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start haproxy");
        let lb = Haproxy {
            _child: child,
            port,
            stats,
            http: reqwest::Client::new(),
            log,
            _dir: dir,
        };
        for n in 0..nodes.len() {
            lb.until(n, "UP").await;
        }
        lb
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The backend's rows of the statistics: each server's fields by name.
    async fn rows(&self) -> Option<Vec<std::collections::HashMap<String, String>>> {
        let url = format!("http://127.0.0.1:{}/stats;csv", self.stats);
        let text = self.http.get(url).send().await.ok()?.text().await.ok()?;
        let mut lines = text.lines();
        let header: Vec<String> = lines
            .next()?
            .trim_start_matches("# ")
            .split(',')
            .map(str::to_owned)
            .collect();
        Some(
            lines
                .map(|l| header.iter().cloned().zip(l.split(',').map(str::to_owned)))
                .map(|fields| fields.collect::<std::collections::HashMap<_, _>>())
                .filter(|row| row.get("pxname").is_some_and(|p| p == "gateways"))
                .collect(),
        )
    }

    /// What HAProxy thinks of node `n` (from 0): `UP`, `DOWN`, ...
    async fn state(&self, n: usize) -> String {
        let name = format!("gw{}", n + 1);
        let rows = self.rows().await.unwrap_or_default();
        rows.iter()
            .find(|row| row.get("svname") == Some(&name))
            .and_then(|row| row.get("status").cloned())
            .unwrap_or_default()
    }

    /// The backend's count of `field` (`wretr`: connections retried, `wredis`: sent to
    /// another node).
    async fn backend(&self, field: &str) -> u64 {
        let rows = self.rows().await.unwrap_or_default();
        rows.iter()
            .find(|row| row.get("svname").is_some_and(|s| s == "BACKEND"))
            .and_then(|row| row.get(field)?.parse().ok())
            .unwrap_or(0)
    }

    /// Waits until HAProxy has node `n` in `state`.
    async fn until(&self, n: usize, state: &str) {
        let started = Instant::now();
        loop {
            let now = self.state(n).await;
            if now == state {
                return;
            }
            assert!(
                started.elapsed() < STEP,
                "HAProxy never saw node {n} {state} (it is {now:?}); its log: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What the clients share with the test while they run.
#[derive(Default)]
struct Board {
    /// Clients with a stream open now.
    open: AtomicUsize,
    /// `event: restart` notices received by all clients.
    restarts: AtomicUsize,
    /// The highest message number each client received.
    latest: Vec<AtomicU64>,
}

/// What one client saw from start to end.
#[derive(Default)]
struct Seen {
    /// The message numbers received, in the order received.
    data: Vec<u64>,
    /// The event ids received, in the order received.
    ids: Vec<u64>,
    /// Streams opened again after one ended.
    reconnects: usize,
    /// Attempts HAProxy answered with something else than a stream: a browser's
    /// `EventSource` gives up on those.
    refused: Vec<String>,
    /// Anything else wrong: a `gap` notice, an event without an id.
    problems: Vec<String>,
    /// The id of the last event, sent as `Last-Event-ID` when the client comes back.
    last_id: Option<String>,
    /// How long to wait before coming back: the last `retry:` the server gave.
    retry: Duration,
}

/// How a stream ended.
enum End {
    /// The server ended it (after `event: restart`, or by closing).
    Ended,
    /// The test is over.
    Stopped,
}

/// A client as a browser's `EventSource`: reads `url`, and whenever the stream ends,
/// waits the `retry:` it was given last and opens it again with `Last-Event-ID`.
async fn client(
    n: usize,
    http: reqwest::Client,
    url: String,
    board: Arc<Board>,
    stop: CancellationToken,
) -> Seen {
    let mut seen = Seen {
        // What an `EventSource` waits before the server says otherwise.
        retry: Duration::from_secs(1),
        ..Default::default()
    };
    loop {
        let mut req = http.get(&url).header("accept", "text/event-stream");
        if let Some(last) = &seen.last_id {
            req = req.header("last-event-id", last);
        }
        let resp = tokio::select! {
            r = req.send() => r,
            _ = stop.cancelled() => return seen,
        };
        match resp {
            Ok(resp) if resp.status() == 200 => {
                let end = read(n, resp, &mut seen, &board, &stop).await;
                if let End::Stopped = end {
                    return seen;
                }
                seen.reconnects += 1;
            }
            Ok(resp) => seen.refused.push(format!("{}", resp.status())),
            // Not connected at all: an `EventSource` tries again.
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(seen.retry) => {}
            _ = stop.cancelled() => return seen,
        }
    }
}

/// Reads the events of one stream until it ends, as an `EventSource` parses them.
async fn read(
    n: usize,
    resp: reqwest::Response,
    seen: &mut Seen,
    board: &Board,
    stop: &CancellationToken,
) -> End {
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut open = false;
    let end = loop {
        let chunk = tokio::select! {
            c = body.next() => c,
            _ = stop.cancelled() => break End::Stopped,
        };
        match chunk {
            Some(Ok(bytes)) => buf.push_str(&String::from_utf8_lossy(&bytes)),
            Some(Err(_)) | None => break End::Ended,
        }
        while let Some(at) = buf.find("\n\n") {
            let block: String = buf.drain(..at + 2).collect();
            if !open {
                // The first block is the greeting: the client is in the hub's rotation.
                open = true;
                board.open.fetch_add(1, Ordering::AcqRel);
            }
            event(n, &block, seen, board);
        }
    };
    if open {
        board.open.fetch_sub(1, Ordering::AcqRel);
    }
    end
}

/// Takes one event (a block of fields) in.
fn event(n: usize, block: &str, seen: &mut Seen, board: &Board) {
    let (mut id, mut name, mut data) = (None, None, Vec::new());
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_owned()),
            "event" => name = Some(value.to_owned()),
            "data" => data.push(value.to_owned()),
            "retry" => {
                if let Ok(ms) = value.parse() {
                    seen.retry = Duration::from_millis(ms);
                }
            }
            // A comment (`: connected`, `: heartbeat`).
            _ => {}
        }
    }
    match name.as_deref() {
        _ if data.is_empty() => {}
        Some("restart") => {
            board.restarts.fetch_add(1, Ordering::AcqRel);
        }
        Some(other) => seen
            .problems
            .push(format!("event `{other}`: {}", data.join("\n"))),
        None => {
            let text = data.join("\n");
            match (
                text.parse::<u64>(),
                id.as_deref().and_then(|i| i.parse::<u64>().ok()),
            ) {
                (Ok(number), Some(position)) => {
                    seen.data.push(number);
                    seen.ids.push(position);
                    board.latest[n].fetch_max(number, Ordering::AcqRel);
                    seen.last_id = id;
                }
                _ => seen.problems.push(format!("event {text:?} with id {id:?}")),
            }
        }
    }
}

/// What the producer sent.
#[derive(Default)]
struct Published {
    /// Numbers answered with 2xx, in order.
    acked: Vec<u64>,
    /// Numbers not acknowledged, and why.
    failed: Vec<(u64, String)>,
}

/// Posts message 1, 2, 3... to `url` one at a time, one every [`EVERY`], until `stop`;
/// `acked` counts the acknowledged ones as they come.
async fn produce(url: String, acked: Arc<AtomicUsize>, stop: CancellationToken) -> Published {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published = Published::default();
    for n in 1.. {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.cancelled() => break,
        }
        match http.post(&url).body(n.to_string()).send().await {
            Ok(resp) if resp.status().is_success() => {
                published.acked.push(n);
                acked.fetch_add(1, Ordering::AcqRel);
            }
            Ok(resp) => published.failed.push((n, resp.status().to_string())),
            Err(e) => published.failed.push((n, e.to_string())),
        }
    }
    published
}

/// Waits until `done` holds, for at most [`STEP`]; `what` says what failed to happen.
async fn until(what: impl Fn() -> String, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < STEP, "{}", what());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `node` serves `path` (it has loaded the API and runs its stream).
async fn until_served(node: &Gw, path: &str) {
    let started = Instant::now();
    loop {
        let resp = node.http.get(node.url(path)).send().await;
        if resp.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            started.elapsed() < STEP,
            "node {} never served {path}",
            node.port
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `cluster` section of every node's config: a JetStream bus of the test's own.
fn bus(id: &str) -> String {
    format!(
        "cluster:\n  bus:\n    nats_jetstream:\n      urls: ['{NATS}']\n      \
         stream: BUS_{id}\n      subject_prefix: bus.{id}\n      max_age: 10m\n"
    )
}

/// Forwards what a node logs to the test's output, prefixed with its name: it is read,
/// so that a node never waits for room to write its log, and shown when the test fails.
fn forward_log(n: usize, node: &mut Gw) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(node.stderr()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("node {n}: {line}");
        }
    });
}

/// Figures of one restart.
struct Restart {
    /// From SIGTERM to the process's exit.
    stopped: Duration,
    /// From SIGTERM to HAProxy sending it requests again.
    back: Duration,
    /// Clients told to come back.
    told: usize,
}

#[tokio::test]
async fn three_nodes_restarted_one_by_one_behind_haproxy_lose_and_repeat_nothing() {
    let haproxy = haproxy_binary();
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_rolling", move |store| async move {
        let began = Instant::now();
        let mut cluster = Cluster::start_with(&store, &store, REDIS, bus).await;
        for (n, node) in cluster.nodes.iter_mut().enumerate() {
            forward_log(n, node);
        }
        cluster
            .post(api(
                "live",
                "      input:\n        http_server: {path: /publish, allowed_verbs: [POST]}\n      \
                 output:\n        http_server: {stream_path: /events, delivery: broadcast}\n",
            ))
            .await;
        for node in &cluster.nodes {
            until_served(node, EVENTS).await;
        }
        let lb = Haproxy::start(&haproxy, &cluster.nodes).await;

        // The clients, spread over the nodes by HAProxy; publishing starts once every
        // one of them is in its node's rotation.
        let board = Arc::new(Board {
            latest: (0..CLIENTS).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        });
        let stop_clients = CancellationToken::new();
        let http = reqwest::Client::new();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|n| {
                tokio::spawn(client(
                    n,
                    http.clone(),
                    lb.url(EVENTS),
                    board.clone(),
                    stop_clients.clone(),
                ))
            })
            .collect();
        let all_open = || board.open.load(Ordering::Acquire) == CLIENTS;
        until(
            || {
                format!(
                    "{} of {CLIENTS} clients connected",
                    board.open.load(Ordering::Acquire)
                )
            },
            all_open,
        )
        .await;
        let acked = Arc::new(AtomicUsize::new(0));
        let stop_producer = CancellationToken::new();
        let producer = tokio::spawn(produce(
            lb.url(PUBLISH),
            acked.clone(),
            stop_producer.clone(),
        ));
        // Under way: the clients have some of it before the first node stops.
        let acked_now = || acked.load(Ordering::Acquire);
        let under_way = |from: usize| {
            let acked = acked.clone();
            move || acked.load(Ordering::Acquire) >= from + 20
        };
        until(|| "no message was acknowledged".into(), under_way(0)).await;

        let started = Instant::now();
        let mut restarts = Vec::new();
        for n in 0..cluster.nodes.len() {
            let told_before = board.restarts.load(Ordering::Acquire);
            let stopping = Instant::now();
            let exit = cluster.nodes[n].terminate().await;
            assert!(exit.success(), "node {n} exited with {exit} after SIGTERM");
            let stopped = stopping.elapsed();
            lb.until(n, "DOWN").await;
            cluster.nodes[n].start_again().await;
            forward_log(n, &mut cluster.nodes[n]);
            lb.until(n, "UP").await;
            let back = stopping.elapsed();
            // Every client has come back (to another node), and the producer's messages
            // are acknowledged again, before the next node stops.
            let from = acked_now();
            until(
                || {
                    format!(
                        "after node {n} restarted, {} of {CLIENTS} clients are connected",
                        board.open.load(Ordering::Acquire)
                    )
                },
                all_open,
            )
            .await;
            until(
                || format!("nothing was acknowledged after node {n} restarted"),
                under_way(from),
            )
            .await;
            restarts.push(Restart {
                stopped,
                back,
                told: board.restarts.load(Ordering::Acquire) - told_before,
            });
        }
        let restarting = started.elapsed();
        stop_producer.cancel();
        let published = producer.await.unwrap();
        let last = *published.acked.last().expect("acknowledged messages");

        // Every client catches up with the last acknowledged message, then stops.
        let caught_up = || {
            board
                .latest
                .iter()
                .all(|l| l.load(Ordering::Acquire) >= last)
        };
        until(
            || {
                let behind = board
                    .latest
                    .iter()
                    .filter(|l| l.load(Ordering::Acquire) < last)
                    .count();
                format!("{behind} of {CLIENTS} clients never received message {last}")
            },
            caught_up,
        )
        .await;
        stop_clients.cancel();
        let mut seen = Vec::with_capacity(CLIENTS);
        for c in clients {
            seen.push(c.await.unwrap());
        }

        // Every acknowledged message once, in order, at every client; a message whose
        // POST failed may have been stored all the same, and then comes once too.
        let mut failures = Vec::new();
        let (mut lost, mut duplicates, mut unacked_seen) = (0, 0, 0);
        for (i, s) in seen.iter().enumerate() {
            let mut sorted = s.data.clone();
            sorted.sort_unstable();
            sorted.dedup();
            duplicates += s.data.len() - sorted.len();
            let missing: Vec<u64> = published
                .acked
                .iter()
                .filter(|n| sorted.binary_search(n).is_err())
                .copied()
                .collect();
            lost += missing.len();
            unacked_seen += sorted.len() + missing.len() - published.acked.len();
            if !missing.is_empty() {
                failures.push(format!("client {i} lost {missing:?}"));
            }
            if s.data.windows(2).any(|w| w[1] <= w[0]) {
                failures.push(format!(
                    "client {i} received out of order or twice: {:?}",
                    s.data
                ));
            }
            if s.ids.windows(2).any(|w| w[1] <= w[0]) {
                failures.push(format!("client {i}'s event ids went back: {:?}", s.ids));
            }
            if !s.refused.is_empty() {
                failures.push(format!("client {i} was refused: {:?}", s.refused));
            }
            if !s.problems.is_empty() {
                failures.push(format!("client {i}: {:?}", s.problems));
            }
        }
        let reconnects: usize = seen.iter().map(|s| s.reconnects).sum();
        let delivered: usize = seen.iter().map(|s| s.data.len()).sum();
        println!(
            "rolling restart behind HAProxy: {CLIENTS} SSE clients, {} nodes restarted one by \
             one in {restarting:.1?} ({:.1?} in all)",
            restarts.len(),
            began.elapsed()
        );
        for (n, r) in restarts.iter().enumerate() {
            println!(
                "  node {n}: {} clients told to come back, exited {:.1?} after SIGTERM, in \
                 HAProxy's rotation again {:.1?} after it",
                r.told, r.stopped, r.back
            );
        }
        println!(
            "  {} messages posted, {} acknowledged, {} not ({:?}); {delivered} events \
             delivered, {reconnects} reconnects with Last-Event-ID; HAProxy retried {} \
             connections and sent {} to another node",
            published.acked.len() + published.failed.len(),
            published.acked.len(),
            published.failed.len(),
            &published.failed[..published.failed.len().min(5)],
            lb.backend("wretr").await,
            lb.backend("wredis").await,
        );
        println!(
            "  {lost} lost, {duplicates} duplicates, {unacked_seen} deliveries of messages \
             whose POST was not acknowledged"
        );
        assert!(
            failures.is_empty(),
            "{} problems over {CLIENTS} clients: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
        assert_eq!((lost, duplicates), (0, 0));
        let told: usize = restarts.iter().map(|r| r.told).sum();
        assert!(
            restarts.iter().all(|r| r.told > 0) && reconnects >= told,
            "every restart moved clients, and each came back: {told} told, {reconnects} back"
        );
        // The nodes first, so that none reads the bus as it goes.
        let bus_stream = format!("BUS_{}", cluster.id);
        drop(cluster);
        let js = async_nats::jetstream::new(async_nats::connect(NATS).await.unwrap());
        let _ = js.delete_stream(bus_stream).await;
    })
    .await;
}

/// The HAProxy example of `docs/cluster.md` is the config this test runs, with the
/// addresses of an example cluster for the test's ports.
#[test]
fn the_haproxy_config_in_the_docs_is_the_one_tested() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cluster.md")).unwrap();
    let block = docs
        .split("```haproxy\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("an haproxy block in docs/cluster.md");
    let nodes: Vec<(String, u16)> = (1..=3)
        .map(|n| (format!("10.0.0.{}:8080", 10 + n), 8081))
        .collect();
    assert_eq!(block, haproxy_config("*:80", "127.0.0.1:8404", &nodes));
}
