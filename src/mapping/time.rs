//! Timestamp and duration helpers: Go-style layouts (`2006-01-02T15:04:05Z07:00`),
//! strftime, time zones (`TZ` decides the local one) and Go duration strings.

use chrono::{DateTime, FixedOffset, Local, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};

/// The current time in the local zone (`TZ`).
pub fn now() -> DateTime<FixedOffset> {
    let n = Local::now();
    n.with_timezone(n.offset())
}

/// Converts a Go reference layout into a chrono format string for parsing.
pub fn go_layout(layout: &str) -> String {
    translate_layout(layout, "%#z")
}

/// `hour_offset` is what Go's `-07` (an offset in hours) becomes: chrono's `%#z` parses
/// one but cannot write it, `%:::z` writes one.
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

/// Parses with a Go layout (RFC 3339 when none).
pub fn parse_go(s: &str, layout: Option<&str>) -> Result<DateTime<FixedOffset>, String> {
    let Some(layout) = layout else {
        return DateTime::parse_from_rfc3339(s)
            .map_err(|e| format!("failed to parse {s:?} as RFC 3339: {e}"));
    };
    let fmt = go_layout(layout);
    parse_strptime(s, &fmt)
        .map_err(|e| format!("failed to parse {s:?} with layout {layout:?}: {e}"))
}

/// Parses with a strftime format; a missing zone means UTC, missing time means midnight.
pub fn parse_strptime(s: &str, fmt: &str) -> Result<DateTime<FixedOffset>, String> {
    // chrono has no `Z`-or-offset directive; accept a literal `Z` where an offset goes.
    let (s, fmt) = if s.ends_with('Z') && (fmt.ends_with("%:z") || fmt.ends_with("%z")) {
        (
            format!("{}+00:00", &s[..s.len() - 1]),
            format!("{}%:z", fmt.trim_end_matches("%:z").trim_end_matches("%z")),
        )
    } else {
        (s.to_string(), fmt.to_string())
    };
    if let Ok(t) = DateTime::parse_from_str(&s, &fmt) {
        return Ok(t);
    }
    if let Ok(n) = NaiveDateTime::parse_from_str(&s, &fmt) {
        return Ok(Utc.from_utc_datetime(&n).fixed_offset());
    }
    match NaiveDate::parse_from_str(&s, &fmt) {
        Ok(d) => Ok(Utc
            .from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap_or_default())
            .fixed_offset()),
        Err(e) => Err(e.to_string()),
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

/// Parses an ISO 8601 duration (`P1DT2H3M4.5S`) into nanoseconds; years and months
/// count as 365 and 30 days.
pub fn parse_iso8601_duration(s: &str) -> Result<i64, String> {
    // As Bloblang reads them: a year is 365.2425 days and a month a twelfth of that; only
    // the last field may have a fraction, of which one decimal place counts (the rest is
    // cut off, so `PT1.25S` is 1.2 seconds).
    const SEC: i128 = 1_000_000_000;
    const DAY: i128 = 86_400 * SEC;
    const YEAR: i128 = 31_556_952 * SEC;
    const MONTH: i128 = YEAR / 12;
    let bad = || format!("invalid ISO 8601 duration {s:?}");
    let (neg, body) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let body = body.strip_prefix('P').ok_or_else(bad)?;
    if body.is_empty() || body == "T" {
        return Err(bad());
    }
    // (tenths of the amount, nanoseconds per unit, had a fraction)
    let mut fields: Vec<(i128, i128, bool)> = Vec::new();
    let mut in_time = false;
    let mut num = String::new();
    for c in body.chars() {
        match c {
            'T' if !in_time && num.is_empty() => in_time = true,
            '0'..='9' | '.' | ',' => num.push(if c == ',' { '.' } else { c }),
            unit => {
                let per = match (unit, in_time) {
                    ('Y', false) => YEAR,
                    ('M', false) => MONTH,
                    ('W', false) => 7 * DAY,
                    ('D', false) => DAY,
                    // `P3.5S` (no `T`) is read as seconds too, as the reference documents.
                    ('H', _) => 3600 * SEC,
                    ('M', true) => 60 * SEC,
                    ('S', _) => SEC,
                    _ => return Err(bad()),
                };
                let (whole, frac) = num.split_once('.').unwrap_or((&num, ""));
                if whole.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let whole: i128 = whole.parse().map_err(|_| bad())?;
                let tenth = frac.bytes().next().map_or(0, |d| (d - b'0') as i128);
                fields.push((whole * 10 + tenth, per, num.contains('.')));
                num.clear();
            }
        }
    }
    if !num.is_empty() || fields.is_empty() {
        return Err(bad());
    }
    if fields[..fields.len() - 1].iter().any(|f| f.2) {
        return Err(format!(
            "{}: only the last field may have a fraction",
            bad()
        ));
    }
    let total: i128 = fields.iter().map(|(t, per, _)| t * per / 10).sum();
    let total = if neg { -total } else { total };
    i64::try_from(total).map_err(|_| format!("ISO 8601 duration {s:?} is too long"))
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
