//! HTTP/1.1 fields and body framing as bytes (RFC 9112), shared by the responses the
//! server writes and the requests the gateway sends upstream.

use bytes::BufMut;
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// One `name: value` line.
pub fn put_field(out: &mut impl BufMut, name: &HeaderName, value: &HeaderValue) {
    out.put_slice(name.as_str().as_bytes());
    out.put_slice(b": ");
    out.put_slice(value.as_bytes());
    out.put_slice(b"\r\n");
}

/// A field name read off the wire. The names most messages carry are recognised in any
/// case by a few word compares, which costs a fraction of the general parse (a
/// lower-casing pass and a lookup) that every other name takes.
pub fn field_name(raw: &[u8]) -> Option<HeaderName> {
    use http::header::*;
    let known = match raw.len() {
        4 if is(raw, b"host") => Some(HOST),
        4 if is(raw, b"date") => Some(DATE),
        4 if is(raw, b"etag") => Some(ETAG),
        4 if is(raw, b"vary") => Some(VARY),
        6 if is(raw, b"server") => Some(SERVER),
        6 if is(raw, b"accept") => Some(ACCEPT),
        6 if is(raw, b"cookie") => Some(COOKIE),
        8 if is(raw, b"location") => Some(LOCATION),
        10 if is(raw, b"connection") => Some(CONNECTION),
        10 if is(raw, b"user-agent") => Some(USER_AGENT),
        10 if is(raw, b"set-cookie") => Some(SET_COOKIE),
        12 if is(raw, b"content-type") => Some(CONTENT_TYPE),
        13 if is(raw, b"authorization") => Some(AUTHORIZATION),
        13 if is(raw, b"cache-control") => Some(CACHE_CONTROL),
        13 if is(raw, b"last-modified") => Some(LAST_MODIFIED),
        14 if is(raw, b"content-length") => Some(CONTENT_LENGTH),
        15 if is(raw, b"accept-encoding") => Some(ACCEPT_ENCODING),
        15 if is(raw, b"accept-language") => Some(ACCEPT_LANGUAGE),
        16 if is(raw, b"content-encoding") => Some(CONTENT_ENCODING),
        17 if is(raw, b"transfer-encoding") => Some(TRANSFER_ENCODING),
        _ => None,
    };
    known.or_else(|| HeaderName::from_bytes(raw).ok())
}

/// Whether `raw` is `lower` in any case. Setting bit 5 lower-cases a letter and leaves
/// `-` as it is; the names compared hold nothing else, and the only other byte it
/// turns into one of theirs is a carriage return, which no field name holds. Compared
/// whole, without a branch per byte, so that the compiler makes a few word compares.
fn is<const N: usize>(raw: &[u8], lower: &[u8; N]) -> bool {
    let Ok(raw) = <&[u8; N]>::try_from(raw) else {
        return false;
    };
    raw.iter()
        .zip(lower)
        .fold(0u8, |diff, (a, b)| diff | ((a | 0x20) ^ b))
        == 0
}

/// `make(key)`, or the value this thread made last when `key` is the same as then: for
/// header text a thread writes again and again (a client's address, a limit), made once
/// rather than for each request. `last` is the caller's own thread-local slot.
pub fn remembered<K: PartialEq + Copy>(
    last: &'static std::thread::LocalKey<std::cell::RefCell<Option<(K, HeaderValue)>>>,
    key: K,
    make: impl FnOnce(K) -> HeaderValue,
) -> HeaderValue {
    last.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((seen, value)) if *seen == key => value.clone(),
            _ => {
                let value = make(key);
                *last = Some((key, value.clone()));
                value
            }
        }
    })
}

/// Whether a field belongs to one connection (RFC 9110 7.6.1), besides `Connection`
/// itself and those it names.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    const HOP_BY_HOP: &[HeaderName] = &[
        http::header::CONNECTION,
        http::header::PROXY_AUTHENTICATE,
        http::header::PROXY_AUTHORIZATION,
        http::header::TE,
        http::header::TRAILER,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
    ];
    HOP_BY_HOP.contains(name) || name.as_str() == "keep-alive"
}

/// The members of a comma-separated field value, trimmed, empty ones skipped.
pub fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// Whether a field value is visible ASCII (and tabs) only. hyper reads the tokens of
/// `Connection` and `Transfer-Encoding` only from such values and ignores any other, so
/// the gateway's own readers do the same: the two never part ways on whether a
/// connection closes or a body is chunked.
pub fn visible_ascii(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// What `Connection` fields say (RFC 9110 7.6.1): `close`, `upgrade`, and the other
/// fields they name, which belong to the connection too.
#[derive(Debug, Default)]
pub struct ConnectionTokens {
    pub close: bool,
    pub upgrade: bool,
    pub named: smallvec::SmallVec<[HeaderName; 2]>,
}

impl ConnectionTokens {
    /// Adds what one `Connection` value says.
    pub fn read(&mut self, value: &[u8]) {
        for token in tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                // Names `Keep-Alive`, which goes anyway; the usual token, so not parsed.
            } else if let Some(name) = field_name(token) {
                self.named.push(name);
            }
        }
    }
}

/// A number in decimal digits and nothing else, as `Content-Length` is written (RFC 9110
/// 8.6); `None` for anything else, or for a number too large for a `u64`.
pub fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The `content-length` line.
pub fn put_content_length(out: &mut impl BufMut, n: u64) {
    out.put_slice(b"content-length: ");
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

/// The line that opens a chunk of `len` bytes (RFC 9112 7.1).
pub fn chunk_line(out: &mut impl BufMut, len: usize) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut n = len;
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[at..]);
    out.put_slice(b"\r\n");
}

/// The last chunk and the end of a chunked body, with its trailer fields. Fields that
/// have no place in a trailer are left out: those of one connection, and those a
/// recipient needs before the content (framing, routing, authentication, request
/// modifiers, response controls, content format; RFC 9110 6.5.1), which a peer might
/// otherwise merge into the head it already acted on.
pub fn last_chunk(out: &mut impl BufMut, trailers: Option<&HeaderMap>) {
    out.put_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        if allowed_in_trailer(name) {
            put_field(out, name, value);
        }
    }
    out.put_slice(b"\r\n");
}

/// Whether a field may be sent in a trailer (see [`last_chunk`]).
pub fn allowed_in_trailer(name: &HeaderName) -> bool {
    use http::header::*;
    const BARRED: &[HeaderName] = &[
        // One connection's.
        CONNECTION,
        PROXY_AUTHENTICATE,
        PROXY_AUTHORIZATION,
        TE,
        TRAILER,
        TRANSFER_ENCODING,
        UPGRADE,
        // Framing and routing.
        CONTENT_LENGTH,
        HOST,
        // Authentication and state.
        AUTHORIZATION,
        WWW_AUTHENTICATE,
        COOKIE,
        SET_COOKIE,
        // Request modifiers and response controls.
        EXPECT,
        MAX_FORWARDS,
        RANGE,
        IF_MATCH,
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_UNMODIFIED_SINCE,
        IF_RANGE,
        CACHE_CONTROL,
        PRAGMA,
        AGE,
        EXPIRES,
        DATE,
        LOCATION,
        RETRY_AFTER,
        VARY,
        // How to read the content.
        CONTENT_ENCODING,
        CONTENT_TYPE,
        CONTENT_RANGE,
    ];
    !BARRED.contains(name) && name.as_str() != "keep-alive"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_read_alike_by_either_path() {
        for raw in [
            "Host",
            "host",
            "HOST",
            "Content-Length",
            "CONTENT-length",
            "ETag",
            "x-custom",
            "X-Custom",
            "Keep-Alive",
        ] {
            assert_eq!(
                field_name(raw.as_bytes()),
                HeaderName::from_bytes(raw.as_bytes()).ok(),
                "{raw}"
            );
        }
        assert_eq!(field_name(b"Date"), Some(http::header::DATE));
        assert_eq!(field_name(b"bad name"), None);
        assert_eq!(field_name(b""), None);
    }

    #[test]
    fn decimals_are_digits_only() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b""[..], b"+1", b" 1", b"1.0", b"18446744073709551616"] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn chunks_are_framed() {
        let mut out = Vec::new();
        for len in [0, 9, 0x4e20, usize::MAX] {
            chunk_line(&mut out, len);
        }
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        // Fields with no place in a trailer do not go out.
        trailers.insert("content-length", "5".parse().unwrap());
        trailers.insert("connection", "close".parse().unwrap());
        trailers.insert("authorization", "Bearer x".parse().unwrap());
        last_chunk(&mut out, Some(&trailers));
        last_chunk(&mut out, None);
        let expected = "0\r\n9\r\n4e20\r\nffffffffffffffff\r\n0\r\ngrpc-status: 0\r\n\r\n0\r\n\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn fields_and_lengths() {
        let mut out = bytes::BytesMut::new();
        put_field(
            &mut out,
            &http::header::HOST,
            &HeaderValue::from_static("a:1"),
        );
        put_content_length(&mut out, 1234);
        assert_eq!(&out[..], b"host: a:1\r\ncontent-length: 1234\r\n");
    }
}
