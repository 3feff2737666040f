//! Encoding, hashing and compression of strings and bytes.

use std::io::{Read, Write};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};

use super::{raw, text};
use crate::mapping::exec::{own, V};
use crate::mapping::spec::{ex, method, opt, p, Args, Default, MethodSpec, Res};
use crate::value::Value;

const CAT: &str = "Encoding and Encryption";

/// Decompressed output is capped so a small hostile payload cannot exhaust memory.
const MAX_INFLATE: u64 = 256 << 20;

pub static SPECS: &[MethodSpec] = &[
    method("encode", CAT, "Encodes with `base64`, `base64url`, `base64rawurl`, `hex` or `ascii85`-free schemes.", &[p("scheme")],
        &[ex(r#"root.e = this.s.encode("base64")"#, r#"{"s":"hello?"}"#, r#"{"e":"aGVsbG8/"}"#),
          ex(r#"root.e = this.s.encode("base64url")"#, r#"{"s":"hello?"}"#, r#"{"e":"aGVsbG8_"}"#),
          ex(r#"root.e = this.s.encode("hex")"#, r#"{"s":"hi"}"#, r#"{"e":"6869"}"#)], encode),
    method("decode", CAT, "Decodes from `base64`, `base64url`, `base64rawurl` or `hex`, giving bytes.", &[p("scheme")],
        &[ex(r#"root.d = this.s.decode("base64").string()"#, r#"{"s":"aGVsbG8/"}"#, r#"{"d":"hello?"}"#),
          ex(r#"root.d = this.s.decode("hex").string()"#, r#"{"s":"6869"}"#, r#"{"d":"hi"}"#)], decode),
    method("hash", CAT,
        "Hashes with `sha1`, `sha256`, `sha512`, `md5`, `xxhash64`, `crc32`, or `hmac_sha1`/`hmac_sha256`/`hmac_sha512` with a key; gives bytes (xxhash64 and crc32 give numbers' bytes).",
        &[p("algorithm"), opt("key", Default::Absent)],
        &[ex(r#"root.h = this.s.hash("sha256").encode("hex")"#, r#"{"s":"hello world"}"#,
             r#"{"h":"b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"}"#),
          ex(r#"root.h = this.s.hash("md5").encode("hex")"#, r#"{"s":"hello world"}"#, r#"{"h":"5eb63bbbe01eeed093cb22bb8f5acdc3"}"#),
          ex(r#"root.h = this.s.hash("hmac_sha256", "key").encode("hex")"#, r#"{"s":"hello world"}"#,
             r#"{"h":"0ba06f1f9a6300461e43454535dc3c4223e47b1d357073d7536eae90ec095be1"}"#),
          ex(r#"root.h = this.s.hash("fnv32").encode("hex")"#, r#"{"s":"hello"}"#, r#"{"h":"b6fa7167"}"#),
          ex(r#"root.h = this.s.hash("crc32").encode("hex")"#, r#"{"s":"hello world"}"#, r#"{"h":"0d4a1185"}"#),
          ex(r#"root.h = this.s.hash("xxhash64").encode("hex")"#, r#"{"s":"hello world"}"#, r#"{"h":"45ab6734b21e6968"}"#)], hash),
    method("compress", CAT, "Compresses with `gzip`, `zlib` or `flate`, giving bytes.",
        &[p("algorithm"), opt("level", Default::Int(6))],
        &[ex(r#"root.r = this.s.compress("gzip").decompress("gzip").string()"#, r#"{"s":"hello"}"#, r#"{"r":"hello"}"#)], compress),
    method("decompress", CAT, "Decompresses `gzip`, `zlib` or `flate` data, giving bytes.", &[p("algorithm")],
        &[ex(r#"root.r = this.s.compress("zlib").decompress("zlib").string()"#, r#"{"s":"hello"}"#, r#"{"r":"hello"}"#)], decompress),
    method("crc32", CAT, "The CRC-32 (IEEE) checksum as a number.", &[],
        &[ex("root.c = this.s.crc32()", r#"{"s":"hello world"}"#, r#"{"c":222957957}"#)], crc32),
    method("xxhash64", CAT, "The xxHash64 of the value as a number (may be negative: it is stored signed).", &[],
        &[], xxhash64),
];

fn b64(scheme: &str) -> Option<&'static base64::engine::GeneralPurpose> {
    use base64::engine::general_purpose as gp;
    Some(match scheme {
        "base64" => &gp::STANDARD,
        "base64url" => &gp::URL_SAFE,
        "base64rawurl" => &gp::URL_SAFE_NO_PAD,
        "base64raw" => &gp::STANDARD_NO_PAD,
        _ => return None,
    })
}

fn encode<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let data = raw(v)?;
    let scheme = args.str(0)?;
    if let Some(e) = b64(scheme) {
        return own(e.encode(&data));
    }
    match scheme {
        "hex" => own(hex::encode(&data)),
        other => Err(format!("unknown encoding scheme {other:?}")),
    }
}

fn decode<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let data = raw(v)?;
    let scheme = args.str(0)?;
    let out = if let Some(e) = b64(scheme) {
        e.decode(&data)
            .map_err(|e| format!("failed to decode {scheme}: {e}"))?
    } else if scheme == "hex" {
        hex::decode(&data).map_err(|e| format!("failed to decode hex: {e}"))?
    } else {
        return Err(format!("unknown encoding scheme {scheme:?}"));
    };
    own(Value::Bytes(out.into()))
}

fn hmac_of<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Res<Vec<u8>> {
    let mut m = <M as Mac>::new_from_slice(key).map_err(|e| e.to_string())?;
    m.update(data);
    Ok(m.finalize().into_bytes().to_vec())
}

fn hash<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let data = raw(v)?;
    let key = || -> Res<Vec<u8>> {
        if !args.given(1) {
            return Err("this algorithm needs a key".into());
        }
        Ok(raw(args.get(1))?.into_owned())
    };
    let out: Vec<u8> = match args.str(0)? {
        "sha1" => Sha1::digest(&data).to_vec(),
        "sha256" => Sha256::digest(&data).to_vec(),
        "sha512" => Sha512::digest(&data).to_vec(),
        "md5" => md5::Md5::digest(&data).to_vec(),
        "xxhash64" => xxhash_rust::xxh64::xxh64(&data, 0).to_be_bytes().to_vec(),
        "crc32" => crc32fast::hash(&data).to_be_bytes().to_vec(),
        "fnv32" => fnv32(&data).to_be_bytes().to_vec(),
        "hmac_sha1" => hmac_of::<Hmac<Sha1>>(&key()?, &data)?,
        "hmac_sha256" => hmac_of::<Hmac<Sha256>>(&key()?, &data)?,
        "hmac_sha512" => hmac_of::<Hmac<Sha512>>(&key()?, &data)?,
        other => return Err(format!("unknown hash algorithm {other:?}")),
    };
    own(Value::Bytes(out.into()))
}

fn compress<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let data = raw(v)?;
    let level = flate2::Compression::new(args.int(1)?.clamp(0, 9) as u32);
    let io = |e: std::io::Error| e.to_string();
    let out = match args.str(0)? {
        "gzip" => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), level);
            w.write_all(&data).map_err(io)?;
            w.finish().map_err(io)?
        }
        "zlib" => {
            let mut w = flate2::write::ZlibEncoder::new(Vec::new(), level);
            w.write_all(&data).map_err(io)?;
            w.finish().map_err(io)?
        }
        "flate" | "deflate" => {
            let mut w = flate2::write::DeflateEncoder::new(Vec::new(), level);
            w.write_all(&data).map_err(io)?;
            w.finish().map_err(io)?
        }
        other => return Err(format!("unknown compression algorithm {other:?}")),
    };
    own(Value::Bytes(out.into()))
}

fn decompress<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let data = raw(v)?;
    let mut out = Vec::new();
    let io = |e: std::io::Error| format!("failed to decompress: {e}");
    match args.str(0)? {
        "gzip" => flate2::read::MultiGzDecoder::new(&data[..])
            .take(MAX_INFLATE)
            .read_to_end(&mut out)
            .map_err(io)?,
        "zlib" => flate2::read::ZlibDecoder::new(&data[..])
            .take(MAX_INFLATE)
            .read_to_end(&mut out)
            .map_err(io)?,
        "flate" | "deflate" => flate2::read::DeflateDecoder::new(&data[..])
            .take(MAX_INFLATE)
            .read_to_end(&mut out)
            .map_err(io)?,
        other => return Err(format!("unknown compression algorithm {other:?}")),
    };
    own(Value::Bytes(out.into()))
}

/// FNV-1 (32-bit), the variant Go's `hash/fnv.New32` computes.
fn fnv32(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, b| {
        h.wrapping_mul(0x0100_0193) ^ u32::from(*b)
    })
}

fn crc32<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(crc32fast::hash(&raw(v)?) as i64)
}

fn xxhash64<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(xxhash_rust::xxh64::xxh64(text(v)?.as_bytes(), 0) as i64)
}
