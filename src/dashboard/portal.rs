//! The developer portal: API products, which offer some of the organisation's APIs and
//! open named events to webhook subscription; developer apps on a product, each with its
//! subscriptions (a URL, a signing secret, the events chosen); and the endpoint a stream
//! publishes events to (`POST /api/portal/products/{productId}/events`, signed with the
//! product's publish secret instead of a dashboard key), which queues one delivery per
//! subscription that chose the event.
//!
//! Secrets are sealed at rest with the dashboard's `secret`. A product's publish secret
//! is shown (the publisher needs it); a subscription's secret never is.

use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::devapps::KeyOf;
use super::error::{ApiError, ErrorBody};
use super::ids::{new_id, now, rfc3339};
use super::request::{Ctx, Outcome, Reply};
use crate::store::seal::Sealer;
use crate::store::{
    AppRecord, DeliveryRecord, ProductRecord, SubscriptionRecord, APPROVED, PENDING, REJECTED,
};
use crate::webhook::sign;

/// The shortest publish or subscription secret: it is an HMAC key, so a short one would
/// be guessable.
pub const MIN_SECRET_LEN: usize = 16;
/// The longest secret, so that a stored secret stays small.
pub const MAX_SECRET_LEN: usize = 256;
/// The longest event name.
pub const MAX_EVENT_LEN: usize = 100;
/// The most events a product opens, and APIs it lists: each is checked on every write.
pub const MAX_LIST_LEN: usize = 100;
/// The most subscriptions an app has.
pub const MAX_SUBSCRIPTIONS: usize = 50;
/// The longest `Idempotency-Key` an event may carry.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 200;
/// The longest subscription URL.
const MAX_URL_LEN: usize = 2048;

/// Delivery ids are UUID v5 of the subscription and the event's idempotency key in this
/// namespace, so an event sent again with the same key maps to the same deliveries.
const DELIVERY_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x5f1c_e0a4_6b1d_4c36_9a57_3e0b_d8c2_71f4);

/// What a product opens to webhook subscription.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProductWebhooks {
    /// Whether apps may subscribe; `false` by default.
    #[serde(default)]
    pub enabled: bool,
    /// Event names: 1 to 100 of `A-Za-z0-9_.:-` each, no duplicates, at most 100.
    #[serde(default)]
    pub events: Vec<String>,
}

/// A product as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Product {
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub description: String,
    pub api_ids: Vec<String>,
    pub webhooks: ProductWebhooks,
    /// The secret the publisher signs events with (the `secret` of a stream's
    /// `portal_webhook` output); null when this dashboard's `secret` cannot open it.
    pub publish_secret: Option<String>,
    /// Shown in the developer portal's catalogue.
    pub published: bool,
    pub key_approval: KeyApproval,
    pub created_at: String,
    pub updated_at: String,
}

/// When a developer who asks for access to a product gets a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyApproval {
    /// At once.
    #[default]
    Auto,
    /// Once the publisher approved the request.
    Manual,
}

impl KeyApproval {
    fn as_str(self) -> &'static str {
        match self {
            KeyApproval::Auto => "auto",
            KeyApproval::Manual => "manual",
        }
    }

    pub(super) fn stored_or_auto(text: &str) -> KeyApproval {
        match text {
            "manual" => KeyApproval::Manual,
            _ => KeyApproval::Auto,
        }
    }
}

/// The members of a product a client sends; `PUT` replaces all but the publish secret,
/// which is kept when absent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProductInput {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 4000 characters.
    pub description: Option<String>,
    /// APIs of the caller's organisation, at most 100.
    pub api_ids: Option<Vec<String>>,
    /// Disabled, with no events, when absent.
    pub webhooks: Option<ProductWebhooks>,
    /// 16 to 256 characters; generated on `POST` when absent, kept on `PUT`.
    pub publish_secret: Option<String>,
    /// Shown in the developer portal's catalogue; false when absent.
    pub published: Option<bool>,
    /// `auto` (the default) or `manual`.
    pub key_approval: Option<KeyApproval>,
}

/// The answer to a product write: the spec's outcome and the publish secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProductOutcome {
    /// `OK`.
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "Message")]
    pub message: String,
    /// The product's id.
    #[serde(rename = "Meta")]
    pub meta: String,
    /// The product's id.
    #[serde(rename = "ID")]
    pub id: String,
    /// The secret the publisher signs events with.
    pub publish_secret: String,
}

/// A page of products.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProductList {
    pub products: Vec<Product>,
    pub pages: i64,
}

/// A webhook subscription as the API shows it: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct Subscription {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    /// Always true: a subscription has a secret, which is never shown.
    pub secret_set: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// An app as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct App {
    pub id: String,
    pub org_id: String,
    pub product_id: String,
    pub name: String,
    pub developer: String,
    pub webhooks: Vec<Subscription>,
    pub created_at: String,
    pub updated_at: String,
    /// The portal developer who made it; null for an app made through this API.
    pub developer_id: Option<String>,
    /// Its access to the product: `approved`, `pending` (waiting for approval) or
    /// `rejected`.
    pub status: String,
    /// The gateway key it holds, if any.
    pub key_id: Option<String>,
}

/// A subscription a client sends.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionInput {
    /// An existing subscription of the app, to keep it (and its secret when `secret` is
    /// absent); absent for a new one.
    pub id: Option<String>,
    /// An absolute http or https URL with a host.
    pub url: String,
    /// 16 to 256 characters; required for a new subscription. Never shown again.
    pub secret: Option<String>,
    /// At least one; each an event the product opens.
    pub events: Vec<String>,
}

/// The members of an app a client sends; `PUT` replaces the app and all its
/// subscriptions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppInput {
    /// 1 to 200 characters.
    pub name: String,
    /// Who builds the app; at most 200 characters.
    pub developer: Option<String>,
    /// A product of the caller's organisation.
    pub product_id: String,
    /// At most 50 subscriptions; none when absent.
    pub webhooks: Option<Vec<SubscriptionInput>>,
}

/// A page of apps.
#[derive(Debug, Serialize, ToSchema)]
pub struct AppList {
    pub apps: Vec<App>,
    pub pages: i64,
}

/// The answer to a published event.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventAccepted {
    /// The event's idempotency key: the one sent, or a generated one.
    pub event_id: String,
    /// How many subscriptions chose the event (one delivery each).
    pub deliveries: usize,
}

fn invalid(field: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("invalid field `{field}`: {why}"))
}

fn no_sealer() -> ApiError {
    ApiError::Conflict(
        "the portal keeps its secrets sealed, and this dashboard has no `secret` configured: set `secret` in its config (or SLUICE_DB_SECRET)".into(),
    )
}

pub(super) fn sealer(ctx: &Ctx) -> Result<&Sealer, ApiError> {
    ctx.state.sealer.as_ref().ok_or_else(no_sealer)
}

pub(super) fn seal(sealer: &Sealer, secret: &str) -> Result<String, ApiError> {
    sealer
        .seal(secret.as_bytes())
        .map_err(|e| ApiError::Internal(e.to_string()))
}

pub(super) fn check_text(
    field: &str,
    text: &str,
    required: bool,
    max: usize,
) -> Result<(), ApiError> {
    if required && text.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if text.chars().count() > max {
        return Err(invalid(field, format!("at most {max} characters")));
    }
    // PostgreSQL text cannot hold NUL; refuse it here rather than fail in the store.
    if text.contains('\0') {
        return Err(invalid(field, "must not contain NUL characters"));
    }
    Ok(())
}

pub(super) fn check_secret(field: &str, secret: &str) -> Result<(), ApiError> {
    let n = secret.chars().count();
    if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&n) {
        return Err(invalid(
            field,
            format!("a secret is {MIN_SECRET_LEN} to {MAX_SECRET_LEN} characters"),
        ));
    }
    Ok(())
}

/// Whether `name` is an event name: 1 to 100 of `A-Za-z0-9_.:-`.
pub fn is_event_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_EVENT_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
}

fn check_events(events: &[String]) -> Result<(), ApiError> {
    if events.len() > MAX_LIST_LEN {
        return Err(invalid(
            "webhooks.events",
            format!("at most {MAX_LIST_LEN} events"),
        ));
    }
    for (i, event) in events.iter().enumerate() {
        let field = format!("webhooks.events[{i}]");
        if !is_event_name(event) {
            return Err(invalid(
                &field,
                format!(
                    "an event name is 1 to {MAX_EVENT_LEN} letters, digits, `_`, `.`, `:` or `-`"
                ),
            ));
        }
        if events[..i].contains(event) {
            return Err(invalid(&field, format!("`{event}` is listed twice")));
        }
    }
    Ok(())
}

pub(super) fn check_url(field: &str, text: &str) -> Result<String, ApiError> {
    let bad = |why: &str| invalid(field, format!("`{text}` {why}"));
    if text.len() > MAX_URL_LEN {
        return Err(invalid(field, format!("at most {MAX_URL_LEN} bytes")));
    }
    if text.trim().chars().any(char::is_control) {
        return Err(bad("holds control characters"));
    }
    let url = url::Url::parse(text.trim()).map_err(|_| bad("is not an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("is not an http or https URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    Ok(text.trim().to_owned())
}

/// A new random publish secret: 32 bytes, hex.
pub(super) fn generate_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

fn product_view(record: ProductRecord, sealer: Option<&Sealer>) -> Product {
    let publish_secret = sealer
        .and_then(|s| s.open(&record.publish_secret_sealed).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok());
    Product {
        id: record.id,
        org_id: record.org_id,
        name: record.name,
        description: record.description,
        api_ids: record.api_ids,
        webhooks: ProductWebhooks {
            enabled: record.webhooks_enabled,
            events: record.events,
        },
        publish_secret,
        published: record.published,
        key_approval: KeyApproval::stored_or_auto(&record.key_approval),
        created_at: rfc3339(record.created_at),
        updated_at: rfc3339(record.updated_at),
    }
}

/// A subscription as the API shows it: never its secret.
pub(super) fn subscription_view(s: SubscriptionRecord) -> Subscription {
    Subscription {
        id: s.id,
        url: s.url,
        events: s.events,
        secret_set: true,
        created_at: rfc3339(s.created_at),
        updated_at: rfc3339(s.updated_at),
    }
}

fn app_view(record: AppRecord) -> App {
    App {
        id: record.id,
        org_id: record.org_id,
        product_id: record.product_id,
        name: record.name,
        developer: record.developer,
        webhooks: record
            .subscriptions
            .into_iter()
            .map(subscription_view)
            .collect(),
        created_at: rfc3339(record.created_at),
        updated_at: rfc3339(record.updated_at),
        developer_id: record.developer_id,
        status: record.status,
        key_id: record.key_id,
    }
}

/// Checks a product input and fills `record` (whose id, organisation and times are set);
/// returns the new publish secret in plain text when one was given.
async fn apply_product(
    ctx: &Ctx,
    input: ProductInput,
    record: &mut ProductRecord,
) -> Result<Option<String>, ApiError> {
    check_text("name", &input.name, true, 200)?;
    let description = input.description.unwrap_or_default();
    check_text("description", &description, false, 4000)?;
    let api_ids = input.api_ids.unwrap_or_default();
    if api_ids.len() > MAX_LIST_LEN {
        return Err(invalid("api_ids", format!("at most {MAX_LIST_LEN} APIs")));
    }
    for (i, id) in api_ids.iter().enumerate() {
        let field = format!("api_ids[{i}]");
        if api_ids[..i].contains(id) {
            return Err(invalid(&field, format!("`{id}` is listed twice")));
        }
        let known = !id.contains('\0')
            && ctx
                .state
                .store
                .api(id)
                .await?
                .is_some_and(|api| api.org_id == ctx.caller.org_id);
        if !known {
            return Err(invalid(
                &field,
                format!("`{id}` is not an API of the organisation"),
            ));
        }
    }
    let webhooks = input.webhooks.unwrap_or_default();
    check_events(&webhooks.events)?;
    if let Some(secret) = &input.publish_secret {
        check_secret("publish_secret", secret)?;
    }
    record.name = input.name.trim().to_owned();
    record.description = description;
    record.api_ids = api_ids;
    record.webhooks_enabled = webhooks.enabled;
    record.events = webhooks.events;
    record.published = input.published.unwrap_or(false);
    record.key_approval = input.key_approval.unwrap_or_default().as_str().to_owned();
    Ok(input.publish_secret)
}

fn product_outcome(
    status: StatusCode,
    message: &str,
    record: &ProductRecord,
    publish_secret: String,
) -> Result<Reply, ApiError> {
    Reply::json(
        status,
        ProductOutcome {
            status: "OK".into(),
            message: message.into(),
            meta: record.id.clone(),
            id: record.id.clone(),
            publish_secret,
        },
    )
}

#[utoipa::path(
    get,
    path = "/api/portal/products",
    tag = "portal",
    params(("p" = Option<i64>, Query, description = "Page number from 1; below 0 returns every product.")),
    responses(
        (status = 200, description = "A page of the organisation's products.", body = ProductList),
        (status = 400, description = "A bad query parameter.", body = ErrorBody),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn list_products(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let (records, total) = ctx
        .state
        .store
        .list_products(&ctx.caller.org_id, paging.page)
        .await?;
    let sealer = ctx.state.sealer.as_ref();
    Reply::json(
        StatusCode::OK,
        ProductList {
            products: records
                .into_iter()
                .map(|r| product_view(r, sealer))
                .collect(),
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    post,
    path = "/api/portal/products",
    tag = "portal",
    request_body(content = ProductInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Created; `ID` is the product id, `publish_secret` the secret to sign its events with.", body = ProductOutcome),
        (status = 400, description = "Bad JSON or an invalid field (named).", body = ErrorBody),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 409, description = "The dashboard has no `secret` to seal the publish secret with.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "The body is not JSON.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn create_product(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: ProductInput = ctx.json()?;
    let at = now();
    let mut record = ProductRecord {
        id: new_id(),
        org_id: ctx.caller.org_id.clone(),
        name: String::new(),
        description: String::new(),
        api_ids: Vec::new(),
        webhooks_enabled: false,
        events: Vec::new(),
        publish_secret_sealed: String::new(),
        created_at: at,
        updated_at: at,
        published: false,
        key_approval: KeyApproval::Auto.as_str().to_owned(),
    };
    let given = apply_product(&ctx, input, &mut record).await?;
    let sealer = sealer(&ctx)?;
    let secret = given.unwrap_or_else(generate_secret);
    record.publish_secret_sealed = seal(sealer, &secret)?;
    ctx.state.store.insert_product(&record).await?;
    product_outcome(StatusCode::CREATED, "product created", &record, secret)
}

async fn find_product(ctx: &Ctx) -> Result<ProductRecord, ApiError> {
    ctx.state
        .store
        .product(&ctx.caller.org_id, ctx.param(0))
        .await?
        .ok_or_else(|| ApiError::not_found("product"))
}

#[utoipa::path(
    get,
    path = "/api/portal/products/{productId}",
    tag = "portal",
    params(("productId" = String, Path, description = "The product's id.")),
    responses(
        (status = 200, description = "The product.", body = Product),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such product in the organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn get_product(ctx: Ctx) -> Result<Reply, ApiError> {
    let record = find_product(&ctx).await?;
    Reply::json(
        StatusCode::OK,
        product_view(record, ctx.state.sealer.as_ref()),
    )
}

#[utoipa::path(
    put,
    path = "/api/portal/products/{productId}",
    tag = "portal",
    params(("productId" = String, Path, description = "The product's id.")),
    request_body(content = ProductInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced; `publish_secret` is the secret in force.", body = ProductOutcome),
        (status = 400, description = "Bad JSON or an invalid field (named).", body = ErrorBody),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such product in the organisation.", body = ErrorBody),
        (status = 409, description = "The dashboard has no `secret` to seal or open the publish secret with.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "The body is not JSON.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn update_product(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: ProductInput = ctx.json()?;
    let mut record = find_product(&ctx).await?;
    let given = apply_product(&ctx, input, &mut record).await?;
    let sealer = sealer(&ctx)?;
    let secret = match given {
        Some(secret) => {
            record.publish_secret_sealed = seal(sealer, &secret)?;
            secret
        }
        None => open_publish_secret(sealer, &record)?,
    };
    record.updated_at = now();
    if !ctx.state.store.update_product(&record).await? {
        return Err(ApiError::not_found("product"));
    }
    // Its apps' keys follow the APIs it offers now.
    super::devapps::rescope_keys(&ctx, &record).await?;
    product_outcome(StatusCode::OK, "product updated", &record, secret)
}

fn open_publish_secret(sealer: &Sealer, record: &ProductRecord) -> Result<String, ApiError> {
    sealer
        .open(&record.publish_secret_sealed)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| {
            ApiError::Conflict(format!(
                "the publish secret of product `{}` cannot be opened with this dashboard's `secret` (was it changed?): set a new `publish_secret`",
                record.id
            ))
        })
}

#[utoipa::path(
    delete,
    path = "/api/portal/products/{productId}",
    tag = "portal",
    params(("productId" = String, Path, description = "The product's id.")),
    responses(
        (status = 200, description = "Deleted, with its apps and their subscriptions.", body = Outcome),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such product in the organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn delete_product(ctx: Ctx) -> Result<Reply, ApiError> {
    let id = ctx.param(0);
    if !ctx
        .state
        .store
        .delete_product(&ctx.caller.org_id, id)
        .await?
    {
        return Err(ApiError::not_found("product"));
    }
    super::devapps::revoke_keys(&ctx, &ctx.caller.org_id, KeyOf::Product(id)).await?;
    Reply::outcome(StatusCode::OK, "product deleted", Some(id), id)
}

/// Checks an app input and fills `record` (whose id, organisation and times are set),
/// keeping the secrets of the subscriptions it had that are sent without one.
async fn apply_app(ctx: &Ctx, input: AppInput, record: &mut AppRecord) -> Result<(), ApiError> {
    check_text("name", &input.name, true, 200)?;
    let developer = input.developer.unwrap_or_default();
    check_text("developer", &developer, false, 200)?;
    let found = if input.product_id.contains('\0') {
        None
    } else {
        ctx.state
            .store
            .product(&ctx.caller.org_id, &input.product_id)
            .await?
    };
    let product = found.ok_or_else(|| {
        invalid(
            "product_id",
            format!(
                "`{}` is not a product of the organisation",
                input.product_id
            ),
        )
    })?;
    let inputs = input.webhooks.unwrap_or_default();
    if inputs.len() > MAX_SUBSCRIPTIONS {
        return Err(invalid(
            "webhooks",
            format!("at most {MAX_SUBSCRIPTIONS} subscriptions"),
        ));
    }
    let at = now();
    let mut subscriptions = Vec::with_capacity(inputs.len());
    for (i, s) in inputs.into_iter().enumerate() {
        let field = |name: &str| format!("webhooks[{i}].{name}");
        let old = match &s.id {
            None => None,
            Some(id) => {
                if subscriptions
                    .iter()
                    .any(|n: &SubscriptionRecord| n.id == *id)
                {
                    return Err(invalid(&field("id"), format!("`{id}` is listed twice")));
                }
                let old = record.subscriptions.iter().find(|o| o.id == *id);
                if old.is_none() {
                    return Err(invalid(
                        &field("id"),
                        format!("`{id}` is not a subscription of this app"),
                    ));
                }
                old
            }
        };
        let url = check_url(&field("url"), &s.url)?;
        if s.events.is_empty() {
            return Err(invalid(&field("events"), "choose at least one event"));
        }
        for (j, event) in s.events.iter().enumerate() {
            let event_field = format!("webhooks[{i}].events[{j}]");
            if s.events[..j].contains(event) {
                return Err(invalid(&event_field, format!("`{event}` is listed twice")));
            }
            if !product.webhooks_enabled {
                return Err(invalid(
                    &event_field,
                    format!(
                        "product `{}` does not open webhooks (its `webhooks.enabled` is off)",
                        product.id
                    ),
                ));
            }
            if !product.events.contains(event) {
                return Err(invalid(
                    &event_field,
                    format!(
                        "`{event}` is not an event product `{}` opens to subscription",
                        product.id
                    ),
                ));
            }
        }
        let secret_sealed = match (&s.secret, old) {
            (Some(secret), _) => {
                check_secret(&field("secret"), secret)?;
                // Only a secret sent needs sealing: an app that keeps its secrets can
                // be edited without the dashboard's `secret`.
                seal(sealer(ctx)?, secret)?
            }
            (None, Some(old)) => old.secret_sealed.clone(),
            (None, None) => {
                return Err(invalid(
                    &field("secret"),
                    format!("a new subscription needs a secret of {MIN_SECRET_LEN} to {MAX_SECRET_LEN} characters"),
                ))
            }
        };
        subscriptions.push(SubscriptionRecord {
            id: s.id.unwrap_or_else(new_id),
            org_id: record.org_id.clone(),
            app_id: record.id.clone(),
            url,
            secret_sealed,
            events: s.events,
            created_at: old.map_or(at, |o| o.created_at),
            updated_at: at,
        });
    }
    record.name = input.name.trim().to_owned();
    record.developer = developer;
    record.product_id = product.id;
    record.subscriptions = subscriptions;
    Ok(())
}

#[utoipa::path(
    get,
    path = "/api/portal/apps",
    tag = "portal",
    params(("p" = Option<i64>, Query, description = "Page number from 1; below 0 returns every app.")),
    responses(
        (status = 200, description = "A page of the organisation's apps with their subscriptions.", body = AppList),
        (status = 400, description = "A bad query parameter.", body = ErrorBody),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn list_apps(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let (records, total) = ctx
        .state
        .store
        .list_apps(&ctx.caller.org_id, paging.page)
        .await?;
    Reply::json(
        StatusCode::OK,
        AppList {
            apps: records.into_iter().map(app_view).collect(),
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    post,
    path = "/api/portal/apps",
    tag = "portal",
    request_body(content = AppInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Created; `ID` is the app id.", body = Outcome),
        (status = 400, description = "Bad JSON or an invalid field (named).", body = ErrorBody),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 409, description = "The dashboard has no `secret` to seal subscription secrets with.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "The body is not JSON.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn create_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: AppInput = ctx.json()?;
    let at = now();
    let mut record = AppRecord {
        id: new_id(),
        org_id: ctx.caller.org_id.clone(),
        product_id: String::new(),
        name: String::new(),
        developer: String::new(),
        subscriptions: Vec::new(),
        created_at: at,
        updated_at: at,
        developer_id: None,
        status: APPROVED.into(),
        key_id: None,
    };
    apply_app(&ctx, input, &mut record).await?;
    if !ctx.state.store.insert_app(&record, i64::MAX).await? {
        return Err(product_gone(&record));
    }
    Reply::outcome(
        StatusCode::CREATED,
        "app created",
        Some(&record.id),
        &record.id,
    )
}

/// The product was deleted between the check and the write.
fn product_gone(record: &AppRecord) -> ApiError {
    invalid(
        "product_id",
        format!(
            "`{}` is not a product of the organisation",
            record.product_id
        ),
    )
}

async fn find_app(ctx: &Ctx) -> Result<AppRecord, ApiError> {
    ctx.state
        .store
        .app(&ctx.caller.org_id, ctx.param(0))
        .await?
        .ok_or_else(|| ApiError::not_found("app"))
}

#[utoipa::path(
    get,
    path = "/api/portal/apps/{appId}",
    tag = "portal",
    params(("appId" = String, Path, description = "The app's id.")),
    responses(
        (status = 200, description = "The app with its subscriptions (never their secrets).", body = App),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such app in the organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn get_app(ctx: Ctx) -> Result<Reply, ApiError> {
    Reply::json(StatusCode::OK, app_view(find_app(&ctx).await?))
}

#[utoipa::path(
    put,
    path = "/api/portal/apps/{appId}",
    tag = "portal",
    params(("appId" = String, Path, description = "The app's id.")),
    request_body(content = AppInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced, with all its subscriptions.", body = Outcome),
        (status = 400, description = "Bad JSON or an invalid field (named).", body = ErrorBody),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such app in the organisation.", body = ErrorBody),
        (status = 409, description = "The dashboard has no `secret` to seal subscription secrets with.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "The body is not JSON.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn update_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: AppInput = ctx.json()?;
    let mut record = find_app(&ctx).await?;
    apply_app(&ctx, input, &mut record).await?;
    record.updated_at = now();
    if !ctx.state.store.update_app(&record).await? {
        // Gone, or its new product is: say which.
        find_app(&ctx).await?;
        return Err(product_gone(&record));
    }
    Reply::outcome(StatusCode::OK, "app updated", Some(&record.id), &record.id)
}

#[utoipa::path(
    delete,
    path = "/api/portal/apps/{appId}",
    tag = "portal",
    params(("appId" = String, Path, description = "The app's id.")),
    responses(
        (status = 200, description = "Deleted, with its subscriptions.", body = Outcome),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such app in the organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn delete_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let id = ctx.param(0);
    if !ctx.state.store.delete_app(&ctx.caller.org_id, id).await? {
        return Err(ApiError::not_found("app"));
    }
    super::devapps::revoke_keys(&ctx, &ctx.caller.org_id, KeyOf::App(id)).await?;
    Reply::outcome(StatusCode::OK, "app deleted", Some(id), id)
}

#[utoipa::path(
    post,
    path = "/api/portal/apps/{appId}/approve",
    tag = "portal",
    params(("appId" = String, Path, description = "The app's id.")),
    responses(
        (status = 200, description = "Approved: its developer can now get a key in the portal.", body = Outcome),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such app in the organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn approve_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let app = find_app(&ctx).await?;
    ctx.state
        .store
        .set_app_status(&app.org_id, &app.id, APPROVED, now())
        .await?;
    Reply::outcome(StatusCode::OK, "app approved", Some(&app.id), &app.id)
}

#[utoipa::path(
    post,
    path = "/api/portal/apps/{appId}/reject",
    tag = "portal",
    params(("appId" = String, Path, description = "The app's id.")),
    responses(
        (status = 200, description = "Refused: its keys are revoked and its subscriptions get no more events.", body = Outcome),
        (status = 401, description = "Missing or unknown credentials.", body = ErrorBody),
        (status = 404, description = "No such app in the organisation.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn reject_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let app = find_app(&ctx).await?;
    ctx.state
        .store
        .set_app_status(&app.org_id, &app.id, REJECTED, now())
        .await?;
    // After the status: a key a rotation makes from now on is refused its place.
    super::devapps::revoke_keys(&ctx, &app.org_id, KeyOf::App(&app.id)).await?;
    Reply::outcome(StatusCode::OK, "app rejected", Some(&app.id), &app.id)
}

/// A header's text, `None` when absent; a value that is not text is a `bad` error.
fn header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    bad: impl FnOnce() -> ApiError,
) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| bad()),
    }
}

/// What a subscriber receives of an event: its id, name, product, time and data.
pub(super) fn envelope(id: &str, event: &str, product_id: &str, data: Value) -> Vec<u8> {
    json!({
        "id": id,
        "event": event,
        "product_id": product_id,
        "created_at": rfc3339(now()),
        "data": data,
    })
    .to_string()
    .into_bytes()
}

/// The delivery of event `key` (its `body` made by [`envelope`]) to subscription `s`,
/// signed with the subscription's secret, due at `now_ms`.
pub(super) fn subscription_delivery(
    s: &SubscriptionRecord,
    key: &str,
    event: &str,
    body: Vec<u8>,
    max_attempts: i64,
    now_ms: i64,
) -> DeliveryRecord {
    DeliveryRecord {
        id: delivery_id(&s.id, key),
        org_id: s.org_id.clone(),
        source: format!("subscription:{}", s.id),
        event: event.to_owned(),
        method: "POST".into(),
        url: s.url.clone(),
        headers: json!({"content-type": "application/json"}).to_string(),
        body,
        body_sealed: None,
        secret_sealed: Some(s.secret_sealed.clone()),
        status: PENDING.into(),
        attempts: 0,
        max_attempts,
        next_attempt_at: now_ms,
        lease_until: 0,
        last_status: None,
        last_error: None,
        created_at: now_ms,
        updated_at: now_ms,
    }
}

/// The delivery id of `key`'s event for `subscription`: the same for the same pair.
pub fn delivery_id(subscription: &str, key: &str) -> String {
    // Subscription ids have no `:`, so the pair is unambiguous.
    uuid::Uuid::new_v5(
        &DELIVERY_NAMESPACE,
        format!("{subscription}:{key}").as_bytes(),
    )
    .simple()
    .to_string()
}

#[utoipa::path(
    post,
    path = "/api/portal/products/{productId}/events",
    tag = "portal",
    params(
        ("productId" = String, Path, description = "The product the event is published to."),
        ("Sluice-Signature" = String, Header, description = "`t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\" with the product's publish secret>`; within 300 seconds of the dashboard's clock."),
        ("Sluice-Event" = String, Header, description = "The event's name: one the product opens to subscription."),
        ("Idempotency-Key" = Option<String>, Header, description = "1 to 200 characters; an event sent again with the same key is queued once. A random UUID when absent."),
    ),
    request_body(content = Object, content_type = "application/json", description = "The event's data: JSON, or any text (delivered as a JSON string)."),
    responses(
        (status = 202, description = "Queued: one delivery for each subscription that chose the event.", body = EventAccepted),
        (status = 400, description = "No `Sluice-Event`, an event the product does not open, or a bad `Idempotency-Key`.", body = ErrorBody),
        (status = 401, description = "No `Sluice-Signature`, or one that is malformed, stale or does not match.", body = ErrorBody),
        (status = 404, description = "No such product.", body = ErrorBody),
        (status = 409, description = "The product's webhooks are disabled, or the dashboard cannot open its publish secret (no or another `secret`).", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 429, description = "The organisation has `webhooks.max_pending_per_org` deliveries waiting; nothing was queued. `Retry-After` says when to try again.", body = ErrorBody),
    )
)]
pub async fn publish_event(ctx: Ctx) -> Result<Reply, ApiError> {
    // What the request says alone is checked first; then the product and the signature.
    let signature = header(&ctx.headers, sign::SIGNATURE_HEADER, || {
        ApiError::Unauthorized(sign::SignatureError::Malformed.to_string())
    })?
    .ok_or_else(|| {
        ApiError::Unauthorized(
            "missing `Sluice-Signature`: sign the body as `t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">` with the product's publish secret"
        .into())
    })?;
    let event = header(&ctx.headers, sign::EVENT_HEADER, || {
        ApiError::bad_request("the `Sluice-Event` header is not text")
    })?
    .ok_or_else(|| ApiError::bad_request("missing `Sluice-Event`: the header names the event"))?;
    let key = match header(&ctx.headers, sign::IDEMPOTENCY_HEADER, || {
        ApiError::bad_request("the `Idempotency-Key` header is not text")
    })? {
        Some(key) => {
            let n = key.chars().count();
            if n == 0 || n > MAX_IDEMPOTENCY_KEY_LEN {
                return Err(ApiError::bad_request(format!(
                    "`Idempotency-Key` is 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters"
                )));
            }
            key.to_owned()
        }
        None => uuid::Uuid::new_v4().to_string(),
    };

    let product = ctx
        .state
        .store
        .product_by_id(ctx.param(0))
        .await?
        .ok_or_else(|| ApiError::not_found("product"))?;
    let secret = open_publish_secret(sealer(&ctx)?, &product)?;
    sign::verify(
        secret.as_bytes(),
        signature,
        &ctx.body,
        chrono::Utc::now().timestamp(),
    )
    .map_err(|e| ApiError::Unauthorized(format!("`Sluice-Signature`: {e}")))?;
    if !product.webhooks_enabled {
        return Err(ApiError::Conflict(format!(
            "product `{}` has webhooks disabled (`webhooks.enabled`)",
            product.id
        )));
    }
    if !product.events.iter().any(|e| e == event) {
        return Err(ApiError::bad_request(format!(
            "`Sluice-Event`: `{event}` is not an event product `{}` opens to subscription",
            product.id
        )));
    }

    let subscriptions = ctx
        .state
        .store
        .subscriptions_for_event(&product.id, event)
        .await?;
    let data = serde_json::from_slice::<Value>(&ctx.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&ctx.body).into_owned()));
    let body = envelope(&key, event, &product.id, data);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let max_attempts = i64::from(ctx.state.config.webhooks.max_attempts.max(1));
    let deliveries: Vec<DeliveryRecord> = subscriptions
        .iter()
        .map(|s| subscription_delivery(s, &key, event, body.clone(), max_attempts, now_ms))
        .collect();
    if !deliveries.is_empty() {
        // One transaction: the event is stored for every subscriber, or for none, before
        // the publisher hears it was accepted.
        ctx.state
            .store
            .enqueue_deliveries(&deliveries, now_ms, ctx.state.config.webhooks.bounds())
            .await?;
        ctx.state.deliveries_queued.notify_one();
    }
    Reply::json(
        StatusCode::ACCEPTED,
        EventAccepted {
            event_id: key,
            deliveries: subscriptions.len(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names() {
        for good in ["order.paid", "a", "A-b_c:d.9", &"x".repeat(100)] {
            assert!(is_event_name(good), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(101)] {
            assert!(!is_event_name(bad), "{bad}");
        }
        let twice = ["a".to_owned(), "b".to_owned(), "a".to_owned()];
        assert!(check_events(&twice)
            .unwrap_err()
            .to_string()
            .contains("`webhooks.events[2]`"));
    }

    #[test]
    fn delivery_ids_are_stable_per_subscription_and_key() {
        assert_eq!(delivery_id("s1", "k"), delivery_id("s1", "k"));
        assert_ne!(delivery_id("s1", "k"), delivery_id("s2", "k"));
        assert_ne!(delivery_id("s1", "k"), delivery_id("s1", "k2"));
    }

    #[test]
    fn urls_and_secrets() {
        assert_eq!(
            check_url("u", " https://example.com/h ").unwrap(),
            "https://example.com/h"
        );
        for bad in [
            "/relative",
            "ftp://x/y",
            "http://",
            "nonsense",
            "http://x/\0",
        ] {
            assert!(check_url("webhooks[0].url", bad)
                .unwrap_err()
                .to_string()
                .contains("`webhooks[0].url`"));
        }
        assert!(check_secret("s", &"x".repeat(15)).is_err());
        assert!(check_secret("s", &"x".repeat(16)).is_ok());
        assert!(check_secret("s", &"x".repeat(257)).is_err());
        assert_eq!(generate_secret().len(), 64);
    }
}
