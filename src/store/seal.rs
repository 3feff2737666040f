//! Sealing certificate private keys at rest: AES-256-GCM under a key derived from the
//! configured secret (SHA-256), a fresh random nonce per seal. The dashboard seals what
//! it stores; a gateway given the same secret opens it to serve TLS. The sealed text is
//! `v1:` followed by base64 of nonce and ciphertext, so a later scheme can sit beside it.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

const PREFIX: &str = "v1:";
const NONCE_LEN: usize = 12;

/// Seals and opens private keys with the dashboard's secret.
#[derive(Clone)]
pub struct Sealer {
    cipher: Aes256Gcm,
}

/// Encryption failed (only possible for inputs of gigabytes).
#[derive(Debug, thiserror::Error)]
#[error("cannot seal the private key")]
pub struct SealError;

/// A sealed key that cannot be opened: another secret sealed it, or it was altered.
#[derive(Debug, thiserror::Error)]
#[error("the sealed private key cannot be opened with this dashboard's secret")]
pub struct OpenError;

impl Sealer {
    pub fn new(secret: &str) -> Sealer {
        let key = Sha256::digest(secret.as_bytes());
        Sealer {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key)),
        }
    }

    /// The sealed text of `plain`.
    pub fn seal(&self, plain: &[u8]) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plain)
            .map_err(|_| SealError)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(out)
        ))
    }

    /// The plain bytes of a sealed text.
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, OpenError> {
        let data = sealed
            .strip_prefix(PREFIX)
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .ok_or(OpenError)?;
        if data.len() < NONCE_LEN {
            return Err(OpenError);
        }
        let (nonce, ciphertext) = data.split_at(NONCE_LEN);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| OpenError)
    }
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let sealer = Sealer::new("a-long-enough-secret");
        let sealed = sealer.seal(b"-----BEGIN PRIVATE KEY-----").unwrap();
        assert!(sealed.starts_with("v1:"));
        assert!(!sealed.contains("PRIVATE"));
        assert_ne!(sealed, sealer.seal(b"-----BEGIN PRIVATE KEY-----").unwrap());
        assert_eq!(
            sealer.open(&sealed).unwrap(),
            b"-----BEGIN PRIVATE KEY-----"
        );
        assert!(Sealer::new("another-long-secret").open(&sealed).is_err());
        for bad in ["", "v1:", "v1:!!", "v2:AAAA", "v1:AAAA"] {
            assert!(sealer.open(bad).is_err(), "{bad}");
        }
    }
}
