//! Writing a request's head and body to its upstream, as a state that can be polled from
//! wherever the exchange is: first beside the wait for the response head, then, when the
//! upstream answers success before it has the whole body (an echo, a transform that
//! streams back as it reads), from the response body as the client takes it, so that
//! neither side waits for the other.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use http_body::Body as _;
use tokio::io::AsyncWrite;

use super::wire::RequestFraming;
use super::{ClientError, RequestBodyError};
use crate::http::wire as fields;
use crate::http::Body;

/// The largest run of request body gathered into one write.
const WRITE_BATCH: usize = 64 * 1024;

pub struct BodyWriter {
    body: Body,
    /// Encoded and not yet written: the head first, then body frames as they come.
    out: BytesMut,
    chunked: bool,
    /// The `Content-Length` sent, which the body must match.
    declared: Option<u64>,
    sent: u64,
    /// The body has ended and its last bytes are in `out`.
    ended: bool,
}

impl BodyWriter {
    /// A writer of `head` (the encoded request head) and then `body`.
    pub fn new(head: BytesMut, body: Body, framing: RequestFraming) -> Self {
        BodyWriter {
            body,
            out: head,
            chunked: framing == RequestFraming::Chunked,
            declared: match framing {
                RequestFraming::Length(n) => Some(n),
                _ => None,
            },
            sent: 0,
            ended: false,
        }
    }

    /// Writes what the body has ready, gathering ready frames into one write, until the
    /// whole request is written and flushed. Pending while the body or the socket is.
    /// Safe to stop polling at any point: what is not written stays here.
    pub fn poll_write_to<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ClientError>> {
        loop {
            while !self.ended && self.out.len() < WRITE_BATCH {
                match Pin::new(&mut self.body).poll_frame(cx) {
                    Poll::Pending => break,
                    Poll::Ready(frame) => self.take(frame)?,
                }
            }
            if self.out.is_empty() {
                // All written: done, or waiting for more of the body. Either way the
                // upstream must have what was written (a TLS stream may hold it).
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                return if self.ended {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(
                    std::io::Error::from(std::io::ErrorKind::WriteZero).into()
                ));
            }
            self.out.advance(n);
        }
    }

    /// Encodes one frame of the body, or its end.
    fn take(
        &mut self,
        frame: Option<Result<http_body::Frame<bytes::Bytes>, crate::http::BoxError>>,
    ) -> Result<(), ClientError> {
        let frame = match frame {
            None => {
                if self.declared.is_some_and(|n| self.sent != n) {
                    return Err(RequestBodyError::Short.into());
                }
                if self.chunked {
                    fields::last_chunk(&mut self.out, None);
                }
                self.ended = true;
                return Ok(());
            }
            Some(Err(e)) => return Err(RequestBodyError::Read(e).into()),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                if data.is_empty() {
                    return Ok(());
                }
                self.sent += data.len() as u64;
                if self.declared.is_some_and(|n| self.sent > n) {
                    return Err(RequestBodyError::Long.into());
                }
                if self.chunked {
                    fields::chunk_line(&mut self.out, data.len());
                    self.out.extend_from_slice(&data);
                    self.out.extend_from_slice(b"\r\n");
                } else {
                    self.out.extend_from_slice(&data);
                }
            }
            Err(frame) => {
                if let (true, Ok(trailers)) = (self.chunked, frame.into_trailers()) {
                    fields::last_chunk(&mut self.out, Some(&trailers));
                    self.ended = true;
                }
            }
        }
        Ok(())
    }
}
