//! Serving HTTP: the connection loop (HTTP/1.1 and HTTP/2, plain or TLS) that `sluice run`
//! and the gateway share, and the standalone server of `sluice run`: every mounted
//! stream path, plus `/ping`, `/ready` (503 until every component is connected) and
//! `/metrics`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use http::StatusCode;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::connect::tls::{self, TlsError};
use crate::http::{self as h, HttpResponse, Routes};
use crate::stream::Readiness;

mod accept;
mod event_stream;
mod h1;
mod h2;
mod wire;

pub use accept::ConnLimit;

use h1::Served;

/// Serves a hyper HTTP/1 connection until it ends, or until `stop`, then lets it finish
/// its current requests. A macro: the upgradeable connection's type cannot be written.
macro_rules! drive {
    ($conn:expr, $stop:expr, $peer:expr) => {
        async move {
            let conn = $conn;
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    debug!(error = %e, peer = %$peer, "Connection ended with an error.");
                },
                _ = $stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        }
    };
}

#[derive(Clone)]
pub struct Server {
    pub routes: Arc<Routes>,
    pub readiness: Arc<Readiness>,
    pub metrics: Option<PrometheusHandle>,
    pub timeouts: Timeouts,
}

/// How long a client may take to send what it started, so that stalled clients do not
/// hold connections forever.
/// `sluice run` takes them from its `http` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the connection's first byte (or its previous request) to the end of a
    /// request's headers.
    pub header: Duration,
    /// The longest silence while a request body is being sent.
    pub body: Duration,
}

impl Server {
    /// Answers one request.
    pub async fn handle(&self, req: http::Request<h::Body>) -> HttpResponse {
        let path = req.uri().path().to_owned();
        match path.as_str() {
            "/ping" => h::text(StatusCode::OK, "pong"),
            "/ready" => {
                let waiting = self.readiness.not_ready();
                if waiting.is_empty() {
                    h::text(StatusCode::OK, "OK")
                } else {
                    h::text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not connected: {}\n", waiting.join(", ")),
                    )
                }
            }
            "/metrics" => match &self.metrics {
                Some(handle) => metrics_response(handle),
                None => h::text(StatusCode::NOT_FOUND, "metrics are disabled\n"),
            },
            _ => match self.routes.get(&path) {
                Some(handler) => {
                    let idle = self.timeouts.body;
                    let req = req.map(|body| h::boxed(h::IdleTimeout::new(body, idle)));
                    handler.call(req).await
                }
                None => h::text(StatusCode::NOT_FOUND, "no such path\n"),
            },
        }
    }

    /// Serves on `listener` until `stop` is cancelled; open connections then finish
    /// their current requests.
    pub async fn serve(self, listener: TcpListener, stop: CancellationToken) {
        let timeouts = self.timeouts;
        let server = Arc::new(self);
        let service: Service = Arc::new(move |req, _peer| {
            let server = server.clone();
            async move { server.handle(req).await }.boxed()
        });
        let limit = ConnLimit::from_descriptors();
        serve_connections(listener, None, timeouts, service, None, limit, stop).await;
    }
}

/// Answers one request; the second argument is the client's address. Bodies are boxed:
/// hyper's, or those of the `h1` loop.
pub type Service = Arc<dyn Serve>;

/// What answers requests. The answer may borrow the service: a connection holds its
/// service while it serves, so a request need not take a reference of its own on
/// shared state (a count that every serving thread would write).
pub trait Serve: Send + Sync {
    fn call(&self, req: http::Request<h::Body>, peer: SocketAddr) -> BoxFuture<'_, HttpResponse>;
}

impl<F> Serve for F
where
    F: Fn(http::Request<h::Body>, SocketAddr) -> BoxFuture<'static, HttpResponse> + Send + Sync,
{
    fn call(&self, req: http::Request<h::Body>, peer: SocketAddr) -> BoxFuture<'_, HttpResponse> {
        self(req, peer)
    }
}

/// Where a plain HTTP/1 connection is best served, from the path of its first request
/// when that is a GET: the runtime to move it to, or `None` to serve it where it was
/// accepted. A gateway with a runtime per thread serves a stream's consumers (SSE,
/// WebSocket, long polls: GETs that then receive message after message) on the stream's
/// own thread, which saves a wake-up across threads for every message. Producers' POSTs
/// stay where the kernel spread them, sharing their parsing over the threads (measured
/// faster than moving them too).
pub type Placement = Arc<dyn Fn(&str) -> Option<tokio::runtime::Handle> + Send + Sync>;

/// Accepts connections on `listener` (through `tls` when given) and serves each with
/// `service`, HTTP/1.1 or HTTP/2, until `stop` is cancelled; open connections then finish
/// their current requests. Plain connections may move to the runtime `placement` names.
///
/// At most `limit` connections are open at once (the listeners of one port share it);
/// past it a plain connection is answered 503 and closed. When accepting fails for want
/// of descriptors, the loop waits before it tries again rather than spin.
pub async fn serve_connections(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    timeouts: Timeouts,
    service: Service,
    placement: Option<Placement>,
    limit: Arc<ConnLimit>,
    stop: CancellationToken,
) {
    let conns = tokio_util::task::TaskTracker::new();
    // Every connection checks the token between requests, and a check takes the token's
    // lock: a token of this listener's own keeps that lock off the cores that serve the
    // other listeners (the gateway runs one per thread). It is cancelled with `stop`.
    let stop = stop.child_token();
    let mut backoff = accept::AcceptBackoff::default();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => {
                    backoff.reset();
                    a
                }
                Err(e) => {
                    if let Some(wait) = backoff.after(&e) {
                        tracing::warn!(error = %e, retry_in = ?wait, "Cannot accept connections.");
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = stop.cancelled() => break,
                        }
                    } else {
                        debug!(error = %e, "Accept failed.");
                    }
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let Some(slot) = limit.try_take() else {
            debug!(peer = %peer, max = limit.max(), "Refusing a connection past the cap.");
            limit.refuse(stream, tls.is_some());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let stop = stop.clone();
        let tracker = conns.clone();
        let tls = tls.clone();
        let placement = placement.clone();
        // A short task decides the protocol, then hands the connection to a task of
        // that protocol alone: a future holding both (hyper-util's `auto`) costs about
        // 7 KiB more per idle connection, which adds up over thousands of SSE clients.
        conns.spawn(async move {
            let header_timeout = timeouts.header;
            let conn = Conn {
                service,
                tracker,
                stop: stop.clone(),
                peer,
                header_timeout,
                _slot: slot,
            };
            match tls {
                None => {
                    let opening = tokio::select! {
                        opening = tokio::time::timeout(header_timeout, opening(&stream, placement.is_some())) => match opening {
                            Ok(opening) => opening,
                            // Connected and silent: nothing to serve.
                            Err(_) => return,
                        },
                        _ = stop.cancelled() => return,
                    };
                    let path = match opening {
                        Opening::H2 => return conn.serve(stream, true).await,
                        Opening::Http1(path) => path,
                    };
                    match placement.as_ref().zip(path).and_then(|(place, path)| place(&path)) {
                        Some(home) => conn.move_to(home, stream),
                        None => conn.serve(stream, false).await,
                    }
                }
                Some(acceptor) => {
                    let tls_stream = tokio::select! {
                        s = tokio::time::timeout(header_timeout, acceptor.accept(stream)) => match s {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                debug!(error = %e, peer = %peer, "TLS handshake failed.");
                                return;
                            }
                            Err(_) => return,
                        },
                        _ = stop.cancelled() => return,
                    };
                    // ALPN says which protocol the client chose.
                    let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    conn.serve(tls_stream, h2).await;
                }
            }
        });
    }
    conns.close();
    conns.wait().await;
}

/// One accepted connection and what serving it needs.
struct Conn {
    service: Service,
    tracker: tokio_util::task::TaskTracker,
    stop: CancellationToken,
    peer: SocketAddr,
    header_timeout: Duration,
    /// Its place under the listener's cap, held for as long as it is served.
    _slot: accept::ConnSlot,
}

impl Conn {
    /// Serves `io` once its protocol is known: HTTP/2 through hyper; HTTP/1 by `h1`,
    /// which hands hyper the connections it does not serve itself.
    async fn serve<I>(self, io: I, h2: bool)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        if h2 {
            self.hyper(io, true);
            return;
        }
        let served = h1::serve(
            io,
            &self.service,
            self.peer,
            self.header_timeout,
            &self.stop,
        )
        .await;
        if let Served::Hyper(io) = served {
            self.hyper(io, false);
        }
    }

    /// Serves a plain connection on the runtime `home` instead of this one.
    fn move_to(self, home: tokio::runtime::Handle, stream: TcpStream) {
        // Out of this runtime's reactor, into the other's.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                debug!(error = %e, peer = %self.peer, "Cannot move a connection.");
                return;
            }
        };
        let tracker = self.tracker.clone();
        home.spawn(tracker.track_future(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => self.serve(stream, false).await,
                Err(e) => debug!(error = %e, peer = %self.peer, "Cannot take a moved connection."),
            }
        }));
    }

    /// Hands the connection to hyper, HTTP/2 (with its idle limits) or HTTP/1.1 (with
    /// upgrades), on a task of the tracker.
    fn hyper<I>(self, io: I, h2: bool)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Conn {
            service,
            tracker,
            stop,
            peer,
            header_timeout,
            _slot,
        } = self;
        if h2 {
            // Idle between streams as long as HTTP/1.1 may be between requests.
            tracker.spawn(async move {
                h2::serve(io, service, peer, header_timeout, stop).await;
                drop(_slot);
            });
            return;
        }
        let conn = http1_builder(header_timeout)
            .serve_connection(TokioIo::new(io), hyper_service(service, peer))
            .with_upgrades();
        tracker.spawn(async move {
            drive!(conn, stop, peer).await;
            drop(_slot);
        });
    }
}

/// hyper's HTTP/1 server as it serves the connections the `h1` loop hands over.
#[doc(hidden)]
pub fn http1_builder(header_timeout: Duration) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // hyper's own default is about 400 KiB: held to the server's one limit.
        .max_buf_size(h1::MAX_REQUEST_HEAD);
    builder
}

/// `service` as hyper calls it.
fn hyper_service(
    service: Service,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = HttpResponse,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<Output = Result<HttpResponse, std::convert::Infallible>>
                 + Send
                 + 'static,
> + Send
       + 'static {
    hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let service = service.clone();
        let req = req.map(h::boxed);
        async move { Ok(service.call(req, peer).await) }
    })
}

/// Serves one plain HTTP/1 connection as a listener does once it knows the protocol:
/// the `h1` loop, then hyper for what the loop hands over, on this task. For the fuzz
/// target that holds the pair to hyper's server alone.
#[doc(hidden)]
pub async fn serve_http1<I>(io: I, service: Service, header_timeout: Duration)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let stop = CancellationToken::new();
    let peer = SocketAddr::from(([127, 0, 0, 1], 0));
    if let Served::Hyper(io) = h1::serve(io, &service, peer, header_timeout, &stop).await {
        let conn = http1_builder(header_timeout)
            .serve_connection(TokioIo::new(io), hyper_service(service, peer))
            .with_upgrades();
        drive!(conn, stop, peer).await;
    }
}

/// The Prometheus text of `/metrics`.
pub fn metrics_response(handle: &PrometheusHandle) -> HttpResponse {
    let mut resp = h::text(StatusCode::OK, handle.render());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}

/// A TLS acceptor from PEM certificate chain and key files (the config's
/// `tls.cert_file` and `tls.key_file`), offering HTTP/2 and HTTP/1.1 by ALPN.
pub fn tls_acceptor(cert_file: &Path, key_file: &Path) -> Result<TlsAcceptor, TlsError> {
    let (cert_field, key_field) = ("tls.cert_file", "tls.key_file");
    let from = |p: &Path| format!("`{}`", p.display());
    let cert = tls::read_pem(cert_file, cert_field)?;
    let key = tls::read_pem(key_file, key_field)?;
    let key_from = from(key_file);
    identity(
        tls::certs_of(&cert, cert_field, &from(cert_file))?,
        tls::key_of(&key, key_field, &key_from)?,
        key_field,
        &key_from,
    )
}

/// A TLS acceptor from a PEM certificate chain and a PEM private key held in memory,
/// chosen by the config field `field`; errors say the text came from `from`.
pub fn tls_acceptor_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    field: &str,
    from: &str,
) -> Result<TlsAcceptor, TlsError> {
    identity(
        tls::certs_of(cert_pem, field, from)?,
        tls::key_of(key_pem, field, from)?,
        field,
        from,
    )
}

fn identity(
    certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
    field: &str,
    from: &str,
) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::refused(field, from, e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How a plain connection opens.
enum Opening {
    /// HTTP/2 with prior knowledge.
    H2,
    /// HTTP/1, with the path of its first request when that is a GET whose request line
    /// has arrived.
    Http1(Option<String>),
}

/// Peeks at what the client sent first, so the bytes stay for the protocol handler; the
/// path of a GET only when `want_path` (a placement reads it).
async fn opening(stream: &TcpStream, want_path: bool) -> Opening {
    // A request line is seldom longer; a longer one is served where it was accepted.
    let mut buf = vec![0u8; if want_path { 1024 } else { H2_PREFACE.len() }];
    // The HTTP/2 preface nearly always arrives in one segment; a partial one is waited
    // for a little, then the connection is taken as HTTP/1.
    for _ in 0..50 {
        let seen = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return Opening::Http1(None),
            Ok(n) => &buf[..n],
        };
        let common = seen.len().min(H2_PREFACE.len());
        if seen[..common] != H2_PREFACE[..common] {
            return Opening::Http1(want_path.then(|| get_path(seen)).flatten());
        }
        if common == H2_PREFACE.len() {
            return Opening::H2;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    Opening::Http1(None)
}

/// The path of an HTTP/1 GET request line (`GET /path?query HTTP/1.1`), when it is
/// complete and in origin form.
fn get_path(head: &[u8]) -> Option<String> {
    let line = &head[..head.iter().position(|&b| b == b'\n')?];
    if !line.starts_with(b"GET ") {
        return None;
    }
    let target = line.split(|&b| b == b' ').nth(1)?;
    let path = target.split(|&b| b == b'?').next()?;
    if path.first() != Some(&b'/') {
        return None;
    }
    std::str::from_utf8(path).ok().map(str::to_owned)
}

/// `address:port` as binding reads it, bracketing an IPv6 address.
pub fn socket_address(address: &str, port: u16) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// Binds `address`, saying clearly what went wrong when it cannot.
pub async fn bind(address: &str) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e}")))?;
    let addr = listener.local_addr()?;
    info!(address = %addr, "HTTP server listening.");
    Ok((listener, addr))
}

/// Binds `address` so that several listeners (one per worker thread) can share it: the
/// kernel spreads connections over them (`SO_REUSEPORT`).
pub async fn bind_shared(address: &str) -> std::io::Result<(std::net::TcpListener, SocketAddr)> {
    let wrap = |e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e}"))
    };
    let addr = tokio::net::lookup_host(address)
        .await
        .map_err(wrap)?
        .next()
        .ok_or_else(|| wrap(std::io::Error::other("no such address")))?;
    let listener = shared_listener(addr).map_err(wrap)?;
    let addr = listener.local_addr()?;
    info!(address = %addr, "HTTP server listening.");
    Ok((listener, addr))
}

/// One more listener on an address bound with [`bind_shared`].
pub fn shared_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    #[cfg(unix)]
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)?.into_std()
}

#[cfg(test)]
mod tests {
    use super::get_path;

    #[test]
    fn paths_come_from_complete_get_request_lines() {
        let path = |head: &str| get_path(head.as_bytes());
        assert_eq!(
            path("GET /live/events?since=3 HTTP/1.1\r\nHost: x\r\n").as_deref(),
            Some("/live/events")
        );
        assert_eq!(path("GET /p HTTP/1.0\r\n").as_deref(), Some("/p"));
        assert_eq!(path("POST /p HTTP/1.1\r\n"), None);
        // Not yet a whole line, not origin form, not a request.
        assert_eq!(path("GET /live/ev"), None);
        assert_eq!(path("GET http://h/x HTTP/1.1\r\n"), None);
        assert_eq!(path("OPTIONS * HTTP/1.1\r\n"), None);
        assert_eq!(path("\r\n"), None);
        assert_eq!(get_path(b"GET /\xff HTTP/1.1\r\n"), None);
    }
}
