//! MQTT connectors against a local Mosquitto (scripts/brokers.sh).

use crate::common::brokers as common;
use crate::common::tls;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

const URL: &str = "tcp://127.0.0.1:1883";

/// A bare client subscribed to `topic`; returns the client and a channel of payloads.
async fn subscriber(topic: &str) -> (AsyncClient, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut opts = MqttOptions::new(unique("sub"), "127.0.0.1", 1883);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut el) = AsyncClient::new(opts, 1024);
    client.subscribe(topic, QoS::AtLeastOnce).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
    let mut subscribed_tx = Some(subscribed_tx);
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = tx.send(String::from_utf8_lossy(&p.payload).into_owned());
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(t) = subscribed_tx.take() {
                        let _ = t.send(());
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), subscribed_rx)
        .await
        .expect("subscribed to mosquitto on 1883 (run scripts/brokers.sh)")
        .unwrap();
    (client, rx)
}

async fn publisher() -> AsyncClient {
    let (client, mut el) =
        AsyncClient::new(MqttOptions::new(unique("pub"), "127.0.0.1", 1883), 4096);
    tokio::spawn(async move { while el.poll().await.is_ok() {} });
    client
}

#[tokio::test]
async fn qos1_bridge_with_wildcards() {
    let _shared = BROKER.read().await;
    let (a, b) = (unique("in"), unique("out"));
    let (_sub, mut rx) = subscriber(&b).await;
    let env = sluice::stream::StreamEnv::standalone();
    let stream = start_in(&format!(
        "input:\n  mqtt:\n    urls: [{URL}]\n    topics: ['{a}/+/x']\n    qos: 1\noutput:\n  mqtt:\n    urls: [{URL}]\n    topic: {b}\n    qos: 2\n"
    ), &env);
    wait_for("the bridge to connect", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    // SUBSCRIBE is sent right after CONNACK; give the broker a moment by retrying.
    let p = publisher().await;
    let sent = payloads("m", 100);
    let mut got = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < sent.len() {
        for (i, m) in sent.iter().enumerate().filter(|(_, m)| !got.contains(*m)) {
            p.publish(
                format!("{a}/{}/x", i % 3),
                QoS::AtLeastOnce,
                false,
                m.clone(),
            )
            .await
            .unwrap();
        }
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
            got.insert(m);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "got {} of {}",
            got.len(),
            sent.len()
        );
    }
    assert_eq!(got, sent.iter().cloned().collect());
    stream.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn metadata_reaches_nats_headers() {
    let _shared = BROKER.read().await;
    let (topic, subject) = (unique("meta"), unique("meta"));
    let nats = async_nats::connect("nats://127.0.0.1:4222")
        .await
        .expect("nats-server");
    let mut sub = nats.subscribe(subject.clone()).await.unwrap();
    let env = sluice::stream::StreamEnv::standalone();
    let stream = start_in(&format!(
        "input:\n  mqtt:\n    urls: [{URL}]\n    topics: ['{topic}']\n    qos: 1\noutput:\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: {subject}\n    metadata: {{include_patterns: ['^mqtt_']}}\n"
    ), &env);
    wait_for("connected", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let p = publisher().await;
    let msg = loop {
        p.publish(&topic, QoS::AtLeastOnce, false, "hello")
            .await
            .unwrap();
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            break m;
        }
    };
    let h = msg.headers.expect("headers");
    assert_eq!(h.get("mqtt_topic").unwrap().as_str(), topic);
    assert_eq!(h.get("mqtt_qos").unwrap().as_str(), "1");
    assert_eq!(h.get("mqtt_retained").unwrap().as_str(), "false");
    stream.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn persistent_session_survives_a_broker_restart() {
    let _alone = BROKER.write().await;
    let topic = unique("fault");
    let dir = tempfile::tempdir().unwrap();
    let sent = payloads("f", 600);
    let input = lines_file(dir.path(), &sent);
    let out = dir.path().join("out.txt");
    let env = sluice::stream::StreamEnv::standalone();
    let consumer = start_in(&format!(
        "input:\n  mqtt:\n    urls: [{URL}]\n    topics: ['{topic}']\n    qos: 1\n    client_id: {}\n    clean_session: false\n    keepalive: 2s\noutput:\n  file:\n    path: {}\n",
        unique("c"), out.display()
    ), &env);
    wait_for("the consumer to subscribe", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let producer = start_in(&format!(
        "input:\n  file:\n    paths: [{}]\npipeline:\n  processors:\n    - sleep: {{duration: 5ms}}\noutput:\n  mqtt:\n    urls: [{URL}]\n    topic: {topic}\n    qos: 1\n    keepalive: 2s\n",
        input.display()
    ), &env);
    wait_for("a third of the messages", Duration::from_secs(30), || {
        read_lines(&out).len() >= 200
    })
    .await;
    let guard = BrokerGuard::new(
        "mosquitto",
        1883,
        &["mosquitto", "-d", "-c", "/etc/mosquitto/mosquitto.conf"],
    );
    guard.stop();
    wait_for("the stream to notice", Duration::from_secs(10), || {
        !env.readiness.not_ready().is_empty()
    })
    .await;
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
}

#[tokio::test]
async fn example_mqtt_to_nats() {
    let _shared = BROKER.read().await;
    let (topic, subject) = (unique("sensors"), unique("sensors"));
    let nats = async_nats::connect("nats://127.0.0.1:4222")
        .await
        .expect("nats-server");
    let mut sub = nats.subscribe(subject.clone()).await.unwrap();
    let mut sluice = Sluice::run_example(
        "mqtt_to_nats.yaml",
        &[
            ("MQTT_TOPICS", format!("{topic}/#")),
            ("MQTT_CLIENT_ID", unique("example")),
            ("NATS_SUBJECT", subject.clone()),
        ],
    );
    let p = publisher().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let msg = loop {
        assert!(sluice.still_running(), "sluice exited");
        assert!(tokio::time::Instant::now() < deadline, "nothing bridged");
        p.publish(
            format!("{topic}/kitchen/temp"),
            QoS::AtLeastOnce,
            false,
            "21.5",
        )
        .await
        .unwrap();
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            break m;
        }
    };
    assert_eq!(&msg.payload[..], b"21.5");
    let h = msg.headers.expect("headers");
    assert_eq!(
        h.get("mqtt_topic").unwrap().as_str(),
        format!("{topic}/kitchen/temp")
    );
}

/// A Mosquitto of the test's own with one listener on a free port; `settings` are the
/// listener's (TLS files, `require_certificate`, `allow_anonymous`, `password_file`).
fn private_mosquitto(dir: &std::path::Path, settings: &str, test: &str) -> tls::Broker {
    let bin = tls::require_bin("mosquitto", test);
    let port = free_port();
    let conf = dir.join(format!("mosquitto-{port}.conf"));
    // `user root`: when started as root, Mosquitto otherwise switches to its own user,
    // which cannot read the test's private files. It does nothing for other users.
    std::fs::write(
        &conf,
        format!("user root\npersistence false\nlistener {port} 127.0.0.1\n{settings}\n"),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("-c").arg(&conf);
    let log = dir.join(format!("mosquitto-{port}.log"));
    tls::Broker::start(cmd, port, &log, Duration::from_secs(20))
}

fn tls_listener(pki: &tls::Pki, require_certificate: bool) -> String {
    format!(
        "cafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate {require_certificate}\nallow_anonymous true",
        pki.path("ca.pem"),
        pki.path("server.pem"),
        pki.path("server.key"),
    )
}

/// The MQTT output and input of a round trip through `port` on `topic`; `extra` is added
/// to both (a `tls` block, credentials).
fn mqtt_pair(port: u16, topic: &str, extra: &str) -> (String, String) {
    let url = format!("tcp://127.0.0.1:{port}");
    (
        format!("{{mqtt: {{urls: ['{url}'], topic: '{topic}', qos: 1{extra}}}}}"),
        format!("{{mqtt: {{urls: ['{url}'], topics: ['{topic}'], qos: 1{extra}}}}}"),
    )
}

#[tokio::test]
async fn tls_with_a_custom_ca() {
    let pki = tls::Pki::new();
    let broker = private_mosquitto(
        pki.dir.path(),
        &tls_listener(&pki, false),
        "tls_with_a_custom_ca",
    );
    // The broker speaks only TLS on this port: plain MQTT would not get a CONNACK.
    let topic = unique("tls");
    let (output, input) = mqtt_pair(
        broker.port,
        &topic,
        &format!(", tls: {}", pki.tls_block(false)),
    );
    tls::round_trip(&output, &input).await;

    // A CA that did not sign the broker's certificate is not trusted.
    let untrusted = format!(", tls: {}", pki.untrusted_block(false));
    let (_, untrusted) = mqtt_pair(broker.port, &topic, &untrusted);
    tls::refused(&untrusted, "UnknownIssuer").await;

    // `skip_cert_verify` takes the broker's certificate without knowing its CA.
    let (output, input) = mqtt_pair(
        broker.port,
        &unique("tls-skip"),
        ", tls: {enabled: true, skip_cert_verify: true}",
    );
    tls::round_trip(&output, &input).await;
}

#[tokio::test]
async fn mutual_tls_with_a_client_certificate() {
    let pki = tls::Pki::new();
    let broker = private_mosquitto(
        pki.dir.path(),
        &tls_listener(&pki, true),
        "mutual_tls_with_a_client_certificate",
    );
    let topic = unique("mtls");
    let (output, input) = mqtt_pair(
        broker.port,
        &topic,
        &format!(", tls: {}", pki.tls_block(true)),
    );
    tls::round_trip(&output, &input).await;

    // The broker requires a certificate: the same client without one is turned away.
    let (_, no_cert) = mqtt_pair(
        broker.port,
        &topic,
        &format!(", tls: {}", pki.tls_block(false)),
    );
    tls::refused(&no_cert, "CertificateRequired").await;

    // A client certificate with `skip_cert_verify` and no CA of the broker's.
    let skip = format!(", tls: {}", pki.skip_verify_block());
    let (output, input) = mqtt_pair(broker.port, &unique("mtls-skip"), &skip);
    tls::round_trip(&output, &input).await;
}

#[tokio::test]
async fn user_and_password() {
    let test = "user_and_password";
    let passwd = tls::require_bin("mosquitto_passwd", test);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("passwords");
    let status = std::process::Command::new(passwd)
        .arg("-c")
        .arg("-b")
        .arg(&file)
        .args(["sluice", "s3cret pass"])
        .status()
        .unwrap();
    assert!(status.success(), "mosquitto_passwd");
    let settings = format!("allow_anonymous false\npassword_file {}", file.display());
    let broker = private_mosquitto(dir.path(), &settings, test);
    let topic = unique("auth");
    let (output, input) = mqtt_pair(
        broker.port,
        &topic,
        ", user: sluice, password: 's3cret pass'",
    );
    tls::round_trip(&output, &input).await;

    let (_, wrong) = mqtt_pair(broker.port, &topic, ", user: sluice, password: wrong");
    tls::refused(&wrong, "NotAuthorized").await;
    let (_, anonymous) = mqtt_pair(broker.port, &topic, "");
    tls::refused(&anonymous, "NotAuthorized").await;
}

/// A bare MQTT 5 client subscribed to `topic`; returns it and a channel of what came:
/// payload and user properties.
async fn subscriber_v5(
    topic: &str,
) -> (
    rumqttc::v5::AsyncClient,
    tokio::sync::mpsc::UnboundedReceiver<(String, Vec<(String, String)>)>,
) {
    use rumqttc::v5::mqttbytes::v5::Packet as P;
    use rumqttc::v5::Event as E;
    let mut opts = rumqttc::v5::MqttOptions::new(unique("sub5"), "127.0.0.1", 1883);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut el) = rumqttc::v5::AsyncClient::new(opts, 1024);
    client
        .subscribe(topic, rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
    let mut subscribed_tx = Some(subscribed_tx);
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(E::Incoming(P::Publish(p))) => {
                    let props = p.properties.map(|p| p.user_properties).unwrap_or_default();
                    let _ = tx.send((String::from_utf8_lossy(&p.payload).into_owned(), props));
                }
                Ok(E::Incoming(P::SubAck(_))) => {
                    if let Some(t) = subscribed_tx.take() {
                        let _ = t.send(());
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), subscribed_rx)
        .await
        .expect("subscribed over MQTT 5")
        .unwrap();
    (client, rx)
}

#[tokio::test]
async fn mqtt5_user_properties_carry_metadata_and_the_trace_context_both_ways() {
    let _shared = BROKER.read().await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // Out: metadata named by the include patterns, and the trace context, become user
    // properties; the rest stays behind.
    let out_topic = unique("v5out");
    let (_sub, mut rx) = subscriber_v5(&out_topic).await;
    let producer = start(&format!(
        "input:\n  generate:\n    count: 1\n    mapping: |\n      root = \"hello\"\n      meta traceparent = \"{parent}\"\n      meta \"x-tenant\" = \"t1\"\n      meta other = \"kept back\"\noutput:\n  mqtt:\n    urls: [{URL}]\n    protocol_version: 5\n    topic: {out_topic}\n    metadata:\n      include_patterns: ['^x-']\n"
    ));
    let (payload, props) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the message in time")
        .unwrap();
    producer.stop(Duration::from_secs(5)).await;
    assert_eq!(payload, "hello");
    assert!(
        props.contains(&("traceparent".into(), parent.into())),
        "{props:?}"
    );
    assert!(
        props.contains(&("x-tenant".into(), "t1".into())),
        "{props:?}"
    );
    assert!(props.iter().all(|(k, _)| k != "other"), "{props:?}");

    // In: user properties become metadata, which a NATS output passes on as headers.
    let (in_topic, subject) = (unique("v5in"), unique("v5in"));
    let nats = async_nats::connect("nats://127.0.0.1:4222")
        .await
        .expect("nats-server");
    let mut sub = nats.subscribe(subject.clone()).await.unwrap();
    let env = sluice::stream::StreamEnv::standalone();
    let bridge = start_in(&format!(
        "input:\n  mqtt:\n    urls: [{URL}]\n    protocol_version: 5\n    topics: ['{in_topic}']\n    qos: 1\noutput:\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: {subject}\n    metadata: {{include_patterns: ['^x-', '^mqtt_topic$']}}\n"
    ), &env);
    wait_for("connected", Duration::from_secs(10), || {
        env.readiness.not_ready().is_empty()
    })
    .await;
    let (client, mut el) = rumqttc::v5::AsyncClient::new(
        rumqttc::v5::MqttOptions::new(unique("pub5"), "127.0.0.1", 1883),
        64,
    );
    tokio::spawn(async move { while el.poll().await.is_ok() {} });
    let props = rumqttc::v5::mqttbytes::v5::PublishProperties {
        user_properties: vec![
            ("traceparent".into(), parent.into()),
            ("x-tenant".into(), "t2".into()),
            // A property cannot pass for what the input sets itself.
            ("mqtt_topic".into(), "forged".into()),
        ],
        ..Default::default()
    };
    let msg = loop {
        client
            .publish_with_properties(
                in_topic.clone(),
                rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                false,
                "hi",
                props.clone(),
            )
            .await
            .unwrap();
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            break m;
        }
    };
    let h = msg.headers.expect("headers");
    assert_eq!(h.get("traceparent").unwrap().as_str(), parent);
    assert_eq!(h.get("x-tenant").unwrap().as_str(), "t2");
    assert_eq!(h.get("mqtt_topic").unwrap().as_str(), in_topic);
    bridge.stop(Duration::from_secs(5)).await;
}

#[test]
fn mqtt_versions_and_properties_are_checked() {
    for (yaml, says) in [
        (
            "input:\n  mqtt:\n    urls: [tcp://127.0.0.1:1883]\n    protocol_version: 4\n    topics: [a]\noutput:\n  drop: {}\n",
            "protocol_version",
        ),
        (
            "input:\n  stdin: {}\noutput:\n  mqtt:\n    urls: [tcp://127.0.0.1:1883]\n    topic: a\n    metadata: {include_patterns: ['.*']}\n",
            "protocol_version: 5",
        ),
    ] {
        let root = sluice::stream::config::parse_str("test.yaml", yaml).unwrap();
        let (name, config) = root.streams.into_iter().next().unwrap();
        let e = match sluice::stream::Stream::build(&name, &config, &sluice::stream::StreamEnv::standalone()) {
            Ok(_) => panic!("built: {yaml}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(says), "{e}");
    }
}

#[tokio::test]
async fn large_messages_cross_and_one_past_max_packet_bytes_is_refused_alone() {
    let _shared = BROKER.read().await;
    let nats = async_nats::connect("nats://127.0.0.1:4222")
        .await
        .expect("nats-server");
    for version in [3, 5] {
        // NATS -> MQTT -> NATS, the MQTT leg in `version`; the sending side takes packets
        // of at most 256 KiB.
        let (a, topic, b) = (unique("big_a"), unique("big"), unique("big_b"));
        let mut sub = nats.subscribe(b.clone()).await.unwrap();
        let env = sluice::stream::StreamEnv::standalone();
        let to_mqtt = start_in(&format!(
            "input:\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: {a}\noutput:\n  mqtt:\n    urls: [{URL}]\n    protocol_version: {version}\n    topic: {topic}\n    max_packet_bytes: 262144\n"
        ), &env);
        let from_mqtt = start_in(&format!(
            "input:\n  mqtt:\n    urls: [{URL}]\n    protocol_version: {version}\n    topics: ['{topic}']\n    qos: 1\noutput:\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: {b}\n"
        ), &env);
        wait_for("connected", Duration::from_secs(10), || {
            env.readiness.not_ready().is_empty()
        })
        .await;
        // 200 KB: twenty times what the MQTT client took by default.
        let big = "x".repeat(200_000);
        let got = loop {
            nats.publish(a.clone(), big.clone().into()).await.unwrap();
            if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await
            {
                break m;
            }
        };
        assert_eq!(got.payload.len(), 200_000, "MQTT {version}");
        // Past the limit: refused, not retried, and the stream goes on with the next.
        nats.publish(a.clone(), "y".repeat(300_000).into())
            .await
            .unwrap();
        nats.publish(a.clone(), "after".into()).await.unwrap();
        let next = loop {
            let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
                .await
                .expect("the next message in time")
                .unwrap();
            // Retries of the first large one may still come.
            if m.payload.len() != 200_000 {
                break m;
            }
        };
        assert_eq!(&next.payload[..], b"after", "MQTT {version}");
        to_mqtt.stop(Duration::from_secs(5)).await;
        from_mqtt.stop(Duration::from_secs(5)).await;
    }
}
