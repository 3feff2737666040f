//! Event streams over HTTP/1.1 without per-connection buffers.
//!
//! An SSE client holds its connection for hours and sends nothing after its request;
//! ten thousand of them holding a read and a write buffer each (hyper's are 8 KiB apiece)
//! would hold 160 MiB that is never used. A request for an event stream (`GET` with
//! `Accept: text/event-stream`, no body, no upgrade) is therefore answered here, with
//! nothing kept but the connection: the response is written with chunked encoding straight
//! from the body's frames, and the connection closes when it ends.

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::wire::{self, Framing};
use crate::http::HttpResponse;

/// Writes `resp` and ends: with its length when the body has one, chunked otherwise.
/// Ends early when the client goes away.
pub async fn respond<I>(io: &mut I, resp: HttpResponse) -> std::io::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let (parts, mut body) = resp.into_parts();
    let bodiless = wire::no_body(parts.status);
    let (framing, chunked) = match http_body::Body::size_hint(&body).exact() {
        _ if bodiless => (Framing::None, false),
        Some(n) => (Framing::Length(n), false),
        None => (Framing::Chunked, true),
    };
    let mut head = Vec::with_capacity(256);
    // The connection closes after this response.
    wire::encode_head(
        &mut head,
        parts.status,
        &parts.headers,
        framing,
        false,
        true,
    );
    // Nothing of the answer's head is kept while the stream runs.
    drop(parts);
    io.write_all(&head).await?;
    io.flush().await?;
    drop(head);
    if bodiless {
        return Ok(());
    }

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
            wire::write_all_vectored(io, &mut parts).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http as h;

    /// What a client reads of `resp` answered on this path.
    async fn answer(resp: HttpResponse) -> String {
        let (mut client, mut server) = tokio::io::duplex(4096);
        respond(&mut server, resp).await.unwrap();
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

        // 204 tells an event source to stop reconnecting; it has no body to frame.
        let got = answer(h::text(http::StatusCode::NO_CONTENT, "")).await;
        assert!(got.starts_with("HTTP/1.1 204 No Content\r\n"), "{got}");
        assert!(
            !got.contains("content-length") && !got.contains("chunked"),
            "{got}"
        );
        assert!(got.ends_with("connection: close\r\n\r\n"), "{got}");

        let got = answer(h::text(http::StatusCode::UNAUTHORIZED, "no key")).await;
        assert!(got.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{got}");
        assert!(got.contains("content-length: 6\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nno key"), "{got}");
    }
}
