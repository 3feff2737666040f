//! The structured value that messages carry once their payload is parsed, and that the
//! mapping language computes with.
//!
//! JSON numbers that fit an `i64` stay integers (Bloblang keeps int/float apart); objects
//! keep their keys sorted, which is also the order JSON output is written in.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use chrono::{DateTime, FixedOffset, SecondsFormat};
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

/// An object's members, sorted by key.
pub type Object = BTreeMap<String, Value>;

/// How deep arrays and objects may nest in any value: the depth JSON parsing accepts.
/// Values come from tenants' documents and programs, and dropping, cloning or writing
/// a value recurses once per level, so a value deeper than this is refused where it
/// would be built (a mapping error, a parse error) instead of overflowing a thread's
/// stack.
pub const MAX_DEPTH: usize = 128;

/// A value would nest deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the value would nest deeper than {MAX_DEPTH} levels")]
pub struct TooDeep;

/// What one value takes in memory besides its text or bytes: the size of [`Value`].
pub const NODE: usize = std::mem::size_of::<Value>();

/// What one key of an object takes besides its text (and its value).
pub const KEY: usize = std::mem::size_of::<String>();

/// What an object with any members takes before its members are counted: the members
/// live in blocks of eleven keys and values (a B-tree's nodes), and the first block is
/// whole however few there are, so `{"a": 1}` takes about this much.
pub const OBJECT: usize = 11 * (KEY + NODE) + 16;

/// A value would take more than the room a parse was given (see [`with_room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the value would take more than {0} bytes")]
pub struct OutOfRoom(pub usize);

thread_local! {
    /// How many arrays and objects the deserializers on this thread are inside.
    static DE_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The room given by [`with_room`]: the bytes given, and the bytes still free.
    static DE_ROOM: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

/// Runs `parse` with the values that parsing into [`Value`] builds on this thread (JSON,
/// and any format read through serde) held to `room` bytes in all, as
/// [`Value::size_within`] counts them: past it the parse fails with [`OutOfRoom`].
/// Text a few megabytes long can hold tens of millions of tiny values, each taking
/// forty bytes once read. `None`: no limit.
pub fn with_room<T>(room: Option<usize>, parse: impl FnOnce() -> T) -> T {
    let previous = DE_ROOM.with(|r| r.replace(room.map(|n| (n, n))));
    struct Restore(Option<(usize, usize)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DE_ROOM.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(previous);
    parse()
}

/// Takes `bytes` from the room [`with_room`] gave, if any.
fn take_room<E: serde::de::Error>(bytes: usize) -> Result<(), E> {
    DE_ROOM.with(|r| match r.get() {
        None => Ok(()),
        Some((given, free)) => match free.checked_sub(bytes) {
            Some(free) => {
                r.set(Some((given, free)));
                Ok(())
            }
            None => Err(E::custom(OutOfRoom(given))),
        },
    })
}

/// Counts one level of nesting while a deserializer reads a container, refusing to go
/// past [`MAX_DEPTH`] whatever the format (MessagePack, YAML, CBOR and JSON alike).
struct DeLevel;

impl DeLevel {
    fn enter<E: serde::de::Error>() -> Result<DeLevel, E> {
        DE_DEPTH.with(|d| {
            if d.get() >= MAX_DEPTH {
                return Err(E::custom(TooDeep));
            }
            d.set(d.get() + 1);
            Ok(DeLevel)
        })
    }
}

impl Drop for DeLevel {
    fn drop(&mut self) {
        DE_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// An integer past `i64`, kept exactly (from `parse_json(use_number: true)`): its
    /// decimal digits. Arithmetic reads it as a float.
    BigInt(Box<str>),
    String(String),
    Bytes(Bytes),
    Array(Vec<Value>),
    Object(Object),
    Timestamp(DateTime<FixedOffset>),
}

impl Value {
    /// Parses JSON text straight into a `Value` (no intermediate tree).
    ///
    /// A small parser handles the common documents; it gives up on anything it is not
    /// sure to read exactly as serde_json does (errors, deep nesting, `\\u` surrogates),
    /// and serde_json then parses the input again, so results and error messages are
    /// serde_json's in every case.
    pub fn from_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
        match FastParser::new(bytes).document() {
            Some(v) => Ok(v),
            None => serde_json::from_slice(bytes),
        }
    }

    /// Writes the value as compact JSON. Bytes are written as a string; timestamps as RFC 3339.
    pub fn to_json(&self) -> Vec<u8> {
        // serde_json's to_vec starts with the same room.
        let mut out = Vec::with_capacity(128);
        self.write_json(&mut out);
        out
    }

    /// Appends compact JSON to `out`. Numbers are written as Go's encoder (and so
    /// Bloblang) writes them: floats in plain notation between 1e-6 and 1e21, whole
    /// floats without a fraction, exponents as `1e+21` and `1e-7`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(true) => out.extend_from_slice(b"true"),
            Value::Bool(false) => out.extend_from_slice(b"false"),
            Value::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
            Value::Float(f) => write_float(*f, out),
            Value::BigInt(d) => out.extend_from_slice(d.as_bytes()),
            Value::String(s) => write_str(s, out),
            Value::Bytes(b) => write_str(&String::from_utf8_lossy(b), out),
            Value::Array(a) => {
                out.push(b'[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    v.write_json(out);
                }
                out.push(b']');
            }
            Value::Object(o) => {
                out.push(b'{');
                for (i, (k, v)) in o.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(k, out);
                    out.push(b':');
                    v.write_json(out);
                }
                out.push(b'}');
            }
            Value::Timestamp(t) => write_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true), out),
        }
    }

    /// Whether arrays and objects nest more than `limit` levels deep (a scalar nests 0
    /// levels, `[1]` one). Recursion stops at the limit, so this is safe on any value.
    pub fn nesting_exceeds(&self, limit: usize) -> bool {
        match self {
            Value::Array(a) => limit == 0 || a.iter().any(|c| c.nesting_exceeds(limit - 1)),
            Value::Object(o) => limit == 0 || o.values().any(|c| c.nesting_exceeds(limit - 1)),
            _ => false,
        }
    }

    /// The memory this value takes, roughly ([`NODE`] for each value, [`KEY`] for each
    /// key of an object and [`OBJECT`] for each object with members, plus their text and
    /// bytes), when it is at most `limit`; `None`
    /// past it. The walk stops at the limit, so it costs at most what building a value of
    /// that size did.
    pub fn size_within(&self, limit: usize) -> Option<usize> {
        let mut left = limit;
        self.take_size(&mut left).then(|| limit - left)
    }

    fn take_size(&self, left: &mut usize) -> bool {
        let own = match self {
            Value::String(s) => s.len(),
            Value::Bytes(b) => b.len(),
            Value::BigInt(d) => d.len(),
            _ => 0,
        };
        let Some(rest) = left.checked_sub(NODE.saturating_add(own)) else {
            return false;
        };
        *left = rest;
        match self {
            Value::Array(a) => a.iter().all(|v| v.take_size(left)),
            Value::Object(o) if o.is_empty() => true,
            Value::Object(o) => {
                let Some(rest) = left.checked_sub(OBJECT) else {
                    return false;
                };
                *left = rest;
                o.iter().all(
                    |(k, v)| match left.checked_sub(KEY.saturating_add(k.len())) {
                        Some(rest) => {
                            *left = rest;
                            v.take_size(left)
                        }
                        None => false,
                    },
                )
            }
            _ => true,
        }
    }

    /// Checks that this value, placed `under` levels below a document's root, nests no
    /// deeper than [`MAX_DEPTH`]. Every place that builds a value from input checks this
    /// before the value can grow further, which keeps the recursive walks (drop, clone,
    /// comparison, writing JSON) within a small, fixed stack.
    pub fn check_depth(&self, under: usize) -> Result<(), TooDeep> {
        match MAX_DEPTH.checked_sub(under) {
            Some(room) if !self.nesting_exceeds(room) => Ok(()),
            _ => Err(TooDeep),
        }
    }

    /// The name Bloblang's `type()` reports for this value.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::Float(_) | Value::BigInt(_) => "number",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::Timestamp(_) => "timestamp",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as message payload bytes: strings and bytes raw, everything else as JSON.
    pub fn to_payload(&self) -> Bytes {
        match self {
            Value::String(s) => Bytes::copy_from_slice(s.as_bytes()),
            Value::Bytes(b) => b.clone(),
            other => Bytes::from(other.to_json()),
        }
    }

    /// The value as metadata text: strings raw, everything else as JSON.
    pub fn to_text(&self) -> String {
        match self {
            Value::String(s) => s.clone(),
            Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            other => String::from_utf8_lossy(&other.to_json()).into_owned(),
        }
    }
}

/// A JSON reader for the common case, faster than going through serde's visitor
/// machinery. Every method returns `None` when the input is not something it reads
/// exactly as serde_json would; the caller then falls back to serde_json.
struct FastParser<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    /// The bytes the values read may still take (see [`with_room`]); past them the
    /// parse gives up and serde_json, counting the same way, says why.
    room: Option<usize>,
}

/// Below serde_json's recursion limit (128), so a document accepted here is never one
/// serde_json would refuse for its depth.
const FAST_MAX_DEPTH: usize = 100;

impl<'a> FastParser<'a> {
    fn new(b: &'a [u8]) -> Self {
        FastParser {
            b,
            i: 0,
            depth: 0,
            room: DE_ROOM.with(|r| r.get()).map(|(_, free)| free),
        }
    }

    /// Takes `bytes` from the room, if there is a limit.
    #[inline]
    fn take(&mut self, bytes: usize) -> Option<()> {
        if let Some(room) = &mut self.room {
            *room = room.checked_sub(bytes)?;
        }
        Some(())
    }

    fn document(mut self) -> Option<Value> {
        let v = self.value()?;
        self.ws();
        (self.i == self.b.len()).then_some(v)
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + lit.len())? == lit {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.ws();
        self.take(NODE)?;
        match *self.b.get(self.i)? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => {
                let s = self.string()?;
                self.take(s.len())?;
                Some(Value::String(s))
            }
            b't' => self.eat(b"true").map(|_| Value::Bool(true)),
            b'f' => self.eat(b"false").map(|_| Value::Bool(false)),
            b'n' => self.eat(b"null").map(|_| Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self) -> Option<Value> {
        self.depth += 1;
        if self.depth > FAST_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        let mut out = Object::new();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            self.depth -= 1;
            return Some(Value::Object(out));
        }
        self.take(OBJECT)?;
        loop {
            self.ws();
            if self.b.get(self.i) != Some(&b'"') {
                return None;
            }
            let k = self.string()?;
            self.take(KEY + k.len())?;
            self.ws();
            self.eat(b":")?;
            let v = self.value()?;
            // A repeated key keeps its last value, as with serde_json.
            out.insert(k, v);
            self.ws();
            match *self.b.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(Value::Object(out));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self) -> Option<Value> {
        self.depth += 1;
        if self.depth > FAST_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        let mut out = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            self.depth -= 1;
            return Some(Value::Array(out));
        }
        loop {
            out.push(self.value()?);
            self.ws();
            match *self.b.get(self.i)? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(Value::Array(out));
                }
                _ => return None,
            }
        }
    }

    /// A string starting at the opening quote.
    fn string(&mut self) -> Option<String> {
        self.i += 1;
        let start = self.i;
        // The usual string has no escapes: one scan, one copy of the bytes.
        let end = start + plain_run(&self.b[start..]);
        self.i = end;
        match *self.b.get(end)? {
            b'"' => {
                let s = std::str::from_utf8(&self.b[start..end]).ok()?;
                self.i += 1;
                return Some(s.to_owned());
            }
            b'\\' => {}
            _ => return None,
        }
        let mut buf: Vec<u8> = self.b[start..self.i].to_vec();
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return String::from_utf8(buf).ok();
                }
                b'\\' => {
                    let esc = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    let c = match esc {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let hex = std::str::from_utf8(self.b.get(self.i..self.i + 4)?).ok()?;
                            if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                                return None;
                            }
                            let n = u32::from_str_radix(hex, 16).ok()?;
                            // Surrogate pairs (and lone surrogates) are left to serde_json.
                            let ch = char::from_u32(n)?;
                            self.i += 4;
                            let mut tmp = [0u8; 4];
                            buf.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                            continue;
                        }
                        _ => return None,
                    };
                    buf.push(c);
                }
                0..=0x1f => return None,
                c => {
                    buf.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// Integers of up to 18 digits are read here; other numbers (fractions, exponents,
    /// long integers) go through serde_json's own number reader, token by token, so
    /// floats round exactly as it rounds them.
    fn number(&mut self) -> Option<Value> {
        let start = self.i;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        let tok = &self.b[start..self.i];
        let (neg, digits) = match tok.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, tok),
        };
        let plain = !digits.is_empty()
            && digits.len() <= 18
            && digits.iter().all(u8::is_ascii_digit)
            && (digits[0] != b'0' || digits.len() == 1);
        if !plain {
            // Counted here already: serde_json must not take it from the room again.
            let read = || serde_json::from_slice::<Value>(tok).ok();
            return match self.room {
                Some(_) => with_room(None, read),
                None => read(),
            };
        }
        let n = digits
            .iter()
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
        Some(match (neg, n) {
            // serde_json reads `-0` as a float.
            (true, 0) => Value::Float(-0.0),
            (true, n) => Value::Int(-n),
            (false, n) => Value::Int(n),
        })
    }
}

fn write_float(f: f64, out: &mut Vec<u8>) {
    use std::io::Write as _;
    if !f.is_finite() {
        // JSON has no NaN or infinity; Go refuses them, we write null.
        out.extend_from_slice(b"null");
        return;
    }
    let abs = f.abs();
    if f.fract() == 0.0 && abs < 1e16 {
        out.extend_from_slice(itoa::Buffer::new().format(f as i64).as_bytes());
    } else if (1e-5..1e16).contains(&abs) {
        // ryu writes this range in plain notation, as Go does, and is much faster.
        out.extend_from_slice(ryu::Buffer::new().format_finite(f).as_bytes());
    } else if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        // Rust's Display is the shortest round-trip form, never exponential.
        let _ = write!(out, "{f}");
    } else {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => {
                let _ = write!(out, "{m}e+{e}");
            }
            _ => out.extend_from_slice(s.as_bytes()),
        }
    }
}

/// Which bytes a JSON string must escape: quote, backslash and control characters.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The length of the run of bytes at the start of `bytes` that JSON strings carry as
/// they are (no control character, quote or backslash). Eight bytes are checked at a
/// time: strings are mostly such runs, and this scan is much of reading and writing JSON.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Set in a byte's high bit when the byte is zero (a borrow from a lower byte may set
    // it for a higher one too; those words are then checked byte by byte).
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut i = 0;
    while let Some(word) = bytes.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        if control | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\'))) != 0 {
            break;
        }
        i += 8;
    }
    i + bytes[i..]
        .iter()
        .position(|&b| NEEDS_ESCAPE[b as usize])
        .unwrap_or(bytes.len() - i)
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    // Copy runs of plain bytes whole; a table lookup finds the few that need escaping.
    loop {
        let i = start + plain_run(&bytes[start..]);
        if i == bytes.len() {
            break;
        }
        out.extend_from_slice(&bytes[start..i]);
        let b = bytes[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}
impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}
impl From<f64> for Value {
    fn from(n: f64) -> Self {
        Value::Float(n)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::String(s),
            serde_json::Value::Array(a) => Value::Array(a.into_iter().map(Value::from).collect()),
            serde_json::Value::Object(o) => {
                Value::Object(o.into_iter().map(|(k, v)| (k, Value::from(v))).collect())
            }
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            // Whole floats print without a fraction, as Go's encoder (and so Bloblang) does.
            Value::Float(x) if x.fract() == 0.0 && x.abs() < 1e15 => s.serialize_i64(*x as i64),
            Value::Float(x) => s.serialize_f64(*x),
            Value::BigInt(d) => match (d.parse::<u128>(), d.parse::<i128>()) {
                (Ok(u), _) => s.serialize_u128(u),
                (_, Ok(i)) => s.serialize_i128(i),
                _ => s.serialize_f64(d.parse().unwrap_or(f64::NAN)),
            },
            Value::String(v) => s.serialize_str(v),
            Value::Bytes(b) => s.serialize_str(&String::from_utf8_lossy(b)),
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Object(o) => {
                let mut map = s.serialize_map(Some(o.len()))?;
                for (k, v) in o {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Value::Timestamp(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Deserialize::deserialize(d)
    }
    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(Value::Bool(b))
    }
    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(Value::Int(i))
    }
    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(i64::try_from(u)
            .map(Value::Int)
            .unwrap_or(Value::Float(u as f64)))
    }
    fn visit_u128<E: serde::de::Error>(self, u: u128) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(i64::try_from(u)
            .map(Value::Int)
            .unwrap_or(Value::Float(u as f64)))
    }
    fn visit_i128<E: serde::de::Error>(self, i: i128) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(i64::try_from(i)
            .map(Value::Int)
            .unwrap_or(Value::Float(i as f64)))
    }
    fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Value, E> {
        take_room(NODE)?;
        Ok(Value::Float(x))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        take_room(NODE.saturating_add(s.len()))?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        take_room(NODE.saturating_add(s.len()))?;
        Ok(Value::String(s))
    }
    fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Value, E> {
        take_room(NODE.saturating_add(b.len()))?;
        Ok(Value::Bytes(Bytes::copy_from_slice(b)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let _level = DeLevel::enter()?;
        take_room(NODE)?;
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let _level = DeLevel::enter()?;
        take_room(NODE)?;
        let mut out = Object::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.is_empty() {
                take_room(OBJECT)?;
            }
            take_room(KEY.saturating_add(k.len()))?;
            let v = map.next_value::<Value>()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_runs_stop_where_the_table_says() {
        // Every interesting byte at every place of a window longer than two words, over
        // backgrounds of ASCII, spaces and UTF-8 continuation bytes.
        for background in [b'a', b' ', b'!', 0xC3, 0x80, 0xFF] {
            for special in [0u8, 0x1F, 0x20, b'"', b'\\', b'#', b']', 0x7F, 0x80] {
                for at in 0..20 {
                    let mut bytes = vec![background; 19];
                    if at < bytes.len() {
                        bytes[at] = special;
                    }
                    let want = bytes
                        .iter()
                        .position(|&b| NEEDS_ESCAPE[b as usize])
                        .unwrap_or(bytes.len());
                    assert_eq!(
                        plain_run(&bytes),
                        want,
                        "{background:#x} {special:#x} at {at}"
                    );
                }
            }
        }
        assert_eq!(plain_run(b""), 0);
    }

    #[test]
    fn json_round_trip_keeps_ints_and_sorts_keys() {
        let v = Value::from_json(br#"{"b":1,"a":[1.5,true,null,"x"],"c":9223372036854775807}"#)
            .unwrap();
        assert_eq!(
            String::from_utf8(v.to_json()).unwrap(),
            r#"{"a":[1.5,true,null,"x"],"b":1,"c":9223372036854775807}"#
        );
        let Value::Object(o) = &v else {
            panic!("object expected")
        };
        assert_eq!(o["b"], Value::Int(1));
    }

    #[test]
    fn a_value_stays_five_words() {
        // Every message field is one: `Bytes` (four words) sets the size, and `BigInt` is
        // boxed so that it does not grow it.
        assert_eq!(std::mem::size_of::<Value>(), 40);
    }

    #[test]
    fn sizes_count_values_keys_and_text_and_stop_at_the_limit() {
        let v = Value::from_json(br#"{"ab":["xyz",1]}"#).unwrap();
        let want = NODE + OBJECT + (KEY + 2) + NODE + (NODE + 3) + NODE;
        assert_eq!(v.size_within(usize::MAX), Some(want));
        assert_eq!(v.size_within(want), Some(want));
        assert_eq!(v.size_within(want - 1), None);
        assert_eq!(Value::Null.size_within(NODE - 1), None);
    }

    #[test]
    fn a_parse_given_room_stops_past_it_whatever_the_reader() {
        let doc = format!("[{}0]", "0,".repeat(1000));
        let need = Value::from_json(doc.as_bytes())
            .unwrap()
            .size_within(usize::MAX)
            .unwrap();
        assert!(with_room(Some(need), || Value::from_json(doc.as_bytes())).is_ok());
        let e = with_room(Some(need - 1), || Value::from_json(doc.as_bytes())).unwrap_err();
        assert!(
            e.to_string().contains(&OutOfRoom(need - 1).to_string()),
            "{e}"
        );
        // Through serde (here MessagePack), counted the same way.
        let packed = rmp_serde::to_vec(&Value::from_json(doc.as_bytes()).unwrap()).unwrap();
        let e = with_room(Some(need - 1), || rmp_serde::from_slice::<Value>(&packed)).unwrap_err();
        assert!(e.to_string().contains("would take more than"), "{e}");
        assert!(with_room(Some(need), || rmp_serde::from_slice::<Value>(&packed)).is_ok());
        // Floats go through serde_json inside the fast reader: counted once.
        let floats = format!("[{}0.5]", "0.5,".repeat(100));
        let need = Value::from_json(floats.as_bytes())
            .unwrap()
            .size_within(usize::MAX)
            .unwrap();
        assert!(with_room(Some(need), || Value::from_json(floats.as_bytes())).is_ok());
        // The room ends with the parse.
        assert!(Value::from_json(doc.as_bytes()).is_ok());
    }

    #[test]
    fn nesting_depth() {
        let v = Value::from_json(b"[[[1]]]").unwrap();
        assert!(!v.nesting_exceeds(3));
        assert!(v.nesting_exceeds(2));
        assert!(!Value::Int(1).nesting_exceeds(0));
    }

    #[test]
    fn whole_floats_print_like_ints() {
        assert_eq!(Value::Float(5.0).to_json(), b"5");
        assert_eq!(Value::Float(0.25).to_json(), b"0.25");
    }

    #[test]
    fn floats_print_like_go() {
        assert_eq!(Value::Float(1e21).to_json(), b"1e+21");
        assert_eq!(Value::Float(1.5e-7).to_json(), b"1.5e-7");
        assert_eq!(
            Value::Float(9.223372036854776e18).to_json(),
            b"9223372036854776000"
        );
        assert_eq!(Value::Float(-0.5).to_json(), b"-0.5");
        assert_eq!(Value::Float(59.97).to_json(), b"59.97");
        assert_eq!(Value::Float(0.00001234).to_json(), b"0.00001234");
        assert_eq!(Value::Float(0.000001234).to_json(), b"0.000001234");
        assert_eq!(
            Value::Float(123456789012345680000.0).to_json(),
            b"123456789012345680000"
        );
        assert_eq!(Value::Float(-3.0).to_json(), b"-3");
        assert_eq!(Value::Float(f64::NAN).to_json(), b"null");
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(
            Value::from("a\"b\\c\n\u{1}é").to_json(),
            "\"a\\\"b\\\\c\\n\\u0001é\"".as_bytes()
        );
    }

    #[test]
    fn payload_of_a_string_is_raw() {
        assert_eq!(&Value::from("hi").to_payload()[..], b"hi");
        assert_eq!(&Value::Int(3).to_payload()[..], b"3");
    }

    #[test]
    fn fast_parser_agrees_with_serde_json() {
        let docs: &[&str] = &[
            r#"{"b":1,"a":[1.5,true,null,"x"],"c":9223372036854775807,"c":-0}"#,
            r#" { "k" : [ ] , "o" : { } , "e" : "a\"b\\c\/\b\f\n\r\t\u00e9\u0000" } "#,
            r#"["\ud83d\ude00", "\ud800", -0, 0, -1, 123456789012345678, 1234567890123456789]"#,
            r#"[18446744073709551615, 18446744073709551616, -9223372036854775808, 1e400, 2.5e-3, 0.1]"#,
            r#"[-9223372036854775809, 1E2, 1e+2, 3.0, 1.7976931348623157e308, 5e-324]"#,
            "\"caf\u{e9}\"",
            "[01]",
            "[1.]",
            "[-]",
            "[1,]",
            "{\"a\" 1}",
            "tru",
            "[1] x",
            "",
            "\"\x01\"",
            "[1.5.3]",
            "{\"a\":1,}",
            "\"\\x\"",
            "[\"\\u12\"]",
        ];
        for d in docs {
            let ours = Value::from_json(d.as_bytes()).map_err(|e| e.to_string());
            let theirs = serde_json::from_slice::<Value>(d.as_bytes()).map_err(|e| e.to_string());
            match (&ours, &theirs) {
                // Compare bits so that -0.0 and 0.0 are told apart.
                (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{d}"),
                _ => assert_eq!(ours, theirs, "{d}"),
            }
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(Value::from_json(deep.as_bytes()).is_err());
        let ok = format!("{}{}", "[".repeat(110), "]".repeat(110));
        assert!(Value::from_json(ok.as_bytes()).is_ok());
    }

    #[test]
    fn huge_unsigned_becomes_float() {
        assert_eq!(
            Value::from_json(b"18446744073709551615")
                .unwrap()
                .type_name(),
            "number"
        );
    }
}
