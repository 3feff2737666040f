//! `$sluice_context.<name>` placeholders: values of the request that make a stream per
//! client (`consumer_group: $sluice_context.identity` gives each caller a group).
//!
//! Names: `identity` (the key id or the JWT's identity), `key_id`, `headers_<Name>` (a
//! request header; `_` stands for `-`), `request_data_<name>` (a query value) and
//! `jwt_claims_<name>` (a claim of the caller's JWT). Tyk Streams' `$tyk_context.<name>`
//! is the same placeholder.

use serde_json::{Map, Value};

use crate::apidef::streaming::CONTEXTS;
use crate::http::HttpRequest;

/// Who a request is from, as authentication found.
#[derive(Default)]
pub struct Caller<'a> {
    pub key_id: Option<&'a str>,
    pub identity: Option<&'a str>,
    pub claims: Option<&'a Map<String, Value>>,
    /// The key's metadata, for the filters of the stream outputs (`@caller.meta`).
    pub meta: Option<&'a Map<String, Value>>,
}

impl From<&Caller<'_>> for crate::http::caller::Caller {
    /// The caller as the stream outputs keep it, for their per-client filters.
    fn from(c: &Caller<'_>) -> Self {
        crate::http::caller::Caller {
            key_id: c.key_id.map(str::to_owned),
            identity: c.identity.map(str::to_owned),
            claims: c.claims.cloned(),
            meta: c.meta.cloned(),
        }
    }
}

/// Values longer than this are refused: they name consumer groups and topics.
const MAX_VALUE: usize = 128;

/// `template` with every placeholder replaced by the request's value. A value must be
/// plain (letters, digits, `.`, `_`, `-`, `@`), so that nothing from a request becomes
/// code in a mapping or interpolation of the stream.
pub fn resolve(template: &Value, req: &HttpRequest, caller: &Caller<'_>) -> Result<Value, String> {
    match template {
        Value::String(s) if next_placeholder(s).is_some() => {
            substitute(s, req, caller).map(Value::String)
        }
        Value::Array(items) => items
            .iter()
            .map(|v| resolve(v, req, caller))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                out.insert(k.clone(), resolve(v, req, caller)?);
            }
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

fn substitute(text: &str, req: &HttpRequest, caller: &Caller<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, prefix)) = next_placeholder(rest) {
        out.push_str(&rest[..at]);
        let after = &rest[at + prefix.len()..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(after.len());
        let name = &after[..end];
        let value = lookup(name, req, caller)
            .ok_or_else(|| format!("the request gives no value for `{prefix}{name}`"))?;
        if value.is_empty()
            || value.len() > MAX_VALUE
            || !value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c))
        {
            return Err(format!(
                "the value for `{prefix}{name}` must be 1 to {MAX_VALUE} letters, digits, `.`, `_`, `-` or `@`"
            ));
        }
        out.push_str(&value);
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Where the first placeholder in `text` starts, and the prefix it is written with.
fn next_placeholder(text: &str) -> Option<(usize, &'static str)> {
    CONTEXTS
        .iter()
        .filter_map(|prefix| text.find(prefix).map(|at| (at, *prefix)))
        .min_by_key(|(at, _)| *at)
}

fn lookup(name: &str, req: &HttpRequest, caller: &Caller<'_>) -> Option<String> {
    if name == "identity" {
        return caller.identity.map(str::to_owned);
    }
    if name == "key_id" {
        return caller.key_id.map(str::to_owned);
    }
    if let Some(header) = name.strip_prefix("headers_") {
        let header = header.replace('_', "-");
        return req
            .headers()
            .get(header.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
    }
    if let Some(key) = name.strip_prefix("request_data_") {
        let query = req.uri().query()?;
        return url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned());
    }
    if let Some(claim) = name.strip_prefix("jwt_claims_") {
        return match caller.claims?.get(claim)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(uri: &str) -> HttpRequest {
        http::Request::get(uri)
            .header("x-team", "blue")
            .body(crate::http::empty())
            .unwrap()
    }

    #[test]
    fn placeholders_take_the_request_values() {
        let template = json!({
            "input": {"kafka": {"consumer_group": "g-$sluice_context.request_data_user", "topics": ["$sluice_context.headers_X_Team"]}},
            "n": 3
        });
        let claims = json!({"tenant": "acme"});
        let caller = Caller {
            key_id: Some("k1"),
            identity: Some("alice"),
            claims: claims.as_object(),
            meta: None,
        };
        let v = resolve(&template, &req("/x?user=bob"), &caller).unwrap();
        assert_eq!(v["input"]["kafka"]["consumer_group"], "g-bob");
        assert_eq!(v["input"]["kafka"]["topics"][0], "blue");
        assert_eq!(v["n"], 3);
        let t = json!(
            "$sluice_context.identity/$sluice_context.jwt_claims_tenant/$sluice_context.key_id"
        );
        assert_eq!(resolve(&t, &req("/x"), &caller).unwrap(), "alice/acme/k1");
    }

    #[test]
    fn tyk_placeholders_are_the_same_placeholders() {
        let claims = json!({"sub": "u-1"});
        let caller = Caller {
            key_id: Some("k1"),
            identity: Some("alice"),
            claims: claims.as_object(),
            meta: None,
        };
        let t = json!("root = if this.user != \"$tyk_context.jwt_claims_sub\" { deleted() } # $sluice_context.key_id");
        assert_eq!(
            resolve(&t, &req("/x"), &caller).unwrap(),
            "root = if this.user != \"u-1\" { deleted() } # k1"
        );
        assert!(crate::apidef::streaming::per_client(
            &json!({"m": "$tyk_context.key_id"})
        ));
        let e = resolve(
            &json!("$tyk_context.request_data_user"),
            &req("/x"),
            &caller,
        )
        .unwrap_err();
        assert!(e.contains("`$tyk_context.request_data_user`"), "{e}");
    }

    #[test]
    fn missing_and_unsafe_values_are_refused() {
        let t = json!("$sluice_context.request_data_user");
        let caller = Caller::default();
        let e = resolve(&t, &req("/x"), &caller).unwrap_err();
        assert!(e.contains("no value"), "{e}");
        let e = resolve(&t, &req("/x?user=%24%7B!env(%22HOME%22)%7D"), &caller).unwrap_err();
        assert!(e.contains("must be"), "{e}");
    }
}
