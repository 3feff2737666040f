//! Streaming-test helpers: an SSE client as a browser's EventSource is, and the tests'
//! Kafka topics.
#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;

use super::harness::Gw;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub name: Option<String>,
    pub data: String,
}

/// What a stream gave next.
#[derive(Debug)]
pub enum Next {
    Event(SseEvent),
    /// The server ended the stream.
    Ended,
    /// Nothing came in the time given.
    Quiet,
}

/// Reads SSE `data:` lines from a response as they come.
pub struct Sse {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl Sse {
    pub async fn open(gw: &Gw, path: &str, key: &str) -> Sse {
        Self::try_open(gw, path, key)
            .await
            .unwrap_or_else(|status| panic!("SSE {path}: {status}"))
    }

    /// The stream, or the status that refused it.
    pub async fn try_open(gw: &Gw, path: &str, key: &str) -> Result<Sse, u16> {
        Self::try_resume(gw, path, key, None).await
    }

    /// The stream resumed after event `last` (as an EventSource reconnects, with
    /// `Last-Event-ID`), or the status that refused it.
    pub async fn try_resume(
        gw: &Gw,
        path: &str,
        key: &str,
        last: Option<&str>,
    ) -> Result<Sse, u16> {
        let mut req = gw
            .http
            .get(gw.url(path))
            .header("x-api-key", key)
            // As a browser's EventSource asks.
            .header("accept", "text/event-stream");
        if let Some(last) = last {
            req = req.header("last-event-id", last);
        }
        let resp = req.send().await.expect("SSE request");
        if resp.status() != 200 {
            return Err(resp.status().as_u16());
        }
        let mut sse = Sse::of(resp);
        sse.registered().await;
        Ok(sse)
    }

    /// Waits for the server's `: connected` comment, which it sends once this client is
    /// in the rotation: a message published after it reaches this client or another.
    async fn registered(&mut self) {
        const GREETING: &str = ": connected\n\n";
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.buf.contains(GREETING) {
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .expect("no `: connected` from the server within 10 s")
                .expect("the stream ended before `: connected`")
                .expect("the stream failed before `: connected`");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
        if let Some(at) = self.buf.find(GREETING) {
            self.buf.drain(..at + GREETING.len());
        }
    }

    /// Reads the events of a response already open.
    pub fn of(resp: reqwest::Response) -> Sse {
        Sse {
            body: resp.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next event's data, or `None` when nothing comes within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<String> {
        self.next_event(wait).await.map(|e| e.data)
    }

    /// The next event (its id, name and data), or `None` when nothing comes within `wait`.
    pub async fn next_event(&mut self, wait: Duration) -> Option<SseEvent> {
        match self.next_or_end(wait).await {
            Next::Event(event) => Some(event),
            Next::Ended | Next::Quiet => None,
        }
    }

    /// The next event, or whether the server ended the stream or nothing came within
    /// `wait`: a stream cut off is told from one that is quiet.
    pub async fn next_or_end(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let field = |name: &str| -> Vec<String> {
                    event
                        .lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_owned())
                        .collect()
                };
                let data = field("data:");
                if data.is_empty() {
                    continue;
                }
                return Next::Event(SseEvent {
                    id: field("id:").pop(),
                    name: field("event:").pop(),
                    data: data.join("\n"),
                });
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Next::Quiet,
                Ok(Some(Ok(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Some(Err(_)) | None) => return Next::Ended,
            }
        }
    }

    /// Whether the server closes the stream within `wait` with no event before: `false`
    /// when an event comes, or when the stream is still open at the end of `wait`, so
    /// that a client cut off is told from one that hears nothing.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.buf.lines().any(|l| l.starts_with("data:")) {
                return false;
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return false,
                Ok(Some(Ok(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(None) | Ok(Some(Err(_))) => return true,
            }
        }
    }
}

/// The address of the tests' Kafka-protocol broker (`scripts/brokers.sh` writes it).
pub fn kafka_addr() -> String {
    if let Ok(a) = std::env::var("SLUICE_KAFKA_ADDR") {
        return a;
    }
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/target/brokers/kafka.addr");
    std::fs::read_to_string(file)
        .map(|s| s.trim().to_owned())
        .expect("a Kafka address: run scripts/brokers.sh")
}

/// Creates topic `name` with `partitions` partitions.
pub async fn create_topic(name: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_addr())
        .create()
        .unwrap();
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for r in admin
        .create_topics(&[topic], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
}
