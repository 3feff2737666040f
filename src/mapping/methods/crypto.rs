//! Password hash checks and AES encryption.

use aes::cipher::block_padding::NoPadding;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, StreamCipher};
use aes_gcm::aead::{Aead, KeyInit};

use super::raw;
use crate::mapping::exec::{own, V};
use crate::mapping::spec::{ex, method, p, Args, MethodSpec, Res};
use crate::value::Value;

const STRINGS: &str = "String Manipulation";
const ENCRYPTION: &str = "Encoding and Encryption";

/// The key and nonce of the reference's AES examples (NIST SP 800-38A test vectors).
macro_rules! aes_let {
    () => {
        "let key = \"2b7e151628aed2a6abf7158809cf4f3c\".decode(\"hex\")\nlet vector = \"f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff\".decode(\"hex\")\n"
    };
}

pub static SPECS: &[MethodSpec] = &[
    method(
        "compare_argon2",
        STRINGS,
        "Whether the string is the secret behind an Argon2 hash in PHC form (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`); the hash carries its own variant and parameters.",
        &[p("hashed_secret")],
        &[
            ex(
                r#"root.match = this.secret.compare_argon2("$argon2id$v=19$m=4096,t=3,p=1$c2FsdHktbWNzYWx0ZmFjZQ$RMUMwgtS32/mbszd+ke4o4Ej1jFpYiUqY6MHWa69X7Y")"#,
                r#"{"secret":"there-are-many-blobs-in-the-sea"}"#,
                r#"{"match":true}"#,
            ),
            ex(
                r#"root.match = this.secret.compare_argon2("$argon2id$v=19$m=4096,t=3,p=1$c2FsdHktbWNzYWx0ZmFjZQ$RMUMwgtS32/mbszd+ke4o4Ej1jFpYiUqY6MHWa69X7Y")"#,
                r#"{"secret":"will-i-ever-find-love"}"#,
                r#"{"match":false}"#,
            ),
            ex(
                r#"root.match = this.secret.compare_argon2("not a hash")"#,
                r#"{"secret":"x"}"#,
                "error:invalid Argon2 hash",
            ),
        ],
        compare_argon2,
    ),
    method(
        "compare_bcrypt",
        STRINGS,
        "Whether the string is the secret behind a bcrypt hash (`$2a$`, `$2b$`, `$2x$` or `$2y$`).",
        &[p("hashed_secret")],
        &[
            ex(
                r#"root.match = this.secret.compare_bcrypt("$2y$10$Dtnt5NNzVtMCOZONT705tOcS8It6krJX8bEjnDJnwxiFKsz1C.3Ay")"#,
                r#"{"secret":"there-are-many-blobs-in-the-sea"}"#,
                r#"{"match":true}"#,
            ),
            ex(
                r#"root.match = this.secret.compare_bcrypt("$2y$10$Dtnt5NNzVtMCOZONT705tOcS8It6krJX8bEjnDJnwxiFKsz1C.3Ay")"#,
                r#"{"secret":"will-i-ever-find-love"}"#,
                r#"{"match":false}"#,
            ),
            ex(
                r#"root.match = this.secret.compare_bcrypt("$2y$10$short")"#,
                r#"{"secret":"x"}"#,
                "error:invalid bcrypt hash",
            ),
        ],
        compare_bcrypt,
    ),
    method(
        "encrypt_aes",
        ENCRYPTION,
        "Encrypts a string or bytes with AES, giving bytes. `scheme` is `ctr`, `ofb` or `cbc` (a 16-byte `iv`; `cbc` adds no padding, so the input must be a whole number of 16-byte blocks) or `gcm` (a 12-byte nonce; the 16-byte tag follows the ciphertext). The key is 16, 24 or 32 bytes.",
        &[p("scheme"), p("key"), p("iv")],
        &[
            ex(
                concat!(aes_let!(), r#"root.encrypted = this.value.encrypt_aes("ctr", $key, $vector).encode("hex")"#),
                r#"{"value":"hello world!"}"#,
                r#"{"encrypted":"84e9b31ff7400bdf80be7254"}"#,
            ),
            ex(
                concat!(aes_let!(), r#"root.encrypted = this.value.encrypt_aes("ofb", $key, $vector).encode("hex")"#),
                r#"{"value":"hello world!"}"#,
                r#"{"encrypted":"84e9b31ff7400bdf80be7254"}"#,
            ),
            ex(
                concat!(aes_let!(), r#"root.encrypted = this.value.decode("hex").encrypt_aes("cbc", $key, "000102030405060708090a0b0c0d0e0f".decode("hex")).encode("hex")"#),
                r#"{"value":"6bc1bee22e409f96e93d7e117393172a"}"#,
                r#"{"encrypted":"7649abac8119b246cee98e9b12e9197d"}"#,
            ),
            ex(
                concat!(aes_let!(), r#"root = this.value.encrypt_aes("gcm", $key, "0123456789ab").decrypt_aes("gcm", $key, "0123456789ab").string()"#),
                r#"{"value":"hello world!"}"#,
                "hello world!",
            ),
            ex(
                concat!(aes_let!(), r#"root = this.value.encrypt_aes("cbc", $key, $vector)"#),
                r#"{"value":"hello world!"}"#,
                "error:plaintext is not a multiple of the block size",
            ),
        ],
        encrypt_aes,
    ),
    method(
        "decrypt_aes",
        ENCRYPTION,
        "Decrypts what `encrypt_aes` made with the same scheme, key and iv, giving bytes; for `gcm` a tag that does not match is an error.",
        &[p("scheme"), p("key"), p("iv")],
        &[
            ex(
                concat!(aes_let!(), r#"root.decrypted = this.value.decode("hex").decrypt_aes("ctr", $key, $vector).string()"#),
                r#"{"value":"84e9b31ff7400bdf80be7254"}"#,
                r#"{"decrypted":"hello world!"}"#,
            ),
            ex(
                concat!(aes_let!(), r#"root = this.value.encrypt_aes("cbc", $key, $vector).decrypt_aes("cbc", $key, $vector).string()"#),
                r#"{"value":"sixteen byte str"}"#,
                "sixteen byte str",
            ),
            ex(
                concat!(aes_let!(), r#"root = this.value.encrypt_aes("cbc", $key, $vector).decrypt_aes("cbc", $key, $vector).type()"#),
                r#"{"value":"sixteen byte str"}"#,
                "bytes",
            ),
            ex(
                concat!(aes_let!(), r#"root = "tampered and tagged".decrypt_aes("gcm", $key, "0123456789ab")"#),
                "{}",
                "error:gcm decryption failed",
            ),
        ],
        decrypt_aes,
    ),
];

fn compare_argon2<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    use argon2::password_hash::{Error, PasswordHash, PasswordVerifier};
    let secret = raw(v)?;
    let hashed = args.str(0)?;
    let parsed = PasswordHash::new(hashed).map_err(|e| format!("invalid Argon2 hash: {e}"))?;
    // The PHC string names the variant, version and costs; verifying uses those.
    match argon2::Argon2::default().verify_password(&secret, &parsed) {
        Ok(()) => own(true),
        Err(Error::Password) => own(false),
        Err(e) => Err(format!("invalid Argon2 hash: {e}")),
    }
}

fn compare_bcrypt<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let secret = raw(v)?;
    let hashed = args.str(0)?;
    bcrypt::verify(&*secret, hashed)
        .map(|b| V::Own(Value::Bool(b)))
        .map_err(|e| format!("invalid bcrypt hash: {e}"))
}

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Encrypt,
    Decrypt,
}

/// Runs `$body` with `$C` bound to the AES variant the key length selects.
macro_rules! with_aes {
    ($key:expr, $C:ident => $body:expr) => {
        match $key.len() {
            16 => {
                type $C = aes::Aes128;
                $body
            }
            24 => {
                type $C = aes::Aes192;
                $body
            }
            32 => {
                type $C = aes::Aes256;
                $body
            }
            n => Err(format!(
                "crypto/aes: invalid key size {n} (16, 24 or 32 bytes)"
            )),
        }
    };
}

fn aes_crypt(scheme: &str, key: &[u8], iv: &[u8], data: &[u8], dir: Dir) -> Res<Vec<u8>> {
    let want_iv = match scheme {
        "ctr" | "ofb" | "cbc" => 16,
        "gcm" => 12,
        other => {
            let what = match dir {
                Dir::Encrypt => "encryption",
                Dir::Decrypt => "decryption",
            };
            return Err(format!(
                "unrecognized {what} type: {other} (expected ctr, gcm, ofb or cbc)"
            ));
        }
    };
    if iv.len() != want_iv {
        // The reference's words for a block-sized iv of the wrong length.
        return Err(if want_iv == 16 {
            format!("the key must match the initialisation vector size (the {scheme} iv is 16 bytes, not {})", iv.len())
        } else {
            format!(
                "the {scheme} nonce must be {want_iv} bytes, got {}",
                iv.len()
            )
        });
    }
    let bad_key = |e: aes::cipher::InvalidLength| e.to_string();
    with_aes!(key, C => {
        let mut buf = data.to_vec();
        match scheme {
            "ctr" => {
                ctr::Ctr128BE::<C>::new_from_slices(key, iv)
                    .map_err(bad_key)?
                    .apply_keystream(&mut buf);
                Ok(buf)
            }
            "ofb" => {
                ofb::Ofb::<C>::new_from_slices(key, iv)
                    .map_err(bad_key)?
                    .apply_keystream(&mut buf);
                Ok(buf)
            }
            "cbc" => {
                // No padding, as in the reference: the caller pads.
                if buf.len() % 16 != 0 {
                    return Err(match dir {
                        Dir::Encrypt => "plaintext is not a multiple of the block size",
                        Dir::Decrypt => "ciphertext is not a multiple of the block size",
                    }
                    .into());
                }
                let n = buf.len();
                match dir {
                    Dir::Encrypt => {
                        cbc::Encryptor::<C>::new_from_slices(key, iv)
                            .map_err(bad_key)?
                            .encrypt_padded_mut::<NoPadding>(&mut buf, n)
                            .map_err(|e| e.to_string())?;
                    }
                    Dir::Decrypt => {
                        cbc::Decryptor::<C>::new_from_slices(key, iv)
                            .map_err(bad_key)?
                            .decrypt_padded_mut::<NoPadding>(&mut buf)
                            .map_err(|e| e.to_string())?;
                    }
                }
                Ok(buf)
            }
            _ => {
                let gcm = aes_gcm::AesGcm::<C, aes_gcm::aead::consts::U12>::new_from_slice(key)
                    .map_err(|e| e.to_string())?;
                let nonce = aes_gcm::Nonce::from_slice(iv);
                match dir {
                    Dir::Encrypt => gcm
                        .encrypt(nonce, data)
                        .map_err(|_| "gcm encryption failed".to_string()),
                    Dir::Decrypt => gcm.decrypt(nonce, data).map_err(|_| {
                        "gcm decryption failed: message authentication failed".to_string()
                    }),
                }
            }
        }
    })
}

fn aes_method<'b>(v: &'b Value, args: &Args<'_>, dir: Dir) -> Res<V<'b>> {
    let data = raw(v)?;
    let scheme = args.str(0)?;
    let key = raw(args.get(1)).map_err(|e| format!("key: {e}"))?;
    let iv = raw(args.get(2)).map_err(|e| format!("iv: {e}"))?;
    let out = aes_crypt(scheme, &key, &iv, &data, dir)?;
    own(Value::Bytes(out.into()))
}

fn encrypt_aes<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    aes_method(v, args, Dir::Encrypt)
}

fn decrypt_aes<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    aes_method(v, args, Dir::Decrypt)
}

#[cfg(test)]
mod tests {
    use super::{aes_crypt, Dir};

    const KEY: &[u8] = b"0123456789abcdef";

    #[test]
    fn every_scheme_round_trips_with_every_key_size() {
        for key in [
            KEY,
            b"0123456789abcdef01234567",
            b"0123456789abcdef0123456789abcdef",
        ] {
            for (scheme, iv) in [
                ("ctr", &b"fedcba9876543210"[..]),
                ("ofb", b"fedcba9876543210"),
                ("cbc", b"fedcba9876543210"),
                ("gcm", b"nonce-twelve"),
            ] {
                let plain = b"thirty-two bytes of plain text!!";
                let sealed = aes_crypt(scheme, key, iv, plain, Dir::Encrypt).unwrap();
                assert_ne!(&sealed[..plain.len()], &plain[..], "{scheme}");
                let opened = aes_crypt(scheme, key, iv, &sealed, Dir::Decrypt).unwrap();
                assert_eq!(opened, plain, "{scheme} with a {}-byte key", key.len());
            }
        }
    }

    #[test]
    fn bad_keys_ivs_and_ciphertexts_are_errors() {
        let iv = b"fedcba9876543210";
        let err = |r: Result<Vec<u8>, String>| r.unwrap_err();
        assert!(err(aes_crypt("ctr", b"short", iv, b"x", Dir::Encrypt))
            .contains("crypto/aes: invalid key size 5"));
        assert!(err(aes_crypt("ctr", KEY, b"short", b"x", Dir::Encrypt))
            .contains("the key must match the initialisation vector size"));
        assert!(err(aes_crypt("gcm", KEY, iv, b"x", Dir::Encrypt)).contains("12 bytes"));
        assert!(err(aes_crypt("ecb", KEY, iv, b"x", Dir::Encrypt))
            .contains("unrecognized encryption type: ecb"));
        assert!(err(aes_crypt("cbc", KEY, iv, b"odd", Dir::Decrypt)).contains("multiple"));
        // Too short to hold a tag, and a wrong tag.
        assert!(err(aes_crypt("gcm", KEY, b"nonce-twelve", b"x", Dir::Decrypt)).contains("gcm"));
        let mut sealed = aes_crypt("gcm", KEY, b"nonce-twelve", b"hi", Dir::Encrypt).unwrap();
        sealed[0] ^= 1;
        assert!(err(aes_crypt(
            "gcm",
            KEY,
            b"nonce-twelve",
            &sealed,
            Dir::Decrypt
        ))
        .contains("authentication"));
    }
}
