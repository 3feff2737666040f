//! `sluice serve`, as the README shows it: a newcomer starts it, reads the printed admin
//! key, posts a streaming API to the dashboard and consumes it through the gateway.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::common;

#[tokio::test]
async fn serve_runs_the_dashboard_and_the_gateway_on_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let (db_port, gw_port) = (common::free_port(), common::free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .current_dir(dir.path())
        .env("SLUICE_DB_LISTEN_PORT", db_port.to_string())
        .env("SLUICE_GW_LISTEN_PORT", gw_port.to_string())
        .env("SLUICE_GW_CONTROL_PORT", common::free_port().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The admin key is printed once, on the first start.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let key = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(k) = line.strip_prefix("Admin key (shown once; keep it): ") {
                return k.to_owned();
            }
        }
        panic!("no admin key printed");
    })
    .await
    .unwrap();
    assert!(
        dir.path().join("data/sluice.db").exists(),
        "the store lives under ./data"
    );

    let doc = r#"openapi: 3.0.3
info: {title: Live, version: "1.0"}
paths: {}
x-sluice-api-gateway:
  info: {id: live, name: Live}
  server:
    listenPath: {value: /live/, strip: true}
x-sluice-streaming:
  streams:
    main:
      input:
        http_server: {path: /publish, allowed_verbs: [POST]}
      output:
        http_server: {stream_path: /events}
"#;
    let http = reqwest::Client::new();
    let created = http
        .post(format!("http://127.0.0.1:{db_port}/api/apis/streams"))
        .header("authorization", &key)
        .header("content-type", "application/vnd.sluice.streams.oas")
        .body(doc)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());

    // Served by the gateway once it picks the API up.
    let events = format!("http://127.0.0.1:{gw_port}/live/events");
    let started = std::time::Instant::now();
    let resp = loop {
        let r = http.get(&events).send().await.unwrap();
        if r.status() == 200 {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not served: {}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut body = resp.bytes_stream();
    let publish = http
        .post(format!("http://127.0.0.1:{gw_port}/live/publish"))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(publish.status(), 200);
    let mut seen = String::new();
    while !seen.contains("data: hello") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .expect("the event arrives")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    // The live view counts what went through each node and sees the connected client.
    let live: serde_json::Value = http
        .get(format!(
            "http://127.0.0.1:{db_port}/api/apis/streams/live/live"
        ))
        .header("authorization", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(live["running_here"], true, "{live}");
    let stream = &live["streams"][0];
    assert_eq!(stream["name"], "main");
    let nodes = stream["nodes"].as_array().unwrap();
    let kinds: Vec<&str> = nodes.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["input", "output"], "{live}");
    assert_eq!(nodes[0]["type"], "http_server");
    assert_eq!(nodes[0]["received"], 1.0, "{live}");
    assert_eq!(nodes[1]["sent"], 1.0, "{live}");
    let events = stream["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["route"] == "/events")
        .expect("the SSE route");
    assert_eq!(events["transport"], "sse", "{live}");
    assert_eq!(events["connections"], 1.0, "{live}");
    // And by key: this API lets clients in without one.
    assert_eq!(
        live["keys"],
        serde_json::json!([{"key_id": null, "connections": 1}]),
        "{live}"
    );

    // The live tail: opened by the first call, it samples what the output delivers,
    // with credentials-bearing metadata hidden.
    let tail_url = format!("http://127.0.0.1:{db_port}/api/apis/streams/live/tail");
    let open = http
        .post(format!("{tail_url}?stream=main"))
        .header("authorization", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 200);
    let publish = http
        .post(format!("http://127.0.0.1:{gw_port}/live/publish"))
        .header("authorization", "Bearer do-not-show")
        .body("tail me")
        .send()
        .await
        .unwrap();
    assert_eq!(publish.status(), 200);
    let started = std::time::Instant::now();
    let message = loop {
        let tail: serde_json::Value = http
            .post(format!("{tail_url}?stream=main&after=0"))
            .header("authorization", &key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(m) = tail["messages"].as_array().and_then(|m| m.last()) {
            break m.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "nothing in the tail"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(message["payload"], "tail me", "{message}");
    assert!(!message.to_string().contains("do-not-show"), "{message}");
    assert_eq!(message["metadata"]["authorization"], "***", "{message}");
    let unknown = http
        .post(format!("{tail_url}?stream=nope"))
        .header("authorization", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn gateway_keys_made_in_the_dashboard_open_and_close_an_api() {
    const KEY: &str = "serve-admin-key-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let (db_port, gw_port) = (common::free_port(), common::free_port());
    let _child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .current_dir(dir.path())
        .env("SLUICE_DB_ADMIN_KEY", KEY)
        .env("SLUICE_DB_LISTEN_PORT", db_port.to_string())
        .env("SLUICE_GW_LISTEN_PORT", gw_port.to_string())
        .env("SLUICE_GW_CONTROL_PORT", common::free_port().to_string())
        // The API's upstream is on loopback, which posted APIs reach only when allowed.
        .env("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
        .env("SLUICE_GW_STREAMING_EGRESS_ALLOW", "[127.0.0.1]")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let api = |method: reqwest::Method, path: &str| {
        http.request(method, format!("http://127.0.0.1:{db_port}/api{path}"))
            .bearer_auth(KEY)
    };
    let started = std::time::Instant::now();
    while api(reqwest::Method::GET, "/gateway/keys")
        .send()
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An API with key auth whose upstream is down: a good key gets past auth (502).
    let doc = serde_json::json!({
        "openapi": "3.0.3", "info": {"title": "Guarded", "version": "1"}, "paths": {},
        "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}}},
        "security": [{"key": []}],
        "x-sluice-api-gateway": {
            "info": {"id": "guarded", "name": "Guarded"},
            "upstream": {"url": "http://127.0.0.1:9"},
            "server": {"listenPath": {"value": "/guarded/", "strip": true}, "authentication": {"enabled": true}}
        }
    });
    let created = api(reqwest::Method::POST, "/apis/oas")
        .json(&doc)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());

    let refused = api(reqwest::Method::POST, "/gateway/keys")
        .json(&serde_json::json!({"access_rights": {"nope": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400, "an unknown API is refused");
    let made: serde_json::Value = api(reqwest::Method::POST, "/gateway/keys")
        .json(&serde_json::json!({
            "access_rights": {"guarded": {}},
            "rate_limit": {"rate": 100, "per": 1},
            "quota": {"max": 1000, "renewal": "1h"}
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (token, id) = (
        made["key"].as_str().unwrap(),
        made["key_id"].as_str().unwrap(),
    );
    let listed: serde_json::Value = api(reqwest::Method::GET, "/gateway/keys")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["keys"][0]["key_id"], id);
    assert!(
        !listed.to_string().contains(token),
        "a token is never listed"
    );

    let through = |token: String| {
        let http = http.clone();
        async move {
            http.get(format!("http://127.0.0.1:{gw_port}/guarded/x"))
                .header("X-Api-Key", token)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let started = std::time::Instant::now();
    while through(token.to_owned()).await == 404 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the API is not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        through(token.to_owned()).await,
        502,
        "the key opens the API"
    );
    assert_eq!(through("wrong".into()).await, 401);

    let revoked = api(reqwest::Method::DELETE, &format!("/gateway/keys/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    // Refused once the gateway's key cache (one second) has let go of it.
    let started = std::time::Instant::now();
    while through(token.to_owned()).await != 401 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the revoked key still works"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = api(reqwest::Method::DELETE, &format!("/gateway/keys/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
}

/// A streaming API whose one stream runs an instance per `?user=`.
fn per_client_api(id: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: "1.0"}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server:
    listenPath: {{value: /{id}/, strip: true}}
x-sluice-streaming:
  streams:
    mine:
      input:
        generate: {{payload: "for $sluice_context.request_data_user", interval: 1s}}
      output:
        http_server: {{stream_path: /events}}
"#
    )
}

#[tokio::test]
async fn an_organisation_is_held_to_its_instances_and_in_flight_memory() {
    const KEY: &str = "serve-admin-key-quotas-0123";
    let dir = tempfile::tempdir().unwrap();
    let (db_port, gw_port) = (common::free_port(), common::free_port());
    let _child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .current_dir(dir.path())
        .env("SLUICE_DB_ADMIN_KEY", KEY)
        .env("SLUICE_DB_LISTEN_PORT", db_port.to_string())
        .env("SLUICE_GW_LISTEN_PORT", gw_port.to_string())
        .env("SLUICE_GW_CONTROL_PORT", common::free_port().to_string())
        .env("SLUICE_DB_QUOTAS_MAX_CLIENT_STREAMS", "2")
        .env("SLUICE_DB_QUOTAS_MAX_INFLIGHT_BYTES", "1000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    let post = |doc: String| {
        http.post(format!("http://127.0.0.1:{db_port}/api/apis/streams"))
            .bearer_auth(KEY)
            .header("content-type", "application/vnd.sluice.streams.oas")
            .body(doc)
            .send()
    };
    let sink = r#"openapi: 3.0.3
info: {title: sink, version: "1.0"}
paths: {}
x-sluice-api-gateway:
  info: {id: sink, name: sink}
  server:
    listenPath: {value: /sink/, strip: true}
x-sluice-streaming:
  streams:
    main:
      input:
        http_server: {path: /in, allowed_verbs: [POST]}
      output:
        drop: {}
"#;
    let created = loop {
        match post(sink.to_owned()).await {
            Ok(r) => break r,
            Err(_) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "serve did not come up"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(created.status(), 201);
    for id in ["inbox", "outbox"] {
        let r = post(per_client_api(id)).await.unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let gw = |path: &str| format!("http://127.0.0.1:{gw_port}{path}");
    // What fits in the organisation's in-flight memory is delivered.
    let small = loop {
        let r = http
            .post(gw("/sink/in"))
            .body("x".repeat(500))
            .send()
            .await
            .unwrap();
        if r.status() != 404 {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the sink is not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(small.status(), 200);
    // A read larger than all of it is refused, and says why.
    let big = http
        .post(gw("/sink/in"))
        .body("x".repeat(2000))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 502);
    let why = big.text().await.unwrap();
    assert!(why.contains("in-flight memory quota"), "{why}");

    // Two per-client instances across the organisation's APIs, then a clear refusal.
    let open = |path: String| {
        let http = http.clone();
        async move { http.get(path).send().await.unwrap() }
    };
    // The gateway may pick the APIs up on a later reload than the sink: wait for each.
    let open_when_served = |path: String| {
        let open = &open;
        async move {
            loop {
                let r = open(path.clone()).await;
                if r.status() != 404 {
                    break r;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{path} is not served"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let alice = open_when_served(gw("/inbox/events?user=alice")).await;
    assert_eq!(alice.status(), 200);
    let bob = open_when_served(gw("/outbox/events?user=bob")).await;
    assert_eq!(bob.status(), 200);
    let carol = open(gw("/inbox/events?user=carol")).await;
    assert_eq!(carol.status(), 429);
    let body: serde_json::Value = carol.json().await.unwrap();
    let message = body["error"].as_str().unwrap_or_default();
    assert!(message.contains("max_client_streams"), "{body}");
    // A client of a running instance is still served.
    let again = open(gw("/inbox/events?user=alice")).await;
    assert_eq!(again.status(), 200);
    let mut events = alice.bytes_stream();
    let first = events.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    drop((bob, again));
}

#[tokio::test]
async fn a_dashboard_and_a_gateway_started_on_their_defaults_share_one_store() {
    const KEY: &str = "defaults-admin-key-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let (db_port, gw_port) = (common::free_port(), common::free_port());
    let upstream = common::receiver::Receiver::start(&[], 200).await;
    // Each process's log goes to a file beside the store, shown when the test fails.
    let logs = tempfile::tempdir().unwrap();
    let log = |role: &str| logs.path().join(format!("{role}.log"));
    let spawn = |role: &str, env: &[(&str, String)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg(role)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log(role)).unwrap())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    };
    let _dashboard = spawn(
        "dashboard",
        &[
            ("SLUICE_DB_ADMIN_KEY", KEY.to_owned()),
            ("SLUICE_DB_LISTEN_PORT", db_port.to_string()),
            // The upstream is on loopback, which posted APIs reach only when allowed.
            ("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]".to_owned()),
        ],
    );
    let _gateway = spawn(
        "gateway",
        &[
            ("SLUICE_GW_LISTEN_PORT", gw_port.to_string()),
            ("SLUICE_GW_CONTROL_PORT", common::free_port().to_string()),
            ("SLUICE_GW_STREAMING_EGRESS_ALLOW", "[127.0.0.1]".to_owned()),
        ],
    );
    let doc = serde_json::json!({
        "openapi": "3.0.3",
        "info": {"title": "Side", "version": "1"},
        "paths": {},
        "x-sluice-api-gateway": {
            "info": {"id": "side", "name": "Side"},
            "upstream": {"url": upstream.url("")},
            "server": {"listenPath": {"value": "/side/", "strip": true}}
        }
    });
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    let created = loop {
        match http
            .post(format!("http://127.0.0.1:{db_port}/api/apis/oas"))
            .header("authorization", KEY)
            .json(&doc)
            .send()
            .await
        {
            Ok(r) => break r,
            Err(_) => {
                assert!(started.elapsed() < Duration::from_secs(20), "no dashboard");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    // The gateway, on its own default store, finds the API the dashboard stored.
    loop {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{gw_port}/side/hello"))
            .send()
            .await
        {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the gateway does not serve the dashboard's API; its log:\n{}\nthe dashboard's:\n{}",
            std::fs::read_to_string(log("gateway")).unwrap_or_default(),
            std::fs::read_to_string(log("dashboard")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(upstream.received()[0].path, "/hello");
    assert!(dir.path().join("data/sluice.db").is_file());
    assert!(!dir.path().join("sluice.db").exists());
}
