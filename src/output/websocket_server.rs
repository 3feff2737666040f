//! `websocket_server` output: the consumer role over WebSocket. Clients connect to `path`
//! and receive messages as frames, round-robin (each message to one client) or broadcast.
//!
//! Delivery guarantee: a write returns once the frames were flushed to a client's socket;
//! a client that fails or stalls past `write_timeout` loses the message to the next client,
//! and with no client connected the stream waits. A client reconnecting with
//! `?last_event_id=N` first receives what it missed from the replay buffer (ids are visible
//! to clients with `envelope: true`).

use std::sync::Arc;

use futures::{FutureExt, SinkExt, StreamExt};
use http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::hub::HubWiring;
use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Writer};
use crate::duration::Duration;
use crate::http::ending::{Cause, Ending};
use crate::http::history::CatchUp;
use crate::http::hub::{
    query_param, DeliveryMode, Event, Hub, HubOptions, ReplayConfig, RouteMetrics, Subscription,
    Transport,
};
use crate::http::ws::{self, ServerSocket};
use crate::http::{self as h, HttpRequest, HttpResponse};

/// How messages are framed on a WebSocket.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum WsMessageType {
    /// Text frames (invalid UTF-8 is replaced).
    #[default]
    Text,
    /// Binary frames, bytes as they are.
    Binary,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebsocketServerOutputConfig {
    /// The path clients connect to.
    pub path: String,
    /// Frame type of messages.
    #[serde(default)]
    pub message_type: WsMessageType,
    /// Wrap each message as `{"id","event","data"}` so that clients learn the ids they
    /// resume from.
    #[serde(default)]
    pub envelope: bool,
    /// Metadata key that names the event in the envelope.
    #[serde(default = "default_event_key")]
    pub event_metadata: String,
    /// `round_robin` (each message to one client) or `broadcast` (to all).
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// The buffer that reconnecting clients replay from.
    #[serde(default)]
    pub replay_buffer: ReplayConfig,
    /// With `broadcast`: a check in the mapping language that decides, per client, which
    /// messages it gets; the client is `@caller` (see `http_server`'s `filter`).
    #[serde(default)]
    pub filter: Option<crate::config::mapped::MappingText>,
    /// What happens to a client that does not read (see `http_server`'s `slow_clients`).
    #[serde(default)]
    pub slow_clients: crate::http::outbox::SlowClients,
    /// Ping interval; a client that has not answered the previous ping is dropped as dead.
    /// `0s` turns pings off.
    #[serde(default = "default_heartbeat")]
    pub heartbeat: Duration,
    /// How long one client may take to write a message before it counts as failed.
    #[serde(default = "default_write_timeout")]
    pub write_timeout: Duration,
    /// Writes in flight at once; 1 keeps messages in order.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    #[serde(default)]
    pub batching: BatchPolicy,
}

pub(crate) fn default_event_key() -> String {
    "sse_event".into()
}
pub(crate) fn default_heartbeat() -> Duration {
    Duration::from_secs(15)
}
pub(crate) fn default_write_timeout() -> Duration {
    Duration::from_secs(10)
}
pub(crate) fn default_max_in_flight() -> usize {
    1
}

impl Spec for WebsocketServerOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "websocket_server",
        kind: Kind::Output,
        summary: "Pushes messages to WebSocket clients, round-robin or broadcast, with resume.",
        examples: &[Example {
            title: "Broadcast to every WebSocket client of /live",
            yaml: "input:\n  http_server:\n    path: /publish\noutput:\n  websocket_server:\n    path: /live\n    delivery: broadcast\n    envelope: true\n",
        }],
    };
}

impl BuildOutput for WebsocketServerOutputConfig {
    /// Built alone, it serves this node's clients from its own hub.
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        self.build_hub(cx, &HubWiring::default())
    }
}

impl WebsocketServerOutputConfig {
    /// Builds the output wired as the stream says (see [`HubWiring`]).
    pub fn build_hub(
        &self,
        cx: &BuildContext,
        wiring: &HubWiring,
    ) -> Result<OutputBuild, BuildError> {
        if self.path.trim().is_empty() {
            return Err(cx.error("`path` is empty"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        let filter = super::hub::hub_filter(cx, self.filter.as_ref(), self.delivery)?;
        super::hub::slow_policy(cx, &self.slow_clients, self.delivery)?;
        let hub = wiring.hub(
            cx,
            &[&self.path],
            HubOptions {
                mode: self.delivery,
                replay: self.replay_buffer.clone(),
                event_key: Some(self.event_metadata.clone()),
                id_key: wiring.id_key(self.delivery, None),
                write_timeout: self.write_timeout.0,
                queue: self.max_in_flight.max(64),
                slow: self.slow_clients.clone(),
            },
        );
        hub.set_filter(filter);
        let route = WsRoute {
            hub: hub.clone(),
            opts: WsOptions {
                message_type: self.message_type,
                envelope: self.envelope,
                heartbeat: self.heartbeat.0,
            },
            metrics: RouteMetrics::new(
                cx.metric_labels(),
                &h::normalize(&self.path),
                Transport::WebSocket,
            ),
            // The hub's end, not the stream's: a change of the stream keeps its clients.
            shutdown: hub.retired().clone(),
        };
        let route = Arc::new(route);
        let serve = move |req: HttpRequest| {
            let route = route.clone();
            async move { route.handle(req) }.boxed()
        };
        cx.routes
            .mount(&self.path, &cx.owner(), Arc::new(serve))
            .map_err(|e| cx.error(e))?;
        Ok(OutputBuild::Writer(Writer {
            output: wiring.writer(cx, hub),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

/// How one WebSocket route frames and watches its clients.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WsOptions {
    pub message_type: WsMessageType,
    pub envelope: bool,
    pub heartbeat: std::time::Duration,
}

/// A mounted WebSocket route of a hub (used by `websocket_server` and by the `ws_path` of
/// the `http_server` output).
pub(crate) struct WsRoute {
    pub hub: Arc<Hub>,
    pub opts: WsOptions,
    pub metrics: Arc<RouteMetrics>,
    pub shutdown: CancellationToken,
}

impl WsRoute {
    pub fn handle(&self, req: HttpRequest) -> HttpResponse {
        self.metrics.connection_attempts.increment(1);
        if self.shutdown.is_cancelled() {
            return h::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the stream is shutting down\n",
            );
        }
        let last = query_param(req.uri().query(), "last_event_id");
        let caller = match super::hub::subscriber(&self.hub, &req) {
            Ok(caller) => caller,
            Err(resp) => return *resp,
        };
        // Set by whoever let the client in (the gateway): the socket closes when it ends.
        let ending = Ending::of(&req).unwrap_or_default();
        let (resp, socket) = match ws::accept(req) {
            Ok(ok) => ok,
            Err(resp) => return *resp,
        };
        // Subscribed before answering, so that a client that has its 101 is already in
        // the rotation; what arrives before the upgrade completes waits in its queue. A
        // client resuming from before the replay buffer (broadcast) joins once it was
        // sent what it missed.
        let past = last
            .as_deref()
            .and_then(|l| CatchUp::start(&self.hub, l, caller.clone()));
        let sub = match past {
            Some(_) => None,
            None => Some(
                self.hub
                    .subscribe_as(last.as_deref(), self.metrics.clone(), caller),
            ),
        };
        let opts = self.opts;
        let metrics = self.metrics.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let Some(mut socket) = socket.await else {
                return;
            };
            metrics.active.increment(1.0);
            let sub = match (sub, past) {
                (Some(sub), _) => Some(sub),
                (None, Some(mut past)) => {
                    let sent = loop {
                        let next = tokio::select! {
                            _ = shutdown.cancelled() => None,
                            _ = ending.ended() => None,
                            next = past.next() => next,
                        };
                        let Some(event) = next else {
                            break !shutdown.is_cancelled() && !ending.is_ended();
                        };
                        metrics.replayed.increment(u64::from(event.id.is_some()));
                        // A client that stops reading gives its place back, as a live
                        // one that stalls past the write timeout does.
                        let wrote = tokio::time::timeout(
                            default_write_timeout().0,
                            socket.send(frame(&event, opts)),
                        )
                        .await;
                        if !matches!(wrote, Ok(Ok(()))) {
                            break false;
                        }
                    };
                    sent.then(|| past.join(metrics.clone()))
                }
                (None, None) => None,
            };
            if let Some(sub) = sub {
                serve_socket(socket, sub, opts, &metrics, shutdown, ending).await;
            } else if let (Some(cause), Some(reason)) = (ending.cause(), ending.reason()) {
                let _ = socket.send(ended(cause, reason)).await;
            }
            metrics.active.decrement(1.0);
        });
        resp
    }
}

/// The close frame of a client no longer let in (1008, policy violation) or told to come
/// back (1012, service restart), with why.
fn ended(cause: Cause, reason: &str) -> WsMessage {
    WsMessage::Close(Some(CloseFrame {
        code: cause.close_code(),
        reason: Utf8Bytes::from(reason),
    }))
}

/// Feeds one client until it leaves, dies or the stream stops. Frames from the client are
/// ignored apart from control frames.
pub(crate) async fn serve_socket(
    socket: ServerSocket,
    mut sub: Subscription,
    opts: WsOptions,
    metrics: &RouteMetrics,
    shutdown: CancellationToken,
    ending: Ending,
) {
    let (mut sink, mut stream) = socket.split();
    let mut ping = (!opts.heartbeat.is_zero()).then(|| {
        let mut t = tokio::time::interval(opts.heartbeat);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    // Whether the peer answered since the last ping.
    let mut answered = true;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = sink
                    .send(WsMessage::Close(Some(CloseFrame {
                        code: CloseCode::Away,
                        reason: Utf8Bytes::from_static("stream stopping"),
                    })))
                    .await;
                break;
            }
            (cause, reason) = ending.ended() => {
                let _ = sink.send(ended(cause, &reason)).await;
                break;
            }
            d = sub.rx.recv() => {
                let Some(d) = d else { break };
                if d.is_withdrawn() {
                    continue;
                }
                let mut failed = false;
                for e in &d.chunk.events {
                    if sink.feed(frame(e, opts)).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || sink.flush().await.is_err() {
                    // The delivery is dropped unwritten: the hub gives it to another client.
                    break;
                }
                metrics.delivered(&d.chunk);
                d.written();
            }
            incoming = stream.next() => match incoming {
                None | Some(Err(_)) | Some(Ok(WsMessage::Close(_))) => {
                    // Answers the close handshake when it can; the peer is leaving anyway.
                    let _ = sink.close().await;
                    break;
                }
                Some(Ok(_)) => {
                    // Any frame shows the peer is alive; pings are answered by the library
                    // on the next flush.
                    answered = true;
                    let _ = sink.flush().await;
                }
            },
            _ = async {
                match ping.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            } => {
                if !answered {
                    debug!("WebSocket client did not answer a ping; closing it.");
                    break;
                }
                answered = false;
                if sink.send(WsMessage::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
        }
    }
}

fn frame(e: &Event, opts: WsOptions) -> WsMessage {
    if opts.envelope || e.id.is_none() {
        // Notices (a gap) are always JSON so that clients can tell them from messages.
        let data = serde_json::from_slice::<serde_json::Value>(&e.data)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&e.data).into()));
        let mut obj = serde_json::Map::new();
        if let Some(id) = e.id {
            obj.insert("id".into(), id.to_string().into());
        }
        if let Some(name) = &e.name {
            obj.insert("event".into(), name.to_string().into());
        }
        obj.insert("data".into(), data);
        return WsMessage::Text(serde_json::Value::Object(obj).to_string().into());
    }
    match opts.message_type {
        WsMessageType::Binary => WsMessage::Binary(e.data.clone()),
        WsMessageType::Text => match Utf8Bytes::try_from(e.data.clone()) {
            Ok(t) => WsMessage::Text(t),
            Err(_) => WsMessage::Text(String::from_utf8_lossy(&e.data).into_owned().into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn envelope_keeps_json_payloads_as_json() {
        let e = Event {
            id: Some(3),
            name: None,
            data: Bytes::from_static(br#"{"a":1}"#),
            content_type: None,
        };
        let opts = WsOptions {
            message_type: WsMessageType::Text,
            envelope: true,
            heartbeat: std::time::Duration::ZERO,
        };
        assert_eq!(
            frame(&e, opts).into_text().unwrap().as_str(),
            r#"{"data":{"a":1},"id":"3"}"#
        );
    }

    #[test]
    fn empty_path_is_a_build_error() {
        let cfg: WebsocketServerOutputConfig = serde_yaml::from_str("{path: ''}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_err());
    }
}
