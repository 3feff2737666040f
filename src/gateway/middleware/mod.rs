//! The middleware chain, one small module per step, run in this order:
//! authentication -> key checks (expiry, access rights, allow/block) -> key rate limit and
//! quota -> API rate limit -> request size limit -> request validation -> stream
//! middleware -> cache -> mock response -> proxy. Each step either lets the request go
//! on or answers it.

// A step's refusal is the response itself; boxing it would cost every refused request
// an allocation to save a move.
#![allow(clippy::result_large_err)]

pub mod api_limit;
pub mod auth;
pub mod cache;
pub mod cors;
pub mod headers;
pub mod key_checks;
pub mod key_limits;
pub mod mock;
pub mod size_limit;
pub mod stream;
pub mod validate;

use std::sync::Arc;

use http::{HeaderName, HeaderValue, StatusCode};

use super::api::steps::Step;
use super::api::{Api, Operation};
use super::events::EventKind;
use super::keys::Session;
use super::proxy::{Origin, ProxyError};
use super::reply::error;
use super::shared::Shared;
use crate::http::{self as h, HttpRequest, HttpResponse};
use crate::limit::{Decision, LimitError};
use crate::telemetry::{self, SpanKind};

/// One request on its way through the chain.
pub struct Ctx<'a> {
    pub gw: &'a Shared,
    pub api: &'a Arc<Api>,
    /// The operation the request resolved to, with its path parameters.
    pub op: Option<(&'a Operation, Vec<(String, String)>)>,
    /// The path below the listen path.
    pub rest: &'a str,
    pub req: HttpRequest,
    pub origin: Origin,
    /// The key that authenticated the request.
    pub session: Option<Arc<Session>>,
    /// Who the request is from: the key id, or a JWT's identity.
    pub identity: Option<String>,
    /// The claims of the caller's JWT.
    pub claims: Option<serde_json::Map<String, serde_json::Value>>,
    /// The tightest limit met on the way, for the `X-RateLimit-*` headers.
    pub limit: Option<Decision>,
    /// The request's trace span, when traces are on.
    pub trace: Option<&'a telemetry::Span>,
}

impl Ctx<'_> {
    pub fn operation(&self) -> Option<&Operation> {
        self.op.as_ref().map(|(op, _)| *op)
    }

    /// The request, taken out for a step that consumes it (an empty one is left).
    pub fn take_req(&mut self) -> HttpRequest {
        std::mem::replace(&mut self.req, HttpRequest::new(h::empty()))
    }

    pub fn key_id(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.id.as_str())
    }

    /// Keeps the decision with the fewest requests left.
    pub fn note_limit(&mut self, d: Decision) {
        if self.limit.is_none_or(|old| d.remaining < old.remaining) {
            self.limit = Some(d);
        }
    }
}

/// A step's verdict: go on, or this answer.
pub type Verdict = Result<(), HttpResponse>;

/// Runs the chain for a request that belongs to `api`: the steps its plan lists
/// ([`Api::steps`]), then the proxy.
pub async fn run(mut ctx: Ctx<'_>) -> HttpResponse {
    let api = ctx.api;
    let mut origin = None;
    if api.has(Step::Cors) {
        if let Some(resp) = cors::preflight(&ctx) {
            return resp;
        }
        origin = cors::origin(&ctx);
    }
    let mut resp = match chain(&mut ctx, &api.steps).await {
        Ok(resp) | Err(resp) => resp,
    };
    if let Some(d) = ctx.limit {
        limit_headers(&mut resp, &d);
    }
    if api.has(Step::ResponseHeaders) {
        headers::transform_response(&ctx, &mut resp);
    }
    if let Some(origin) = origin {
        cors::mark(&ctx, origin, &mut resp);
    }
    resp
}

/// The request steps in order, then the proxy (through the cache when it is a step).
/// The match has an arm for every step: a new step cannot be listed yet never run.
async fn chain(ctx: &mut Ctx<'_>, steps: &[Step]) -> Result<HttpResponse, HttpResponse> {
    let mut cache_key = None;
    for step in steps {
        // A span for each step that acts here, ended as the step ends.
        let step_span = ctx
            .trace
            .filter(|_| !matches!(step, Step::Cors | Step::ResponseHeaders))
            .and_then(|t| t.child(step.name(), SpanKind::Internal));
        match step {
            // They act on the answer, in `run`.
            Step::Cors | Step::ResponseHeaders => {}
            Step::Auth => auth::run(ctx).await?,
            Step::KeyChecks => key_checks::run(ctx)?,
            Step::KeyLimits => key_limits::run(ctx).await?,
            Step::ApiLimit => api_limit::run(ctx).await?,
            Step::SizeLimit => size_limit::run(ctx).await?,
            Step::Validate => validate::run(ctx).await?,
            Step::RequestHeaders => headers::transform_request(ctx),
            Step::Streams => {
                let mut req = ctx.take_req();
                // The stream's messages are children of this step.
                if let Some(span) = &step_span {
                    span.inject(req.headers_mut());
                }
                match stream::divert(ctx, req) {
                    Ok(diverted) => return Ok(diverted.await),
                    Err(req) => ctx.req = req,
                }
            }
            Step::Cache => {
                cache_key = cache::key(ctx);
                if let Some(hit) = cache_key.as_ref().and_then(|key| ctx.gw.cache.get(key)) {
                    return Ok(hit);
                }
            }
            Step::Mock => {
                if let Some(resp) = mock::respond(ctx) {
                    return Ok(resp);
                }
            }
        }
    }
    let mut req = ctx.take_req();
    let upstream = upstream_span(ctx.trace, &mut req);
    let forwarded = ctx
        .gw
        .proxy
        .forward(ctx.api, req, ctx.rest, &ctx.origin)
        .await;
    end_upstream_span(upstream, &forwarded);
    match forwarded {
        Ok(resp) => Ok(match cache_key {
            Some(key) => ctx.gw.cache.store(ctx.api, key, resp).await,
            None => resp,
        }),
        Err(e) => Err(proxy_failed(ctx.gw, ctx.api, ctx.key_id(), ctx.rest, e)),
    }
}

/// The span of the exchange with the upstream, a child of the request's; the upstream is
/// handed its trace context.
pub fn upstream_span(
    trace: Option<&telemetry::Span>,
    req: &mut HttpRequest,
) -> Option<telemetry::Span> {
    let span = trace?.child("upstream", SpanKind::Client)?;
    span.inject(req.headers_mut());
    Some(span)
}

/// Ends the upstream span with what the upstream answered.
pub fn end_upstream_span<E: std::fmt::Display>(
    span: Option<telemetry::Span>,
    forwarded: &Result<HttpResponse, E>,
) {
    let Some(span) = span else {
        return;
    };
    match forwarded {
        Ok(resp) => span.set(
            "http.response.status_code",
            i64::from(resp.status().as_u16()),
        ),
        Err(e) => span.fail(e.to_string()),
    }
}

/// The answer when the upstream gave none, published as an event unless the API has no
/// upstream to fail. Out of line: it is rare, and its formatting would otherwise sit
/// between the instructions every request runs.
#[cold]
#[inline(never)]
pub fn proxy_failed(
    gw: &Shared,
    api: &Api,
    key_id: Option<&str>,
    rest: &str,
    e: ProxyError,
) -> HttpResponse {
    match &e {
        ProxyError::NoUpstream => return error(e.status(), e.public_message()),
        // The client's own fault: said to it, not an upstream's failure.
        ProxyError::RequestBody(why) => {
            tracing::debug!(api = %api.id, path = %rest, error = %why, "Request body unreadable.");
            return error(e.status(), e.public_message());
        }
        _ => {}
    }
    // The client gets fixed words and an id to quote; the log and the API's own event
    // get the cause under the same id.
    let request_id = uuid::Uuid::now_v7().to_string();
    tracing::warn!(api = %api.id, path = %rest, %request_id, error = %e, "Upstream failed.");
    gw.events.publish(
        EventKind::UpstreamError,
        &api.id,
        key_id,
        rest,
        format!("{e} (request {request_id})"),
    );
    let mut resp = h::json(
        e.status(),
        &serde_json::json!({ "error": e.public_message(), "request_id": request_id }),
    );
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// Applies a limiter's answer: a refusal answers 429 (and publishes `event`), a pass is
/// noted for the `X-RateLimit-*` headers. Limits fail closed: without its counters the
/// gateway cannot tell, and letting everything through is what a limit exists to prevent.
pub fn enforce(
    ctx: &mut Ctx<'_>,
    decision: Result<Decision, LimitError>,
    event: EventKind,
    message: &str,
) -> Verdict {
    let d = decision.map_err(|e| {
        tracing::error!(error = %e, "Rate limiter unavailable.");
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the rate limiter is unavailable",
        )
    })?;
    if !d.allowed {
        ctx.gw
            .events
            .publish(event, &ctx.api.id, ctx.key_id(), ctx.rest, message);
        return Err(too_many(&d, message));
    }
    ctx.note_limit(d);
    Ok(())
}

const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// `X-RateLimit-Limit/Remaining/Reset` (the reset in seconds from now).
pub fn limit_headers(resp: &mut HttpResponse, d: &Decision) {
    let h = resp.headers_mut();
    h.insert(X_RATELIMIT_LIMIT, limit_value(d.limit));
    h.insert(X_RATELIMIT_REMAINING, number(d.remaining));
    h.insert(X_RATELIMIT_RESET, number(ceil_secs(d.reset)));
}

/// Numbers below this are written from a table made once.
const SMALL: u64 = 1024;

/// A number as a header value. Those below [`SMALL`] (resets in seconds, what is left of
/// a small limit) point into text made once, so that answering costs no allocation.
fn number(n: u64) -> HeaderValue {
    static TABLE: std::sync::LazyLock<Vec<HeaderValue>> = std::sync::LazyLock::new(|| {
        let mut text = String::new();
        let mut ends = Vec::new();
        for n in 0..SMALL {
            text.push_str(itoa::Buffer::new().format(n));
            ends.push(text.len());
        }
        // Made once per process and kept for its life.
        let text: &'static str = Box::leak(text.into_boxed_str());
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let value = HeaderValue::from_static(&text[start..end]);
                start = end;
                value
            })
            .collect()
    });
    match usize::try_from(n) {
        Ok(i) if n < SMALL => TABLE[i].clone(),
        _ => HeaderValue::from(n),
    }
}

/// A limit as a header value. A thread meets the same few limits again and again: the
/// last one's text is kept.
fn limit_value(n: u64) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(u64, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    if n < SMALL {
        return number(n);
    }
    crate::http::wire::remembered(&LAST, n, HeaderValue::from)
}

/// A refusal for a limit: 429 with `Retry-After` and the limit headers.
pub fn too_many(d: &Decision, message: &str) -> HttpResponse {
    let mut resp = error(StatusCode::TOO_MANY_REQUESTS, message);
    limit_headers(&mut resp, d);
    let retry = d.retry_after.unwrap_or(d.reset);
    resp.headers_mut()
        .insert(http::header::RETRY_AFTER, number(ceil_secs(retry).max(1)));
    resp
}

fn ceil_secs(d: std::time::Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_the_same_from_the_table_or_not() {
        for n in [0, 7, 42, SMALL - 1, SMALL, 100_000_000, u64::MAX] {
            assert_eq!(number(n), n.to_string().as_str(), "{n}");
            assert_eq!(limit_value(n), n.to_string().as_str(), "{n}");
            assert_eq!(limit_value(n), n.to_string().as_str(), "{n}, again");
        }
        assert_eq!(limit_value(5000), "5000");
        assert_eq!(limit_value(6000), "6000");
    }
}
