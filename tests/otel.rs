//! Traces over OTLP, read by a real receiver: the collector here serves OTLP/HTTP and
//! OTLP/gRPC on one port and decodes the protobuf the processes send, and the tests check
//! which span is whose parent: through the gateway's steps to its upstream, and from a
//! producer through NATS to an SSE consumer in another process.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use serde_json::json;

use crate::common::harness::{api, Gw};
use crate::common::receiver::Receiver;
use crate::common::streams::Sse;
use crate::common::Sluice;

/// One span as the collector received it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    name: String,
    trace: String,
    span: String,
    /// Empty for a root span.
    parent: String,
    kind: i32,
    /// How it reached the collector: `grpc` or `http`.
    via: &'static str,
}

/// OTLP span kinds.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const PRODUCER: i32 = 4;
const CONSUMER: i32 = 5;

/// An OTLP receiver on loopback.
struct Collector {
    port: u16,
    spans: Arc<Mutex<Vec<Got>>>,
}

const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let kept = kept.clone();
                        async move { Ok::<_, Infallible>(answer(req, &kept).await) }
                    });
                    // HTTP/1.1 for OTLP/HTTP, HTTP/2 without TLS for gRPC.
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Collector { port, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment that points a process at this collector over `protocol`.
    fn env(&self, protocol: &str, service: &str) -> Vec<(&'static str, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            // Exported at once rather than every five seconds.
            ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
        ]
    }

    /// Waits until a span of `service` called `name` in `trace` has come; returns it.
    async fn wait_for(&self, service: &str, name: &str, trace: Option<&str>) -> Got {
        let start = Instant::now();
        loop {
            let found = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .find(|s| {
                    s.service == service && s.name == name && trace.is_none_or(|t| s.trace == t)
                })
                .cloned();
            if let Some(found) = found {
                return found;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no span {name} of {service} in trace {trace:?}; got {:#?}",
                self.spans.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn children_of(&self, parent: &Got) -> Vec<Got> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.parent == parent.span && s.trace == parent.trace)
            .cloned()
            .collect()
    }
}

/// Answers one export, keeping its spans.
async fn answer(
    req: Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Got>>,
) -> Response<BoxBody<Bytes, Infallible>> {
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let (message, via) = if path == GRPC_EXPORT {
        // A gRPC message: one byte saying it is not compressed, four of length, the message.
        assert_eq!(body[0], 0, "an uncompressed gRPC message");
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        (body.slice(5..5 + len), "grpc")
    } else {
        assert_eq!(path, "/v1/traces");
        (body, "http")
    };
    let request = ExportTraceServiceRequest::decode(message).expect("an OTLP export request");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|a| a.key == "service.name")
            .and_then(|a| a.value.as_ref())
            .and_then(|v| match &v.value {
                Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => {
                    Some(s.clone())
                }
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                kept.lock().unwrap().push(Got {
                    service: service.clone(),
                    name: s.name,
                    trace: hex(&s.trace_id),
                    span: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    kind: s.kind,
                    via,
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse, as each protocol frames it.
    if via == "grpc" {
        let frames = vec![
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
            Ok(Frame::trailers({
                let mut t = http::HeaderMap::new();
                t.insert("grpc-status", "0".parse().unwrap());
                t
            })),
        ];
        Response::builder()
            .header("content-type", "application/grpc")
            .body(StreamBody::new(futures::stream::iter(frames)).boxed())
            .unwrap()
    } else {
        Response::builder()
            .header("content-type", "application/x-protobuf")
            .body(http_body_util::Full::new(Bytes::new()).boxed())
            .unwrap()
    }
}

/// A trace id and span id a client could have made.
fn client_context() -> (String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    (id, "00f067aa0ba902b7".to_owned())
}

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

#[tokio::test]
async fn a_gateway_request_is_a_span_with_its_steps_and_the_upstream_as_children() {
    let collector = Collector::start().await;
    let upstream = Receiver::start(&[], 200).await;
    let tmp = tempfile::tempdir().unwrap();
    let gw = Gw::start_in(
        tmp.path().to_path_buf(),
        None,
        &[(
            "traced.yaml",
            api("traced", "/traced", &upstream.url(""), KEY_AUTH),
        )],
        "",
        &collector.env("grpc", "edge"),
    )
    .await;
    let key = gw
        .create_key(json!({"access_rights": {"traced": {}}}))
        .await;
    let token = key["key"].as_str().unwrap();
    let (trace, client_span) = client_context();
    let r = gw
        .http
        .get(gw.url("/traced/items"))
        .header("x-api-key", token)
        .header("traceparent", format!("00-{trace}-{client_span}-01"))
        .header("tracestate", "vendor=kept")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let server = collector.wait_for("edge", "GET traced", Some(&trace)).await;
    assert_eq!(
        server.parent, client_span,
        "the client's span is the parent"
    );
    assert_eq!((server.kind, server.via), (SERVER, "grpc"));
    let up = collector.wait_for("edge", "upstream", Some(&trace)).await;
    assert_eq!(up.parent, server.span);
    assert_eq!(up.kind, CLIENT);
    for step in ["auth", "key_checks", "key_limits"] {
        let s = collector.wait_for("edge", step, Some(&trace)).await;
        assert_eq!(s.parent, server.span, "{step}");
    }
    // The upstream continues the trace from the upstream span, with the client's state.
    let got = upstream.received();
    let sent = got.last().expect("the upstream was reached");
    assert_eq!(
        sent.header("traceparent"),
        Some(format!("00-{trace}-{}-01", up.span).as_str())
    );
    assert_eq!(sent.header("tracestate"), Some("vendor=kept"));

    // A request without a trace context starts a trace; a refused one is a span too,
    // with the step that refused it and no upstream.
    let r = gw.http.get(gw.url("/traced/none")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let start = Instant::now();
    let root = loop {
        let root = collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.name == "GET traced" && s.parent.is_empty())
            .cloned();
        if let Some(root) = root {
            break root;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no root span");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(root.trace, trace);
    collector.wait_for("edge", "auth", Some(&root.trace)).await;
    let children = collector.children_of(&root);
    assert!(
        children.iter().any(|c| c.name == "auth") && children.iter().all(|c| c.name != "upstream"),
        "{children:#?}"
    );

    // A context that is not one is not taken: the request starts a trace, and the
    // upstream gets the gateway's context and no state.
    let before = upstream.received().len();
    let r = gw
        .http
        .get(gw.url("/traced/forged"))
        .header("x-api-key", token)
        .header("traceparent", format!("00-{trace}-{}-01", "z".repeat(16)))
        .header("tracestate", "vendor=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = upstream.received();
    let sent = &got[before];
    let parent = sent.header("traceparent").expect("a trace context");
    assert!(
        !parent.contains(&trace) && crate::common::is_traceparent(parent),
        "{parent}"
    );
    assert_eq!(sent.header("tracestate"), None);
}

#[tokio::test]
async fn a_message_is_traced_from_the_producer_through_nats_to_an_sse_client() {
    let collector = Collector::start().await;
    let subject = format!("otel_{}", uuid::Uuid::new_v4().simple());
    // The consumer: NATS to server-sent events, exporting over gRPC.
    let consumer = Sluice::start_env(
        &format!(
            "http:\n  address: 127.0.0.1:{{port}}\nlogger:\n  level: warn\nshutdown_timeout: 1s\ninput:\n  label: from_nats\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: {subject}\noutput:\n  label: to_clients\n  http_server:\n    stream_path: /events\n"
        ),
        &collector.env("grpc", "consumer"),
    )
    .await;
    // The producer: HTTP to NATS through a mapping, exporting over OTLP/HTTP.
    let producer = Sluice::start_env(
        &format!(
            "http:\n  address: 127.0.0.1:{{port}}\nlogger:\n  level: warn\nshutdown_timeout: 1s\ninput:\n  label: posted\n  http_server:\n    path: /publish\npipeline:\n  processors:\n    - label: shape\n      mapping: root = content().string().uppercase()\noutput:\n  label: to_nats\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: {subject}\n"
        ),
        &collector.env("http/protobuf", "producer"),
    )
    .await;
    producer.wait_up().await;
    let client = reqwest::Client::new();
    let events = consumer.url("/events");
    let start = Instant::now();
    let resp = loop {
        match client.get(&events).send().await {
            Ok(r) if r.status() == 200 => break r,
            _ => {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "the consumer is not up"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let mut sse = Sse::of(resp);
    // The consumer's subscription is made in the background: post until a message comes.
    let (trace, client_span) = client_context();
    let data = loop {
        let r = client
            .post(producer.url("/publish"))
            .header("traceparent", format!("00-{trace}-{client_span}-01"))
            .body("hello")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        if let Some(data) = sse.next(Duration::from_millis(500)).await {
            break data;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no event came");
    };
    assert_eq!(data, "HELLO");

    let received = collector
        .wait_for("producer", "receive posted", Some(&trace))
        .await;
    assert_eq!(received.parent, client_span);
    assert_eq!((received.kind, received.via), (CONSUMER, "http"));
    let shaped = collector
        .wait_for("producer", "process shape", Some(&trace))
        .await;
    assert_eq!(shaped.parent, received.span);
    let sent = collector
        .wait_for("producer", "send to_nats", Some(&trace))
        .await;
    assert_eq!(
        (sent.parent.as_str(), sent.kind),
        (received.span.as_str(), PRODUCER)
    );
    // The consumer's spans continue the producer's trace, from its send.
    let taken = collector
        .wait_for("consumer", "receive from_nats", Some(&trace))
        .await;
    assert_eq!(
        taken.parent, sent.span,
        "the consumer's receive is a child of the send"
    );
    assert_eq!(taken.via, "grpc");
    let delivered = collector
        .wait_for("consumer", "send to_clients", Some(&trace))
        .await;
    assert_eq!(delivered.parent, taken.span);
    drop(consumer);
}

#[tokio::test]
async fn bad_trace_settings_stop_the_start_with_the_variable_named() {
    let mut s = Sluice::start_env(
        "input:\n  generate:\n    count: 1\n    mapping: root = 1\noutput:\n  drop: {}\n",
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://127.0.0.1:1".to_owned(),
            ),
            ("OTEL_TRACES_SAMPLER", "sometimes".to_owned()),
        ],
    )
    .await;
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("OTEL_TRACES_SAMPLER: `sometimes`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_organisations_streams_make_spans_at_its_rate_however_fast_they_make_messages() {
    const RATE: usize = 20;
    let collector = Collector::start().await;
    let mut env = collector.env("http/protobuf", "tenant");
    env.push(("SLUICE_TRACES_ORG_SPANS_PER_SECOND", RATE.to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let serve = crate::common::serve::Serve::start(&env).await;
    let doc = "openapi: 3.0.3\ninfo: {title: flood, version: '1'}\npaths: {}\n\
               x-sluice-api-gateway:\n  info: {id: flood, name: flood}\n  \
               server: {listenPath: {value: /flood/, strip: true}}\n\
               x-sluice-streaming:\n  streams:\n    main:\n      \
               input:\n        label: made\n        generate: {mapping: 'root = 1', interval: 0s, batch_size: 10000}\n      \
               pipeline:\n        processors:\n          - label: shape\n            mapping: 'root = this'\n      \
               output:\n        label: gone\n        drop: {}\n";
    let posted_at = Instant::now();
    let resp = serve
        .api(
            crate::common::serve::ADMIN_KEY,
            reqwest::Method::POST,
            "/api/apis/streams",
        )
        .header("content-type", "application/vnd.sluice.streams.oas")
        .body(doc)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let stream_spans = |spans: &[Got]| {
        spans
            .iter()
            .filter(|s| {
                s.service == "tenant"
                    && ["receive made", "process shape", "send gone"].contains(&s.name.as_str())
            })
            .count()
    };
    // The stream runs: its spans come, and the gateway still answers.
    collector.wait_for("tenant", "receive made", None).await;
    let metrics_url = format!("http://127.0.0.1:{}/metrics", serve.control);
    let metrics = &metrics_url;
    let dropped = || async move {
        let text = reqwest::get(metrics).await.unwrap().text().await.unwrap();
        text.lines()
            .find(|l| l.starts_with("sluice_trace_spans_dropped_total{reason=\"rate_limited\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = dropped().await;
    // A few seconds of the stream running flat out.
    let mut rounds = 0;
    while rounds < 30 {
        let ping = serve
            .http
            .get(format!("http://127.0.0.1:{}/ping", serve.gw))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap();
        assert_eq!(ping.status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
        rounds += 1;
    }
    let after = dropped().await;
    // Every span of the stream so far came from its organisation's budget: a second's
    // worth at first, then the rate, over no longer than the test has been running.
    let elapsed = posted_at.elapsed().as_secs_f64();
    let got = stream_spans(&collector.spans.lock().unwrap());
    let most = RATE as f64 * (elapsed + 1.0);
    assert!(
        got as f64 <= most,
        "{got} spans in {elapsed:.1} s, more than {most} at {RATE} a second"
    );
    eprintln!(
        "a posted generate of 10000-message batches at interval 0s: {got} spans in {elapsed:.1} s \
         at {RATE} a second; {after} not made"
    );
    assert!(got > 0);
    assert!(
        after > before && before > 0.0,
        "the spans not made are counted: {before} then {after}"
    );
}
