//! Regular expressions (RE2-like syntax, linear time). Literal patterns compile once,
//! when the mapping does.

use super::text;
use crate::mapping::budget;
use crate::mapping::exec::{own, V};
use crate::mapping::spec::{ex, method, p, re, Args, MethodSpec, Res};
use crate::value::{Object, Value};

const CAT: &str = "Regular Expressions";

pub static SPECS: &[MethodSpec] = &[
    method(
        "re_match",
        CAT,
        "Whether the pattern matches anywhere in the string.",
        &[re("pattern")],
        &[ex(
            r#"root.m = this.s.re_match("[0-9]+")"#,
            r#"{"s":"ab12"}"#,
            r#"{"m":true}"#,
        )],
        re_match,
    ),
    method(
        "re_find_all",
        CAT,
        "Every match of the pattern.",
        &[re("pattern")],
        &[ex(
            r#"root.m = this.s.re_find_all("a.")"#,
            r#"{"s":"paranormal"}"#,
            r#"{"m":["ar","an","al"]}"#,
        )],
        re_find_all,
    ),
    method(
        "re_find_all_submatch",
        CAT,
        "Every match, each as an array of the match and its groups.",
        &[re("pattern")],
        &[ex(
            r#"root.m = this.s.re_find_all_submatch("a(x*)b")"#,
            r#"{"s":"-axxb-ab-"}"#,
            r#"{"m":[["axxb","xx"],["ab",""]]}"#,
        )],
        re_find_all_submatch,
    ),
    method(
        "re_find_object",
        CAT,
        "The first match as an object of group names (or numbers) to text; `0` is the whole match.",
        &[re("pattern")],
        &[ex(
            r#"root.m = this.s.re_find_object("a(?P<foo>x*)b")"#,
            r#"{"s":"-axxb-ab-"}"#,
            r#"{"m":{"0":"axxb","foo":"xx"}}"#,
        )],
        re_find_object,
    ),
    method(
        "re_find_all_object",
        CAT,
        "Every match as an object of group names (or numbers) to text.",
        &[re("pattern")],
        &[ex(
            r#"root.m = this.s.re_find_all_object("a(?P<foo>x*)b")"#,
            r#"{"s":"-axxb-ab-"}"#,
            r#"{"m":[{"0":"axxb","foo":"xx"},{"0":"ab","foo":""}]}"#,
        )],
        re_find_all_object,
    ),
    method(
        "re_replace_all",
        CAT,
        "Replaces every match; `$1` and `${name}` in the replacement refer to groups.",
        &[re("pattern"), p("value")],
        &[ex(
            r#"root.s = this.s.re_replace_all("ADD ([0-9]+)", "+($1)")"#,
            r#"{"s":"foo ADD 70"}"#,
            r#"{"s":"foo +(70)"}"#,
        )],
        re_replace_all,
    ),
    method(
        "re_replace",
        CAT,
        "Old name of `re_replace_all`.",
        &[re("pattern"), p("value")],
        &[],
        re_replace_all,
    ),
];

fn re_match<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    own(args.regex(0)?.is_match(&text(v)?))
}

// The matches of a pattern that matches everywhere (`""`, `.`) are one value per
// character, each taking a value's room: counted as they are made.
fn re_find_all<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = args.regex(0)?;
    own(Value::Array(budget::collect(
        r.find_iter(&text(v)?).map(|m| Value::from(m.as_str())),
    )?))
}

fn re_find_all_submatch<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = args.regex(0)?;
    let s = text(v)?;
    let out = budget::collect(r.captures_iter(&s).map(|c| {
        Value::Array(
            c.iter()
                .map(|g| Value::from(g.map(|m| m.as_str()).unwrap_or("")))
                .collect(),
        )
    }))?;
    own(Value::Array(out))
}

fn captures_object(r: &regex::Regex, c: &regex::Captures<'_>) -> Value {
    let mut o = Object::new();
    for (i, name) in r.capture_names().enumerate() {
        let key = name.map(str::to_string).unwrap_or_else(|| i.to_string());
        let val = c.get(i).map(|m| m.as_str()).unwrap_or("");
        o.insert(key, Value::from(val));
    }
    Value::Object(o)
}

fn re_find_object<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = args.regex(0)?;
    let s = text(v)?;
    own(match r.captures(&s) {
        Some(c) => captures_object(&r, &c),
        None => Value::Object(Object::new()),
    })
}

fn re_find_all_object<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = args.regex(0)?;
    let s = text(v)?;
    own(Value::Array(budget::collect(
        r.captures_iter(&s).map(|c| captures_object(&r, &c)),
    )?))
}

fn re_replace_all<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let r = args.regex(0)?;
    let with = args.str(1)?;
    let s = text(v)?;
    if !budget::limited() {
        return own(r.replace_all(&s, with).into_owned());
    }
    // Each match can grow by the whole replacement (`$0$0$0...` repeats it): the result
    // is checked as it grows. The same text as `replace_all` makes.
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for caps in r.captures_iter(&s) {
        let Some(m) = caps.get(0) else {
            continue;
        };
        out.push_str(&s[last..m.start()]);
        caps.expand(with, &mut out);
        last = m.end();
        budget::fits(out.len())?;
    }
    out.push_str(&s[last..]);
    own(out)
}
