//! The web console in a real browser: `sluice serve` in a temporary directory, APIs
//! and certificates created through the management API, then the scenarios of
//! `tests/browser/console.mjs` in headless Chromium (sign-in, the APIs page, the editor's
//! positioned problems, activation, webhooks, keys; screenshots of each page).
//!
//! `scripts/browser.sh` installs Chromium and the pinned driver; `scripts/test.sh` runs
//! it first. Without them this test fails and says so: it does not skip.
//! `SLUICE_CONSOLE_SCREENSHOTS=docs/console` writes the screenshots where the docs show
//! them; otherwise they go to a temporary directory.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use chrono::Datelike;
use serde_json::Value;
use tokio::process::Command;

use common::{free_port, DEADLINE};

const ADMIN_KEY: &str = "console-admin-key-0123456789";
/// The whole browser run, Chromium's start included, stays well under a minute.
const BROWSER_DEADLINE: Duration = Duration::from_secs(90);

/// A self-signed certificate for `name` that ends `days` from now.
fn certificate(name: &str, days: i64) -> String {
    let end = chrono::Utc::now() + chrono::Duration::days(days);
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.not_after = rcgen::date_time_ymd(end.year(), end.month() as u8, end.day() as u8);
    let key = rcgen::KeyPair::generate().expect("a key pair");
    params.self_signed(&key).expect("a certificate").pem()
}

async fn post(http: &reqwest::Client, url: String, media: &str, body: String) -> Value {
    let resp = http
        .post(url)
        .header("Authorization", format!("Bearer {ADMIN_KEY}"))
        .header("Content-Type", media)
        .body(body)
        .send()
        .await
        .expect("request");
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.json().await.expect("a JSON answer")
}

#[tokio::test]
async fn the_console_works_in_a_browser() {
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        browser_dir.join("node_modules/playwright-core").is_dir() && Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Chromium and its driver: run scripts/browser.sh (scripts/test.sh does)"
    );

    // `sluice serve`: the console's dashboard with a gateway in the same process, so
    // that the live view has running streams to show.
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
        .env("SLUICE_DB_LISTEN_PORT", port.to_string())
        .env("SLUICE_GW_LISTEN_PORT", gw_port.to_string())
        .env("SLUICE_GW_CONTROL_PORT", common::free_port().to_string())
        .env("SLUICE_GW_LOGGER_LEVEL", "warn")
        .env("SLUICE_DB_LOGGER_LEVEL", "warn")
        // The APIs' upstreams are on loopback, which posted APIs reach only when allowed.
        .env("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
        .env("SLUICE_GW_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
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

    // What an operator would find: an API made by a script, and certificates, one of
    // them about to expire.
    post(
        &http,
        format!("{base}/api/apis/oas"),
        "application/yaml",
        "openapi: 3.0.3\ninfo: {title: Petstore, version: '1'}\npaths: {}\nx-sluice-api-gateway:\n  upstream: {url: 'http://127.0.0.1:9'}\n  server: {listenPath: {value: /pets/}}\n".into(),
    )
    .await;
    post(
        &http,
        format!("{base}/api/assets"),
        "application/json",
        serde_json::json!({
            "id": "events-template",
            "name": "Events template",
            "kind": "oas-template",
            "data": {
                "openapi": "3.0.3",
                "info": {"title": "Events", "version": "1.0"},
                "paths": {},
                "x-sluice-api-gateway": {"middleware": {"global": {"cache": {"enabled": false}}}}
            }
        })
        .to_string(),
    )
    .await;
    // A running streaming API for the live view: messages posted to the gateway pass
    // through a mapping to a drop output.
    post(
        &http,
        format!("{base}/api/apis/streams"),
        "application/vnd.sluice.streams.oas",
        "openapi: 3.0.3\ninfo: {title: Ticker, version: '1'}\npaths: {}\nx-sluice-api-gateway:\n  info: {id: ticker, name: Ticker}\n  server: {listenPath: {value: /ticker/, strip: true}}\nx-sluice-streaming:\n  streams:\n    main:\n      input: {http_server: {path: /publish, allowed_verbs: [POST]}}\n      pipeline:\n        processors:\n          - mapping: 'root = content().string().uppercase()'\n      output: {drop: {}}\n".into(),
    )
    .await;
    for (name, days) in [("api.example.com", 700), ("legacy.example.com", 9)] {
        post(
            &http,
            format!("{base}/api/certs"),
            "application/x-pem-file",
            certificate(name, days),
        )
        .await;
    }

    let shots = match std::env::var_os("SLUICE_CONSOLE_SCREENSHOTS") {
        Some(to) => Path::new(env!("CARGO_MANIFEST_DIR")).join(to),
        None => dir.path().join("shots"),
    };
    std::fs::create_dir_all(&shots).expect("the screenshot directory");
    let started = Instant::now();
    let run = Command::new("node")
        .arg("console.mjs")
        .current_dir(&browser_dir)
        .env("SLUICE_CONSOLE_URL", &base)
        .env("SLUICE_CONSOLE_KEY", ADMIN_KEY)
        .env("SLUICE_CONSOLE_API", "Petstore")
        .env("SLUICE_CONSOLE_SHOTS", &shots)
        .env(
            "SLUICE_CONSOLE_GATEWAY",
            format!("http://127.0.0.1:{gw_port}"),
        )
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(BROWSER_DEADLINE, run)
        .await
        .expect("the browser scenarios finish in time")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the browser scenarios failed ({}); screenshots in {}",
        out.status,
        shots.display()
    );
    assert!(stdout.contains("all console scenarios passed"), "{stdout}");
    println!("browser scenarios took {:?}", started.elapsed());
}
