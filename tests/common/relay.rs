//! A TCP relay in front of a local service: `cut` drops every connection and refuses new
//! ones, as the service going down would, and `resume` accepts again on the same port.
//! Tests point a client at the relay to take the service away from it alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub struct Relay {
    pub port: u16,
    target: u16,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
}

impl Relay {
    /// A relay to the loopback port `target`, not yet accepting.
    pub fn to(target: u16) -> Relay {
        Relay {
            port: super::free_port(),
            target,
            task: None,
            accepted: Default::default(),
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub async fn resume(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("bind the relay's port");
        let (accepted, target) = (self.accepted.clone(), self.target);
        self.task = Some(tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every relayed connection.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                conns.spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    pub fn cut(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}
