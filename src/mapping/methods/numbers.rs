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
        &[ex("root.a = this.a.int64()\nroot.b = this.b.round().int64()\nroot.c = this.c.int64()\nroot.d = this.d.int64().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":-12}"#),
          ex("root = this.int64()", r#""0xDEADBEEF""#, "3735928559"), ex(
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
        &[ex("root.a = this.a.int32()\nroot.b = this.b.round().int32()\nroot.c = this.c.int32()\nroot.d = this.d.int32().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":-12}"#),
          ex("root = this.int32()", r#""0xDEAD""#, "57005"), ex("root.a = this.a.int16()\nroot.b = this.b.round().int16()\nroot.c = this.c.int16()\nroot.d = this.d.int16().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":-12}"#),
          ex("root = this.int16()", r#""0xDE""#, "222")],
        int16,
    ),
    method(
        "int8",
        CAT,
        "The value as an 8-bit signed integer.",
        &[],
        &[ex("root.a = this.a.int8()\nroot.b = this.b.round().int8()\nroot.c = this.c.int8()\nroot.d = this.d.int8().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":-12}"#),
          ex("root = this.int8()", r#""0xD""#, "13")],
        int8,
    ),
    method(
        "uint64",
        CAT,
        "The value as a 64-bit unsigned integer.",
        &[],
        &[ex("root.a = this.a.uint64()\nroot.b = this.b.round().uint64()\nroot.c = this.c.uint64()\nroot.d = this.d.uint64().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":0}"#),
          ex("root = this.uint64()", r#""0xDEADBEEF""#, "3735928559"), ex(
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
        &[ex("root.a = this.a.uint32()\nroot.b = this.b.round().uint32()\nroot.c = this.c.uint32()\nroot.d = this.d.uint32().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":0}"#),
          ex("root = this.uint32()", r#""0xDEAD""#, "57005")],
        uint32,
    ),
    method(
        "uint16",
        CAT,
        "The value as a 16-bit unsigned integer.",
        &[],
        &[ex("root.a = this.a.uint16()\nroot.b = this.b.round().uint16()\nroot.c = this.c.uint16()\nroot.d = this.d.uint16().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":0}"#),
          ex("root = this.uint16()", r#""0xDE""#, "222")],
        uint16,
    ),
    method(
        "uint8",
        CAT,
        "The value as an 8-bit unsigned integer.",
        &[],
        &[ex("root.a = this.a.uint8()\nroot.b = this.b.round().uint8()\nroot.c = this.c.uint8()\nroot.d = this.d.uint8().catch(0)", r#"{"a":12,"b":12.34,"c":"12","d":-12}"#, r#"{"a":12,"b":12,"c":12,"d":0}"#),
          ex("root = this.uint8()", r#""0xD""#, "13")],
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
        "parse_big_decimal",
        CAT,
        "Parses a decimal number from a string (or takes a number): whole numbers stay exact integers (past 64 bits too, up to 38 digits), others become floats. Signs, exponents and surrounding spaces are allowed; anything else is an error.",
        &[],
        &[ex("root.a = this.a.parse_big_decimal()\nroot.b = this.b.parse_big_decimal()\nroot.c = this.c.parse_big_decimal()", r#"{"a":"123.456","b":"-9007199254740993","c":"1.5e3"}"#, r#"{"a":123.456,"b":-9007199254740993,"c":1500}"#),
          ex("root.n = this.n.parse_big_decimal()\nroot.s = root.n.string()", r#"{"n":"123456789012345678901234567890"}"#, r#"{"n":123456789012345678901234567890,"s":"123456789012345678901234567890"}"#),
          ex("root.a = this.a.parse_big_decimal()", r#"{"a":"12a"}"#, "error:cannot parse string (\"12a\") as a decimal number")],
        parse_big_decimal,
    ),
    method(
        "float32",
        CAT,
        "The value as a 32-bit float, printed with the digits a 32-bit float has.",
        &[],
        &[ex("root.out = this.in.float32()", r#"{"in":"6.674282313423543523453425345e-11"}"#, r#"{"out":6.674283e-11}"#),
          ex("root.out = this.in.float32()", r#"{"in":0.1}"#, r#"{"out":0.1}"#)],
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
        Value::String(s) => go_int(s.trim())
            .or_else(|| match s.trim().parse::<f64>() {
                Ok(f) if f.fract() == 0.0 && f.is_finite() => Some(f as i128),
                _ => None,
            })
            .ok_or_else(|| format!("cannot parse {} as an integer", describe(v))),
        other => Err(type_err("number", other)),
    }
}

/// An integer written as Go's `strconv.ParseInt` reads it with base 0: an optional sign,
/// then `0x`, `0o`, `0b` or a leading `0` (octal) for the base, underscores allowed
/// between digits when a base prefix is given.
pub(crate) fn go_int(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower, false)
    };
    let digits = if prefixed {
        if digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
            return None;
        }
        digits.replace('_', "")
    } else {
        digits
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let n = i128::from_str_radix(&digits, radix).ok()?;
    Some(if neg { -n } else { n })
}

fn parse_big_decimal<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let text = match v {
        Value::Int(_) | Value::Float(_) | Value::BigInt(_) => return Ok(V::Ref(v)),
        Value::String(s) => s.trim(),
        other => return Err(type_err("string", other)),
    };
    let bad = || format!("cannot parse {} as a decimal number", describe(v));
    let plain = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exp) = match plain.find(['e', 'E']) {
        Some(i) => (&plain[..i], Some(&plain[i + 1..])),
        None => (plain, None),
    };
    let (int_part, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_ok = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac.is_empty())
        || !digits_ok(int_part)
        || !digits_ok(frac)
        || exp.is_some_and(|e| e.parse::<i32>().is_err())
    {
        return Err(bad());
    }
    if exp.is_none() && frac.trim_end_matches('0').is_empty() {
        let whole = text.split('.').next().unwrap_or("");
        if let Ok(i) = whole.parse::<i64>() {
            return own(i);
        }
        // Past 64 bits a whole number keeps its digits exactly.
        if let Ok(i) = whole.parse::<i128>() {
            return own(Value::BigInt(i.to_string().into()));
        }
    }
    let f: f64 = text.parse().map_err(|_| bad())?;
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 {
        return own(f as i64);
    }
    own(f)
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
        V::Own(Value::Float(f)) => own(f32_as_f64(f as f32)),
        other => own(f32_as_f64(to_float(other.get())? as f32)),
    }
}
/// The 64-bit float with the shortest digits of a 32-bit float, so that it prints as the
/// 32-bit float does (`6.674283e-11`, not `6.674283051943271e-11`).
fn f32_as_f64(f: f32) -> f64 {
    if !f.is_finite() {
        return f as f64;
    }
    f.to_string().parse::<f64>().unwrap_or(f as f64)
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
