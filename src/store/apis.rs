//! API definitions (OpenAPI documents as JSON text) and their change counter, which lets
//! gateways that share a database notice each other's changes by polling one number.

use super::orgs::conflict_or;
use super::{Store, StoreError, APIS_REVISION, BUMP_REVISION};

/// An API definition as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredApi {
    /// The API's identifier, unique.
    pub id: String,
    /// The organisation that owns the API.
    pub org_id: String,
    /// The OpenAPI document, as JSON text.
    pub document: String,
    /// When the API was last put, in unix seconds.
    pub updated_at: i64,
}

/// An `apis` row, in the column order of the `SELECT`s below.
type ApiRow = (String, String, String, i64);

impl From<ApiRow> for StoredApi {
    fn from((id, org_id, document, updated_at): ApiRow) -> Self {
        StoredApi {
            id,
            org_id,
            document,
            updated_at,
        }
    }
}

const UPSERT: &str = "INSERT INTO apis (id, org_id, document, updated_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, document = excluded.document, \
     updated_at = excluded.updated_at";
const INSERT: &str = "INSERT INTO apis (id, org_id, document, updated_at) VALUES ($1, $2, $3, $4)";
const SELECT_BY_ORG: &str =
    "SELECT id, org_id, document, updated_at FROM apis WHERE org_id = $1 ORDER BY id";
const SELECT_BY_ID: &str = "SELECT id, org_id, document, updated_at FROM apis WHERE id = $1";
const SELECT_ALL: &str = "SELECT id, org_id, document, updated_at FROM apis ORDER BY id";
const DELETE: &str = "DELETE FROM apis WHERE id = $1";

impl Store {
    /// Adds the API, or replaces the one with the same id, and advances
    /// [`apis_revision`](Store::apis_revision).
    pub async fn put_api(&self, api: &StoredApi) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            // One transaction: a reader that sees the new revision also sees the change.
            // The row is written before the counter, so concurrent writers take their
            // locks in the same order.
            let mut tx = pool.begin().await?;
            sqlx::query(UPSERT)
                .bind(api.id.as_str())
                .bind(api.org_id.as_str())
                .bind(api.document.as_str())
                .bind(api.updated_at)
                .execute(&mut *tx)
                .await?;
            sqlx::query(BUMP_REVISION)
                .bind(APIS_REVISION)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Adds an API that must be new, and advances
    /// [`apis_revision`](Store::apis_revision): an id already stored is a
    /// [`StoreError::Conflict`], checked by the database so that two writers cannot both
    /// create it.
    pub async fn insert_api(&self, api: &StoredApi) -> Result<(), StoreError> {
        let done: Result<(), sqlx::Error> = with_pool!(self, |pool| {
            async {
                let mut tx = pool.begin().await?;
                sqlx::query(INSERT)
                    .bind(api.id.as_str())
                    .bind(api.org_id.as_str())
                    .bind(api.document.as_str())
                    .bind(api.updated_at)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(BUMP_REVISION)
                    .bind(APIS_REVISION)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await
            }
            .await
        });
        done.map_err(|e| conflict_or(e, &format!("API '{}'", api.id)))
    }

    /// The APIs of one organisation, ordered by id.
    pub async fn list_apis_of_org(&self, org_id: &str) -> Result<Vec<StoredApi>, StoreError> {
        let rows: Vec<ApiRow> = with_pool!(self, |pool| {
            sqlx::query_as(SELECT_BY_ORG)
                .bind(org_id)
                .fetch_all(pool)
                .await?
        });
        Ok(rows.into_iter().map(StoredApi::from).collect())
    }

    /// The API with this id, if any.
    pub async fn api(&self, id: &str) -> Result<Option<StoredApi>, StoreError> {
        let row: Option<ApiRow> = with_pool!(self, |pool| {
            sqlx::query_as(SELECT_BY_ID)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(StoredApi::from))
    }

    /// Removes an API and advances [`apis_revision`](Store::apis_revision). Returns `false`
    /// (and leaves the revision alone) when no API has this id.
    pub async fn delete_api(&self, id: &str) -> Result<bool, StoreError> {
        let deleted = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let deleted = sqlx::query(DELETE)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
            if deleted {
                sqlx::query(BUMP_REVISION)
                    .bind(APIS_REVISION)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            deleted
        });
        Ok(deleted)
    }

    /// All APIs, ordered by id.
    pub async fn list_apis(&self) -> Result<Vec<StoredApi>, StoreError> {
        let rows: Vec<ApiRow> = with_pool!(self, |pool| {
            sqlx::query_as(SELECT_ALL).fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(StoredApi::from).collect())
    }

    /// A counter kept in the database that grows whenever an API is put or deleted. Every
    /// process sharing the database sees the same value, so polling it is a cheap way to
    /// learn that the APIs changed.
    pub async fn apis_revision(&self) -> Result<i64, StoreError> {
        self.revision(APIS_REVISION).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(id: &str, org_id: &str, document: &str) -> StoredApi {
        StoredApi {
            id: id.into(),
            org_id: org_id.into(),
            document: document.into(),
            updated_at: 1_700_000_000,
        }
    }

    async fn store(dir: &tempfile::TempDir) -> Store {
        Store::open(&dir.path().join("apis.db").display().to_string())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn put_replaces_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        store.put_api(&api("b", "o1", r#"{"v":1}"#)).await.unwrap();
        store.put_api(&api("a", "o1", r#"{"v":1}"#)).await.unwrap();
        let mut newer = api("b", "o2", r#"{"v":2}"#);
        newer.updated_at += 60;
        store.put_api(&newer).await.unwrap();
        assert_eq!(store.api("b").await.unwrap(), Some(newer.clone()));
        assert_eq!(store.api("c").await.unwrap(), None);
        let all = store.list_apis().await.unwrap();
        assert_eq!(all, [api("a", "o1", r#"{"v":1}"#), newer]);
    }

    #[tokio::test]
    async fn revision_moves_on_put_and_delete_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        let other = Store::open(&dir.path().join("apis.db").display().to_string())
            .await
            .unwrap();
        let r0 = store.apis_revision().await.unwrap();
        store.put_api(&api("a", "o", "{}")).await.unwrap();
        let r1 = store.apis_revision().await.unwrap();
        assert!(r1 > r0);
        assert_eq!(other.apis_revision().await.unwrap(), r1);
        assert_eq!(other.api("a").await.unwrap(), Some(api("a", "o", "{}")));

        // Reads and a delete of nothing leave it alone.
        store.list_apis().await.unwrap();
        assert!(!store.delete_api("missing").await.unwrap());
        assert_eq!(store.apis_revision().await.unwrap(), r1);

        // A put of the same document still counts: the caller asked for a change.
        other.put_api(&api("a", "o", "{}")).await.unwrap();
        let r2 = store.apis_revision().await.unwrap();
        assert!(r2 > r1);

        assert!(other.delete_api("a").await.unwrap());
        let r3 = store.apis_revision().await.unwrap();
        assert!(r3 > r2);
        assert_eq!(store.api("a").await.unwrap(), None);
        assert!(store.list_apis().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn insert_refuses_an_existing_id_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        store
            .insert_api(&api("a", "o1", r#"{"v":1}"#))
            .await
            .unwrap();
        let r1 = store.apis_revision().await.unwrap();
        let err = store
            .insert_api(&api("a", "o2", r#"{"v":2}"#))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Conflict(w) if w == "API 'a'"),
            "{err}"
        );
        assert_eq!(store.apis_revision().await.unwrap(), r1);
        assert_eq!(
            store.api("a").await.unwrap(),
            Some(api("a", "o1", r#"{"v":1}"#))
        );
        store.insert_api(&api("b", "o2", "{}")).await.unwrap();
        let of_o2 = store.list_apis_of_org("o2").await.unwrap();
        assert_eq!(of_o2, [api("b", "o2", "{}")]);
    }

    #[tokio::test]
    async fn concurrent_puts_each_count() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(
                    async move { store.put_api(&api(&format!("api{i}"), "o", "{}")).await },
                )
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(store.apis_revision().await.unwrap(), 20);
        assert_eq!(store.list_apis().await.unwrap().len(), 20);
    }
}
