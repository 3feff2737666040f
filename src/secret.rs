//! Comparing secrets without timing differences: how long a comparison takes must not
//! tell a caller how much of a guess was right.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Whether `given` and `expected` are the same bytes, in time that depends on neither
/// their contents nor where they first differ. Both are digested first, so that unequal
/// lengths take the same path as equal ones.
pub fn same(given: &[u8], expected: &[u8]) -> bool {
    Sha256::digest(given)
        .as_slice()
        .ct_eq(Sha256::digest(expected).as_slice())
        .into()
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn equal_bytes_only() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(same(b"", b""));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"s3cret", b"s3cret-and-more"));
        assert!(!same(b"", b"x"));
    }
}
