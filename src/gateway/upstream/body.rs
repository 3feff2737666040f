//! A response body read from its upstream connection as the client takes it, so that an
//! event stream is relayed event by event. When the body ends cleanly, the connection
//! goes back to its thread's pool.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::conn::{self, Conn, PoolKey, PoolLimits};
use super::wire::{Decoded, Decoder};
use super::writer::BodyWriter;
use crate::http::BoxError;

/// The smallest room made in the read buffer before each read.
const READ_ROOM: usize = 8 * 1024;

pub struct UpstreamBody {
    /// `None` once the body has ended or failed.
    conn: Option<Conn>,
    decoder: Decoder,
    /// Where the connection goes when the body ends, if it may be used again.
    pool: Option<(PoolKey, PoolLimits)>,
    /// The rest of the request, for an upstream that answered before it had it all.
    writer: Option<Box<BodyWriter>>,
}

impl UpstreamBody {
    pub fn new(
        conn: Conn,
        decoder: Decoder,
        pool: Option<(PoolKey, PoolLimits)>,
        writer: Option<Box<BodyWriter>>,
    ) -> Self {
        UpstreamBody {
            conn: Some(conn),
            decoder,
            pool,
            writer,
        }
    }

    /// The body is complete: the connection is free again.
    fn finish(&mut self) {
        if let (Some(conn), Some((key, limits))) = (self.conn.take(), self.pool.take()) {
            // Bytes after the body are not ours to skip: such a connection is closed.
            if conn.buf.is_empty() {
                conn::checkin(&key, limits, conn, std::time::Instant::now());
            }
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let (Some(writer), Some(conn)) = (this.writer.as_mut(), this.conn.as_mut()) {
            match writer.poll_write_to(&mut conn.io, cx) {
                Poll::Pending => {}
                Poll::Ready(Ok(())) => this.writer = None,
                // The upstream stopped reading, or the client's body failed: nothing more
                // is sent, and the answer goes on as far as the upstream takes it.
                Poll::Ready(Err(e)) => {
                    tracing::debug!(error = %e, "The rest of the request body was not sent.");
                    this.writer = None;
                }
            }
        }
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut conn.buf) {
                Ok(Decoded::Data(data)) => {
                    if this.decoder.is_done() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Decoded::Trailers(trailers)) => {
                    this.finish();
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                Ok(Decoded::Done) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Decoded::More) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
            conn.buf.reserve(READ_ROOM);
            match ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut conn.io),
                cx,
                &mut conn.buf
            )) {
                Ok(0) => {
                    this.conn = None;
                    if let Err(e) = this.decoder.eof() {
                        return Poll::Ready(Some(Err(e.into())));
                    }
                    return Poll::Ready(None);
                }
                Ok(_) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
