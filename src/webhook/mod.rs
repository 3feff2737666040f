//! Outgoing webhooks: the signature scheme, body templates, and the worker that delivers
//! the store's queue of calls at least once.

pub mod delivery;
pub mod sealed;
pub mod sign;
pub mod stored;
pub mod template;

pub use delivery::{Deliverer, DeliveryConfig, DeliveryError};
pub use template::{TemplateError, Templates};

use std::collections::BTreeMap;

/// A webhook call: what the dashboard's webhook resource holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub method: String,
    pub url: String,
    pub headers: BTreeMap<String, String>,
    /// Relative to the templates directory; empty for none.
    pub template_path: String,
    /// An inline template, which wins over `template_path`.
    pub template: Option<String>,
    /// Seconds before the same event fires again for the same key; 0 for never waiting.
    pub event_timeout: u64,
}

/// The methods a webhook may call its target with.
pub const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// `method` in upper case, when it is one of [`METHODS`].
pub fn check_method(method: &str) -> Result<String, String> {
    let upper = method.trim().to_ascii_uppercase();
    if METHODS.contains(&upper.as_str()) {
        Ok(upper)
    } else {
        Err(format!("`{method}` is not one of {}", METHODS.join(", ")))
    }
}

/// `url` trimmed, when it is an absolute http or https URL with a host.
pub fn check_url(url: &str) -> Result<String, String> {
    let bad = |why: &str| format!("`{url}` {why}");
    let parsed = url::Url::parse(url.trim()).map_err(|_| bad("is not an absolute URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("is not an http or https URL"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    Ok(url.trim().to_owned())
}

/// Headers a webhook may not set besides the client's own
/// ([`RESERVED_FIELDS`](crate::connect::outbound::RESERVED_FIELDS)): the idempotency key
/// and the `Sluice-` headers are the service's own (signature, event).
const RESERVED: &[&str] = &["idempotency-key"];

/// Checks that every name and value can be sent as an HTTP header; the first that
/// cannot comes back with the header's name and why.
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), (String, &'static str)> {
    for (name, value) in headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err((name.clone(), "not a valid header name"));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str())
            || crate::connect::outbound::RESERVED_FIELDS.contains(&lower.as_str())
            || lower.starts_with("sluice-")
        {
            return Err((
                name.clone(),
                "set by the service itself (framing, connection, host, idempotency and Sluice- headers cannot be given)",
            ));
        }
        if http::HeaderValue::from_str(value).is_err() {
            return Err((name.clone(), "not a valid header value"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_targets() {
        assert_eq!(check_method(" post").unwrap(), "POST");
        assert!(check_method("BREW").is_err());
        assert_eq!(
            check_url(" https://h.example/x ").unwrap(),
            "https://h.example/x"
        );
        for bad in ["/relative", "ftp://h/x", "http://", "nonsense"] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        let mut h = BTreeMap::new();
        h.insert("X-Ok".to_owned(), "v".to_owned());
        assert!(check_headers(&h).is_ok());
        h.insert("bad name".to_owned(), "v".to_owned());
        assert!(check_headers(&h).is_err());
        for reserved in [
            "Host",
            "content-length",
            "Transfer-Encoding",
            "Sluice-Signature",
        ] {
            let h = BTreeMap::from([(reserved.to_owned(), "x".to_owned())]);
            let (name, why) = check_headers(&h).unwrap_err();
            assert_eq!(name, reserved);
            assert!(why.contains("set by the service"), "{why}");
        }
    }
}
