//! The gateway's own API under `/sluice/`, guarded by the gateway secret (header
//! `X-Sluice-Authorization`): keys (create, read, update, delete, reset quota), API
//! definitions kept in the store, and reload.
//!
//! ```text
//! GET    /sluice/keys                 POST /sluice/keys
//! GET    /sluice/keys/{id}            PUT  /sluice/keys/{id}      DELETE /sluice/keys/{id}
//! DELETE /sluice/keys/{id}/quota      (resets the key's quota and rate counters)
//! GET    /sluice/apis                 POST /sluice/apis           (an OpenAPI document)
//! GET    /sluice/apis/{id}            PUT  /sluice/apis/{id}      DELETE /sluice/apis/{id}
//! POST   /sluice/reload
//! ```

use http::{Method, StatusCode};

use super::api;
use super::keys::{self, KeyError, KeyRequest};
use super::reply::error;
use super::shared::Shared;
use crate::http::{self as h, HttpRequest, HttpResponse};
use crate::store::StoredApi;

/// The header that carries the gateway secret.
pub const SECRET_HEADER: &str = "x-sluice-authorization";

/// Requests to the gateway API are small; this bounds them.
const MAX_BODY: usize = 4 * 1024 * 1024;

pub async fn handle(gw: &Shared, req: HttpRequest, peer: std::net::SocketAddr) -> HttpResponse {
    let Some(secret) = gw.config.secret.as_deref() else {
        return error(
            StatusCode::NOT_FOUND,
            "the gateway API is off: set `secret` in the gateway config",
        );
    };
    let ip = peer.ip();
    if gw.failed_secrets.locked_out(ip) {
        let mut resp = error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many wrong secrets from this address: try again in a minute",
        );
        resp.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("60"),
        );
        return resp;
    }
    let given = req
        .headers()
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if !crate::secret::same(given, secret.as_bytes()) {
        gw.failed_secrets.failed(ip);
        tracing::warn!(client = %ip, "A request to the gateway API had a wrong secret.");
        return error(
            StatusCode::FORBIDDEN,
            &format!("the `{SECRET_HEADER}` header does not hold the gateway secret"),
        );
    }
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let parts: Vec<&str> = path.split('/').skip(2).collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["keys"]) => list_keys(gw).await,
        (&Method::POST, ["keys"]) => create_key(gw, req).await,
        (&Method::GET, ["keys", id]) => get_key(gw, id).await,
        (&Method::PUT, ["keys", id]) => update_key(gw, id, req).await,
        (&Method::DELETE, ["keys", id]) => delete_key(gw, id).await,
        (&Method::DELETE, ["keys", id, "quota"]) => reset_quota(gw, id).await,
        (&Method::GET, ["apis"]) => list_apis(gw),
        (&Method::POST, ["apis"]) => put_api(gw, None, req).await,
        (&Method::GET, ["apis", id]) => get_api(gw, id).await,
        (&Method::PUT, ["apis", id]) => put_api(gw, Some(id), req).await,
        (&Method::DELETE, ["apis", id]) => delete_api(gw, id).await,
        (&Method::POST, ["reload"]) => reload(gw).await,
        (
            _,
            ["keys"] | ["keys", _] | ["keys", _, "quota"] | ["apis"] | ["apis", _] | ["reload"],
        ) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here"),
        _ => error(StatusCode::NOT_FOUND, "no such gateway API path"),
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(req: HttpRequest) -> Result<T, HttpResponse> {
    let body = h::read_body(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let de = &mut serde_json::Deserializer::from_slice(&body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = if path.is_empty() || path == "." {
            format!("bad request body: {inner}")
        } else {
            format!("bad request body at `{path}`: {inner}")
        };
        error(StatusCode::BAD_REQUEST, &message)
    })
}

fn key_error(e: KeyError) -> HttpResponse {
    match e {
        KeyError::Invalid { .. } => error(StatusCode::BAD_REQUEST, &e.to_string()),
        KeyError::UserTaken(_) => error(StatusCode::CONFLICT, &e.to_string()),
        KeyError::NotFound => error(StatusCode::NOT_FOUND, "no such key"),
        KeyError::Store(e) => store_error(&e),
    }
}

fn store_error(e: &crate::store::StoreError) -> HttpResponse {
    tracing::error!(error = %e, "Store failed.");
    error(StatusCode::SERVICE_UNAVAILABLE, "the store is unavailable")
}

fn known_apis(gw: &Shared) -> impl Fn(&str) -> bool + Sync {
    let table = gw.table.current();
    move |id| table.get(id).is_some()
}

async fn list_keys(gw: &Shared) -> HttpResponse {
    match gw.keys.list().await {
        Ok(keys) => h::json(
            StatusCode::OK,
            &serde_json::json!({
                "keys": keys.iter().map(|s| s.policy.public_view(&s.id)).collect::<Vec<_>>()
            }),
        ),
        Err(e) => key_error(e),
    }
}

async fn create_key(gw: &Shared, req: HttpRequest) -> HttpResponse {
    let request: KeyRequest = match read_json(req).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match gw.keys.create(request, &known_apis(gw)).await {
        Ok((token, hmac_secret, session)) => {
            let mut body = serde_json::json!({
                "key_id": session.id,
                "action": "added",
                "policy": session.policy.public_view(&session.id),
            });
            // A basic-auth key is used with its user name and password, not a token.
            if session.policy.basic_username.is_none() {
                body["key"] = token.into();
            }
            if let Some(secret) = hmac_secret {
                body["hmac_secret"] = secret.into();
            }
            h::json(StatusCode::CREATED, &body)
        }
        Err(e) => key_error(e),
    }
}

async fn get_key(gw: &Shared, id: &str) -> HttpResponse {
    match gw.keys.get(id).await {
        Ok(Some(s)) => h::json(StatusCode::OK, &s.policy.public_view(&s.id)),
        Ok(None) => error(StatusCode::NOT_FOUND, "no such key"),
        Err(e) => key_error(e),
    }
}

async fn update_key(gw: &Shared, id: &str, req: HttpRequest) -> HttpResponse {
    let request: KeyRequest = match read_json(req).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match gw.keys.update(id, request, &known_apis(gw)).await {
        Ok((hmac_secret, session)) => {
            // Open streams the change no longer lets in end before it is answered.
            gw.review_leases().await;
            let mut body = serde_json::json!({
                "key_id": session.id,
                "action": "modified",
                "policy": session.policy.public_view(&session.id),
            });
            if let Some(secret) = hmac_secret {
                body["hmac_secret"] = secret.into();
            }
            h::json(StatusCode::OK, &body)
        }
        Err(e) => key_error(e),
    }
}

async fn delete_key(gw: &Shared, id: &str) -> HttpResponse {
    match gw.keys.delete(id).await {
        Ok(true) => {
            forget_counters(gw, id).await;
            // Its open streams end before the deletion is answered.
            gw.review_leases().await;
            h::json(
                StatusCode::OK,
                &serde_json::json!({"key_id": id, "action": "deleted"}),
            )
        }
        Ok(false) => error(StatusCode::NOT_FOUND, "no such key"),
        Err(e) => key_error(e),
    }
}

async fn reset_quota(gw: &Shared, id: &str) -> HttpResponse {
    match gw.keys.get(id).await {
        Ok(Some(_)) => {
            forget_counters(gw, id).await;
            h::json(
                StatusCode::OK,
                &serde_json::json!({"key_id": id, "action": "quota reset"}),
            )
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "no such key"),
        Err(e) => key_error(e),
    }
}

async fn forget_counters(gw: &Shared, id: &str) {
    for bucket in [keys::rate_bucket(id), keys::quota_bucket(id)] {
        if let Err(e) = gw.limiter.reset(&bucket).await {
            tracing::warn!(error = %e, "Cannot reset a key's counters.");
        }
    }
}

fn list_apis(gw: &Shared) -> HttpResponse {
    let table = gw.table.current();
    let apis: Vec<_> = table
        .apis()
        .map(|a| {
            serde_json::json!({
                "id": a.id,
                "name": a.name,
                "listen_path": a.listen_path,
                "source": a.source,
                "streams": a.streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
                "client_streams": gw.streams.client_streams(&a.id),
                "failed_streams": gw.streams.failed_streams(&a.id),
                "stream_states": gw.streams.states(&a.id, a.streams.iter().map(|s| s.name.as_str())),
            })
        })
        .collect();
    let errors: Vec<_> = table
        .errors
        .iter()
        .map(|e| serde_json::json!({"api_id": e.api_id, "error": e.to_string()}))
        .collect();
    h::json(
        StatusCode::OK,
        &serde_json::json!({"apis": apis, "errors": errors}),
    )
}

async fn get_api(gw: &Shared, id: &str) -> HttpResponse {
    if let Some(api) = gw.table.current().get(id) {
        return h::json(StatusCode::OK, &api.document);
    }
    match gw.keys.store().api(id).await {
        Ok(Some(stored)) => match serde_json::from_str(&stored.document) {
            Ok(doc) => h::json(StatusCode::OK, &doc),
            Err(_) => error(StatusCode::NOT_FOUND, "no such API"),
        },
        Ok(None) => error(StatusCode::NOT_FOUND, "no such API"),
        Err(e) => store_error(&e),
    }
}

/// Stores a definition after checking it compiles; the gateway then reloads.
async fn put_api(gw: &Shared, id: Option<&str>, req: HttpRequest) -> HttpResponse {
    let doc: serde_json::Value = match read_json(req).await {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    let compiled = match api::from_json("request", &doc) {
        Ok(a) => a,
        Err(e) => {
            return h::json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({
                    "error": e.to_string(),
                    "details": e.errors.0.iter().map(|c| {
                        serde_json::json!({
                            "path": c.location.as_ref().map(|l| l.path.clone()).unwrap_or_default(),
                            "message": c.message,
                        })
                    }).collect::<Vec<_>>(),
                }),
            )
        }
    };
    if let Some(id) = id {
        if compiled.id != id {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "`{}.info.id` is `{}`, not `{id}` as in the path",
                    api::EXTENSION,
                    compiled.id
                ),
            );
        }
    }
    let table = gw.table.current();
    if let Some(other) = table.get(&compiled.id) {
        if !other.source.starts_with("store:") {
            return error(
                StatusCode::CONFLICT,
                &format!(
                    "API `{}` is defined by a file ({})",
                    compiled.id, other.source
                ),
            );
        }
    }
    if let Some(other) = table
        .apis()
        .find(|a| a.listen_path == compiled.listen_path && a.id != compiled.id)
    {
        return error(
            StatusCode::CONFLICT,
            &format!(
                "listen path `{}` is used by API `{}`",
                compiled.listen_path, other.id
            ),
        );
    }
    let stored = StoredApi {
        id: compiled.id.clone(),
        org_id: compiled.org_id.clone(),
        document: doc.to_string(),
        updated_at: chrono::Utc::now().timestamp(),
    };
    if let Err(e) = gw.keys.store().put_api(&stored).await {
        return store_error(&e);
    }
    gw.reload(true).await;
    gw.cache.forget_api(&compiled.id);
    h::json(
        if id.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        },
        &serde_json::json!({"id": compiled.id, "action": if id.is_some() { "modified" } else { "added" }}),
    )
}

async fn delete_api(gw: &Shared, id: &str) -> HttpResponse {
    let org_id = match gw.keys.store().api(id).await {
        Ok(stored) => stored.map(|a| a.org_id),
        Err(e) => return store_error(&e),
    };
    match gw.keys.store().delete_api(id).await {
        Ok(true) => {
            gw.reload(true).await;
            gw.cache.forget_api(id);
            // Keys naming it must not reach an API made later with the same id.
            if let Err(e) = gw
                .keys
                .forget_api(org_id.as_deref().unwrap_or(""), id)
                .await
            {
                tracing::warn!(api_id = %id, error = %e, "Cannot take the deleted API out of its keys.");
            }
            h::json(
                StatusCode::OK,
                &serde_json::json!({"id": id, "action": "deleted"}),
            )
        }
        Ok(false) => error(StatusCode::NOT_FOUND, "no such API in the store"),
        Err(e) => store_error(&e),
    }
}

async fn reload(gw: &Shared) -> HttpResponse {
    gw.reload(true).await;
    let table = gw.table.current();
    h::json(
        StatusCode::OK,
        &serde_json::json!({
            "action": "reloaded",
            "apis": table.len(),
            "errors": table.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        }),
    )
}
