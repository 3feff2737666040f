//! A stream's health at a glance: `sluice serve` runs a streaming API with one stream
//! that connects and one whose broker is not there. The management API's status, the
//! gateway's `/sluice/apis`, the `sluice_stream_state` metric and `stream_error` events
//! all say which is running and which is failing, with why, until the failing one gives
//! up and stops.

use crate::common;

use std::time::{Duration, Instant};

use serde_json::Value;

use common::serve::{Serve, ADMIN_KEY};

/// One stream served over HTTP, one reading a NATS server that does not listen.
const API: &str = "\
openapi: 3.0.3
info: {title: health, version: '1'}
paths: {}
x-sluice-api-gateway:
  info: {id: health, name: health}
  server: {listenPath: {value: /health/, strip: true}}
x-sluice-streaming:
  streams:
    good:
      input:
        http_server: {path: /in, allowed_verbs: [POST]}
      output:
        drop: {}
    bad:
      input:
        nats: {urls: ['nats://127.0.0.1:1'], subject: nowhere}
      output:
        drop: {}
";

/// The gateway's API secret.
const GATEWAY_SECRET: &str = "health-gateway-secret-0123";

async fn get(serve: &Serve, url: String) -> Value {
    let resp = serve
        .http
        .get(url)
        .header("authorization", ADMIN_KEY)
        .header("x-sluice-authorization", GATEWAY_SECRET)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {body}");
    body
}

async fn metrics(serve: &Serve) -> String {
    serve
        .http
        .get(format!("http://127.0.0.1:{}/metrics", serve.control))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap()
}

/// Waits until the API's status holds `want` (stream, state) pairs.
async fn status_until(serve: &Serve, want: &[(&str, &str)]) -> Value {
    let start = Instant::now();
    loop {
        let status = get(
            serve,
            format!(
                "http://127.0.0.1:{}/api/apis/streams/health/status",
                serve.db
            ),
        )
        .await;
        let states: Vec<(String, String)> = status["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_owned(),
                    s["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        if want
            .iter()
            .all(|(n, s)| states.iter().any(|(a, b)| a == n && b == s))
        {
            return status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the streams did not reach {want:?}: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failing_stream_says_why_everywhere_until_it_gives_up() {
    let allow = "[127.0.0.1]";
    let serve = Serve::start(&[
        ("SLUICE_DB_STREAMING_ENABLED", "true"),
        ("SLUICE_DB_STREAMING_EGRESS_ALLOW", allow),
        ("SLUICE_GW_STREAMING_EGRESS_ALLOW", allow),
        ("SLUICE_GW_STREAMING_MAX_CONNECT_FAILURES", "4"),
        ("SLUICE_GW_SECRET", GATEWAY_SECRET),
    ])
    .await;
    let resp = serve
        .http
        .post(format!("http://127.0.0.1:{}/api/apis/streams", serve.db))
        .header("authorization", ADMIN_KEY)
        .header("content-type", "application/vnd.sluice.streams.oas")
        .body(API)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());

    // Running and failing, with the failing input's error.
    let status = status_until(&serve, &[("good", "running"), ("bad", "failing")]).await;
    assert_eq!(status["running_here"], true);
    let bad = status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "bad")
        .unwrap();
    let error = bad["health"]["last_error"].as_str().unwrap();
    assert!(
        error.contains("health.bad/"),
        "names the component: {error}"
    );
    assert!(bad["health"]["failures"].as_u64().unwrap() >= 1, "{bad}");
    assert_eq!(
        bad["health"]["components"].as_array().unwrap().len(),
        2,
        "{bad}"
    );

    // The gateway says the same, and so do its metrics.
    let apis = get(
        &serve,
        format!("http://127.0.0.1:{}/sluice/apis", serve.control),
    )
    .await;
    let api = apis["apis"]
        .as_array()
        .or(apis.as_array())
        .unwrap()
        .iter()
        .find(|a| a["id"] == "health")
        .cloned()
        .unwrap();
    assert_eq!(api["stream_states"]["good"], "running", "{api}");
    let text = metrics(&serve).await;
    assert!(
        text.lines().any(|l| l.starts_with("sluice_stream_state{")
            && l.contains("api_id=\"health\"")
            && l.contains("stream=\"good\"")
            && l.contains("state=\"running\"")
            && l.ends_with(" 1")),
        "{text}"
    );

    // What the Grafana dashboard filters on is there: the API, the organisation and the
    // stream apart, on the gateway's and the streams' metrics.
    let sent = serve
        .http
        .post(format!("http://127.0.0.1:{}/health/in", serve.gw))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert!(sent.status().is_success(), "{}", sent.status());
    let text = metrics(&serve).await;
    for (name, labels) in [
        ("sluice_gateway_requests_total{", vec!["api_id=\"health\""]),
        (
            "sluice_gateway_request_duration_seconds_bucket{",
            vec!["api_id=\"health\""],
        ),
        (
            "sluice_component_received_messages_total{",
            vec![
                "api_id=\"health\"",
                "org_id=",
                "stream=\"good\"",
                "kind=\"input\"",
            ],
        ),
        (
            "sluice_component_connected{",
            vec!["api_id=\"health\"", "stream=\"bad\""],
        ),
        (
            "sluice_stream_active{",
            vec!["api_id=\"health\"", "org_id=", "stream=\"good\""],
        ),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(name) && labels.iter().all(|want| l.contains(want))),
            "no {name} with {labels:?}:\n{text}"
        );
    }

    // It gives up after its failures: stopped, with why, and a stream_error event for
    // each change (failing, then stopped).
    let status = status_until(&serve, &[("good", "running"), ("bad", "stopped")]).await;
    let bad = status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "bad")
        .unwrap();
    let why = bad["health"]["last_error"].as_str().unwrap();
    assert!(why.contains("gave up"), "{why}");
    let start = Instant::now();
    loop {
        let text = metrics(&serve).await;
        let events = text
            .lines()
            .find(|l| {
                l.starts_with("sluice_gateway_events_total")
                    && l.contains("api_id=\"health\"")
                    && l.contains("event=\"stream_error\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0);
        if events >= 2.0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
