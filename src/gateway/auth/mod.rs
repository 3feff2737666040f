//! Credential checks of the gateway's authentication step.
//!
//! Each scheme is a small, pure piece over `http::request::Parts`: it extracts the
//! credential from the request and verifies it, and knows nothing about key stores,
//! API definitions or responses. The authentication middleware composes them.
//!
//! - [`api_key`]: a key in a header, query parameter or cookie (the OpenAPI `apiKey`
//!   scheme);
//! - [`basic`]: HTTP Basic credentials and the hashing of stored passwords;
//! - [`jwt`]: JWT bearer tokens signed with a static key or a key from a JWKS document;
//! - [`hmac`]: HMAC request signatures (HTTP Signatures draft).
//!
//! Every failure is an [`AuthError`] whose text is safe to show to the client: it never
//! carries a secret, a key, a URL of the key server or an internal error text.

pub mod api_key;
pub mod basic;
pub mod hmac;
pub mod jwt;

pub use api_key::KeyLocation;
pub use basic::credentials as basic_credentials;
pub use hmac::{HmacAlgorithm, HmacSettings, SignatureHeader};
pub use jwt::{bearer, Claims, JwtSettings, JwtVerifier, SigningMethod};

/// Largest credential header value any scheme looks at. Real credentials are far
/// smaller; the bound keeps decoding work proportional to something sane even when the
/// server in front allows large headers.
pub(crate) const MAX_CREDENTIAL_LEN: usize = 16 * 1024;

/// Why a request's credentials were refused.
///
/// The message of each variant is short and client-safe. Details that would help an
/// attacker or leak configuration (which key was tried, why a key server failed) go to
/// the log instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The request carries no credentials for the scheme.
    #[error("credentials missing")]
    Missing,
    /// Credentials are present but cannot be parsed.
    #[error("malformed credentials: {0}")]
    Malformed(String),
    /// Credentials parse but do not verify (bad signature, wrong issuer, ...).
    #[error("invalid credentials: {0}")]
    Invalid(String),
    /// The credentials have expired.
    #[error("credentials expired")]
    Expired,
    /// The credentials are not valid yet.
    #[error("credentials not yet valid")]
    NotYetValid,
    /// The keys needed to verify the credentials could not be fetched. This is the
    /// gateway's problem rather than the client's, so it usually maps to a 5xx status.
    #[error("verification keys unavailable: {0}")]
    KeyFetch(String),
}

impl AuthError {
    pub(crate) fn malformed(msg: impl Into<String>) -> Self {
        AuthError::Malformed(msg.into())
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        AuthError::Invalid(msg.into())
    }
}

/// Splits an `Authorization` value into its scheme and the rest, if the scheme is
/// `scheme` (compared case-insensitively, as RFC 9110 says). `None` when the scheme
/// differs; the rest is trimmed and may be empty.
pub(crate) fn strip_scheme<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let value = value.trim_start();
    let head = value.get(..scheme.len())?;
    if !head.eq_ignore_ascii_case(scheme) {
        return None;
    }
    let rest = &value[scheme.len()..];
    // The scheme must be the whole first word: "Bearerx" is not "Bearer".
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    Some(rest.trim())
}

/// The single `Authorization` header as text. `Missing` when absent, `Malformed` when
/// it is not text, too long, or given more than once (two credentials are ambiguous).
pub(crate) fn authorization(parts: &http::request::Parts) -> Result<&str, AuthError> {
    header_text(parts, http::header::AUTHORIZATION)
}

/// The single value of header `name` as text, with the same rules as [`authorization`].
pub(crate) fn header_text(
    parts: &http::request::Parts,
    name: impl http::header::AsHeaderName,
) -> Result<&str, AuthError> {
    let mut values = parts.headers.get_all(name).iter();
    let value = values.next().ok_or(AuthError::Missing)?;
    if values.next().is_some() {
        return Err(AuthError::malformed("header given more than once"));
    }
    if value.len() > MAX_CREDENTIAL_LEN {
        return Err(AuthError::malformed("header too long"));
    }
    std::str::from_utf8(value.as_bytes()).map_err(|_| AuthError::malformed("header is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_scheme_is_case_insensitive_and_word_bounded() {
        assert_eq!(strip_scheme("Bearer abc", "Bearer"), Some("abc"));
        assert_eq!(strip_scheme("bEaReR   abc  ", "Bearer"), Some("abc"));
        assert_eq!(strip_scheme("Bearer", "Bearer"), Some(""));
        assert_eq!(strip_scheme("Bearerabc", "Bearer"), None);
        assert_eq!(strip_scheme("Basic abc", "Bearer"), None);
        assert_eq!(strip_scheme("Be", "Bearer"), None);
        // A multi-byte character where the scheme would end must not panic.
        assert_eq!(strip_scheme("Beare\u{e9} x", "Bearer"), None);
    }

    #[test]
    fn authorization_header_rules() {
        let (parts, ()) = http::Request::builder().body(()).unwrap().into_parts();
        assert_eq!(authorization(&parts), Err(AuthError::Missing));

        let (parts, ()) = http::Request::builder()
            .header("authorization", "a")
            .header("authorization", "b")
            .body(())
            .unwrap()
            .into_parts();
        assert!(matches!(
            authorization(&parts),
            Err(AuthError::Malformed(_))
        ));

        let long = "x".repeat(MAX_CREDENTIAL_LEN + 1);
        let (parts, ()) = http::Request::builder()
            .header("authorization", long)
            .body(())
            .unwrap()
            .into_parts();
        assert!(matches!(
            authorization(&parts),
            Err(AuthError::Malformed(_))
        ));

        let value = http::HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap();
        let (parts, ()) = http::Request::builder()
            .header("authorization", value)
            .body(())
            .unwrap()
            .into_parts();
        assert!(matches!(
            authorization(&parts),
            Err(AuthError::Malformed(_))
        ));
    }
}
