//! AMQP 1.0 connectors against the local RabbitMQ with its AMQP 1.0 plugin
//! (scripts/brokers.sh enables it). Queues are checked and removed over AMQP 0.9.1.

use crate::common::brokers as common;
use crate::common::relay::Relay;
use crate::common::sink;
use crate::common::tls;

use std::time::Duration;

use common::*;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use sink::Sink;

const URL: &str = "amqp://guest:guest@127.0.0.1:5672";
const URL_091: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

async fn channel() -> lapin::Channel {
    let conn = Connection::connect(URL_091, ConnectionProperties::default())
        .await
        .expect("RabbitMQ on 5672 (run scripts/brokers.sh)");
    conn.create_channel().await.unwrap()
}

/// Messages ready in `queue` (not counting those a consumer holds unsettled).
async fn queue_len(queue: &str) -> u32 {
    channel()
        .await
        .queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count()
}

async fn delete_queue(queue: &str) {
    let _ = channel()
        .await
        .queue_delete(queue, Default::default())
        .await;
}

/// Declares a queue the way the plugin's `/queue/NAME` addresses do (not durable: they
/// refuse a queue declared otherwise), so that a test can publish before any stream
/// attaches.
async fn declare(queue: &str) {
    channel()
        .await
        .queue_declare(queue, QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
}

/// A producer's trace context, which crosses the broker without an include pattern.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn round_trip_with_properties_and_metadata() {
    let _shared = BROKER.read().await;
    let queue = unique("amqp1-rt");
    declare(&queue).await;
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("a", 200);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    let consumer = start_in(
        &format!(
            r#"input:
  amqp_1:
    urls: ['{URL}']
    source_address: /queue/{queue}
    credit: 16
    read_header: true
pipeline:
  processors:
    - mapping: |
        root = [content().string(), meta("tenant"), meta("size").string(), meta("region"),
                meta("amqp_content_type"), meta("amqp_subject"), meta("amqp_durable").string(),
                meta("traceparent")].join("|")
output:
  file:
    path: {}
"#,
            out.display()
        ),
        &env,
    );
    wait_for("the consumer to attach", Duration::from_secs(20), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let mut producer = start(&format!(
        r#"input:
  file:
    paths: [{}]
pipeline:
  processors:
    - mutation: |
        meta region = "eu"
        meta traceparent = "{TRACEPARENT}"
output:
  amqp_1:
    urls: ['{URL}']
    target_address: /queue/{queue}
    persistent: true
    message_properties_content_type: text/plain
    message_properties_subject: '${{! "s-" + content().string() }}'
    metadata: {{include_patterns: ['^region$']}}
    application_properties_map: |
      root.tenant = "acme"
      root.size = content().length()
    max_in_flight: 4
    batching: {{count: 10, period: 5ms}}
"#,
        input.display()
    ));
    producer.finished().await;
    wait_for("every message", Duration::from_secs(30), || {
        read_lines(&out).len() == sent.len()
    })
    .await;
    let expected: std::collections::BTreeSet<String> = sent
        .iter()
        .map(|p| format!("{p}|acme|8|eu|text/plain|s-{p}|true|{TRACEPARENT}"))
        .collect();
    assert_eq!(read_lines(&out), expected);
    consumer.stop(Duration::from_secs(5)).await;
    // Everything was accepted: nothing is left in the queue once the consumer is gone.
    assert_eq!(queue_len(&queue).await, 0);
    delete_queue(&queue).await;
}

#[tokio::test]
async fn a_failed_delivery_is_released_and_delivered_again() {
    let _shared = BROKER.read().await;
    let queue = unique("amqp1-nack");
    declare(&queue).await;
    channel()
        .await
        .basic_publish(
            "",
            &queue,
            BasicPublishOptions::default(),
            b"keep me",
            Default::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // The first three writes fail: each time the message must come back from the broker.
    let sink = Sink::start(vec![1, 2, 3]).await;
    let stream = start(&format!(
        "input:\n  amqp_1:\n    urls: ['{URL}']\n    source_address: /queue/{queue}\n    nack_delay: 10ms\noutput:\n  http_client:\n    url: '{}'\n    retries: 0\n",
        sink.url()
    ));
    wait_for("a successful write", Duration::from_secs(30), || {
        !sink.received.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(*sink.received.lock().unwrap(), vec!["keep me".to_owned()]);
    assert_eq!(
        sink.requests.load(std::sync::atomic::Ordering::SeqCst),
        4,
        "three failed writes, then the one that succeeded"
    );
    stream.stop(Duration::from_secs(5)).await;
    assert_eq!(queue_len(&queue).await, 0, "accepted once delivered");
    delete_queue(&queue).await;
}

#[tokio::test]
async fn a_rejected_message_is_rejected_to_the_broker() {
    let _shared = BROKER.read().await;
    let queue = unique("amqp1-reject");
    declare(&queue).await;
    let ch = channel().await;
    for body in [&b"bad"[..], b"good"] {
        ch.basic_publish("", &queue, Default::default(), body, Default::default())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    // The `bad` message goes to an output that refuses it (its application properties
    // cannot be built), so its outcome is a rejection: the broker drops it (no
    // dead-letter exchange here) instead of delivering it again.
    let stream = start(&format!(
        r#"input:
  amqp_1:
    urls: ['{URL}']
    source_address: /queue/{queue}
output:
  switch:
    cases:
      - check: 'content().string() == "bad"'
        output:
          amqp_1:
            urls: ['{URL}']
            target_address: /queue/{queue}
            application_properties_map: 'root.list = [1, 2]'
      - output:
          file:
            path: {}
"#,
        out.display()
    ));
    wait_for("the good message", Duration::from_secs(20), || {
        read_lines(&out).contains("good")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stream.stop(Duration::from_secs(5)).await;
    assert_eq!(
        queue_len(&queue).await,
        0,
        "the rejected message is not requeued"
    );
    assert_eq!(read_lines(&out).len(), 1);
    delete_queue(&queue).await;
}

#[tokio::test]
async fn refused_and_lost_connections_are_reconnected_without_loss() {
    let _shared = BROKER.read().await;
    let queue = unique("amqp1-fault");
    declare(&queue).await;
    let mut relay = Relay::to(5672);
    let url = format!("amqp://guest:guest@127.0.0.1:{}", relay.port);
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("f", 300);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    // Nothing listens yet: both ends are refused and keep trying.
    let consumer = start_in(&format!(
        "input:\n  amqp_1:\n    urls: ['{url}']\n    source_address: /queue/{queue}\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    let producer = start_in(&format!(
        "input:\n  file:\n    paths: [{}]\npipeline:\n  processors:\n    - sleep: {{duration: 10ms}}\noutput:\n  amqp_1:\n    urls: ['{url}']\n    target_address: /queue/{queue}\n",
        input.display()
    ), &env);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!env.readiness.not_ready().is_empty(), "refused, not ready");
    relay.resume().await;
    wait_for("a third of the messages", Duration::from_secs(60), || {
        read_lines(&out).len() >= 100
    })
    .await;
    relay.cut();
    wait_for("the streams to notice", Duration::from_secs(20), || {
        !env.readiness.not_ready().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.resume().await;
    wait_for(
        "every message after the outage",
        Duration::from_secs(90),
        || read_lines(&out).len() == sent.len(),
    )
    .await;
    assert_eq!(read_lines(&out), sent.iter().cloned().collect());
    producer.stop(Duration::from_secs(5)).await;
    consumer.stop(Duration::from_secs(5)).await;
    relay.cut();
    delete_queue(&queue).await;
}

#[tokio::test]
async fn sasl_mechanisms_and_wrong_credentials() {
    let _shared = BROKER.read().await;
    let queue = unique("amqp1-sasl");
    declare(&queue).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    // PLAIN from the `sasl` block, the URL without credentials.
    let env = sluice::stream::StreamEnv::standalone();
    let consumer = start_in(&format!(
        "input:\n  amqp_1:\n    urls: ['amqp://127.0.0.1:5672']\n    source_address: /queue/{queue}\n    sasl: {{mechanism: plain, user: guest, password: guest}}\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    wait_for("the consumer", Duration::from_secs(20), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    channel()
        .await
        .basic_publish("", &queue, Default::default(), b"hello", Default::default())
        .await
        .unwrap()
        .await
        .unwrap();
    wait_for("the message", Duration::from_secs(20), || {
        read_lines(&out).contains("hello")
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await;

    // A wrong password never connects: once the broker refused it and it tried again
    // (two connections through a relay), it is still not ready.
    let mut relay = Relay::to(5672);
    relay.resume().await;
    let env = sluice::stream::StreamEnv::standalone();
    let refused = start_in(&format!(
        "input:\n  amqp_1:\n    urls: ['amqp://127.0.0.1:{}']\n    source_address: /queue/{queue}\n    sasl: {{mechanism: plain, user: guest, password: wrong}}\noutput:\n  drop: {{}}\n",
        relay.port
    ), &env);
    wait_for("a second attempt", Duration::from_secs(20), || {
        relay.accepted() >= 2
    })
    .await;
    assert!(
        !env.readiness.not_ready().is_empty(),
        "a wrong password connected"
    );
    refused.stop(Duration::from_secs(5)).await;
    relay.cut();
    delete_queue(&queue).await;
}

#[test]
fn bad_configs_do_not_build() {
    let cases = [
        (
            "input:\n  amqp_1:\n    urls: ['amqp://h']\n    source_address: ''\noutput:\n  drop: {}\n",
            "`source_address` is empty",
        ),
        (
            "input:\n  amqp_1:\n    urls: ['amqp://h']\n    source_address: q\n    azure_renew_lock: true\noutput:\n  drop: {}\n",
            "`azure_renew_lock` is not supported",
        ),
        (
            "input:\n  stdin: {}\noutput:\n  amqp_1:\n    urls: ['kafka://h']\n    target_address: q\n",
            "`urls`",
        ),
        (
            "input:\n  stdin: {}\noutput:\n  amqp_1:\n    urls: ['amqp://h']\n    target_address: q\n    sasl: {mechanism: plain}\n",
            "`sasl.user`",
        ),
    ];
    for (yaml, want) in cases {
        let root = sluice::stream::config::parse_str("test.yaml", yaml)
            .unwrap_or_else(|e| panic!("config does not parse: {e:?}\n{yaml}"));
        let (name, config) = root.streams.into_iter().next().expect("one stream");
        let env = sluice::stream::StreamEnv::standalone();
        let err = match sluice::stream::Stream::build(&name, &config, &env) {
            Ok(_) => panic!("built:\n{yaml}"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(want) && err.contains("amqp_1"),
            "{err}\n{yaml}"
        );
    }
}

/// Debian's RabbitMQ start script that runs the node as the calling user (the one on
/// PATH switches to the rabbitmq user, which cannot read the test's files).
const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ node of the test's own with the AMQP 1.0 plugin and a TLS listener only,
/// requiring a client certificate signed by the test CA. Booting it takes some seconds.
fn private_rabbitmq(pki: &tls::Pki) -> tls::Broker {
    let bin = tls::require_bin(RABBITMQ_SERVER, "tls_with_a_client_certificate");
    let dir = pki.dir.path().join("rabbitmq");
    std::fs::create_dir_all(&dir).unwrap();
    let (port, dist_port) = (free_port(), free_port());
    std::fs::write(
        dir.join("rabbitmq.conf"),
        format!(
            "listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\nssl_options.cacertfile = {}\nssl_options.certfile = {}\nssl_options.keyfile = {}\nssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n",
            pki.path("ca.pem"),
            pki.path("server.pem"),
            pki.path("server.key"),
        ),
    )
    .unwrap();
    std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_amqp1_0].\n").unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let mut cmd = std::process::Command::new(bin);
    cmd.env(
        "RABBITMQ_NODENAME",
        format!("{}@localhost", unique("sluice")),
    )
    .env("RABBITMQ_DIST_PORT", dist_port.to_string())
    .env("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf"))
    // A file that does not exist: the system's env file would set the node's name.
    .env("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf"))
    .env("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config"))
    .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
    .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
    .env("RABBITMQ_LOG_BASE", path("log"))
    .env("RABBITMQ_PID_FILE", path("pid"));
    tls::Broker::start(cmd, port, &dir.join("out.log"), Duration::from_secs(120))
}

#[tokio::test]
async fn tls_with_a_client_certificate() {
    let pki = tls::Pki::new();
    let broker = private_rabbitmq(&pki);
    let port = broker.port;
    // A queue per pair: a round trip stops with messages still queued, which must not
    // reach the next one.
    let pair = |url: &str, tls: &str| {
        let queue = unique("tls");
        (
            format!(
                "{{amqp_1: {{urls: ['{url}'], target_address: '/queue/{queue}', tls: {tls}}}}}"
            ),
            format!(
                "{{amqp_1: {{urls: ['{url}'], source_address: '/queue/{queue}', tls: {tls}}}}}"
            ),
        )
    };
    // TLS switched on by the block, on an `amqp://` URL, credentials in the URL.
    let url = format!("amqp://guest:guest@127.0.0.1:{port}");
    let (output, input) = pair(&url, &pki.tls_block(true));
    tls::round_trip(&output, &input).await;
    // An `amqps://` URL, and no check of the server certificate (the system's CAs do not
    // know the test CA, so this connects only if verification is really off).
    let url = format!("amqps://guest:guest@127.0.0.1:{port}");
    let skip = format!(
        "{{skip_cert_verify: true, client_cert_file: '{}', client_key_file: '{}'}}",
        pki.path("client.pem"),
        pki.path("client.key")
    );
    let (output, input) = pair(&url, &skip);
    tls::round_trip(&output, &input).await;

    // Without a client certificate the broker hangs up.
    let (_, no_cert) = pair(&url, &pki.tls_block(false));
    tls::refused(&no_cert, "cannot connect to AMQP 1.0 broker").await;
    // A CA that did not sign the broker's certificate is not trusted.
    let untrusted = format!(
        "{{root_cas_file: '{}', client_cert_file: '{}', client_key_file: '{}'}}",
        pki.path("other-ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key")
    );
    let (_, untrusted) = pair(&url, &untrusted);
    tls::refused(&untrusted, "UnknownIssuer").await;
}
