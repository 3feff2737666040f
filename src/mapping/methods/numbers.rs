//! Numbers: rounding, math, and conversions to sized integer and float types.

use crate::mapping::exec::{own, to_float, to_int, V};
use crate::mapping::spec::{
    describe, ex, method, opt, p, type_err, Args, Default, MethodSpec, Res,
};
use crate::value::Value;

const CAT: &str = "Number Manipulation";

pub static SPECS: &[MethodSpec] = &[
    method(
        "abs",
        CAT,
        "The absolute value.",
        &[],
        &[ex("root.n = this.n.abs()", r#"{"n":-5.5}"#, r#"{"n":5.5}"#)],
        abs,
    ),
    method(
        "ceil",
        CAT,
        "Rounds up to a whole number.",
        &[],
        &[ex("root.n = this.n.ceil()", r#"{"n":5.2}"#, r#"{"n":6}"#)],
        ceil,
    ),
    method(
        "floor",
        CAT,
        "Rounds down to a whole number.",
        &[],
        &[ex("root.n = this.n.floor()", r#"{"n":5.7}"#, r#"{"n":5}"#)],
        floor,
    ),
    method(
        "round",
        CAT,
        "Rounds to the nearest whole number, halves away from zero.",
        &[],
        &[ex("root.n = this.n.round()", r#"{"n":5.5}"#, r#"{"n":6}"#)],
        round,
    ),
    method(
        "log",
        CAT,
        "The natural logarithm.",
        &[],
        &[ex(
            "root.n = this.n.log().round()",
            r#"{"n":100}"#,
            r#"{"n":5}"#,
        )],
        log,
    ),
    method(
        "log10",
        CAT,
        "The base-10 logarithm.",
        &[],
        &[ex("root.n = this.n.log10()", r#"{"n":100}"#, r#"{"n":2}"#)],
        log10,
    ),
    method(
        "pow",
        CAT,
        "The number raised to a power.",
        &[p("exponent")],
        &[ex("root.n = this.n.pow(2)", r#"{"n":3}"#, r#"{"n":9}"#)],
        pow,
    ),
    method(
        "sqrt",
        CAT,
        "The square root.",
        &[],
        &[ex("root.n = this.n.sqrt()", r#"{"n":16}"#, r#"{"n":4}"#)],
        sqrt,
    ),
    method(
        "cos",
        CAT,
        "The cosine of an angle in radians.",
        &[],
        &[ex("root.n = this.n.cos()", r#"{"n":0}"#, r#"{"n":1}"#)],
        cos,
    ),
    method(
        "sin",
        CAT,
        "The sine of an angle in radians.",
        &[],
        &[ex("root.n = this.n.sin()", r#"{"n":0}"#, r#"{"n":0}"#)],
        sin,
    ),
    method(
        "tan",
        CAT,
        "The tangent of an angle in radians.",
        &[],
        &[ex("root.n = this.n.tan()", r#"{"n":0}"#, r#"{"n":0}"#)],
        tan,
    ),
    method(
        "max",
        CAT,
        "The largest number of an array.",
        &[],
        &[ex(
            "root.n = this.a.max()",
            r#"{"a":[1,9.5,3]}"#,
            r#"{"n":9.5}"#,
        )],
        max,
    ),
    method(
        "min",
        CAT,
        "The smallest number of an array.",
        &[],
        &[ex(
            "root.n = this.a.min()",
            r#"{"a":[4,2,3]}"#,
            r#"{"n":2}"#,
        )],
        min,
    ),
    method(
        "int64",
        CAT,
        "The value as a 64-bit signed integer, parsing strings.",
        &[],
        &[ex(
            "root.n = this.n.int64()",
            r#"{"n":"-12"}"#,
            r#"{"n":-12}"#,
        )],
        int64,
    ),
    method(
        "int32",
        CAT,
        "The value as a 32-bit signed integer; out of range is an error.",
        &[],
        &[
            ex("root.n = this.n.int32()", r#"{"n":5.0}"#, r#"{"n":5}"#),
            ex(
                "root.n = this.n.int32()",
                r#"{"n":3000000000}"#,
                "error:out of range",
            ),
        ],
        int32,
    ),
    method(
        "int16",
        CAT,
        "The value as a 16-bit signed integer.",
        &[],
        &[],
        int16,
    ),
    method(
        "int8",
        CAT,
        "The value as an 8-bit signed integer.",
        &[],
        &[],
        int8,
    ),
    method(
        "uint64",
        CAT,
        "The value as a 64-bit unsigned integer.",
        &[],
        &[ex(
            "root.n = this.n.uint64()",
            r#"{"n":"12"}"#,
            r#"{"n":12}"#,
        )],
        uint64,
    ),
    method(
        "uint32",
        CAT,
        "The value as a 32-bit unsigned integer.",
        &[],
        &[],
        uint32,
    ),
    method(
        "uint16",
        CAT,
        "The value as a 16-bit unsigned integer.",
        &[],
        &[],
        uint16,
    ),
    method(
        "uint8",
        CAT,
        "The value as an 8-bit unsigned integer.",
        &[],
        &[],
        uint8,
    ),
    method(
        "float64",
        CAT,
        "The value as a 64-bit float, parsing strings.",
        &[],
        &[ex(
            "root.n = this.n.float64()",
            r#"{"n":"1.5"}"#,
            r#"{"n":1.5}"#,
        )],
        float64,
    ),
    method(
        "float32",
        CAT,
        "The value as a 32-bit float.",
        &[],
        &[],
        float32,
    ),
    method(
        "bitwise_and",
        CAT,
        "Bitwise AND with an integer.",
        &[p("value")],
        &[ex(
            "root.n = this.n.bitwise_and(6)",
            r#"{"n":12}"#,
            r#"{"n":4}"#,
        )],
        bit_and,
    ),
    method(
        "bitwise_or",
        CAT,
        "Bitwise OR with an integer.",
        &[p("value")],
        &[ex(
            "root.n = this.n.bitwise_or(6)",
            r#"{"n":12}"#,
            r#"{"n":14}"#,
        )],
        bit_or,
    ),
    method(
        "bitwise_xor",
        CAT,
        "Bitwise XOR with an integer.",
        &[p("value")],
        &[ex(
            "root.n = this.n.bitwise_xor(6)",
            r#"{"n":12}"#,
            r#"{"n":10}"#,
        )],
        bit_xor,
    ),
    method(
        "clamp",
        CAT,
        "The number limited to the range [min, max].",
        &[opt("min", Default::Null), opt("max", Default::Null)],
        &[ex(
            "root.n = this.n.clamp(0, 10)",
            r#"{"n":12}"#,
            r#"{"n":10}"#,
        )],
        clamp,
    ),
];

fn num_fn<'b>(v: &Value, f: impl Fn(f64) -> f64) -> Res<V<'b>> {
    match v {
        Value::Int(i) => own(Value::Float(f(*i as f64))),
        Value::Float(x) => own(Value::Float(f(*x))),
        other => Err(type_err("number", other)),
    }
}

/// Rounding keeps integers as they are and gives integers when the result fits.
fn rounding<'b>(v: &'b Value, f: impl Fn(f64) -> f64) -> Res<V<'b>> {
    match v {
        Value::Int(_) => Ok(V::Ref(v)),
        Value::Float(x) => {
            let r = f(*x);
            if r.abs() < 9.0e15 {
                own(r as i64)
            } else {
                own(r)
            }
        }
        other => Err(type_err("number", other)),
    }
}

fn abs<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Int(i) => own(i
            .checked_abs()
            .map(Value::Int)
            .unwrap_or(Value::Float((*i as f64).abs()))),
        _ => num_fn(v, f64::abs),
    }
}
fn ceil<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    rounding(v, f64::ceil)
}
fn floor<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    rounding(v, f64::floor)
}
fn round<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    rounding(v, f64::round)
}
fn log<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    num_fn(v, f64::ln)
}
fn log10<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    num_fn(v, f64::log10)
}
fn sqrt<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    num_fn(v, f64::sqrt)
}
fn cos<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    num_fn(v, f64::cos)
}
fn sin<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    num_fn(v, f64::sin)
}
fn tan<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    num_fn(v, f64::tan)
}
fn pow<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let e = args.float(0)?;
    num_fn(v, |x| x.powf(e))
}

fn extreme<'b>(v: &'b Value, want: std::cmp::Ordering) -> Res<V<'b>> {
    let a = super::array(v)?;
    let mut best: Option<&Value> = None;
    for x in a {
        to_float(x)?;
        best = match best {
            Some(b) if crate::mapping::exec::compare(x, b)? != want => Some(b),
            _ => Some(x),
        };
    }
    best.map(V::Ref)
        .ok_or_else(|| "the array is empty".to_string())
}
fn max<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    extreme(v, std::cmp::Ordering::Greater)
}
fn min<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    extreme(v, std::cmp::Ordering::Less)
}

/// An integer from a number or a numeric string; fractions are an error.
fn whole(v: &Value) -> Res<i128> {
    match v {
        Value::Int(i) => Ok(*i as i128),
        Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Ok(*f as i128),
        Value::Float(_) => Err(format!(
            "cannot convert {} to an integer without losing its fraction",
            describe(v)
        )),
        Value::String(s) => s
            .trim()
            .parse::<i128>()
            .or_else(|_| match s.trim().parse::<f64>() {
                Ok(f) if f.fract() == 0.0 => Ok(f as i128),
                _ => Err(()),
            })
            .map_err(|_| format!("cannot parse {} as an integer", describe(v))),
        other => Err(type_err("number", other)),
    }
}

fn sized<'b>(v: &'b Value, min: i128, max: i128) -> Res<V<'b>> {
    let n = whole(v)?;
    if n < min || n > max {
        return Err(format!("value {n} is out of range [{min}, {max}]"));
    }
    match i64::try_from(n) {
        Ok(i) => own(i),
        Err(_) => own(n as f64),
    }
}
fn int64<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, i64::MIN as i128, i64::MAX as i128)
}
fn int32<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, i32::MIN as i128, i32::MAX as i128)
}
fn int16<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, i16::MIN as i128, i16::MAX as i128)
}
fn int8<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, i8::MIN as i128, i8::MAX as i128)
}
fn uint64<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, 0, u64::MAX as i128)
}
fn uint32<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, 0, u32::MAX as i128)
}
fn uint16<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, 0, u16::MAX as i128)
}
fn uint8<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    sized(v, 0, u8::MAX as i128)
}
fn float64<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map(|f| V::Own(Value::Float(f)))
            .map_err(|_| format!("cannot parse {} as a float", describe(v))),
        other => own(to_float(other)?),
    }
}
fn float32<'b>(v: &'b Value, a: &Args<'_>) -> Res<V<'b>> {
    match float64(v, a)? {
        V::Own(Value::Float(f)) => own((f as f32) as f64),
        other => own(to_float(other.get())? as f32 as f64),
    }
}
fn bits<'b>(v: &'b Value, args: &Args<'_>, f: fn(i64, i64) -> i64) -> Res<V<'b>> {
    own(f(to_int(v)?, args.int(0)?))
}
fn bit_and<'b>(v: &'b Value, a: &Args<'_>) -> Res<V<'b>> {
    bits(v, a, |x, y| x & y)
}
fn bit_or<'b>(v: &'b Value, a: &Args<'_>) -> Res<V<'b>> {
    bits(v, a, |x, y| x | y)
}
fn bit_xor<'b>(v: &'b Value, a: &Args<'_>) -> Res<V<'b>> {
    bits(v, a, |x, y| x ^ y)
}
fn clamp<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    to_float(v)?;
    if !matches!(args.get(0), Value::Null)
        && crate::mapping::exec::compare(v, args.get(0))? == std::cmp::Ordering::Less
    {
        return own(args.get(0).clone());
    }
    if !matches!(args.get(1), Value::Null)
        && crate::mapping::exec::compare(v, args.get(1))? == std::cmp::Ordering::Greater
    {
        return own(args.get(1).clone());
    }
    Ok(V::Ref(v))
}
