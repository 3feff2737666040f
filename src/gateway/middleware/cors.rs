//! CORS (`middleware.global.cors`): preflights are answered by the gateway (unless
//! `optionsPassthrough`), and responses to allowed origins are marked.

use http::{header, HeaderMap, HeaderValue, Method, StatusCode};

use super::{Ctx, Stop};
use crate::gateway::api::Api;
use crate::http::{self as h, HttpRequest, HttpResponse};

/// The methods a preflight is told when the API lists none.
const ANY_METHOD: &str = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS";

/// The API's CORS settings, with the header values they answer with made once.
pub struct Cors {
    /// Every origin is allowed: the API lists none, or lists `*`.
    any_origin: bool,
    /// The allowed origins, without a trailing `/`.
    origins: Box<[String]>,
    /// `Access-Control-Allow-Methods`, when the list makes a header value.
    methods: Option<HeaderValue>,
    allow_headers: AllowHeaders,
    /// `Access-Control-Max-Age`, when set.
    max_age: Option<HeaderValue>,
    credentials: bool,
    /// `Access-Control-Expose-Headers`, when some are listed.
    exposed: Option<HeaderValue>,
    /// Preflights go to the upstream.
    options_passthrough: bool,
}

/// `Access-Control-Allow-Headers` of a preflight's answer.
enum AllowHeaders {
    /// No list means any header: what the page asked for is echoed.
    Echo,
    /// The listed headers (none when the list makes no header value).
    Listed(Option<HeaderValue>),
}

impl Cors {
    /// When the API has CORS on.
    pub fn compile(api: &Api) -> Option<Self> {
        let cors = api.global.cors.as_ref().filter(|c| c.enabled)?;
        let methods = if cors.allowed_methods.is_empty() {
            ANY_METHOD.to_owned()
        } else {
            cors.allowed_methods.join(", ").to_ascii_uppercase()
        };
        let listed = |names: &[String]| HeaderValue::from_str(&names.join(", ")).ok();
        Some(Cors {
            any_origin: cors.allowed_origins.is_empty()
                || cors.allowed_origins.iter().any(|o| o == "*"),
            origins: cors
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_owned())
                .collect(),
            methods: HeaderValue::from_str(&methods).ok(),
            allow_headers: if cors.allowed_headers.is_empty() {
                AllowHeaders::Echo
            } else {
                AllowHeaders::Listed(listed(&cors.allowed_headers))
            },
            max_age: (cors.max_age > 0).then(|| HeaderValue::from(cors.max_age)),
            credentials: cors.allow_credentials,
            exposed: if cors.exposed_headers.is_empty() {
                None
            } else {
                listed(&cors.exposed_headers)
            },
            options_passthrough: cors.options_passthrough,
        })
    }

    /// Before the API's other steps: answers a preflight, or keeps the request's origin
    /// when it is allowed, for [`mark`](Cors::mark) (the proxy and the streams consume
    /// the request).
    pub fn request(&self, ctx: &mut Ctx<'_>) -> Result<(), Stop> {
        if let Some(resp) = self.preflight(&ctx.req) {
            return Err(Stop::Preflight(resp));
        }
        ctx.cors_origin = self.allowed_origin(ctx.req.headers());
        Ok(())
    }

    /// The origin to allow, when the request has one and it is allowed.
    fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        let ok = self.any_origin || self.origins.iter().any(|o| o.eq_ignore_ascii_case(text));
        ok.then(|| origin.clone())
    }

    fn preflight(&self, req: &HttpRequest) -> Option<HttpResponse> {
        if self.options_passthrough
            || req.method() != Method::OPTIONS
            || !req
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let mut resp = HttpResponse::new(h::empty());
        let Some(origin) = self.allowed_origin(req.headers()) else {
            *resp.status_mut() = StatusCode::FORBIDDEN;
            return Some(resp);
        };
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let headers = resp.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(v) = &self.methods {
            headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v.clone());
        }
        let allow_headers = match &self.allow_headers {
            AllowHeaders::Echo => req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned(),
            AllowHeaders::Listed(v) => v.clone(),
        };
        if let Some(v) = allow_headers {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
        if let Some(v) = &self.max_age {
            headers.insert(header::ACCESS_CONTROL_MAX_AGE, v.clone());
        }
        if self.credentials {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        Some(resp)
    }

    /// Marks an answer to an allowed origin (kept by [`request`](Cors::request)).
    pub fn mark(&self, ctx: &mut Ctx<'_>, resp: &mut HttpResponse) {
        let Some(origin) = ctx.cors_origin.take() else {
            return;
        };
        let headers = resp.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if self.credentials {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if let Some(v) = &self.exposed {
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v.clone());
        }
    }
}
