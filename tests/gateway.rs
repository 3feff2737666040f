//! Black-box tests of `sluice gateway`: a real gateway process, a real upstream, real
//! clients; each auth scheme, limits at their edges, the middleware, proxy errors,
//! streaming, hot reload and two gateways sharing one Redis limit.

use crate::common;
use crate::common::harness;
mod smuggling;
use crate::common::upstream;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use harness::{api, Gw, DEADLINE};
use upstream::Upstream;

const KEY_AUTH: &str = r#"    authentication:
      enabled: true
components:
  securitySchemes:
    key:
      type: apiKey
      in: header
      name: X-Api-Key
security:
  - key: []
"#;

async fn get(gw: &Gw, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = gw.http.get(gw.url(path)).send().await.expect("request");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap_or_default())
}

async fn get_with(
    gw: &Gw,
    path: &str,
    header: (&str, &str),
) -> (u16, reqwest::header::HeaderMap, String) {
    let r = gw
        .http
        .get(gw.url(path))
        .header(header.0, header.1)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn proxies_with_forwarding_headers_and_without_hop_by_hop_ones() {
    let up = Upstream::start().await;
    let gw = Gw::start(&[("echo.yaml", api("echo", "/echo", &up.url(), ""))], "").await;
    let r = gw
        .http
        .get(gw.url("/echo/a/b?x=1&y=2"))
        .header("x-forwarded-for", "10.1.1.1")
        .header("connection", "x-drop-me")
        .header("x-drop-me", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("x-upstream-private").is_none(),
        "hop-by-hop header relayed"
    );
    let echo: Value = r.json().await.unwrap();
    assert_eq!(echo["path"], "/a/b");
    assert_eq!(echo["query"], "x=1&y=2");
    assert_eq!(echo["headers"]["x-forwarded-for"], "10.1.1.1, 127.0.0.1");
    assert_eq!(echo["headers"]["x-forwarded-proto"], "http");
    assert_eq!(
        echo["headers"]["x-forwarded-host"],
        format!("127.0.0.1:{}", gw.port)
    );
    assert!(echo["headers"].get("x-drop-me").is_none());
    let (status, _, body) = get(&gw, "/nothing-here").await;
    assert_eq!(status, 404);
    assert!(body.contains("\"error\""), "{body}");
    assert_eq!(get(&gw, "/ping").await.0, 200);
    // The control endpoints are on the control port only: on the APIs' port they are
    // paths like any other, and no API serves them.
    assert_eq!(get(&gw, "/ready").await.0, 404);
    assert_eq!(get(&gw, "/metrics").await.0, 404);
    assert_eq!(get(&gw, "/sluice/keys").await.0, 404);
    let control = |path: &str| gw.http.get(gw.control_url(path)).send();
    assert_eq!(control("/ready").await.unwrap().status(), 200);
    assert_eq!(control("/ping").await.unwrap().status(), 200);
    let metrics = control("/metrics").await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("sluice_gateway_requests_total{api_id=\"echo\",status_class=\"2xx\"}"),
        "{metrics}"
    );
    assert!(!metrics.contains("/a/b"), "raw paths must not be labels");
}

#[tokio::test]
async fn api_keys_are_accepted_and_refused() {
    let up = Upstream::start().await;
    let gw = Gw::start(
        &[
            ("a.yaml", api("keyed", "/keyed", &up.url(), KEY_AUTH)),
            ("b.yaml", api("other", "/other", &up.url(), KEY_AUTH)),
        ],
        "",
    )
    .await;
    let key = gw.create_key(json!({"access_rights": {"keyed": {}}})).await;
    let token = key["key"].as_str().unwrap().to_owned();
    let id = key["key_id"].as_str().unwrap().to_owned();

    let (status, _, body) = get(&gw, "/keyed/x").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"],
        "authorization missing"
    );
    assert_eq!(
        get_with(&gw, "/keyed/x", ("x-api-key", "wrong")).await.0,
        401
    );
    assert_eq!(
        get_with(&gw, "/keyed/x", ("x-api-key", &token)).await.0,
        200
    );
    // No access rights on the other API.
    assert_eq!(
        get_with(&gw, "/other/x", ("x-api-key", &token)).await.0,
        403
    );

    // Expired, then inactive.
    let put = |body: Value| {
        gw.admin(Method::PUT, &format!("/sluice/keys/{id}"))
            .json(&body)
            .send()
    };
    assert_eq!(
        put(json!({"access_rights": {"keyed": {}}, "expires": 1}))
            .await
            .unwrap()
            .status(),
        200
    );
    let (status, _, body) = get_with(&gw, "/keyed/x", ("x-api-key", &token)).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("expired"));
    assert_eq!(
        put(json!({"access_rights": {"keyed": {}}, "inactive": true}))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        get_with(&gw, "/keyed/x", ("x-api-key", &token)).await.0,
        403
    );
    // Deleted keys stop working at once on this gateway.
    let del = gw
        .admin(Method::DELETE, &format!("/sluice/keys/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert_eq!(
        get_with(&gw, "/keyed/x", ("x-api-key", &token)).await.0,
        401
    );
}

#[tokio::test]
async fn keys_in_query_and_cookie() {
    let up = Upstream::start().await;
    let query_auth = KEY_AUTH
        .replace("in: header", "in: query")
        .replace("X-Api-Key", "api_key");
    let cookie_auth = KEY_AUTH
        .replace("in: header", "in: cookie")
        .replace("X-Api-Key", "session");
    let gw = Gw::start(
        &[
            ("q.yaml", api("q", "/q", &up.url(), &query_auth)),
            ("c.yaml", api("c", "/c", &up.url(), &cookie_auth)),
        ],
        "",
    )
    .await;
    let key = gw
        .create_key(json!({"access_rights": {"q": {}, "c": {}}}))
        .await;
    let token = key["key"].as_str().unwrap();
    assert_eq!(get(&gw, &format!("/q/x?api_key={token}")).await.0, 200);
    assert_eq!(get(&gw, "/q/x?api_key=nope").await.0, 401);
    let cookie = format!("theme=dark; session={token}");
    assert_eq!(get_with(&gw, "/c/x", ("cookie", &cookie)).await.0, 200);
    assert_eq!(
        get_with(&gw, "/c/x", ("cookie", "session=nope")).await.0,
        401
    );
}

#[tokio::test]
async fn basic_auth_users() {
    let up = Upstream::start().await;
    let auth = r#"    authentication:
      enabled: true
components:
  securitySchemes:
    basic:
      type: http
      scheme: basic
"#;
    let gw = Gw::start(&[("b.yaml", api("basic", "/basic", &up.url(), auth))], "").await;
    gw.create_key(json!({
        "access_rights": {"basic": {}},
        "basic_auth": {"username": "alice", "password": "correct horse"}
    }))
    .await;
    let ok = gw
        .http
        .get(gw.url("/basic/x"))
        .basic_auth("alice", Some("correct horse"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let bad = gw
        .http
        .get(gw.url("/basic/x"))
        .basic_auth("alice", Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    let none = gw.http.get(gw.url("/basic/x")).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert!(none.headers().get("www-authenticate").is_some());
}

#[tokio::test]
async fn jwt_bearer_tokens() {
    use jsonwebtoken::{encode, EncodingKey, Header};
    let up = Upstream::start().await;
    let auth = r#"    authentication:
      enabled: true
      securitySchemes:
        jwt:
          enabled: true
          signingMethod: HS256
          source: a-shared-test-secret-of-some-length
          issuer: https://issuer.test
          audiences: [gateway-tests]
components:
  securitySchemes:
    jwt:
      type: http
      scheme: bearer
      bearerFormat: JWT
"#;
    let gw = Gw::start(&[("j.yaml", api("jwt", "/jwt", &up.url(), auth))], "").await;
    let now = chrono::Utc::now().timestamp();
    let sign = |claims: Value, secret: &str| {
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };
    let good = sign(
        json!({"sub": "u1", "iss": "https://issuer.test", "aud": "gateway-tests", "exp": now + 60}),
        "a-shared-test-secret-of-some-length",
    );
    let bearer = |t: &str| format!("Bearer {t}");
    assert_eq!(
        get_with(&gw, "/jwt/x", ("authorization", &bearer(&good)))
            .await
            .0,
        200
    );
    let expired = sign(
        json!({"sub": "u1", "iss": "https://issuer.test", "aud": "gateway-tests", "exp": now - 600}),
        "a-shared-test-secret-of-some-length",
    );
    assert_eq!(
        get_with(&gw, "/jwt/x", ("authorization", &bearer(&expired)))
            .await
            .0,
        401
    );
    let forged = sign(
        json!({"sub": "u1", "iss": "https://issuer.test", "aud": "gateway-tests", "exp": now + 60}),
        "another-secret",
    );
    assert_eq!(
        get_with(&gw, "/jwt/x", ("authorization", &bearer(&forged)))
            .await
            .0,
        401
    );
    let wrong_aud = sign(
        json!({"sub": "u1", "iss": "https://issuer.test", "aud": "someone-else", "exp": now + 60}),
        "a-shared-test-secret-of-some-length",
    );
    assert_eq!(
        get_with(&gw, "/jwt/x", ("authorization", &bearer(&wrong_aud)))
            .await
            .0,
        401
    );
    assert_eq!(get(&gw, "/jwt/x").await.0, 401);
}

#[tokio::test]
async fn hmac_signed_requests() {
    let up = Upstream::start().await;
    let auth = r#"    authentication:
      enabled: true
      securitySchemes:
        sig:
          enabled: true
          allowedAlgorithms: [hmac-sha256]
          allowedClockSkew: 300
components:
  securitySchemes:
    sig:
      type: http
      scheme: signature
"#;
    let gw = Gw::start(&[("h.yaml", api("hmac", "/hmac", &up.url(), auth))], "").await;
    let key = gw
        .create_key(json!({"access_rights": {"hmac": {}}, "hmac": true}))
        .await;
    let id = key["key_id"].as_str().unwrap();
    let secret = key["hmac_secret"].as_str().unwrap();
    let date = httpdate_now();
    let signed = |path: &str, secret: &str| {
        let (parts, ()) = http::Request::get(path)
            .header("date", date.as_str())
            .body(())
            .unwrap()
            .into_parts();
        sluice::gateway::auth::hmac::sign(
            &parts,
            id,
            sluice::gateway::auth::hmac::HmacAlgorithm::Sha256,
            &["(request-target)", "date"],
            secret.as_bytes(),
        )
        .unwrap()
    };
    let header = signed("/hmac/x", secret);
    let ok = gw
        .http
        .get(gw.url("/hmac/x"))
        .header("date", &date)
        .header("authorization", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // Signed for another path.
    let other = signed("/hmac/y", secret);
    let bad = gw
        .http
        .get(gw.url("/hmac/x"))
        .header("date", &date)
        .header("authorization", &other)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    let wrong = signed("/hmac/x", "not-the-secret");
    let bad = gw
        .http
        .get(gw.url("/hmac/x"))
        .header("date", &date)
        .header("authorization", &wrong)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
}

fn httpdate_now() -> String {
    sluice::gateway::auth::hmac::http_date(std::time::SystemTime::now())
}

#[tokio::test]
async fn key_rate_limit_and_quota_hold_exactly_at_their_edges() {
    let up = Upstream::start().await;
    let gw = Gw::start(
        &[("a.yaml", api("limited", "/limited", &up.url(), KEY_AUTH))],
        "",
    )
    .await;
    let key = gw
        .create_key(
            json!({"access_rights": {"limited": {}}, "rate_limit": {"rate": 3, "per": "60s"}}),
        )
        .await;
    let token = key["key"].as_str().unwrap().to_owned();
    for remaining in [2, 1, 0] {
        let (status, headers, _) = get_with(&gw, "/limited/x", ("x-api-key", &token)).await;
        assert_eq!(status, 200);
        assert_eq!(headers["x-ratelimit-limit"], "3");
        assert_eq!(
            headers["x-ratelimit-remaining"],
            remaining.to_string().as_str()
        );
    }
    let (status, headers, body) = get_with(&gw, "/limited/x", ("x-api-key", &token)).await;
    assert_eq!(status, 429, "{body}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "retry after {retry}");
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert!(headers.contains_key("x-ratelimit-reset"));

    let key = gw
        .create_key(json!({"access_rights": {"limited": {}}, "quota": {"max": 2, "renewal": "1h"}}))
        .await;
    let token = key["key"].as_str().unwrap().to_owned();
    let id = key["key_id"].as_str().unwrap().to_owned();
    assert_eq!(
        get_with(&gw, "/limited/x", ("x-api-key", &token)).await.0,
        200
    );
    assert_eq!(
        get_with(&gw, "/limited/x", ("x-api-key", &token)).await.0,
        200
    );
    let (status, _, body) = get_with(&gw, "/limited/x", ("x-api-key", &token)).await;
    assert_eq!(status, 429);
    assert!(body.contains("quota"), "{body}");
    let reset = gw
        .admin(Method::DELETE, &format!("/sluice/keys/{id}/quota"))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 200);
    assert_eq!(
        get_with(&gw, "/limited/x", ("x-api-key", &token)).await.0,
        200
    );
}

#[tokio::test]
async fn api_and_operation_rate_limits() {
    let up = Upstream::start().await;
    let doc = format!(
        r#"openapi: 3.1.0
info: {{title: t, version: "1"}}
paths:
  /items:
    get:
      operationId: listItems
      responses: {{"200": {{description: ok}}}}
x-sluice-api-gateway:
  info: {{id: rl, name: rl}}
  upstream:
    url: {}
    rateLimit: {{rate: 5, per: 60s}}
  server:
    listenPath: {{value: /rl, strip: true}}
  middleware:
    operations:
      listItems:
        rateLimit: {{rate: 2, per: 60}}
"#,
        up.url()
    );
    let gw = Gw::start(&[("rl.yaml", doc)], "").await;
    assert_eq!(get(&gw, "/rl/items").await.0, 200);
    assert_eq!(get(&gw, "/rl/items").await.0, 200);
    assert_eq!(get(&gw, "/rl/items").await.0, 429);
    // The API's limit (5) counted the three above, the one the operation refused too:
    // it is checked first. Two are left.
    assert_eq!(get(&gw, "/rl/other").await.0, 200);
    assert_eq!(get(&gw, "/rl/other").await.0, 200);
    assert_eq!(get(&gw, "/rl/other").await.0, 429);
}

#[tokio::test]
async fn cors_marks_proxied_and_refused_answers_to_allowed_origins() {
    let up = Upstream::start().await;
    let cors = "  middleware:\n    global:\n      cors:\n        allowedOrigins: ['https://app.example']\n        exposedHeaders: [X-Total]\n";
    let auth = KEY_AUTH.replace("components:", &format!("{cors}components:"));
    let gw = Gw::start(
        &[
            ("c.yaml", api("c", "/c", &up.url(), cors)),
            ("k.yaml", api("k", "/k", &up.url(), &auth)),
        ],
        "",
    )
    .await;
    let (status, headers, _) = get_with(&gw, "/c/x", ("origin", "https://app.example")).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example"
    );
    assert_eq!(headers["access-control-expose-headers"], "X-Total");
    let (status, headers, _) = get_with(&gw, "/c/x", ("origin", "https://evil.example")).await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("access-control-allow-origin"));
    // A refusal by a step is marked too, so that the page can read why.
    let (status, headers, _) = get_with(&gw, "/k/x", ("origin", "https://app.example")).await;
    assert_eq!(status, 401);
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example"
    );
    // A preflight is answered by the gateway.
    let r = gw
        .http
        .request(Method::OPTIONS, gw.url("/c/x"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example"
    );
}

fn middleware_doc(upstream: &str) -> String {
    format!(
        r##"openapi: 3.0.3
info: {{title: mw, version: "1"}}
paths:
  /upload:
    post:
      operationId: upload
      responses: {{"200": {{description: ok}}}}
  /pets:
    post:
      operationId: addPet
      requestBody:
        required: true
        content:
          application/json:
            schema: {{$ref: "#/components/schemas/Pet"}}
      responses: {{"200": {{description: ok}}}}
  /mocked:
    get:
      operationId: mocked
      responses:
        "200":
          description: ok
  /cached:
    get:
      operationId: cached
      responses: {{"200": {{description: ok}}}}
  /blocked:
    get:
      operationId: blocked
      responses: {{"200": {{description: ok}}}}
components:
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        name: {{type: string}}
x-sluice-api-gateway:
  info: {{id: mw, name: mw}}
  upstream: {{url: "{upstream}"}}
  server:
    listenPath: {{value: /mw, strip: true}}
  middleware:
    global:
      cache:
        enabled: true
        timeout: 60
      transformRequestHeaders:
        add: [{{name: X-Added, value: "yes"}}]
        remove: [X-Secret]
      transformResponseHeaders:
        add: [{{name: X-Served-By, value: sluice}}]
    operations:
      upload:
        requestSizeLimit: {{enabled: true, value: 10}}
      addPet:
        validateRequest: {{enabled: true, errorResponseCode: 422}}
      mocked:
        mockResponse:
          enabled: true
          code: 203
          body: '{{"mock": true}}'
          headers: [{{name: Content-Type, value: application/json}}]
      cached:
        cache: {{enabled: true}}
      blocked:
        block: {{enabled: true}}
"##
    )
}

#[tokio::test]
async fn size_limit_validation_mock_cache_block_and_header_transforms() {
    let up = Upstream::start().await;
    let gw = Gw::start(&[("mw.yaml", middleware_doc(&up.url()))], "").await;
    let post = |path: &str, body: &'static str| {
        gw.http
            .post(gw.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Size: exactly at the limit passes, one byte over is refused.
    assert_eq!(
        post("/mw/upload", "0123456789").await.unwrap().status(),
        200
    );
    assert_eq!(
        post("/mw/upload", "0123456789X").await.unwrap().status(),
        413
    );
    // A body of unknown length is measured too.
    let chunks = futures::stream::iter(vec![
        Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"012345")),
        Ok(bytes::Bytes::from_static(b"6789AB")),
    ]);
    let r = gw
        .http
        .post(gw.url("/mw/upload"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);

    // Validation.
    assert_eq!(
        post("/mw/pets", r#"{"name": "rex"}"#)
            .await
            .unwrap()
            .status(),
        200
    );
    let bad = post("/mw/pets", r#"{"age": 3}"#).await.unwrap();
    assert_eq!(bad.status(), 422);
    let body: Value = bad.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("name"), "{body}");
    assert_eq!(post("/mw/pets", "").await.unwrap().status(), 422);

    // Mock: the upstream never sees it.
    let before = up.hits();
    let (status, headers, body) = get(&gw, "/mw/mocked").await;
    assert_eq!(status, 203);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body, r#"{"mock": true}"#);
    assert_eq!(up.hits(), before);

    // Cache: the second answer comes from the gateway.
    let (_, h1, b1) = get(&gw, "/mw/cached?v=1").await;
    let hits = up.hits();
    let (_, h2, b2) = get(&gw, "/mw/cached?v=1").await;
    assert_eq!(up.hits(), hits, "a cache hit reached the upstream");
    assert_eq!(b1, b2);
    assert_eq!(h1["x-cache"], "MISS");
    assert_eq!(h2["x-cache"], "HIT");
    // Another query is another entry.
    let (_, h3, _) = get(&gw, "/mw/cached?v=2").await;
    assert_eq!(h3["x-cache"], "MISS");

    // Block.
    assert_eq!(get(&gw, "/mw/blocked").await.0, 403);

    // Header transforms.
    let r = gw
        .http
        .get(gw.url("/mw/echo"))
        .header("x-secret", "s")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-served-by"], "sluice");
    let echo: Value = r.json().await.unwrap();
    assert_eq!(echo["headers"]["x-added"], "yes");
    assert!(echo["headers"].get("x-secret").is_none());
}

#[tokio::test]
async fn upstream_failures_answer_502_and_504() {
    let closed = format!("http://127.0.0.1:{}", harness::free_port());
    let up = Upstream::start().await;
    let slow = api("slow", "/slow-api", &up.url(), "").replace(
        &format!("    url: {}\n", up.url()),
        &format!("    url: {}\n    timeout: 500ms\n", up.url()),
    );
    let gw = Gw::start(
        &[
            ("down.yaml", api("down", "/down", &closed, "")),
            ("slow.yaml", slow),
        ],
        "",
    )
    .await;
    let (status, headers, body) = get(&gw, "/down/x").await;
    assert_eq!(status, 502, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"], "cannot connect to the upstream");
    // An id to quote, the same in the body and the header; the cause is in the log.
    let id = answer["request_id"].as_str().unwrap();
    assert_eq!(headers["x-request-id"], id);
    assert!(!body.contains("127.0.0.1"), "{body}");
    let started = Instant::now();
    let (status, _, _) = get(&gw, "/slow-api/slow").await;
    assert_eq!(status, 504);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn an_upstreams_own_error_text_never_reaches_the_client() {
    // An upstream that answers something that is not HTTP, naming an internal detail.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"SECRET-INTERNAL db-7.corp:5432 garbage\r\n\r\n")
                    .await;
            });
        }
    });
    let gw = Gw::start(
        &[(
            "bad.yaml",
            api("bad", "/bad", &format!("http://{addr}"), ""),
        )],
        "",
    )
    .await;
    let (status, headers, body) = get(&gw, "/bad/x").await;
    assert_eq!(status, 502, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"], "the upstream failed");
    assert!(headers.contains_key("x-request-id"));
    for secret in ["SECRET", "db-7", "garbage", &addr.to_string()] {
        assert!(!body.contains(secret), "{body}");
    }
}

#[tokio::test]
async fn an_upstreams_trailers_reach_the_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A raw upstream: a chunked answer ending in trailer fields, one of which a trailer
    // may not carry.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut b = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&b[..n]),
                    }
                }
                let answer =
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n\
                              3\r\nabc\r\n0\r\nx-checksum: 9f\r\nconnection: close\r\n\r\n";
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.read(&mut b).await;
            });
        }
    });
    let gw = Gw::start(
        &[("t.yaml", api("t", "/t", &format!("http://{up}"), ""))],
        "",
    )
    .await;
    let mut client = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .unwrap();
    client
        .write_all(b"GET /t/x HTTP/1.1\r\nhost: gw\r\nte: trailers\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !got.ends_with(b"\r\n\r\n") || !got.windows(5).any(|w| w == b"\r\n0\r\n") {
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&got)
        );
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut b))
            .await
            .expect("the answer in time")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&b[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("http/1.1 200"), "{text}");
    assert!(head.contains("transfer-encoding: chunked"), "{text}");
    assert!(body.starts_with("3\r\nabc\r\n0\r\n"), "{text}");
    assert!(body.contains("x-checksum: 9f\r\n"), "{text}");
    assert!(!body.contains("connection"), "{text}");
}

#[tokio::test]
async fn an_sse_upstream_is_streamed_not_buffered() {
    use futures::StreamExt;
    let up = Upstream::start().await;
    let gw = Gw::start(&[("s.yaml", api("sse", "/sse-api", &up.url(), ""))], "").await;
    let resp = gw.http.get(gw.url("/sse-api/sse")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    // The first event arrives while the upstream still holds the second.
    let first = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("the first event was held back")
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"data: one\n\n");
    up.sse_gate.notify_one();
    let second = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("second event")
        .unwrap()
        .unwrap();
    assert_eq!(&second[..], b"data: two\n\n");
}

#[tokio::test]
async fn hot_reload_under_load_loses_no_request() {
    let up = Upstream::start().await;
    let gw = Arc::new(Gw::start(&[("a.yaml", api("a", "/a", &up.url(), ""))], "").await);
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (gw, failures, done, stop) = (gw.clone(), failures.clone(), done.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match gw.http.get(gw.url("/a/x")).send().await {
                    Ok(r) if r.status() == 200 => {}
                    _ => {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Change API a several times and add API b, all while requests run.
    for i in 0..5 {
        let extra = format!(
            "  middleware:\n    global:\n      transformResponseHeaders:\n        add: [{{name: X-Version, value: \"{i}\"}}]\n"
        );
        gw.write_api("a.yaml", &api("a", "/a", &up.url(), &extra));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    gw.write_api("b.yaml", &api("b", "/b", &up.url(), ""));
    loop {
        if get(&gw, "/b/x").await.0 == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a new API took over a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, headers, _) = get(&gw, "/a/x").await;
    assert_eq!(headers["x-version"], "4");
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    assert!(done.load(Ordering::SeqCst) > 20);
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    // A removed API goes.
    std::fs::remove_file(gw.dir.join("apis/b.yaml")).unwrap();
    let started = Instant::now();
    while get(&gw, "/b/x").await.0 != 404 {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a removed API still served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_gateways_sharing_redis_enforce_one_limit() {
    let _shared = crate::common::brokers::BROKER.read().await;
    let up = Upstream::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let prefix = format!("sluice-test-{}:", uuid::Uuid::new_v4());
    let config = format!("redis:\n  url: redis://127.0.0.1:6379\n  prefix: \"{prefix}\"\n");
    let apis = [("a.yaml", api("shared", "/shared", &up.url(), KEY_AUTH))];
    let one = Gw::start_in(tmp.path().to_path_buf(), None, &apis, &config, &[]).await;
    let two = Gw::start_in(tmp.path().to_path_buf(), None, &apis, &config, &[]).await;
    // The key made on one gateway works on both: they share the store.
    let key = one
        .create_key(
            json!({"access_rights": {"shared": {}}, "rate_limit": {"rate": 10, "per": "60s"}}),
        )
        .await;
    let token = key["key"].as_str().unwrap().to_owned();
    let mut tasks = Vec::new();
    for i in 0..30 {
        let url = if i % 2 == 0 {
            one.url("/shared/x")
        } else {
            two.url("/shared/x")
        };
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            reqwest::Client::new()
                .get(url)
                .header("x-api-key", token)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        match t.await.unwrap() {
            200 => ok += 1,
            429 => limited += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((ok, limited), (10, 20));
    drop(tmp);
}

/// Reads from `conn` until the peer closes it; false if it is still open at `within`.
async fn closed_by_peer(conn: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn silent_http2_connections_are_closed() {
    use tokio::io::AsyncWriteExt;
    let gw = Gw::start(&[], "http:\n  header_read_timeout: 300ms\n").await;
    // The HTTP/2 preface, then nothing: twenty such connections, on both ports.
    let mut conns = Vec::new();
    for port in [gw.port, gw.control_port] {
        for _ in 0..10 {
            let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .unwrap();
            conns.push(c);
        }
    }
    for c in &mut conns {
        assert!(
            closed_by_peer(c, DEADLINE).await,
            "an idle HTTP/2 connection stayed open"
        );
    }
    // A client that speaks HTTP/2 properly is still served.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = h2.get(gw.url("/ping")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
}

#[tokio::test]
async fn connections_past_the_cap_are_answered_503_and_freed_places_are_served() {
    let gw = Gw::start_with_env(&[
        ("SLUICE_GW_LISTEN_MAX_CONNECTIONS", "8".into()),
        // Silent connections stay open for the whole test, however slow it runs.
        ("SLUICE_GW_HTTP_HEADER_READ_TIMEOUT", "120s".into()),
    ])
    .await;
    let pid = gw.pid();
    let idle = open_descriptors(pid);
    // Connections that send nothing take every place (twice as many as there are, so
    // that the cap is reached however the kernel spreads them over the listeners).
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(
            tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
                .await
                .unwrap(),
        );
    }
    // The connections are accepted before the ninth comes: wait until it is refused.
    let refused = ping_until(gw.port, "HTTP/1.1 503").await;
    assert!(refused.contains("too many connections"), "{refused}");
    // The control port has places of its own.
    let r = gw.http.get(gw.control_url("/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Closing them gives their places back: the gateway closes its ends (a loaded
    // machine may take a while), then serves again.
    held.clear();
    let start = Instant::now();
    while open_descriptors(pid) > idle + 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the gateway still holds {} descriptors, {idle} before the test's connections",
            open_descriptors(pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ping_until(gw.port, "HTTP/1.1 200").await;
}

/// CPU time (user and system) the process `pid` has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name and state.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // The kernel counts in USER_HZ, 100 per second on Linux.
    Duration::from_millis(ticks * 10)
}

/// How many descriptors the process `pid` holds open.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Opens `n` connections to `port` and keeps them open, sending nothing.
async fn hold(port: u16, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap(),
        );
    }
    held
}

/// The answer to `GET /ping` on a connection of its own, as raw text ("" when none came).
async fn raw_ping(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut c) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let _ = c
        .write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), c.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Waits until `GET /ping` on `port` is answered with a status line starting `status`.
async fn ping_until(port: u16, status: &str) -> String {
    let start = Instant::now();
    loop {
        let answer = raw_ping(port).await;
        if answer.starts_with(status) {
            return answer;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "/ping never answered {status}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Busy the process must not be while it only holds idle connections: spinning on
/// accept takes a whole core (the two seconds watched), waiting takes next to none.
const IDLE_CPU: Duration = Duration::from_millis(500);

async fn cpu_over_two_seconds(pid: u32) -> Duration {
    let before = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cpu_time(pid) - before
}

#[tokio::test]
async fn more_connections_than_descriptors_are_refused_by_the_default_cap() {
    // At 256 descriptors the cap is 192 connections per port: 300 silent connections
    // fill it and the rest are answered 503.
    let gw = Gw::start_with_descriptors(
        256,
        &[("SLUICE_GW_HTTP_HEADER_READ_TIMEOUT", "120s".into())],
    )
    .await;
    let held = hold(gw.port, 300).await;
    let refused = ping_until(gw.port, "HTTP/1.1 503").await;
    assert!(refused.contains("too many connections"), "{refused}");
    // The control port answers meanwhile, and nothing spins.
    ping_until(gw.control_port, "HTTP/1.1 200").await;
    let busy = cpu_over_two_seconds(gw.pid()).await;
    assert!(busy < IDLE_CPU, "{busy:?} of CPU over 2 s while idle");
    drop(held);
    ping_until(gw.port, "HTTP/1.1 200").await;
}

#[tokio::test]
async fn running_out_of_descriptors_waits_instead_of_spinning() {
    // A cap set above the descriptor limit: accepting fails for want of descriptors.
    let gw = Gw::start_with_descriptors(
        256,
        &[
            ("SLUICE_GW_LISTEN_MAX_CONNECTIONS", "100000".into()),
            ("SLUICE_GW_HTTP_HEADER_READ_TIMEOUT", "120s".into()),
        ],
    )
    .await;
    let pid = gw.pid();
    let held = hold(gw.port, 300).await;
    let start = Instant::now();
    while open_descriptors(pid) < 256 {
        assert!(
            start.elapsed() < DEADLINE,
            "the gateway holds only {} descriptors",
            open_descriptors(pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let busy = cpu_over_two_seconds(pid).await;
    assert!(
        busy < IDLE_CPU,
        "{busy:?} of CPU over 2 s with no descriptor left"
    );
    // Once connections close, the gateway accepts again.
    drop(held);
    ping_until(gw.port, "HTTP/1.1 200").await;
    ping_until(gw.control_port, "HTTP/1.1 200").await;
}

#[tokio::test]
async fn guessing_the_gateway_secret_is_locked_out_per_address() {
    let gw =
        Gw::start_with_env(&[("SLUICE_GW_CONTROL_FAILED_SECRETS_PER_MINUTE", "3".into())]).await;
    let with = |secret: &'static str| {
        gw.http
            .get(gw.control_url("/sluice/keys"))
            .header("x-sluice-authorization", secret)
            .send()
    };
    // The right secret works, and does not count.
    assert_eq!(with(harness::SECRET).await.unwrap().status(), 200);
    for _ in 0..3 {
        assert_eq!(with("a-guess-of-mine").await.unwrap().status(), 403);
    }
    // Past the allowance, every request from the address waits out the minute, the
    // right secret too: a guesser cannot tell a right guess from the lockout.
    let locked = with("another-guess").await.unwrap();
    assert_eq!(locked.status(), 429);
    assert_eq!(locked.headers()["retry-after"], "60");
    assert_eq!(with(harness::SECRET).await.unwrap().status(), 429);
}

#[tokio::test]
async fn the_gateway_api_needs_the_secret_and_names_bad_fields() {
    let up = Upstream::start().await;
    let gw = Gw::start(&[("a.yaml", api("adm", "/adm", &up.url(), KEY_AUTH))], "").await;
    let r = gw
        .http
        .get(gw.control_url("/sluice/keys"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = gw
        .http
        .get(gw.control_url("/sluice/keys"))
        .header("x-sluice-authorization", "wrong-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = gw
        .admin(Method::POST, "/sluice/keys")
        .json(&json!({"access_rights": {"adm": {}}, "rate_limit": {"rate": "many", "per": "1s"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("rate_limit.rate"),
        "{body}"
    );
    let r = gw
        .admin(Method::POST, "/sluice/keys")
        .json(&json!({"access_rights": {"nope": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Read back: no secret is shown again.
    let key = gw
        .create_key(json!({"access_rights": {"adm": {}}, "alias": "mobile"}))
        .await;
    let token = key["key"].as_str().unwrap();
    let id = key["key_id"].as_str().unwrap();
    let r = gw
        .admin(Method::GET, &format!("/sluice/keys/{id}"))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(text.contains("mobile") && !text.contains(token), "{text}");
    let list = gw
        .admin(Method::GET, "/sluice/keys")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(list.contains(id) && !list.contains(token));
    // The store holds only the hash.
    let db = std::fs::read(gw.dir.join("sluice.db")).unwrap();
    assert!(!db.windows(token.len()).any(|w| w == token.as_bytes()));
}

#[tokio::test]
async fn apis_posted_to_the_gateway_api_are_served_and_bad_ones_refused() {
    let up = Upstream::start().await;
    let gw = Gw::start(&[], "").await;
    let doc: Value = serde_yaml::from_str(&api("posted", "/posted", &up.url(), "")).unwrap();
    let r = gw
        .admin(Method::POST, "/sluice/apis")
        .json(&doc)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    assert_eq!(get(&gw, "/posted/x").await.0, 200);
    let mut bad = doc.clone();
    bad["x-sluice-api-gateway"]["server"]["listenPath"]["value"] = json!("no-slash");
    bad["x-sluice-api-gateway"]["info"]["id"] = json!("bad");
    let r = gw
        .admin(Method::POST, "/sluice/apis")
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["details"][0]["path"], "x-sluice-api-gateway.server.listenPath.value",
        "{body}"
    );
    let r = gw
        .admin(Method::DELETE, "/sluice/apis/posted")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(get(&gw, "/posted/x").await.0, 404);
}

#[tokio::test]
async fn a_bad_api_does_not_stop_the_others_and_is_reported_where_it_is() {
    let up = Upstream::start().await;
    let bad = api(
        "broken",
        "/broken",
        &up.url(),
        "  middleware:\n    global:\n      cahce: {}\n",
    );
    let gw = Gw::start(
        &[
            ("good.yaml", api("good", "/good", &up.url(), "")),
            ("broken.yaml", bad),
        ],
        "",
    )
    .await;
    assert_eq!(get(&gw, "/good/x").await.0, 200);
    assert_eq!(get(&gw, "/broken/x").await.0, 404);
    let body = gw.apis().await;
    let error = body["errors"][0]["error"].as_str().unwrap().to_owned();
    assert!(error.contains("API `broken`"), "{error}");
    assert!(error.contains("broken.yaml:20:7"), "{error}");
    assert!(
        error.contains("cache"),
        "the suggestion names the right key: {error}"
    );
}

#[tokio::test]
async fn a_bad_gateway_config_fails_at_start_with_its_position() {
    let (code, err) = harness::refused("listen:\n  port: 80\n  adress: 0.0.0.0\n").await;
    assert_eq!(code, 1);
    assert!(err.contains("gateway.yaml:3:3"), "{err}");
    assert!(err.contains("address"), "{err}");
    let (code, err) = harness::refused("tls:\n  enabled: true\n").await;
    assert_eq!(code, 1);
    assert!(err.contains("cert_file"), "{err}");
    // TLS files: the field, the file and the cause.
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.pem");
    let not_a_key = tmp.path().join("not-a-key.pem");
    std::fs::write(&not_a_key, "hello").unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_file = tmp.path().join("cert.pem");
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    let tls = |cert: &std::path::Path, key: &std::path::Path| {
        format!(
            "tls:\n  enabled: true\n  cert_file: {}\n  key_file: {}\n",
            cert.display(),
            key.display()
        )
    };
    let (code, err) = harness::refused(&tls(&missing, &not_a_key)).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("`tls.cert_file`: cannot read") && err.contains("missing.pem"),
        "{err}"
    );
    let (code, err) = harness::refused(&tls(&cert_file, &not_a_key)).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("`tls.key_file`: no private key in") && err.contains("not-a-key.pem"),
        "{err}"
    );
}

#[tokio::test]
async fn the_petstore_example_runs_as_documented() {
    let up = Upstream::start().await;
    let text = std::fs::read_to_string("apis/petstore.yaml").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let gw = Gw::start_in(
        tmp.path().to_path_buf(),
        None,
        &[("petstore.yaml", text)],
        "",
        &[("PETSTORE_UPSTREAM", up.url())],
    )
    .await;
    assert_eq!(get(&gw, "/petstore/pets").await.0, 401);
    let key = gw
        .create_key(json!({"access_rights": {"petstore": {}}}))
        .await;
    let token = key["key"].as_str().unwrap();
    let (status, headers, _) = get_with(&gw, "/petstore/pets?limit=5", ("x-api-key", token)).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-served-by"], "sluice");
    assert_eq!(
        get_with(&gw, "/petstore/pets?limit=500", ("x-api-key", token))
            .await
            .0,
        422
    );
    let r = gw
        .http
        .post(gw.url("/petstore/pets"))
        .header("x-api-key", token)
        .json(&json!({"tag": "no name"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    drop(tmp);
}

#[tokio::test]
async fn tls_offers_http2_and_http1_and_plain_speaks_http2_with_prior_knowledge() {
    let up = Upstream::start().await;
    let certs = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert_file, key_file) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
    let config = format!(
        "tls:\n  enabled: true\n  cert_file: {}\n  key_file: {}\n",
        cert_file.display(),
        key_file.display()
    );
    let apis = [("a.yaml", api("tls", "/tls", &up.url(), ""))];
    let gw = Gw::start(&apis, &config).await;
    let r = gw.http.get(gw.url("/tls/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2, "ALPN offers h2");
    let echo: Value = r.json().await.unwrap();
    assert_eq!(echo["headers"]["x-forwarded-proto"], "https");
    let h1 = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .http1_only()
        .build()
        .unwrap();
    let r = h1.get(gw.url("/tls/x")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.version()),
        (200, reqwest::Version::HTTP_11)
    );

    let plain = Gw::start(&apis, "").await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = h2.get(plain.url("/tls/x")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.version()),
        (200, reqwest::Version::HTTP_2)
    );
}

#[tokio::test]
async fn websocket_upgrades_pass_through() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let up = Upstream::start().await;
    let gw = Gw::start(&[("w.yaml", api("ws", "/ws-api", &up.url(), KEY_AUTH))], "").await;
    let key = gw.create_key(json!({"access_rights": {"ws": {}}})).await;
    let token = key["key"].as_str().unwrap();
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://127.0.0.1:{}/ws-api/ws",
            gw.port
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("x-api-key", token.parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("hello through the gateway"))
        .await
        .unwrap();
    let echoed = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        echoed.into_text().unwrap().as_str(),
        "hello through the gateway"
    );
    // Without a key the upgrade is refused before it reaches the upstream.
    let refused =
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws-api/ws", gw.port)).await;
    assert!(refused.is_err());
}

#[tokio::test]
async fn tls_from_a_certificate_the_dashboard_stored() {
    use sluice::store::seal::Sealer;
    use sluice::store::{CertRecord, Store};
    let up = Upstream::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let store_url = format!("sqlite://{}", tmp.path().join("sluice.db").display());
    let store = Store::open(&store_url).await.unwrap();
    let admin = sluice::dashboard::auth::bootstrap(&store, "default", None)
        .await
        .unwrap()
        .unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let sealed = Sealer::new("dashboard-secret")
        .seal(cert.key_pair.serialize_pem().as_bytes())
        .unwrap();
    store
        .insert_cert(&CertRecord {
            org_id: admin.org_id.clone(),
            id: "f00dfeed".into(),
            subject_cn: "127.0.0.1".into(),
            issuer_cn: "127.0.0.1".into(),
            not_before: "2020-01-01T00:00:00Z".into(),
            not_after: "2100-01-01T00:00:00Z".into(),
            is_ca: false,
            dns_names: "[]".into(),
            details: "{}".into(),
            pem: cert.cert.pem(),
            key_sealed: Some(sealed),
            created_at: 0,
        })
        .await
        .unwrap();
    store.close().await;
    let config =
        "tls:\n  enabled: true\n  certificate_id: f00dfeed\n  store_secret: dashboard-secret\n";
    let gw = Gw::start_in(
        tmp.path().to_path_buf(),
        None,
        &[("a.yaml", api("tls", "/tls", &up.url(), ""))],
        config,
        &[],
    )
    .await;
    let r = gw.http.get(gw.url("/tls/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The wrong secret cannot open the key: the gateway refuses to start.
    let (code, err) = harness::refused(&format!(
        "store:\n  url: {store_url}\ntls:\n  enabled: true\n  certificate_id: f00dfeed\n  store_secret: wrong\n"
    ))
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("cannot be opened"), "{err}");
}

/// A TLS acceptor for `localhost`/`127.0.0.1` with a self-signed certificate, asking
/// for a client certificate issued by `clients` when given. Returns it with the
/// certificate's PEM.
fn upstream_tls(clients: Option<&rcgen::CertifiedKey>) -> (tokio_rustls::TlsAcceptor, String) {
    use tokio_rustls::rustls;
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(client.cert.der().clone()).unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        cert.cert.pem(),
    )
}

#[tokio::test]
async fn https_upstreams_are_trusted_by_a_ca_file_and_shown_a_client_certificate() {
    let files = tempfile::tempdir().unwrap();
    let path = |name: &str| files.path().join(name).display().to_string();
    let client = rcgen::generate_simple_self_signed(vec!["sluice-gateway".into()]).unwrap();
    std::fs::write(path("client.pem"), client.cert.pem()).unwrap();
    std::fs::write(path("client.key"), client.key_pair.serialize_pem()).unwrap();

    // A self-signed upstream: refused (502) until its certificate is in `ca_file`.
    let (tls, pem) = upstream_tls(None);
    std::fs::write(path("upstream.pem"), pem).unwrap();
    let up = Upstream::start_tls(tls).await;
    let apis = [("a.yaml", api("secure", "/secure", &up.url(), ""))];
    let untrusting = Gw::start(&apis, "").await;
    let (status, _, body) = get(&untrusting, "/secure/x").await;
    assert_eq!(status, 502, "{body}");
    let trusting = Gw::start(
        &apis,
        &format!("proxy:\n  ca_file: {}\n", path("upstream.pem")),
    )
    .await;
    let (status, _, body) = get(&trusting, "/secure/x").await;
    assert_eq!(status, 200, "{body}");
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["path"], "/x");

    // An upstream that asks for a client certificate: shown one, it answers.
    let (tls, pem) = upstream_tls(Some(&client));
    std::fs::write(path("mutual.pem"), pem).unwrap();
    let up = Upstream::start_tls(tls).await;
    let apis = [("a.yaml", api("mutual", "/mutual", &up.url(), ""))];
    let anonymous = Gw::start(
        &apis,
        &format!("proxy:\n  ca_file: {}\n", path("mutual.pem")),
    )
    .await;
    assert_eq!(get(&anonymous, "/mutual/x").await.0, 502);
    let named = Gw::start(
        &apis,
        &format!(
            "proxy:\n  ca_file: {}\n  client_cert_file: {}\n  client_key_file: {}\n",
            path("mutual.pem"),
            path("client.pem"),
            path("client.key")
        ),
    )
    .await;
    let (status, _, body) = get(&named, "/mutual/x").await;
    assert_eq!(status, 200, "{body}");

    // Files that are missing or half a pair stop the gateway at start, naming the field.
    let (code, err) = harness::refused(&format!(
        "store:\n  url: sqlite://{}\nproxy:\n  ca_file: /nonexistent/ca.pem\n",
        path("refused.db")
    ))
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("`proxy.ca_file`"), "{err}");
    let (code, err) = harness::refused(&format!(
        "proxy:\n  client_cert_file: {}\n",
        path("client.pem")
    ))
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("`client_key_file` go together"), "{err}");
}

#[tokio::test]
async fn an_upstream_may_stream_its_answer_while_it_reads_the_body() {
    use futures::StreamExt;
    let up = Upstream::start().await;
    let gw = Gw::start(&[("a.yaml", api("echo", "/echo", &up.url(), ""))], "").await;
    // Far more than the sockets on the way buffer: neither side may wait for the other
    // to finish.
    const PIECE: usize = 64 * 1024;
    const PIECES: usize = 256;
    let pieces = futures::stream::iter(0..PIECES)
        .map(|i| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![(i % 251) as u8; PIECE])));
    let resp = gw
        .http
        .post(gw.url("/echo/stream-echo"))
        .header("content-length", (PIECE * PIECES).to_string())
        .body(reqwest::Body::wrap_stream(pieces))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status(), 200);
    let mut got = Vec::with_capacity(PIECE * PIECES);
    let mut stream = resp.bytes_stream();
    let read = async {
        while let Some(chunk) = stream.next().await {
            got.extend_from_slice(&chunk.expect("body"));
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the echo flows both ways");
    assert_eq!(got.len(), PIECE * PIECES);
    assert!(got
        .chunks(PIECE)
        .enumerate()
        .all(|(i, piece)| piece.iter().all(|&b| b == (i % 251) as u8)));
}

/// Access log lines join up with the client's and the upstream's: each carries the
/// client's `X-Request-Id` (or one of its own) and the trace id of its `traceparent`, in
/// JSON when the logger says so.
#[tokio::test]
async fn access_log_lines_carry_the_request_and_trace_ids() {
    use tokio::io::AsyncBufReadExt;
    let up = Upstream::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let mut gw = Gw::start_in(
        tmp.path().to_owned(),
        Some(tmp),
        &[
            ("a.yaml", api("logged", "/logged", &up.url(), "")),
            // Nothing listens there: every request is answered 502.
            ("b.yaml", api("down", "/down", "http://127.0.0.1:9", "")),
        ],
        "",
        &[
            ("SLUICE_GW_LOGGER_LEVEL", "info".into()),
            ("SLUICE_GW_LOGGER_FORMAT", "json".into()),
        ],
    )
    .await;
    let mut lines = tokio::io::BufReader::new(gw.stderr()).lines();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let resp = gw
        .http
        .get(gw.url("/logged/x"))
        .header("x-request-id", "req-42")
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let unnamed = gw.http.get(gw.url("/logged/y")).send().await.unwrap();
    assert_eq!(unnamed.status(), 200);
    let failed = gw.http.get(gw.url("/down/z")).send().await.unwrap();
    assert_eq!(failed.status(), 502);
    let told: Value = failed.json().await.unwrap();
    let mut found = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while found.len() < 3 {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("two access lines in time")
            .unwrap()
            .expect("the log goes on");
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["target"] == "sluice::access" {
            found.push(v);
        }
    }
    let fields = &found[0]["fields"];
    assert_eq!(fields["request_id"], "req-42", "{}", found[0]);
    assert_eq!(fields["trace_id"], trace, "{}", found[0]);
    assert_eq!(fields["api_id"], "logged");
    // Without ids of the client's, the line has a request id of its own.
    let own = found[1]["fields"]["request_id"].as_str().unwrap();
    assert_eq!(own.len(), 32, "{}", found[1]);
    assert_eq!(found[1]["fields"]["trace_id"], "");
    // A 502's line names the request id its body told the client.
    assert_eq!(
        found[2]["fields"]["request_id"], told["request_id"],
        "{}",
        found[2]
    );
}
