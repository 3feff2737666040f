//! HMAC request signatures in the style of the HTTP Signatures draft
//! (draft-cavage-http-signatures):
//!
//! ```text
//! Authorization: Signature keyId="k1",algorithm="hmac-sha256",headers="(request-target) date",signature="<base64>"
//! ```
//!
//! The same parameters are also accepted in a `Signature` header (without the scheme
//! word). The signature is an HMAC over the *signing string*: one `name: value` line per
//! listed header, in the listed order, joined with `\n`. The pseudo-header
//! `(request-target)` is `<method in lowercase> <path>[?query]`; `(created)` and
//! `(expires)` are the parameters of the same names.
//!
//! [`parse`] reads the header so the caller can look up the secret of `key_id`, and
//! [`verify`] checks the signature and the freshness of the request. [`sign`] produces
//! the header, for tests and the gateway's own clients.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};

use super::{authorization, header_text, strip_scheme, AuthError};

pub use crate::apidef::hmac::{HmacAlgorithm, HmacSettings};

/// Standard base64, padding optional on input.
const B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// More signed headers than any real client lists; bounds the signing-string work.
const MAX_SIGNED_HEADERS: usize = 64;

/// The MAC of `message` with `secret`.
fn mac(algorithm: HmacAlgorithm, secret: &[u8], message: &[u8]) -> Vec<u8> {
    // `new_from_slice` fails only for fixed-length-key MACs; HMAC takes any key length.
    macro_rules! mac {
        ($digest:ty) => {
            match Hmac::<$digest>::new_from_slice(secret) {
                Ok(mut m) => {
                    m.update(message);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        };
    }
    match algorithm {
        HmacAlgorithm::Sha1 => mac!(sha1::Sha1),
        HmacAlgorithm::Sha256 => mac!(sha2::Sha256),
        HmacAlgorithm::Sha384 => mac!(sha2::Sha384),
        HmacAlgorithm::Sha512 => mac!(sha2::Sha512),
    }
}

/// Constant-time check of `tag` against the MAC of `message`.
fn verify_tag(algorithm: HmacAlgorithm, secret: &[u8], message: &[u8], tag: &[u8]) -> bool {
    macro_rules! check {
        ($digest:ty) => {
            match Hmac::<$digest>::new_from_slice(secret) {
                Ok(mut m) => {
                    m.update(message);
                    m.verify_slice(tag).is_ok()
                }
                Err(_) => false,
            }
        };
    }
    match algorithm {
        HmacAlgorithm::Sha1 => check!(sha1::Sha1),
        HmacAlgorithm::Sha256 => check!(sha2::Sha256),
        HmacAlgorithm::Sha384 => check!(sha2::Sha384),
        HmacAlgorithm::Sha512 => check!(sha2::Sha512),
    }
}

/// The parameters of a parsed signature header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeader {
    /// Which secret signed the request; the caller looks it up.
    pub key_id: String,
    /// The algorithm the client claims to have used.
    pub algorithm: HmacAlgorithm,
    /// The signed header names, lowercased, in signing order. `["date"]` when the
    /// `headers` parameter is absent, as the draft specifies.
    pub headers: Vec<String>,
    /// The decoded signature bytes.
    pub signature: Vec<u8>,
    /// The `created` parameter (Unix seconds), if given.
    pub created: Option<i64>,
    /// The `expires` parameter (Unix seconds), if given.
    pub expires: Option<i64>,
}

/// Reads the signature parameters from `Authorization: Signature ...`, or else from the
/// `Signature` header.
///
/// - Neither header: [`AuthError::Missing`].
/// - Unparsable parameters, a missing `keyId`/`algorithm`/`signature`, bad base64:
///   [`AuthError::Malformed`].
/// - An algorithm that is not supported: [`AuthError::Invalid`].
pub fn parse(parts: &http::request::Parts) -> Result<SignatureHeader, AuthError> {
    let params = match authorization(parts) {
        Ok(value) => match strip_scheme(value, "Signature") {
            Some(params) => params,
            // Another scheme in Authorization: the signature may still be in its own
            // header.
            None => signature_header(parts)?,
        },
        Err(AuthError::Missing) => signature_header(parts)?,
        Err(e) => return Err(e),
    };
    parse_params(params)
}

fn signature_header(parts: &http::request::Parts) -> Result<&str, AuthError> {
    header_text(parts, "signature")
}

fn parse_params(input: &str) -> Result<SignatureHeader, AuthError> {
    let mut key_id = None;
    let mut algorithm = None;
    let mut headers = None;
    let mut signature = None;
    let mut created = None;
    let mut expires = None;

    for (name, value) in Params::new(input) {
        let (name, value) = (name?, value);
        let slot = match name.to_ascii_lowercase().as_str() {
            "keyid" => &mut key_id,
            "algorithm" => &mut algorithm,
            "headers" => &mut headers,
            "signature" => &mut signature,
            "created" => &mut created,
            "expires" => &mut expires,
            // Parameters of later drafts or extensions are not signed here; skip them.
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err(AuthError::malformed(format!(
                "signature parameter {name} given twice"
            )));
        }
    }

    let key_id = key_id
        .filter(|k| !k.is_empty())
        .ok_or_else(|| AuthError::malformed("signature lacks keyId"))?;
    let algorithm = algorithm.ok_or_else(|| AuthError::malformed("signature lacks algorithm"))?;
    let algorithm = HmacAlgorithm::from_name(&algorithm)
        .ok_or_else(|| AuthError::invalid("unsupported signature algorithm"))?;
    let signature = signature.ok_or_else(|| AuthError::malformed("signature lacks signature"))?;
    let signature = B64
        .decode(signature.as_bytes())
        .map_err(|_| AuthError::malformed("signature is not base64"))?;
    let headers: Vec<String> = match headers {
        None => vec!["date".to_owned()],
        Some(list) => list
            .split_ascii_whitespace()
            .map(str::to_ascii_lowercase)
            .collect(),
    };
    if headers.is_empty() {
        return Err(AuthError::malformed("signature lists no headers"));
    }
    if headers.len() > MAX_SIGNED_HEADERS {
        return Err(AuthError::malformed("signature lists too many headers"));
    }
    let number = |v: Option<String>, what: &str| -> Result<Option<i64>, AuthError> {
        v.map(|v| {
            v.parse::<i64>()
                .map_err(|_| AuthError::malformed(format!("signature {what} is not a number")))
        })
        .transpose()
    };
    Ok(SignatureHeader {
        key_id,
        algorithm,
        headers,
        signature,
        created: number(created, "created")?,
        expires: number(expires, "expires")?,
    })
}

/// Iterator over `name=value` pairs separated by commas; values are quoted strings
/// (a backslash escapes the next character) or bare tokens up to the next comma.
struct Params<'a> {
    rest: &'a str,
}

impl<'a> Params<'a> {
    fn new(input: &'a str) -> Self {
        Params { rest: input }
    }
}

impl<'a> Iterator for Params<'a> {
    /// The name (or the parse error) and the unquoted value.
    type Item = (Result<&'a str, AuthError>, String);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return None;
        }
        let Some((name, after)) = rest.split_once('=') else {
            self.rest = "";
            return Some((
                Err(AuthError::malformed("signature parameter without '='")),
                String::new(),
            ));
        };
        let name = name.trim();
        let after = after.trim_start();
        let mut value = String::new();
        if let Some(quoted) = after.strip_prefix('"') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    c => value.push(c),
                }
            }
            let Some(end) = end else {
                self.rest = "";
                return Some((
                    Err(AuthError::malformed(
                        "unterminated quoted signature parameter",
                    )),
                    String::new(),
                ));
            };
            // `end` indexes the closing quote, which is one byte long.
            self.rest = &quoted[end + 1..];
            let next = self.rest.trim_start();
            if !(next.is_empty() || next.starts_with(',')) {
                self.rest = "";
                return Some((
                    Err(AuthError::malformed(
                        "junk after quoted signature parameter",
                    )),
                    String::new(),
                ));
            }
        } else {
            let (token, tail) = after.split_once(',').unwrap_or((after, ""));
            value.push_str(token.trim());
            self.rest = tail;
        }
        if name.is_empty() {
            return Some((
                Err(AuthError::malformed("signature parameter without a name")),
                String::new(),
            ));
        }
        Some((Ok(name), value))
    }
}

/// Checks `sig` against the request, given the secret of `sig.key_id`.
///
/// In order: the algorithm must be allowed by `settings` ([`AuthError::Invalid`]),
/// every listed header must be present ([`AuthError::Invalid`]), the signature must
/// match (constant-time; [`AuthError::Invalid`]), and, when
/// `settings.allowed_clock_skew` is not 0, the signature must cover `date` or
/// `(created)` and that time must be within the skew of now ([`AuthError::Expired`]
/// when too old, [`AuthError::NotYetValid`] when too far ahead). An `expires` parameter
/// in the past (beyond the skew) is [`AuthError::Expired`].
pub fn verify(
    parts: &http::request::Parts,
    sig: &SignatureHeader,
    secret: &[u8],
    settings: &HmacSettings,
) -> Result<(), AuthError> {
    if !settings.allows(sig.algorithm) {
        return Err(AuthError::invalid("signature algorithm not allowed"));
    }
    let signing_string = signing_string(parts, &sig.headers, sig.created, sig.expires)?;
    if !verify_tag(
        sig.algorithm,
        secret,
        signing_string.as_bytes(),
        &sig.signature,
    ) {
        return Err(AuthError::invalid("signature mismatch"));
    }
    check_freshness(parts, sig, settings.allowed_clock_skew, unix_now())
}

/// The freshness checks of [`verify`], run only on requests whose signature matched so
/// that the timestamps checked are the signed ones.
fn check_freshness(
    parts: &http::request::Parts,
    sig: &SignatureHeader,
    skew: u64,
    now: i64,
) -> Result<(), AuthError> {
    let skew = i64::try_from(skew).unwrap_or(i64::MAX);
    if let Some(expires) = sig.expires {
        if now.saturating_sub(skew) > expires {
            return Err(AuthError::Expired);
        }
    }
    if skew == 0 {
        return Ok(());
    }
    let signed_at = if sig.headers.iter().any(|h| h == "date") {
        let date = header_text(parts, http::header::DATE)
            .map_err(|_| AuthError::invalid("signed header date missing"))?;
        chrono::DateTime::parse_from_rfc2822(date.trim())
            .map_err(|_| AuthError::malformed("Date header is not an HTTP date"))?
            .timestamp()
    } else if sig.headers.iter().any(|h| h == "(created)") {
        // signing_string already required the parameter when `(created)` is listed.
        sig.created
            .ok_or_else(|| AuthError::invalid("signature lacks created"))?
    } else {
        // An unsigned Date could be replaced freely, so it proves nothing.
        return Err(AuthError::invalid(
            "signature must cover the date header or (created)",
        ));
    };
    if now.saturating_sub(signed_at) > skew {
        return Err(AuthError::Expired);
    }
    if signed_at.saturating_sub(now) > skew {
        return Err(AuthError::NotYetValid);
    }
    Ok(())
}

/// Builds the string that is signed: one `name: value` line per entry of `headers`.
fn signing_string(
    parts: &http::request::Parts,
    headers: &[String],
    created: Option<i64>,
    expires: Option<i64>,
) -> Result<String, AuthError> {
    let mut out = String::new();
    for (i, name) in headers.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(name);
        out.push_str(": ");
        match name.as_str() {
            "(request-target)" => {
                let target = parts
                    .uri
                    .path_and_query()
                    .map(|pq| pq.as_str())
                    .unwrap_or_else(|| parts.uri.path());
                out.push_str(&parts.method.as_str().to_ascii_lowercase());
                out.push(' ');
                out.push_str(target);
            }
            "(created)" => {
                let c = created
                    .ok_or_else(|| AuthError::invalid("(created) signed without created"))?;
                out.push_str(&c.to_string());
            }
            "(expires)" => {
                let e = expires
                    .ok_or_else(|| AuthError::invalid("(expires) signed without expires"))?;
                out.push_str(&e.to_string());
            }
            _ => header_values(parts, name, &mut out)?,
        }
    }
    Ok(out)
}

/// Appends the values of header `name`, trimmed and joined with `", "` as the draft
/// says for repeated headers. `host` falls back to the URI authority, which is where
/// HTTP/2 carries it.
fn header_values(
    parts: &http::request::Parts,
    name: &str,
    out: &mut String,
) -> Result<(), AuthError> {
    let missing = || AuthError::invalid(format!("signed header {name} missing"));
    let Ok(header) = http::HeaderName::from_bytes(name.as_bytes()) else {
        return Err(missing());
    };
    let mut values = parts.headers.get_all(&header).iter().peekable();
    if values.peek().is_none() {
        if header == http::header::HOST {
            if let Some(authority) = parts.uri.authority() {
                out.push_str(authority.as_str());
                return Ok(());
            }
        }
        return Err(missing());
    }
    for (i, v) in values.enumerate() {
        let text = std::str::from_utf8(v.as_bytes())
            .map_err(|_| AuthError::malformed(format!("header {name} is not UTF-8")))?;
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(text.trim());
    }
    Ok(())
}

/// Signs the request `parts` with `secret` and returns the value for an
/// `Authorization` header: `Signature keyId="...",algorithm="...",headers="...",signature="..."`.
///
/// `headers` are the names to sign, in order (for example
/// `["(request-target)", "host", "date"]`); they must be present in `parts` already.
/// When `(created)` is listed, the current time is used and sent as `created`.
/// `(expires)` cannot be signed with this helper. A `key_id` containing `"` or `\` is
/// refused rather than escaped, since some servers do not unescape.
pub fn sign(
    parts: &http::request::Parts,
    key_id: &str,
    algorithm: HmacAlgorithm,
    headers: &[&str],
    secret: &[u8],
) -> Result<String, AuthError> {
    if key_id.is_empty() || key_id.contains(['"', '\\']) {
        return Err(AuthError::malformed(
            "key id must be non-empty without quotes",
        ));
    }
    let names: Vec<String> = headers.iter().map(|h| h.to_ascii_lowercase()).collect();
    if names.is_empty() || names.iter().any(|n| n.is_empty() || n.contains(['"', ' '])) {
        return Err(AuthError::malformed("bad list of headers to sign"));
    }
    let created = names.iter().any(|n| n == "(created)").then(unix_now);
    let signing_string = signing_string(parts, &names, created, None)?;
    let signature = B64.encode(mac(algorithm, secret, signing_string.as_bytes()));
    let mut value = format!(
        "Signature keyId=\"{key_id}\",algorithm=\"{}\",headers=\"{}\"",
        algorithm.name(),
        names.join(" ")
    );
    if let Some(created) = created {
        value.push_str(&format!(",created={created}"));
    }
    value.push_str(&format!(",signature=\"{signature}\""));
    Ok(value)
}

/// Formats `time` as an HTTP date (IMF-fixdate, RFC 9110), the form of the `Date`
/// header that signatures usually cover.
pub fn http_date(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SECRET: &[u8] = b"top secret";

    fn request(method: &str, uri: &str, date: SystemTime) -> http::request::Parts {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "api.example.com")
            .header("date", http_date(date))
            .header("x-trace", "a")
            .header("x-trace", " b ")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn signed(
        parts: &mut http::request::Parts,
        algorithm: HmacAlgorithm,
        headers: &[&str],
        secret: &[u8],
    ) {
        let value = sign(parts, "key-1", algorithm, headers, secret).unwrap();
        parts.headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(&value).unwrap(),
        );
    }

    fn check(
        parts: &http::request::Parts,
        secret: &[u8],
        settings: &HmacSettings,
    ) -> Result<(), AuthError> {
        let sig = parse(parts)?;
        verify(parts, &sig, secret, settings)
    }

    const ALL_HEADERS: &[&str] = &["(request-target)", "host", "date", "x-trace"];

    #[test]
    fn round_trip_for_every_algorithm() {
        for alg in HmacAlgorithm::ALL {
            let mut p = request("POST", "/orders/1?x=1&y=%20", SystemTime::now());
            signed(&mut p, alg, ALL_HEADERS, SECRET);
            let sig = parse(&p).unwrap();
            assert_eq!(sig.key_id, "key-1");
            assert_eq!(sig.algorithm, alg);
            assert_eq!(sig.headers, ALL_HEADERS);
            verify(&p, &sig, SECRET, &HmacSettings::default()).unwrap();
        }
    }

    #[test]
    fn signing_string_matches_the_draft_layout() {
        let p = request("GET", "/foo?param=value&pet=dog", UNIX_EPOCH);
        let names: Vec<String> = ALL_HEADERS.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            signing_string(&p, &names, None, None).unwrap(),
            "(request-target): get /foo?param=value&pet=dog\n\
             host: api.example.com\n\
             date: Thu, 01 Jan 1970 00:00:00 GMT\n\
             x-trace: a, b"
        );
    }

    #[test]
    fn signature_header_is_accepted_too() {
        let mut p = request("GET", "/a", SystemTime::now());
        let value = sign(&p, "key-1", HmacAlgorithm::Sha256, &["date"], SECRET).unwrap();
        let params = value.strip_prefix("Signature ").unwrap();
        p.headers
            .insert("signature", http::HeaderValue::from_str(params).unwrap());
        // Another scheme in Authorization does not hide the Signature header.
        p.headers
            .insert(http::header::AUTHORIZATION, "Bearer xyz".parse().unwrap());
        check(&p, SECRET, &HmacSettings::default()).unwrap();
    }

    #[test]
    fn default_header_list_is_date() {
        let date = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut p = request("GET", "/a", date);
        let mac = mac(
            HmacAlgorithm::Sha256,
            SECRET,
            format!("date: {}", http_date(date)).as_bytes(),
        );
        let header = format!(
            "Signature keyId=\"k\", algorithm=\"hmac-sha256\", signature=\"{}\"",
            B64.encode(mac)
        );
        p.headers
            .insert(http::header::AUTHORIZATION, header.parse().unwrap());
        let sig = parse(&p).unwrap();
        assert_eq!(sig.headers, ["date"]);
        let no_clock = HmacSettings {
            allowed_clock_skew: 0,
            ..HmacSettings::default()
        };
        verify(&p, &sig, SECRET, &no_clock).unwrap();
    }

    #[test]
    fn tampering_is_refused() {
        let mut p = request("GET", "/orders/1", SystemTime::now());
        signed(&mut p, HmacAlgorithm::Sha256, ALL_HEADERS, SECRET);

        let mut other_path = p.clone();
        other_path.uri = "/orders/2".parse().unwrap();
        assert_eq!(
            check(&other_path, SECRET, &HmacSettings::default()),
            Err(AuthError::invalid("signature mismatch"))
        );

        let mut other_query = p.clone();
        other_query.uri = "/orders/1?admin=1".parse().unwrap();
        assert!(matches!(
            check(&other_query, SECRET, &HmacSettings::default()),
            Err(AuthError::Invalid(_))
        ));

        let mut other_method = p.clone();
        other_method.method = http::Method::DELETE;
        assert!(matches!(
            check(&other_method, SECRET, &HmacSettings::default()),
            Err(AuthError::Invalid(_))
        ));

        let mut other_header = p.clone();
        other_header.headers.append("x-trace", "c".parse().unwrap());
        assert!(matches!(
            check(&other_header, SECRET, &HmacSettings::default()),
            Err(AuthError::Invalid(_))
        ));

        assert_eq!(
            check(&p, b"wrong secret", &HmacSettings::default()),
            Err(AuthError::invalid("signature mismatch"))
        );
        check(&p, SECRET, &HmacSettings::default()).unwrap();
    }

    #[test]
    fn missing_signed_header_is_invalid() {
        let mut p = request("GET", "/a", SystemTime::now());
        signed(&mut p, HmacAlgorithm::Sha256, ALL_HEADERS, SECRET);
        p.headers.remove("x-trace");
        assert_eq!(
            check(&p, SECRET, &HmacSettings::default()),
            Err(AuthError::invalid("signed header x-trace missing"))
        );
        // Signing itself refuses a header that is not there.
        assert!(sign(&p, "k", HmacAlgorithm::Sha256, &["x-none"], SECRET).is_err());
    }

    #[test]
    fn host_falls_back_to_the_uri_authority() {
        let mut p = request("GET", "https://api.example.com/a", SystemTime::now());
        p.headers.remove("host");
        signed(&mut p, HmacAlgorithm::Sha256, &["host", "date"], SECRET);
        check(&p, SECRET, &HmacSettings::default()).unwrap();
    }

    #[test]
    fn disallowed_algorithm_is_refused() {
        let mut p = request("GET", "/a", SystemTime::now());
        signed(&mut p, HmacAlgorithm::Sha1, ALL_HEADERS, SECRET);
        let settings = HmacSettings {
            allowed_algorithms: vec!["hmac-sha256".into(), "HMAC-SHA512".into()],
            ..HmacSettings::default()
        };
        assert_eq!(
            check(&p, SECRET, &settings),
            Err(AuthError::invalid("signature algorithm not allowed"))
        );
        let mut p = request("GET", "/a", SystemTime::now());
        signed(&mut p, HmacAlgorithm::Sha512, ALL_HEADERS, SECRET);
        check(&p, SECRET, &settings).unwrap();
    }

    #[test]
    fn algorithm_in_header_cannot_downgrade() {
        // Relabelling a SHA-256 signature as SHA-1 changes nothing but the check used.
        let mut p = request("GET", "/a", SystemTime::now());
        signed(&mut p, HmacAlgorithm::Sha256, &["date"], SECRET);
        let mut sig = parse(&p).unwrap();
        sig.algorithm = HmacAlgorithm::Sha1;
        assert!(verify(&p, &sig, SECRET, &HmacSettings::default()).is_err());
    }

    #[test]
    fn stale_or_future_date_is_refused() {
        let settings = HmacSettings::default();
        let mut stale = request(
            "GET",
            "/a",
            SystemTime::now() - Duration::from_secs(301 + 5),
        );
        signed(&mut stale, HmacAlgorithm::Sha256, ALL_HEADERS, SECRET);
        assert_eq!(check(&stale, SECRET, &settings), Err(AuthError::Expired));

        let mut future = request("GET", "/a", SystemTime::now() + Duration::from_secs(400));
        signed(&mut future, HmacAlgorithm::Sha256, ALL_HEADERS, SECRET);
        assert_eq!(
            check(&future, SECRET, &settings),
            Err(AuthError::NotYetValid)
        );

        // Within the skew is fine.
        let mut recent = request("GET", "/a", SystemTime::now() - Duration::from_secs(200));
        signed(&mut recent, HmacAlgorithm::Sha256, ALL_HEADERS, SECRET);
        check(&recent, SECRET, &settings).unwrap();

        // Skew 0 turns the check off.
        let off = HmacSettings {
            allowed_clock_skew: 0,
            ..HmacSettings::default()
        };
        check(&stale, SECRET, &off).unwrap();
    }

    #[test]
    fn freshness_needs_a_signed_time() {
        let mut p = request("GET", "/a", SystemTime::now());
        signed(&mut p, HmacAlgorithm::Sha256, &["(request-target)"], SECRET);
        assert_eq!(
            check(&p, SECRET, &HmacSettings::default()),
            Err(AuthError::invalid(
                "signature must cover the date header or (created)"
            ))
        );
        let off = HmacSettings {
            allowed_clock_skew: 0,
            ..HmacSettings::default()
        };
        check(&p, SECRET, &off).unwrap();

        // (created) serves as the signed time.
        let mut p = request("GET", "/a", SystemTime::now());
        signed(
            &mut p,
            HmacAlgorithm::Sha256,
            &["(request-target)", "(created)"],
            SECRET,
        );
        let sig = parse(&p).unwrap();
        assert!(sig.created.is_some());
        verify(&p, &sig, SECRET, &HmacSettings::default()).unwrap();
        let old = SignatureHeader {
            created: Some(unix_now() - 1000),
            ..sig.clone()
        };
        assert_eq!(
            check_freshness(&p, &old, 300, unix_now()),
            Err(AuthError::Expired)
        );
        let expired = SignatureHeader {
            expires: Some(unix_now() - 1000),
            ..sig
        };
        assert_eq!(
            check_freshness(&p, &expired, 0, unix_now()),
            Err(AuthError::Expired)
        );
    }

    #[test]
    fn unparsable_date_is_malformed() {
        let mut p = request("GET", "/a", SystemTime::now());
        p.headers.insert("date", "yesterday".parse().unwrap());
        signed(&mut p, HmacAlgorithm::Sha256, &["date"], SECRET);
        assert!(matches!(
            check(&p, SECRET, &HmacSettings::default()),
            Err(AuthError::Malformed(_))
        ));
    }

    #[test]
    fn parse_refuses_malformed_headers() {
        type Expect = fn(&AuthError) -> bool;
        let cases: &[(&[u8], Expect)] = &[
            (b"Signature ", |e| matches!(e, AuthError::Malformed(_))),
            (b"Signature keyId", |e| matches!(e, AuthError::Malformed(_))),
            (b"Signature keyId=\"k", |e| matches!(e, AuthError::Malformed(_))),
            (b"Signature keyId=\"k\"x,algorithm=\"hmac-sha256\"", |e| {
                matches!(e, AuthError::Malformed(_))
            }),
            (b"Signature =\"k\"", |e| matches!(e, AuthError::Malformed(_))),
            (
                b"Signature keyId=\"\",algorithm=\"hmac-sha256\",signature=\"AA==\"",
                |e| matches!(e, AuthError::Malformed(_)),
            ),
            (
                b"Signature keyId=\"k\",keyId=\"j\",algorithm=\"hmac-sha256\",signature=\"AA==\"",
                |e| matches!(e, AuthError::Malformed(_)),
            ),
            (b"Signature keyId=\"k\",signature=\"AA==\"", |e| {
                matches!(e, AuthError::Malformed(_))
            }),
            (
                b"Signature keyId=\"k\",algorithm=\"rsa-sha256\",signature=\"AA==\"",
                |e| matches!(e, AuthError::Invalid(_)),
            ),
            (b"Signature keyId=\"k\",algorithm=\"hmac-sha256\"", |e| {
                matches!(e, AuthError::Malformed(_))
            }),
            (
                b"Signature keyId=\"k\",algorithm=\"hmac-sha256\",signature=\"%%%\"",
                |e| matches!(e, AuthError::Malformed(_)),
            ),
            (
                b"Signature keyId=\"k\",algorithm=\"hmac-sha256\",headers=\"  \",signature=\"AA==\"",
                |e| matches!(e, AuthError::Malformed(_)),
            ),
            (
                b"Signature keyId=\"k\",algorithm=\"hmac-sha256\",created=soon,signature=\"AA==\"",
                |e| matches!(e, AuthError::Malformed(_)),
            ),
            (b"Signature keyId=\"\xc3\xa9\xff\"", |e| {
                matches!(e, AuthError::Malformed(_))
            }),
        ];
        for (value, expected) in cases {
            let mut p = request("GET", "/", SystemTime::now());
            p.headers.insert(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_bytes(value).unwrap(),
            );
            let err = parse(&p).unwrap_err();
            assert!(
                expected(&err),
                "{:?}: {err:?}",
                String::from_utf8_lossy(value)
            );
        }

        let p = request("GET", "/", SystemTime::now());
        assert_eq!(parse(&p), Err(AuthError::Missing));

        let many = vec!["x"; MAX_SIGNED_HEADERS + 1].join(" ");
        let value = format!(
            "Signature keyId=\"k\",algorithm=\"hmac-sha256\",headers=\"{many}\",signature=\"AA==\""
        );
        let mut p = request("GET", "/", SystemTime::now());
        p.headers
            .insert(http::header::AUTHORIZATION, value.parse().unwrap());
        assert!(matches!(parse(&p), Err(AuthError::Malformed(_))));
    }

    #[test]
    fn parse_accepts_spacing_escapes_and_unknown_parameters() {
        let value = "Signature  keyId = \"a\\\"b\" , algorithm=\"HMAC-SHA256\",\
                     headers=\"(Request-Target) Date\", extra=\"x\", signature=\"AA\", created=12";
        let mut p = request("GET", "/", SystemTime::now());
        p.headers
            .insert(http::header::AUTHORIZATION, value.parse().unwrap());
        let sig = parse(&p).unwrap();
        assert_eq!(sig.key_id, "a\"b");
        assert_eq!(sig.algorithm, HmacAlgorithm::Sha256);
        assert_eq!(sig.headers, ["(request-target)", "date"]);
        assert_eq!(sig.signature, [0]);
        assert_eq!(sig.created, Some(12));
        assert_eq!(sig.expires, None);
    }

    #[test]
    fn settings_deserialize_and_validate() {
        let s: HmacSettings = serde_json::from_str(r#"{"enabled":true}"#).unwrap();
        assert_eq!(
            s,
            HmacSettings {
                enabled: true,
                allowed_algorithms: vec![],
                allowed_clock_skew: 300
            }
        );
        let s: HmacSettings = serde_json::from_str(
            r#"{"enabled":true,"allowedAlgorithms":["hmac-sha256"],"allowedClockSkew":0}"#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.allowed_clock_skew, 0);
        assert!(serde_json::from_str::<HmacSettings>(r#"{"enabled":true,"skew":1}"#).is_err());
        let bad = HmacSettings {
            allowed_algorithms: vec!["hmac-md5".into()],
            ..HmacSettings::default()
        };
        assert!(bad.validate().unwrap_err().contains("hmac-md5"));
    }

    #[test]
    fn sign_refuses_unsafe_input() {
        let p = request("GET", "/", SystemTime::now());
        assert!(sign(&p, "a\"b", HmacAlgorithm::Sha256, &["date"], SECRET).is_err());
        assert!(sign(&p, "", HmacAlgorithm::Sha256, &["date"], SECRET).is_err());
        assert!(sign(&p, "k", HmacAlgorithm::Sha256, &[], SECRET).is_err());
        assert!(sign(&p, "k", HmacAlgorithm::Sha256, &["(expires)"], SECRET).is_err());
    }

    #[test]
    fn http_date_format() {
        assert_eq!(
            http_date(UNIX_EPOCH + Duration::from_secs(784_111_777)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }
}
