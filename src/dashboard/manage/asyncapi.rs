//! `GET /api/apis/streams/{apiId}/asyncapi`: the AsyncAPI 3.0 document of a streaming
//! API, made from its `x-sluice-streaming` (see [`crate::apidef::asyncapi`]), for
//! the API's own organisation: it describes the brokers the streams reach too.

use std::collections::HashMap;
use std::sync::Arc;

use http::StatusCode;

use super::apis::{find, ApiPath, Kind};
use crate::apidef::{self, asyncapi};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{NotFound, Unauthorized};
use crate::store::StoredApi;

/// The longest `host` accepted.
const MAX_HOST: usize = 255;

#[utoipa::path(
    get,
    path = "/api/apis/streams/{apiId}/asyncapi",
    tag = "apis",
    params(
        ApiPath,
        ("host" = Option<String>, Query, description = "The gateway's `host[:port]` as clients reach it; by default the host of the document's first `servers` URL, else `localhost:8080`."),
        ("tls" = Option<bool>, Query, description = "Clients reach the gateway over TLS (`https`, `wss`); by default as the first `servers` URL says."),
    ),
    responses(
        (status = 200, description = "The AsyncAPI 3.0 document.", body = Object),
        (status = 400, description = "A bad `host` or `tls`.", body = ErrorBody),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn asyncapi(ctx: Ctx) -> Result<Reply, ApiError> {
    let (stored, doc) = find(&ctx, Kind::Streams).await?;
    let host = match ctx.query("host") {
        Some(host) => checked_host(host)?,
        None => default_host(&doc),
    };
    let tls = match ctx.query("tls") {
        Some(_) => ctx.flag("tls")?,
        None => default_tls(&doc),
    };
    let compiled = compile(&ctx, &stored)
        .await?
        .ok_or_else(|| ApiError::Internal("the stored definition does not compile".into()))?;
    let target = asyncapi::Target {
        host,
        tls,
        brokers: true,
    };
    Reply::json(StatusCode::OK, asyncapi::document(&compiled, &target))
}

/// Compiled definitions, by API id and a hash of the stored text.
#[derive(Default)]
pub struct Compiled(parking_lot::Mutex<HashMap<(String, u64), Arc<apidef::Definition>>>);

/// Definitions kept compiled at most; past it the cache starts again.
const MAX_COMPILED: usize = 256;

/// A stored definition compiled as the gateway compiles it; `None` when it does not.
/// Compiling compiles the streams' mappings: off the serving threads, as for a write,
/// and once per stored text.
pub async fn compile(
    ctx: &Ctx,
    stored: &StoredApi,
) -> Result<Option<Arc<apidef::Definition>>, ApiError> {
    let key = (
        stored.id.clone(),
        xxhash_rust::xxh64::xxh64(stored.document.as_bytes(), 0),
    );
    if let Some(api) = ctx.state.manage.compiled.0.lock().get(&key) {
        return Ok(Some(api.clone()));
    }
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(&stored.document) else {
        return Ok(None);
    };
    let egress = ctx.state.egress.clone();
    let id = stored.id.clone();
    let compiled = tokio::task::spawn_blocking(move || {
        let options = apidef::CompileOptions {
            egress: Some(egress),
            ..Default::default()
        };
        apidef::from_json_with(&id, &doc, &options).ok()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("compiling the definition stopped: {e}")))?;
    let Some(api) = compiled.map(Arc::new) else {
        return Ok(None);
    };
    let mut cache = ctx.state.manage.compiled.0.lock();
    if cache.len() >= MAX_COMPILED {
        cache.clear();
    }
    cache.insert(key, api.clone());
    Ok(Some(api))
}

/// The first `servers` URL of an OpenAPI document.
fn first_server(doc: &serde_json::Value) -> Option<url::Url> {
    let url = doc.pointer("/servers/0/url")?.as_str()?;
    url::Url::parse(url).ok()
}

/// The gateway's `host[:port]` as the document's first `servers` URL names it, else
/// `localhost:8080`.
pub fn default_host(doc: &serde_json::Value) -> String {
    first_server(doc)
        .and_then(|u| {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            Some(format!("{}{port}", u.host_str()?))
        })
        .unwrap_or_else(|| "localhost:8080".into())
}

/// Whether the document's first `servers` URL is `https`.
pub fn default_tls(doc: &serde_json::Value) -> bool {
    first_server(doc).is_some_and(|u| u.scheme() == "https")
}

/// `host` when it is a host name or address with an optional port, and nothing else.
fn checked_host(host: &str) -> Result<String, ApiError> {
    let fine = !host.is_empty()
        && host.len() <= MAX_HOST
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if fine {
        Ok(host.to_owned())
    } else {
        Err(ApiError::bad_request(
            "query parameter `host`: a host name or address with an optional port is expected",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_a_name_or_address_and_an_optional_port() {
        for fine in ["api.example.com", "127.0.0.1:8080", "[::1]:443", "gw-1"] {
            assert_eq!(checked_host(fine).unwrap(), fine);
        }
        let long = "a".repeat(MAX_HOST + 1);
        for bad in ["", "a b", "evil.com/path", "x\"y", "h?q", long.as_str()] {
            assert!(checked_host(bad).is_err(), "{bad}");
        }
    }
}
