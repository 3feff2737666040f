//! What each fuzz target checks on one input. The targets in `fuzz_targets/` call these
//! with generated inputs; `tests/fuzz_regressions.rs` includes this file and calls them
//! with the inputs the fuzzers once failed on, so `cargo test` keeps checking those
//! without the fuzzer. Every check panics when the property does not hold.

use std::sync::LazyLock;
use std::time::Duration;

use sluice::mapping::{Env, Mapping};
use sluice::message::Message;
use sluice::value::Value;

/// The environment of a mapping that arrives with the data (the `bloblang` method): no
/// function that reads the host and no `import`, so a generated mapping cannot read
/// files or block on one.
static SANDBOX: LazyLock<Env> = LazyLock::new(|| Env::default().sandboxed());

/// The message every compiled mapping runs on: each JSON type, a nested object, an
/// array of mixed items, a timestamp-shaped string and non-ASCII text.
const MESSAGE: &str = r#"{"a":[3,"x",1.5,{"k":1},null],"s":"héllo wörld ∑","n":12,"f":-0.5,"b":true,"t":"2024-01-02T03:04:05Z","o":{"p":{"q":[]}},"e":""}"#;

/// `mapping`: compiles the text as a mapping; when it compiles, runs it as the `mapping`
/// processor and as the `mutation` processor on [`MESSAGE`]. Errors are fine; panics
/// (and, under the fuzzer, hangs and runaway memory) are not. Error texts are rendered
/// too, since `sluice blobl` and `sluice lint` print them.
pub fn mapping(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let m = match Mapping::compile(src, &SANDBOX) {
        Ok(m) => m,
        Err(d) => {
            let _ = d.to_string();
            return;
        }
    };
    let msg = Message::new(MESSAGE.as_bytes().to_vec())
        .with_meta("k", "v")
        .with_meta("n", 3i64);
    match m.apply(std::slice::from_ref(&msg), 0) {
        Ok(Some(out)) => {
            let _ = out.payload();
        }
        Ok(None) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // The same on a message it owns, which may edit the input in place.
    match m.apply_owned(msg.clone()) {
        Ok(Some(out)) => {
            let _ = out.payload();
        }
        Ok(None) => {}
        Err(f) => {
            let _ = f.error.to_string();
        }
    }
    let mut edited = msg;
    if let Err(e) = m.mutate(&mut edited, 0, 1) {
        let _ = e.to_string();
    }
}

/// `config`: reads the text as a config file, as `sluice run` and `sluice lint` do, and
/// renders the errors. Errors are fine; panics are not.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match sluice::stream::config::parse_str("fuzz.yaml", text) {
        Ok(root) => {
            let _ = format!("{root:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// `json`: `Value::from_json` must agree with serde_json on every input:
///
/// - both accept or both reject, and when both reject, with the same message (the fast
///   parser falls back to serde_json for anything it does not take, so the message is
///   serde_json's);
/// - when both accept, the values are the same: serde_json's tree is converted with
///   `Value::from(serde_json::Value)`, so the integer/float split is the one `Value`
///   documents (numbers that fit an `i64` are `Int`; larger integers and anything with a
///   fraction or exponent are `Float`), and an `Int` never equals a `Float`. Floats are
///   compared by their bits, so `-0` (a float -0.0 in serde_json) must keep its sign.
///   A repeated key keeps its last value in both; key order is not compared (`Value`
///   sorts keys).
///
/// And what `Value` writes reads back as the same value, except that numbers compare as
/// `f64`s: whole floats are written without a fraction, in the shortest digits that read
/// back as the same float (as Go does), so they come back as integers that convert to
/// that float (1.4406074477475931e17 is written `144060744774759310`); and -0.0 is
/// written as `0`.
pub fn json(data: &[u8]) {
    let ours = Value::from_json(data);
    let theirs = serde_json::from_slice::<serde_json::Value>(data);
    let value = match (ours, theirs) {
        (Ok(a), Ok(b)) => {
            let b = Value::from(b);
            assert!(same(&a, &b, Exact::Yes), "values differ: {a:?} vs {b:?}");
            a
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "errors differ");
            return;
        }
        (Ok(a), Err(b)) => panic!("only Value::from_json accepts: {a:?}; serde_json: {b}"),
        (Err(a), Ok(b)) => panic!("only serde_json accepts: {b:?}; Value::from_json: {a}"),
    };
    let text = value.to_json();
    let again = serde_json::from_slice::<serde_json::Value>(&text)
        .unwrap_or_else(|e| panic!("written JSON does not parse: {e}"));
    let again = Value::from(again);
    assert!(
        same(&value, &again, Exact::No),
        "written JSON reads back differently: {value:?} vs {again:?}"
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Exact {
    Yes,
    No,
}

fn same(a: &Value, b: &Value, exact: Exact) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => match exact {
            Exact::Yes => x.to_bits() == y.to_bits(),
            Exact::No => x == y,
        },
        (Value::Int(i), Value::Float(f)) | (Value::Float(f), Value::Int(i)) => {
            exact == Exact::No && *i as f64 == *f
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y, exact))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, x), (ky, y))| kx == ky && same(x, y, exact))
        }
        _ => a == b,
    }
}

/// `upstream_response`: the gateway's reader of upstream responses must agree with
/// hyper's client on what a connection carried. The first byte picks the request's
/// method (even: GET, odd: HEAD); the rest is everything the upstream sent before it
/// closed the connection.
///
/// Both read the same status, body and trailers and the same end-to-end fields (hyper
/// keeps the connection's own fields, `Connection`, `Transfer-Encoding` and the like,
/// which the gateway's reader sets aside: they are left out of the comparison), or both
/// refuse. 1xx answers before the response are skipped by both.
pub fn upstream_response(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let method = if pick % 2 == 0 {
        http::Method::GET
    } else {
        http::Method::HEAD
    };
    let ours = sluice::gateway::upstream::read_response(&method, bytes);
    let theirs = hyper_reads(&method, bytes);
    match (ours, theirs) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.status, b.status, "statuses differ");
            assert_eq!(a.body, b.body, "bodies differ");
            assert_eq!(
                end_to_end(&a.headers),
                end_to_end(&b.headers),
                "fields differ"
            );
            // The gateway drops the fields a trailer may not carry, which hyper keeps; a
            // `Connection` among trailers names nothing, so it filters nothing either.
            let trailers = |t: &Option<http::HeaderMap>| {
                let mut kept: Vec<(String, Vec<u8>)> = t
                    .iter()
                    .flatten()
                    .filter(|(name, _)| sluice::http::wire::allowed_in_trailer(name))
                    .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                    .collect();
                kept.sort();
                kept
            };
            assert_eq!(
                trailers(&a.trailers),
                trailers(&b.trailers),
                "trailers differ"
            );
        }
        (Err(_), Err(_)) => {}
        (Ok(a), Err(b)) => panic!(
            "only the gateway reads it ({} {:?}); hyper: {b}",
            a.status,
            String::from_utf8_lossy(&a.body)
        ),
        (Err(a), Ok(b)) => panic!(
            "only hyper reads it ({} {:?}); the gateway: {a}",
            b.status,
            String::from_utf8_lossy(&b.body)
        ),
    }
}

/// A response's fields in order, without those of the connection.
fn end_to_end(headers: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    let named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t).trim().to_ascii_lowercase())
        .collect();
    let mut out: Vec<(String, Vec<u8>)> = headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            !matches!(
                n,
                "connection" | "keep-alive" | "transfer-encoding" | "te" | "trailer" | "upgrade"
            ) && !n.starts_with("proxy-")
                && !named.iter().any(|c| c == n)
        })
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect();
    out.sort();
    out
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

/// What hyper's HTTP/1.1 client reads from `bytes`, sent by the server before it closes.
fn hyper_reads(
    method: &http::Method,
    bytes: &[u8],
) -> Result<sluice::gateway::upstream::ReadResponse, String> {
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let bytes = bytes.to_vec();
    let method = method.clone();
    RUNTIME.block_on(async move {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        // The upstream answers once the request's head is in, as a server does (a
        // client drops bytes that come before it asked), then closes.
        let upstream = tokio::spawn(async move {
            let mut request = Vec::new();
            let mut chunk = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match server.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = server.write_all(&bytes).await;
            let _ = server.shutdown().await;
            let _ = server.read_to_end(&mut request).await;
        });
        let limit = Duration::from_secs(2);
        let exchange = async {
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(client))
                    .await
                    .map_err(|e| e.to_string())?;
            let driver = tokio::spawn(conn);
            let req = http::Request::builder()
                .method(method)
                .uri("/")
                .header(http::header::HOST, "upstream")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .map_err(|e| e.to_string())?;
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let (parts, body) = resp.into_parts();
            let collected = body.collect().await.map_err(|e| e.to_string())?;
            driver.abort();
            let trailers = collected.trailers().cloned();
            Ok(sluice::gateway::upstream::ReadResponse {
                status: parts.status,
                headers: parts.headers,
                body: collected.to_bytes().to_vec(),
                trailers,
            })
        };
        let out = match tokio::time::timeout(limit, exchange).await {
            Ok(r) => r,
            Err(_) => Err("hyper did not finish".to_owned()),
        };
        upstream.abort();
        out
    })
}

/// `requests`: the gateway's HTTP/1 server (its own loop, which hands hyper what it does
/// not serve itself) must agree with hyper's server alone, configured as the gateway
/// configures it, on what a client's bytes ask for. The bytes are everything the client
/// sent on one connection, which it keeps open.
///
/// Both pass the service the same requests, in the same order: the same method, target,
/// version, fields (in order) and body bytes, a body cut short or still awaited alike;
/// and both answer with the same statuses (a refusal is hyper's in both). The service
/// reads each whole body, then answers `200 ok`. The one difference allowed: a `GET`
/// for an event stream ends the gateway's connection after its answer (the stream holds
/// it), so the gateway may stop after such a request where hyper serves the next.
pub fn requests(data: &[u8]) {
    let ours = RUNTIME_PAUSED.block_on(serve_recorded(data, Server::Gateway));
    let theirs = RUNTIME_PAUSED.block_on(serve_recorded(data, Server::Hyper));
    let (mut theirs_seen, mut theirs_statuses) = (theirs.seen, theirs.statuses);
    // Whatever came after it, served or refused, hyper alone answers.
    if ours.seen.last().is_some_and(Seen::asks_for_events) {
        theirs_seen.truncate(ours.seen.len());
        theirs_statuses.truncate(ours.statuses.len());
    }
    assert_eq!(
        ours.seen, theirs_seen,
        "requests differ (gateway, then hyper)"
    );
    assert_eq!(
        ours.statuses, theirs_statuses,
        "statuses differ (gateway, then hyper)"
    );
}

/// A runtime whose clock stands still until every task waits, then jumps to the next
/// timer: a run ends as soon as both sides are idle, without waiting in real time.
static RUNTIME_PAUSED: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
});

#[derive(Clone, Copy)]
enum Server {
    Gateway,
    Hyper,
}

/// One request as the service saw it.
#[derive(Debug, PartialEq)]
struct Seen {
    method: String,
    target: String,
    version: http::Version,
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    end: BodyEnd,
}

#[derive(Debug, PartialEq, Clone, Copy)]
enum BodyEnd {
    Whole,
    Cut,
    /// The client sent no more of it.
    Awaited,
}

impl Seen {
    /// As the gateway's loop tells an event stream's request.
    fn asks_for_events(&self) -> bool {
        self.method == "GET"
            && self.body.is_empty()
            && self.fields.iter().any(|(name, value)| {
                name == "accept"
                    && value
                        .windows(17)
                        .any(|w| w.eq_ignore_ascii_case(b"text/event-stream"))
            })
    }
}

struct Recorded {
    seen: Vec<Seen>,
    statuses: Vec<u16>,
}

/// Longer than anything takes on a connection that is still busy, shorter than the
/// header timeout: the wait that ends a run fires once both sides are idle.
const IDLE: Duration = Duration::from_secs(1);
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

async fn serve_recorded(data: &[u8], server: Server) -> Recorded {
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let service: sluice::server::Service =
        Arc::new(move |req: http::Request<sluice::http::Body>, _peer| {
            let record = record.clone();
            Box::pin(async move {
                let (parts, mut body) = req.into_parts();
                let at = {
                    let mut seen = record.lock().unwrap();
                    seen.push(Seen {
                        method: parts.method.to_string(),
                        target: parts.uri.to_string(),
                        version: parts.version,
                        fields: parts
                            .headers
                            .iter()
                            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                            .collect(),
                        body: Vec::new(),
                        end: BodyEnd::Awaited,
                    });
                    seen.len() - 1
                };
                loop {
                    let frame = body.frame().await;
                    let mut seen = record.lock().unwrap();
                    let this = &mut seen[at];
                    match frame {
                        None => {
                            this.end = BodyEnd::Whole;
                            break;
                        }
                        Some(Err(_)) => {
                            this.end = BodyEnd::Cut;
                            break;
                        }
                        Some(Ok(frame)) => {
                            if let Some(data) = frame.data_ref() {
                                this.body.extend_from_slice(data);
                            }
                        }
                    }
                }
                sluice::http::text(http::StatusCode::OK, "ok")
            }) as futures::future::BoxFuture<'static, sluice::http::HttpResponse>
        });
    let (client, conn) = tokio::io::duplex(1 << 20);
    let serving = tokio::spawn(async move {
        match server {
            Server::Gateway => sluice::server::serve_http1(conn, service, HEADER_TIMEOUT).await,
            Server::Hyper => {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let service = service.clone();
                        async move {
                            let req = req.map(sluice::http::boxed);
                            Ok::<_, std::convert::Infallible>(
                                service
                                    .call(req, std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
                                    .await,
                            )
                        }
                    });
                let _ = sluice::server::http1_builder(HEADER_TIMEOUT)
                    .serve_connection(hyper_util::rt::TokioIo::new(conn), svc)
                    .with_upgrades()
                    .await;
            }
        }
    });
    let (mut from_server, mut to_server) = tokio::io::split(client);
    let out: Arc<Mutex<Vec<u8>>> = Arc::default();
    let written = out.clone();
    let reading = tokio::spawn(async move {
        let mut chunk = [0u8; 4096];
        loop {
            match from_server.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => written.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
    });
    // The client keeps its side open: what it did not send is awaited.
    let _ = to_server.write_all(data).await;
    tokio::time::sleep(IDLE).await;
    serving.abort();
    reading.abort();
    let _ = serving.await;
    let _ = reading.await;
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let out = std::mem::take(&mut *out.lock().unwrap());
    Recorded {
        seen,
        statuses: statuses(&out),
    }
}

/// The status of every response in what the server wrote. The service's bodies (`ok`)
/// and hyper's refusals (empty) hold no status line of their own.
fn statuses(out: &[u8]) -> Vec<u16> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = out[at..].windows(9).position(|w| w == b"HTTP/1.1 ") {
        let start = at + i + 9;
        if let Some(code) = out
            .get(start..start + 3)
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.parse().ok())
        {
            found.push(code);
        }
        at = start;
    }
    found
}
