//! MQTT connectors against a local Mosquitto (scripts/brokers.sh).

#[path = "common/brokers.rs"]
mod common;

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
