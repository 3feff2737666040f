//! HTTP/1.1 connections served without hyper, for the requests that make up nearly all
//! traffic: a head with no body or a body of known length, answered and followed by the
//! next request on the same connection.
//!
//! A proxied request costs a gateway little beyond reading one head and writing another,
//! so the connection machinery decides its speed. Here a head is parsed with httparse
//! straight from the connection's read buffer (header values share its bytes), the
//! service answers it on the connection's own task, and the response head goes out in
//! one write together with as much of the body as is ready. The header timeout is one
//! timer per connection, moved forward only when it fires early.
//!
//! Anything else goes to hyper with the rest of the connection, the bytes already read
//! put back in front ([`Rewind`]): an upgrade, `Expect`, a chunked request body, HTTP/1.0,
//! a head that does not parse or is too long (hyper answers those with their errors). A
//! request for an event stream is answered by [`event_stream`](super::event_stream), which
//! keeps no buffers while the stream runs, and ends the connection.

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::wire::{self, Framing};
use super::{event_stream, Service};
use crate::http::rewind::Rewind;
use crate::http::wire as fields;
use crate::http::{self as h, HttpResponse};

/// The longest request head read here; a longer one goes to hyper, which takes heads
/// up to [`MAX_REQUEST_HEAD`] and refuses longer ones (431).
const MAX_HEAD: usize = 16 * 1024;
/// The longest request head either reader takes: one limit for the whole server.
pub const MAX_REQUEST_HEAD: usize = 64 * 1024;
/// Most header lines a request read here may carry; hyper takes one with more, up to its
/// own limit of 100.
const MAX_HEADERS: usize = 64;
/// Room made in the read buffer before each read.
const READ_ROOM: usize = 4 * 1024;
/// Response data up to this much is copied next to the head and sent in the same write;
/// larger pieces are written from where they are.
const COPY_LIMIT: usize = 16 * 1024;

/// What became of a connection.
pub enum Served<I> {
    /// It ended here.
    Closed,
    /// hyper serves the rest of it, reading these bytes first.
    Hyper(Rewind<I>),
}

/// Serves requests on `io` until the client closes, stalls past `header_timeout` before
/// a whole head, asks to close, `stop` is cancelled between requests, or a request comes
/// that hyper must take.
pub async fn serve<I>(
    io: I,
    service: &Service,
    peer: SocketAddr,
    header_timeout: Duration,
    stop: &CancellationToken,
) -> Served<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = Conn {
        io,
        buf: BytesMut::new(),
        out: Vec::new(),
        header_timeout,
        deadline: after(header_timeout),
        timer: Box::pin(tokio::time::sleep(header_timeout)),
    };
    let mut stopped = std::pin::pin!(stop.cancelled());
    loop {
        let incoming = match conn.read_head(stopped.as_mut()).await {
            Next::Request(incoming) => incoming,
            Next::Hyper => return Served::Hyper(Rewind::new(conn.io, conn.buf.freeze())),
            Next::Done => break,
        };
        if incoming.events {
            // An event stream holds its connection for long: nothing of this loop is kept.
            let Conn { mut io, .. } = conn;
            let resp = service.call(incoming.req, peer).await;
            if let Err(e) = event_stream::respond(&mut io, resp).await {
                debug!(error = %e, peer = %peer, "Event stream ended with an error.");
            }
            let _ = io.shutdown().await;
            return Served::Closed;
        }
        match conn.exchange(incoming, service, peer, stop).await {
            // A stop that came meanwhile ends the connection at its next wait for a head
            // (and the answer before that says so).
            Ok(true) => {}
            Ok(_) => break,
            Err(e) => {
                debug!(error = %e, peer = %peer, "Connection ended with an error.");
                return Served::Closed;
            }
        }
    }
    let _ = conn.io.shutdown().await;
    Served::Closed
}

/// One connection's stream and buffers.
struct Conn<I> {
    io: I,
    /// Bytes read and not yet taken: the next head, or body bytes.
    buf: BytesMut,
    /// The response being written; kept between responses for its capacity.
    out: Vec<u8>,
    header_timeout: Duration,
    /// When the head being waited for is late.
    deadline: Instant,
    /// Fires at or before `deadline`.
    timer: Pin<Box<Sleep>>,
}

/// What reading a head came to.
// Built and taken apart once per request: boxing the request would cost an allocation
// each time to save a move.
#[allow(clippy::large_enum_variant)]
enum Next {
    Request(Incoming),
    /// A request this loop does not serve; its bytes are still in the buffer.
    Hyper,
    /// The client closed or stalled, or the gateway stops.
    Done,
}

/// A parsed request and what serving it needs to know of its head.
struct Incoming {
    req: http::Request<h::Body>,
    /// The length of its body (`Content-Length`).
    body_len: u64,
    /// The client asked to close after this request.
    close: bool,
    head: bool,
    /// A `GET` asking for an event stream.
    events: bool,
}

impl<I> Conn<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    /// Waits for a whole request head.
    async fn read_head(
        &mut self,
        mut stopped: Pin<&mut tokio_util::sync::WaitForCancellationFuture<'_>>,
    ) -> Next {
        self.deadline = after(self.header_timeout);
        loop {
            if !self.buf.is_empty() {
                match parse(&mut self.buf) {
                    Parse::Request(incoming) => return Next::Request(incoming),
                    Parse::Other => return Next::Hyper,
                    Parse::Partial => {}
                }
            }
            if self.buf.capacity() - self.buf.len() < READ_ROOM / 4 {
                self.buf.reserve(READ_ROOM);
            }
            let idle = self.buf.is_empty();
            tokio::select! {
                biased;
                read = self.io.read_buf(&mut self.buf) => match read {
                    Ok(0) | Err(_) => return Next::Done,
                    Ok(_) => {}
                },
                _ = self.timer.as_mut() => {
                    if Instant::now() >= self.deadline {
                        return Next::Done;
                    }
                    self.timer.as_mut().reset(self.deadline);
                }
                _ = stopped.as_mut(), if idle => return Next::Done,
            }
        }
    }

    /// Serves one request and writes its response. `Ok(true)` when the connection can
    /// carry another request.
    async fn exchange(
        &mut self,
        incoming: Incoming,
        service: &Service,
        peer: SocketAddr,
        stop: &CancellationToken,
    ) -> std::io::Result<bool> {
        let Incoming {
            mut req,
            body_len,
            close,
            head,
            ..
        } = incoming;
        let mut pump = None;
        if body_len > 0 {
            if self.buf.len() as u64 >= body_len {
                // The whole body came with the head, as small bodies do.
                *req.body_mut() = h::full(self.buf.split_to(body_len as usize).freeze());
            } else {
                let (tx, rx) = mpsc::channel(2);
                *req.body_mut() = h::boxed(RequestBody {
                    rx,
                    remaining: body_len,
                });
                pump = Some(Pump {
                    tx: Some(tx),
                    remaining: body_len,
                });
            }
        }
        let mut call = service.call(req, peer);
        let resp = match pump.as_mut() {
            // A client that closes while its request is served is gone: the service's
            // work is dropped, as hyper drops it (a long poll then takes no message
            // that nobody would receive). What it sends meanwhile is its next request.
            // Only while no later request waits in the buffer: a client may send its
            // requests, close its side and still expect every answer.
            None => loop {
                let watch = self.buf.is_empty();
                tokio::select! {
                    biased;
                    resp = &mut call => break resp,
                    read = self.io.read_buf(&mut self.buf), if watch => match read {
                        Ok(0) => return Err(std::io::ErrorKind::ConnectionAborted.into()),
                        Ok(_) => {}
                        Err(e) => return Err(e),
                    },
                }
            },
            // The body is read as the service takes it.
            Some(pump) => loop {
                tokio::select! {
                    resp = &mut call => break resp,
                    _ = pump.step(&mut self.io, &mut self.buf), if pump.tx.is_some() => {}
                }
            },
        };
        // A service may answer first and read the body while its answer is written (an
        // echo, a proxied upstream that streams back as it reads): the body keeps being
        // read while the answer waits for its next piece. What the service leaves unread
        // is not read past: the connection ends after this response, and whoever still
        // holds the body learns it ends early.
        let mut pump = pump.filter(|p| p.remaining > 0);
        let dropped = pump
            .as_ref()
            .is_some_and(|p| p.tx.as_ref().is_none_or(|tx| tx.is_closed()));
        // A gateway that is stopping says so in its last answer.
        let keep = self
            .respond(
                resp,
                head,
                close || dropped || stop.is_cancelled(),
                pump.as_mut(),
            )
            .await?;
        Ok(keep && pump.is_none_or(|p| p.remaining == 0))
    }

    /// Writes `resp`. `Ok(true)` when the connection can carry another request.
    async fn respond(
        &mut self,
        resp: HttpResponse,
        head_request: bool,
        mut close: bool,
        mut pump: Option<&mut Pump>,
    ) -> std::io::Result<bool> {
        let (mut parts, mut body) = resp.into_parts();
        if parts.status.is_informational() {
            // An interim status cannot be the answer (101 is hyper's, for upgrades): the
            // client would wait for the real one.
            parts.status = StatusCode::INTERNAL_SERVER_ERROR;
            parts.headers.clear();
            body = h::empty();
            close = true;
        }
        let status = parts.status;
        let bodiless = head_request || wire::no_body(status);
        close |= asks_to_close(&parts.headers);
        let sized = http_body::Body::size_hint(&body).exact();
        let framing = if bodiless {
            Framing::None
        } else if http_body::Body::is_end_stream(&body) {
            Framing::Length(0)
        } else {
            sized.map_or(Framing::Chunked, Framing::Length)
        };
        // A HEAD answer tells the length its GET would have, when the service knows it.
        let announced = match sized {
            Some(n)
                if head_request && n > 0 && !parts.headers.contains_key(header::CONTENT_LENGTH) =>
            {
                Framing::Length(n)
            }
            _ => framing,
        };
        self.out.clear();
        wire::encode_head(
            &mut self.out,
            status,
            &parts.headers,
            announced,
            head_request,
            close,
        );
        if bodiless {
            self.write_out().await?;
            return Ok(!close);
        }
        let mut sent: u64 = 0;
        loop {
            let frame = match body.frame().now_or_never() {
                Some(frame) => frame,
                None => {
                    // Not ready: what is gathered goes out while the body is waited for,
                    // and a client that goes away meanwhile is noticed.
                    self.write_out().await?;
                    self.next_frame(&mut body, pump.as_deref_mut()).await?
                }
            };
            match frame {
                None => break,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        sent += data.len() as u64;
                        if let Framing::Length(n) = framing {
                            // Never past the announced length: the client would read the
                            // rest as the next response.
                            if sent > n {
                                return Err(std::io::Error::other(format!(
                                    "the response body ran past the {n} bytes announced"
                                )));
                            }
                        }
                        self.put_data(data, framing).await?;
                    }
                    Err(frame) => {
                        if let (Ok(trailers), Framing::Chunked) = (frame.into_trailers(), framing) {
                            fields::last_chunk(&mut self.out, Some(&trailers));
                            self.write_out().await?;
                            return Ok(!close);
                        }
                    }
                },
            }
        }
        match framing {
            Framing::Length(n) if n != sent => {
                return Err(std::io::Error::other(format!(
                    "the response body was {sent} bytes, not the {n} announced"
                )));
            }
            Framing::Chunked => fields::last_chunk(&mut self.out, None),
            _ => {}
        }
        self.write_out().await?;
        Ok(!close)
    }

    /// Waits for the body's next frame, reading what the client sends meanwhile (its next
    /// request, kept) to notice when it closes; once a next request is in, no more.
    async fn next_frame(
        &mut self,
        body: &mut h::Body,
        mut pump: Option<&mut Pump>,
    ) -> std::io::Result<Option<Result<Frame<Bytes>, h::BoxError>>> {
        loop {
            let pumping = pump.as_ref().is_some_and(|p| p.tx.is_some());
            let watch = self.buf.is_empty() && !pumping;
            if watch && self.buf.capacity() < READ_ROOM / 4 {
                self.buf.reserve(READ_ROOM);
            }
            tokio::select! {
                frame = body.frame() => return Ok(frame),
                read = self.read_meanwhile(pump.as_deref_mut()), if pumping || watch => read?,
            }
        }
    }

    /// What is read while an answer waits: the request body while it is being read (for
    /// a service that reads it while it answers), else what the client sends next.
    async fn read_meanwhile(&mut self, pump: Option<&mut Pump>) -> std::io::Result<()> {
        match pump {
            Some(pump) if pump.tx.is_some() => {
                pump.step(&mut self.io, &mut self.buf).await;
                Ok(())
            }
            _ => match self.io.read_buf(&mut self.buf).await {
                Ok(0) => Err(std::io::ErrorKind::ConnectionAborted.into()),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }

    /// Adds a piece of the body to what goes out, framed as `framing` says.
    async fn put_data(&mut self, data: Bytes, framing: Framing) -> std::io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let chunked = framing == Framing::Chunked;
        if chunked {
            fields::chunk_line(&mut self.out, data.len());
        }
        if self.out.len() + data.len() <= COPY_LIMIT {
            self.out.extend_from_slice(&data);
        } else {
            let out = std::mem::take(&mut self.out);
            let mut parts = [Bytes::from(out), data];
            wire::write_all_vectored(&mut self.io, &mut parts).await?;
            // The buffer's allocation is not reclaimed from `Bytes`; a new one is made
            // only when a response needs it.
        }
        if chunked {
            self.out.extend_from_slice(b"\r\n");
        }
        Ok(())
    }

    /// Writes and flushes what is gathered in `out` (a TLS stream holds bytes until
    /// flushed).
    async fn write_out(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            self.io.write_all(&self.out).await?;
            self.out.clear();
        }
        self.io.flush().await
    }
}

/// `wait` from now; a wait too long to count ends in thirty years.
fn after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

/// Whether `Connection` names `close` (in a value hyper reads: visible ASCII).
fn asks_to_close(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter(|v| fields::visible_ascii(v.as_bytes()))
        .flat_map(|v| fields::tokens(v.as_bytes()))
        .any(|t| t.eq_ignore_ascii_case(b"close"))
}

/// What the front of the read buffer holds.
#[allow(clippy::large_enum_variant)]
enum Parse {
    /// Part of a head.
    Partial,
    /// A head that hyper must serve (or refuse); the buffer is as it was.
    Other,
    /// A request this loop serves; its head has left the buffer.
    Request(Incoming),
}

/// Takes a request head off the front of `buf` when it is whole and one this loop serves.
fn parse(buf: &mut BytesMut) -> Parse {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let len = match parsed.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parse::Partial,
        _ => return Parse::Other,
    };
    if parsed.version != Some(1) {
        return Parse::Other;
    }
    let (Some(method), Some(path)) = (parsed.method, parsed.path) else {
        return Parse::Other;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parse::Other;
    };
    if method == Method::CONNECT {
        return Parse::Other;
    }
    // Names are read while `buf` is borrowed; the path and values then point into the
    // head split off it.
    let base = buf.as_ptr() as usize;
    let range = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        start..start + s.len()
    };
    let path = range(path.as_bytes());
    let mut body_len: Option<u64> = None;
    let mut close = false;
    let mut events = false;
    let mut fields: SmallVec<[(HeaderName, std::ops::Range<usize>); 16]> = SmallVec::new();
    for field in parsed.headers.iter() {
        let Some(name) = fields::field_name(field.name.as_bytes()) else {
            return Parse::Other;
        };
        if name == header::CONTENT_LENGTH {
            match (content_length(field.value), body_len) {
                (Some(n), None) => body_len = Some(n),
                // A repeat of the same length says nothing more: kept once, as hyper
                // keeps it.
                (Some(n), Some(m)) if n == m => continue,
                _ => return Parse::Other,
            }
        } else if name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name == header::EXPECT
        {
            return Parse::Other;
        } else if name == header::CONNECTION && fields::visible_ascii(field.value) {
            for token in fields::tokens(field.value) {
                if token.eq_ignore_ascii_case(b"upgrade") {
                    return Parse::Other;
                }
                close |= token.eq_ignore_ascii_case(b"close");
            }
        } else if name == header::ACCEPT {
            events |= field
                .value
                .windows(17)
                .any(|w| w.eq_ignore_ascii_case(b"text/event-stream"));
        }
        fields.push((name, range(field.value)));
    }
    let body_len = body_len.unwrap_or(0);
    let head = if events {
        // An event stream holds its request for long: its head gets an allocation of its
        // own rather than keep the connection's read buffer alive.
        Bytes::copy_from_slice(&buf.split_to(len))
    } else {
        buf.split_to(len).freeze()
    };
    let Some(req) = request(&head, method, path, fields) else {
        // Put the head back for hyper.
        let mut whole = BytesMut::with_capacity(head.len() + buf.len());
        whole.extend_from_slice(&head);
        whole.extend_from_slice(buf);
        *buf = whole;
        return Parse::Other;
    };
    let head_request = req.method() == Method::HEAD;
    events &= req.method() == Method::GET && body_len == 0;
    Parse::Request(Incoming {
        req,
        body_len,
        close,
        head: head_request,
        events,
    })
}

/// The request of a head whose parts are at these places in `head`.
fn request(
    head: &Bytes,
    method: Method,
    path: std::ops::Range<usize>,
    fields: SmallVec<[(HeaderName, std::ops::Range<usize>); 16]>,
) -> Option<http::Request<h::Body>> {
    let uri = http::Uri::from_maybe_shared(head.slice(path)).ok()?;
    let mut headers = HeaderMap::with_capacity(fields.len());
    for (name, range) in fields {
        headers.append(
            name,
            HeaderValue::from_maybe_shared(head.slice(range)).ok()?,
        );
    }
    let mut req = http::Request::new(h::empty());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    Some(req)
}

/// A `Content-Length` value: digits only, at most 19 of them (a longer one goes to
/// hyper, which refuses it).
fn content_length(value: &[u8]) -> Option<u64> {
    if value.len() > 19 {
        return None;
    }
    fields::decimal(value)
}

/// Moves a request body from the connection to the service as the service takes it.
struct Pump {
    /// `None` once the body is all sent, the service dropped it, or the client failed.
    tx: Option<mpsc::Sender<std::io::Result<Bytes>>>,
    remaining: u64,
}

impl Pump {
    /// Sends the next piece of the body once the service has room for it, reading it
    /// first when the buffer holds none.
    async fn step<I: AsyncRead + Unpin>(&mut self, io: &mut I, buf: &mut BytesMut) {
        let Some(tx) = &self.tx else { return };
        let more = match tx.reserve().await {
            // The service dropped the body.
            Err(_) => false,
            Ok(permit) => {
                let read = if buf.is_empty() {
                    buf.reserve(READ_ROOM.max(self.remaining.min(64 * 1024) as usize));
                    io.read_buf(buf).await
                } else {
                    Ok(buf.len())
                };
                match read {
                    Ok(0) => {
                        permit.send(Err(std::io::ErrorKind::UnexpectedEof.into()));
                        false
                    }
                    Err(e) => {
                        permit.send(Err(e));
                        false
                    }
                    Ok(_) => {
                        let n = (buf.len() as u64).min(self.remaining) as usize;
                        self.remaining -= n as u64;
                        permit.send(Ok(buf.split_to(n).freeze()));
                        self.remaining > 0
                    }
                }
            }
        };
        if !more {
            self.tx = None;
        }
    }
}

/// A request body fed by the connection's [`Pump`].
struct RequestBody {
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
    remaining: u64,
}

/// The client closed before the end of the body it announced, or its request was
/// answered before the body was read.
#[derive(Debug, thiserror::Error)]
#[error("the request body ended {0} bytes short of its Content-Length")]
struct BodyCut(u64);

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = h::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        Poll::Ready(match ready!(self.rx.poll_recv(cx)) {
            Some(Ok(data)) => {
                self.remaining -= data.len() as u64;
                Some(Ok(Frame::data(data)))
            }
            Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Some(Err(BodyCut(self.remaining).into()))
            }
            Some(Err(e)) => Some(Err(e.into())),
            None => Some(Err(BodyCut(self.remaining).into())),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Echoes the request: method, path and body, and `x-echo` back as a header.
    fn echo() -> Service {
        Arc::new(|req: http::Request<h::Body>, _peer| {
            async move {
                let (parts, body) = req.into_parts();
                let body = match body.collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => return h::text(StatusCode::BAD_REQUEST, e.to_string()),
                };
                let text = format!(
                    "{} {} {}",
                    parts.method,
                    parts.uri,
                    String::from_utf8_lossy(&body)
                );
                let mut resp = h::text(StatusCode::OK, text);
                if let Some(v) = parts.headers.get("x-echo") {
                    resp.headers_mut().insert("x-echo", v.clone());
                }
                resp
            }
            .boxed()
        })
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    /// Serves the server end of a pipe with `service`; returns the client end and the
    /// outcome.
    fn start(
        service: Service,
        timeout: Duration,
    ) -> (
        tokio::io::DuplexStream,
        tokio::task::JoinHandle<Served<tokio::io::DuplexStream>>,
        CancellationToken,
    ) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        let task =
            tokio::spawn(async move { serve(server, &service, peer(), timeout, &stopping).await });
        (client, task, stop)
    }

    const LONG: Duration = Duration::from_secs(30);

    /// Reads one response: its head and, by its Content-Length or chunks, its body.
    async fn response(client: &mut tokio::io::DuplexStream) -> (String, String) {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(client.read(&mut byte).await.unwrap(), 1, "{got:?}");
            got.push(byte[0]);
        }
        let head = String::from_utf8(got).unwrap();
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if let Some(i) = lower.find("content-length: ") {
            let n: usize = lower[i + 16..]
                .split("\r\n")
                .next()
                .unwrap()
                .parse()
                .unwrap();
            body.resize(n, 0);
            if !head.starts_with("HTTP/1.1 204") && !lower.contains("x-head: yes") {
                client.read_exact(&mut body).await.unwrap();
            } else {
                body.clear();
            }
        } else if lower.contains("transfer-encoding: chunked") {
            let mut rest = Vec::new();
            while !rest.ends_with(b"\r\n0\r\n\r\n") && rest != b"0\r\n\r\n" {
                assert_eq!(client.read(&mut byte).await.unwrap(), 1);
                rest.push(byte[0]);
            }
            body = rest;
        }
        (head, String::from_utf8(body).unwrap())
    }

    #[tokio::test]
    async fn requests_follow_one_another_on_a_connection() {
        let (mut client, task, _stop) = start(echo(), LONG);
        client
            .write_all(b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\nX-Echo: one\r\n\r\n")
            .await
            .unwrap();
        let (head, body) = response(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("x-echo: one\r\n"), "{head}");
        assert!(head.contains("date: "), "{head}");
        assert!(!head.contains("connection"), "{head}");
        assert_eq!(body, "GET /a?x=1 ");
        // Two more, sent together before either is answered.
        client
            .write_all(b"DELETE /b HTTP/1.1\r\nHost: h\r\n\r\nPOST /c HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
            .await
            .unwrap();
        assert_eq!(response(&mut client).await.1, "DELETE /b ");
        assert_eq!(response(&mut client).await.1, "POST /c hello");
        drop(client);
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn a_body_that_arrives_later_is_read_as_the_service_takes_it() {
        let (mut client, _task, _stop) = start(echo(), LONG);
        client
            .write_all(b"PUT /up HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhel")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        client.write_all(b"lo ").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        client
            .write_all(b"worldGET /next HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut client).await.1, "PUT /up hello world");
        assert_eq!(response(&mut client).await.1, "GET /next ");
    }

    #[tokio::test]
    async fn a_body_cut_short_fails_the_request() {
        let (mut client, task, _stop) = start(echo(), LONG);
        client
            .write_all(b"POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
            .await
            .unwrap();
        client.shutdown().await.unwrap();
        let (head, body) = response(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 400"), "{head}");
        assert!(body.contains("7 bytes short"), "{body}");
        assert!(head.contains("connection: close\r\n"), "{head}");
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn a_service_may_answer_while_it_reads_the_body() {
        // Answers at once with the request body itself: each piece goes back as it comes.
        let stream_back: Service = Arc::new(|req: http::Request<h::Body>, _peer| {
            async move { http::Response::new(req.into_body()) }.boxed()
        });
        let (mut client, task, _stop) = start(stream_back, LONG);
        client
            .write_all(b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
            .await
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(client.read(&mut byte).await.unwrap(), 1);
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("content-length: 10\r\n"), "{head}");
        assert!(!head.contains("connection: close"), "{head}");
        // The first piece comes back before the rest is sent.
        let mut first = [0u8; 3];
        client.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"abc");
        client.write_all(b"defghij").await.unwrap();
        let mut rest = [0u8; 7];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"defghij");
        // The body was read to its end: the connection carries the next request.
        client
            .write_all(b"POST /again HTTP/1.1\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        let (_, body) = response(&mut client).await;
        assert_eq!(body, "ok");
        drop(client);
        // A connection left open would hang here: bounded, so that it fails instead.
        let served = tokio::time::timeout(LONG, task)
            .await
            .expect("the connection ends");
        assert!(matches!(served.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn a_body_left_unread_while_answering_ends_the_connection() {
        // Answers with a body of its own and keeps the request body without reading it.
        let hold: Service = Arc::new(|req: http::Request<h::Body>, _peer| {
            async move {
                let frames = futures::stream::once(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    drop(req);
                    Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"done")))
                });
                http::Response::new(h::boxed(http_body_util::StreamBody::new(frames)))
            }
            .boxed()
        });
        let (mut client, task, _stop) = start(hold, LONG);
        client
            .write_all(b"POST /p HTTP/1.1\r\nContent-Length: 100000\r\n\r\nabc")
            .await
            .unwrap();
        let (head, body) = response(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.contains("done"), "{body}");
        // A connection left open would hang here: bounded, so that it fails instead.
        let served = tokio::time::timeout(LONG, task)
            .await
            .expect("the connection ends");
        assert!(matches!(served.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn an_unread_body_ends_the_connection_after_the_answer() {
        let refuse: Service =
            Arc::new(|_req, _peer| async { h::text(StatusCode::UNAUTHORIZED, "no key") }.boxed());
        let (mut client, task, _stop) = start(refuse, LONG);
        client
            .write_all(b"POST /p HTTP/1.1\r\nContent-Length: 100000\r\n\r\nabc")
            .await
            .unwrap();
        let (head, body) = response(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 401"), "{head}");
        assert!(head.contains("connection: close\r\n"), "{head}");
        assert_eq!(body, "no key");
        assert!(matches!(task.await.unwrap(), Served::Closed));
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_is_chunked_and_the_connection_goes_on() {
        let stream: Service = Arc::new(|_req, _peer| {
            async {
                let frames = futures::stream::iter(vec![
                    Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"ab"))),
                    Ok(Frame::data(Bytes::from(vec![b'x'; 20_000]))),
                ]);
                http::Response::new(h::boxed(http_body_util::StreamBody::new(frames)))
            }
            .boxed()
        });
        let (mut client, _task, _stop) = start(stream, LONG);
        for _ in 0..2 {
            client.write_all(b"GET /s HTTP/1.1\r\n\r\n").await.unwrap();
            let (head, body) = response(&mut client).await;
            assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
            let expected = format!("2\r\nab\r\n4e20\r\n{}\r\n0\r\n\r\n", "x".repeat(20_000));
            assert_eq!(body, expected);
        }
    }

    /// A body that announces 5 bytes and yields 10.
    struct Liar(bool);

    impl http_body::Body for Liar {
        type Data = Bytes;
        type Error = h::BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let first = !std::mem::replace(&mut self.0, true);
            Poll::Ready(first.then(|| Ok(Frame::data(Bytes::from_static(b"0123456789")))))
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(5)
        }
    }

    #[tokio::test]
    async fn an_interim_status_is_not_an_answer() {
        let early: Service = Arc::new(|_req, _peer| {
            async { h::text(StatusCode::from_u16(103).unwrap(), "hints") }.boxed()
        });
        let (mut client, task, _stop) = start(early, LONG);
        client
            .write_all(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let (head, body) = response(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 500 "), "{head}");
        assert!(head.contains("connection: close\r\n"), "{head}");
        assert_eq!(body, "");
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn requests_sent_before_a_half_close_are_all_answered() {
        let (mut client, _task, _stop) = start(echo(), LONG);
        client
            .write_all(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        client.shutdown().await.unwrap();
        assert_eq!(response(&mut client).await.1, "GET /a ");
        assert_eq!(response(&mut client).await.1, "GET /b ");
    }

    #[tokio::test]
    async fn the_answer_during_a_stop_says_the_connection_closes() {
        let stop_here = CancellationToken::new();
        let stopping = stop_here.clone();
        let slow: Service = Arc::new(move |_req, _peer| {
            let stopping = stopping.clone();
            async move {
                stopping.cancel();
                h::text(StatusCode::OK, "done")
            }
            .boxed()
        });
        let (mut client, server) = tokio::io::duplex(4096);
        let task =
            tokio::spawn(async move { serve(server, &slow, peer(), LONG, &stop_here).await });
        client.write_all(b"GET /x HTTP/1.1\r\n\r\n").await.unwrap();
        let (head, body) = response(&mut client).await;
        assert!(head.contains("connection: close\r\n"), "{head}");
        assert_eq!(body, "done");
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn a_body_longer_than_announced_is_not_sent() {
        let liar: Service =
            Arc::new(|_req, _peer| async { http::Response::new(h::boxed(Liar(false))) }.boxed());
        let (mut client, task, _stop) = start(liar, LONG);
        client.write_all(b"GET /x HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(matches!(task.await.unwrap(), Served::Closed));
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let got = String::from_utf8_lossy(&got);
        assert!(!got.contains("56789"), "{got}");
    }

    #[tokio::test]
    async fn head_answers_keep_their_length_and_send_no_body() {
        let sized: Service = Arc::new(|_req, _peer| {
            async {
                let mut resp = http::Response::new(h::empty());
                resp.headers_mut()
                    .insert("content-length", "42".parse().unwrap());
                resp.headers_mut().insert("x-head", "yes".parse().unwrap());
                resp
            }
            .boxed()
        });
        let (mut client, _task, _stop) = start(sized, LONG);
        client
            .write_all(b"HEAD /h HTTP/1.1\r\n\r\nHEAD /h HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        for _ in 0..2 {
            let (head, body) = response(&mut client).await;
            assert!(head.contains("content-length: 42\r\n"), "{head}");
            assert_eq!(body, "");
        }

        // A service that answers HEAD as it answers GET: the length is its body's.
        let (mut client, _task, _stop) = start(echo(), LONG);
        client
            .write_all(b"HEAD /h HTTP/1.1\r\nX-Echo: yes\r\n\r\nGET /after HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            client.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.contains("content-length: 8\r\n"), "{head}");
        assert_eq!(response(&mut client).await.1, "GET /after ");
    }

    #[tokio::test]
    async fn connection_close_is_honoured_both_ways() {
        let (mut client, task, _stop) = start(echo(), LONG);
        client
            .write_all(b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let (head, _) = response(&mut client).await;
        assert!(head.contains("connection: close\r\n"), "{head}");
        assert!(matches!(task.await.unwrap(), Served::Closed));

        let closing: Service = Arc::new(|_req, _peer| {
            async {
                let mut resp = h::text(StatusCode::OK, "bye");
                resp.headers_mut()
                    .insert("connection", "close".parse().unwrap());
                resp
            }
            .boxed()
        });
        let (mut client, task, _stop) = start(closing, LONG);
        client.write_all(b"GET /x HTTP/1.1\r\n\r\n").await.unwrap();
        let (head, _) = response(&mut client).await;
        assert_eq!(head.matches("connection").count(), 1, "{head}");
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn other_requests_go_to_hyper_with_their_bytes() {
        let heads: [&[u8]; 6] = [
            b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"POST /p HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
            b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"GET /old HTTP/1.0\r\n\r\n",
            b"GET /p HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ];
        for bytes in heads {
            let (mut client, task, _stop) = start(echo(), LONG);
            // One request served here first, so the hand-over happens mid-connection.
            client
                .write_all(b"GET /first HTTP/1.1\r\n\r\n")
                .await
                .unwrap();
            assert_eq!(response(&mut client).await.1, "GET /first ");
            client.write_all(bytes).await.unwrap();
            let Served::Hyper(mut rest) = task.await.unwrap() else {
                panic!("served here: {}", String::from_utf8_lossy(bytes));
            };
            let mut got = vec![0u8; bytes.len()];
            rest.read_exact(&mut got).await.unwrap();
            assert_eq!(got, bytes);
        }
    }

    #[tokio::test]
    async fn a_silent_or_slow_client_is_let_go() {
        let short = Duration::from_millis(100);
        let (_client, task, _stop) = start(echo(), short);
        assert!(matches!(task.await.unwrap(), Served::Closed));

        // Served, then silent past the timeout.
        let (mut client, task, _stop) = start(echo(), short);
        client.write_all(b"GET /x HTTP/1.1\r\n\r\n").await.unwrap();
        response(&mut client).await;
        assert!(matches!(task.await.unwrap(), Served::Closed));

        // A head that keeps coming, too slowly.
        let (mut client, task, _stop) = start(echo(), short);
        for piece in [&b"GET /x HTTP/1.1\r\n"[..], b"A: 1\r\n", b"B: 2\r\n"] {
            let _ = client.write_all(piece).await;
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[tokio::test]
    async fn a_client_that_closes_while_served_drops_the_work() {
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        let dropped_tx = Arc::new(std::sync::Mutex::new(Some(dropped_tx)));
        let never: Service = Arc::new(move |_req, _peer| {
            let guard = DropSignal(dropped_tx.lock().unwrap().take());
            async move {
                let _guard = guard;
                futures::future::pending::<HttpResponse>().await
            }
            .boxed()
        });
        let (mut client, task, _stop) = start(never, LONG);
        client
            .write_all(b"GET /poll HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(client);
        assert!(matches!(task.await.unwrap(), Served::Closed));
        dropped_rx.await.unwrap();
    }

    /// Signals when dropped.
    struct DropSignal(Option<tokio::sync::oneshot::Sender<()>>);

    impl Drop for DropSignal {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }

    #[test]
    fn a_huge_timeout_does_not_overflow() {
        assert!(after(Duration::MAX) > Instant::now());
    }

    #[tokio::test]
    async fn stopping_closes_an_idle_connection() {
        let (mut client, task, stop) = start(echo(), LONG);
        client.write_all(b"GET /x HTTP/1.1\r\n\r\n").await.unwrap();
        response(&mut client).await;
        stop.cancel();
        assert!(matches!(task.await.unwrap(), Served::Closed));
    }

    #[test]
    fn content_lengths_are_digits_only() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"1234"), Some(1234));
        for bad in [
            &b""[..],
            b"+5",
            b"-1",
            b"5 ",
            b"1e3",
            b"99999999999999999999",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }
}
