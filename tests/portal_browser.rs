//! The developer portal in a real browser: `sluice serve` in a temporary directory, an
//! upstream and a webhook receiver of the test's own, then `tests/browser/portal.mjs` in
//! headless Chromium. A publisher publishes a product in the console and opens sign-up; a
//! developer signs up in the portal, reads the product's streaming docs, downloads its
//! AsyncAPI document (validated here against the AsyncAPI 3.0.0 schema), makes an app,
//! calls the gateway with its key, subscribes the receiver, and publishes an event
//! through the product's `portal_webhook` stream; the receiver gets it signed, and the
//! portal's log shows it. A second developer sees none of it; CSRF and a planted session
//! fail.
//!
//! `SLUICE_PORTAL_SCREENSHOTS=docs/portal` writes the screenshots where the docs show
//! them; otherwise they go to a temporary directory.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::Command;

use common::receiver::Receiver;
use common::{free_port, DEADLINE};
use sluice::webhook::sign;

const ADMIN_KEY: &str = "portal-browser-admin-key-0123";
const BROWSER_DEADLINE: Duration = Duration::from_secs(120);

async fn admin(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    media: &str,
    body: String,
) -> Value {
    let resp = http
        .request(method, url)
        .header("Authorization", format!("Bearer {ADMIN_KEY}"))
        .header("Content-Type", media)
        .body(body)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    let value: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {value}");
    value
}

/// An API's listen path with the gateway's key authentication, which reads the key from
/// `Authorization`.
fn server(listen: &str) -> String {
    format!("  server:\n    listenPath: {{value: {listen}, strip: true}}\n    authentication: {{enabled: true}}\ncomponents:\n  securitySchemes:\n    key: {{type: apiKey, in: header, name: Authorization}}\nsecurity:\n  - key: []\n")
}

#[tokio::test]
async fn the_portal_works_in_a_browser() {
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        browser_dir.join("node_modules/playwright-core").is_dir() && Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Chromium and its driver: run scripts/browser.sh (scripts/test.sh does)"
    );
    let receiver = Receiver::start(&[], 200).await;
    let receiver_port = receiver.addr.port();

    let dir = tempfile::tempdir().expect("tempdir");
    let (port, gw_port) = (free_port(), free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .arg("serve")
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("SLUICE_DB_") || k.starts_with("SLUICE_GW_") {
            command.env_remove(k);
        }
    }
    let _serve = command
        .env("SLUICE_DB_ADMIN_KEY", ADMIN_KEY)
        .env("SLUICE_DB_SECRET", "portal-browser-sealing-secret")
        .env("SLUICE_DB_LISTEN_PORT", port.to_string())
        .env("SLUICE_DB_STREAMING_ENABLED", "true")
        // The receiver (the dashboard's deliveries), and the dashboard's own events
        // endpoint (the stream's, checked when it is posted and when it runs).
        .env(
            "SLUICE_DB_STREAMING_EGRESS_ALLOW",
            format!("[127.0.0.1, '127.0.0.1:{port}']"),
        )
        .env(
            "SLUICE_GW_STREAMING_EGRESS_ALLOW",
            format!("[127.0.0.1, '127.0.0.1:{port}']"),
        )
        .env("SLUICE_GW_LISTEN_PORT", gw_port.to_string())
        .env("SLUICE_GW_CONTROL_PORT", free_port().to_string())
        .env("SLUICE_GW_LOGGER_LEVEL", "warn")
        .env("SLUICE_DB_LOGGER_LEVEL", "warn")
        .spawn()
        .expect("spawn sluice serve");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let start = Instant::now();
    loop {
        let up = http.get(format!("{base}/ping")).send().await;
        if up.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the dashboard did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The publisher's side, made by a script: a plain API, a product (a draft, which the
    // console publishes), and a streaming API whose stream publishes to the product.
    let pets = format!(
        "openapi: 3.0.3\ninfo: {{title: Pets, version: '1'}}\npaths:\n  /pets:\n    get: {{summary: Lists the pets}}\nx-sluice-api-gateway:\n  info: {{id: pets, name: Pets}}\n  upstream: {{url: 'http://127.0.0.1:{receiver_port}'}}\n{}",
        server("/pets/")
    );
    admin(
        &http,
        reqwest::Method::POST,
        format!("{base}/api/apis/oas"),
        "application/yaml",
        pets,
    )
    .await;
    let product = admin(
        &http,
        reqwest::Method::POST,
        format!("{base}/api/portal/products"),
        "application/json",
        json!({
            "name": "Orders",
            "description": "Orders as they happen, and the pets they are for.",
            "api_ids": ["pets"],
            "webhooks": {"enabled": true, "events": ["order.created"]},
            "key_approval": "auto",
        })
        .to_string(),
    )
    .await;
    let product_id = product["ID"].as_str().unwrap().to_owned();
    let publish_secret = product["publish_secret"].as_str().unwrap().to_owned();
    let orders = format!(
        "openapi: 3.0.3\ninfo: {{title: Orders, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: orders, name: Orders}}\n{}x-sluice-streaming:\n  streams:\n    main:\n      input:\n        http_server: {{path: /publish, allowed_verbs: [POST]}}\n      output:\n        portal_webhook:\n          event_type: order.created\n          portal_url: '{base}/api/portal/products/{product_id}/events'\n          secret: '{publish_secret}'\n    feed:\n      input:\n        http_server: {{path: /feed, allowed_verbs: [POST]}}\n      output:\n        http_server: {{stream_path: /events, delivery: broadcast}}\n",
        server("/orders/")
    );
    admin(
        &http,
        reqwest::Method::POST,
        format!("{base}/api/apis/streams"),
        "application/vnd.sluice.streams.oas",
        orders,
    )
    .await;
    // The streaming API joins the product; the product stays a draft.
    let body = json!({
        "name": "Orders",
        "description": "Orders as they happen, and the pets they are for.",
        "api_ids": ["pets", "orders"],
        "webhooks": {"enabled": true, "events": ["order.created"]},
        "key_approval": "auto",
        "published": false,
    });
    admin(
        &http,
        reqwest::Method::PUT,
        format!("{base}/api/portal/products/{product_id}"),
        "application/json",
        body.to_string(),
    )
    .await;

    let shots = match std::env::var_os("SLUICE_PORTAL_SCREENSHOTS") {
        Some(to) => Path::new(env!("CARGO_MANIFEST_DIR")).join(to),
        None => dir.path().join("shots"),
    };
    std::fs::create_dir_all(&shots).expect("the screenshot directory");
    let asyncapi = dir.path().join("orders.asyncapi.json");
    let run = Command::new("node")
        .arg("portal.mjs")
        .current_dir(&browser_dir)
        .env("SLUICE_PORTAL_URL", &base)
        .env("SLUICE_PORTAL_KEY", ADMIN_KEY)
        .env(
            "SLUICE_PORTAL_GATEWAY",
            format!("http://127.0.0.1:{gw_port}"),
        )
        .env(
            "SLUICE_PORTAL_RECEIVER",
            format!("http://127.0.0.1:{receiver_port}"),
        )
        .env("SLUICE_PORTAL_SHOTS", &shots)
        .env("SLUICE_PORTAL_ASYNCAPI", &asyncapi)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(BROWSER_DEADLINE, run)
        .await
        .expect("the browser scenarios finish in time")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the portal's browser scenarios failed ({}); screenshots in {}",
        out.status,
        shots.display()
    );
    assert!(stdout.contains("all portal scenarios passed"), "{stdout}");

    // The downloaded document is AsyncAPI 3.0.0, and shows no broker.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/browser/node_modules/@asyncapi/specs/schemas/3.0.0-without-$id.json"
    );
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&asyncapi).expect("the download")).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    assert_eq!(
        doc["channels"]["main.in-post"]["address"], "/publish",
        "{doc:#}"
    );

    // The receiver got the event the stream published, signed with the secret the portal
    // showed once.
    let secret = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SUBSCRIPTION_SECRET="))
        .expect("the script prints the subscription's secret")
        .trim()
        .to_owned();
    let received = receiver.received();
    let event = received
        .iter()
        .find(|r| r.path == "/hook" && r.header("sluice-event") == Some("order.created"))
        .unwrap_or_else(|| panic!("no order.created delivery: {received:#?}"));
    let signature = event.header("sluice-signature").expect("signed");
    sign::verify(
        secret.as_bytes(),
        signature,
        &event.body,
        chrono::Utc::now().timestamp(),
    )
    .expect("a good signature");
    let envelope: Value = serde_json::from_slice(&event.body).unwrap();
    assert_eq!(envelope["data"]["order"], 42, "{envelope}");
    assert!(
        received.iter().any(|r| r.path.starts_with("/pets")),
        "the key reached the upstream"
    );
}
