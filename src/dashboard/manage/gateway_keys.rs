//! The gateway's keys, managed from the dashboard: the same keys (and the same rules)
//! as the gateway's own `/sluice/keys`, scoped to the caller's organisation. A key
//! reaches only the organisation's APIs named in its access rights; its token is shown
//! once, and the store keeps its hash.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{BadJson, NotFound, NotJson, TooLarge, Unauthorized};
use crate::gateway::keys::{KeyRequest, Keys};

/// The path of one gateway key.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct KeyPath {
    /// The key's id.
    #[serde(rename = "keyId")]
    id: String,
}

/// The organisation's gateway keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct GatewayKeyList {
    /// Each key's policy (access rights, rate limit, quota, expiry), never its token.
    #[schema(value_type = Vec<Object>)]
    pub keys: Vec<Value>,
}

/// Keys read straight from the store: the dashboard keeps no cache of its own, and
/// gateways pick a change up within their `keys.cache_ttl`. HMAC secrets are sealed
/// with the gateway's secret, which the dashboard does not hold, so HMAC keys are made
/// through the gateway's own API.
pub(super) fn keys(ctx: &Ctx) -> Keys {
    Keys::new(ctx.state.store.clone(), std::time::Duration::ZERO, None)
}

#[utoipa::path(
    get,
    path = "/api/gateway/keys",
    tag = "gateway-keys",
    responses(
        (status = 200, description = "The organisation's gateway keys.", body = GatewayKeyList),
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list(ctx: Ctx) -> Result<Reply, ApiError> {
    let sessions = keys(&ctx)
        .list_of(Some(&ctx.caller.org_id))
        .await
        .map_err(ApiError::from)?;
    Reply::json(
        StatusCode::OK,
        GatewayKeyList {
            keys: sessions
                .iter()
                .map(|s| s.policy.public_view(&s.id))
                .collect(),
        },
    )
}

#[utoipa::path(
    post,
    path = "/api/gateway/keys",
    tag = "gateway-keys",
    request_body(content = Object, description = "`access_rights` (API id -> `allowed_methods`, `allowed_paths`), `rate_limit` (`rate`, `per`), `quota` (`max`, `renewal`), `expires`, `alias`, `inactive`, `meta`, `basic_auth`.", content_type = "application/json"),
    responses(
        (status = 201, description = "Made; `key` is shown this once.", body = Object),
        BadJson,
        Unauthorized,
        (status = 409, description = "The basic-auth user is taken.", body = ErrorBody),
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn create(ctx: Ctx) -> Result<Reply, ApiError> {
    let mut request: KeyRequest = ctx.json()?;
    let org = ctx.caller.org_id.clone();
    if request.org_id.as_ref().is_some_and(|o| *o != org) {
        return Err(ApiError::bad_request(
            "invalid field `org_id`: a key belongs to the caller's organisation",
        ));
    }
    if request.hmac {
        return Err(ApiError::bad_request(
            "invalid field `hmac`: HMAC keys are sealed with the gateway's secret; make them through the gateway's /sluice/keys",
        ));
    }
    request.org_id = Some(org.clone());
    let apis: Vec<String> = ctx
        .state
        .store
        .list_apis_of_org(&org)
        .await?
        .into_iter()
        .map(|a| a.id)
        .collect();
    let known = move |id: &str| apis.iter().any(|a| a == id);
    let (token, _, session) = keys(&ctx)
        .create(request, &known)
        .await
        .map_err(ApiError::from)?;
    let mut body = serde_json::json!({
        "key_id": session.id,
        "policy": session.policy.public_view(&session.id),
    });
    // A basic-auth key is used with its user name and password, not a token.
    if session.policy.basic_username.is_none() {
        body["key"] = token.into();
    }
    Reply::json(StatusCode::CREATED, body)
}

#[utoipa::path(
    delete,
    path = "/api/gateway/keys/{keyId}",
    tag = "gateway-keys",
    params(KeyPath),
    responses(
        (status = 200, description = "Revoked: gateways refuse it within their key cache time.", body = Object),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete(ctx: Ctx) -> Result<Reply, ApiError> {
    let KeyPath { id } = ctx.path()?;
    let keys = keys(&ctx);
    let mine = keys
        .get(&id)
        .await
        .map_err(ApiError::from)?
        .is_some_and(|s| s.org_id == ctx.caller.org_id);
    if !mine || !keys.delete(&id).await.map_err(ApiError::from)? {
        return Err(ApiError::not_found("key"));
    }
    Reply::json(
        StatusCode::OK,
        serde_json::json!({"key_id": id, "action": "deleted"}),
    )
}
