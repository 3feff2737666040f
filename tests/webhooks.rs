//! Webhooks fired by the gateway's events, delivered by real `sluice gateway` processes
//! to real HTTP receivers: rendered templates and headers, the cool-down, retries with
//! one idempotency key, dead letters and their replay, and a process killed with SIGKILL
//! mid-retry that still delivers after a restart.

use crate::common;
use crate::common::harness;

use std::time::Duration;

use common::receiver::Receiver;
use harness::Gw;
use sluice::store::{
    DashboardKeyRecord, HookRecord, OrgRecord, Store, UserRecord, DEAD, DELIVERED,
};

const WAIT: Duration = Duration::from_secs(15);

/// Quick retries, so tests do not wait long.
fn config(dir: &std::path::Path, initial_backoff: &str) -> String {
    format!(
        "webhooks:\n  initial_backoff: {initial_backoff}\n  max_backoff: 1s\n  max_attempts: 4\n  poll_interval: 50ms\n  templates: {}\n",
        dir.join("templates").display()
    )
}

/// An API with key auth (so a request without a key is an auth failure) and `handlers`
/// under `server.eventHandlers`.
fn api(handlers: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: pets, version: "1"}}
paths: {{}}
components:
  securitySchemes:
    key: {{type: apiKey, in: header, name: X-Api-Key}}
security:
  - key: []
x-sluice-api-gateway:
  info: {{id: pets, name: Pets, orgId: o1}}
  upstream: {{url: "http://127.0.0.1:9"}}
  server:
    listenPath: {{value: /pets, strip: true}}
    authentication: {{enabled: true}}
    eventHandlers:
{handlers}"#
    )
}

/// A handler that calls `receiver` at `/hook` on every auth failure.
fn on_auth_failure(receiver: &Receiver) -> String {
    format!(
        "      - events: [auth_failure]\n        targetPath: {}\n",
        receiver.url("/hook")
    )
}

async fn start(dir: &std::path::Path, handlers: &str, backoff: &str) -> Gw {
    Gw::start_in(
        dir.to_owned(),
        None,
        &[("pets.yaml", api(handlers))],
        &config(dir, backoff),
        &[],
    )
    .await
}

async fn store(dir: &std::path::Path) -> Store {
    Store::open(&format!("sqlite://{}", dir.join("sluice.db").display()))
        .await
        .expect("open the gateway's store")
}

/// The deliveries of organisation `o1`, newest first.
async fn deliveries(dir: &std::path::Path) -> Vec<sluice::store::DeliveryRecord> {
    store(dir)
        .await
        .list_deliveries("o1", None, sluice::store::Page::ALL)
        .await
        .unwrap()
        .0
}

/// Waits until the gateway's handlers have held back `count` events within their
/// cool-down.
async fn wait_held(gw: &Gw, count: u64) {
    let start = std::time::Instant::now();
    loop {
        let held: u64 = gw
            .metrics()
            .await
            .lines()
            .filter(|l| l.starts_with("sluice_gateway_webhooks_held_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        if held == count {
            return;
        }
        assert!(
            held < count && start.elapsed() < WAIT,
            "{held} held, not {count}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until delivery `id` has `status`.
async fn wait_status(
    dir: &std::path::Path,
    id: &str,
    status: &str,
) -> sluice::store::DeliveryRecord {
    let start = std::time::Instant::now();
    loop {
        let store = store(dir).await;
        if let Some((d, _)) = store.delivery("o1", id).await.unwrap() {
            if d.status == status {
                return d;
            }
            assert!(
                start.elapsed() < WAIT,
                "delivery {id} is {} not {status}: {d:?}",
                d.status
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_hook_fires_on_an_auth_failure_with_its_template_and_headers_then_cools_down() {
    let receiver = Receiver::start(&[], 200).await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("templates")).unwrap();
    std::fs::write(
        tmp.path().join("templates/alert.json"),
        r#"{"text": "{{ event }} on {{ api_name }} at {{ path }}", "key": {{ key_id | tojson }}}"#,
    )
    .unwrap();
    let handlers = format!(
        "      - events: [auth_failure]\n        targetPath: {}\n        method: PUT\n        headerMap: {{X-Team: ops, Content-Type: application/json}}\n        templatePath: alert.json\n        eventTimeout: 60\n",
        receiver.url("/alerts")
    );
    let gw = start(tmp.path(), &handlers, "100ms").await;

    let resp = gw.http.get(gw.url("/pets/dogs")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let got = receiver.wait_for(1, WAIT).await;
    let call = &got[0];
    assert_eq!(
        (call.method.as_str(), call.path.as_str()),
        ("PUT", "/alerts")
    );
    assert_eq!(call.header("x-team"), Some("ops"));
    assert_eq!(call.header("sluice-event"), Some("auth_failure"));
    assert!(call.header("idempotency-key").is_some());
    assert_eq!(
        call.text(),
        r#"{"text": "auth_failure on Pets at /dogs", "key": null}"#
    );

    // Within the cool-down the same failure does not fire again.
    for _ in 0..3 {
        let resp = gw.http.get(gw.url("/pets/dogs")).send().await.unwrap();
        assert_eq!(resp.status(), 401);
    }
    // Each was held back: once the gateway counts three, none of them was queued.
    wait_held(&gw, 3).await;
    assert_eq!(receiver.received().len(), 1);
    let log = deliveries(tmp.path()).await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].status, DELIVERED);
}

#[tokio::test]
async fn an_upstream_failure_fires_its_hook_on_an_api_without_middleware() {
    // No authentication, limit or other step: the request goes straight to the proxy,
    // whose failure must still be an event.
    let receiver = Receiver::start(&[], 200).await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("templates")).unwrap();
    let handlers = format!(
        "      - events: [upstream_error]\n        targetPath: {}\n",
        receiver.url("/hook")
    );
    let plain = api(&handlers)
        .replace("security:\n  - key: []\n", "")
        .replace("    authentication: {enabled: true}\n", "");
    assert!(!plain.contains("authentication"), "{plain}");
    let gw = Gw::start_in(
        tmp.path().to_owned(),
        None,
        &[("pets.yaml", plain)],
        &config(tmp.path(), "100ms"),
        &[],
    )
    .await;

    let resp = gw.http.get(gw.url("/pets/dogs")).send().await.unwrap();
    assert_eq!(resp.status(), 502);
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got[0].path, "/hook");
    assert_eq!(got[0].header("sluice-event"), Some("upstream_error"));
}

#[tokio::test]
async fn a_stored_webhook_is_fired_by_its_id() {
    let receiver = Receiver::start(&[], 204).await;
    let tmp = tempfile::tempdir().unwrap();
    // The dashboard's webhook, in the API's organisation; no template: the event as JSON.
    let store = store(tmp.path()).await;
    store
        .create_org(
            &OrgRecord {
                id: "o1".into(),
                name: "o1".into(),
                created_at: 1,
            },
            &UserRecord {
                id: "u1".into(),
                org_id: "o1".into(),
                name: "admin".into(),
                role: "admin".into(),
                created_at: 1,
            },
            &DashboardKeyRecord {
                id: "k1".into(),
                hash: "h1".into(),
                user_id: "u1".into(),
                org_id: "o1".into(),
                created_at: 1,
            },
        )
        .await
        .unwrap();
    store
        .insert_hook(&HookRecord {
            id: "h1".into(),
            org_id: "o1".into(),
            webhook_id: "ops-alerts".into(),
            name: "ops".into(),
            method: "POST".into(),
            target_path: receiver.url("/stored"),
            template_path: String::new(),
            header_map: Some(r#"{"X-Source":"dashboard"}"#.into()),
            event_timeout: 0,
            api_model: "{}".into(),
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();
    let gw = start(
        tmp.path(),
        "      - events: [auth_failure]\n        webhook: ops-alerts\n",
        "100ms",
    )
    .await;
    for _ in 0..2 {
        gw.http.get(gw.url("/pets/x")).send().await.unwrap();
    }
    // No cool-down: both fire.
    let got = receiver.wait_for(2, WAIT).await;
    assert_eq!(got[0].header("x-source"), Some("dashboard"));
    assert_eq!(got[0].header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["event"], "auth_failure");
    assert_eq!(body["api_id"], "pets");
    assert_eq!(body["org_id"], "o1");
    assert_eq!(body["path"], "/x");
    assert_ne!(
        got[0].header("idempotency-key"),
        got[1].header("idempotency-key")
    );
    assert!(deliveries(tmp.path())
        .await
        .iter()
        .all(|d| d.source == "hook:ops-alerts"));
}

#[tokio::test]
async fn a_failing_receiver_gets_each_retry_with_the_same_idempotency_key() {
    let receiver = Receiver::start(&[500, 503], 200).await;
    let tmp = tempfile::tempdir().unwrap();
    let handlers = on_auth_failure(&receiver);
    let gw = start(tmp.path(), &handlers, "100ms").await;
    gw.http.get(gw.url("/pets/1")).send().await.unwrap();
    let got = receiver.wait_for(3, WAIT).await;
    let key = got[0].header("idempotency-key").unwrap().to_owned();
    assert!(got
        .iter()
        .all(|r| r.header("idempotency-key") == Some(key.as_str())));
    assert_eq!(
        got.iter().map(|r| r.status).collect::<Vec<_>>(),
        [500, 503, 200]
    );
    assert!(got.iter().all(|r| r.body == got[0].body));

    let delivered = wait_status(tmp.path(), &key, DELIVERED).await;
    assert_eq!(delivered.attempts, 3);
    let (_, attempts) = store(tmp.path())
        .await
        .delivery("o1", &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        [Some(500), Some(503), Some(200)]
    );
    // One delivery, sent once more each time and then no more: only pending deliveries
    // are sent, and this one is delivered.
    assert_eq!(receiver.received().len(), 3);
}

#[tokio::test]
async fn a_4xx_goes_to_the_dead_letters_and_can_be_replayed() {
    let receiver = Receiver::start(&[404], 200).await;
    let tmp = tempfile::tempdir().unwrap();
    let handlers = on_auth_failure(&receiver);
    let gw = start(tmp.path(), &handlers, "100ms").await;
    gw.http.get(gw.url("/pets/1")).send().await.unwrap();
    let got = receiver.wait_for(1, WAIT).await;
    let key = got[0].header("idempotency-key").unwrap().to_owned();
    let dead = wait_status(tmp.path(), &key, DEAD).await;
    assert_eq!((dead.attempts, dead.last_status), (1, Some(404)));
    // Not retried: only pending deliveries are sent, and this one is dead.
    assert_eq!(receiver.received().len(), 1);

    assert!(store(tmp.path())
        .await
        .replay_delivery("o1", &key, 4, chrono::Utc::now().timestamp_millis())
        .await
        .unwrap());
    let got = receiver.wait_for(2, WAIT).await;
    assert_eq!(got[1].header("idempotency-key"), Some(key.as_str()));
    let delivered = wait_status(tmp.path(), &key, DELIVERED).await;
    assert_eq!(delivered.attempts, 2);
}

#[tokio::test]
async fn a_gateway_killed_mid_retry_delivers_after_a_restart() {
    let receiver = Receiver::start(&[], 503).await;
    let tmp = tempfile::tempdir().unwrap();
    let handlers = on_auth_failure(&receiver);
    // Retries a second apart: the kill lands while the delivery waits for its next one.
    let gw = start(tmp.path(), &handlers, "1s").await;
    gw.http.get(gw.url("/pets/1")).send().await.unwrap();
    let got = receiver.wait_for(1, WAIT).await;
    let key = got[0].header("idempotency-key").unwrap().to_owned();
    // Killed once the failed attempt is on record and the next one is waited for.
    let begun = std::time::Instant::now();
    while store(tmp.path())
        .await
        .delivery("o1", &key)
        .await
        .unwrap()
        .is_none_or(|(d, _)| d.attempts < 1)
    {
        assert!(begun.elapsed() < WAIT, "the first attempt was not recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.kill().await;
    let before = receiver.received().len();

    receiver.answer(200);
    let gw = start(tmp.path(), &handlers, "1s").await;
    let got = receiver.wait_for(before + 1, WAIT).await;
    let last = got.last().unwrap();
    assert_eq!(last.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(last.status, 200);
    wait_status(tmp.path(), &key, DELIVERED).await;
    drop(gw);
}

#[tokio::test]
async fn a_bad_handler_is_refused_at_load_with_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = start(
        tmp.path(),
        "      - events: [auth_failed]\n        targetPath: /relative\n",
        "100ms",
    )
    .await;
    let apis = gw.apis().await;
    let text = apis.to_string();
    assert!(text.contains("eventHandlers.0.events.0"), "{text}");
    assert!(text.contains("auth_failure"), "{text}");
    assert!(text.contains("eventHandlers.0.targetPath"), "{text}");
}

/// The receiver-side check in `docs/webhooks.md`, run with Python against signatures
/// made by Sluice.
#[tokio::test]
async fn the_documented_python_verifier_accepts_sluice_signatures() {
    let doc = std::fs::read_to_string("docs/webhooks.md").unwrap();
    let script = doc
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a python example in docs/webhooks.md");
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("verify.py");
    std::fs::write(&path, script).unwrap();
    let body = br#"{"id":"e1","event":"order.created","data":{"n":1}}"#;
    let now = chrono::Utc::now().timestamp();
    let run = |secret: &'static str, header: String, body: &'static [u8]| {
        let path = path.clone();
        async move {
            let mut child = tokio::process::Command::new("python3")
                .arg(&path)
                .arg(secret)
                .arg(header)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3 runs");
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(body).await.unwrap();
            drop(stdin);
            let out = child.wait_with_output().await.unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            )
        }
    };
    let good = sluice::webhook::sign::sign(b"subscriber-secret-1", now, body);
    assert_eq!(
        run("subscriber-secret-1", good.clone(), body).await,
        (true, "valid".into())
    );
    assert_eq!(
        run("another-secret-123", good.clone(), body).await,
        (false, "invalid".into())
    );
    assert_eq!(
        run("subscriber-secret-1", good, b"{\"tampered\":1}").await,
        (false, "invalid".into())
    );
    let stale = sluice::webhook::sign::sign(b"subscriber-secret-1", now - 600, body);
    assert_eq!(
        run("subscriber-secret-1", stale, body).await,
        (false, "invalid".into())
    );
}

/// `sluice dashboard` with its delivery worker, on a SQLite store in `dir`.
async fn dashboard(dir: &std::path::Path) -> (tokio::process::Child, u16) {
    let port = common::free_port();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .arg("dashboard")
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("SLUICE_DB_") {
            command.env_remove(k);
        }
    }
    let child = command
        .env("SLUICE_DB_LISTEN_PORT", port.to_string())
        .env(
            "SLUICE_DB_STORE_URL",
            format!("sqlite://{}", dir.join("store.db").display()),
        )
        .env("SLUICE_DB_ADMIN_KEY", PORTAL_ADMIN)
        .env("SLUICE_DB_SECRET", "portal-test-sealing-secret")
        .env("SLUICE_DB_WEBHOOKS_INITIAL_BACKOFF", "100ms")
        .env("SLUICE_DB_WEBHOOKS_POLL_INTERVAL", "50ms")
        .env("SLUICE_DB_LOGGER_LEVEL", "warn")
        // The subscribers' receivers listen on loopback.
        .env("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
        .spawn()
        .expect("spawn sluice dashboard");
    let http = reqwest::Client::new();
    let start = std::time::Instant::now();
    while http
        .get(format!("http://127.0.0.1:{port}/api/openapi.json"))
        .send()
        .await
        .is_err()
    {
        assert!(start.elapsed() < WAIT, "the dashboard did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, port)
}

const PORTAL_ADMIN: &str = "portal-test-admin-key-0123";

async fn portal_call(
    port: u16,
    method: reqwest::Method,
    path: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let resp = reqwest::Client::new()
        .request(method, format!("http://127.0.0.1:{port}/api{path}"))
        .bearer_auth(PORTAL_ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// Checks a delivery's signature the way a subscriber would, with its own HMAC code.
fn signature_ok(secret: &str, header: &str, body: &[u8]) -> bool {
    use hmac::{Hmac, Mac};
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = Some(v.to_owned()),
            Some(("v1", v)) => v1.push(v.to_owned()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let fresh = (chrono::Utc::now().timestamp() - t.parse::<i64>().unwrap_or(0)).abs() <= 300;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let expected = hex::encode(mac.finalize().into_bytes());
    fresh && v1.contains(&expected)
}

#[tokio::test]
async fn a_stream_publishes_through_the_portal_to_the_subscribers_that_chose_the_event() {
    let created = Receiver::start(&[], 200).await;
    let paid_only = Receiver::start(&[], 200).await;
    let tmp = tempfile::tempdir().unwrap();
    let (_dashboard, port) = dashboard(tmp.path()).await;

    let product = portal_call(
        port,
        reqwest::Method::POST,
        "/portal/products",
        serde_json::json!({"name": "orders", "webhooks": {"enabled": true, "events": ["order.created", "order.paid"]}}),
    )
    .await;
    let product_id = product["ID"].as_str().unwrap().to_owned();
    let publish_secret = product["publish_secret"].as_str().unwrap().to_owned();
    for (name, receiver, event, secret) in [
        ("shop", &created, "order.created", "shop-subscriber-secret"),
        (
            "ledger",
            &paid_only,
            "order.paid",
            "ledger-subscriber-secret",
        ),
    ] {
        portal_call(
            port,
            reqwest::Method::POST,
            "/portal/apps",
            serde_json::json!({"name": name, "developer": "dev@example.com", "product_id": product_id,
                "webhooks": [{"url": receiver.url("/events"), "secret": secret, "events": [event]}]}),
        )
        .await;
    }

    // A stream publishes three `order.created` events.
    let stream = format!(
        "input:\n  generate:\n    mapping: 'root.order = count(\"orders\")'\n    count: 3\n    interval: 0s\noutput:\n  portal_webhook:\n    event_type: order.created\n    portal_url: http://127.0.0.1:{port}/api/portal/products/{product_id}/events\n    secret: {publish_secret}\nlogger:\n  level: warn\n"
    );
    let path = tmp.path().join("stream.yaml");
    std::fs::write(&path, stream).unwrap();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(&path)
        .output();
    let out = tokio::time::timeout(WAIT, run)
        .await
        .expect("the stream ends")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let got = created.wait_for(3, WAIT).await;
    let mut orders = Vec::new();
    for call in &got {
        assert_eq!(call.method, "POST");
        assert_eq!(call.header("sluice-event"), Some("order.created"));
        let signature = call.header("sluice-signature").expect("signed");
        assert!(
            signature_ok("shop-subscriber-secret", signature, &call.body),
            "{signature}"
        );
        assert!(!signature_ok(
            "ledger-subscriber-secret",
            signature,
            &call.body
        ));
        let body: serde_json::Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(body["event"], "order.created");
        assert_eq!(body["product_id"], product_id.as_str());
        // The event's id is the publisher's; the idempotency key is this delivery's.
        assert!(body["id"].as_str().is_some_and(|id| !id.is_empty()));
        assert!(call.header("idempotency-key").is_some());
        orders.push(body["data"]["order"].as_i64().unwrap());
    }
    orders.sort();
    assert_eq!(orders, [1, 2, 3]);
    // The subscriber that chose only `order.paid` gets nothing: each publish queued its
    // deliveries before it was answered, and none of them is to that subscriber.
    let queued = portal_call(
        port,
        reqwest::Method::GET,
        "/deliveries",
        serde_json::Value::Null,
    )
    .await;
    let urls: Vec<&str> = queued["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["url"].as_str().unwrap())
        .collect();
    let want = created.url("/events");
    assert_eq!(urls, [want.as_str(); 3], "{queued}");
    assert!(paid_only.received().is_empty());
    assert_eq!(created.received().len(), 3);
}
