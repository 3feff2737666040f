//! Accepting connections without letting them take the process down: a cap on open
//! connections shared by all the threads that serve one port, answered cleanly past it,
//! and a wait after a failed accept (descriptors run out) instead of a loop that spins.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How many connections one port holds open at most.
#[derive(Debug)]
pub struct ConnLimit {
    open: AtomicUsize,
    max: usize,
    /// Answers past the cap under way.
    refusing: AtomicUsize,
}

/// Descriptors kept for everything but client connections: upstream connections, the
/// store, brokers, files. A quarter of the limit, and at least this many.
const RESERVED_DESCRIPTORS: usize = 64;

impl ConnLimit {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(ConnLimit {
            open: AtomicUsize::new(0),
            max: max.max(1),
            refusing: AtomicUsize::new(0),
        })
    }

    /// A cap from the process's descriptor limit: three quarters of it, so that client
    /// connections can never take the descriptors the rest of the process needs.
    pub fn from_descriptors() -> Arc<Self> {
        let limit = descriptor_limit().unwrap_or(1024);
        let reserved = (limit / 4).max(RESERVED_DESCRIPTORS);
        Self::new(limit.saturating_sub(reserved).max(16))
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for one more connection, or `None` when all are taken.
    pub fn try_take(self: &Arc<Self>) -> Option<ConnSlot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnSlot(self.clone()))
    }
}

/// A connection's place under the cap, given back when it closes.
#[derive(Debug)]
pub struct ConnSlot(Arc<ConnLimit>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The soft limit on open descriptors (`Max open files` of `/proc/self/limits`).
fn descriptor_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    match soft {
        "unlimited" => Some(1 << 20),
        n => n.parse().ok(),
    }
}

/// Waits after failed accepts. A failure for want of descriptors or memory (the ones that
/// repeat until connections close) waits, doubling from 5 ms up to one second; one that
/// concerns a single connection (reset before it was accepted) needs no wait.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    next: Option<Duration>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_secs(1);

    /// How long to wait before accepting again after `e`.
    pub fn after(&mut self, e: &std::io::Error) -> Option<Duration> {
        use std::io::ErrorKind::*;
        if matches!(
            e.kind(),
            ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
        ) {
            return None;
        }
        let wait = self.next.unwrap_or(Self::FIRST);
        self.next = Some((wait * 2).min(Self::MOST));
        Some(wait)
    }

    /// After an accept that worked.
    pub fn reset(&mut self) {
        self.next = None;
    }
}

/// Answers past the cap under way at once; past them, connections are closed unanswered.
const MAX_REFUSING: usize = 64;

impl ConnLimit {
    /// Answers a plain connection that came past the cap with a 503 and closes it; a TLS
    /// one is closed (an answer would need the handshake the cap is there to spare). At
    /// most [`MAX_REFUSING`] answers are under way, each for at most a second, so that a
    /// flood of refused connections holds few descriptors.
    pub fn refuse(self: &Arc<Self>, stream: TcpStream, tls: bool) {
        if tls {
            return;
        }
        if self.refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let limit = self.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                stream.write_all(busy().as_bytes()).await?;
                stream.shutdown().await?;
                // Read what the client sent until it closes: closing with its request
                // unread would reset the connection and could lose the answer.
                let mut sink = [0u8; 1024];
                while stream.read(&mut sink).await? > 0 {}
                Ok::<_, std::io::Error>(())
            })
            .await;
            limit.refusing.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// The answer past the cap.
fn busy() -> String {
    const BODY: &str = r#"{"error": "too many connections: try again later"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_holds_and_slots_come_back() {
        let limit = ConnLimit::new(2);
        let a = limit.try_take().unwrap();
        let _b = limit.try_take().unwrap();
        assert!(limit.try_take().is_none());
        drop(a);
        assert!(limit.try_take().is_some());
        assert!(ConnLimit::from_descriptors().max() >= 16);
    }

    #[test]
    fn running_out_of_descriptors_waits_longer_and_longer() {
        let mut b = AcceptBackoff::default();
        let emfile = std::io::Error::from_raw_os_error(24);
        let waits: Vec<_> = (0..10).map(|_| b.after(&emfile).unwrap()).collect();
        assert_eq!(waits[0], Duration::from_millis(5));
        assert_eq!(waits[1], Duration::from_millis(10));
        assert_eq!(*waits.last().unwrap(), Duration::from_secs(1));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert_eq!(b.after(&reset), None);
        b.reset();
        assert_eq!(b.after(&emfile), Some(Duration::from_millis(5)));
    }
}
