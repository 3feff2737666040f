//! The life of a request to a served API, in the order it is lived (pingora's phases):
//! **route** (the API whose listen path holds the path, with the plan the table compiled
//! for it), **request steps** (the plan's, until one answers), **upstream** (the proxy,
//! for what no step answered), **response steps** (on whatever answer came) and **log**
//! (metrics, the access log line, the trace span). An API with no steps skips both step
//! phases. The steps themselves are in [`super::middleware`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;
use tracing::error;

use super::api::{self, Api};
use super::middleware::{self, Ctx, Stop};
use super::proxy::Origin;
use super::reply;
use super::services::Services;
use super::shared::Shared;
use super::table::TableRef;
use crate::http::{self as h, HttpResponse};
use crate::server;
use crate::telemetry;

/// The gateway as the server's service: a request's work borrows `Shared` from here.
pub(super) struct Serving(pub(super) Arc<Shared>);

impl server::Serve for Serving {
    fn call(
        &self,
        req: http::Request<h::Body>,
        peer: SocketAddr,
    ) -> futures::future::BoxFuture<'_, HttpResponse> {
        let gw = &*self.0;
        let req = watch_body(gw, req);
        let path = req.uri().path();
        if path == "/ping" {
            return Box::pin(std::future::ready(h::text(StatusCode::OK, "pong")));
        }
        // Route.
        let table = gw.table.for_request();
        let Some(at) = table.position(path) else {
            let resp = reply::error(StatusCode::NOT_FOUND, "no API is served at this path");
            return Box::pin(std::future::ready(resp));
        };
        // Routed before the future is made, so that each kind of request gets a future
        // sized for its own work: every request's future is copied to the heap whole,
        // and the steps' is several times the proxy's. Boxed where it is made: through
        // `FutureExt::boxed` the whole future was copied once more on its way.
        if table.plan(at).is_empty() {
            Box::pin(pass_through(gw, table, at, req, peer))
        } else {
            Box::pin(handle(gw, table, at, req, peer))
        }
    }
}

/// A request with a body gets a timer on it: a body that stalls for longer than
/// `http.body_read_timeout` ends the request. One without has nothing to stall on.
pub(super) fn watch_body(gw: &Services, req: http::Request<h::Body>) -> http::Request<h::Body> {
    if http_body::Body::is_end_stream(req.body()) {
        return req;
    }
    let idle = gw.config.http.body_read_timeout.0;
    req.map(|body| h::boxed(h::IdleTimeout::new(body, idle)))
}

/// A request for the API at `at` in `table`, through the steps of its plan.
async fn handle(
    gw: &Shared,
    table: TableRef,
    at: usize,
    req: http::Request<h::Body>,
    peer: SocketAddr,
) -> HttpResponse {
    // Route: the API, its plan, and the operation the request resolves to.
    let mut seen = Received::of(&req, peer, gw.config.access_log);
    let (api, plan) = (table.at(at), table.plan(at));
    let trace = seen.span(&req, &api.id, gw.config.access_log);
    let rest = api.below(seen.uri.path()).unwrap_or("");
    let resp = {
        let origin = origin(gw, peer);
        let mut ctx = Ctx::new(gw, api, &seen.method, rest, req, origin, trace.as_ref());
        // Request steps; the upstream when none answered; response steps on the answer.
        match plan.request(&mut ctx).await {
            Ok(()) => {
                let resp = middleware::upstream(&mut ctx).await;
                plan.response(&mut ctx, resp)
            }
            Err(Stop::Answered(resp)) => plan.response(&mut ctx, resp),
            Err(Stop::Preflight(resp)) => resp,
        }
    };
    // Log.
    record(gw, api, &seen, &resp);
    end_request_span(trace, &resp);
    resp
}

/// A request for the API at `at` in `table`, whose plan is empty: route, upstream, log.
async fn pass_through(
    gw: &Shared,
    table: TableRef,
    at: usize,
    req: http::Request<h::Body>,
    peer: SocketAddr,
) -> HttpResponse {
    let mut seen = Received::of(&req, peer, gw.config.access_log);
    let api = table.at(at);
    let trace = seen.span(&req, &api.id, gw.config.access_log);
    let mut req = req;
    let upstream = middleware::upstream_span(trace.as_ref(), &mut req);
    let rest = api.below(seen.uri.path()).unwrap_or("");
    let forwarded = gw.proxy.forward(api, req, rest, &origin(gw, peer)).await;
    middleware::end_upstream_span(upstream, &forwarded);
    let resp = match forwarded {
        Ok(resp) => resp,
        Err(e) => middleware::proxy_failed(gw, api, None, rest, e),
    };
    record(gw, api, &seen, &resp);
    end_request_span(trace, &resp);
    resp
}

fn origin(gw: &Services, peer: SocketAddr) -> Origin {
    Origin { peer, tls: gw.tls }
}

/// A request's metrics and access log line.
fn record(gw: &Services, api: &Api, seen: &Received, resp: &HttpResponse) {
    let (status, took) = (resp.status(), seen.started.elapsed());
    api.metrics
        .get_or_init(|| api::ApiMetrics::new(&api.id))
        .record(status, took);
    if gw.config.access_log {
        // Without the client's, the answer's request id (the upstream's, or the one
        // a 502 names in its body) joins the line to what the client was told.
        let answered = h::trace::request_id(resp.headers());
        access_log(&api.id, seen, answered, status, took);
    }
}

/// What a request's metrics and access log line are made of, kept from before the
/// request went on its way.
struct Received {
    started: Instant,
    method: http::Method,
    /// The clone shares the request's bytes: the path below the listen path borrows it
    /// rather than being copied for every request.
    uri: http::Uri,
    peer: SocketAddr,
    /// The client's `X-Request-Id` and its `traceparent`'s trace id, for the access log
    /// line (read only when lines are written).
    request_id: Option<Box<str>>,
    trace_id: Option<Box<str>>,
}

impl Received {
    fn of(req: &http::Request<h::Body>, peer: SocketAddr, ids: bool) -> Self {
        let headers = req.headers();
        Received {
            started: Instant::now(),
            method: req.method().clone(),
            uri: req.uri().clone(),
            peer,
            request_id: ids
                .then(|| h::trace::request_id(headers))
                .flatten()
                .map(Into::into),
            trace_id: ids
                .then(|| h::trace::trace_id(headers))
                .flatten()
                .map(Into::into),
        }
    }
}

impl Received {
    /// The request's trace span, when traces are on.
    /// Without a trace id from the client, the access log line (when lines are written)
    /// takes the new trace's.
    fn span(
        &mut self,
        req: &http::Request<h::Body>,
        api_id: &str,
        logged: bool,
    ) -> Option<telemetry::Span> {
        let span =
            telemetry::request_span(req.headers(), self.method.as_str(), api_id, self.uri.path())?;
        if logged && self.trace_id.is_none() {
            self.trace_id = Some(span.trace_id().into());
        }
        Some(span)
    }
}

/// Ends a request's span with its answer's status (a 5xx marks it failed).
fn end_request_span(span: Option<telemetry::Span>, resp: &HttpResponse) {
    let Some(span) = span else {
        return;
    };
    let status = resp.status();
    span.set("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.fail(status.to_string());
    }
}

/// A request's access log line: the API, method, path, status, time and client, and the
/// ids that join it to the client's and the upstream's lines (`request_id`, the client's
/// `X-Request-Id`, else the answer's, else one made here; `trace_id`, from its
/// `traceparent`).
fn access_log(
    api_id: &str,
    seen: &Received,
    answered: Option<&str>,
    status: StatusCode,
    took: Duration,
) {
    let failed = status.is_server_error();
    // Nothing is made for a line the logger drops (`info` lines under `logger.level: warn`).
    let wanted = if failed {
        tracing::enabled!(target: "sluice::access", tracing::Level::ERROR)
    } else {
        tracing::enabled!(target: "sluice::access", tracing::Level::INFO)
    };
    if !wanted {
        return;
    }
    let (method, path, peer) = (&seen.method, seen.uri.path(), seen.peer);
    let made;
    let request_id = match (seen.request_id.as_deref(), answered) {
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => {
            made = uuid::Uuid::now_v7().simple().to_string();
            made.as_str()
        }
    };
    let trace_id = seen.trace_id.as_deref().unwrap_or_default();
    if failed {
        error!(target: "sluice::access", api_id, %method, path, status = status.as_u16(), millis = took.as_secs_f64() * 1e3, %peer, request_id, trace_id, "Request failed.");
    } else {
        tracing::info!(target: "sluice::access", api_id, %method, path, status = status.as_u16(), millis = took.as_secs_f64() * 1e3, %peer, request_id, trace_id, "Request.");
    }
}
