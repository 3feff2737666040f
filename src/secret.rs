//! Secrets checked without telling a caller anything: compared without timing
//! differences (how long a comparison takes must not tell how much of a guess was
//! right), and passwords stored only as slow salted hashes.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
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

/// Hashes `password` for storage as an Argon2id PHC string
/// (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`) with a fresh random salt and the
/// crate's default cost parameters (the OWASP-recommended minimum).
///
/// Argon2 refuses only passwords longer than 4 GiB; for those the result is an empty
/// string, which [`verify_password`] never accepts, so the failure is closed rather
/// than a panic.
pub fn hash_password(password: &str) -> String {
    let salt_bytes: [u8; 16] = rand::random();
    let Ok(salt) = SaltString::encode_b64(&salt_bytes) else {
        return String::new();
    };
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .unwrap_or_default()
}

/// True when `password` matches the PHC string `phc` made by [`hash_password`].
///
/// The cost parameters and salt come from `phc`, so hashes stored with older
/// parameters keep verifying. The final comparison is constant-time inside the
/// `password-hash` crate. A `phc` that does not parse, or names another algorithm,
/// verifies nothing.
pub fn verify_password(password: &str, phc: &str) -> bool {
    let Ok(hash) = PasswordHash::new(phc) else {
        return false;
    };
    Argon2::default()
        .verify_password(password.as_bytes(), &hash)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::{hash_password, same, verify_password};

    #[test]
    fn equal_bytes_only() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(same(b"", b""));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"s3cret", b"s3cret-and-more"));
        assert!(!same(b"", b"x"));
    }

    #[test]
    fn password_hash_round_trip() {
        let phc = hash_password("correct horse");
        assert!(phc.starts_with("$argon2id$"), "{phc}");
        assert!(verify_password("correct horse", &phc));
        assert!(!verify_password("correct horsE", &phc));
        assert!(!verify_password("", &phc));
        // Salts differ, so equal passwords give different hashes that both verify.
        let other = hash_password("correct horse");
        assert_ne!(phc, other);
        assert!(verify_password("correct horse", &other));
    }

    #[test]
    fn unusable_hashes_verify_nothing() {
        assert!(!verify_password("x", ""));
        assert!(!verify_password("x", "plaintext"));
        assert!(!verify_password(
            "x",
            "$argon2id$v=19$m=19456,t=2,p=1$garbage"
        ));
        assert!(!verify_password(
            "x",
            "$pbkdf2-sha256$i=1000$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
        ));
    }
}
