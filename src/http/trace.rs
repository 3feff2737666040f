//! The W3C Trace Context a request carries (`traceparent`,
//! <https://www.w3.org/TR/trace-context/>), and the request id a client may send
//! (`X-Request-Id`): what log lines of one request, across services, are joined by.

use http::HeaderMap;

/// The trace id of a valid `traceparent` header: 32 lower-case hex digits, not all zero.
/// Version `00` must have exactly four fields; a later version may have more (the spec
/// asks readers to take the first four).
pub fn trace_id(headers: &HeaderMap) -> Option<&str> {
    trace_id_of(headers.get("traceparent")?.to_str().ok()?)
}

/// The trace id of a `traceparent` value, when it is valid (see [`trace_id`]).
pub fn trace_id_of(value: &str) -> Option<&str> {
    let value = value.trim();
    let mut fields = value.split('-');
    let version = fields.next()?;
    let trace = fields.next()?;
    let parent = fields.next()?;
    let flags = fields.next()?;
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && (version != "00" || fields.next().is_none())
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then_some(trace)
}

/// The longest request id taken from a client.
const MAX_REQUEST_ID: usize = 128;

/// The client's `X-Request-Id`, when it is 1 to 128 visible ASCII characters (anything
/// else could break a log line or grow it without bound).
pub fn request_id(headers: &HeaderMap) -> Option<&str> {
    request_id_of(headers.get("x-request-id")?.to_str().ok()?)
}

/// A request id value, when it is one (see [`request_id`]).
pub fn request_id_of(value: &str) -> Option<&str> {
    let value = value.trim();
    (!value.is_empty()
        && value.len() <= MAX_REQUEST_ID
        && value.bytes().all(|b| b.is_ascii_graphic()))
    .then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn reads_a_traceparent_by_the_spec() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            trace_id(&headers("traceparent", good)),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        // A later version may carry more fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert!(trace_id(&headers("traceparent", later)).is_some());
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "nonsense",
        ] {
            assert_eq!(trace_id(&headers("traceparent", bad)), None, "{bad}");
        }
    }

    #[test]
    fn takes_a_sane_request_id_only() {
        assert_eq!(
            request_id(&headers("x-request-id", " abc-1 ")),
            Some("abc-1")
        );
        assert_eq!(request_id(&headers("x-request-id", "a b")), None);
        assert_eq!(request_id(&headers("x-request-id", &"x".repeat(129))), None);
        assert_eq!(request_id(&HeaderMap::new()), None);
    }
}
