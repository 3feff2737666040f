//! Webhooks: where and how the service calls out (method, target, headers, template).

use super::orgs::conflict_or;
use super::{Page, Store, StoreError};

/// A webhook as stored; `header_map` and `api_model` are JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRecord {
    /// The database identifier, chosen by the dashboard.
    pub id: String,
    pub org_id: String,
    /// The webhook identifier: the client's, or the database id; unique in the
    /// organisation.
    pub webhook_id: String,
    pub name: String,
    pub method: String,
    pub target_path: String,
    pub template_path: String,
    /// A JSON object of header names to values, or `None` for null.
    pub header_map: Option<String>,
    pub event_timeout: i64,
    /// A JSON object.
    pub api_model: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

type HookRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    i64,
    String,
    i64,
    i64,
);

impl From<HookRow> for HookRecord {
    fn from(
        (
            id,
            org_id,
            webhook_id,
            name,
            method,
            target_path,
            template_path,
            header_map,
            event_timeout,
            api_model,
            created_at,
            updated_at,
        ): HookRow,
    ) -> Self {
        HookRecord {
            id,
            org_id,
            webhook_id,
            name,
            method,
            target_path,
            template_path,
            header_map,
            event_timeout,
            api_model,
            created_at,
            updated_at,
        }
    }
}

const COLUMNS: &str = "SELECT id, org_id, webhook_id, name, method, target_path, template_path, \
     header_map, event_timeout, api_model, created_at, updated_at FROM hooks";
const INSERT: &str = "INSERT INTO hooks (id, org_id, webhook_id, name, method, target_path, \
     template_path, header_map, event_timeout, api_model, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
const UPDATE: &str = "UPDATE hooks SET webhook_id = $3, name = $4, method = $5, \
     target_path = $6, template_path = $7, header_map = $8, event_timeout = $9, \
     api_model = $10, updated_at = $11 WHERE org_id = $1 AND id = $2";

impl Store {
    /// Adds a webhook; a webhook id already used in the organisation is a conflict.
    pub async fn insert_hook(&self, hook: &HookRecord) -> Result<(), StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(INSERT)
                .bind(hook.id.as_str())
                .bind(hook.org_id.as_str())
                .bind(hook.webhook_id.as_str())
                .bind(hook.name.as_str())
                .bind(hook.method.as_str())
                .bind(hook.target_path.as_str())
                .bind(hook.template_path.as_str())
                .bind(hook.header_map.as_deref())
                .bind(hook.event_timeout)
                .bind(hook.api_model.as_str())
                .bind(hook.created_at)
                .bind(hook.updated_at)
                .execute(pool)
                .await
                .map(|_| ())
        });
        done.map_err(|e| conflict_or(e, &format!("webhook '{}'", hook.webhook_id)))
    }

    /// The organisation's webhook whose database id, or else webhook id, is `id`.
    pub async fn hook(&self, org_id: &str, id: &str) -> Result<Option<HookRecord>, StoreError> {
        let sql = format!(
            "{COLUMNS} WHERE org_id = $1 AND (id = $2 OR webhook_id = $2) \
             ORDER BY CASE WHEN id = $2 THEN 0 ELSE 1 END LIMIT 1"
        );
        let row: Option<HookRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(HookRecord::from))
    }

    /// Replaces everything but the id, organisation and creation time of the webhook
    /// with `hook.id`. `false` when there is none.
    pub async fn update_hook(&self, hook: &HookRecord) -> Result<bool, StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(UPDATE)
                .bind(hook.org_id.as_str())
                .bind(hook.id.as_str())
                .bind(hook.webhook_id.as_str())
                .bind(hook.name.as_str())
                .bind(hook.method.as_str())
                .bind(hook.target_path.as_str())
                .bind(hook.template_path.as_str())
                .bind(hook.header_map.as_deref())
                .bind(hook.event_timeout)
                .bind(hook.api_model.as_str())
                .bind(hook.updated_at)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        });
        done.map(|n| n > 0)
            .map_err(|e| conflict_or(e, &format!("webhook '{}'", hook.webhook_id)))
    }

    /// Removes a webhook by database id. `false` when there is none.
    pub async fn delete_hook(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::Hooks, org_id, id).await
    }

    /// One page of the organisation's webhooks, oldest first, and how many there are.
    pub async fn list_hooks(
        &self,
        org_id: &str,
        page: Page,
    ) -> Result<(Vec<HookRecord>, i64), StoreError> {
        let sql = format!("{COLUMNS} WHERE org_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3");
        let rows: Vec<HookRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?
        });
        let total = self.count_in_org(super::OrgTable::Hooks, org_id).await?;
        Ok((rows.into_iter().map(HookRecord::from).collect(), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::orgs::store_with_orgs;

    fn hook(id: &str, org: &str, webhook_id: &str) -> HookRecord {
        HookRecord {
            id: id.into(),
            org_id: org.into(),
            webhook_id: webhook_id.into(),
            name: "n".into(),
            method: "POST".into(),
            target_path: "https://example.com/hook".into(),
            template_path: String::new(),
            header_map: None,
            event_timeout: 10,
            api_model: "{}".into(),
            created_at: 1,
            updated_at: 1,
        }
    }

    #[tokio::test]
    async fn crud_within_an_org() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        store.insert_hook(&hook("h1", "o1", "w1")).await.unwrap();
        store.insert_hook(&hook("h2", "o2", "w1")).await.unwrap();
        let err = store
            .insert_hook(&hook("h3", "o1", "w1"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        assert_eq!(store.hook("o1", "w1").await.unwrap().unwrap().id, "h1");
        assert_eq!(store.hook("o1", "h1").await.unwrap().unwrap().id, "h1");
        assert!(store.hook("o1", "h2").await.unwrap().is_none());

        let mut changed = hook("h1", "o1", "w9");
        changed.header_map = Some(r#"{"X-A":"1"}"#.into());
        assert!(store.update_hook(&changed).await.unwrap());
        let got = store.hook("o1", "w9").await.unwrap().unwrap();
        assert_eq!(got.header_map.as_deref(), Some(r#"{"X-A":"1"}"#));
        changed.org_id = "o2".into();
        assert!(!store.update_hook(&changed).await.unwrap());

        let (all, total) = store.list_hooks("o1", Page::ALL).await.unwrap();
        assert_eq!((all.len(), total), (1, 1));
        assert!(store.delete_hook("o1", "h1").await.unwrap());
        assert!(!store.delete_hook("o1", "h1").await.unwrap());
    }
}
