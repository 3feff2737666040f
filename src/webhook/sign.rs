//! Webhook signatures: HMAC-SHA256 over `<timestamp>.<body>` with the receiver's secret,
//! sent as `Sluice-Signature: t=<unix seconds>,v1=<hex>`. The timestamp is inside the
//! signed text, so a receiver that rejects old timestamps rejects replays; each attempt
//! is signed afresh.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "sluice-signature";
/// The header that names the event.
pub const EVENT_HEADER: &str = "sluice-event";
/// The header that stays the same on every attempt at one delivery.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// How far a signature's timestamp may be from the receiver's clock, in seconds.
pub const TOLERANCE_SECS: i64 = 300;

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature header is not `t=<unix seconds>,v1=<hex>`")]
    Malformed,
    #[error("the signature's timestamp is more than {TOLERANCE_SECS} seconds from now")]
    Stale,
    #[error("the signature does not match the body")]
    Mismatch,
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The signature header's value for `body` sent at `timestamp` (unix seconds).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    format!("t={timestamp},v1={}", hex::encode(digest))
}

/// Checks a signature header against `body`: well formed, within the tolerance of `now`
/// (unix seconds), and made with `secret`. Any `v1` entry may match (a sender rotating
/// secrets sends two); the comparison takes constant time.
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: i64) -> Result<(), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => {
                timestamp = Some(t.parse::<i64>().map_err(|_| SignatureError::Malformed)?)
            }
            Some(("v1", v)) => {
                signatures.push(hex::decode(v).map_err(|_| SignatureError::Malformed)?)
            }
            // Unknown schemes are ignored, so newer senders stay readable.
            Some(_) => {}
            None => return Err(SignatureError::Malformed),
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    // `abs_diff`: a timestamp near i64's ends must not overflow the subtraction.
    if now.abs_diff(timestamp) > TOLERANCE_SECS.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    let expected = mac(secret, timestamp, body);
    if signatures
        .iter()
        .any(|s| expected.clone().verify_slice(s).is_ok())
    {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_and_verifies() {
        let header = sign(b"s3cret", 1_700_000_000, b"{\"a\":1}");
        assert!(header.starts_with("t=1700000000,v1="));
        assert_eq!(
            verify(b"s3cret", &header, b"{\"a\":1}", 1_700_000_100),
            Ok(())
        );
        assert_eq!(
            verify(b"other", &header, b"{\"a\":1}", 1_700_000_100),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", &header, b"{\"a\":2}", 1_700_000_100),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", &header, b"{\"a\":1}", 1_700_000_400),
            Err(SignatureError::Stale)
        );
        // Timestamps at i64's ends are stale, not an overflow.
        for t in [i64::MIN, i64::MAX] {
            let header = format!("t={t},v1={}", "00".repeat(32));
            assert_eq!(
                verify(b"k", &header, b"", 1_700_000_000),
                Err(SignatureError::Stale)
            );
        }
    }

    #[test]
    fn a_known_vector() {
        // HMAC-SHA256("key", "1.body"), as any HMAC library computes it.
        let header = sign(b"key", 1, b"body");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"key").unwrap();
        mac.update(b"1.body");
        let hex = hex::encode(mac.finalize().into_bytes());
        assert_eq!(header, format!("t=1,v1={hex}"));
    }

    #[test]
    fn rejects_malformed_headers() {
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=zz", "nonsense"] {
            assert_eq!(
                verify(b"k", bad, b"", 1),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
        // A second, rotated signature may match.
        let good = sign(b"k", 5, b"x");
        let two = format!("{},v1={}", good, "00".repeat(32));
        assert_eq!(verify(b"k", &two, b"x", 5), Ok(()));
    }
}
