//! Parsing structured text (JSON, YAML, CSV, URLs, forms) and writing it back.

use super::{raw, text};
use crate::mapping::budget;
use crate::mapping::exec::{own, V};
use crate::mapping::spec::{ex, method, opt, Args, Default, MethodSpec, Res};
use crate::value::{Object, Value};

const CAT: &str = "Parsing";

pub static SPECS: &[MethodSpec] = &[
    method("parse_json", CAT, "Parses JSON text into a value. Reads the first value of the text (what follows it is ignored). With `use_number`, integers past `i64` keep every digit instead of becoming floats.", &[opt("use_number", Default::Bool(false))],
        &[ex("root.d = this.s.parse_json()", r#"{"s":"{\"a\":[1,2]}"}"#, r#"{"d":{"a":[1,2]}}"#),
          ex("root.d = this.s.parse_json()", r#"{"s":"{nope"}"#, "error:failed to parse value as JSON: invalid character 'n' looking for beginning of object key string"),
          ex("root.id = this.s.parse_json(use_number: true).id.string()", r#"{"s":"{\"id\":18446744073709551615}"}"#, r#"{"id":"18446744073709551615"}"#),
          ex("root.id = this.s.parse_json().id.string()", r#"{"s":"{\"id\":18446744073709551615}"}"#, r#"{"id":"18446744073709552000"}"#)], parse_json),
    method("format_json", CAT, "Writes the value as JSON text; indented unless `no_indent`. `<`, `>` and `&` in strings are written as `\\u003c`, `\\u003e` and `\\u0026` unless `escape_html` is false.",
        &[opt("indent", Default::Str("    ")), opt("no_indent", Default::Bool(false)), opt("escape_html", Default::Bool(true))],
        &[ex(r#"root.s = this.format_json(no_indent: true).string()"#, r#"{"a":1}"#, r#"{"s":"{\"a\":1}"}"#),
          ex(r#"root = this.format_json("  ")"#, r#"{"a":1}"#, "{\n  \"a\": 1\n}"),
          ex("root = this.doc.format_json()", r#"{"doc":{"email":"foo&bar@benthos.dev","name":"foo>bar"}}"#,
             "{\n    \"email\": \"foo\\u0026bar@benthos.dev\",\n    \"name\": \"foo\\u003ebar\"\n}"),
          ex("root.s = this.format_json(no_indent: true).string()", r#"{"a":"<&>"}"#, r#"{"s":"{\"a\":\"\\u003c\\u0026\\u003e\"}"}"#),
          ex("root = this.doc.format_json(escape_html: false)", r#"{"doc":{"email":"foo&bar@benthos.dev","name":"foo>bar"}}"#,
             "{\n    \"email\": \"foo&bar@benthos.dev\",\n    \"name\": \"foo>bar\"\n}")], format_json),
    method("parse_yaml", CAT, "Parses YAML text into a value.", &[],
        &[ex("root.d = this.s.parse_yaml()", r#"{"s":"a: [1, x]\nb: true\n"}"#, r#"{"d":{"a":[1,"x"],"b":true}}"#)], parse_yaml),
    method("format_yaml", CAT, "Writes the value as YAML text, indented as Go's YAML encoder indents it: nested mappings and sequences under a key four columns deeper.", &[],
        &[ex("root = this.format_yaml()", r#"{"a":1}"#, "a: 1\n"),
          ex("root = this.doc.format_yaml()", r#"{"doc":{"foo":"bar"}}"#, "foo: bar\n"),
          ex("root = this.format_yaml()", r#"{"a":{"b":{"c":1}},"l":[1,{"x":1,"y":[2,3]}],"e":[],"o":{}}"#,
             "a:\n    b:\n        c: 1\ne: []\nl:\n    - 1\n    - x: 1\n      y:\n        - 2\n        - 3\no: {}\n"),
          ex("root = this.format_yaml()", r#"[[1,2],"x"]"#, "- - 1\n  - 2\n- x\n")], format_yaml),
    method("parse_csv", CAT, "Parses CSV text into an array of objects keyed by the header row (or of arrays without one).",
        &[opt("parse_header_row", Default::Bool(true)), opt("delimiter", Default::Str(",")), opt("lazy_quotes", Default::Bool(false))],
        &[ex("root.rows = this.s.parse_csv()", r#"{"s":"a,b\n1,2\n3,4"}"#, r#"{"rows":[{"a":"1","b":"2"},{"a":"3","b":"4"}]}"#),
          ex("root.rows = this.s.parse_csv(false)", r#"{"s":"1,2"}"#, r#"{"rows":[["1","2"]]}"#)], parse_csv),
    method("format_csv", CAT, "Writes an array of objects (header from the first's keys) or arrays as CSV text.",
        &[opt("delimiter", Default::Str(","))],
        &[ex("root = this.rows.format_csv()", r#"{"rows":[{"a":"1","b":2}]}"#, "a,b\n1,2\n")], format_csv),
    method("parse_url", CAT, "Parses a URL into its parts, as Go's `url.Parse` reads it: `scheme`, `opaque`, `user` (`name`, `password`; only when given), `host` (with the port as written), `path` (unescaped), `raw_path`, `raw_query`, `query` (each key's values; only when there is a query), `fragment` and `raw_fragment`.", &[],
        &[ex("root.foo_url = this.url.parse_url()", r#"{"url":"https://www.benthos.dev/docs/guides/bloblang/about"}"#,
             r#"{"foo_url":{"fragment":"","host":"www.benthos.dev","opaque":"","path":"/docs/guides/bloblang/about","raw_fragment":"","raw_path":"","raw_query":"","scheme":"https"}}"#),
          ex("root.username = this.url.parse_url().user.name | \"unknown\"", r#"{"url":"amqp://foo:bar@127.0.0.1:5672/"}"#, r#"{"username":"foo"}"#),
          ex("root.username = this.url.parse_url().user.name | \"unknown\"", r#"{"url":"redis://localhost:6379"}"#, r#"{"username":"unknown"}"#),
          ex("root.u = this.s.parse_url().without(\"opaque\", \"raw_path\", \"fragment\", \"raw_fragment\")", r#"{"s":"https://x.io:8080/p/a?q=1&q=2&r=a+b"}"#,
             r#"{"u":{"scheme":"https","host":"x.io:8080","path":"/p/a","raw_query":"q=1&q=2&r=a+b","query":{"q":["1","2"],"r":["a b"]}}}"#),
          ex("root.u = this.s.parse_url()", r#"{"s":"http://h/a%2Fb%20c#x%20y"}"#,
             r#"{"u":{"scheme":"http","opaque":"","host":"h","path":"/a/b c","raw_path":"/a%2Fb%20c","raw_query":"","fragment":"x y","raw_fragment":""}}"#),
          ex("root.u = this.s.parse_url().opaque", r#"{"s":"mailto:someone@example.com"}"#, r#"{"u":"someone@example.com"}"#),
          ex(r#"root.url = this.url.parse_url().catch(err -> {"error":err,"input":this.url})"#, r#"{"url":"invalid %&# url"}"#,
             r#"{"url":{"error":"this.url.parse_url(): parse \"invalid %&\": invalid URL escape \"%&\"","input":"invalid %&# url"}}"#)], parse_url),
    method("parse_form_url_encoded", CAT, "Parses `a=1&b=2` into an object; repeated keys give arrays.", &[],
        &[ex("root.f = this.s.parse_form_url_encoded()", r#"{"s":"a=1&b=x+y&a=2"}"#, r#"{"f":{"a":["1","2"],"b":"x y"}}"#)], parse_form),
    method(
        "parse_logfmt",
        CAT,
        "Parses logfmt (`a=1 b=\"x y\" flag`) into an object of strings; bare keys are true.",
        &[],
        &[ex(
            "root = this.s.parse_logfmt()",
            r#"{"s":"level=info msg=\"hi there\" ok"}"#,
            r#"{"level":"info","msg":"hi there","ok":true}"#,
        )],
        parse_logfmt,
    ),
    method(
        "format_logfmt",
        CAT,
        "Writes an object as logfmt, keys in order, quoting values that need it.",
        &[],
        &[ex("root = this.format_logfmt()", r#"{"a":1,"b":"x y"}"#, r#"a=1 b="x y""#)],
        format_logfmt,
    ),
    method(
        "parse_msgpack",
        CAT,
        "Parses MessagePack bytes into a value.",
        &[],
        &[ex("root = this.format_msgpack().parse_msgpack()", r#"{"a":[1,"x",true]}"#, r#"{"a":[1,"x",true]}"#)],
        parse_msgpack,
    ),
    method(
        "format_msgpack",
        CAT,
        "Writes the value as MessagePack bytes.",
        &[],
        &[ex("root = this.format_msgpack().encode(\"hex\")", r#"{"a":1}"#, "81a16101")],
        format_msgpack,
    ),
    method(
        "parse_xml",
        CAT,
        "Parses XML into an object: attributes become `-name` fields, text beside children or attributes becomes `#text`, repeated elements become arrays; `cast` turns numeric and bool text into numbers and bools.",
        &[opt("cast", Default::Bool(false))],
        &[ex(
            "root = this.s.parse_xml()",
            r#"{"s":"<root><title lang=\"en\">Hi</title><n>1</n><n>2</n></root>"}"#,
            r##"{"root":{"n":["1","2"],"title":{"#text":"Hi","-lang":"en"}}}"##,
        ),
          ex("root = this.s.parse_xml(true)", r#"{"s":"<a><n>1.5</n><b>true</b></a>"}"#, r#"{"a":{"b":true,"n":1.5}}"#),
          ex("root = this.s.parse_xml(cast: true)", r#"{"s":"<a id=\"7\" ok=\"true\" ratio=\"0.5\" name=\"x\">text</a>"}"#,
             r##"{"a":{"#text":"text","-id":7,"-name":"x","-ok":true,"-ratio":0.5}}"##),
          ex("root = this.s.parse_xml()", r#"{"s":"<a id=\"7\">t</a>"}"#, r##"{"a":{"#text":"t","-id":"7"}}"##),
          ex("root = this.s.parse_xml()", r#"{"s":"<a id=7 lang=en>t</a>"}"#, r##"{"a":{"#text":"t","-id":"7","-lang":"en"}}"##)],
        parse_xml,
    ),
    method(
        "format_xml",
        CAT,
        "Writes an object as XML, the inverse of `parse_xml`: `-name` fields become attributes, `#text` the text, arrays repeated elements. Each element starts a line indented by `indent` per level, unless `no_indent`.",
        &[opt("indent", Default::Str("    ")), opt("no_indent", Default::Bool(false))],
        &[ex(
            "root = this.format_xml(no_indent: true).string()",
            r##"{"root":{"n":["1","2"],"title":{"#text":"Hi","-lang":"en"}}}"##,
            r#"<root><n>1</n><n>2</n><title lang="en">Hi</title></root>"#,
        ),
          ex("root = this.format_xml()", r#"{"foo":{"bar":{"baz":"foo bar baz"}}}"#,
             "<foo>\n    <bar>\n        <baz>foo bar baz</baz>\n    </bar>\n</foo>"),
          ex("root.doc = this.format_xml(\"\").string()", r#"{"foo":{"bar":{"baz":"foo bar baz"}}}"#,
             r#"{"doc":"<foo>\n<bar>\n<baz>foo bar baz</baz>\n</bar>\n</foo>"}"#)],
        format_xml,
    ),
];

fn parse_json<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let bytes = raw(v)?;
    let exact = args.bool(0)?;
    if !exact {
        // The fast reader takes a whole document; the reference reads the first value
        // and says what is wrong in Go's words, which the slower reader does. In a
        // tenant's run both count what they read against the value cap.
        if let Ok(value) = crate::value::with_room(budget::value_cap(), || Value::from_json(&bytes))
        {
            return own(value);
        }
    }
    crate::mapping::go_json::decode_first(&bytes, exact)
        .map(V::Own)
        .map_err(|e| format!("failed to parse value as JSON: {e}"))
}

fn format_json<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let out = if args.bool(1)? {
        v.to_json()
    } else {
        let indent = args.str(0)?;
        // The indentation is given: a long one is written once per level on every line,
        // so the text is held to the value cap as it is written.
        let mut out = CappedText {
            text: Vec::new(),
            cap: budget::value_cap(),
        };
        let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        serde::Serialize::serialize(v, &mut ser).map_err(|e| match e.io_error_kind() {
            Some(std::io::ErrorKind::OutOfMemory) => budget::TooLarge::Value.to_string(),
            _ => e.to_string(),
        })?;
        out.text
    };
    if args.bool(2)? {
        return own(Value::Bytes(escape_json_html(out).into()));
    }
    own(Value::Bytes(out.into()))
}

/// Text being written, refused past `cap` bytes (with `OutOfMemory`).
struct CappedText {
    text: Vec<u8>,
    cap: Option<usize>,
}

impl std::io::Write for CappedText {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self
            .cap
            .is_some_and(|cap| self.text.len() + buf.len() > cap)
        {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Escapes `<`, `>`, `&`, U+2028 and U+2029 as Go's JSON encoder does by default. In JSON
/// text these occur only inside strings, so a plain byte scan is enough.
fn escape_json_html(json: Vec<u8>) -> Vec<u8> {
    // 0xe2 leads U+2028 and U+2029 (and other characters, which the loop below keeps).
    if !json.iter().any(|&b| matches!(b, b'<' | b'>' | b'&' | 0xe2)) {
        return json;
    }
    let mut out = Vec::with_capacity(json.len() + 16);
    let mut i = 0;
    while i < json.len() {
        match &json[i..] {
            [b'<', ..] => out.extend_from_slice(b"\\u003c"),
            [b'>', ..] => out.extend_from_slice(b"\\u003e"),
            [b'&', ..] => out.extend_from_slice(b"\\u0026"),
            [0xe2, 0x80, c @ (0xa8 | 0xa9), ..] => {
                out.extend_from_slice(if *c == 0xa8 { b"\\u2028" } else { b"\\u2029" });
                i += 3;
                continue;
            }
            [b, ..] => out.push(*b),
            [] => break,
        }
        i += 1;
    }
    out
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

/// What the YAML reader holds for each value of the text while it reads it, at most.
const YAML_EVENT: usize = 128;

fn parse_yaml<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let text = raw(v)?;
    // The YAML scanner's work per token grows with the flow collections open, and the
    // whole text is scanned before the parser's own depth limit applies: refuse deep
    // flow nesting first. Brackets inside strings count too, which only ever refuses
    // text nested absurdly deep anyway.
    let mut depth = 0usize;
    // Every value but the first starts after one of these (an item, a key, a line, an
    // alias): an upper bound on the values the text holds.
    let mut starts = 1usize;
    for b in text.iter() {
        match b {
            b'[' | b'{' => {
                starts += 1;
                depth += 1;
                if depth > crate::value::MAX_DEPTH {
                    return Err(format!("failed to parse YAML: {}", crate::value::TooDeep));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' | b'-' | b'\n' | b'*' | b'?' => starts += 1,
            _ => {}
        }
    }
    if let Some(cap) = budget::value_cap() {
        // The YAML reader holds every event of the text (about a hundred bytes each) and
        // then a tree of its own, neither counted as they are made, and text of a few
        // megabytes can hold millions of tiny values. In a tenant's run the text is
        // first held to what its events could take, then read into values that are
        // counted (aliases repeat what they name), to know that it fits. (Only running
        // out of room matters there; the read below reports any other error.)
        budget::fits(starts.saturating_mul(YAML_EVENT))
            .map_err(|e| format!("failed to parse YAML: {e}"))?;
        let fits = crate::value::with_room(Some(cap), || {
            serde_yaml::from_slice::<Value>(&text).map(|_| ())
        });
        if let Err(e) = fits {
            if e.to_string()
                .contains(&crate::value::OutOfRoom(cap).to_string())
            {
                return Err(format!("failed to parse YAML: {}", budget::TooLarge::Value));
            }
        }
    }
    let y: serde_yaml::Value =
        serde_yaml::from_slice(&text).map_err(|e| format!("failed to parse YAML: {e}"))?;
    own(yaml_to_value(y))
}

/// One scalar as YAML text (serde_yaml decides quoting); multi-line strings come back as a
/// `|-` block whose lines are indented to `col`.
fn yaml_scalar(v: &Value, col: usize) -> Res<String> {
    let s = serde_yaml::to_string(v).map_err(|e| e.to_string())?;
    let s = s.strip_suffix('\n').unwrap_or(&s);
    if !s.contains('\n') {
        return Ok(s.to_string());
    }
    let mut lines = s.lines();
    let mut out = lines.next().unwrap_or("").to_string();
    let pad = " ".repeat(col);
    for l in lines {
        out.push('\n');
        let l = l.strip_prefix("  ").unwrap_or(l);
        if !l.is_empty() {
            out.push_str(&pad);
            out.push_str(l);
        }
    }
    Ok(out)
}

fn yaml_is_block(v: &Value) -> bool {
    match v {
        Value::Object(o) => !o.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

/// Writes a block value whose first line continues the current one (`inline`) or starts at
/// `col`. As Go's YAML encoder indents (four columns): what is under a key goes to the next
/// multiple of four, what is in a sequence item right after its `- `.
fn yaml_block(v: &Value, col: usize, inline: bool, out: &mut String) -> Res<()> {
    let mut first = inline;
    let mut start = |out: &mut String| {
        if !std::mem::take(&mut first) {
            out.push_str(&" ".repeat(col));
        }
    };
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                start(out);
                out.push_str(&yaml_scalar(&Value::String(k.clone()), col + 4)?);
                out.push(':');
                if yaml_is_block(x) {
                    out.push('\n');
                    // Go's encoder indents what is under a key to the next multiple of four
                    // (so a mapping that sits after a `- ` comes back into step).
                    yaml_block(x, 4 * ((col + 4) / 4), false, out)?;
                } else {
                    out.push(' ');
                    out.push_str(&yaml_empty_or_scalar(x, col + 4)?);
                    out.push('\n');
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                start(out);
                out.push_str("- ");
                if yaml_is_block(x) {
                    yaml_block(x, col + 2, true, out)?;
                } else {
                    out.push_str(&yaml_empty_or_scalar(x, col + 2)?);
                    out.push('\n');
                }
            }
        }
        other => {
            start(out);
            out.push_str(&yaml_empty_or_scalar(other, col)?);
            out.push('\n');
        }
    }
    Ok(())
}

fn yaml_empty_or_scalar(v: &Value, col: usize) -> Res<String> {
    Ok(match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => yaml_scalar(other, col)?,
    })
}

fn format_yaml<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let mut out = String::new();
    yaml_block(v, 0, false, &mut out)?;
    own(Value::Bytes(out.into_bytes().into()))
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
    let delim = delimiter(args, 1)?;
    if budget::limited() {
        // The reader holds a whole record (a few words per field) before the fields
        // below are counted, and a record of one-byte fields has millions: each field
        // ends at a delimiter or a line, so their count bounds what they will take.
        let ends = data.iter().filter(|&&b| b == delim || b == b'\n').count();
        budget::fits(
            ends.saturating_add(1)
                .saturating_mul(crate::value::NODE)
                .saturating_add(data.len()),
        )?;
    }
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(delim)
        .flexible(args.bool(2)?)
        .from_reader(&data[..]);
    let mut rows = Vec::new();
    // Each field takes a value's room however short: counted as read. With a header,
    // every row repeats its names as keys, counted as they are made.
    let mut meter = budget::Meter::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| format!("failed to parse CSV: {e}"))?;
        let mut row = Vec::with_capacity(rec.len());
        for field in rec.iter() {
            meter.add_text(field.len())?;
            row.push(field.to_string());
        }
        meter.add(crate::value::NODE)?;
        rows.push(row);
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
    let mut out = Vec::new();
    for r in it {
        meter.add(crate::value::OBJECT)?;
        let mut o = Object::new();
        for (k, field) in head.iter().zip(r) {
            meter.add_key(k)?;
            o.insert(k.clone(), Value::String(field));
        }
        out.push(Value::Object(o));
    }
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
) -> Res<Value> {
    let mut o = Object::new();
    // `a&a&a...`: two bytes of text per value, each taking a value's room.
    let mut meter = budget::Meter::new();
    for (k, v) in pairs {
        meter.add_key(&k)?;
        meter.add_text(v.len())?;
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
    Ok(Value::Object(o))
}

fn parse_form<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(form_object(url::form_urlencoded::parse(&raw(v)?))?)
}

/// Go's `url.PathUnescape`/`QueryUnescape`: `%XX` escapes (and `+` as a space in a query).
fn go_unescape(s: &str, plus_space: bool) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                let Some(h) = hex else {
                    let end = (i + 3).min(b.len());
                    return Err(format!(
                        "invalid URL escape {:?}",
                        String::from_utf8_lossy(&b[i..end])
                    ));
                };
                out.push(
                    u8::from_str_radix(std::str::from_utf8(h).unwrap_or("00"), 16).unwrap_or(0),
                );
                i += 3;
            }
            b'+' if plus_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's escaping of a path (or, with `fragment`, a fragment): what `url.URL` compares the
/// text it was given with to decide whether to keep it as `RawPath`/`RawFragment`.
fn go_escape(s: &str, fragment: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        let keep = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            )
            || (fragment && matches!(c, b'?' | b'!' | b'(' | b')' | b'*'));
        if keep {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// Parses a URL as Go's `url.Parse` does and gives the fields Bloblang gives: `scheme`,
/// `opaque`, `user` (when there is one), `host` (with its port, as written), `path`
/// (unescaped), `raw_path` (the path as written when unescaping and escaping again would
/// not give it back), `raw_query`, `query` (when there is one), `fragment` and
/// `raw_fragment`.
fn parse_url<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let (rest, frag) = match s.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (&s[..], None),
    };
    let fail = |why: String| format!("parse {rest:?}: {why}");
    if rest.bytes().any(|c| c < 0x20 || c == 0x7f) {
        return Err(fail("net/url: invalid control character in URL".into()));
    }
    let mut o = Object::new();
    let mut scheme = String::new();
    let mut tail = rest;
    if let Some(i) = rest.find(':') {
        let cand = &rest[..i];
        let valid = cand.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
            && cand
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
        if valid {
            scheme = cand.to_ascii_lowercase();
            tail = &rest[i + 1..];
        } else if i == 0 {
            return Err(fail("missing protocol scheme".into()));
        }
    }
    let (tail, raw_query) = match tail.split_once('?') {
        Some((t, q)) => (t, Some(q)),
        None => (tail, None),
    };
    let mut opaque = "";
    let mut user = None;
    let mut host = "";
    let mut path = tail;
    if !scheme.is_empty() && !tail.starts_with('/') {
        opaque = tail;
        path = "";
    } else if let Some(after) = tail.strip_prefix("//") {
        let end = after.find('/').unwrap_or(after.len());
        let authority = &after[..end];
        path = &after[end..];
        let hostpart = match authority.rsplit_once('@') {
            Some((info, h)) => {
                let (name, pass) = match info.split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (info, None),
                };
                let mut u = Object::new();
                u.insert(
                    "name".into(),
                    Value::String(go_unescape(name, false).map_err(fail)?),
                );
                if let Some(p) = pass {
                    u.insert(
                        "password".into(),
                        Value::String(go_unescape(p, false).map_err(fail)?),
                    );
                }
                user = Some(u);
                h
            }
            None => authority,
        };
        if hostpart.contains(' ') {
            return Err(fail("invalid character \" \" in host name".to_string()));
        }
        host = hostpart;
    } else if scheme.is_empty() {
        if let Some(seg) = tail.split('/').next() {
            if seg.contains(':') {
                return Err(fail(
                    "first path segment in URL cannot contain colon".into(),
                ));
            }
        }
    }
    let decoded_path = go_unescape(path, false).map_err(fail)?;
    let raw_path = if go_escape(&decoded_path, false) == path {
        ""
    } else {
        path
    };
    o.insert("scheme".into(), Value::String(scheme));
    o.insert("opaque".into(), Value::from(opaque));
    if let Some(u) = user {
        o.insert("user".into(), Value::Object(u));
    }
    o.insert("host".into(), Value::from(host));
    o.insert("path".into(), Value::String(decoded_path));
    o.insert("raw_path".into(), Value::from(raw_path));
    o.insert("raw_query".into(), Value::from(raw_query.unwrap_or("")));
    let (fragment, raw_fragment) = match frag {
        Some(f) => {
            let d = go_unescape(f, false).map_err(|e| format!("parse {s:?}: {e}"))?;
            let raw = if go_escape(&d, true) == f {
                String::new()
            } else {
                f.to_string()
            };
            (d, raw)
        }
        None => (String::new(), String::new()),
    };
    o.insert("fragment".into(), Value::String(fragment));
    o.insert("raw_fragment".into(), Value::String(raw_fragment));
    if let Some(q) = raw_query.filter(|q| !q.is_empty()) {
        let mut query = Object::new();
        for pair in q.split('&') {
            if pair.is_empty() || pair.contains(';') {
                continue;
            }
            let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
            let (Ok(k), Ok(val)) = (go_unescape(k, true), go_unescape(val, true)) else {
                continue;
            };
            if let Value::Array(a) = query.entry(k).or_insert_with(|| Value::Array(Vec::new())) {
                a.push(Value::String(val));
            }
        }
        o.insert("query".into(), Value::Object(query));
    }
    own(Value::Object(o))
}

fn logfmt_quote(s: &str) -> String {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == '"' || c == '=') {
        serde_json::to_string(s).unwrap_or_default()
    } else {
        s.to_string()
    }
}

fn parse_logfmt<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let mut o = Object::new();
    let mut rest = s.trim_start();
    // `a b c ...`: two bytes of text per value, each taking a value's room.
    let mut meter = budget::Meter::new();
    while !rest.is_empty() {
        meter.add(crate::value::NODE + crate::value::KEY)?;
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = rest[..key_end].to_string();
        rest = &rest[key_end..];
        let val = if let Some(r) = rest.strip_prefix('=') {
            if let Some(q) = r.strip_prefix('"') {
                // A quoted value ends at the first unescaped quote.
                let mut end = None;
                let mut escaped = false;
                for (i, c) in q.char_indices() {
                    match (c, escaped) {
                        ('\\', false) => escaped = true,
                        ('"', false) => {
                            end = Some(i);
                            break;
                        }
                        _ => escaped = false,
                    }
                }
                let end = end.ok_or("unterminated quoted value")?;
                let raw = &r[..end + 2];
                rest = &q[end + 1..];
                serde_json::from_str::<String>(raw).map_err(|e| e.to_string())?
            } else {
                let end = r.find(char::is_whitespace).unwrap_or(r.len());
                rest = &r[end..];
                r[..end].to_string()
            }
        } else {
            // A bare key is a flag.
            if !key.is_empty() {
                o.insert(key, Value::Bool(true));
            }
            rest = rest.trim_start();
            continue;
        };
        if !key.is_empty() {
            o.insert(key, Value::String(val));
        }
        rest = rest.trim_start();
    }
    own(Value::Object(o))
}

fn format_logfmt<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let o = super::object(v)?;
    let parts: Vec<String> = o
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                k,
                logfmt_quote(&super::general::to_string_value(v))
            )
        })
        .collect();
    own(parts.join(" "))
}

fn parse_msgpack<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    // One byte of MessagePack can stand for a value taking forty: counted as read.
    let out = crate::value::with_room(budget::value_cap(), || {
        rmp_serde::from_slice::<Value>(&raw(v)?)
            .map_err(|e| format!("failed to parse MessagePack: {e}"))
    })?;
    if out.nesting_exceeds(crate::value::MAX_DEPTH) {
        return Err("failed to parse MessagePack: nested too deeply".into());
    }
    own(out)
}

fn format_msgpack<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    rmp_serde::to_vec_named(v)
        .map(|b| V::Own(Value::Bytes(b.into())))
        .map_err(|e| e.to_string())
}

/// Text or an attribute value, cast as the reference's XML reader casts it: a number
/// (`nan` and infinities stay text), else a short Go bool (`t`, `True`, `FALSE`), else
/// the text.
fn xml_text(s: String, cast: bool) -> Value {
    if !cast || matches!(s.to_ascii_lowercase().as_str(), "nan" | "inf" | "-inf") {
        return Value::String(s);
    }
    if let Some(n) = super::general::parse_number(&s) {
        return n;
    }
    if let Ok(f) = s.parse::<f64>() {
        if f.is_finite() {
            return Value::Float(f);
        }
    }
    match s.as_str() {
        "t" | "T" | "true" | "TRUE" | "True" => Value::Bool(true),
        "f" | "F" | "false" | "FALSE" | "False" => Value::Bool(false),
        _ => Value::String(s),
    }
}

fn xml_insert(o: &mut Object, key: String, v: Value) {
    match o.get_mut(&key) {
        Some(Value::Array(a)) => a.push(v),
        Some(existing) => {
            let first = std::mem::take(existing);
            *existing = Value::Array(vec![first, v]);
        }
        None => {
            o.insert(key, v);
        }
    }
}

/// The attributes of an element as `-name` fields. Read leniently, as Go's non-strict
/// decoder does: values may be unquoted (`<a b=c>`). With `cast`, numeric and bool values
/// become numbers and bools, as text does.
fn xml_attrs(e: &quick_xml::events::BytesStart<'_>, cast: bool) -> Res<Object> {
    let mut o = Object::new();
    for a in e.html_attributes() {
        let a = a.map_err(|e| format!("bad XML attribute: {e}"))?;
        let key = format!("-{}", String::from_utf8_lossy(a.key.as_ref()));
        let val = a
            .unescape_value()
            .map_err(|e| format!("bad XML attribute: {e}"))?;
        o.insert(key, xml_text(val.into_owned(), cast));
    }
    Ok(o)
}

fn parse_xml<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    use quick_xml::events::Event;
    let cast = args.bool(0)?;
    let src = text(v)?;
    let mut reader = quick_xml::Reader::from_str(&src);
    reader.config_mut().trim_text(true);
    // Open elements: name, fields so far, text so far.
    let mut stack: Vec<(String, Object, String)> = Vec::new();
    let mut root = Object::new();
    let finish = |fields: Object, text: String| -> Value {
        if fields.is_empty() {
            xml_text(text, cast)
        } else {
            let mut fields = fields;
            if !text.is_empty() {
                fields.insert("#text".into(), xml_text(text, cast));
            }
            Value::Object(fields)
        }
    };
    // `<a/><a/>...`: a few bytes of text per value, each taking a value's room, so
    // elements, attributes and text are counted as they are read.
    let mut meter = budget::Meter::new();
    let mut element = |name: &str, attrs: &Object| -> Res<()> {
        meter.add_key(name)?;
        meter.add(crate::value::NODE)?;
        if !attrs.is_empty() {
            meter.add(crate::value::OBJECT)?;
        }
        for (k, v) in attrs {
            meter.add_key(k)?;
            meter.add_value(v)?;
        }
        Ok(())
    };
    loop {
        match reader
            .read_event()
            .map_err(|e| format!("failed to parse XML: {e}"))?
        {
            Event::Start(e) => {
                if stack.len() >= crate::value::MAX_DEPTH {
                    return Err("failed to parse XML: nested too deeply".into());
                }
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                let attrs = xml_attrs(&e, cast)?;
                element(&name, &attrs)?;
                stack.push((name, attrs, String::new()));
            }
            Event::Empty(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                let attrs = xml_attrs(&e, cast)?;
                element(&name, &attrs)?;
                let value = finish(attrs, String::new());
                match stack.last_mut() {
                    Some(parent) => xml_insert(&mut parent.1, name, value),
                    None => xml_insert(&mut root, name, value),
                }
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    top.2.push_str(
                        &t.unescape()
                            .map_err(|e| format!("failed to parse XML: {e}"))?,
                    );
                }
            }
            Event::CData(c) => {
                if let Some(top) = stack.last_mut() {
                    top.2.push_str(&String::from_utf8_lossy(&c.into_inner()));
                }
            }
            Event::End(_) => {
                let Some((name, fields, text)) = stack.pop() else {
                    return Err("failed to parse XML: unbalanced end tag".into());
                };
                let value = finish(fields, text);
                match stack.last_mut() {
                    Some(parent) => xml_insert(&mut parent.1, name, value),
                    None => xml_insert(&mut root, name, value),
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !stack.is_empty() {
        return Err("failed to parse XML: unclosed element".into());
    }
    own(Value::Object(root))
}

fn xml_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

/// Writes the line break and indentation before an element at `depth`, when indenting.
fn xml_break(indent: Option<&str>, depth: usize, out: &mut String) -> Res<()> {
    if let Some(ind) = indent {
        // The indentation is given: a long one, times the depth, times every element.
        budget::fits(
            ind.len()
                .saturating_mul(depth)
                .saturating_add(out.len() + 1),
        )?;
        if !out.is_empty() {
            out.push('\n');
        }
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
    Ok(())
}

/// Writes one element; `level` is its indentation, `depth` its nesting (arrays count).
fn xml_element(
    name: &str,
    v: &Value,
    (level, depth): (usize, usize),
    indent: Option<&str>,
    out: &mut String,
) -> Res<()> {
    if depth > crate::value::MAX_DEPTH {
        return Err("value nests too deeply for XML".into());
    }
    if let Value::Array(items) = v {
        // Items of an array sit at their array's level.
        for it in items {
            xml_element(name, it, (level, depth + 1), indent, out)?;
        }
        return Ok(());
    }
    // An array repeats its name for every item: the text is checked as it grows.
    budget::fits(out.len())?;
    xml_break(indent, level, out)?;
    out.push('<');
    out.push_str(name);
    match v {
        Value::Object(o) => {
            for (k, a) in o.iter().filter(|(k, _)| k.starts_with('-')) {
                out.push(' ');
                out.push_str(&k[1..]);
                out.push_str("=\"");
                xml_escape(&super::general::to_string_value(a), out);
                out.push('"');
            }
            out.push('>');
            if let Some(t) = o.get("#text") {
                xml_escape(&super::general::to_string_value(t), out);
            }
            let mut children = false;
            for (k, child) in o
                .iter()
                .filter(|(k, _)| !k.starts_with('-') && k.as_str() != "#text")
            {
                children = true;
                xml_element(k, child, (level + 1, depth + 1), indent, out)?;
            }
            if children {
                xml_break(indent, level, out)?;
            }
        }
        Value::Null => out.push('>'),
        other => {
            out.push('>');
            xml_escape(&super::general::to_string_value(other), out);
        }
    }
    out.push_str("</");
    out.push_str(name);
    out.push('>');
    Ok(())
}

fn format_xml<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let indent = if args.bool(1)? {
        None
    } else {
        Some(args.str(0)?)
    };
    let mut out = String::new();
    for (k, child) in super::object(v)? {
        xml_element(k, child, (0, 0), indent, &mut out)?;
    }
    budget::fits(out.len())?;
    own(Value::Bytes(out.into_bytes().into()))
}
