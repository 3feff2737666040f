//! Event streams over HTTP/1.1 without hyper's per-connection buffers.
//!
//! hyper keeps an 8 KiB read buffer and an 8 KiB write buffer for every HTTP/1 connection
//! for as long as it is open. An SSE client holds its connection for hours and sends
//! nothing after its request, so ten thousand of them would hold 160 MiB of buffers that
//! are never used. A connection whose first request asks for an event stream (`GET` with
//! `Accept: text/event-stream`, no body, no upgrade) is therefore read and answered here:
//! its head is parsed with httparse, the same service answers it, and the response is
//! written with chunked encoding straight from the body's frames. The connection closes
//! when the response ends. Every other connection goes to hyper, with the bytes already
//! read put back in front of the stream ([`Rewind`]).

use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::FutureExt;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Service;
use crate::http::{self as h, HttpResponse};

/// Most request-head bytes read here; a longer head goes to hyper, which answers it.
const MAX_HEAD: usize = 16 * 1024;

/// Most headers a request may carry on this path.
const MAX_HEADERS: usize = 64;

/// What became of a connection's first request.
pub enum First<I> {
    /// Answered here; the connection is done.
    Served,
    /// Not an event stream: hyper serves the connection, reading these bytes first.
    Hyper(Rewind<I>),
    /// The client closed, stalled past the header timeout, or failed before a request.
    Gone,
}

/// Reads the first request head of an HTTP/1 connection and serves it here when it asks
/// for an event stream.
/// Once answering, the response runs to its end as hyper's would on `stop`: the stream
/// behind it ends it.
pub async fn serve_first<I>(
    mut io: I,
    service: &Service,
    peer: SocketAddr,
    header_timeout: Duration,
    stop: &CancellationToken,
) -> First<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = Vec::new();
    let head = tokio::select! {
        head = tokio::time::timeout(header_timeout, read_head(&mut io, &mut buf)) => head,
        _ = stop.cancelled() => return First::Gone,
    };
    let request = match head {
        Err(_) | Ok(Err(_)) => return First::Gone,
        Ok(Ok(Head::Eof)) if buf.is_empty() => return First::Gone,
        Ok(Ok(Head::Complete(len, request))) if len == buf.len() => request.map(|r| *r),
        Ok(Ok(_)) => None,
    };
    let Some(req) = request else {
        return First::Hyper(Rewind::new(io, Bytes::from(buf)));
    };
    drop(buf);
    let version = req.version();
    let resp = service(req, peer).await;
    if let Err(e) = respond(&mut io, version, resp).await {
        debug!(error = %e, peer = %peer, "Event stream ended with an error.");
    }
    let _ = io.shutdown().await;
    First::Served
}

enum Head {
    /// The head is complete and this many bytes long; the request when it asks for an
    /// event stream (boxed: this sits in every connection's first task).
    Complete(usize, Option<Box<http::Request<h::Body>>>),
    /// Not a request head this path reads (invalid, or too long).
    Other,
    /// The client closed before a complete head.
    Eof,
}

/// Reads until `buf` holds a complete request head, and never past the read that
/// completed it.
async fn read_head<I: AsyncRead + Unpin>(io: &mut I, buf: &mut Vec<u8>) -> std::io::Result<Head> {
    // Most heads of event-stream requests are a few hundred bytes.
    let mut chunk = [0u8; 1024];
    loop {
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Head::Eof);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(buf) {
            Ok(httparse::Status::Complete(len)) => {
                return Ok(Head::Complete(
                    len,
                    event_stream_request(&parsed).map(Box::new),
                ))
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            _ => return Ok(Head::Other),
        }
    }
}

/// The request of a parsed head when it asks for an event stream and nothing else: `GET`,
/// an `Accept` naming `text/event-stream`, no body, no upgrade.
fn event_stream_request(parsed: &httparse::Request<'_, '_>) -> Option<http::Request<h::Body>> {
    if parsed.method != Some("GET") {
        return None;
    }
    let mut wants_events = false;
    let mut builder = http::Request::builder()
        .method(http::Method::GET)
        .uri(parsed.path?)
        .version(match parsed.version? {
            0 => http::Version::HTTP_10,
            _ => http::Version::HTTP_11,
        });
    for header in parsed.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            if header.value != b"0" {
                return None;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
        {
            return None;
        } else if name.eq_ignore_ascii_case("accept") {
            wants_events |= std::str::from_utf8(header.value)
                .is_ok_and(|v| v.to_ascii_lowercase().contains("text/event-stream"));
        }
        builder = builder.header(name, header.value);
    }
    if !wants_events {
        return None;
    }
    builder.body(h::empty()).ok()
}

/// Writes `resp`: with its length when the body has one, chunked otherwise (or, for an
/// HTTP/1.0 client, until the connection closes). Ends early when the client goes away.
async fn respond<I>(io: &mut I, version: http::Version, resp: HttpResponse) -> std::io::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let (parts, mut body) = resp.into_parts();
    let length = http_body::Body::size_hint(&body).exact();
    let chunked = length.is_none() && version == http::Version::HTTP_11;
    let mut head = Vec::with_capacity(256);
    let status = parts.status;
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        // This path decides the framing and that the connection closes.
        if matches!(
            *name,
            http::header::CONTENT_LENGTH
                | http::header::TRANSFER_ENCODING
                | http::header::CONNECTION
        ) {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !parts.headers.contains_key(http::header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    match (length, chunked) {
        (Some(n), _) => head.extend_from_slice(format!("content-length: {n}\r\n").as_bytes()),
        (None, true) => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        (None, false) => {}
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    io.write_all(&head).await?;
    io.flush().await?;
    drop(head);

    // Bytes the client sends now are not read as requests (the connection closes after
    // this response); reading them tells when the client has gone.
    let mut sink = [0u8; 64];
    let mut parts: Vec<Bytes> = Vec::new();
    let mut ended = false;
    while !ended {
        let first = tokio::select! {
            frame = body.frame() => frame,
            read = io.read(&mut sink) => match read {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => continue,
            },
        };
        // Frames that are ready too go out with the first in one write, as hyper
        // gathers them: under load, one system call carries many events.
        let mut next = Some(first);
        while let Some(frame) = next.take() {
            match frame {
                None => ended = true,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        push_data(&mut parts, data, chunked);
                    }
                    // Trailers: this path sends none.
                    if parts.len() < MAX_PARTS {
                        next = body.frame().now_or_never();
                    }
                }
            }
        }
        if ended && chunked {
            parts.push(Bytes::from_static(b"0\r\n\r\n"));
        }
        if !parts.is_empty() {
            write_all_vectored(io, &mut parts).await?;
            io.flush().await?;
            parts.clear();
        }
    }
    Ok(())
}

/// Most buffers gathered for one write (each chunked frame takes three).
const MAX_PARTS: usize = 192;

/// Adds `data` to what the next write sends, framed as a chunk when `chunked`.
fn push_data(parts: &mut Vec<Bytes>, data: Bytes, chunked: bool) {
    if data.is_empty() {
        return;
    }
    if chunked {
        parts.push(Bytes::from(format!("{:x}\r\n", data.len())));
        parts.push(data);
        parts.push(Bytes::from_static(b"\r\n"));
    } else {
        parts.push(data);
    }
}

/// Writes every part, with as few system calls as the stream allows.
async fn write_all_vectored<I: AsyncWrite + Unpin>(
    io: &mut I,
    parts: &mut [Bytes],
) -> std::io::Result<()> {
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts[first..].iter().map(|p| IoSlice::new(p)).collect();
        let mut n = io.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while first < parts.len() && n >= parts[first].len() {
            n -= parts[first].len();
            first += 1;
        }
        if first < parts.len() {
            parts[first].advance(n);
        }
    }
    Ok(())
}

/// A stream that yields `prefix` before what it reads from `inner`.
pub struct Rewind<I> {
    prefix: Bytes,
    inner: I,
}

impl<I> Rewind<I> {
    pub fn new(inner: I, prefix: Bytes) -> Self {
        Rewind { prefix, inner }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            if self.prefix.is_empty() {
                // Free the head's allocation once it has been handed over.
                self.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event-stream request of a whole head, if it is one.
    fn event_stream_request(head: &[u8]) -> Option<http::Request<h::Body>> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(head) {
            Ok(httparse::Status::Complete(_)) => super::event_stream_request(&parsed),
            _ => None,
        }
    }

    #[test]
    fn only_plain_event_stream_gets_are_taken() {
        let take = |head: &str| event_stream_request(head.as_bytes()).is_some();
        assert!(take(
            "GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        ));
        assert!(take(
            "GET /e?k=1 HTTP/1.1\r\naccept: Text/Event-Stream, */*\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!take("GET /events HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(!take(
            "POST /events HTTP/1.1\r\nAccept: text/event-stream\r\nContent-Length: 2\r\n\r\n"
        ));
        assert!(!take(
            "GET /ws HTTP/1.1\r\nAccept: text/event-stream\r\nUpgrade: websocket\r\n\r\n"
        ));
        assert!(!take(
            "GET /e HTTP/1.1\r\nAccept: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        ));
        assert!(!take(
            "GET /e HTTP/1.1\r\nAccept: text/event-stream\r\nContent-Length: 5\r\n\r\n"
        ));
    }

    #[test]
    fn the_request_keeps_its_target_and_headers() {
        let req = event_stream_request(
            b"GET /live/events?x=1 HTTP/1.1\r\nAccept: text/event-stream\r\nX-Api-Key: k\r\nLast-Event-ID: 7\r\n\r\n",
        )
        .unwrap();
        assert_eq!(req.uri().path(), "/live/events");
        assert_eq!(req.uri().query(), Some("x=1"));
        assert_eq!(req.headers()["x-api-key"], "k");
        assert_eq!(req.headers()["last-event-id"], "7");
        assert_eq!(req.version(), http::Version::HTTP_11);
    }

    #[tokio::test]
    async fn rewind_yields_the_prefix_first() {
        let mut r = Rewind::new(&b" world"[..], Bytes::from_static(b"hello"));
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }

    /// What a client reads of `resp` answered on this path.
    async fn answer(resp: HttpResponse) -> String {
        let (mut client, mut server) = tokio::io::duplex(4096);
        respond(&mut server, http::Version::HTTP_11, resp)
            .await
            .unwrap();
        drop(server);
        let mut got = String::new();
        client.read_to_string(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_stream_is_chunked_and_a_sized_answer_is_not() {
        let frames = futures::stream::iter(vec![
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from_static(
                b"data: a\n\n",
            ))),
            Ok(http_body::Frame::data(Bytes::from_static(b"data: bc\n\n"))),
        ]);
        let body = h::boxed(http_body_util::StreamBody::new(frames));
        let resp = http::Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap();
        let got = answer(resp).await;
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.contains("content-type: text/event-stream\r\n"), "{got}");
        assert!(got.contains("transfer-encoding: chunked\r\n"), "{got}");
        assert!(
            got.ends_with("\r\n\r\n9\r\ndata: a\n\n\r\na\r\ndata: bc\n\n\r\n0\r\n\r\n"),
            "{got}"
        );

        let got = answer(h::text(http::StatusCode::UNAUTHORIZED, "no key")).await;
        assert!(got.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{got}");
        assert!(got.contains("content-length: 6\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nno key"), "{got}");
    }
}
