//! Black-box tests of `sluice dashboard`: the built binary with a config in a temporary
//! directory, real HTTP. Every endpoint and its error cases run against a SQLite file and
//! against a real PostgreSQL server; then persistence across a restart, organisation
//! isolation, the first start's admin key, and a gateway on the same store serving an
//! API created through the dashboard.
//!
//! PostgreSQL is reached through `SLUICE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); each test creates its own database through
//! it and drops it at the end. When the server cannot be reached the tests fail: they do
//! not skip.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::process::Command;

use common::dashboard::{assert_error, send, wait_up, Db};
use common::{free_port, DEADLINE};

const ADMIN_KEY: &str = "test-admin-key-0123456789";
const SECRET: &str = "a-test-secret-for-sealing";
const STREAMS: &str = "application/vnd.sluice.streams.oas";

/// Asserts the spec's write answer and returns its `ID`.
fn assert_outcome(got: &(StatusCode, Value), status: u16) -> String {
    assert_eq!(got.0.as_u16(), status, "{}", got.1);
    assert_eq!(got.1["Status"], "OK", "{}", got.1);
    assert!(got.1["Message"].is_string(), "{}", got.1);
    assert!(got.1.get("Meta").is_some(), "{}", got.1);
    got.1["ID"].as_str().expect("ID").to_owned()
}

fn config(page_size: u32) -> String {
    format!(
        "streaming:\n  enabled: true\npagination:\n  page_size: {page_size}\nsecret: {SECRET}\nadmin:\n  key: {ADMIN_KEY}\n"
    )
}

fn template() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Template", "version": "1.0"},
        "paths": {"/pets": {"get": {"operationId": "listPets", "responses": {"200": {"description": "pets"}}}}},
        "x-sluice-api-gateway": {
            "middleware": {
                "global": {"cache": {"enabled": true, "cacheAllSafeRequests": true, "timeout": 60}},
                "operations": {"listPets": {"requestSizeLimit": {"enabled": true, "value": 1024}}}
            }
        }
    })
}

fn plain_api(id: &str, listen: &str) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": id, "version": "1.0"},
        "paths": {},
        "x-sluice-api-gateway": {
            "info": {"id": id, "name": id},
            "upstream": {"url": "http://127.0.0.1:9"},
            "server": {"listenPath": {"value": listen, "strip": true}}
        }
    })
}

fn streaming_yaml(id: Option<&str>, listen: &str) -> String {
    let info = id
        .map(|id| format!("    info:\n      id: {id}\n      name: {id}\n"))
        .unwrap_or_default();
    format!(
        r#"openapi: 3.0.3
info:
  title: Events
  version: "1.0"
paths: {{}}
x-sluice-api-gateway:
{info}    upstream:
      url: http://127.0.0.1:9
    server:
      listenPath:
        value: {listen}
        strip: true
x-sluice-streaming:
  streams:
    events:
      input:
        http_server:
          path: /in
          allowed_verbs: [POST]
      output:
        http_server:
          path: /out
"#
    )
}

fn self_signed(names: &[&str]) -> rcgen::CertifiedKey {
    rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("certificate")
}

/// Every endpoint and its errors, against the store at `store`.
async fn scenario(dir: PathBuf, store: String) {
    let db = Db::start(&dir, &store, &config(2), ADMIN_KEY).await;

    // --- Auth, routing and the error shape.
    assert_error(
        &send(db.http.get(db.url("/api/assets"))).await,
        401,
        "missing credentials",
    );
    assert_error(
        &send(db.as_key("wrong-key-wrong-key", Method::GET, "/api/assets")).await,
        401,
        "invalid credentials",
    );
    let bare = db
        .http
        .get(db.url("/api/assets"))
        .header("Authorization", ADMIN_KEY);
    assert_eq!(send(bare).await.0, 200);
    assert_error(
        &send(db.req(Method::GET, "/api/nothing")).await,
        404,
        "no such path",
    );
    let wrong = db.req(Method::PATCH, "/api/assets/x").send().await.unwrap();
    assert_eq!(wrong.status(), 405);
    let allow = wrong.headers()["allow"].to_str().unwrap().to_owned();
    assert!(
        allow.contains("GET") && allow.contains("PUT") && allow.contains("DELETE"),
        "{allow}"
    );
    let doc = send(db.http.get(db.url("/api/openapi.json"))).await;
    assert_eq!(doc.0, 200);
    assert!(doc.1["paths"]["/api/assets/{assetID}"]["put"].is_object());

    // --- Assets.
    let created = send(db.req(Method::POST, "/api/assets").json(&json!({
        "id": "tpl-1", "name": "Petstore template", "description": "d", "kind": "oas-template", "data": template()
    })))
    .await;
    assert_eq!(assert_outcome(&created, 201), "tpl-1");
    let db_id = created.1["Meta"].as_str().unwrap().to_owned();
    assert_error(
        &send(
            db.req(Method::POST, "/api/assets")
                .json(&json!({"id": "tpl-1", "kind": "oas-template", "data": template()})),
        )
        .await,
        409,
        "already exists",
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/assets")
                .json(&json!({"kind": "zip", "data": {}})),
        )
        .await,
        400,
        "`kind`",
    );
    let mut bad = template();
    bad["info"]["title"] = json!(7);
    assert_error(
        &send(
            db.req(Method::POST, "/api/assets")
                .json(&json!({"kind": "oas-template", "data": bad})),
        )
        .await,
        400,
        "`data.info.title`",
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/assets")
                .json(&json!({"kind": "oas-template", "data": template(), "colour": 1})),
        )
        .await,
        400,
        "colour",
    );
    assert_error(
        &send(
            db.req(Method::PUT, "/api/assets/tpl-1")
                .json(&json!({"name": 5})),
        )
        .await,
        400,
        "`name`",
    );
    assert_error(
        &send(
            db.req(Method::PUT, "/api/assets/tpl-1")
                .header("content-type", "application/json")
                .body("{"),
        )
        .await,
        400,
        "not valid",
    );
    assert_error(
        &send(
            db.req(Method::PUT, "/api/assets/tpl-1")
                .header("content-type", "text/csv")
                .body("a,b"),
        )
        .await,
        415,
        "JSON",
    );
    assert_error(
        &send(
            db.req(Method::PUT, "/api/assets/tpl-1")
                .json(&json!({"blob": "x".repeat(3 * 1024 * 1024)})),
        )
        .await,
        413,
        "larger",
    );
    let updated = send(
        db.req(Method::PUT, "/api/assets/tpl-1")
            .json(&json!({"name": "Renamed", "description": "new"})),
    )
    .await;
    assert_eq!(assert_outcome(&updated, 200), "tpl-1");
    assert_eq!(updated.1["Meta"], db_id.as_str());
    let by_db_id = send(db.req(Method::GET, &format!("/api/assets/{db_id}"))).await;
    assert_eq!(by_db_id.0, 200);
    assert_eq!(by_db_id.1["name"], "Renamed");
    assert_eq!(by_db_id.1["id"], "tpl-1");
    assert_eq!(
        by_db_id.1["data"]["x-sluice-api-gateway"]["middleware"]["global"]["cache"]["timeout"],
        60
    );
    assert_error(
        &send(
            db.req(Method::PUT, "/api/assets/missing")
                .json(&json!({"name": "x"})),
        )
        .await,
        404,
        "not found",
    );
    for i in 0..2 {
        let r =
            send(db.req(Method::POST, "/api/assets").json(
                &json!({"kind": "oas-template", "data": template(), "name": format!("a{i}")}),
            ))
            .await;
        assert_outcome(&r, 201);
    }
    let page = send(db.req(Method::GET, "/api/assets?p=2")).await;
    assert_eq!(page.1["pages"], 2, "{}", page.1);
    assert_eq!(page.1["assets"].as_array().unwrap().len(), 1);
    let all = send(db.req(Method::GET, "/api/assets?p=-1&kind=oas-template")).await;
    assert_eq!(all.1["assets"].as_array().unwrap().len(), 3);
    let none = send(db.req(Method::GET, "/api/assets?kind=other")).await;
    assert_eq!(none.1["assets"].as_array().unwrap().len(), 0);
    assert_error(
        &send(db.req(Method::GET, "/api/assets?p=two")).await,
        400,
        "`p`",
    );

    // --- Certificates.
    let empty = send(db.req(Method::GET, "/api/certs")).await;
    assert_eq!(empty.1, json!({"cert_basics": null, "pages": 0}));
    let leaf = self_signed(&["api.example.com", "*.example.org"]);
    let with_key = format!("{}{}", leaf.cert.pem(), leaf.key_pair.serialize_pem());
    let added = send(
        db.req(Method::POST, "/api/certs")
            .header("content-type", "text/plain")
            .body(with_key.clone()),
    )
    .await;
    let cert_id = assert_outcome(&added, 201);
    assert_eq!(cert_id.len(), 64);
    assert_error(
        &send(db.req(Method::POST, "/api/certs").body(with_key.clone())).await,
        409,
        "already exists",
    );
    // As a multipart file field.
    let other = self_signed(&["other.example"]);
    let form = format!(
        "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"other.pem\"\r\nContent-Type: application/x-pem-file\r\n\r\n{}\r\n--b0undary--\r\n",
        other.cert.pem()
    );
    let multipart = send(
        db.req(Method::POST, "/api/certs")
            .header("content-type", "multipart/form-data; boundary=b0undary")
            .body(form),
    )
    .await;
    let other_id = assert_outcome(&multipart, 201);
    assert_error(
        &send(db.req(Method::POST, "/api/certs").body("not pem")).await,
        400,
        "no certificate",
    );
    let mismatched = format!("{}{}", other.cert.pem(), leaf.key_pair.serialize_pem());
    assert_error(
        &send(db.req(Method::POST, "/api/certs").body(mismatched)).await,
        400,
        "does not belong",
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/certs")
                .json(&json!({"pem": "x"})),
        )
        .await,
        415,
        "PEM",
    );
    let third = self_signed(&["third.example"]);
    assert_outcome(
        &send(db.req(Method::POST, "/api/certs").body(third.cert.pem())).await,
        201,
    );

    let list = send(db.req(Method::GET, "/api/certs")).await;
    assert_eq!(list.0, 200);
    assert_eq!(list.1["pages"], 2);
    let all = send(db.req(Method::GET, "/api/certs?p=-1")).await;
    assert_eq!(all.1["cert_basics"].as_array().unwrap().len(), 3);
    let first = all.1["cert_basics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == cert_id.as_str())
        .expect("the certificate with its key")
        .clone();
    assert_eq!(
        first["dns_names"],
        json!(["api.example.com", "*.example.org"])
    );
    assert_eq!(first["has_private"], true);
    assert_eq!(first["is_ca"], false);
    for field in ["issuer_cn", "subject_cn", "not_before", "not_after"] {
        assert!(first[field].is_string(), "{field}: {first}");
    }
    assert!(first["not_after"].as_str().unwrap().ends_with('Z'));
    assert_eq!(list.1["cert_basics"].as_array().unwrap().len(), 2);
    let past = send(db.req(Method::GET, "/api/certs?p=9")).await;
    assert_eq!(past.1["cert_basics"], Value::Null);
    let detailed = send(db.req(Method::GET, "/api/certs?mode=detailed&filter=with_pk&p=-1")).await;
    let certs = detailed.1["cert_basics"].as_array().unwrap();
    assert_eq!(certs.len(), 1, "{}", detailed.1);
    assert_eq!(certs[0]["id"], cert_id.as_str());
    assert_eq!(certs[0]["details"]["key_type"], "EC");
    assert!(certs[0]["details"]["serial"].is_string());
    let without = send(db.req(
        Method::GET,
        "/api/certs?mode=detailed&filter=without_pk&p=-1",
    ))
    .await;
    assert_eq!(without.1["cert_basics"].as_array().unwrap().len(), 2);
    assert_error(
        &send(db.req(Method::GET, "/api/certs?filter=with_pk")).await,
        400,
        "`filter`",
    );
    assert_error(
        &send(db.req(Method::GET, "/api/certs?mode=full")).await,
        400,
        "`mode`",
    );
    assert_error(
        &send(db.req(Method::GET, "/api/certs?mode=detailed&filter=x")).await,
        400,
        "`filter`",
    );
    let one = send(db.req(Method::GET, &format!("/api/certs/{cert_id}"))).await;
    assert_eq!(one.0, 200);
    let text = one.1.to_string();
    assert!(
        text.contains("BEGIN CERTIFICATE") && !text.contains("PRIVATE"),
        "{text}"
    );
    assert_outcome(
        &send(db.req(Method::DELETE, &format!("/api/certs/{other_id}"))).await,
        200,
    );
    assert_error(
        &send(db.req(Method::GET, &format!("/api/certs/{other_id}"))).await,
        404,
        "not found",
    );

    // --- Webhooks.
    assert_error(
        &send(
            db.req(Method::POST, "/api/hooks")
                .json(&json!({"target_path": "https://h.example/x"})),
        )
        .await,
        400,
        "`method`",
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/hooks")
                .json(&json!({"method": "BREW", "target_path": "https://h.example/x"})),
        )
        .await,
        400,
        "`method`",
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/hooks")
                .json(&json!({"method": "POST", "target_path": "/relative"})),
        )
        .await,
        400,
        "`target_path`",
    );
    let hook = send(db.req(Method::POST, "/api/hooks").json(&json!({
        "method": "post", "target_path": "https://hooks.example/in", "name": "Alerts",
        "webhook_id": "alerts", "event_timeout": 30, "header_map": null, "template_path": ""
    })))
    .await;
    assert_eq!(assert_outcome(&hook, 201), "alerts");
    let hook_db_id = hook.1["Meta"].as_str().unwrap().to_owned();
    let got = send(db.req(Method::GET, "/api/hooks/alerts")).await;
    assert_eq!(got.0, 200);
    assert_eq!(got.1["method"], "POST");
    assert_eq!(got.1["header_map"], Value::Null);
    assert_eq!(got.1["id"], hook_db_id.as_str());
    assert_eq!(got.1["webhook_id"], "alerts");
    assert_eq!(got.1["event_timeout"], 30);
    assert!(got.1["org_id"].is_string());
    let put = send(
        db.req(Method::PUT, &format!("/api/hooks/{hook_db_id}"))
            .json(&json!({
                "method": "PUT", "target_path": "http://hooks.example/v2", "webhook_id": "alerts",
                "header_map": {"X-Token": "t"}
            })),
    )
    .await;
    assert_outcome(&put, 200);
    let got = send(db.req(Method::GET, "/api/hooks/alerts")).await;
    assert_eq!(got.1["header_map"], json!({"X-Token": "t"}));
    assert_eq!(got.1["target_path"], "http://hooks.example/v2");
    assert_error(
        &send(db.req(Method::POST, "/api/hooks").json(
            &json!({"method": "GET", "target_path": "http://x.example", "webhook_id": "alerts"}),
        ))
        .await,
        409,
        "already exists",
    );
    let hooks = send(db.req(Method::GET, "/api/hooks")).await;
    assert_eq!(hooks.1["hooks"].as_array().unwrap().len(), 1);

    // --- APIs: streaming.
    let streams = |body: String| {
        db.http
            .post(db.url("/api/apis/streams"))
            .header("Authorization", ADMIN_KEY)
            .header("content-type", STREAMS)
            .body(body)
    };
    assert_error(
        &send(db.req(Method::POST, "/api/apis/streams").json(&json!({}))).await,
        415,
        STREAMS,
    );
    let dry = send(
        db.http
            .post(db.url("/api/apis/streams?dry_run=true"))
            .header("Authorization", ADMIN_KEY)
            .header("content-type", STREAMS)
            .body(streaming_yaml(Some("events"), "/events/")),
    )
    .await;
    assert_eq!(assert_outcome(&dry, 200), "events");
    assert_error(
        &send(db.req(Method::GET, "/api/apis/streams/events")).await,
        404,
        "not found",
    );
    let generated = send(streams(streaming_yaml(None, "/gen/"))).await;
    let gen_id = assert_outcome(&generated, 201);
    assert_eq!(gen_id.len(), 32);
    let made = send(streams(streaming_yaml(Some("events"), "/events/"))).await;
    assert_eq!(assert_outcome(&made, 201), "events");
    assert_error(
        &send(streams(streaming_yaml(Some("events"), "/other/"))).await,
        409,
        "already exists",
    );
    assert_error(
        &send(streams(streaming_yaml(Some("events2"), "/events"))).await,
        409,
        "listen path",
    );
    let broken =
        streaming_yaml(Some("broken"), "/broken/").replace("http://127.0.0.1:9", "ftp://x");
    let invalid = send(streams(broken)).await;
    assert_error(&invalid, 422, "upstream");
    assert!(
        invalid.1["Errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"].as_str().unwrap().ends_with("upstream.url")),
        "{}",
        invalid.1
    );
    assert_error(
        &send(streams("openapi: [".into())).await,
        400,
        "JSON or YAML",
    );
    let stored = send(db.req(Method::GET, "/api/apis/streams/events")).await;
    assert_eq!(stored.0, 200);
    assert!(stored.1["x-sluice-streaming"]["streams"]["events"].is_object());
    assert!(stored.1["x-sluice-api-gateway"]["info"]["orgId"].is_string());
    let listed = send(db.req(Method::GET, "/api/apis/streams?p=-1")).await;
    assert_eq!(
        listed.1["apis"].as_array().unwrap().len(),
        2,
        "{}",
        listed.1
    );
    let replaced = send(
        db.http
            .put(db.url("/api/apis/streams/events"))
            .header("Authorization", ADMIN_KEY)
            .header("content-type", STREAMS)
            .body(streaming_yaml(None, "/events-v2/")),
    )
    .await;
    assert_outcome(&replaced, 200);
    let stored = send(db.req(Method::GET, "/api/apis/streams/events")).await;
    assert_eq!(
        stored.1["x-sluice-api-gateway"]["server"]["listenPath"]["value"],
        "/events-v2/"
    );
    assert_outcome(
        &send(db.req(Method::DELETE, &format!("/api/apis/streams/{gen_id}"))).await,
        200,
    );
    assert_error(
        &send(db.req(Method::DELETE, &format!("/api/apis/streams/{gen_id}"))).await,
        404,
        "not found",
    );

    // --- APIs: plain, and from a template.
    let plain = send(
        db.req(Method::POST, "/api/apis/oas")
            .json(&plain_api("pets", "/pets/")),
    )
    .await;
    assert_eq!(assert_outcome(&plain, 201), "pets");
    assert_error(
        &send(db.req(Method::GET, "/api/apis/streams/pets")).await,
        404,
        "not found",
    );
    let mut with_streams = plain_api("mixed", "/mixed/");
    with_streams["x-sluice-streaming"] = json!({"streams": {"a": {}}});
    assert_error(
        &send(db.req(Method::POST, "/api/apis/oas").json(&with_streams)).await,
        422,
        "streams",
    );
    let mut from_template = plain_api("from-tpl", "/from-tpl/");
    from_template["paths"] = json!({});
    from_template.as_object_mut().unwrap().remove("info");
    let templated = send(
        db.req(Method::POST, "/api/apis/oas?templateID=tpl-1")
            .json(&from_template),
    )
    .await;
    assert_outcome(&templated, 201);
    let got = send(db.req(Method::GET, "/api/apis/oas/from-tpl")).await;
    assert_eq!(got.1["info"]["title"], "Template");
    assert_eq!(
        got.1["x-sluice-api-gateway"]["middleware"]["global"]["cache"]["enabled"],
        true
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/apis/oas?templateID=nope")
                .json(&plain_api("x", "/x/")),
        )
        .await,
        400,
        "templateID",
    );
    let yaml = send(db.req(Method::PUT, "/api/apis/oas/pets").header("content-type", "application/yaml").body(
        "openapi: 3.0.3\ninfo: {title: pets, version: '2'}\npaths: {}\nx-sluice-api-gateway:\n  upstream: {url: 'http://127.0.0.1:9'}\n  server: {listenPath: {value: /pets/}}\n",
    ))
    .await;
    assert_outcome(&yaml, 200);
    assert_error(
        &send(
            db.req(Method::PUT, "/api/apis/oas/pets")
                .json(&plain_api("other", "/pets/")),
        )
        .await,
        400,
        "info.id",
    );

    // --- Organisations, users, keys and isolation.
    let org = send(
        db.req(Method::POST, "/api/orgs")
            .json(&json!({"name": "Globex"})),
    )
    .await;
    assert_outcome(&org, 201);
    let other_key = org.1["key"].as_str().unwrap().to_owned();
    let other_org = org.1["ID"].as_str().unwrap().to_owned();
    for path in [
        "/api/assets/tpl-1",
        "/api/hooks/alerts",
        &format!("/api/certs/{cert_id}"),
        "/api/apis/streams/events",
        "/api/apis/oas/pets",
    ] {
        assert_error(
            &send(db.as_key(&other_key, Method::GET, path)).await,
            404,
            "not found",
        );
        assert_error(
            &send(db.as_key(&other_key, Method::DELETE, path)).await,
            404,
            "not found",
        );
    }
    assert_error(
        &send(
            db.as_key(&other_key, Method::PUT, "/api/assets/tpl-1")
                .json(&json!({"name": "x"})),
        )
        .await,
        404,
        "not found",
    );
    let theirs = send(db.as_key(&other_key, Method::GET, "/api/certs")).await;
    assert_eq!(theirs.1["cert_basics"], Value::Null);
    assert_eq!(
        send(db.as_key(&other_key, Method::GET, "/api/assets"))
            .await
            .1["assets"],
        json!([])
    );
    // The same custom id is free in another organisation; a listen path is not (one
    // gateway serves every organisation).
    assert_outcome(
        &send(
            db.as_key(&other_key, Method::POST, "/api/assets")
                .json(&json!({"id": "tpl-1", "kind": "oas-template", "data": template()})),
        )
        .await,
        201,
    );
    let taken = send(
        db.as_key(&other_key, Method::POST, "/api/apis/oas")
            .json(&plain_api("theirs", "/pets/")),
    )
    .await;
    assert_error(&taken, 409, "listen path");
    assert!(
        !taken.1["Message"].as_str().unwrap().contains("by API"),
        "{}",
        taken.1
    );
    assert_eq!(
        send(db.as_key(&other_key, Method::GET, &format!("/api/orgs/{other_org}")))
            .await
            .1["name"],
        "Globex"
    );
    assert_error(
        &send(db.req(Method::GET, &format!("/api/orgs/{other_org}"))).await,
        404,
        "not found",
    );

    let member = send(
        db.req(Method::POST, "/api/users")
            .json(&json!({"name": "dev", "role": "member"})),
    )
    .await;
    assert_outcome(&member, 201);
    let member_key = member.1["key"].as_str().unwrap().to_owned();
    let member_id = member.1["user_id"].as_str().unwrap().to_owned();
    assert_error(
        &send(
            db.req(Method::POST, "/api/users")
                .json(&json!({"name": "dev"})),
        )
        .await,
        409,
        "already exists",
    );
    assert_error(
        &send(
            db.as_key(&member_key, Method::POST, "/api/users")
                .json(&json!({"name": "x"})),
        )
        .await,
        403,
        "admin",
    );
    assert_eq!(
        send(db.as_key(&member_key, Method::GET, "/api/assets/tpl-1"))
            .await
            .0,
        200
    );
    let own = send(db.as_key(&member_key, Method::GET, "/api/keys")).await;
    assert_eq!(own.1["keys"].as_array().unwrap().len(), 1);
    let all_keys = send(db.req(Method::GET, "/api/keys")).await;
    assert_eq!(all_keys.1["keys"].as_array().unwrap().len(), 2);
    assert!(!all_keys.1.to_string().contains(&member_key));
    let users = send(db.req(Method::GET, "/api/users")).await;
    let admin_id = users.1["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "admin")
        .expect("the admin")["id"]
        .clone();
    let admin_key_id = all_keys.1["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["user_id"] == admin_id)
        .expect("the admin's key")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(
        &send(db.req(Method::DELETE, &format!("/api/keys/{admin_key_id}"))).await,
        409,
        "made with",
    );
    assert_error(
        &send(db.as_key(
            &member_key,
            Method::DELETE,
            &format!("/api/keys/{admin_key_id}"),
        ))
        .await,
        404,
        "not found",
    );
    let second = send(db.as_key(&member_key, Method::POST, "/api/keys")).await;
    let second_key = second.1["key"].as_str().unwrap().to_owned();
    let second_id = assert_outcome(&second, 201);
    assert_outcome(
        &send(db.as_key(
            &member_key,
            Method::DELETE,
            &format!("/api/keys/{second_id}"),
        ))
        .await,
        200,
    );
    assert_error(
        &send(db.as_key(&second_key, Method::GET, "/api/assets")).await,
        401,
        "invalid",
    );
    assert_outcome(
        &send(db.req(Method::DELETE, &format!("/api/users/{member_id}"))).await,
        200,
    );
    assert_error(
        &send(db.as_key(&member_key, Method::GET, "/api/assets")).await,
        401,
        "invalid",
    );
    let users = send(db.req(Method::GET, "/api/users")).await;
    assert_eq!(users.1["users"].as_array().unwrap().len(), 1);

    // --- Deletes.
    assert_outcome(
        &send(db.req(Method::DELETE, "/api/assets/tpl-1")).await,
        200,
    );
    assert_error(
        &send(db.req(Method::GET, "/api/assets/tpl-1")).await,
        404,
        "not found",
    );
    assert_outcome(
        &send(db.req(Method::DELETE, "/api/hooks/alerts")).await,
        200,
    );

    // --- Everything is still there after a restart, and no second admin is made.
    db.stop().await;
    let db = Db::start(&dir, &store, &config(2), ADMIN_KEY).await;
    assert!(
        db.stdout.iter().all(|l| !l.contains("Admin key")),
        "{:?}",
        db.stdout
    );
    assert_eq!(
        send(db.req(Method::GET, &format!("/api/certs/{cert_id}")))
            .await
            .0,
        200
    );
    assert_eq!(
        send(db.req(Method::GET, "/api/apis/streams/events"))
            .await
            .0,
        200
    );
    assert_eq!(
        send(db.as_key(&other_key, Method::GET, "/api/assets/tpl-1"))
            .await
            .0,
        200
    );
    assert_error(
        &send(db.req(Method::GET, "/api/assets/tpl-1")).await,
        404,
        "not found",
    );
    db.stop().await;
}

#[tokio::test]
async fn every_endpoint_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("dash.db").display());
    scenario(tmp.path().to_path_buf(), store).await;
}

#[tokio::test]
async fn every_endpoint_on_postgres() {
    common::postgres::with_postgres("sluice_dash", |url| async move {
        let tmp = tempfile::tempdir().unwrap();
        scenario(tmp.path().to_path_buf(), url).await;
    })
    .await;
}

#[tokio::test]
async fn first_start_prints_the_admin_key_once_and_it_works() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("first.db").display());
    let db = Db::start(tmp.path(), &store, "", ADMIN_KEY).await;
    let line = db
        .stdout
        .iter()
        .find(|l| l.starts_with("Admin key"))
        .unwrap_or_else(|| panic!("no key printed: {:?}", db.stdout))
        .clone();
    let key = line.rsplit(' ').next().unwrap().to_owned();
    assert!(key.starts_with("sk_"), "{line}");
    assert_eq!(
        send(db.as_key(&key, Method::GET, "/api/assets")).await.0,
        200
    );
    db.stop().await;
    // The key itself is nowhere in the store.
    let bytes = std::fs::read(tmp.path().join("first.db")).unwrap();
    assert!(!bytes.windows(key.len()).any(|w| w == key.as_bytes()));

    // `bootstrap` makes another organisation and prints its key.
    let config = tmp.path().join("boot.yaml");
    std::fs::write(
        &config,
        format!("store:\n  url: {store}\nlogger:\n  level: warn\n"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dashboard", "bootstrap", "--org", "second", "--config"])
        .arg(&config)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("`second`") && text.contains("Admin key"),
        "{text}"
    );
}

#[tokio::test]
async fn the_admin_key_can_come_from_the_environment_and_the_default_store_is_under_data() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("dashboard")
        .current_dir(tmp.path())
        .env("SLUICE_DB_ADMIN_KEY", ADMIN_KEY)
        .env("SLUICE_DB_LISTEN_PORT", port.to_string())
        .env("SLUICE_DB_LOGGER_LEVEL", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(wait_up(port).await, "the dashboard did not come up");
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/api/certs"))
        .header("Authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(tmp.path().join("data").join("sluice.db").is_file());
    drop(child);
}

#[tokio::test]
async fn streaming_apis_are_refused_while_streaming_is_off() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("off.db").display());
    let db = Db::start(
        tmp.path(),
        &store,
        &format!("admin:\n  key: {ADMIN_KEY}\n"),
        ADMIN_KEY,
    )
    .await;
    let r = send(
        db.req(Method::POST, "/api/apis/streams")
            .header("content-type", STREAMS)
            .body(streaming_yaml(Some("events"), "/events/")),
    )
    .await;
    assert_error(&r, 403, "streaming.enabled");
    // Plain APIs are unaffected.
    let plain = send(
        db.req(Method::POST, "/api/apis/oas")
            .json(&plain_api("pets", "/pets/")),
    )
    .await;
    assert_outcome(&plain, 201);
    db.stop().await;
}

#[tokio::test]
async fn a_gateway_on_the_same_store_serves_a_new_api_within_a_second() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("shared.db");
    let store = format!("sqlite://{}", file.display());
    let db = Db::start(
        tmp.path(),
        &store,
        &format!("admin:\n  key: {ADMIN_KEY}\n"),
        ADMIN_KEY,
    )
    .await;
    let gw_port = free_port();
    let gw_config = tmp.path().join("gateway.yaml");
    std::fs::write(
        &gw_config,
        // The API's upstream is on loopback, which posted APIs reach only when allowed.
        format!("listen:\n  address: 127.0.0.1\n  port: {gw_port}\ncontrol:\n  port: {control}\nstore:\n  url: {store}\nlogger:\n  level: warn\nstreaming:\n  egress:\n    allow: [127.0.0.1]\n", control = common::free_port()),
    )
    .unwrap();
    let _gw = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["gateway", "--config"])
        .arg(&gw_config)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let gw_url = format!("http://127.0.0.1:{gw_port}/served/x");
    let start = Instant::now();
    loop {
        if let Ok(r) = http.get(&gw_url).send().await {
            assert_eq!(r.status(), 404, "served before it exists");
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the gateway did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_outcome(
        &send(
            db.req(Method::POST, "/api/apis/oas")
                .json(&plain_api("served", "/served/")),
        )
        .await,
        201,
    );
    let created = Instant::now();
    // Nothing listens on the upstream's port, so a routed request is 502.
    loop {
        let status = http.get(&gw_url).send().await.unwrap().status();
        if status == 502 {
            break;
        }
        assert!(
            created.elapsed() < Duration::from_secs(1),
            "not served after a second: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_outcome(
        &send(db.req(Method::DELETE, "/api/apis/oas/served")).await,
        200,
    );
    let deleted = Instant::now();
    loop {
        let status = http.get(&gw_url).send().await.unwrap().status();
        if status == 404 {
            break;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(1),
            "still served after a second: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    db.stop().await;
}

#[tokio::test]
async fn the_mapping_playground_runs_sandboxed_and_places_problems() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("map.db").display());
    let db = Db::start(
        tmp.path(),
        &store,
        &format!("admin:\n  key: {ADMIN_KEY}\n"),
        ADMIN_KEY,
    )
    .await;
    let run = |body: Value| send(db.req(Method::POST, "/api/mapping/run").json(&body));

    let ok = run(json!({
        "mapping": "root = this\nroot.name = this.name.uppercase()\nmeta topic = \"orders\"",
        "input": "{\"name\": \"ada\"}",
        "metadata": {"source": "test"}
    }))
    .await;
    assert_eq!(ok.0, 200, "{}", ok.1);
    let output: Value = serde_json::from_str(ok.1["output"].as_str().unwrap()).unwrap();
    assert_eq!(output, json!({"name": "ADA"}));
    assert_eq!(
        ok.1["metadata"],
        json!({"source": "test", "topic": "orders"})
    );
    assert_eq!(ok.1["deleted"], false);

    let deleted = run(json!({"mapping": "root = deleted()", "input": "x"})).await;
    assert_eq!(
        (deleted.0.as_u16(), &deleted.1["deleted"]),
        (200, &json!(true))
    );

    // Failing on this message is a result, not an error of the request.
    let failed = run(json!({"mapping": "root = this.a.uppercase()", "input": "{\"a\": 1}"})).await;
    assert_eq!(failed.0, 200, "{}", failed.1);
    assert!(
        failed.1["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        failed.1
    );
    assert!(failed.1["output"].is_null());

    // A compile problem is placed in the mapping's text.
    let bad = run(json!({"mapping": "root = this\nroot.x = this.name.nope()"})).await;
    assert_eq!(bad.0, 422, "{}", bad.1);
    assert_eq!(bad.1["Errors"][0]["line"], 2, "{}", bad.1);
    assert!(bad.1["Errors"][0]["column"].as_u64().is_some());

    // Nothing that reads the host.
    for host in [
        "root = env(\"HOME\")",
        "root = file(\"/etc/passwd\")",
        "import \"x.blobl\"\nroot = this",
    ] {
        let refused = run(json!({"mapping": host})).await;
        assert_eq!(refused.0, 422, "{host}: {}", refused.1);
    }
    assert_error(&run(json!({"input": "x"})).await, 400, "mapping");
    assert_error(
        &run(json!({"mapping": "root = this", "extra": 1})).await,
        400,
        "extra",
    );
    let anonymous = send(
        reqwest::Client::new()
            .post(db.url("/api/mapping/run"))
            .json(&json!({"mapping": "root = this"})),
    )
    .await;
    assert_eq!(anonymous.0, 401);
    db.stop().await;
}

/// A streaming API `id` at `/{id}/` with `streams` streams, each a generator whose input
/// settings are `generate`.
fn generator_api(id: &str, streams: usize, generate: &str) -> String {
    let mut text = format!(
        "openapi: 3.0.3\ninfo:\n  title: {id}\n  version: \"1.0\"\npaths: {{}}\nx-sluice-api-gateway:\n  info:\n    id: {id}\n    name: {id}\n  server:\n    listenPath:\n      value: /{id}/\n      strip: true\nx-sluice-streaming:\n  streams:\n"
    );
    for i in 0..streams {
        text.push_str(&format!(
            "    s{i}:\n      input:\n        generate:\n{generate}      output:\n        drop: {{}}\n"
        ));
    }
    text
}

#[tokio::test]
async fn posted_streams_are_bounded_and_each_organisation_held_to_its_quotas() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("quotas.db").display());
    let extra = format!(
        "{}quotas:\n  max_streaming_apis: 2\n  max_streams: 3\n",
        config(10)
    );
    let db = Db::start(tmp.path(), &store, &extra, ADMIN_KEY).await;
    let post = |path: &str, body: String| {
        db.req(Method::POST, path)
            .header("content-type", STREAMS)
            .body(body)
    };

    // A batch of four billion messages is refused where it is written, dry run or not.
    let huge = "          payload: x\n          batch_size: 4000000000\n";
    for path in ["/api/apis/streams?dry_run=true", "/api/apis/streams"] {
        let r = send(post(path, generator_api("huge", 1, huge))).await;
        assert_error(&r, 422, "batch_size");
        let problem = &r.1["Errors"][0];
        assert_eq!(
            problem["path"], "x-sluice-streaming.streams.s0.input.generate.batch_size",
            "{}",
            r.1
        );
        assert!(
            problem["message"].as_str().unwrap().contains("10000"),
            "{}",
            r.1
        );
        // The line of `batch_size:` in the posted text.
        assert_eq!(problem["line"], 20, "{}", r.1);
    }
    assert_error(
        &send(db.req(Method::GET, "/api/apis/streams/huge")).await,
        404,
        "not found",
    );
    // Every other kind of field is held the same way.
    let slow = "          payload: x\n          interval: 1000h\n";
    let r = send(post("/api/apis/streams", generator_api("slow", 1, slow))).await;
    assert_error(&r, 422, "interval");

    // Within the bounds: two streams, then one more, make the quota of three.
    let fine = "          payload: x\n          interval: 1s\n";
    assert_outcome(
        &send(post("/api/apis/streams", generator_api("a", 2, fine))).await,
        201,
    );
    assert_error(
        &send(post("/api/apis/streams", generator_api("b", 2, fine))).await,
        403,
        "quotas.max_streams",
    );
    assert_outcome(
        &send(post("/api/apis/streams", generator_api("b", 1, fine))).await,
        201,
    );
    // A third API is past `max_streaming_apis`, dry runs aside.
    assert_error(
        &send(post("/api/apis/streams", generator_api("c", 1, fine))).await,
        403,
        "quotas.max_streaming_apis",
    );
    // Replacing an API counts it once.
    let replaced = send(
        db.req(Method::PUT, "/api/apis/streams/a")
            .header("content-type", STREAMS)
            .body(generator_api("a", 2, fine)),
    )
    .await;
    assert_outcome(&replaced, 200);
    // Room made by deleting is room to use.
    assert_outcome(
        &send(db.req(Method::DELETE, "/api/apis/streams/b")).await,
        200,
    );
    assert_outcome(
        &send(post("/api/apis/streams", generator_api("c", 1, fine))).await,
        201,
    );
    db.stop().await;
}
