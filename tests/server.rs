//! The standalone HTTP server does not let stalled clients hold connections: silence
//! before the first byte, unfinished headers and a stalled body are each cut off after
//! the configured timeout.

use crate::common;

use std::time::Duration;

use common::Sluice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = "\
http:
  address: 127.0.0.1:{port}
  header_read_timeout: 300ms
  body_read_timeout: 300ms
input:
  http_server: {path: /in}
output:
  drop: {}
";

/// Far above the timeouts: reached only if the server never lets go.
const PATIENCE: Duration = Duration::from_secs(20);

/// Sends `bytes`, then reads what the server answers until it closes the connection.
async fn stall(s: &Sluice, bytes: &[u8]) -> String {
    let mut conn = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    conn.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(PATIENCE, conn.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the server held a stalled connection for {PATIENCE:?} after {:?}",
        String::from_utf8_lossy(bytes)
    );
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn stalled_clients_are_cut_off() {
    let mut s = Sluice::start(CONFIG).await;
    s.wait_up().await;

    // Connected, then silent.
    assert_eq!(stall(&s, b"").await, "");
    // Headers begun, never finished.
    stall(&s, b"POST /in HTTP/1.1\r\nHost: x\r\nContent-Len").await;
    // A body announced as 100 bytes, 10 sent.
    let answer = stall(
        &s,
        b"POST /in HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("sent nothing for"), "{answer}");

    // A client that sends in time is served as before.
    let resp = reqwest::Client::new()
        .post(s.url("/in"))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    s.signal("TERM");
    assert_eq!(s.finish().await.0, 0);
}
