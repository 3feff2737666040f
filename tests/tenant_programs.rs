//! Programs and documents from tenants, against a real `sluice serve`: values nested
//! past the limit, built every way a tenant can build one (the member's playground, a
//! dry run, where constant folding runs the mapping while compiling, an anonymous caller
//! of a stored stream, and a restart with that stream stored), deeply nested documents,
//! and mappings that would run for seconds. Each is refused with a clear error and the
//! process keeps serving: a value nested 10 000 deep used to overflow a worker's stack
//! and abort the process, and a playground run held a serving thread for 8 s.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use common::serve::{Serve, ADMIN_KEY};

/// A path of `n` segments: `a.a.a…`.
fn deep_path(n: usize) -> String {
    vec!["a"; n].join(".")
}

impl Serve {
    /// Both servers still answer: the process survived.
    async fn assert_alive(&self, after: &str) {
        assert!(self.up(self.db).await, "the dashboard died after {after}");
        assert!(self.up(self.gw).await, "the gateway died after {after}");
    }

    async fn post(&self, path: &str, content_type: &str, body: String) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("http://127.0.0.1:{}{path}", self.db))
            .header("authorization", ADMIN_KEY)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Posts `{"p": path}` into the `nest` stream anonymously, once it is served. With no
    /// consumer connected the message may wait; what matters is what it does to the
    /// process.
    async fn publish_deep(&self, path: &str) {
        let publish = format!("http://127.0.0.1:{}/nest/publish", self.gw);
        let started = Instant::now();
        loop {
            let sent = self
                .http
                .post(&publish)
                .timeout(Duration::from_secs(3))
                .body(json!({"p": path}).to_string())
                .send()
                .await;
            match sent {
                Ok(r) if r.status() == 404 => {}
                Ok(r) => {
                    assert_ne!(r.status(), 200, "a value too deep was delivered");
                    return;
                }
                Err(e) if e.is_timeout() => return,
                Err(e) => panic!("the gateway failed: {e}"),
            }
            assert!(
                started.elapsed() < common::DEADLINE,
                "the stream is not served"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn run_mapping(&self, mapping: &str, input: &str) -> (u16, Value) {
        let body = json!({"mapping": mapping, "input": input}).to_string();
        self.post("/api/mapping/run", "application/json", body)
            .await
    }
}

fn streams_doc(id: &str, mapping: &str) -> String {
    // The mapping goes in as a JSON string: YAML block scalars keep it verbatim.
    let mapping = serde_json::to_string(mapping).unwrap();
    format!(
        r#"openapi: 3.0.3
info: {{title: {id}, version: "1.0"}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: {id}, name: {id}}}
  server: {{listenPath: {{value: /{id}/, strip: true}}}}
x-sluice-streaming:
  streams:
    main:
      input: {{http_server: {{path: /publish, allowed_verbs: [POST]}}}}
      pipeline:
        processors:
          - mapping: {mapping}
      output: {{http_server: {{stream_path: /events}}}}
"#
    )
}

fn says_too_deep(body: &Value) -> bool {
    body.to_string().contains("deeper than 128 levels")
}

#[tokio::test]
async fn deep_values_are_refused_and_the_process_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start_in(dir.path(), &[]).await;

    // The playground: every way a mapping can nest a value past the limit.
    let deep = deep_path(10_000);
    let mappings = [
        format!(r#"root = {{}}.set("{deep}", 1)"#),
        "root = {}.set(this.p, 1)".to_owned(),
        format!("root.{deep} = 1"),
        "root = range(0, 10000).fold({}, t -> {\"a\": t.tally})".to_owned(),
        "root = range(0, 10000).fold([], t -> [t.tally])".to_owned(),
        "root = range(0, 10000).fold(\"x\", t -> {\"v\": t.tally}.values())".to_owned(),
        "root = this.s.parse_json()".to_owned(),
        "root = this.m.decode(\"hex\").parse_msgpack()".to_owned(),
        "root = this.y.parse_yaml()".to_owned(),
    ];
    let input = json!({
        "p": deep,
        "s": format!("{}{}", "[".repeat(5000), "]".repeat(5000)),
        // MessagePack: 5 000 nested one-element arrays (0x91) around a nil (0xc0).
        "m": format!("{}c0", "91".repeat(5000)),
        "y": format!("{}1{}", "[".repeat(5000), "]".repeat(5000)),
    })
    .to_string();
    for mapping in &mappings {
        let (status, body) = serve.run_mapping(mapping, &input).await;
        let refused = match status {
            // A runtime error is the result's `error`; a compile-time one (constant
            // folding) is a 422 listing the problem.
            200 => body["output"].is_null() && body["error"].is_string(),
            422 => true,
            _ => false,
        };
        assert!(refused, "{mapping:.60}: {status} {body:.300}");
        if !mapping.contains("parse_") {
            assert!(says_too_deep(&body), "{mapping:.60}: {body:.300}");
        }
        serve.assert_alive(&format!("{mapping:.60}")).await;
    }
    // Values up to the limit still work.
    let (status, body) = serve
        .run_mapping(&format!(r#"root = {{}}.set("{}", 1)"#, deep_path(127)), "")
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["output"].as_str().unwrap().ends_with(&"}".repeat(127)));

    // A dry run compiles the stream, folding the constant call while doing so: the call
    // fails there (the mapping compiles, and fails on each message as it runs).
    let doc = streams_doc("dry", &format!(r#"root = {{}}.set("{deep}", 1)"#));
    let (status, body) = serve
        .post(
            "/api/apis/streams?dry_run=true",
            "application/vnd.sluice.streams.oas",
            doc,
        )
        .await;
    assert_eq!(status, 200, "{body:.300}");
    serve.assert_alive("a dry run").await;

    // A stored stream whose mapping nests what an anonymous caller sends.
    let doc = streams_doc("nest", "root = {}.set(this.p, 1)");
    let (status, body) = serve
        .post(
            "/api/apis/streams",
            "application/vnd.sluice.streams.oas",
            doc,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    serve.publish_deep(&deep).await;
    serve.assert_alive("an anonymous deep message").await;
    drop(serve);

    // On restart the stored stream starts again, and a caller still cannot crash it.
    let serve = Serve::start_in(dir.path(), &[]).await;
    serve.publish_deep(&deep).await;
    serve.assert_alive("a restart").await;
}

#[tokio::test]
async fn tenant_programs_run_within_a_budget_and_documents_within_a_depth() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start_in(dir.path(), &[]).await;

    // Seconds of work at run time, and the same folded as a constant at compile time.
    for mapping in [
        "root = this.n.map_each(x -> range(x, x + 600).sum()).sum()",
        "root = range(0, 1000000).map_each(x -> range(x, x + 600).sum()).sum()",
    ] {
        let input = json!({"n": (0..200_000).collect::<Vec<u32>>()}).to_string();
        let (status, body) = serve.run_mapping(mapping, &input).await;
        assert_eq!(status, 422, "{mapping}: {body:.300}");
        assert!(
            body["Message"]
                .as_str()
                .unwrap()
                .contains("ran out of time"),
            "{body}"
        );
        let budget = body["Errors"][0]["message"].as_str().unwrap();
        assert!(
            budget.contains("250 ms to run") || budget.contains("2000 ms to compile"),
            "the error names the budget: {body}"
        );
        serve.assert_alive(mapping).await;
    }
    // A mapping within the budget runs as before.
    let (status, body) = serve
        .run_mapping("root = range(0, 1000).map_each(x -> x * 2).sum()", "")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"], "999000");

    // A streaming API nested far past the limit: refused where the nesting crosses it.
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let doc = streams_doc("deepdoc", "root = this").replace(
        "      output:",
        &format!("      x-extra: {deep}\n      output:"),
    );
    let (status, body) = serve
        .post(
            "/api/apis/streams?dry_run=true",
            "application/vnd.sluice.streams.oas",
            doc,
        )
        .await;
    assert!((400..500).contains(&status), "{status} {body:.300}");
    assert!(
        body.to_string().contains("deeper than 128 levels"),
        "{body:.300}"
    );
    serve.assert_alive("a deep document").await;
}

#[tokio::test]
async fn an_anonymous_callers_loop_bound_ends_at_the_cap_of_a_posted_stream() {
    let serve = Serve::start(&[]).await;
    // A loop whose bound is what the caller sends, with no `max_loops` of its own.
    let doc = r#"openapi: 3.0.3
info: {title: loop, version: "1.0"}
paths: {}
x-sluice-api-gateway:
  info: {id: loop, name: loop}
  server: {listenPath: {value: /loop/, strip: true}}
x-sluice-streaming:
  streams:
    main:
      input: {http_server: {path: /publish, allowed_verbs: [POST], sync_response: {}, timeout: 100s}}
      pipeline:
        processors:
          - while:
              check: 'this.n < this.limit'
              processors:
                - mutation: 'root.n = this.n + 1'
      output: {drop: {}}
"#;
    let (status, body) = serve
        .post(
            "/api/apis/streams",
            "application/vnd.sluice.streams.oas",
            doc.to_owned(),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let publish = format!("http://127.0.0.1:{}/loop/publish", serve.gw);
    let started = Instant::now();
    let answer = loop {
        let r = serve
            .http
            .post(&publish)
            // Far more than 100 000 rounds take; far less than 10^12 would.
            .timeout(Duration::from_secs(120))
            .body(json!({"n": 0, "limit": 1_000_000_000_000u64}).to_string())
            .send()
            .await
            .expect("the loop ended and the caller was answered");
        if r.status() != 404 {
            break r;
        }
        assert!(
            started.elapsed() < common::DEADLINE,
            "the stream is not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answer.status(), 200);
    let out: Value = answer.json().await.unwrap();
    assert_eq!(out["n"], 100_000, "{out}");
    serve
        .assert_alive("a loop as long as the caller asked")
        .await;
}
