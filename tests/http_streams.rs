//! HTTP stream endpoints end to end: the `sluice` binary runs a config on a free port, and
//! real clients (SSE over reqwest's streaming body, WebSocket over tokio-tungstenite, plain
//! POSTs and GETs) talk to it.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// Generous: CI machines are slow; a passing run never waits this long.
const DEADLINE: Duration = Duration::from_secs(30);

use crate::common::free_port;

fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A running `sluice run`, killed when dropped.
struct Sluice {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Sluice {
    async fn start(config: &str) -> Sluice {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stream.yaml");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(config.as_bytes())
            .unwrap();
        Self::run(&path, dir).await
    }

    async fn run(path: &std::path::Path, dir: tempfile::TempDir) -> Sluice {
        let addr = free_addr();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(path)
            .env("SLUICE_HTTP_ADDRESS", &addr)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let s = Sluice {
            child,
            addr,
            _dir: dir,
        };
        let client = reqwest::Client::new();
        let start = Instant::now();
        loop {
            if let Ok(r) = client.get(s.url("/ready")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(start.elapsed() < DEADLINE, "sluice did not become ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        s
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }

    async fn metrics(&self) -> String {
        reqwest::get(self.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(output: &str) -> String {
    format!(
        "http:\n  address: ${{SLUICE_HTTP_ADDRESS}}\nlogger:\n  level: warn\nshutdown_timeout: 1s\ninput:\n  http_server:\n    path: /publish\n    timeout: 20s\noutput:\n  http_server:\n{output}"
    )
}

#[derive(Debug, Clone)]
struct SseEvent {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

/// A minimal EventSource: parses the stream as the SSE spec says, one event per blank line.
struct Sse {
    resp: reqwest::Response,
    buf: String,
    ready: std::collections::VecDeque<SseEvent>,
    last_id: Option<String>,
}

impl Sse {
    async fn connect(url: &str, last_event_id: Option<&str>) -> Sse {
        let mut req = reqwest::Client::new()
            .get(url)
            .header("Accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = timeout(DEADLINE, req.send()).await.unwrap().unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(resp.headers()["cache-control"], "no-cache");
        let mut sse = Sse {
            resp,
            buf: String::new(),
            ready: Default::default(),
            last_id: last_event_id.map(str::to_owned),
        };
        // The server greets with a comment once the client is in the rotation.
        timeout(DEADLINE, async {
            while !sse.buf.contains(": connected\n\n") {
                let chunk = sse.resp.chunk().await.unwrap().unwrap();
                sse.buf.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .unwrap();
        sse
    }

    fn parse(&mut self) {
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            let mut event = SseEvent {
                id: None,
                event: None,
                data: String::new(),
            };
            let mut has_data = false;
            for line in block.lines() {
                if line.starts_with(':') || line.is_empty() {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => event.id = Some(value.to_owned()),
                    "event" => event.event = Some(value.to_owned()),
                    "data" => {
                        if has_data {
                            event.data.push('\n');
                        }
                        event.data.push_str(value);
                        has_data = true;
                    }
                    _ => {}
                }
            }
            if has_data {
                if event.id.is_some() {
                    self.last_id = event.id.clone();
                }
                self.ready.push_back(event);
            }
        }
    }

    /// The next event, or None when the stream ends.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            self.parse();
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            let chunk = timeout(DEADLINE, self.resp.chunk())
                .await
                .expect("no event in time")
                .ok()??;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    async fn take(&mut self, n: usize) -> Vec<SseEvent> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            out.push(self.next().await.expect("stream ended early"));
        }
        out
    }
}

async fn post(client: &reqwest::Client, s: &Sluice, body: String) {
    let resp = timeout(DEADLINE, client.post(s.url("/publish")).body(body).send())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

/// Posts `0..n` one after the other, each answered only once delivered.
fn post_all(s: &Sluice, range: std::ops::Range<usize>) -> tokio::task::JoinHandle<()> {
    let url = s.url("/publish");
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        for i in range {
            let resp = client.post(&url).body(i.to_string()).send().await.unwrap();
            assert_eq!(resp.status(), 200);
        }
    })
}

fn payloads(events: &[SseEvent]) -> Vec<usize> {
    events.iter().map(|e| e.data.parse().unwrap()).collect()
}

#[tokio::test]
async fn a_post_reaches_an_sse_client_with_id_and_event_name() {
    let s = Sluice::start(&config(
        "    stream_path: /events\n    event_metadata: x-kind\n",
    ))
    .await;
    let mut sse = Sse::connect(&s.url("/events"), None).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(s.url("/publish"))
        .header("X-Kind", "greeting")
        .body("hello\nworld")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let e = sse.next().await.unwrap();
    assert_eq!(e.data, "hello\nworld");
    assert_eq!(e.event.as_deref(), Some("greeting"));
    assert!(e.id.unwrap().parse::<u64>().is_ok());
    let metrics = s.metrics().await;
    assert!(
        metrics.contains("sluice_http_stream_delivered_messages_total"),
        "{metrics}"
    );
    assert!(metrics.contains("route=\"/events\""), "{metrics}");
}

#[tokio::test]
async fn three_sse_clients_share_300_messages_round_robin() {
    let s = Sluice::start(&config("    stream_path: /events\n")).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Sse::connect(&s.url("/events"), None).await);
    }
    let posting = post_all(&s, 0..300);
    let mut readers = Vec::new();
    for mut c in clients {
        readers.push(tokio::spawn(async move { payloads(&c.take(100).await) }));
    }
    posting.await.unwrap();
    for (k, r) in readers.into_iter().enumerate() {
        let got = r.await.unwrap();
        let want: Vec<usize> = (0..100).map(|i| k + 3 * i).collect();
        assert_eq!(got, want, "client {k}");
    }
}

#[tokio::test]
async fn broadcast_gives_all_300_to_each_client() {
    let s = Sluice::start(&config(
        "    stream_path: /events\n    delivery: broadcast\n",
    ))
    .await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Sse::connect(&s.url("/events"), None).await);
    }
    let posting = post_all(&s, 0..300);
    let mut readers = Vec::new();
    for mut c in clients {
        readers.push(tokio::spawn(async move { c.take(300).await }));
    }
    posting.await.unwrap();
    for r in readers {
        let events = r.await.unwrap();
        assert_eq!(payloads(&events), (0..300).collect::<Vec<_>>());
        let ids: Vec<u64> = events
            .iter()
            .map(|e| e.id.as_ref().unwrap().parse().unwrap())
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids are monotonic");
    }
}

#[tokio::test]
async fn reconnecting_with_last_event_id_gets_every_message_exactly_once() {
    let s = Sluice::start(&config("    stream_path: /events\n")).await;
    let mut sse = Sse::connect(&s.url("/events"), None).await;
    let posting = post_all(&s, 0..200);
    let first = sse.take(50).await;
    let mut seen = payloads(&first);
    // Whatever was read past the 50th event is dropped with the connection, as a client
    // that dies mid-read would lose it.
    let last = first.last().unwrap().id.clone().unwrap();
    drop(sse);
    let mut again = Sse::connect(&s.url("/events"), Some(&last)).await;
    while seen.len() < 200 {
        let e = again.next().await.expect("stream ended early");
        seen.push(e.data.parse().unwrap());
    }
    posting.await.unwrap();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_client_killed_mid_stream_loses_nothing_overall() {
    let s = Sluice::start(&config("    stream_path: /events\n")).await;
    let a = Sse::connect(&s.url("/events"), None).await;
    let mut b = Sse::connect(&s.url("/events"), None).await;
    let c = Sse::connect(&s.url("/events"), None).await;
    let posting = post_all(&s, 0..300);
    // `b` reads 20 events and dies; what its socket held beyond those is lost to it.
    let b_events = b.take(20).await;
    let b_last = b_events.last().unwrap().id.clone().unwrap();
    drop(b);
    let mut got: HashMap<usize, usize> = HashMap::new();
    for p in payloads(&b_events) {
        *got.entry(p).or_default() += 1;
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for mut client in [a, c] {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(e) = client.next().await {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
    }
    posting.await.unwrap();
    // Everything is delivered to some connection now; `b` comes back and resumes.
    let mut b2 = Sse::connect(&s.url("/events"), Some(&b_last)).await;
    tokio::spawn(async move {
        while let Some(e) = b2.next().await {
            if tx.send(e).is_err() {
                break;
            }
        }
    });
    timeout(DEADLINE, async {
        while got.len() < 300 {
            let e = rx.recv().await.unwrap();
            *got.entry(e.data.parse().unwrap()).or_default() += 1;
        }
    })
    .await
    .expect("messages were lost");
    assert_eq!(
        got.keys().copied().collect::<BTreeSet<_>>(),
        (0..300).collect()
    );
    assert!(got.values().all(|n| *n == 1), "duplicates: {got:?}");
}

#[tokio::test]
async fn wrong_verb_is_405_and_get_times_out_with_408() {
    let s = Sluice::start(&config(
        "    path: /next\n    stream_path: /events\n    timeout: 1s\n",
    ))
    .await;
    let client = reqwest::Client::new();
    let resp = client.post(s.url("/events")).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET");
    let resp = client.get(s.url("/next")).send().await.unwrap();
    assert_eq!(resp.status(), 408);
    // A GET that is waiting when a message comes gets it; the POST is answered only
    // once the GET took the message.
    let waiting = tokio::spawn({
        let url = s.url("/next");
        async move { reqwest::get(url).await.unwrap() }
    });
    post(&client, &s, "for the getter".into()).await;
    let resp = waiting.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "for the getter");
}

#[tokio::test]
async fn cors_preflight_and_origin_on_streams() {
    let s = Sluice::start(&config(
        "    stream_path: /events\n    cors:\n      enabled: true\n      allowed_origins: ['https://app.example']\n",
    ))
    .await;
    let client = reqwest::Client::new();
    let resp = client
        .request(reqwest::Method::OPTIONS, s.url("/events"))
        .header("Origin", "https://app.example")
        .header("Access-Control-Request-Method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let resp = client
        .get(s.url("/events"))
        .header("Origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(url: &str) -> Ws {
    let (ws, resp) = timeout(DEADLINE, tokio_tungstenite::connect_async(url))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 101);
    ws
}

/// The next data frame as text, skipping control frames.
async fn ws_next(ws: &mut Ws) -> Option<String> {
    loop {
        match timeout(DEADLINE, ws.next())
            .await
            .expect("no frame in time")?
        {
            Ok(WsMessage::Text(t)) => return Some(t.as_str().to_owned()),
            Ok(WsMessage::Binary(b)) => return Some(String::from_utf8_lossy(&b).into_owned()),
            Ok(WsMessage::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Waits until the route has `n` clients, read from /metrics.
async fn wait_for_clients(s: &Sluice, route: &str, n: usize) {
    let needle = format!("route=\"{route}\"");
    let start = Instant::now();
    loop {
        let metrics = s.metrics().await;
        let count = metrics
            .lines()
            .filter(|l| {
                l.starts_with("sluice_http_stream_active_connections") && l.contains(&needle)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        if count as usize == n {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "{n} clients never connected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn websocket_clients_share_messages_and_resume_with_last_event_id() {
    let s = Sluice::start(&config(
        "    stream_path: ''\n    path: ''\n    ws_path: /ws\n    ws_envelope: true\n",
    ))
    .await;
    let mut a = ws_connect(&s.ws_url("/ws")).await;
    let mut b = ws_connect(&s.ws_url("/ws")).await;
    wait_for_clients(&s, "/ws", 2).await;
    let posting = post_all(&s, 0..10);
    let mut got_a = Vec::new();
    let mut got_b = Vec::new();
    for _ in 0..5 {
        got_a.push(
            serde_json::from_str::<serde_json::Value>(&ws_next(&mut a).await.unwrap()).unwrap(),
        );
        got_b.push(
            serde_json::from_str::<serde_json::Value>(&ws_next(&mut b).await.unwrap()).unwrap(),
        );
    }
    posting.await.unwrap();
    let data = |v: &[serde_json::Value]| {
        v.iter()
            .map(|e| e["data"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(data(&got_a), [0, 2, 4, 6, 8]);
    assert_eq!(data(&got_b), [1, 3, 5, 7, 9]);
    // `a` leaves after reading two; resuming from the second gets the rest of its share.
    drop(a);
    let last = got_a[1]["id"].as_str().unwrap().to_owned();
    let mut a2 = ws_connect(&s.ws_url(&format!("/ws?last_event_id={last}"))).await;
    let mut replayed = Vec::new();
    for _ in 0..3 {
        let v: serde_json::Value = serde_json::from_str(&ws_next(&mut a2).await.unwrap()).unwrap();
        replayed.push(v["data"].as_u64().unwrap());
    }
    assert_eq!(replayed, [4, 6, 8]);
    // An unknown id is answered with a gap notice.
    let mut c = ws_connect(&s.ws_url("/ws?last_event_id=12")).await;
    let v: serde_json::Value = serde_json::from_str(&ws_next(&mut c).await.unwrap()).unwrap();
    assert_eq!(v["event"], "gap");
    let _ = b.close(None).await;
}

#[tokio::test]
async fn websocket_server_output_broadcasts_binary_frames() {
    let cfg = "http:\n  address: ${SLUICE_HTTP_ADDRESS}\nlogger:\n  level: warn\nshutdown_timeout: 1s\ninput:\n  http_server:\n    path: /publish\noutput:\n  websocket_server:\n    path: /live\n    delivery: broadcast\n    message_type: binary\n";
    let s = Sluice::start(cfg).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(ws_connect(&s.ws_url("/live")).await);
    }
    wait_for_clients(&s, "/live", 3).await;
    let posting = post_all(&s, 0..20);
    for ws in &mut clients {
        let mut got = Vec::new();
        while got.len() < 20 {
            match timeout(DEADLINE, ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
            {
                WsMessage::Binary(b) => got.push(String::from_utf8(b.to_vec()).unwrap()),
                WsMessage::Ping(_) | WsMessage::Pong(_) => {}
                other => panic!("unexpected frame {other:?}"),
            }
        }
        assert_eq!(got, (0..20).map(|i| i.to_string()).collect::<Vec<_>>());
    }
    posting.await.unwrap();
}

#[tokio::test]
async fn http_server_input_ws_path_turns_frames_into_acked_messages() {
    let cfg = "http:\n  address: ${SLUICE_HTTP_ADDRESS}\nlogger:\n  level: warn\nshutdown_timeout: 1s\ninput:\n  http_server:\n    path: /publish\n    ws_path: /publish/ws\n    sync_response: {}\noutput:\n  http_server:\n    path: ''\n    ws_path: ''\n    stream_path: /events\n";
    let s = Sluice::start(cfg).await;
    let mut sse = Sse::connect(&s.url("/events"), None).await;
    let mut producer = ws_connect(&s.ws_url("/publish/ws")).await;
    for i in 0..5 {
        producer
            .send(WsMessage::text(format!("frame {i}")))
            .await
            .unwrap();
        // With sync_response, each frame is answered with the delivered message once it
        // reached the SSE client: an ack per frame.
        assert_eq!(ws_next(&mut producer).await.unwrap(), format!("frame {i}"));
    }
    let events = sse.take(5).await;
    let data: Vec<_> = events.iter().map(|e| e.data.clone()).collect();
    assert_eq!(
        data,
        (0..5).map(|i| format!("frame {i}")).collect::<Vec<_>>()
    );
}

async fn run_example(name: &str) -> Sluice {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("pipelines")
        .join(name);
    Sluice::run(&path, tempfile::tempdir().unwrap()).await
}

#[tokio::test]
async fn example_http_streams_serves_sse_and_websocket() {
    let s = run_example("http_streams.yaml").await;
    let client = reqwest::Client::new();
    // Chat: POSTs go round-robin to the SSE and WebSocket clients of /chat.
    let mut sse = Sse::connect(&s.url("/chat/sse"), None).await;
    let mut ws = ws_connect(&s.ws_url("/chat/ws")).await;
    wait_for_clients(&s, "/chat/ws", 1).await;
    for i in 0..2 {
        let resp = client
            .post(s.url("/chat/publish"))
            .body(format!("{{\"n\":{i}}}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(sse.next().await.unwrap().data, "{\"n\":0}");
    let frame: serde_json::Value = serde_json::from_str(&ws_next(&mut ws).await.unwrap()).unwrap();
    assert_eq!(frame["data"]["n"], 1);
    // Alerts: a second stream, broadcast over WebSocket only.
    let mut alerts = ws_connect(&s.ws_url("/alerts/ws")).await;
    wait_for_clients(&s, "/alerts/ws", 1).await;
    let resp = client
        .post(s.url("/alerts/publish"))
        .body("disk full")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(ws_next(&mut alerts).await.unwrap(), "disk full");
}

#[tokio::test]
async fn example_broadcast_ticker_reaches_every_client() {
    let s = run_example("broadcast_ticker.yaml").await;
    let mut a = Sse::connect(&s.url("/ticker"), None).await;
    let mut b = Sse::connect(&s.url("/ticker"), None).await;
    let ea = a.take(2).await;
    let eb = b.take(2).await;
    // Both see the same ticks, with ids that only go up.
    for e in ea.iter().chain(&eb) {
        assert!(e.data.contains("tick"), "{}", e.data);
    }
    let ids = |v: &[SseEvent]| {
        v.iter()
            .map(|e| e.id.clone().unwrap().parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    };
    assert!(ids(&ea)[0] < ids(&ea)[1]);
    assert!(ids(&eb)[0] < ids(&eb)[1]);
}
