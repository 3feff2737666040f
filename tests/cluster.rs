//! Several gateways as one cluster: a dashboard and three `sluice gateway` processes on
//! one PostgreSQL store and one Redis, as `scripts/cluster.sh` starts them, with real
//! brokers. A streaming API posted once runs on every node and changes everywhere;
//! broker groups spread round robin over the nodes and are each node's own for
//! broadcast; producers reach the broker through any node; a client resumes on another
//! node; the nodes ride out the store going away. `--nocapture` prints the figures.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use crate::common;

use common::cluster::{api, Cluster, NATS, REDIS, STREAMS};
use common::dashboard::send;
use common::harness::Gw;
use common::postgres::with_postgres;
use common::streams::{create_topic, kafka_addr, Sse};

impl Cluster {
    /// An SSE client of `path` on every node, once each serves the stream.
    async fn clients(&self, path: &str) -> Vec<Sse> {
        let mut clients = Vec::new();
        for node in &self.nodes {
            clients.push(open(node, path, None).await);
        }
        clients
    }
}

/// An SSE client of `path` on `node` (resuming after `last`), once the node serves it.
async fn open(node: &Gw, path: &str, last: Option<&str>) -> Sse {
    let started = Instant::now();
    loop {
        match Sse::try_resume(node, path, "", last).await {
            Ok(sse) => return sse,
            Err(status) => assert!(
                started.elapsed() < Duration::from_secs(20),
                "node {} never served {path}: {status}",
                node.port
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Answers each POST to `/echo` with `{tag} ` and the body.
fn echo(tag: &str) -> String {
    api(
        "echo",
        &format!(
            "      input:\n        http_server: {{path: /echo, sync_response: {{}}}}\n      \
             pipeline:\n        processors:\n          - mapping: 'root = \"{tag} \" + content().string()'\n      \
             output:\n        drop: {{}}\n"
        ),
    )
}

/// Waits until `node` answers a POST of `hello` to `path` with `want` (status, body).
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

/// Writes `records` to Kafka `topic`, each acknowledged.
async fn produce(topic: &str, records: impl IntoIterator<Item = String>) {
    let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_addr())
        .create()
        .unwrap();
    for record in records {
        producer
            .send(
                rdkafka::producer::FutureRecord::<(), _>::to(topic).payload(&record),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
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

/// A JetStream stream `name` on `subject`, new.
async fn jetstream(name: &str, subject: &str) -> async_nats::jetstream::Context {
    let js = async_nats::jetstream::new(async_nats::connect(NATS).await.unwrap());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    js
}

#[tokio::test]
async fn a_streaming_api_posted_once_runs_on_every_node_and_changes_everywhere() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let cluster = Cluster::start(&store, &store).await;
        cluster.post(echo("v1")).await;
        for node in &cluster.nodes {
            until_answers(node, "/echo/echo", (200, Some("v1 hello"))).await;
        }
        let changed = cluster
            .streams(Method::PUT, "/api/apis/streams/echo", echo("v2"))
            .await;
        assert_eq!(changed.0, 200, "{}", changed.1);
        for node in &cluster.nodes {
            until_answers(node, "/echo/echo", (200, Some("v2 hello"))).await;
        }
        let removed = send(cluster.db.req(Method::DELETE, "/api/apis/streams/echo")).await;
        assert_eq!(removed.0, 200, "{}", removed.1);
        for node in &cluster.nodes {
            until_answers(node, "/echo/echo", (404, None)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_kafka_stream_that_broadcasts_reaches_the_clients_of_every_node() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let cluster = Cluster::start(&store, &store).await;
        let id = &cluster.id;
        // One partition: a group shared by the nodes would hand all of it to one node.
        let topic = format!("cluster-feed-{id}");
        create_topic(&topic, 1).await;
        cluster
            .post(api(
                "feed",
                &format!(
                    "      input:\n        kafka: {{addresses: ['{}'], topics: ['{topic}'], consumer_group: feed-{id}}}\n      \
                     output:\n        http_server: {{stream_path: /events, delivery: broadcast}}\n",
                    kafka_addr()
                ),
            ))
            .await;
        let mut clients = cluster.clients("/feed/events").await;
        let sent: Vec<String> = (0..10).map(|i| format!("{{\"n\":{i}}}")).collect();
        produce(&topic, sent.clone()).await;
        for (node, client) in cluster.nodes.iter().zip(&mut clients) {
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

#[tokio::test]
async fn a_shared_durable_consumer_spreads_a_round_robin_stream_over_the_nodes_once() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let cluster = Cluster::start(&store, &store).await;
        let id = &cluster.id;
        let (stream, subject) = (format!("JOBS_{id}"), format!("jobs.{id}"));
        let js = jetstream(&stream, &subject).await;
        cluster
            .post(api(
                "jobs",
                &format!(
                    "      input:\n        nats_jetstream: {{urls: ['{NATS}'], stream: {stream}, durable: jobs-{id}}}\n      \
                     output:\n        http_server: {{stream_path: /events}}\n"
                ),
            ))
            .await;
        let mut clients = cluster.clients("/jobs/events").await;
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
        let unique: BTreeSet<&String> = got.iter().collect();
        assert_eq!(unique.len(), got.len(), "a message came twice: {got:?}");
        assert_eq!(unique, sent.iter().collect::<BTreeSet<_>>());
        assert!(
            per_node.iter().filter(|&&n| n > 0).count() >= 2,
            "one node took them all: {per_node:?}"
        );
        let _ = js.delete_stream(&stream).await;
    })
    .await;
}

#[tokio::test]
async fn producers_on_any_node_reach_the_broker_and_a_killed_node_loses_no_acknowledged_message() {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let mut cluster = Cluster::start(&store, &store).await;
        let topic = format!("cluster-publish-{}", cluster.id);
        create_topic(&topic, 1).await;
        cluster
            .post(api(
                "pub",
                &format!(
                    "      input:\n        http_server: {{path: /publish, allowed_verbs: [POST]}}\n      \
                     output:\n        kafka: {{addresses: ['{}'], topic: '{topic}'}}\n",
                    kafka_addr()
                ),
            ))
            .await;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        // Whether a POST of message `n` to the node on `port` was acknowledged.
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
        // Every node takes the stream's POSTs once it runs it.
        let warm_up = usize::MAX;
        for node in &cluster.nodes {
            let started = Instant::now();
            while !post(node.port, warm_up).await {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "node {} never took a POST",
                    node.port
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // Producers spread over the nodes; one node is killed halfway.
        let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
        let mut acked = Vec::new();
        let mut refused = 0;
        for n in 0..300 {
            if n == 150 {
                cluster.nodes.remove(1).kill().await;
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

        // Every acknowledged message is in the broker (the warm-up posts too).
        let mut got = records(&topic, acked.len() + ports.len()).await;
        got.retain(|m| m != &format!("m{warm_up}"));
        let missing: Vec<&String> = acked.iter().filter(|m| !got.contains(m)).collect();
        assert!(
            missing.is_empty(),
            "acknowledged but not in the broker: {missing:?}"
        );
        let duplicates = got.len() - got.iter().collect::<BTreeSet<_>>().len();
        eprintln!(
            "producers over 3 nodes, one killed halfway: 300 sent, {} acknowledged, \
             {refused} refused, 0 lost, {duplicates} duplicates in the broker",
            acked.len()
        );
    })
    .await;
}

/// Where a broadcast stream's messages come from in the resume test, and the metadata
/// that holds each one's position there.
#[derive(Clone, Copy)]
enum Feed {
    JetStream,
    Kafka,
    Redis,
}

/// A client reads 10 of 20 messages on the first node, the node is killed -9, 10 more
/// come, and the client resumes on another node with the last id it saw.
async fn resume_on_another_node(feed: Feed) {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let mut cluster = Cluster::start(&store, &store).await;
        let id = cluster.id.clone();
        let (input, id_metadata) = match feed {
            Feed::JetStream => (
                format!("nats_jetstream: {{urls: ['{NATS}'], stream: FEED_{id}, durable: feed-{id}}}"),
                "nats_sequence_stream",
            ),
            Feed::Kafka => (
                format!(
                    "kafka: {{addresses: ['{}'], topics: ['feed-{id}'], consumer_group: feed-{id}}}",
                    kafka_addr()
                ),
                "kafka_offset",
            ),
            Feed::Redis => (
                format!(
                    "redis_streams: {{url: '{REDIS}', streams: ['feed-{id}'], consumer_group: feed-{id}, \
                     start_from_oldest: false}}"
                ),
                "redis_stream_position",
            ),
        };
        let js = match feed {
            Feed::JetStream => Some(jetstream(&format!("FEED_{id}"), &format!("feed.{id}")).await),
            Feed::Kafka => {
                create_topic(&format!("feed-{id}"), 1).await;
                None
            }
            Feed::Redis => None,
        };
        let publish = |from: usize, to: usize| {
            let (js, id) = (js.clone(), id.clone());
            async move {
                let messages = (from..to).map(|n| format!("m{n}"));
                match js {
                    Some(js) => {
                        for m in messages {
                            js.publish(format!("feed.{id}"), m.into())
                                .await
                                .unwrap()
                                .await
                                .unwrap();
                        }
                    }
                    None if matches!(feed, Feed::Redis) => {
                        let client = redis::Client::open(REDIS).unwrap();
                        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                        for m in messages {
                            let _: String = redis::AsyncCommands::xadd(
                                &mut conn,
                                format!("feed-{id}"),
                                "*",
                                &[("body", m)],
                            )
                            .await
                            .unwrap();
                        }
                    }
                    None => produce(&format!("feed-{id}"), messages).await,
                }
            }
        };
        cluster
            .post(api(
                "feed",
                &format!(
                    "      input:\n        {input}\n      output:\n        http_server:\n          \
                     stream_path: /events\n          delivery: broadcast\n          \
                     id_metadata: {id_metadata}\n          replay_buffer: {{size: 4}}\n"
                ),
            ))
            .await;
        // A client on every node, so that every node delivers (a broadcast waits for one).
        let mut clients = cluster.clients("/feed/events").await;
        publish(0, 20).await;
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
        cluster.nodes.remove(0).kill().await;
        publish(20, 30).await;
        // It reconnects to another node with the last id it saw, as an EventSource does.
        // That node keeps the last 4 events: the 16 before are read back from the broker.
        let mut resumed = open(&cluster.nodes[0], "/feed/events", Some(&last)).await;
        let mut latest = last.clone();
        while seen.len() < 30 {
            match resumed.next_event(Duration::from_secs(20)).await {
                Some(event) => {
                    assert_ne!(event.name.as_deref(), Some("gap"), "{}", event.data);
                    latest = event.id.unwrap_or(latest);
                    seen.push(event.data);
                }
                None => panic!("resumed with {} of 30: {seen:?}", seen.len()),
            }
        }
        let want: Vec<String> = (0..30).map(|n| format!("m{n}")).collect();
        assert_eq!(seen, want, "every message once, in order");

        // The killed node restarts under its name and rejoins: the client comes back to
        // it from where it got to, and misses nothing published meanwhile.
        publish(30, 33).await;
        let back = cluster.node(0).await;
        let mut rejoined = open(&back, "/feed/events", Some(&latest)).await;
        publish(33, 35).await;
        let mut after: Vec<String> = Vec::new();
        while after.len() < 5 {
            match rejoined.next_event(Duration::from_secs(20)).await {
                Some(event) => {
                    assert_ne!(event.name.as_deref(), Some("gap"), "{}", event.data);
                    after.push(event.data);
                }
                None => panic!("rejoined with {} of 5: {after:?}", after.len()),
            }
        }
        let want: Vec<String> = (30..35).map(|n| format!("m{n}")).collect();
        assert_eq!(after, want, "the restarted node serves what came meanwhile and after");
        eprintln!(
            "resume on another node after kill -9 ({id_metadata}): 30 published, 30 \
             delivered once (the 20 missed read back from the broker past a buffer of 4), \
             0 lost, 0 duplicates (last id before the kill: {last}); the killed node \
             restarted and its client got the 5 published around its restart once"
        );
        if let Some(js) = js {
            let _ = js.delete_stream(&format!("FEED_{id}")).await;
        }
        if let Feed::Redis = feed {
            let client = redis::Client::open(REDIS).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let _: Result<(), _> = redis::AsyncCommands::del(&mut conn, format!("feed-{id}")).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_client_whose_node_is_killed_resumes_on_another_node_from_jetstream_positions() {
    resume_on_another_node(Feed::JetStream).await;
}

#[tokio::test]
async fn a_client_whose_node_is_killed_resumes_on_another_node_from_kafka_offsets() {
    resume_on_another_node(Feed::Kafka).await;
}

#[tokio::test]
async fn a_client_whose_node_is_killed_resumes_on_another_node_from_redis_stream_ids() {
    resume_on_another_node(Feed::Redis).await;
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
        let cluster = Cluster::start(&store, relayed.as_str()).await;
        cluster.post(echo("v1")).await;
        for node in &cluster.nodes {
            until_answers(node, "/echo/echo", (200, Some("v1 hello"))).await;
        }

        // The store goes away: the nodes go on serving what they loaded, over many of
        // their reloads, while the API changes in the store.
        relay.cut();
        let changed = cluster
            .streams(Method::PUT, "/api/apis/streams/echo", echo("v2"))
            .await;
        assert_eq!(changed.0, 200, "{}", changed.1);
        let outage = Instant::now();
        while outage.elapsed() < Duration::from_secs(2) {
            for node in &cluster.nodes {
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
        for node in &cluster.nodes {
            until_answers(node, "/echo/echo", (200, Some("v2 hello"))).await;
        }
    })
    .await;
}

/// Which broker carries the cluster's bus.
#[derive(Clone, Copy)]
enum BusKind {
    JetStream,
    Redis,
}

impl BusKind {
    /// The `cluster` section of a node's config: a bus of the test's own (stream,
    /// subjects or keys named after `id`).
    fn config(self, id: &str) -> String {
        match self {
            BusKind::JetStream => format!(
                "cluster:\n  bus:\n    nats_jetstream:\n      urls: ['{NATS}']\n      \
                 stream: BUS_{id}\n      subject_prefix: bus.{id}\n      max_age: 10m\n"
            ),
            BusKind::Redis => format!(
                "cluster:\n  bus:\n    redis_streams:\n      url: {REDIS}\n      \
                 key_prefix: 'bus-{id}:'\n"
            ),
        }
    }
}

/// POSTs `body` to `path` on `node`: the status.
async fn say(node: &Gw, path: &str, body: String) -> u16 {
    let resp = node
        .http
        .post(node.url(path))
        .body(body)
        .send()
        .await
        .unwrap();
    resp.status().as_u16()
}

/// The next `n` events of `client`, none of them a gap notice.
async fn next_events(client: &mut Sse, n: usize) -> Vec<common::streams::SseEvent> {
    let mut got: Vec<common::streams::SseEvent> = Vec::new();
    while got.len() < n {
        match client.next_event(Duration::from_secs(20)).await {
            Some(event) => {
                assert_ne!(event.name.as_deref(), Some("gap"), "{}", event.data);
                got.push(event);
            }
            None => panic!(
                "{} of {n} events came: {:?}",
                got.len(),
                got.iter().map(|e| &e.data).collect::<Vec<_>>()
            ),
        }
    }
    got
}

/// The data of the next `n` events of `client`.
async fn next_data(client: &mut Sse, n: usize) -> Vec<String> {
    next_events(client, n)
        .await
        .into_iter()
        .map(|e| e.data)
        .collect()
}

/// HTTP-to-HTTP streams over the bus: POSTs spread over the nodes reach the broadcast
/// clients of every node, in order; a round robin stream hands each POST to the one
/// node that has a client; a client whose node is killed resumes on another from the
/// bus's positions.
async fn http_to_http_over_the_bus(kind: BusKind) {
    let _shared = common::brokers::BROKER.read().await;
    with_postgres("sluice_cluster", |store| async move {
        let mut cluster = Cluster::start_with(&store, &store, REDIS, |id| kind.config(id)).await;
        let id = cluster.id.clone();
        cluster
            .post(api(
                "chat",
                "      input:\n        http_server: {path: /say}\n      output:\n        \
                 http_server: {stream_path: /events, delivery: broadcast, replay_buffer: {size: 2}}\n",
            ))
            .await;
        let mut clients = cluster.clients("/chat/events").await;
        // Every node serves the input too: each POST goes to the next node.
        for n in 0..12 {
            let node = &cluster.nodes[n % 3];
            let status = say(node, "/chat/say", format!("m{n}")).await;
            assert_eq!(status, 200, "POST m{n} to node {}", node.port);
        }
        let want: Vec<String> = (0..12).map(|n| format!("m{n}")).collect();
        let mut first_id = None;
        for (i, client) in clients.iter_mut().enumerate() {
            let events = next_events(client, 12).await;
            first_id = events[0].id.clone();
            let data: Vec<String> = events.into_iter().map(|e| e.data).collect();
            assert_eq!(data, want, "the clients of node {i}");
        }
        let first_id = first_id.expect("events over the bus carry its positions as ids");

        // Round robin: only the second node has a client, and it gets every POST.
        cluster
            .post(api(
                "queue",
                "      input:\n        http_server: {path: /job}\n      output:\n        \
                 http_server: {stream_path: /jobs}\n",
            ))
            .await;
        let mut worker = open(&cluster.nodes[1], "/queue/jobs", None).await;
        for n in 0..5 {
            until_served(&cluster.nodes[0], "/queue/job", format!("j{n}")).await;
        }
        let jobs: Vec<String> = (0..5).map(|n| format!("j{n}")).collect();
        assert_eq!(next_data(&mut worker, 5).await, jobs);

        // Resume: a client of the first node sees m12..m14, its node is killed, and it
        // reconnects to another with the last id it saw while more is posted.
        for n in 12..15 {
            assert_eq!(
                say(&cluster.nodes[1], "/chat/say", format!("m{n}")).await,
                200
            );
        }
        let mut last = None;
        for _ in 12..15 {
            let event = clients[0]
                .next_event(Duration::from_secs(20))
                .await
                .unwrap();
            last = event.id.clone();
        }
        let last = last.expect("events over the bus carry its positions as ids");
        clients.remove(0);
        cluster.nodes.remove(0).kill().await;
        for n in 15..20 {
            assert_eq!(
                say(&cluster.nodes[0], "/chat/say", format!("m{n}")).await,
                200
            );
        }
        // The node keeps 2 events for resuming: the other 3 are read back from the bus.
        let mut resumed = open(&cluster.nodes[1], "/chat/events", Some(&last)).await;
        let rest: Vec<String> = (15..20).map(|n| format!("m{n}")).collect();
        let got = next_data(&mut resumed, 5).await;
        assert_eq!(got, rest, "resumed after {last}");
        // From the very first: all of it from the bus, then the live events.
        let mut late = open(&cluster.nodes[0], "/chat/events", Some(&first_id)).await;
        let all: Vec<String> = (1..20).map(|n| format!("m{n}")).collect();
        let got = next_data(&mut late, 19).await;
        assert_eq!(got, all, "resumed after {first_id}");
        assert_eq!(say(&cluster.nodes[1], "/chat/say", "m20".into()).await, 200);
        assert_eq!(next_data(&mut late, 1).await, ["m20"]);
        assert_eq!(next_data(&mut resumed, 1).await, ["m20"]);
        eprintln!(
            "HTTP to HTTP over the {} bus: 12 POSTs over 3 nodes reached the clients of all \
             3 in order; 5 round robin jobs reached the one node with a client; after kill -9 \
             a client resumed on another node from id {last} with 5 of 5 (3 read back from \
             the bus), another from the first id with 19 of 19, then live; no gap",
            match kind {
                BusKind::JetStream => "nats_jetstream",
                BusKind::Redis => "redis_streams",
            }
        );
        if let BusKind::JetStream = kind {
            let js = async_nats::jetstream::new(async_nats::connect(NATS).await.unwrap());
            let _ = js.delete_stream(&format!("BUS_{id}")).await;
        }
    })
    .await;
}

/// POSTs `body` to `path` on `node` until the node serves the path (it may start the
/// stream after the test saw another node do so), then wants 200.
async fn until_served(node: &Gw, path: &str, body: String) {
    let started = Instant::now();
    loop {
        match say(node, path, body.clone()).await {
            200 => return,
            404 if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            status => panic!("POST {path} to node {}: {status}", node.port),
        }
    }
}

#[tokio::test]
async fn http_posts_reach_the_clients_of_every_node_over_a_jetstream_bus() {
    http_to_http_over_the_bus(BusKind::JetStream).await;
}

#[tokio::test]
async fn http_posts_reach_the_clients_of_every_node_over_a_redis_streams_bus() {
    http_to_http_over_the_bus(BusKind::Redis).await;
}

#[tokio::test]
async fn a_dry_run_warns_of_a_stream_that_stays_on_its_node_without_a_bus() {
    with_postgres("sluice_cluster", |store| async move {
        let cluster = Cluster::start(&store, &store).await;
        let doc = api(
            "chat",
            "      input:\n        http_server: {path: /say}\n      output:\n        \
             http_server: {stream_path: /events}\n",
        );
        let (status, body) = cluster
            .streams(Method::POST, "/api/apis/streams?dry_run=true", doc)
            .await;
        assert_eq!(status, 200, "{body}");
        let warning = &body["Warnings"][0];
        assert_eq!(warning["path"], "x-sluice-streaming.streams.main", "{body}");
        assert_eq!(warning["line"], 9, "{body}");
        assert!(warning["message"].as_str().unwrap().contains("cluster.bus"), "{body}");
        // A broker between them: nothing to warn of.
        let doc = api(
            "feed",
            &format!(
                "      input:\n        nats: {{urls: ['{NATS}'], subject: x}}\n      output:\n        \
                 http_server: {{stream_path: /events}}\n"
            ),
        );
        let (status, body) = cluster
            .streams(Method::POST, "/api/apis/streams?dry_run=true", doc)
            .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.get("Warnings").is_none(), "{body}");
    })
    .await;
}

#[tokio::test]
async fn without_redis_every_node_refuses_limited_requests_and_serves_the_rest() {
    with_postgres("sluice_cluster", |store| async move {
        // The nodes reach Redis through a relay, so that cutting it takes Redis away
        // from them alone.
        let mut relay = common::relay::Relay::to(6379);
        relay.resume().await;
        let redis = format!("redis://127.0.0.1:{}", relay.port);
        let cluster = Cluster::start_with(&store, &store, &redis, |_| String::new()).await;
        cluster.post(echo("free")).await;
        let limited = echo("limited")
            .replace("id: echo, name: echo", "id: limited, name: limited")
            .replace("/echo/", "/limited/")
            .replace(
                "  server:",
                "  upstream: {rateLimit: {rate: 1000, per: 60s}}\n  server:",
            );
        cluster.post(limited).await;
        for node in &cluster.nodes {
            until_answers(node, "/limited/echo", (200, Some("limited hello"))).await;
            until_answers(node, "/echo/echo", (200, Some("free hello"))).await;
        }

        relay.cut();
        for node in &cluster.nodes {
            until_answers(node, "/limited/echo", (503, None)).await;
            until_answers(node, "/echo/echo", (200, Some("free hello"))).await;
        }

        relay.resume().await;
        for node in &cluster.nodes {
            until_answers(node, "/limited/echo", (200, Some("limited hello"))).await;
        }
        eprintln!("Redis down: 3 of 3 nodes refused limited requests with 503 and served the others; all recovered");
    })
    .await;
}

#[tokio::test]
async fn a_post_is_not_acknowledged_when_the_bus_cannot_take_it() {
    // A bus nobody listens on: the POST must fail, never 200.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let chat = api(
        "chat",
        "      input:\n        http_server: {path: /say, timeout: 2s}\n      output:\n        \
         http_server: {stream_path: /events, delivery: broadcast}\n",
    );
    let node = Gw::start(
        &[("chat.yaml", chat)],
        &format!(
            "streaming:\n  enabled: true\ncluster:\n  bus:\n    nats_jetstream:\n      \
             urls: ['nats://127.0.0.1:{closed}']\n"
        ),
    )
    .await;
    let mut status = 404;
    let started = Instant::now();
    while status == 404 && started.elapsed() < Duration::from_secs(20) {
        status = say(&node, "/chat/say", "lost?".into()).await;
    }
    assert!(
        matches!(status, 408 | 502 | 503),
        "a message the bus did not store is not acknowledged: {status}"
    );
}

/// A `sluice serve` whose gateway has a JetStream bus of its own (stream `HT_{id}`,
/// subjects `ht{id}bus.>`) signed with a secret, and whose posted streams may reach
/// brokers on loopback: what a tenant's stream could reach, were the bus not refused.
async fn serve_with_bus(dir: &std::path::Path, id: &str) -> common::serve::Serve {
    let config = format!(
        "store:\n  url: '{store}'\nsecret: bus-secret-{id}\nstreaming:\n  enabled: true\n  \
         egress:\n    allow: ['127.0.0.1']\ncluster:\n  bus:\n    nats_jetstream:\n      \
         urls: ['{NATS}']\n      stream: HT_{id}\n      subject_prefix: ht{id}bus\n      \
         max_age: 10m\n",
        store = sluice::store::DEFAULT_URL,
    );
    std::fs::write(dir.join("gateway.yaml"), config).unwrap();
    common::serve::Serve::start_in_with_args(
        dir,
        &["--gateway-config", "gateway.yaml"],
        &[("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")],
    )
    .await
}

/// Posts a streaming API `id` with one stream `main` (YAML indented by six) to the
/// dashboard of `serve` as its administrator: the status and the answer.
async fn post_to(
    serve: &common::serve::Serve,
    id: &str,
    stream: &str,
    dry_run: bool,
) -> (u16, Value) {
    let query = if dry_run { "?dry_run=true" } else { "" };
    let req = serve
        .api(
            common::serve::ADMIN_KEY,
            Method::POST,
            &format!("/api/apis/streams{query}"),
        )
        .header("content-type", STREAMS)
        .body(api(id, stream));
    let (status, body) = send(req).await;
    (status.as_u16(), body)
}

#[tokio::test]
async fn a_posted_stream_may_not_name_the_bus_in_any_spelling() {
    let _shared = common::brokers::BROKER.read().await;
    let dir = tempfile::tempdir().unwrap();
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let serve = serve_with_bus(dir.path(), &id).await;
    let nats_in = |subject: &str| {
        format!(
            "      input:\n        nats: {{urls: ['{NATS}'], subject: '{subject}'}}\n      \
             output:\n        drop: {{}}\n"
        )
    };
    let at = |rest: &str| format!("x-sluice-streaming.streams.main.{rest}");
    let upper = id.to_uppercase();
    let refused = [
        (nats_in(&format!("ht{id}bus.>")), at("input.nats.subject")),
        (nats_in(&format!("ht{id}bus.*")), at("input.nats.subject")),
        (nats_in(&format!("HT{upper}BUS.>")), at("input.nats.subject")),
        (nats_in(">"), at("input.nats.subject")),
        (nats_in("*.>"), at("input.nats.subject")),
        (nats_in("sluice.bus.>"), at("input.nats.subject")),
        (
            nats_in(&format!("$JS.API.STREAM.DELETE.HT_{id}")),
            at("input.nats.subject"),
        ),
        (
            format!(
                "      input:\n        nats_jetstream: {{urls: ['{NATS}'], stream: hT_{id}}}\n      \
                 output:\n        drop: {{}}\n"
            ),
            at("input.nats_jetstream.stream"),
        ),
        (
            format!(
                "      input:\n        generate: {{mapping: 'root = 1', count: 1}}\n      \
                 output:\n        nats: {{urls: ['{NATS}'], subject: 'ht{id}bus.${{! meta(\"t\") }}'}}\n"
            ),
            at("output.nats.subject"),
        ),
        (
            format!(
                "      input:\n        generate: {{mapping: 'root = 1', count: 1}}\n      \
                 output:\n        nats_jetstream: {{urls: ['{NATS}'], subject: 'ht{id}bus.abc'}}\n"
            ),
            at("output.nats_jetstream.subject"),
        ),
        (
            format!(
                "      input:\n        redis_streams: {{url: '{REDIS}', streams: [orders, 'sluice:bus:x'], consumer_group: g}}\n      \
                 output:\n        drop: {{}}\n"
            ),
            at("input.redis_streams.streams[1]"),
        ),
        (
            format!(
                "      input:\n        redis_pubsub: {{url: '{REDIS}', channels: ['*'], use_patterns: true}}\n      \
                 output:\n        drop: {{}}\n"
            ),
            at("input.redis_pubsub.channels[0]"),
        ),
    ];
    for (i, (stream, path)) in refused.iter().enumerate() {
        for dry_run in [true, false] {
            let (status, body) = post_to(&serve, &format!("r{i}"), stream, dry_run).await;
            assert_eq!(status, 422, "{stream}: {body}");
            let problems = body["Errors"].as_array().cloned().unwrap_or_default();
            assert!(
                problems.iter().any(|p| p["path"] == path.as_str()
                    && p["message"].as_str().unwrap_or("").contains("cluster bus")),
                "{stream}: no problem at {path}: {body}"
            );
        }
    }
    // A subject of its own is the tenant's to use.
    let (status, body) = post_to(&serve, "own", &nats_in(&format!("orders_{id}.>")), false).await;
    assert_eq!(status, 201, "{body}");
    let js = async_nats::jetstream::new(async_nats::connect(NATS).await.unwrap());
    let _ = js.delete_stream(&format!("HT_{id}")).await;
}

#[tokio::test]
async fn a_message_put_on_the_bus_by_anyone_but_a_node_reaches_no_client() {
    let _shared = common::brokers::BROKER.read().await;
    let dir = tempfile::tempdir().unwrap();
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let serve = serve_with_bus(dir.path(), &id).await;
    let (status, body) = post_to(
        &serve,
        "chat",
        "      input:\n        http_server: {path: /say}\n      output:\n        \
         http_server: {stream_path: /events, delivery: broadcast}\n",
        false,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // The operator watches the bus's subjects, to learn the topic and forge on it.
    let nats = async_nats::connect(NATS).await.unwrap();
    let mut watch = nats.subscribe(format!("ht{id}bus.>")).await.unwrap();
    nats.flush().await.unwrap();
    let started = Instant::now();
    let mut sse = loop {
        match serve.gateway("/chat/events").send().await {
            Ok(r) if r.status() == 200 => break Sse::of(r),
            _ => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no /chat/events"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let say = |body: &'static str| {
        serve
            .http
            .post(format!("http://127.0.0.1:{}/chat/say", serve.gw))
            .body(body)
            .send()
    };
    // The node's reader starts in the background: post until the client hears it.
    let first = loop {
        assert_eq!(say("m1").await.unwrap().status(), 200);
        if let Some(data) = sse.next(Duration::from_millis(500)).await {
            break data;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "nothing came");
    };
    assert_eq!(first, "m1");
    let signed = tokio::time::timeout(
        Duration::from_secs(10),
        futures::StreamExt::next(&mut watch),
    )
    .await
    .unwrap()
    .unwrap();
    let headers = signed.headers.clone().unwrap_or_default();
    assert!(
        headers.get("Sluice-Signature").is_some(),
        "the node signs what it publishes"
    );

    // Put on the bus's subject without a signature, and with the signature of another
    // message: neither reaches the client.
    let js = async_nats::jetstream::new(nats.clone());
    js.publish(signed.subject.clone(), "forged".into())
        .await
        .unwrap()
        .await
        .unwrap();
    js.publish_with_headers(signed.subject.clone(), headers, "forged too".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(say("m2").await.unwrap().status(), 200);
    let mut got = Vec::new();
    while got.last().map(String::as_str) != Some("m2") {
        match sse.next(Duration::from_secs(10)).await {
            Some(data) => got.push(data),
            None => panic!("m2 never came; got {got:?}"),
        }
    }
    assert_eq!(got, ["m2"], "a forged message reached the client");
    let metrics = format!("http://127.0.0.1:{}/metrics", serve.control);
    let counted = loop {
        let text = serve
            .http
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if let Some(line) = text
            .lines()
            .find(|l| l.starts_with("sluice_bus_messages_refused_total{reason=\"signature\"}"))
        {
            break line.to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no refusal counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(counted.ends_with(" 2"), "{counted}");
    let _ = js.delete_stream(&format!("HT_{id}")).await;
}
