//! Redis streams and pub/sub connectors against a local Redis (scripts/brokers.sh).

use crate::common::brokers as common;
use crate::common::tls;

use std::time::Duration;

use common::*;
use redis::AsyncCommands;

const URL: &str = "redis://127.0.0.1:6379";

async fn conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis on 6379 (run scripts/brokers.sh)")
}

#[tokio::test]
async fn streams_round_trip_and_ack() {
    let _shared = BROKER.read().await;
    let key = unique("stream");
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("r", 400);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let mut producer = start(&format!(
        "input:\n  file:\n    paths: [{}]\noutput:\n  redis_streams:\n    url: {URL}\n    stream: {key}\n    batching: {{count: 50, period: 5ms}}\n",
        input.display()
    ));
    producer.finished().await;
    let mut c = conn().await;
    let len: usize = c.xlen(&key).await.unwrap();
    assert_eq!(len, sent.len());
    let consumer = start(&format!(
        "input:\n  redis_streams:\n    url: {URL}\n    streams: [{key}]\n    consumer_group: g\n    client_id: c1\noutput:\n  file:\n    path: {}\n",
        out.display()
    ));
    wait_for("all entries", Duration::from_secs(20), || {
        read_lines(&out).len() == sent.len()
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await;
    let pending: redis::streams::StreamPendingReply = c.xpending(&key, "g").await.unwrap();
    assert_eq!(pending.count(), 0, "every entry was acknowledged");
    let _: () = c.del(&key).await.unwrap();
}

#[tokio::test]
async fn entries_a_dead_consumer_left_pending_are_claimed() {
    let _shared = BROKER.read().await;
    let key = unique("stream");
    let mut c = conn().await;
    let sent = payloads("d", 30);
    for p in &sent {
        let _: String = c.xadd(&key, "*", &[("body", p)]).await.unwrap();
    }
    // A consumer of the group takes every entry and dies without acknowledging any.
    let _: () = c.xgroup_create(&key, "g", "0").await.unwrap();
    let opts = redis::streams::StreamReadOptions::default()
        .group("g", "dead")
        .count(100);
    let taken: redis::streams::StreamReadReply =
        c.xread_options(&[&key], &[">"], &opts).await.unwrap();
    assert_eq!(taken.keys[0].ids.len(), sent.len());

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let consumer = start(&format!(
        "input:\n  redis_streams:\n    url: {URL}\n    streams: [{key}]\n    consumer_group: g\n    client_id: alive\n    limit: 7\n    timeout: 100ms\n    claim_idle_after: 300ms\noutput:\n  file:\n    path: {}\n",
        out.display()
    ));
    wait_for("the stranded entries", Duration::from_secs(20), || {
        read_lines(&out).len() == sent.len()
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await;
    assert_eq!(read_lines(&out), sent.iter().cloned().collect());
    let pending: redis::streams::StreamPendingReply = c.xpending(&key, "g").await.unwrap();
    assert_eq!(pending.count(), 0, "claimed entries were acknowledged");
    let _: () = c.del(&key).await.unwrap();
}

#[tokio::test]
async fn pubsub_round_trip() {
    let _shared = BROKER.read().await;
    let channel = unique("chan");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    let stream = start_in(&format!(
        "input:\n  redis_pubsub:\n    url: {URL}\n    channels: ['{channel}.in.*']\n    use_patterns: true\noutput:\n  redis_pubsub:\n    url: {URL}\n    channel: {channel}.copy\n",
    ), &env);
    // Check through a second stream that writes the copies to a file.
    let sink = start_in(&format!(
        "input:\n  redis_pubsub:\n    url: {URL}\n    channels: ['{channel}.copy']\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    wait_for("subscribed", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let mut c = conn().await;
    // Pub/sub keeps nothing: publish until the subscriptions are live.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    while read_lines(&out).len() < 5 {
        let _: i64 = c
            .publish(format!("{channel}.in.{i}"), format!("p-{i}"))
            .await
            .unwrap();
        i += 1;
        assert!(tokio::time::Instant::now() < deadline, "no copy arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(read_lines(&out).iter().all(|l| l.starts_with("p-")));
    stream.stop(Duration::from_secs(5)).await;
    sink.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn streams_input_reconnects_after_a_restart() {
    let _alone = BROKER.write().await;
    let key = unique("fault");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    let consumer = start_in(&format!(
        "input:\n  redis_streams:\n    url: {URL}\n    streams: [{key}]\n    consumer_group: g\n    client_id: c1\n    timeout: 200ms\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    wait_for("the consumer", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let first = payloads("before", 200);
    let mut c = conn().await;
    for p in &first {
        let _: String = c.xadd(&key, "*", &[("body", p)]).await.unwrap();
    }
    wait_for("the first half", Duration::from_secs(20), || {
        read_lines(&out).len() == first.len()
    })
    .await;
    let guard = BrokerGuard::new(
        "redis-server",
        6379,
        &[
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
    );
    guard.stop();
    wait_for("the stream to notice", Duration::from_secs(20), || {
        !env.readiness.not_ready().is_empty()
    })
    .await;
    guard.restart();
    // Redis here keeps nothing across a restart: the second half is sent after it, and
    // must reach the output once the input has reconnected and recreated its group.
    wait_for("the input to reconnect", Duration::from_secs(30), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let second = payloads("after", 200);
    let mut c = conn().await;
    for p in &second {
        let _: String = c.xadd(&key, "*", &[("body", p)]).await.unwrap();
    }
    wait_for("every message", Duration::from_secs(30), || {
        read_lines(&out).len() == first.len() + second.len()
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await;
    let _: () = c.del(&key).await.unwrap();
}

/// The outputs and inputs of the TLS round trips: a stream and a pub/sub channel.
fn redis_pairs(url: &str, key: &str, tls: &str) -> [(String, String); 2] {
    [
        (
            format!("{{redis_streams: {{url: '{url}', stream: '{key}', tls: {tls}}}}}"),
            format!(
                "{{redis_streams: {{url: '{url}', streams: ['{key}'], consumer_group: g, tls: {tls}}}}}"
            ),
        ),
        (
            format!("{{redis_pubsub: {{url: '{url}', channel: '{key}', tls: {tls}}}}}"),
            format!("{{redis_pubsub: {{url: '{url}', channels: ['{key}'], tls: {tls}}}}}"),
        ),
    ]
}

/// A redis-server of the test's own with only a TLS port, which requires a client
/// certificate signed by the test CA.
#[tokio::test]
async fn tls_with_a_client_certificate() {
    let test = "tls_with_a_client_certificate";
    let bin = tls::require_bin("redis-server", test);
    let pki = tls::Pki::new();
    let port = free_port();
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--tls-cert-file", &pki.path("server.pem")])
        .args(["--tls-key-file", &pki.path("server.key")])
        .args(["--tls-ca-cert-file", &pki.path("ca.pem")])
        .args(["--tls-auth-clients", "yes"]);
    let log = pki.dir.path().join("redis.log");
    let _broker = tls::Broker::start(cmd, port, &log, Duration::from_secs(20));

    // TLS switched on by the block, on a `redis://` URL.
    let url = format!("redis://127.0.0.1:{port}");
    for (output, input) in redis_pairs(&url, &unique("tls"), &pki.tls_block(true)) {
        tls::round_trip(&output, &input).await;
    }
    // A `rediss://` URL, and no check of the server certificate (the system's CAs do
    // not know the test CA, so this connects only if verification is really off).
    let url = format!("rediss://127.0.0.1:{port}");
    let skip = format!(
        "{{skip_cert_verify: true, client_cert_file: '{}', client_key_file: '{}'}}",
        pki.path("client.pem"),
        pki.path("client.key")
    );
    for (output, input) in redis_pairs(&url, &unique("skip"), &skip) {
        tls::round_trip(&output, &input).await;
    }

    let input = |tls: &str| {
        format!("{{redis_streams: {{url: '{url}', streams: [k], consumer_group: g, tls: {tls}}}}}")
    };
    // Without a client certificate the server refuses the handshake.
    tls::refused(&input(&pki.tls_block(false)), "CertificateRequired").await;
    // A CA that did not sign the server's certificate is not trusted.
    let untrusted = format!(
        "{{root_cas_file: '{}', client_cert_file: '{}', client_key_file: '{}'}}",
        pki.path("other-ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key")
    );
    tls::refused(&input(&untrusted), "UnknownIssuer").await;
}
