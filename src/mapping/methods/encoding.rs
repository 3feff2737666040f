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
    method("encode", CAT, "Encodes with `base64`, `base64url`, `base64rawurl`, `base64raw`, `hex`, `ascii85` or `z85` (whose input must be a multiple of 4 bytes), giving a string.", &[p("scheme")],
        &[ex(r#"root.e = this.s.encode("base64")"#, r#"{"s":"hello?"}"#, r#"{"e":"aGVsbG8/"}"#),
          ex(r#"root.e = this.s.encode("base64url")"#, r#"{"s":"hello?"}"#, r#"{"e":"aGVsbG8_"}"#),
          ex(r#"root.e = this.s.encode("hex")"#, r#"{"s":"hi"}"#, r#"{"e":"6869"}"#),
          ex(r#"root.encoded = content().encode("ascii85")"#, "this is totally unstructured data",
             r#"{"encoded":"FD,B0+DGm>FDl80Ci\"A>F`)8BEckl6F`M&(+Cno&@/"}"#),
          ex(r#"root.e = "86 4f d2 6f b5 59 f7 5b".replace_all(" ", "").decode("hex").encode("z85")"#, "{}", r#"{"e":"HelloWorld"}"#)], encode),
    method("decode", CAT, "Decodes from `base64`, `base64url`, `base64rawurl`, `base64raw`, `hex`, `ascii85` or `z85`, giving bytes.", &[p("scheme")],
        &[ex(r#"root.d = this.s.decode("base64").string()"#, r#"{"s":"aGVsbG8/"}"#, r#"{"d":"hello?"}"#),
          ex(r#"root.d = this.s.decode("hex").string()"#, r#"{"s":"6869"}"#, r#"{"d":"hi"}"#),
          ex(r#"root = this.encoded.decode("ascii85")"#, r#"{"encoded":"FD,B0+DGm>FDl80Ci\"A>F`)8BEckl6F`M&(+Cno&@/"}"#,
             "this is totally unstructured data"),
          ex(r#"root = "HelloWorld".decode("z85").encode("hex")"#, "{}", "864fd26fb559f75b"),
          ex(r#"root = "abc~".decode("ascii85")"#, "{}", "error:invalid ascii85")], decode),
    method("hash", CAT,
        "Hashes with `sha1`, `sha256`, `sha512`, `md5`, `xxhash64`, `crc32`, `fnv32`, or `hmac_sha1`/`hmac_sha256`/`hmac_sha512` with a key; gives bytes (crc32 gives its number's big-endian bytes; xxhash64 and fnv32 give their number in decimal digits, as Bloblang does: `.number()` reads it). `polynomial` picks the crc32 table: `IEEE` (the default), `Castagnoli` or `Koopman`.",
        &[p("algorithm"), opt("key", Default::Absent), opt("polynomial", Default::Str("IEEE"))],
        &[ex(r#"root.h = this.s.hash("sha256").encode("hex")"#, r#"{"s":"hello world"}"#,
             r#"{"h":"b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"}"#),
          ex(r#"root.h = this.s.hash("md5").encode("hex")"#, r#"{"s":"hello world"}"#, r#"{"h":"5eb63bbbe01eeed093cb22bb8f5acdc3"}"#),
          ex(r#"root.h = this.s.hash("hmac_sha256", "key").encode("hex")"#, r#"{"s":"hello world"}"#,
             r#"{"h":"0ba06f1f9a6300461e43454535dc3c4223e47b1d357073d7536eae90ec095be1"}"#),
          ex(r#"root.h = this.s.hash("fnv32").string()"#, r#"{"s":"hello"}"#, r#"{"h":"3069866343"}"#),
          ex(r#"root.h = this.s.hash("fnv32").number()"#, r#"{"s":"hello"}"#, r#"{"h":3069866343}"#),
          ex(r#"root.h = this.s.hash("crc32").encode("hex")"#, r#"{"s":"hello world"}"#, r#"{"h":"0d4a1185"}"#),
          ex(r#"root.h = this.s.hash("xxhash64").string()"#, r#"{"s":"hello world"}"#, r#"{"h":"5020219685658847592"}"#),
          ex("root.h1 = this.value.hash(\"sha1\").encode(\"hex\")\nroot.h2 = this.value.hash(\"hmac_sha1\",\"static-key\").encode(\"hex\")",
             r#"{"value":"hello world"}"#, r#"{"h1":"2aae6c35c94fcfb415dbe95f408b9ce91ee846ed","h2":"d87e5f068fa08fe90bb95bc7c8344cb809179d76"}"#),
          ex("root.h1 = this.value.hash(algorithm: \"crc32\", polynomial: \"Castagnoli\").encode(\"hex\")\nroot.h2 = this.value.hash(algorithm: \"crc32\", polynomial: \"Koopman\").encode(\"hex\")",
             r#"{"value":"hello world"}"#, r#"{"h1":"c99465aa","h2":"df373d3c"}"#),
          ex(r#"root = "x".hash(algorithm: "crc32", polynomial: "nope")"#, "{}", "error:unknown crc32 polynomial")], hash),
    method("compress", CAT,
        "Compresses with `gzip`, `pgzip` (the same gzip format), `zlib`, `flate`, `lz4` (frame format), `snappy` (block format) or `zstd`, giving bytes. `level` applies to the gzip family (0 to 9; -1 is the default) and is ignored by the others.",
        &[p("algorithm"), opt("level", Default::Int(-1))],
        &[ex(r#"root.r = this.s.compress("gzip").decompress("gzip").string()"#, r#"{"s":"hello"}"#, r#"{"r":"hello"}"#),
          ex(r#"root.compressed = content().compress("lz4").encode("base64")"#, "hello world I love space",
             r#"{"compressed":"BCJNGGRwuRgAAIBoZWxsbyB3b3JsZCBJIGxvdmUgc3BhY2UAAAAAGoETLg=="}"#),
          ex(r#"root = ["pgzip", "zlib", "flate", "lz4", "snappy", "zstd"].map_each(a -> "hello hello hello hello".compress(a).decompress(a).string())"#,
             "{}", r#"["hello hello hello hello","hello hello hello hello","hello hello hello hello","hello hello hello hello","hello hello hello hello","hello hello hello hello"]"#),
          ex(r#"root = "x".compress("lzma")"#, "{}", "error:compression type not recognised: lzma")], compress),
    method("decompress", CAT, "Decompresses `gzip`, `pgzip`, `zlib`, `flate`, `lz4`, `snappy`, `zstd` or `bzip2` data, giving bytes. Output stops at 256 MiB.", &[p("algorithm")],
        &[ex(r#"root.r = this.s.compress("zlib").decompress("zlib").string()"#, r#"{"s":"hello"}"#, r#"{"r":"hello"}"#),
          ex(r#"root.result = this.compressed.decode("base64").decompress("lz4").string()"#,
             r#"{"compressed":"BCJNGGRwuRgAAIBoZWxsbyB3b3JsZCBJIGxvdmUgc3BhY2UAAAAAGoETLg=="}"#, r#"{"result":"hello world I love space"}"#),
          ex(r#"root = this.b.decode("base64").decompress("bzip2").string()"#,
             r#"{"b":"QlpoOTFBWSZTWRkxZT0AAACBAAJEoAAhmmgzTQczi7kinChIDJiynoA="}"#, "hello"),
          ex(r#"root = "not compressed".decompress("zstd")"#, "{}", "error:failed to decompress")], decompress),
    method("uuid_v5", CAT,
        "The version 5 (SHA-1, name-based) UUID of the string in a namespace: `dns`, `url`, `oid`, `x500`, any UUID, or the nil UUID when empty or not given.",
        &[opt("ns", Default::Absent)],
        &[ex(r#"root.id = "example".uuid_v5()"#, "{}", r#"{"id":"feb54431-301b-52bb-a6dd-e1e93e81bb9e"}"#),
          ex(r#"root.id = "example".uuid_v5("x500")"#, "{}", r#"{"id":"0cbd148f-768f-52fe-a1cd-0c4e6c65de91"}"#),
          ex(r#"root.id = "example".uuid_v5("77f836b7-9f61-46c0-851e-9b6ca3535e69")"#, "{}", r#"{"id":"a0d220eb-18f1-50ca-b888-86aa5b604edf"}"#),
          ex(r#"root.id = "example".uuid_v5("not-a-namespace")"#, "{}", "error:invalid namespace")], uuid_v5),
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
        "ascii85" => own(ascii85_encode(&data)),
        "z85" => own(z85_encode(&data)?),
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
    } else if scheme == "ascii85" {
        ascii85_decode(&data)?
    } else if scheme == "z85" {
        z85_decode(&data)?
    } else {
        return Err(format!("unknown encoding scheme {scheme:?}"));
    };
    own(Value::Bytes(out.into()))
}

pub(super) fn hmac_of<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Res<Vec<u8>> {
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
        "xxhash64" => xxhash_rust::xxh64::xxh64(&data, 0).to_string().into_bytes(),
        "crc32" => match args.str(2)? {
            "IEEE" => crc32fast::hash(&data),
            "Castagnoli" => crc32_reflected(0x82f6_3b78, &data),
            "Koopman" => crc32_reflected(0xeb31_d82e, &data),
            other => {
                return Err(format!(
                    "unknown crc32 polynomial {other:?}: expected IEEE, Castagnoli or Koopman"
                ))
            }
        }
        .to_be_bytes()
        .to_vec(),
        "fnv32" => fnv32(&data).to_string().into_bytes(),
        "hmac_sha1" => hmac_of::<Hmac<Sha1>>(&key()?, &data)?,
        "hmac_sha256" => hmac_of::<Hmac<Sha256>>(&key()?, &data)?,
        "hmac_sha512" => hmac_of::<Hmac<Sha512>>(&key()?, &data)?,
        other => return Err(format!("unknown hash algorithm {other:?}")),
    };
    own(Value::Bytes(out.into()))
}

fn compress<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let out = compress_bytes(args.str(0)?, &raw(v)?, args.int(1)?)?;
    own(Value::Bytes(out.into()))
}

fn decompress<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let out = decompress_bytes(args.str(0)?, &raw(v)?)?;
    own(Value::Bytes(out.into()))
}

/// Compresses `data` with `algorithm`; `level` applies to the gzip family (negative:
/// the default). Shared by the `compress` method and processor.
pub(crate) fn compress_bytes(algorithm: &str, data: &[u8], level: i64) -> Result<Vec<u8>, String> {
    let level = match level {
        l if l < 0 => flate2::Compression::default(),
        l => flate2::Compression::new(l.min(9) as u32),
    };
    let io = |e: std::io::Error| e.to_string();
    let out = match algorithm {
        "gzip" => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), level);
            w.write_all(data).map_err(io)?;
            w.finish().map_err(io)?
        }
        // pgzip compresses blocks of 1 MiB on their own, each ended by a sync flush, in
        // one gzip member: any gzip reader reads it, and its bytes differ from gzip's.
        "pgzip" => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), level);
            for block in data.chunks(1 << 20) {
                w.write_all(block).map_err(io)?;
                w.flush().map_err(io)?;
            }
            w.finish().map_err(io)?
        }
        "zlib" => {
            let mut w = flate2::write::ZlibEncoder::new(Vec::new(), level);
            w.write_all(data).map_err(io)?;
            w.finish().map_err(io)?
        }
        "flate" | "deflate" => {
            let mut w = flate2::write::DeflateEncoder::new(Vec::new(), level);
            w.write_all(data).map_err(io)?;
            w.finish().map_err(io)?
        }
        "lz4" => {
            // The frame settings Go's lz4 writer uses by default: 4 MiB independent
            // blocks and a content checksum, so the same input gives the same bytes.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max4MB)
                .content_checksum(true);
            let mut w = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            w.write_all(data).map_err(io)?;
            w.finish().map_err(|e| e.to_string())?
        }
        "snappy" => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(|e| e.to_string())?,
        "zstd" => {
            ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
        }
        other => return Err(format!("compression type not recognised: {other}")),
    };
    Ok(out)
}

/// Decompresses `data` with `algorithm`, stopping at 256 MiB. Shared by
/// the `decompress` method and processor.
pub(crate) fn decompress_bytes(algorithm: &str, data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let io = |e: std::io::Error| format!("failed to decompress: {e}");
    // A tenant's run is held to its value cap: a few kilobytes can inflate to that.
    let cap = crate::mapping::budget::value_cap().map(|c| c as u64);
    let limit = cap.map_or(MAX_INFLATE, |c| c.min(MAX_INFLATE));
    let read = |r: &mut dyn Read, out: &mut Vec<u8>| {
        let want = if cap.is_some() { limit + 1 } else { limit };
        r.take(want).read_to_end(out).map_err(io)?;
        if cap.is_some() && out.len() as u64 > limit {
            return Err(format!(
                "failed to decompress: {}",
                crate::mapping::budget::TooLarge::Value
            ));
        }
        Ok(())
    };
    match algorithm {
        "gzip" | "pgzip" => read(&mut flate2::read::MultiGzDecoder::new(data), &mut out)?,
        "zlib" => read(&mut flate2::read::ZlibDecoder::new(data), &mut out)?,
        "flate" | "deflate" => read(&mut flate2::read::DeflateDecoder::new(data), &mut out)?,
        "lz4" => read(&mut lz4_flex::frame::FrameDecoder::new(data), &mut out)?,
        "bzip2" => read(&mut bzip2::read::MultiBzDecoder::new(data), &mut out)?,
        "zstd" => {
            let mut r = ruzstd::decoding::StreamingDecoder::new(data)
                .map_err(|e| format!("failed to decompress: {e}"))?;
            read(&mut r, &mut out)?
        }
        "snappy" => {
            // The block header states the decompressed size; refuse a huge one before
            // allocating for it.
            let len = snap::raw::decompress_len(data)
                .map_err(|e| format!("failed to decompress: {e}"))?;
            if len as u64 > limit {
                return Err(format!(
                    "failed to decompress: {len} bytes is over the {limit} byte limit"
                ));
            }
            out = snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| format!("failed to decompress: {e}"))?;
        }
        other => return Err(format!("compression type not recognised: {other}")),
    };
    Ok(out)
}

/// CRC-32 over a reflected polynomial, for the tables crc32fast does not offer.
fn crc32_reflected(poly: u32, data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |mut crc, b| {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ poly
            } else {
                crc >> 1
            };
        }
        crc
    })
}

/// ascii85 as Go's `encoding/ascii85` writes it: no `<~ ~>` delimiters, `z` for a
/// group of four zero bytes, and a short last group written as its first n+1 digits.
fn ascii85_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len() / 4 * 5 + 5);
    for chunk in data.chunks(4) {
        let mut group = [0u8; 4];
        group[..chunk.len()].copy_from_slice(chunk);
        let mut n = u32::from_be_bytes(group);
        if n == 0 && chunk.len() == 4 {
            out.push('z');
            continue;
        }
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = (n % 85) as u8 + b'!';
            n /= 85;
        }
        out.extend(digits[..chunk.len() + 1].iter().map(|&d| d as char));
    }
    out
}

fn ascii85_decode(data: &[u8]) -> Res<Vec<u8>> {
    let bad = |c: u8| format!("invalid ascii85 data: unexpected {:?}", c as char);
    let mut out = Vec::with_capacity(data.len() / 5 * 4 + 4);
    let mut group = [0u32; 5];
    let mut n = 0;
    for &c in data {
        match c {
            b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c => continue,
            b'z' if n == 0 => out.extend_from_slice(&[0; 4]),
            b'!'..=b'u' => {
                group[n] = u32::from(c - b'!');
                n += 1;
                if n == 5 {
                    out.extend_from_slice(&ascii85_group(&group)?);
                    n = 0;
                }
            }
            other => return Err(bad(other)),
        }
    }
    match n {
        0 => {}
        1 => return Err("invalid ascii85 data: a lone trailing digit".into()),
        _ => {
            // A short group is padded with the highest digit, then cut back.
            group[n..].fill(84);
            let full = ascii85_group(&group)?;
            out.extend_from_slice(&full[..n - 1]);
        }
    }
    Ok(out)
}

fn ascii85_group(digits: &[u32; 5]) -> Res<[u8; 4]> {
    let v = digits.iter().try_fold(0u32, |acc, d| {
        acc.checked_mul(85).and_then(|a| a.checked_add(*d))
    });
    v.map(u32::to_be_bytes)
        .ok_or_else(|| "invalid ascii85 data: a group overflows 32 bits".to_string())
}

/// The Z85 alphabet (ZeroMQ RFC 32).
const Z85: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

fn z85_encode(data: &[u8]) -> Res<String> {
    if data.len() % 4 != 0 {
        return Err(format!(
            "z85 encodes a multiple of 4 bytes, got {}",
            data.len()
        ));
    }
    let mut out = String::with_capacity(data.len() / 4 * 5);
    for chunk in data.chunks(4) {
        let mut n = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = Z85[(n % 85) as usize];
            n /= 85;
        }
        out.extend(digits.iter().map(|&d| d as char));
    }
    Ok(out)
}

fn z85_decode(data: &[u8]) -> Res<Vec<u8>> {
    if data.len() % 5 != 0 {
        return Err(format!(
            "invalid z85 data: length {} is not a multiple of 5",
            data.len()
        ));
    }
    let mut out = Vec::with_capacity(data.len() / 5 * 4);
    for chunk in data.chunks(5) {
        let mut digits = [0u32; 5];
        for (d, &c) in digits.iter_mut().zip(chunk) {
            *d = Z85
                .iter()
                .position(|&z| z == c)
                .ok_or_else(|| format!("invalid z85 data: unexpected {:?}", c as char))?
                as u32;
        }
        out.extend_from_slice(
            &ascii85_group(&digits)
                .map_err(|_| "invalid z85 data: a group overflows 32 bits".to_string())?,
        );
    }
    Ok(out)
}

fn uuid_v5<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let name = raw(v)?;
    let ns = match args.opt_str(0)?.unwrap_or("") {
        "" => uuid::Uuid::nil(),
        "dns" => uuid::Uuid::NAMESPACE_DNS,
        "url" => uuid::Uuid::NAMESPACE_URL,
        "oid" => uuid::Uuid::NAMESPACE_OID,
        "x500" => uuid::Uuid::NAMESPACE_X500,
        other => {
            uuid::Uuid::parse_str(other).map_err(|e| format!("invalid namespace {other:?}: {e}"))?
        }
    };
    own(uuid::Uuid::new_v5(&ns, &name).hyphenated().to_string())
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
