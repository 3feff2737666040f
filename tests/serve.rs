//! `sluice serve`, as the README shows it: a newcomer starts it, reads the printed admin
//! key, posts a streaming API to the dashboard and consumes it through the gateway.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

mod common;

#[tokio::test]
async fn serve_runs_the_dashboard_and_the_gateway_on_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let (db_port, gw_port) = (common::free_port(), common::free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .current_dir(dir.path())
        .env("SLUICE_DB_LISTEN_PORT", db_port.to_string())
        .env("SLUICE_GW_LISTEN_PORT", gw_port.to_string())
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

    // Served by the gateway within a second.
    let events = format!("http://127.0.0.1:{gw_port}/live/events");
    let started = std::time::Instant::now();
    let resp = loop {
        let r = http.get(&events).send().await.unwrap();
        if r.status() == 200 {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
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
