//! One stream, many filtered subscribers: an `http_server` output with a `filter` serves
//! every client from one stream (one broker consumer), each client getting only what
//! the filter admits for it (`@caller`: its key, token claims, query), resuming with
//! `Last-Event-ID` as any broadcast client does. Through a real gateway process.

use crate::common;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use common::harness::Gw;
use common::streams::{Next, Sse, SseEvent};

const STREAMING_ON: &str = "streaming:\n  enabled: true\n  drain_timeout: 1s\n";

/// A keyed API `id` whose one stream is fed by POSTs to `/publish` and broadcast on
/// `/events` to the clients `filter` admits each message for.
fn filtered_api(id: &str, filter: &str) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": id, "version": "1"},
        "paths": {},
        "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}}},
        "security": [{"key": []}],
        "x-sluice-api-gateway": {
            "info": {"id": id, "name": id},
            "server": {"listenPath": {"value": format!("/{id}"), "strip": true}, "authentication": {"enabled": true}}
        },
        "x-sluice-streaming": {"streams": {"main": {
            "input": {"http_server": {"path": "/publish", "allowed_verbs": ["POST"]}},
            "output": {"http_server": {"stream_path": "/events", "delivery": "broadcast", "filter": filter}}
        }}}
    })
}

async fn post_api(gw: &Gw, doc: &Value) -> reqwest::Response {
    gw.admin(Method::POST, "/sluice/apis")
        .json(doc)
        .send()
        .await
        .unwrap()
}

/// A key for API `id` whose metadata names its tenant: its token.
async fn key_of(gw: &Gw, id: &str, tenant: &str) -> String {
    let made = gw
        .create_key(json!({"access_rights": {id: {}}, "meta": {"tenant": tenant}}))
        .await;
    made["key"].as_str().unwrap().to_owned()
}

async fn publish(gw: &Gw, id: &str, key: &str, body: &Value) {
    let status = gw
        .http
        .post(gw.url(&format!("/{id}/publish")))
        .header("x-api-key", key)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "publishing {body}");
}

/// Every event until `count` came, then nothing more within a moment.
async fn exactly(sse: &mut Sse, count: usize) -> Vec<SseEvent> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < count {
        match sse
            .next_or_end(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            Next::Event(e) => got.push(e),
            other => panic!("{other:?} after {} of {count}: {got:?}", got.len()),
        }
    }
    match sse.next_or_end(Duration::from_millis(300)).await {
        Next::Quiet => got,
        other => panic!("more than {count}: {other:?}"),
    }
}

fn tenant_of(e: &SseEvent) -> String {
    let v: Value = serde_json::from_str(&e.data).unwrap();
    v["tenant"].as_str().unwrap().to_owned()
}

/// Sixty clients in twenty tenants (keys carrying the tenant in their metadata) on one
/// stream: each gets every event of its tenant, in order, and none of another's.
#[tokio::test]
async fn each_client_gets_its_tenants_events_and_no_others() {
    const TENANTS: usize = 20;
    const PER_TENANT: usize = 3;
    const EVENTS: usize = 200;
    let gw = Gw::start(&[], STREAMING_ON).await;
    let resp = post_api(
        &gw,
        &filtered_api("shared", "this.tenant == @caller.meta.tenant"),
    )
    .await;
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let publisher = key_of(&gw, "shared", "publisher").await;
    let mut clients = Vec::new();
    for t in 0..TENANTS {
        for _ in 0..PER_TENANT {
            let key = key_of(&gw, "shared", &format!("t{t}")).await;
            clients.push((t, Sse::open(&gw, "/shared/events", &key).await));
        }
    }
    for n in 0..EVENTS {
        let t = n % TENANTS;
        publish(
            &gw,
            "shared",
            &publisher,
            &json!({"tenant": format!("t{t}"), "n": n}),
        )
        .await;
    }
    let mut readers = Vec::new();
    for (t, mut sse) in clients {
        readers.push(tokio::spawn(async move {
            (t, exactly(&mut sse, EVENTS / TENANTS).await)
        }));
    }
    for r in readers {
        let (t, got) = r.await.unwrap();
        let numbers: Vec<u64> = got
            .iter()
            .map(|e| {
                assert_eq!(tenant_of(e), format!("t{t}"), "another tenant's event");
                serde_json::from_str::<Value>(&e.data).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        let expected: Vec<u64> = (0..EVENTS)
            .filter(|n| n % TENANTS == t)
            .map(|n| n as u64)
            .collect();
        assert_eq!(numbers, expected);
    }
    // Withheld: each event from the 57 clients of other tenants.
    let metrics = gw.metrics().await;
    let withheld: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_http_stream_filtered_messages_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let expected = EVENTS * (TENANTS - 1) * PER_TENANT;
    assert_eq!(withheld as usize, expected, "{metrics}");
}

/// A client that comes back with `Last-Event-ID` gets what it missed of its own tenant
/// only; the filter sees token claims and query values too.
#[tokio::test]
async fn a_resuming_client_gets_only_its_own_missed_events() {
    let gw = Gw::start(&[], STREAMING_ON).await;
    let filter = "this.tenant == @caller.meta.tenant && (@caller.query.kind == null || this.kind == @caller.query.kind)";
    let resp = post_api(&gw, &filtered_api("resume", filter)).await;
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let publisher = key_of(&gw, "resume", "publisher").await;
    let a = key_of(&gw, "resume", "a").await;
    let b = key_of(&gw, "resume", "b").await;
    let mut first = Sse::open(&gw, "/resume/events", &a).await;
    let mut other = Sse::open(&gw, "/resume/events", &b).await;
    let mut only_x = Sse::open(&gw, "/resume/events?kind=x", &a).await;
    publish(
        &gw,
        "resume",
        &publisher,
        &json!({"tenant": "a", "kind": "x", "n": 1}),
    )
    .await;
    let seen = exactly(&mut first, 1).await;
    let last = seen[0].id.clone().expect("an id");
    drop(first);
    for (n, tenant, kind) in [(2, "b", "x"), (3, "a", "y"), (4, "b", "y"), (5, "a", "x")] {
        publish(
            &gw,
            "resume",
            &publisher,
            &json!({"tenant": tenant, "kind": kind, "n": n}),
        )
        .await;
    }
    let mut back = Sse::try_resume(&gw, "/resume/events", &a, Some(&last))
        .await
        .unwrap();
    let missed: Vec<String> = exactly(&mut back, 2)
        .await
        .iter()
        .map(|e| e.data.clone())
        .collect();
    assert_eq!(
        missed,
        [
            json!({"tenant": "a", "kind": "y", "n": 3}).to_string(),
            json!({"tenant": "a", "kind": "x", "n": 5}).to_string()
        ]
    );
    assert!(exactly(&mut other, 2)
        .await
        .iter()
        .all(|e| tenant_of(e) == "b"));
    let xs: Vec<String> = exactly(&mut only_x, 2)
        .await
        .iter()
        .map(|e| e.data.clone())
        .collect();
    assert!(
        xs.iter()
            .all(|d| d.contains(r#""kind":"x""#) && d.contains(r#""tenant":"a""#)),
        "{xs:?}"
    );
}

/// A key moved to another tenant (its metadata changed) is not left filtered as the old
/// one: its open stream is told to come back, and comes back filtered as the new one.
#[tokio::test]
async fn a_key_whose_metadata_changes_is_told_to_reconnect() {
    let gw = Gw::start(&[], STREAMING_ON).await;
    let resp = post_api(
        &gw,
        &filtered_api("moved", "this.tenant == @caller.meta.tenant"),
    )
    .await;
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let publisher = key_of(&gw, "moved", "publisher").await;
    let made = gw
        .create_key(json!({"access_rights": {"moved": {}}, "meta": {"tenant": "a"}}))
        .await;
    let (key, id) = (
        made["key"].as_str().unwrap(),
        made["key_id"].as_str().unwrap(),
    );
    let mut sse = Sse::open(&gw, "/moved/events", key).await;
    let changed = gw
        .admin(Method::PUT, &format!("/sluice/keys/{id}"))
        .json(&json!({"access_rights": {"moved": {}}, "meta": {"tenant": "b"}}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(changed, 200);
    // Told before the change is answered, as a revocation is.
    let mut told = Vec::new();
    loop {
        match sse.next_or_end(Duration::from_secs(5)).await {
            Next::Event(e) => told.push(e),
            Next::Ended => break,
            Next::Quiet => panic!("still open after the change: {told:?}"),
        }
    }
    let last = told.last().expect("a notice");
    assert_eq!(last.name.as_deref(), Some("restart"), "{told:?}");
    assert_eq!(last.data, "the key was changed: reconnect");
    let mut back = Sse::open(&gw, "/moved/events", key).await;
    publish(&gw, "moved", &publisher, &json!({"tenant": "a", "n": 1})).await;
    publish(&gw, "moved", &publisher, &json!({"tenant": "b", "n": 2})).await;
    let got = exactly(&mut back, 1).await;
    assert_eq!(tenant_of(&got[0]), "b");
}

/// A posted filter is a tenant's program: compiled when posted, with the place of a
/// mistake; refused where it cannot work; without the host's functions; bounded per
/// client in what a request makes the hub keep.
#[tokio::test]
async fn posted_filters_are_checked_and_bounded() {
    let gw = Gw::start(&[], STREAMING_ON).await;
    let refused = |doc: Value| {
        let gw = &gw;
        async move {
            let resp = post_api(gw, &doc).await;
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap())
        }
    };
    // A mistake in the filter: named by its place in the document and in the mapping.
    let (status, text) =
        refused(filtered_api("bad", "this.tenant == == @caller.meta.tenant")).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("filter"), "{text}");
    assert!(text.contains("line 1, column 13"), "{text}");
    // Round robin gives each message to one client only: a filter cannot work there.
    let mut rr = filtered_api("rr", "true");
    rr["x-sluice-streaming"]["streams"]["main"]["output"]["http_server"]["delivery"] =
        json!("round_robin");
    let (status, text) = refused(rr).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("`filter` needs `delivery: broadcast`"),
        "{text}"
    );
    // The host's environment and files are not a tenant's to read.
    let (status, text) = refused(filtered_api("host", r#"env("HOME") != """#)).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("env"), "{text}");
    let (status, text) = refused(filtered_api("files", r#"file("/etc/passwd") != """#)).await;
    assert_eq!(status, 400, "{text}");
    // A request that would make the hub keep too much per client is answered 400.
    let resp = post_api(
        &gw,
        &filtered_api("bounded", "this.tenant == @caller.query.t"),
    )
    .await;
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let key = key_of(&gw, "bounded", "a").await;
    let many: Vec<String> = (0..40).map(|i| format!("q{i}=1")).collect();
    let path = format!("/bounded/events?{}", many.join("&"));
    assert_eq!(Sse::try_open(&gw, &path, &key).await.err(), Some(400));
    let long = format!("/bounded/events?t={}", "x".repeat(9000));
    assert_eq!(Sse::try_open(&gw, &long, &key).await.err(), Some(400));
    // A filter that fails on a message withholds it: nothing leaks on an error.
    let mut sse = Sse::open(&gw, "/bounded/events?t=a", &key).await;
    let status = gw
        .http
        .post(gw.url("/bounded/publish"))
        .header("x-api-key", &key)
        .body("not json")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    publish(&gw, "bounded", &key, &json!({"tenant": "a"})).await;
    let got = exactly(&mut sse, 1).await;
    assert_eq!(tenant_of(&got[0]), "a");
    let metrics = gw.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_http_stream_filter_errors_total{") && l.ends_with(" 1")),
        "{metrics}"
    );
}
