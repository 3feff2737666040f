//! The AsyncAPI 3.0 document the dashboard makes of a streaming API
//! (`GET /api/apis/streams/{id}/asyncapi`), checked against the AsyncAPI 3.0.0 JSON
//! schema published by the AsyncAPI initiative (the `@asyncapi/specs` package, installed
//! with the browser tests' Node packages by `scripts/browser.sh`).

use reqwest::Method;
use serde_json::Value;

use crate::common;
use common::dashboard::{send, Db};

const ADMIN_KEY: &str = "asyncapi-admin-key-0123456789";

/// The AsyncAPI 3.0.0 schema, with its definitions inline.
fn schema() -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/browser/node_modules/@asyncapi/specs/schemas/3.0.0-without-$id.json"
    );
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}; run scripts/browser.sh to install it"));
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

/// A streaming API with every kind of channel: HTTP in and out, SSE, WebSocket, webhooks
/// of the portal, and brokers.
const CHAT: &str = "\
openapi: 3.0.3
info: {title: chat, version: '1.2', description: Rooms that talk.}
servers: [{url: 'https://api.example.com:8443'}]
paths: {}
x-sluice-api-gateway:
  info: {id: chat, name: Chat}
  server: {listenPath: {value: /chat/, strip: true}}
x-sluice-streaming:
  streams:
    talk:
      input:
        http_server: {path: /say, ws_path: /say/ws}
      output:
        broker:
          outputs:
            - http_server: {path: /next, stream_path: /events, ws_path: /events/ws, delivery: broadcast}
            - websocket_server: {path: /live}
            - kafka: {addresses: ['127.0.0.1:9092'], topic: chat}
            - portal_webhook: {event_type: chat.said, portal_url: 'http://127.0.0.1:1/', secret: '0123456789abcdef'}
    feed:
      input:
        broker:
          inputs:
            - kafka: {addresses: ['127.0.0.1:9092'], topics: [orders], consumer_group: g}
            - nats: {urls: ['nats://127.0.0.1:4222'], subject: orders.new, queue: q}
            - mqtt: {urls: ['tcp://127.0.0.1:1883'], topics: [sensors/#], qos: 1}
            - amqp_0_9: {urls: ['amqp://guest:guest@127.0.0.1:5672/'], queue: jobs}
            - redis_streams: {url: 'redis://127.0.0.1:6379', streams: [s1], consumer_group: g}
      output:
        fallback:
          - http_server: {stream_path: /feed}
          - amqp_0_9: {urls: ['amqp://guest:guest@127.0.0.1:5672/'], exchange: audit, key: feed}
          - mqtt: {urls: ['tcp://127.0.0.1:1883'], topic: out/feed, qos: 2}
";

#[tokio::test]
async fn a_streaming_apis_asyncapi_document_is_valid_and_names_every_channel() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("dash.db").display());
    let config = format!("streaming:\n  enabled: true\nadmin:\n  key: {ADMIN_KEY}\n");
    let db = Db::start(tmp.path(), &store, &config, ADMIN_KEY).await;
    let made = send(
        db.http
            .request(Method::POST, db.url("/api/apis/streams"))
            .header("Authorization", ADMIN_KEY)
            .header("content-type", "application/vnd.sluice.streams.oas")
            .body(CHAT),
    )
    .await;
    assert_eq!(made.0, 201, "{}", made.1);
    let get = |query: &str| {
        db.http
            .get(db.url(&format!("/api/apis/streams/chat/asyncapi{query}")))
            .header("Authorization", ADMIN_KEY)
    };
    let (status, doc) = send(get("")).await;
    assert_eq!(status, 200, "{doc}");

    let schema = schema();
    let errors: Vec<String> = schema
        .iter_errors(&doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    // The schema does tell: an AsyncAPI 2 verb, or a binding of the wrong shape, fails.
    let mut broken = doc.clone();
    broken["operations"]["talk.in-post"]["action"] = "publish".into();
    assert!(!schema.is_valid(&broken));
    let mut broken = doc.clone();
    broken["operations"]["talk.in-post"]["bindings"]["http"]["method"] = "FETCH".into();
    assert!(!schema.is_valid(&broken));

    // The gateway as the document's `servers` names it, and every channel.
    assert_eq!(doc["servers"]["gateway"]["host"], "api.example.com:8443");
    assert_eq!(doc["servers"]["gateway"]["protocol"], "https");
    assert_eq!(doc["servers"]["gateway-ws"]["protocol"], "wss");
    assert_eq!(doc["servers"]["gateway"]["pathname"], "/chat");
    let channels = doc["channels"].as_object().unwrap();
    let addresses: Vec<&str> = channels
        .values()
        .filter_map(|c| c["address"].as_str())
        .collect();
    for address in [
        "/say",
        "/say/ws",
        "/next",
        "/events",
        "/events/ws",
        "/live",
        "chat",
        "orders",
        "orders.new",
        "sensors/#",
        "jobs",
        "s1",
        "/feed",
        "feed",
        "out/feed",
    ] {
        assert!(addresses.contains(&address), "{address} in {addresses:?}");
    }
    assert!(channels["talk.out3-webhook"]["address"].is_null());
    assert_eq!(doc["operations"]["talk.in-post"]["action"], "receive");
    assert_eq!(doc["operations"]["talk.out0-sse"]["action"], "send");
    assert!(
        !doc.to_string().contains("guest:guest"),
        "credentials stay out"
    );

    // Asked for another host, without TLS.
    let (status, doc) = send(get("?host=gw.internal:8080&tls=false")).await;
    assert_eq!(status, 200);
    assert_eq!(doc["servers"]["gateway"]["host"], "gw.internal:8080");
    assert_eq!(doc["servers"]["gateway"]["protocol"], "http");
    let (status, body) = send(get("?host=evil.com/x")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["Message"].as_str().unwrap().contains("`host`"),
        "{body}"
    );
    let (status, _) = send(
        db.http
            .get(db.url("/api/apis/streams/nope/asyncapi"))
            .header("Authorization", ADMIN_KEY),
    )
    .await;
    assert_eq!(status, 404);
}
