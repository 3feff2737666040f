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

    /// What the fetching stream of `id` answers for `url`: the fetched body, or the
    /// error of the fetch.
    async fn fetch(&self, id: &str, url: &str) -> String {
        let gateway = format!("http://127.0.0.1:{}/{id}/fetch", self.gw);
        // The gateway serves the API once it loaded it from the store.
        for _ in 0..200 {
            let resp = self
                .http
                .post(&gateway)
                .body(url.to_owned())
                .send()
                .await
                .unwrap();
            if resp.status() != 404 {
                return resp.text().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{gateway} was never served");
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
        // Brokers on the host: internal Redis, every subject of the host's NATS.
        (
            "      input:\n        redis_pubsub: {url: 'redis://127.0.0.1:6379', channels: [x]}\n      output:\n        drop: {}\n".to_owned(),
            "x-sluice-streaming.streams.main.input.redis_pubsub",
        ),
        (
            "      input:\n        nats: {urls: ['nats://localhost:4222'], subject: '>'}\n      output:\n        drop: {}\n".to_owned(),
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
    let allow = "[127.0.0.1]";
    let serve = Serve::start(&[
        ("SLUICE_DB_STREAMING_EGRESS_ALLOW", allow),
        ("SLUICE_GW_STREAMING_EGRESS_ALLOW", allow),
    ])
    .await;
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
