//! A webhook's secrets at rest: its header values and the credentials of its target URL
//! (`https://user:pass@host/...`). With the dashboard's secret they are stored sealed:
//! the header map as one sealed text in place of its JSON, and a URL with credentials
//! as a sealed text in place of the URL. Sealed texts start with `v1:`, which neither a
//! JSON object nor an http(s) URL does, so rows written before sealing still read as
//! they are.

use std::collections::BTreeMap;

use crate::store::seal::Sealer;

/// What cannot be sealed or opened, for the message of the one who needs it.
#[derive(Debug, thiserror::Error)]
pub enum SealedError {
    #[error("the webhook's secrets cannot be sealed")]
    Seal,
    #[error("the webhook's secrets were sealed with another secret than this one")]
    Open,
    #[error("the webhook's secrets are sealed, and no secret to open them is configured")]
    NoSecret,
}

/// Whether a stored text is sealed.
fn is_sealed(text: &str) -> bool {
    text.starts_with("v1:")
}

/// The header map's column text: sealed when `sealer` is given and there are headers.
pub fn store_headers(
    sealer: Option<&Sealer>,
    headers: Option<&BTreeMap<String, String>>,
) -> Result<Option<String>, SealedError> {
    let Some(headers) = headers else {
        return Ok(None);
    };
    let json = serde_json::to_string(headers).unwrap_or_else(|_| "{}".into());
    match sealer {
        Some(sealer) if !headers.is_empty() => sealer
            .seal(json.as_bytes())
            .map(Some)
            .map_err(|_| SealedError::Seal),
        _ => Ok(Some(json)),
    }
}

/// The target URL's column text: sealed when `sealer` is given and the URL carries
/// credentials.
pub fn store_url(sealer: Option<&Sealer>, url: &str) -> Result<String, SealedError> {
    match sealer {
        Some(sealer) if has_credentials(url) => {
            sealer.seal(url.as_bytes()).map_err(|_| SealedError::Seal)
        }
        _ => Ok(url.to_owned()),
    }
}

/// The header map of a column text, opened when sealed.
pub fn open_headers(
    sealer: Option<&Sealer>,
    stored: Option<&str>,
) -> Result<Option<BTreeMap<String, String>>, SealedError> {
    let Some(text) = stored else {
        return Ok(None);
    };
    let plain = open(sealer, text)?;
    Ok(serde_json::from_str(&plain).ok())
}

/// The target URL of a column text, opened when sealed.
pub fn open_url(sealer: Option<&Sealer>, stored: &str) -> Result<String, SealedError> {
    open(sealer, stored)
}

fn open(sealer: Option<&Sealer>, text: &str) -> Result<String, SealedError> {
    if !is_sealed(text) {
        return Ok(text.to_owned());
    }
    let sealer = sealer.ok_or(SealedError::NoSecret)?;
    let plain = sealer.open(text).map_err(|_| SealedError::Open)?;
    String::from_utf8(plain).map_err(|_| SealedError::Open)
}

/// Whether `url` carries a user name or password.
pub fn has_credentials(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
}

/// `url` without its credentials, and an `Authorization` value (HTTP basic) that carries
/// them, as the URL would have sent them.
pub fn split_credentials(url: &str) -> (String, Option<String>) {
    use base64::Engine;
    let Ok(mut parsed) = url::Url::parse(url) else {
        return (url.to_owned(), None);
    };
    if parsed.username().is_empty() && parsed.password().is_none() {
        return (url.to_owned(), None);
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let user = decode(parsed.username());
    let password = parsed.password().map(decode).unwrap_or_default();
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    (parsed.to_string(), Some(format!("Basic {basic}")))
}

/// A delivery's headers as stored: sealed when `sealer` is given and they hold a
/// secret (`secret` true).
pub fn store_delivery_headers(
    sealer: Option<&Sealer>,
    headers: &BTreeMap<String, String>,
    secret: bool,
) -> Result<String, SealedError> {
    let json = serde_json::to_string(headers).unwrap_or_else(|_| "{}".into());
    match sealer {
        Some(sealer) if secret => sealer.seal(json.as_bytes()).map_err(|_| SealedError::Seal),
        _ => Ok(json),
    }
}

/// A delivery's stored headers, opened when sealed.
pub fn open_delivery_headers(sealer: Option<&Sealer>, stored: &str) -> Result<String, SealedError> {
    open(sealer, stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_sealed_only_with_a_secret_and_read_back() {
        let sealer = Sealer::new("a-long-enough-secret");
        let mut headers = BTreeMap::new();
        headers.insert("Authorization".to_owned(), "Bearer hunter2".to_owned());
        let stored = store_headers(Some(&sealer), Some(&headers))
            .unwrap()
            .unwrap();
        assert!(
            is_sealed(&stored) && !stored.contains("hunter2"),
            "{stored}"
        );
        assert_eq!(
            open_headers(Some(&sealer), Some(&stored)).unwrap(),
            Some(headers.clone())
        );
        assert!(matches!(
            open_headers(None, Some(&stored)),
            Err(SealedError::NoSecret)
        ));
        // Rows from before sealing read as they are.
        let plain = store_headers(None, Some(&headers)).unwrap().unwrap();
        assert_eq!(
            open_headers(Some(&sealer), Some(&plain)).unwrap(),
            Some(headers)
        );

        let url = "https://user:p%40ss@hooks.example/x";
        let stored = store_url(Some(&sealer), url).unwrap();
        assert!(!stored.contains("p%40ss"), "{stored}");
        assert_eq!(open_url(Some(&sealer), &stored).unwrap(), url);
        assert_eq!(
            store_url(Some(&sealer), "https://hooks.example/x").unwrap(),
            "https://hooks.example/x"
        );
        let (bare, auth) = split_credentials(url);
        assert_eq!(bare, "https://hooks.example/x");
        assert_eq!(auth.as_deref(), Some("Basic dXNlcjpwQHNz"));
        assert_eq!(
            split_credentials("https://hooks.example/x"),
            ("https://hooks.example/x".to_owned(), None)
        );
    }
}
