//! A signed-in developer's apps in an organisation's portal
//! (`/portal/api/orgs/{orgId}/apps/...`): an app asks for access to one published
//! product; it gets a gateway key scoped to the product's APIs at once, or once the
//! publisher approved (by the product's `key_approval`). Keys are shown once and can be
//! rotated and revoked. An approved app subscribes URLs (checked against the egress
//! policy) to the product's events, sends itself a test event, and reads and redelivers
//! its subscriptions' deliveries.
//!
//! A developer sees their own apps only: any other app is "not found".

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use super::developers::{check_csrf, signed_in, OrgPath, SignedIn};
use super::domain;
use super::keys::{issue_key, revoke_key_id, revoke_keys, swap_key, KeyOf};
use super::publisher::{subscription_view, Subscription};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::dashboard::manage::deliveries::{self, DeliveryDetail};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{
    BadCsrf, BadJson, BadQuery, NoSuchApp, NoSuchSubscription, NotSignedIn,
};
use crate::store::{AppRecord, ProductRecord, SubscriptionRecord, APPROVED, PENDING_APPROVAL};

/// The path of one of a developer's apps (its organisation is the session's to check).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct AppPath {
    /// One of the developer's apps.
    #[serde(rename = "appId")]
    app: String,
}

/// The path of one subscription of an app.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct SubscriptionPath {
    /// One of the app's subscriptions.
    #[serde(rename = "subscriptionId")]
    subscription: String,
}

/// The path of one delivery to an app's subscriptions.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct DeliveryPath {
    /// A dead delivery to one of the app's subscriptions.
    #[serde(rename = "deliveryId")]
    delivery: String,
}

/// The event a test delivery carries.
pub const TEST_EVENT: &str = "sluice.test";
/// Test events one developer may send per minute.
const TESTS_PER_MINUTE: u64 = 10;
/// Redeliveries one developer may ask for per minute.
const REDELIVERIES_PER_MINUTE: u64 = 30;
/// Keys one app may be issued per minute.
const KEYS_PER_MINUTE: u64 = 10;
/// Apps one developer may make, and subscriptions, per minute each.
const WRITES_PER_MINUTE: u64 = 20;
/// How long a subscription's host may take to resolve.
const RESOLVE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// Deliveries on one page of an app's log.
const LOG_PAGE: i64 = 20;

/// An app as its developer sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeveloperApp {
    pub id: String,
    pub name: String,
    pub product_id: String,
    pub product_name: String,
    /// `approved`, `pending` (the publisher has not approved yet) or `rejected`.
    pub status: String,
    /// The id of the gateway key the app holds; null before one is issued or after it
    /// was revoked.
    pub key_id: Option<String>,
    /// The events of the product open to subscription.
    pub events: Vec<String>,
    pub webhooks: Vec<Subscription>,
    pub created_at: String,
}

/// The developer's apps.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeveloperAppList {
    pub apps: Vec<DeveloperApp>,
}

/// An app and, when one was issued, its key: shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct AppWithKey {
    pub app: DeveloperApp,
    /// Send it as the gateway's `Authorization` (or the API's key header).
    pub key: Option<String>,
}

/// What a developer sends to make an app.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeveloperAppInput {
    /// 1 to 200 characters.
    pub name: String,
    /// A product published in this portal.
    pub product_id: String,
}

/// What a developer sends to subscribe.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeveloperSubscriptionInput {
    /// An absolute http or https URL the egress policy lets the dashboard reach.
    pub url: String,
    /// 16 to 256 characters; generated when absent. Shown this once.
    pub secret: Option<String>,
    /// At least one; each an event the product opens.
    pub events: Vec<String>,
}

/// A new subscription with its secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewSubscription {
    pub subscription: Subscription,
    /// The HMAC secret deliveries are signed with.
    pub secret: String,
}

/// A new gateway key, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewKey {
    pub key_id: String,
    pub key: String,
}

/// A page of an app's delivery log.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeveloperDeliveries {
    pub deliveries: Vec<DeliveryDetail>,
    pub pages: i64,
}

fn view(app: AppRecord, product: Option<&ProductRecord>) -> DeveloperApp {
    DeveloperApp {
        product_name: product.map(|p| p.name.clone()).unwrap_or_default(),
        events: product
            .filter(|p| p.webhooks_enabled)
            .map(|p| p.events.clone())
            .unwrap_or_default(),
        id: app.id,
        name: app.name,
        product_id: app.product_id,
        status: app.status,
        key_id: app.key_id,
        webhooks: app
            .subscriptions
            .into_iter()
            .map(subscription_view)
            .collect(),
        created_at: rfc3339(app.created_at),
    }
}

/// The signed-in developer's app that the path names, with its product.
async fn own_app(ctx: &Ctx, signed: &SignedIn) -> Result<(AppRecord, ProductRecord), ApiError> {
    let org = &signed.developer.org_id;
    let app = ctx
        .state
        .store
        .app(org, &ctx.path::<AppPath>()?.app)
        .await?
        .filter(|a| a.developer_id.as_deref() == Some(signed.developer.id.as_str()))
        .ok_or_else(|| ApiError::not_found("app"))?;
    let product = ctx
        .state
        .store
        .product(org, &app.product_id)
        .await?
        .ok_or_else(|| ApiError::not_found("app"))?;
    Ok((app, product))
}

/// A write by the signed-in developer: the session and a good CSRF token.
async fn writer(ctx: &Ctx) -> Result<SignedIn, ApiError> {
    let signed = signed_in(ctx).await?;
    check_csrf(ctx, Some(&signed))?;
    Ok(signed)
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/apps",
    tag = "portal-developers",
    params(OrgPath),
    responses(
        (status = 200, description = "The signed-in developer's apps.", body = DeveloperAppList),
        NotSignedIn,
    ),
    security(("portal_session" = []))
)]
pub async fn list(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = signed_in(&ctx).await?;
    let d = &signed.developer;
    let store = &ctx.state.store;
    let records = store.developer_apps(&d.org_id, &d.id).await?;
    let mut apps = Vec::with_capacity(records.len());
    for app in records {
        let product = store.product(&d.org_id, &app.product_id).await?;
        apps.push(view(app, product.as_ref()));
    }
    Reply::json(StatusCode::OK, DeveloperAppList { apps })
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps",
    tag = "portal-developers",
    params(OrgPath),
    request_body(content = DeveloperAppInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Made. With the product's `key_approval` `auto` the app is approved and `key` is its gateway key, shown this once; with `manual` it waits for the publisher.", body = AppWithKey),
        BadJson,
        NotSignedIn,
        BadCsrf,
        (status = 409, description = "The developer has their most apps.", body = ErrorBody),
        (status = 429, description = "The developer made 20 apps in the last minute.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn create(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    // Each one may make a gateway key: deleting and making apps in a loop must not.
    per_developer(&ctx, &signed, "apps", WRITES_PER_MINUTE)?;
    let input: DeveloperAppInput = ctx.json()?;
    domain::check_text("name", &input.name, true, 200)?;
    let d = &signed.developer;
    let store = &ctx.state.store;
    let product = if input.product_id.contains('\0') {
        None
    } else {
        store.product(&d.org_id, &input.product_id).await?
    }
    .filter(|p| p.published)
    .ok_or_else(|| {
        ApiError::bad_request(format!(
            "invalid field `product_id`: `{}` is not a product published in this portal",
            input.product_id
        ))
    })?;
    let auto =
        domain::KeyApproval::stored_or_auto(&product.key_approval) == domain::KeyApproval::Auto;
    let at = now();
    let mut app = AppRecord {
        id: new_id(),
        org_id: d.org_id.clone(),
        product_id: product.id.clone(),
        name: input.name.trim().to_owned(),
        developer: d.email.clone(),
        subscriptions: Vec::new(),
        created_at: at,
        updated_at: at,
        developer_id: Some(d.id.clone()),
        status: if auto { APPROVED } else { PENDING_APPROVAL }.into(),
        key_id: None,
    };
    // The cap is checked by the insert itself, so that requests at once cannot pass it
    // together; the product was found just above.
    let max = ctx.state.config.portal.max_apps_per_developer;
    if !store
        .insert_app(&app, i64::try_from(max).unwrap_or(i64::MAX))
        .await?
    {
        return Err(ApiError::Conflict(format!(
            "a developer has at most {max} apps: delete one first"
        )));
    }
    let mut key = None;
    if auto {
        if let Some((key_id, token)) = issue_key(&ctx.state.store, &app, &product).await? {
            swap_key(&ctx.state.store, &app, None, &key_id).await?;
            app.key_id = Some(key_id);
            key = Some(token);
        }
    }
    Reply::json(
        StatusCode::CREATED,
        AppWithKey {
            app: view(app, Some(&product)),
            key,
        },
    )
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/apps/{appId}",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
    ),
    responses(
        (status = 200, description = "The app with its subscriptions (never their secrets).", body = DeveloperApp),
        NotSignedIn,
        NoSuchApp,
    ),
    security(("portal_session" = []))
)]
pub async fn get(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = signed_in(&ctx).await?;
    let (app, product) = own_app(&ctx, &signed).await?;
    Reply::json(StatusCode::OK, view(app, Some(&product)))
}

#[utoipa::path(
    delete,
    path = "/portal/api/orgs/{orgId}/apps/{appId}",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
    ),
    responses(
        (status = 200, description = "Deleted with its subscriptions; its key is revoked.", body = Object),
        NotSignedIn,
        BadCsrf,
        NoSuchApp,
    ),
    security(("portal_session" = []))
)]
pub async fn delete(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, _) = own_app(&ctx, &signed).await?;
    ctx.state.store.delete_app(&app.org_id, &app.id).await?;
    revoke_keys(&ctx.state.store, &app.org_id, KeyOf::App(&app.id)).await?;
    Reply::outcome(StatusCode::OK, "app deleted", Some(&app.id), &app.id)
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/key",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
    ),
    responses(
        (status = 201, description = "A new key, shown this once; the app's earlier key, if any, is revoked.", body = NewKey),
        NotSignedIn,
        BadCsrf,
        NoSuchApp,
        (status = 409, description = "The app's access is pending or was refused, or its product offers no API.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn rotate_key(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, product) = own_app(&ctx, &signed).await?;
    domain::approved(&app)?;
    if !product.published {
        return Err(ApiError::Conflict(format!(
            "product `{}` is no longer published: it issues no new keys",
            product.name
        )));
    }
    ctx.state.portal.accounts.attempt(
        &format!("portal:keys:{}", app.id),
        KEYS_PER_MINUTE,
        std::time::Duration::from_secs(60),
    )?;
    let Some((key_id, key)) = issue_key(&ctx.state.store, &app, &product).await? else {
        return Err(ApiError::Conflict(format!(
            "product `{}` offers no API yet: there is no key to issue",
            product.name
        )));
    };
    swap_key(&ctx.state.store, &app, app.key_id.as_deref(), &key_id).await?;
    if let Some(old) = &app.key_id {
        revoke_key_id(&ctx.state.store, old).await;
    }
    Reply::json(StatusCode::CREATED, NewKey { key_id, key })
}

#[utoipa::path(
    delete,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/key",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
    ),
    responses(
        (status = 200, description = "Revoked: gateways refuse it within their key cache time.", body = Object),
        NotSignedIn,
        BadCsrf,
        (status = 404, description = "The developer has no such app, or it holds no key.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn revoke_key(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, _) = own_app(&ctx, &signed).await?;
    let Some(key_id) = app.key_id.clone() else {
        return Err(ApiError::not_found("key"));
    };
    // Whatever the app holds now, this key goes.
    ctx.state
        .store
        .swap_app_key(&app.org_id, &app.id, Some(&key_id), None, now())
        .await?;
    revoke_key_id(&ctx.state.store, &key_id).await;
    Reply::outcome(StatusCode::OK, "key revoked", Some(&key_id), &app.id)
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
    ),
    request_body(content = DeveloperSubscriptionInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Subscribed; `secret` is shown this once.", body = NewSubscription),
        (status = 400, description = "Bad JSON or an invalid field (named): an event the product does not open, or a URL the egress policy refuses.", body = ErrorBody),
        NotSignedIn,
        BadCsrf,
        NoSuchApp,
        (status = 409, description = "The app is not approved, has its most subscriptions, or the dashboard has no `secret`.", body = ErrorBody),
        (status = 429, description = "The developer subscribed 20 times in the last minute.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn subscribe(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    // Each one looks its host up and writes the app again: unsubscribing and subscribing
    // in a loop must not make either free.
    per_developer(&ctx, &signed, "subscribe", WRITES_PER_MINUTE)?;
    let input: DeveloperSubscriptionInput = ctx.json()?;
    let (mut app, product) = own_app(&ctx, &signed).await?;
    domain::approved(&app)?;
    domain::room_for_subscription(&app)?;
    let url = domain::check_url("url", &input.url)?;
    reachable(&ctx, &url).await?;
    domain::check_chosen_events(&product, &input.events)?;
    let secret = match input.secret {
        Some(secret) => {
            domain::check_secret("secret", &secret)?;
            secret
        }
        None => domain::generate_secret(),
    };
    let sealed = domain::seal(domain::sealer(ctx.state.sealer.as_ref())?, &secret)?;
    let at = now();
    let subscription = SubscriptionRecord {
        id: new_id(),
        org_id: app.org_id.clone(),
        app_id: app.id.clone(),
        url,
        secret_sealed: sealed,
        events: input.events,
        created_at: at,
        updated_at: at,
    };
    app.subscriptions.push(subscription.clone());
    app.updated_at = at;
    if !ctx.state.store.update_app(&app).await? {
        return Err(ApiError::not_found("app"));
    }
    Reply::json(
        StatusCode::CREATED,
        NewSubscription {
            subscription: subscription_view(subscription),
            secret,
        },
    )
}

/// Refuses a URL whose host the egress policy keeps the dashboard from reaching (the
/// delivery worker checks again at each attempt).
async fn reachable(ctx: &Ctx, url: &str) -> Result<(), ApiError> {
    let parsed = url::Url::parse(url)
        .map_err(|_| ApiError::bad_request(format!("invalid field `url`: `{url}` is not a URL")))?;
    let host = parsed.host_str().unwrap_or_default();
    let port = parsed.port_or_known_default().unwrap_or(80);
    match tokio::time::timeout(RESOLVE_WAIT, ctx.state.egress.resolve(host, port)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(ApiError::bad_request(format!("invalid field `url`: {e}"))),
        Err(_) => Err(ApiError::bad_request(format!(
            "invalid field `url`: `{host}` did not resolve within {RESOLVE_WAIT:?}"
        ))),
    }
}

/// One more write of `kind` by the signed-in developer, at most `per_minute`.
fn per_developer(
    ctx: &Ctx,
    signed: &SignedIn,
    kind: &str,
    per_minute: u64,
) -> Result<(), ApiError> {
    ctx.state.portal.accounts.attempt(
        &format!("portal:{kind}:{}", signed.developer.id),
        per_minute,
        std::time::Duration::from_secs(60),
    )
}

#[utoipa::path(
    delete,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions/{subscriptionId}",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
        SubscriptionPath,
    ),
    responses(
        (status = 200, description = "Unsubscribed.", body = Object),
        NotSignedIn,
        BadCsrf,
        NoSuchSubscription,
    ),
    security(("portal_session" = []))
)]
pub async fn unsubscribe(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (mut app, _) = own_app(&ctx, &signed).await?;
    let SubscriptionPath { subscription: id } = ctx.path()?;
    let before = app.subscriptions.len();
    app.subscriptions.retain(|s| s.id != id);
    if app.subscriptions.len() == before {
        return Err(ApiError::not_found("subscription"));
    }
    app.updated_at = now();
    if !ctx.state.store.update_app(&app).await? {
        return Err(ApiError::not_found("app"));
    }
    Reply::outcome(StatusCode::OK, "unsubscribed", Some(&id), &id)
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions/{subscriptionId}/test",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
        SubscriptionPath,
    ),
    responses(
        (status = 202, description = "A `sluice.test` event is queued for the subscription, signed with its secret.", body = Object),
        NotSignedIn,
        BadCsrf,
        NoSuchSubscription,
        (status = 429, description = "Too many test events for the subscription, or the organisation has `webhooks.max_pending_per_org` deliveries waiting.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn test_event(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, product) = own_app(&ctx, &signed).await?;
    let SubscriptionPath { subscription } = ctx.path()?;
    let sub = app
        .subscriptions
        .iter()
        .find(|s| s.id == subscription)
        .ok_or_else(|| ApiError::not_found("subscription"))?;
    // Per developer: a new subscription must not bring a fresh allowance.
    per_developer(&ctx, &signed, "test", TESTS_PER_MINUTE)?;
    let id = uuid::Uuid::now_v7().simple().to_string();
    let data = json!({"test": true, "app_id": app.id, "subscription_id": sub.id});
    let body = domain::envelope(&id, TEST_EVENT, &product.id, data);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let max_attempts = i64::from(ctx.state.config.webhooks.max_attempts.max(1));
    let delivery = domain::subscription_delivery(sub, &id, TEST_EVENT, body, max_attempts, now_ms);
    ctx.state
        .store
        .enqueue_deliveries(
            std::slice::from_ref(&delivery),
            now_ms,
            ctx.state.config.webhooks.bounds(),
        )
        .await?;
    ctx.state.deliveries_queued.notify_one();
    Reply::json(
        StatusCode::ACCEPTED,
        json!({"Status": "OK", "Message": "test event queued", "delivery_id": delivery.id}),
    )
}

/// The delivery sources of an app's subscriptions.
fn sources(app: &AppRecord) -> Vec<String> {
    app.subscriptions
        .iter()
        .map(|s| format!("subscription:{}", s.id))
        .collect()
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/deliveries",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
        ("p" = Option<i64>, Query, description = "Page number from 1 (20 a page)."),
    ),
    responses(
        (status = 200, description = "A page of the deliveries to the app's subscriptions, newest first, each with its attempts (status, error, latency).", body = DeveloperDeliveries),
        BadQuery,
        NotSignedIn,
        NoSuchApp,
    ),
    security(("portal_session" = []))
)]
pub async fn log(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = signed_in(&ctx).await?;
    let (app, _) = own_app(&ctx, &signed).await?;
    let p = match ctx.query("p") {
        None => 1,
        Some(text) => text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|p| *p >= 1)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "query parameter `p`: `{text}` is not a page number from 1"
                ))
            })?,
    };
    let page = crate::store::Page::new(LOG_PAGE, p - 1);
    let store = &ctx.state.store;
    let (records, total) = store
        .list_deliveries_from(&app.org_id, &sources(&app), page)
        .await?;
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        let attempts = match store.delivery(&app.org_id, &record.id).await? {
            Some((_, attempts)) => attempts,
            None => Vec::new(),
        };
        out.push(deliveries::detail(record, attempts));
    }
    Reply::json(
        StatusCode::OK,
        DeveloperDeliveries {
            deliveries: out,
            pages: (total + LOG_PAGE - 1) / LOG_PAGE,
        },
    )
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/deliveries/{deliveryId}/redeliver",
    tag = "portal-developers",
    params(
        OrgPath,
        AppPath,
        DeliveryPath,
    ),
    responses(
        (status = 200, description = "Queued again, due now.", body = Object),
        NotSignedIn,
        BadCsrf,
        (status = 404, description = "No such app, or no such delivery to its subscriptions.", body = ErrorBody),
        (status = 409, description = "The delivery is not dead.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn redeliver(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, _) = own_app(&ctx, &signed).await?;
    per_developer(&ctx, &signed, "redeliver", REDELIVERIES_PER_MINUTE)?;
    let DeliveryPath { delivery: id } = ctx.path()?;
    let id = id.as_str();
    let found = ctx.state.store.delivery(&app.org_id, id).await?;
    let delivery = found
        .map(|(d, _)| d)
        .filter(|d| sources(&app).contains(&d.source))
        .ok_or_else(|| ApiError::not_found("delivery"))?;
    deliveries::replay_dead(&ctx, &delivery).await?;
    Reply::outcome(StatusCode::OK, "delivery queued again", Some(id), id)
}
