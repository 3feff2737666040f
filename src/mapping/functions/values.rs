//! Functions that build values or control the result: `range`, `throw`, `deleted`,
//! `nothing`.

use crate::mapping::compile::FuncCall;
use crate::mapping::exec::{own, Ctx, V};
use crate::mapping::spec::{ex, opt, p, Args, Default, FunctionSpec, Res};
use crate::value::Value;

pub static SPECS: &[FunctionSpec] = &[
    FunctionSpec {
        name: "range",
        category: "General",
        description: "An array of integers from `start` up to (not including) `stop`, by `step`.",
        params: &[p("start"), p("stop"), opt("step", Default::Int(1))],
        examples: &[
            ex("root.a = range(0, 5)", "{}", r#"{"a":[0,1,2,3,4]}"#),
            ex("root.a = range(10, 0, -3)", "{}", r#"{"a":[10,7,4,1]}"#),
        ],
        pure: true,
        needs_message: false,
        imp: range,
    },
    FunctionSpec {
        name: "throw",
        category: "General",
        description: "Fails the mapping with the given message.",
        params: &[p("why")],
        examples: &[ex(
            r#"root = if this.n < 0 { throw("negative") } else { this.n }"#,
            r#"{"n":-1}"#,
            "error:negative",
        )],
        pure: false,
        needs_message: false,
        imp: throw,
    },
    FunctionSpec {
        name: "deleted",
        category: "General",
        description:
            "Removes the assignment's target: a field, an array item, or the whole message.",
        params: &[],
        examples: &[ex(
            "root = this\nroot.b = deleted()",
            r#"{"a":1,"b":2}"#,
            r#"{"a":1}"#,
        )],
        pure: true,
        needs_message: false,
        imp: marker,
    },
    FunctionSpec {
        name: "nothing",
        category: "General",
        description: "Skips the assignment it is the value of.",
        params: &[],
        examples: &[ex(
            "root = this\nroot.a = nothing()",
            r#"{"a":1}"#,
            r#"{"a":1}"#,
        )],
        pure: true,
        needs_message: false,
        imp: marker,
    },
];

fn range<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let (start, stop, step) = (args.int(0)?, args.int(1)?, args.int(2)?);
    if step == 0 {
        return Err("step must not be zero".into());
    }
    let n = ((stop as f64 - start as f64) / step as f64).ceil();
    if n > 1_000_000.0 {
        return Err("range would have more than a million items".into());
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(Value::Int(i));
        match i.checked_add(step) {
            Some(next) => i = next,
            None => break,
        }
    }
    own(Value::Array(out))
}

fn throw<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    Err(args.str(0)?.to_string())
}

/// Never called: `deleted()` and `nothing()` compile to markers directly.
fn marker<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    Ok(V::Nothing)
}
