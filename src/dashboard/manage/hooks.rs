//! Webhooks: a target URL and HTTP method, headers and a body template for the calls the
//! service makes. `method` and `target_path` are required and checked; `header_map` may
//! be null. A webhook is addressed by its database id or its webhook id. Header values
//! and URL credentials are stored sealed with the dashboard's `secret`, when it has one.

use std::collections::BTreeMap;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::owned;
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::{new_id, now};
use crate::dashboard::request::{check_identifier, Ctx, Outcome, PageQuery, Reply};
use crate::dashboard::responses::{BadJson, BadQuery, NotFound, NotJson, TooLarge, Unauthorized};
use crate::store::HookRecord;
use crate::webhook::{self, sealed};

/// The path of one webhook.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct HookPath {
    /// The database id or the webhook id.
    #[serde(rename = "hookId")]
    id: String,
}

/// A webhook as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Webhook {
    /// The database identifier.
    pub id: String,
    /// The webhook identifier.
    pub webhook_id: String,
    pub org_id: String,
    pub name: String,
    pub method: String,
    pub target_path: String,
    pub template_path: String,
    pub header_map: Option<BTreeMap<String, String>>,
    pub event_timeout: i64,
    #[schema(value_type = Object)]
    pub api_model: Value,
}

/// The members of a webhook a client sends. On `POST`, `method` and `target_path` are
/// required; on `PUT` the whole webhook is replaced, so they are required too.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookInput {
    /// An HTTP method: GET, POST, PUT, PATCH or DELETE.
    pub method: Option<String>,
    /// An absolute http or https URL.
    pub target_path: Option<String>,
    /// The database identifier; chosen by the dashboard, so only accepted when it names
    /// the webhook being replaced.
    pub id: Option<String>,
    /// The webhook identifier; the database id when not given.
    pub webhook_id: Option<String>,
    /// Accepted only when it is the caller's organisation.
    pub org_id: Option<String>,
    pub name: Option<String>,
    /// Seconds; 0 or more.
    pub event_timeout: Option<i64>,
    /// Header names to values, or null.
    pub header_map: Option<BTreeMap<String, String>>,
    /// The path of the body template; may be empty.
    pub template_path: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub api_model: Option<Value>,
}

/// A page of webhooks.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    pub hooks: Vec<Webhook>,
    pub pages: i64,
}

fn view(record: HookRecord) -> Webhook {
    Webhook {
        header_map: record
            .header_map
            .as_deref()
            .and_then(|h| serde_json::from_str(h).ok()),
        api_model: serde_json::from_str(&record.api_model)
            .unwrap_or_else(|_| Value::Object(Default::default())),
        id: record.id,
        webhook_id: record.webhook_id,
        org_id: record.org_id,
        name: record.name,
        method: record.method,
        target_path: record.target_path,
        template_path: record.template_path,
        event_timeout: record.event_timeout,
    }
}

/// Seals the record's header values and URL credentials with the dashboard's secret,
/// when it has one, before it is stored.
fn seal(ctx: &Ctx, record: &mut HookRecord) -> Result<(), ApiError> {
    let sealer = ctx.state.sealer.as_ref();
    let headers: Option<BTreeMap<String, String>> = record
        .header_map
        .as_deref()
        .and_then(|h| serde_json::from_str(h).ok());
    let failed = |e: sealed::SealedError| ApiError::Internal(e.to_string());
    record.header_map = sealed::store_headers(sealer, headers.as_ref()).map_err(failed)?;
    record.target_path = sealed::store_url(sealer, &record.target_path).map_err(failed)?;
    Ok(())
}

/// A stored record with its sealed parts opened, for its organisation to read. One
/// that cannot be opened (another secret sealed it) shows no headers and no URL.
fn opened(ctx: &Ctx, mut record: HookRecord) -> HookRecord {
    let sealer = ctx.state.sealer.as_ref();
    record.header_map = sealed::open_headers(sealer, record.header_map.as_deref())
        .ok()
        .flatten()
        .map(|h| serde_json::to_string(&h).unwrap_or_else(|_| "{}".into()));
    record.target_path = sealed::open_url(sealer, &record.target_path).unwrap_or_default();
    record
}

/// The field's value checked by the webhook module's rule, or a 400 naming the field.
fn required(
    field: &str,
    value: Option<&str>,
    check: fn(&str) -> Result<String, String>,
) -> Result<String, ApiError> {
    let value = value.ok_or_else(|| ApiError::bad_request(format!("missing field `{field}`")))?;
    check(value).map_err(|why| ApiError::bad_request(format!("invalid field `{field}`: {why}")))
}

/// Checks an input and fills `record` (whose ids and organisation are already set).
fn apply(input: WebhookInput, record: &mut HookRecord, caller_org: &str) -> Result<(), ApiError> {
    if let Some(org) = &input.org_id {
        if org != caller_org {
            return Err(ApiError::bad_request(
                "invalid field `org_id`: a webhook belongs to the caller's organisation",
            ));
        }
    }
    if let Some(id) = &input.id {
        if *id != record.id {
            return Err(ApiError::bad_request(
                "invalid field `id`: the database id is chosen by the dashboard",
            ));
        }
    }
    record.method = required("method", input.method.as_deref(), webhook::check_method)?;
    record.target_path = required(
        "target_path",
        input.target_path.as_deref(),
        webhook::check_url,
    )?;
    if let Some(webhook_id) = input.webhook_id {
        check_identifier("webhook_id", &webhook_id)?;
        record.webhook_id = webhook_id;
    }
    let timeout = input.event_timeout.unwrap_or(0);
    if timeout < 0 {
        return Err(ApiError::bad_request(
            "invalid field `event_timeout`: must be 0 or more",
        ));
    }
    record.event_timeout = timeout;
    if let Some(headers) = &input.header_map {
        webhook::check_headers(headers).map_err(|(name, why)| {
            ApiError::bad_request(format!("invalid field `header_map.{name}`: {why}"))
        })?;
    }
    record.header_map = input
        .header_map
        .map(|h| serde_json::to_string(&h).unwrap_or_else(|_| "{}".into()));
    record.name = input.name.unwrap_or_default();
    let template_path = input.template_path.unwrap_or_default();
    if !template_path.is_empty() {
        // Checked now, so a path that could never be read is refused to its writer, not
        // found out at each event.
        webhook::Templates::check_path(&template_path).map_err(|_| {
            ApiError::bad_request(format!(
                "invalid field `template_path`: `{template_path}` is not a relative path inside the templates directory (no leading `/`, no `..`)"
            ))
        })?;
    }
    record.template_path = template_path;
    let model = input
        .api_model
        .unwrap_or_else(|| Value::Object(Default::default()));
    if !model.is_object() {
        return Err(ApiError::bad_request(
            "invalid field `api_model`: an object is expected",
        ));
    }
    record.api_model = model.to_string();
    Ok(())
}

#[utoipa::path(
    get,
    path = "/api/hooks",
    tag = "hooks",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the organisation's webhooks.", body = WebhookList),
        BadQuery,
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let (records, total) = ctx
        .state
        .store
        .list_hooks(&ctx.caller.org_id, paging.page)
        .await?;
    Reply::json(
        StatusCode::OK,
        WebhookList {
            hooks: records.into_iter().map(|r| view(opened(&ctx, r))).collect(),
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    post,
    path = "/api/hooks",
    tag = "hooks",
    request_body(content = WebhookInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Created; `ID` is the webhook id, `Meta` the database id.", body = Outcome),
        BadJson,
        Unauthorized,
        (status = 409, description = "The webhook id is taken.", body = ErrorBody),
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn create(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: WebhookInput = ctx.json()?;
    if input.id.is_some() {
        return Err(ApiError::bad_request(
            "invalid field `id`: the database id is chosen by the dashboard",
        ));
    }
    let id = new_id();
    let at = now();
    let mut record = HookRecord {
        webhook_id: id.clone(),
        id,
        org_id: ctx.caller.org_id.clone(),
        name: String::new(),
        method: String::new(),
        target_path: String::new(),
        template_path: String::new(),
        header_map: None,
        event_timeout: 0,
        api_model: "{}".into(),
        created_at: at,
        updated_at: at,
    };
    apply(input, &mut record, &ctx.caller.org_id)?;
    seal(&ctx, &mut record)?;
    ctx.state.store.insert_hook(&record).await?;
    Reply::outcome(
        StatusCode::CREATED,
        "webhook created",
        Some(&record.id),
        &record.webhook_id,
    )
}

#[utoipa::path(
    get,
    path = "/api/hooks/{hookId}",
    tag = "hooks",
    params(HookPath),
    responses(
        (status = 200, description = "The webhook.", body = Webhook),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn get(ctx: Ctx) -> Result<Reply, ApiError> {
    Reply::json(
        StatusCode::OK,
        view(opened(
            &ctx,
            owned::find::<HookRecord>(&ctx, &ctx.path::<HookPath>()?.id).await?,
        )),
    )
}

#[utoipa::path(
    put,
    path = "/api/hooks/{hookId}",
    tag = "hooks",
    params(HookPath),
    request_body(content = WebhookInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced.", body = Outcome),
        BadJson,
        Unauthorized,
        (status = 403, description = "A member, and the webhook carries the portal's reset tokens: only an admin changes it.", body = ErrorBody),
        NotFound,
        (status = 409, description = "The new webhook id is taken.", body = ErrorBody),
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn update(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: WebhookInput = ctx.json()?;
    let mut record = owned::find::<HookRecord>(&ctx, &ctx.path::<HookPath>()?.id).await?;
    guard_reset_hook(&ctx, &record.id).await?;
    apply(input, &mut record, &ctx.caller.org_id)?;
    seal(&ctx, &mut record)?;
    record.updated_at = now();
    if !ctx.state.store.update_hook(&record).await? {
        return Err(ApiError::not_found("webhook"));
    }
    Reply::outcome(
        StatusCode::OK,
        "webhook updated",
        Some(&record.id),
        &record.webhook_id,
    )
}

#[utoipa::path(
    delete,
    path = "/api/hooks/{hookId}",
    tag = "hooks",
    params(HookPath),
    responses(
        (status = 200, description = "Deleted.", body = Outcome),
        Unauthorized,
        (status = 403, description = "A member, and the webhook carries the portal's reset tokens: only an admin deletes it.", body = ErrorBody),
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete(ctx: Ctx) -> Result<Reply, ApiError> {
    let record: HookRecord = owned::find(&ctx, &ctx.path::<HookPath>()?.id).await?;
    guard_reset_hook(&ctx, &record.id).await?;
    owned::delete(&ctx, &record).await
}

/// 403 for a member when webhook `hook_id` (a database id) is the one that carries the
/// portal's reset tokens: whoever points it elsewhere receives every developer's token.
async fn guard_reset_hook(ctx: &Ctx, hook_id: &str) -> Result<(), ApiError> {
    let settings = ctx.state.store.portal_settings(&ctx.caller.org_id).await?;
    if settings.reset_hook_id.as_deref() == Some(hook_id) {
        ctx.caller.require_admin_to(
            "change or delete the webhook that carries the portal's reset tokens",
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(method: Option<&str>, target: Option<&str>) -> WebhookInput {
        WebhookInput {
            method: method.map(Into::into),
            target_path: target.map(Into::into),
            id: None,
            webhook_id: None,
            org_id: None,
            name: None,
            event_timeout: None,
            header_map: None,
            template_path: None,
            api_model: None,
        }
    }

    fn record() -> HookRecord {
        HookRecord {
            id: "h".into(),
            org_id: "o".into(),
            webhook_id: "h".into(),
            name: String::new(),
            method: String::new(),
            target_path: String::new(),
            template_path: String::new(),
            header_map: None,
            event_timeout: 0,
            api_model: "{}".into(),
            created_at: 0,
            updated_at: 0,
        }
    }

    fn error(i: WebhookInput) -> String {
        apply(i, &mut record(), "o").unwrap_err().to_string()
    }

    #[test]
    fn method_and_target_are_required_and_checked() {
        let mut r = record();
        apply(
            input(Some("post"), Some("https://example.com/h")),
            &mut r,
            "o",
        )
        .unwrap();
        assert_eq!(r.method, "POST");
        assert!(error(input(None, Some("https://x"))).contains("`method`"));
        assert!(error(input(Some("FETCH"), Some("https://x"))).contains("`method`"));
        assert!(error(input(Some("GET"), None)).contains("`target_path`"));
        for bad in ["/relative", "ftp://x/y", "http://", "not a url"] {
            assert!(
                error(input(Some("GET"), Some(bad))).contains("`target_path`"),
                "{bad}"
            );
        }
    }

    #[test]
    fn headers_org_and_ids_are_checked() {
        let mut i = input(Some("GET"), Some("http://x.example"));
        i.header_map = Some([("bad name".to_owned(), "v".to_owned())].into());
        assert!(error(i).contains("header_map"));
        let mut i = input(Some("GET"), Some("http://x.example"));
        i.org_id = Some("other".into());
        assert!(error(i).contains("`org_id`"));
        let mut i = input(Some("GET"), Some("http://x.example"));
        i.event_timeout = Some(-1);
        assert!(error(i).contains("`event_timeout`"));
        let mut i = input(Some("GET"), Some("http://x.example"));
        i.api_model = Some(Value::from(3));
        assert!(error(i).contains("`api_model`"));
    }
}
