//! The gateway keys of the portal's apps, from issue to revocation: a key reaches the
//! APIs of its app's product that exist, follows the product when its APIs change, and
//! goes with its app, product or developer. Every key the portal makes names its app,
//! product and developer in its `meta`, which is how they are found again.

use std::collections::BTreeMap;

use tracing::warn;

use super::domain::PortalError;
use crate::dashboard::ids::now;
use crate::gateway::keys::{AccessRight, KeyRequest, Keys};
use crate::store::{AppRecord, ProductRecord, Store};

/// Keys read straight from the store: the dashboard keeps no cache of its own.
fn keys(store: &Store) -> Keys {
    Keys::new(store.clone(), std::time::Duration::ZERO, None)
}

/// A new gateway key for `app`, reaching the product's APIs that still exist.
/// `None` when the product offers no API that exists (a product of webhooks only): a
/// key would reach nothing.
pub async fn issue_key(
    store: &Store,
    app: &AppRecord,
    product: &ProductRecord,
) -> Result<Option<(String, String)>, PortalError> {
    let org = &app.org_id;
    let apis = api_ids_of(store, org).await?;
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
    let (token, _, session) = keys(store).create(request, &known).await?;
    Ok(Some((session.id, token)))
}

/// Whose gateway keys to revoke. Every key the portal makes names its app, product and
/// developer in its `meta`.
pub enum KeyOf<'a> {
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
pub async fn revoke_keys(store: &Store, org: &str, of: KeyOf<'_>) -> Result<(), PortalError> {
    let sessions = keys(store).list_of(Some(org)).await?;
    for s in sessions.iter().filter(|s| of.matches(&s.policy.meta)) {
        revoke_key_id(store, &s.id).await;
    }
    Ok(())
}

/// Sets the access rights of every key of `product`'s apps to the product's APIs as they
/// are now: an API taken out of a product is closed to its keys at once.
pub async fn rescope_keys(store: &Store, product: &ProductRecord) -> Result<(), PortalError> {
    let keys = keys(store);
    let org = &product.org_id;
    let apis = api_ids_of(store, org).await?;
    let rights = access_rights(product, &apis);
    let known = move |id: &str| apis.iter().any(|a| a == id);
    let sessions = keys.list_of(Some(org)).await?;
    for s in sessions
        .iter()
        .filter(|s| KeyOf::Product(&product.id).matches(&s.policy.meta))
    {
        if s.policy.access_rights == rights {
            continue;
        }
        // A key must name an API: with none left, it reaches nothing and goes.
        if rights.is_empty() {
            revoke_key_id(store, &s.id).await;
            continue;
        }
        let request = KeyRequest {
            org_id: Some(org.clone()),
            access_rights: rights.clone(),
            meta: s.policy.meta.clone(),
            ..KeyRequest::default()
        };
        keys.update(&s.id, request, &known).await?;
    }
    Ok(())
}

async fn api_ids_of(store: &Store, org: &str) -> Result<Vec<String>, PortalError> {
    Ok(store
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
pub async fn revoke_key_id(store: &Store, id: &str) {
    if let Err(e) = keys(store).delete(id).await {
        warn!(key_id = %id, error = %e, "Portal: a gateway key could not be revoked; delete it by hand.");
    }
}

/// Gives `app` the new key `new` in place of `old`, or revokes `new` when the app
/// changed meanwhile (another rotation, a refusal, a deletion): 409 then.
pub async fn swap_key(
    store: &Store,
    app: &AppRecord,
    old: Option<&str>,
    new: &str,
) -> Result<(), PortalError> {
    let swapped = store
        .swap_app_key(&app.org_id, &app.id, old, Some(new), now())
        .await;
    if !matches!(swapped, Ok(true)) {
        revoke_key_id(store, new).await;
        swapped?;
        return Err(PortalError::Conflict(
            "the app changed meanwhile (its key was rotated or revoked, or its access refused): read it again".into(),
        ));
    }
    Ok(())
}
