//! JWT bearer tokens (RFC 7519), verified with the `jsonwebtoken` crate.
//!
//! An API definition configures one signing method and one key source: a static key
//! (`source`: an HMAC secret or a PEM public key) or a JWKS document (`jwksUri`). Only
//! the configured algorithm is accepted, so `alg: none` and HMAC-with-a-public-key
//! confusion are refused before any key is touched. Time claims are checked here, with
//! a separate skew for each, since the crate has one leeway for all.
//!
//! JWKS documents are fetched over HTTP(S), cached for `jwksCacheTimeout` and looked up
//! by the token's `kid`. A `kid` not in the cache causes one refetch, and refetches are
//! spaced at least [`MIN_REFETCH_INTERVAL`] apart, so a flood of tokens with made-up
//! key ids cannot turn the gateway into a load generator against the key server.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{authorization, strip_scheme, AuthError, MAX_CREDENTIAL_LEN};
use crate::apidef::jwt::{JwtKeys, KeyKind};
use crate::connect::outbound::{Outbound, OutboundError, OutboundRequest, OutboundSettings};
use crate::egress::EgressPolicy;

pub use crate::apidef::jwt::{JwtSettings, SigningMethod};

/// The shortest time between two JWKS fetches caused by unknown key ids or failures.
pub const MIN_REFETCH_INTERVAL: Duration = Duration::from_secs(5);

/// A JWKS document larger than this is refused: real ones are a few kilobytes.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Time allowed for one JWKS request, connection included.
const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// A verified token.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    /// The value of the identity claim (`identityBaseField`, `sub` by default).
    pub identity: String,
    /// Every claim of the token.
    pub claims: Map<String, Value>,
}

/// Takes the token from `Authorization: Bearer <token>`.
///
/// No `Authorization` header: [`AuthError::Missing`]; another scheme, an empty token or
/// one with spaces inside: [`AuthError::Malformed`].
pub fn bearer(parts: &http::request::Parts) -> Result<&str, AuthError> {
    let value = authorization(parts)?;
    let token = strip_scheme(value, "Bearer")
        .ok_or_else(|| AuthError::malformed("expected a Bearer token"))?;
    if token.is_empty() {
        return Err(AuthError::malformed("empty Bearer token"));
    }
    if token.contains(char::is_whitespace) {
        return Err(AuthError::malformed("Bearer token contains spaces"));
    }
    Ok(token)
}

/// Verifies the JWTs of one API. Build it when the API definition loads; it is cheap to
/// share (`Arc`) across requests, and it holds the JWKS cache.
pub struct JwtVerifier {
    method: SigningMethod,
    validation: Validation,
    keys: Keys,
    issuer: Option<String>,
    audiences: Vec<String>,
    exp_skew: i64,
    nbf_skew: i64,
    iat_skew: i64,
    identity_field: String,
}

enum Keys {
    Static(Arc<DecodingKey>),
    // Boxed: the cache and client are large, and most APIs use a static key.
    Jwks(Box<Jwks>),
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Static(_) => "static".to_owned(),
            Keys::Jwks(j) => format!("jwks {}", j.uri),
        };
        f.debug_struct("JwtVerifier")
            .field("method", &self.method)
            .field("keys", &keys)
            .field("issuer", &self.issuer)
            .field("audiences", &self.audiences)
            .field("identity_field", &self.identity_field)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Checks `settings` and builds the verifier. Every problem a definition can have is
    /// found here, so a bad definition is refused at load; the error names the field
    /// and says what is wrong. No network access happens here: the JWKS is fetched on
    /// first use.
    pub fn new(settings: &JwtSettings) -> Result<Self, String> {
        Self::with_egress(settings, None)
    }

    /// [`new`](Self::new) for a posted definition: its JWKS is fetched only where
    /// `egress` allows, redirects included.
    pub fn with_egress(
        settings: &JwtSettings,
        egress: Option<Arc<EgressPolicy>>,
    ) -> Result<Self, String> {
        let keys = settings.check(egress.as_deref())?;
        Self::checked(settings, keys, egress).map_err(|e| format!("jwksUri: {e}"))
    }

    /// The verifier of settings already checked ([`JwtSettings::check`]), which found
    /// `keys`. Only making the JWKS client can still fail.
    pub fn checked(
        settings: &JwtSettings,
        keys: JwtKeys,
        egress: Option<Arc<EgressPolicy>>,
    ) -> Result<Self, OutboundError> {
        let method = settings.signing_method;
        let keys = match keys {
            JwtKeys::Static(key) => Keys::Static(key),
            JwtKeys::Jwks(uri) => Keys::Jwks(Box::new(Jwks::new(
                method,
                uri,
                settings.jwks_cache_timeout,
                egress,
            )?)),
        };
        let mut validation = Validation::new(method.algorithm());
        // Time, issuer and audience are checked by `check_claims`, which has a skew per
        // claim and clearer errors; the crate only checks the signature and algorithm.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        validation.leeway = 0;

        let skew = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
        Ok(JwtVerifier {
            method,
            validation,
            keys,
            issuer: settings.issuer.clone(),
            audiences: settings.audiences.clone(),
            exp_skew: skew(settings.expires_at_validation_skew),
            nbf_skew: skew(settings.not_before_validation_skew),
            iat_skew: skew(settings.issued_at_validation_skew),
            identity_field: settings.identity_field().to_owned(),
        })
    }

    /// The signing method this verifier accepts.
    pub fn signing_method(&self) -> SigningMethod {
        self.method
    }

    /// Verifies `token` (the part after `Bearer `) and returns its identity and claims.
    ///
    /// - Not a JWT, bad base64 or JSON: [`AuthError::Malformed`].
    /// - Another algorithm than the configured one, a bad signature, an unknown `kid`,
    ///   a wrong issuer or audience, a missing identity claim: [`AuthError::Invalid`].
    /// - `exp` passed (beyond its skew): [`AuthError::Expired`]; `nbf` or `iat` in the
    ///   future (beyond their skews): [`AuthError::NotYetValid`].
    /// - The JWKS could not be fetched: [`AuthError::KeyFetch`].
    pub async fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        if token.len() > MAX_CREDENTIAL_LEN {
            return Err(AuthError::malformed("token too long"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            // The crate refuses algorithms it does not know (`none` among them) as a
            // parse error; say "algorithm" when that is the reason.
            if raw_header_alg(token).is_some_and(|alg| alg != self.method.name()) {
                AuthError::invalid("token algorithm not allowed")
            } else {
                AuthError::malformed("not a JWT")
            }
        })?;
        if header.alg != self.method.algorithm() {
            return Err(AuthError::invalid("token algorithm not allowed"));
        }
        let key = match &self.keys {
            Keys::Static(key) => Arc::clone(key),
            Keys::Jwks(jwks) => jwks.key_for(header.kid.as_deref()).await?,
        };
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &self.validation)
            .map_err(map_decode_error)?;
        let claims = data.claims;
        self.check_claims(&claims, unix_now())?;
        let identity = match claims.get(&self.identity_field) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(AuthError::invalid(format!(
                    "token lacks the {} claim",
                    self.identity_field
                )))
            }
        };
        Ok(Claims { identity, claims })
    }

    /// The registered-claim checks, at time `now` (Unix seconds).
    fn check_claims(&self, claims: &Map<String, Value>, now: i64) -> Result<(), AuthError> {
        if let Some(exp) = time_claim(claims, "exp")? {
            // RFC 7519 4.1.4: the current time must be before `exp`.
            if now >= exp.saturating_add(self.exp_skew) {
                return Err(AuthError::Expired);
            }
        }
        if let Some(nbf) = time_claim(claims, "nbf")? {
            if now < nbf.saturating_sub(self.nbf_skew) {
                return Err(AuthError::NotYetValid);
            }
        }
        if let Some(iat) = time_claim(claims, "iat")? {
            if iat > now.saturating_add(self.iat_skew) {
                return Err(AuthError::NotYetValid);
            }
        }
        if let Some(issuer) = &self.issuer {
            if claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
                return Err(AuthError::invalid("issuer mismatch"));
            }
        }
        if !self.audiences.is_empty() {
            let ok = match claims.get("aud") {
                Some(Value::String(a)) => self.audiences.contains(a),
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|a| self.audiences.iter().any(|b| a == b)),
                _ => false,
            };
            if !ok {
                return Err(AuthError::invalid("audience mismatch"));
            }
        }
        Ok(())
    }

    #[cfg(test)]
    fn jwks(&self) -> &Jwks {
        match &self.keys {
            Keys::Jwks(j) => j,
            Keys::Static(_) => panic!("not a JWKS verifier"),
        }
    }
}

/// A NumericDate claim as whole seconds, `None` when absent. A non-number is
/// malformed: ignoring it would let `"exp": "never"` skip the expiry check.
fn time_claim(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, AuthError> {
    let Some(value) = claims.get(name) else {
        return Ok(None);
    };
    let Value::Number(n) = value else {
        return Err(AuthError::malformed(format!(
            "{name} claim is not a number"
        )));
    };
    let secs = if let Some(i) = n.as_i64() {
        i
    } else if n.as_u64().is_some() {
        i64::MAX
    } else {
        // RFC 7519 allows fractional seconds; `as` saturates, NaN cannot occur in JSON.
        n.as_f64().map(|f| f.floor() as i64).unwrap_or(0)
    };
    Ok(Some(secs))
}

/// The `alg` of a token's header, read without the crate, for error messages only.
fn raw_header_alg(token: &str) -> Option<String> {
    let first = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(first.trim_end_matches('='))
        .ok()?;
    let header: Map<String, Value> = serde_json::from_slice(&bytes).ok()?;
    header.get("alg")?.as_str().map(str::to_owned)
}

fn map_decode_error(e: jsonwebtoken::errors::Error) -> AuthError {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidSignature => AuthError::invalid("signature mismatch"),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            AuthError::invalid("token algorithm not allowed")
        }
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_)
        | ErrorKind::InvalidClaimFormat(_) => AuthError::malformed("not a JWT"),
        // Key-format errors arise when a JWKS key does not suit the algorithm; to the
        // client that is just an unverifiable token.
        _ => AuthError::invalid("token cannot be verified"),
    }
}

/// Builds the static key of `source` for `method`.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A JWKS source: the URL, the HTTP client and the cache.
struct Jwks {
    uri: url::Url,
    method: SigningMethod,
    client: Outbound,
    ttl: Duration,
    min_refetch: Duration,
    state: parking_lot::Mutex<JwksState>,
    /// Held while fetching, so concurrent misses share one request.
    fetch_lock: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct JwksState {
    keys: Option<Arc<KeySet>>,
    /// When `keys` was fetched.
    fetched_at: Option<Instant>,
    /// When the last fetch, successful or not, finished.
    last_attempt: Option<Instant>,
    /// Why the last fetch failed; `None` after a success.
    last_error: Option<String>,
}

/// The usable keys of one JWKS document.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<DecodingKey>>,
    without_kid: Vec<Arc<DecodingKey>>,
}

impl KeySet {
    /// The key for a token's `kid`. A token without `kid`, or a set whose keys have no
    /// `kid`, is served only when exactly one key could be meant.
    fn find(&self, kid: Option<&str>) -> Option<Arc<DecodingKey>> {
        let only = || match (self.by_kid.len(), self.without_kid.len()) {
            (1, 0) => self.by_kid.values().next().cloned(),
            (0, 1) => self.without_kid.first().cloned(),
            _ => None,
        };
        match kid {
            Some(kid) => self.by_kid.get(kid).cloned().or_else(|| {
                if self.by_kid.is_empty() {
                    only()
                } else {
                    None
                }
            }),
            None => only(),
        }
    }

    fn len(&self) -> usize {
        self.by_kid.len() + self.without_kid.len()
    }
}

enum Decision {
    Key(Arc<DecodingKey>),
    Fail(AuthError),
    Fetch,
}

impl Jwks {
    fn new(
        method: SigningMethod,
        uri: url::Url,
        cache_timeout: u64,
        egress: Option<Arc<EgressPolicy>>,
    ) -> Result<Self, OutboundError> {
        let client = Outbound::new(
            OutboundSettings {
                timeout: JWKS_FETCH_TIMEOUT,
                accept_invalid_certs: false,
                max_redirects: 3,
            },
            egress,
        )?;
        Ok(Jwks {
            uri,
            method,
            client,
            ttl: Duration::from_secs(cache_timeout),
            min_refetch: MIN_REFETCH_INTERVAL,
            state: parking_lot::Mutex::new(JwksState::default()),
            fetch_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The key for `kid`, from the cache or after (at most) one fetch.
    async fn key_for(&self, kid: Option<&str>) -> Result<Arc<DecodingKey>, AuthError> {
        let start = Instant::now();
        match self.decide(kid, start, true) {
            Decision::Key(k) => return Ok(k),
            Decision::Fail(e) => return Err(e),
            Decision::Fetch => {}
        }
        let _guard = self.fetch_lock.lock().await;
        // Another request may have fetched while this one waited for the lock; its
        // result is as good as a new one.
        let fetched_meanwhile = self.state.lock().last_attempt.is_some_and(|t| t >= start);
        if !fetched_meanwhile {
            let result = self.fetch().await;
            let mut state = self.state.lock();
            let now = Instant::now();
            state.last_attempt = Some(now);
            match result {
                Ok(set) => {
                    state.keys = Some(Arc::new(set));
                    state.fetched_at = Some(now);
                    state.last_error = None;
                }
                Err(e) => state.last_error = Some(e),
            }
        }
        match self.decide(kid, Instant::now(), false) {
            Decision::Key(k) => Ok(k),
            Decision::Fail(e) => Err(e),
            // `decide` never asks to fetch when told it may not.
            Decision::Fetch => Err(AuthError::KeyFetch("keys unavailable".into())),
        }
    }

    /// What to do for `kid` at `now` given the cache. With `may_fetch` false (a fetch
    /// just happened) the answer is never `Fetch`.
    fn decide(&self, kid: Option<&str>, now: Instant, may_fetch: bool) -> Decision {
        let state = self.state.lock();
        let recent = !may_fetch
            || state
                .last_attempt
                .is_some_and(|t| now.duration_since(t) < self.min_refetch);
        // A set is used for its cache time, and in any case until a refetch is allowed,
        // so a cache time of 0 still cannot cause a fetch per request.
        let lifetime = self.ttl.max(self.min_refetch);
        let usable = match (&state.keys, state.fetched_at) {
            (Some(set), Some(at)) if now.duration_since(at) < lifetime => Some(set),
            _ => None,
        };
        let fetch_error = || {
            AuthError::KeyFetch(
                state
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "keys unavailable".into()),
            )
        };
        match usable {
            Some(set) => match set.find(kid) {
                Some(key) => Decision::Key(key),
                None if !recent => Decision::Fetch,
                None if state.last_error.is_some() => Decision::Fail(fetch_error()),
                None => Decision::Fail(AuthError::invalid("unknown key id")),
            },
            None if !recent => Decision::Fetch,
            None => Decision::Fail(fetch_error()),
        }
    }

    /// Fetches and parses the JWKS document. The error is a short client-safe text; the
    /// details (with the URL) go to the log.
    async fn fetch(&self) -> Result<KeySet, String> {
        let result = self.fetch_inner().await;
        match &result {
            Ok(set) => tracing::debug!(uri = %self.uri, keys = set.len(), "fetched JWKS"),
            Err((short, detail)) => {
                tracing::warn!(uri = %self.uri, error = %detail, "JWKS fetch failed: {short}")
            }
        }
        result.map_err(|(short, _)| short)
    }

    async fn fetch_inner(&self) -> Result<KeySet, (String, String)> {
        let fail = |short: &str, detail: String| (short.to_owned(), detail);
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/json"),
        );
        let request = OutboundRequest {
            method: http::Method::GET,
            url: self.uri.clone(),
            headers,
            body: None,
        };
        let mut response = self.client.send(request).await.map_err(|e| {
            let short = if e.is_timeout() {
                "JWKS request timed out"
            } else if matches!(e, crate::connect::outbound::OutboundError::Refused(_)) {
                "JWKS address refused"
            } else {
                "JWKS request failed"
            };
            fail(short, e.to_string())
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(fail(
                &format!("JWKS server answered {}", status.as_u16()),
                status.to_string(),
            ));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(fail("JWKS document too large", "content-length".into()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| fail("JWKS request failed", e.to_string()))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(fail("JWKS document too large", "body".into()));
            }
            body.extend_from_slice(&chunk);
        }
        parse_jwks(&body, self.method)
    }
}

/// Parses a JWKS document and keeps the keys usable with `method`. Keys of other types,
/// for other algorithms or for encryption are skipped rather than failing the whole
/// document, since providers publish mixed sets.
fn parse_jwks(body: &[u8], method: SigningMethod) -> Result<KeySet, (String, String)> {
    #[derive(Deserialize)]
    struct Document {
        keys: Vec<Value>,
    }
    let doc: Document = serde_json::from_slice(body)
        .map_err(|e| ("JWKS document is not valid".to_owned(), e.to_string()))?;
    let mut set = KeySet::default();
    for raw in doc.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw) else {
            continue;
        };
        if !jwk_suits(&jwk, method) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        let key = Arc::new(key);
        match jwk.common.key_id {
            Some(kid) => {
                set.by_kid.insert(kid, key);
            }
            None => set.without_kid.push(key),
        }
    }
    if set.len() == 0 {
        return Err((
            format!("JWKS document has no {method} keys"),
            "no usable keys".to_owned(),
        ));
    }
    Ok(set)
}

fn jwk_suits(jwk: &Jwk, method: SigningMethod) -> bool {
    if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return false;
    }
    // `alg` is optional in a JWK; when present it must be ours.
    if jwk
        .common
        .key_algorithm
        .is_some_and(|a| a.to_string() != method.name())
    {
        return false;
    }
    match (&jwk.algorithm, method.key_kind()) {
        (AlgorithmParameters::RSA(_), KeyKind::Rsa) => true,
        (AlgorithmParameters::EllipticCurve(p), KeyKind::Ec(curve)) => {
            matches!(
                (&p.curve, curve),
                (EllipticCurve::P256, "P-256") | (EllipticCurve::P384, "P-384")
            )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::apidef::jwt::{B64, DEFAULT_JWKS_CACHE_TIMEOUT};

    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const SECRET: &str = "a-test-secret-of-reasonable-length";
    const RSA_PRIVATE: &str = include_str!("../../../tests/data/jwt_test_rsa_private.pem");
    const RSA_PUBLIC: &str = include_str!("../../../tests/data/jwt_test_rsa_public.pem");
    const RSA_JWK: &str = include_str!("../../../tests/data/jwt_test_rsa_public.jwk.json");

    fn settings(method: SigningMethod) -> JwtSettings {
        JwtSettings {
            enabled: true,
            signing_method: method,
            source: None,
            jwks_uri: None,
            issuer: None,
            audiences: vec![],
            expires_at_validation_skew: 0,
            not_before_validation_skew: 0,
            issued_at_validation_skew: 0,
            identity_base_field: None,
            jwks_cache_timeout: DEFAULT_JWKS_CACHE_TIMEOUT,
        }
    }

    fn hs256() -> JwtSettings {
        JwtSettings {
            source: Some(SECRET.into()),
            ..settings(SigningMethod::HS256)
        }
    }

    fn now() -> i64 {
        unix_now()
    }

    fn claims(extra: Value) -> Value {
        let mut c = json!({"sub": "user-1", "iat": now(), "exp": now() + 600});
        if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
            for (k, v) in extra {
                if v.is_null() {
                    c.remove(&k);
                } else {
                    c.insert(k, v);
                }
            }
        }
        c
    }

    fn token(alg: Algorithm, kid: Option<&str>, claims: &Value, key: &EncodingKey) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    fn hs(claims: &Value) -> String {
        token(
            Algorithm::HS256,
            None,
            claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
    }

    fn b64url(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    async fn verify_with(s: &JwtSettings, token: &str) -> Result<Claims, AuthError> {
        JwtVerifier::new(s).unwrap().verify(token).await
    }

    #[tokio::test]
    async fn hs256_valid_token() {
        let c = verify_with(&hs256(), &hs(&claims(json!({"role": "admin"}))))
            .await
            .unwrap();
        assert_eq!(c.identity, "user-1");
        assert_eq!(c.claims["role"], "admin");
    }

    #[tokio::test]
    async fn hs256_expiry_and_skew() {
        let expired = hs(&claims(json!({"exp": now() - 10})));
        assert_eq!(
            verify_with(&hs256(), &expired).await,
            Err(AuthError::Expired)
        );
        let skewed = JwtSettings {
            expires_at_validation_skew: 30,
            ..hs256()
        };
        verify_with(&skewed, &expired).await.unwrap();
        let long_expired = hs(&claims(json!({"exp": now() - 60})));
        assert_eq!(
            verify_with(&skewed, &long_expired).await,
            Err(AuthError::Expired)
        );
        // No exp claim: the token does not expire.
        verify_with(&hs256(), &hs(&claims(json!({"exp": null}))))
            .await
            .unwrap();
        // A fractional exp is a valid NumericDate.
        verify_with(&hs256(), &hs(&claims(json!({"exp": now() as f64 + 60.5}))))
            .await
            .unwrap();
        // A non-numeric exp must not bypass the check.
        assert!(matches!(
            verify_with(&hs256(), &hs(&claims(json!({"exp": "never"})))).await,
            Err(AuthError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn hs256_not_before_and_issued_at() {
        let early = hs(&claims(json!({"nbf": now() + 20})));
        assert_eq!(
            verify_with(&hs256(), &early).await,
            Err(AuthError::NotYetValid)
        );
        let skewed = JwtSettings {
            not_before_validation_skew: 30,
            ..hs256()
        };
        verify_with(&skewed, &early).await.unwrap();
        verify_with(&hs256(), &hs(&claims(json!({"nbf": now() - 1}))))
            .await
            .unwrap();

        let future_iat = hs(&claims(json!({"iat": now() + 20})));
        assert_eq!(
            verify_with(&hs256(), &future_iat).await,
            Err(AuthError::NotYetValid)
        );
        let skewed = JwtSettings {
            issued_at_validation_skew: 30,
            ..hs256()
        };
        verify_with(&skewed, &future_iat).await.unwrap();
    }

    #[tokio::test]
    async fn hs256_wrong_secret_and_tampering() {
        let other = token(
            Algorithm::HS256,
            None,
            &claims(json!({})),
            &EncodingKey::from_secret(b"another secret"),
        );
        assert_eq!(
            verify_with(&hs256(), &other).await,
            Err(AuthError::invalid("signature mismatch"))
        );
        // Swap the payload of a valid token for one claiming another subject.
        let good = hs(&claims(json!({})));
        let mut parts: Vec<&str> = good.split('.').collect();
        let forged_payload = b64url(claims(json!({"sub": "admin"})).to_string().as_bytes());
        parts[1] = &forged_payload;
        assert_eq!(
            verify_with(&hs256(), &parts.join(".")).await,
            Err(AuthError::invalid("signature mismatch"))
        );
    }

    #[tokio::test]
    async fn wrong_algorithm_and_none_are_refused() {
        let hs384 = token(
            Algorithm::HS384,
            None,
            &claims(json!({})),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        );
        assert_eq!(
            verify_with(&hs256(), &hs384).await,
            Err(AuthError::invalid("token algorithm not allowed"))
        );

        for alg in ["none", "None", "NONE"] {
            let header = b64url(json!({"alg": alg, "typ": "JWT"}).to_string().as_bytes());
            let payload = b64url(claims(json!({})).to_string().as_bytes());
            for unsigned in [
                format!("{header}.{payload}."),
                format!("{header}.{payload}"),
            ] {
                assert_eq!(
                    verify_with(&hs256(), &unsigned).await,
                    Err(AuthError::invalid("token algorithm not allowed")),
                    "{unsigned}"
                );
            }
        }
    }

    #[tokio::test]
    async fn hmac_with_public_key_confusion_is_refused() {
        // The classic attack: sign HS256 with the RSA public key as the secret and hope
        // the verifier feeds the configured public key to HMAC.
        let s = JwtSettings {
            source: Some(RSA_PUBLIC.into()),
            ..settings(SigningMethod::RS256)
        };
        let forged = token(
            Algorithm::HS256,
            None,
            &claims(json!({})),
            &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()),
        );
        assert_eq!(
            verify_with(&s, &forged).await,
            Err(AuthError::invalid("token algorithm not allowed"))
        );
    }

    #[tokio::test]
    async fn issuer_and_audience() {
        let s = JwtSettings {
            issuer: Some("https://issuer.example".into()),
            audiences: vec!["api-a".into(), "api-b".into()],
            ..hs256()
        };
        let good = hs(&claims(
            json!({"iss": "https://issuer.example", "aud": ["other", "api-b"]}),
        ));
        verify_with(&s, &good).await.unwrap();
        let single_aud = hs(&claims(
            json!({"iss": "https://issuer.example", "aud": "api-a"}),
        ));
        verify_with(&s, &single_aud).await.unwrap();

        let wrong_iss = hs(&claims(
            json!({"iss": "https://evil.example", "aud": "api-a"}),
        ));
        assert_eq!(
            verify_with(&s, &wrong_iss).await,
            Err(AuthError::invalid("issuer mismatch"))
        );
        let no_iss = hs(&claims(json!({"aud": "api-a"})));
        assert_eq!(
            verify_with(&s, &no_iss).await,
            Err(AuthError::invalid("issuer mismatch"))
        );
        let wrong_aud = hs(&claims(
            json!({"iss": "https://issuer.example", "aud": ["x"]}),
        ));
        assert_eq!(
            verify_with(&s, &wrong_aud).await,
            Err(AuthError::invalid("audience mismatch"))
        );
        let no_aud = hs(&claims(json!({"iss": "https://issuer.example"})));
        assert_eq!(
            verify_with(&s, &no_aud).await,
            Err(AuthError::invalid("audience mismatch"))
        );
    }

    #[tokio::test]
    async fn identity_field() {
        let s = JwtSettings {
            identity_base_field: Some("client_id".into()),
            ..hs256()
        };
        let c = verify_with(&s, &hs(&claims(json!({"client_id": "app-7"}))))
            .await
            .unwrap();
        assert_eq!(c.identity, "app-7");
        let c = verify_with(&s, &hs(&claims(json!({"client_id": 42}))))
            .await
            .unwrap();
        assert_eq!(c.identity, "42");
        assert!(matches!(
            verify_with(&s, &hs(&claims(json!({})))).await,
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            verify_with(&hs256(), &hs(&claims(json!({"sub": ""})))).await,
            Err(AuthError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn base64_sources() {
        let s = JwtSettings {
            source: Some(format!("base64:{}", B64.encode(SECRET))),
            ..settings(SigningMethod::HS256)
        };
        verify_with(&s, &hs(&claims(json!({})))).await.unwrap();

        let rsa_key = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
        let t = token(Algorithm::RS256, None, &claims(json!({})), &rsa_key);
        for source in [
            B64.encode(RSA_PUBLIC),
            format!("base64:{}", B64.encode(RSA_PUBLIC)),
        ] {
            let s = JwtSettings {
                source: Some(source),
                ..settings(SigningMethod::RS256)
            };
            verify_with(&s, &t).await.unwrap();
        }
    }

    #[tokio::test]
    async fn malformed_tokens_never_panic() {
        let v = JwtVerifier::new(&hs256()).unwrap();
        let header = b64url(br#"{"alg":"HS256"}"#);
        let cases = [
            "x".to_owned(),
            "a.b".to_owned(),
            "a.b.c".to_owned(),
            "..".to_owned(),
            "...".to_owned(),
            format!("{header}.%%%.abc"),
            format!("{header}.{}.abc", b64url(b"not json")),
            format!("{header}.{}.abc", b64url(b"[1,2]")),
            format!("{}.{}.abc", b64url(b"{\"alg\":"), b64url(b"{}")),
            format!("{}.{}.abc", b64url(&[0xff, 0xfe]), b64url(b"{}")),
            format!("{header}.{}.{}", b64url(b"{}"), "A".repeat(5000)),
            "é.ü.ß".to_owned(),
            "x".repeat(MAX_CREDENTIAL_LEN + 1),
        ];
        for case in &cases {
            let r = v.verify(case).await;
            assert!(
                matches!(r, Err(AuthError::Malformed(_) | AuthError::Invalid(_))),
                "{case:.60}: {r:?}"
            );
        }
        assert_eq!(v.verify("  ").await, Err(AuthError::Missing));

        // Random junk built from JWT-ish characters.
        let alphabet = b"ABCxyz019-_.=\"{}:";
        for seed in 0..500u32 {
            let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
            let len = (seed % 60) as usize;
            let junk: String = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    alphabet[(x as usize) % alphabet.len()] as char
                })
                .collect();
            let _ = v.verify(&junk).await;
        }
    }

    #[tokio::test]
    async fn rs256_and_ps256_with_a_pem_key() {
        let rsa_key = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
        let rs = JwtSettings {
            source: Some(RSA_PUBLIC.into()),
            ..settings(SigningMethod::RS256)
        };
        let t = token(Algorithm::RS256, None, &claims(json!({})), &rsa_key);
        assert_eq!(verify_with(&rs, &t).await.unwrap().identity, "user-1");

        let ps = JwtSettings {
            source: Some(RSA_PUBLIC.into()),
            ..settings(SigningMethod::PS256)
        };
        let pt = token(Algorithm::PS256, None, &claims(json!({})), &rsa_key);
        verify_with(&ps, &pt).await.unwrap();
        // Same key, other algorithm: refused both ways.
        assert!(verify_with(&ps, &t).await.is_err());
        assert!(verify_with(&rs, &pt).await.is_err());

        // An RS256 token means nothing to a verifier of another family.
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let es = JwtSettings {
            source: Some(other.public_key_pem()),
            ..settings(SigningMethod::ES256)
        };
        assert!(verify_with(&es, &t).await.is_err());
    }

    #[tokio::test]
    async fn es256_and_es384_with_generated_keys() {
        let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let s = JwtSettings {
            source: Some(p256.public_key_pem()),
            ..settings(SigningMethod::ES256)
        };
        let key = EncodingKey::from_ec_pem(p256.serialize_pem().as_bytes()).unwrap();
        let t = token(Algorithm::ES256, None, &claims(json!({})), &key);
        verify_with(&s, &t).await.unwrap();

        let stranger = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let key = EncodingKey::from_ec_pem(stranger.serialize_pem().as_bytes()).unwrap();
        let t = token(Algorithm::ES256, None, &claims(json!({})), &key);
        assert_eq!(
            verify_with(&s, &t).await,
            Err(AuthError::invalid("signature mismatch"))
        );

        let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        let s = JwtSettings {
            source: Some(p384.public_key_pem()),
            ..settings(SigningMethod::ES384)
        };
        let key = EncodingKey::from_ec_pem(p384.serialize_pem().as_bytes()).unwrap();
        let t = token(Algorithm::ES384, None, &claims(json!({})), &key);
        verify_with(&s, &t).await.unwrap();
    }

    #[test]
    fn debug_output_hides_the_secret() {
        let s = hs256();
        assert!(!format!("{s:?}").contains(SECRET));
        let v = JwtVerifier::new(&s).unwrap();
        assert!(!format!("{v:?}").contains(SECRET));
    }

    #[test]
    fn bad_definitions_are_refused_at_build() {
        let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cases: Vec<(JwtSettings, &str)> = vec![
            (settings(SigningMethod::HS256), "one of them is required"),
            (
                JwtSettings {
                    source: Some("s".into()),
                    jwks_uri: Some("https://x/jwks".into()),
                    ..settings(SigningMethod::RS256)
                },
                "not both",
            ),
            (
                JwtSettings {
                    jwks_uri: Some("https://x/jwks".into()),
                    ..settings(SigningMethod::HS256)
                },
                "jwksUri: HS256",
            ),
            (
                JwtSettings {
                    source: Some("  ".into()),
                    ..settings(SigningMethod::HS256)
                },
                "source: must not be empty",
            ),
            (
                JwtSettings {
                    source: Some("base64:%%%".into()),
                    ..settings(SigningMethod::HS512)
                },
                "not base64",
            ),
            (
                JwtSettings {
                    source: Some("just-a-secret".into()),
                    ..settings(SigningMethod::RS256)
                },
                "RS256 needs a PEM public key",
            ),
            (
                JwtSettings {
                    source: Some(RSA_PRIVATE.into()),
                    ..settings(SigningMethod::RS256)
                },
                "private key",
            ),
            (
                JwtSettings {
                    source: Some(ec.public_key_pem()),
                    ..settings(SigningMethod::RS256)
                },
                "RSA public key",
            ),
            (
                JwtSettings {
                    source: Some(RSA_PUBLIC.into()),
                    ..settings(SigningMethod::ES256)
                },
                "EC public key",
            ),
            (
                JwtSettings {
                    jwks_uri: Some("ftp://x/jwks".into()),
                    ..settings(SigningMethod::RS256)
                },
                "scheme",
            ),
            (
                JwtSettings {
                    jwks_uri: Some("not a url".into()),
                    ..settings(SigningMethod::RS256)
                },
                "jwksUri: not a URL",
            ),
            (
                JwtSettings {
                    issuer: Some(String::new()),
                    ..hs256()
                },
                "issuer",
            ),
            (
                JwtSettings {
                    audiences: vec![String::new()],
                    ..hs256()
                },
                "audiences",
            ),
            (
                JwtSettings {
                    identity_base_field: Some(String::new()),
                    ..hs256()
                },
                "identityBaseField",
            ),
        ];
        for (s, expected) in cases {
            let err = JwtVerifier::new(&s).unwrap_err();
            assert!(
                err.contains(expected),
                "{err:?} should mention {expected:?}"
            );
        }
    }

    #[test]
    fn bearer_extraction() {
        let parts = |v: &[u8]| {
            let mut p = http::Request::new(()).into_parts().0;
            p.headers.insert(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_bytes(v).unwrap(),
            );
            p
        };
        assert_eq!(bearer(&parts(b"Bearer a.b.c")), Ok("a.b.c"));
        assert_eq!(bearer(&parts(b"bearer   a.b.c ")), Ok("a.b.c"));
        assert_eq!(
            bearer(&http::Request::new(()).into_parts().0),
            Err(AuthError::Missing)
        );
        for bad in [
            &b"Basic abc"[..],
            b"Bearer",
            b"Bearer a b",
            b"a.b.c",
            b"Bearer \xff",
        ] {
            assert!(
                matches!(bearer(&parts(bad)), Err(AuthError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    // ---- JWKS ----

    /// A minimal HTTP/1.1 server answering every request with the current status and
    /// body, and counting requests.
    struct JwksServer {
        url: String,
        hits: Arc<AtomicUsize>,
        response: Arc<parking_lot::Mutex<(u16, String)>>,
    }

    impl JwksServer {
        async fn start(body: String) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!(
                "http://{}/.well-known/jwks.json",
                listener.local_addr().unwrap()
            );
            let hits = Arc::new(AtomicUsize::new(0));
            let response = Arc::new(parking_lot::Mutex::new((200, body)));
            let (h, r) = (hits.clone(), response.clone());
            tokio::spawn(async move {
                while let Ok((mut socket, _)) = listener.accept().await {
                    let (h, r) = (h.clone(), r.clone());
                    tokio::spawn(async move {
                        let mut request = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        h.fetch_add(1, Ordering::SeqCst);
                        let (status, body) = r.lock().clone();
                        let reply = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(reply.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    });
                }
            });
            JwksServer {
                url,
                hits,
                response,
            }
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }

        fn set(&self, status: u16, body: String) {
            *self.response.lock() = (status, body);
        }
    }

    struct EcKey {
        kid: String,
        encoding: EncodingKey,
        jwk: Value,
    }

    fn ec_key(kid: &str) -> EcKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw();
        // Uncompressed point: 0x04 || X || Y.
        assert_eq!(raw.len(), 65);
        EcKey {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": b64url(&raw[1..33]), "y": b64url(&raw[33..]),
            }),
        }
    }

    fn jwks_of(keys: &[&Value]) -> String {
        json!({ "keys": keys }).to_string()
    }

    fn es_token(key: &EcKey) -> String {
        token(
            Algorithm::ES256,
            Some(&key.kid),
            &claims(json!({})),
            &key.encoding,
        )
    }

    fn jwks_settings(method: SigningMethod, url: &str) -> JwtSettings {
        JwtSettings {
            jwks_uri: Some(url.to_owned()),
            ..settings(method)
        }
    }

    #[tokio::test]
    async fn jwks_rs256_with_the_fixed_test_key() {
        let mut jwk: Value = serde_json::from_str(RSA_JWK).unwrap();
        jwk["kid"] = json!("rsa-1");
        let server = JwksServer::start(jwks_of(&[&jwk])).await;
        let v = JwtVerifier::new(&jwks_settings(SigningMethod::RS256, &server.url)).unwrap();
        let rsa_key = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
        let t = token(
            Algorithm::RS256,
            Some("rsa-1"),
            &claims(json!({})),
            &rsa_key,
        );
        assert_eq!(v.verify(&t).await.unwrap().identity, "user-1");
    }

    #[tokio::test]
    async fn jwks_is_cached() {
        let key = ec_key("k1");
        let server = JwksServer::start(jwks_of(&[&key.jwk])).await;
        let v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap();
        assert_eq!(server.hits(), 0, "no fetch before first use");
        for _ in 0..3 {
            v.verify(&es_token(&key)).await.unwrap();
        }
        assert_eq!(server.hits(), 1);
    }

    #[tokio::test]
    async fn jwks_is_refetched_after_the_cache_timeout() {
        let key = ec_key("k1");
        let server = JwksServer::start(jwks_of(&[&key.jwk])).await;
        let mut v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap();
        if let Keys::Jwks(j) = &mut v.keys {
            j.ttl = Duration::from_millis(600);
            j.min_refetch = Duration::from_millis(300);
        }
        v.verify(&es_token(&key)).await.unwrap();
        v.verify(&es_token(&key)).await.unwrap();
        assert_eq!(server.hits(), 1);
        tokio::time::sleep(Duration::from_millis(700)).await;
        v.verify(&es_token(&key)).await.unwrap();
        assert_eq!(server.hits(), 2);
    }

    #[tokio::test]
    async fn jwks_kid_rotation() {
        let old = ec_key("2024");
        let new = ec_key("2025");
        let server = JwksServer::start(jwks_of(&[&old.jwk])).await;
        let mut v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap();
        if let Keys::Jwks(j) = &mut v.keys {
            j.min_refetch = Duration::from_millis(400);
        }
        v.verify(&es_token(&old)).await.unwrap();
        assert_eq!(server.hits(), 1);

        // The issuer rotates: the new kid is unknown to the cache, which refetches.
        server.set(200, jwks_of(&[&new.jwk]));
        tokio::time::sleep(Duration::from_millis(450)).await;
        v.verify(&es_token(&new)).await.unwrap();
        assert_eq!(server.hits(), 2);
        // The retired key is gone, and asking for it right away does not refetch.
        assert_eq!(
            v.verify(&es_token(&old)).await,
            Err(AuthError::invalid("unknown key id"))
        );
        assert_eq!(server.hits(), 2);
    }

    #[tokio::test]
    async fn unknown_kids_do_not_cause_a_fetch_storm() {
        let key = ec_key("real");
        let server = JwksServer::start(jwks_of(&[&key.jwk])).await;
        let v =
            Arc::new(JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap());
        let forged: Vec<String> = (0..20)
            .map(|i| {
                let k = ec_key(&format!("made-up-{i}"));
                es_token(&k)
            })
            .collect();
        let tasks: Vec<_> = forged
            .into_iter()
            .map(|t| {
                let v = v.clone();
                tokio::spawn(async move { v.verify(&t).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Err(AuthError::invalid("unknown key id")));
        }
        assert_eq!(server.hits(), 1, "concurrent misses share one fetch");
        for i in 0..10 {
            let k = ec_key(&format!("more-{i}"));
            assert!(v.verify(&es_token(&k)).await.is_err());
        }
        assert_eq!(
            server.hits(),
            1,
            "misses within the interval do not refetch"
        );
        v.verify(&es_token(&key)).await.unwrap();
        assert_eq!(server.hits(), 1);
    }

    #[tokio::test]
    async fn jwks_fetch_failures_are_key_fetch_errors() {
        let key = ec_key("k1");
        let server = JwksServer::start(String::new()).await;
        let mut v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap();
        if let Keys::Jwks(j) = &mut v.keys {
            j.min_refetch = Duration::from_millis(300);
        }
        let bodies = [
            (500, "oops".to_owned()),
            (200, "not json".to_owned()),
            (200, json!({"keys": "nope"}).to_string()),
            (200, json!({"keys": []}).to_string()),
            (
                200,
                json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}).to_string(),
            ),
            // A key for another algorithm, one for encryption and one of junk.
            (
                200,
                json!({"keys": [
                    serde_json::from_str::<Value>(RSA_JWK).unwrap(),
                    {"kty": "EC", "crv": "P-256", "use": "enc", "x": "AA", "y": "AA"},
                    {"kty": "EC", "crv": "P-256"},
                ]})
                .to_string(),
            ),
            (200, "x".repeat(MAX_JWKS_BYTES + 1)),
        ];
        let mut expected_hits = 0;
        for (status, body) in bodies {
            server.set(status, body.clone());
            tokio::time::sleep(Duration::from_millis(320)).await;
            let r = v.verify(&es_token(&key)).await;
            expected_hits += 1;
            assert!(
                matches!(r, Err(AuthError::KeyFetch(_))),
                "{status} {body:.40}: {r:?}"
            );
            // Within the interval a failure is remembered rather than retried.
            assert!(matches!(
                v.verify(&es_token(&key)).await,
                Err(AuthError::KeyFetch(_))
            ));
            assert_eq!(server.hits(), expected_hits);
        }
        let message = match v.verify(&es_token(&key)).await {
            Err(AuthError::KeyFetch(m)) => m,
            r => panic!("{r:?}"),
        };
        assert!(!message.contains("127.0.0.1"), "client-safe: {message}");

        // The server recovers.
        server.set(200, jwks_of(&[&key.jwk]));
        tokio::time::sleep(Duration::from_millis(320)).await;
        v.verify(&es_token(&key)).await.unwrap();
        assert_eq!(v.jwks().state.lock().last_error, None);
    }

    #[tokio::test]
    async fn jwks_unreachable_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        drop(listener);
        let v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &url)).unwrap();
        let r = v.verify(&es_token(&ec_key("k"))).await;
        assert_eq!(r, Err(AuthError::KeyFetch("JWKS request failed".into())));
    }

    #[tokio::test]
    async fn jwks_keys_without_kid() {
        let key = ec_key("ignored");
        let mut jwk = key.jwk.clone();
        jwk.as_object_mut().unwrap().remove("kid");
        jwk.as_object_mut().unwrap().remove("alg");
        let server = JwksServer::start(jwks_of(&[&jwk])).await;
        let v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap();
        // A lone key serves tokens with or without a kid.
        v.verify(&es_token(&key)).await.unwrap();
        let no_kid = token(Algorithm::ES256, None, &claims(json!({})), &key.encoding);
        v.verify(&no_kid).await.unwrap();
    }

    #[tokio::test]
    async fn token_without_kid_is_ambiguous_among_several_keys() {
        let (a, b) = (ec_key("a"), ec_key("b"));
        let server = JwksServer::start(jwks_of(&[&a.jwk, &b.jwk])).await;
        let v = JwtVerifier::new(&jwks_settings(SigningMethod::ES256, &server.url)).unwrap();
        let no_kid = token(Algorithm::ES256, None, &claims(json!({})), &a.encoding);
        assert_eq!(
            v.verify(&no_kid).await,
            Err(AuthError::invalid("unknown key id"))
        );
        v.verify(&es_token(&b)).await.unwrap();
        // A token naming kid "a" but signed by key b does not verify.
        let swapped = token(Algorithm::ES256, Some("a"), &claims(json!({})), &b.encoding);
        assert_eq!(
            v.verify(&swapped).await,
            Err(AuthError::invalid("signature mismatch"))
        );
    }

    #[test]
    fn verify_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let v = JwtVerifier::new(&hs256()).unwrap();
        let fut = v.verify("x");
        assert_send(&fut);
    }
}
