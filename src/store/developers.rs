//! The developers of each organisation's portal: their accounts, their signed-in
//! sessions, the one-time tokens that let them in (invitations and password resets), and
//! each portal's settings. Sessions and tokens are kept by a hash of what the developer
//! holds, so the store never has a usable credential.

use super::{Page, Store, StoreError};

/// A developer account.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeveloperRecord {
    pub id: String,
    pub org_id: String,
    /// Lower case, trimmed: the address is the account's name in its portal.
    pub email: String,
    /// Argon2id, PHC string.
    pub password_hash: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

/// One organisation's portal settings.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PortalSettings {
    pub org_id: String,
    /// `open`, `invite` or `off`.
    pub signup: String,
    /// The organisation's webhook (database id) that carries password-reset tokens.
    pub reset_hook_id: Option<String>,
    /// Unix seconds.
    pub updated_at: i64,
}

/// What a one-time token lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Sign up while sign-up is by invitation.
    Invite,
    /// Set a new password.
    Reset,
}

impl TokenKind {
    fn as_str(self) -> &'static str {
        match self {
            TokenKind::Invite => "invite",
            TokenKind::Reset => "reset",
        }
    }
}

const DEVELOPER_COLUMNS: &str =
    "d.id, d.org_id, d.email, d.password_hash, d.created_at, d.updated_at";

impl Store {
    /// The organisation's portal settings; sign-up off when it has none stored.
    pub async fn portal_settings(&self, org_id: &str) -> Result<PortalSettings, StoreError> {
        let row: Option<PortalSettings> = with_pool!(self, |pool| {
            sqlx::query_as(
                "SELECT org_id, signup, reset_hook_id, updated_at FROM portal_settings \
                 WHERE org_id = $1",
            )
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.unwrap_or_else(|| PortalSettings {
            org_id: org_id.to_owned(),
            signup: "off".into(),
            reset_hook_id: None,
            updated_at: 0,
        }))
    }

    /// Stores the organisation's portal settings, replacing any.
    pub async fn put_portal_settings(&self, s: &PortalSettings) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO portal_settings (org_id, signup, reset_hook_id, updated_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (org_id) DO UPDATE SET \
                 signup = excluded.signup, reset_hook_id = excluded.reset_hook_id, \
                 updated_at = excluded.updated_at",
            )
            .bind(s.org_id.as_str())
            .bind(s.signup.as_str())
            .bind(s.reset_hook_id.as_deref())
            .bind(s.updated_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Adds a developer while the portal has fewer than `max` (checked in the same
    /// statement, under the organisation's lock on PostgreSQL, so sign-ups at once cannot
    /// pass it together); `false` when it has them. [`StoreError::Conflict`] when the
    /// address has an account already.
    pub async fn insert_developer(
        &self,
        d: &DeveloperRecord,
        max: i64,
    ) -> Result<bool, StoreError> {
        let lock = self.key_lock();
        let n = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            if let Some(lock) = lock {
                sqlx::query(lock)
                    .bind(format!("developers:{}", d.org_id))
                    .execute(&mut *tx)
                    .await?;
            }
            let n = sqlx::query(
                "INSERT INTO portal_developers (id, org_id, email, password_hash, created_at, \
                 updated_at) SELECT $1, $2, $3, $4, $5, $6 \
                 WHERE (SELECT COUNT(*) FROM portal_developers WHERE org_id = $2) < $7",
            )
            .bind(d.id.as_str())
            .bind(d.org_id.as_str())
            .bind(d.email.as_str())
            .bind(d.password_hash.as_str())
            .bind(d.created_at)
            .bind(d.updated_at)
            .bind(max)
            .execute(&mut *tx)
            .await
            .map_err(|e| super::orgs::conflict_or(e, "a developer with this e-mail address"))?
            .rows_affected();
            tx.commit().await?;
            n
        });
        Ok(n > 0)
    }

    /// The organisation's developer with address `email`.
    pub async fn developer_by_email(
        &self,
        org_id: &str,
        email: &str,
    ) -> Result<Option<DeveloperRecord>, StoreError> {
        let sql = format!(
            "SELECT {DEVELOPER_COLUMNS} FROM portal_developers d \
             WHERE d.org_id = $1 AND d.email = $2"
        );
        Ok(with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(email)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// One page of the organisation's developers, oldest first, and how many there are.
    pub async fn list_developers(
        &self,
        org_id: &str,
        page: Page,
    ) -> Result<(Vec<DeveloperRecord>, i64), StoreError> {
        let sql = format!(
            "SELECT {DEVELOPER_COLUMNS} FROM portal_developers d WHERE d.org_id = $1 \
             ORDER BY d.created_at, d.id LIMIT $2 OFFSET $3"
        );
        let rows = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?
        });
        Ok((rows, self.count_developers(org_id).await?))
    }

    /// How many developers the organisation's portal has.
    pub async fn count_developers(&self, org_id: &str) -> Result<i64, StoreError> {
        let (n,): (i64,) = with_pool!(self, |pool| {
            sqlx::query_as("SELECT COUNT(*) FROM portal_developers WHERE org_id = $1")
                .bind(org_id)
                .fetch_one(pool)
                .await?
        });
        Ok(n)
    }

    /// Sets a developer's password and signs them out everywhere; `false` when there is
    /// no such developer.
    pub async fn set_developer_password(
        &self,
        org_id: &str,
        id: &str,
        password_hash: &str,
        at: i64,
    ) -> Result<bool, StoreError> {
        let n = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(
                "UPDATE portal_developers SET password_hash = $3, updated_at = $4 \
                 WHERE org_id = $1 AND id = $2",
            )
            .bind(org_id)
            .bind(id)
            .bind(password_hash)
            .bind(at)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query("DELETE FROM portal_sessions WHERE developer_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            n
        });
        Ok(n > 0)
    }

    /// Removes a developer with their sessions and apps; `false` when there is none.
    pub async fn delete_developer(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        let n = with_pool!(self, |pool| {
            sqlx::query("DELETE FROM portal_developers WHERE org_id = $1 AND id = $2")
                .bind(org_id)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Starts a session for a developer, and drops the sessions that ran out.
    pub async fn insert_session(
        &self,
        token_hash: &str,
        developer: &DeveloperRecord,
        now: i64,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            sqlx::query("DELETE FROM portal_sessions WHERE expires_at <= $1")
                .bind(now)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO portal_sessions (token_hash, developer_id, org_id, created_at, \
                 expires_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(token_hash)
            .bind(developer.id.as_str())
            .bind(developer.org_id.as_str())
            .bind(now)
            .bind(expires_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The developer whose session `token_hash` is, while it lasts.
    pub async fn session_developer(
        &self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<DeveloperRecord>, StoreError> {
        let sql = format!(
            "SELECT {DEVELOPER_COLUMNS} FROM portal_sessions s \
             JOIN portal_developers d ON d.id = s.developer_id \
             WHERE s.token_hash = $1 AND s.expires_at > $2 AND d.org_id = s.org_id"
        );
        Ok(with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(token_hash)
                .bind(now)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// Ends a session.
    pub async fn delete_session(&self, token_hash: &str) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            sqlx::query("DELETE FROM portal_sessions WHERE token_hash = $1")
                .bind(token_hash)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Stores a one-time token for `email`, replacing the address's earlier token of the
    /// same kind (only the newest works), and drops tokens that ran out.
    pub async fn insert_token(
        &self,
        token_hash: &str,
        kind: TokenKind,
        org_id: &str,
        email: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "DELETE FROM portal_tokens WHERE expires_at <= $1 \
                 OR (org_id = $2 AND kind = $3 AND email = $4)",
            )
            .bind(now)
            .bind(org_id)
            .bind(kind.as_str())
            .bind(email)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO portal_tokens (token_hash, kind, org_id, email, created_at, \
                 expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(token_hash)
            .bind(kind.as_str())
            .bind(org_id)
            .bind(email)
            .bind(now)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Uses up token `token_hash` of the organisation's portal: the address it was for,
    /// when it is of `kind` and has not run out. A token works once.
    pub async fn take_token(
        &self,
        token_hash: &str,
        kind: TokenKind,
        org_id: &str,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> = with_pool!(self, |pool| {
            sqlx::query_as(
                "DELETE FROM portal_tokens WHERE token_hash = $1 AND kind = $2 \
                 AND org_id = $3 AND expires_at > $4 RETURNING email",
            )
            .bind(token_hash)
            .bind(kind.as_str())
            .bind(org_id)
            .bind(now)
            .fetch_optional(pool)
            .await?
        });
        // Looked up by the hash of a token: a lookup's timing tells nothing of the token.
        Ok(row.map(|(email,)| email))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::orgs::store_with_orgs;

    fn developer(id: &str, org: &str, email: &str) -> DeveloperRecord {
        DeveloperRecord {
            id: id.into(),
            org_id: org.into(),
            email: email.into(),
            password_hash: format!("hash-{id}"),
            created_at: 1,
            updated_at: 1,
        }
    }

    #[tokio::test]
    async fn settings_default_to_sign_up_off_and_are_replaced() {
        let store = store_with_orgs(&["o1"]).await;
        assert_eq!(store.portal_settings("o1").await.unwrap().signup, "off");
        let mut s = store.portal_settings("o1").await.unwrap();
        s.signup = "open".into();
        s.updated_at = 5;
        store.put_portal_settings(&s).await.unwrap();
        s.signup = "invite".into();
        s.reset_hook_id = Some("h1".into());
        store.put_portal_settings(&s).await.unwrap();
        assert_eq!(store.portal_settings("o1").await.unwrap(), s);
    }

    #[tokio::test]
    async fn one_account_per_address_and_portal() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        store
            .insert_developer(&developer("d1", "o1", "a@x.io"), 10)
            .await
            .unwrap();
        let again = store
            .insert_developer(&developer("d2", "o1", "a@x.io"), 10)
            .await;
        assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
        // Another organisation's portal is another set of accounts.
        store
            .insert_developer(&developer("d3", "o2", "a@x.io"), 1)
            .await
            .unwrap();
        // A full portal takes no more.
        assert!(!store
            .insert_developer(&developer("d4", "o2", "b@x.io"), 1)
            .await
            .unwrap());
        let found = store.developer_by_email("o1", "a@x.io").await.unwrap();
        assert_eq!(found.unwrap().id, "d1");
        assert_eq!(store.count_developers("o2").await.unwrap(), 1);
    }

    #[tokio::test]
    async fn sessions_last_until_they_expire_or_the_password_changes() {
        let store = store_with_orgs(&["o1"]).await;
        let d = developer("d1", "o1", "a@x.io");
        store.insert_developer(&d, 10).await.unwrap();
        store.insert_session("s1", &d, 100, 200).await.unwrap();
        store.insert_session("s2", &d, 100, 300).await.unwrap();
        assert!(store.session_developer("s1", 150).await.unwrap().is_some());
        assert!(store.session_developer("s1", 200).await.unwrap().is_none());
        store.delete_session("s2").await.unwrap();
        assert!(store.session_developer("s2", 150).await.unwrap().is_none());
        store.insert_session("s3", &d, 100, 300).await.unwrap();
        assert!(store
            .set_developer_password("o1", "d1", "new", 160)
            .await
            .unwrap());
        assert!(store.session_developer("s3", 170).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_token_works_once_for_its_kind_and_portal_and_only_the_newest() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        let (kind, now) = (TokenKind::Reset, 100);
        store
            .insert_token("t1", kind, "o1", "a@x.io", now, 200)
            .await
            .unwrap();
        assert_eq!(
            store
                .take_token("t1", TokenKind::Invite, "o1", now)
                .await
                .unwrap(),
            None
        );
        assert_eq!(store.take_token("t1", kind, "o2", now).await.unwrap(), None);
        store
            .insert_token("t2", kind, "o1", "a@x.io", now, 200)
            .await
            .unwrap();
        assert_eq!(store.take_token("t1", kind, "o1", now).await.unwrap(), None);
        assert_eq!(store.take_token("t2", kind, "o1", 200).await.unwrap(), None);
        store
            .insert_token("t3", kind, "o1", "a@x.io", now, 200)
            .await
            .unwrap();
        let email = store.take_token("t3", kind, "o1", now).await.unwrap();
        assert_eq!(email.as_deref(), Some("a@x.io"));
        assert_eq!(store.take_token("t3", kind, "o1", now).await.unwrap(), None);
    }
}
