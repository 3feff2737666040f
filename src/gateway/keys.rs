//! Keys: what a key may do (its policy), issuing and hashing keys, and finding the key
//! of a request. Keys live in the store, hashed: a key is shown once, when it is made.
//! Lookups are cached for `keys.cache_ttl`, so a hot key costs no store round trip.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aes_gcm::aead::{Aead, KeyInit};
use base64::Engine;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::apidef::extension::Per;
use crate::limit::Rate;
use crate::store::{KeyRecord, Store, StoreError};

/// What a key may do, as the key API takes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRequest {
    #[serde(default)]
    pub alias: Option<String>,
    #[serde(default)]
    pub org_id: Option<String>,
    /// API id -> what the key may do there. A key reaches only the APIs listed.
    #[serde(default)]
    pub access_rights: BTreeMap<String, AccessRight>,
    #[serde(default)]
    pub rate_limit: Option<RateSpec>,
    #[serde(default)]
    pub quota: Option<QuotaSpec>,
    /// Unix seconds or RFC 3339; unset or `null` never expires.
    #[serde(default)]
    pub expires: Option<Expiry>,
    #[serde(default)]
    pub inactive: bool,
    #[serde(default)]
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Makes the key usable with HTTP basic authentication.
    #[serde(default)]
    pub basic_auth: Option<BasicAuthRequest>,
    /// Issue an HMAC secret with the key (shown once), for signed requests.
    #[serde(default)]
    pub hmac: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessRight {
    /// Methods allowed; all when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_methods: Vec<String>,
    /// Paths below the listen path allowed (a trailing `*` matches any rest); all when
    /// empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_paths: Vec<String>,
}

impl AccessRight {
    pub fn allows(&self, method: &http::Method, path: &str) -> bool {
        let method_ok = self.allowed_methods.is_empty()
            || self
                .allowed_methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(method.as_str()));
        let path_ok = self.allowed_paths.is_empty()
            || self
                .allowed_paths
                .iter()
                .any(|p| match p.strip_suffix('*') {
                    Some(prefix) => path.starts_with(prefix),
                    None => p == path,
                });
        method_ok && path_ok
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    pub rate: u64,
    #[serde(serialize_with = "per_secs")]
    pub per: Per,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSpec {
    /// Requests per period.
    pub max: u64,
    /// The period, from the first request of it.
    #[serde(serialize_with = "per_secs")]
    pub renewal: Per,
}

fn per_secs<S: serde::Serializer>(p: &Per, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::duration::format(p.0))
}

/// An expiry instant: Unix seconds or RFC 3339 text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry(pub i64);

impl<'de> Deserialize<'de> for Expiry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(i64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) => Ok(Expiry(s)),
            Raw::Text(t) => chrono::DateTime::parse_from_rfc3339(&t)
                .map(|t| Expiry(t.timestamp()))
                .map_err(|e| {
                    serde::de::Error::custom(format!("`{t}` is not an RFC 3339 time: {e}"))
                }),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthRequest {
    pub username: String,
    pub password: String,
}

/// A key as stored: its policy, with secrets hashed or sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    pub access_rights: BTreeMap<String, AccessRight>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaSpec>,
    /// Unix seconds; none never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    #[serde(default)]
    pub inactive: bool,
    #[serde(default)]
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// The basic-auth user name, when the key takes basic authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_username: Option<String>,
    /// Argon2 hash (PHC string) of the basic-auth password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_password_hash: Option<String>,
    /// The HMAC secret, sealed with the gateway secret (it must be read back to check
    /// signatures, so it cannot be hashed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_secret_sealed: Option<String>,
}

impl Policy {
    pub fn rate(&self) -> Option<Rate> {
        self.rate_limit.as_ref().map(|r| Rate {
            rate: r.rate,
            per: r.per.0,
        })
    }

    /// What the key API shows: no hash, no sealed secret.
    pub fn public_view(&self, id: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = v.as_object_mut() {
            map.remove("basic_password_hash");
            let has_hmac = map.remove("hmac_secret_sealed").is_some();
            map.insert("hmac".into(), has_hmac.into());
            if let Some(user) = map.remove("basic_username") {
                map.insert("basic_auth".into(), serde_json::json!({ "username": user }));
            }
            if let Some(e) = self.expires {
                if let Some(t) = chrono::DateTime::from_timestamp(e, 0) {
                    map.insert("expires".into(), t.to_rfc3339().into());
                }
            }
            map.insert("key_id".into(), id.into());
        }
        v
    }
}

/// A request's key, as the middleware sees it.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub org_id: String,
    pub policy: Policy,
    /// The limiter's buckets of this key, named once rather than on every request.
    pub rate_bucket: String,
    pub quota_bucket: String,
}

/// The limiter's bucket of a key's rate limit.
pub fn rate_bucket(key_id: &str) -> String {
    format!("key:{key_id}:rate")
}

/// The limiter's bucket of a key's quota.
pub fn quota_bucket(key_id: &str) -> String {
    format!("key:{key_id}:quota")
}

impl Session {
    pub fn new(id: String, org_id: String, policy: Policy) -> Self {
        Session {
            rate_bucket: rate_bucket(&id),
            quota_bucket: quota_bucket(&id),
            id,
            org_id,
            policy,
        }
    }

    pub fn expired(&self, now: i64) -> bool {
        self.policy.expires.is_some_and(|e| e <= now)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("a key with basic-auth user `{0}` exists already")]
    UserTaken(String),
    #[error("no such key")]
    NotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(field: &str, message: impl Into<String>) -> KeyError {
    KeyError::Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// The SHA-256 of a key, hex. Keys are 256 random bits, so a fast hash is as safe as a
/// slow one here, and it lets the store find a key by its hash.
pub fn hash_token(token: &str) -> String {
    // Into a fixed buffer: this runs on every key-authenticated request, and `hex::encode`
    // builds its string a char at a time.
    let mut out = [0u8; 64];
    let digest = Sha256::digest(token.as_bytes());
    match hex::encode_to_slice(digest, &mut out) {
        Ok(()) => std::str::from_utf8(&out).map_or_else(|_| hex::encode(digest), str::to_owned),
        Err(_) => hex::encode(digest),
    }
}

fn basic_lookup_hash(username: &str) -> String {
    hex::encode(Sha256::digest(format!("basic\0{username}").as_bytes()))
}

/// Cached lookups: hash -> (when read, the key or its absence).
type Cache = HashMap<String, (Instant, Option<Arc<Session>>)>;

/// A keyed digest of what a lookup was made with (a token, say): SipHash-2-4 with 128
/// bits out, under a key drawn at start. Serving threads file their copies of lookups by
/// it, so that a request of a known key costs one short keyed hash rather than the
/// SHA-256 the store is searched by. It is a pseudo-random function of a secret key, so
/// comparing fingerprints tells nothing about the tokens, and no token is kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Fingerprint(u128);

impl Fingerprint {
    /// `kind` keeps lookups of different things apart.
    fn of(kind: u8, text: &str) -> Self {
        use siphasher::sip128::Hasher128;
        use std::hash::Hasher;
        static KEY: std::sync::LazyLock<[u8; 16]> = std::sync::LazyLock::new(rand::random);
        let mut h = siphasher::sip128::SipHasher24::new_with_key(&KEY);
        h.write_u8(kind);
        h.write(text.as_bytes());
        Fingerprint(h.finish128().as_u128())
    }
}

/// What a lookup was made with.
const TOKEN: u8 = 1;
const HASH: u8 = 2;

/// One serving thread's copies of lookups: fingerprint -> (when the shared entry was
/// read, the key or its absence).
type ThreadMap = HashMap<Fingerprint, (Instant, Option<Arc<Session>>), foldhash::fast::FixedState>;

/// Bounds the lookup cache; random keys from a client must not grow it without end.
const CACHE_MAX: usize = 100_000;

/// Bounds each serving thread's copy of the cache.
const THREAD_CACHE_MAX: usize = 10_000;

/// A serving thread's copies of cached lookups, for the [`Keys`] `owner` as of
/// `generation`.
#[derive(Default)]
struct ThreadCache {
    owner: u64,
    generation: u64,
    map: ThreadMap,
}

thread_local! {
    static THREAD_CACHE: std::cell::RefCell<ThreadCache> =
        std::cell::RefCell::new(ThreadCache::default());
}

/// Numbers each [`Keys`] (from 1), so that a thread's copies are never taken for another's.
static NEXT_KEYS_ID: AtomicU64 = AtomicU64::new(1);

/// The keys of a gateway.
pub struct Keys {
    id: u64,
    /// Moves on whenever cached lookups are forgotten.
    generation: AtomicU64,
    store: Store,
    ttl: Duration,
    // Read far more often than written: every request of a cached key only reads.
    cache: parking_lot::RwLock<Cache>,
    /// Seals HMAC secrets; derived from the gateway secret.
    sealer: Option<aes_gcm::Aes256Gcm>,
}

impl Keys {
    pub fn new(store: Store, ttl: Duration, gateway_secret: Option<&str>) -> Self {
        let sealer = gateway_secret.and_then(|s| {
            let key = Sha256::digest(format!("sluice-hmac-seal\0{s}").as_bytes());
            aes_gcm::Aes256Gcm::new_from_slice(&key).ok()
        });
        Keys {
            id: NEXT_KEYS_ID.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            store,
            ttl,
            cache: parking_lot::RwLock::new(HashMap::new()),
            sealer,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The key whose token is `token`.
    pub async fn by_token(&self, token: &str) -> Result<Option<Arc<Session>>, StoreError> {
        let print = Fingerprint::of(TOKEN, token);
        if let Some(hit) = self.thread_cached(print) {
            return Ok(hit);
        }
        let hash = hash_token(token);
        self.lookup(print, &hash, |record| {
            crate::secret::same(record.hash.as_bytes(), hash.as_bytes())
        })
        .await
    }

    /// The key of a basic-auth user, if `password` is its password.
    pub async fn by_basic(
        &self,
        username: &str,
        password: &str,
    ) -> Result<Option<Arc<Session>>, StoreError> {
        // Argon2 is slow on purpose: a verified pair is remembered under a hash of both,
        // so a client's repeated requests do not pay it every time.
        let pair = hex::encode(Sha256::digest(
            format!("basic-pair\0{username}\0{password}").as_bytes(),
        ));
        if let Some(hit) = self.cached(Fingerprint::of(HASH, &pair), &pair) {
            return Ok(hit);
        }
        let hash = basic_lookup_hash(username);
        let print = Fingerprint::of(HASH, &hash);
        let session = match self.thread_cached(print) {
            Some(mine) => mine,
            None => self.lookup(print, &hash, |_| true).await?,
        };
        let verified = session.filter(|s| {
            s.policy
                .basic_password_hash
                .as_deref()
                .is_some_and(|phc| crate::secret::verify_password(password, phc))
        });
        self.remember(pair, verified.clone());
        Ok(verified)
    }

    /// A key by id, with its HMAC secret when it has one.
    pub async fn hmac_secret(
        &self,
        id: &str,
    ) -> Result<Option<(Arc<Session>, Vec<u8>)>, StoreError> {
        let Some(record) = self.store.key(id).await? else {
            return Ok(None);
        };
        let Some(session) = session_of(&record) else {
            return Ok(None);
        };
        let secret = session
            .policy
            .hmac_secret_sealed
            .as_deref()
            .and_then(|sealed| self.unseal(sealed));
        Ok(secret.map(|s| (Arc::new(session), s)))
    }

    /// A lookup remembered less than `ttl` ago. Each serving thread keeps its own copy of
    /// what it found in the shared cache: a request of a known key then takes no lock and
    /// touches no reference count that the other threads also write (either would move a
    /// cache line between cores on every request).
    fn cached(&self, print: Fingerprint, hash: &str) -> Option<Option<Arc<Session>>> {
        self.thread_cached(print)
            .or_else(|| self.shared_cached(print, hash))
    }

    /// A lookup of the shared cache, copied into this thread's.
    fn shared_cached(&self, print: Fingerprint, hash: &str) -> Option<Option<Arc<Session>>> {
        let (at, session) = self
            .cache
            .read()
            .get(hash)
            .filter(|(at, _)| at.elapsed() < self.ttl)?
            .clone();
        // A copy of its own, so that its reference count stays on this thread.
        let copy = session.map(|s| Arc::new(Session::clone(&s)));
        THREAD_CACHE.with(|mine| {
            let mut mine = mine.borrow_mut();
            if mine.map.len() >= THREAD_CACHE_MAX {
                mine.map.clear();
            }
            mine.map.insert(print, (at, copy.clone()));
        });
        Some(copy)
    }

    /// This thread's copy of a lookup, while the shared entry it was copied from is
    /// fresh and no key changed here since.
    fn thread_cached(&self, print: Fingerprint) -> Option<Option<Arc<Session>>> {
        let generation = self.generation.load(Ordering::Acquire);
        THREAD_CACHE.with(|mine| {
            let mut mine = mine.borrow_mut();
            if mine.owner != self.id || mine.generation != generation {
                mine.owner = self.id;
                mine.generation = generation;
                mine.map.clear();
            }
            mine.map
                .get(&print)
                .filter(|(at, _)| at.elapsed() < self.ttl)
                .map(|(_, s)| s.clone())
        })
    }

    fn remember(&self, hash: String, session: Option<Arc<Session>>) {
        let mut cache = self.cache.write();
        if cache.len() >= CACHE_MAX {
            let ttl = self.ttl;
            cache.retain(|_, (at, _)| at.elapsed() < ttl);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(hash, (Instant::now(), session));
    }

    /// A lookup that this thread's copies do not hold (the caller looked): the shared
    /// cache, else the store.
    async fn lookup(
        &self,
        print: Fingerprint,
        hash: &str,
        matches: impl Fn(&KeyRecord) -> bool,
    ) -> Result<Option<Arc<Session>>, StoreError> {
        if let Some(hit) = self.shared_cached(print, hash) {
            return Ok(hit);
        }
        // Boxed: a store query's future is large, and cached lookups (nearly all) should
        // not carry its room.
        let session = Box::pin(self.store.key_by_hash(hash))
            .await?
            .filter(|r| matches(r))
            .and_then(|r| session_of(&r))
            .map(Arc::new);
        self.remember(hash.to_owned(), session.clone());
        Ok(session)
    }

    /// Forgets cached lookups, after a key changed here.
    pub fn forget_all(&self) {
        let mut cache = self.cache.write();
        cache.clear();
        // The threads' copies go at their next lookup.
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Makes a key. Returns the token (shown once), the HMAC secret if asked for, and the
    /// stored key.
    pub async fn create(
        &self,
        req: KeyRequest,
        known_apis: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(String, Option<String>, Session), KeyError> {
        let mut token_bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut token_bytes);
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token_bytes);
        let mut id_bytes = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut id_bytes);
        let id = hex::encode(id_bytes);
        let (policy, hmac_secret) = self.policy_of(req.clone(), None, known_apis)?;
        let hash = match &policy.basic_username {
            // A basic-auth key is found by its user name; its token is not usable alone.
            Some(user) => basic_lookup_hash(user),
            None => hash_token(&token),
        };
        let now = chrono::Utc::now().timestamp();
        let record = KeyRecord {
            id: id.clone(),
            hash,
            org_id: req.org_id.clone().unwrap_or_default(),
            policy: serde_json::to_string(&policy).unwrap_or_default(),
            created_at: now,
            updated_at: now,
        };
        match self.store.insert_key(&record).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) if policy.basic_username.is_some() => {
                return Err(KeyError::UserTaken(
                    policy.basic_username.clone().unwrap_or_default(),
                ))
            }
            Err(e) => return Err(e.into()),
        }
        self.forget_all();
        let session = Session::new(id, record.org_id, policy);
        Ok((token, hmac_secret, session))
    }

    /// Replaces a key's policy; its token, basic user and HMAC secret stay unless the
    /// request gives new ones.
    pub async fn update(
        &self,
        id: &str,
        req: KeyRequest,
        known_apis: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(Option<String>, Session), KeyError> {
        let record = self.store.key(id).await?.ok_or(KeyError::NotFound)?;
        let old = session_of(&record).ok_or(KeyError::NotFound)?;
        if let Some(b) = &req.basic_auth {
            if old.policy.basic_username.as_deref() != Some(b.username.as_str()) {
                return Err(invalid(
                    "basic_auth.username",
                    "a key's basic-auth user cannot change; make a new key",
                ));
            }
        }
        let (policy, hmac_secret) = self.policy_of(req.clone(), Some(&old.policy), known_apis)?;
        let updated = KeyRecord {
            policy: serde_json::to_string(&policy).unwrap_or_default(),
            org_id: req.org_id.clone().unwrap_or(record.org_id.clone()),
            updated_at: chrono::Utc::now().timestamp(),
            ..record
        };
        if !self.store.update_key(&updated).await? {
            return Err(KeyError::NotFound);
        }
        self.forget_all();
        Ok((
            hmac_secret,
            Session::new(id.to_owned(), updated.org_id, policy),
        ))
    }

    pub async fn delete(&self, id: &str) -> Result<bool, KeyError> {
        let deleted = self.store.delete_key(id).await?;
        self.forget_all();
        Ok(deleted)
    }

    /// Takes API `api_id` of organisation `org_id`, deleted, out of the access rights of
    /// the keys that name it: that organisation's and the operator's (of no
    /// organisation). An API made later with the same id is not reached through them.
    /// Returns how many keys changed.
    pub async fn forget_api(&self, org_id: &str, api_id: &str) -> Result<usize, KeyError> {
        let mut records = self.store.list_keys(Some(org_id)).await?;
        if !org_id.is_empty() {
            records.extend(self.store.list_keys(Some("")).await?);
        }
        let mut changed = 0;
        for mut record in records {
            let Ok(mut policy) = serde_json::from_str::<Policy>(&record.policy) else {
                continue;
            };
            if policy.access_rights.remove(api_id).is_none() {
                continue;
            }
            record.policy = serde_json::to_string(&policy).unwrap_or_default();
            record.updated_at = chrono::Utc::now().timestamp();
            if self.store.update_key(&record).await? {
                changed += 1;
            }
        }
        if changed > 0 {
            self.forget_all();
        }
        Ok(changed)
    }

    pub async fn get(&self, id: &str) -> Result<Option<Session>, KeyError> {
        Ok(self.store.key(id).await?.and_then(|r| session_of(&r)))
    }

    /// The keys among `ids` as stored now, by id: a key that is gone is missing.
    pub async fn current(&self, ids: &[String]) -> Result<HashMap<String, Session>, KeyError> {
        Ok(self
            .store
            .keys_by_ids(ids)
            .await?
            .iter()
            .filter_map(session_of)
            .map(|s| (s.id.clone(), s))
            .collect())
    }

    pub async fn list(&self) -> Result<Vec<Session>, KeyError> {
        self.list_of(None).await
    }

    /// The keys of one organisation, or of all.
    pub async fn list_of(&self, org_id: Option<&str>) -> Result<Vec<Session>, KeyError> {
        Ok(self
            .store
            .list_keys(org_id)
            .await?
            .iter()
            .filter_map(session_of)
            .collect())
    }

    fn policy_of(
        &self,
        req: KeyRequest,
        old: Option<&Policy>,
        known_apis: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(Policy, Option<String>), KeyError> {
        if req.access_rights.is_empty() {
            return Err(invalid(
                "access_rights",
                "a key needs at least one API: {\"<api id>\": {}}",
            ));
        }
        for (api, right) in &req.access_rights {
            if !known_apis(api) {
                return Err(invalid(
                    &format!("access_rights.{api}"),
                    format!("no API `{api}` is loaded"),
                ));
            }
            for (i, m) in right.allowed_methods.iter().enumerate() {
                if crate::http::parse_method(m).is_err() {
                    return Err(invalid(
                        &format!("access_rights.{api}.allowed_methods[{i}]"),
                        format!("`{m}` is not an HTTP method"),
                    ));
                }
            }
        }
        if let Some(r) = &req.rate_limit {
            if r.rate == 0 {
                return Err(invalid("rate_limit.rate", "must be above zero"));
            }
        }
        if let Some(q) = &req.quota {
            if q.max == 0 {
                return Err(invalid("quota.max", "must be above zero"));
            }
        }
        let (basic_username, basic_password_hash) = match &req.basic_auth {
            Some(b) => {
                if b.username.is_empty() || b.username.contains(':') {
                    return Err(invalid(
                        "basic_auth.username",
                        "a user name is not empty and has no `:`",
                    ));
                }
                if b.password.len() < 8 {
                    return Err(invalid(
                        "basic_auth.password",
                        "a password has at least 8 characters",
                    ));
                }
                (
                    Some(b.username.clone()),
                    Some(crate::secret::hash_password(&b.password)),
                )
            }
            None => (
                old.and_then(|o| o.basic_username.clone()),
                old.and_then(|o| o.basic_password_hash.clone()),
            ),
        };
        let (hmac_secret_sealed, hmac_secret) = if req.hmac {
            let sealer = self.sealer.as_ref().ok_or_else(|| {
                invalid("hmac", "HMAC keys need the gateway's `secret` to be set")
            })?;
            let mut secret = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut secret);
            let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
            (Some(seal(sealer, secret.as_bytes())), Some(secret))
        } else {
            (old.and_then(|o| o.hmac_secret_sealed.clone()), None)
        };
        Ok((
            Policy {
                alias: req.alias,
                access_rights: req.access_rights,
                rate_limit: req.rate_limit,
                quota: req.quota,
                expires: req.expires.map(|e| e.0),
                inactive: req.inactive,
                meta: req.meta,
                basic_username,
                basic_password_hash,
                hmac_secret_sealed,
            },
            hmac_secret,
        ))
    }

    fn unseal(&self, sealed: &str) -> Option<Vec<u8>> {
        let sealer = self.sealer.as_ref()?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .ok()?;
        if raw.len() < 12 {
            return None;
        }
        let (nonce, data) = raw.split_at(12);
        sealer.decrypt(aes_gcm::Nonce::from_slice(nonce), data).ok()
    }
}

fn seal(sealer: &aes_gcm::Aes256Gcm, plain: &[u8]) -> String {
    let mut nonce = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut nonce);
    let mut out = nonce.to_vec();
    // Encryption with a fresh nonce cannot fail for inputs this small.
    if let Ok(data) = sealer.encrypt(aes_gcm::Nonce::from_slice(&nonce), plain) {
        out.extend_from_slice(&data);
    }
    base64::engine::general_purpose::STANDARD.encode(out)
}

fn session_of(record: &KeyRecord) -> Option<Session> {
    let policy: Policy = serde_json::from_str(&record.policy).ok()?;
    Some(Session::new(
        record.id.clone(),
        record.org_id.clone(),
        policy,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_hash_to_lowercase_hex_sha256() {
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    async fn keys() -> (tempfile::TempDir, Keys) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("k.db").display());
        let store = Store::open(&url).await.unwrap();
        (
            dir,
            Keys::new(store, Duration::from_secs(1), Some("gateway-secret")),
        )
    }

    fn request(json: serde_json::Value) -> KeyRequest {
        serde_json::from_value(json).unwrap()
    }

    /// A new key with access to API `a`: its token and session.
    async fn key_for_api_a(keys: &Keys) -> (String, Session) {
        let (token, _, session) = keys
            .create(
                request(serde_json::json!({"access_rights": {"a": {}}})),
                &|_| true,
            )
            .await
            .unwrap();
        (token, session)
    }

    #[tokio::test]
    async fn a_key_is_found_by_its_token_only() {
        let (_dir, keys) = keys().await;
        let (token, session) = key_for_api_a(&keys).await;
        let found = keys.by_token(&token).await.unwrap().unwrap();
        assert_eq!(found.id, session.id);
        assert!(keys.by_token("nope").await.unwrap().is_none());
        // The store holds no token.
        let record = keys.store().key(&session.id).await.unwrap().unwrap();
        assert!(!record.policy.contains(&token) && record.hash != token);
    }

    #[tokio::test]
    async fn a_change_here_is_seen_at_once_despite_the_cache() {
        let (_other_dir, other) = keys().await;
        let (_dir, keys) = keys().await;
        let (token, session) = key_for_api_a(&keys).await;
        // Cached on this thread by the first lookups.
        for _ in 0..2 {
            let found = keys.by_token(&token).await.unwrap().unwrap();
            assert!(found.policy.access_rights.contains_key("a"));
        }
        // Another gateway's keys on the same thread never answer from these copies.
        assert!(other.by_token(&token).await.unwrap().is_none());
        assert!(keys.by_token(&token).await.unwrap().is_some());
        keys.update(
            &session.id,
            request(serde_json::json!({"access_rights": {"b": {}}})),
            &|_| true,
        )
        .await
        .unwrap();
        let found = keys.by_token(&token).await.unwrap().unwrap();
        assert!(found.policy.access_rights.contains_key("b"), "{found:?}");
        assert!(keys.delete(&session.id).await.unwrap());
        assert!(keys.by_token(&token).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn basic_and_hmac_credentials() {
        let (_dir, keys) = keys().await;
        let req = request(serde_json::json!({
            "access_rights": {"a": {}},
            "basic_auth": {"username": "alice", "password": "correct horse"},
            "hmac": true
        }));
        let (_, secret, session) = keys.create(req.clone(), &|_| true).await.unwrap();
        assert!(keys
            .by_basic("alice", "correct horse")
            .await
            .unwrap()
            .is_some());
        assert!(keys.by_basic("alice", "wrong").await.unwrap().is_none());
        let (_, got) = keys.hmac_secret(&session.id).await.unwrap().unwrap();
        assert_eq!(got, secret.unwrap().into_bytes());
        assert!(matches!(
            keys.create(req, &|_| true).await,
            Err(KeyError::UserTaken(_))
        ));
        let view = session.policy.public_view(&session.id).to_string();
        assert!(
            !view.contains("argon2") && !view.contains("sealed"),
            "{view}"
        );
    }

    #[tokio::test]
    async fn bad_requests_name_the_field() {
        let (_dir, keys) = keys().await;
        let e = keys
            .create(KeyRequest::default(), &|_| true)
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("access_rights"), "{e}");
        let e = keys
            .create(
                request(serde_json::json!({"access_rights": {"nope": {}}})),
                &|_| false,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no API `nope`"), "{e}");
        let e = keys
            .create(
                request(serde_json::json!({"access_rights": {"a": {}}, "rate_limit": {"rate": 0, "per": "1s"}})),
                &|_| true,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("rate_limit.rate"), "{e}");
    }

    #[test]
    fn access_rights_match_methods_and_paths() {
        let r = AccessRight {
            allowed_methods: vec!["get".into()],
            allowed_paths: vec!["/pets/*".into(), "/health".into()],
        };
        assert!(r.allows(&http::Method::GET, "/pets/1"));
        assert!(r.allows(&http::Method::GET, "/health"));
        assert!(!r.allows(&http::Method::POST, "/pets/1"));
        assert!(!r.allows(&http::Method::GET, "/owners"));
        assert!(AccessRight::default().allows(&http::Method::DELETE, "/x"));
    }
}
