//! The publisher's side of the developer portal, under `/api/portal/` with a dashboard
//! key: API products, which offer some of the organisation's APIs and open named events
//! to webhook subscription; apps on a product, each with its subscriptions (a URL, a
//! signing secret, the events chosen), and their approval; and the endpoint a stream
//! publishes events to (`POST /api/portal/products/{productId}/events`, signed with the
//! product's publish secret instead of a dashboard key), which queues one delivery per
//! subscription that chose the event.
//!
//! A product's publish secret is shown (the publisher needs it); a subscription's secret
//! never is. What may be stored, and how secrets are sealed, is `domain`'s to say.

use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::domain::{
    apply_app, apply_product, envelope, generate_secret, open_publish_secret, product_gone, seal,
    sealer, subscription_delivery, AppInput, KeyApproval, ProductInput, ProductWebhooks,
    MAX_IDEMPOTENCY_KEY_LEN,
};
use super::keys::{self, KeyOf};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::dashboard::request::{Ctx, Outcome, PageQuery, Reply};
use crate::dashboard::responses::{
    BadJson, BadQuery, NoSealer, NotFound, NotJson, TooLarge, Unauthorized,
};
use crate::store::seal::Sealer;
use crate::store::{
    AppRecord, DeliveryRecord, ProductRecord, SubscriptionRecord, APPROVED, REJECTED,
};
use crate::webhook::sign;

/// The path of one product, and of the events published to it.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct ProductPath {
    /// The product's id.
    #[serde(rename = "productId")]
    id: String,
}

/// The path of one app.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct AppPath {
    /// The app's id.
    #[serde(rename = "appId")]
    id: String,
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
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the organisation's products.", body = ProductList),
        BadQuery,
        Unauthorized,
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
        BadJson,
        Unauthorized,
        (status = 409, description = "The dashboard has no `secret` to seal the publish secret with.", body = ErrorBody),
        TooLarge,
        NotJson,
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
    let given = apply_product(&ctx.state.store, input, &mut record).await?;
    let sealer = sealer(ctx.state.sealer.as_ref())?;
    let secret = given.unwrap_or_else(generate_secret);
    record.publish_secret_sealed = seal(sealer, &secret)?;
    ctx.state.store.insert_product(&record).await?;
    product_outcome(StatusCode::CREATED, "product created", &record, secret)
}

async fn find_product(ctx: &Ctx) -> Result<ProductRecord, ApiError> {
    ctx.state
        .store
        .product(&ctx.caller.org_id, &ctx.path::<ProductPath>()?.id)
        .await?
        .ok_or_else(|| ApiError::not_found("product"))
}

#[utoipa::path(
    get,
    path = "/api/portal/products/{productId}",
    tag = "portal",
    params(ProductPath),
    responses(
        (status = 200, description = "The product.", body = Product),
        Unauthorized,
        NotFound,
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
    params(ProductPath),
    request_body(content = ProductInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced; `publish_secret` is the secret in force.", body = ProductOutcome),
        BadJson,
        Unauthorized,
        NotFound,
        (status = 409, description = "The dashboard has no `secret` to seal or open the publish secret with.", body = ErrorBody),
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn update_product(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: ProductInput = ctx.json()?;
    let mut record = find_product(&ctx).await?;
    let given = apply_product(&ctx.state.store, input, &mut record).await?;
    let sealer = sealer(ctx.state.sealer.as_ref())?;
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
    keys::rescope_keys(&ctx.state.store, &record).await?;
    product_outcome(StatusCode::OK, "product updated", &record, secret)
}

#[utoipa::path(
    delete,
    path = "/api/portal/products/{productId}",
    tag = "portal",
    params(ProductPath),
    responses(
        (status = 200, description = "Deleted, with its apps and their subscriptions.", body = Outcome),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete_product(ctx: Ctx) -> Result<Reply, ApiError> {
    let ProductPath { id } = ctx.path()?;
    let id = id.as_str();
    if !ctx
        .state
        .store
        .delete_product(&ctx.caller.org_id, id)
        .await?
    {
        return Err(ApiError::not_found("product"));
    }
    keys::revoke_keys(&ctx.state.store, &ctx.caller.org_id, KeyOf::Product(id)).await?;
    Reply::outcome(StatusCode::OK, "product deleted", Some(id), id)
}

#[utoipa::path(
    get,
    path = "/api/portal/apps",
    tag = "portal",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the organisation's apps with their subscriptions.", body = AppList),
        BadQuery,
        Unauthorized,
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
        BadJson,
        Unauthorized,
        NoSealer,
        TooLarge,
        NotJson,
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
    apply_app(
        &ctx.state.store,
        ctx.state.sealer.as_ref(),
        input,
        &mut record,
    )
    .await?;
    if !ctx.state.store.insert_app(&record, i64::MAX).await? {
        return Err(product_gone(&record).into());
    }
    Reply::outcome(
        StatusCode::CREATED,
        "app created",
        Some(&record.id),
        &record.id,
    )
}

async fn find_app(ctx: &Ctx) -> Result<AppRecord, ApiError> {
    ctx.state
        .store
        .app(&ctx.caller.org_id, &ctx.path::<AppPath>()?.id)
        .await?
        .ok_or_else(|| ApiError::not_found("app"))
}

#[utoipa::path(
    get,
    path = "/api/portal/apps/{appId}",
    tag = "portal",
    params(AppPath),
    responses(
        (status = 200, description = "The app with its subscriptions (never their secrets).", body = App),
        Unauthorized,
        NotFound,
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
    params(AppPath),
    request_body(content = AppInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced, with all its subscriptions.", body = Outcome),
        BadJson,
        Unauthorized,
        NotFound,
        NoSealer,
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn update_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: AppInput = ctx.json()?;
    let mut record = find_app(&ctx).await?;
    apply_app(
        &ctx.state.store,
        ctx.state.sealer.as_ref(),
        input,
        &mut record,
    )
    .await?;
    record.updated_at = now();
    if !ctx.state.store.update_app(&record).await? {
        // Gone, or its new product is: say which.
        find_app(&ctx).await?;
        return Err(product_gone(&record).into());
    }
    Reply::outcome(StatusCode::OK, "app updated", Some(&record.id), &record.id)
}

#[utoipa::path(
    delete,
    path = "/api/portal/apps/{appId}",
    tag = "portal",
    params(AppPath),
    responses(
        (status = 200, description = "Deleted, with its subscriptions.", body = Outcome),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete_app(ctx: Ctx) -> Result<Reply, ApiError> {
    let AppPath { id } = ctx.path()?;
    let id = id.as_str();
    if !ctx.state.store.delete_app(&ctx.caller.org_id, id).await? {
        return Err(ApiError::not_found("app"));
    }
    keys::revoke_keys(&ctx.state.store, &ctx.caller.org_id, KeyOf::App(id)).await?;
    Reply::outcome(StatusCode::OK, "app deleted", Some(id), id)
}

#[utoipa::path(
    post,
    path = "/api/portal/apps/{appId}/approve",
    tag = "portal",
    params(AppPath),
    responses(
        (status = 200, description = "Approved: its developer can now get a key in the portal.", body = Outcome),
        Unauthorized,
        NotFound,
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
    params(AppPath),
    responses(
        (status = 200, description = "Refused: its keys are revoked and its subscriptions get no more events.", body = Outcome),
        Unauthorized,
        NotFound,
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
    keys::revoke_keys(&ctx.state.store, &app.org_id, KeyOf::App(&app.id)).await?;
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

#[utoipa::path(
    post,
    path = "/api/portal/products/{productId}/events",
    tag = "portal",
    params(
        ProductPath,
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
        TooLarge,
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
        .product_by_id(&ctx.path::<ProductPath>()?.id)
        .await?
        .ok_or_else(|| ApiError::not_found("product"))?;
    let secret = open_publish_secret(sealer(ctx.state.sealer.as_ref())?, &product)?;
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
