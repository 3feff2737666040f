//! Organisations, users and dashboard keys. Every caller belongs to one organisation and
//! sees only it. Admins of the instance's organisation (the first one) create
//! organisations (each with its own first admin); admins manage the users and keys of
//! their own; members see the users and their own keys.
//! A key is shown once, when it is made.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::dashboard::auth::{self, generate_key, hash_key, Role};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{BadJson, NotAdmin, NotFound, NotJson, Unauthorized};
use crate::store::{DashboardKeyRecord, UserRecord};

/// The path of one organisation.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct OrgPath {
    /// The organisation's id: only the caller's own is found.
    #[serde(rename = "orgId")]
    id: String,
}

/// The path of one user.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct UserPath {
    /// The user's id.
    #[serde(rename = "userId")]
    id: String,
}

/// The path of one dashboard key.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct KeyPath {
    /// The key's id.
    #[serde(rename = "keyId")]
    id: String,
}

/// `POST /api/orgs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgInput {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// The name of the organisation's first admin; `admin` when not given.
    #[schema(min_length = 1, max_length = 200)]
    pub admin_name: Option<String>,
}

/// An organisation.
#[derive(Debug, Serialize, ToSchema)]
pub struct Org {
    pub id: String,
    pub name: String,
    /// RFC 3339, UTC.
    pub created_at: String,
}

/// The answer to a request that made a key: the spec's outcome plus the key, shown this
/// once.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyOutcome {
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "Message")]
    pub message: String,
    /// The database id of what was created.
    #[serde(rename = "Meta")]
    pub meta: String,
    #[serde(rename = "ID")]
    pub id: String,
    /// The user the key belongs to.
    pub user_id: String,
    pub key_id: String,
    /// The key itself: it cannot be shown again.
    pub key: String,
}

/// A user.
#[derive(Debug, Serialize, ToSchema)]
pub struct User {
    pub id: String,
    pub org_id: String,
    pub name: String,
    /// `admin` or `member`.
    pub role: String,
    pub created_at: String,
}

/// `POST /api/users`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserInput {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// `member` when not given.
    pub role: Option<RoleInput>,
}

/// A user's role.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoleInput {
    Admin,
    Member,
}

/// A key, without its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct Key {
    pub id: String,
    pub user_id: String,
    pub org_id: String,
    pub created_at: String,
}

/// `POST /api/keys`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyInput {
    /// Whose key; the caller's when not given. Only admins make keys for others.
    pub user_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserList {
    pub users: Vec<User>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<Key>,
}

fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() || name.len() > 200 {
        return Err(ApiError::bad_request(format!(
            "invalid field `{field}`: 1 to 200 characters"
        )));
    }
    Ok(())
}

#[utoipa::path(
    post,
    path = "/api/orgs",
    tag = "orgs",
    request_body(content = OrgInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Created with its first admin; the admin's key is in `key`, shown once.", body = KeyOutcome),
        BadJson,
        Unauthorized,
        (status = 403, description = "The caller is not an admin of the instance's organisation.", body = ErrorBody),
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn create_org(ctx: Ctx) -> Result<Reply, ApiError> {
    ctx.caller.require_admin()?;
    // Organisations are one another's tenants: an admin of one may not make more.
    if ctx.state.store.instance_org().await?.as_deref() != Some(ctx.caller.org_id.as_str()) {
        return Err(ApiError::Forbidden(
            "only an admin of the instance's organisation (the one made at the first start) may create organisations".into(),
        ));
    }
    let input: OrgInput = ctx.json()?;
    check_name("name", &input.name)?;
    let admin_name = input.admin_name.unwrap_or_else(|| "admin".into());
    check_name("admin_name", &admin_name)?;
    let admin = auth::create_org(&ctx.state.store, &input.name, &admin_name, None).await?;
    Reply::json(
        StatusCode::CREATED,
        KeyOutcome {
            status: "OK".into(),
            message: "organisation created".into(),
            meta: admin.org_id.clone(),
            id: admin.org_id,
            user_id: admin.user_id,
            key_id: admin.key_id,
            key: admin.key,
        },
    )
}

#[utoipa::path(
    get,
    path = "/api/orgs/{orgId}",
    tag = "orgs",
    params(OrgPath),
    responses(
        (status = 200, description = "The caller's organisation.", body = Org),
        Unauthorized,
        (status = 404, description = "Not the caller's organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn get_org(ctx: Ctx) -> Result<Reply, ApiError> {
    if ctx.path::<OrgPath>()?.id != ctx.caller.org_id {
        return Err(ApiError::not_found("organisation"));
    }
    let org = ctx
        .state
        .store
        .org(&ctx.caller.org_id)
        .await?
        .ok_or_else(|| ApiError::not_found("organisation"))?;
    Reply::json(
        StatusCode::OK,
        Org {
            id: org.id,
            name: org.name,
            created_at: rfc3339(org.created_at),
        },
    )
}

#[utoipa::path(
    get,
    path = "/api/users",
    tag = "orgs",
    responses(
        (status = 200, description = "The organisation's users.", body = UserList),
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list_users(ctx: Ctx) -> Result<Reply, ApiError> {
    let users = ctx.state.store.list_users(&ctx.caller.org_id).await?;
    Reply::json(
        StatusCode::OK,
        UserList {
            users: users
                .into_iter()
                .map(|u| User {
                    id: u.id,
                    org_id: u.org_id,
                    name: u.name,
                    role: u.role,
                    created_at: rfc3339(u.created_at),
                })
                .collect(),
        },
    )
}

/// A new key for `user_id` of the caller's organisation: its record and its text.
fn new_key(ctx: &Ctx, user_id: &str) -> (DashboardKeyRecord, String) {
    let key = generate_key();
    let record = DashboardKeyRecord {
        id: new_id(),
        hash: hash_key(&key),
        user_id: user_id.to_owned(),
        org_id: ctx.caller.org_id.clone(),
        created_at: now(),
    };
    (record, key)
}

#[utoipa::path(
    post,
    path = "/api/users",
    tag = "orgs",
    request_body(content = UserInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Created with a first key, in `key`, shown once.", body = KeyOutcome),
        BadJson,
        Unauthorized,
        NotAdmin,
        (status = 409, description = "A user of that name exists.", body = ErrorBody),
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn create_user(ctx: Ctx) -> Result<Reply, ApiError> {
    ctx.caller.require_admin()?;
    let input: UserInput = ctx.json()?;
    check_name("name", &input.name)?;
    let role = match input.role {
        None | Some(RoleInput::Member) => Role::Member,
        Some(RoleInput::Admin) => Role::Admin,
    };
    let user = UserRecord {
        id: new_id(),
        org_id: ctx.caller.org_id.clone(),
        name: input.name,
        role: role.as_str().into(),
        created_at: now(),
    };
    let (record, key) = new_key(&ctx, &user.id);
    ctx.state.store.insert_user(&user, &record).await?;
    Reply::json(
        StatusCode::CREATED,
        KeyOutcome {
            status: "OK".into(),
            message: "user created".into(),
            meta: user.id.clone(),
            id: user.id.clone(),
            user_id: user.id,
            key_id: record.id,
            key,
        },
    )
}

#[utoipa::path(
    delete,
    path = "/api/users/{userId}",
    tag = "orgs",
    params(UserPath),
    responses(
        (status = 200, description = "Deleted, with the user's keys.", body = crate::dashboard::request::Outcome),
        Unauthorized,
        NotAdmin,
        NotFound,
        (status = 409, description = "Callers cannot delete themselves.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn delete_user(ctx: Ctx) -> Result<Reply, ApiError> {
    ctx.caller.require_admin()?;
    let UserPath { id } = ctx.path()?;
    let id = id.as_str();
    if id == ctx.caller.user_id {
        return Err(ApiError::Conflict(
            "you cannot delete your own user: another admin must".into(),
        ));
    }
    if !ctx.state.store.delete_user(&ctx.caller.org_id, id).await? {
        return Err(ApiError::not_found("user"));
    }
    Reply::outcome(StatusCode::OK, "user deleted", Some(id), id)
}

#[utoipa::path(
    get,
    path = "/api/keys",
    tag = "orgs",
    responses(
        (status = 200, description = "Keys (never their secrets): all of the organisation's for an admin, the caller's own otherwise.", body = KeyList),
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list_keys(ctx: Ctx) -> Result<Reply, ApiError> {
    let keys = ctx
        .state
        .store
        .list_dashboard_keys(&ctx.caller.org_id)
        .await?;
    let keys = keys
        .into_iter()
        .filter(|k| ctx.caller.role == Role::Admin || k.user_id == ctx.caller.user_id)
        .map(|k| Key {
            id: k.id,
            user_id: k.user_id,
            org_id: k.org_id,
            created_at: rfc3339(k.created_at),
        })
        .collect();
    Reply::json(StatusCode::OK, KeyList { keys })
}

#[utoipa::path(
    post,
    path = "/api/keys",
    tag = "orgs",
    request_body(content = Option<KeyInput>, content_type = "application/json", description = "Optional: without a body the key is the caller's."),
    responses(
        (status = 201, description = "Created; the key is in `key`, shown once.", body = KeyOutcome),
        BadJson,
        Unauthorized,
        (status = 403, description = "Only admins make keys for others.", body = ErrorBody),
        (status = 404, description = "No such user in the organisation.", body = ErrorBody),
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn create_key(ctx: Ctx) -> Result<Reply, ApiError> {
    // An empty body asks for a key for the caller.
    // No body, or `null`, asks for a key for the caller.
    let input: KeyInput = if ctx.body.iter().all(u8::is_ascii_whitespace) {
        KeyInput::default()
    } else {
        ctx.json::<Option<KeyInput>>()?.unwrap_or_default()
    };
    let user_id = input.user_id.unwrap_or_else(|| ctx.caller.user_id.clone());
    if user_id != ctx.caller.user_id {
        ctx.caller.require_admin()?;
    }
    if ctx
        .state
        .store
        .user(&ctx.caller.org_id, &user_id)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found("user"));
    }
    let (record, key) = new_key(&ctx, &user_id);
    ctx.state.store.insert_dashboard_key(&record).await?;
    Reply::json(
        StatusCode::CREATED,
        KeyOutcome {
            status: "OK".into(),
            message: "key created".into(),
            meta: record.id.clone(),
            id: record.id.clone(),
            user_id,
            key_id: record.id,
            key,
        },
    )
}

#[utoipa::path(
    delete,
    path = "/api/keys/{keyId}",
    tag = "orgs",
    params(KeyPath),
    responses(
        (status = 200, description = "Revoked: the key stops working at once.", body = crate::dashboard::request::Outcome),
        Unauthorized,
        (status = 404, description = "No such key (of the caller, for a member).", body = ErrorBody),
        (status = 409, description = "The key is the one this request is made with.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn delete_key(ctx: Ctx) -> Result<Reply, ApiError> {
    let KeyPath { id } = ctx.path()?;
    let id = id.as_str();
    if id == ctx.caller.key_id {
        // Revoking the key in use could lock the last admin out.
        return Err(ApiError::Conflict(
            "this is the key the request is made with: revoke it with another key".into(),
        ));
    }
    let keys = ctx
        .state
        .store
        .list_dashboard_keys(&ctx.caller.org_id)
        .await?;
    let visible = keys
        .iter()
        .any(|k| k.id == id && (ctx.caller.role == Role::Admin || k.user_id == ctx.caller.user_id));
    if !visible
        || !ctx
            .state
            .store
            .delete_dashboard_key(&ctx.caller.org_id, id)
            .await?
    {
        return Err(ApiError::not_found("key"));
    }
    Reply::outcome(StatusCode::OK, "key revoked", Some(id), id)
}
