//! JWT settings of an API definition (`securitySchemes.<name>` of a bearer scheme): the
//! signing method, where the keys come from and how claims are checked, checked when the
//! definition loads. A static key is decoded here, once; a JWKS is only named here, and
//! fetched by the gateway's verifier on first use.

use std::sync::Arc;

use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use crate::egress::EgressPolicy;

/// Default of [`JwtSettings::jwks_cache_timeout`], in seconds.
pub const DEFAULT_JWKS_CACHE_TIMEOUT: u64 = 300;

/// Prefix that marks a `source` as base64 of the real value.
pub const BASE64_PREFIX: &str = "base64:";

/// Standard base64, padding optional on input.
pub const B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The JWS algorithm an API accepts (the `alg` header of its tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum SigningMethod {
    /// HMAC with SHA-256 and a shared secret.
    HS256,
    /// HMAC with SHA-384 and a shared secret.
    HS384,
    /// HMAC with SHA-512 and a shared secret.
    HS512,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
}

/// The kind of key a signing method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Secret,
    Rsa,
    Ec(&'static str),
}

impl SigningMethod {
    /// The name used in the `alg` header and in the settings.
    pub fn name(self) -> &'static str {
        match self {
            Self::HS256 => "HS256",
            Self::HS384 => "HS384",
            Self::HS512 => "HS512",
            Self::RS256 => "RS256",
            Self::RS384 => "RS384",
            Self::RS512 => "RS512",
            Self::ES256 => "ES256",
            Self::ES384 => "ES384",
            Self::PS256 => "PS256",
            Self::PS384 => "PS384",
            Self::PS512 => "PS512",
        }
    }

    pub fn algorithm(self) -> Algorithm {
        match self {
            Self::HS256 => Algorithm::HS256,
            Self::HS384 => Algorithm::HS384,
            Self::HS512 => Algorithm::HS512,
            Self::RS256 => Algorithm::RS256,
            Self::RS384 => Algorithm::RS384,
            Self::RS512 => Algorithm::RS512,
            Self::ES256 => Algorithm::ES256,
            Self::ES384 => Algorithm::ES384,
            Self::PS256 => Algorithm::PS256,
            Self::PS384 => Algorithm::PS384,
            Self::PS512 => Algorithm::PS512,
        }
    }

    pub fn key_kind(self) -> KeyKind {
        match self {
            Self::HS256 | Self::HS384 | Self::HS512 => KeyKind::Secret,
            Self::RS256 | Self::RS384 | Self::RS512 => KeyKind::Rsa,
            Self::PS256 | Self::PS384 | Self::PS512 => KeyKind::Rsa,
            Self::ES256 => KeyKind::Ec("P-256"),
            Self::ES384 => KeyKind::Ec("P-384"),
        }
    }
}

impl std::fmt::Display for SigningMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// JWT settings of an API definition.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtSettings {
    /// Whether the API requires a JWT; read by the middleware, not by the verifier.
    #[serde(default)]
    pub enabled: bool,
    /// The only algorithm accepted.
    pub signing_method: SigningMethod,
    /// The static key: for HS* the shared secret (as text, or `base64:` followed by the
    /// base64 of the secret bytes); for RS*, PS* and ES* a PEM public key, or the
    /// base64 of one (with or without the `base64:` prefix).
    #[serde(default)]
    pub source: Option<String>,
    /// Where to fetch a JWKS document (RS*, PS* and ES* only). Exactly one of `source`
    /// and `jwksUri` is required.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Required value of the `iss` claim, if set.
    #[serde(default)]
    pub issuer: Option<String>,
    /// If not empty, the `aud` claim must name at least one of these.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Seconds a token is still accepted after its `exp`.
    #[serde(default)]
    pub expires_at_validation_skew: u64,
    /// Seconds a token is already accepted before its `nbf`.
    #[serde(default)]
    pub not_before_validation_skew: u64,
    /// Seconds an `iat` may lie in the future (clocks of issuers drift).
    #[serde(default)]
    pub issued_at_validation_skew: u64,
    /// The claim that identifies the caller; `sub` when not set.
    #[serde(default)]
    pub identity_base_field: Option<String>,
    /// Seconds a fetched JWKS document is used before it is fetched again.
    #[serde(default = "default_jwks_cache_timeout")]
    pub jwks_cache_timeout: u64,
}

fn default_jwks_cache_timeout() -> u64 {
    DEFAULT_JWKS_CACHE_TIMEOUT
}

// Written by hand so that an HMAC secret never reaches a log through `{:?}`.
impl std::fmt::Debug for JwtSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtSettings")
            .field("enabled", &self.enabled)
            .field("signing_method", &self.signing_method)
            .field("source", &self.source.as_ref().map(|_| "<redacted>"))
            .field("jwks_uri", &self.jwks_uri)
            .field("issuer", &self.issuer)
            .field("audiences", &self.audiences)
            .field(
                "expires_at_validation_skew",
                &self.expires_at_validation_skew,
            )
            .field(
                "not_before_validation_skew",
                &self.not_before_validation_skew,
            )
            .field("issued_at_validation_skew", &self.issued_at_validation_skew)
            .field("identity_base_field", &self.identity_base_field)
            .field("jwks_cache_timeout", &self.jwks_cache_timeout)
            .finish()
    }
}

/// Where a checked verifier's keys come from.
#[derive(Clone)]
pub enum JwtKeys {
    /// `source`, decoded.
    Static(Arc<DecodingKey>),
    /// `jwksUri`, fetched when a token first needs it.
    Jwks(url::Url),
}

impl JwtSettings {
    /// Checks the settings: every problem a definition can have is found here, so a bad
    /// definition is refused at load; the error names the field and says what is wrong.
    /// Under `egress` (a posted definition) a JWKS at a literal address is checked now.
    pub fn check(&self, egress: Option<&EgressPolicy>) -> Result<JwtKeys, String> {
        let method = self.signing_method;
        let keys = match (self.source.as_deref(), self.jwks_uri.as_deref()) {
            (Some(_), Some(_)) => {
                return Err("source and jwksUri: give exactly one of them, not both".into())
            }
            (None, None) => return Err("source or jwksUri: one of them is required".into()),
            (Some(source), None) => JwtKeys::Static(Arc::new(static_key(method, source)?)),
            (None, Some(uri)) => {
                if method.key_kind() == KeyKind::Secret {
                    return Err(format!(
                    "jwksUri: {method} tokens are checked with a shared secret given in source, \
                     not with a JWKS"
                ));
                }
                let uri =
                    url::Url::parse(uri.trim()).map_err(|e| format!("jwksUri: not a URL ({e})"))?;
                if !matches!(uri.scheme(), "http" | "https") {
                    return Err(format!(
                        "jwksUri: scheme {:?} is not supported; use http or https",
                        uri.scheme()
                    ));
                }
                if let (Some(policy), Some(host)) = (egress, uri.host_str()) {
                    let port = uri.port_or_known_default().unwrap_or(80);
                    policy
                        .check_literal(host, port)
                        .map_err(|e| format!("jwksUri: {e}"))?;
                }
                JwtKeys::Jwks(uri)
            }
        };
        if self.issuer.as_deref().is_some_and(str::is_empty) {
            return Err("issuer: must not be empty (leave it out to accept any issuer)".into());
        }
        if self.audiences.iter().any(String::is_empty) {
            return Err("audiences: entries must not be empty".into());
        }
        if self.identity_field().is_empty() {
            return Err("identityBaseField: must not be empty (leave it out for sub)".into());
        }
        Ok(keys)
    }

    /// The claim that identifies the caller.
    pub fn identity_field(&self) -> &str {
        self.identity_base_field.as_deref().unwrap_or("sub")
    }
}

fn static_key(method: SigningMethod, source: &str) -> Result<DecodingKey, String> {
    let source = source.trim();
    if source.is_empty() {
        return Err("source: must not be empty".into());
    }
    match method.key_kind() {
        KeyKind::Secret => {
            let secret = match source.strip_prefix(BASE64_PREFIX) {
                Some(b64) => B64.decode(b64.trim()).map_err(|e| {
                    format!("source: the text after {BASE64_PREFIX:?} is not base64 ({e})")
                })?,
                None => source.as_bytes().to_vec(),
            };
            if secret.is_empty() {
                return Err("source: the secret is empty".into());
            }
            Ok(DecodingKey::from_secret(&secret))
        }
        kind => {
            let pem = pem_text(source).ok_or_else(|| {
                format!("source: {method} needs a PEM public key (or the base64 of one)")
            })?;
            if pem.contains("PRIVATE KEY") {
                return Err(
                    "source: this is a private key; give the public key, which is all \
                     verification needs"
                        .into(),
                );
            }
            let key = match kind {
                KeyKind::Rsa => DecodingKey::from_rsa_pem(pem.as_bytes()),
                _ => DecodingKey::from_ec_pem(pem.as_bytes()),
            };
            key.map_err(|e| {
                let what = if kind == KeyKind::Rsa {
                    "an RSA"
                } else {
                    "an EC"
                };
                format!("source: {method} needs {what} public key in PEM ({e})")
            })
        }
    }
}

/// The PEM text in `source`: the source itself, or the base64 it holds.
fn pem_text(source: &str) -> Option<String> {
    if source.starts_with("-----BEGIN") {
        return Some(source.to_owned());
    }
    let b64 = source.strip_prefix(BASE64_PREFIX).unwrap_or(source);
    let compact: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
    let decoded = String::from_utf8(B64.decode(compact).ok()?).ok()?;
    decoded
        .trim_start()
        .starts_with("-----BEGIN")
        .then_some(decoded)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn settings_deserialize_camel_case_with_defaults() {
        let s: JwtSettings = serde_json::from_value(json!({
            "enabled": true,
            "signingMethod": "RS256",
            "jwksUri": "https://idp.example/jwks.json",
            "issuer": "https://idp.example",
            "audiences": ["a"],
            "expiresAtValidationSkew": 5,
            "notBeforeValidationSkew": 6,
            "issuedAtValidationSkew": 7,
            "identityBaseField": "email"
        }))
        .unwrap();
        assert_eq!(s.signing_method, SigningMethod::RS256);
        assert_eq!(s.jwks_cache_timeout, 300);
        assert_eq!(s.expires_at_validation_skew, 5);
        assert_eq!(s.identity_base_field.as_deref(), Some("email"));

        let minimal: JwtSettings =
            serde_json::from_value(json!({"signingMethod": "HS256", "source": "x"})).unwrap();
        assert!(!minimal.enabled);
        assert!(minimal.audiences.is_empty());

        for bad in [
            json!({"signingMethod": "HS256", "source": "x", "secret": "y"}),
            json!({"signingMethod": "none", "source": "x"}),
            json!({"signingMethod": "hs256", "source": "x"}),
            json!({"source": "x"}),
        ] {
            assert!(
                serde_json::from_value::<JwtSettings>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
