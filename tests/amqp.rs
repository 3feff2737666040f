//! AMQP 0.9.1 connectors against a local RabbitMQ (scripts/brokers.sh).

use crate::common::brokers as common;
use crate::common::tls;

use std::time::Duration;

use common::*;
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

async fn channel() -> lapin::Channel {
    let conn = Connection::connect(URL, ConnectionProperties::default())
        .await
        .expect("RabbitMQ on 5672 (run scripts/brokers.sh)");
    conn.create_channel().await.unwrap()
}

async fn queue_len(queue: &str) -> u32 {
    let ch = channel().await;
    let q = ch
        .queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    q.message_count()
}

#[tokio::test]
async fn exchange_to_queue_round_trip() {
    let _shared = BROKER.read().await;
    let (exchange, queue) = (unique("x"), unique("q"));
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("a", 300);
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    // The producer declares the exchange; the consumer waits for it, then binds its queue.
    let input = lines_file(dir.path(), &sent);
    let consumer = start_in(&format!(
        "input:\n  amqp_0_9:\n    urls: ['{URL}']\n    queue: {queue}\n    queue_declare: {{enabled: true, auto_delete: true}}\n    bindings_declare: [{{exchange: {exchange}, key: 'orders.#'}}]\n    prefetch_count: 16\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    let ch = channel().await;
    ch.exchange_declare(
        &exchange,
        lapin::ExchangeKind::Topic,
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    wait_for("the consumer to bind", Duration::from_secs(20), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let mut producer = start(&format!(
        "input:\n  file:\n    paths: [{}]\noutput:\n  amqp_0_9:\n    urls: ['{URL}']\n    exchange: {exchange}\n    key: orders.created\n    mandatory: true\n    batching: {{count: 20, period: 5ms}}\n",
        input.display()
    ));
    producer.finished().await;
    wait_for("all messages", Duration::from_secs(20), || {
        read_lines(&out).len() == sent.len()
    })
    .await;
    // Everything was acked: nothing is left in the queue.
    assert_eq!(queue_len(&queue).await, 0);
    consumer.stop(Duration::from_secs(5)).await;
    let _ = ch.exchange_delete(&exchange, Default::default()).await;
}

#[tokio::test]
async fn a_failed_delivery_is_not_acknowledged() {
    let _shared = BROKER.read().await;
    let queue = unique("nack");
    let ch = channel().await;
    ch.queue_declare(&queue, Default::default(), FieldTable::default())
        .await
        .unwrap();
    ch.basic_publish(
        "",
        &queue,
        Default::default(),
        b"keep me",
        Default::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    // Every write to a closed port fails: the message must go back to the queue.
    let stream = start(&format!(
        "input:\n  amqp_0_9:\n    urls: ['{URL}']\n    queue: {queue}\n    nack_delay: 10ms\noutput:\n  http_client:\n    url: http://127.0.0.1:1/\n    retries: 0\n"
    ));
    let mut redelivered = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // While the stream holds it the queue looks empty; a requeue makes it visible
        // to a get between deliveries only sometimes, so stop the stream and look.
        if queue_len(&queue).await == 0 {
            redelivered = true;
            break;
        }
    }
    assert!(redelivered, "the stream took the message");
    stream.stop(Duration::from_secs(5)).await;
    let got = ch
        .basic_get(&queue, BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    let got = got.expect("the message is back in the queue after the failed deliveries");
    assert_eq!(got.delivery.data, b"keep me");
    assert!(got.delivery.redelivered);
    let _ = ch.queue_delete(&queue, Default::default()).await;
}

#[tokio::test]
async fn durable_queue_survives_a_broker_restart() {
    let _alone = BROKER.write().await;
    let queue = unique("fault");
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("f", 500);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    let consumer = start_in(&format!(
        "input:\n  amqp_0_9:\n    urls: ['{URL}']\n    queue: {queue}\n    queue_declare: {{enabled: true, durable: true}}\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    wait_for("the consumer", Duration::from_secs(20), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let producer = start_in(&format!(
        "input:\n  file:\n    paths: [{}]\npipeline:\n  processors:\n    - sleep: {{duration: 10ms}}\noutput:\n  amqp_0_9:\n    urls: ['{URL}']\n    key: {queue}\n    persistent: true\n    mandatory: true\n",
        input.display()
    ), &env);
    wait_for("a third of the messages", Duration::from_secs(30), || {
        read_lines(&out).len() >= 150
    })
    .await;
    let guard = BrokerGuard::new("rabbitmq-server", 5672, &["rabbitmq-server", "-detached"]);
    guard.stop();
    wait_for("the stream to notice", Duration::from_secs(20), || {
        !env.readiness.not_ready().is_empty()
    })
    .await;
    guard.restart();
    wait_for(
        "every message after the restart",
        Duration::from_secs(180),
        || read_lines(&out).len() == sent.len(),
    )
    .await;
    assert_eq!(read_lines(&out), sent.iter().cloned().collect());
    producer.stop(Duration::from_secs(5)).await;
    consumer.stop(Duration::from_secs(5)).await;
    let _ = channel()
        .await
        .queue_delete(&queue, Default::default())
        .await;
}

#[tokio::test]
async fn example_amqp_to_file() {
    let _shared = BROKER.read().await;
    let queue = unique("orders");
    let binding = format!("{queue}.#");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("orders.log");
    let mut sluice = Sluice::run_example(
        "amqp_to_file.yaml",
        &[
            ("AMQP_QUEUE", queue.clone()),
            ("AMQP_BINDING", binding),
            ("OUT_FILE", out.display().to_string()),
        ],
    );
    let ch = channel().await;
    // Publish until the example has declared and bound its queue.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while read_lines(&out).is_empty() {
        assert!(sluice.still_running(), "sluice exited");
        assert!(tokio::time::Instant::now() < deadline, "nothing arrived");
        ch.basic_publish(
            "amq.topic",
            &format!("{queue}.created"),
            Default::default(),
            b"order-1",
            Default::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(read_lines(&out).contains("order-1"));
    drop(sluice);
    let _ = ch.queue_delete(&queue, Default::default()).await;
}

/// Debian's RabbitMQ start script that runs the node as the calling user (the one on
/// PATH switches to the rabbitmq user, which cannot read the test's files).
const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ node of the test's own, with a TLS listener only, requiring a client
/// certificate signed by the test CA. Booting it takes some seconds.
fn private_rabbitmq(pki: &tls::Pki) -> tls::Broker {
    let bin = tls::require_bin(RABBITMQ_SERVER, "tls_with_a_client_certificate");
    let dir = pki.dir.path().join("rabbitmq");
    std::fs::create_dir_all(&dir).unwrap();
    let (port, dist_port) = (free_port(), free_port());
    let conf = dir.join("rabbitmq.conf");
    std::fs::write(
        &conf,
        format!(
            "listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\nssl_options.cacertfile = {}\nssl_options.certfile = {}\nssl_options.keyfile = {}\nssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n",
            pki.path("ca.pem"),
            pki.path("server.pem"),
            pki.path("server.key"),
        ),
    )
    .unwrap();
    std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
    let mut cmd = std::process::Command::new(bin);
    let path = |name: &str| dir.join(name).display().to_string();
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
    let log = dir.join("out.log");
    tls::Broker::start(cmd, port, &log, Duration::from_secs(120))
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
            format!("{{amqp_0_9: {{urls: ['{url}'], key: '{queue}', tls: {tls}}}}}"),
            format!(
                "{{amqp_0_9: {{urls: ['{url}'], queue: '{queue}', queue_declare: {{enabled: true}}, tls: {tls}}}}}"
            ),
        )
    };
    // TLS switched on by the block, on an `amqp://` URL.
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let (output, input) = pair(&url, &pki.tls_block(true));
    tls::round_trip(&output, &input).await;
    // An `amqps://` URL, and no check of the server certificate (the system's CAs do not
    // know the test CA, so this connects only if verification is really off).
    let url = format!("amqps://guest:guest@127.0.0.1:{port}/%2f");
    let skip = format!(
        "{{skip_cert_verify: true, client_cert_file: '{}', client_key_file: '{}'}}",
        pki.path("client.pem"),
        pki.path("client.key")
    );
    let (output, input) = pair(&url, &skip);
    tls::round_trip(&output, &input).await;

    // Without a client certificate the broker hangs up.
    let (_, no_cert) = pair(&url, &pki.tls_block(false));
    tls::refused(&no_cert, "cannot connect to AMQP broker").await;
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

/// The depth of `queue` as the lag metric shows it, once it is there.
fn queue_lag(queue: &str) -> Option<f64> {
    let text = sluice::metrics::install().render();
    text.lines()
        .find(|l| {
            l.starts_with("sluice_input_lag_messages{") && l.contains(&format!("topic=\"{queue}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn the_queue_depth_is_the_consumer_lag() {
    let _shared = BROKER.read().await;
    sluice::metrics::install();
    let queue = unique("lag");
    let ch = channel().await;
    ch.queue_declare(&queue, Default::default(), FieldTable::default())
        .await
        .unwrap();
    for i in 0..7 {
        ch.basic_publish(
            "",
            &queue,
            Default::default(),
            format!("m{i}").as_bytes(),
            Default::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    // The output takes nothing: with one message in hand, six or seven wait.
    let stream = start(&format!(
        "input:\n  amqp_0_9:\n    urls: ['{URL}']\n    queue: {queue}\n    prefetch_count: 1\n    nack_delay: 1s\noutput:\n  http_client:\n    url: http://127.0.0.1:1/\n    retries: 0\n"
    ));
    wait_for(
        "the queue's depth",
        Duration::from_secs(30),
        || matches!(queue_lag(&queue), Some(n) if n == 6.0 || n == 7.0),
    )
    .await;
    stream.stop(Duration::from_secs(5)).await;
    let _ = ch.queue_delete(&queue, Default::default()).await;
}
