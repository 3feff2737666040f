//! Functions that build values or control the result: `range`, `throw`, `deleted`,
//! `nothing`, constants and byte buffers, and reading a variable by name.

use crate::mapping::exec::{own, Ctx, V};
use crate::mapping::program::FuncCall;
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
            ex("root.a = range(0, 10)\nroot.b = range(start: 0, stop: this.max, step: 2)\nroot.c = range(0, -this.max, -2)",
               r#"{"max":10}"#, r#"{"a":[0,1,2,3,4,5,6,7,8,9],"b":[0,2,4,6,8],"c":[0,-2,-4,-6,-8]}"#),
            ex("root.a = range(5, 0)", "{}", "error:with a positive step, start (5) must be less than stop (0)"),
            ex("root.a = range(0, 5, -1)", "{}", "error:with a negative step, start (0) must be greater than stop (5)"),
            ex("root.a = range(0, 0)", "{}", "error:start (0) must be less than stop (0)"),
            ex("root.a = range(0, 5, 0)", "{}", "error:step must not be zero"),
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
    FunctionSpec {
        name: "pi",
        category: "General",
        description: "The number π.",
        params: &[],
        examples: &[
            ex("root.radians = this.degrees * (pi() / 180)", r#"{"degrees":45}"#, r#"{"radians":0.7853981633974483}"#),
            ex("root.degrees = this.radians * (180 / pi())", r#"{"radians":0.78540}"#, r#"{"degrees":45.00010522957486}"#),
        ],
        pure: true,
        needs_message: false,
        imp: pi,
    },
    FunctionSpec {
        name: "bytes",
        category: "General",
        description: "A byte array of `length` zero bytes.",
        params: &[p("length")],
        examples: &[
            ex("root.data = bytes(3).encode(\"hex\")", "{}", r#"{"data":"000000"}"#),
            ex("root.data = bytes(-1)", "{}", "error:length must be"),
        ],
        pure: true,
        needs_message: false,
        imp: zero_bytes,
    },
    FunctionSpec {
        name: "with_schema_registry_header",
        category: "General",
        description: "The message bytes behind a Confluent Schema Registry header: a zero magic byte and the schema id as four big-endian bytes.",
        params: &[p("schema_id"), p("message")],
        examples: &[
            ex("root = with_schema_registry_header(123, \"hi\").encode(\"hex\")", "{}", "000000007b6869"),
            ex("root = with_schema_registry_header(4294967296, \"hi\")", "{}", "error:schema_id must be"),
        ],
        pure: true,
        needs_message: false,
        imp: with_schema_registry_header,
    },
    FunctionSpec {
        name: "cosine_similarity",
        category: "General",
        description: "The cosine similarity of two vectors of numbers (integers and floats may mix): their dot product over the product of their lengths, from -1 to 1. The vectors must be non-empty, of the same length and not all zeros.",
        params: &[p("a"), p("b")],
        examples: &[
            ex("root.s = cosine_similarity(this.a, this.b)", r#"{"a":[3,4],"b":[6,8.0]}"#, r#"{"s":1}"#),
            ex("root.s = cosine_similarity(this.a, this.b)", r#"{"a":[1,0],"b":[0,1.5]}"#, r#"{"s":0}"#),
            ex("root.s = cosine_similarity(this.a, this.b)", r#"{"a":[3,4],"b":[-3.0,-4]}"#, r#"{"s":-1}"#),
            ex("root.s = cosine_similarity([1, 2.5, 3], [4, 5, 6.5])", "{}", r#"{"s":0.9787768683434229}"#),
            ex("root.s = cosine_similarity([1, 2], [1, 2, 3])", "{}", "error:vectors of different lengths (2 and 3)"),
            ex("root.s = cosine_similarity([0, 0], [1, 2])", "{}", "error:zero vector"),
            ex(r#"root.s = cosine_similarity([1, "x"], [1, 2])"#, "{}", "error:a[1]: expected number value"),
        ],
        pure: true,
        needs_message: false,
        imp: cosine_similarity,
    },
    FunctionSpec {
        name: "var",
        category: "General",
        description: "The value of the variable named by the argument, as `$name` reads it; an error when it is not set.",
        params: &[p("name")],
        examples: &[
            ex("let who = \"world\"\nroot.greeting = \"hello \" + var(\"who\")", "{}", r#"{"greeting":"hello world"}"#),
            ex("root.v = var(\"nope\")", "{}", "error:variable `$nope` is undefined"),
        ],
        pure: false,
        needs_message: false,
        imp: var,
    },
];

fn cosine_similarity<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let vector = |i: usize, name: &str| -> Res<Vec<f64>> {
        let items =
            crate::mapping::methods::array(args.get(i)).map_err(|e| format!("{name}: {e}"))?;
        items
            .iter()
            .enumerate()
            .map(|(k, x)| {
                crate::mapping::exec::to_float(x).map_err(|e| format!("{name}[{k}]: {e}"))
            })
            .collect()
    };
    let (a, b) = (vector(0, "a")?, vector(1, "b")?);
    if a.len() != b.len() {
        return Err(format!(
            "cannot compare vectors of different lengths ({} and {})",
            a.len(),
            b.len()
        ));
    }
    if a.is_empty() {
        return Err("cannot compare empty vectors".into());
    }
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        return Err("the cosine similarity of a zero vector is undefined".into());
    }
    own(dot / (na * nb))
}

fn pi<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(std::f64::consts::PI)
}

/// Buffers larger than this are refused, so a stray argument cannot exhaust memory.
const MAX_BYTES: i64 = 256 << 20;

fn zero_bytes<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let n = args.int(0)?;
    if !(0..=MAX_BYTES).contains(&n) {
        return Err(format!("length must be between 0 and {MAX_BYTES}, got {n}"));
    }
    crate::mapping::budget::fits((n as usize).saturating_add(crate::value::NODE))?;
    own(Value::Bytes(vec![0u8; n as usize].into()))
}

fn with_schema_registry_header<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let id = args.int(0)?;
    let id = u32::try_from(id)
        .map_err(|_| format!("schema_id must be between 0 and 4294967295, got {id}"))?;
    let body = crate::mapping::methods::raw(args.get(1)).map_err(|e| format!("message: {e}"))?;
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&body);
    own(Value::Bytes(out.into()))
}

fn var<'a>(_: &'a FuncCall, args: &Args<'_>, cx: &Ctx<'a>) -> Res<V<'a>> {
    let name = args.str(0)?;
    let slot = cx.prog.var_names.iter().position(|n| n == name);
    match slot.and_then(|s| cx.vars.get(s)) {
        Some(Some(v)) => Ok(V::Ref(v)),
        _ => Err(format!("variable `${name}` is undefined")),
    }
}

fn range<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let (start, stop, step) = (args.int(0)?, args.int(1)?, args.int(2)?);
    // As in Bloblang, a range that would be empty is an error: the arguments disagree.
    if step == 0 {
        return Err("step must not be zero".into());
    }
    if step > 0 && start >= stop {
        return Err(format!(
            "with a positive step, start ({start}) must be less than stop ({stop})"
        ));
    }
    if step < 0 && start <= stop {
        return Err(format!(
            "with a negative step, start ({start}) must be greater than stop ({stop})"
        ));
    }
    let n = ((stop as f64 - start as f64) / step as f64).ceil();
    if n > 1_000_000.0 {
        return Err("range would have more than a million items".into());
    }
    crate::mapping::budget::fits((n as usize + 1).saturating_mul(crate::value::NODE))?;
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
