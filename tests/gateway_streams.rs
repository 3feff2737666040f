//! Streaming APIs through `sluice gateway`: streams of `x-sluice-streaming` served under
//! an API's listen path, behind its authentication, with real SSE clients.

use crate::common;
use crate::common::harness;
use crate::common::upstream;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use common::streams::{create_topic, kafka_addr, Sse};
use harness::Gw;

const STREAMING_ON: &str = "streaming:\n  enabled: true\n  drain_timeout: 1s\n";

/// A streams-only API with key auth: `/publish` takes messages, `/events` streams them
/// (round robin), and a second stream `other` whose mapping is `mapping`.
fn streaming_api(mapping: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: live, version: "1"}}
paths: {{}}
components:
  securitySchemes:
    key: {{type: apiKey, in: header, name: X-Api-Key}}
security:
  - key: []
x-sluice-api-gateway:
  info: {{id: live, name: live}}
  server:
    listenPath: {{value: /live, strip: true}}
    authentication: {{enabled: true}}
x-sluice-streaming:
  streams:
    main:
      input:
        http_server: {{path: /publish, allowed_verbs: [POST]}}
      output:
        http_server: {{stream_path: /events}}
    other:
      input:
        http_server: {{path: /other/publish}}
      pipeline:
        processors:
          - mapping: '{mapping}'
      output:
        http_server: {{path: /other/next, stream_path: /other/events, ws_path: /other/ws}}
"#
    )
}

async fn publish(gw: &Gw, path: &str, key: &str, body: &str) -> u16 {
    gw.http
        .post(gw.url(path))
        .header("x-api-key", key)
        .body(body.to_owned())
        .send()
        .await
        .expect("publish")
        .status()
        .as_u16()
}

/// Publishes `m0` .. `m{n-1}` to `path`, each answered 200.
async fn publish_numbered(gw: &Gw, path: &str, key: &str, n: usize) {
    for i in 0..n {
        assert_eq!(publish(gw, path, key, &format!("m{i}")).await, 200);
    }
}

/// `m0` .. `m{n-1}`, sorted as strings: what a consumer side must have seen, sorted.
fn numbered(n: usize) -> Vec<String> {
    let mut all: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    all.sort();
    all
}

async fn key_for(gw: &Gw, api: &str) -> String {
    let key = gw.create_key(json!({"access_rights": {api: {}}})).await;
    key["key"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_producer_reaches_consumers_round_robin_behind_key_auth() {
    let gw = Gw::start(&[("live.yaml", streaming_api("root = this"))], STREAMING_ON).await;
    let key = key_for(&gw, "live").await;
    // No key, no stream: asked as a browser asks for an event stream, or plainly.
    let r = gw
        .http
        .get(gw.url("/live/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("error"));
    let r = gw.http.get(gw.url("/live/events")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = gw
        .http
        .post(gw.url("/live/publish"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Sse::open(&gw, "/live/events", &key).await);
    }
    // Each is in the rotation once opened (it waited for `: connected`).
    publish_numbered(&gw, "/live/publish", &key, 9).await;
    let mut seen = Vec::new();
    for client in &mut clients {
        let mut got = Vec::new();
        while let Some(data) = client.next(Duration::from_millis(500)).await {
            got.push(data);
        }
        assert_eq!(got.len(), 3, "each client gets a third: {got:?}");
        seen.extend(got);
    }
    seen.sort();
    assert_eq!(seen, numbered(9), "every message exactly once");

    // A path that no stream serves, under an API of streams only.
    let r = gw
        .http
        .get(gw.url("/live/nowhere"))
        .header("x-api-key", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"].is_string());
}

/// Consumers' connections move to the serving thread of their stream (a GET of a
/// stream path); with several serving threads, some are accepted on another and moved.
#[tokio::test]
async fn consumers_accepted_on_any_serving_thread_get_every_message() {
    let config = format!("{STREAMING_ON}workers: 2\n");
    let gw = Gw::start(&[("live.yaml", streaming_api("root = this"))], &config).await;
    let key = key_for(&gw, "live").await;
    // Each on a connection of its own: the kernel spreads them over both threads.
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(Sse::open(&gw, "/live/other/events", &key).await);
    }
    publish_numbered(&gw, "/live/other/publish", &key, 16).await;
    let mut got = Vec::new();
    for client in &mut clients {
        while let Some(data) = client.next(Duration::from_millis(500)).await {
            got.push(data);
        }
    }
    got.sort();
    assert_eq!(
        got,
        numbered(16),
        "every message exactly once, over all the clients"
    );
}

#[tokio::test]
async fn changing_a_stream_keeps_its_clients_and_those_of_the_others() {
    let gw = Gw::start(&[("live.yaml", streaming_api("root = this"))], STREAMING_ON).await;
    let key = key_for(&gw, "live").await;
    let mut main = Sse::open(&gw, "/live/events", &key).await;
    let mut other = Sse::open(&gw, "/live/other/events", &key).await;
    assert_eq!(
        publish(&gw, "/live/other/publish", &key, r#"{"n":1}"#).await,
        200
    );
    assert_eq!(
        other.next(Duration::from_secs(5)).await.unwrap(),
        r#"{"n":1}"#
    );

    // Change only `other`'s mapping. Its client stays connected: what is published while
    // the gateway picks the change up arrives once, under the old mapping, until the new
    // one takes over.
    gw.write_api("live.yaml", &streaming_api("root.n = this.n + 100"));
    let started = std::time::Instant::now();
    let mut n = 1;
    loop {
        n += 1;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the new mapping never took over"
        );
        let body = format!(r#"{{"n":{n}}}"#);
        assert_eq!(publish(&gw, "/live/other/publish", &key, &body).await, 200);
        let got = other
            .next(Duration::from_secs(5))
            .await
            .expect("the changed stream's client is still served");
        if got == format!(r#"{{"n":{}}}"#, n + 100) {
            break;
        }
        assert_eq!(
            got, body,
            "each message once, under the old mapping or the new"
        );
    }
    // From then on, the new mapping only; the unchanged stream's client is served too.
    assert_eq!(
        publish(&gw, "/live/other/publish", &key, r#"{"n":0}"#).await,
        200
    );
    assert_eq!(
        other.next(Duration::from_secs(5)).await.unwrap(),
        r#"{"n":100}"#
    );
    assert_eq!(publish(&gw, "/live/publish", &key, "still here").await, 200);
    assert_eq!(
        main.next(Duration::from_secs(5)).await.unwrap(),
        "still here"
    );
}

#[tokio::test]
async fn with_streaming_off_stream_paths_say_so() {
    let gw = Gw::start(&[("live.yaml", streaming_api("root = this"))], "").await;
    let key = key_for(&gw, "live").await;
    let r = gw
        .http
        .get(gw.url("/live/events"))
        .header("x-api-key", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("streaming is disabled"),
        "{body}"
    );
}

#[tokio::test]
async fn host_reaching_components_and_mappings_are_refused() {
    let with_file = streaming_api("root = this").replace(
        "        http_server: {stream_path: /events}",
        "        file: {path: /tmp/sluice-should-not-exist.log}",
    );
    let gw = Gw::start(&[("live.yaml", with_file.clone())], STREAMING_ON).await;
    let apis = gw.apis().await;
    let error = apis["errors"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("`file` reaches the gateway's host"),
        "{error}"
    );
    assert!(
        error.contains("x-sluice-streaming.streams.main.output.file"),
        "{error}"
    );

    // A posted API's mappings cannot read the host's environment.
    let posted: Value = serde_yaml::from_str(&streaming_api("root = env(\"HOME\")")).unwrap();
    let r = gw
        .admin(Method::POST, "/sluice/apis")
        .json(&posted)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("reads the host"),
        "{body}"
    );

    // Allowed explicitly, the file output loads.
    let allowed = Gw::start(
        &[("live.yaml", with_file)],
        "streaming:\n  enabled: true\n  allow_unsafe: [file]\n",
    )
    .await;
    let apis = allowed.apis().await;
    assert_eq!(apis["apis"][0]["id"], "live", "{apis}");

    // Processors that run programs, and fields that read files, are refused the same
    // way, and loaded when listed.
    let with_programs = streaming_api("root = this").replace(
        "          - mapping: 'root = this'",
        "          - command: {name: sh}\n          - subprocess: {name: cat}\n          - json_schema: {schema_path: /tmp/sluice-no-schema.json}",
    );
    assert!(with_programs.contains("subprocess"), "{with_programs}");
    let refused = Gw::start(&[("live.yaml", with_programs.clone())], STREAMING_ON).await;
    let apis = refused.apis().await;
    let error = apis["errors"][0]["error"].as_str().unwrap();
    for said in [
        "`command` reaches the gateway's host",
        "`subprocess` reaches the gateway's host",
        "`json_schema.schema_path` reads the gateway's files",
    ] {
        assert!(error.contains(said), "{said}: {error}");
    }
    let schema = std::env::temp_dir().join("sluice-gateway-schema.json");
    std::fs::write(&schema, r#"{"type":"object"}"#).unwrap();
    let with_programs =
        with_programs.replace("/tmp/sluice-no-schema.json", &schema.display().to_string());
    let allowed = Gw::start(
        &[("live.yaml", with_programs)],
        "streaming:\n  enabled: true\n  allow_unsafe: [command, json_schema, subprocess]\n",
    )
    .await;
    let apis = allowed.apis().await;
    assert_eq!(apis["apis"][0]["id"], "live", "{apis}");
}

#[tokio::test]
async fn the_streaming_examples_load_and_carry_messages() {
    let _shared = common::brokers::BROKER.read().await;
    let up = upstream::Upstream::start().await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (topic, fan_topic) = (format!("gw-events-{id}"), format!("gw-fan-{id}"));
    create_topic(&topic, 1).await;
    create_topic(&fan_topic, 1).await;
    let subject = format!("feed.{id}");
    let env = [
        ("KAFKA_ADDRESSES", kafka_addr()),
        ("KAFKA_TOPIC", topic.clone()),
        ("KAFKA_GROUP", format!("gw-sse-{id}")),
        ("NATS_SUBJECT", subject.clone()),
        ("STATUS_URL", format!("{}/status", up.url())),
        ("FAN_OUT_TOPIC", fan_topic),
        ("FAN_OUT_SUBJECT", format!("fan.{id}")),
    ];
    let mut apis = Vec::new();
    for entry in std::fs::read_dir("apis/streaming").unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        apis.push((name, std::fs::read_to_string(&path).unwrap()));
    }
    let apis: Vec<(&str, String)> = apis.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let tmp = tempfile::tempdir().unwrap();
    let gw = Gw::start_in(tmp.path().to_path_buf(), None, &apis, STREAMING_ON, &env).await;
    let listed = gw.apis().await;
    assert_eq!(listed["errors"], json!([]), "{listed}");
    assert_eq!(
        listed["apis"].as_array().unwrap().len(),
        apis.len(),
        "{listed}"
    );
    let key = gw
        .create_key(json!({"access_rights": {"kafka-events": {}, "kafka-publish": {}, "feed": {}, "fan-out": {}}}))
        .await;
    let key = key["key"].as_str().unwrap().to_owned();

    // HTTP -> Kafka -> SSE, through two APIs.
    let mut events = Sse::open(&gw, "/kafka-events/events", &key).await;
    assert_eq!(
        publish(&gw, "/kafka-publish/publish", &key, r#"{"n":1}"#).await,
        200
    );
    assert_eq!(
        events.next(Duration::from_secs(20)).await.unwrap(),
        r#"{"n":1}"#
    );

    // NATS -> SSE, broadcast to two clients.
    let mut a = Sse::open(&gw, "/feed/live", &key).await;
    let mut b = Sse::open(&gw, "/feed/live", &key).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let nats = async_nats::connect("nats://127.0.0.1:4222").await.unwrap();
    nats.publish(subject.clone(), r#"{"eur":1.08}"#.into())
        .await
        .unwrap();
    nats.flush().await.unwrap();
    let want = format!(r#"{{"eur":1.08,"subject":"{subject}"}}"#);
    assert_eq!(a.next(Duration::from_secs(10)).await.unwrap(), want);
    assert_eq!(b.next(Duration::from_secs(10)).await.unwrap(), want);

    // Fan out to Kafka and NATS: answered once both have it.
    assert_eq!(publish(&gw, "/fan-out/publish", &key, "both").await, 200);

    // Polling: the upstream's answers arrive without any key (the API has no auth).
    let resp = gw.http.get(gw.url("/status/updates")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut status = Sse::of(resp);
    let first: Value =
        serde_json::from_str(&status.next(Duration::from_secs(10)).await.unwrap()).unwrap();
    assert_eq!(first["path"], "/status");
    drop(tmp);
}

#[tokio::test]
async fn per_client_streams_follow_the_request_and_are_collected_when_idle() {
    let _shared = common::brokers::BROKER.read().await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let doc = nats_api(
        "inbox",
        &format!("inbox.{id}.$sluice_context.request_data_user"),
        "",
    );
    let config = format!("{STREAMING_ON}  client_idle_timeout: 1s\n  max_client_streams: 2\n");
    let gw = Gw::start(&[("inbox.yaml", doc)], &config).await;
    let open = |user: &str| {
        let url = gw.url(&format!("/inbox/events?user={user}"));
        let http = gw.http.clone();
        async move {
            let resp = http.get(url).send().await.unwrap();
            (resp.status().as_u16(), resp)
        }
    };
    let (status, alice) = open("alice").await;
    assert_eq!(status, 200);
    let (status, bob) = open("bob").await;
    assert_eq!(status, 200);
    let mut alice = Sse::of(alice);
    let mut bob = Sse::of(bob);
    // The cap: a third user waits for a free slot.
    assert_eq!(open("carol").await.0, 503);
    // Unsafe values never reach the config.
    assert_eq!(open("a%7Db").await.0, 400);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let nats = async_nats::connect("nats://127.0.0.1:4222").await.unwrap();
    nats.publish(format!("inbox.{id}.alice"), "for alice".into())
        .await
        .unwrap();
    nats.publish(format!("inbox.{id}.bob"), "for bob".into())
        .await
        .unwrap();
    nats.flush().await.unwrap();
    assert_eq!(
        alice.next(Duration::from_secs(5)).await.unwrap(),
        "for alice"
    );
    assert_eq!(bob.next(Duration::from_secs(5)).await.unwrap(), "for bob");
    // Alice's next event is the one sent to her after bob's: bob's never reached her.
    nats.publish(format!("inbox.{id}.alice"), "again for alice".into())
        .await
        .unwrap();
    nats.flush().await.unwrap();
    assert_eq!(
        alice.next(Duration::from_secs(5)).await.unwrap(),
        "again for alice",
        "alice sees only hers"
    );

    async fn instances(gw: &Gw) -> u64 {
        gw.apis().await["apis"][0]["client_streams"]
            .as_u64()
            .unwrap()
    }
    assert_eq!(instances(&gw).await, 2);
    // While a client is connected its instance stays, idle time or not.
    async fn wait_instances(gw: &Gw, n: u64, what: &str) {
        let started = std::time::Instant::now();
        while instances(gw).await != n {
            assert!(started.elapsed() < Duration::from_secs(10), "{what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(bob);
    wait_instances(&gw, 1, "bob's idle instance is not collected").await;
    // Alice is connected: hers stays however long she is idle.
    assert_eq!(instances(&gw).await, 1);
    drop(alice);
    wait_instances(&gw, 0, "alice's instance stays").await;
}

#[tokio::test]
async fn a_posted_stream_whose_input_cannot_connect_is_stopped_and_reported() {
    let config = format!("{STREAMING_ON}  max_connect_failures: 2\n");
    let gw = Gw::start(&[], &config).await;
    // Nothing listens on port 1: every connection attempt is refused at once.
    let doc = r#"openapi: 3.0.3
info: {title: dead, version: "1"}
paths: {}
x-sluice-api-gateway:
  info: {id: dead, name: dead}
  server:
    listenPath: {value: /dead, strip: true}
x-sluice-streaming:
  streams:
    main:
      input:
        nats: {urls: ["nats://127.0.0.1:1"], subject: nowhere}
      output:
        http_server: {stream_path: /events}
"#;
    let posted: Value = serde_yaml::from_str(doc).unwrap();
    let r = gw
        .admin(Method::POST, "/sluice/apis")
        .json(&posted)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let started = std::time::Instant::now();
    let reason = loop {
        let apis = gw.apis().await;
        let failed = apis["apis"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == "dead")
            .map(|a| a["failed_streams"]["main"].clone());
        if let Some(Value::String(reason)) = failed {
            break reason;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the stream was never reported: {apis}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reason.contains("failed to connect 2 times"), "{reason}");
    // The failure is counted where Prometheus reads it.
    let metrics = gw.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_stream_failures_total")
                && l.contains("api_id=\"dead\"")
                && l.contains("stream=\"main\"")),
        "{metrics}"
    );
}

/// A stream written for Tyk Streams, filtering a shared subject per user with
/// `$tyk_context.*` in a mapping, works as written: each user's client gets that user's
/// events only (the placeholder is never taken as literal text, which would filter
/// nothing, or everything).
#[tokio::test]
async fn tyk_context_placeholders_filter_a_shared_subject_per_user() {
    let _shared = common::brokers::BROKER.read().await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let doc = nats_api(
        "orders",
        &format!("orders.{id}"),
        r#"
      pipeline:
        processors:
          - mapping: 'root = if this.user == "$tyk_context.request_data_user" { this } else { deleted() }'"#,
    );
    let gw = Gw::start(&[("orders.yaml", doc)], STREAMING_ON).await;
    let open = |user: &str| {
        let url = gw.url(&format!("/orders/events?user={user}"));
        let http = gw.http.clone();
        async move {
            let resp = http.get(url).send().await.unwrap();
            assert_eq!(resp.status(), 200);
            Sse::of(resp)
        }
    };
    let mut alice = open("alice").await;
    let mut bob = open("bob").await;
    let nats = async_nats::connect("nats://127.0.0.1:4222").await.unwrap();
    let subject = format!("orders.{id}");
    // The users' instances subscribe as they start: publish until both are served.
    let (mut to_alice, mut to_bob) = (Vec::new(), Vec::new());
    for i in 0..100 {
        for user in ["bob", "alice"] {
            let event = json!({"user": user, "n": i}).to_string();
            nats.publish(subject.clone(), event.into()).await.unwrap();
        }
        nats.flush().await.unwrap();
        if let Some(e) = alice.next(Duration::from_millis(100)).await {
            to_alice.push(e);
        }
        if let Some(e) = bob.next(Duration::from_millis(100)).await {
            to_bob.push(e);
        }
        if !to_alice.is_empty() && !to_bob.is_empty() {
            break;
        }
    }
    assert!(!to_alice.is_empty() && !to_bob.is_empty(), "never served");
    while let Some(e) = alice.next(Duration::from_millis(300)).await {
        to_alice.push(e);
    }
    while let Some(e) = bob.next(Duration::from_millis(300)).await {
        to_bob.push(e);
    }
    let user_of = |e: &String| serde_json::from_str::<Value>(e).unwrap()["user"].clone();
    assert!(
        to_alice.iter().all(|e| user_of(e) == "alice"),
        "{to_alice:?}"
    );
    assert!(to_bob.iter().all(|e| user_of(e) == "bob"), "{to_bob:?}");
}

/// An API `id` on `/<id>` whose stream `mine` reads NATS `subject`, runs `pipeline` (YAML
/// lines under the stream, or nothing) and serves SSE on `/events`.
fn nats_api(id: &str, subject: &str, pipeline: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: "1"}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server:
    listenPath: {{value: /{id}, strip: true}}
x-sluice-streaming:
  streams:
    mine:
      input:
        nats:
          urls: [nats://127.0.0.1:4222]
          subject: {subject}{pipeline}
      output:
        http_server: {{stream_path: /events}}
"#
    )
}
