//! Cross-origin resource sharing for mounted handlers: answers preflights and marks
//! responses to allowed origins, so that browser pages on other origins can open streams.

use http::{header, HeaderValue, Method, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{empty, HttpRequest, HttpResponse};

#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct CorsConfig {
    /// Answer preflights and add `Access-Control-Allow-Origin` to responses.
    #[serde(default)]
    pub enabled: bool,
    /// Origins allowed (`https://app.example.com`), or `*` for any.
    #[serde(default = "any_origin")]
    pub allowed_origins: Vec<String>,
    /// Request headers a page may send besides the CORS-safelisted ones (`Last-Event-ID`
    /// is always allowed).
    #[serde(default)]
    pub allowed_headers: Vec<String>,
}

fn any_origin() -> Vec<String> {
    vec!["*".into()]
}

impl CorsConfig {
    /// The value of `Access-Control-Allow-Origin` for a request from `origin`, if allowed.
    fn allow_origin(&self, req: &HttpRequest) -> Option<HeaderValue> {
        if !self.enabled {
            return None;
        }
        let origin = req.headers().get(header::ORIGIN)?;
        let allowed = self.allowed_origins.iter().any(|o| {
            o == "*"
                || origin
                    .to_str()
                    .is_ok_and(|v| v.eq_ignore_ascii_case(o.trim_end_matches('/')))
        });
        allowed.then(|| origin.clone())
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`), when
    /// CORS is on; other requests go on.
    pub fn preflight(&self, req: &HttpRequest, verbs: &[Method]) -> Option<HttpResponse> {
        if !self.enabled
            || req.method() != Method::OPTIONS
            || !req
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let mut resp = HttpResponse::new(empty());
        let Some(origin) = self.allow_origin(req) else {
            *resp.status_mut() = StatusCode::FORBIDDEN;
            return Some(resp);
        };
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        let methods = verbs
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if let Ok(v) = HeaderValue::from_str(&methods) {
            h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        let mut headers = vec!["Last-Event-ID".to_owned()];
        headers.extend(self.allowed_headers.iter().cloned());
        if let Ok(v) = HeaderValue::from_str(&headers.join(", ")) {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        Some(resp)
    }

    /// Marks `resp` for a cross-origin request from an allowed origin.
    pub fn decorate(&self, req_origin: Option<HeaderValue>, resp: &mut HttpResponse) {
        if let Some(origin) = req_origin {
            let h = resp.headers_mut();
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            h.insert(header::VARY, HeaderValue::from_static("Origin"));
        }
    }

    /// The origin to echo on the response to `req`, taken before the request is consumed.
    pub fn origin_for(&self, req: &HttpRequest) -> Option<HeaderValue> {
        self.allow_origin(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, origin: &str) -> HttpRequest {
        http::Request::builder()
            .method(method)
            .uri("/s")
            .header(header::ORIGIN, origin)
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "GET")
            .body(super::super::empty())
            .unwrap()
    }

    #[test]
    fn preflight_allows_listed_origins_only() {
        let cors = CorsConfig {
            enabled: true,
            allowed_origins: vec!["https://a.example".into()],
            allowed_headers: vec![],
        };
        let ok = cors
            .preflight(&req("OPTIONS", "https://a.example"), &[Method::GET])
            .unwrap();
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert_eq!(ok.headers()[header::ACCESS_CONTROL_ALLOW_METHODS], "GET");
        let refused = cors
            .preflight(&req("OPTIONS", "https://b.example"), &[Method::GET])
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(cors
            .preflight(&req("GET", "https://a.example"), &[Method::GET])
            .is_none());
    }
}
