//! A signed-in developer's apps in an organisation's portal
//! (`/portal/api/orgs/{orgId}/apps/...`): an app asks for access to one published
//! product; it gets a gateway key scoped to the product's APIs at once, or once the
//! publisher approved (by the product's `key_approval`). Keys are shown once and can be
//! rotated and revoked. An approved app subscribes URLs (checked against the egress
//! policy) to the product's events, sends itself a test event, and reads and redelivers
//! its subscriptions' deliveries.
//!
//! A developer sees their own apps only: any other app is "not found".

use std::collections::BTreeMap;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::deliveries::{self, DeliveryDetail};
use super::developers::{check_csrf, signed_in, SignedIn};
use super::error::{ApiError, ErrorBody};
use super::gateway_keys::{key_error, keys};
use super::ids::{new_id, now, rfc3339};
use super::portal::{self as products, Subscription};
use super::request::{Ctx, Reply};
use crate::gateway::keys::{AccessRight, KeyRequest};
use crate::store::{AppRecord, ProductRecord, SubscriptionRecord, APPROVED, PENDING_APPROVAL};

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
            .map(products::subscription_view)
            .collect(),
        created_at: rfc3339(app.created_at),
    }
}

/// The signed-in developer's app named by path parameter 1, with its product.
async fn own_app(ctx: &Ctx, signed: &SignedIn) -> Result<(AppRecord, ProductRecord), ApiError> {
    let org = &signed.developer.org_id;
    let app = ctx
        .state
        .store
        .app(org, ctx.param(1))
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

/// A new gateway key for `app`, reaching the product's APIs that still exist.
/// `None` when the product offers no API that exists (a product of webhooks only): a
/// key would reach nothing.
async fn issue_key(
    ctx: &Ctx,
    app: &AppRecord,
    product: &ProductRecord,
) -> Result<Option<(String, String)>, ApiError> {
    let org = &app.org_id;
    let apis = api_ids_of(ctx, org).await?;
    let access_rights = access_rights(product, &apis);
    if access_rights.is_empty() {
        return Ok(None);
    }
    let mut meta = serde_json::Map::new();
    meta.insert("portal_app".into(), app.id.clone().into());
    meta.insert("portal_product".into(), product.id.clone().into());
    if let Some(developer) = &app.developer_id {
        meta.insert("portal_developer".into(), developer.clone().into());
    }
    let request = KeyRequest {
        org_id: Some(org.clone()),
        access_rights,
        meta,
        ..KeyRequest::default()
    };
    let known = move |id: &str| apis.iter().any(|a| a == id);
    let (token, _, session) = keys(ctx).create(request, &known).await.map_err(key_error)?;
    Ok(Some((session.id, token)))
}

/// Whose gateway keys to revoke. Every key the portal makes names its app, product and
/// developer in its `meta`.
pub(super) enum KeyOf<'a> {
    App(&'a str),
    Product(&'a str),
    Developer(&'a str),
}

impl KeyOf<'_> {
    fn matches(&self, meta: &serde_json::Map<String, serde_json::Value>) -> bool {
        let (name, id) = match self {
            KeyOf::App(id) => ("portal_app", id),
            KeyOf::Product(id) => ("portal_product", id),
            KeyOf::Developer(id) => ("portal_developer", id),
        };
        meta.get(name).and_then(serde_json::Value::as_str) == Some(*id)
    }
}

/// Revokes every gateway key of the organisation that `of` names. Keys are found by
/// what their `meta` says rather than by the `key_id` an app holds, so that a key made
/// by a request that raced this one goes too. One that cannot be deleted is logged.
pub(super) async fn revoke_keys(ctx: &Ctx, org: &str, of: KeyOf<'_>) -> Result<(), ApiError> {
    let keys = keys(ctx);
    let sessions = keys.list_of(Some(org)).await.map_err(key_error)?;
    for s in sessions.iter().filter(|s| of.matches(&s.policy.meta)) {
        revoke_key_id(ctx, &s.id).await;
    }
    Ok(())
}

/// Sets the access rights of every key of `product`'s apps to the product's APIs as they
/// are now: an API taken out of a product is closed to its keys at once.
pub(super) async fn rescope_keys(ctx: &Ctx, product: &ProductRecord) -> Result<(), ApiError> {
    let keys = keys(ctx);
    let org = &product.org_id;
    let apis = api_ids_of(ctx, org).await?;
    let rights = access_rights(product, &apis);
    let known = move |id: &str| apis.iter().any(|a| a == id);
    let sessions = keys.list_of(Some(org)).await.map_err(key_error)?;
    for s in sessions
        .iter()
        .filter(|s| KeyOf::Product(&product.id).matches(&s.policy.meta))
    {
        if s.policy.access_rights == rights {
            continue;
        }
        // A key must name an API: with none left, it reaches nothing and goes.
        if rights.is_empty() {
            revoke_key_id(ctx, &s.id).await;
            continue;
        }
        let request = KeyRequest {
            org_id: Some(org.clone()),
            access_rights: rights.clone(),
            meta: s.policy.meta.clone(),
            ..KeyRequest::default()
        };
        keys.update(&s.id, request, &known)
            .await
            .map_err(key_error)?;
    }
    Ok(())
}

async fn api_ids_of(ctx: &Ctx, org: &str) -> Result<Vec<String>, ApiError> {
    Ok(ctx
        .state
        .store
        .list_apis_of_org(org)
        .await?
        .into_iter()
        .map(|a| a.id)
        .collect())
}

/// What a key of `product`'s apps may reach: its APIs that exist.
fn access_rights(product: &ProductRecord, apis: &[String]) -> BTreeMap<String, AccessRight> {
    product
        .api_ids
        .iter()
        .filter(|id| apis.contains(id))
        .map(|id| (id.clone(), AccessRight::default()))
        .collect()
}

/// Revokes one gateway key; a failure is logged.
async fn revoke_key_id(ctx: &Ctx, id: &str) {
    if let Err(e) = keys(ctx).delete(id).await {
        super::developers::revoke_failed(id, e);
    }
}

/// Gives `app` the new key `new` in place of `old`, or revokes `new` when the app
/// changed meanwhile (another rotation, a refusal, a deletion): 409 then.
async fn swap_key(
    ctx: &Ctx,
    app: &AppRecord,
    old: Option<&str>,
    new: &str,
) -> Result<(), ApiError> {
    let swapped = ctx
        .state
        .store
        .swap_app_key(&app.org_id, &app.id, old, Some(new), now())
        .await;
    if !matches!(swapped, Ok(true)) {
        revoke_key_id(ctx, new).await;
        swapped?;
        return Err(ApiError::Conflict(
            "the app changed meanwhile (its key was rotated or revoked, or its access refused): read it again".into(),
        ));
    }
    Ok(())
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/apps",
    tag = "portal-developers",
    params(("orgId" = String, Path, description = "The organisation whose portal it is.")),
    responses(
        (status = 200, description = "The signed-in developer's apps.", body = DeveloperAppList),
        (status = 401, description = "Not signed in.", body = ErrorBody),
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
    params(("orgId" = String, Path, description = "The organisation whose portal it is.")),
    request_body(content = DeveloperAppInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Made. With the product's `key_approval` `auto` the app is approved and `key` is its gateway key, shown this once; with `manual` it waits for the publisher.", body = AppWithKey),
        (status = 400, description = "Bad JSON or an invalid field (named).", body = ErrorBody),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
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
    products::check_text("name", &input.name, true, 200)?;
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
        products::KeyApproval::stored_or_auto(&product.key_approval) == products::KeyApproval::Auto;
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
        if let Some((key_id, token)) = issue_key(&ctx, &app, &product).await? {
            swap_key(&ctx, &app, None, &key_id).await?;
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
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
    ),
    responses(
        (status = 200, description = "The app with its subscriptions (never their secrets).", body = DeveloperApp),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 404, description = "The developer has no such app.", body = ErrorBody),
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
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
    ),
    responses(
        (status = 200, description = "Deleted with its subscriptions; its key is revoked.", body = Object),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
        (status = 404, description = "The developer has no such app.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn delete(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, _) = own_app(&ctx, &signed).await?;
    ctx.state.store.delete_app(&app.org_id, &app.id).await?;
    revoke_keys(&ctx, &app.org_id, KeyOf::App(&app.id)).await?;
    Reply::outcome(StatusCode::OK, "app deleted", Some(&app.id), &app.id)
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/key",
    tag = "portal-developers",
    params(
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
    ),
    responses(
        (status = 201, description = "A new key, shown this once; the app's earlier key, if any, is revoked.", body = NewKey),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
        (status = 404, description = "The developer has no such app.", body = ErrorBody),
        (status = 409, description = "The app's access is pending or was refused, or its product offers no API.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn rotate_key(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, product) = own_app(&ctx, &signed).await?;
    approved(&app)?;
    if !product.published {
        return Err(ApiError::Conflict(format!(
            "product `{}` is no longer published: it issues no new keys",
            product.name
        )));
    }
    ctx.state.accounts.attempt(
        &format!("portal:keys:{}", app.id),
        KEYS_PER_MINUTE,
        std::time::Duration::from_secs(60),
    )?;
    let Some((key_id, key)) = issue_key(&ctx, &app, &product).await? else {
        return Err(ApiError::Conflict(format!(
            "product `{}` offers no API yet: there is no key to issue",
            product.name
        )));
    };
    swap_key(&ctx, &app, app.key_id.as_deref(), &key_id).await?;
    if let Some(old) = &app.key_id {
        revoke_key_id(&ctx, old).await;
    }
    Reply::json(StatusCode::CREATED, NewKey { key_id, key })
}

#[utoipa::path(
    delete,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/key",
    tag = "portal-developers",
    params(
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
    ),
    responses(
        (status = 200, description = "Revoked: gateways refuse it within their key cache time.", body = Object),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
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
    revoke_key_id(&ctx, &key_id).await;
    Reply::outcome(StatusCode::OK, "key revoked", Some(&key_id), &app.id)
}

fn approved(app: &AppRecord) -> Result<(), ApiError> {
    if app.status == APPROVED {
        return Ok(());
    }
    Err(ApiError::Conflict(format!(
        "the app's access to its product is {}: it gets a key once the publisher approves it",
        app.status
    )))
}

#[utoipa::path(
    post,
    path = "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions",
    tag = "portal-developers",
    params(
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
    ),
    request_body(content = DeveloperSubscriptionInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Subscribed; `secret` is shown this once.", body = NewSubscription),
        (status = 400, description = "Bad JSON or an invalid field (named): an event the product does not open, or a URL the egress policy refuses.", body = ErrorBody),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
        (status = 404, description = "The developer has no such app.", body = ErrorBody),
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
    approved(&app)?;
    if app.subscriptions.len() >= products::MAX_SUBSCRIPTIONS {
        return Err(ApiError::Conflict(format!(
            "an app has at most {} subscriptions",
            products::MAX_SUBSCRIPTIONS
        )));
    }
    let url = products::check_url("url", &input.url)?;
    reachable(&ctx, &url).await?;
    if input.events.is_empty() {
        return Err(ApiError::bad_request(
            "invalid field `events`: choose at least one event",
        ));
    }
    if input.events.len() > products::MAX_LIST_LEN {
        return Err(ApiError::bad_request(format!(
            "invalid field `events`: at most {} events",
            products::MAX_LIST_LEN
        )));
    }
    for (i, event) in input.events.iter().enumerate() {
        let field = format!("events[{i}]");
        if input.events[..i].contains(event) {
            return Err(ApiError::bad_request(format!(
                "invalid field `{field}`: `{event}` is listed twice"
            )));
        }
        if !product.webhooks_enabled || !product.events.contains(event) {
            return Err(ApiError::bad_request(format!(
                "invalid field `{field}`: `{event}` is not an event product `{}` opens to subscription",
                product.name
            )));
        }
    }
    let secret = match input.secret {
        Some(secret) => {
            products::check_secret("secret", &secret)?;
            secret
        }
        None => products::generate_secret(),
    };
    let sealed = products::seal(products::sealer(&ctx)?, &secret)?;
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
            subscription: products::subscription_view(subscription),
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
    ctx.state.accounts.attempt(
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
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
        ("subscriptionId" = String, Path, description = "One of the app's subscriptions."),
    ),
    responses(
        (status = 200, description = "Unsubscribed.", body = Object),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
        (status = 404, description = "No such app or subscription.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn unsubscribe(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (mut app, _) = own_app(&ctx, &signed).await?;
    let id = ctx.param(2).to_owned();
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
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
        ("subscriptionId" = String, Path, description = "One of the app's subscriptions."),
    ),
    responses(
        (status = 202, description = "A `sluice.test` event is queued for the subscription, signed with its secret.", body = Object),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
        (status = 404, description = "No such app or subscription.", body = ErrorBody),
        (status = 429, description = "Too many test events for the subscription, or the organisation has `webhooks.max_pending_per_org` deliveries waiting.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn test_event(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, product) = own_app(&ctx, &signed).await?;
    let sub = app
        .subscriptions
        .iter()
        .find(|s| s.id == ctx.param(2))
        .ok_or_else(|| ApiError::not_found("subscription"))?;
    // Per developer: a new subscription must not bring a fresh allowance.
    per_developer(&ctx, &signed, "test", TESTS_PER_MINUTE)?;
    let id = uuid::Uuid::now_v7().simple().to_string();
    let data = json!({"test": true, "app_id": app.id, "subscription_id": sub.id});
    let body = products::envelope(&id, TEST_EVENT, &product.id, data);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let max_attempts = i64::from(ctx.state.config.webhooks.max_attempts.max(1));
    let delivery =
        products::subscription_delivery(sub, &id, TEST_EVENT, body, max_attempts, now_ms);
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
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
        ("p" = Option<i64>, Query, description = "Page number from 1 (20 a page)."),
    ),
    responses(
        (status = 200, description = "A page of the deliveries to the app's subscriptions, newest first, each with its attempts (status, error, latency).", body = DeveloperDeliveries),
        (status = 400, description = "A bad query parameter.", body = ErrorBody),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 404, description = "The developer has no such app.", body = ErrorBody),
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
        ("orgId" = String, Path, description = "The organisation whose portal it is."),
        ("appId" = String, Path, description = "One of the developer's apps."),
        ("deliveryId" = String, Path, description = "A dead delivery to one of the app's subscriptions."),
    ),
    responses(
        (status = 200, description = "Queued again, due now.", body = Object),
        (status = 401, description = "Not signed in.", body = ErrorBody),
        (status = 403, description = "The CSRF token is wrong.", body = ErrorBody),
        (status = 404, description = "No such app, or no such delivery to its subscriptions.", body = ErrorBody),
        (status = 409, description = "The delivery is not dead.", body = ErrorBody),
    ),
    security(("portal_session" = []))
)]
pub async fn redeliver(ctx: Ctx) -> Result<Reply, ApiError> {
    let signed = writer(&ctx).await?;
    let (app, _) = own_app(&ctx, &signed).await?;
    per_developer(&ctx, &signed, "redeliver", REDELIVERIES_PER_MINUTE)?;
    let id = ctx.param(2);
    let found = ctx.state.store.delivery(&app.org_id, id).await?;
    let delivery = found
        .map(|(d, _)| d)
        .filter(|d| sources(&app).contains(&d.source))
        .ok_or_else(|| ApiError::not_found("delivery"))?;
    deliveries::replay_dead(&ctx, &delivery).await?;
    Reply::outcome(StatusCode::OK, "delivery queued again", Some(id), id)
}
