//! The gateway API's lock-out: wrong secrets counted per client address, so that
//! guessing the secret is slow.

/// Wrong secrets per client address, counted for a minute from the first: guessing the
/// secret costs a minute per `control.failed_secrets_per_minute` tries.
pub struct FailedSecrets {
    per_minute: u32,
    counts: moka::sync::Cache<std::net::IpAddr, std::sync::Arc<std::sync::atomic::AtomicU32>>,
}

impl FailedSecrets {
    pub fn new(per_minute: u32) -> Self {
        FailedSecrets {
            per_minute: per_minute.max(1),
            // Bounded, so that many addresses cannot grow it without end.
            counts: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(std::time::Duration::from_secs(60))
                .build(),
        }
    }

    fn count(&self, ip: std::net::IpAddr) -> std::sync::Arc<std::sync::atomic::AtomicU32> {
        self.counts.get_with(ip, Default::default)
    }

    pub fn locked_out(&self, ip: std::net::IpAddr) -> bool {
        self.counts
            .get(&ip)
            .is_some_and(|n| n.load(std::sync::atomic::Ordering::Relaxed) >= self.per_minute)
    }

    pub fn failed(&self, ip: std::net::IpAddr) {
        self.count(ip)
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
