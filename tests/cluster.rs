//! Several gateways as one cluster: a dashboard and three `sluice gateway` processes on
//! one PostgreSQL store and one Redis, as `scripts/cluster.sh` starts them. A streaming
//! API posted once to the dashboard runs on every node, and a change or a removal
//! reaches every node; a Kafka-fed stream that broadcasts reaches every node's clients.

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::common;

use common::dashboard::{send, Db};
use common::harness::Gw;
use common::postgres::with_postgres;
use common::streams::{create_topic, kafka_addr, Sse};

const ADMIN_KEY: &str = "cluster-admin-key-0123456789";
const STREAMS: &str = "application/vnd.sluice.streams.oas";
/// How often each node reads the store: a change must reach all of them soon after.
const POLL: &str = "200ms";

/// A streaming API at `/{id}/` whose one stream answers each POST to `/echo` with
/// `{tag} ` and the body.
fn echo_api(id: &str, tag: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: '1'}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server: {{listenPath: {{value: /{id}/, strip: true}}}}
x-sluice-streaming:
  streams:
    main:
      input:
        http_server: {{path: /echo, sync_response: {{}}}}
      pipeline:
        processors:
          - mapping: 'root = "{tag} " + content().string()'
      output:
        drop: {{}}
"#
    )
}

/// Three gateways on `store` (and one Redis), each with streaming on.
async fn nodes(store: &str, prefix: &str) -> Vec<Gw> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(
            Gw::start_with_env(&[
                ("SLUICE_GW_STORE_URL", store.to_owned()),
                ("SLUICE_GW_STREAMING_ENABLED", "true".to_owned()),
                ("SLUICE_GW_APPS_POLL_INTERVAL", POLL.to_owned()),
                ("SLUICE_GW_REDIS_URL", "redis://127.0.0.1:6379".to_owned()),
                ("SLUICE_GW_REDIS_PREFIX", prefix.to_owned()),
            ])
            .await,
        );
    }
    nodes
}

/// Waits until `node` answers a POST of `body` to `path` with `want` (status, body).
async fn until_answers(node: &Gw, path: &str, want: (u16, Option<&str>)) {
    let started = Instant::now();
    let mut last = (0, String::new());
    while started.elapsed() < Duration::from_secs(20) {
        let resp = node.http.post(node.url(path)).body("hello").send().await;
        if let Ok(resp) = resp {
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            if status == want.0 && want.1.is_none_or(|w| w == text) {
                return;
            }
            last = (status, text);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "node {} never answered {path} with {want:?}; last {last:?}",
        node.port
    );
}

#[tokio::test]
async fn a_streaming_api_posted_once_runs_on_every_node_and_changes_everywhere() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), &store, &config, ADMIN_KEY).await;
        let prefix = format!("cluster-{}:", uuid::Uuid::new_v4().simple());
        let nodes = nodes(&store, &prefix).await;
        let post = |method: Method, path: &str, body: String| {
            db.http
                .request(method, db.url(path))
                .header("Authorization", ADMIN_KEY)
                .header("content-type", STREAMS)
                .body(body)
        };

        // Posted once: every node serves it.
        let made = send(post(
            Method::POST,
            "/api/apis/streams",
            echo_api("echo", "v1"),
        ))
        .await;
        assert_eq!(made.0, 201, "{}", made.1);
        for node in &nodes {
            until_answers(node, "/echo/echo", (200, Some("v1 hello"))).await;
        }

        // Changed once: every node runs the new stream.
        let changed = send(post(
            Method::PUT,
            "/api/apis/streams/echo",
            echo_api("echo", "v2"),
        ))
        .await;
        assert_eq!(changed.0, 200, "{}", changed.1);
        for node in &nodes {
            until_answers(node, "/echo/echo", (200, Some("v2 hello"))).await;
        }

        // Removed once: no node serves it.
        let removed = send(db.req(Method::DELETE, "/api/apis/streams/echo")).await;
        assert_eq!(removed.0, 200, "{}", removed.1);
        for node in &nodes {
            until_answers(node, "/echo/echo", (404, None)).await;
        }
    })
    .await;
}

/// A streaming API at `/{id}/` whose stream sends each record of Kafka `topic` (read in
/// `group`) to every SSE client of `/events`.
fn kafka_broadcast_api(id: &str, topic: &str, group: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: '1'}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server: {{listenPath: {{value: /{id}/, strip: true}}}}
x-sluice-streaming:
  streams:
    feed:
      input:
        kafka: {{addresses: ['{addr}'], topics: ['{topic}'], consumer_group: {group}}}
      output:
        http_server: {{stream_path: /events, delivery: broadcast}}
"#,
        addr = kafka_addr()
    )
}

#[tokio::test]
async fn a_kafka_stream_that_broadcasts_reaches_the_clients_of_every_node() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), &store, &config, ADMIN_KEY).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let prefix = format!("cluster-{id}:");
        let nodes = nodes(&store, &prefix).await;
        // One partition: a group shared by the nodes would hand all of it to one node.
        let topic = format!("cluster-feed-{id}");
        create_topic(&topic).await;
        let made = send(
            db.http
                .post(db.url("/api/apis/streams"))
                .header("Authorization", ADMIN_KEY)
                .header("content-type", STREAMS)
                .body(kafka_broadcast_api("feed", &topic, &format!("feed-{id}"))),
        )
        .await;
        assert_eq!(made.0, 201, "{}", made.1);
        let mut clients = Vec::new();
        for node in &nodes {
            let started = Instant::now();
            let sse = loop {
                match Sse::try_open(node, "/feed/events", "").await {
                    Ok(sse) => break sse,
                    Err(status) => assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "node {} never served the stream: {status}",
                        node.port
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            clients.push(sse);
        }

        let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", kafka_addr())
            .create()
            .unwrap();
        let sent: Vec<String> = (0..10).map(|i| format!("{{\"n\":{i}}}")).collect();
        for record in &sent {
            producer
                .send(
                    rdkafka::producer::FutureRecord::<(), _>::to(&topic).payload(record),
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
        }
        for (node, client) in nodes.iter().zip(&mut clients) {
            let mut got = Vec::new();
            while got.len() < sent.len() {
                match client.next(Duration::from_secs(30)).await {
                    Some(event) => got.push(event),
                    None => panic!("node {} delivered only {got:?}", node.port),
                }
            }
            assert_eq!(got, sent, "node {}", node.port);
        }
    })
    .await;
}

/// A streaming API at `/{id}/` whose stream writes each POST to `/publish` to Kafka
/// `topic`, answering 200 once the broker has it.
fn kafka_publish_api(id: &str, topic: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: '1'}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server: {{listenPath: {{value: /{id}/, strip: true}}}}
x-sluice-streaming:
  streams:
    publish:
      input:
        http_server: {{path: /publish, allowed_verbs: [POST]}}
      output:
        kafka: {{addresses: ['{addr}'], topic: '{topic}'}}
"#,
        addr = kafka_addr()
    )
}

/// Every record of `topic`, read from its start until `want` are in or nothing more
/// comes.
async fn records(topic: &str, want: usize) -> Vec<String> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::Message;
    let consumer: StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_addr())
        .set(
            "group.id",
            format!("check-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut got = Vec::new();
    while got.len() < want {
        match tokio::time::timeout(Duration::from_secs(20), consumer.recv()).await {
            Ok(Ok(m)) => got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into()),
            Ok(Err(e)) => panic!("reading {topic}: {e}"),
            Err(_) => break,
        }
    }
    got
}

#[tokio::test]
async fn producers_on_any_node_reach_the_broker_and_a_killed_node_loses_no_acknowledged_message() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), &store, &config, ADMIN_KEY).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut nodes = nodes(&store, &format!("cluster-{id}:")).await;
        let topic = format!("cluster-publish-{id}");
        create_topic(&topic).await;
        let made = send(
            db.http
                .post(db.url("/api/apis/streams"))
                .header("Authorization", ADMIN_KEY)
                .header("content-type", STREAMS)
                .body(kafka_publish_api("pub", &topic)),
        )
        .await;
        assert_eq!(made.0, 201, "{}", made.1);
        for node in &nodes {
            until_answers(node, "/pub/nothing", (404, None)).await;
        }
        // Every node takes the stream's POSTs once it runs it.
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let post = |port: u16, n: usize| {
            let client = client.clone();
            async move {
                let resp = client
                    .post(format!("http://127.0.0.1:{port}/pub/publish"))
                    .body(format!("m{n}"))
                    .send()
                    .await;
                matches!(resp, Ok(r) if r.status() == 200)
            }
        };
        for node in &nodes {
            let started = Instant::now();
            while !post(node.port, usize::MAX).await {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "node {} never took a POST",
                    node.port
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // Producers spread over the nodes; one node is killed halfway.
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        let mut acked = Vec::new();
        let mut refused = 0;
        for n in 0..300 {
            if n == 150 {
                nodes.remove(1).kill().await;
            }
            if post(ports[n % ports.len()], n).await {
                acked.push(format!("m{n}"));
            } else {
                refused += 1;
            }
        }
        assert!(
            refused <= 100,
            "{refused} refused: only the killed node's share may be"
        );
        assert!(acked.len() >= 200, "{} acknowledged", acked.len());

        // Every acknowledged message is in the broker (the three warm-up posts too).
        let mut got = records(&topic, acked.len() + ports.len()).await;
        got.retain(|m| m != &format!("m{}", usize::MAX));
        let missing: Vec<&String> = acked.iter().filter(|m| !got.contains(m)).collect();
        assert!(
            missing.is_empty(),
            "acknowledged but not in the broker: {missing:?}"
        );
        let duplicates = got.len() - got.iter().collect::<std::collections::BTreeSet<_>>().len();
        eprintln!(
            "producers over 3 nodes, one killed halfway: 300 sent, {} acknowledged, \
             {refused} refused, 0 lost, {duplicates} duplicates in the broker",
            acked.len()
        );
    })
    .await;
}

#[tokio::test]
async fn nodes_keep_serving_without_the_store_and_catch_up_when_it_is_back() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        // The nodes reach PostgreSQL through a relay, so that cutting it takes the store
        // away from them alone; the dashboard keeps its own connection.
        let mut relay = common::relay::Relay::to(5432);
        relay.resume().await;
        let mut relayed = url::Url::parse(&store).unwrap();
        relayed.set_port(Some(relay.port)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), &store, &config, ADMIN_KEY).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let nodes = nodes(relayed.as_str(), &format!("cluster-{id}:")).await;
        let put = |method: Method, path: &str, tag: &str| {
            db.http
                .request(method, db.url(path))
                .header("Authorization", ADMIN_KEY)
                .header("content-type", STREAMS)
                .body(echo_api("echo", tag))
        };
        let made = send(put(Method::POST, "/api/apis/streams", "v1")).await;
        assert_eq!(made.0, 201, "{}", made.1);
        for node in &nodes {
            until_answers(node, "/echo/echo", (200, Some("v1 hello"))).await;
        }

        // The store goes away: the nodes go on serving what they loaded, over many of
        // their reloads, while the API changes in the store.
        relay.cut();
        let changed = send(put(Method::PUT, "/api/apis/streams/echo", "v2")).await;
        assert_eq!(changed.0, 200, "{}", changed.1);
        let outage = Instant::now();
        while outage.elapsed() < Duration::from_secs(2) {
            for node in &nodes {
                let resp = node
                    .http
                    .post(node.url("/echo/echo"))
                    .body("hello")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200, "node {} without its store", node.port);
                assert_eq!(resp.text().await.unwrap(), "v1 hello");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Back: every node picks up the change.
        relay.resume().await;
        for node in &nodes {
            until_answers(node, "/echo/echo", (200, Some("v2 hello"))).await;
        }
    })
    .await;
}

/// A streaming API at `/{id}/` whose stream sends each message of JetStream `stream`,
/// read by the durable consumer `durable`, to one SSE client of `/events` in turn.
fn jetstream_round_robin_api(id: &str, stream: &str, durable: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: '1'}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server: {{listenPath: {{value: /{id}/, strip: true}}}}
x-sluice-streaming:
  streams:
    work:
      input:
        nats_jetstream: {{urls: ['nats://127.0.0.1:4222'], stream: {stream}, durable: {durable}}}
      output:
        http_server: {{stream_path: /events}}
"#
    )
}

#[tokio::test]
async fn a_shared_durable_consumer_spreads_a_round_robin_stream_over_the_nodes_once() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), &store, &config, ADMIN_KEY).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let nodes = nodes(&store, &format!("cluster-{id}:")).await;
        let (stream, subject) = (format!("WORK_{id}"), format!("work.{id}"));
        let client = async_nats::connect("nats://127.0.0.1:4222").await.unwrap();
        let js = async_nats::jetstream::new(client);
        js.create_stream(async_nats::jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
        let made = send(
            db.http
                .post(db.url("/api/apis/streams"))
                .header("Authorization", ADMIN_KEY)
                .header("content-type", STREAMS)
                .body(jetstream_round_robin_api(
                    "work",
                    &stream,
                    &format!("work-{id}"),
                )),
        )
        .await;
        assert_eq!(made.0, 201, "{}", made.1);
        let mut clients = Vec::new();
        for node in &nodes {
            let started = Instant::now();
            clients.push(loop {
                match Sse::try_open(node, "/work/events", "").await {
                    Ok(sse) => break sse,
                    Err(status) => assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "node {} never served the stream: {status}",
                        node.port
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        }
        let sent: Vec<String> = (0..60).map(|i| format!("{{\"n\":{i}}}")).collect();
        for message in &sent {
            js.publish(subject.clone(), message.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        // Each message reaches one client of one node: together, every one once.
        let mut got: Vec<String> = Vec::new();
        let mut per_node = vec![0; clients.len()];
        let started = Instant::now();
        while got.len() < sent.len() && started.elapsed() < Duration::from_secs(30) {
            for (client, count) in clients.iter_mut().zip(&mut per_node) {
                while let Some(event) = client.next(Duration::from_millis(300)).await {
                    got.push(event);
                    *count += 1;
                }
            }
        }
        eprintln!("round robin over 3 nodes: {per_node:?} of {}", sent.len());
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "a message came twice: {got:?}");
        let mut want = sent.clone();
        want.sort();
        assert_eq!(unique, want);
        assert!(
            per_node.iter().filter(|&&n| n > 0).count() >= 2,
            "one node took them all: {per_node:?}"
        );
        let _ = js.delete_stream(&stream).await;
    })
    .await;
}

/// A streaming API at `/{id}/` whose stream sends every message of JetStream `stream`
/// to every SSE client of `/events`, the message's stream sequence as its event id.
fn jetstream_feed_api(id: &str, stream: &str, durable: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: '1'}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server: {{listenPath: {{value: /{id}/, strip: true}}}}
x-sluice-streaming:
  streams:
    feed:
      input:
        nats_jetstream: {{urls: ['nats://127.0.0.1:4222'], stream: {stream}, durable: {durable}}}
      output:
        http_server:
          stream_path: /events
          delivery: broadcast
          id_metadata: nats_sequence_stream
"#
    )
}

#[tokio::test]
async fn a_client_whose_node_is_killed_resumes_on_another_node_without_a_gap_or_a_duplicate() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
        let db = Db::start(dir.path(), &store, &config, ADMIN_KEY).await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut nodes = nodes(&store, &format!("cluster-{id}:")).await;
        let (stream, subject) = (format!("FEED_{id}"), format!("feed.{id}"));
        let js =
            async_nats::jetstream::new(async_nats::connect("nats://127.0.0.1:4222").await.unwrap());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
        let made = send(
            db.http
                .post(db.url("/api/apis/streams"))
                .header("Authorization", ADMIN_KEY)
                .header("content-type", STREAMS)
                .body(jetstream_feed_api("feed", &stream, &format!("feed-{id}"))),
        )
        .await;
        assert_eq!(made.0, 201, "{}", made.1);
        // A client on every node, so that every node delivers (a broadcast waits for one).
        let mut clients = Vec::new();
        for node in &nodes {
            let started = Instant::now();
            clients.push(loop {
                match Sse::try_open(node, "/feed/events", "").await {
                    Ok(sse) => break sse,
                    Err(status) => assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "node {} never served the stream: {status}",
                        node.port
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        }
        let publish = |from: usize, to: usize| {
            let (js, subject) = (js.clone(), subject.clone());
            async move {
                for n in from..to {
                    js.publish(subject.clone(), format!("m{n}").into())
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                }
            }
        };
        publish(0, 20).await;
        // The first node's client reads ten, then its node dies.
        let mut seen = Vec::new();
        let mut last = None;
        while seen.len() < 10 {
            let event = clients[0]
                .next_event(Duration::from_secs(20))
                .await
                .expect("the first node delivers");
            last = event.id.clone().or(last);
            seen.push(event.data);
        }
        let last = last.expect("events carry ids");
        clients.remove(0);
        nodes.remove(0).kill().await;
        publish(20, 30).await;
        // It reconnects to another node with the last id it saw, as an EventSource does.
        let mut resumed = Sse::try_resume(&nodes[0], "/feed/events", "", Some(&last))
            .await
            .expect("the other node takes the client");
        while seen.len() < 30 {
            match resumed.next_event(Duration::from_secs(20)).await {
                Some(event) => {
                    assert_ne!(event.name.as_deref(), Some("gap"), "{}", event.data);
                    seen.push(event.data);
                }
                None => panic!("resumed with {} of 30: {seen:?}", seen.len()),
            }
        }
        let want: Vec<String> = (0..30).map(|n| format!("m{n}")).collect();
        assert_eq!(seen, want, "every message once, in order");
        eprintln!(
            "resume on another node after kill -9: 30 published, 30 delivered once, \
             0 lost, 0 duplicates (last id before the kill: {last})"
        );
        let _ = js.delete_stream(&stream).await;
    })
    .await;
}
