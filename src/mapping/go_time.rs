//! Timestamps parsed as the reference implementation parses them: Go reference layouts
//! (`2006-01-02T15:04:05Z07:00`) element by element as Go's `time.Parse` does, and
//! strptime formats (`%Y-%m-%d`) as its strptime library does, with their error texts,
//! which users match on.

use chrono::{DateTime, Duration, FixedOffset, NaiveDate, TimeZone};

/// One element of a Go layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    Tz,
    /// `Z07:00` and the like: `Z` for UTC, else an offset (`iso`), written `-07:00` etc.
    Offset {
        iso: bool,
        form: OffsetForm,
    },
    /// `.000` (exactly so many digits) or `.999` (any, or none).
    Frac {
        digits: usize,
        optional: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OffsetForm {
    Short,
    Plain,
    Colon,
    Seconds,
    ColonSeconds,
}

/// Splits `layout` at its first element: the literal text before it, the element, what
/// follows. No element: the whole layout is literal.
fn next_std(layout: &str) -> (&str, Option<Std>, &str) {
    let b = layout.as_bytes();
    let at = |i: usize, s: &str| layout.get(i..i + s.len()) == Some(s);
    let lower_at = |i: usize| b.get(i).is_some_and(|c| c.is_ascii_lowercase());
    let digit_at = |i: usize| b.get(i).is_some_and(|c| c.is_ascii_digit());
    for i in 0..b.len() {
        let found = |std: Std, len: usize| Some((&layout[..i], Some(std), &layout[i + len..]));
        let hit = match b[i] {
            b'J' if at(i, "January") => found(Std::LongMonth, 7),
            b'J' if at(i, "Jan") && !lower_at(i + 3) => found(Std::Month, 3),
            b'M' if at(i, "Monday") => found(Std::LongWeekDay, 6),
            b'M' if at(i, "Mon") && !lower_at(i + 3) => found(Std::WeekDay, 3),
            b'M' if at(i, "MST") => found(Std::Tz, 3),
            b'0' if matches!(b.get(i + 1), Some(b'1'..=b'6')) => found(
                match b[i + 1] {
                    b'1' => Std::ZeroMonth,
                    b'2' => Std::ZeroDay,
                    b'3' => Std::ZeroHour12,
                    b'4' => Std::ZeroMinute,
                    b'5' => Std::ZeroSecond,
                    _ => Std::Year,
                },
                2,
            ),
            b'0' if at(i, "002") => found(Std::ZeroYearDay, 3),
            b'1' if at(i, "15") => found(Std::Hour, 2),
            b'1' => found(Std::NumMonth, 1),
            b'2' if at(i, "2006") => found(Std::LongYear, 4),
            b'2' => found(Std::Day, 1),
            b'_' if at(i, "_2006") => {
                Some((&layout[..i + 1], Some(Std::LongYear), &layout[i + 5..]))
            }
            b'_' if at(i, "_2") => found(Std::UnderDay, 2),
            b'_' if at(i, "__2") => found(Std::UnderYearDay, 3),
            b'3' => found(Std::Hour12, 1),
            b'4' => found(Std::Minute, 1),
            b'5' => found(Std::Second, 1),
            b'P' if at(i, "PM") => found(Std::PM, 2),
            b'p' if at(i, "pm") => found(Std::Pm, 2),
            c @ (b'-' | b'Z') => {
                let iso = c == b'Z';
                let s = |rest: &str| format!("{}{rest}", c as char);
                [
                    ("070000", OffsetForm::Seconds),
                    ("07:00:00", OffsetForm::ColonSeconds),
                    ("0700", OffsetForm::Plain),
                    ("07:00", OffsetForm::Colon),
                    ("07", OffsetForm::Short),
                ]
                .into_iter()
                .find(|(rest, _)| at(i, &s(rest)))
                .and_then(|(rest, form)| found(Std::Offset { iso, form }, rest.len() + 1))
            }
            b'.' | b',' if matches!(b.get(i + 1), Some(b'0' | b'9')) => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while b.get(j) == Some(&ch) {
                    j += 1;
                }
                if digit_at(j) {
                    None
                } else {
                    let std = Std::Frac {
                        digits: j - (i + 1),
                        optional: ch == b'9',
                    };
                    Some((&layout[..i], Some(std), &layout[j..]))
                }
            }
            _ => None,
        };
        if let Some(hit) = hit {
            return hit;
        }
    }
    (layout, None, "")
}

/// Month names in English, as Go and the fake data functions write them.
pub(crate) const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The index of the name `value` starts with (in any case), and what follows it.
fn lookup(names: impl Iterator<Item = &'static str>, value: &str) -> Option<(usize, &str)> {
    for (i, name) in names.enumerate() {
        if let Some(head) = value.get(..name.len()) {
            if head.eq_ignore_ascii_case(name) {
                return Some((i, &value[name.len()..]));
            }
        }
    }
    None
}

fn short(names: &'static [&'static str]) -> impl Iterator<Item = &'static str> {
    names.iter().map(|n| &n[..3])
}

/// One or two digits (exactly two when `fixed`).
fn getnum(s: &str, fixed: bool) -> Option<(i64, &str)> {
    let b = s.as_bytes();
    let d = |i: usize| {
        b.get(i)
            .filter(|c| c.is_ascii_digit())
            .map(|c| i64::from(c - b'0'))
    };
    let first = d(0)?;
    match d(1) {
        Some(second) => Some((first * 10 + second, &s[2..])),
        None if fixed => None,
        None => Some((first, &s[1..])),
    }
}

/// One to three digits (exactly three when `fixed`).
fn getnum3(s: &str, fixed: bool) -> Option<(i64, &str)> {
    let n = s.bytes().take(3).take_while(u8::is_ascii_digit).count();
    if n == 0 || (fixed && n != 3) {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

/// `,123` or `.123` of `len` bytes (separator included) as nanoseconds.
fn nanos(value: &str, len: usize) -> Option<i64> {
    if !value.starts_with(['.', ',']) {
        return None;
    }
    let len = len.min(10);
    let digits = value.get(1..len)?;
    let n: i64 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some(n * 10i64.pow((10 - len) as u32))
}

/// Skips the literal `prefix`; a space in it matches any run of spaces.
fn skip<'v>(mut value: &'v str, mut prefix: &str) -> Option<&'v str> {
    while let Some(p) = prefix.chars().next() {
        if p == ' ' {
            if !value.is_empty() && !value.starts_with(' ') {
                return None;
            }
            prefix = prefix.trim_start_matches(' ');
            value = value.trim_start_matches(' ');
            continue;
        }
        value = value.strip_prefix(p)?;
        prefix = &prefix[p.len_utf8()..];
    }
    Some(value)
}

/// How long a time zone abbreviation at the start of `value` is (`MST`, `CEST`, `GMT+3`).
fn zone_len(value: &str) -> Option<usize> {
    let b = value.as_bytes();
    if b.len() < 3 {
        return None;
    }
    if value.starts_with("ChST") || value.starts_with("MeST") {
        return Some(4);
    }
    if let Some(rest) = value.strip_prefix("GMT") {
        let signed = rest.starts_with(['+', '-']);
        let digits = rest
            .get(1..)
            .map_or(0, |r| r.bytes().take_while(u8::is_ascii_digit).count());
        return Some(if signed && digits > 0 { 4 + digits } else { 3 });
    }
    let upper = b
        .iter()
        .take(6)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    match upper {
        3 => Some(3),
        4 if b[3] == b'T' || value.starts_with("WITA") => Some(4),
        5 if b[4] == b'T' => Some(5),
        _ => None,
    }
}

/// The error `time.Parse` gives.
fn parse_error(value: &str, layout: &str, value_elem: &str, layout_elem: &str) -> String {
    format!("parsing time {value:?} as {layout:?}: cannot parse {value_elem:?} as {layout_elem:?}")
}

/// Parses `value` with the Go reference layout `layout`, as Go's `time.Parse` does: a
/// missing zone is UTC, missing date fields are January 1st of year 0.
pub fn parse_layout(value: &str, layout: &str) -> Result<DateTime<FixedOffset>, String> {
    let (full_value, full_layout) = (value, layout);
    let mut value = value;
    let mut layout = layout;
    let (mut year, mut month, mut day, mut yday) = (0i64, -1i64, -1i64, -1i64);
    let (mut hour, mut min, mut sec, mut nsec) = (0i64, 0i64, 0i64, 0i64);
    let (mut pm, mut am) = (false, false);
    let mut offset: Option<i32> = None;
    loop {
        let (prefix, std, suffix) = next_std(layout);
        let std_text = &layout[prefix.len()..layout.len() - suffix.len()];
        value = skip(value, prefix)
            .ok_or_else(|| parse_error(full_value, full_layout, value, prefix))?;
        let Some(std) = std else {
            if !value.is_empty() {
                return Err(format!(
                    "parsing time {full_value:?}: extra text: {value:?}"
                ));
            }
            break;
        };
        layout = suffix;
        let hold = value;
        let mut range: Option<&str> = None;
        let step: Option<&str> = (|| {
            Some(match std {
                Std::Year => {
                    let n: i64 = value.get(..2)?.parse().ok()?;
                    year = if n >= 69 { 1900 + n } else { 2000 + n };
                    &value[2..]
                }
                Std::LongYear => {
                    if !value.as_bytes().first()?.is_ascii_digit() {
                        return None;
                    }
                    year = value.get(..4)?.parse().ok()?;
                    &value[4..]
                }
                Std::Month => {
                    let (i, rest) = lookup(short(&LONG_MONTHS), value)?;
                    month = i as i64 + 1;
                    rest
                }
                Std::LongMonth => {
                    let (i, rest) = lookup(LONG_MONTHS.iter().copied(), value)?;
                    month = i as i64 + 1;
                    rest
                }
                Std::NumMonth | Std::ZeroMonth => {
                    let (n, rest) = getnum(value, std == Std::ZeroMonth)?;
                    month = n;
                    if !(1..=12).contains(&n) {
                        range = Some("month");
                    }
                    rest
                }
                Std::WeekDay => lookup(short(&LONG_DAYS), value)?.1,
                Std::LongWeekDay => lookup(LONG_DAYS.iter().copied(), value)?.1,
                Std::Day | Std::UnderDay | Std::ZeroDay => {
                    let v = match std {
                        Std::UnderDay => value.strip_prefix(' ').unwrap_or(value),
                        _ => value,
                    };
                    let (n, rest) = getnum(v, std == Std::ZeroDay)?;
                    day = n;
                    rest
                }
                Std::UnderYearDay | Std::ZeroYearDay => {
                    let mut v = value;
                    if std == Std::UnderYearDay {
                        for _ in 0..2 {
                            v = v.strip_prefix(' ').unwrap_or(v);
                        }
                    }
                    let (n, rest) = getnum3(v, std == Std::ZeroYearDay)?;
                    yday = n;
                    rest
                }
                Std::Hour => {
                    let (n, rest) = getnum(value, false)?;
                    hour = n;
                    if n >= 24 {
                        range = Some("hour");
                    }
                    rest
                }
                Std::Hour12 | Std::ZeroHour12 => {
                    let (n, rest) = getnum(value, std == Std::ZeroHour12)?;
                    hour = n;
                    if n > 12 {
                        range = Some("hour");
                    }
                    rest
                }
                Std::Minute | Std::ZeroMinute => {
                    let (n, rest) = getnum(value, std == Std::ZeroMinute)?;
                    min = n;
                    if n >= 60 {
                        range = Some("minute");
                    }
                    rest
                }
                Std::Second | Std::ZeroSecond => {
                    let (n, mut rest) = getnum(value, std == Std::ZeroSecond)?;
                    sec = n;
                    if n >= 60 {
                        range = Some("second");
                        return Some(rest);
                    }
                    // A fraction the layout does not write is read anyway, unless the
                    // layout's next element is the fraction.
                    let rb = rest.as_bytes();
                    if rb.len() >= 2 && matches!(rb[0], b'.' | b',') && rb[1].is_ascii_digit() {
                        let next_is_frac = matches!(next_std(layout).1, Some(Std::Frac { .. }));
                        if !next_is_frac {
                            let n = 1 + rb[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                            nsec = nanos(rest, n)?;
                            rest = &rest[n..];
                        }
                    }
                    rest
                }
                Std::PM | Std::Pm => {
                    let p = value.get(..2)?;
                    let (upper_pm, upper_am) = if std == Std::PM {
                        ("PM", "AM")
                    } else {
                        ("pm", "am")
                    };
                    if p == upper_pm {
                        pm = true;
                    } else if p == upper_am {
                        am = true;
                    } else {
                        return None;
                    }
                    &value[2..]
                }
                Std::Offset { iso, form } => {
                    if iso && value.starts_with('Z') {
                        offset = Some(0);
                        return Some(&value[1..]);
                    }
                    let b = value.as_bytes();
                    let (h, m, s, len) = match form {
                        OffsetForm::Colon => {
                            if b.len() < 6 || b[3] != b':' {
                                return None;
                            }
                            (&value[1..3], &value[4..6], "00", 6)
                        }
                        OffsetForm::Short => (value.get(1..3)?, "00", "00", 3),
                        OffsetForm::ColonSeconds => {
                            if b.len() < 9 || b[3] != b':' || b[6] != b':' {
                                return None;
                            }
                            (&value[1..3], &value[4..6], &value[7..9], 9)
                        }
                        OffsetForm::Seconds => {
                            (value.get(1..3)?, value.get(3..5)?, value.get(5..7)?, 7)
                        }
                        OffsetForm::Plain => (value.get(1..3)?, value.get(3..5)?, "00", 5),
                    };
                    let secs =
                        (getnum(h, true)?.0 * 60 + getnum(m, true)?.0) * 60 + getnum(s, true)?.0;
                    offset = Some(match b.first()? {
                        b'+' => secs as i32,
                        b'-' => -(secs as i32),
                        _ => return None,
                    });
                    value.get(len..)?
                }
                Std::Tz => {
                    if let Some(rest) = value.strip_prefix("UTC") {
                        offset = Some(0);
                        return Some(rest);
                    }
                    let n = zone_len(value)?;
                    let name = &value[..n];
                    // Go knows an abbreviation's offset only from the local zone: any
                    // other is taken at offset zero, except GMT's own offsets.
                    let gmt = name
                        .strip_prefix("GMT")
                        .and_then(|h| h.parse::<i32>().ok())
                        .unwrap_or(0);
                    offset = Some(gmt * 3600);
                    &value[n..]
                }
                Std::Frac { digits, optional } => {
                    let b = value.as_bytes();
                    if optional {
                        if b.len() < 2 || !matches!(b[0], b'.' | b',') || !b[1].is_ascii_digit() {
                            return Some(value);
                        }
                        let n = 1 + b[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                        nsec = nanos(value, n)?;
                        &value[n..]
                    } else {
                        if b.len() < digits + 1 {
                            return None;
                        }
                        nsec = nanos(value, digits + 1)?;
                        &value[digits + 1..]
                    }
                }
            })
        })();
        if let Some(what) = range {
            return Err(format!("parsing time {full_value:?}: {what} out of range"));
        }
        value = step.ok_or_else(|| parse_error(full_value, full_layout, hold, std_text))?;
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    let out_of_range = |what: &str| format!("parsing time {full_value:?}: {what} out of range");
    let date = if yday >= 0 {
        let leap = NaiveDate::from_ymd_opt(year as i32, 2, 29).is_some();
        if yday < 1 || yday > if leap { 366 } else { 365 } {
            return Err(out_of_range("day-of-year"));
        }
        let date = NaiveDate::from_ymd_opt(year as i32, 1, 1)
            .and_then(|d| d.checked_add_signed(Duration::days(yday - 1)))
            .ok_or_else(|| out_of_range("day-of-year"))?;
        use chrono::Datelike;
        if (month >= 0 && month != i64::from(date.month()))
            || (day >= 0 && day != i64::from(date.day()))
        {
            return Err(format!(
                "parsing time {full_value:?}: day-of-year does not match the month and day"
            ));
        }
        date
    } else {
        let month = if month < 0 { 1 } else { month };
        let day = if day < 0 { 1 } else { day };
        i32::try_from(year)
            .ok()
            .and_then(|y| NaiveDate::from_ymd_opt(y, month as u32, day as u32))
            .ok_or_else(|| out_of_range("day"))?
    };
    let naive = date
        .and_hms_nano_opt(hour as u32, min as u32, sec as u32, nsec as u32)
        .ok_or_else(|| out_of_range("time"))?;
    let zone = FixedOffset::east_opt(offset.unwrap_or(0)).ok_or_else(|| out_of_range("zone"))?;
    zone.from_local_datetime(&naive)
        .single()
        .ok_or_else(|| out_of_range("time"))
}

/// Parses `source` with a strptime `format`; missing fields are January 1st 1900,
/// midnight, UTC. Errors read `failed to parse "source" with "format": why`.
pub fn parse_strptime(source: &str, format: &str) -> Result<DateTime<FixedOffset>, String> {
    strptime(source, format)
        .map_err(|why| format!("failed to parse {source:?} with {format:?}: {why}"))
}

/// The parts read so far.
struct Parts {
    year: i64,
    century: Option<i64>,
    month: i64,
    day: i64,
    yday: Option<i64>,
    hour: i64,
    min: i64,
    sec: i64,
    nsec: i64,
    pm: Option<bool>,
    offset: i32,
    unix: Option<i64>,
}

/// Up to `size` digits at `j`; `cannot parse %c` when there are none.
fn number(source: &[u8], j: &mut usize, size: usize, directive: char) -> Result<i64, String> {
    let end = (*j + size).min(source.len());
    let mut i = *j;
    let mut n = 0i64;
    while i < end && source[i].is_ascii_digit() {
        n = n * 10 + i64::from(source[i] - b'0');
        i += 1;
    }
    if i == *j {
        return Err(format!("cannot parse %{directive}"));
    }
    *j = i;
    Ok(n)
}

/// The index of the name (of `names`, in any case) at `j`.
fn name_at(
    source: &str,
    j: &mut usize,
    names: impl Iterator<Item = &'static str>,
    directive: char,
) -> Result<i64, String> {
    let (i, rest) =
        lookup(names, &source[*j..]).ok_or_else(|| format!("cannot parse %{directive}"))?;
    *j = source.len() - rest.len();
    Ok(i as i64)
}

fn strptime(source: &str, format: &str) -> Result<DateTime<FixedOffset>, String> {
    let mut p = Parts {
        year: 1900,
        century: None,
        month: 1,
        day: 1,
        yday: None,
        hour: 0,
        min: 0,
        sec: 0,
        nsec: 0,
        pm: None,
        offset: 0,
        unix: None,
    };
    // Composite directives expand into their parts.
    let format = expand(format)?;
    let src = source.as_bytes();
    let mut j = 0;
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            if source[j..].starts_with(c) {
                j += c.len_utf8();
                continue;
            }
            let q = format!("{:?}", c);
            return Err(format!("expected {q}"));
        }
        let Some(d) = chars.next() else {
            return Err("stray %".into());
        };
        match d {
            'Y' => p.year = number(src, &mut j, 4, 'Y')?,
            'y' => {
                let y = number(src, &mut j, 2, 'y')?;
                p.year = match p.century {
                    Some(c) => c * 100 + y,
                    None if y < 69 => 2000 + y,
                    None => 1900 + y,
                };
            }
            'C' => {
                let c = number(src, &mut j, 2, 'y')?;
                p.century = Some(c);
                p.year = c * 100 + p.year % 100;
            }
            'm' => p.month = number(src, &mut j, 2, 'm')?,
            'B' => p.month = name_at(source, &mut j, LONG_MONTHS.iter().copied(), 'B')? + 1,
            'b' | 'h' => p.month = name_at(source, &mut j, short(&LONG_MONTHS), 'b')? + 1,
            'A' => {
                name_at(source, &mut j, LONG_DAYS.iter().copied(), 'A')?;
            }
            'a' => {
                name_at(source, &mut j, short(&LONG_DAYS), 'a')?;
            }
            'w' | 'u' => {
                number(src, &mut j, 1, d)?;
            }
            'U' | 'W' | 'V' | 'G' | 'g' => {
                number(src, &mut j, if d == 'G' { 4 } else { 2 }, d)?;
            }
            'e' | 'd' => {
                if d == 'e' && src.get(j) == Some(&b' ') {
                    j += 1;
                }
                p.day = number(src, &mut j, 2, 'd')?;
            }
            'j' => p.yday = Some(number(src, &mut j, 3, 'd')?),
            'k' | 'H' => {
                if d == 'k' && src.get(j) == Some(&b' ') {
                    j += 1;
                }
                p.hour = number(src, &mut j, 2, 'H')?;
            }
            'l' | 'I' => {
                if d == 'l' && src.get(j) == Some(&b' ') {
                    j += 1;
                }
                p.hour = number(src, &mut j, 2, 'I')?;
            }
            'p' | 'P' => {
                let two = source.get(j..j + 2).map(str::to_ascii_uppercase);
                p.pm = match two.as_deref() {
                    Some("PM") => Some(true),
                    Some("AM") => Some(false),
                    _ => return Err(format!("cannot parse %{d}")),
                };
                j += 2;
            }
            'M' => p.min = number(src, &mut j, 2, 'M')?,
            'S' => p.sec = number(src, &mut j, 2, 'S')?,
            's' => {
                let neg = src.get(j) == Some(&b'-');
                if neg {
                    j += 1;
                }
                let n = number(src, &mut j, 19, 's')?;
                p.unix = Some(if neg { -n } else { n });
            }
            'f' => {
                let start = j;
                let micros = number(src, &mut j, 6, 'f')?;
                p.nsec = micros * 10i64.pow((6 - (j - start)) as u32) * 1000;
            }
            'Z' => {
                if let Some(rest) = source[j..].strip_prefix("UTC") {
                    j = source.len() - rest.len();
                } else {
                    let n = zone_len(&source[j..]).ok_or("cannot parse %Z")?;
                    j += n;
                }
            }
            'z' => {
                let rest = &source[j..];
                if rest.starts_with('Z') {
                    j += 1;
                    p.offset = 0;
                } else {
                    let sign = match rest.as_bytes().first() {
                        Some(b'+') => 1,
                        Some(b'-') => -1,
                        _ => return Err("cannot parse %z".into()),
                    };
                    j += 1;
                    let h = number(src, &mut j, 2, 'z')?;
                    if src.get(j) == Some(&b':') {
                        j += 1;
                    }
                    let m = number(src, &mut j, 2, 'z')?;
                    p.offset = sign * ((h * 60 + m) * 60) as i32;
                }
            }
            't' | 'n' => {
                while src.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
                    j += 1;
                }
            }
            '%' => {
                if src.get(j) != Some(&b'%') {
                    return Err("expected '%'".into());
                }
                j += 1;
            }
            other => return Err(format!("unexpected format: \"%{other}\"")),
        }
    }
    if j < source.len() {
        return Err(format!("unconverted string: {:?}", &source[j..]));
    }
    let zone = FixedOffset::east_opt(p.offset).ok_or("cannot parse %z")?;
    if let Some(unix) = p.unix {
        return zone
            .timestamp_opt(unix, 0)
            .single()
            .ok_or_else(|| "cannot parse %s".to_owned());
    }
    match p.pm {
        Some(true) if p.hour < 12 => p.hour += 12,
        Some(false) if p.hour == 12 => p.hour = 0,
        _ => {}
    }
    let year = i32::try_from(p.year).map_err(|_| "cannot parse %Y".to_owned())?;
    let date = match p.yday {
        Some(yday) => NaiveDate::from_ymd_opt(year, 1, 1)
            .and_then(|d| d.checked_add_signed(Duration::days(yday - 1))),
        None => NaiveDate::from_ymd_opt(year, p.month as u32, p.day as u32),
    }
    .ok_or_else(|| "the date does not exist".to_owned())?;
    let naive = date
        .and_hms_nano_opt(p.hour as u32, p.min as u32, p.sec as u32, p.nsec as u32)
        .ok_or_else(|| "the time of day does not exist".to_owned())?;
    zone.from_local_datetime(&naive)
        .single()
        .ok_or_else(|| "the time does not exist".to_owned())
}

/// Replaces the composite directives with their parts.
fn expand(format: &str) -> Result<String, String> {
    let mut out = String::with_capacity(format.len());
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        out.push_str(match d {
            'T' | 'X' => "%H:%M:%S",
            'D' | 'x' => "%m/%d/%y",
            'F' => "%Y-%m-%d",
            'R' => "%H:%M",
            'r' => "%I:%M:%S %p",
            'c' => "%a %b %e %H:%M:%S %Y",
            'v' => "%e-%b-%Y",
            _ => {
                out.push('%');
                out.push(d);
                continue;
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(s).unwrap()
    }

    #[test]
    fn go_layouts_parse_as_go_parses_them() {
        for (value, layout, want) in [
            ("2020-Aug-14", "2006-Jan-02", "2020-08-14T00:00:00Z"),
            (
                "Aug 14, 2020 at 5:54am (UTC)",
                "Jan 2, 2006 at 3:04pm (MST)",
                "2020-08-14T05:54:00Z",
            ),
            (
                "2020-08-14T11:45:26.371+05:00",
                "2006-01-02T15:04:05.999999999Z07:00",
                "2020-08-14T11:45:26.371+05:00",
            ),
            (
                "2020-08-14T11:45:26Z",
                "2006-01-02T15:04:05Z07:00",
                "2020-08-14T11:45:26Z",
            ),
            // A fraction the layout does not write is read all the same.
            (
                "2020-08-14 11:45:26.5",
                "2006-01-02 15:04:05",
                "2020-08-14T11:45:26.5Z",
            ),
            ("14/08/20 3PM", "02/01/06 3PM", "2020-08-14T15:00:00Z"),
            (
                "Friday, 14-Aug-20 11:45:26 GMT",
                "Monday, 02-Jan-06 15:04:05 MST",
                "2020-08-14T11:45:26Z",
            ),
            ("2020 227", "2006 002", "2020-08-14T00:00:00Z"),
        ] {
            assert_eq!(
                parse_layout(value, layout).unwrap(),
                at(want),
                "{value} / {layout}"
            );
        }
    }

    #[test]
    fn go_layout_errors_read_as_go_writes_them() {
        for (value, layout, want) in [
            (
                "not valid timestamp",
                "2006-01-02T15:04:05Z07:00",
                r#"parsing time "not valid timestamp" as "2006-01-02T15:04:05Z07:00": cannot parse "not valid timestamp" as "2006""#,
            ),
            (
                "invalid format",
                "2006-Jan-02",
                r#"parsing time "invalid format" as "2006-Jan-02": cannot parse "invalid format" as "2006""#,
            ),
            (
                "2020-08-14x",
                "2006-01-02",
                r#"parsing time "2020-08-14x": extra text: "x""#,
            ),
            (
                "2020-13-14",
                "2006-01-02",
                r#"parsing time "2020-13-14": month out of range"#,
            ),
            (
                "2021-02-29",
                "2006-01-02",
                r#"parsing time "2021-02-29": day out of range"#,
            ),
            (
                "2020/08/14",
                "2006-01-02",
                r#"parsing time "2020/08/14" as "2006-01-02": cannot parse "/08/14" as "-""#,
            ),
        ] {
            assert_eq!(parse_layout(value, layout).unwrap_err(), want);
        }
    }

    #[test]
    fn strptime_parses_and_fails_as_the_reference() {
        assert_eq!(
            parse_strptime("2020-Aug-14 11:50:26.371000", "%Y-%b-%d %H:%M:%S.%f").unwrap(),
            at("2020-08-14T11:50:26.371Z")
        );
        assert_eq!(
            parse_strptime("2020-08-14 extra", "%F").unwrap_err(),
            r#"failed to parse "2020-08-14 extra" with "%F": unconverted string: " extra""#
        );
        assert_eq!(
            parse_strptime("08/14/20 03:04:05 PM +0200", "%D %r %z").unwrap(),
            at("2020-08-14T15:04:05+02:00")
        );
        for (source, format, want) in [
            (
                "invalid format",
                "INVALID_FORMAT",
                r#"failed to parse "invalid format" with "INVALID_FORMAT": expected 'I'"#,
            ),
            (
                "not valid timestamp",
                "%Y-%b-%d",
                r#"failed to parse "not valid timestamp" with "%Y-%b-%d": cannot parse %Y"#,
            ),
            (
                "2020",
                "%Y%",
                r#"failed to parse "2020" with "%Y%": stray %"#,
            ),
            (
                "2020",
                "%Q",
                r#"failed to parse "2020" with "%Q": unexpected format: "%Q""#,
            ),
        ] {
            assert_eq!(parse_strptime(source, format).unwrap_err(), want);
        }
    }
}
