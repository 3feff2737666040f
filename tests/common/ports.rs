//! A loopback port for a server a test starts.
//!
//! Ports are taken below the kernel's ephemeral range: a port from that range (what binding
//! port 0 gives) can be handed to any outgoing connection between the moment it is probed
//! and the moment the server binds it, and a broker that then fails to bind breaks its test.

/// A loopback port free right now, below the ephemeral range.
pub fn free_port() -> u16 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral.max(12_000));
    let seed = std::collections::hash_map::RandomState::new();
    for _ in 0..1000 {
        let draw = seed.hash_one(DRAWS.fetch_add(1, Ordering::Relaxed));
        let port = low + (draw % u64::from(high - low)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {low} and {high}");
}
