//! Functions that read the message being mapped and its place in the batch.

use bytes::Bytes;

use crate::mapping::exec::{own, Ctx, V};
use crate::mapping::program::FuncCall;
use crate::mapping::spec::{ex, opt, Args, Default, FunctionSpec, Res};
use crate::value::Value;

const CAT: &str = "Message Info";

const fn spec(
    name: &'static str,
    description: &'static str,
    params: &'static [crate::mapping::spec::Param],
    examples: &'static [crate::mapping::spec::Example],
    imp: crate::mapping::spec::FunctionImpl,
) -> FunctionSpec {
    FunctionSpec {
        name,
        category: CAT,
        description,
        params,
        examples,
        pure: false,
        needs_message: true,
        imp,
    }
}

pub static SPECS: &[FunctionSpec] = &[
    spec(
        "content",
        "The raw content of the message, as bytes.",
        &[],
        &[ex("root.doc = content().string()", r#"{"a":1}"#, r#"{"doc":"{\"a\":1}"}"#)],
        content,
    ),
    spec(
        "batch_index",
        "The position of the message in its batch, from zero.",
        &[],
        &[ex("root.i = batch_index()", "{}", r#"{"i":0}"#)],
        batch_index,
    ),
    spec(
        "batch_size",
        "The number of messages in the batch.",
        &[],
        &[ex("root.n = batch_size()", "{}", r#"{"n":1}"#)],
        batch_size,
    ),
    spec(
        "meta",
        "A metadata value of the input message as a string, or null. Without a key, all metadata as an object of strings.",
        &[opt("key", Default::Absent)],
        &[ex(r#"root.t = meta("nope")"#, "{}", r#"{"t":null}"#)],
        meta,
    ),
    spec(
        "metadata",
        "A metadata value of the input message, typed, or null. Without a key, all metadata as an object.",
        &[opt("key", Default::Absent)],
        &[ex(r#"root.all = metadata()"#, "{}", r#"{"all":{}}"#)],
        metadata,
    ),
    spec(
        "root_meta",
        "Deprecated form of `metadata`, kept for old mappings.",
        &[opt("key", Default::Absent)],
        &[],
        metadata,
    ),
    spec(
        "error",
        "The error a previous processor set on the message, or null.",
        &[],
        &[ex("root.e = error()", "{}", r#"{"e":null}"#)],
        error,
    ),
    spec(
        "errored",
        "Whether a previous processor failed on the message.",
        &[],
        &[ex("root.failed = errored()", "{}", r#"{"failed":false}"#)],
        errored,
    ),
    spec("error_source_label", "The label of the component that failed, or null.", &[], &[], null_fn),
    spec("error_source_name", "The name of the component that failed, or null.", &[], &[], null_fn),
    spec("error_source_path", "The path of the component that failed, or null.", &[], &[], null_fn),
    spec("error_source_type", "The type of the component that failed (such as `mapping`), or null.", &[], &[ex("root.t = error_source_type()", "{}", r#"{"t":null}"#)], null_fn),
    spec(
        "flow_id",
        "The id that follows the message through the pipeline, for tracing its journey: the `flow_id` metadata of the message when it has one, otherwise a new UUID (set it with `meta flow_id = flow_id()` to keep it).",
        &[],
        &[ex("root.same = flow_id() == flow_id()", "{}", r#"{"same":false}"#)],
        flow_id,
    ),
    spec("tracing_id", "The trace id of the message, or null when tracing is off.", &[], &[], null_fn),
    spec("tracing_span", "The tracing span of the message, or null when tracing is off.", &[], &[], null_fn),
    spec(
        "json",
        "A field of the message's JSON content by dot path; the whole document without one.",
        &[opt("path", Default::Str(""))],
        &[ex(r#"root.v = json("a.b")"#, r#"{"a":{"b":3}}"#, r#"{"v":3}"#)],
        json,
    ),
];

fn content<'a>(_: &'a FuncCall, _: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    match cx.msg.payload() {
        Some(b) => own(Value::Bytes(b.clone())),
        None => own(Value::Bytes(Bytes::new())),
    }
}

fn batch_index<'a>(_: &'a FuncCall, _: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    own(cx.msg.index as i64)
}

fn batch_size<'a>(_: &'a FuncCall, _: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    own(cx.msg.size as i64)
}

fn input_meta<'a>(cx: &Ctx<'a>) -> &'a crate::message::Metadata {
    cx.msg.meta_in.unwrap_or(cx.meta)
}

fn meta<'a>(_: &'a FuncCall, args: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    let m = input_meta(cx);
    if !args.given(0) {
        return own(Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.to_text())))
                .collect(),
        ));
    }
    match m.get(args.str(0)?) {
        Some(Value::String(s)) => own(s.as_str()),
        Some(v) => own(v.to_text()),
        None => Ok(V::Own(Value::Null)),
    }
}

fn metadata<'a>(_: &'a FuncCall, args: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    let m = input_meta(cx);
    if !args.given(0) {
        return own(Value::Object(m.clone()));
    }
    match m.get(args.str(0)?) {
        Some(v) => Ok(V::Ref(v)),
        None => Ok(V::Own(Value::Null)),
    }
}

fn error<'a>(_: &'a FuncCall, _: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    own(cx.msg.error.map(Value::from).unwrap_or(Value::Null))
}

fn errored<'a>(_: &'a FuncCall, _: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    own(cx.msg.error.is_some())
}

fn flow_id<'a>(_: &'a FuncCall, _: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    match input_meta(cx).get("flow_id") {
        Some(Value::String(s)) if !s.is_empty() => own(s.as_str()),
        Some(v) if !matches!(v, Value::Null) => own(v.to_text()),
        _ => own(uuid::Uuid::new_v4().to_string()),
    }
}

fn null_fn<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(Value::Null)
}

fn json<'a>(_: &'a FuncCall, args: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    let doc = match cx.msg.msg {
        Some(m) => m.structured().map_err(|e| e.to_string())?,
        None => return Err("no message to read JSON from".into()),
    };
    let path = args.str(0)?;
    let mut cur = doc;
    if !path.is_empty() {
        for seg in path.split('.') {
            cur = crate::mapping::exec::field(cur, seg);
        }
    }
    Ok(V::Ref(cur))
}
