//! One filtered stream against per-client streams, for the same clients, in one run
//! against the real `sluice` gateway and NATS:
//!
//! - `filtered`: one stream reads one NATS subject and broadcasts with
//!   `filter: this.tenant == @caller.query.tenant`; every client connects to it;
//! - `per_client`: the stream's subject names the tenant
//!   (`$sluice_context.request_data_tenant`), so the gateway runs one instance (one NATS
//!   subscription) per tenant, as per-client streams do.
//!
//! 10,000 SSE clients in 1,000 tenants (10 each), then events published round the
//! tenants. Printed per case: resident memory the clients added to the gateway, the time
//! until every client had its tenant's events, the cost per event per subscriber, and
//! deliveries to the wrong tenant (must be 0, or the run fails); then the ratios.
//!
//! Run with `cargo bench --bench filtered_streams` (NATS on 127.0.0.1:4222; about 10,100
//! open files per process: `ulimit -n 20000`). `FILTERED_CLIENTS`, `FILTERED_TENANTS`
//! and `FILTERED_EVENTS` change the sizes.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(300);

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Gateway {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A gateway serving one keyless API `bench` whose stream reads `subject` and serves SSE
/// on `/bench/events` with `output_extra` (YAML lines of the `http_server` output).
async fn gateway(subject: &str, output_extra: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("temp dir");
    let apis = dir.path().join("apis");
    std::fs::create_dir_all(&apis).expect("apis dir");
    let api = format!(
        "openapi: 3.0.3\ninfo: {{title: bench, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: bench, name: bench}}\n  server:\n    listenPath: {{value: /bench, strip: true}}\nx-sluice-streaming:\n  streams:\n    events:\n      input:\n        nats:\n          urls: [nats://127.0.0.1:4222]\n          subject: '{subject}'\n      output:\n        http_server:\n          stream_path: /events\n          heartbeat: 0s\n          delivery: broadcast\n{output_extra}"
    );
    std::fs::write(apis.join("bench.yaml"), api).expect("api written");
    let (port, control) = (free_port(), free_port());
    let config = format!(
        "listen:\n  address: 127.0.0.1\n  port: {port}\ncontrol:\n  port: {control}\napps:\n  path: {apis}\nstore:\n  url: sqlite://{store}\nsecret: 0123456789abcdef0123456789abcdef\nlogger:\n  level: warn\nstreaming:\n  enabled: true\n  max_client_streams: 20000\n  egress:\n    allow: [127.0.0.1]\n",
        apis = apis.display(),
        store = dir.path().join("store.db").display(),
    );
    let path = dir.path().join("gateway.yaml");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(config.as_bytes()))
        .expect("config written");
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("gateway")
        .arg("--config")
        .arg(&path)
        .env("SLUICE_GW_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sluice starts");
    let gw = Gateway {
        child,
        addr: format!("127.0.0.1:{port}"),
        _dir: dir,
    };
    let started = Instant::now();
    let client = reqwest::Client::new();
    loop {
        assert!(started.elapsed() < DEADLINE, "the gateway did not start");
        let ready = client
            .get(format!("http://127.0.0.1:{control}/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// An SSE client of one tenant on a raw socket: counts its events and those of other
/// tenants (the bench's payloads are one line each).
struct Client {
    sock: TcpStream,
    tenant: String,
    own: usize,
    foreign: usize,
    line: Vec<u8>,
}

impl Client {
    async fn connect(addr: &str, tenant: usize) -> Client {
        let mut sock = TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "GET /bench/events?tenant=t{tenant} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
        );
        sock.write_all(req.as_bytes()).await.expect("request");
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        // The greeting comment comes once the client is in the hub.
        while !head.windows(11).any(|w| w == b"connected\n\n") {
            let got = sock.read(&mut buf).await.expect("read");
            assert!(
                got > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&head)
            );
            head.extend_from_slice(&buf[..got]);
        }
        Client {
            sock,
            tenant: format!("\"tenant\":\"t{tenant}\""),
            own: 0,
            foreign: 0,
            line: Vec::new(),
        }
    }

    async fn read_until(&mut self, own: usize) {
        let mut buf = vec![0u8; 4 << 10];
        while self.own < own {
            let got = self.sock.read(&mut buf).await.expect("read");
            assert!(got > 0, "stream ended");
            for &b in &buf[..got] {
                if b != b'\n' {
                    self.line.push(b);
                    continue;
                }
                if let Some(data) = self.line.strip_prefix(b"data: ") {
                    let tenant = self.tenant.as_bytes();
                    if data.windows(tenant.len()).any(|w| w == tenant) {
                        self.own += 1;
                    } else {
                        self.foreign += 1;
                    }
                }
                self.line.clear();
            }
        }
    }
}

struct Figures {
    added_kib: u64,
    deliver: Duration,
    foreign: usize,
}

/// One case: `subject_of(base, None)` is the subject the stream reads, `Some(t)` the
/// one tenant `t`'s events are published to.
async fn run(
    name: &str,
    output_extra: &str,
    subject_of: impl Fn(&str, Option<usize>) -> String,
    clients: usize,
    tenants: usize,
    events: usize,
) -> Figures {
    let base = format!("bench.filtered.{}", uuid::Uuid::new_v4().simple());
    let gw = gateway(&subject_of(&base, None), output_extra).await;
    let before = rss_kib(gw.child.id());
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        conns.push(Client::connect(&gw.addr, i % tenants).await);
    }
    // Per-client instances subscribe as they start: let them settle before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let added_kib = rss_kib(gw.child.id()).saturating_sub(before);
    let nats = async_nats::connect("nats://127.0.0.1:4222")
        .await
        .expect("NATS on 127.0.0.1:4222");
    let per_tenant = events / tenants;
    let readers: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                c.read_until(per_tenant).await;
                c.foreign
            })
        })
        .collect();
    let started = Instant::now();
    for n in 0..per_tenant * tenants {
        let tenant = n % tenants;
        let payload = format!("{{\"tenant\":\"t{tenant}\",\"n\":{n}}}");
        nats.publish(subject_of(&base, Some(tenant)), payload.into())
            .await
            .expect("publish");
    }
    nats.flush().await.expect("flush");
    let mut foreign = 0;
    for r in readers {
        foreign += tokio::time::timeout(DEADLINE, r)
            .await
            .unwrap_or_else(|_| panic!("{name}: not every client got its events"))
            .expect("reader");
    }
    let deliver = started.elapsed();
    println!(
        "{name:>10}: {clients} clients in {tenants} tenants: +{:.1} MiB resident ({:.1} KiB a client), {} events delivered in {:.2?}, {:.0} ns per event per subscriber, {foreign} to another tenant",
        added_kib as f64 / 1024.0,
        added_kib as f64 / clients as f64,
        per_tenant * tenants,
        deliver,
        deliver.as_nanos() as f64 / (per_tenant * tenants) as f64 / clients as f64,
    );
    Figures {
        added_kib,
        deliver,
        foreign,
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) this is a
    // build check only. A filter argument other than this bench's name skips it.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench")
        || args
            .iter()
            .any(|a| !a.starts_with('-') && !"filtered_streams".contains(a.as_str()))
    {
        return;
    }
    let clients = size("FILTERED_CLIENTS", 10_000);
    let tenants = size("FILTERED_TENANTS", 1_000);
    let events = size("FILTERED_EVENTS", 2_000);
    let filtered = run(
        "filtered",
        "          filter: this.tenant == @caller.query.tenant\n",
        |base, _| base.to_owned(),
        clients,
        tenants,
        events,
    )
    .await;
    let per_client = run(
        "per_client",
        "",
        |base, tenant| match tenant {
            None => format!("{base}.$sluice_context.request_data_tenant"),
            Some(t) => format!("{base}.t{t}"),
        },
        clients,
        tenants,
        events,
    )
    .await;
    println!(
        "filtered / per_client: memory {:.2}x, delivery time {:.2}x",
        filtered.added_kib as f64 / per_client.added_kib.max(1) as f64,
        filtered.deliver.as_secs_f64() / per_client.deliver.as_secs_f64(),
    );
    assert_eq!(
        filtered.foreign + per_client.foreign,
        0,
        "cross-tenant deliveries"
    );
}
