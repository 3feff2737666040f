//! Durations written as in Go and Benthos configs: `500ms`, `1m30s`, `1.5h`, `250us`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration as StdDuration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration config field. Deserializes from a duration string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Duration(pub StdDuration);

impl Duration {
    pub const fn from_secs(s: u64) -> Self {
        Duration(StdDuration::from_secs(s))
    }

    pub const fn from_millis(ms: u64) -> Self {
        Duration(StdDuration::from_millis(ms))
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
}

impl From<Duration> for StdDuration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration `{0}`: expected a number with a unit, such as `500ms`, `10s`, `1m30s` (units: ns, us, ms, s, m, h)")]
pub struct DurationError(pub String);

/// Parses a Go-style duration. A leading `-` is refused: no config takes negative time.
pub fn parse(text: &str) -> Result<StdDuration, DurationError> {
    let err = || DurationError(text.to_owned());
    if text.trim().starts_with('-') {
        return Err(err());
    }
    let nanos = parse_signed_nanos(text).ok_or_else(err)?;
    Ok(StdDuration::from_nanos(nanos.unsigned_abs()))
}

/// Parses a Go duration with an optional sign (`-1.5s`, `+2h45m`) into nanoseconds;
/// `None` when it is not one. The mapping language's `parse_duration` uses it too.
pub fn parse_signed_nanos(text: &str) -> Option<i64> {
    let s = text.trim();
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += n * nanos_per;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > i64::MAX as f64 {
        return None;
    }
    let nanos = total.round() as i64;
    Some(if neg { -nanos } else { nanos })
}

/// Formats like Go: `1m30s`, `500ms`, `0s`.
pub fn format(d: StdDuration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}us", trim_float(nanos as f64 / 1e3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_float(nanos as f64 / 1e6));
    }
    let total = d.as_secs_f64();
    let h = (total / 3600.0).floor();
    let m = ((total - h * 3600.0) / 60.0).floor();
    let s = total - h * 3600.0 - m * 60.0;
    let mut out = String::new();
    if h > 0.0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0.0 || m > 0.0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", trim_float((s * 1e9).round() / 1e9)));
    out
}

fn trim_float(x: f64) -> String {
    let s = format!("{x:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

impl FromStr for Duration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(Duration)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl schemars::JsonSchema for Duration {
    fn schema_name() -> String {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            format: Some("duration".into()),
            ..Default::default()
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("500ms").unwrap(), StdDuration::from_millis(500));
        assert_eq!(parse("1m30s").unwrap(), StdDuration::from_secs(90));
        assert_eq!(parse("1.5h").unwrap(), StdDuration::from_secs(5400));
        assert_eq!(parse("250us").unwrap(), StdDuration::from_micros(250));
        assert_eq!(parse("0").unwrap(), StdDuration::ZERO);
        assert_eq!(parse("2h45m").unwrap(), StdDuration::from_secs(9900));
        assert_eq!(parse_signed_nanos("-1.5s"), Some(-1_500_000_000));
        assert_eq!(parse_signed_nanos("+1ms"), Some(1_000_000));
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in ["", "5", "s", "5 s", "-1s", "1d", "1.2.3s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(StdDuration::from_secs(90)), "1m30s");
        assert_eq!(format(StdDuration::from_millis(500)), "500ms");
        assert_eq!(format(StdDuration::from_millis(1500)), "1.5s");
        assert_eq!(format(StdDuration::ZERO), "0s");
        assert_eq!(format(StdDuration::from_secs(3600)), "1h0m0s");
    }
}
