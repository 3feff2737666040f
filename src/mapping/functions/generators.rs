//! Functions that produce new values: ids, random numbers, clocks and counters.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use parking_lot::Mutex;
use rand::Rng;

use crate::mapping::exec::{own, Ctx, V};
use crate::mapping::program::FuncCall;
use crate::mapping::spec::{opt, p, Args, Default, FunctionImpl, FunctionSpec, Param, Res};
use crate::value::Value;

const CAT: &str = "General";

const fn gen(
    name: &'static str,
    description: &'static str,
    params: &'static [Param],
    imp: FunctionImpl,
) -> FunctionSpec {
    FunctionSpec {
        name,
        category: CAT,
        description,
        params,
        examples: &[],
        pure: false,
        needs_message: false,
        imp,
    }
}

pub static SPECS: &[FunctionSpec] = &[
    gen("uuid_v4", "A random (version 4) UUID.", &[], uuid_v4),
    gen(
        "uuid_v7",
        "A time-ordered (version 7) UUID; `time` (a timestamp, or a value `timestamp()` accepts) sets its time part instead of now.",
        &[opt("time", Default::Absent)],
        uuid_v7,
    ),
    gen(
        "nanoid",
        "A random URL-safe id; `length` defaults to 21, `alphabet` to the URL-safe set.",
        &[
            opt("length", Default::Int(21)),
            opt("alphabet", Default::Absent),
        ],
        nanoid,
    ),
    gen(
        "ulid",
        "A ULID: a time-ordered, lexicographically sortable id, in Crockford base 32 or, with `encoding: \"hex\"`, 32 hex digits. `random_source` (`secure_random` or `fast_random`) is accepted; both draw from a cryptographically secure generator.",
        &[
            opt("encoding", Default::Str("crockford")),
            opt("random_source", Default::Str("secure_random")),
        ],
        ulid,
    ),
    gen(
        "ksuid",
        "A KSUID: 27 base-62 characters, time-ordered.",
        &[],
        ksuid,
    ),
    gen(
        "snowflake_id",
        "A 64-bit time-ordered id: milliseconds since 2010-11-04, a 10-bit node id and a sequence.",
        &[opt("node_id", Default::Int(1))],
        snowflake_id,
    ),
    gen(
        "random_int",
        "A random integer in [min, max]; `seed` is accepted for compatibility and ignored.",
        &[
            opt("seed", Default::Absent),
            opt("min", Default::Int(0)),
            opt("max", Default::Int(i64::MAX - 1)),
        ],
        random_int,
    ),
    gen(
        "now",
        "The current time as a timestamp in the local zone (`TZ`).",
        &[],
        now,
    ),
    gen(
        "timestamp_unix",
        "The current Unix time in seconds.",
        &[],
        ts_unix,
    ),
    gen(
        "timestamp_unix_milli",
        "The current Unix time in milliseconds.",
        &[],
        ts_unix_milli,
    ),
    gen(
        "timestamp_unix_micro",
        "The current Unix time in microseconds.",
        &[],
        ts_unix_micro,
    ),
    gen(
        "timestamp_unix_nano",
        "The current Unix time in nanoseconds.",
        &[],
        ts_unix_nano,
    ),
    gen(
        "count",
        "Increments and returns a counter shared by every mapping of the stream using the same name.",
        &[p("name")],
        count,
    ),
    gen(
        "counter",
        "A counter local to this call: starts at `min`, steps by one, wraps after `max`.",
        &[
            opt("min", Default::Int(1)),
            opt("max", Default::Int(i64::MAX)),
            opt("set", Default::Absent),
        ],
        counter,
    ),
];

fn uuid_v4<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(uuid::Uuid::new_v4().to_string())
}

fn uuid_v7<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    if !args.given(0) || matches!(args.get(0), Value::Null) {
        return own(uuid::Uuid::now_v7().to_string());
    }
    let t = crate::mapping::methods::to_ts(args.get(0)).map_err(|e| format!("time: {e}"))?;
    let secs = u64::try_from(t.timestamp()).map_err(|_| format!("time: {t} is before 1970"))?;
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, secs, t.timestamp_subsec_nanos());
    own(uuid::Uuid::new_v7(ts).to_string())
}

const URL_ALPHABET: &str = "_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn nanoid<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let len = args.int(0)?;
    if !(1..=4096).contains(&len) {
        return Err(format!("length must be between 1 and 4096, got {len}"));
    }
    let alphabet: Vec<char> = match args.opt_str(1)? {
        Some(a) if !a.is_empty() => a.chars().collect(),
        Some(_) => return Err("alphabet must not be empty".into()),
        None => URL_ALPHABET.chars().collect(),
    };
    let mut rng = rand::thread_rng();
    own((0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
        .collect::<String>())
}

fn ulid<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let hex = match args.str(0)? {
        "crockford" => false,
        "hex" => true,
        other => {
            return Err(format!(
                "unknown encoding {other:?}: expected crockford or hex"
            ))
        }
    };
    match args.str(1)? {
        "secure_random" | "fast_random" => {}
        other => {
            return Err(format!(
                "unknown random_source {other:?}: expected secure_random or fast_random"
            ))
        }
    }
    const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let ms = chrono::Utc::now().timestamp_millis().max(0) as u128;
    let rand: u128 = rand::thread_rng().gen::<u128>() & ((1u128 << 80) - 1);
    let n = (ms << 80) | rand;
    if hex {
        return own(format!("{n:032x}"));
    }
    let s: String = (0..26)
        .rev()
        .map(|i| CROCKFORD[((n >> (i * 5)) & 31) as usize] as char)
        .collect();
    own(s)
}

fn ksuid<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    // KSUID time counts from 2014-05-13 (Unix 1400000000).
    let ts = (chrono::Utc::now().timestamp() - 1_400_000_000).clamp(0, u32::MAX as i64) as u32;
    let mut bytes = [0u8; 20];
    bytes[..4].copy_from_slice(&ts.to_be_bytes());
    rand::thread_rng().fill(&mut bytes[4..]);
    let mut n = u256_from(&bytes);
    let mut out = [b'0'; 27];
    for slot in out.iter_mut().rev() {
        let (q, r) = divmod62(&n);
        *slot = BASE62[r as usize];
        n = q;
    }
    own(String::from_utf8_lossy(&out).into_owned())
}

/// A 160-bit number as five 32-bit limbs, most significant first.
fn u256_from(bytes: &[u8; 20]) -> [u32; 5] {
    let mut limbs = [0u32; 5];
    for (i, l) in limbs.iter_mut().enumerate() {
        *l = u32::from_be_bytes([
            bytes[i * 4],
            bytes[i * 4 + 1],
            bytes[i * 4 + 2],
            bytes[i * 4 + 3],
        ]);
    }
    limbs
}

fn divmod62(n: &[u32; 5]) -> ([u32; 5], u32) {
    let mut q = [0u32; 5];
    let mut rem: u64 = 0;
    for (i, l) in n.iter().enumerate() {
        let cur = (rem << 32) | u64::from(*l);
        q[i] = (cur / 62) as u32;
        rem = cur % 62;
    }
    (q, rem as u32)
}

static SNOWFLAKE_SEQ: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn snowflake_id<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let node = args.int(0)?;
    if !(0..1024).contains(&node) {
        return Err(format!("node_id must be in [0, 1023], got {node}"));
    }
    const EPOCH_MS: i64 = 1_288_834_974_657;
    let ms = (chrono::Utc::now().timestamp_millis() - EPOCH_MS).max(0) & ((1 << 41) - 1);
    let seq = SNOWFLAKE_SEQ.fetch_add(1, Ordering::Relaxed) & 0xfff;
    own((ms << 22) | (node << 12) | seq)
}

fn random_int<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let (min, max) = (args.int(1)?, args.int(2)?);
    if min > max {
        return Err(format!("min ({min}) must not exceed max ({max})"));
    }
    own(rand::thread_rng().gen_range(min..=max))
}

fn now<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(Value::Timestamp(crate::mapping::time::now()))
}

fn ts_unix<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(chrono::Utc::now().timestamp())
}
fn ts_unix_milli<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(chrono::Utc::now().timestamp_millis())
}
fn ts_unix_micro<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(chrono::Utc::now().timestamp_micros())
}
fn ts_unix_nano<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX))
}

/// Counters named by `count()`, shared across the operator's mappings as Bloblang's are.
static COUNTERS: LazyLock<Counters> = LazyLock::new(Counters::unbounded);

/// The counters `count()` increments, by name. Mappings that arrive as data get a set of
/// their own (one per stream, see [`Env::with_counters`](crate::mapping::Env)) holding
/// at most [`Counters::SCOPED_NAMES`] names, so one tenant can neither read nor move
/// another's counters, nor grow the process by counting ever new names.
#[derive(Debug)]
pub struct Counters {
    names: Mutex<HashMap<String, i64>>,
    limit: usize,
}

impl Counters {
    /// How many names a stream's own counters may hold.
    pub const SCOPED_NAMES: usize = 10_000;

    /// The counters of one stream that arrived as data.
    pub fn scoped() -> Self {
        Counters {
            names: Mutex::new(HashMap::new()),
            limit: Self::SCOPED_NAMES,
        }
    }

    fn unbounded() -> Self {
        Counters {
            names: Mutex::new(HashMap::new()),
            limit: usize::MAX,
        }
    }

    fn increment(&self, name: &str) -> Res<i64> {
        let mut m = self.names.lock();
        if let Some(c) = m.get_mut(name) {
            *c += 1;
            return Ok(*c);
        }
        if m.len() >= self.limit {
            return Err(format!(
                "more than {} counter names in one stream",
                self.limit
            ));
        }
        m.insert(name.to_owned(), 1);
        Ok(1)
    }
}

fn count<'a>(call: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let counters = call.counters.as_deref().unwrap_or(&COUNTERS);
    own(counters.increment(args.str(0)?)?)
}

fn counter<'a>(call: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let (min, max) = (args.int(0)?, args.int(1)?);
    if min > max {
        return Err(format!("min ({min}) must not exceed max ({max})"));
    }
    if args.given(2) && !args.get(2).eq(&Value::Null) {
        let v = args.int(2)?;
        call.state.store(v, Ordering::Relaxed);
        return own(v);
    }
    // i64::MIN marks a counter not yet started.
    let next = call
        .state
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            Some(if c == i64::MIN || c >= max || c < min {
                min
            } else {
                c + 1
            })
        })
        .map(|c| {
            if c == i64::MIN || c >= max || c < min {
                min
            } else {
                c + 1
            }
        })
        .unwrap_or(min);
    own(next)
}

#[cfg(test)]
mod tests {
    use crate::mapping::{Env, Mapping};
    use crate::value::Value;

    fn run(src: &str) -> Value {
        Mapping::compile(src, &Env::default())
            .unwrap()
            .query_value(&Value::Null)
            .unwrap()
    }

    #[test]
    fn ids_have_their_shapes() {
        assert_eq!(run("uuid_v4().length()"), Value::Int(36));
        assert_eq!(run("uuid_v7().length()"), Value::Int(36));
        assert_eq!(run("nanoid().length()"), Value::Int(21));
        assert_eq!(
            run("nanoid(5, \"ab\").re_match(\"^[ab]{5}$\")"),
            Value::Bool(true)
        );
        assert_eq!(run("ulid().length()"), Value::Int(26));
        assert_eq!(
            run("ulid(\"hex\").re_match(\"^[0-9a-f]{32}$\")"),
            Value::Bool(true)
        );
        assert!(Mapping::compile("ulid(\"base64\")", &Env::default())
            .unwrap()
            .query_value(&Value::Null)
            .is_err());
        assert_eq!(
            run("uuid_v7(\"2024-01-02T03:04:05Z\".ts_parse(\"2006-01-02T15:04:05Z07:00\")).slice(0, 13)"),
            Value::from(format!("{:08x}-{:04x}", 1_704_164_645_000u64 >> 16, 1_704_164_645_000u64 & 0xffff))
        );
        assert_eq!(run("ksuid().length()"), Value::Int(27));
        assert_eq!(run("snowflake_id() > 0"), Value::Bool(true));
        assert_eq!(run("random_int(min: 3, max: 3)"), Value::Int(3));
        assert_eq!(run("now().type()"), Value::from("timestamp"));
        assert_eq!(run("timestamp_unix() > 1600000000"), Value::Bool(true));
        assert_eq!(run("hostname().length() > 0"), Value::Bool(true));
    }

    #[test]
    fn counters_count() {
        let m = Mapping::compile("counter(min: 1, max: 2)", &Env::default()).unwrap();
        let got: Vec<Value> = (0..3)
            .map(|_| m.query_value(&Value::Null).unwrap())
            .collect();
        assert_eq!(got, vec![Value::Int(1), Value::Int(2), Value::Int(1)]);
        assert_eq!(run("count(\"gen-test\")"), Value::Int(1));
        assert_eq!(run("count(\"gen-test\")"), Value::Int(2));
    }
}
