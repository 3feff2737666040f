//! A client that does not read, under each slow-client policy of a broadcast output,
//! through a real gateway process: `drop_oldest` drops its oldest messages and says so,
//! `disconnect` ends its connection and it resumes what it missed; neither holds the
//! producer or the other clients.

use crate::common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::harness::Gw;
use common::streams::{Next, Sse, SseEvent};
use tokio::task::JoinHandle;

const STREAMING_ON: &str = "streaming:\n  enabled: true\n  drain_timeout: 1s\n";

/// A keyless API `id` fed by POSTs to `/publish`, broadcasting on `/events` with the
/// slow-client policy `slow`.
fn api(id: &str, slow: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: "1"}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server:
    listenPath: {{value: /{id}, strip: true}}
x-sluice-streaming:
  streams:
    main:
      input:
        http_server: {{path: /publish, allowed_verbs: [POST]}}
      output:
        http_server:
          stream_path: /events
          delivery: broadcast
          heartbeat: 0s
          write_timeout: 30s
          replay_buffer: {{size: 10000}}
          slow_clients: {slow}
"#
    )
}

/// An SSE client on a raw socket that reads nothing after its headers, so that its
/// socket buffers fill up and the gateway sees it stop reading.
async fn stalled(gw: &Gw, path: &str) -> TcpStream {
    let mut sock = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n");
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.windows(11).any(|w| w == b"connected\n\n") {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "ended before `: connected`");
        head.extend_from_slice(&buf[..n]);
    }
    sock
}

/// Publishes `count` messages of `size` bytes, each numbered; fails when one takes more
/// than `limit` (the producer was held).
async fn publish_all(gw: &Gw, id: &str, count: usize, size: usize, limit: Duration) {
    let pad = "x".repeat(size);
    for n in 0..count {
        let started = Instant::now();
        let status = gw
            .http
            .post(gw.url(&format!("/{id}/publish")))
            .body(format!(r#"{{"n":{n},"pad":"{pad}"}}"#))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "publishing {n}");
        assert!(
            started.elapsed() < limit,
            "message {n} waited {:?} for a client that does not read",
            started.elapsed()
        );
    }
}

fn number(data: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(data).unwrap()["n"]
        .as_u64()
        .unwrap()
}

/// Reads a raw SSE response's events: their `data:` payload numbers and `gap` notices.
async fn read_raw(sock: &mut TcpStream, until: u64) -> Vec<String> {
    let mut text = String::new();
    let mut buf = vec![0u8; 64 << 10];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = tokio::time::timeout_at(deadline.into(), sock.read(&mut buf))
            .await
            .expect("the rest within 30 s")
            .unwrap();
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if text.contains(&format!("\"n\":{until},")) {
            break;
        }
    }
    let mut seen = Vec::new();
    for event in text.split("\n\n") {
        if event.contains("event: gap") {
            seen.push("gap".to_owned());
        } else if let Some(at) = event.find("\"n\":") {
            let rest = &event[at + 4..];
            let end = rest.find(',').unwrap_or(rest.len());
            seen.push(rest[..end].to_owned());
        }
    }
    seen
}

/// Messages each test publishes: 32 KiB each, 19 MiB in all, far more than the stalled
/// client's socket buffers.
const COUNT: usize = 600;

/// A gateway serving API `id` with the slow-client policy `slow`, a client that reads
/// (its task gives back the `COUNT` events it got) and one that reads nothing.
async fn fast_and_stalled(id: &str, slow: &str) -> (Gw, JoinHandle<Vec<SseEvent>>, TcpStream) {
    let file = format!("{id}.yaml");
    let gw = Gw::start(&[(file.as_str(), api(id, slow))], STREAMING_ON).await;
    let path = format!("/{id}/events");
    let mut fast = Sse::try_open(&gw, &path, "").await.unwrap();
    let stalled = stalled(&gw, &path).await;
    let reader = tokio::spawn(async move {
        let mut events = Vec::new();
        while events.len() < COUNT {
            match fast.next_or_end(Duration::from_secs(30)).await {
                Next::Event(e) => events.push(e),
                other => panic!("{other:?} after {}", events.len()),
            }
        }
        events
    });
    (gw, reader, stalled)
}

#[tokio::test]
async fn drop_oldest_keeps_the_producer_and_the_others_going_and_tells_the_slow_one() {
    let (gw, reader, mut slow) =
        fast_and_stalled("dropping", "{policy: drop_oldest, max_messages: 50}").await;
    publish_all(&gw, "dropping", COUNT, 32 << 10, Duration::from_secs(5)).await;
    let numbers: Vec<u64> = reader
        .await
        .unwrap()
        .iter()
        .map(|e| number(&e.data))
        .collect();
    assert_eq!(numbers, (0..COUNT as u64).collect::<Vec<_>>());
    let seen = read_raw(&mut slow, COUNT as u64 - 1).await;
    let gap = seen.iter().position(|s| s == "gap").expect("a gap notice");
    // Before the notice, what its socket had taken; after it, the newest, in order.
    let after: Vec<u64> = seen[gap + 1..].iter().map(|s| s.parse().unwrap()).collect();
    assert!(after.len() <= 50, "{} kept", after.len());
    assert_eq!(after.last(), Some(&(COUNT as u64 - 1)));
    assert!(after.windows(2).all(|w| w[1] == w[0] + 1), "{after:?}");
    let metrics = gw.metrics().await;
    assert!(
        metrics.lines().any(|l| l
            .starts_with("sluice_http_stream_slow_client_dropped_messages_total{")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
}

#[tokio::test]
async fn disconnect_ends_the_slow_one_which_resumes_what_it_missed() {
    let (gw, reader, mut slow) =
        fast_and_stalled("cutting", "{policy: disconnect, max_messages: 50}").await;
    publish_all(&gw, "cutting", COUNT, 32 << 10, Duration::from_secs(5)).await;
    let ids: Vec<(u64, String)> = reader
        .await
        .unwrap()
        .into_iter()
        .map(|e| (number(&e.data), e.id.unwrap()))
        .collect();
    // The slow one's connection was ended: what its socket holds, then the end.
    let seen = read_raw(&mut slow, u64::MAX).await;
    assert!(seen.len() < COUNT, "it got everything: not cut");
    let last = seen
        .last()
        .map(|n| n.parse::<usize>().unwrap())
        .expect("it got some before it stalled");
    // It resumes after the last one it got, and is sent exactly the rest.
    let (_, last_id) = &ids[last];
    let mut back = Sse::try_resume(&gw, "/cutting/events", "", Some(last_id))
        .await
        .unwrap();
    for n in last + 1..COUNT {
        match back.next_or_end(Duration::from_secs(10)).await {
            Next::Event(e) => assert_eq!(number(&e.data), n as u64),
            other => panic!("{other:?} at {n}"),
        }
    }
    let metrics = gw.metrics().await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("sluice_http_stream_slow_client_disconnects_total{")
                && l.ends_with(" 1")
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_policy_that_drops_is_refused_in_round_robin_and_bounds_must_hold_a_message() {
    let gw = Gw::start(&[], STREAMING_ON).await;
    for (slow, delivery, expected) in [
        (
            "{policy: disconnect}",
            "round_robin",
            "`slow_clients.policy: disconnect` needs `delivery: broadcast`",
        ),
        (
            "{policy: drop_oldest, max_messages: 0}",
            "broadcast",
            "must be at least 1",
        ),
        ("{policy: sometimes}", "broadcast", "sometimes"),
    ] {
        let yaml =
            api("refused", slow).replace("delivery: broadcast", &format!("delivery: {delivery}"));
        let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
        let resp = gw
            .admin(reqwest::Method::POST, "/sluice/apis")
            .json(&doc)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 400, "{slow}: {text}");
        assert!(text.contains(expected), "{slow}: {text}");
    }
}
