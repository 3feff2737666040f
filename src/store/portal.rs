//! The developer portal: API products that open events to webhook subscription, and the
//! developer apps on them with their subscriptions. Everything belongs to one
//! organisation; an app's subscriptions are written with the app, all in one transaction.
//! Lists of names (`api_ids`, `events`) are JSON arrays in text columns.

use super::{Page, Store, StoreError};

/// An API product as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ProductRecord {
    /// Chosen by the dashboard.
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub description: String,
    /// The organisation's APIs the product offers.
    pub api_ids: Vec<String>,
    /// Whether apps may subscribe to the product's events.
    pub webhooks_enabled: bool,
    /// The events open to subscription.
    pub events: Vec<String>,
    /// The secret a publisher signs events with, sealed.
    pub publish_secret_sealed: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
    /// Shown in the developer portal.
    pub published: bool,
    /// `auto`: a developer asking for access gets a key at once; `manual`: once the
    /// publisher approved.
    pub key_approval: String,
}

/// A developer app on one product, with its subscriptions.
#[derive(Debug, Clone, PartialEq)]
pub struct AppRecord {
    /// Chosen by the dashboard.
    pub id: String,
    pub org_id: String,
    pub product_id: String,
    pub name: String,
    pub developer: String,
    pub subscriptions: Vec<SubscriptionRecord>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
    /// The portal developer who made it; `None` for an app an organisation member made.
    pub developer_id: Option<String>,
    /// Its access to the product: [`APPROVED`], [`PENDING_APPROVAL`] or [`REJECTED`].
    pub status: String,
    /// The gateway key it holds, once one was issued.
    pub key_id: Option<String>,
}

/// An app whose access to its product is granted.
pub const APPROVED: &str = "approved";
/// An app waiting for the publisher to grant access.
pub const PENDING_APPROVAL: &str = "pending";
/// An app the publisher refused access.
pub const REJECTED: &str = "rejected";

/// Where an app wants some of its product's events sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionRecord {
    /// Chosen by the dashboard; kept while the subscription is.
    pub id: String,
    pub org_id: String,
    pub app_id: String,
    pub url: String,
    /// The secret deliveries are signed with, sealed.
    pub secret_sealed: String,
    /// The events chosen, each one the product opens.
    pub events: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

type ProductRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    String,
    String,
    i64,
    i64,
    i64,
    String,
);
type AppRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    Option<String>,
    String,
    Option<String>,
);
type SubscriptionRow = (String, String, String, String, String, String, i64, i64);

/// A stored list of names. Only this file writes these columns, so text that is not a
/// JSON array of strings means the row was altered outside; it is reported, not guessed.
fn decode_list(text: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Query(sqlx::Error::Decode(Box::new(e))))
}

fn encode_list(list: &[String]) -> String {
    serde_json::Value::from(list).to_string()
}

fn product(row: ProductRow) -> Result<ProductRecord, StoreError> {
    let (
        id,
        org_id,
        name,
        description,
        api_ids,
        webhooks_enabled,
        events,
        publish_secret_sealed,
        created_at,
        updated_at,
        published,
        key_approval,
    ) = row;
    Ok(ProductRecord {
        id,
        org_id,
        name,
        description,
        api_ids: decode_list(&api_ids)?,
        webhooks_enabled: webhooks_enabled != 0,
        events: decode_list(&events)?,
        publish_secret_sealed,
        created_at,
        updated_at,
        published: published != 0,
        key_approval,
    })
}

fn subscription(row: SubscriptionRow) -> Result<SubscriptionRecord, StoreError> {
    let (id, org_id, app_id, url, secret_sealed, events, created_at, updated_at) = row;
    Ok(SubscriptionRecord {
        id,
        org_id,
        app_id,
        url,
        secret_sealed,
        events: decode_list(&events)?,
        created_at,
        updated_at,
    })
}

/// Joins apps with their subscriptions (`subscriptions` in any order).
fn apps(
    rows: Vec<AppRow>,
    subscriptions: Vec<SubscriptionRow>,
) -> Result<Vec<AppRecord>, StoreError> {
    let mut out: Vec<AppRecord> = rows
        .into_iter()
        .map(
            |(
                id,
                org_id,
                product_id,
                name,
                developer,
                created_at,
                updated_at,
                developer_id,
                status,
                key_id,
            )| AppRecord {
                id,
                org_id,
                product_id,
                name,
                developer,
                subscriptions: Vec::new(),
                created_at,
                updated_at,
                developer_id,
                status,
                key_id,
            },
        )
        .collect();
    for row in subscriptions {
        let s = subscription(row)?;
        if let Some(app) = out.iter_mut().find(|a| a.id == s.app_id) {
            app.subscriptions.push(s);
        }
    }
    Ok(out)
}

const PRODUCT_COLUMNS: &str = "SELECT id, org_id, name, description, api_ids, \
     webhooks_enabled, events, publish_secret_sealed, created_at, updated_at, published, \
     key_approval FROM portal_products";
const INSERT_PRODUCT: &str = "INSERT INTO portal_products (id, org_id, name, description, \
     api_ids, webhooks_enabled, events, publish_secret_sealed, created_at, updated_at, \
     published, key_approval) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
const UPDATE_PRODUCT: &str = "UPDATE portal_products SET name = $3, description = $4, \
     api_ids = $5, webhooks_enabled = $6, events = $7, publish_secret_sealed = $8, \
     updated_at = $9, published = $10, key_approval = $11 WHERE org_id = $1 AND id = $2";

const APP_COLUMNS: &str = "SELECT id, org_id, product_id, name, developer, created_at, \
     updated_at, developer_id, status, key_id FROM portal_apps";
/// Inserts only when the product is the organisation's, so an app never points across
/// organisations whatever the caller checked before.
/// A developer's app is inserted only while they have fewer than `$11` apps, checked in
/// the same statement, so that requests at once cannot pass the cap together.
const INSERT_APP: &str = "INSERT INTO portal_apps (id, org_id, product_id, name, developer, \
     created_at, updated_at, developer_id, status, key_id) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE EXISTS \
     (SELECT 1 FROM portal_products WHERE id = $3 AND org_id = $2) \
     AND (SELECT COUNT(*) FROM portal_apps WHERE developer_id = $8) < $11";
const UPDATE_APP: &str = "UPDATE portal_apps SET product_id = $3, name = $4, developer = $5, \
     updated_at = $6 WHERE org_id = $1 AND id = $2 AND EXISTS \
     (SELECT 1 FROM portal_products WHERE id = $3 AND org_id = $1)";

const SUBSCRIPTION_COLUMNS: &str = "SELECT s.id, s.org_id, s.app_id, s.url, s.secret_sealed, \
     s.events, s.created_at, s.updated_at FROM portal_subscriptions s";
const INSERT_SUBSCRIPTION: &str = "INSERT INTO portal_subscriptions (id, org_id, app_id, url, \
     secret_sealed, events, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Writes an app's subscriptions inside `$tx`, after removing the ones it had.
macro_rules! replace_subscriptions {
    ($tx:ident, $app:expr) => {{
        sqlx::query("DELETE FROM portal_subscriptions WHERE app_id = $1")
            .bind($app.id.as_str())
            .execute(&mut *$tx)
            .await?;
        for s in &$app.subscriptions {
            sqlx::query(INSERT_SUBSCRIPTION)
                .bind(s.id.as_str())
                .bind($app.org_id.as_str())
                .bind($app.id.as_str())
                .bind(s.url.as_str())
                .bind(s.secret_sealed.as_str())
                .bind(encode_list(&s.events))
                .bind(s.created_at)
                .bind(s.updated_at)
                .execute(&mut *$tx)
                .await?;
        }
    }};
}

impl Store {
    /// Adds a product.
    pub async fn insert_product(&self, p: &ProductRecord) -> Result<(), StoreError> {
        with_pool!(self, |pool| {
            sqlx::query(INSERT_PRODUCT)
                .bind(p.id.as_str())
                .bind(p.org_id.as_str())
                .bind(p.name.as_str())
                .bind(p.description.as_str())
                .bind(encode_list(&p.api_ids))
                .bind(i64::from(p.webhooks_enabled))
                .bind(encode_list(&p.events))
                .bind(p.publish_secret_sealed.as_str())
                .bind(p.created_at)
                .bind(p.updated_at)
                .bind(i64::from(p.published))
                .bind(p.key_approval.as_str())
                .execute(pool)
                .await
                .map_err(|e| super::orgs::conflict_or(e, &format!("product '{}'", p.id)))?;
        });
        Ok(())
    }

    /// The organisation's product `id`.
    pub async fn product(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<ProductRecord>, StoreError> {
        let sql = format!("{PRODUCT_COLUMNS} WHERE org_id = $1 AND id = $2");
        let row: Option<ProductRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        row.map(product).transpose()
    }

    /// The product `id` of whichever organisation: events arrive without credentials
    /// that would name one, and the product tells which it is.
    pub async fn product_by_id(&self, id: &str) -> Result<Option<ProductRecord>, StoreError> {
        let sql = format!("{PRODUCT_COLUMNS} WHERE id = $1");
        let row: Option<ProductRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?
        });
        row.map(product).transpose()
    }

    /// Replaces everything but the id, organisation and creation time of product `p.id`.
    /// `false` when the organisation has no such product.
    pub async fn update_product(&self, p: &ProductRecord) -> Result<bool, StoreError> {
        let n = with_pool!(self, |pool| {
            sqlx::query(UPDATE_PRODUCT)
                .bind(p.org_id.as_str())
                .bind(p.id.as_str())
                .bind(p.name.as_str())
                .bind(p.description.as_str())
                .bind(encode_list(&p.api_ids))
                .bind(i64::from(p.webhooks_enabled))
                .bind(encode_list(&p.events))
                .bind(p.publish_secret_sealed.as_str())
                .bind(p.updated_at)
                .bind(i64::from(p.published))
                .bind(p.key_approval.as_str())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Removes a product with its apps and their subscriptions. `false` when there is
    /// none. Deliveries already queued for it stay in the log.
    pub async fn delete_product(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::PortalProducts, org_id, id)
            .await
    }

    /// One page of the organisation's products, oldest first, and how many there are.
    pub async fn list_products(
        &self,
        org_id: &str,
        page: Page,
    ) -> Result<(Vec<ProductRecord>, i64), StoreError> {
        self.products_page(org_id, false, page).await
    }

    /// One page of the organisation's published products, oldest first, and how many
    /// there are: what its developer portal shows.
    pub async fn list_published_products(
        &self,
        org_id: &str,
        page: Page,
    ) -> Result<(Vec<ProductRecord>, i64), StoreError> {
        self.products_page(org_id, true, page).await
    }

    async fn products_page(
        &self,
        org_id: &str,
        published_only: bool,
        page: Page,
    ) -> Result<(Vec<ProductRecord>, i64), StoreError> {
        // `published >= $2`: every product for 0, the published ones for 1.
        let filter = "WHERE org_id = $1 AND published >= $2";
        let sql = format!("{PRODUCT_COLUMNS} {filter} ORDER BY created_at, id LIMIT $3 OFFSET $4");
        let count = format!("SELECT COUNT(*) FROM portal_products {filter}");
        let min = i64::from(published_only);
        let rows: Vec<ProductRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(min)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?
        });
        let (total,): (i64,) = with_pool!(self, |pool| {
            sqlx::query_as(&count)
                .bind(org_id)
                .bind(min)
                .fetch_one(pool)
                .await?
        });
        let products = rows.into_iter().map(product).collect::<Result<_, _>>()?;
        Ok((products, total))
    }

    /// Adds an app with its subscriptions, all or nothing. `false` (and nothing written)
    /// when its product is not one of the organisation's, or its developer has
    /// `max_per_developer` apps already.
    pub async fn insert_app(
        &self,
        app: &AppRecord,
        max_per_developer: i64,
    ) -> Result<bool, StoreError> {
        // One developer's apps are added one at a time, so the count in the statement
        // holds on PostgreSQL too.
        let lock = self.key_lock();
        let added = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            if let (Some(lock), Some(developer)) = (lock, app.developer_id.as_deref()) {
                sqlx::query(lock)
                    .bind(format!("apps:{developer}"))
                    .execute(&mut *tx)
                    .await?;
            }
            let n = sqlx::query(INSERT_APP)
                .bind(app.id.as_str())
                .bind(app.org_id.as_str())
                .bind(app.product_id.as_str())
                .bind(app.name.as_str())
                .bind(app.developer.as_str())
                .bind(app.created_at)
                .bind(app.updated_at)
                .bind(app.developer_id.as_deref())
                .bind(app.status.as_str())
                .bind(app.key_id.as_deref())
                .bind(max_per_developer)
                .execute(&mut *tx)
                .await
                .map_err(|e| super::orgs::conflict_or(e, &format!("app '{}'", app.id)))?
                .rows_affected();
            if n > 0 {
                replace_subscriptions!(tx, app);
                tx.commit().await?;
            }
            n > 0
        });
        Ok(added)
    }

    /// Replaces app `app.id` and all its subscriptions, all or nothing. `false` when the
    /// organisation has no such app, or the new product is not one of its own.
    pub async fn update_app(&self, app: &AppRecord) -> Result<bool, StoreError> {
        let done = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(UPDATE_APP)
                .bind(app.org_id.as_str())
                .bind(app.id.as_str())
                .bind(app.product_id.as_str())
                .bind(app.name.as_str())
                .bind(app.developer.as_str())
                .bind(app.updated_at)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n > 0 {
                replace_subscriptions!(tx, app);
                tx.commit().await?;
            }
            n > 0
        });
        Ok(done)
    }

    /// The organisation's app `id` with its subscriptions.
    pub async fn app(&self, org_id: &str, id: &str) -> Result<Option<AppRecord>, StoreError> {
        let sql = format!("{APP_COLUMNS} WHERE org_id = $1 AND id = $2");
        let subs =
            format!("{SUBSCRIPTION_COLUMNS} WHERE s.app_id = $1 ORDER BY s.created_at, s.id");
        let (row, subscriptions): (Option<AppRow>, Vec<SubscriptionRow>) =
            with_pool!(self, |pool| {
                let row = sqlx::query_as(&sql)
                    .bind(org_id)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?;
                let subscriptions = match row {
                    Some(_) => sqlx::query_as(&subs).bind(id).fetch_all(pool).await?,
                    None => Vec::new(),
                };
                (row, subscriptions)
            });
        Ok(apps(row.into_iter().collect(), subscriptions)?.pop())
    }

    /// Removes an app with its subscriptions. `false` when there is none.
    pub async fn delete_app(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::PortalApps, org_id, id)
            .await
    }

    /// One page of the organisation's apps with their subscriptions, oldest first, and
    /// how many there are.
    pub async fn list_apps(
        &self,
        org_id: &str,
        page: Page,
    ) -> Result<(Vec<AppRecord>, i64), StoreError> {
        let sql =
            format!("{APP_COLUMNS} WHERE org_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3");
        let subs = format!(
            "{SUBSCRIPTION_COLUMNS} WHERE s.app_id IN (SELECT id FROM portal_apps \
             WHERE org_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3) \
             ORDER BY s.created_at, s.id"
        );
        let (rows, subscriptions): (Vec<AppRow>, Vec<SubscriptionRow>) = with_pool!(self, |pool| {
            let rows = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?;
            let subscriptions = sqlx::query_as(&subs)
                .bind(org_id)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?;
            (rows, subscriptions)
        });
        let total = self
            .count_in_org(super::OrgTable::PortalApps, org_id)
            .await?;
        Ok((apps(rows, subscriptions)?, total))
    }

    /// The apps developer `developer_id` made in the organisation's portal, oldest
    /// first, with their subscriptions. A developer has few (the dashboard caps them).
    pub async fn developer_apps(
        &self,
        org_id: &str,
        developer_id: &str,
    ) -> Result<Vec<AppRecord>, StoreError> {
        let sql = format!(
            "{APP_COLUMNS} WHERE org_id = $1 AND developer_id = $2 ORDER BY created_at, id"
        );
        let subs = format!(
            "{SUBSCRIPTION_COLUMNS} JOIN portal_apps a ON a.id = s.app_id \
             WHERE a.org_id = $1 AND a.developer_id = $2 ORDER BY s.created_at, s.id"
        );
        let (rows, subscriptions): (Vec<AppRow>, Vec<SubscriptionRow>) = with_pool!(self, |pool| {
            let rows = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(developer_id)
                .fetch_all(pool)
                .await?;
            let subscriptions = sqlx::query_as(&subs)
                .bind(org_id)
                .bind(developer_id)
                .fetch_all(pool)
                .await?;
            (rows, subscriptions)
        });
        apps(rows, subscriptions)
    }

    /// Sets app `id`'s access to its product (and forgets its key when it is not
    /// approved). `false` when the organisation has no such app.
    pub async fn set_app_status(
        &self,
        org_id: &str,
        id: &str,
        status: &str,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let n = with_pool!(self, |pool| {
            sqlx::query(
                "UPDATE portal_apps SET status = $3, updated_at = $4, \
                 key_id = CASE WHEN $3 = 'approved' THEN key_id ELSE NULL END \
                 WHERE org_id = $1 AND id = $2",
            )
            .bind(org_id)
            .bind(id)
            .bind(status)
            .bind(updated_at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Replaces app `id`'s key `old` with `new`, only while the app is approved and still
    /// holds `old`: a rotation that raced another, a refusal or a deletion writes nothing
    /// (`false`), and its caller revokes the key it made.
    pub async fn swap_app_key(
        &self,
        org_id: &str,
        id: &str,
        old: Option<&str>,
        new: Option<&str>,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let n = with_pool!(self, |pool| {
            sqlx::query(
                "UPDATE portal_apps SET key_id = $4, updated_at = $5 \
                 WHERE org_id = $1 AND id = $2 AND status = 'approved' \
                 AND (key_id = $3 OR (key_id IS NULL AND $3 IS NULL))",
            )
            .bind(org_id)
            .bind(id)
            .bind(old)
            .bind(new)
            .bind(updated_at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// The subscriptions of the product's apps that chose `event`, oldest first.
    pub async fn subscriptions_for_event(
        &self,
        product_id: &str,
        event: &str,
    ) -> Result<Vec<SubscriptionRecord>, StoreError> {
        // Events are a JSON array in text; the few subscriptions of one product are
        // filtered here rather than with SQL that would differ between the backends. An
        // app waiting for approval, or refused, gets no events.
        let sql = format!(
            "{SUBSCRIPTION_COLUMNS} JOIN portal_apps a ON a.id = s.app_id \
             WHERE a.product_id = $1 AND a.status = 'approved' ORDER BY s.created_at, s.id"
        );
        let rows: Vec<SubscriptionRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(product_id)
                .fetch_all(pool)
                .await?
        });
        let mut chosen = Vec::new();
        for row in rows {
            let s = subscription(row)?;
            if s.events.iter().any(|e| e == event) {
                chosen.push(s);
            }
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::orgs::store_with_orgs;

    fn product(id: &str, org: &str, events: &[&str]) -> ProductRecord {
        ProductRecord {
            id: id.into(),
            org_id: org.into(),
            name: "Payments".into(),
            description: String::new(),
            api_ids: vec!["a1".into()],
            webhooks_enabled: true,
            events: events.iter().map(|e| (*e).into()).collect(),
            publish_secret_sealed: "sealed".into(),
            created_at: 1,
            updated_at: 1,
            published: false,
            key_approval: "auto".into(),
        }
    }

    fn subscription(id: &str, org: &str, app: &str, events: &[&str]) -> SubscriptionRecord {
        SubscriptionRecord {
            id: id.into(),
            org_id: org.into(),
            app_id: app.into(),
            url: format!("https://example.com/{id}"),
            secret_sealed: format!("sealed-{id}"),
            events: events.iter().map(|e| (*e).into()).collect(),
            created_at: 1,
            updated_at: 1,
        }
    }

    fn app(id: &str, org: &str, product: &str, subs: Vec<SubscriptionRecord>) -> AppRecord {
        AppRecord {
            id: id.into(),
            org_id: org.into(),
            product_id: product.into(),
            name: "Shop".into(),
            developer: "dev@example.com".into(),
            subscriptions: subs,
            created_at: 1,
            updated_at: 1,
            developer_id: None,
            status: APPROVED.into(),
            key_id: None,
        }
    }

    #[tokio::test]
    async fn products_within_an_org() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        store
            .insert_product(&product("p1", "o1", &["order.paid"]))
            .await
            .unwrap();
        store
            .insert_product(&product("p2", "o2", &[]))
            .await
            .unwrap();
        let err = store
            .insert_product(&product("p1", "o1", &[]))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");

        let got = store.product("o1", "p1").await.unwrap().unwrap();
        assert_eq!(got, product("p1", "o1", &["order.paid"]));
        assert!(store.product("o1", "p2").await.unwrap().is_none());
        assert_eq!(
            store.product_by_id("p2").await.unwrap().unwrap().org_id,
            "o2"
        );

        let mut changed = product("p1", "o1", &["a", "b"]);
        changed.webhooks_enabled = false;
        changed.updated_at = 5;
        assert!(store.update_product(&changed).await.unwrap());
        assert_eq!(store.product("o1", "p1").await.unwrap().unwrap(), changed);
        changed.org_id = "o2".into();
        assert!(!store.update_product(&changed).await.unwrap());

        let (all, total) = store.list_products("o1", Page::ALL).await.unwrap();
        assert_eq!((all.len(), total), (1, 1));
        assert!(!store.delete_product("o2", "p1").await.unwrap());
        assert!(store.delete_product("o1", "p1").await.unwrap());
        assert!(store.product("o1", "p1").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn apps_carry_their_subscriptions() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        store
            .insert_product(&product("p1", "o1", &["e1", "e2"]))
            .await
            .unwrap();
        store
            .insert_product(&product("p2", "o2", &["e1"]))
            .await
            .unwrap();
        let a1 = app(
            "a1",
            "o1",
            "p1",
            vec![
                subscription("s1", "o1", "a1", &["e1"]),
                subscription("s2", "o1", "a1", &["e1", "e2"]),
            ],
        );
        assert!(store.insert_app(&a1, i64::MAX).await.unwrap());
        // Another organisation's product is refused, and nothing is written.
        let stray = app(
            "a2",
            "o1",
            "p2",
            vec![subscription("s3", "o1", "a2", &["e1"])],
        );
        assert!(!store.insert_app(&stray, i64::MAX).await.unwrap());
        assert!(store.app("o1", "a2").await.unwrap().is_none());

        assert_eq!(store.app("o1", "a1").await.unwrap().unwrap(), a1);
        assert!(store.app("o2", "a1").await.unwrap().is_none());
        let (listed, total) = store.list_apps("o1", Page::ALL).await.unwrap();
        assert_eq!((listed, total), (vec![a1.clone()], 1));
        let (page, _) = store.list_apps("o1", Page::new(1, 1)).await.unwrap();
        assert!(page.is_empty());

        let for_e2 = store.subscriptions_for_event("p1", "e2").await.unwrap();
        assert_eq!(
            for_e2.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["s2"]
        );
        assert_eq!(
            store
                .subscriptions_for_event("p1", "e1")
                .await
                .unwrap()
                .len(),
            2
        );
        assert!(store
            .subscriptions_for_event("p1", "e3")
            .await
            .unwrap()
            .is_empty());

        // Replacing the app replaces all its subscriptions.
        let mut changed = a1.clone();
        changed.name = "Renamed".into();
        changed.subscriptions = vec![subscription("s2", "o1", "a1", &["e2"])];
        assert!(store.update_app(&changed).await.unwrap());
        assert_eq!(store.app("o1", "a1").await.unwrap().unwrap(), changed);
        assert!(store
            .subscriptions_for_event("p1", "e1")
            .await
            .unwrap()
            .is_empty());
        // Not across organisations, neither the app nor its product.
        let mut moved = changed.clone();
        moved.product_id = "p2".into();
        assert!(!store.update_app(&moved).await.unwrap());
        let mut foreign = changed.clone();
        foreign.org_id = "o2".into();
        assert!(!store.update_app(&foreign).await.unwrap());

        // Deleting the product takes its apps and subscriptions with it.
        assert!(store.delete_product("o1", "p1").await.unwrap());
        assert!(store.app("o1", "a1").await.unwrap().is_none());
        assert!(store
            .subscriptions_for_event("p1", "e2")
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn deleting_an_app_deletes_its_subscriptions() {
        let store = store_with_orgs(&["o1"]).await;
        store
            .insert_product(&product("p1", "o1", &["e1"]))
            .await
            .unwrap();
        let a1 = app(
            "a1",
            "o1",
            "p1",
            vec![subscription("s1", "o1", "a1", &["e1"])],
        );
        assert!(store.insert_app(&a1, i64::MAX).await.unwrap());
        assert!(!store.delete_app("o2", "a1").await.unwrap());
        assert!(store.delete_app("o1", "a1").await.unwrap());
        assert!(store
            .subscriptions_for_event("p1", "e1")
            .await
            .unwrap()
            .is_empty());
        assert!(!store.delete_app("o1", "a1").await.unwrap());
    }
}
