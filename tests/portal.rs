//! Black-box tests of the dashboard's developer portal and delivery log: the built
//! binary with a config in a temporary directory, real HTTP, against a SQLite file and
//! against a real PostgreSQL server (its own database per test, through
//! `SLUICE_TEST_POSTGRES_URL`; an unreachable server fails the test).
//!
//! The delivery worker is off in these dashboards, so queued deliveries stay as the
//! ingestion left them; sending is the worker's own tests' business.

use crate::common;

use std::path::Path;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use common::dashboard::{assert_error, send, Db};
use sluice::store::{AfterAttempt, AttemptRecord, AttemptResult, Store};
use sluice::webhook::sign;

const ADMIN_KEY: &str = "portal-admin-key-0123456789";
const SECRET: &str = "a-test-secret-for-sealing";
const MAX_BODY: usize = 65_536;
/// The attempts a delivery gets, and a replay adds.
const MAX_ATTEMPTS: i64 = 4;
const SUB_SECRETS: [&str; 3] = [
    "subscriber-secret-aaaa-0001",
    "subscriber-secret-bbbb-0002",
    "subscriber-secret-cccc-0003",
];

/// A dashboard of its own for a portal test, with the admin key and a small body limit.
async fn start(dir: &Path, store: &str, extra: &str) -> Db {
    let extra = format!("admin:\n  key: {ADMIN_KEY}\nhttp:\n  max_body_bytes: {MAX_BODY}\n{extra}");
    Db::start(dir, store, &extra, ADMIN_KEY).await
}

/// [`start`] on a SQLite file in `dir`.
async fn start_on_sqlite(dir: &Path, extra: &str) -> Db {
    let store = format!("sqlite://{}", dir.join("portal.db").display());
    start(dir, &store, extra).await
}

/// An event for `product`, signed with `secret` at `t` (now when `None`).
fn event(
    db: &Db,
    product: &str,
    secret: &str,
    event: &str,
    body: &str,
    t: Option<i64>,
) -> reqwest::RequestBuilder {
    let t = t.unwrap_or_else(|| chrono::Utc::now().timestamp());
    db.http
        .post(db.url(&format!("/api/portal/products/{product}/events")))
        .header(
            "Sluice-Signature",
            sign::sign(secret.as_bytes(), t, body.as_bytes()),
        )
        .header("Sluice-Event", event)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
}

/// Sends `req`; the status, the JSON body (null when not JSON) and the raw text.
async fn send_raw(req: reqwest::RequestBuilder) -> (StatusCode, Value, String) {
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

/// Asserts a write answer and returns its `ID`.
fn assert_outcome(got: &(StatusCode, Value), status: u16) -> String {
    assert_eq!(got.0.as_u16(), status, "{}", got.1);
    assert_eq!(got.1["Status"], "OK", "{}", got.1);
    got.1["ID"].as_str().expect("ID").to_owned()
}

/// Asserts that no subscription secret appears in `text`.
fn assert_no_secrets(text: &str) {
    for secret in SUB_SECRETS {
        assert!(!text.contains(secret), "a secret leaked: {text}");
    }
    assert!(!text.contains("secret_sealed"), "{text}");
}

fn plain_api(id: &str) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": id, "version": "1.0"},
        "paths": {},
        "x-sluice-api-gateway": {
            "info": {"id": id, "name": id},
            "upstream": {"url": "http://127.0.0.1:9"},
            "server": {"listenPath": {"value": format!("/{id}/"), "strip": true}}
        }
    })
}

fn config() -> String {
    format!("secret: {SECRET}\nwebhooks:\n  enabled: false\n  max_attempts: {MAX_ATTEMPTS}\n")
}

async fn scenario(dir: &Path, store_url: &str) {
    let db = start(dir, store_url, &config()).await;

    // A second organisation, to check that nothing crosses over.
    let other = send(
        db.req(Method::POST, "/api/orgs")
            .json(&json!({"name": "other"})),
    )
    .await;
    assert_eq!(other.0, 201, "{}", other.1);
    let other_key = other.1["key"].as_str().unwrap().to_owned();
    assert_eq!(
        assert_outcome(
            &send(
                db.req(Method::POST, "/api/apis/oas")
                    .json(&plain_api("pets"))
            )
            .await,
            201
        ),
        "pets"
    );

    // --- Products: validation names the field.
    for (body, needle) in [
        (json!({}), "`name`"),
        (json!({"name": "  "}), "`name`"),
        (json!({"name": "P", "api_ids": ["nope"]}), "`api_ids[0]`"),
        (
            json!({"name": "P", "api_ids": ["pets", "pets"]}),
            "`api_ids[1]`",
        ),
        (
            json!({"name": "P", "webhooks": {"enabled": true, "events": ["a b"]}}),
            "`webhooks.events[0]`",
        ),
        (
            json!({"name": "P", "webhooks": {"enabled": true, "events": ["a", "a"]}}),
            "`webhooks.events[1]`",
        ),
        (
            json!({"name": "P", "publish_secret": "too-short"}),
            "`publish_secret`",
        ),
        (json!({"name": "P", "colour": "red"}), "colour"),
        // PostgreSQL text cannot hold NUL: refused as input, never a store failure.
        (json!({"name": "a\u{0}b"}), "`name`"),
        (json!({"name": "P", "api_ids": ["a\u{0}"]}), "`api_ids[0]`"),
    ] {
        assert_error(
            &send(db.req(Method::POST, "/api/portal/products").json(&body)).await,
            400,
            needle,
        );
    }
    // Another organisation's API is not one of the caller's.
    assert_error(
        &send(
            db.as_key(&other_key, Method::POST, "/api/portal/products")
                .json(&json!({"name": "P", "api_ids": ["pets"]})),
        )
        .await,
        400,
        "`api_ids[0]`",
    );

    let created = send(db.req(Method::POST, "/api/portal/products").json(&json!({
        "name": "Orders",
        "description": "Order events",
        "api_ids": ["pets"],
        "webhooks": {"enabled": true, "events": ["order.paid", "order.shipped"]}
    })))
    .await;
    let p1 = assert_outcome(&created, 201);
    let p1_secret = created.1["publish_secret"].as_str().unwrap().to_owned();
    assert!(p1_secret.len() >= 16, "{p1_secret}");
    let chosen_secret = "publish-secret-of-p2-0123";
    let p2 = assert_outcome(
        &send(db.req(Method::POST, "/api/portal/products").json(&json!({
            "name": "Closed",
            "webhooks": {"enabled": false, "events": ["x"]},
            "publish_secret": chosen_secret
        })))
        .await,
        201,
    );

    let got = send(db.req(Method::GET, &format!("/api/portal/products/{p1}"))).await;
    assert_eq!(got.0, 200, "{}", got.1);
    assert_eq!(got.1["name"], "Orders");
    assert_eq!(got.1["api_ids"], json!(["pets"]));
    assert_eq!(
        got.1["webhooks"],
        json!({"enabled": true, "events": ["order.paid", "order.shipped"]})
    );
    assert_eq!(got.1["publish_secret"], p1_secret.as_str());
    assert!(got.1["created_at"].as_str().unwrap().ends_with('Z'));
    let list = send(db.req(Method::GET, "/api/portal/products")).await;
    assert_eq!(list.1["products"].as_array().unwrap().len(), 2);
    assert_eq!(list.1["pages"], 1);

    // PUT replaces, and keeps the publish secret when none is sent.
    let put = send(
        db.req(Method::PUT, &format!("/api/portal/products/{p1}"))
            .json(&json!({
                "name": "Orders v2",
                "api_ids": ["pets"],
                "webhooks": {"enabled": true, "events": ["order.paid", "order.shipped", "order.refunded"]}
            })),
    )
    .await;
    assert_outcome(&put, 200);
    assert_eq!(put.1["publish_secret"], p1_secret.as_str());
    let got = send(db.req(Method::GET, &format!("/api/portal/products/{p1}"))).await;
    assert_eq!(got.1["name"], "Orders v2");
    assert_eq!(got.1["webhooks"]["events"].as_array().unwrap().len(), 3);
    // Then back to two events, so that one is not open.
    assert_outcome(
        &send(
            db.req(Method::PUT, &format!("/api/portal/products/{p1}"))
                .json(&json!({
                    "name": "Orders",
                    "api_ids": ["pets"],
                    "webhooks": {"enabled": true, "events": ["order.paid", "order.shipped"]}
                })),
        )
        .await,
        200,
    );

    // The other organisation sees none of it.
    let theirs = send(db.as_key(&other_key, Method::GET, "/api/portal/products")).await;
    assert_eq!(theirs.1["products"], json!([]));
    assert_eq!(theirs.1["pages"], 0);
    for method in [Method::GET, Method::DELETE] {
        assert_error(
            &send(db.as_key(&other_key, method, &format!("/api/portal/products/{p1}"))).await,
            404,
            "not found",
        );
    }
    assert_error(
        &send(
            db.as_key(
                &other_key,
                Method::PUT,
                &format!("/api/portal/products/{p1}"),
            )
            .json(&json!({"name": "hijack"})),
        )
        .await,
        404,
        "not found",
    );

    // --- Apps: validation names the field.
    let sub = |url: &str, secret: Option<&str>, events: &[&str]| {
        let mut s = json!({"url": url, "events": events});
        if let Some(secret) = secret {
            s["secret"] = json!(secret);
        }
        s
    };
    let s0 = SUB_SECRETS[0];
    for (body, needle) in [
        (json!({"name": "Shop"}), "product_id"),
        (
            json!({"name": "Shop", "product_id": "nope"}),
            "`product_id`",
        ),
        (
            json!({"name": "Shop", "product_id": p1, "webhooks": [sub("https://example.com/h", None, &["order.paid"])]}),
            "`webhooks[0].secret`",
        ),
        (
            json!({"name": "Shop", "product_id": p1, "webhooks": [sub("https://example.com/h", Some("short"), &["order.paid"])]}),
            "`webhooks[0].secret`",
        ),
        (
            json!({"name": "Shop", "product_id": p1, "webhooks": [sub("ftp://example.com/h", Some(s0), &["order.paid"])]}),
            "`webhooks[0].url`",
        ),
        (
            json!({"name": "Shop", "product_id": p1, "webhooks": [sub("https://example.com/h", Some(s0), &[])]}),
            "`webhooks[0].events`",
        ),
        (
            json!({"name": "Shop", "product_id": p1, "webhooks": [
                sub("https://example.com/h", Some(s0), &["order.paid"]),
                sub("https://example.com/h", Some(s0), &["order.paid", "order.refunded"])
            ]}),
            &format!("invalid field `webhooks[1].events[1]`: `order.refunded` is not an event product `{p1}` opens to subscription"),
        ),
        (
            json!({"name": "Shop", "product_id": p2, "webhooks": [sub("https://example.com/h", Some(s0), &["x"])]}),
            "`webhooks[0].events[0]`",
        ),
        (
            json!({"name": "Shop", "product_id": p1, "webhooks": [{"id": "made-up", "url": "https://example.com/h", "events": ["order.paid"]}]}),
            "`webhooks[0].id`",
        ),
    ] {
        assert_error(
            &send(db.req(Method::POST, "/api/portal/apps").json(&body)).await,
            400,
            needle,
        );
    }
    assert_error(
        &send(
            db.req(Method::POST, "/api/portal/apps")
                .json(&json!({"name": "Shop", "product_id": "p\u{0}"})),
        )
        .await,
        400,
        "`product_id`",
    );
    assert_error(
        &send(db.req(Method::GET, "/api/portal/products/p%00")).await,
        404,
        "no such path",
    );
    // Another organisation's product is not one of the caller's.
    assert_error(
        &send(
            db.as_key(&other_key, Method::POST, "/api/portal/apps")
                .json(&json!({"name": "Shop", "product_id": p1})),
        )
        .await,
        400,
        "`product_id`",
    );

    let created = send_raw(db.req(Method::POST, "/api/portal/apps").json(&json!({
        "name": "Shop",
        "developer": "dev@example.com",
        "product_id": p1,
        "webhooks": [
            sub("https://a.example.com/hook", Some(SUB_SECRETS[0]), &["order.paid"]),
            sub("https://b.example.com/hook", Some(SUB_SECRETS[1]), &["order.paid", "order.shipped"]),
            sub("https://c.example.com/hook", Some(SUB_SECRETS[2]), &["order.shipped"]),
        ]
    })))
    .await;
    assert_no_secrets(&created.2);
    let a1 = assert_outcome(&(created.0, created.1), 201);
    let got = send_raw(db.req(Method::GET, &format!("/api/portal/apps/{a1}"))).await;
    assert_eq!(got.0, 200, "{}", got.1);
    assert_no_secrets(&got.2);
    assert_eq!(got.1["product_id"], p1.as_str());
    assert_eq!(got.1["developer"], "dev@example.com");
    let subs = got.1["webhooks"].as_array().unwrap().clone();
    assert_eq!(subs.len(), 3);
    assert!(subs
        .iter()
        .all(|s| s["secret_set"] == true && s.get("secret").is_none()));
    let sub_ids: Vec<String> = subs
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    let listed = send_raw(db.req(Method::GET, "/api/portal/apps")).await;
    assert_no_secrets(&listed.2);
    assert_eq!(listed.1["apps"].as_array().unwrap().len(), 1);
    assert_eq!(listed.1["apps"][0]["webhooks"].as_array().unwrap().len(), 3);
    assert_eq!(
        send(db.as_key(&other_key, Method::GET, "/api/portal/apps"))
            .await
            .1["apps"],
        json!([])
    );
    assert_error(
        &send(db.as_key(&other_key, Method::GET, &format!("/api/portal/apps/{a1}"))).await,
        404,
        "not found",
    );

    // PUT keeps a subscription (and its secret) named by id without a secret, changes
    // another, and drops the third.
    let put = send_raw(
        db.req(Method::PUT, &format!("/api/portal/apps/{a1}"))
            .json(&json!({
                "name": "Shop",
                "developer": "dev@example.com",
                "product_id": p1,
                "webhooks": [
                    {"id": sub_ids[0], "url": "https://a.example.com/hook", "events": ["order.paid"]},
                    {"id": sub_ids[1], "url": "https://b.example.com/v2", "secret": SUB_SECRETS[1], "events": ["order.paid", "order.shipped"]},
                ]
            })),
    )
    .await;
    assert_no_secrets(&put.2);
    assert_outcome(&(put.0, put.1), 200);
    let got = send(db.req(Method::GET, &format!("/api/portal/apps/{a1}"))).await;
    let ids: Vec<&str> = got.1["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sub_ids[0].as_str(), sub_ids[1].as_str()]);
    assert_eq!(got.1["webhooks"][1]["url"], "https://b.example.com/v2");

    // --- Ingestion: the signature, the event, the idempotency key.
    let body = r#"{"order":"o-1","total":12.5}"#;
    let no_signature = db
        .http
        .post(db.url(&format!("/api/portal/products/{p1}/events")))
        .header("Sluice-Event", "order.paid")
        .body(body);
    assert_error(&send(no_signature).await, 401, "Sluice-Signature");
    let malformed = db
        .http
        .post(db.url(&format!("/api/portal/products/{p1}/events")))
        .header("Sluice-Signature", "v1=zz")
        .header("Sluice-Event", "order.paid")
        .body(body);
    assert_error(&send(malformed).await, 401, "Sluice-Signature");
    let stale = Some(chrono::Utc::now().timestamp() - 1000);
    assert_error(
        &send(event(&db, &p1, &p1_secret, "order.paid", body, stale)).await,
        401,
        "seconds from now",
    );
    assert_error(
        &send(event(
            &db,
            &p1,
            "not-the-publish-secret",
            "order.paid",
            body,
            None,
        ))
        .await,
        401,
        "does not match",
    );
    // The signature covers the body.
    let tampered =
        event(&db, &p1, &p1_secret, "order.paid", body, None).body(r#"{"order":"o-1","total":0}"#);
    assert_error(&send(tampered).await, 401, "does not match");
    let no_event = db
        .http
        .post(db.url(&format!("/api/portal/products/{p1}/events")))
        .header(
            "Sluice-Signature",
            sign::sign(
                p1_secret.as_bytes(),
                chrono::Utc::now().timestamp(),
                body.as_bytes(),
            ),
        )
        .body(body);
    assert_error(&send(no_event).await, 400, "Sluice-Event");
    assert_error(
        &send(event(&db, &p1, &p1_secret, "order.refunded", body, None)).await,
        400,
        &format!("`order.refunded` is not an event product `{p1}` opens to subscription"),
    );
    assert_error(
        &send(event(&db, &p2, chosen_secret, "x", body, None)).await,
        409,
        "disabled",
    );
    assert_error(
        &send(event(
            &db,
            "no-such-product",
            &p1_secret,
            "order.paid",
            body,
            None,
        ))
        .await,
        404,
        "not found",
    );
    assert_error(
        &send(
            event(&db, &p1, &p1_secret, "order.paid", body, None)
                .header("Idempotency-Key", "k".repeat(201)),
        )
        .await,
        400,
        "Idempotency-Key",
    );
    let huge = "x".repeat(MAX_BODY + 1);
    assert_eq!(
        send(event(&db, &p1, &p1_secret, "order.paid", &huge, None))
            .await
            .0,
        413
    );
    // Nothing was queued by any of that.
    let none = send(db.req(Method::GET, "/api/deliveries")).await;
    assert_eq!(none.1["deliveries"], json!([]), "{}", none.1);

    // Two subscriptions chose `order.paid`; sent twice with one key, it is queued once.
    for _ in 0..2 {
        let accepted = send(
            event(&db, &p1, &p1_secret, "order.paid", body, None)
                .header("Idempotency-Key", "evt-1"),
        )
        .await;
        assert_eq!(accepted.0, 202, "{}", accepted.1);
        assert_eq!(accepted.1, json!({"event_id": "evt-1", "deliveries": 2}));
    }
    let list = send(db.req(Method::GET, "/api/deliveries")).await;
    let deliveries = list.1["deliveries"].as_array().unwrap().clone();
    assert_eq!(deliveries.len(), 2, "{}", list.1);
    let mut sources: Vec<&str> = deliveries
        .iter()
        .map(|d| d["source"].as_str().unwrap())
        .collect();
    sources.sort();
    let mut expected = vec![
        format!("subscription:{}", sub_ids[0]),
        format!("subscription:{}", sub_ids[1]),
    ];
    expected.sort();
    assert_eq!(sources, expected);

    // One chose `order.shipped`; without a key the event gets one. A body that is not
    // JSON is delivered as a string.
    let accepted = send(event(
        &db,
        &p1,
        &p1_secret,
        "order.shipped",
        "plain text",
        None,
    ))
    .await;
    assert_eq!(accepted.0, 202, "{}", accepted.1);
    assert_eq!(accepted.1["deliveries"], 1);
    let generated = accepted.1["event_id"].as_str().unwrap().to_owned();
    assert_eq!(generated.len(), 36, "{generated}");

    // --- The delivery log.
    let all = send_raw(db.req(Method::GET, "/api/deliveries")).await;
    assert_no_secrets(&all.2);
    assert_error(
        &send(db.req(Method::GET, "/api/deliveries?p=-1")).await,
        400,
        "a page at a time",
    );
    assert_eq!(all.1["deliveries"].as_array().unwrap().len(), 3);
    let pending = send(db.req(Method::GET, "/api/deliveries?status=pending")).await;
    assert_eq!(pending.1["deliveries"].as_array().unwrap().len(), 3);
    assert_eq!(pending.1["pages"], 1);
    let dead = send(db.req(Method::GET, "/api/deliveries?status=dead")).await;
    assert_eq!(dead.1["deliveries"], json!([]));
    assert_error(
        &send(db.req(Method::GET, "/api/deliveries?status=lost")).await,
        400,
        "`status`",
    );
    assert_eq!(
        send(db.as_key(&other_key, Method::GET, "/api/deliveries"))
            .await
            .1["deliveries"],
        json!([])
    );

    let shipped = all.1["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["event"] == "order.shipped")
        .unwrap()
        .clone();
    assert_eq!(shipped["source"], format!("subscription:{}", sub_ids[1]));
    assert_eq!(shipped["url"], "https://b.example.com/v2");
    assert_eq!(shipped["method"], "POST");
    assert_eq!(shipped["status"], "pending");
    assert_eq!(shipped["attempts"], 0);
    assert_eq!(shipped["max_attempts"], MAX_ATTEMPTS);
    assert!(shipped["next_attempt_at"].is_string());
    let envelope: Value = serde_json::from_str(shipped["body"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["id"], generated.as_str());
    assert_eq!(envelope["event"], "order.shipped");
    assert_eq!(envelope["product_id"], p1.as_str());
    assert_eq!(envelope["data"], "plain text");
    assert!(envelope["created_at"].as_str().unwrap().ends_with('Z'));

    let paid_id = deliveries[0]["id"].as_str().unwrap().to_owned();
    let detail = send_raw(db.req(Method::GET, &format!("/api/deliveries/{paid_id}"))).await;
    assert_eq!(detail.0, 200, "{}", detail.1);
    assert_no_secrets(&detail.2);
    assert_eq!(detail.1["attempts"], json!([]));
    let envelope: Value =
        serde_json::from_str(detail.1["delivery"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["id"], "evt-1");
    assert_eq!(envelope["data"], json!({"order": "o-1", "total": 12.5}));
    assert_error(
        &send(db.as_key(
            &other_key,
            Method::GET,
            &format!("/api/deliveries/{paid_id}"),
        ))
        .await,
        404,
        "not found",
    );
    assert_error(
        &send(db.req(Method::GET, "/api/deliveries/nope")).await,
        404,
        "not found",
    );

    // --- Replay: only a dead delivery.
    assert_error(
        &send(db.req(Method::POST, &format!("/api/deliveries/{paid_id}/replay"))).await,
        409,
        "only a dead delivery",
    );
    assert_error(
        &send(db.req(Method::POST, "/api/deliveries/nope/replay")).await,
        404,
        "not found",
    );
    let store = Store::open(store_url).await.expect("open the store");
    let now_ms = chrono::Utc::now().timestamp_millis();
    store
        .record_attempts(
            &[AttemptResult {
                attempt: AttemptRecord {
                    delivery_id: paid_id.clone(),
                    attempt: 1,
                    at: now_ms,
                    status: Some(410),
                    error: Some("answered 410 Gone".into()),
                    latency_ms: 12,
                },
                then: AfterAttempt::Dead,
            }],
            now_ms,
        )
        .await
        .expect("record an attempt");
    store.close().await;
    let detail = send(db.req(Method::GET, &format!("/api/deliveries/{paid_id}"))).await;
    assert_eq!(detail.1["delivery"]["status"], "dead");
    assert!(detail.1["delivery"]["next_attempt_at"].is_null());
    assert_eq!(detail.1["delivery"]["last_status"], 410);
    assert_eq!(
        detail.1["attempts"][0]["error"], "answered 410 Gone",
        "{}",
        detail.1
    );
    assert_eq!(detail.1["attempts"][0]["latency_ms"], 12);
    assert_eq!(
        send(db.req(Method::GET, "/api/deliveries?status=dead"))
            .await
            .1["deliveries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_error(
        &send(db.as_key(
            &other_key,
            Method::POST,
            &format!("/api/deliveries/{paid_id}/replay"),
        ))
        .await,
        404,
        "not found",
    );
    assert_eq!(
        assert_outcome(
            &send(db.req(Method::POST, &format!("/api/deliveries/{paid_id}/replay"))).await,
            200
        ),
        paid_id
    );
    let detail = send(db.req(Method::GET, &format!("/api/deliveries/{paid_id}"))).await;
    assert_eq!(detail.1["delivery"]["status"], "pending");
    assert_eq!(detail.1["delivery"]["max_attempts"], 1 + MAX_ATTEMPTS);
    assert_error(
        &send(db.req(Method::POST, &format!("/api/deliveries/{paid_id}/replay"))).await,
        409,
        "pending",
    );

    // --- Deletes: an app, then a product with whatever apps it still has.
    assert_outcome(
        &send(db.req(Method::DELETE, &format!("/api/portal/apps/{a1}"))).await,
        200,
    );
    assert_error(
        &send(db.req(Method::GET, &format!("/api/portal/apps/{a1}"))).await,
        404,
        "not found",
    );
    let a2 = assert_outcome(
        &send(
            db.req(Method::POST, "/api/portal/apps")
                .json(&json!({"name": "Second", "product_id": p1})),
        )
        .await,
        201,
    );
    assert_outcome(
        &send(db.req(Method::DELETE, &format!("/api/portal/products/{p1}"))).await,
        200,
    );
    assert_error(
        &send(db.req(Method::GET, &format!("/api/portal/products/{p1}"))).await,
        404,
        "not found",
    );
    assert_error(
        &send(db.req(Method::GET, &format!("/api/portal/apps/{a2}"))).await,
        404,
        "not found",
    );
    // The log outlives the product.
    assert_eq!(
        send(db.req(Method::GET, "/api/deliveries")).await.1["deliveries"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    db.stop().await;
}

#[tokio::test]
async fn the_portal_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("portal.db").display());
    scenario(tmp.path(), &store).await;
}

#[tokio::test]
async fn the_portal_on_postgres() {
    common::postgres::with_postgres("sluice_portal", |url| async move {
        let tmp = tempfile::tempdir().unwrap();
        scenario(tmp.path(), &url).await;
    })
    .await;
}

#[tokio::test]
async fn without_a_secret_the_portal_refuses_what_it_would_seal() {
    let tmp = tempfile::tempdir().unwrap();
    let db = start_on_sqlite(tmp.path(), "webhooks:\n  enabled: false\n").await;
    assert_error(
        &send(
            db.req(Method::POST, "/api/portal/products")
                .json(&json!({"name": "P"})),
        )
        .await,
        409,
        "`secret`",
    );
    // Reading still works.
    assert_eq!(
        send(db.req(Method::GET, "/api/portal/products")).await.0,
        200
    );
    db.stop().await;
}

#[tokio::test]
async fn a_dashboard_with_its_delivery_worker_takes_events() {
    // The worker is on (the default); the receiver does not exist, so the delivery
    // stays queued or fails, but the event is accepted and logged either way.
    let tmp = tempfile::tempdir().unwrap();
    let db = start_on_sqlite(tmp.path(), &format!("secret: {SECRET}\n")).await;
    let (product, secret) = product_with_a_subscriber(&db).await;
    let accepted = send(event(&db, &product, &secret, "e", "{}", None)).await;
    assert_eq!(accepted.0, 202, "{}", accepted.1);
    assert_eq!(accepted.1["deliveries"], 1);
    let list = send(db.req(Method::GET, "/api/deliveries")).await;
    assert_eq!(list.1["deliveries"].as_array().unwrap().len(), 1);
    db.stop().await;
}

/// A product opening event `e`, and an app subscribed to it at a port nothing listens
/// on; the product's id and publish secret.
async fn product_with_a_subscriber(db: &Db) -> (String, String) {
    let created = send(db.req(Method::POST, "/api/portal/products").json(&json!({
        "name": "P", "webhooks": {"enabled": true, "events": ["e"]}
    })))
    .await;
    let product = assert_outcome(&created, 201);
    let secret = created.1["publish_secret"].as_str().unwrap().to_owned();
    assert_outcome(
        &send(db.req(Method::POST, "/api/portal/apps").json(&json!({
            "name": "A", "product_id": product,
            "webhooks": [{"url": "http://127.0.0.1:9/hook", "secret": SUB_SECRETS[0], "events": ["e"]}]
        })))
        .await,
        201,
    );
    (product, secret)
}

/// Publishes `n` events `e` to `product`, each accepted.
async fn publish_accepted(db: &Db, product: &str, secret: &str, n: usize) {
    for i in 0..n {
        let body = format!("{{\"n\":{i}}}");
        let accepted = send(event(db, product, secret, "e", &body, None)).await;
        assert_eq!(accepted.0, 202, "{}", accepted.1);
    }
}

#[tokio::test]
async fn an_organisation_may_have_only_so_many_deliveries_waiting() {
    // No worker: what is queued stays waiting.
    let tmp = tempfile::tempdir().unwrap();
    let extra =
        format!("secret: {SECRET}\nwebhooks:\n  enabled: false\n  max_pending_per_org: 2\n");
    let db = start_on_sqlite(tmp.path(), &extra).await;
    let (product, secret) = product_with_a_subscriber(&db).await;
    publish_accepted(&db, &product, &secret, 2).await;
    // The third is refused whole, with when to come back, and nothing is queued.
    let resp = event(&db, &product, &secret, "e", "{\"n\":2}", None)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "30");
    let refused: Value = resp.json().await.unwrap();
    assert!(
        refused["Message"]
            .as_str()
            .unwrap()
            .contains("webhooks.max_pending_per_org"),
        "{refused}"
    );
    let list = send(db.req(Method::GET, "/api/deliveries")).await;
    assert_eq!(
        list.1["deliveries"].as_array().unwrap().len(),
        2,
        "{}",
        list.1
    );
    db.stop().await;
}

#[tokio::test]
async fn a_subscriber_past_its_share_gets_dead_letters_not_the_whole_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let extra =
        format!("secret: {SECRET}\nwebhooks:\n  enabled: false\n  max_pending_per_receiver: 1\n");
    let db = start_on_sqlite(tmp.path(), &extra).await;
    let (product, secret) = product_with_a_subscriber(&db).await;
    publish_accepted(&db, &product, &secret, 2).await;
    // The second found its subscriber's share taken: recorded dead, with why, and
    // replayable; nothing else of the organisation's was held up.
    let dead = send(db.req(Method::GET, "/api/deliveries?status=dead")).await;
    let dead = dead.1["deliveries"].as_array().unwrap().clone();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let why = dead[0]["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("webhooks.max_pending_per_receiver"), "{why}");
    let pending = send(db.req(Method::GET, "/api/deliveries?status=pending")).await;
    assert_eq!(pending.1["deliveries"].as_array().unwrap().len(), 1);
    db.stop().await;
}

#[tokio::test]
async fn finished_deliveries_are_removed_after_the_retention() {
    // One attempt, at a port nothing listens on: the delivery is dead at once, then kept
    // for the retention, then gone with its attempts.
    let tmp = tempfile::tempdir().unwrap();
    let extra = format!("secret: {SECRET}\nwebhooks:\n  max_attempts: 1\n  retention: 2s\n");
    let db = start_on_sqlite(tmp.path(), &extra).await;
    let (product, secret) = product_with_a_subscriber(&db).await;
    let accepted = send(event(&db, &product, &secret, "e", "{}", None)).await;
    assert_eq!(accepted.0, 202, "{}", accepted.1);
    let list = send(db.req(Method::GET, "/api/deliveries")).await;
    let id = list.1["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let path = format!("/api/deliveries/{id}");
    let start = std::time::Instant::now();
    let mut seen_dead = false;
    loop {
        let got = send(db.req(Method::GET, &path)).await;
        match got.0.as_u16() {
            200 => seen_dead |= got.1["delivery"]["status"] == "dead",
            404 => break,
            other => panic!("{other}: {}", got.1),
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "still there: {}",
            got.1
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        seen_dead,
        "the delivery was removed before it was seen finished"
    );
    db.stop().await;
}

/// A streaming API whose stream reads a Kafka topic (a broker the catalogue must not
/// show) and serves it as Server-Sent Events.
const FEED: &str = "\
openapi: 3.0.3
info: {title: feed, version: '1'}
paths: {}
x-sluice-api-gateway:
  info: {id: feed, name: Feed}
  server: {listenPath: {value: /feed/, strip: true}}
x-sluice-streaming:
  streams:
    main:
      input:
        kafka: {addresses: ['kafka.internal:9092'], topics: [orders], consumer_group: g}
      output:
        http_server: {stream_path: /events, delivery: broadcast}
";

/// Publishing: the public catalogue shows published products only, with their APIs
/// and a broker-free AsyncAPI document of each streaming one; unpublishing hides both.
async fn catalogue_scenario(dir: &Path, store_url: &str) {
    let db = start(
        dir,
        store_url,
        &format!("{}streaming:\n  enabled: true\n", config()),
    )
    .await;
    let made = send(
        db.req(Method::POST, "/api/apis/streams")
            .header("content-type", "application/vnd.sluice.streams.oas")
            .body(FEED),
    )
    .await;
    assert_outcome(&made, 201);
    assert_outcome(
        &send(
            db.req(Method::POST, "/api/apis/oas")
                .json(&plain_api("pets")),
        )
        .await,
        201,
    );
    let product = |published: bool| {
        json!({
            "name": "Orders",
            "description": "Orders as they happen.",
            "api_ids": ["feed", "pets"],
            "webhooks": {"enabled": true, "events": ["order.created"]},
            "published": published,
            "key_approval": "manual",
        })
    };
    let id = assert_outcome(
        &send(
            db.req(Method::POST, "/api/portal/products")
                .json(&product(true)),
        )
        .await,
        201,
    );
    assert_outcome(
        &send(
            db.req(Method::POST, "/api/portal/products")
                .json(&json!({"name": "Draft", "api_ids": ["pets"]})),
        )
        .await,
        201,
    );
    let (_, shown) = send(db.req(Method::GET, &format!("/api/portal/products/{id}"))).await;
    assert_eq!(shown["published"], true, "{shown}");
    assert_eq!(shown["key_approval"], "manual", "{shown}");
    let org = shown["org_id"].as_str().unwrap().to_owned();
    let bad = send(
        db.req(Method::POST, "/api/portal/products")
            .json(&json!({"name": "X", "key_approval": "sometimes"})),
    )
    .await;
    assert_eq!(bad.0, 400, "{}", bad.1);

    // Anyone reads the catalogue: no key.
    let public = |path: &str| db.http.get(db.url(path));
    let (status, catalogue) = send(public(&format!("/portal/api/orgs/{org}/products"))).await;
    assert_eq!(status, 200, "{catalogue}");
    let products = catalogue["products"].as_array().unwrap();
    assert_eq!(products.len(), 1, "the draft is not shown: {catalogue}");
    let orders = &products[0];
    assert_eq!(orders["name"], "Orders");
    assert_eq!(orders["key_approval"], "manual");
    assert_eq!(orders["events"], json!(["order.created"]));
    assert!(orders.get("publish_secret").is_none(), "{orders}");
    let apis = orders["apis"].as_array().unwrap();
    assert_eq!(apis[0]["name"], "Feed");
    assert_eq!(apis[0]["listen_path"], "/feed/");
    assert_eq!(apis[0]["streaming"], true);
    assert!(apis[1]["asyncapi"].is_null(), "a plain API has none");
    let link = apis[0]["asyncapi"].as_str().unwrap().to_owned();
    let (status, doc) = send(public(&link)).await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(doc["channels"]["main.out-sse"]["address"], "/events");
    assert!(
        !doc.to_string().contains("kafka.internal"),
        "brokers stay private: {doc}"
    );
    for page in ["0", "-1"] {
        let path = format!("/portal/api/orgs/{org}/products?p={page}");
        assert_eq!(send(public(&path)).await.0, 400, "p={page}");
    }
    let (_, none) = send(public("/portal/api/orgs/nobody/products")).await;
    assert_eq!(none["products"], json!([]));
    let (status, _) = send(public(&link.replace("/feed/", "/pets/"))).await;
    assert_eq!(status, 404, "not a streaming API");

    // Unpublished: gone from the catalogue, and its document with it.
    assert_outcome(
        &send(
            db.req(Method::PUT, &format!("/api/portal/products/{id}"))
                .json(&product(false)),
        )
        .await,
        200,
    );
    let (_, catalogue) = send(public(&format!("/portal/api/orgs/{org}/products"))).await;
    assert_eq!(catalogue["products"], json!([]), "{catalogue}");
    assert_eq!(send(public(&link)).await.0, 404);
}

#[tokio::test]
async fn the_catalogue_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("catalogue.db").display());
    catalogue_scenario(tmp.path(), &store).await;
}

#[tokio::test]
async fn the_catalogue_on_postgres() {
    common::postgres::with_postgres("sluice_catalogue", |url| async move {
        let tmp = tempfile::tempdir().unwrap();
        catalogue_scenario(tmp.path(), &url).await;
    })
    .await;
}
