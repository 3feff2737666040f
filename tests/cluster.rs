//! Several gateways as one cluster: a dashboard and three `sluice gateway` processes on
//! one PostgreSQL store and one Redis, as `scripts/cluster.sh` starts them. A streaming
//! API posted once to the dashboard runs on every node, and a change or a removal
//! reaches every node.

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::common;

use common::dashboard::{send, Db};
use common::harness::Gw;
use common::postgres::with_postgres;

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
