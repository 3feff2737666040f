//! `http_server`: the producer role. Each request's body becomes a message; the answer
//! waits for delivery: 200 once every output confirmed it, 502 with the reason when an
//! output failed, 503 while the stream shuts down, 408 when `timeout` passes first.
//!
//! With `ws_path`, WebSocket clients send messages too: each data frame is one message,
//! taken in order and acknowledged on its own. With `sync_response` the delivered message
//! comes back as a frame; a failed or late delivery closes the socket with code 1011 and
//! the reason, so the client knows its last frame was not taken.
//!
//! Mounted on the server that runs the stream (the server of `sluice run`), so it has no
//! address of its own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, SinkExt, StreamExt};
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};
use tokio_util::sync::CancellationToken;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::duration::Duration;
use crate::http::ending::Ending;
use crate::http::{self as h, ws, HttpRequest, HttpResponse};
use crate::message::{Message, Outcome, ReplySlot};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpServerInputConfig {
    /// The path that accepts messages.
    #[serde(default = "default_path")]
    pub path: String,
    /// Where WebSocket clients send messages, one per frame; empty to serve none.
    #[serde(default)]
    pub ws_path: String,
    /// Methods accepted on `path`; others get 405.
    #[serde(default = "default_verbs")]
    pub allowed_verbs: Vec<String>,
    /// How long a request waits for its message to be delivered before 408.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// Largest request body accepted, in bytes (413 above it).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Answer with the message as the output received it, instead of an empty 200.
    #[serde(default)]
    pub sync_response: Option<SyncResponse>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct SyncResponse {
    /// Status of a successful answer.
    #[serde(default = "default_status")]
    pub status: u16,
    /// Headers of a successful answer.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

fn default_path() -> String {
    "/post".into()
}
fn default_verbs() -> Vec<String> {
    vec!["POST".into()]
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_max_body() -> usize {
    32 << 20
}
fn default_status() -> u16 {
    200
}

impl Spec for HttpServerInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "http_server",
        kind: Kind::Input,
        summary: "Turns HTTP requests into messages and answers once they are delivered.",
        examples: &[Example {
            title: "Accept POSTs on /events",
            yaml: "input:\n  http_server:\n    path: /events\n    allowed_verbs: [POST, PUT]\noutput:\n  stdout: {}\n",
        }],
    };
}

/// A request waiting for its message's fate.
struct Pending {
    message: Message,
    done: oneshot::Sender<Outcome>,
    reply: Option<ReplySlot>,
}

struct Handler {
    verbs: Vec<Method>,
    timeout: std::time::Duration,
    max_body: usize,
    sync: Option<(StatusCode, Vec<(HeaderName, HeaderValue)>)>,
    tx: mpsc::Sender<Pending>,
    shutdown: CancellationToken,
}

impl BuildInput for HttpServerInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        let verbs = h::parse_verbs(&self.allowed_verbs).map_err(|e| cx.error(e))?;
        let sync = match &self.sync_response {
            None => None,
            Some(s) => {
                let status = StatusCode::from_u16(s.status)
                    .map_err(|_| cx.error(format!("`{}` is not an HTTP status", s.status)))?;
                let headers = s
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        Ok((
                            HeaderName::from_bytes(k.as_bytes())
                                .map_err(|_| cx.error(format!("invalid header name `{k}`")))?,
                            HeaderValue::from_str(v)
                                .map_err(|_| cx.error(format!("invalid value for header `{k}`")))?,
                        ))
                    })
                    .collect::<Result<Vec<_>, BuildError>>()?;
                Some((status, headers))
            }
        };
        let (tx, rx) = mpsc::channel(64);
        let handler = Arc::new(Handler {
            verbs,
            timeout: self.timeout.0,
            max_body: self.max_body_bytes,
            sync,
            tx,
            shutdown: cx.lifecycle.shutdown.clone(),
        });
        let ws_handler = handler.clone();
        let serve = move |req: HttpRequest| {
            let handler = handler.clone();
            async move { handler.handle(req).await }.boxed()
        };
        cx.routes
            .mount(&self.path, &cx.owner(), Arc::new(serve))
            .map_err(|e| cx.error(e))?;
        if !self.ws_path.trim().is_empty() {
            let serve_ws = move |req: HttpRequest| {
                let handler = ws_handler.clone();
                async move { Handler::handle_ws(handler, req) }.boxed()
            };
            if let Err(e) = cx
                .routes
                .mount(&self.ws_path, &cx.owner(), Arc::new(serve_ws))
            {
                cx.routes.unmount(&self.path);
                return Err(cx.error(e));
            }
        }
        Ok(InputBuild::Leaf(Box::new(HttpServerInput { rx })))
    }
}

impl Handler {
    async fn handle(&self, req: HttpRequest) -> HttpResponse {
        if let Some(refused) = h::refuse(&self.shutdown, &self.verbs, req.method()) {
            return refused;
        }
        let (parts, body) = req.into_parts();
        let body = match h::read_body(body, self.max_body).await {
            Ok(b) => b,
            Err(h::BodyError::TooLarge) => {
                return h::text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("body larger than {} bytes\n", self.max_body),
                );
            }
            Err(e) => return h::text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        };
        let message = request_message(&parts, body);
        let (done, outcome) = oneshot::channel();
        let reply = Some(self.reply_slot());
        let pending = Pending {
            message,
            done,
            reply: reply.clone(),
        };
        let queued = AtomicBool::new(false);
        let waited = tokio::time::timeout(self.timeout, async {
            self.tx.send(pending).await.ok()?;
            queued.store(true, Ordering::Relaxed);
            outcome.await.ok()
        })
        .await;
        match waited {
            Err(_) => h::text(
                StatusCode::REQUEST_TIMEOUT,
                format!("{}\n", self.late(queued.load(Ordering::Relaxed))),
            ),
            Ok(None) => h::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the stream is not running\n",
            ),
            Ok(Some(outcome)) if outcome.is_success() => self.success(reply),
            Ok(Some(outcome)) => h::text(
                StatusCode::BAD_GATEWAY,
                format!(
                    "delivery failed: {}\n",
                    outcome.reason().unwrap_or("unknown")
                ),
            ),
        }
    }

    /// Accepts a WebSocket producer on `ws_path`.
    fn handle_ws(handler: Arc<Self>, req: HttpRequest) -> HttpResponse {
        if handler.shutdown.is_cancelled() {
            return h::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the stream is shutting down\n",
            );
        }
        // The request's headers, query and path go with every frame as metadata.
        // Set by whoever let the client in (the gateway): the socket closes when it ends.
        let ending = Ending::of(&req).unwrap_or_default();
        let (parts, body) = req.into_parts();
        let template = request_message(&parts, Bytes::new());
        let (resp, socket) = match ws::accept(http::Request::from_parts(parts, body)) {
            Ok(ok) => ok,
            Err(resp) => return *resp,
        };
        tokio::spawn(async move {
            if let Some(socket) = socket.await {
                handler.serve_ws(socket, template, ending).await;
            }
        });
        resp
    }

    /// Reads frames one at a time; the next is read only once the previous one is settled,
    /// so a slow stream slows the client down through TCP (backpressure).
    async fn serve_ws(&self, socket: ws::ServerSocket, template: Message, ending: Ending) {
        let (mut sink, mut stream) = socket.split();
        loop {
            let frame = tokio::select! {
                f = stream.next() => f,
                _ = self.shutdown.cancelled() => {
                    let _ = sink.send(close(CloseCode::Away, "stream stopping")).await;
                    return;
                }
                (cause, reason) = ending.ended() => {
                    let _ = sink.send(close(cause.close_code(), &reason)).await;
                    return;
                }
            };
            let (payload, binary) = match frame {
                Some(Ok(WsMessage::Text(t))) => (Bytes::from(t), false),
                Some(Ok(WsMessage::Binary(b))) => (b, true),
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => {
                    let _ = sink.close().await;
                    return;
                }
                // Pings are answered by the library on the next flush.
                Some(Ok(_)) => {
                    let _ = sink.flush().await;
                    continue;
                }
            };
            if payload.len() > self.max_body {
                let _ = sink.send(close(CloseCode::Size, "message too large")).await;
                return;
            }
            let mut message = template.clone();
            message.set_payload(payload);
            let (done, outcome) = oneshot::channel();
            let reply = Some(self.reply_slot());
            let pending = Pending {
                message,
                done,
                reply: reply.clone(),
            };
            let queued = AtomicBool::new(false);
            let waited = tokio::time::timeout(self.timeout, async {
                self.tx.send(pending).await.ok()?;
                queued.store(true, Ordering::Relaxed);
                outcome.await.ok()
            })
            .await;
            let failure = match waited {
                Err(_) => self.late(queued.load(Ordering::Relaxed)),
                Ok(None) => "the stream is not running".to_owned(),
                Ok(Some(o)) if o.is_success() => {
                    let replies = reply.and_then(|r| r.take()).unwrap_or_default();
                    for m in replies {
                        let payload = m.payload().clone();
                        let frame = if binary {
                            WsMessage::Binary(payload)
                        } else {
                            match Utf8Bytes::try_from(payload.clone()) {
                                Ok(t) => WsMessage::Text(t),
                                Err(_) => WsMessage::Binary(payload),
                            }
                        };
                        if sink.feed(frame).await.is_err() {
                            return;
                        }
                    }
                    if sink.flush().await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Some(o)) => format!("delivery failed: {}", o.reason().unwrap_or("unknown")),
            };
            let _ = sink.send(close(CloseCode::Error, &failure)).await;
            return;
        }
    }

    /// Why a producer got no answer within `timeout`. A message the stream took stays
    /// queued and is still delivered (so sending it again may deliver it twice); one it
    /// did not take was dropped and must be sent again.
    fn late(&self, queued: bool) -> String {
        let within = crate::duration::format(self.timeout);
        if queued {
            format!("the message was not delivered within {within}; it stays queued and will still be delivered, so sending it again may deliver it twice")
        } else {
            format!("the stream did not take the message within {within} (it is full); nothing was queued: send it again")
        }
    }

    /// Without `sync_response` the request still answers with what a `sync_response`
    /// processor set, but outputs do not reply.
    fn reply_slot(&self) -> ReplySlot {
        match self.sync {
            Some(_) => ReplySlot::new(),
            None => ReplySlot::for_processors(),
        }
    }

    fn success(&self, reply: Option<ReplySlot>) -> HttpResponse {
        let body = reply.and_then(|r| r.take()).map(|batch| {
            let parts: Vec<&[u8]> = batch.iter().map(|m| &m.payload()[..]).collect();
            Bytes::from(parts.join(&b"\n"[..]))
        });
        let Some((status, headers)) = &self.sync else {
            return h::text(StatusCode::OK, body.unwrap_or_default());
        };
        let mut resp = h::text(*status, body.unwrap_or_default());
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        for (k, v) in headers {
            resp.headers_mut().insert(k.clone(), v.clone());
        }
        resp
    }
}

/// A close frame; the reason is cut to fit the 123 bytes a close frame allows.
fn close(code: CloseCode, reason: &str) -> WsMessage {
    let mut end = reason.len().min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    WsMessage::Close(Some(CloseFrame {
        code,
        reason: reason[..end].into(),
    }))
}

/// The message for one request: its body, and its headers, query parameters, path and
/// method as metadata.
fn request_message(parts: &http::request::Parts, body: Bytes) -> Message {
    let mut msg = Message::new(body);
    for (name, value) in &parts.headers {
        if let Ok(v) = value.to_str() {
            msg.set_meta(name.as_str(), v);
        }
    }
    if let Some(q) = parts.uri.query() {
        for (k, v) in url_pairs(q) {
            msg.set_meta(k, v);
        }
    }
    msg.set_meta("http_server_request_path", parts.uri.path());
    msg.set_meta("http_server_verb", parts.method.as_str());
    if let Some(ua) = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        msg.set_meta("http_server_user_agent", ua);
    }
    msg
}

fn url_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .map(|u| u.query_pairs().into_owned().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
}

pub struct HttpServerInput {
    rx: mpsc::Receiver<Pending>,
}

#[async_trait]
impl Input for HttpServerInput {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(p) = self.rx.recv().await else {
            return Err(ConnectorError::end_of_input());
        };
        let done = p.done;
        let read = ReadBatch::new(vec![p.message], move |outcome| {
            let _ = done.send(outcome);
        });
        Ok(match p.reply {
            Some(slot) => read.with_reply(slot),
            None => read,
        })
    }

    /// The client hears of a failure (502) and decides whether to send again.
    fn handles_nacks(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn build(yaml: &str) -> (Arc<crate::http::Routes>, Box<dyn Input>, CancellationToken) {
        let cfg: HttpServerInputConfig = serde_yaml::from_str(yaml).unwrap();
        let routes = crate::http::Routes::new();
        let token = CancellationToken::new();
        let cx = BuildContext::new("t", routes.clone(), token.clone()).child("input.http_server");
        match cfg.build(&cx).unwrap() {
            InputBuild::Leaf(i) => (routes, i, token),
            InputBuild::Merge(_) => panic!("leaf expected"),
        }
    }

    fn request(method: &str, path: &str, body: &'static str) -> HttpRequest {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("X-Trace", "abc")
            .body(h::full(body))
            .unwrap()
    }

    async fn status_of(resp: HttpResponse) -> (StatusCode, String) {
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn answers_200_after_delivery_with_metadata() {
        let (routes, mut input, _t) = build("{path: /in}");
        let handler = routes.get("/in").unwrap();
        let call = tokio::spawn(handler.call(request("POST", "/in?user=7", "hello")));
        let read = input.read().await.unwrap();
        let m = &read.batch[0];
        assert_eq!(&m.payload()[..], b"hello");
        assert_eq!(m.meta_str("x-trace").as_deref(), Some("abc"));
        assert_eq!(m.meta_str("user").as_deref(), Some("7"));
        assert_eq!(m.meta_str("http_server_verb").as_deref(), Some("POST"));
        (read.ack)(Outcome::Delivered);
        assert_eq!(status_of(call.await.unwrap()).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn failure_is_502_with_reason() {
        let (routes, mut input, _t) = build("{path: /in}");
        let call = tokio::spawn(routes.get("/in").unwrap().call(request("POST", "/in", "x")));
        let read = input.read().await.unwrap();
        (read.ack)(Outcome::errored("broker down"));
        let (status, body) = status_of(call.await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(body.contains("broker down"));
    }

    #[tokio::test]
    async fn wrong_verb_is_405_and_shutdown_is_503() {
        let (routes, _input, token) = build("{path: /in, allowed_verbs: [PUT]}");
        let h = routes.get("/in").unwrap();
        let (status, _) = status_of(h.call(request("POST", "/in", "x")).await).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        token.cancel();
        let (status, _) = status_of(h.call(request("PUT", "/in", "x")).await).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn timeout_is_408_and_says_whether_the_message_stays_queued() {
        let (routes, _input, _t) = build("{path: /in, timeout: 50ms}");
        let handler = routes.get("/in").unwrap();
        // Nothing reads: 64 requests fill the stream's queue, the 65th is not taken.
        let calls: Vec<_> = (0..65)
            .map(|_| tokio::spawn(handler.call(request("POST", "/in", "x"))))
            .collect();
        let (mut queued, mut refused) = (0, 0);
        for call in calls {
            let (status, body) = status_of(call.await.unwrap()).await;
            assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
            if body.contains("it stays queued and will still be delivered") {
                queued += 1;
            } else {
                assert!(body.contains("nothing was queued: send it again"), "{body}");
                refused += 1;
            }
            assert!(body.contains("50ms"), "{body}");
        }
        assert_eq!((queued, refused), (64, 1));
    }

    #[tokio::test]
    async fn sync_response_returns_the_delivered_message() {
        let (routes, mut input, _t) =
            build("{path: /in, sync_response: {status: 201, headers: {X-Done: yes}}}");
        let call = tokio::spawn(routes.get("/in").unwrap().call(request("POST", "/in", "x")));
        let read = input.read().await.unwrap();
        read.reply
            .as_ref()
            .unwrap()
            .offer(&[Message::new("processed")]);
        (read.ack)(Outcome::Delivered);
        let resp = call.await.unwrap();
        assert_eq!(resp.headers()["x-done"], "yes");
        assert_eq!(
            status_of(resp).await,
            (StatusCode::CREATED, "processed".into())
        );
    }

    #[tokio::test]
    async fn a_processor_reply_answers_without_sync_response_but_outputs_do_not() {
        let (routes, mut input, _t) = build("{path: /in}");
        let h = routes.get("/in").unwrap();
        let call = tokio::spawn(h.call(request("POST", "/in", "x")));
        let read = input.read().await.unwrap();
        let slot = read.reply.clone().expect("a slot for processors");
        let ack = crate::message::Ack::returning(|_, _| {}, Some(slot.clone()));
        ack.offer_reply(&[Message::new("from the output")]);
        assert!(
            slot.take().is_none(),
            "outputs do not reply without sync_response"
        );
        crate::message::ReplySlot::scope(Some(slot), async {
            crate::message::ReplySlot::offer_current(&[Message::new("from a processor")])
        })
        .await;
        ack.resolve(Outcome::Delivered);
        (read.ack)(Outcome::Delivered);
        assert_eq!(
            status_of(call.await.unwrap()).await,
            (StatusCode::OK, "from a processor".into())
        );
    }

    #[test]
    fn bad_verb_is_a_build_error() {
        let cfg: HttpServerInputConfig =
            serde_yaml::from_str("{allowed_verbs: ['NOT A VERB']}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_err());
    }
}
