//! API keys carried in a header, a query parameter or a cookie: the OpenAPI `apiKey`
//! security scheme. Only extraction lives here; whether a key is known is the key
//! store's business.

use super::{header_text, strip_scheme, MAX_CREDENTIAL_LEN};

pub use crate::apidef::security::KeyLocation;

/// Takes the API key named `name` from `location`, or `None` when it is absent, empty or
/// unreadable.
///
/// - Header: the header must be given once. When the header is `Authorization`, both a
///   bare key and `Bearer <key>` are accepted, since clients commonly send either.
/// - Query: the first parameter called `name`; names and values are percent-decoded
///   (and `+` is a space, as in HTML forms).
/// - Cookie: the first cookie called `name` across all `Cookie` headers; a value in
///   double quotes is unquoted. Cookie names are case-sensitive.
///
/// `header` is `name` as a header name, read once when the API loads; without it (the
/// name is not one) a header holds no key.
pub fn extract(
    parts: &http::request::Parts,
    location: KeyLocation,
    name: &str,
    header: Option<&http::HeaderName>,
) -> Option<String> {
    let key = match (location, header) {
        (KeyLocation::Header, Some(header)) => from_header(parts, header),
        (KeyLocation::Header, None) => None,
        (KeyLocation::Query, _) => from_query(parts, name),
        (KeyLocation::Cookie, _) => from_cookie(parts, name),
    }?;
    if key.is_empty() || key.len() > MAX_CREDENTIAL_LEN {
        return None;
    }
    Some(key)
}

fn from_header(parts: &http::request::Parts, name: &http::HeaderName) -> Option<String> {
    let is_authorization = name == http::header::AUTHORIZATION;
    let value = header_text(parts, name).ok()?.trim();
    let key = if is_authorization {
        strip_scheme(value, "Bearer").unwrap_or(value)
    } else {
        value
    };
    Some(key.to_owned())
}

fn from_query(parts: &http::request::Parts, name: &str) -> Option<String> {
    let query = parts.uri.query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn from_cookie(parts: &http::request::Parts, name: &str) -> Option<String> {
    crate::http::cookie(&parts.headers, name).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key as a scheme named `name` finds it.
    fn key_of(p: &http::request::Parts, location: KeyLocation, name: &str) -> Option<String> {
        let header = http::HeaderName::from_bytes(name.as_bytes()).ok();
        extract(p, location, name, header.as_ref())
    }

    fn parts(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn location_deserializes_from_openapi_in_values() {
        let l: Vec<KeyLocation> = serde_json::from_str(r#"["header","query","cookie"]"#).unwrap();
        assert_eq!(
            l,
            [KeyLocation::Header, KeyLocation::Query, KeyLocation::Cookie]
        );
        assert!(serde_json::from_str::<KeyLocation>(r#""Header""#).is_err());
        assert!(serde_json::from_str::<KeyLocation>(r#""body""#).is_err());
    }

    #[test]
    fn header_key() {
        let p = parts("/", &[("x-api-key", "  k123 ")]);
        assert_eq!(
            key_of(&p, KeyLocation::Header, "X-Api-Key").as_deref(),
            Some("k123")
        );
        assert_eq!(key_of(&p, KeyLocation::Header, "x-other"), None);
        // An invalid header name is simply absent.
        assert_eq!(key_of(&p, KeyLocation::Header, "bad name"), None);
        assert_eq!(key_of(&p, KeyLocation::Header, ""), None);

        let p = parts("/", &[("x-api-key", "")]);
        assert_eq!(key_of(&p, KeyLocation::Header, "x-api-key"), None);

        // Two values are ambiguous.
        let p = parts("/", &[("x-api-key", "a"), ("x-api-key", "b")]);
        assert_eq!(key_of(&p, KeyLocation::Header, "x-api-key"), None);
    }

    #[test]
    fn authorization_header_accepts_bare_and_bearer() {
        let p = parts("/", &[("authorization", "k123")]);
        assert_eq!(
            key_of(&p, KeyLocation::Header, "Authorization").as_deref(),
            Some("k123")
        );
        let p = parts("/", &[("authorization", "Bearer k123")]);
        assert_eq!(
            key_of(&p, KeyLocation::Header, "Authorization").as_deref(),
            Some("k123")
        );
        let p = parts("/", &[("authorization", "bearer   k123")]);
        assert_eq!(
            key_of(&p, KeyLocation::Header, "authorization").as_deref(),
            Some("k123")
        );
        let p = parts("/", &[("authorization", "Bearer ")]);
        assert_eq!(key_of(&p, KeyLocation::Header, "authorization"), None);
        // Only Authorization strips the scheme word.
        let p = parts("/", &[("x-api-key", "Bearer k123")]);
        assert_eq!(
            key_of(&p, KeyLocation::Header, "x-api-key").as_deref(),
            Some("Bearer k123")
        );
    }

    #[test]
    fn query_key_is_percent_decoded() {
        let p = parts("/p?a=1&api_key=k%2B1%20x&api_key=second", &[]);
        assert_eq!(
            key_of(&p, KeyLocation::Query, "api_key").as_deref(),
            Some("k+1 x")
        );
        let p = parts("/p?api%5Fkey=v", &[]);
        assert_eq!(
            key_of(&p, KeyLocation::Query, "api_key").as_deref(),
            Some("v")
        );
        let p = parts("/p?api_key", &[]);
        assert_eq!(key_of(&p, KeyLocation::Query, "api_key"), None);
        let p = parts("/p", &[]);
        assert_eq!(key_of(&p, KeyLocation::Query, "api_key"), None);
        // Invalid percent-encoding and bad UTF-8 decode lossily rather than failing.
        let p = parts("/p?api_key=%ff%zz", &[]);
        assert_eq!(
            key_of(&p, KeyLocation::Query, "api_key").as_deref(),
            Some("\u{fffd}%zz")
        );
    }

    #[test]
    fn cookie_key_among_several() {
        let p = parts(
            "/",
            &[
                ("cookie", "theme=dark; session=\"s1\" ;other=x"),
                ("cookie", "k=v"),
            ],
        );
        assert_eq!(
            key_of(&p, KeyLocation::Cookie, "session").as_deref(),
            Some("s1")
        );
        assert_eq!(key_of(&p, KeyLocation::Cookie, "k").as_deref(), Some("v"));
        assert_eq!(
            key_of(&p, KeyLocation::Cookie, "theme").as_deref(),
            Some("dark")
        );
        assert_eq!(key_of(&p, KeyLocation::Cookie, "Theme"), None);
        assert_eq!(key_of(&p, KeyLocation::Cookie, "missing"), None);

        let p = parts("/", &[("cookie", ";;=;novalue;a=")]);
        assert_eq!(key_of(&p, KeyLocation::Cookie, "a"), None);
        assert_eq!(key_of(&p, KeyLocation::Cookie, "novalue"), None);
    }

    #[test]
    fn huge_and_odd_values_are_refused_without_panic() {
        let huge = "k".repeat(MAX_CREDENTIAL_LEN + 1);
        let p = parts(
            &format!("/?key={huge}"),
            &[("cookie", &format!("key={huge}"))],
        );
        assert_eq!(key_of(&p, KeyLocation::Query, "key"), None);
        assert_eq!(key_of(&p, KeyLocation::Cookie, "key"), None);

        let mut p = parts("/", &[]);
        p.headers.insert(
            "x-api-key",
            http::HeaderValue::from_bytes(b"\xc3\x28").unwrap(),
        );
        assert_eq!(key_of(&p, KeyLocation::Header, "x-api-key"), None);
        // Non-ASCII but valid UTF-8 is accepted as is.
        p.headers.insert(
            "x-api-key",
            http::HeaderValue::from_bytes("clé".as_bytes()).unwrap(),
        );
        assert_eq!(
            key_of(&p, KeyLocation::Header, "x-api-key").as_deref(),
            Some("clé")
        );
    }
}
