//! HTTP stream figures, in one run against the real `sluice` binary:
//!
//! 1. messages per second from an HTTP producer (concurrent POSTs) to one SSE client;
//! 2. broadcast to 100 SSE clients, messages per second summed over the clients;
//! 3. resident memory of the server holding 10,000 idle SSE connections.
//!
//! Run with `cargo bench --bench http_streams` (needs about 10,100 open files per
//! process: `ulimit -n 20000`). Figures are printed, not asserted: compare runs on the
//! same machine. `HTTP_STREAMS_IDLE` changes the number of idle connections.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(120);

struct Server {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(output: &str) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.yaml");
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("address").to_string()
    };
    let config = format!(
        "http:\n  address: {addr}\nlogger:\n  level: warn\nshutdown_timeout: 1s\ninput:\n  http_server:\n    path: /publish\n    timeout: 60s\noutput:\n  http_server:\n    path: ''\n    ws_path: ''\n    stream_path: /events\n    heartbeat: 0s\n{output}"
    );
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(config.as_bytes()))
        .expect("config written");
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sluice starts");
    let server = Server {
        child,
        addr,
        _dir: dir,
    };
    let started = Instant::now();
    while TcpStream::connect(&server.addr).await.is_err() {
        assert!(started.elapsed() < DEADLINE, "server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server
}

/// An SSE client on a raw socket that counts events by their `data:` fields (the bench's
/// payloads are one line each, and chunk framing never contains the word).
struct Counter {
    sock: TcpStream,
    matched: usize,
    events: usize,
    buf: Vec<u8>,
}

const FIELD: &[u8] = b"data:";

impl Counter {
    async fn connect(addr: &str) -> Counter {
        let mut sock = TcpStream::connect(addr).await.expect("connect");
        sock.write_all(b"GET /events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
            .await
            .expect("request");
        let mut c = Counter {
            sock,
            matched: 0,
            events: 0,
            buf: vec![0; 4 << 10],
        };
        // The greeting comment comes once the client is in the rotation.
        let mut head = Vec::new();
        while !head.windows(11).any(|w| w == b"connected\n\n") {
            let got = c.sock.read(&mut c.buf).await.expect("read");
            assert!(got > 0, "stream ended");
            head.extend_from_slice(&c.buf[..got]);
        }
        c
    }

    async fn read_until(&mut self, n: usize) {
        while self.events < n {
            let got = self.sock.read(&mut self.buf).await.expect("read");
            assert!(got > 0, "stream ended");
            for &b in &self.buf[..got] {
                if b == FIELD[self.matched] {
                    self.matched += 1;
                    if self.matched == FIELD.len() {
                        self.events += 1;
                        self.matched = 0;
                    }
                } else {
                    // `d` occurs only at the start of the word.
                    self.matched = usize::from(b == FIELD[0]);
                }
            }
        }
    }
}

/// Posts `n` messages over `concurrency` keep-alive connections.
async fn produce(addr: &str, n: usize, concurrency: usize) {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let url = format!("http://{addr}/publish");
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next, url) = (client.clone(), next.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let resp = client
                    .post(&url)
                    .body(format!("{{\"n\":{i},\"pad\":\"0123456789abcdef\"}}"))
                    .send()
                    .await
                    .expect("post");
                assert!(resp.status().is_success(), "post failed: {}", resp.status());
            }
        }));
    }
    for t in tasks {
        t.await.expect("producer");
    }
}

async fn fan_in(output: &str, clients: usize, n: usize) -> (f64, Duration) {
    let server = start(output).await;
    let mut readers = Vec::new();
    for _ in 0..clients {
        readers.push(Counter::connect(&server.addr).await);
    }
    let started = Instant::now();
    let reading: Vec<_> = readers
        .into_iter()
        .map(|mut r| tokio::spawn(async move { r.read_until(n).await }))
        .collect();
    produce(&server.addr, n, 64).await;
    for r in reading {
        tokio::time::timeout(DEADLINE, r)
            .await
            .expect("clients read everything in time")
            .expect("reader");
    }
    let elapsed = started.elapsed();
    ((n * clients) as f64 / elapsed.as_secs_f64(), elapsed)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn idle(n: usize) -> (u64, u64) {
    let server = start("").await;
    // Warm up one connection so that the baseline includes the runtime's lazy set-up.
    let warm = Counter::connect(&server.addr).await;
    let before = rss_kib(server.child.id());
    let mut conns = Vec::with_capacity(n);
    let mut pending = Vec::new();
    for _ in 0..n {
        let addr = server.addr.clone();
        pending.push(tokio::spawn(async move { Counter::connect(&addr).await }));
        if pending.len() == 500 {
            for p in pending.drain(..) {
                conns.push(p.await.expect("connect"));
            }
        }
    }
    for p in pending {
        conns.push(p.await.expect("connect"));
    }
    let after = rss_kib(server.child.id());
    drop(warm);
    drop(conns);
    (before, after)
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) this is a
    // build check only. A filter argument other than this bench's name skips it, as
    // criterion would.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench")
        || args
            .iter()
            .any(|a| !a.starts_with('-') && !"http_streams".contains(a.as_str()))
    {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (rate, took) = fan_in(
            "    max_in_flight: 8\n    batching:\n      count: 64\n      period: 1ms\n",
            1,
            50_000,
        )
        .await;
        println!(
            "http producer -> 1 SSE client:        {rate:>12.0} msg/s  (50,000 messages in {took:.2?})"
        );
        let (rate, took) = fan_in(
            "    delivery: broadcast\n    max_in_flight: 8\n    batching:\n      count: 64\n      period: 1ms\n",
            100,
            20_000,
        )
        .await;
        println!(
            "http producer -> broadcast to 100 SSE: {rate:>12.0} msg/s summed  (20,000 messages x 100 clients in {took:.2?})"
        );
        let n: usize = std::env::var("HTTP_STREAMS_IDLE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000);
        let (before, after) = idle(n).await;
        println!(
            "{n} idle SSE connections:          server RSS {:.1} MiB (was {:.1} MiB before, {:.1} KiB per connection)",
            after as f64 / 1024.0,
            before as f64 / 1024.0,
            (after.saturating_sub(before)) as f64 / n as f64
        );
    });
}
