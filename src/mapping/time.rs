//! Timestamp and duration helpers: Go-style layouts (`2006-01-02T15:04:05Z07:00`),
//! strftime, time zones (`TZ` decides the local one) and Go duration strings.

use chrono::{DateTime, FixedOffset, Local, Offset, TimeZone, Utc};

/// The current time in the local zone (`TZ`).
pub fn now() -> DateTime<FixedOffset> {
    let n = Local::now();
    n.with_timezone(n.offset())
}

/// Converts a Go reference layout into a chrono format string for writing;
/// `hour_offset` is what Go's `-07` (an offset in hours) becomes (`%:::z`).
fn translate_layout(layout: &str, hour_offset: &str) -> String {
    // Longest tokens first so `January` wins over `Jan` and `2006` over `2`.
    let tokens: &[(&str, &str)] = &[
        ("January", "%B"),
        ("Monday", "%A"),
        ("Z07:00", "%:z"),
        ("Z0700", "%z"),
        ("-07:00", "%:z"),
        ("-0700", "%z"),
        ("-07", hour_offset),
        (".000000000", "%.9f"),
        (".999999999", "%.f"),
        (".000000", "%.6f"),
        (".999999", "%.f"),
        (".000", "%.3f"),
        (".999", "%.f"),
        ("2006", "%Y"),
        ("Jan", "%b"),
        ("Mon", "%a"),
        ("MST", "%Z"),
        ("002", "%j"),
        ("_2", "%e"),
        ("01", "%m"),
        ("02", "%d"),
        ("03", "%I"),
        ("04", "%M"),
        ("05", "%S"),
        ("06", "%y"),
        ("15", "%H"),
        ("PM", "%p"),
        ("pm", "%P"),
        ("1", "%-m"),
        ("2", "%-d"),
        ("3", "%-I"),
        ("4", "%-M"),
        ("5", "%-S"),
    ];
    let mut out = String::with_capacity(layout.len() * 2);
    let mut rest = layout;
    'outer: while !rest.is_empty() {
        for (tok, rep) in tokens {
            if let Some(r) = rest.strip_prefix(tok) {
                out.push_str(rep);
                rest = r;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            if c == '%' {
                out.push_str("%%");
            } else {
                out.push(c);
            }
        }
        rest = chars.as_str();
    }
    out
}

/// Formats with a Go layout. `Z07:00` writes `Z` for UTC, as Go does.
pub fn format_go(t: &DateTime<FixedOffset>, layout: &str) -> Result<String, String> {
    let fmt = if t.offset().local_minus_utc() == 0 {
        // Go names the zone UTC and writes `Z` for a `Z07:00` offset.
        let l = layout.replace("Z07:00", "Z").replace("Z0700", "Z");
        translate_layout(&l, "%:::z").replace("%Z", "UTC")
    } else {
        translate_layout(layout, "%:::z")
    };
    // chrono reports a directive it cannot write through fmt::Error, which `to_string`
    // turns into a panic: write through `write!` and report it instead.
    let mut out = String::new();
    use std::fmt::Write;
    write!(out, "{}", t.format(&fmt))
        .map_err(|_| format!("cannot format with layout {layout:?}"))?;
    Ok(out)
}

pub const RFC3339_NANO: &str = "2006-01-02T15:04:05.999999999Z07:00";

/// RFC 3339 with as many fraction digits as needed, `Z` for UTC.
pub fn format_default(t: &DateTime<FixedOffset>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Parses with a Go layout (RFC 3339 when none), as Go's `time.Parse` does.
pub fn parse_go(s: &str, layout: Option<&str>) -> Result<DateTime<FixedOffset>, String> {
    match layout {
        Some(layout) => super::go_time::parse_layout(s, layout),
        // The common case on the fast path; what it refuses gets Go's verdict and words.
        None => DateTime::parse_from_rfc3339(s)
            .or_else(|_| super::go_time::parse_layout(s, RFC3339_NANO)),
    }
}

/// Moves a timestamp into a named zone (`UTC`, `Local`, `America/New_York`).
pub fn in_zone(t: &DateTime<FixedOffset>, tz: &str) -> Result<DateTime<FixedOffset>, String> {
    match tz {
        "UTC" | "utc" | "" => Ok(t.with_timezone(&Utc).fixed_offset()),
        "Local" | "local" => {
            let l = t.with_timezone(&Local);
            Ok(l.with_timezone(&l.offset().fix()))
        }
        name => {
            let zone: chrono_tz::Tz = name
                .parse()
                .map_err(|_| format!("unknown time zone {name:?}"))?;
            let z = t.with_timezone(&zone);
            Ok(z.with_timezone(&z.offset().fix()))
        }
    }
}

pub fn from_unix_nanos(n: i128) -> Result<DateTime<FixedOffset>, String> {
    let secs = n.div_euclid(1_000_000_000);
    let nanos = n.rem_euclid(1_000_000_000) as u32;
    let secs = i64::try_from(secs).map_err(|_| "timestamp out of range".to_string())?;
    Utc.timestamp_opt(secs, nanos)
        .single()
        .map(|t| t.fixed_offset())
        .ok_or_else(|| "timestamp out of range".to_string())
}

/// Parses a Go duration (`1h30m`, `250ms`, `-1.5s`) into nanoseconds.
pub fn parse_duration(s: &str) -> Result<i64, String> {
    crate::duration::parse_signed_nanos(s).ok_or_else(|| format!("invalid duration {s:?}"))
}

/// Parses an ISO 8601 duration (`P1DT2H3M4.5S`) into nanoseconds, years counting
/// 365.2425 days and months a twelfth of that.
pub fn parse_iso8601_duration(s: &str) -> Result<i64, String> {
    super::period::Period::parse(s)?.approx_nanos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_layouts() {
        let t = parse_go("2020-08-14T11:45:26.371Z", None).unwrap();
        assert_eq!(
            format_go(&t, "2006-01-02 15:04:05").unwrap(),
            "2020-08-14 11:45:26"
        );
        assert_eq!(
            format_go(&t, "Jan 2, 2006 at 3:04pm (MST)").unwrap(),
            "Aug 14, 2020 at 11:45am (UTC)"
        );
        assert_eq!(
            format_go(&t, RFC3339_NANO).unwrap(),
            "2020-08-14T11:45:26.371Z"
        );
        // An offset in hours, which chrono parses with one directive and writes with
        // another.
        let east = parse_go("2020-08-14T11:45:26+05:00", None).unwrap();
        assert_eq!(format_go(&east, "15:04 -07").unwrap(), "11:45 +05");
        assert_eq!(format_go(&t, "15:04 -07").unwrap(), "11:45 +00");
        let p = parse_go("2020-08-14 11:45 +05", Some("2006-01-02 15:04 -07")).unwrap();
        assert_eq!(p.offset().local_minus_utc(), 5 * 3600);
        let p = parse_go("2020-08-14", Some("2006-01-02")).unwrap();
        assert_eq!(format_default(&p), "2020-08-14T00:00:00Z");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h30m").unwrap(), 5_400_000_000_000);
        assert_eq!(parse_duration("-1.5s").unwrap(), -1_500_000_000);
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(
            parse_iso8601_duration("P1DT1H").unwrap(),
            90_000_000_000_000
        );
    }
}
