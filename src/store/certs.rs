//! Certificates: a PEM chain with its parsed summary, and the private key sealed by the
//! dashboard (the store never sees it in clear).

use super::orgs::conflict_or;
use super::{Page, Store, StoreError};

/// A certificate as stored. `dns_names` and `details` are JSON text written by the
/// dashboard; the summary columns exist so that lists need not parse certificates.
#[derive(Debug, Clone, PartialEq)]
pub struct CertRecord {
    pub org_id: String,
    /// The SHA-256 fingerprint of the leaf certificate, hex; unique in the organisation.
    pub id: String,
    pub subject_cn: String,
    pub issuer_cn: String,
    /// RFC 3339, UTC.
    pub not_before: String,
    /// RFC 3339, UTC.
    pub not_after: String,
    pub is_ca: bool,
    /// A JSON array of strings.
    pub dns_names: String,
    /// A JSON object.
    pub details: String,
    /// The certificate chain, PEM.
    pub pem: String,
    /// The private key encrypted by the dashboard, when one was given.
    pub key_sealed: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
}

type CertRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    bool,
    String,
    String,
    String,
    Option<String>,
    i64,
);

impl From<CertRow> for CertRecord {
    fn from(
        (
            org_id,
            id,
            subject_cn,
            issuer_cn,
            not_before,
            not_after,
            is_ca,
            dns_names,
            details,
            pem,
            key_sealed,
            created_at,
        ): CertRow,
    ) -> Self {
        CertRecord {
            org_id,
            id,
            subject_cn,
            issuer_cn,
            not_before,
            not_after,
            is_ca,
            dns_names,
            details,
            pem,
            key_sealed,
            created_at,
        }
    }
}

const COLUMNS: &str = "SELECT org_id, id, subject_cn, issuer_cn, not_before, not_after, is_ca, \
     dns_names, details, pem, key_sealed, created_at FROM certs";
const INSERT: &str = "INSERT INTO certs (org_id, id, subject_cn, issuer_cn, not_before, \
     not_after, is_ca, dns_names, details, pem, key_sealed, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
/// `$2`: NULL for every certificate, true for those with a private key, false for those
/// without.
const FILTER: &str = "WHERE org_id = $1 AND ($2 IS NULL OR (key_sealed IS NOT NULL) = $2)";

/// Which certificates a list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFilter {
    #[default]
    All,
    WithKey,
    WithoutKey,
}

impl Store {
    /// Adds a certificate; the same certificate twice in one organisation is a conflict.
    pub async fn insert_cert(&self, cert: &CertRecord) -> Result<(), StoreError> {
        let done = with_pool!(self, |pool| {
            sqlx::query(INSERT)
                .bind(cert.org_id.as_str())
                .bind(cert.id.as_str())
                .bind(cert.subject_cn.as_str())
                .bind(cert.issuer_cn.as_str())
                .bind(cert.not_before.as_str())
                .bind(cert.not_after.as_str())
                .bind(cert.is_ca)
                .bind(cert.dns_names.as_str())
                .bind(cert.details.as_str())
                .bind(cert.pem.as_str())
                .bind(cert.key_sealed.as_deref())
                .bind(cert.created_at)
                .execute(pool)
                .await
                .map(|_| ())
        });
        done.map_err(|e| conflict_or(e, &format!("certificate '{}'", cert.id)))
    }

    /// The organisation's certificate with this id.
    pub async fn cert(&self, org_id: &str, id: &str) -> Result<Option<CertRecord>, StoreError> {
        let sql = format!("{COLUMNS} WHERE org_id = $1 AND id = $2");
        let row: Option<CertRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(org_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(CertRecord::from))
    }

    /// The certificate with this fingerprint in any organisation (a gateway's TLS
    /// certificate is named by fingerprint alone); the first one stored when several
    /// organisations hold it.
    pub async fn cert_by_fingerprint(&self, id: &str) -> Result<Option<CertRecord>, StoreError> {
        let sql = format!("{COLUMNS} WHERE id = $1 ORDER BY created_at LIMIT 1");
        let row: Option<CertRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?
        });
        Ok(row.map(CertRecord::from))
    }

    /// Removes a certificate. `false` when there is none.
    pub async fn delete_cert(&self, org_id: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_in_org(super::OrgTable::Certs, org_id, id).await
    }

    /// One page of the organisation's certificates, oldest first, and how many match in
    /// all.
    pub async fn list_certs(
        &self,
        org_id: &str,
        filter: KeyFilter,
        page: Page,
    ) -> Result<(Vec<CertRecord>, i64), StoreError> {
        let with_key = match filter {
            KeyFilter::All => None,
            KeyFilter::WithKey => Some(true),
            KeyFilter::WithoutKey => Some(false),
        };
        let sql = format!("{COLUMNS} {FILTER} ORDER BY created_at, id LIMIT $3 OFFSET $4");
        let count = format!("SELECT COUNT(*) FROM certs {FILTER}");
        let (rows, (total,)): (Vec<CertRow>, (i64,)) = with_pool!(self, |pool| {
            let rows = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(with_key)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?;
            let total = sqlx::query_as(&count)
                .bind(org_id)
                .bind(with_key)
                .fetch_one(pool)
                .await?;
            (rows, total)
        });
        Ok((rows.into_iter().map(CertRecord::from).collect(), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::orgs::store_with_orgs;

    fn cert(org: &str, id: &str, key: bool) -> CertRecord {
        CertRecord {
            org_id: org.into(),
            id: id.into(),
            subject_cn: "s".into(),
            issuer_cn: "i".into(),
            not_before: "2024-01-01T00:00:00Z".into(),
            not_after: "2034-01-01T00:00:00Z".into(),
            is_ca: false,
            dns_names: r#"["a.example"]"#.into(),
            details: "{}".into(),
            pem: "PEM".into(),
            key_sealed: key.then(|| "sealed".into()),
            created_at: 1,
        }
    }

    #[tokio::test]
    async fn filters_by_private_key_and_pages() {
        let store = store_with_orgs(&["o1", "o2"]).await;
        for (id, key) in [("a", true), ("b", false), ("c", true)] {
            store.insert_cert(&cert("o1", id, key)).await.unwrap();
        }
        store.insert_cert(&cert("o2", "a", false)).await.unwrap();
        let err = store
            .insert_cert(&cert("o1", "a", false))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");

        let ids = |(certs, total): (Vec<CertRecord>, i64)| {
            (certs.into_iter().map(|c| c.id).collect::<Vec<_>>(), total)
        };
        let all = store.list_certs("o1", KeyFilter::All, Page::ALL).await;
        assert_eq!(
            ids(all.unwrap()),
            (vec!["a".into(), "b".into(), "c".into()], 3)
        );
        let with = store.list_certs("o1", KeyFilter::WithKey, Page::ALL).await;
        assert_eq!(ids(with.unwrap()), (vec!["a".into(), "c".into()], 2));
        let without = store
            .list_certs("o1", KeyFilter::WithoutKey, Page::ALL)
            .await;
        assert_eq!(ids(without.unwrap()), (vec!["b".into()], 1));
        let page = store
            .list_certs("o1", KeyFilter::All, Page::new(2, 1))
            .await;
        assert_eq!(ids(page.unwrap()), (vec!["c".into()], 3));

        assert!(!store.delete_cert("o2", "c").await.unwrap());
        assert!(store.delete_cert("o1", "c").await.unwrap());
        assert!(store.cert("o1", "c").await.unwrap().is_none());
        assert_eq!(store.cert("o2", "a").await.unwrap().unwrap().org_id, "o2");
    }
}
