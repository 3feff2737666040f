//! What each fuzz target checks on one input. The targets in `fuzz_targets/` call these
//! with generated inputs; `tests/fuzz_regressions.rs` includes this file and calls them
//! with the inputs the fuzzers once failed on, so `cargo test` keeps checking those
//! without the fuzzer. Every check panics when the property does not hold.

use std::sync::LazyLock;

use sluice::mapping::{Env, Mapping};
use sluice::message::Message;
use sluice::value::Value;

/// The environment of a mapping that arrives with the data (the `bloblang` method): no
/// function that reads the host and no `import`, so a generated mapping cannot read
/// files or block on one.
static SANDBOX: LazyLock<Env> = LazyLock::new(|| Env::default().sandboxed());

/// The message every compiled mapping runs on: each JSON type, a nested object, an
/// array of mixed items, a timestamp-shaped string and non-ASCII text.
const MESSAGE: &str = r#"{"a":[3,"x",1.5,{"k":1},null],"s":"héllo wörld ∑","n":12,"f":-0.5,"b":true,"t":"2024-01-02T03:04:05Z","o":{"p":{"q":[]}},"e":""}"#;

/// `mapping`: compiles the text as a mapping; when it compiles, runs it as the `mapping`
/// processor and as the `mutation` processor on [`MESSAGE`]. Errors are fine; panics
/// (and, under the fuzzer, hangs and runaway memory) are not. Error texts are rendered
/// too, since `sluice blobl` and `sluice lint` print them.
pub fn mapping(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let m = match Mapping::compile(src, &SANDBOX) {
        Ok(m) => m,
        Err(d) => {
            let _ = d.to_string();
            return;
        }
    };
    let msg = Message::new(MESSAGE.as_bytes().to_vec())
        .with_meta("k", "v")
        .with_meta("n", 3i64);
    match m.apply(std::slice::from_ref(&msg), 0) {
        Ok(Some(out)) => {
            let _ = out.payload();
        }
        Ok(None) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // The same on a message it owns, which may edit the input in place.
    match m.apply_owned(msg.clone()) {
        Ok(Some(out)) => {
            let _ = out.payload();
        }
        Ok(None) => {}
        Err(f) => {
            let _ = f.error.to_string();
        }
    }
    let mut edited = msg;
    if let Err(e) = m.mutate(&mut edited, 0, 1) {
        let _ = e.to_string();
    }
}

/// `config`: reads the text as a config file, as `sluice run` and `sluice lint` do, and
/// renders the errors. Errors are fine; panics are not.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match sluice::stream::config::parse_str("fuzz.yaml", text) {
        Ok(root) => {
            let _ = format!("{root:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// `json`: `Value::from_json` must agree with serde_json on every input:
///
/// - both accept or both reject, and when both reject, with the same message (the fast
///   parser falls back to serde_json for anything it does not take, so the message is
///   serde_json's);
/// - when both accept, the values are the same: serde_json's tree is converted with
///   `Value::from(serde_json::Value)`, so the integer/float split is the one `Value`
///   documents (numbers that fit an `i64` are `Int`; larger integers and anything with a
///   fraction or exponent are `Float`), and an `Int` never equals a `Float`. Floats are
///   compared by their bits, so `-0` (a float -0.0 in serde_json) must keep its sign.
///   A repeated key keeps its last value in both; key order is not compared (`Value`
///   sorts keys).
///
/// And what `Value` writes reads back as the same value, except that numbers compare as
/// `f64`s: whole floats are written without a fraction, in the shortest digits that read
/// back as the same float (as Go does), so they come back as integers that convert to
/// that float (1.4406074477475931e17 is written `144060744774759310`); and -0.0 is
/// written as `0`.
pub fn json(data: &[u8]) {
    let ours = Value::from_json(data);
    let theirs = serde_json::from_slice::<serde_json::Value>(data);
    let value = match (ours, theirs) {
        (Ok(a), Ok(b)) => {
            let b = Value::from(b);
            assert!(same(&a, &b, Exact::Yes), "values differ: {a:?} vs {b:?}");
            a
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "errors differ");
            return;
        }
        (Ok(a), Err(b)) => panic!("only Value::from_json accepts: {a:?}; serde_json: {b}"),
        (Err(a), Ok(b)) => panic!("only serde_json accepts: {b:?}; Value::from_json: {a}"),
    };
    let text = value.to_json();
    let again = serde_json::from_slice::<serde_json::Value>(&text)
        .unwrap_or_else(|e| panic!("written JSON does not parse: {e}"));
    let again = Value::from(again);
    assert!(
        same(&value, &again, Exact::No),
        "written JSON reads back differently: {value:?} vs {again:?}"
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Exact {
    Yes,
    No,
}

fn same(a: &Value, b: &Value, exact: Exact) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => match exact {
            Exact::Yes => x.to_bits() == y.to_bits(),
            Exact::No => x == y,
        },
        (Value::Int(i), Value::Float(f)) | (Value::Float(f), Value::Int(i)) => {
            exact == Exact::No && *i as f64 == *f
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y, exact))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, x), (ky, y))| kx == ky && same(x, y, exact))
        }
        _ => a == b,
    }
}
