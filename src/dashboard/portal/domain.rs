//! The developer portal's rules, over the store and with no HTTP in them: what a
//! product and an app may hold (names, events, subscriptions, URLs), how their secrets
//! are made and sealed with the dashboard's `secret`, and what an event published to a
//! product becomes (one signed delivery per subscription that chose it). The handlers
//! turn a [`PortalError`] into the API's error.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::gateway::keys::KeyError;
use crate::store::seal::Sealer;
use crate::store::{
    AppRecord, DeliveryRecord, ProductRecord, Store, StoreError, SubscriptionRecord, APPROVED,
    PENDING,
};

/// Why a portal rule refused what was asked.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    /// A field of what was sent breaks a rule; the text names it.
    #[error("invalid field `{field}`: {why}")]
    Invalid { field: String, why: String },
    /// No such record (`what`) where the caller may see one.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request is sound but the state of things refuses it.
    #[error("{0}")]
    Conflict(String),
    /// A secret must be sealed or opened and there is no sealer to do it.
    #[error("the portal keeps its secrets sealed, and this dashboard has no `secret` configured: set `secret` in its config (or SLUICE_DB_SECRET)")]
    NoSealer,
    /// Sealing a secret failed: not the caller's fault.
    #[error("{0}")]
    Seal(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("gateway keys: {0}")]
    Keys(#[from] KeyError),
}

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
    /// As the store keeps it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyApproval::Auto => "auto",
            KeyApproval::Manual => "manual",
        }
    }

    /// What the store keeps, `auto` for anything else.
    pub fn stored_or_auto(text: &str) -> KeyApproval {
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

/// A field that breaks a rule, and why.
pub fn invalid(field: &str, why: impl std::fmt::Display) -> PortalError {
    PortalError::Invalid {
        field: field.to_owned(),
        why: why.to_string(),
    }
}

/// The dashboard's sealer, which every secret of the portal needs.
pub fn sealer(sealer: Option<&Sealer>) -> Result<&Sealer, PortalError> {
    sealer.ok_or(PortalError::NoSealer)
}

/// `secret` sealed for the store.
pub fn seal(sealer: &Sealer, secret: &str) -> Result<String, PortalError> {
    sealer
        .seal(secret.as_bytes())
        .map_err(|e| PortalError::Seal(e.to_string()))
}

/// A text field: not blank when `required`, at most `max` characters, no NUL.
pub fn check_text(field: &str, text: &str, required: bool, max: usize) -> Result<(), PortalError> {
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

/// A secret sent by the client: an HMAC key of a length that is neither guessable nor
/// too large to keep.
pub fn check_secret(field: &str, secret: &str) -> Result<(), PortalError> {
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

/// A product's event names: each well-formed and listed once, at most 100.
pub fn check_events(events: &[String]) -> Result<(), PortalError> {
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

/// A subscription URL: absolute http or https with a host; returned trimmed.
pub fn check_url(field: &str, text: &str) -> Result<String, PortalError> {
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
pub fn generate_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Checks a product input and fills `record` (whose id, organisation and times are set);
/// returns the new publish secret in plain text when one was given.
pub async fn apply_product(
    store: &Store,
    input: ProductInput,
    record: &mut ProductRecord,
) -> Result<Option<String>, PortalError> {
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
            && store
                .api(id)
                .await?
                .is_some_and(|api| api.org_id == record.org_id);
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

/// The product's publish secret in plain text.
pub fn open_publish_secret(sealer: &Sealer, record: &ProductRecord) -> Result<String, PortalError> {
    sealer
        .open(&record.publish_secret_sealed)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| {
            PortalError::Conflict(format!(
                "the publish secret of product `{}` cannot be opened with this dashboard's `secret` (was it changed?): set a new `publish_secret`",
                record.id
            ))
        })
}

/// Checks an app input and fills `record` (whose id, organisation and times are set),
/// keeping the secrets of the subscriptions it had that are sent without one.
pub async fn apply_app(
    store: &Store,
    sealer: Option<&Sealer>,
    input: AppInput,
    record: &mut AppRecord,
) -> Result<(), PortalError> {
    check_text("name", &input.name, true, 200)?;
    let developer = input.developer.unwrap_or_default();
    check_text("developer", &developer, false, 200)?;
    let found = if input.product_id.contains('\0') {
        None
    } else {
        store.product(&record.org_id, &input.product_id).await?
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
                seal(self::sealer(sealer)?, secret)?
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

/// An app gets a key and subscriptions once its access to its product is approved.
pub fn approved(app: &AppRecord) -> Result<(), PortalError> {
    if app.status == APPROVED {
        return Ok(());
    }
    Err(PortalError::Conflict(format!(
        "the app's access to its product is {}: it gets a key once the publisher approves it",
        app.status
    )))
}

/// Room on `app` for one more subscription.
pub fn room_for_subscription(app: &AppRecord) -> Result<(), PortalError> {
    if app.subscriptions.len() >= MAX_SUBSCRIPTIONS {
        return Err(PortalError::Conflict(format!(
            "an app has at most {MAX_SUBSCRIPTIONS} subscriptions"
        )));
    }
    Ok(())
}

/// The events a developer chose for a new subscription to `product`: at least one, each
/// once, each one the product opens.
pub fn check_chosen_events(product: &ProductRecord, events: &[String]) -> Result<(), PortalError> {
    if events.is_empty() {
        return Err(invalid("events", "choose at least one event"));
    }
    if events.len() > MAX_LIST_LEN {
        return Err(invalid("events", format!("at most {MAX_LIST_LEN} events")));
    }
    for (i, event) in events.iter().enumerate() {
        let field = format!("events[{i}]");
        if events[..i].contains(event) {
            return Err(invalid(&field, format!("`{event}` is listed twice")));
        }
        if !product.webhooks_enabled || !product.events.contains(event) {
            return Err(invalid(
                &field,
                format!(
                    "`{event}` is not an event product `{}` opens to subscription",
                    product.name
                ),
            ));
        }
    }
    Ok(())
}

/// The product was deleted between the check and the write.
pub fn product_gone(record: &AppRecord) -> PortalError {
    invalid(
        "product_id",
        format!(
            "`{}` is not a product of the organisation",
            record.product_id
        ),
    )
}

/// What a subscriber receives of an event: its id, name, product, time and data.
pub fn envelope(id: &str, event: &str, product_id: &str, data: Value) -> Vec<u8> {
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
pub fn subscription_delivery(
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
