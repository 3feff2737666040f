//! ISO 8601 periods (`P1Y2M3DT4H5M6.5S`) as Bloblang reads them: each field a decimal,
//! only the last non-zero field may have a fraction, and adding one to a timestamp moves
//! its calendar date (`P1Y` is the same day next year) unless a date field has a
//! fraction, when every field counts at its average length. Error texts are the
//! reference implementation's, which users match on.

use chrono::{DateTime, Datelike, Duration, FixedOffset, NaiveDate, TimeZone};

const SEC: i128 = 1_000_000_000;
const DAY: i128 = 86_400 * SEC;
/// A year of 365.2425 days, and a month a twelfth of it.
const YEAR: i128 = 31_556_952 * SEC;
const MONTH: i128 = YEAR / 12;

/// The most significant digits a field holds.
const MAX_DIGITS: usize = 19;

/// One field: `coef / 10^scale` units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Field {
    coef: i128,
    scale: u32,
}

impl Field {
    fn is_zero(self) -> bool {
        self.coef == 0
    }

    fn is_whole(self) -> bool {
        self.coef % 10i128.pow(self.scale) == 0
    }

    fn whole(self) -> i128 {
        self.coef / 10i128.pow(self.scale)
    }

    /// The field in nanoseconds at `per` nanoseconds a unit (finer digits are cut off).
    fn nanos(self, per: i128) -> i128 {
        self.coef * per / 10i128.pow(self.scale)
    }
}

/// A parsed period; `negative` applies to every field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Period {
    negative: bool,
    years: Field,
    months: Field,
    weeks: Field,
    days: Field,
    hours: Field,
    minutes: Field,
    seconds: Field,
}

/// The designators in the order they may appear, and whether each belongs after `T`.
const ORDER: [(char, bool); 7] = [
    ('Y', false),
    ('M', false),
    ('W', false),
    ('D', false),
    ('H', true),
    ('M', true),
    ('S', true),
];

impl Period {
    /// Parses `text`; an error names the text as written, then what is wrong with it.
    pub fn parse(text: &str) -> Result<Period, String> {
        if text.trim().is_empty() {
            return Err("cannot parse a blank string as a period".into());
        }
        let fail = |why: String| format!("{text}: {why}");
        let (negative, rest) = match text.as_bytes()[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let Some(body) = rest.strip_prefix('P') else {
            return Err(fail("expected 'P' period mark at the start".into()));
        };
        if body.is_empty() {
            return Err(fail(
                "expected 'Y', 'M', 'W', 'D', 'H', 'M', or 'S' designator".into(),
            ));
        }
        let mut period = Period {
            negative,
            ..Period::default()
        };
        let mut seen = [false; 7];
        let mut in_time = false;
        // The designator of an earlier field with a fraction.
        let mut fraction: Option<char> = None;
        let mut chars = body.chars().peekable();
        while let Some(&c) = chars.peek() {
            if c == 'T' {
                if in_time {
                    return Err(fail("'T' designator cannot occur more than once".into()));
                }
                in_time = true;
                chars.next();
                continue;
            }
            let mut number = String::new();
            if c == '-' || c == '+' {
                number.push(c);
                chars.next();
            }
            while let Some(&d) = chars.peek() {
                if d.is_ascii_digit() || d == '.' || d == ',' {
                    number.push(if d == ',' { '.' } else { d });
                    chars.next();
                } else {
                    break;
                }
            }
            if number.trim_start_matches(['-', '+']).is_empty() {
                let found = chars.peek().copied().unwrap_or(c);
                return Err(fail(format!("expected a number but found '{found}'")));
            }
            let Some(designator) = chars.next() else {
                return Err(fail("missing designator at the end".into()));
            };
            if !"YMWDHS".contains(designator) {
                return Err(fail(format!(
                    "expected a designator Y, M, W, D, H, or S not '{designator}'"
                )));
            }
            let Some(slot) = ORDER
                .iter()
                .position(|&(d, time)| d == designator && time == in_time)
            else {
                return Err(fail(format!("'{designator}' designator cannot occur here")));
            };
            if seen[slot] {
                return Err(fail(format!(
                    "'{designator}' designator cannot occur more than once"
                )));
            }
            seen[slot] = true;
            let field = parse_number(&number)
                .ok_or_else(|| fail("number invalid or out of range".into()))?;
            if let Some(earlier) = fraction {
                if !field.is_zero() {
                    return Err(fail(format!(
                        "'{earlier}' & '{designator}' only the last field can have a fraction"
                    )));
                }
            }
            if field.scale > 0 && !field.is_zero() {
                fraction = Some(designator);
            }
            *period.slot(slot) = field;
        }
        Ok(period)
    }

    fn slot(&mut self, i: usize) -> &mut Field {
        match i {
            0 => &mut self.years,
            1 => &mut self.months,
            2 => &mut self.weeks,
            3 => &mut self.days,
            4 => &mut self.hours,
            5 => &mut self.minutes,
            _ => &mut self.seconds,
        }
    }

    /// The same period the other way.
    pub fn negated(self) -> Period {
        Period {
            negative: !self.negative,
            ..self
        }
    }

    fn sign(&self) -> i128 {
        if self.negative {
            -1
        } else {
            1
        }
    }

    fn time_nanos(&self) -> i128 {
        self.hours.nanos(3600 * SEC) + self.minutes.nanos(60 * SEC) + self.seconds.nanos(SEC)
    }

    /// Its length in nanoseconds, with years of 365.2425 days and months a twelfth of
    /// that.
    pub fn approx_nanos(&self) -> Result<i64, String> {
        let total = self.years.nanos(YEAR)
            + self.months.nanos(MONTH)
            + self.weeks.nanos(7 * DAY)
            + self.days.nanos(DAY)
            + self.time_nanos();
        i64::try_from(self.sign() * total).map_err(|_| "the period is too long".to_owned())
    }

    /// `t` moved by the period: by calendar (the month's day is kept, overflowing into
    /// the next month as the reference does) when its date fields are whole, else by its
    /// approximate length.
    pub fn add_to(&self, t: &DateTime<FixedOffset>) -> Result<DateTime<FixedOffset>, String> {
        let out_of_range = || "timestamp out of range".to_owned();
        let calendar = [self.years, self.months, self.weeks, self.days];
        if !calendar.iter().all(|f| f.is_whole()) {
            return t
                .checked_add_signed(Duration::nanoseconds(self.approx_nanos()?))
                .ok_or_else(out_of_range);
        }
        let sign = self.sign();
        let months = sign * (self.years.whole() * 12 + self.months.whole());
        let days = sign * (self.weeks.whole() * 7 + self.days.whole());
        let local = t.naive_local();
        let total_months = local.year() as i128 * 12 + local.month0() as i128 + months;
        let year = i32::try_from(total_months.div_euclid(12)).map_err(|_| out_of_range())?;
        let month = total_months.rem_euclid(12) as u32 + 1;
        let first = NaiveDate::from_ymd_opt(year, month, 1).ok_or_else(out_of_range)?;
        let day_offset = i64::try_from(local.day0() as i128 + days).map_err(|_| out_of_range())?;
        let date = first
            .checked_add_signed(Duration::try_days(day_offset).ok_or_else(out_of_range)?)
            .ok_or_else(out_of_range)?;
        let moved = date.and_time(local.time());
        let time = i64::try_from(sign * self.time_nanos()).map_err(|_| out_of_range())?;
        let moved = moved
            .checked_add_signed(Duration::nanoseconds(time))
            .ok_or_else(out_of_range)?;
        t.offset()
            .from_local_datetime(&moved)
            .single()
            .ok_or_else(out_of_range)
    }
}

/// A field's number: digits with at most one decimal point, and a sign.
fn parse_number(text: &str) -> Option<Field> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    if frac.contains('.')
        || !whole
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let all = format!("{whole}{frac}");
    let significant = all.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return None;
    }
    let coef: i128 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    let scale = u32::try_from(frac.len()).ok().filter(|s| *s <= 38)?;
    Some(Field {
        coef: if negative { -coef } else { coef },
        scale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Period::parse(text).unwrap_err()
    }

    #[test]
    fn errors_read_as_the_reference_writes_them() {
        for (text, want) in [
            ("", "cannot parse a blank string as a period"),
            ("P000", "P000: missing designator at the end"),
            ("PT1", "PT1: missing designator at the end"),
            ("XY", "XY: expected 'P' period mark at the start"),
            ("PxY", "PxY: expected a number but found 'x'"),
            (
                "PT1A",
                "PT1A: expected a designator Y, M, W, D, H, or S not 'A'",
            ),
            ("P1HT1M", "P1HT1M: 'H' designator cannot occur here"),
            ("PT1Y", "PT1Y: 'Y' designator cannot occur here"),
            ("P1S", "P1S: 'S' designator cannot occur here"),
            ("P1D2D", "P1D2D: 'D' designator cannot occur more than once"),
            (
                "PT1HT1S",
                "PT1HT1S: 'T' designator cannot occur more than once",
            ),
            (
                "P0.1YT0.1S",
                "P0.1YT0.1S: 'Y' & 'S' only the last field can have a fraction",
            ),
            (
                "P",
                "P: expected 'Y', 'M', 'W', 'D', 'H', 'M', or 'S' designator",
            ),
            (
                "P92233720368547758071Y",
                "P92233720368547758071Y: number invalid or out of range",
            ),
            ("P1.1.1Y", "P1.1.1Y: number invalid or out of range"),
            ("-P1S", "-P1S: 'S' designator cannot occur here"),
        ] {
            assert_eq!(err(text), want, "{text:?}");
        }
    }

    #[test]
    fn lengths_keep_every_decimal_place() {
        let nanos = |t: &str| Period::parse(t).unwrap().approx_nanos().unwrap();
        assert_eq!(nanos("P3Y6M4DT12H30M5S"), 110_839_937_000_000_000);
        assert_eq!(nanos("P3Y6M4DT12H30M5.3S"), 110_839_937_300_000_000);
        assert_eq!(nanos("P3Y6M4DT12H30M5.123456789S"), 110_839_937_123_456_789);
        assert_eq!(nanos("PT2.5S"), 2_500_000_000);
        assert_eq!(nanos("-P-1Y"), nanos("P1Y"));
        assert_eq!(nanos("P-1Y"), -nanos("P1Y"));
        assert_eq!(nanos("P1M"), 2_629_746_000_000_000);
        // A fraction on a field followed only by zero fields is allowed.
        assert_eq!(nanos("P1.5DT0H"), 129_600_000_000_000);
    }

    #[test]
    fn whole_dates_move_by_calendar() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap();
        let add = |t: &str, p: &str| Period::parse(p).unwrap().add_to(&at(t)).unwrap();
        assert_eq!(
            add("2023-02-22T20:21:05Z", "P1Y"),
            at("2024-02-22T20:21:05Z")
        );
        assert_eq!(
            add("2020-01-01T00:00:00Z", "P1Y2M3DT4H5M6S"),
            at("2021-03-04T04:05:06Z")
        );
        assert_eq!(
            Period::parse("P1Y2M3DT4H5M6S")
                .unwrap()
                .negated()
                .add_to(&at("2021-03-04T04:05:06Z"))
                .unwrap(),
            at("2020-01-01T00:00:00Z")
        );
        // January 31st and a month is February 31st, which is March 3rd.
        assert_eq!(
            add("2023-01-31T10:00:00+02:00", "P1M"),
            at("2023-03-03T10:00:00+02:00")
        );
        // A fractional date field moves by the average lengths.
        assert_eq!(
            add("2023-01-01T00:00:00Z", "P0.5D"),
            at("2023-01-01T12:00:00Z")
        );
    }
}
