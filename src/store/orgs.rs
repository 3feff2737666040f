//! Organisations, their users and the users' dashboard keys. A key is kept only as the
//! SHA-256 of its text; the dashboard finds a request's key by that hash.

use super::{is_unique_violation, Store, StoreError};

/// An organisation: the owner of every dashboard resource.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OrgRecord {
    pub id: String,
    pub name: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A dashboard user; `role` is `admin` or `member`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UserRecord {
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub role: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A dashboard API key as stored: never the key itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DashboardKeyRecord {
    pub id: String,
    /// Hex SHA-256 of the key's text.
    pub hash: String,
    pub user_id: String,
    pub org_id: String,
    /// Unix seconds.
    pub created_at: i64,
}

type UserRow = (String, String, String, String, i64);
type KeyRow = (String, String, String, String, i64);

impl From<UserRow> for UserRecord {
    fn from((id, org_id, name, role, created_at): UserRow) -> Self {
        UserRecord {
            id,
            org_id,
            name,
            role,
            created_at,
        }
    }
}

impl From<KeyRow> for DashboardKeyRecord {
    fn from((id, hash, user_id, org_id, created_at): KeyRow) -> Self {
        DashboardKeyRecord {
            id,
            hash,
            user_id,
            org_id,
            created_at,
        }
    }
}

const COUNT_ORGS: &str = "SELECT COUNT(*) FROM orgs";
const INSERT_ORG: &str = "INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3)";
const SELECT_ORG: &str = "SELECT id, name, created_at FROM orgs WHERE id = $1";
const MARK_INSTANCE: &str = "UPDATE orgs SET instance = TRUE WHERE id = \
     (SELECT id FROM orgs ORDER BY created_at, id LIMIT 1) \
     AND NOT EXISTS (SELECT 1 FROM orgs WHERE instance)";
const SELECT_INSTANCE: &str = "SELECT id FROM orgs WHERE instance";
const INSERT_USER: &str =
    "INSERT INTO users (id, org_id, name, role, created_at) VALUES ($1, $2, $3, $4, $5)";
const USER_COLUMNS: &str = "SELECT id, org_id, name, role, created_at FROM users";
const INSERT_KEY: &str =
    "INSERT INTO dashboard_keys (id, hash, user_id, org_id, created_at) VALUES ($1, $2, $3, $4, $5)";
const KEY_COLUMNS: &str = "SELECT id, hash, user_id, org_id, created_at FROM dashboard_keys";

/// The `INSERT` of a user with its values bound; a macro so that it types against
/// whichever backend `with_pool!` is compiling for.
macro_rules! insert_user {
    ($user:expr) => {
        sqlx::query(INSERT_USER)
            .bind($user.id.as_str())
            .bind($user.org_id.as_str())
            .bind($user.name.as_str())
            .bind($user.role.as_str())
            .bind($user.created_at)
    };
}

/// The `INSERT` of a dashboard key with its values bound.
macro_rules! insert_key {
    ($key:expr) => {
        sqlx::query(INSERT_KEY)
            .bind($key.id.as_str())
            .bind($key.hash.as_str())
            .bind($key.user_id.as_str())
            .bind($key.org_id.as_str())
            .bind($key.created_at)
    };
}

impl Store {
    /// Whether the store holds no organisation yet (a first start).
    pub async fn has_no_orgs(&self) -> Result<bool, StoreError> {
        let (n,): (i64,) = with_pool!(self, |pool| sqlx::query_as(COUNT_ORGS)
            .fetch_one(pool)
            .await?);
        Ok(n == 0)
    }

    /// Creates an organisation with its first user and that user's key, all or nothing.
    pub async fn create_org(
        &self,
        org: &OrgRecord,
        user: &UserRecord,
        key: &DashboardKeyRecord,
    ) -> Result<(), StoreError> {
        let done: Result<(), sqlx::Error> = with_pool!(self, |pool| {
            async {
                let mut tx = pool.begin().await?;
                sqlx::query(INSERT_ORG)
                    .bind(org.id.as_str())
                    .bind(org.name.as_str())
                    .bind(org.created_at)
                    .execute(&mut *tx)
                    .await?;
                insert_user!(user).execute(&mut *tx).await?;
                insert_key!(key).execute(&mut *tx).await?;
                tx.commit().await
            }
            .await
        });
        done.map_err(|e| conflict_or(e, "an organisation, user or key with this identity"))
    }

    /// The organisation with this id, if any.
    pub async fn org(&self, id: &str) -> Result<Option<OrgRecord>, StoreError> {
        let row: Option<(String, String, i64)> = with_pool!(self, |pool| {
            sqlx::query_as(SELECT_ORG)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|(id, name, created_at)| OrgRecord {
            id,
            name,
            created_at,
        }))
    }

    /// Marks the organisation made first as the instance's own, unless one is marked
    /// already; its admins administer the instance. Ties in `created_at` go by id.
    pub async fn mark_instance_org(&self) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            sqlx::query(MARK_INSTANCE).execute(pool).await.map(|_| ())?
        });
        Ok(())
    }

    /// The id of the instance's own organisation, once one is marked.
    pub async fn instance_org(&self) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> = with_pool!(self, |pool| {
            sqlx::query_as(SELECT_INSTANCE).fetch_optional(pool).await?
        });
        Ok(row.map(|(id,)| id))
    }

    /// Adds a user with a first key, both or neither. A second user of the same name in
    /// one organisation is a conflict.
    pub async fn insert_user(
        &self,
        user: &UserRecord,
        key: &DashboardKeyRecord,
    ) -> Result<(), StoreError> {
        let done: Result<(), sqlx::Error> = with_pool!(self, |pool| {
            async {
                let mut tx = pool.begin().await?;
                insert_user!(user).execute(&mut *tx).await?;
                insert_key!(key).execute(&mut *tx).await?;
                tx.commit().await
            }
            .await
        });
        done.map_err(|e| conflict_or(e, &format!("user '{}'", user.name)))
    }

    /// The users of one organisation, by name.
    pub async fn list_users(&self, org_id: &str) -> Result<Vec<UserRecord>, StoreError> {
        let sql = format!("{USER_COLUMNS} WHERE org_id = $1 ORDER BY name");
        let rows: Vec<UserRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(org_id).fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(UserRecord::from).collect())
    }

    /// The user with this id in this organisation.
    pub async fn user(&self, org_id: &str, id: &str) -> Result<Option<UserRecord>, StoreError> {
        let sql = format!("{USER_COLUMNS} WHERE org_id = $1 AND id = $2");
        let row: Option<UserRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(UserRecord::from))
    }

    /// Removes a user and, with it, the user's keys. `false` when there is no such user.
    pub async fn delete_user(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::Users, org_id, id).await
    }

    /// Adds a dashboard key.
    pub async fn insert_dashboard_key(&self, key: &DashboardKeyRecord) -> Result<(), StoreError> {
        let done = with_pool!(self, |pool| insert_key!(key)
            .execute(pool)
            .await
            .map(|_| ()));
        done.map_err(|e| conflict_or(e, "a key with the same hash"))
    }

    /// The key whose hash is `hash`.
    pub async fn dashboard_key_by_hash(
        &self,
        hash: &str,
    ) -> Result<Option<DashboardKeyRecord>, StoreError> {
        let sql = format!("{KEY_COLUMNS} WHERE hash = $1");
        let row: Option<KeyRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(hash).fetch_optional(pool).await?
        });
        Ok(row.map(DashboardKeyRecord::from))
    }

    /// The keys of one organisation, by id.
    pub async fn list_dashboard_keys(
        &self,
        org_id: &str,
    ) -> Result<Vec<DashboardKeyRecord>, StoreError> {
        let sql = format!("{KEY_COLUMNS} WHERE org_id = $1 ORDER BY id");
        let rows: Vec<KeyRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(org_id).fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(DashboardKeyRecord::from).collect())
    }

    /// Revokes a key. `false` when the organisation has no key with this id.
    pub async fn delete_dashboard_key(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::DashboardKeys, org_id, id)
            .await
    }
}

/// A unique-constraint violation as [`StoreError::Conflict`] naming `what`; any other
/// error as it is.
pub(super) fn conflict_or(error: sqlx::Error, what: &str) -> StoreError {
    if is_unique_violation(&error) {
        StoreError::Conflict(what.to_owned())
    } else {
        StoreError::Query(error)
    }
}

/// A memory store holding the given organisations, each with an admin user `<org>-admin`
/// and a key `<org>-key` whose hash is `<org>-hash`.
#[cfg(test)]
pub(crate) async fn store_with_orgs(orgs: &[&str]) -> Store {
    let store = Store::open("sqlite::memory:").await.unwrap();
    for org in orgs {
        store
            .create_org(
                &OrgRecord {
                    id: (*org).into(),
                    name: (*org).into(),
                    created_at: 1,
                },
                &UserRecord {
                    id: format!("{org}-admin"),
                    org_id: (*org).into(),
                    name: "admin".into(),
                    role: "admin".into(),
                    created_at: 1,
                },
                &DashboardKeyRecord {
                    id: format!("{org}-key"),
                    hash: format!("{org}-hash"),
                    user_id: format!("{org}-admin"),
                    org_id: (*org).into(),
                    created_at: 1,
                },
            )
            .await
            .unwrap();
    }
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    impl UserRecord {
        fn renamed(mut self, name: &str) -> UserRecord {
            self.name = name.into();
            self
        }
    }

    #[tokio::test]
    async fn an_org_is_created_whole_or_not_at_all() {
        let store = store_with_orgs(&["o1"]).await;
        assert!(!store.has_no_orgs().await.unwrap());
        // The key's hash is taken: nothing of the second organisation may remain.
        let err = store
            .create_org(
                &OrgRecord {
                    id: "o2".into(),
                    name: "two".into(),
                    created_at: 2,
                },
                &UserRecord {
                    id: "u2".into(),
                    org_id: "o2".into(),
                    name: "admin".into(),
                    role: "admin".into(),
                    created_at: 2,
                },
                &DashboardKeyRecord {
                    id: "k2".into(),
                    hash: "o1-hash".into(),
                    user_id: "u2".into(),
                    org_id: "o2".into(),
                    created_at: 2,
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        assert!(store.org("o2").await.unwrap().is_none());
        assert!(store.list_users("o2").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn keys_are_found_by_hash_and_go_with_their_user() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        let key = store
            .dashboard_key_by_hash("o1-hash")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(key.org_id, "o1");
        assert!(store.dashboard_key_by_hash("nope").await.unwrap().is_none());
        // Another organisation cannot revoke it.
        assert!(!store.delete_dashboard_key("o2", "o1-key").await.unwrap());
        assert!(!store.delete_user("o2", "o1-admin").await.unwrap());
        assert!(store.delete_user("o1", "o1-admin").await.unwrap());
        assert!(store
            .dashboard_key_by_hash("o1-hash")
            .await
            .unwrap()
            .is_none());
        assert!(store.list_dashboard_keys("o1").await.unwrap().is_empty());
        assert_eq!(store.list_dashboard_keys("o2").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn user_names_are_unique_per_org() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        let user = |id: &str, org: &str| UserRecord {
            id: id.into(),
            org_id: org.into(),
            name: "dev".into(),
            role: "member".into(),
            created_at: 3,
        };
        let key = |id: &str, user: &str, org: &str| DashboardKeyRecord {
            id: id.into(),
            hash: format!("hash-{id}"),
            user_id: user.into(),
            org_id: org.into(),
            created_at: 3,
        };
        store
            .insert_user(&user("u1", "o1"), &key("k1", "u1", "o1"))
            .await
            .unwrap();
        store
            .insert_user(&user("u2", "o2"), &key("k2", "u2", "o2"))
            .await
            .unwrap();
        let err = store
            .insert_user(&user("u3", "o1"), &key("k3", "u3", "o1"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        // A key that cannot be stored leaves no user behind.
        let err = store
            .insert_user(&user("u4", "o1").renamed("ops"), &key("k1", "u4", "o1"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        assert!(store.user("o1", "u4").await.unwrap().is_none());
        assert_eq!(store.user("o1", "u1").await.unwrap().unwrap().name, "dev");
        assert!(store.user("o2", "u1").await.unwrap().is_none());
    }
}
