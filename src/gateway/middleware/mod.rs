//! The steps an API's requests run, one module per step, each holding what it compiled
//! from the API, its compile and its run; [`plan`] lists them in the order they run.
//! Each request step either lets the request go on or answers it; what no step answered
//! goes to the [`upstream`]; the response steps then see the answer. The phases of a
//! request, in that order, are read in `gateway::request`.

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
pub mod plan;
pub mod size_limit;
pub mod stream;
pub mod validate;

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method, StatusCode};

use super::api::{Api, Operation, Params};
use super::events::EventKind;
use super::keys::Session;
use super::proxy::{Origin, ProxyError};
use super::reply::error;
use super::services::Services;
use crate::http::{self as h, HttpRequest, HttpResponse};
use crate::limit::{Decision, LimitError};
use crate::telemetry::{self, SpanKind};

/// One request on its way through the steps: what every phase reads and writes.
pub struct Ctx<'a> {
    pub gw: &'a Services,
    pub api: &'a Arc<Api>,
    /// The operation the request resolved to.
    pub op: Option<Matched<'a>>,
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
    /// The request's origin when CORS allows it, read before the request is consumed,
    /// for the answer's marks.
    pub cors_origin: Option<HeaderValue>,
    /// Where the upstream's answer is to be kept, when the cache step took the request.
    pub cache: Option<cache::Pending<'a>>,
    /// The request's trace span, when traces are on.
    pub trace: Option<&'a telemetry::Span>,
}

/// The operation a request resolved to.
pub struct Matched<'a> {
    /// Its place among the API's operations, by which steps keep what they compiled for
    /// it.
    pub index: usize,
    pub op: &'a Operation,
    /// The path parameters.
    pub params: Params,
}

impl<'a> Ctx<'a> {
    /// A request for `api`, `rest` being its path below the listen path, resolved to
    /// its operation.
    pub fn new(
        gw: &'a Services,
        api: &'a Arc<Api>,
        method: &Method,
        rest: &'a str,
        req: HttpRequest,
        origin: Origin,
        trace: Option<&'a telemetry::Span>,
    ) -> Self {
        let op = api
            .operation_index(method, if rest.is_empty() { "/" } else { rest })
            .map(|(index, params)| Matched {
                index,
                op: &api.operations[index],
                params,
            });
        Ctx {
            gw,
            api,
            op,
            rest,
            req,
            origin,
            session: None,
            identity: None,
            claims: None,
            limit: None,
            cors_origin: None,
            cache: None,
            trace,
        }
    }
}

impl Ctx<'_> {
    pub fn operation(&self) -> Option<&Operation> {
        self.op.as_ref().map(|m| m.op)
    }

    /// The operation's place among the API's operations.
    pub fn op_index(&self) -> Option<usize> {
        self.op.as_ref().map(|m| m.index)
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

/// Why the request steps stopped before the upstream.
pub enum Stop {
    /// A step answered (a refusal, or an answer from the cache, a mock or a stream): the
    /// response steps still see it.
    Answered(HttpResponse),
    /// A CORS preflight, answered for the API as a whole before its steps: it goes out
    /// as it is.
    Preflight(HttpResponse),
}

impl From<HttpResponse> for Stop {
    fn from(resp: HttpResponse) -> Self {
        Stop::Answered(resp)
    }
}

/// The upstream phase: the proxy forwards what no step answered, and the cache keeps
/// its answer when the cache step asked for it.
pub async fn upstream(ctx: &mut Ctx<'_>) -> HttpResponse {
    let mut req = ctx.take_req();
    let span = upstream_span(ctx.trace, &mut req);
    let forwarded = ctx
        .gw
        .proxy
        .forward(ctx.api, req, ctx.rest, &ctx.origin)
        .await;
    end_upstream_span(span, &forwarded);
    match forwarded {
        Ok(resp) => match ctx.cache.take() {
            Some(pending) => pending.keep(&ctx.gw.cache, resp).await,
            None => resp,
        },
        Err(e) => proxy_failed(ctx.gw, ctx.api, ctx.key_id(), ctx.rest, e),
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
    gw: &Services,
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
