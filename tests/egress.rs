//! Streams posted to the dashboard reach only what `streaming.egress` allows, through
//! `sluice serve`, with a real loopback service standing in for what the host keeps
//! private: refused when posted (dry run or not) for addresses the document names, and
//! refused when connecting for addresses a message names.

use std::time::Duration;

use serde_json::Value;

use crate::common;

use common::receiver::Receiver;
use common::serve::{Serve, ADMIN_KEY};

const STREAMS: &str = "application/vnd.sluice.streams.oas";

impl Serve {
    /// Posts a streaming API whose one stream is `stream` (YAML, indented by six).
    async fn post_stream(&self, id: &str, stream: &str, dry_run: bool) -> (u16, Value) {
        let doc = format!(
            "openapi: 3.0.3\ninfo: {{title: {id}, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: {id}, name: {id}}}\n  server: {{listenPath: {{value: /{id}/, strip: true}}}}\nx-sluice-streaming:\n  streams:\n    main:\n{stream}"
        );
        let query = if dry_run { "?dry_run=true" } else { "" };
        let resp = self
            .http
            .post(format!(
                "http://127.0.0.1:{}/api/apis/streams{query}",
                self.db
            ))
            .header("authorization", ADMIN_KEY)
            .header("content-type", STREAMS)
            .body(doc)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// `sluice serve` whose dashboard and gateway both allow `allow` (a YAML list).
    async fn allowing(allow: &str) -> Serve {
        Serve::start(&[
            ("SLUICE_DB_STREAMING_EGRESS_ALLOW", allow),
            ("SLUICE_GW_STREAMING_EGRESS_ALLOW", allow),
        ])
        .await
    }

    /// The answer to the gateway request `req` makes once the gateway serves its API
    /// (it loads what the dashboard stored within moments): the first that is not 404.
    async fn served(
        &self,
        req: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> reqwest::Response {
        for _ in 0..200 {
            let resp = req(&self.http).send().await.unwrap();
            if resp.status() != 404 {
                return resp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the API was never served");
    }

    /// What the fetching stream of `id` answers for `url`: the fetched body, or the
    /// error of the fetch.
    async fn fetch(&self, id: &str, url: &str) -> String {
        let gateway = format!("http://127.0.0.1:{}/{id}/fetch", self.gw);
        let resp = self
            .served(|http| http.post(&gateway).body(url.to_owned()))
            .await;
        resp.text().await.unwrap()
    }
}

/// A stream that fetches the URL each request posts and answers with the body, or with
/// `refused: <error>` when the fetch failed.
const FETCH: &str = r#"      input:
        http_server: {path: /fetch, sync_response: {}}
      pipeline:
        processors:
          - http: {url: '${! content() }', verb: GET, retries: 0}
          - mapping: 'root = if errored() { "refused: " + error() } else { content().string() }'
      output:
        drop: {}
"#;

fn problem_paths(body: &Value) -> Vec<String> {
    body["Errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn posted_streams_are_refused_the_hosts_private_addresses() {
    let serve = Serve::start(&[]).await;
    let secret = Receiver::start(&[], 200).await;
    let input = |url: &str| {
        format!("      input:\n        http_client: {{url: '{url}', verb: GET}}\n      output:\n        drop: {{}}\n")
    };
    let refused = [
        // The dashboard itself, the gateway's own API, cloud metadata, a loopback
        // service by name (refused once resolved), an unspecified address.
        (
            input(&format!(
                "http://127.0.0.1:{}/api/openapi.json",
                serve.db
            )),
            "x-sluice-streaming.streams.main.input.http_client",
        ),
        (
            input(&format!("http://127.0.0.1:{}/anything", serve.gw)),
            "x-sluice-streaming.streams.main.input.http_client",
        ),
        (
            input(&format!(
                "http://127.0.0.1:{}/sluice/keys",
                serve.control
            )),
            "x-sluice-streaming.streams.main.input.http_client",
        ),
        (
            input("http://169.254.169.254/latest/meta-data/"),
            "x-sluice-streaming.streams.main.input.http_client",
        ),
        (
            input(&format!("http://localhost:{}/secret", secret.addr.port())),
            "x-sluice-streaming.streams.main.input.http_client",
        ),
        (
            input("http://0.0.0.0:6379/"),
            "x-sluice-streaming.streams.main.input.http_client",
        ),
        // Brokers on the host: internal Redis, the host's NATS.
        (
            "      input:\n        redis_pubsub: {url: 'redis://127.0.0.1:6379', channels: [x]}\n      output:\n        drop: {}\n".to_owned(),
            "x-sluice-streaming.streams.main.input.redis_pubsub",
        ),
        (
            "      input:\n        nats: {urls: ['nats://localhost:4222'], subject: 'orders.>'}\n      output:\n        drop: {}\n".to_owned(),
            "x-sluice-streaming.streams.main.input.nats",
        ),
        (
            "      input:\n        generate: {mapping: 'root = 1', count: 1}\n      output:\n        mqtt: {urls: ['tcp://127.0.0.2:1883'], topic: t}\n".to_owned(),
            "x-sluice-streaming.streams.main.output.mqtt",
        ),
        // Host files named by a field.
        (
            "      input:\n        nats: {urls: ['nats://203.0.113.5:4222'], subject: a, tls: {enabled: true, root_cas_file: /etc/ssl/private/ca.pem}}\n      output:\n        drop: {}\n".to_owned(),
            "x-sluice-streaming.streams.main.input.nats.tls.root_cas_file",
        ),
        (
            "      input:\n        nats: {urls: ['nats://203.0.113.5:4222'], subject: a, auth: {user_credentials_file: /root/.nkeys/user.creds}}\n      output:\n        drop: {}\n".to_owned(),
            "x-sluice-streaming.streams.main.input.nats.auth.user_credentials_file",
        ),
        (
            "      input:\n        generate: {mapping: 'root = 1', count: 1}\n      output:\n        kafka: {addresses: ['203.0.113.5:9092'], topic: t, tls: {enabled: true, client_cert_file: /etc/c.pem, client_key_file: /etc/k.pem}}\n".to_owned(),
            "x-sluice-streaming.streams.main.output.kafka.tls.client_cert_file",
        ),
    ];
    for (i, (stream, path)) in refused.iter().enumerate() {
        for dry_run in [true, false] {
            let (status, body) = serve.post_stream(&format!("r{i}"), stream, dry_run).await;
            assert_eq!(status, 422, "{stream}: {body}");
            assert_eq!(body["Status"], "Error", "{body}");
            assert!(
                problem_paths(&body).iter().any(|p| p == path),
                "{stream}: no problem at {path}: {body}"
            );
        }
    }
    let (_, body) = serve.post_stream("r", &refused[4].0, true).await;
    let message = body["Message"].as_str().unwrap_or_default();
    assert!(
        message.contains("a loopback address") && message.contains("streaming.egress.allow"),
        "{message}"
    );

    // An address only a message names is refused when the stream connects: the loopback
    // service is never called and its answer never comes back.
    let (status, body) = serve.post_stream("fetcher", FETCH, false).await;
    assert_eq!(status, 201, "{body}");
    for url in [
        secret.url("/secret"),
        format!("http://localhost:{}/secret", secret.addr.port()),
        format!("http://127.0.0.1:{}/api/openapi.json", serve.db),
        "http://[::ffff:127.0.0.1]:6379/".to_owned(),
    ] {
        let answer = serve.fetch("fetcher", &url).await;
        assert!(
            answer.starts_with("refused: ") && answer.contains("streaming.egress.allow"),
            "{url}: {answer}"
        );
        assert!(
            !answer.contains("noted") && !answer.contains("openapi"),
            "{answer}"
        );
    }
    assert!(
        secret.received().is_empty(),
        "the loopback service was called"
    );
}

#[tokio::test]
async fn the_operator_allows_hosts_explicitly_but_not_the_servers_own_listeners() {
    let serve = Serve::allowing("[127.0.0.1]").await;
    let upstream = Receiver::start(&[], 200).await;
    let (status, body) = serve.post_stream("fetcher", FETCH, false).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        serve.fetch("fetcher", &upstream.url("/data")).await,
        "noted"
    );
    assert_eq!(upstream.received().len(), 1);
    // Allowed by name too: `localhost` keeps its allowed address.
    let by_name = format!("http://localhost:{}/data", upstream.addr.port());
    assert_eq!(serve.fetch("fetcher", &by_name).await, "noted");
    // The dashboard and the gateway stay out of reach on the allowed address.
    for port in [serve.db, serve.gw] {
        let url = format!("http://127.0.0.1:{port}/api/openapi.json");
        let answer = serve.fetch("fetcher", &url).await;
        assert!(answer.contains("own listener"), "{answer}");
        let (status, body) = serve.post_stream(
                "own",
                &format!("      input:\n        http_client: {{url: '{url}', verb: GET}}\n      output:\n        drop: {{}}\n"),
                true,
            )
            .await;
        assert_eq!(status, 422, "{body}");
    }
    // Link-local stays refused: only 127.0.0.1 was allowed.
    let answer = serve
        .fetch("fetcher", "http://169.254.169.254/latest/meta-data/")
        .await;
    assert!(answer.contains("cloud metadata"), "{answer}");
}

impl Serve {
    /// Posts a plain API (no streams) whose upstream is `upstream`.
    async fn post_upstream(&self, id: &str, upstream: &str, jwks: Option<&str>) -> (u16, Value) {
        let mut doc = serde_json::json!({
            "openapi": "3.0.3", "info": {"title": id, "version": "1"}, "paths": {},
            "x-sluice-api-gateway": {
                "info": {"id": id, "name": id},
                "upstream": {"url": upstream},
                "server": {"listenPath": {"value": format!("/{id}/"), "strip": true}}
            }
        });
        if let Some(jwks) = jwks {
            doc["components"] = serde_json::json!({"securitySchemes": {"jwt": {"type": "http", "scheme": "bearer"}}});
            doc["security"] = serde_json::json!([{"jwt": []}]);
            doc["x-sluice-api-gateway"]["server"]["authentication"] = serde_json::json!({
                "enabled": true,
                "securitySchemes": {"jwt": {"enabled": true, "signingMethod": "RS256", "jwksUri": jwks}}
            });
        }
        self.post_oas(&doc).await
    }

    /// Posts a plain API document as the instance's admin.
    async fn post_oas(&self, doc: &Value) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("http://127.0.0.1:{}/api/apis/oas", self.db))
            .header("authorization", ADMIN_KEY)
            .json(doc)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test]
async fn redirects_and_names_cannot_get_around_the_policy() {
    // The host's private service, and a redirector: the only thing posted streams may
    // reach.
    let secret = Receiver::start(&[], 200).await;
    let redirector = Receiver::start(&[], 302).await;
    let allow = format!("[127.0.0.1:{}]", redirector.addr.port());
    let serve = Serve::allowing(&allow).await;
    let (status, body) = serve.post_stream("fetcher", FETCH, false).await;
    assert_eq!(status, 201, "{body}");
    // The `http` processor: a 302 to a name or an address it may not reach, the
    // gateway's control port and the dashboard among them.
    for target in [
        format!("http://localhost:{}/secret", secret.addr.port()),
        format!("http://127.0.0.1:{}/secret", secret.addr.port()),
        format!("http://[::1]:{}/secret", secret.addr.port()),
        format!("http://localhost:{}/sluice/keys", serve.control),
        format!("http://localhost:{}/api/openapi.json", serve.db),
        format!("http://localhost:{}/anything", serve.gw),
    ] {
        redirector.redirect_to(&target);
        let answer = serve.fetch("fetcher", &redirector.url("/hop")).await;
        assert!(answer.starts_with("refused: "), "{target}: {answer}");
        assert!(!answer.contains("noted"), "{target}: {answer}");
    }
    assert!(
        secret.received().is_empty(),
        "the private service was called"
    );

    // An output: a 307 would send the body again, to the private service.
    redirector.answer(307);
    redirector.redirect_to(&format!("http://localhost:{}/stolen", secret.addr.port()));
    let output = format!(
        "      input:\n        http_server: {{path: /send}}\n      output:\n        http_client: {{url: '{}', verb: POST, retries: 0}}\n",
        redirector.url("/out")
    );
    let (status, body) = serve.post_stream("sender", &output, false).await;
    assert_eq!(status, 201, "{body}");
    let before = redirector.received().len();
    let gateway = format!("http://127.0.0.1:{}/sender/send", serve.gw);
    let answered = serve
        .served(|http| http.post(&gateway).body("the body"))
        .await
        .status()
        .as_u16();
    assert_ne!(
        answered, 200,
        "the producer was told the message was delivered"
    );
    redirector.wait_for(before + 1, common::DEADLINE).await;

    // An input: it polls the redirector, which sends it to the private service.
    redirector.answer(302);
    redirector.redirect_to(&format!("http://localhost:{}/polled", secret.addr.port()));
    let input = format!(
        "      input:\n        http_client: {{url: '{}', verb: GET, retries: 0}}\n      output:\n        drop: {{}}\n",
        redirector.url("/in")
    );
    let before = redirector.received().len();
    let (status, body) = serve.post_stream("poller", &input, false).await;
    assert_eq!(status, 201, "{body}");
    redirector.wait_for(before + 2, common::DEADLINE).await;
    assert!(
        secret.received().is_empty(),
        "a redirect reached the private service: {:?}",
        secret.received()
    );
}

#[tokio::test]
async fn a_posted_apis_upstream_and_jwks_follow_the_policy() {
    let secret = Receiver::start(&[], 200).await;
    let allowed = Receiver::start(&[], 200).await;
    let allow = format!("[127.0.0.1:{}]", allowed.addr.port());
    let serve = Serve::allowing(&allow).await;
    for (i, upstream) in [
        // The control port: every organisation's API ids, the gateway secret's lockout.
        format!("http://127.0.0.1:{}", serve.control),
        format!("http://localhost:{}", serve.control),
        format!("http://127.0.0.1:{}", serve.db),
        format!("http://[::1]:{}", secret.addr.port()),
        format!("http://localhost:{}", secret.addr.port()),
        "http://169.254.169.254/latest".to_owned(),
        "http://[fd00:ec2::254]".to_owned(),
        "http://0.0.0.0:6379".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let (status, body) = serve.post_upstream(&format!("u{i}"), upstream, None).await;
        assert_eq!(status, 422, "{upstream}: {body}");
        assert!(
            problem_paths(&body)
                .iter()
                .any(|p| p == "x-sluice-api-gateway.upstream.url"),
            "{upstream}: {body}"
        );
    }
    // A JWKS on the host's private service is refused the same way.
    let (status, body) = serve
        .post_upstream(
            "jwks",
            &allowed.url(""),
            Some(&format!(
                "http://localhost:{}/jwks.json",
                secret.addr.port()
            )),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        problem_paths(&body)
            .iter()
            .any(|p| p.ends_with("securitySchemes.jwt.jwksUri")),
        "{body}"
    );
    // An event handler's literal address is refused when posted.
    let mut doc = serde_json::json!({
        "openapi": "3.0.3", "info": {"title": "h", "version": "1"}, "paths": {},
        "x-sluice-api-gateway": {
            "info": {"id": "hooked", "name": "hooked"},
            "upstream": {"url": allowed.url("")},
            "server": {"listenPath": {"value": "/hooked/", "strip": true}}
        }
    });
    doc["x-sluice-api-gateway"]["server"]["eventHandlers"] = serde_json::json!([{
        "events": ["auth_failure"],
        "targetPath": format!("http://127.0.0.1:{}/sluice/keys", serve.control)
    }]);
    let (status, body) = serve.post_oas(&doc).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        problem_paths(&body)
            .iter()
            .any(|p| p.ends_with("eventHandlers.0.targetPath")),
        "{body}"
    );
    // What the policy allows is proxied.
    let (status, body) = serve.post_upstream("ok", &allowed.url(""), None).await;
    assert_eq!(status, 201, "{body}");
    let url = format!("http://127.0.0.1:{}/ok/data", serve.gw);
    assert_eq!(serve.served(|http| http.get(&url)).await.status(), 200);
    assert!(secret.received().is_empty());
}
