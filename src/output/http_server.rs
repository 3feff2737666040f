//! `http_server` output: the consumer role over HTTP. Up to three routes share one
//! delivery hub, so that round-robin and broadcast span every client of the output:
//!
//! - `path`: a GET answers with the next message (408 when none comes within `timeout`);
//! - `stream_path`: a long-lived response, Server-Sent Events (`event_source`: `id:` on
//!   every event, `event:` from metadata, a `data:` field per line, heartbeat comments) or
//!   one message per line (`raw_bytes`);
//! - `ws_path`: a WebSocket, one frame per message, with ping/pong dead-peer detection.
//!
//! Delivery guarantee: a write returns once a client's connection took the bytes; a failed
//! or stalled client hands the message to the next one, and with none connected the stream
//! waits. SSE clients resume with `Last-Event-ID`, WebSocket clients with
//! `?last_event_id=`, from a bounded replay buffer.
//!
//! Mounted on the server that runs the stream, so it has no address of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::FutureExt;
use http::{header, HeaderValue, Method, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::hub::HubWiring;
use super::websocket_server::{
    default_event_key, default_heartbeat, default_max_in_flight, default_write_timeout,
    WsMessageType, WsOptions, WsRoute,
};
use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Writer};
use crate::config::mapped::MappingText;
use crate::duration::Duration;
use crate::http::cors::CorsConfig;
use crate::http::history::CatchUp;
use crate::http::hub::{
    DeliveryMode, Hub, HubOptions, ReplayConfig, RouteMetrics, Subscription, Transport,
};
use crate::http::outbox::SlowClients;
use crate::http::{self as h, BoxError, HttpRequest, HttpResponse};

/// How `stream_path` frames messages.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StreamFormat {
    /// Server-Sent Events (`text/event-stream`).
    #[default]
    EventSource,
    /// Each message followed by a newline, nothing else.
    RawBytes,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpServerOutputConfig {
    /// Where a GET receives the next message; empty to serve none. The three routes
    /// default to `/get`, `/get/stream` and `/get/ws` only when none of them is written:
    /// an output serves the routes its config names and no others.
    #[serde(default)]
    pub path: Option<String>,
    /// Where clients hold a stream of messages open; empty to serve none.
    #[serde(default)]
    pub stream_path: Option<String>,
    /// Where WebSocket clients connect; empty to serve none.
    #[serde(default)]
    pub ws_path: Option<String>,
    /// Framing of `stream_path`: `event_source` or `raw_bytes`.
    #[serde(default)]
    pub stream_format: StreamFormat,
    /// SSE comment (and WebSocket ping) interval, which also finds dead peers; `0s` is off.
    #[serde(default = "default_heartbeat")]
    pub heartbeat: Duration,
    /// Frame type on `ws_path`: `text` or `binary`.
    #[serde(default)]
    pub ws_message_type: WsMessageType,
    /// Wrap WebSocket messages as `{"id","event","data"}`, so clients learn ids to resume from.
    #[serde(default)]
    pub ws_envelope: bool,
    /// Metadata key whose value becomes the SSE `event:` name.
    #[serde(default = "default_event_key")]
    pub event_metadata: String,
    /// Methods accepted on `path` and `stream_path`; others get 405.
    #[serde(default = "default_verbs")]
    pub allowed_verbs: Vec<String>,
    /// How long a GET on `path` waits for a message before 408.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// `round_robin` (each message to one client) or `broadcast` (to every client).
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// With `broadcast`: the metadata key holding each message's position in its broker
    /// (`nats_sequence_stream` from `nats_jetstream`, `kafka_offset` from a one-partition
    /// Kafka topic, `redis_stream_position` from one Redis stream). It becomes the event
    /// id, the same on every gateway that reads the broker, so a client resumes on any of
    /// them, caught up from the broker past the replay buffer.
    #[serde(default)]
    pub id_metadata: Option<String>,
    /// The buffer that reconnecting clients replay from.
    #[serde(default)]
    pub replay_buffer: ReplayConfig,
    /// With `broadcast`: a check in the mapping language that decides, per client, which
    /// messages it gets; the client is `@caller` (`key_id`, `identity`, `claims`, `meta`,
    /// `query`), e.g. `this.tenant == @caller.claims.tenant`.
    #[serde(default)]
    pub filter: Option<MappingText>,
    /// How long one client may take to write a message before it counts as failed.
    #[serde(default = "default_write_timeout")]
    pub write_timeout: Duration,
    /// What happens to a client that does not read: `hold` the producer (default),
    /// `drop_oldest` or `disconnect` (broadcast only), with the queue bounds.
    #[serde(default)]
    pub slow_clients: SlowClients,
    /// Cross-origin access for browser pages.
    #[serde(default)]
    pub cors: CorsConfig,
    /// Writes in flight at once; 1 keeps messages in order.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    #[serde(default)]
    pub batching: BatchPolicy,
}

impl HttpServerOutputConfig {
    /// `path`, `stream_path` and `ws_path` as served: as written (unwritten ones serve
    /// nothing), or all three defaults when none is written. So a stray GET cannot take a
    /// message meant for the SSE clients, and two outputs of one API do not collide on
    /// routes nobody asked for.
    pub fn routes(&self) -> [String; 3] {
        let written = [&self.path, &self.stream_path, &self.ws_path];
        if written.iter().all(|r| r.is_none()) {
            return ["/get".into(), "/get/stream".into(), "/get/ws".into()];
        }
        written.map(|r| r.clone().unwrap_or_default())
    }
}
fn default_verbs() -> Vec<String> {
    vec!["GET".into()]
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

impl Spec for HttpServerOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "http_server",
        kind: Kind::Output,
        summary: "Serves messages to HTTP clients: GET, Server-Sent Events, raw streams and WebSocket.",
        examples: &[Example {
            title: "POSTs to /publish fan out to SSE and WebSocket clients in turn",
            yaml: "input:\n  http_server:\n    path: /publish\noutput:\n  http_server:\n    path: ''\n    stream_path: /events\n    ws_path: /events/ws\n    heartbeat: 15s\n",
        }],
    };
}

/// What every route of one output shares.
struct Common {
    hub: Arc<Hub>,
    verbs: Vec<Method>,
    cors: CorsConfig,
    shutdown: CancellationToken,
}

impl Common {
    /// Preflight, shutdown and verb checks; `None` lets the request through.
    fn screen(&self, req: &HttpRequest, metrics: &RouteMetrics) -> Option<HttpResponse> {
        if let Some(resp) = self.cors.preflight(req, &self.verbs) {
            return Some(resp);
        }
        metrics.connection_attempts.increment(1);
        if let Some(refused) = h::refuse(&self.shutdown, &self.verbs, req.method()) {
            return Some(refused);
        }
        None
    }
}

impl BuildOutput for HttpServerOutputConfig {
    /// Built alone, it serves this node's clients from its own hub.
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        self.build_hub(cx, &HubWiring::default())
    }
}

impl HttpServerOutputConfig {
    /// Builds the output wired as the stream says (see [`HubWiring`]).
    pub fn build_hub(
        &self,
        cx: &BuildContext,
        wiring: &HubWiring,
    ) -> Result<OutputBuild, BuildError> {
        let verbs = h::parse_verbs(&self.allowed_verbs).map_err(|e| cx.error(e))?;
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        let [path, stream_path, ws_path] = self.routes();
        if [&path, &stream_path, &ws_path]
            .iter()
            .all(|p| p.trim().is_empty())
        {
            return Err(cx.error("set at least one of `path`, `stream_path` and `ws_path`"));
        }
        if self.id_metadata.is_some() && self.delivery != DeliveryMode::Broadcast {
            return Err(cx.error(
                "`id_metadata` needs `delivery: broadcast`: in round robin each client has \
                 events of its own, which no position in the broker tells apart",
            ));
        }
        let filter = super::hub::hub_filter(cx, self.filter.as_ref(), self.delivery)?;
        super::hub::slow_policy(cx, &self.slow_clients, self.delivery)?;
        let hub = wiring.hub(
            cx,
            &[&path, &stream_path, &ws_path],
            HubOptions {
                mode: self.delivery,
                replay: self.replay_buffer.clone(),
                event_key: Some(self.event_metadata.clone()),
                id_key: wiring.id_key(self.delivery, self.id_metadata.as_ref()),
                write_timeout: self.write_timeout.0,
                queue: self.max_in_flight.max(64),
                slow: self.slow_clients.clone(),
            },
        );
        hub.set_filter(filter);
        let common = Arc::new(Common {
            hub: hub.clone(),
            verbs,
            cors: self.cors.clone(),
            shutdown: cx.lifecycle.shutdown.clone(),
        });
        let owner = cx.owner();
        // Mounted paths are undone if a later one conflicts, so a failed build leaves
        // nothing behind.
        let mut mounted: Vec<String> = Vec::new();
        let mut mount = |path: &str, handler: Arc<dyn h::Handler>| {
            cx.routes.mount(path, &owner, handler).map_err(|e| {
                for p in &mounted {
                    cx.routes.unmount(p);
                }
                cx.error(e)
            })?;
            mounted.push(path.to_owned());
            Ok::<_, BuildError>(())
        };
        if !path.trim().is_empty() {
            let route = Arc::new(GetRoute {
                common: common.clone(),
                timeout: self.timeout.0,
                metrics: RouteMetrics::new(
                    cx.metric_labels(),
                    &h::normalize(&path),
                    Transport::Get,
                ),
            });
            mount(
                &path,
                Arc::new(move |req: HttpRequest| {
                    let route = route.clone();
                    async move { route.handle(req).await }.boxed()
                }),
            )?;
        }
        if !stream_path.trim().is_empty() {
            let transport = match self.stream_format {
                StreamFormat::EventSource => Transport::Sse,
                StreamFormat::RawBytes => Transport::RawStream,
            };
            let route = Arc::new(StreamRoute {
                common: common.clone(),
                format: self.stream_format,
                heartbeat: self.heartbeat.0,
                metrics: RouteMetrics::new(
                    cx.metric_labels(),
                    &h::normalize(&stream_path),
                    transport,
                ),
            });
            mount(
                &stream_path,
                Arc::new(move |req: HttpRequest| {
                    let route = route.clone();
                    async move { route.handle(req) }.boxed()
                }),
            )?;
        }
        if !ws_path.trim().is_empty() {
            let route = Arc::new(WsRoute {
                hub: hub.clone(),
                opts: WsOptions {
                    message_type: self.ws_message_type,
                    envelope: self.ws_envelope,
                    heartbeat: self.heartbeat.0,
                },
                metrics: RouteMetrics::new(
                    cx.metric_labels(),
                    &h::normalize(&ws_path),
                    Transport::WebSocket,
                ),
                shutdown: hub.retired().clone(),
            });
            let common = common.clone();
            mount(
                &ws_path,
                Arc::new(move |req: HttpRequest| {
                    let route = route.clone();
                    let common = common.clone();
                    async move {
                        if let Some(resp) = common.cors.preflight(&req, &[Method::GET]) {
                            return resp;
                        }
                        route.handle(req)
                    }
                    .boxed()
                }),
            )?;
        }
        Ok(OutputBuild::Writer(Writer {
            output: wiring.writer(cx, hub),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

/// `path`: each GET takes the next message.
struct GetRoute {
    common: Arc<Common>,
    timeout: std::time::Duration,
    metrics: Arc<RouteMetrics>,
}

impl GetRoute {
    async fn handle(&self, req: HttpRequest) -> HttpResponse {
        if let Some(resp) = self.common.screen(&req, &self.metrics) {
            return resp;
        }
        let origin = self.common.cors.origin_for(&req);
        let caller = match super::hub::subscriber(&self.common.hub, &req) {
            Ok(caller) => caller,
            Err(resp) => return *resp,
        };
        // A GET is a client for one message: it joins the rotation until it gets one.
        let mut sub = self
            .common
            .hub
            .subscribe_as(None, self.metrics.clone(), caller);
        self.metrics.active.increment(1.0);
        let got = tokio::time::timeout(self.timeout, async {
            loop {
                let d = sub.rx.recv().await?;
                if !d.is_withdrawn() {
                    return Some(d);
                }
            }
        })
        .await;
        self.metrics.active.decrement(1.0);
        // Leaving before answering: a delivery that raced the timeout is dropped with the
        // subscription and goes to another client.
        drop(sub);
        let mut resp = match got {
            Ok(Some(d)) => {
                let mut body = d.chunk.lines().clone();
                // One message per line; the last line needs no newline of its own.
                body.truncate(body.len().saturating_sub(1));
                let mut resp = HttpResponse::new(h::full(body));
                let content_type = crate::message::content_type_of_all(
                    d.chunk.events.iter().map(|e| e.content_type()),
                );
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_str(&content_type)
                        .unwrap_or(HeaderValue::from_static("application/octet-stream")),
                );
                if let Some(id) = d.chunk.events.last().and_then(|e| e.id) {
                    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
                        resp.headers_mut().insert("x-event-id", v);
                    }
                }
                self.metrics.delivered(&d.chunk);
                d.written();
                resp
            }
            Ok(None) => h::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the stream is shutting down\n",
            ),
            Err(_) => h::text(StatusCode::REQUEST_TIMEOUT, "no message arrived in time\n"),
        };
        self.common.cors.decorate(origin, &mut resp);
        resp
    }
}

/// `stream_path`: one long response per client.
struct StreamRoute {
    common: Arc<Common>,
    format: StreamFormat,
    heartbeat: std::time::Duration,
    metrics: Arc<RouteMetrics>,
}

impl StreamRoute {
    fn handle(&self, req: HttpRequest) -> HttpResponse {
        if let Some(resp) = self.common.screen(&req, &self.metrics) {
            return resp;
        }
        let origin = self.common.cors.origin_for(&req);
        let last = match self.format {
            StreamFormat::EventSource => req
                .headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                // Browsers cannot set headers on EventSource; a query parameter does it.
                .or_else(|| crate::http::hub::query_param(req.uri().query(), "last_event_id")),
            // Raw streams carry no ids, so there is nothing to resume from.
            StreamFormat::RawBytes => None,
        };
        let hub = &self.common.hub;
        let caller = match super::hub::subscriber(hub, &req) {
            Ok(caller) => caller,
            Err(resp) => return *resp,
        };
        // From before the replay buffer: read back from the broker first, then joined.
        let past = last
            .as_deref()
            .and_then(|l| CatchUp::start(hub, l, caller.clone()));
        let (sub, past) = match past {
            Some(past) => (None, Some(past)),
            None => (
                Some(hub.subscribe_as(last.as_deref(), self.metrics.clone(), caller)),
                None,
            ),
        };
        let body = StreamBody::new(
            sub,
            past,
            self.format,
            self.heartbeat,
            self.metrics.clone(),
            // The hub's end, not the stream's: a change of the stream keeps its clients.
            hub.retired().clone(),
        );
        let mut resp = HttpResponse::new(body.boxed());
        let h = resp.headers_mut();
        let content_type = match self.format {
            StreamFormat::EventSource => "text/event-stream",
            StreamFormat::RawBytes => "application/octet-stream",
        };
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Asks buffering proxies (nginx) to pass events through as they come.
        h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        self.common.cors.decorate(origin, &mut resp);
        resp
    }
}

/// The body of a stream response. hyper polls it for the next frame only after it took
/// the previous one, so that poll is where the previous delivery counts as written. When
/// the connection closes, hyper drops the body, the subscription leaves the hub, and what
/// it had not written goes to other clients.
struct StreamBody {
    /// The client's place in the hub: from the start, or once caught up.
    sub: Option<Subscription>,
    /// What the client missed from before the replay buffer, sent first.
    past: Option<CatchUp>,
    format: StreamFormat,
    heartbeat: Option<tokio::time::Interval>,
    metrics: Arc<RouteMetrics>,
    /// The delivery in the frame hyper took last, confirmed on the next poll.
    in_flight: Option<(oneshot::Sender<()>, Arc<crate::http::hub::Chunk>)>,
    greeting: Option<Bytes>,
    stopping: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl StreamBody {
    fn new(
        sub: Option<Subscription>,
        past: Option<CatchUp>,
        format: StreamFormat,
        heartbeat: std::time::Duration,
        metrics: Arc<RouteMetrics>,
        shutdown: CancellationToken,
    ) -> Self {
        metrics.active.increment(1.0);
        let heartbeat = (!heartbeat.is_zero() && format == StreamFormat::EventSource).then(|| {
            let mut t =
                tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        // A first frame sends the headers at once, so a client knows it is connected
        // (and in the rotation) before any message arrives.
        let greeting = match format {
            StreamFormat::EventSource => Some(Bytes::from_static(b": connected\n\n")),
            StreamFormat::RawBytes => None,
        };
        StreamBody {
            sub,
            past,
            format,
            heartbeat,
            metrics,
            in_flight: None,
            greeting,
            stopping: Box::pin(shutdown.cancelled_owned()),
        }
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        self.metrics.active.decrement(1.0);
    }
}

impl http_body::Body for StreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some((done, chunk)) = this.in_flight.take() {
            this.metrics.delivered(&chunk);
            let _ = done.send(());
        }
        if let Some(g) = this.greeting.take() {
            return Poll::Ready(Some(Ok(Frame::data(g))));
        }
        if this.stopping.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if let Some(past) = this.past.as_mut() {
            match past.poll_next(cx) {
                Poll::Ready(Some(event)) => {
                    if event.id.is_some() {
                        this.metrics.replayed.increment(1);
                    }
                    if let Some(t) = this.heartbeat.as_mut() {
                        t.reset();
                    }
                    let chunk = crate::http::hub::Chunk::new(vec![event]);
                    return Poll::Ready(Some(Ok(Frame::data(chunk.sse().clone()))));
                }
                Poll::Ready(None) => {
                    if let Some(past) = this.past.take() {
                        this.sub = Some(past.join(this.metrics.clone()));
                    }
                }
                Poll::Pending => return this.beat(cx),
            }
        }
        let Some(sub) = this.sub.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match sub.rx.poll_recv(cx) {
                Poll::Ready(Some(d)) => {
                    if d.is_withdrawn() {
                        continue;
                    }
                    let bytes = match this.format {
                        StreamFormat::EventSource => d.chunk.sse().clone(),
                        StreamFormat::RawBytes => d.chunk.lines().clone(),
                    };
                    let chunk = d.chunk.clone();
                    match d.into_done() {
                        Some(done) => this.in_flight = Some((done, chunk)),
                        // A replay has no one waiting; count it when it is handed over.
                        None => this.metrics.delivered(&chunk),
                    }
                    if let Some(t) = this.heartbeat.as_mut() {
                        t.reset();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                // Dropped by the hub (too slow): end the response.
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => break,
            }
        }
        this.beat(cx)
    }
}

impl StreamBody {
    /// A heartbeat comment when one is due, else nothing yet.
    fn beat(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(t) = self.heartbeat.as_mut() {
            if t.poll_tick(cx).is_ready() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                    b": heartbeat\n\n",
                )))));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn build(yaml: &str) -> (Arc<h::Routes>, Writer) {
        let cfg: HttpServerOutputConfig = serde_yaml::from_str(yaml).unwrap();
        let routes = h::Routes::new();
        let cx = BuildContext::new("t", routes.clone(), CancellationToken::new())
            .child("output.http_server");
        let OutputBuild::Writer(w) = cfg.build(&cx).unwrap() else {
            panic!("writer expected")
        };
        (routes, w)
    }

    fn get(path: &str, headers: &[(&str, &str)]) -> HttpRequest {
        let mut b = http::Request::builder().method("GET").uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(h::empty()).unwrap()
    }

    #[test]
    fn broker_ids_need_broadcast() {
        let cfg: HttpServerOutputConfig =
            serde_yaml::from_str("{stream_path: /s, id_metadata: kafka_offset}").unwrap();
        let cx = BuildContext::new("t", h::Routes::new(), CancellationToken::new())
            .child("output.http_server");
        let Err(e) = cfg.build(&cx) else {
            panic!("built with round robin")
        };
        assert!(e.to_string().contains("`delivery: broadcast`"), "{e}");
        build("{stream_path: /s, delivery: broadcast, id_metadata: kafka_offset}");
    }

    #[tokio::test]
    async fn wrong_verb_is_405_with_allow() {
        let (routes, _w) = build("{stream_path: /s}");
        let req = http::Request::builder()
            .method("POST")
            .uri("/s")
            .body(h::empty())
            .unwrap();
        let resp = routes.get("/s").unwrap().call(req).await;
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[header::ALLOW], "GET");
    }

    #[test]
    fn only_the_routes_written_are_served_and_all_defaults_when_none_is() {
        let (routes, _w) = build("{stream_path: /events}");
        assert_eq!(routes.paths(), vec!["/events".to_owned()]);
        let (routes, _w) = build("{path: '', ws_path: /ws}");
        assert_eq!(routes.paths(), vec!["/ws".to_owned()]);
        let (routes, _w) = build("{delivery: broadcast}");
        let mut all = routes.paths();
        all.sort();
        assert_eq!(all, ["/get", "/get/stream", "/get/ws"]);
        let cfg: HttpServerOutputConfig = serde_yaml::from_str("{path: ''}").unwrap();
        let cx = BuildContext::new("t", h::Routes::new(), CancellationToken::new());
        assert!(cfg.build(&cx).is_err());
    }

    #[tokio::test]
    async fn get_times_out_with_408() {
        let (routes, _w) = build("{path: /g, timeout: 20ms}");
        let resp = routes.get("/g").unwrap().call(get("/g", &[])).await;
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    }

    #[tokio::test]
    async fn stream_response_is_sse_and_delivers() {
        let (routes, w) = build("{path: '', ws_path: '', stream_path: /s}");
        let resp = routes.get("/s").unwrap().call(get("/s", &[])).await;
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/event-stream");
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-cache");
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b": connected\n\n");
        let writing = tokio::spawn(async move {
            w.output
                .write(&vec![Message::new("a\nb").with_meta("sse_event", "tick")])
                .await
        });
        let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let text = String::from_utf8(frame.to_vec()).unwrap();
        assert!(text.starts_with("id: "), "{text}");
        assert!(
            text.ends_with("event: tick\ndata: a\ndata: b\n\n"),
            "{text}"
        );
        // The write completes once hyper asks for the next frame.
        let next = tokio::spawn(async move { body.frame().await.map(|_| ()) });
        writing.await.unwrap().unwrap();
        next.abort();
    }
}
