//! Rate limits and quotas shared through the local Redis on 6379 (scripts/brokers.sh
//! starts it). Each test uses its own key prefix, so tests run in parallel and leave
//! nothing that later runs could trip over (keys expire on their own). These tests fail,
//! never skip, when Redis is not there.

use std::time::Duration;

use sluice::limit::{LimitError, Limiter, Rate};

const URL: &str = "redis://127.0.0.1:6379";

fn prefix() -> String {
    format!("sluice-test:{}:", uuid::Uuid::new_v4())
}

async fn limiter(prefix: &str) -> Limiter {
    Limiter::redis(URL, prefix)
        .await
        .expect("Redis on 127.0.0.1:6379 (run scripts/brokers.sh)")
}

fn per_minute(rate: u64) -> Rate {
    Rate::new(rate, Duration::from_secs(60)).unwrap()
}

#[tokio::test]
async fn burst_edge_is_exact() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let l = limiter(&prefix()).await;
    for left in (0..5).rev() {
        let d = l.check_rate("k", per_minute(5)).await.unwrap();
        assert!(d.allowed);
        assert_eq!((d.limit, d.remaining, d.retry_after), (5, left, None));
        let full = Duration::from_secs(12 * (5 - left));
        assert!(d.reset <= full && d.reset > full - Duration::from_secs(1));
    }
    for _ in 0..3 {
        let d = l.check_rate("k", per_minute(5)).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        let wait = d.retry_after.unwrap();
        // About 12s: the wait shrinks only by the moments between the checks.
        assert!(
            wait <= Duration::from_secs(12) && wait > Duration::from_secs(11),
            "{wait:?}"
        );
    }
}

#[tokio::test]
async fn refills_after_one_interval() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let l = limiter(&prefix()).await;
    // 10 per second: one interval is 100ms.
    let rate = Rate::new(10, Duration::from_secs(1)).unwrap();
    for _ in 0..10 {
        assert!(l.check_rate("k", rate).await.unwrap().allowed);
    }
    let refused = l.check_rate("k", rate).await.unwrap();
    assert!(!refused.allowed);
    tokio::time::sleep(refused.retry_after.unwrap()).await;
    let d = l.check_rate("k", rate).await.unwrap();
    assert!(d.allowed, "{d:?}");
    assert!(!l.check_rate("k", rate).await.unwrap().allowed);
}

#[tokio::test]
async fn buckets_are_independent_and_reset_forgets() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let l = limiter(&prefix()).await;
    assert!(l.check_rate("a", per_minute(1)).await.unwrap().allowed);
    assert!(!l.check_rate("a", per_minute(1)).await.unwrap().allowed);
    assert!(l.check_rate("b", per_minute(1)).await.unwrap().allowed);
    let hour = Duration::from_secs(3600);
    assert!(l.check_quota("a", 1, hour).await.unwrap().allowed);
    assert!(!l.check_quota("a", 1, hour).await.unwrap().allowed);

    l.reset("a").await.unwrap();
    assert!(l.check_rate("a", per_minute(1)).await.unwrap().allowed);
    assert!(l.check_quota("a", 1, hour).await.unwrap().allowed);
    assert!(!l.check_rate("b", per_minute(1)).await.unwrap().allowed);
}

#[tokio::test]
async fn quota_counts_refuses_and_renews() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let l = limiter(&prefix()).await;
    let renewal = Duration::from_millis(400);
    for left in (0..3).rev() {
        let d = l.check_quota("k", 3, renewal).await.unwrap();
        assert!(d.allowed);
        assert_eq!((d.limit, d.remaining), (3, left));
        assert!(d.reset <= renewal);
    }
    for _ in 0..5 {
        let d = l.check_quota("k", 3, renewal).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert!(d.retry_after.unwrap() <= renewal);
    }
    let wait = l
        .check_quota("k", 3, renewal)
        .await
        .unwrap()
        .retry_after
        .unwrap();
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let d = l.check_quota("k", 3, renewal).await.unwrap();
    assert!(d.allowed, "{d:?}");
    assert_eq!(d.remaining, 2);
}

#[tokio::test]
async fn idle_rate_keys_expire() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let p = prefix();
    let l = limiter(&p).await;
    let rate = Rate::new(10, Duration::from_secs(1)).unwrap();
    l.check_rate("k", rate).await.unwrap();
    let mut c = redis::Client::open(URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{p}rate:k"))
        .query_async(&mut c)
        .await
        .unwrap();
    // The key lives as long as its TAT runs ahead of now: one interval.
    assert!(ttl > 0 && ttl <= 100, "{ttl}");
}

/// Two limiters with their own connections, like two gateway processes, split 20 checks
/// fired at once: exactly the rate passes.
#[tokio::test]
async fn two_gateways_share_one_exact_rate() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let p = prefix();
    let (a, b) = (limiter(&p).await, limiter(&p).await);
    let checks = (0..20).map(|i| {
        let l = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move { l.check_rate("shared", per_minute(10)).await.unwrap() })
    });
    let decisions = futures::future::join_all(checks).await;
    let allowed = decisions
        .iter()
        .filter(|d| d.as_ref().unwrap().allowed)
        .count();
    assert_eq!(allowed, 10);
    let mut remaining: Vec<u64> = decisions
        .iter()
        .map(|d| d.as_ref().unwrap())
        .filter(|d| d.allowed)
        .map(|d| d.remaining)
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..10).collect::<Vec<_>>());
}

#[tokio::test]
async fn two_gateways_share_one_exact_quota() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let p = prefix();
    let (a, b) = (limiter(&p).await, limiter(&p).await);
    let checks = (0..30).map(|i| {
        let l = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move {
            l.check_quota("shared", 7, Duration::from_secs(60))
                .await
                .unwrap()
        })
    });
    let decisions = futures::future::join_all(checks).await;
    let allowed = decisions
        .iter()
        .filter(|d| d.as_ref().unwrap().allowed)
        .count();
    assert_eq!(allowed, 7);
    // A reset through one gateway is seen by the other.
    a.reset("shared").await.unwrap();
    let d = b
        .check_quota("shared", 7, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 6);
}

/// Different prefixes never share state.
#[tokio::test]
async fn prefixes_separate_state() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let (a, b) = (limiter(&prefix()).await, limiter(&prefix()).await);
    assert!(a.check_rate("k", per_minute(1)).await.unwrap().allowed);
    assert!(b.check_rate("k", per_minute(1)).await.unwrap().allowed);
}

#[tokio::test]
async fn unreachable_redis_fails_in_bounded_time() {
    let _shared = crate::common::brokers::BROKER.read().await;
    // Nothing listens on port 1.
    let started = std::time::Instant::now();
    let err = Limiter::redis_with_timeout("redis://127.0.0.1:1", "x:", Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LimitError::Redis(_) | LimitError::Timeout(_)),
        "{err}"
    );
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        Limiter::redis("not a url", "x:").await,
        Err(LimitError::Redis(_))
    ));
}

/// What the proxy between a limiter and Redis does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Keeps connections open but passes nothing: Redis hangs.
    Stall,
    /// Closes connections: Redis went away.
    Cut,
}

/// A TCP proxy in front of the local Redis whose behaviour the test switches.
async fn proxy() -> (String, tokio::sync::watch::Sender<Mode>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::watch::channel(Mode::Forward);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mut rx = rx.clone();
            tokio::spawn(async move {
                if *rx.borrow() == Mode::Forward {
                    let mut server = tokio::net::TcpStream::connect("127.0.0.1:6379")
                        .await
                        .unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = rx.wait_for(|m| *m != Mode::Forward) => {}
                    }
                }
                if *rx.borrow() == Mode::Stall {
                    // Hold the client's socket open without answering.
                    std::future::pending::<()>().await;
                }
            });
        }
    });
    (url, tx)
}

#[tokio::test]
async fn a_redis_that_goes_away_fails_checks_then_recovers() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let (url, mode) = proxy().await;
    let timeout = Duration::from_millis(300);
    let l = Limiter::redis_with_timeout(&url, &prefix(), timeout)
        .await
        .unwrap();
    assert!(l.check_rate("k", per_minute(100)).await.unwrap().allowed);

    mode.send_replace(Mode::Cut);
    let started = std::time::Instant::now();
    let err = l.check_rate("k", per_minute(100)).await.unwrap_err();
    assert!(
        matches!(err, LimitError::Redis(_) | LimitError::Timeout(_)),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    mode.send_replace(Mode::Forward);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while l.check_rate("k", per_minute(100)).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_redis_that_hangs_times_out() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let (url, mode) = proxy().await;
    let timeout = Duration::from_millis(300);
    let l = Limiter::redis_with_timeout(&url, &prefix(), timeout)
        .await
        .unwrap();
    assert!(
        l.check_quota("k", 5, Duration::from_secs(60))
            .await
            .unwrap()
            .allowed
    );
    mode.send_replace(Mode::Stall);
    let started = std::time::Instant::now();
    let err = l
        .check_quota("k", 5, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LimitError::Timeout(_) | LimitError::Redis(_)),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
