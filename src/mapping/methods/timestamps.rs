//! Timestamps and durations. Layouts are Go reference layouts
//! (`2006-01-02T15:04:05Z07:00`) or strftime (`%Y-%m-%d`); the local zone follows `TZ`.

use chrono::{DateTime, FixedOffset};

use super::text;
use crate::mapping::exec::{own, V};
use crate::mapping::go_time::parse_strptime;
use crate::mapping::period::Period;
use crate::mapping::spec::{ex, method, opt, p, type_err, Args, Default, MethodSpec, Res};
use crate::mapping::time::{
    format_default, format_go, from_unix_nanos, in_zone, parse_duration as go_duration, parse_go,
    parse_iso8601_duration,
};
use crate::value::Value;

const CAT: &str = "Timestamp Manipulation";

pub static SPECS: &[MethodSpec] = &[
    method(
        "ts_parse",
        CAT,
        "Parses a string with a Go layout into a timestamp.",
        &[p("format")],
        &[ex(
            r#"root.t = this.s.ts_parse("2006-01-02")"#,
            r#"{"s":"2020-08-14"}"#,
            r#"{"t":"2020-08-14T00:00:00Z"}"#,
        )],
        ts_parse,
    ),
    method(
        "ts_strptime",
        CAT,
        "Parses a string with a strftime format into a timestamp.",
        &[p("format")],
        &[ex(
            r#"root.t = this.s.ts_strptime("%Y-%m-%d %H:%M")"#,
            r#"{"s":"2020-08-14 11:45"}"#,
            r#"{"t":"2020-08-14T11:45:00Z"}"#,
        ),
          ex(r#"root.doc.timestamp = this.doc.timestamp.ts_strptime("%Y-%b-%d")"#, r#"{"doc":{"timestamp":"2020-Aug-14"}}"#, r#"{"doc":{"timestamp":"2020-08-14T00:00:00Z"}}"#),
          ex(r#"root.doc.timestamp = this.doc.timestamp.ts_strptime("%Y-%b-%d %H:%M:%S.%f")"#, r#"{"doc":{"timestamp":"2020-Aug-14 11:50:26.371000"}}"#, r#"{"doc":{"timestamp":"2020-08-14T11:50:26.371Z"}}"#)],
        ts_strptime,
    ),
    method(
        "ts_format",
        CAT,
        "Formats a timestamp with a Go layout (RFC 3339 by default), in `tz` if given.",
        &[
            opt(
                "format",
                Default::Str("2006-01-02T15:04:05.999999999Z07:00"),
            ),
            opt("tz", Default::Absent),
        ],
        &[
            ex(
                r#"root.s = this.t.ts_format("2006-01-02 15:04", "UTC")"#,
                r#"{"t":"2020-08-14T11:45:26+02:00"}"#,
                r#"{"s":"2020-08-14 09:45"}"#,
            ),
            ex(
                r#"root.s = this.t.ts_format("Mon Jan 2 15:04:05 MST 2006")"#,
                r#"{"t":1597405526}"#,
                r#"{"s":"Fri Aug 14 11:45:26 UTC 2020"}"#,
            ),
        ],
        ts_format,
    ),
    method(
        "ts_strftime",
        CAT,
        "Formats a timestamp with strftime, in `tz` if given.",
        &[p("format"), opt("tz", Default::Absent)],
        &[ex(
            r#"root.s = this.t.ts_strftime("%Y/%m/%d %H:%M:%S")"#,
            r#"{"t":"2020-08-14T11:45:26Z"}"#,
            r#"{"s":"2020/08/14 11:45:26"}"#,
        ),
          ex(r#"root.something_at = this.created_at.ts_strftime("%Y-%b-%d %H:%M:%S", "UTC")"#, r#"{"created_at":1597405526}"#, r#"{"something_at":"2020-Aug-14 11:45:26"}"#),
          ex(r#"root.something_at = this.created_at.ts_strftime("%Y-%b-%d %H:%M:%S.%f", "UTC")"#, r#"{"created_at":1597405526}"#, r#"{"something_at":"2020-Aug-14 11:45:26.000000"}"#),
          ex(r#"root.something_at = this.created_at.ts_strftime("%Y-%b-%d %H:%M:%S.%f", "UTC")"#, r#"{"created_at":"2020-08-14T11:50:26.371Z"}"#, r#"{"something_at":"2020-Aug-14 11:50:26.371000"}"#),
          ex(r#"root.s = this.t.ts_strftime("100%% at %H")"#, r#"{"t":"2020-08-14T11:45:26Z"}"#, r#"{"s":"100% at 11"}"#)],
        ts_strftime,
    ),
    method(
        "ts_unix",
        CAT,
        "The timestamp as Unix seconds.",
        &[],
        &[ex(
            "root.n = this.t.ts_unix()",
            r#"{"t":"2020-08-14T11:45:26Z"}"#,
            r#"{"n":1597405526}"#,
        )],
        ts_unix,
    ),
    method(
        "ts_unix_milli",
        CAT,
        "The timestamp as Unix milliseconds.",
        &[],
        &[ex(
            "root.n = this.t.ts_unix_milli()",
            r#"{"t":"2020-08-14T11:45:26.371Z"}"#,
            r#"{"n":1597405526371}"#,
        )],
        ts_unix_milli,
    ),
    method(
        "ts_unix_micro",
        CAT,
        "The timestamp as Unix microseconds.",
        &[],
        &[],
        ts_unix_micro,
    ),
    method(
        "ts_unix_nano",
        CAT,
        "The timestamp as Unix nanoseconds.",
        &[],
        &[ex(
            "root.n = this.t.ts_unix_nano()",
            r#"{"t":"2020-08-14T11:45:26.000000001Z"}"#,
            r#"{"n":1597405526000000001}"#,
        )],
        ts_unix_nano,
    ),
    method(
        "ts_tz",
        CAT,
        "The same instant in another time zone.",
        &[p("tz")],
        &[ex(
            r#"root.t = this.t.ts_tz("Asia/Tokyo")"#,
            r#"{"t":"2020-08-14T11:45:26Z"}"#,
            r#"{"t":"2020-08-14T20:45:26+09:00"}"#,
        )],
        ts_tz,
    ),
    method(
        "ts_round",
        CAT,
        "The timestamp rounded to a multiple of a duration in nanoseconds.",
        &[p("duration")],
        &[ex(
            r#"root.t = this.t.ts_round("1h".parse_duration())"#,
            r#"{"t":"2020-08-14T11:45:26Z"}"#,
            r#"{"t":"2020-08-14T12:00:00Z"}"#,
        )],
        ts_round,
    ),
    method(
        "ts_add_iso8601",
        CAT,
        "The timestamp plus an ISO 8601 duration.",
        &[p("duration")],
        &[ex(
            r#"root.t = this.t.ts_add_iso8601("P1DT1H")"#,
            r#"{"t":"2020-08-14T11:00:00Z"}"#,
            r#"{"t":"2020-08-15T12:00:00Z"}"#,
        )],
        ts_add_iso8601,
    ),
    method(
        "ts_sub_iso8601",
        CAT,
        "The timestamp minus an ISO 8601 duration.",
        &[p("duration")],
        &[ex(
            r#"root.t = this.t.ts_sub_iso8601("PT1H")"#,
            r#"{"t":"2020-08-14T11:00:00Z"}"#,
            r#"{"t":"2020-08-14T10:00:00Z"}"#,
        )],
        ts_sub_iso8601,
    ),
    method(
        "ts_sub",
        CAT,
        "The duration in nanoseconds from another timestamp to this one.",
        &[p("t2")],
        &[ex(
            r#"root.d = this.a.ts_sub(this.b)"#,
            r#"{"a":"2020-08-14T11:00:01Z","b":"2020-08-14T11:00:00Z"}"#,
            r#"{"d":1000000000}"#,
        )],
        ts_sub,
    ),
    method(
        "parse_duration",
        CAT,
        "Parses a Go duration (`1h30m`, `250ms`) into nanoseconds.",
        &[],
        &[ex(
            r#"root.d = this.d.parse_duration()"#,
            r#"{"d":"1m30s"}"#,
            r#"{"d":90000000000}"#,
        )],
        parse_duration,
    ),
    method(
        "parse_duration_iso8601",
        CAT,
        "Parses an ISO 8601 duration (`P[n]Y[n]M[n]DT[n]H[n]M[n]S` or `P[n]W`) into nanoseconds. A year is 365.2425 days and a month a twelfth of a year; only the last non-zero field may have a fraction, kept to the nanosecond.",
        &[],
        &[ex(
            r#"root.d = this.d.parse_duration_iso8601()"#,
            r#"{"d":"PT1M"}"#,
            r#"{"d":60000000000}"#,
        ),
          ex("root.delay_for_ns = this.delay_for.parse_duration_iso8601()", r#"{"delay_for":"P3Y6M4DT12H30M5S"}"#, r#"{"delay_for_ns":110839937000000000}"#),
          ex("root.delay_for_s = this.delay_for.parse_duration_iso8601() / 1000000000", r#"{"delay_for":"PT2H"}"#, r#"{"delay_for_s":7200}"#),
          ex("root.delay_for_s = this.delay_for.parse_duration_iso8601() / 1000000000", r#"{"delay_for":"PT2.5S"}"#, r#"{"delay_for_s":2.5}"#),
          ex("root.d = this.d.parse_duration_iso8601()", r#"{"d":"P3.5S"}"#, "error:P3.5S: 'S' designator cannot occur here"),
          ex("root.d = this.d.parse_duration_iso8601()", r#"{"d":"P1DX"}"#, "error:P1DX: expected a number but found 'X'"),
          ex("root.d = this.d.parse_duration_iso8601()", r#"{"d":"PT1.25S"}"#, r#"{"d":1250000000}"#),
          ex("root.d = this.d.parse_duration_iso8601()", r#"{"d":"P1M"}"#, r#"{"d":2629746000000000}"#),
          ex("root.d = this.d.parse_duration_iso8601()", r#"{"d":"P1.5DT2H"}"#, "error:P1.5DT2H: 'D' & 'H' only the last field can have a fraction")],
        parse_duration_iso8601,
    ),
    method(
        "format_duration",
        CAT,
        "Formats nanoseconds as a Go duration string.",
        &[],
        &[ex(
            r#"root.d = this.d.format_duration()"#,
            r#"{"d":5400000000000}"#,
            r#"{"d":"1h30m0s"}"#,
        )],
        format_duration,
    ),
    method(
        "parse_timestamp",
        CAT,
        "Old name of `ts_parse`.",
        &[p("format")],
        &[],
        ts_parse,
    ),
    method(
        "parse_timestamp_strptime",
        CAT,
        "Old name of `ts_strptime`.",
        &[p("format")],
        &[],
        ts_strptime,
    ),
    method(
        "format_timestamp",
        CAT,
        "Old name of `ts_format`.",
        &[
            opt(
                "format",
                Default::Str("2006-01-02T15:04:05.999999999Z07:00"),
            ),
            opt("tz", Default::Absent),
        ],
        &[],
        ts_format,
    ),
    method(
        "format_timestamp_strftime",
        CAT,
        "Old name of `ts_strftime`.",
        &[p("format"), opt("tz", Default::Absent)],
        &[],
        ts_strftime,
    ),
    method(
        "format_timestamp_unix",
        CAT,
        "Old name of `ts_unix`.",
        &[],
        &[],
        ts_unix,
    ),
    method(
        "format_timestamp_unix_milli",
        CAT,
        "Old name of `ts_unix_milli`.",
        &[],
        &[],
        ts_unix_milli,
    ),
    method(
        "format_timestamp_unix_micro",
        CAT,
        "Old name of `ts_unix_micro`.",
        &[],
        &[],
        ts_unix_micro,
    ),
    method(
        "format_timestamp_unix_nano",
        CAT,
        "Old name of `ts_unix_nano`.",
        &[],
        &[],
        ts_unix_nano,
    ),
    method(
        "timestamp",
        CAT,
        "The value as a timestamp: RFC 3339 strings and Unix seconds.",
        &[],
        &[ex(
            "root.t = this.n.timestamp()",
            r#"{"n":0}"#,
            r#"{"t":"1970-01-01T00:00:00Z"}"#,
        )],
        timestamp,
    ),
];

/// A timestamp from a timestamp, an RFC 3339 string or Unix seconds.
pub(crate) fn to_ts(v: &Value) -> Res<DateTime<FixedOffset>> {
    match v {
        Value::Timestamp(t) => Ok(*t),
        Value::String(_) | Value::Bytes(_) => parse_go(&text(v)?, None),
        Value::Int(i) => from_unix_nanos(*i as i128 * 1_000_000_000),
        Value::Float(f) => from_unix_nanos((*f * 1e9) as i128),
        other => Err(type_err("timestamp", other)),
    }
}

fn zoned(t: DateTime<FixedOffset>, args: &Args<'_>, i: usize) -> Res<DateTime<FixedOffset>> {
    match args.opt_str(i)? {
        Some(tz) if args.given(i) => in_zone(&t, tz),
        _ => Ok(t),
    }
}

fn ts_parse<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    own(Value::Timestamp(parse_go(&text(v)?, Some(args.str(0)?))?))
}
/// A strftime format as chrono reads it: `%f` is zero-padded microseconds (six digits), as
/// in Python and the reference, where chrono's own `%f` means nanoseconds.
fn strftime_format(fmt: &str) -> String {
    let mut out = String::with_capacity(fmt.len() + 4);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '%' {
            match chars.next() {
                Some('f') => out.push_str("6f"),
                Some(d) => out.push(d),
                None => {}
            }
        }
    }
    out
}

fn ts_strptime<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    own(Value::Timestamp(parse_strptime(&text(v)?, args.str(0)?)?))
}
fn ts_format<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let t = zoned(to_ts(v)?, args, 1)?;
    let layout = args.str(0)?;
    if layout == crate::mapping::time::RFC3339_NANO {
        return own(format_default(&t));
    }
    own(format_go(&t, layout)?)
}
fn ts_strftime<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let t = zoned(to_ts(v)?, args, 1)?;
    let fmt = &strftime_format(args.str(0)?);
    // chrono reports a bad directive through fmt::Error; catch it instead of panicking.
    let items: Vec<chrono::format::Item<'_>> = chrono::format::StrftimeItems::new(fmt).collect();
    if items
        .iter()
        .any(|i| matches!(i, chrono::format::Item::Error))
    {
        return Err(format!("invalid strftime format {fmt:?}"));
    }
    let mut out = String::new();
    use std::fmt::Write;
    write!(out, "{}", t.format_with_items(items.into_iter()))
        .map_err(|_| format!("cannot format with {fmt:?}"))?;
    own(out)
}
fn ts_unix<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(to_ts(v)?.timestamp())
}
fn ts_unix_milli<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(to_ts(v)?.timestamp_millis())
}
fn ts_unix_micro<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(to_ts(v)?.timestamp_micros())
}
fn ts_unix_nano<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    to_ts(v)?
        .timestamp_nanos_opt()
        .map(|n| V::Own(Value::Int(n)))
        .ok_or_else(|| "timestamp out of range".into())
}
fn ts_tz<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    own(Value::Timestamp(in_zone(&to_ts(v)?, args.str(0)?)?))
}
fn ts_round<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let d = args.int(0)?;
    if d <= 0 {
        return Err("duration must be positive".into());
    }
    let t = to_ts(v)?;
    let n = t.timestamp_nanos_opt().ok_or("timestamp out of range")? as i128;
    let d = d as i128;
    let r = n.rem_euclid(d);
    let rounded = if r * 2 >= d { n - r + d } else { n - r };
    let out = from_unix_nanos(rounded)?;
    own(Value::Timestamp(out.with_timezone(t.offset())))
}
fn ts_add_iso8601<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let period = Period::parse(args.str(0)?)?;
    own(Value::Timestamp(period.add_to(&to_ts(v)?)?))
}
fn ts_sub_iso8601<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let period = Period::parse(args.str(0)?)?.negated();
    own(Value::Timestamp(period.add_to(&to_ts(v)?)?))
}
fn ts_sub<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let d = to_ts(v)? - to_ts(args.get(0))?;
    d.num_nanoseconds()
        .map(|n| V::Own(Value::Int(n)))
        .ok_or_else(|| "duration out of range".into())
}
fn parse_duration<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(go_duration(&text(v)?)?)
}
fn parse_duration_iso8601<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(parse_iso8601_duration(&text(v)?)?)
}
fn format_duration<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let n = crate::mapping::exec::to_int(v)?;
    let neg = n < 0;
    let mut u = n.unsigned_abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if u < 1_000_000_000 {
        let s = match u {
            0 => "0s".to_string(),
            u if u < 1_000 => format!("{u}ns"),
            u if u < 1_000_000 => format!("{}µs", trim_frac(u as f64 / 1e3)),
            u => format!("{}ms", trim_frac(u as f64 / 1e6)),
        };
        out.push_str(&s);
        return own(out);
    }
    let h = u / 3_600_000_000_000;
    u %= 3_600_000_000_000;
    let m = u / 60_000_000_000;
    u %= 60_000_000_000;
    let s = u as f64 / 1e9;
    if h > 0 {
        out.push_str(&format!("{h}h{m}m"));
    } else if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", trim_frac(s)));
    own(out)
}
fn trim_frac(f: f64) -> String {
    let s = format!("{f:.9}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
fn timestamp<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(Value::Timestamp(to_ts(v)?))
}
