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
async fn a_template_whose_filters_would_grow_without_bound_fails_its_delivery_and_the_process_stays_up(
) {
    let serve = Serve::start(TENANT_ENV).await;
    let a = serve.org("a").await;
    let receiver = Receiver::start(&[], 200).await;
    // Every `tojson` escapes the quotes and backslashes of the one before, doubling
    // them: forty in a row, all allowed filters, would ask for terabytes.
    let template = format!("{{{{ event{} }}}}", "|tojson".repeat(40));
    let api = with_handler(
        "json40",
        "/json40/",
        json!({"events": ["auth_failure"], "targetPath": receiver.url("/hook"), "template": template}),
    );
    let created = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&api)).await;
    assert_eq!(created.0, 201, "{}", created.1);
    // One anonymous request without a key: an auth failure, which renders the template.
    assert_eq!(serve.until_not("/json40/x", None, 404).await, 401);
    let failed = settled_delivery(&serve, &a).await;
    assert_eq!(failed["status"], "dead", "{failed}");
    let why = failed["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("the filter `tojson` made a value larger than 65536 bytes"),
        "{failed}"
    );
    // The process is still up: both servers answer and the gateway still serves.
    assert!(serve.up(serve.db).await, "the dashboard stopped answering");
    assert!(serve.up(serve.gw).await, "the gateway stopped answering");
    let again = serve.gateway("/json40/x").send().await.unwrap().status();
    assert_eq!(again, 401);
    assert!(receiver.received().is_empty());
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

/// CPU time (user and system) the process `pid` has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces:
    // utime and stime are the 14th and 15th fields, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(100);
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

impl Serve {
    /// The gateway's metrics.
    async fn metrics(&self) -> String {
        self.http
            .get(format!("http://127.0.0.1:{}/metrics", self.control))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of the first metric line that starts with `name{` and holds `label`.
    async fn metric(&self, name: &str, label: &str) -> Option<f64> {
        let text = self.metrics().await;
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

/// A streaming API of `n` streams that generate messages as fast as they are taken,
/// each through a mapping, into nothing.
fn busy_streams(id: &str, n: usize) -> String {
    let mut doc = format!(
        "openapi: 3.0.3\ninfo: {{title: {id}, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: {id}, name: {id}}}\n  server:\n    listenPath: {{value: /{id}/, strip: true}}\nx-sluice-streaming:\n  streams:\n"
    );
    for i in 0..n {
        doc.push_str(&format!(
            "    gen{i}:\n      input: {{generate: {{payload: '{{\"n\":1}}', interval: 0s}}}}\n      pipeline:\n        processors:\n          - mapping: 'root.n = this.n + 1'\n      output: {{drop: {{}}}}\n"
        ));
    }
    doc
}

#[tokio::test]
async fn an_organisations_busy_streams_take_no_more_than_its_cpu_share() {
    const SHARE: f64 = 0.25;
    let share = SHARE.to_string();
    let mut env = TENANT_ENV.to_vec();
    env.push(("SLUICE_GW_STREAMING_ORG_CPU_SHARE", &share));
    let serve = Serve::start(&env).await;
    let a = serve.org("a").await;
    let upstream = Receiver::start(&[], 200).await;
    let plain = send(serve.api(&a, Method::POST, "/api/apis/oas").json(&open_api(
        "plain",
        "/plain/",
        &upstream.url(""),
    )))
    .await;
    assert_eq!(plain.0, 201, "{}", plain.1);
    let posted = send(
        serve
            .api(&a, Method::POST, "/api/apis/streams")
            .header("content-type", "application/vnd.sluice.streams.oas")
            .body(busy_streams("busy", 4)),
    )
    .await;
    assert_eq!(posted.0, 201, "{}", posted.1);
    assert_eq!(serve.until_not("/plain/x", None, 404).await, 200);
    // Every stream runs before the measure starts.
    let started = Instant::now();
    for i in 0..4 {
        let label = format!("stream=\"gen{i}\"");
        while serve
            .metric("sluice_component_sent_messages_total", &label)
            .await
            .is_none_or(|n| n == 0.0)
        {
            assert!(started.elapsed() < DEADLINE, "gen{i} does not run");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Over a few seconds the process uses about the organisation's share, not the
    // cores its streams could take, and answers everyone else meanwhile.
    let pid = serve.pid();
    let (cpu_before, wall_before) = (cpu_time(pid), Instant::now());
    let mut slowest = Duration::ZERO;
    while wall_before.elapsed() < Duration::from_secs(4) {
        let asked = Instant::now();
        assert!(
            serve.up(serve.gw).await,
            "the gateway stopped answering /ping"
        );
        let through = serve.gateway("/plain/x").send().await.unwrap().status();
        assert_eq!(through, 200);
        slowest = slowest.max(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let used = (cpu_time(pid) - cpu_before).as_secs_f64() / wall_before.elapsed().as_secs_f64();
    // Room above the share for the process's own work (serving these requests, timers).
    assert!(used <= SHARE + 0.35, "the process used {used:.2} cores");
    assert!(
        slowest < Duration::from_secs(1),
        "a request took {slowest:?}"
    );
    let throttled = serve
        .metric("sluice_org_cpu_throttled_seconds_total", "org_id=")
        .await;
    assert!(throttled.is_some_and(|s| s >= 1.0), "{throttled:?}");
    // Throttled, not stopped: the streams still make progress.
    let sent = serve
        .metric(
            "sluice_component_sent_messages_total",
            "stream=\"gen0\",component=\"output",
        )
        .await;
    assert!(sent.is_some_and(|n| n > 0.0), "{sent:?}");
}

/// A streaming API with a stream per `?user=` (whose mapping takes a moment to compile,
/// as real ones do) and a plain stream to tell when the gateway serves it.
fn per_client(id: &str) -> String {
    let mapping = (0..40)
        .map(|i| format!("root.f{i} = this.n + {i}"))
        .collect::<Vec<_>>()
        .join("\\n");
    format!(
        "openapi: 3.0.3\ninfo: {{title: {id}, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: {id}, name: {id}}}\n  server:\n    listenPath: {{value: /{id}/, strip: true}}\nx-sluice-streaming:\n  streams:\n    mine:\n      input: {{generate: {{payload: 'for $sluice_context.request_data_user', interval: 1s}}}}\n      pipeline:\n        processors:\n          - mapping: \"{mapping}\"\n      output: {{http_server: {{stream_path: /events}}}}\n    ready:\n      input: {{http_server: {{path: /ready}}}}\n      output: {{drop: {{}}}}\n"
    )
}

#[tokio::test]
async fn first_requests_arriving_together_start_no_more_instances_than_the_quota() {
    const QUOTA: usize = 5;
    let quota = QUOTA.to_string();
    let mut env = TENANT_ENV.to_vec();
    env.extend([
        ("SLUICE_DB_QUOTAS_MAX_CLIENT_STREAMS", quota.as_str()),
        ("SLUICE_GW_WORKERS", "8"),
    ]);
    let serve = Serve::start(&env).await;
    let a = serve.org("a").await;
    const APIS: [&str; 4] = ["inbox", "outbox", "alerts", "audit"];
    for id in APIS {
        let posted = send(
            serve
                .api(&a, Method::POST, "/api/apis/streams")
                .header("content-type", "application/vnd.sluice.streams.oas")
                .body(per_client(id)),
        )
        .await;
        assert_eq!(posted.0, 201, "{}", posted.1);
        // A GET: served, and refused for its verb.
        assert_eq!(
            serve.until_not(&format!("/{id}/ready"), None, 404).await,
            405
        );
    }
    // First requests at once, each for an instance of its own, across the APIs.
    const REQUESTS: usize = 80;
    let requests = (0..REQUESTS).map(|i| {
        let api = APIS[i % APIS.len()];
        serve.gateway(&format!("/{api}/events?user=u{i}")).send()
    });
    let answers = futures::future::join_all(requests).await;
    let mut started = Vec::new();
    let mut refused = 0;
    for answer in answers {
        let answer = answer.unwrap();
        match answer.status().as_u16() {
            200 => started.push(answer),
            429 => {
                let body: Value = answer.json().await.unwrap();
                assert!(body.to_string().contains("max_client_streams"), "{body}");
                refused += 1;
            }
            other => panic!("{other}: {}", answer.text().await.unwrap()),
        }
    }
    assert_eq!((started.len(), refused), (QUOTA, REQUESTS - QUOTA));
    // The running ones are served; one more still is not.
    let again = serve
        .gateway("/inbox/events?user=late")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 429);
    drop(started);
}
