//! Who a stream client is, as the per-subscriber filter of a hub sees it (`@caller`).
//!
//! Whoever let the client in (the gateway, after authentication) puts a [`Caller`] into
//! the request's extensions; the hub's route adds the request's query values and keeps
//! the result with the client's subscription, so each event is matched against it
//! without reading the request again.

use serde_json::Map;

use crate::http::HttpRequest;
use crate::value::{Object, Value};

/// What authentication found out about a request.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The gateway key's id.
    pub key_id: Option<String>,
    /// The key id, or the JWT's identity claim.
    pub identity: Option<String>,
    /// The JWT's claims.
    pub claims: Option<Map<String, serde_json::Value>>,
    /// The gateway key's metadata (`meta_data`).
    pub meta: Option<Map<String, serde_json::Value>>,
}

/// The bytes a subscriber's `@caller` may hold (its query, claims and key metadata
/// written out as JSON): every connected client keeps one, so a client cannot make the
/// hub hold much on its behalf.
pub const MAX_BYTES: usize = 8 * 1024;

/// Query parameters a subscriber's `@caller.query` may hold.
pub const MAX_QUERY_VALUES: usize = 32;

/// A request whose caller is too large to keep for filtering.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallerError {
    #[error("a filtered stream takes at most {MAX_QUERY_VALUES} query parameters")]
    TooManyQueryValues,
    #[error(
        "the caller's values (query, token claims, key metadata) exceed {MAX_BYTES} bytes, \
         the most a filtered stream keeps per client"
    )]
    TooLarge,
}

/// `@caller` for `req`: `key_id`, `identity`, `claims`, `meta` (null when the request
/// carries no such thing) and `query` (each parameter's first value).
pub fn value_of(req: &HttpRequest) -> Result<Value, CallerError> {
    let found = req.extensions().get::<Caller>();
    let mut size = 0usize;
    let mut text = |s: Option<&String>| -> Value {
        match s {
            Some(s) => {
                size += s.len();
                Value::String(s.clone())
            }
            None => Value::Null,
        }
    };
    let mut out = Object::new();
    out.insert("key_id".into(), text(found.and_then(|c| c.key_id.as_ref())));
    out.insert(
        "identity".into(),
        text(found.and_then(|c| c.identity.as_ref())),
    );
    for (name, map) in [
        ("claims", found.and_then(|c| c.claims.as_ref())),
        ("meta", found.and_then(|c| c.meta.as_ref())),
    ] {
        let value = match map {
            Some(map) => {
                let map = serde_json::Value::Object(map.clone());
                // Claims and metadata were bounded where they came from (a token in a
                // header, a key's stored record); this bounds what each client keeps.
                size += serde_json::to_vec(&map).map_or(usize::MAX / 2, |v| v.len());
                Value::from(map)
            }
            None => Value::Null,
        };
        out.insert(name.into(), value);
    }
    let mut query = Object::new();
    if let Some(q) = req.uri().query() {
        for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
            if query.contains_key(k.as_ref()) {
                continue;
            }
            if query.len() == MAX_QUERY_VALUES {
                return Err(CallerError::TooManyQueryValues);
            }
            size += k.len() + v.len();
            query.insert(k.into_owned(), Value::String(v.into_owned()));
        }
    }
    out.insert("query".into(), Value::Object(query));
    if size > MAX_BYTES {
        return Err(CallerError::TooLarge);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(uri: &str, caller: Option<Caller>) -> HttpRequest {
        let mut req = http::Request::builder()
            .uri(uri)
            .body(crate::http::empty())
            .unwrap();
        if let Some(c) = caller {
            req.extensions_mut().insert(c);
        }
        req
    }

    fn json(v: Value) -> serde_json::Value {
        serde_json::from_slice(&v.to_json()).unwrap()
    }

    #[test]
    fn the_caller_holds_what_authentication_found_and_the_query() {
        let claims = serde_json::json!({"tenant": "t1", "n": 3});
        let v = value_of(&req(
            "/s?a=1&a=2&b=x%20y",
            Some(Caller {
                key_id: Some("k1".into()),
                identity: Some("k1".into()),
                claims: claims.as_object().cloned(),
                meta: None,
            }),
        ))
        .unwrap();
        let json = json(v);
        assert_eq!(json["key_id"], "k1");
        assert_eq!(json["claims"]["tenant"], "t1");
        assert_eq!(json["meta"], serde_json::Value::Null);
        // The first of a repeated parameter, as the other query readers take it.
        assert_eq!(json["query"], serde_json::json!({"a": "1", "b": "x y"}));
    }

    #[test]
    fn an_anonymous_request_has_nulls_and_its_query() {
        let json = json(value_of(&req("/s", None)).unwrap());
        assert_eq!(json["key_id"], serde_json::Value::Null);
        assert_eq!(json["query"], serde_json::json!({}));
    }

    #[test]
    fn a_caller_too_large_to_keep_is_refused() {
        let many: Vec<String> = (0..=MAX_QUERY_VALUES).map(|i| format!("q{i}=1")).collect();
        assert_eq!(
            value_of(&req(&format!("/s?{}", many.join("&")), None)),
            Err(CallerError::TooManyQueryValues)
        );
        let long = "x".repeat(MAX_BYTES);
        assert_eq!(
            value_of(&req(&format!("/s?q={long}"), None)),
            Err(CallerError::TooLarge)
        );
        let meta = serde_json::json!({"blob": "y".repeat(MAX_BYTES)});
        let caller = Caller {
            meta: meta.as_object().cloned(),
            ..Default::default()
        };
        assert_eq!(
            value_of(&req("/s", Some(caller))),
            Err(CallerError::TooLarge)
        );
    }
}
