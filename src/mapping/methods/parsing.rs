//! Parsing structured text (JSON, YAML, CSV, URLs, forms) and writing it back.

use super::{raw, text};
use crate::mapping::exec::{own, V};
use crate::mapping::spec::{ex, method, opt, Args, Default, MethodSpec, Res};
use crate::value::{Object, Value};

const CAT: &str = "Parsing";

pub static SPECS: &[MethodSpec] = &[
    method("parse_json", CAT, "Parses JSON text into a value.", &[opt("use_number", Default::Bool(false))],
        &[ex("root.d = this.s.parse_json()", r#"{"s":"{\"a\":[1,2]}"}"#, r#"{"d":{"a":[1,2]}}"#),
          ex("root.d = this.s.parse_json()", r#"{"s":"{nope"}"#, "error:failed to parse")], parse_json),
    method("format_json", CAT, "Writes the value as JSON text; indented unless `no_indent`.",
        &[opt("indent", Default::Str("    ")), opt("no_indent", Default::Bool(false))],
        &[ex(r#"root.s = this.format_json(no_indent: true).string()"#, r#"{"a":1}"#, r#"{"s":"{\"a\":1}"}"#),
          ex(r#"root = this.format_json("  ")"#, r#"{"a":1}"#, "{\n  \"a\": 1\n}")], format_json),
    method("parse_yaml", CAT, "Parses YAML text into a value.", &[],
        &[ex("root.d = this.s.parse_yaml()", r#"{"s":"a: [1, x]\nb: true\n"}"#, r#"{"d":{"a":[1,"x"],"b":true}}"#)], parse_yaml),
    method("format_yaml", CAT, "Writes the value as YAML text.", &[],
        &[ex("root = this.format_yaml()", r#"{"a":1}"#, "a: 1\n")], format_yaml),
    method("parse_csv", CAT, "Parses CSV text into an array of objects keyed by the header row (or of arrays without one).",
        &[opt("parse_header_row", Default::Bool(true)), opt("delimiter", Default::Str(",")), opt("lazy_quotes", Default::Bool(false))],
        &[ex("root.rows = this.s.parse_csv()", r#"{"s":"a,b\n1,2\n3,4"}"#, r#"{"rows":[{"a":"1","b":"2"},{"a":"3","b":"4"}]}"#),
          ex("root.rows = this.s.parse_csv(false)", r#"{"s":"1,2"}"#, r#"{"rows":[["1","2"]]}"#)], parse_csv),
    method("format_csv", CAT, "Writes an array of objects (header from the first's keys) or arrays as CSV text.",
        &[opt("delimiter", Default::Str(","))],
        &[ex("root = this.rows.format_csv()", r#"{"rows":[{"a":"1","b":2}]}"#, "a,b\n1,2\n")], format_csv),
    method("parse_url", CAT, "Parses a URL into its parts.", &[],
        &[ex("root.u = this.s.parse_url().without(\"raw_query\", \"fragment\", \"user\")", r#"{"s":"https://x.io:8080/p/a?q=1&q=2"}"#,
             r#"{"u":{"scheme":"https","host":"x.io:8080","path":"/p/a","query":{"q":["1","2"]}}}"#)], parse_url),
    method("parse_form_url_encoded", CAT, "Parses `a=1&b=2` into an object; repeated keys give arrays.", &[],
        &[ex("root.f = this.s.parse_form_url_encoded()", r#"{"s":"a=1&b=x+y&a=2"}"#, r#"{"f":{"a":["1","2"],"b":"x y"}}"#)], parse_form),
];

fn parse_json<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    Value::from_json(&raw(v)?)
        .map(V::Own)
        .map_err(|e| format!("failed to parse JSON: {e}"))
}

fn format_json<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    if args.bool(1)? {
        return own(Value::Bytes(v.to_json().into()));
    }
    let indent = args.str(0)?;
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(v, &mut ser).map_err(|e| e.to_string())?;
    own(Value::Bytes(out.into()))
}

fn yaml_to_value(y: serde_yaml::Value) -> Value {
    match y {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(b) => Value::Bool(b),
        serde_yaml::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_yaml::Value::String(s) => Value::String(s),
        serde_yaml::Value::Sequence(s) => Value::Array(s.into_iter().map(yaml_to_value).collect()),
        serde_yaml::Value::Mapping(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        serde_yaml::Value::String(s) => s,
                        other => serde_yaml::to_string(&other)
                            .unwrap_or_default()
                            .trim_end()
                            .to_string(),
                    };
                    (key, yaml_to_value(v))
                })
                .collect(),
        ),
        serde_yaml::Value::Tagged(t) => yaml_to_value(t.value),
    }
}

fn parse_yaml<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let y: serde_yaml::Value =
        serde_yaml::from_slice(&raw(v)?).map_err(|e| format!("failed to parse YAML: {e}"))?;
    own(yaml_to_value(y))
}

fn format_yaml<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    serde_yaml::to_string(v)
        .map(|s| V::Own(Value::Bytes(s.into_bytes().into())))
        .map_err(|e| e.to_string())
}

fn delimiter(args: &Args<'_>, i: usize) -> Res<u8> {
    let d = args.str(i)?;
    match d.as_bytes() {
        [b] => Ok(*b),
        _ => Err(format!("delimiter must be one byte, got {d:?}")),
    }
}

fn parse_csv<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let header = args.bool(0)?;
    let data = raw(v)?;
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(delimiter(args, 1)?)
        .flexible(args.bool(2)?)
        .from_reader(&data[..]);
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| format!("failed to parse CSV: {e}"))?;
        rows.push(rec.iter().map(str::to_string).collect::<Vec<_>>());
    }
    if !header {
        return own(Value::Array(
            rows.into_iter()
                .map(|r| Value::Array(r.into_iter().map(Value::String).collect()))
                .collect(),
        ));
    }
    let mut it = rows.into_iter();
    let Some(head) = it.next() else {
        return own(Value::Array(Vec::new()));
    };
    let out = it
        .map(|r| {
            Value::Object(
                head.iter()
                    .cloned()
                    .zip(r.into_iter().map(Value::String))
                    .collect::<Object>(),
            )
        })
        .collect();
    own(Value::Array(out))
}

fn csv_field(v: &Value) -> String {
    super::general::to_string_value(v)
}

fn format_csv<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let rows = super::array(v)?;
    let mut w = csv::WriterBuilder::new()
        .delimiter(delimiter(args, 0)?)
        .from_writer(Vec::new());
    let err = |e: csv::Error| e.to_string();
    if let Some(Value::Object(first)) = rows.first() {
        let keys: Vec<&String> = first.keys().collect();
        w.write_record(keys.iter().map(|k| k.as_str()))
            .map_err(err)?;
        for r in rows {
            let o = super::object(r)?;
            w.write_record(
                keys.iter()
                    .map(|k| o.get(*k).map(csv_field).unwrap_or_default()),
            )
            .map_err(err)?;
        }
    } else {
        for r in rows {
            w.write_record(super::array(r)?.iter().map(csv_field))
                .map_err(err)?;
        }
    }
    let out = w.into_inner().map_err(|e| e.to_string())?;
    own(Value::Bytes(out.into()))
}

fn form_object<'x>(
    pairs: impl Iterator<Item = (std::borrow::Cow<'x, str>, std::borrow::Cow<'x, str>)>,
) -> Value {
    let mut o = Object::new();
    for (k, v) in pairs {
        let v = Value::String(v.into_owned());
        match o.get_mut(k.as_ref()) {
            Some(Value::Array(a)) => a.push(v),
            Some(existing) => {
                let first = std::mem::take(existing);
                *existing = Value::Array(vec![first, v]);
            }
            None => {
                o.insert(k.into_owned(), v);
            }
        }
    }
    Value::Object(o)
}

fn parse_form<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(form_object(url::form_urlencoded::parse(&raw(v)?)))
}

fn parse_url<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let u = url::Url::parse(&s).map_err(|e| format!("failed to parse URL: {e}"))?;
    let mut o = Object::new();
    o.insert("scheme".into(), Value::from(u.scheme()));
    let host = match (u.host_str(), u.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        _ => String::new(),
    };
    o.insert("host".into(), Value::String(host));
    o.insert("path".into(), Value::from(u.path()));
    o.insert("raw_query".into(), Value::from(u.query().unwrap_or("")));
    o.insert("fragment".into(), Value::from(u.fragment().unwrap_or("")));
    let mut query = Object::new();
    for (k, v) in u.query_pairs() {
        if let Value::Array(a) = query
            .entry(k.into_owned())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            a.push(Value::String(v.into_owned()));
        }
    }
    o.insert("query".into(), Value::Object(query));
    let mut user = Object::new();
    if !u.username().is_empty() {
        user.insert("name".into(), Value::from(u.username()));
        if let Some(p) = u.password() {
            user.insert("password".into(), Value::from(p));
        }
    }
    o.insert("user".into(), Value::Object(user));
    own(Value::Object(o))
}
