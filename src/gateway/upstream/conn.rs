//! One connection to an upstream, plain or TLS, with the bytes read from it and not yet
//! used; and the per-thread pool that keeps idle ones.
//!
//! Each serving thread runs its own runtime, so each keeps its own pool: a connection is
//! only ever used on the thread whose reactor it is registered with, and taking or
//! returning one needs no lock.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The socket under a connection.
pub enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An upstream connection and what it has read ahead.
pub struct Conn {
    pub io: Io,
    /// Bytes read and not yet consumed (a head being parsed, body bytes).
    pub buf: BytesMut,
    /// Whether it carried a request before: a failure before any answer may then just
    /// mean the upstream closed it while idle.
    pub reused: bool,
    /// The thread whose pool it may go back to.
    home: u64,
}

impl Conn {
    pub fn new(io: Io) -> Self {
        Conn {
            io,
            buf: BytesMut::with_capacity(8 * 1024),
            reused: false,
            home: thread_id(),
        }
    }

    /// Whether an idle connection still looks usable: nothing arrived while idle (no
    /// close, no stray bytes). Costs no system call unless the socket became readable.
    fn is_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        matches!(
            Pin::new(&mut self.io).poll_read(&mut cx, &mut probe),
            Poll::Pending
        )
    }
}

/// Where idle connections are filed: the client they belong to (its settings) and the
/// upstream (its scheme and authority, as a number).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub client: usize,
    pub upstream: u64,
}

/// How many idle connections to keep per upstream and thread, and for how long.
#[derive(Clone, Copy)]
pub struct PoolLimits {
    pub max_idle: usize,
    pub idle_timeout: Duration,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// One thread's idle connections, and how many check-ins since the last sweep. Filed
/// with a fast hash: the keys are the gateway's own numbers, not a caller's input, and
/// the default hasher's cost showed in every proxied request.
#[derive(Default)]
struct Pool {
    idle: HashMap<PoolKey, VecDeque<Idle>, foldhash::fast::FixedState>,
    checkins: u64,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
}

fn thread_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            id.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        id.get()
    })
}

/// The most recently used idle connection to `key` that is still open. The newest goes
/// first: it is the least likely to have been closed by the upstream. `now` is the
/// caller's reading of the clock (an exchange reads it once for the pool's two steps).
pub fn checkout(key: &PoolKey, limits: PoolLimits, now: Instant) -> Option<Conn> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let idle = pool.idle.get_mut(key)?;
        while let Some(mut entry) = idle.pop_back() {
            if now.saturating_duration_since(entry.since) >= limits.idle_timeout {
                // The rest are older still.
                idle.clear();
                break;
            }
            if entry.conn.is_open() {
                entry.conn.reused = true;
                return Some(entry.conn);
            }
        }
        None
    })
}

/// Files a connection whose last exchange ended cleanly, to be used again. One that
/// was opened on another thread is closed instead.
pub fn checkin(key: &PoolKey, limits: PoolLimits, conn: Conn, now: Instant) {
    if conn.home != thread_id() || limits.max_idle == 0 {
        return;
    }
    let live = |e: &Idle| now.saturating_duration_since(e.since) < limits.idle_timeout;
    POOL.with(|pool| {
        let pool = &mut *pool.borrow_mut();
        let idle = pool.idle.entry(*key).or_default();
        // The oldest go first: past the limit, or past their time (so that an upstream
        // no longer called does not keep its sockets open for ever).
        while idle.len() >= limits.max_idle || idle.front().is_some_and(|e| !live(e)) {
            idle.pop_front();
        }
        idle.push_back(Idle { conn, since: now });
        // Now and then, the other upstreams' expired connections too: one no longer
        // called (its API removed, say) would otherwise keep its sockets.
        pool.checkins = pool.checkins.wrapping_add(1);
        if pool.checkins % SWEEP_EVERY == 0 {
            for idle in pool.idle.values_mut() {
                idle.retain(live);
            }
            pool.idle.retain(|_, idle| !idle.is_empty());
        }
    });
}

/// How many check-ins go between sweeps of the whole pool.
const SWEEP_EVERY: u64 = 4096;

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn pair() -> (Conn, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (Conn::new(Io::Plain(client.unwrap())), server.unwrap().0)
    }

    fn key(upstream: u64) -> PoolKey {
        PoolKey {
            client: usize::MAX,
            upstream,
        }
    }

    const LIMITS: PoolLimits = PoolLimits {
        max_idle: 2,
        idle_timeout: Duration::from_secs(60),
    };

    #[tokio::test]
    async fn the_newest_open_connection_comes_back_out() {
        let (a, _sa) = pair().await;
        let (b, _sb) = pair().await;
        let (c, _sc) = pair().await;
        let port = |c: &Conn| match &c.io {
            Io::Plain(s) => s.local_addr().unwrap().port(),
            Io::Tls(_) => unreachable!(),
        };
        let (pb, pc) = (port(&b), port(&c));
        let k = key(1);
        checkin(&k, LIMITS, a, Instant::now());
        checkin(&k, LIMITS, b, Instant::now());
        // Past max_idle the oldest goes.
        checkin(&k, LIMITS, c, Instant::now());
        let first = checkout(&k, LIMITS, Instant::now()).unwrap();
        assert!(first.reused);
        assert_eq!(port(&first), pc);
        assert_eq!(port(&checkout(&k, LIMITS, Instant::now()).unwrap()), pb);
        assert!(checkout(&k, LIMITS, Instant::now()).is_none());
        assert!(checkout(&key(2), LIMITS, Instant::now()).is_none());
    }

    #[tokio::test]
    async fn connections_closed_or_written_to_while_idle_are_dropped() {
        let k = key(3);
        let (a, sa) = pair().await;
        checkin(&k, LIMITS, a, Instant::now());
        drop(sa);
        let (b, mut sb) = pair().await;
        sb.write_all(b"stray").await.unwrap();
        checkin(&k, LIMITS, b, Instant::now());
        // Let the reactor see both events.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(checkout(&k, LIMITS, Instant::now()).is_none());
    }

    #[tokio::test]
    async fn expired_connections_are_dropped() {
        let k = key(4);
        let (a, _sa) = pair().await;
        let limits = PoolLimits {
            max_idle: 2,
            idle_timeout: Duration::from_millis(10),
        };
        checkin(&k, limits, a, Instant::now());
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(checkout(&k, limits, Instant::now()).is_none());
    }
}
