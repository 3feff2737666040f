//! Request smuggling: crafted requests written on a raw socket to a real gateway, whose
//! upstream (hyper, a strict reader) records every request it reads. For each, the
//! gateway refuses it (400) or passes on a normalised form, and the upstream never reads
//! a request the client did not send, nor more requests than the client sent.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::common::receiver::{Received, Receiver};
use super::harness::{api, Gw};

/// What a case must get.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// A 400, and nothing upstream.
    Refused,
    /// A 400, or exactly the one request the client meant, with this body.
    RefusedOr(&'static str),
    /// Any refusal (4xx), and nothing upstream.
    NotForwarded,
}

/// Writes `raw`, then reads everything the gateway answers until it closes the
/// connection (it closes idle ones after a second in these tests).
async fn exchange(port: u16, raw: &[u8]) -> String {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    conn.write_all(raw).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

const CASES: &[(&str, &str, Want)] = &[
    (
        "CL.TE: both framings, a request hidden after the chunked body",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG",
        Want::RefusedOr(""),
    ),
    (
        "TE.CL: a request hidden in a chunk",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3c\r\nGET /sm/smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nx=\r\n0\r\n\r\n",
        Want::RefusedOr("GET /sm/smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nx="),
    ),
    (
        "two different Content-Lengths",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        Want::Refused,
    ),
    (
        "a comma-joined Content-Length that disagrees",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello!",
        Want::Refused,
    ),
    (
        "a comma-joined Content-Length that agrees",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello",
        Want::RefusedOr("hello"),
    ),
    (
        "a signed Content-Length",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
        Want::Refused,
    ),
    (
        "chunked not the last coding",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Want::Refused,
    ),
    (
        "an unknown coding only",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Want::Refused,
    ),
    (
        "Transfer-Encoding twice",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Want::Refused,
    ),
    (
        "whitespace before the colon",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Want::Refused,
    ),
    (
        "a chunk size past 64 bits",
        "POST /sm/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n",
        Want::Refused,
    ),
    (
        "a folded header line",
        "GET /sm/x HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n two\r\n\r\n",
        Want::Refused,
    ),
    (
        "a NUL in a header value",
        "GET /sm/x HTTP/1.1\r\nHost: a\r\nX-Nul: a\0b\r\n\r\n",
        Want::Refused,
    ),
    (
        "a control byte in a header name",
        "GET /sm/x HTTP/1.1\r\nHost: a\r\nX\x01Name: b\r\n\r\n",
        Want::Refused,
    ),
    (
        "a request after a refused one, in the same packet",
        "GET /sm/x HTTP/1.1\r\nHost: a\r\nX-Nul: a\0b\r\n\r\nGET /sm/smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
        Want::Refused,
    ),
    (
        "an asterisk-form target",
        "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        Want::NotForwarded,
    ),
];

/// Requests that reached the upstream since `before`.
fn since(upstream: &Receiver, before: usize) -> Vec<Received> {
    upstream.received().into_iter().skip(before).collect()
}

#[tokio::test]
async fn crafted_framings_are_refused_or_normalised_and_never_split() {
    let upstream = Receiver::start(&[], 200).await;
    let gw = Gw::start(
        &[("sm.yaml", api("sm", "/sm", &upstream.url(""), ""))],
        "http:\n  header_read_timeout: 1s\n",
    )
    .await;
    let mut failures = Vec::new();
    for (name, raw, want) in CASES {
        let before = upstream.received().len();
        let answer = exchange(gw.port, raw.as_bytes()).await;
        // Anything forwarded was read by the upstream before the gateway answered.
        let got = since(&upstream, before);
        let refused = answer.starts_with("HTTP/1.1 400");
        let smuggled = got.iter().any(|r| r.path != "/x");
        let ok = match want {
            Want::Refused => refused && got.is_empty(),
            Want::NotForwarded => answer.starts_with("HTTP/1.1 4") && got.is_empty(),
            Want::RefusedOr(body) => {
                !smuggled
                    && ((refused && got.is_empty())
                        || (got.len() == 1 && got[0].body == body.as_bytes()))
            }
        };
        if !ok || smuggled || got.len() > 1 {
            failures.push(format!(
                "{name}: answered {:?}; upstream read {:?}",
                answer.lines().next().unwrap_or(""),
                got.iter()
                    .map(|r| format!("{} {} {:?}", r.method, r.path, r.text()))
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn targets_bare_line_feeds_and_upgrades_reach_the_upstream_normalised() {
    let upstream = Receiver::start(&[], 200).await;
    let gw = Gw::start(
        &[("sm.yaml", api("sm", "/sm", &upstream.url(""), ""))],
        "http:\n  header_read_timeout: 1s\n",
    )
    .await;
    // An absolute-form target names another host: the upstream still gets its own
    // host, and the path below the listen path.
    let before = upstream.received().len();
    let answer = exchange(
        gw.port,
        b"GET http://evil.example/sm/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    let got = since(&upstream, before);
    assert!(
        answer.starts_with("HTTP/1.1 400") || got.len() == 1,
        "{answer}"
    );
    for r in &got {
        assert_eq!(r.path, "/x");
        assert_ne!(r.header("host"), Some("evil.example"));
    }
    // Bare line feeds: one request either way.
    let before = upstream.received().len();
    let answer = exchange(
        gw.port,
        b"GET /sm/x HTTP/1.1\nHost: a\nConnection: close\n\n",
    )
    .await;
    let got = since(&upstream, before);
    assert!(
        (answer.starts_with("HTTP/1.1 400") && got.is_empty()) || got.len() == 1,
        "{answer}: {got:?}"
    );
    // An h2c upgrade cannot be passed on: the upstream never sees the request to
    // switch, so nothing after it can be read as HTTP/2 by one side only.
    let before = upstream.received().len();
    let answer = exchange(
        gw.port,
        b"GET /sm/x HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
    )
    .await;
    for r in since(&upstream, before) {
        assert_ne!(r.header("upgrade"), Some("h2c"), "{answer}");
        assert!(r.header("http2-settings").is_none(), "{answer}");
    }
}

#[tokio::test]
async fn a_body_the_gateway_did_not_read_is_never_read_as_a_request() {
    let upstream = Receiver::start(&[], 200).await;
    let keyed = api("keyed", "/keyed", &upstream.url(""), super::KEY_AUTH);
    let gw = Gw::start(
        &[("keyed.yaml", keyed)],
        "http:\n  header_read_timeout: 1s\n",
    )
    .await;
    // No key: the gateway answers 401 before reading the body, and the body holds
    // what looks like a second request.
    let smuggled = "GET /keyed/smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let raw = format!(
        "POST /keyed/x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n{smuggled}",
        smuggled.len()
    );
    let answer = exchange(gw.port, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
    assert!(upstream.received().is_empty());
}
