//! Organisations as mutually hostile tenants of one `sluice serve`: listen paths belong
//! to one organisation, gateway keys to theirs, and only the instance's administrator
//! makes organisations. Real processes: `sluice serve`, real upstreams, real HTTP.

use crate::common;

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use common::dashboard::{assert_error, send};
use common::receiver::Receiver;
use common::serve::{Serve, ADMIN_KEY};
use common::DEADLINE;
use sluice::store::{KeyRecord, StoredApi};

/// The webhook receivers of these tests listen on loopback.
const TENANT_ENV: &[(&str, &str)] = &[
    ("SLUICE_GW_STREAMING_EGRESS_ALLOW", "[127.0.0.1]"),
    ("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]"),
];

impl Serve {
    /// A new organisation made by the instance's admin: its admin key.
    async fn org(&self, name: &str) -> String {
        let made = send(
            self.api(ADMIN_KEY, Method::POST, "/api/orgs")
                .json(&json!({"name": name})),
        )
        .await;
        assert_eq!(made.0, 201, "{}", made.1);
        made.1["key"].as_str().unwrap().to_owned()
    }

    /// Waits until a gateway request to `path` with `key` is answered other than
    /// `while_status`; returns that answer.
    async fn until_not(&self, path: &str, key: Option<&str>, while_status: u16) -> StatusCode {
        let started = Instant::now();
        loop {
            let mut req = self.gateway(path);
            if let Some(key) = key {
                req = req.header("X-Api-Key", key);
            }
            let status = req.send().await.unwrap().status();
            if status != while_status {
                return status;
            }
            assert!(started.elapsed() < DEADLINE, "{path} stayed {while_status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A plain API proxying to `upstream`, guarded by gateway keys in `X-Api-Key`.
fn guarded(id: &str, listen: &str, upstream: &Receiver) -> Value {
    guarded_at(id, listen, &upstream.url(""))
}

fn guarded_at(id: &str, listen: &str, upstream: &str) -> Value {
    json!({
        "openapi": "3.0.3", "info": {"title": id, "version": "1"}, "paths": {},
        "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}}},
        "security": [{"key": []}],
        "x-sluice-api-gateway": {
            "info": {"id": id, "name": id},
            "upstream": {"url": upstream},
            "server": {"listenPath": {"value": listen, "strip": true}, "authentication": {"enabled": true}}
        }
    })
}

/// A plain API without authentication.
fn open_api(id: &str, listen: &str, upstream: &str) -> Value {
    json!({
        "openapi": "3.0.3", "info": {"title": id, "version": "1"}, "paths": {},
        "x-sluice-api-gateway": {
            "info": {"id": id, "name": id},
            "upstream": {"url": upstream},
            "server": {"listenPath": {"value": listen, "strip": true}}
        }
    })
}

fn streaming(id: &str, listen: &str) -> String {
    format!(
        "openapi: 3.0.3\ninfo: {{title: {id}, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: {id}, name: {id}}}\n  server:\n    listenPath: {{value: {listen}, strip: true}}\nx-sluice-streaming:\n  streams:\n    main:\n      input: {{http_server: {{path: /in}}}}\n      output: {{drop: {{}}}}\n"
    )
}

#[tokio::test]
async fn a_listen_path_at_above_or_below_another_organisations_is_refused() {
    let serve = Serve::start(TENANT_ENV).await;
    let (a, b) = (serve.org("a").await, serve.org("b").await);
    let upstream = Receiver::start(&[], 200).await;
    let created = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&guarded(
        "a-admin-api",
        "/a/",
        &upstream,
    )))
    .await;
    assert_eq!(created.0, 201, "{}", created.1);

    // Every way B could write a path over A's is a 409 that does not name A's API.
    let refused = |r: (StatusCode, Value), needle: &str| {
        assert_error(&r, 409, needle);
        assert!(!r.1.to_string().contains("a-admin-api"), "{}", r.1);
    };
    for (listen, needle) in [
        ("/a/admin/", "below a listen path of another organisation"),
        ("/a/admin/users", "below"),
        ("/A/admin", "below"),
        ("/a%2Fadmin", "below"),
        ("//a//admin/", "below"),
        ("/a", "already used"),
        ("/", "above a listen path of another organisation"),
    ] {
        let r = send(serve.api(&b, Method::POST, "/api/apis/oas").json(&open_api(
            "b-api",
            listen,
            "http://127.0.0.1:9",
        )))
        .await;
        refused(r, needle);
    }
    let r = send(
        serve
            .api(&b, Method::POST, "/api/apis/streams")
            .header("content-type", "application/vnd.sluice.streams.oas")
            .body(streaming("b-stream", "/a/stream/")),
    )
    .await;
    refused(r, "below");
    // A path of its own first, then moved under A's by a replace.
    let own = send(serve.api(&b, Method::POST, "/api/apis/oas").json(&open_api(
        "b-api",
        "/b/",
        "http://127.0.0.1:9",
    )))
    .await;
    assert_eq!(own.0, 201, "{}", own.1);
    let r = send(
        serve
            .api(&b, Method::PUT, "/api/apis/oas/b-api")
            .json(&open_api("b-api", "/a/admin/", "http://127.0.0.1:9")),
    )
    .await;
    refused(r, "below");
    let r = send(
        serve
            .api(&b, Method::POST, "/api/apis/streams?dry_run=true")
            .header("content-type", "application/vnd.sluice.streams.oas")
            .body(streaming("b-dry", "/a/x/")),
    )
    .await;
    refused(r, "below");

    // Within one organisation, nesting is the organisation's own choice.
    let nested = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&open_api(
        "a-nested",
        "/a/admin/",
        "http://127.0.0.1:9",
    )))
    .await;
    assert_eq!(nested.0, 201, "{}", nested.1);

    // A's clients reach A's upstream, with their credentials, and nobody else's.
    let made = send(
        serve
            .api(&a, Method::POST, "/api/gateway/keys")
            .json(&json!({"access_rights": {"a-admin-api": {}}})),
    )
    .await;
    let token = made.1["key"].as_str().unwrap().to_owned();
    assert_eq!(serve.until_not("/a/users", Some(&token), 404).await, 200);
    assert_eq!(upstream.received().len(), 1);
}

#[tokio::test]
async fn apis_stored_over_another_organisations_path_route_to_neither() {
    let serve = Serve::start(TENANT_ENV).await;
    let (a_up, b_up) = (
        Receiver::start(&[], 201).await,
        Receiver::start(&[], 202).await,
    );
    // As stored before the dashboard refused them (or by two dashboards at once).
    let store = serve.store().await;
    let put = |id: &str, org: &str, listen: &str, up: &Receiver| {
        let mut doc = open_api(id, listen, &up.url(""));
        doc["x-sluice-api-gateway"]["info"]["orgId"] = json!(org);
        StoredApi {
            id: id.into(),
            org_id: org.into(),
            document: doc.to_string(),
            updated_at: 1,
        }
    };
    for api in [
        put("a-outer", "org-a", "/x/", &a_up),
        put("b-inner", "org-b", "/x/admin/", &b_up),
        put("a-same", "org-a", "/y/", &a_up),
        put("b-same", "org-b", "/y/", &b_up),
        put("b-own", "org-b", "/z/", &b_up),
    ] {
        store.put_api(&api).await.unwrap();
    }
    assert_eq!(serve.until_not("/z/1", None, 404).await, 202);
    // A's own part still reaches A.
    assert_eq!(serve.until_not("/x/other", None, 404).await, 201);
    // The disputed parts reach neither organisation.
    for path in ["/x/admin/users", "/x/admin", "/y/1"] {
        let status = serve.gateway(path).send().await.unwrap().status();
        assert_eq!(status, 404, "{path}");
    }
    let paths = |r: &Receiver| {
        r.received()
            .iter()
            .map(|r| r.path.clone())
            .collect::<Vec<_>>()
    };
    assert!(paths(&b_up).iter().all(|p| p == "/1"), "{:?}", paths(&b_up));
    assert!(
        paths(&a_up).iter().all(|p| p == "/other"),
        "{:?}",
        paths(&a_up)
    );
}

#[tokio::test]
async fn a_key_opens_only_its_organisations_apis() {
    let serve = Serve::start(TENANT_ENV).await;
    let (a, b) = (serve.org("a").await, serve.org("b").await);
    let (a_up, b_up) = (
        Receiver::start(&[], 201).await,
        Receiver::start(&[], 202).await,
    );
    let created = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&guarded(
        "orders",
        "/a-orders/",
        &a_up,
    )))
    .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let made = send(
        serve
            .api(&a, Method::POST, "/api/gateway/keys")
            .json(&json!({"access_rights": {"orders": {}}})),
    )
    .await;
    assert_eq!(made.0, 201, "{}", made.1);
    let (token, key_id) = (
        made.1["key"].as_str().unwrap().to_owned(),
        made.1["key_id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(serve.until_not("/a-orders/1", Some(&token), 404).await, 201);

    // A deletes its API: the key no longer names it.
    let deleted = send(serve.api(&a, Method::DELETE, "/api/apis/oas/orders")).await;
    assert_eq!(deleted.0, 200, "{}", deleted.1);
    let keys = send(serve.api(&a, Method::GET, "/api/gateway/keys")).await;
    let key = keys.1["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key_id"] == key_id.as_str())
        .expect("the key is still there");
    assert!(key["access_rights"].get("orders").is_none(), "{key}");

    // B makes an API with the same id.
    let created = send(serve.api(&b, Method::POST, "/api/apis/oas").json(&guarded(
        "orders",
        "/b-orders/",
        &b_up,
    )))
    .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let b_key = send(
        serve
            .api(&b, Method::POST, "/api/gateway/keys")
            .json(&json!({"access_rights": {"orders": {}}})),
    )
    .await;
    let b_token = b_key.1["key"].as_str().unwrap().to_owned();
    assert_eq!(
        serve.until_not("/b-orders/1", Some(&b_token), 404).await,
        202
    );
    // A's key is refused there, and so is a key of A that still names `orders`, as
    // keys made before deletions cleaned them up do.
    let stale_token = "a-stale-token-that-names-orders-0123456789";
    let a_org = serve
        .store()
        .await
        .key(&key_id)
        .await
        .unwrap()
        .unwrap()
        .org_id;
    serve
        .store()
        .await
        .insert_key(&KeyRecord {
            id: "stale".into(),
            hash: sluice::gateway::keys::hash_token(stale_token),
            org_id: a_org,
            policy: json!({"access_rights": {"orders": {}}}).to_string(),
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();
    for key in [token.as_str(), stale_token] {
        let status = serve
            .gateway("/b-orders/1")
            .header("X-Api-Key", key)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 403, "{key}");
    }
    assert_eq!(b_up.received().len(), 1, "only B's own key got through");
}

#[tokio::test]
async fn only_the_instance_admin_creates_organisations() {
    let serve = Serve::start(TENANT_ENV).await;
    let a = serve.org("a").await;
    let r = send(
        serve
            .api(&a, Method::POST, "/api/orgs")
            .json(&json!({"name": "made-by-a"})),
    )
    .await;
    assert_error(&r, 403, "instance");
    // The instance's admin still can.
    serve.org("c").await;
}

/// An API without upstream credentials whose requests without a key are auth failures,
/// firing `handler` on them.
fn with_handler(id: &str, listen: &str, handler: Value) -> Value {
    let mut doc = guarded_at(id, listen, "http://127.0.0.1:9");
    doc["x-sluice-api-gateway"]["server"]["eventHandlers"] = json!([handler]);
    doc
}

/// Waits until the organisation of `key` has a delivery whose status is not pending.
async fn settled_delivery(serve: &Serve, key: &str) -> Value {
    let started = Instant::now();
    loop {
        let list = send(serve.api(key, Method::GET, "/api/deliveries")).await;
        if let Some(d) = list.1["deliveries"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["status"] != "pending"))
        {
            return d.clone();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no delivery settled: {}",
            list.1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn webhook_secrets_are_sealed_at_rest_and_still_sent() {
    let serve = Serve::start(TENANT_ENV).await;
    let a = serve.org("a").await;
    let receiver = Receiver::start(&[], 200).await;
    let target = format!("http://hookuser:s3cr3t-pass@{}/hook", receiver.addr);
    // A template path out of the templates directory is refused when written.
    for bad in ["../../etc/passwd", "/etc/passwd"] {
        let r = send(serve.api(&a, Method::POST, "/api/hooks").json(&json!({
            "method": "POST", "target_path": target, "template_path": bad
        })))
        .await;
        assert_error(&r, 400, "template_path");
    }
    let made = send(serve.api(&a, Method::POST, "/api/hooks").json(&json!({
        "webhook_id": "alerts", "method": "POST", "target_path": target,
        "header_map": {"X-Token": "hunter2-header-secret"}
    })))
    .await;
    assert_eq!(made.0, 201, "{}", made.1);
    // The organisation reads them back as written.
    let read = send(serve.api(&a, Method::GET, "/api/hooks/alerts")).await;
    assert_eq!(read.1["target_path"], target.as_str(), "{}", read.1);
    assert_eq!(read.1["header_map"]["X-Token"], "hunter2-header-secret");

    let api = with_handler(
        "hooked",
        "/hooked/",
        json!({"events": ["auth_failure"], "webhook": "alerts"}),
    );
    let created = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&api)).await;
    assert_eq!(created.0, 201, "{}", created.1);
    assert_eq!(serve.until_not("/hooked/x", None, 404).await, 401);
    let got = receiver.wait_for(1, DEADLINE).await;
    assert_eq!(got[0].header("x-token"), Some("hunter2-header-secret"));
    assert_eq!(
        got[0].header("authorization"),
        Some("Basic aG9va3VzZXI6czNjcjN0LXBhc3M=")
    );
    assert_eq!(settled_delivery(&serve, &a).await["status"], "delivered");

    // Neither secret is anywhere in the store's files.
    let data = serve.dir.join("data");
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for secret in ["hunter2-header-secret", "s3cr3t-pass"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} is in {}",
                path.display()
            );
        }
    }
}

#[tokio::test]
async fn a_template_that_could_grow_is_refused_and_one_over_its_size_fails_with_why() {
    let serve = Serve::start(TENANT_ENV).await;
    let (a, b) = (serve.org("a").await, serve.org("b").await);
    let receiver = Receiver::start(&[], 200).await;
    // Each line doubles the string: 40 of them would ask for a terabyte in 40 steps.
    let doubling = format!(
        "{{% set s = message %}}{}{{{{ s }}}}",
        "{% set s = s ~ s %}".repeat(40)
    );
    let api = with_handler(
        "grow",
        "/grow/",
        json!({"events": ["auth_failure"], "targetPath": receiver.url("/hook"), "template": doubling}),
    );
    let refused = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&api)).await;
    assert_eq!(refused.0, 422, "{}", refused.1);
    let text = refused.1.to_string();
    assert!(text.contains("`set` is not allowed"), "{text}");
    assert!(text.contains("line 1, column 4"), "{text}");

    // Within the rules, the body is still capped: the request's path 20 times.
    let api = with_handler(
        "big",
        "/big/",
        json!({"events": ["auth_failure"], "targetPath": receiver.url("/hook"), "template": "{{ path }}".repeat(20)}),
    );
    let created = send(serve.api(&b, Method::POST, "/api/apis/oas").json(&api)).await;
    assert_eq!(created.0, 201, "{}", created.1);
    let long = format!("/big/{}", "p".repeat(4000));
    assert_eq!(serve.until_not(&long, None, 404).await, 401);
    let big = settled_delivery(&serve, &b).await;
    assert_eq!(big["status"], "dead", "{big}");
    let why = big["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("larger than 65536 bytes"), "{big}");
    assert!(receiver.received().is_empty());
}
