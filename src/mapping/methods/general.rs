//! Type checks and coercions, error handling (`catch`, `or`) and applying named maps.

use std::borrow::Cow;

use crate::mapping::exec::{self, own, Ctx, ExecError, Frame, MsgView, Slot, This, V};
use crate::mapping::program::MethodCall;
use crate::mapping::spec::{
    describe, ex, lambda, lazy_method, method, opt, p, type_err, Args, Default, MethodSpec, Res,
};
use crate::value::Value;

const CAT: &str = "Type Coercion";

pub static SPECS: &[MethodSpec] = &[
    method(
        "type",
        CAT,
        "The name of the value's type: string, bytes, number, bool, timestamp, array, object or null.",
        &[],
        &[
            ex("root.t = this.a.type()", r#"{"a":"x"}"#, r#"{"t":"string"}"#),
            ex("root.t = this.a.type()", r#"{"a":1.5}"#, r#"{"t":"number"}"#),
            ex("root.t = this.nope.type()", r#"{}"#, r#"{"t":"null"}"#),
        ],
        type_,
    ),
    method(
        "string",
        CAT,
        "The value as a string: strings as they are, bytes as text (bytes that are not UTF-8 stay bytes, unchanged), everything else as JSON.",
        &[],
        &[
            ex("root.s = this.n.string()", r#"{"n":5}"#, r#"{"s":"5"}"#),
            ex("root.s = this.o.string()", r#"{"o":{"a":[1,2]}}"#, r#"{"s":"{\"a\":[1,2]}"}"#),
        ],
        string,
    ),
    method(
        "number",
        CAT,
        "The value as a number, parsing strings; `default` is returned when that fails.",
        &[opt("default", Default::Absent)],
        &[
            ex("root.n = this.s.number() + 1", r#"{"s":"41"}"#, r#"{"n":42}"#),
            ex("root.n = this.s.number(0)", r#"{"s":"nope"}"#, r#"{"n":0}"#),
        ],
        number,
    ),
    method(
        "bool",
        CAT,
        "The value as a bool: `true`/`false` strings and non-zero numbers; `default` when that fails.",
        &[opt("default", Default::Absent)],
        &[
            ex("root.b = this.s.bool()", r#"{"s":"true"}"#, r#"{"b":true}"#),
            ex("root.b = this.n.bool()", r#"{"n":0}"#, r#"{"b":false}"#),
            ex("root.b = this.s.bool(true)", r#"{"s":"maybe"}"#, r#"{"b":true}"#),
        ],
        bool_,
    ),
    method(
        "bytes",
        CAT,
        "The value as bytes: strings as their UTF-8, everything else as JSON.",
        &[],
        &[ex("root.n = this.s.bytes().length()", r#"{"s":"héllo"}"#, r#"{"n":6}"#)],
        bytes_,
    ),
    method(
        "array",
        CAT,
        "The value as an array: arrays as they are, anything else wrapped in one.",
        &[],
        &[
            ex("root.a = this.x.array()", r#"{"x":1}"#, r#"{"a":[1]}"#),
            ex("root.a = this.x.array()", r#"{"x":[1]}"#, r#"{"a":[1]}"#),
        ],
        array_,
    ),
    method(
        "not_null",
        CAT,
        "The value, or an error when it is null.",
        &[opt("message", Default::Str("value is null"))],
        &[
            ex("root.a = this.a.not_null()", r#"{"a":1}"#, r#"{"a":1}"#),
            ex("root.a = this.b.not_null()", r#"{"a":1}"#, "error:value is null"),
        ],
        not_null,
    ),
    method(
        "not_empty",
        CAT,
        "The value, or an error when it is an empty string, array or object.",
        &[],
        &[
            ex("root.a = this.a.not_empty()", r#"{"a":"x"}"#, r#"{"a":"x"}"#),
            ex("root.a = this.a.not_empty()", r#"{"a":[]}"#, "error:empty"),
        ],
        not_empty,
    ),
    method(
        "exists",
        "Object & Array Manipulation",
        "Whether a dot path exists in the object (a null field exists).",
        &[p("path")],
        &[
            ex(r#"root.e = this.exists("a.b")"#, r#"{"a":{"b":null}}"#, r#"{"e":true}"#),
            ex(r#"root.e = this.exists("a.c")"#, r#"{"a":{"b":null}}"#, r#"{"e":false}"#),
        ],
        exists,
    ),
    lazy_method(
        "catch",
        "Error Handling",
        "The value, or `fallback` when computing it failed (null and deleted values are not failures). The fallback is a query run with `this` bound to the error message, or a lambda (`err -> ...`) given the message, in which `this` is unchanged.",
        &[crate::mapping::spec::Param { name: "fallback", kind: crate::mapping::spec::Kind::Lambda, default: Default::Required }],
        &[
            ex(r#"root.url = this.url.parse_url().catch(err -> {"error": err.has_prefix("this.url.parse_url()"), "input": this.url})"#,
               r#"{"url":"invalid %&# url"}"#, r#"{"url":{"error":true,"input":"invalid %&# url"}}"#),
            ex(r#"root.n = this.n.number().catch(e -> e.contains("x"))"#, r#"{"n":"x"}"#, r#"{"n":true}"#),
            ex(r#"root.n = this.s.number().catch(-1)"#, r#"{"s":"x"}"#, r#"{"n":-1}"#),
            ex(r#"root.n = this.s.number().catch(-1)"#, r#"{"s":"2"}"#, r#"{"n":2}"#),
        ],
        catch,
    ),
    lazy_method(
        "or",
        "Error Handling",
        "The value, or `fallback` when it is null or computing it failed.",
        &[p("fallback")],
        &[
            ex(r#"root.n = this.a.or("default")"#, r#"{}"#, r#"{"n":"default"}"#),
            ex(r#"root.n = this.a.or("default")"#, r#"{"a":"set"}"#, r#"{"n":"set"}"#),
        ],
        or,
    ),
    method(
        "not",
        "Boolean",
        "The logical negation of a bool.",
        &[],
        &[ex("root.b = this.b.not()", r#"{"b":true}"#, r#"{"b":false}"#)],
        not,
    ),
    lazy_method(
        "from",
        "Message Info",
        "Evaluates the query against another message of the batch, by index.",
        &[p("index")],
        &[ex("root.v = this.v.from(0)", r#"{"v":1}"#, r#"{"v":1}"#),
          ex(r#"root.m = meta("k").from(3)"#, r#"{"v":1}"#, r#"{"m":null}"#),
          ex(r#"root.m = metadata().from(-2)"#, r#"{"v":1}"#, r#"{"m":{}}"#),
          ex(r#"root.c = content().from(1).string()"#, r#"{"v":1}"#, r#"{"c":""}"#)],
        from,
    ),
    lazy_method(
        "from_all",
        "Message Info",
        "Evaluates the query against every message of the batch, giving an array.",
        &[],
        &[ex("root.all = this.v.from_all()", r#"{"v":1}"#, r#"{"all":[1]}"#)],
        from_all,
    ),
    lazy_method(
        "apply",
        "Mapping",
        "Runs a named `map` with the value as its input and returns what it built.",
        &[p("mapping")],
        &[ex(
            "map double {\n  root.v = this.v * 2\n}\nroot = this.apply(\"double\")",
            r#"{"v":21}"#,
            r#"{"v":42}"#,
        )],
        apply,
    ),
    lazy_method(
        "map",
        "Mapping",
        "Runs the query with `this` bound to the value (or the lambda with the value as its parameter) and gives the result.",
        &[lambda("query")],
        &[
            ex("root.total = this.order.map(o -> o.price * o.qty)", r#"{"order":{"price":2.5,"qty":4}}"#, r#"{"total":10}"#),
            ex("root.name = this.user.map(this.first + \" \" + this.last)", r#"{"user":{"first":"Ada","last":"Lovelace"}}"#, r#"{"name":"Ada Lovelace"}"#),
        ],
        map,
    ),
    method(
        "bloblang",
        "Mapping",
        "Runs a mapping given as a string with the value as its input and gives the document it builds. The mapping may not import files or call functions that read the environment (`env`, `file`) or the message (`content`, `meta`, `json`).",
        &[p("mapping")],
        &[
            ex("root.body = this.body.bloblang(this.mapping)", r#"{"body":{"foo":"hello world"},"mapping":"root.foo = this.foo.uppercase()"}"#,
               r#"{"body":{"foo":"HELLO WORLD"}}"#),
            ex("root.body = this.body.bloblang(this.mapping)", r#"{"body":{"foo":"hello world 2"},"mapping":"root.foo = this.foo.capitalize()"}"#,
               r#"{"body":{"foo":"Hello World 2"}}"#),
            ex(r#"root = this.bloblang("root.home = env(\"HOME\")")"#, "{}", "error:reads the host and is not available"),
            ex(r#"root = this.bloblang("root = ")"#, "{}", "error:failed to parse mapping"),
        ],
        bloblang,
    ),
];

/// Dynamic mappings compiled from their text, so one arriving with every message is
/// compiled once.
static DYNAMIC: super::Memo<crate::mapping::Mapping> = super::Memo::new();

fn bloblang<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    use crate::mapping::{Env, Mapping};
    let src = args.str(0)?;
    let mapping = DYNAMIC.get(src, || {
        let env = Env::default().no_message().sandboxed();
        Mapping::compile(src, &env).map_err(|d| format!("failed to parse mapping: {d}"))
    })?;
    mapping
        .query_value(v)
        .map(V::Own)
        .map_err(|e| e.to_string())
}

fn map<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let query = call.lambda(0)?;
    let out = exec::call_lambda(query, recv.get(), cx)?;
    Ok(out.detach())
}

fn type_<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(v.type_name())
}

pub(crate) fn to_string_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Timestamp(t) => crate::mapping::time::format_default(t),
        other => other.to_text(),
    }
}

fn string<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::String(_) => Ok(V::Ref(v)),
        // A string in the reference is any bytes: bytes that are not UTF-8 (a
        // ciphertext, say) stay bytes rather than lose themselves to replacement
        // characters, so that `.string().encode("hex")` gives them back.
        Value::Bytes(b) if std::str::from_utf8(b).is_err() => Ok(V::Ref(v)),
        other => own(to_string_value(other)),
    }
}

pub(crate) fn parse_number(s: &str) -> Option<Value> {
    let t = s.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Some(Value::Int(i));
    }
    t.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Value::Float)
}

fn number<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = match v {
        Value::Int(_) | Value::Float(_) | Value::BigInt(_) => return Ok(V::Ref(v)),
        Value::String(s) => {
            parse_number(s).ok_or_else(|| format!("cannot parse {} as a number", describe(v)))
        }
        Value::Bytes(b) => parse_number(&String::from_utf8_lossy(b))
            .ok_or_else(|| format!("cannot parse {} as a number", describe(v))),
        other => Err(type_err("number", other)),
    };
    match r {
        Ok(n) => own(n),
        Err(_) if args.given(0) => own(args.get(0).clone()),
        Err(e) => Err(e),
    }
}

fn bool_<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = match v {
        Value::Bool(_) => return Ok(V::Ref(v)),
        Value::Int(i) => Ok(*i != 0),
        Value::Float(f) => Ok(*f != 0.0),
        Value::String(s) => match s.trim() {
            "true" | "TRUE" | "True" | "t" | "T" | "1" => Ok(true),
            "false" | "FALSE" | "False" | "f" | "F" | "0" => Ok(false),
            _ => Err(format!("cannot parse {} as a bool", describe(v))),
        },
        other => Err(type_err("bool", other)),
    };
    match r {
        Ok(b) => own(b),
        Err(_) if args.given(0) => own(args.get(0).clone()),
        Err(e) => Err(e),
    }
}

fn bytes_<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Bytes(_) => Ok(V::Ref(v)),
        Value::String(s) => own(Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))),
        other => own(Value::Bytes(other.to_json().into())),
    }
}

fn array_<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Array(_) => Ok(V::Ref(v)),
        other => own(Value::Array(vec![other.clone()])),
    }
}

fn not_null<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Null => Err(args.str(0).unwrap_or("value is null").to_string()),
        _ => Ok(V::Ref(v)),
    }
}

fn not_empty<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let empty = match v {
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Null => return Err("value is null".into()),
        _ => false,
    };
    if empty {
        Err(format!("{} is empty", v.type_name()))
    } else {
        Ok(V::Ref(v))
    }
}

/// Splits a dot path; `\.`-free, as Bloblang paths are, with `~1` for a literal dot.
pub(crate) fn split_path(path: &str) -> Vec<String> {
    if path.is_empty() {
        return Vec::new();
    }
    path.split('.')
        .map(|s| s.replace("~1", ".").replace("~0", "~"))
        .collect()
}

fn exists<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let mut cur = v;
    for seg in split_path(args.str(0)?) {
        cur = match cur {
            Value::Object(o) => match o.get(&seg) {
                Some(x) => x,
                None => return own(false),
            },
            Value::Array(a) => match seg.parse::<usize>().ok().and_then(|i| a.get(i)) {
                Some(x) => x,
                None => return own(false),
            },
            _ => return own(false),
        };
    }
    own(true)
}

fn catch<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    match call.recv(cx) {
        Ok(v) => Ok(v),
        Err(e) => {
            let err = Value::String(e.msg);
            exec::call_lambda(call.lambda(0)?, &err, cx).map(V::detach)
        }
    }
}

fn or<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    match call.recv(cx) {
        Ok(v) if !v.is_marker() && !matches!(v.get(), Value::Null) => Ok(v),
        _ => call.arg(0, cx),
    }
}

thread_local! {
    /// How deep `apply` calls are nested on this thread: a map that applies itself must
    /// fail, not overflow the stack.
    static APPLY_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}
const MAX_APPLY_DEPTH: u32 = 32;

/// Counts one level of `apply` while alive.
struct DepthGuard;

impl DepthGuard {
    fn enter() -> Option<DepthGuard> {
        APPLY_DEPTH.with(|d| {
            if d.get() >= MAX_APPLY_DEPTH {
                None
            } else {
                d.set(d.get() + 1);
                Some(DepthGuard)
            }
        })
    }
}

impl Drop for DepthGuard {
    fn drop(&mut self) {
        APPLY_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

fn apply<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let name = call.arg(0, cx)?;
    let name = match name.get() {
        Value::String(s) => s.as_str(),
        other => return Err(call.err(type_err("string", other))),
    };
    let map = cx
        .prog
        .map(name)
        .ok_or_else(|| call.err(format!("map `{name}` is not defined")))?;
    let _guard = DepthGuard::enter().ok_or_else(|| {
        call.err(format!(
            "maps applied more than {MAX_APPLY_DEPTH} levels deep"
        ))
    })?;
    let mut fr = Frame {
        root: Slot::Nothing,
        vars: vec![None; cx.prog.var_names.len()],
        meta: Cow::Borrowed(cx.meta),
        this_is_root: false,
    };
    let msg: MsgView<'_> = cx.msg;
    exec::run(cx.prog, &map.body, &mut fr, This::Val(recv.get()), msg)
        .map_err(|e| call.err(format!("map `{name}` line {}: {}", e.line, e.msg)))?;
    Ok(match fr.root {
        Slot::Val(v) => V::Own(v),
        Slot::Deleted => V::Deleted,
        Slot::Nothing => V::Nothing,
    })
}

fn not<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Bool(b) => own(!b),
        other => Err(type_err("bool", other)),
    }
}

/// Evaluates the method's receiver query against message `i` of the batch.
fn query_message<'a>(call: &'a MethodCall, cx: &Ctx<'a>, i: usize) -> Result<Value, ExecError> {
    let Some(msg) = cx.msg.batch.and_then(|b| b.get(i)) else {
        // Past the batch (or with no batch at all) the query sees an empty message with no
        // metadata, as the reference does: `meta("k").from(5)` is null, `content()` empty.
        let empty = [crate::message::Message::new(bytes::Bytes::new())];
        let inner = Ctx {
            this: This::Msg(&empty[0]),
            msg: MsgView::of(&empty, 0),
            meta: empty[0].metadata(),
            ..*cx
        };
        return exec::eval(&call.recv, &inner).map(V::into_owned);
    };
    let batch = cx.msg.batch.unwrap_or_default();
    let inner = Ctx {
        this: This::Msg(msg),
        msg: MsgView::of(batch, i),
        meta: msg.metadata(),
        ..*cx
    };
    exec::eval(&call.recv, &inner).map(V::into_owned)
}

fn from<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let idx = call.arg(0, cx)?;
    let i = exec::to_int(idx.get()).map_err(|e| call.err(e))?;
    let size = cx.msg.batch.map(<[_]>::len).unwrap_or(0) as i64;
    let i = if i < 0 { size + i } else { i };
    // A position before the start reads the empty message too.
    let i = usize::try_from(i).unwrap_or(usize::MAX);
    query_message(call, cx, i).map(V::Own)
}

fn from_all<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let size = cx.msg.batch.map(<[_]>::len).unwrap_or(0);
    let mut out = Vec::with_capacity(size);
    for i in 0..size {
        out.push(query_message(call, cx, i)?);
    }
    Ok(V::Own(Value::Array(out)))
}
