//! Black-box tests of the developer portal's accounts and apps: the built dashboard, real
//! HTTP with cookies kept by hand (so that each attribute is checked), on a SQLite file
//! and on a real PostgreSQL server. Developers sign up, sign in and out, reset their
//! password, make apps, get, rotate and revoke keys, subscribe, send test events and
//! redeliver; the tests also try what must fail: writes without the CSRF token, a
//! planted session, another developer's apps, too many sign-ins.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use common::dashboard::{assert_error, send, Db};
use common::receiver::Receiver;
use common::serve::{Serve, ADMIN_KEY as SERVE_ADMIN_KEY};
use sluice::store::seal::Sealer;
use sluice::store::{AfterAttempt, AttemptRecord, AttemptResult, Store};
use sluice::webhook::sign;

const ADMIN_KEY: &str = "developers-admin-key-0123456789";
const SECRET: &str = "a-test-secret-for-sealing";
const PASSWORD: &str = "correct horse battery";
const ATTEMPTS: u64 = 4;

/// A browser of one developer: its cookies, and the CSRF token it last read.
struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>` of the dashboard.
    base: String,
    org: String,
    cookies: BTreeMap<String, String>,
    csrf: String,
    /// Each `Set-Cookie` seen, as sent.
    set_cookies: Vec<String>,
}

impl Browser {
    fn new(db: &Db, org: &str) -> Browser {
        Browser::at(&db.http, db.port, org)
    }

    /// A browser of the portal of `org` on the dashboard at `port`.
    fn at(http: &reqwest::Client, port: u16, org: &str) -> Browser {
        Browser {
            http: http.clone(),
            base: format!("http://127.0.0.1:{port}"),
            org: org.to_owned(),
            cookies: BTreeMap::new(),
            csrf: String::new(),
            set_cookies: Vec::new(),
        }
    }

    fn path(&self, rest: &str) -> String {
        format!("/portal/api/orgs/{}{rest}", self.org)
    }

    /// A request to `rest` under the portal, with the cookies and, when `csrf`, the
    /// token.
    async fn call(
        &mut self,
        method: Method,
        rest: &str,
        body: Option<Value>,
        csrf: bool,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, self.path(rest)));
        if !self.cookies.is_empty() {
            let cookie: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header("Cookie", cookie.join("; "));
        }
        if csrf {
            req = req.header("X-CSRF-Token", self.csrf.clone());
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request");
        for value in resp.headers().get_all("set-cookie") {
            let text = value.to_str().unwrap().to_owned();
            let (pair, _) = text.split_once(';').unwrap_or((&text, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if text.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
            self.set_cookies.push(text);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if let Some(csrf) = value.get("csrf").and_then(Value::as_str) {
            self.csrf = csrf.to_owned();
        }
        (status, value)
    }

    async fn get(&mut self, rest: &str) -> (StatusCode, Value) {
        self.call(Method::GET, rest, None, false).await
    }

    async fn post(&mut self, rest: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, rest, Some(body), true).await
    }

    async fn delete(&mut self, rest: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, rest, None, true).await
    }

    /// Reads the session (and a CSRF cookie when signed out), then signs up.
    async fn sign_up(&mut self, email: &str, extra: Value) -> (StatusCode, Value) {
        self.get("/session").await;
        let mut body = json!({"email": email, "password": PASSWORD});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        self.post("/signup", body).await
    }
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

/// The gateway key `id` of the organisation, as the management API shows it.
async fn gateway_key(db: &Db, id: &str) -> Option<Value> {
    let (_, keys) = send(db.req(Method::GET, "/api/gateway/keys")).await;
    keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key_id"] == id || k["id"] == id)
        .cloned()
}

async fn scenario(dir: &Path, store_url: &str) {
    let config = format!(
        "admin:\n  key: {ADMIN_KEY}\nsecret: {SECRET}\nwebhooks:\n  enabled: false\n  max_attempts: 2\nportal:\n  attempts_per_account: {ATTEMPTS}\n  attempts_per_address: 100\n  max_apps_per_developer: 3\n"
    );
    let db = Db::start(dir, store_url, &config, ADMIN_KEY).await;
    for api in ["pets", "orders"] {
        let made = send(db.req(Method::POST, "/api/apis/oas").json(&plain_api(api))).await;
        assert_eq!(made.0, 201, "{}", made.1);
    }
    let product = |name: &str, apis: &[&str], approval: &str| {
        json!({
            "name": name, "api_ids": apis, "published": true, "key_approval": approval,
            "webhooks": {"enabled": true, "events": ["order.created", "order.paid"]},
        })
    };
    let made = send(db.req(Method::POST, "/api/portal/products").json(&product(
        "Pets",
        &["pets"],
        "auto",
    )))
    .await;
    let pets = made.1["ID"].as_str().unwrap().to_owned();
    let pets_secret = made.1["publish_secret"].as_str().unwrap().to_owned();
    let made = send(db.req(Method::POST, "/api/portal/products").json(&product(
        "Orders",
        &["orders"],
        "manual",
    )))
    .await;
    let orders = made.1["ID"].as_str().unwrap().to_owned();
    let made = send(
        db.req(Method::POST, "/api/portal/products")
            .json(&json!({"name": "Draft", "api_ids": ["pets"]})),
    )
    .await;
    let draft = made.1["ID"].as_str().unwrap().to_owned();
    let (_, shown) = send(db.req(Method::GET, &format!("/api/portal/products/{pets}"))).await;
    let org = shown["org_id"].as_str().unwrap().to_owned();

    // Signed out: a CSRF cookie, HttpOnly and SameSite, for the portal's paths only.
    let mut alice = Browser::new(&db, &org);
    let (status, session) = alice.get("/session").await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["developer"], Value::Null);
    assert_eq!(session["signup"], "off");
    let set = alice.set_cookies.last().unwrap().clone();
    for attribute in [
        "sluice_portal_csrf=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/portal",
    ] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains("Secure"), "not on TLS: {set}");
    assert_eq!(
        send(db.http.get(db.url("/portal/api/orgs/nobody/session")))
            .await
            .0,
        404
    );

    // Sign-up is off until the organisation opens it.
    let off = alice.sign_up("alice@example.com", json!({})).await;
    assert_error(&off, 403, "does not take sign-ups");
    let opened = send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "open"})),
    )
    .await;
    assert_eq!(opened.0, 200, "{}", opened.1);
    let bad = send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "sometimes"})),
    )
    .await;
    assert_eq!(bad.0, 400, "{}", bad.1);
    let bad = send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "open", "reset_webhook": "nope"})),
    )
    .await;
    assert_error(&bad, 400, "reset_webhook");

    // Writes without the token, or with another, are refused; so are bad fields.
    let body = json!({"email": "alice@example.com", "password": PASSWORD});
    assert_error(
        &alice
            .call(Method::POST, "/signup", Some(body.clone()), false)
            .await,
        403,
        "X-CSRF-Token",
    );
    let kept = alice.csrf.clone();
    alice.csrf = "sk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into();
    assert_error(
        &alice.post("/signup", body.clone()).await,
        403,
        "X-CSRF-Token",
    );
    alice.csrf = kept;
    assert_error(
        &alice
            .post("/signup", json!({"email": "alice", "password": PASSWORD}))
            .await,
        400,
        "`email`",
    );
    assert_error(
        &alice
            .post("/signup", json!({"email": "a@x.io", "password": "short"}))
            .await,
        400,
        "`password`",
    );
    assert_error(
        &alice
            .post(
                "/signup",
                json!({"email": "a@x.io", "password": PASSWORD, "admin": true}),
            )
            .await,
        400,
        "admin",
    );

    // A session planted before sign-up is never the one signed in.
    alice.cookies.insert(
        "sluice_portal".into(),
        "sk_plantedplantedplantedplantedplantedplanted".into(),
    );
    let (status, signed) = alice.sign_up("Alice@Example.com", json!({})).await;
    assert_eq!(status, 201, "{signed}");
    assert_eq!(signed["developer"]["email"], "alice@example.com");
    let session = alice.cookies["sluice_portal"].clone();
    assert!(!session.contains("planted"), "{session}");
    let set = alice
        .set_cookies
        .iter()
        .find(|c| c.starts_with("sluice_portal="))
        .unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/portal", "Max-Age="] {
        assert!(set.contains(attribute), "{set}");
    }
    let mut again = Browser::new(&db, &org);
    assert_error(
        &again.sign_up("alice@example.com", json!({})).await,
        409,
        "has an account",
    );

    // Apps: a published product only; with `auto` approval the key comes at once and
    // reaches the product's APIs only.
    assert_error(
        &alice
            .post("/apps", json!({"name": "A", "product_id": draft}))
            .await,
        400,
        "`product_id`",
    );
    assert_error(
        &alice
            .post("/apps", json!({"name": "", "product_id": pets}))
            .await,
        400,
        "`name`",
    );
    let (status, made) = alice
        .post("/apps", json!({"name": "Shop", "product_id": pets}))
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["app"]["status"], "approved");
    let key = made["key"].as_str().expect("the key, once").to_owned();
    let shop = made["app"]["id"].as_str().unwrap().to_owned();
    let key_id = made["app"]["key_id"].as_str().unwrap().to_owned();
    let policy = gateway_key(&db, &key_id).await.expect("the key exists");
    assert_eq!(
        policy["access_rights"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["pets"],
        "{policy}"
    );
    let (_, listed) = alice.get("/apps").await;
    assert!(
        !listed.to_string().contains(&key),
        "the key is shown once: {listed}"
    );
    assert_eq!(
        listed["apps"][0]["events"],
        json!(["order.created", "order.paid"])
    );

    // Rotation: a new key, and the old one revoked; then revocation.
    let (status, rotated) = alice.post(&format!("/apps/{shop}/key"), json!({})).await;
    assert_eq!(status, 201, "{rotated}");
    assert_ne!(rotated["key"], key);
    assert!(
        gateway_key(&db, &key_id).await.is_none(),
        "the old key is revoked"
    );
    let new_id = rotated["key_id"].as_str().unwrap().to_owned();
    assert!(gateway_key(&db, &new_id).await.is_some());
    assert_eq!(alice.delete(&format!("/apps/{shop}/key")).await.0, 200);
    assert!(gateway_key(&db, &new_id).await.is_none());
    assert_eq!(alice.delete(&format!("/apps/{shop}/key")).await.0, 404);

    // `manual` approval: pending until the publisher approves; then the key.
    let (status, made) = alice
        .post("/apps", json!({"name": "Ledger", "product_id": orders}))
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["app"]["status"], "pending");
    assert_eq!(made["key"], Value::Null);
    let ledger = made["app"]["id"].as_str().unwrap().to_owned();
    assert_error(
        &alice.post(&format!("/apps/{ledger}/key"), json!({})).await,
        409,
        "pending",
    );
    let (_, admin_view) = send(db.req(Method::GET, &format!("/api/portal/apps/{ledger}"))).await;
    assert_eq!(admin_view["status"], "pending", "{admin_view}");
    assert_eq!(admin_view["developer"], "alice@example.com");
    let approved = send(db.req(Method::POST, &format!("/api/portal/apps/{ledger}/approve"))).await;
    assert_eq!(approved.0, 200, "{}", approved.1);
    let (status, issued) = alice.post(&format!("/apps/{ledger}/key"), json!({})).await;
    assert_eq!(status, 201, "{issued}");
    let ledger_key = issued["key_id"].as_str().unwrap().to_owned();
    let rejected = send(db.req(Method::POST, &format!("/api/portal/apps/{ledger}/reject"))).await;
    assert_eq!(rejected.0, 200, "{}", rejected.1);
    assert!(
        gateway_key(&db, &ledger_key).await.is_none(),
        "a refused app loses its key"
    );
    assert_error(
        &alice.post(&format!("/apps/{ledger}/key"), json!({})).await,
        409,
        "rejected",
    );

    // Subscriptions: the product's events only, URLs the egress policy allows, the
    // secret shown once.
    let sub = |url: &str, events: Value| json!({"url": url, "events": events});
    let path = format!("/apps/{shop}/subscriptions");
    assert_error(
        &alice
            .post(
                &path,
                sub("http://127.0.0.1:9/hook", json!(["user.deleted"])),
            )
            .await,
        400,
        "`events[0]`",
    );
    assert_error(
        &alice
            .post(&path, sub("http://127.0.0.1:9/hook", json!([])))
            .await,
        400,
        "`events`",
    );
    assert_error(
        &alice
            .post(&path, sub("http://10.1.2.3/hook", json!(["order.paid"])))
            .await,
        400,
        "`url`",
    );
    assert_error(
        &alice
            .post(&path, sub("file:///etc/passwd", json!(["order.paid"])))
            .await,
        400,
        "`url`",
    );
    let given =
        json!({"url": "http://127.0.0.1:9/given", "events": ["order.paid"], "secret": "short"});
    assert_error(&alice.post(&path, given).await, 400, "`secret`");
    let (status, subscribed) = alice
        .post(&path, sub("http://127.0.0.1:9/hook", json!(["order.paid"])))
        .await;
    assert_eq!(status, 201, "{subscribed}");
    let secret = subscribed["secret"].as_str().unwrap().to_owned();
    assert_eq!(secret.len(), 64, "{secret}");
    let sub_id = subscribed["subscription"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, app) = alice.get(&format!("/apps/{shop}")).await;
    assert!(!app.to_string().contains(&secret), "{app}");
    assert_eq!(app["webhooks"][0]["events"], json!(["order.paid"]));

    // A test event, in the app's delivery log; a pending delivery is not redelivered.
    let (status, tested) = alice
        .post(
            &format!("/apps/{shop}/subscriptions/{sub_id}/test"),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{tested}");
    let delivery = tested["delivery_id"].as_str().unwrap().to_owned();
    let (status, log) = alice.get(&format!("/apps/{shop}/deliveries")).await;
    assert_eq!(status, 200, "{log}");
    assert_eq!(
        log["deliveries"][0]["delivery"]["id"],
        delivery.as_str(),
        "{log}"
    );
    assert_eq!(log["deliveries"][0]["delivery"]["event"], "sluice.test");
    assert_error(
        &alice
            .post(
                &format!("/apps/{shop}/deliveries/{delivery}/redeliver"),
                json!({}),
            )
            .await,
        409,
        "pending",
    );
    // Made dead as the worker would, then redelivered.
    let store = Store::open(store_url).await.unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let claimed = store.claim_deliveries(now, 60_000, 10, true).await.unwrap();
    assert_eq!(claimed.len(), 1);
    store
        .record_attempts(
            &[AttemptResult {
                attempt: AttemptRecord {
                    delivery_id: delivery.clone(),
                    attempt: 1,
                    at: now,
                    status: Some(500),
                    error: None,
                    latency_ms: 12,
                },
                then: AfterAttempt::Dead,
            }],
            now,
        )
        .await
        .unwrap();
    let (_, log) = alice.get(&format!("/apps/{shop}/deliveries")).await;
    assert_eq!(log["deliveries"][0]["delivery"]["status"], "dead", "{log}");
    assert_eq!(
        log["deliveries"][0]["attempts"][0]["latency_ms"], 12,
        "{log}"
    );
    let (status, again) = alice
        .post(
            &format!("/apps/{shop}/deliveries/{delivery}/redeliver"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_error(
        &alice.get(&format!("/apps/{shop}/deliveries?p=0")).await,
        400,
        "`p`",
    );

    // A second developer sees none of the first's apps, and cannot act on them.
    let mut bob = Browser::new(&db, &org);
    assert_eq!(bob.sign_up("bob@example.com", json!({})).await.0, 201);
    let (_, apps) = bob.get("/apps").await;
    assert_eq!(apps["apps"], json!([]), "{apps}");
    for (method, rest) in [
        (Method::GET, format!("/apps/{shop}")),
        (Method::DELETE, format!("/apps/{shop}")),
        (Method::POST, format!("/apps/{shop}/key")),
        (Method::GET, format!("/apps/{shop}/deliveries")),
        (
            Method::POST,
            format!("/apps/{shop}/subscriptions/{sub_id}/test"),
        ),
    ] {
        let got = bob.call(method.clone(), &rest, Some(json!({})), true).await;
        assert_eq!(got.0, 404, "{method} {rest}: {}", got.1);
    }
    // Bob's token is not Alice's.
    let bobs = bob.csrf.clone();
    let alices = std::mem::replace(&mut alice.csrf, bobs);
    assert_error(
        &alice
            .post("/apps", json!({"name": "X", "product_id": pets}))
            .await,
        403,
        "X-CSRF-Token",
    );
    alice.csrf = alices;
    // A session is for its own organisation's portal.
    let other = send(
        db.req(Method::POST, "/api/orgs")
            .json(&json!({"name": "other"})),
    )
    .await;
    let other_org = other.1["ID"]
        .as_str()
        .or(other.1["id"].as_str())
        .unwrap()
        .to_owned();
    let mut elsewhere = Browser {
        org: other_org,
        ..Browser::new(&db, &org)
    };
    elsewhere.cookies = alice.cookies.clone();
    assert_eq!(elsewhere.get("/apps").await.0, 401);

    // Sign-in starts a new session and ends the old one; sign-out ends it too.
    let old = alice.cookies["sluice_portal"].clone();
    let (status, _) = alice
        .post(
            "/signin",
            json!({"email": "alice@example.com", "password": PASSWORD}),
        )
        .await;
    assert_eq!(status, 200);
    assert_ne!(alice.cookies["sluice_portal"], old);
    let mut stale = Browser::new(&db, &org);
    stale.cookies.insert("sluice_portal".into(), old);
    assert_eq!(stale.get("/apps").await.0, 401);
    let kept = alice.cookies.clone();
    assert_eq!(alice.post("/signout", json!({})).await.0, 200);
    assert!(!alice.cookies.contains_key("sluice_portal"));
    let mut replay = Browser::new(&db, &org);
    replay.cookies = kept;
    assert_eq!(replay.get("/apps").await.0, 401);

    // Failed sign-ins run out per account; the answer says when to try again.
    let mut guesser = Browser::new(&db, &org);
    guesser.get("/session").await;
    let wrong = json!({"email": "bob@example.com", "password": "not the password"});
    for _ in 0..ATTEMPTS {
        assert_error(
            &guesser.post("/signin", wrong.clone()).await,
            401,
            "wrong e-mail address or password",
        );
    }
    let resp = db
        .http
        .post(db.url(&guesser.path("/signin")))
        .header(
            "Cookie",
            format!(
                "sluice_portal_csrf={}",
                guesser.cookies["sluice_portal_csrf"]
            ),
        )
        .header("X-CSRF-Token", guesser.csrf.clone())
        .json(&json!({"email": "bob@example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    let unknown = guesser
        .post(
            "/signin",
            json!({"email": "nobody@example.com", "password": PASSWORD}),
        )
        .await;
    assert_error(&unknown, 401, "wrong e-mail address or password");
    // Guesses sent all at once are held to the same count: each is counted before its
    // password is checked.
    let mut burst = Browser::new(&db, &org);
    burst.get("/session").await;
    let guesses = (0..ATTEMPTS * 3).map(|i| {
        db.http
            .post(db.url(&burst.path("/signin")))
            .header(
                "Cookie",
                format!("sluice_portal_csrf={}", burst.cookies["sluice_portal_csrf"]),
            )
            .header("X-CSRF-Token", burst.csrf.clone())
            .json(&json!({"email": "carol@example.com", "password": format!("guess {i}")}))
            .send()
    });
    let statuses: Vec<u16> = futures::future::join_all(guesses)
        .await
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    let checked = statuses.iter().filter(|s| **s == 401).count() as u64;
    assert!(checked <= ATTEMPTS, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [401, 429].contains(s)),
        "{statuses:?}"
    );

    // Password reset, with the token delivered through the portal's reset webhook.
    let hook = send(db.req(Method::POST, "/api/hooks").json(&json!({
        "name": "resets", "method": "POST", "target_path": "http://127.0.0.1:9/resets"
    })))
    .await;
    assert_eq!(hook.0, 201, "{}", hook.1);
    let hook_id = hook.1["ID"]
        .as_str()
        .or(hook.1["Meta"].as_str())
        .unwrap()
        .to_owned();
    let set = send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "open", "reset_webhook": hook_id})),
    )
    .await;
    assert_eq!(set.0, 200, "{}", set.1);
    let mut forgot = Browser::new(&db, &org);
    forgot.get("/session").await;
    let (status, _) = forgot
        .post("/password-reset", json!({"email": "alice@example.com"}))
        .await;
    assert_eq!(status, 202);
    let (status, _) = forgot
        .post("/password-reset", json!({"email": "nobody@example.com"}))
        .await;
    assert_eq!(status, 202, "the same answer for an unknown address");
    let (_, deliveries) = send(db.req(Method::GET, "/api/deliveries")).await;
    let resets: Vec<&Value> = deliveries["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["event"] == "portal.password_reset")
        .collect();
    assert_eq!(resets.len(), 1, "{deliveries}");
    // The log shows the body with the token redacted; the worker sends the sealed copy.
    let shown: Value = serde_json::from_str(resets[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(shown["email"], "alice@example.com");
    assert_eq!(shown["token"], "[redacted]");
    let reset_id = resets[0]["id"].as_str().unwrap().to_owned();
    let (stored, _) = store.delivery(&org, &reset_id).await.unwrap().unwrap();
    let sent = Sealer::new(SECRET)
        .open(stored.body_sealed.as_deref().expect("a sealed body"))
        .unwrap();
    let sent: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent["email"], "alice@example.com");
    let token = sent["token"].as_str().unwrap().to_owned();
    let (_, one) = send(db.req(Method::GET, &format!("/api/deliveries/{reset_id}"))).await;
    for answer in [&deliveries, &one] {
        assert!(!answer.to_string().contains(&token), "{answer}");
    }
    let new_password = "a brand new passphrase";
    assert_error(
        &forgot
            .post(
                "/password-reset/confirm",
                json!({"token": token, "password": "short"}),
            )
            .await,
        400,
        "`password`",
    );
    let (status, _) = forgot
        .post(
            "/password-reset/confirm",
            json!({"token": token, "password": new_password}),
        )
        .await;
    assert_eq!(status, 200);
    assert_error(
        &forgot
            .post(
                "/password-reset/confirm",
                json!({"token": token, "password": new_password}),
            )
            .await,
        400,
        "`token`",
    );
    assert_eq!(
        forgot
            .post(
                "/signin",
                json!({"email": "alice@example.com", "password": PASSWORD})
            )
            .await
            .0,
        401
    );
    let (status, _) = forgot
        .post(
            "/signin",
            json!({"email": "alice@example.com", "password": new_password}),
        )
        .await;
    assert_eq!(status, 200);

    // By invitation: only the invited address, once.
    let set = send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "invite"})),
    )
    .await;
    assert_eq!(set.0, 200);
    let mut carol = Browser::new(&db, &org);
    assert_error(
        &carol.sign_up("carol@example.com", json!({})).await,
        403,
        "invitation",
    );
    let invited = send(
        db.req(Method::POST, "/api/portal/invitations")
            .json(&json!({"email": "carol@example.com"})),
    )
    .await;
    assert_eq!(invited.0, 201, "{}", invited.1);
    let invitation = invited.1["invitation"].as_str().unwrap().to_owned();
    let mut mallory = Browser::new(&db, &org);
    assert_error(
        &mallory
            .sign_up("mallory@example.com", json!({"invitation": invitation}))
            .await,
        403,
        "invitation",
    );
    let invited = send(
        db.req(Method::POST, "/api/portal/invitations")
            .json(&json!({"email": "carol@example.com"})),
    )
    .await;
    let invitation = invited.1["invitation"].as_str().unwrap().to_owned();
    assert_eq!(
        carol
            .sign_up("carol@example.com", json!({"invitation": invitation}))
            .await
            .0,
        201
    );
    assert_error(
        &send(
            db.req(Method::POST, "/api/portal/invitations")
                .json(&json!({"email": "carol@example.com"})),
        )
        .await,
        409,
        "has an account",
    );

    // The organisation lists its developers and removes one, with their apps' keys.
    let (_, developers) = send(db.req(Method::GET, "/api/portal/developers")).await;
    // Oldest first, to the second: those of one second in any order.
    let mut emails: Vec<&str> = developers["developers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["email"].as_str().unwrap())
        .collect();
    emails.sort();
    assert_eq!(
        emails,
        ["alice@example.com", "bob@example.com", "carol@example.com"]
    );
    let (status, made) = bob
        .post("/apps", json!({"name": "Bobs", "product_id": pets}))
        .await;
    assert_eq!(status, 201, "{made}");
    let bobs_key = made["app"]["key_id"].as_str().unwrap().to_owned();
    let bob_id = developers["developers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["email"] == "bob@example.com")
        .and_then(|d| d["id"].as_str())
        .unwrap()
        .to_owned();
    let removed = send(db.req(Method::DELETE, &format!("/api/portal/developers/{bob_id}"))).await;
    assert_eq!(removed.0, 200, "{}", removed.1);
    assert!(gateway_key(&db, &bobs_key).await.is_none());
    assert_eq!(bob.get("/apps").await.0, 401);

    // A product's keys follow its APIs; an unpublished product issues no new keys.
    let (status, issued) = forgot.post(&format!("/apps/{shop}/key"), json!({})).await;
    assert_eq!(status, 201, "{issued}");
    let shop_key = issued["key_id"].as_str().unwrap().to_owned();
    let put = |apis: &[&str], published: bool| {
        let mut body = product("Pets", apis, "auto");
        body["published"] = published.into();
        db.req(Method::PUT, &format!("/api/portal/products/{pets}"))
            .json(&body)
    };
    assert_eq!(send(put(&["pets", "orders"], true)).await.0, 200);
    let policy = gateway_key(&db, &shop_key).await.unwrap();
    let rights: Vec<&String> = policy["access_rights"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(rights, ["orders", "pets"], "{policy}");
    assert_eq!(send(put(&["orders"], false)).await.0, 200);
    let policy = gateway_key(&db, &shop_key).await.unwrap();
    let rights: Vec<&String> = policy["access_rights"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(rights, ["orders"], "{policy}");
    assert_error(
        &forgot.post(&format!("/apps/{shop}/key"), json!({})).await,
        409,
        "no longer published",
    );
    assert_eq!(send(put(&["pets"], true)).await.0, 200);

    // A refused app's subscriptions get no more events, and its key is gone.
    let publish = |key: &str| {
        let body = r#"{"order": 1}"#;
        let t = chrono::Utc::now().timestamp();
        db.http
            .post(db.url(&format!("/api/portal/products/{pets}/events")))
            .header(
                "Sluice-Signature",
                sign::sign(pets_secret.as_bytes(), t, body.as_bytes()),
            )
            .header("Sluice-Event", "order.paid")
            .header("Idempotency-Key", key.to_owned())
            .header("Content-Type", "application/json")
            .body(body)
    };
    let (status, accepted) = send(publish("before")).await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["deliveries"], 1, "{accepted}");
    let refused = send(db.req(Method::POST, &format!("/api/portal/apps/{shop}/reject"))).await;
    assert_eq!(refused.0, 200, "{}", refused.1);
    let (_, accepted) = send(publish("after")).await;
    assert_eq!(accepted["deliveries"], 0, "{accepted}");
    assert!(gateway_key(&db, &shop_key).await.is_none());

    // An app's deletion revokes its key; so does its product's.
    let (_, made) = forgot
        .post("/apps", json!({"name": "Temp", "product_id": pets}))
        .await;
    let temp_key = made["app"]["key_id"].as_str().unwrap().to_owned();
    let temp = made["app"]["id"].as_str().unwrap().to_owned();
    assert_eq!(forgot.delete(&format!("/apps/{temp}")).await.0, 200);
    assert!(gateway_key(&db, &temp_key).await.is_none());
    let (_, made) = forgot
        .post("/apps", json!({"name": "Last", "product_id": pets}))
        .await;
    let last_key = made["app"]["key_id"].as_str().unwrap().to_owned();
    assert_error(
        &forgot
            .post("/apps", json!({"name": "Over", "product_id": pets}))
            .await,
        409,
        "at most 3 apps",
    );
    assert_eq!(
        send(db.req(Method::DELETE, &format!("/api/portal/products/{pets}")))
            .await
            .0,
        200
    );
    assert!(gateway_key(&db, &last_key).await.is_none());
    db.stop().await;
}

#[tokio::test]
async fn developers_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("developers.db").display());
    scenario(tmp.path(), &store).await;
}

#[tokio::test]
async fn developers_on_postgres() {
    common::postgres::with_postgres("sluice_developers", |url| async move {
        let tmp = tempfile::tempdir().unwrap();
        scenario(tmp.path(), &url).await;
    })
    .await;
}

/// Anyone may call the account endpoints and read the catalogue: one address gets only
/// so many of each a minute, and is told when to come back.
#[tokio::test]
async fn one_address_is_held_to_its_attempts_and_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("limits.db").display());
    let config = format!(
        "admin:\n  key: {ADMIN_KEY}\nsecret: {SECRET}\nwebhooks:\n  enabled: false\nportal:\n  attempts_per_address: 3\n  reads_per_address: 4\n"
    );
    let db = Db::start(tmp.path(), &store, &config, ADMIN_KEY).await;
    let org = send(db.http.get(db.url("/portal/api/instance"))).await.1["org_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut caller = Browser::new(&db, &org);
    caller.get("/session").await;
    let body = json!({"email": "x@example.com", "password": PASSWORD});
    for _ in 0..3 {
        assert_eq!(caller.post("/signin", body.clone()).await.0, 401);
    }
    let refused = caller.post("/signup", body.clone()).await;
    assert_error(&refused, 429, "too many attempts");
    for _ in 0..4 {
        assert_eq!(caller.get("/products").await.0, 200);
    }
    assert_error(&caller.get("/products").await, 429, "too many attempts");
    db.stop().await;
}

/// A developer's apps and subscriptions each look hosts up and write the store: making
/// and deleting them in a loop is held to a rate, bad requests included.
#[tokio::test]
async fn a_developer_is_held_to_their_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("writes.db").display());
    let config = format!(
        "admin:\n  key: {ADMIN_KEY}\nsecret: {SECRET}\nwebhooks:\n  enabled: false\nportal:\n  attempts_per_address: 100\n"
    );
    let db = Db::start(tmp.path(), &store, &config, ADMIN_KEY).await;
    let made = send(db.req(Method::POST, "/api/portal/products").json(&json!({
        "name": "P", "published": true, "webhooks": {"enabled": true, "events": ["e"]}
    })))
    .await;
    let product = made.1["ID"].as_str().unwrap().to_owned();
    let opened = send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "open"})),
    )
    .await;
    assert_eq!(opened.0, 200);
    let org = send(db.http.get(db.url("/portal/api/instance"))).await.1["org_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut dev = Browser::new(&db, &org);
    assert_eq!(dev.sign_up("w@example.com", json!({})).await.0, 201);
    let (status, app) = dev
        .post("/apps", json!({"name": "A", "product_id": product}))
        .await;
    assert_eq!(status, 201, "{app}");
    let id = app["app"]["id"].as_str().unwrap().to_owned();
    let path = format!("/apps/{id}/subscriptions");
    let bad = json!({"url": "http://127.0.0.1:9/h", "events": []});
    for _ in 0..20 {
        assert_eq!(dev.post(&path, bad.clone()).await.0, 400);
    }
    assert_error(&dev.post(&path, bad).await, 429, "too many attempts");
    for _ in 0..19 {
        assert_eq!(dev.post("/apps", json!({"name": ""})).await.0, 400);
    }
    assert_error(
        &dev.post("/apps", json!({"name": "B", "product_id": product}))
            .await,
        429,
        "too many attempts",
    );
    db.stop().await;
}

/// A product of webhooks only: its apps get no key (one would reach nothing), and its
/// keys go when its last API leaves it, instead of the write failing half done.
#[tokio::test]
async fn a_product_without_apis_issues_no_key_and_takes_its_keys_back() {
    let tmp = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", tmp.path().join("nokey.db").display());
    let config =
        format!("admin:\n  key: {ADMIN_KEY}\nsecret: {SECRET}\nwebhooks:\n  enabled: false\n");
    let db = Db::start(tmp.path(), &store, &config, ADMIN_KEY).await;
    assert_eq!(
        send(
            db.req(Method::POST, "/api/apis/oas")
                .json(&plain_api("pets"))
        )
        .await
        .0,
        201
    );
    let product = |apis: &[&str]| json!({"name": "P", "published": true, "api_ids": apis});
    let made = send(
        db.req(Method::POST, "/api/portal/products")
            .json(&product(&[])),
    )
    .await;
    let id = made.1["ID"].as_str().unwrap().to_owned();
    send(
        db.req(Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "open"})),
    )
    .await;
    let org = send(db.http.get(db.url("/portal/api/instance"))).await.1["org_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut dev = Browser::new(&db, &org);
    assert_eq!(dev.sign_up("n@example.com", json!({})).await.0, 201);
    let (status, app) = dev
        .post("/apps", json!({"name": "A", "product_id": id}))
        .await;
    assert_eq!(status, 201, "{app}");
    assert_eq!(app["key"], Value::Null, "{app}");
    let app_id = app["app"]["id"].as_str().unwrap().to_owned();
    assert_error(
        &dev.post(&format!("/apps/{app_id}/key"), json!({})).await,
        409,
        "no API",
    );
    // With an API it issues one; without it again, the key goes and the write succeeds.
    let put = |apis: &[&str]| {
        db.req(Method::PUT, &format!("/api/portal/products/{id}"))
            .json(&product(apis))
    };
    assert_eq!(send(put(&["pets"])).await.0, 200);
    let (status, key) = dev.post(&format!("/apps/{app_id}/key"), json!({})).await;
    assert_eq!(status, 201, "{key}");
    let key_id = key["key_id"].as_str().unwrap().to_owned();
    assert!(gateway_key(&db, &key_id).await.is_some());
    assert_eq!(send(put(&[])).await.0, 200);
    assert!(gateway_key(&db, &key_id).await.is_none());
    db.stop().await;
}

/// The dashboard secret of the `sluice serve` tests below: reset tokens travel sealed.
const SERVE_SECRET: &str = "portal-reset-sealing-secret";

/// A `sluice serve` whose dashboard seals with [`SERVE_SECRET`] and may reach the tests'
/// receivers on loopback; its instance organisation's id; and a member's key there.
async fn serve_with_member() -> (Serve, String, String) {
    let serve = Serve::start(&[
        ("SLUICE_DB_SECRET", SERVE_SECRET),
        ("SLUICE_DB_STREAMING_EGRESS_ALLOW", "[127.0.0.1]"),
    ])
    .await;
    let (_, instance) = send(
        serve
            .http
            .get(format!("http://127.0.0.1:{}/portal/api/instance", serve.db)),
    )
    .await;
    let org = instance["org_id"].as_str().unwrap().to_owned();
    let member = send(
        serve
            .api(SERVE_ADMIN_KEY, Method::POST, "/api/users")
            .json(&json!({"name": "dev", "role": "member"})),
    )
    .await;
    assert_eq!(member.0, 201, "{}", member.1);
    let key = member.1["key"].as_str().unwrap().to_owned();
    (serve, org, key)
}

/// A webhook made by the admin of `serve` to `url`: its database id.
async fn admin_hook(serve: &Serve, name: &str, url: &str) -> String {
    let hook = send(
        serve
            .api(SERVE_ADMIN_KEY, Method::POST, "/api/hooks")
            .json(&json!({"name": name, "method": "POST", "target_path": url})),
    )
    .await;
    assert_eq!(hook.0, 201, "{}", hook.1);
    hook.1["Meta"].as_str().unwrap().to_owned()
}

/// Who sets the sign-up mode decides who gets in, and who names the reset webhook (or
/// points it elsewhere) receives every developer's reset token: a member may do neither,
/// and what they tried leaves the settings as they were.
#[tokio::test]
async fn a_member_changes_neither_the_portal_settings_nor_its_reset_webhook() {
    let (serve, _org, member) = serve_with_member().await;
    let resets = admin_hook(&serve, "resets", "http://127.0.0.1:9/resets").await;
    let theirs = admin_hook(&serve, "theirs", "http://127.0.0.1:9/theirs").await;
    let settings = json!({"signup": "invite", "reset_webhook": resets});
    let set = send(
        serve
            .api(SERVE_ADMIN_KEY, Method::PUT, "/api/portal/settings")
            .json(&settings),
    )
    .await;
    assert_eq!(set.0, 200, "{}", set.1);

    for attempt in [
        json!({"signup": "open", "reset_webhook": resets}),
        json!({"signup": "invite", "reset_webhook": theirs}),
        json!({"signup": "invite"}),
    ] {
        let refused = send(
            serve
                .api(&member, Method::PUT, "/api/portal/settings")
                .json(&attempt),
        )
        .await;
        assert_error(&refused, 403, "only an admin");
        assert_error(&refused, 403, "portal's settings");
    }
    let (status, now) = send(serve.api(&member, Method::GET, "/api/portal/settings")).await;
    assert_eq!(status, 200, "{now}");
    assert_eq!(now, settings);

    // The reset webhook itself: pointing it at the member's own receiver, or deleting it
    // (and making another under its id), would hand them the tokens.
    let path = format!("/api/hooks/{resets}");
    let retarget = json!({"method": "POST", "target_path": "http://127.0.0.1:9/mine"});
    assert_error(
        &send(serve.api(&member, Method::PUT, &path).json(&retarget)).await,
        403,
        "reset tokens",
    );
    assert_error(
        &send(serve.api(&member, Method::DELETE, &path)).await,
        403,
        "reset tokens",
    );
    let (_, hook) = send(serve.api(SERVE_ADMIN_KEY, Method::GET, &path)).await;
    assert_eq!(hook["target_path"], "http://127.0.0.1:9/resets", "{hook}");
    // Other webhooks stay the members'.
    let other = format!("/api/hooks/{theirs}");
    assert_eq!(
        send(serve.api(&member, Method::PUT, &other).json(&retarget))
            .await
            .0,
        200
    );
    // An admin may do all of it.
    assert_eq!(
        send(
            serve
                .api(SERVE_ADMIN_KEY, Method::PUT, "/api/portal/settings")
                .json(&json!({"signup": "open"})),
        )
        .await
        .0,
        200
    );
}

/// A developer's reset token reaches the reset webhook's receiver, and works there; the
/// delivery log, as an admin and as a member read it, never holds it, nor does the
/// delivery's stored row in the clear.
#[tokio::test]
async fn a_reset_token_reaches_its_receiver_and_no_dashboard_user() {
    let receiver = Receiver::start(&[], 200).await;
    let (serve, org, member) = serve_with_member().await;
    let resets = admin_hook(&serve, "resets", &receiver.url("/resets")).await;
    let set = send(
        serve
            .api(SERVE_ADMIN_KEY, Method::PUT, "/api/portal/settings")
            .json(&json!({"signup": "open", "reset_webhook": resets})),
    )
    .await;
    assert_eq!(set.0, 200, "{}", set.1);

    let mut dev = Browser::at(&serve.http, serve.db, &org);
    assert_eq!(dev.sign_up("dana@example.com", json!({})).await.0, 201);
    let mut forgot = Browser::at(&serve.http, serve.db, &org);
    forgot.get("/session").await;
    let (status, _) = forgot
        .post("/password-reset", json!({"email": "dana@example.com"}))
        .await;
    assert_eq!(status, 202);

    let got = receiver.wait_for(1, common::DEADLINE).await;
    assert_eq!(got[0].path, "/resets");
    assert_eq!(
        got[0].header(sign::EVENT_HEADER),
        Some("portal.password_reset")
    );
    let sent: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(sent["email"], "dana@example.com");
    let token = sent["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("sk_"), "{sent}");

    for key in [SERVE_ADMIN_KEY, member.as_str()] {
        let (status, list) = send(serve.api(key, Method::GET, "/api/deliveries")).await;
        assert_eq!(status, 200, "{list}");
        let reset = list["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["event"] == "portal.password_reset")
            .unwrap_or_else(|| panic!("no reset delivery: {list}"))
            .clone();
        let shown: Value = serde_json::from_str(reset["body"].as_str().unwrap()).unwrap();
        assert_eq!(shown["email"], "dana@example.com");
        assert_eq!(shown["token"], "[redacted]");
        let path = format!("/api/deliveries/{}", reset["id"].as_str().unwrap());
        let (status, one) = send(serve.api(key, Method::GET, &path)).await;
        assert_eq!(status, 200, "{one}");
        for answer in [&list, &one] {
            assert!(!answer.to_string().contains(&token), "{answer}");
        }
    }
    // At rest, the delivery holds the token only sealed.
    let store = serve.store().await;
    let (rows, _) = store
        .list_deliveries(&org, None, sluice::store::Page::ALL)
        .await
        .unwrap();
    for row in &rows {
        let text = format!("{row:?} {}", String::from_utf8_lossy(&row.body));
        assert!(!text.contains(&token), "{text}");
    }

    // The token the receiver got sets a new password, once.
    let new_password = "a receiver-delivered passphrase";
    let (status, answer) = forgot
        .post(
            "/password-reset/confirm",
            json!({"token": token, "password": new_password}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) = forgot
        .post(
            "/signin",
            json!({"email": "dana@example.com", "password": new_password}),
        )
        .await;
    assert_eq!(status, 200);
}
