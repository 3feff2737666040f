//! CORS (`middleware.global.cors`): preflights are answered by the gateway (unless
//! `optionsPassthrough`), and responses to allowed origins are marked.

use http::{header, HeaderValue, Method, StatusCode};

use super::Ctx;
use crate::apidef::extension::Cors;
use crate::http::{self as h, HttpResponse};

fn config<'a>(ctx: &'a Ctx<'_>) -> Option<&'a Cors> {
    ctx.api.global.cors.as_ref().filter(|c| c.enabled)
}

/// The origin to allow, when the request has one and it is allowed.
fn allowed_origin(cors: &Cors, ctx: &Ctx<'_>) -> Option<HeaderValue> {
    let origin = ctx.req.headers().get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    let ok = cors.allowed_origins.is_empty()
        || cors
            .allowed_origins
            .iter()
            .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(text));
    ok.then(|| origin.clone())
}

pub fn preflight(ctx: &Ctx<'_>) -> Option<HttpResponse> {
    let cors = config(ctx)?;
    if cors.options_passthrough
        || ctx.req.method() != Method::OPTIONS
        || !ctx
            .req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        return None;
    }
    let mut resp = HttpResponse::new(h::empty());
    let Some(origin) = allowed_origin(cors, ctx) else {
        *resp.status_mut() = StatusCode::FORBIDDEN;
        return Some(resp);
    };
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let headers = resp.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    let methods = if cors.allowed_methods.is_empty() {
        "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS".to_owned()
    } else {
        cors.allowed_methods.join(", ").to_ascii_uppercase()
    };
    if let Ok(v) = HeaderValue::from_str(&methods) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
    }
    let allow_headers = if cors.allowed_headers.is_empty() {
        // Echo what the page asked for: no list means any header.
        ctx.req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
    } else {
        HeaderValue::from_str(&cors.allowed_headers.join(", ")).ok()
    };
    if let Some(v) = allow_headers {
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
    if cors.max_age > 0 {
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from(cors.max_age),
        );
    }
    if cors.allow_credentials {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    Some(resp)
}

/// The request's origin when it is allowed, read before the chain takes the request
/// on (the proxy and the streams consume it) for [`mark`].
pub fn origin(ctx: &Ctx<'_>) -> Option<HeaderValue> {
    allowed_origin(config(ctx)?, ctx)
}

/// Marks an answer to an allowed origin ([`origin`]).
pub fn mark(ctx: &Ctx<'_>, origin: HeaderValue, resp: &mut HttpResponse) {
    let Some(cors) = config(ctx) else { return };
    let headers = resp.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    if cors.allow_credentials {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    if !cors.exposed_headers.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&cors.exposed_headers.join(", ")) {
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v);
        }
    }
}
