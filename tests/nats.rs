//! NATS core and JetStream connectors against a local nats-server (scripts/brokers.sh).

use crate::common::brokers as common;
use crate::common::sink;
use crate::common::tls;

use std::time::Duration;

use async_nats::jetstream;
use common::*;
use futures::StreamExt;

const URL: &str = "nats://127.0.0.1:4222";

/// Where the shared server's pid is kept (scripts/brokers.sh writes it too).
const NATS_PID_FILE: &str = "/var/lib/nats-server/nats-server.pid";

async fn client() -> async_nats::Client {
    async_nats::connect(URL)
        .await
        .expect("nats-server on 4222 (run scripts/brokers.sh)")
}

async fn create_stream(name: &str, subject: &str) -> jetstream::Context {
    let client = client().await;
    // Another NATS server can hold the port (Debian's own service runs one without
    // JetStream): said here, not as a stream that cannot be created.
    assert!(
        client.server_info().jetstream,
        "the NATS server on 4222 runs without JetStream (run scripts/brokers.sh)"
    );
    let js = jetstream::new(client);
    js.create_stream(jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        ..Default::default()
    })
    .await
    .expect("create stream");
    js
}

#[tokio::test]
async fn core_bridge_keeps_headers_as_metadata() {
    let _shared = BROKER.read().await;
    let (a, b) = (unique("in"), unique("out"));
    let c = client().await;
    let mut out = c.subscribe(b.clone()).await.unwrap();
    let stream = start(&format!(
        "input:\n  nats:\n    urls: [{URL}]\n    subject: {a}\noutput:\n  nats:\n    urls: [{URL}]\n    subject: {b}\n    metadata:\n      include_patterns: ['^x-', '^nats_subject$']\n"
    ));
    // The subscription is made in the background: publish until the bridge is up.
    let mut seen = std::collections::BTreeSet::new();
    let sent = payloads("m", 20);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < sent.len() {
        for p in &sent {
            if !seen.contains(p) {
                let mut h = async_nats::HeaderMap::new();
                h.insert("x-id", p.as_str());
                c.publish_with_headers(a.clone(), h, p.clone().into())
                    .await
                    .unwrap();
            }
        }
        c.flush().await.unwrap();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), out.next()).await {
            let body = String::from_utf8_lossy(&m.payload).into_owned();
            let h = m.headers.expect("headers");
            assert_eq!(h.get("x-id").map(|v| v.as_str()), Some(body.as_str()));
            assert_eq!(h.get("nats_subject").map(|v| v.as_str()), Some(a.as_str()));
            seen.insert(body);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "bridge delivered {} of 20",
            seen.len()
        );
    }
    stream.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_batch_that_fails_midway_is_sent_again_whole() {
    let _shared = BROKER.read().await;
    let subject = unique("midway");
    let c = client().await;
    // Request 100 fails in the middle of a batch of buffered messages; the runtime sends
    // that batch again from its first message, so every message arrives.
    let sink = sink::Sink::start(vec![100]).await;
    let stream = start(&format!(
        "input:\n  nats:\n    urls: [{URL}]\n    subject: {subject}\n    max_batch: 500\noutput:\n  http_client: {{url: '{}', retries: 0, max_in_flight: 1}}\n",
        sink.url()
    ));
    // The subscription is made in the background: probe until the first message lands.
    wait_for_async("the subscription", || async {
        c.publish(subject.clone(), "probe".into()).await.unwrap();
        c.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        sink.bodies().iter().any(|b| b == "probe")
    })
    .await;
    let sent = payloads("m", 300);
    for p in &sent {
        c.publish(subject.clone(), p.clone().into()).await.unwrap();
    }
    c.flush().await.unwrap();
    wait_for("every message at the sink", Duration::from_secs(30), || {
        let got: std::collections::BTreeSet<_> = sink.bodies().into_iter().collect();
        sent.iter().all(|p| got.contains(p))
    })
    .await;
    let got = sink.bodies();
    assert!(
        got.len() > sent.len() + 1,
        "the failed batch was not sent again: {}",
        got.len()
    );
    stream.stop(Duration::from_secs(5)).await;
}

/// Runs `probe` until it says yes, for up to 20 seconds.
async fn wait_for_async<F: std::future::Future<Output = bool>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !probe().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
    }
}

#[tokio::test]
async fn queue_group_members_share_the_messages() {
    let _shared = BROKER.read().await;
    let subject = unique("q");
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<_> = (0..2)
        .map(|i| dir.path().join(format!("out{i}.txt")))
        .collect();
    let env = sluice::stream::StreamEnv::standalone();
    let streams: Vec<_> = files
        .iter()
        .map(|f| {
            start_in(
                &format!(
                    "input:\n  nats:\n    urls: [{URL}]\n    subject: {subject}\n    queue: workers\noutput:\n  file:\n    path: {}\n",
                    f.display()
                ),
                &env,
            )
        })
        .collect();
    wait_for("both members subscribed", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let c = client().await;
    let sent = payloads("q", 200);
    for p in &sent {
        c.publish(subject.clone(), p.clone().into()).await.unwrap();
    }
    c.flush().await.unwrap();
    wait_for("all messages", Duration::from_secs(10), || {
        files.iter().map(|f| read_lines(f).len()).sum::<usize>() >= sent.len()
    })
    .await;
    let (x, y) = (read_lines(&files[0]), read_lines(&files[1]));
    assert!(
        x.is_disjoint(&y),
        "a queue group delivers each message once"
    );
    assert_eq!(x.union(&y).count(), sent.len());
    for s in streams {
        s.stop(Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn jetstream_round_trip_with_durable_consumer() {
    let _shared = BROKER.read().await;
    let name = unique("S").replace('-', "_");
    let subject = format!("{name}.in");
    let js = create_stream(&name, &format!("{name}.>")).await;
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("js", 500);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let mut producer = start(&format!(
        "input:\n  file:\n    paths: [{}]\noutput:\n  nats_jetstream:\n    urls: [{URL}]\n    subject: {subject}\n    batching: {{count: 50, period: 5ms}}\n",
        input.display()
    ));
    producer.finished().await;
    let info = js
        .get_stream(&name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(
        info.state.messages,
        sent.len() as u64,
        "every write was stored"
    );
    let consumer = start(&format!(
        "input:\n  nats_jetstream:\n    urls: [{URL}]\n    stream: {name}\n    subject: {subject}\n    durable: sluice\noutput:\n  file:\n    path: {}\n",
        out.display()
    ));
    wait_for("all messages", Duration::from_secs(20), || {
        read_lines(&out).len() == sent.len()
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await;
    // Acked after delivery: the durable consumer ends with nothing pending. The server
    // applies acks apart from the connection that sent them, so it is asked until then;
    // the limit is well inside `ack_wait`, so a lost ack is not covered by a redelivery.
    let stream = js.get_stream(&name).await.unwrap();
    let mut c: jetstream::consumer::PullConsumer = stream.get_consumer("sluice").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ci = c.info().await.unwrap();
        let (unacked, unread) = (ci.num_ack_pending, ci.num_pending);
        if unacked == 0 && unread == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after the stream stopped: {unacked} unacked, {unread} not delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stream.delete_consumer("sluice").await;
    let _ = js.delete_stream(&name).await;
}

#[tokio::test]
async fn jetstream_redelivers_what_an_output_failed() {
    let _shared = BROKER.read().await;
    let name = unique("R").replace('-', "_");
    let subject = format!("{name}.in");
    let js = create_stream(&name, &subject).await;
    js.publish(subject.clone(), "once".into())
        .await
        .unwrap()
        .await
        .unwrap();
    // An HTTP output to a closed port fails every write, so the message is nacked and
    // the server redelivers it: the consumer's info counts the redeliveries.
    let stream = start(&format!(
        "input:\n  nats_jetstream:\n    urls: [{URL}]\n    stream: {name}\n    durable: failing\n    nak_delay: 50ms\noutput:\n  http_client:\n    url: http://127.0.0.1:1/\n    retries: 0\n"
    ));
    let mut delivered = 0;
    for _ in 0..200 {
        let mut c: jetstream::consumer::PullConsumer = match js
            .get_stream(&name)
            .await
            .unwrap()
            .get_consumer("failing")
            .await
        {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let info = c.info().await.unwrap();
        delivered = info.num_redelivered + info.num_ack_pending;
        if info.num_redelivered > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        delivered > 0,
        "the message was redelivered after the failure"
    );
    stream.stop(Duration::from_secs(2)).await;
    let _ = js.delete_stream(&name).await;
}

#[tokio::test]
async fn jetstream_survives_a_server_restart() {
    let _alone = BROKER.write().await;
    let name = unique("F").replace('-', "_");
    let subject = format!("{name}.in");
    let js = create_stream(&name, &subject).await;
    drop(js);
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("f", 600);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    // A slow producer so that the outage falls in the middle of the stream.
    let producer = start_in(&format!(
        "input:\n  file:\n    paths: [{}]\npipeline:\n  processors:\n    - sleep: {{duration: 5ms}}\noutput:\n  nats_jetstream:\n    urls: [{URL}]\n    subject: {subject}\n",
        input.display()
    ), &env);
    let consumer = start_in(&format!(
        "input:\n  nats_jetstream:\n    urls: [{URL}]\n    stream: {name}\n    durable: fault\n    ack_wait: 5s\noutput:\n  file:\n    path: {}\n",
        out.display()
    ), &env);
    wait_for("a third of the messages", Duration::from_secs(30), || {
        read_lines(&out).len() >= 200
    })
    .await;
    // Started as scripts/brokers.sh starts it. The pid file, not the executable, says
    // whether this server still runs: matched by executable, any nats-server (a private
    // one of the TLS tests, which take no lock) made `--oknodo` start nothing.
    let guard = BrokerGuard::new(
        "nats-server",
        4222,
        &[
            "start-stop-daemon",
            "--start",
            "--oknodo",
            "--background",
            "--pidfile",
            NATS_PID_FILE,
            "--make-pidfile",
            "--exec",
            "/usr/sbin/nats-server",
            "--",
            "-a",
            "127.0.0.1",
            "-p",
            "4222",
            "-js",
            "-sd",
            "/var/lib/nats-server",
        ],
    );
    guard.stop();
    wait_for("the stream to notice", Duration::from_secs(10), || {
        !env.readiness.not_ready().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.restart();
    wait_for(
        "every message after the restart",
        Duration::from_secs(90),
        || read_lines(&out).len() == sent.len(),
    )
    .await;
    assert_eq!(read_lines(&out), sent.iter().cloned().collect());
    producer.stop(Duration::from_secs(5)).await;
    consumer.stop(Duration::from_secs(5)).await;
    let _ = jetstream::new(client().await).delete_stream(&name).await;
}

#[tokio::test]
async fn example_jetstream_to_redis() {
    let _shared = BROKER.read().await;
    let name = unique("ORDERS").replace('-', "_");
    let js = create_stream(&name, &format!("{name}.>")).await;
    for i in 0..10 {
        js.publish(format!("{name}.created"), format!("order-{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let key = unique("orders");
    let mut sluice = Sluice::run_example(
        "jetstream_to_redis.yaml",
        &[("JS_STREAM", name.clone()), ("REDIS_STREAM", key.clone())],
    );
    let mut redis = redis::Client::open("redis://127.0.0.1:6379")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis on 6379");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let len: usize = redis::AsyncCommands::xlen(&mut redis, &key).await.unwrap();
        if len == 10 {
            break;
        }
        assert!(sluice.still_running(), "sluice exited");
        assert!(
            tokio::time::Instant::now() < deadline,
            "{len} of 10 entries"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let entries: redis::streams::StreamRangeReply =
        redis::AsyncCommands::xrange_all(&mut redis, &key)
            .await
            .unwrap();
    let first = &entries.ids[0];
    assert_eq!(
        first.get::<String>("nats_subject").as_deref(),
        Some(&*format!("{name}.created"))
    );
    drop(sluice);
    let _: () = redis::AsyncCommands::del(&mut redis, &key).await.unwrap();
    let _ = js.delete_stream(&name).await;
}

#[tokio::test]
async fn output_subject_is_interpolated_per_message() {
    let _shared = BROKER.read().await;
    let base = unique("routed");
    let c = client().await;
    let mut evens = c.subscribe(format!("{base}.even")).await.unwrap();
    let mut odds = c.subscribe(format!("{base}.odd")).await.unwrap();
    c.flush().await.unwrap();
    let stream = start(&format!(
        "input:\n  generate:\n    mapping: 'root.n = count(\"{base}\")'\n    count: 6\n    interval: 0s\noutput:\n  nats:\n    urls: [{URL}]\n    subject: '{base}.${{! if this.n % 2 == 0 {{ \"even\" }} else {{ \"odd\" }} }}'\n"
    ));
    let mut got = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got != (3, 3) {
        tokio::select! {
            Some(m) = evens.next() => {
                assert!(String::from_utf8_lossy(&m.payload).contains(['2', '4', '6']));
                got.0 += 1;
            }
            Some(_) = odds.next() => got.1 += 1,
            _ = tokio::time::sleep_until(deadline) => panic!("received {got:?} of (3, 3)"),
        }
    }
    stream.stop(Duration::from_secs(5)).await;
}

/// A nats-server of the test's own on a free port; `settings` go into its config file.
fn private_nats(dir: &std::path::Path, settings: &str, test: &str) -> tls::Broker {
    let bin = tls::require_bin("nats-server", test);
    let port = free_port();
    let conf = dir.join(format!("nats-{port}.conf"));
    std::fs::write(&conf, format!("listen: \"127.0.0.1:{port}\"\n{settings}\n")).unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("-c").arg(&conf);
    let log = dir.join(format!("nats-{port}.log"));
    tls::Broker::start(cmd, port, &log, Duration::from_secs(20))
}

/// The NATS output and input of a round trip through `port` on `subject`; `extra` is
/// added to both (a `tls` block, an `auth` block).
fn nats_pair(port: u16, subject: &str, extra: &str) -> (String, String) {
    // Input and output take the same fields.
    let both =
        format!("{{nats: {{urls: ['nats://127.0.0.1:{port}'], subject: '{subject}'{extra}}}}}");
    (both.clone(), both)
}

/// nats-server's `tls` block: TLS only, with the test CA's server certificate; with
/// `verify_clients`, a client certificate signed by that CA is required too.
fn tls_settings(pki: &tls::Pki, verify_clients: bool) -> String {
    let mut block = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n",
        pki.path("server.pem"),
        pki.path("server.key"),
    );
    if verify_clients {
        block += &format!("  ca_file: \"{}\"\n  verify: true\n", pki.path("ca.pem"));
    }
    block + "}"
}

#[tokio::test]
async fn tls_with_a_client_certificate() {
    let pki = tls::Pki::new();
    // The server requires and checks a client certificate; it has no plain listener.
    let settings = tls_settings(&pki, true);
    let broker = private_nats(pki.dir.path(), &settings, "tls_with_a_client_certificate");
    let subject = unique("tls");
    let (output, input) = nats_pair(
        broker.port,
        &subject,
        &format!(", tls: {}", pki.tls_block(true)),
    );
    tls::round_trip(&output, &input).await;

    let (_, no_cert) = nats_pair(
        broker.port,
        &subject,
        &format!(", tls: {}", pki.tls_block(false)),
    );
    tls::refused(&no_cert, "BadCertificate").await;
    let untrusted = format!(", tls: {}", pki.untrusted_block(true));
    let (_, untrusted) = nats_pair(broker.port, &subject, &untrusted);
    tls::refused(&untrusted, "UnknownIssuer").await;

    // `skip_cert_verify` takes the server's certificate without knowing its CA.
    let skip = format!(", tls: {}", pki.skip_verify_block());
    let (output, input) = nats_pair(broker.port, &unique("tls-skip"), &skip);
    tls::round_trip(&output, &input).await;
}

#[tokio::test]
async fn tls_url_with_skip_cert_verify() {
    let pki = tls::Pki::new();
    // TLS required, no client certificate asked for.
    let settings = tls_settings(&pki, false);
    let broker = private_nats(pki.dir.path(), &settings, "tls_url_with_skip_cert_verify");
    // TLS comes from the `tls://` URL alone; the server's CA is unknown to the system.
    let subject = unique("tls-url");
    let both = format!(
        "{{nats: {{urls: ['tls://127.0.0.1:{}'], subject: '{subject}', tls: {{skip_cert_verify: true}}}}}}",
        broker.port
    );
    tls::round_trip(&both, &both).await;
}

#[tokio::test]
async fn user_and_password() {
    let dir = tempfile::tempdir().unwrap();
    let settings = "authorization {\n  user: \"sluice\"\n  password: \"s3cret pass\"\n}";
    let broker = private_nats(dir.path(), settings, "user_and_password");
    let subject = unique("auth");
    let (output, input) = nats_pair(
        broker.port,
        &subject,
        ", auth: {user: sluice, password: 's3cret pass'}",
    );
    tls::round_trip(&output, &input).await;

    let (_, wrong) = nats_pair(
        broker.port,
        &subject,
        ", auth: {user: sluice, password: wrong}",
    );
    tls::refused(&wrong, "authorization violation").await;
}

/// The JetStream stream `stream`'s consumer lag in the process's metrics, once there.
fn jetstream_lag(stream: &str) -> Option<f64> {
    let text = sluice::metrics::install().render();
    text.lines()
        .find(|l| {
            l.starts_with("sluice_input_lag_messages{")
                && l.contains(&format!("topic=\"{stream}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Lag is what the consumer has not acknowledged: with its defaults and an output that
/// takes nothing, the broker holds the messages delivered and unacknowledged, and the lag
/// says so (it read 0 when it counted only the undelivered), as the broker's own view does.
#[tokio::test]
async fn a_jetstream_consumers_unacknowledged_messages_are_its_lag() {
    const PUBLISHED: usize = 100;
    let _shared = BROKER.read().await;
    sluice::metrics::install();
    let name = unique("L").replace('-', "_");
    let subject = format!("{name}.in");
    let js = create_stream(&name, &format!("{name}.>")).await;
    for i in 0..PUBLISHED {
        js.publish(subject.clone(), format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let consumer = start(&format!(
        "input:\n  nats_jetstream:\n    urls: [{URL}]\n    stream: {name}\n    subject: {subject}\n    durable: lag\noutput:\n  http_client:\n    url: http://127.0.0.1:1/\n    retries: 0\n"
    ));
    // The broker's own view of the consumer: delivered and unacknowledged, and pending.
    let stream = js.get_stream(&name).await.unwrap();
    wait_for_async("the lag to match the broker's view", || {
        let (stream, name) = (stream.clone(), name.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let Ok(mut consumer) = stream
                .get_consumer::<async_nats::jetstream::consumer::pull::Config>("lag")
                .await
            else {
                return false;
            };
            let Ok(info) = consumer.info().await else {
                return false;
            };
            let broker = info.num_pending as usize + info.num_ack_pending;
            broker == PUBLISHED && jetstream_lag(&name) == Some(PUBLISHED as f64)
        }
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await;
    let _ = js.delete_stream(&name).await;
}

/// A message still being worked on is kept alive, not delivered again every `ack_wait`:
/// with an output that holds every write (a receiver that never answers), the server
/// redelivers nothing.
#[tokio::test]
async fn a_message_in_progress_is_not_redelivered_every_ack_wait() {
    let _shared = BROKER.read().await;
    let name = unique("P").replace('-', "_");
    let subject = format!("{name}.in");
    let js = create_stream(&name, &format!("{name}.>")).await;
    for i in 0..10 {
        js.publish(subject.clone(), format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // A receiver that takes the connection and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            open.push(sock);
        }
    });
    let consumer = start(&format!(
        "input:\n  nats_jetstream:\n    urls: [{URL}]\n    stream: {name}\n    subject: {subject}\n    durable: busy\n    ack_wait: 2s\noutput:\n  http_client:\n    url: http://127.0.0.1:{port}/\n    timeout: 60s\n    retries: 0\n"
    ));
    // Three ack waits with the messages in hand.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let stream = js.get_stream(&name).await.unwrap();
    let mut busy = stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("busy")
        .await
        .unwrap();
    let info = busy.info().await.unwrap().clone();
    assert!(info.num_ack_pending > 0, "{info:?}");
    assert_eq!(
        info.num_redelivered, 0,
        "redelivered while in progress: {info:?}"
    );
    consumer.stop(Duration::from_secs(1)).await;
    held.abort();
    let _ = js.delete_stream(&name).await;
}

/// The W3C trace context travels as NATS headers even when no metadata pattern names it.
#[tokio::test]
async fn the_trace_context_travels_as_nats_headers() {
    let _shared = BROKER.read().await;
    let subject = unique("trace").replace('-', "_");
    let client = client().await;
    let mut sub = client.subscribe(subject.clone()).await.unwrap();
    client.flush().await.unwrap();
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut producer = start(&format!(
        "input:\n  generate:\n    count: 1\n    mapping: |\n      root = \"hello\"\n      meta traceparent = \"{parent}\"\n      meta other = \"kept back\"\noutput:\n  nats:\n    urls: [{URL}]\n    subject: {subject}\n"
    ));
    producer.finished().await;
    let msg = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut sub))
        .await
        .expect("the message in time")
        .expect("a message");
    let headers = msg.headers.expect("headers");
    assert_eq!(headers.get("traceparent").map(|v| v.as_str()), Some(parent));
    assert!(headers.get("other").is_none());
}
