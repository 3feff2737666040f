//! Who is calling: a dashboard key in `Authorization`, either as `Bearer <key>` or bare
//! (the spec uses the first for resources and the second for streams; both work
//! everywhere). Keys are random 256-bit values; the store keeps only their SHA-256, and
//! the lookup's result is compared again in constant time. The first start with an
//! empty store creates an organisation with an admin and a key ([`bootstrap`]).

use base64::Engine;
use http::{header, HeaderMap};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::ids::{new_id, now};
use crate::store::{DashboardKeyRecord, OrgRecord, Store, StoreError, UserRecord};

/// What a user may do: admins also manage the organisation's users and keys, and its
/// portal's settings with the webhook that carries the portal's password-reset tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    /// A stored role; anything unknown gets the lesser rights.
    pub fn parse(text: &str) -> Role {
        if text == "admin" {
            Role::Admin
        } else {
            Role::Member
        }
    }
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub org_id: String,
    pub user_id: String,
    pub key_id: String,
    pub role: Role,
}

impl Caller {
    /// 403 unless the caller is an admin.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        self.require_admin_to("do this")
    }

    /// 403 naming what was refused (`what`: "change the portal's settings") unless the
    /// caller is an admin.
    pub fn require_admin_to(&self, what: &str) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Member => Err(ApiError::Forbidden(format!(
                "only an admin of the organisation may {what}; this key is a member's"
            ))),
        }
    }
}

/// The key a request carries: `Bearer <key>` or the bare key.
fn presented_key(headers: &HeaderMap) -> Result<&str, ApiError> {
    let missing = || {
        ApiError::Unauthorized(
            "missing credentials: send `Authorization: Bearer <key>` or `Authorization: <key>`"
                .into(),
        )
    };
    let value = headers.get(header::AUTHORIZATION).ok_or_else(missing)?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::Unauthorized("invalid credentials".into()))?
        .trim();
    // `Bearer` alone (its key lost to trimming) carries no key.
    if text.eq_ignore_ascii_case("bearer") {
        return Err(missing());
    }
    let key = match text.split_once(char::is_whitespace) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        _ => text,
    };
    if key.is_empty() {
        return Err(missing());
    }
    Ok(key)
}

/// The hex SHA-256 of a key: what the store keeps.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random key: `sk_` and 256 random bits, base64url.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!(
        "sk_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The caller of a request, or 401.
pub async fn authenticate(store: &Store, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let key = presented_key(headers)?;
    let hash = hash_key(key);
    let invalid = || ApiError::Unauthorized("invalid credentials".into());
    let record = store
        .dashboard_key_by_hash(&hash)
        .await?
        .ok_or_else(invalid)?;
    // The database matched the hash with an ordinary comparison; comparing again in
    // constant time keeps the decision itself free of timing differences.
    if !crate::secret::same(record.hash.as_bytes(), hash.as_bytes()) {
        return Err(invalid());
    }
    let user = store
        .user(&record.org_id, &record.user_id)
        .await?
        .ok_or_else(invalid)?;
    Ok(Caller {
        org_id: record.org_id,
        user_id: record.user_id,
        key_id: record.id,
        role: Role::parse(&user.role),
    })
}

/// A new organisation's first admin and key.
#[derive(Clone, PartialEq, Eq)]
pub struct NewAdmin {
    pub org_id: String,
    pub org_name: String,
    pub user_id: String,
    pub key_id: String,
    /// The key: shown to its owner once, never stored.
    pub key: String,
}

impl std::fmt::Debug for NewAdmin {
    // The key stays out of debug output and logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewAdmin")
            .field("org_id", &self.org_id)
            .field("org_name", &self.org_name)
            .field("user_id", &self.user_id)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// Creates an organisation named `org_name` with a user `admin_name` of role `role` and
/// a key for that user: `key` when given, else a new random one.
pub async fn create_org(
    store: &Store,
    org_name: &str,
    admin_name: &str,
    key: Option<&str>,
) -> Result<NewAdmin, StoreError> {
    let created_at = now();
    let org = OrgRecord {
        id: new_id(),
        name: org_name.to_owned(),
        created_at,
    };
    let user = UserRecord {
        id: new_id(),
        org_id: org.id.clone(),
        name: admin_name.to_owned(),
        role: Role::Admin.as_str().to_owned(),
        created_at,
    };
    let key = key.map_or_else(generate_key, str::to_owned);
    let record = DashboardKeyRecord {
        id: new_id(),
        hash: hash_key(&key),
        user_id: user.id.clone(),
        org_id: org.id.clone(),
        created_at,
    };
    store.create_org(&org, &user, &record).await?;
    Ok(NewAdmin {
        org_id: org.id,
        org_name: org.name,
        user_id: user.id,
        key_id: record.id,
        key,
    })
}

/// On a store without organisations, creates the first one with its admin and key and
/// returns them; on any other store, does nothing.
pub async fn bootstrap(
    store: &Store,
    org_name: &str,
    key: Option<&str>,
) -> Result<Option<NewAdmin>, StoreError> {
    if !store.has_no_orgs().await? {
        return Ok(None);
    }
    create_org(store, org_name, "admin", key).await.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn both_header_forms_carry_the_key() {
        assert_eq!(presented_key(&headers("Bearer abc")).unwrap(), "abc");
        assert_eq!(presented_key(&headers("bearer   abc ")).unwrap(), "abc");
        assert_eq!(presented_key(&headers("abc")).unwrap(), "abc");
        assert!(presented_key(&headers("Bearer ")).is_err());
        assert!(presented_key(&HeaderMap::new()).is_err());
    }

    #[test]
    fn keys_are_random_and_hashed() {
        let a = generate_key();
        assert!(a.starts_with("sk_") && a.len() == 46, "{a}");
        assert_ne!(a, generate_key());
        assert_eq!(hash_key("abc").len(), 64);
        assert_ne!(hash_key("abc"), "abc");
    }

    #[tokio::test]
    async fn bootstrap_once_then_authenticate() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let admin = bootstrap(&store, "acme", Some("0123456789abcdef"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(admin.key, "0123456789abcdef");
        assert!(bootstrap(&store, "again", None).await.unwrap().is_none());

        let caller = authenticate(&store, &headers("Bearer 0123456789abcdef"))
            .await
            .unwrap();
        assert_eq!(caller.org_id, admin.org_id);
        assert_eq!(caller.role, Role::Admin);
        let bare = authenticate(&store, &headers("0123456789abcdef"))
            .await
            .unwrap();
        assert_eq!(bare, caller);
        let e = authenticate(&store, &headers("Bearer wrong"))
            .await
            .unwrap_err();
        assert!(matches!(e, ApiError::Unauthorized(_)));
    }
}
