//! The shape an organisation's own resources share (assets, webhooks, certificates):
//! one is named in the path by its id, found in the caller's organisation only (any
//! other is "not found"), and deleted there, each answered the same way. A resource
//! says how the store reads and deletes it; what it holds and how it is checked stay
//! with it.

use std::future::Future;

use http::StatusCode;

use crate::dashboard::error::ApiError;
use crate::dashboard::request::{Ctx, Reply};
use crate::store::{AssetRecord, CertRecord, HookRecord, Store, StoreError};

/// A record that belongs to one organisation.
pub trait Owned: Sized + Send {
    /// What it is called in answers: `{NOUN} not found`, `{NOUN} deleted`.
    const NOUN: &'static str;

    /// The record of organisation `org` that `id` names, if any.
    fn fetch(
        store: &Store,
        org: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<Self>, StoreError>> + Send;

    /// Deletes the record of `org` whose database id is `db_id`; whether there was one.
    fn remove(
        store: &Store,
        org: &str,
        db_id: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The database id.
    fn db_id(&self) -> &str;

    /// The id the spec's answers give (a custom id where the resource has one).
    fn shown_id(&self) -> &str {
        self.db_id()
    }
}

/// The caller's record that `id`, read from the path, names; or 404.
pub async fn find<R: Owned>(ctx: &Ctx, id: &str) -> Result<R, ApiError> {
    R::fetch(&ctx.state.store, &ctx.caller.org_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found(R::NOUN))
}

/// Deletes `record` (found by [`find`]) and answers with the spec's outcome; 404 when it
/// went meanwhile.
pub async fn delete<R: Owned>(ctx: &Ctx, record: &R) -> Result<Reply, ApiError> {
    if !R::remove(&ctx.state.store, &ctx.caller.org_id, record.db_id()).await? {
        return Err(ApiError::not_found(R::NOUN));
    }
    Reply::outcome(
        StatusCode::OK,
        &format!("{} deleted", R::NOUN),
        Some(record.db_id()),
        record.shown_id(),
    )
}

impl Owned for AssetRecord {
    const NOUN: &'static str = "asset";

    async fn fetch(store: &Store, org: &str, id: &str) -> Result<Option<Self>, StoreError> {
        store.asset(org, id).await
    }

    async fn remove(store: &Store, org: &str, db_id: &str) -> Result<bool, StoreError> {
        store.delete_asset(org, db_id).await
    }

    fn db_id(&self) -> &str {
        &self.id
    }

    fn shown_id(&self) -> &str {
        self.custom_id.as_deref().unwrap_or(&self.id)
    }
}

impl Owned for HookRecord {
    const NOUN: &'static str = "webhook";

    async fn fetch(store: &Store, org: &str, id: &str) -> Result<Option<Self>, StoreError> {
        store.hook(org, id).await
    }

    async fn remove(store: &Store, org: &str, db_id: &str) -> Result<bool, StoreError> {
        store.delete_hook(org, db_id).await
    }

    fn db_id(&self) -> &str {
        &self.id
    }

    fn shown_id(&self) -> &str {
        &self.webhook_id
    }
}

impl Owned for CertRecord {
    const NOUN: &'static str = "certificate";

    async fn fetch(store: &Store, org: &str, id: &str) -> Result<Option<Self>, StoreError> {
        store.cert(org, id).await
    }

    async fn remove(store: &Store, org: &str, db_id: &str) -> Result<bool, StoreError> {
        store.delete_cert(org, db_id).await
    }

    fn db_id(&self) -> &str {
        &self.id
    }
}
