//! The gateway's HTTP/1.1 client to upstreams.
//!
//! A request writes to and reads from its pooled connection from its own task: there is
//! no connection task to hand it to and be woken back from, which is most of what a
//! general-purpose pooled client costs a proxied request beyond the socket calls. Each
//! serving thread keeps its own pool (see `conn`). The wire format is in `wire`, the
//! streamed response body in `body`.

mod body;
mod conn;
mod wire;
mod writer;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::future::{self, Either};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body::Body as _;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use self::body::UpstreamBody;
use self::conn::{Conn, Io, PoolKey, PoolLimits};
use self::wire::{Decoder, Framing, RequestFraming, WireError};
use self::writer::BodyWriter;
use crate::egress::{EgressError, EgressPolicy};
use crate::http::rewind::Rewind;
use crate::http::{self as h, Body};

/// One response as the client reads it from the whole of what a connection carried:
/// the answer to a `method` request (1xx answers before it skipped), its fields without
/// the connection's own, its body by its framing, and the trailers of a chunked one; or
/// why it cannot be read. For the fuzz target that holds this reader to hyper's.
#[doc(hidden)]
pub fn read_response(method: &Method, bytes: &[u8]) -> Result<ReadResponse, String> {
    let mut buf = BytesMut::from(bytes);
    let head = loop {
        let head = wire::parse_head(&mut buf)
            .map_err(|e| e.to_string())?
            .ok_or("the connection ended inside a response head")?;
        if head.status.is_informational() && head.status != StatusCode::SWITCHING_PROTOCOLS {
            continue;
        }
        break head;
    };
    let framing = wire::response_framing(method, &head).map_err(|e| e.to_string())?;
    let mut decoder = Decoder::new(framing);
    let mut body = Vec::new();
    let mut trailers = None;
    loop {
        match decoder.decode(&mut buf).map_err(|e| e.to_string())? {
            wire::Decoded::Data(d) => body.extend_from_slice(&d),
            wire::Decoded::Trailers(t) => trailers = Some(t),
            wire::Decoded::Done => break,
            wire::Decoded::More => {
                decoder.eof().map_err(|e| e.to_string())?;
                break;
            }
        }
    }
    Ok(ReadResponse {
        status: head.status,
        headers: head.headers,
        body,
        trailers,
    })
}

/// What [`read_response`] read.
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadResponse {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<http::HeaderMap>,
}

/// Why an exchange with the upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the upstream: {0}")]
    Connect(#[source] io::Error),
    #[error("cannot connect to the upstream: no connection within {0:?}")]
    ConnectTimeout(Duration),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the upstream closed the connection before answering")]
    Closed,
    #[error("the request body failed: {0}")]
    RequestBody(#[from] RequestBodyError),
    /// The upstream of a posted definition resolved to an address it may not reach.
    #[error("cannot connect to the upstream: {0}")]
    Refused(#[source] EgressError),
}

/// Why the client's request body could not be sent on.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    #[error("shorter than its Content-Length")]
    Short,
    #[error("longer than its Content-Length")]
    Long,
    #[error("{0}")]
    Read(#[source] crate::http::BoxError),
}

/// Where an API's requests go: resolved once, when the API loads.
pub struct Target {
    pub https: bool,
    /// The host to connect to, without IPv6 brackets.
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    /// The same number for the same scheme and authority, whichever API names them: it
    /// files their idle connections together.
    id: u64,
    /// For the upstream of a posted definition: where it may connect. Its name is
    /// resolved and checked (with the port) for each new connection, which goes to
    /// exactly the checked addresses.
    egress: Option<Arc<EgressPolicy>>,
}

impl Target {
    pub fn new(https: bool, authority: &http::uri::Authority) -> Result<Self, String> {
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let server_name = ServerName::try_from(host.clone())
            .map_err(|_| format!("`{host}` is not a valid server name"))?;
        Ok(Target {
            https,
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            host,
            server_name,
            id: upstream_id(https, authority.as_str(), false),
            egress: None,
        })
    }

    /// The same target, connected to only where `policy` allows. Its idle connections
    /// are filed apart from the operator's to the same authority, which were not checked.
    pub fn held_to(mut self, policy: Arc<EgressPolicy>, authority: &str) -> Self {
        self.id = upstream_id(self.https, authority, true);
        self.egress = Some(policy);
        self
    }

    /// The host and port it connects to.
    pub fn host_port(&self) -> (&str, u16) {
        (&self.host, self.port)
    }
}

/// A number per distinct upstream, so that a request finds its pool by a plain integer
/// rather than by a shared string whose reference count every thread would touch.
/// Scheme (https), authority, and whether the egress policy holds it.
type UpstreamKey = (bool, String, bool);

fn upstream_id(https: bool, authority: &str, held: bool) -> u64 {
    static IDS: std::sync::LazyLock<
        parking_lot::Mutex<std::collections::HashMap<UpstreamKey, u64>>,
    > = std::sync::LazyLock::new(Default::default);
    let mut ids = IDS.lock();
    let next = ids.len() as u64;
    *ids.entry((https, authority.to_ascii_lowercase(), held))
        .or_insert(next)
}

/// What follows the response head: its body or, after `101 Switching Protocols`, the
/// connection itself.
pub enum Reply {
    Body(Body),
    Upgraded(Upgraded),
}

/// A request ready to go upstream: its head written out, its body to follow. Made before
/// the exchange starts, so that what the head is made from (the client's fields, the
/// fields the proxy sets) is not kept while the answer is waited for.
pub struct Outbound {
    head: BytesMut,
    method: Method,
    /// `None` for a request without a body.
    body: Option<Body>,
    framing: RequestFraming,
}

impl Outbound {
    /// `target_path` is the request's path and query; `fields` are sent as they are
    /// except for the body's framing, which follows `body`.
    pub fn new<'f>(
        method: Method,
        target_path: &str,
        fields: impl Iterator<Item = (&'f HeaderName, &'f HeaderValue)>,
        body: Body,
    ) -> Self {
        let empty = body.is_end_stream();
        let framing = RequestFraming::of(&method, empty, body.size_hint().exact());
        let mut head = BytesMut::new();
        wire::encode_head(&mut head, &method, target_path, fields, framing);
        Outbound {
            head,
            method,
            body: (!empty).then_some(body),
            framing,
        }
    }
}

/// What an exchange with the upstream ends in: the answer's head and what follows it.
pub type Exchange = Result<(http::response::Parts, Reply), ClientError>;

/// The settings shared by every upstream request of a gateway.
pub struct Client {
    id: usize,
    connect_timeout: Duration,
    limits: PoolLimits,
    tls: tokio_rustls::TlsConnector,
}

static NEXT_CLIENT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Client {
    pub fn new(
        connect_timeout: Duration,
        max_idle_per_host: usize,
        idle_timeout: Duration,
        mut tls: rustls::ClientConfig,
    ) -> Self {
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Client {
            id: NEXT_CLIENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            connect_timeout,
            limits: PoolLimits {
                max_idle: max_idle_per_host,
                idle_timeout,
            },
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        }
    }

    /// Sends a request made by [`Outbound::new`] to `target`. The answer's fields are its
    /// end-to-end ones (see `wire::Head`).
    pub fn send<'a>(
        &'a self,
        target: &'a Target,
        outbound: Outbound,
    ) -> impl std::future::Future<Output = Exchange> + Send + 'a {
        let key = PoolKey {
            client: self.id,
            upstream: target.id,
        };
        let Outbound {
            head,
            method,
            body,
            framing,
        } = outbound;
        let empty = body.is_none();
        // Boxed: the body's writer, and the future that drives it, are only for requests
        // with a body; the others should not carry (and move) their room. The writer
        // takes the head as the start of what it writes.
        let (head, mut writer) = match body {
            Some(body) => (
                BytesMut::new(),
                Some(Box::new(BodyWriter::new(head, body, framing))),
            ),
            None => (head, None),
        };
        async move {
            let now = std::time::Instant::now();
            let mut conn = match conn::checkout(&key, self.limits, now) {
                Some(conn) => conn,
                // Boxed: connecting (a lookup, a TLS handshake) is the largest part of this
                // future and the rarest, and every request's future would otherwise carry
                // its room, moved and touched on each request.
                None => Box::pin(self.connect(target)).await?,
            };
            let (resp, complete) = loop {
                let sent = match writer.as_deref_mut() {
                    None => send_head(&mut conn, &head).await.map(|h| (h, true)),
                    Some(writer) => Box::pin(send_with_body(&mut conn, writer)).await,
                };
                match sent {
                    // An idle connection the upstream closed just before it was taken: a
                    // request with no body can safely go again on a new one.
                    Err(ClientError::Closed | ClientError::Io(_))
                        if conn.reused && empty && method.is_idempotent() =>
                    {
                        conn = Box::pin(self.connect(target)).await?;
                    }
                    other => break other?,
                }
            };
            let framing = wire::response_framing(&method, &resp)?;
            let reuse = complete && wire::reusable(&resp, framing);
            // An answer of success before the whole body: the upstream may still read the
            // rest while it answers (an echo, a transform), so the rest goes on being written
            // as the answer is relayed. A refusal, or an answer that closes, ends the body.
            let unfinished = writer.filter(|_| {
                let refused = resp.status.is_client_error() || resp.status.is_server_error();
                !complete && !refused && wire::keeps_open(&resp)
            });
            let mut parts = http::Response::new(()).into_parts().0;
            parts.status = resp.status;
            parts.version = resp.version;
            parts.headers = resp.headers;
            // The body is re-framed for the client: a length sent beside a transfer coding
            // is not the body's (RFC 9112 6.3).
            if resp.conn.transfer_encoding.is_some() {
                parts.headers.remove(http::header::CONTENT_LENGTH);
            }
            if parts.status == StatusCode::SWITCHING_PROTOCOLS {
                return Ok((
                    parts,
                    Reply::Upgraded(Rewind::new(conn.io, conn.buf.freeze())),
                ));
            }
            let pool = reuse.then_some((key, self.limits));
            let body = match framing {
                Framing::Empty => {
                    if let Some((key, limits)) = pool.filter(|_| conn.buf.is_empty()) {
                        conn::checkin(&key, limits, conn, now);
                    }
                    h::empty()
                }
                // A short body that came with its head: no need to keep the connection.
                Framing::Length(n) if conn.buf.len() as u64 >= n => {
                    let data = conn.buf.split_to(n as usize).freeze();
                    if let Some((key, limits)) = pool.filter(|_| conn.buf.is_empty()) {
                        conn::checkin(&key, limits, conn, now);
                    }
                    h::full(data)
                }
                framing => h::boxed(UpstreamBody::new(
                    conn,
                    Decoder::new(framing),
                    pool,
                    unfinished,
                )),
            };
            Ok((parts, Reply::Body(body)))
        }
    }

    async fn connect(&self, target: &Target) -> Result<Conn, ClientError> {
        let connect = async {
            let tcp = match &target.egress {
                None => TcpStream::connect((target.host.as_str(), target.port)).await?,
                Some(policy) => {
                    let addrs = policy
                        .resolve(&target.host, target.port)
                        .await
                        .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?;
                    TcpStream::connect(&addrs[..]).await?
                }
            };
            tcp.set_nodelay(true)?;
            if !target.https {
                return Ok(Io::Plain(tcp));
            }
            let tls = self.tls.connect(target.server_name.clone(), tcp).await?;
            Ok::<_, io::Error>(Io::Tls(Box::new(tls)))
        };
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(io)) => Ok(Conn::new(io)),
            Ok(Err(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                match e.downcast::<EgressError>() {
                    Ok(refused) => Err(ClientError::Refused(refused)),
                    Err(e) => Err(ClientError::Connect(e)),
                }
            }
            Ok(Err(e)) => Err(ClientError::Connect(e)),
            Err(_) => Err(ClientError::ConnectTimeout(self.connect_timeout)),
        }
    }
}

/// Writes a request with no body and reads the head of its response.
async fn send_head(conn: &mut Conn, head: &[u8]) -> Result<wire::Head, ClientError> {
    conn.io.write_all(head).await?;
    conn.io.flush().await?;
    read_head(&mut conn.io, &mut conn.buf).await
}

/// Writes a request and its body while reading the response head, so that an upstream
/// that refuses before it has read the whole body (say, 413) is heard. Returns whether
/// the whole request was written; when not, what is left stays in `writer`.
async fn send_with_body(
    conn: &mut Conn,
    writer: &mut BodyWriter,
) -> Result<(wire::Head, bool), ClientError> {
    let (mut rd, mut wr) = tokio::io::split(&mut conn.io);
    let write = std::pin::pin!(future::poll_fn(|cx| writer.poll_write_to(&mut wr, cx)));
    let read = std::pin::pin!(read_head(&mut rd, &mut conn.buf));
    match future::select(write, read).await {
        Either::Left((Ok(()), read)) => Ok((read.await?, true)),
        // The client's side failed: the upstream, still waiting for the body, will not
        // answer.
        Either::Left((Err(e @ ClientError::RequestBody(_)), _)) => Err(e),
        // The upstream may have answered and closed: its answer is what counts.
        Either::Left((Err(e), read)) => match read.await {
            Ok(head) => Ok((head, false)),
            Err(_) => Err(e),
        },
        Either::Right((head, _)) => Ok((head?, false)),
    }
}

/// Reads until a whole response head is in `buf`, skipping interim (1xx) answers other
/// than `101 Switching Protocols`.
async fn read_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
) -> Result<wire::Head, ClientError> {
    loop {
        if !buf.is_empty() {
            if let Some(head) = wire::parse_head(buf)? {
                if head.status.is_informational() && head.status != StatusCode::SWITCHING_PROTOCOLS
                {
                    continue;
                }
                return Ok(head);
            }
        }
        buf.reserve(8 * 1024);
        if io.read_buf(buf).await? == 0 {
            return Err(if buf.is_empty() {
                ClientError::Closed
            } else {
                WireError::Head(httparse::Error::Token).into()
            });
        }
    }
}

/// An upstream connection after `101 Switching Protocols`: the bytes already read come
/// first, then the socket.
pub type Upgraded = Rewind<Io>;

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use http_body_util::BodyExt;

    use bytes::Bytes;
    use tokio::net::TcpListener;

    async fn collect(body: Body) -> Bytes {
        body.collect().await.unwrap().to_bytes()
    }

    /// Whether `got` holds a whole request: its head and the body its head announces.
    fn whole_request(got: &[u8]) -> bool {
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let body = &got[end + 4..];
        if head.contains("transfer-encoding: chunked") {
            return body.ends_with(b"0\r\n\r\n");
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        body.len() >= length
    }

    /// A raw upstream that, on every connection, reads once, writes `answer` and closes
    /// the socket after `hold`.
    async fn answering(answer: &'static [u8], hold: Duration) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 4096];
                    let _ = s.read(&mut b).await;
                    let _ = s.write_all(answer).await;
                    tokio::time::sleep(hold).await;
                });
            }
        });
        addr
    }

    /// A raw upstream that answers each connection with the scripted bytes, after
    /// reading one request head, and reports what it read.
    async fn upstream(
        answers: Vec<&'static [u8]>,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for answer in answers {
                let mut got = Vec::new();
                let mut b = [0u8; 4096];
                while !whole_request(&got) {
                    let n = s.read(&mut b).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&b[..n]);
                }
                tx.send(got).unwrap();
                s.write_all(answer).await.unwrap();
            }
        });
        (addr, rx)
    }

    fn client() -> Client {
        let roots = rustls::RootCertStore::empty();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Client::new(Duration::from_secs(2), 4, Duration::from_secs(60), tls)
    }

    fn target(addr: std::net::SocketAddr) -> Target {
        Target::new(false, &addr.to_string().parse().unwrap()).unwrap()
    }

    async fn get(c: &Client, t: &Target) -> (http::response::Parts, Bytes) {
        let (parts, reply) = c
            .send(
                t,
                Outbound::new(Method::GET, "/x?y=1", HeaderMap::new().iter(), h::empty()),
            )
            .await
            .unwrap();
        let Reply::Body(body) = reply else {
            panic!("not a body")
        };
        (parts, collect(body).await)
    }

    #[tokio::test]
    async fn one_connection_carries_requests_in_turn() {
        let (addr, mut seen) = upstream(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ])
        .await;
        let (c, t) = (client(), target(addr));
        let (parts, body) = get(&c, &t).await;
        assert_eq!((parts.status, &body[..]), (StatusCode::OK, &b"hi"[..]));
        assert_eq!(
            seen.recv().await.unwrap(),
            b"GET /x?y=1 HTTP/1.1\r\n\r\n".to_vec()
        );
        let (parts, body) = get(&c, &t).await;
        assert_eq!(
            (parts.status, &body[..]),
            (StatusCode::CREATED, &b"abc"[..])
        );
        let (parts, body) = get(&c, &t).await;
        assert_eq!((parts.status, body.len()), (StatusCode::NO_CONTENT, 0));
    }

    #[tokio::test]
    async fn bodies_are_framed_by_what_the_body_knows() {
        let (addr, mut seen) = upstream(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        ])
        .await;
        let (c, t) = (client(), target(addr));
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, "999".parse().unwrap());
        c.send(
            &t,
            Outbound::new(Method::POST, "/", headers.iter(), h::full("abc")),
        )
        .await
        .unwrap();
        let got = seen.recv().await.unwrap();
        assert_eq!(
            got,
            b"POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc".to_vec()
        );
        let stream = futures::stream::iter(vec![
            Ok::<_, h::BoxError>(http_body::Frame::data(Bytes::from("ab"))),
            Ok(http_body::Frame::data(Bytes::from("c"))),
        ]);
        let body = h::boxed(http_body_util::StreamBody::new(stream));
        c.send(
            &t,
            Outbound::new(Method::PUT, "/", HeaderMap::new().iter(), body),
        )
        .await
        .unwrap();
        let got = seen.recv().await.unwrap();
        assert_eq!(
            got,
            b"PUT / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"
                .to_vec()
        );
    }

    #[tokio::test]
    async fn an_idle_connection_closed_by_the_upstream_is_replaced() {
        // Each connection answers once, then closes without saying so.
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let addr = answering(ok, Duration::ZERO).await;
        let (c, t) = (client(), target(addr));
        for _ in 0..3 {
            assert_eq!(&get(&c, &t).await.1[..], b"ok");
        }
    }

    #[tokio::test]
    async fn a_refusal_before_the_body_is_heard_and_lengths_beside_codings_go() {
        // The socket stays open: the answer alone must end the exchange.
        let refusal = b"HTTP/1.1 413 Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let addr = answering(refusal, Duration::from_secs(30)).await;
        // A body that never ends.
        let endless = futures::stream::pending::<Result<http_body::Frame<Bytes>, h::BoxError>>();
        let body = h::boxed(http_body_util::StreamBody::new(endless));
        let (c, t) = (client(), target(addr));
        let sent = tokio::time::timeout(
            Duration::from_secs(5),
            c.send(
                &t,
                Outbound::new(Method::POST, "/", HeaderMap::new().iter(), body),
            ),
        )
        .await
        .expect("answered without the body")
        .unwrap();
        assert_eq!(sent.0.status, StatusCode::PAYLOAD_TOO_LARGE);

        let (addr, _seen) = upstream(vec![
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
        ])
        .await;
        let (parts, body) = get(&c, &target(addr)).await;
        assert!(!parts.headers.contains_key(http::header::CONTENT_LENGTH));
        assert_eq!(&body[..], b"0123456789");
    }

    #[tokio::test]
    async fn broken_answers_are_errors() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"[..],
            b"garbage\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab",
        ] {
            let addr = answering(answer, Duration::ZERO).await;
            let (c, t) = (client(), target(addr));
            let result = c
                .send(
                    &t,
                    Outbound::new(Method::GET, "/", HeaderMap::new().iter(), h::empty()),
                )
                .await;
            let failed = match result {
                Err(_) => true,
                Ok((_, Reply::Body(body))) => body.collect().await.is_err(),
                Ok((_, Reply::Upgraded(_))) => false,
            };
            assert!(failed, "{:?}", String::from_utf8_lossy(answer));
        }
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_error() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t = target(([127, 0, 0, 1], port).into());
        let err = client()
            .send(
                &t,
                Outbound::new(Method::GET, "/", HeaderMap::new().iter(), h::empty()),
            )
            .await
            .err()
            .unwrap();
        assert!(
            matches!(
                err,
                ClientError::Connect(_) | ClientError::ConnectTimeout(_)
            ),
            "{err}"
        );
    }
}
