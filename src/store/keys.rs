//! Gateway keys: the gateway finds a request's key by the key's hash, and owns the policy
//! (JSON text) that the store keeps beside it.

use super::{is_unique_violation, Store, StoreError};

/// A gateway key as stored. The key itself is never stored, only its hash.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyRecord {
    /// The key's identifier, unique.
    pub id: String,
    /// The hash of the key, unique; requests are matched by it.
    pub hash: String,
    /// The organisation that owns the key.
    pub org_id: String,
    /// The key's policy as JSON text; its shape belongs to the gateway.
    pub policy: String,
    /// When the key was created, in unix seconds.
    pub created_at: i64,
    /// When the key was last changed, in unix seconds.
    pub updated_at: i64,
}

/// A `gateway_keys` row, in the column order of the `SELECT`s below.
type KeyRow = (String, String, String, String, i64, i64);

impl From<KeyRow> for KeyRecord {
    fn from((id, hash, org_id, policy, created_at, updated_at): KeyRow) -> Self {
        KeyRecord {
            id,
            hash,
            org_id,
            policy,
            created_at,
            updated_at,
        }
    }
}

const INSERT: &str = "INSERT INTO gateway_keys (id, hash, org_id, policy, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6)";
const UPDATE: &str =
    "UPDATE gateway_keys SET org_id = $2, policy = $3, updated_at = $4 WHERE id = $1";
const SELECT_BY_ID: &str = "SELECT id, hash, org_id, policy, created_at, updated_at \
     FROM gateway_keys WHERE id = $1";
const SELECT_WHERE_ID_IN: &str = "SELECT id, hash, org_id, policy, created_at, updated_at \
     FROM gateway_keys WHERE id IN";
const SELECT_BY_HASH: &str = "SELECT id, hash, org_id, policy, created_at, updated_at \
     FROM gateway_keys WHERE hash = $1";
const SELECT_ALL: &str = "SELECT id, hash, org_id, policy, created_at, updated_at \
     FROM gateway_keys ORDER BY id";
const SELECT_BY_ORG: &str = "SELECT id, hash, org_id, policy, created_at, updated_at \
     FROM gateway_keys WHERE org_id = $1 ORDER BY id";
const DELETE: &str = "DELETE FROM gateway_keys WHERE id = $1";

impl Store {
    /// Adds a key. Fails with [`StoreError::Conflict`] when a key with the same id or the
    /// same hash exists.
    pub async fn insert_key(&self, key: &KeyRecord) -> Result<(), StoreError> {
        let inserted = with_pool!(self, |pool| {
            sqlx::query(INSERT)
                .bind(key.id.as_str())
                .bind(key.hash.as_str())
                .bind(key.org_id.as_str())
                .bind(key.policy.as_str())
                .bind(key.created_at)
                .bind(key.updated_at)
                .execute(pool)
                .await
                .map(|_| ())
        });
        match inserted {
            Ok(_) => Ok(()),
            Err(e) if is_unique_violation(&e) => {
                // The constraint's name is reported differently by each backend; asking
                // which record exists is simpler, and only shapes the message.
                let what = if self.key(&key.id).await?.is_some() {
                    format!("key '{}'", key.id)
                } else {
                    "a key with the same hash".to_owned()
                };
                Err(StoreError::Conflict(what))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Changes a key's organisation, policy and `updated_at`; its hash and `created_at`
    /// stay as they are. Returns `false` when no key has this id.
    pub async fn update_key(&self, key: &KeyRecord) -> Result<bool, StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(UPDATE)
                .bind(key.id.as_str())
                .bind(key.org_id.as_str())
                .bind(key.policy.as_str())
                .bind(key.updated_at)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done > 0)
    }

    /// The key with this id, if any.
    pub async fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.fetch_key(SELECT_BY_ID, id).await
    }

    /// The keys among `ids` that exist, in no order; a few queries, however many ids.
    pub async fn keys_by_ids(&self, ids: &[String]) -> Result<Vec<KeyRecord>, StoreError> {
        // Well under every backend's limit on bound parameters.
        const CHUNK: usize = 500;
        let mut found = Vec::new();
        for chunk in ids.chunks(CHUNK) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!("{SELECT_WHERE_ID_IN} ({})", marks.join(", "));
            let rows: Vec<KeyRow> = with_pool!(self, |pool| {
                let mut query = sqlx::query_as(&sql);
                for id in chunk {
                    query = query.bind(id.as_str());
                }
                query.fetch_all(pool).await?
            });
            found.extend(rows.into_iter().map(KeyRecord::from));
        }
        Ok(found)
    }

    /// The key with this hash, if any.
    pub async fn key_by_hash(&self, hash: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.fetch_key(SELECT_BY_HASH, hash).await
    }

    /// Removes a key. Returns `false` when no key has this id.
    pub async fn delete_key(&self, id: &str) -> Result<bool, StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(DELETE)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done > 0)
    }

    /// All keys, or those of one organisation, ordered by id.
    pub async fn list_keys(&self, org_id: Option<&str>) -> Result<Vec<KeyRecord>, StoreError> {
        let rows: Vec<KeyRow> = match org_id {
            Some(org_id) => with_pool!(self, |pool| {
                sqlx::query_as(SELECT_BY_ORG)
                    .bind(org_id)
                    .fetch_all(pool)
                    .await?
            }),
            None => with_pool!(self, |pool| {
                sqlx::query_as(SELECT_ALL).fetch_all(pool).await?
            }),
        };
        Ok(rows.into_iter().map(KeyRecord::from).collect())
    }

    async fn fetch_key(&self, sql: &str, value: &str) -> Result<Option<KeyRecord>, StoreError> {
        let row: Option<KeyRow> = with_pool!(self, |pool| {
            sqlx::query_as(sql).bind(value).fetch_optional(pool).await?
        });
        Ok(row.map(KeyRecord::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, hash: &str, org_id: &str) -> KeyRecord {
        KeyRecord {
            id: id.into(),
            hash: hash.into(),
            org_id: org_id.into(),
            policy: r#"{"rate":10}"#.into(),
            created_at: 1_700_000_000,
            updated_at: 1_700_000_000,
        }
    }

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("keys.db").display().to_string())
            .await
            .unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn insert_and_find() {
        let (_dir, store) = store().await;
        let a = key("a", "ha", "o1");
        store.insert_key(&a).await.unwrap();
        assert_eq!(store.key("a").await.unwrap(), Some(a.clone()));
        assert_eq!(store.key_by_hash("ha").await.unwrap(), Some(a));
        assert_eq!(store.key("b").await.unwrap(), None);
        assert_eq!(store.key_by_hash("hb").await.unwrap(), None);
    }

    #[tokio::test]
    async fn duplicates_conflict_and_change_nothing() {
        let (_dir, store) = store().await;
        store.insert_key(&key("a", "ha", "o1")).await.unwrap();
        let err = store.insert_key(&key("a", "hb", "o2")).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Conflict(what) if what == "key 'a'"),
            "{err}"
        );
        let err = store.insert_key(&key("b", "ha", "o2")).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Conflict(what) if what.contains("hash")),
            "{err}"
        );
        assert_eq!(store.list_keys(None).await.unwrap().len(), 1);
        assert_eq!(store.key("a").await.unwrap().unwrap().org_id, "o1");
    }

    #[tokio::test]
    async fn update_keeps_hash_and_creation_time() {
        let (_dir, store) = store().await;
        store.insert_key(&key("a", "ha", "o1")).await.unwrap();
        let mut changed = key("a", "other-hash", "o2");
        changed.policy = r#"{"rate":20}"#.into();
        changed.created_at = 1;
        changed.updated_at = 1_800_000_000;
        assert!(store.update_key(&changed).await.unwrap());
        let got = store.key("a").await.unwrap().unwrap();
        assert_eq!(got.hash, "ha");
        assert_eq!(got.created_at, 1_700_000_000);
        assert_eq!(got.org_id, "o2");
        assert_eq!(got.policy, r#"{"rate":20}"#);
        assert_eq!(got.updated_at, 1_800_000_000);
        assert!(!store.update_key(&key("missing", "h", "o")).await.unwrap());
        assert_eq!(store.key("missing").await.unwrap(), None);
    }

    #[tokio::test]
    async fn found_by_ids_past_one_query() {
        let (_dir, store) = store().await;
        for i in 0..600 {
            store
                .insert_key(&key(&format!("k{i}"), &format!("h{i}"), "o1"))
                .await
                .unwrap();
        }
        // Ids of every second key, past the chunk of one query, and ids that name none.
        let mut asked: Vec<String> = (0..1200).step_by(2).map(|i| format!("k{i}")).collect();
        asked.push("k1' OR '1'='1".into());
        let mut found: Vec<String> = store
            .keys_by_ids(&asked)
            .await
            .unwrap()
            .into_iter()
            .map(|k| k.id)
            .collect();
        found.sort_by_key(|id| id[1..].parse::<usize>().unwrap());
        let expected: Vec<String> = (0..600).step_by(2).map(|i| format!("k{i}")).collect();
        assert_eq!(found, expected);
        assert!(store.keys_by_ids(&[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn delete() {
        let (_dir, store) = store().await;
        store.insert_key(&key("a", "ha", "o1")).await.unwrap();
        assert!(store.delete_key("a").await.unwrap());
        assert!(!store.delete_key("a").await.unwrap());
        assert_eq!(store.key_by_hash("ha").await.unwrap(), None);
        // The hash is free again.
        store.insert_key(&key("b", "ha", "o1")).await.unwrap();
    }

    #[tokio::test]
    async fn list_by_org() {
        let (_dir, store) = store().await;
        for (id, org) in [("c", "o1"), ("a", "o1"), ("b", "o2")] {
            store
                .insert_key(&key(id, &format!("h{id}"), org))
                .await
                .unwrap();
        }
        let ids = |keys: Vec<KeyRecord>| keys.into_iter().map(|k| k.id).collect::<Vec<_>>();
        assert_eq!(ids(store.list_keys(None).await.unwrap()), ["a", "b", "c"]);
        assert_eq!(ids(store.list_keys(Some("o1")).await.unwrap()), ["a", "c"]);
        assert_eq!(ids(store.list_keys(Some("o2")).await.unwrap()), ["b"]);
        assert!(store.list_keys(Some("none")).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn text_is_kept_exactly() {
        let (_dir, store) = store().await;
        let mut k = key("ключ 'x'; --", "h?$1", "o");
        k.policy = "{\"note\":\"ünïcødé \\\"quoted\\\"\"}".into();
        k.created_at = i64::MIN;
        k.updated_at = i64::MAX;
        store.insert_key(&k).await.unwrap();
        assert_eq!(store.key(&k.id).await.unwrap(), Some(k));
    }
}
