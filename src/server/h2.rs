//! HTTP/2 connections, served by hyper, with the limits hyper leaves to its user: a
//! connection that has no stream open for `idle` is closed (as an HTTP/1.1 connection
//! silent between requests is), a peer that stops answering keep-alive pings is dropped,
//! and a closing connection that does not finish (a handshake left half done) is dropped
//! after the same time.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Service;
use crate::http::{self as h, BoxError};

/// Streams open on one connection, and when the last one closed.
struct Activity {
    open: AtomicUsize,
    /// Nanoseconds from `epoch` to when the connection last had no stream open.
    quiet_since: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            open: AtomicUsize::new(0),
            quiet_since: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    fn enter(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        Open(self.clone())
    }

    /// How long the connection has had no stream open (zero while one is).
    fn idle_for(&self) -> Duration {
        if self.open.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let since = Duration::from_nanos(self.quiet_since.load(Ordering::Acquire));
        self.epoch.elapsed().saturating_sub(since)
    }
}

/// One open stream: its request is being answered or its answer still sent.
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        let a = &self.0;
        let now = a.epoch.elapsed().as_nanos() as u64;
        a.quiet_since.store(now, Ordering::Release);
        a.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's body that keeps its stream counted as open until it is sent or dropped
/// (a Server-Sent Events answer stays open for as long as its client listens).
struct Counted {
    inner: h::Body,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves an HTTP/2 connection until it ends, has been idle for `idle`, or `stop`.
pub(super) async fn serve<I>(
    io: I,
    service: Service,
    peer: SocketAddr,
    idle: Duration,
    stop: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new();
    let counting = activity.clone();
    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let open = counting.enter();
        let service = service.clone();
        let req = req.map(h::boxed);
        async move {
            let resp = service.call(req, peer).await;
            Ok::<_, std::convert::Infallible>(
                resp.map(|inner| h::boxed(Counted { inner, _open: open })),
            )
        }
    });
    let conn = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(idle))
        .keep_alive_timeout(idle)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let mut check = tokio::time::interval((idle / 4).max(Duration::from_millis(10)));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    debug!(error = %e, peer = %peer, "Connection ended with an error.");
                }
                return;
            }
            _ = stop.cancelled() => break,
            _ = check.tick() => {
                if activity.idle_for() >= idle {
                    debug!(peer = %peer, "Closing an idle HTTP/2 connection.");
                    break;
                }
            }
        }
    }
    conn.as_mut().graceful_shutdown();
    // Streams under way finish. Shutting down, the process's own deadline bounds the
    // wait; otherwise a peer that never completes the close is dropped.
    if stop.is_cancelled() {
        let _ = conn.await;
    } else {
        let _ = tokio::time::timeout(idle, conn).await;
    }
}
