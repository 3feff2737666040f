//! Assets: documents (API templates) kept for an organisation, addressed by their
//! database id or by a custom id that the client chose.

use super::orgs::conflict_or;
use super::{Page, Store, StoreError};

/// An asset as stored; `data` is JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct AssetRecord {
    /// The database identifier, chosen by the dashboard.
    pub id: String,
    pub org_id: String,
    /// The client's identifier, unique within the organisation.
    pub custom_id: Option<String>,
    pub name: String,
    pub description: String,
    pub kind: String,
    pub data: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

type AssetRow = (
    String,
    String,
    Option<String>,
    String,
    String,
    String,
    String,
    i64,
    i64,
);

impl From<AssetRow> for AssetRecord {
    fn from(
        (id, org_id, custom_id, name, description, kind, data, created_at, updated_at): AssetRow,
    ) -> Self {
        AssetRecord {
            id,
            org_id,
            custom_id,
            name,
            description,
            kind,
            data,
            created_at,
            updated_at,
        }
    }
}

const COLUMNS: &str = "SELECT id, org_id, custom_id, name, description, kind, data, created_at, \
     updated_at FROM assets";
const INSERT: &str = "INSERT INTO assets (id, org_id, custom_id, name, description, kind, data, \
     created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const UPDATE: &str = "UPDATE assets SET custom_id = $3, name = $4, description = $5, kind = $6, \
     data = $7, updated_at = $8 WHERE org_id = $1 AND id = $2";
const COUNT: &str = "SELECT COUNT(*) FROM assets WHERE org_id = $1 AND ($2 IS NULL OR kind = $2)";

impl Store {
    /// Adds an asset. A custom id already used in the organisation is a conflict.
    pub async fn insert_asset(&self, asset: &AssetRecord) -> Result<(), StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(INSERT)
                .bind(asset.id.as_str())
                .bind(asset.org_id.as_str())
                .bind(asset.custom_id.as_deref())
                .bind(asset.name.as_str())
                .bind(asset.description.as_str())
                .bind(asset.kind.as_str())
                .bind(asset.data.as_str())
                .bind(asset.created_at)
                .bind(asset.updated_at)
                .execute(pool)
                .await
                .map(|_| ())
        });
        done.map_err(|e| conflict_or(e, &conflict_text(asset)))
    }

    /// The organisation's asset whose database id, or else custom id, is `id`.
    pub async fn asset(&self, org_id: &str, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        // A custom id may equal another asset's database id; the database id wins.
        let sql = format!(
            "{COLUMNS} WHERE org_id = $1 AND (id = $2 OR custom_id = $2) \
             ORDER BY CASE WHEN id = $2 THEN 0 ELSE 1 END LIMIT 1"
        );
        let row: Option<AssetRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(AssetRecord::from))
    }

    /// Replaces everything but the ids, organisation and creation time of the asset with
    /// `asset.id`. `false` when there is none.
    pub async fn update_asset(&self, asset: &AssetRecord) -> Result<bool, StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(UPDATE)
                .bind(asset.org_id.as_str())
                .bind(asset.id.as_str())
                .bind(asset.custom_id.as_deref())
                .bind(asset.name.as_str())
                .bind(asset.description.as_str())
                .bind(asset.kind.as_str())
                .bind(asset.data.as_str())
                .bind(asset.updated_at)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        });
        done.map(|n| n > 0)
            .map_err(|e| conflict_or(e, &conflict_text(asset)))
    }

    /// Removes an asset by database id. `false` when there is none.
    pub async fn delete_asset(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::Assets, org_id, id)
            .await
    }

    /// One page of the organisation's assets (of one kind, when given), oldest first,
    /// and how many there are in all.
    pub async fn list_assets(
        &self,
        org_id: &str,
        kind: Option<&str>,
        page: Page,
    ) -> Result<(Vec<AssetRecord>, i64), StoreError> {
        let sql = format!(
            "{COLUMNS} WHERE org_id = $1 AND ($2 IS NULL OR kind = $2) \
             ORDER BY created_at, id LIMIT $3 OFFSET $4"
        );
        let (rows, (total,)): (Vec<AssetRow>, (i64,)) = with_pool!(self, |pool| {
            let rows = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(kind)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?;
            let total = sqlx::query_as(COUNT)
                .bind(org_id)
                .bind(kind)
                .fetch_one(pool)
                .await?;
            (rows, total)
        });
        Ok((rows.into_iter().map(AssetRecord::from).collect(), total))
    }
}

fn conflict_text(asset: &AssetRecord) -> String {
    match &asset.custom_id {
        Some(id) => format!("asset '{id}'"),
        None => format!("asset '{}'", asset.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::orgs::store_with_orgs;

    fn asset(id: &str, org: &str, custom: Option<&str>, kind: &str) -> AssetRecord {
        AssetRecord {
            id: id.into(),
            org_id: org.into(),
            custom_id: custom.map(Into::into),
            name: "n".into(),
            description: "d".into(),
            kind: kind.into(),
            data: "{}".into(),
            created_at: 1,
            updated_at: 1,
        }
    }

    #[tokio::test]
    async fn found_by_either_id_within_its_org_only() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        store
            .insert_asset(&asset("a1", "o1", Some("tpl"), "oas-template"))
            .await
            .unwrap();
        assert_eq!(store.asset("o1", "a1").await.unwrap().unwrap().id, "a1");
        assert_eq!(store.asset("o1", "tpl").await.unwrap().unwrap().id, "a1");
        assert!(store.asset("o2", "a1").await.unwrap().is_none());
        assert!(store.asset("o2", "tpl").await.unwrap().is_none());
        // The same custom id in another organisation is no conflict.
        store
            .insert_asset(&asset("a2", "o2", Some("tpl"), "oas-template"))
            .await
            .unwrap();
        let err = store
            .insert_asset(&asset("a3", "o1", Some("tpl"), "oas-template"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    }

    #[tokio::test]
    async fn pages_and_kind_filter() {
        let store = store_with_orgs(&["o1"]).await;
        for i in 0..5 {
            let kind = if i % 2 == 0 { "oas-template" } else { "other" };
            store
                .insert_asset(&asset(&format!("a{i}"), "o1", None, kind))
                .await
                .unwrap();
        }
        let (page, total) = store
            .list_assets("o1", None, Page::new(2, 1))
            .await
            .unwrap();
        assert_eq!(total, 5);
        assert_eq!(
            page.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
            ["a2", "a3"]
        );
        let (all, total) = store
            .list_assets("o1", Some("oas-template"), Page::ALL)
            .await
            .unwrap();
        assert_eq!(total, 3);
        assert_eq!(all.len(), 3);
    }

    #[tokio::test]
    async fn update_and_delete_stay_in_their_org() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        store
            .insert_asset(&asset("a1", "o1", None, "oas-template"))
            .await
            .unwrap();
        let mut other = asset("a1", "o2", Some("x"), "oas-template");
        assert!(!store.update_asset(&other).await.unwrap());
        assert!(!store.delete_asset("o2", "a1").await.unwrap());
        other.org_id = "o1".into();
        assert!(store.update_asset(&other).await.unwrap());
        assert_eq!(store.asset("o1", "x").await.unwrap().unwrap().id, "a1");
        assert!(store.delete_asset("o1", "a1").await.unwrap());
        assert!(store.asset("o1", "a1").await.unwrap().is_none());
    }
}
