//! HTTP Basic authentication (RFC 7617). The passwords stored for it are hashed and
//! checked by [`crate::secret`].

use base64::Engine as _;

use super::{authorization, strip_scheme, AuthError};

/// Standard base64, padding optional: some clients drop the `=` padding, and nothing is
/// gained by refusing them.
const B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The user name and password of an `Authorization: Basic <base64(user:pass)>` header.
///
/// The password is everything after the first `:`, so it may itself contain `:`
/// (RFC 7617 section 2). Both parts must be UTF-8 (the `charset` RFC 7617 allows).
///
/// - No `Authorization` header: [`AuthError::Missing`].
/// - Another scheme, bad base64, no `:`, not UTF-8 or an empty user name:
///   [`AuthError::Malformed`].
pub fn credentials(parts: &http::request::Parts) -> Result<(String, String), AuthError> {
    let value = authorization(parts)?;
    let encoded = strip_scheme(value, "Basic")
        .ok_or_else(|| AuthError::malformed("expected Basic credentials"))?;
    if encoded.is_empty() {
        return Err(AuthError::malformed("empty Basic credentials"));
    }
    let decoded = B64
        .decode(encoded)
        .map_err(|_| AuthError::malformed("Basic credentials are not base64"))?;
    let text = String::from_utf8(decoded)
        .map_err(|_| AuthError::malformed("Basic credentials are not UTF-8"))?;
    let (user, pass) = text
        .split_once(':')
        .ok_or_else(|| AuthError::malformed("Basic credentials lack ':'"))?;
    if user.is_empty() {
        return Err(AuthError::malformed("empty user name"));
    }
    Ok((user.to_owned(), pass.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_auth(value: &[u8]) -> http::request::Parts {
        let mut parts = http::Request::new(()).into_parts().0;
        parts.headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_bytes(value).unwrap(),
        );
        parts
    }

    fn basic(raw: &str) -> http::request::Parts {
        with_auth(format!("Basic {}", B64.encode(raw)).as_bytes())
    }

    #[test]
    fn accepts_user_and_password() {
        assert_eq!(
            credentials(&basic("alice:s3cret")).unwrap(),
            ("alice".into(), "s3cret".into())
        );
        // The password keeps every ':' after the first one.
        assert_eq!(
            credentials(&basic("alice:a:b:c")).unwrap(),
            ("alice".into(), "a:b:c".into())
        );
        assert_eq!(
            credentials(&basic("alice:")).unwrap(),
            ("alice".into(), String::new())
        );
        assert_eq!(
            credentials(&basic("zoë:pässwörd")).unwrap(),
            ("zoë".into(), "pässwörd".into())
        );
        // Scheme case and unpadded base64 are tolerated.
        let p = with_auth(b"basic YWxpY2U6eA");
        assert_eq!(credentials(&p).unwrap(), ("alice".into(), "x".into()));
    }

    #[test]
    fn refuses_bad_credentials() {
        let parts = http::Request::new(()).into_parts().0;
        assert_eq!(credentials(&parts), Err(AuthError::Missing));

        for bad in [
            &b"Bearer abc"[..],
            b"Basic",
            b"Basic ",
            b"Basic !!!notbase64",
            b"Basicabc",
        ] {
            assert!(
                matches!(credentials(&with_auth(bad)), Err(AuthError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            credentials(&basic("nocolon")),
            Err(AuthError::Malformed(_))
        ));
        assert!(matches!(
            credentials(&basic(":pass")),
            Err(AuthError::Malformed(_))
        ));
        let not_utf8 = format!("Basic {}", B64.encode(b"\xff\xfe:x"));
        assert!(matches!(
            credentials(&with_auth(not_utf8.as_bytes())),
            Err(AuthError::Malformed(_))
        ));
        // Non-UTF-8 header bytes and huge headers are refused, not panicked on.
        assert!(credentials(&with_auth(b"Basic \xff")).is_err());
        let huge = format!("Basic {}", "A".repeat(super::super::MAX_CREDENTIAL_LEN));
        assert!(credentials(&with_auth(huge.as_bytes())).is_err());
    }
}
