//! String manipulation. Positions and lengths count characters, so no method can split
//! one in half.

use super::{raw, text};
use crate::mapping::budget;
use crate::mapping::exec::{own, slice_value, V};
use crate::mapping::spec::{
    describe, ex, method, opt, p, type_err, Args, Default, MethodSpec, Res,
};
use crate::value::Value;

const CAT: &str = "String Manipulation";

pub static SPECS: &[MethodSpec] = &[
    method("uppercase", CAT, "The string in upper case.", &[],
        &[ex("root.a = this.a.uppercase()", r#"{"a":"hello"}"#, r#"{"a":"HELLO"}"#)], uppercase),
    method("lowercase", CAT, "The string in lower case.", &[],
        &[ex("root.a = this.a.lowercase()", r#"{"a":"HeLLo"}"#, r#"{"a":"hello"}"#)], lowercase),
    method("capitalize", CAT, "The string with the first letter of each word in upper case.", &[],
        &[ex("root.a = this.a.capitalize()", r#"{"a":"the foo bar"}"#, r#"{"a":"The Foo Bar"}"#),
          ex("root.a = this.a.capitalize()", r#"{"a":"snake_case.dotted-dash 9lives"}"#, r#"{"a":"Snake_case.Dotted-Dash 9lives"}"#)], capitalize),
    method("trim", CAT, "The string without leading and trailing whitespace, or the given characters.",
        &[opt("cutset", Default::Absent)],
        &[ex("root.a = this.a.trim()", r#"{"a":"  hi \n"}"#, r#"{"a":"hi"}"#),
          ex(r#"root.a = this.a.trim("!?")"#, r#"{"a":"!?hi!"}"#, r#"{"a":"hi"}"#)], trim),
    method("trim_prefix", CAT, "The string without the given prefix.", &[p("prefix")],
        &[ex(r#"root.a = this.a.trim_prefix("foo_")"#, r#"{"a":"foo_bar"}"#, r#"{"a":"bar"}"#)], trim_prefix),
    method("trim_suffix", CAT, "The string without the given suffix.", &[p("suffix")],
        &[ex(r#"root.a = this.a.trim_suffix("_bar")"#, r#"{"a":"foo_bar"}"#, r#"{"a":"foo"}"#)], trim_suffix),
    method("has_prefix", CAT, "Whether the string starts with the prefix.", &[p("value")],
        &[ex(r#"root.a = this.a.has_prefix("foo")"#, r#"{"a":"foobar"}"#, r#"{"a":true}"#)], has_prefix),
    method("has_suffix", CAT, "Whether the string ends with the suffix.", &[p("value")],
        &[ex(r#"root.a = this.a.has_suffix("foo")"#, r#"{"a":"foobar"}"#, r#"{"a":false}"#)], has_suffix),
    method("contains", CAT, "Whether a string contains a substring, an array an equal item, or an object an equal value.",
        &[p("value")],
        &[ex(r#"root.a = this.a.contains("bar")"#, r#"{"a":"foobar"}"#, r#"{"a":true}"#),
          ex(r#"root.a = this.a.contains(2)"#, r#"{"a":[1,2.0]}"#, r#"{"a":true}"#)], contains),
    method("index_of", CAT, "The position of the first occurrence of a substring (or array item), or -1.",
        &[p("value")],
        &[ex(r#"root.i = this.s.index_of("bar")"#, r#"{"s":"foobar"}"#, r#"{"i":3}"#),
          ex(r#"root.i = this.s.index_of("x")"#, r#"{"s":"foobar"}"#, r#"{"i":-1}"#)], index_of),
    method("length", CAT, "The length of a string (characters), bytes, array or object.", &[],
        &[ex("root.n = this.s.length()", r#"{"s":"héllo"}"#, r#"{"n":5}"#),
          ex("root.n = this.a.length()", r#"{"a":[1,2,3]}"#, r#"{"n":3}"#)], length),
    method("replace_all", CAT, "The string with every occurrence of `old` replaced by `new`.",
        &[p("old"), p("new")],
        &[ex(r#"root.a = this.a.replace_all("o", "0")"#, r#"{"a":"foo"}"#, r#"{"a":"f00"}"#)], replace_all),
    method("replace", CAT, "Old name of `replace_all`.", &[p("old"), p("new")], &[], replace_all),
    method("replace_all_many", CAT, "Replaces each `old` in a flat array of old/new pairs, in order.",
        &[p("values")],
        &[ex(r#"root.a = this.a.replace_all_many(["<", "&lt;", ">", "&gt;"])"#, r#"{"a":"<b>"}"#, r#"{"a":"&lt;b&gt;"}"#)],
        replace_many),
    method("replace_many", CAT, "Old name of `replace_all_many`.", &[p("values")], &[], replace_many),
    method("split", CAT, "The string split around a delimiter (or an array split around an equal item).",
        &[p("delimiter")],
        &[ex(r#"root.a = this.a.split(",")"#, r#"{"a":"a,b,c"}"#, r#"{"a":["a","b","c"]}"#),
          ex(r#"root.words = this.sentence.split(" ")"#, r#"{"sentence":"Hello Bento!"}"#, r#"{"words":["Hello","Bento!"]}"#),
          ex(r#"root = this.split(",")"#, r#""a,,b""#, r#"["a","","b"]"#),
          ex(r#"root = this.split(",")"#, r#""""#, r#"[""]"#),
          ex(r#"root = this.split("")"#, r#""abc""#, r#"["a","b","c"]"#),
          ex(r#"root = this.split("SPLIT")"#, r#"["apple","banana","SPLIT","orange","grape"]"#, r#"[["apple","banana"],["orange","grape"]]"#),
          ex(r#"root = this.split("x")"#, r#"["x",1,2,"x"]"#, r#"[null,[1,2],[]]"#),
          ex(r#"root = this.split("x")"#, r#"["x","x","x"]"#, r#"[null,[],[],[]]"#),
          ex(r#"root = this.split("x")"#, r#"[1,"x","x",2]"#, r#"[[1],[],[2]]"#),
          ex(r#"root = this.split("x")"#, r#"[]"#, r#"[[]]"#),
          ex("root = this.split(2.5)", "[1,2.5,3,2.5,4]", "[[1],[3],[4]]"),
          ex(r#"root.segments = this.villains.split("Kraven The Hunter")"#, r#"{"villains": ["Doctor Octopus", "Electro", "Kraven The Hunter", "Mysterio", "Sandman", "Vulture"]}"#,
             r#"{"segments":[["Doctor Octopus","Electro"],["Mysterio","Sandman","Vulture"]]}"#),
          ex("root.parts = this.mixed.split(0)", r#"{"mixed": [1, "a", 2, "b", 0, "e", 5, 0, "i"]}"#, r#"{"parts":[[1,"a",2,"b"],["e",5],["i"]]}"#),
          ex(r#"root.groups = this.objects.split({"type": "separator"})"#, r#"{"objects": [{"id": 1, "name": "Spider-Man"}, {"type": "separator"}, {"id": 2, "name": "Daredevil"}]}"#,
             r#"{"groups":[[{"id":1,"name":"Spider-Man"}],[{"id":2,"name":"Daredevil"}]]}"#),
          ex(r#"root = content().split(",").map_each(b -> b.string())"#, "foo,bar,baz", r#"["foo","bar","baz"]"#),
          ex("root = this.split(42)", r#""hello,world""#, "error:the delimiter must be a string"),
          ex(r#"root = this.split(",")"#, "123", "error:expected string, array or bytes value")], split),
    method("repeat", CAT, "The string repeated `count` times.", &[p("count")],
        &[ex("root.a = this.a.repeat(3)", r#"{"a":"ab"}"#, r#"{"a":"ababab"}"#)], repeat),
    method("reverse", CAT, "The string (or array) in reverse order.", &[],
        &[ex("root.a = this.a.reverse()", r#"{"a":"abc"}"#, r#"{"a":"cba"}"#),
          ex("root.a = this.a.reverse()", r#"{"a":[1,2,3]}"#, r#"{"a":[3,2,1]}"#)], reverse),
    method("slice", CAT, "Part of a string, bytes or array, from `low` up to `high`; negative positions count from the end.",
        &[p("low"), opt("high", Default::Null)],
        &[ex("root.a = this.a.slice(1, 3)", r#"{"a":"hello"}"#, r#"{"a":"el"}"#),
          ex("root.a = this.a.slice(-2)", r#"{"a":[1,2,3]}"#, r#"{"a":[2,3]}"#)], slice),
    method("quote", CAT, "The string as a double-quoted, escaped literal.", &[],
        &[ex("root.a = this.a.quote()", r#"{"a":"hi \"x\"\n"}"#, r#"{"a":"\"hi \\\"x\\\"\\n\""}"#)], quote),
    method("unquote", CAT, "The string with one level of quotes and escapes removed.", &[],
        &[ex("root.a = this.a.unquote()", r#"{"a":"\"hi\\n\""}"#, r#"{"a":"hi\n"}"#)], unquote),
    method("escape_html", CAT, "The string with HTML special characters escaped.", &[],
        &[ex("root.a = this.a.escape_html()", r#"{"a":"<a href=\"x\">&</a>"}"#, r#"{"a":"&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt;"}"#)], escape_html),
    method("unescape_html", CAT, "The string with HTML entities decoded.", &[],
        &[ex("root.a = this.a.unescape_html()", r#"{"a":"&lt;b&gt; &amp; &#34;"}"#, r#"{"a":"<b> & \""}"#)], unescape_html),
    method("escape_url_query", CAT, "The string escaped for a URL query.", &[],
        &[ex("root.a = this.a.escape_url_query()", r#"{"a":"a b&c=d"}"#, r#"{"a":"a+b%26c%3Dd"}"#)], escape_url_query),
    method("unescape_url_query", CAT, "The string with URL query escapes decoded.", &[],
        &[ex("root.a = this.a.unescape_url_query()", r#"{"a":"a+b%26c"}"#, r#"{"a":"a b&c"}"#)], unescape_url_query),
    method("escape_url_path", CAT, "The string escaped for a URL path segment.", &[],
        &[ex("root.a = this.a.escape_url_path()", r#"{"a":"a b/c"}"#, r#"{"a":"a%20b%2Fc"}"#)], escape_url_path),
    method("unescape_url_path", CAT, "The string with URL path escapes decoded.", &[],
        &[ex("root.a = this.a.unescape_url_path()", r#"{"a":"a%20b"}"#, r#"{"a":"a b"}"#)], unescape_url_path),
    method("strip_html", CAT, "The string without HTML tags; `preserve` lists tags to keep.",
        &[opt("preserve", Default::Absent)],
        &[ex("root.a = this.a.strip_html()", r#"{"a":"<p>hi <b>you</b></p>"}"#, r#"{"a":"hi you"}"#)], strip_html),
    method("slug", CAT, "The string as a URL slug: lower case ASCII words joined by hyphens. Symbols become words of the language (`&` is `and` in `en`, `et` in `fr`, `und` in `de`, `y` in `es`...), apostrophes and quotes are dropped, accented letters lose their accents.",
        &[opt("lang", Default::Str("en"))],
        &[ex("root.a = this.a.slug()", r#"{"a":"Hello, World! 2024"}"#, r#"{"a":"hello-world-2024"}"#),
          ex("root.slug = this.value.slug()", r#"{"value":"Gopher & Bento"}"#, r#"{"slug":"gopher-and-bento"}"#),
          ex(r#"root.slug = this.value.slug("fr")"#, r#"{"value":"Gaufre & Poisson d'Eau Profonde"}"#, r#"{"slug":"gaufre-et-poisson-deau-profonde"}"#),
          ex(r#"root.slug = this.value.slug("de")"#, r#"{"value":"Grüße & Küsse"}"#, r#"{"slug":"gruesse-und-kuesse"}"#),
          ex("root.slug = this.value.slug()", r#"{"value":"Crème Brûlée @ Home"}"#, r#"{"slug":"creme-brulee-at-home"}"#)], slug),
    method("format", CAT, "Formats the arguments into the string, printf style (`%s`, `%v`, `%d`, `%.2f`, `%q`, `%x`, `%t`).",
        &[opt("a", Default::Absent), opt("b", Default::Absent), opt("c", Default::Absent), opt("d", Default::Absent),
          opt("e", Default::Absent), opt("f", Default::Absent), opt("g", Default::Absent), opt("h", Default::Absent)],
        &[ex(r#"root.a = "%s is %d years (%.1f%%)".format(this.n, this.y, 12.345)"#, r#"{"n":"Al","y":30}"#,
             r#"{"a":"Al is 30 years (12.3%)"}"#)], format),
    method("filepath_join", CAT, "Joins an array of path parts with `/`.", &[],
        &[ex("root.p = this.parts.filepath_join()", r#"{"parts":["a","b/","c.txt"]}"#, r#"{"p":"a/b/c.txt"}"#)], filepath_join),
    method("filepath_split", CAT, "Splits a path into its directory and file name.", &[],
        &[ex("root.p = this.p.filepath_split()", r#"{"p":"/a/b/c.txt"}"#, r#"{"p":["/a/b/","c.txt"]}"#)], filepath_split),
    method("unicode_segments", CAT, "The string split into characters (`grapheme`), words or sentences (approximate).",
        &[p("segmentation_type")],
        &[ex(r#"root.a = this.a.unicode_segments("grapheme")"#, r#"{"a":"héy"}"#, r#"{"a":["h","é","y"]}"#)], unicode_segments),
];

fn s_own<'b>(s: String) -> Res<V<'b>> {
    own(s)
}

fn uppercase<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    s_own(text(v)?.to_uppercase())
}
fn lowercase<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    s_own(text(v)?.to_lowercase())
}
fn capitalize<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let mut out = String::with_capacity(s.len());
    // A word starts after a separator, as in the reference: ASCII punctuation and
    // whitespace separate words; letters, digits and `_` do not.
    let mut after_separator = true;
    for c in s.chars() {
        if after_separator {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        after_separator = if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else {
            c.is_whitespace()
        };
    }
    s_own(out)
}
fn trim<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    match args.opt_str(0)? {
        Some(cut) => s_own(s.trim_matches(|c| cut.contains(c)).to_string()),
        None => s_own(s.trim().to_string()),
    }
}
fn trim_prefix<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let p = args.str(0)?;
    s_own(s.strip_prefix(p).unwrap_or(&s).to_string())
}
fn trim_suffix<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let p = args.str(0)?;
    s_own(s.strip_suffix(p).unwrap_or(&s).to_string())
}
fn has_prefix<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    own(raw(v)?.starts_with(raw(args.get(0))?.as_ref()))
}
fn has_suffix<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    own(raw(v)?.ends_with(raw(args.get(0))?.as_ref()))
}
fn contains<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let needle = args.get(0);
    use crate::mapping::exec::values_eq;
    match v {
        Value::String(_) | Value::Bytes(_) => {
            let hay = raw(v)?;
            let n = raw(needle)?;
            own(n.is_empty() || hay.windows(n.len()).any(|w| w == n.as_ref()))
        }
        Value::Array(a) => own(a.iter().any(|x| values_eq(x, needle))),
        Value::Object(o) => own(o.values().any(|x| values_eq(x, needle))),
        other => Err(type_err("string, array or object", other)),
    }
}
fn index_of<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Array(a) => own(a
            .iter()
            .position(|x| crate::mapping::exec::values_eq(x, args.get(0)))
            .map(|i| i as i64)
            .unwrap_or(-1)),
        _ => {
            let s = text(v)?;
            let n = args.str(0)?;
            own(match s.find(n) {
                Some(b) => s[..b].chars().count() as i64,
                None => -1,
            })
        }
    }
}
fn length<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(match v {
        Value::String(s) => s.chars().count() as i64,
        Value::Bytes(b) => b.len() as i64,
        Value::Array(a) => a.len() as i64,
        Value::Object(o) => o.len() as i64,
        other => return Err(type_err("string, bytes, array or object", other)),
    })
}
/// In a tenant's run, refuses replacing `from` with `to` in `s` when the result would be
/// past the value cap: each match can grow by all of `to` (an empty `from` matches
/// between every two characters), so the result can be the product of the two sizes.
fn replace_fits(s: &str, from: &str, to: &str) -> Res<()> {
    if !budget::limited() || to.len() <= from.len() {
        return Ok(());
    }
    let matches = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    };
    let len = matches
        .saturating_mul(to.len() - from.len())
        .saturating_add(s.len());
    Ok(budget::fits(len.saturating_add(crate::value::NODE))?)
}
fn replace_all<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let (s, from, to) = (text(v)?, args.str(0)?, args.str(1)?);
    replace_fits(&s, from, to)?;
    s_own(s.replace(from, to))
}
fn replace_many<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let pairs = super::array(args.get(0))?;
    if pairs.len() % 2 != 0 {
        return Err("expected an even number of old/new values".into());
    }
    let mut s = text(v)?.into_owned();
    for pair in pairs.chunks(2) {
        let (from, to) = (text(&pair[0])?, text(&pair[1])?);
        replace_fits(&s, &from, &to)?;
        s = s.replace(from.as_ref(), to.as_ref());
    }
    s_own(s)
}
fn split<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let d = args.get(0);
    match v {
        Value::Array(a) => {
            let out: Result<Value, String> =
                super::lambdas::split_items(a, |x| Ok(crate::mapping::exec::values_eq(x, d)));
            own(out?)
        }
        Value::String(s) => {
            let Value::String(d) = d else {
                return Err(format!(
                    "the delimiter must be a string to split a string, got {}",
                    describe(d)
                ));
            };
            // Counted as they are made: each piece takes a value's room, so splitting
            // text into many short pieces takes many times the text's size.
            let parts = if d.is_empty() {
                budget::collect(s.chars().map(|c| Value::String(c.to_string())))?
            } else {
                budget::collect(s.split(d.as_str()).map(Value::from))?
            };
            own(Value::Array(parts))
        }
        Value::Bytes(b) => {
            let Value::String(d) = d else {
                return Err(format!(
                    "the delimiter must be a string to split bytes, got {}",
                    describe(d)
                ));
            };
            let d = d.as_bytes();
            let mut parts = Vec::new();
            let mut meter = budget::Meter::new();
            let mut push = |piece: bytes::Bytes| -> Res<()> {
                meter.add_text(piece.len())?;
                parts.push(Value::Bytes(piece));
                Ok(())
            };
            if d.is_empty() {
                // One piece per UTF-8 sequence, as splitting a string by "" gives characters.
                let text = String::from_utf8_lossy(b);
                let mut at = 0;
                for c in text.chars() {
                    let n = c.len_utf8().min(b.len() - at);
                    push(b.slice(at..at + n))?;
                    at += n;
                }
            } else {
                let mut start = 0;
                let mut i = 0;
                while i + d.len() <= b.len() {
                    if &b[i..i + d.len()] == d {
                        push(b.slice(start..i))?;
                        i += d.len();
                        start = i;
                    } else {
                        i += 1;
                    }
                }
                push(b.slice(start..))?;
            }
            own(Value::Array(parts))
        }
        other => Err(format!(
            "expected string, array or bytes value, got {}",
            describe(other)
        )),
    }
}
fn repeat<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let n = args.int(0)?;
    let s = text(v)?;
    if n < 0 || (n as usize).saturating_mul(s.len()) > 64 << 20 {
        return Err(format!("cannot repeat {n} times"));
    }
    budget::fits((n as usize * s.len()).saturating_add(crate::value::NODE))?;
    s_own(s.repeat(n as usize))
}
fn reverse<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    match v {
        Value::Array(a) => own(Value::Array(a.iter().rev().cloned().collect())),
        Value::Bytes(b) => own(Value::Bytes(
            b.iter().rev().copied().collect::<Vec<u8>>().into(),
        )),
        _ => s_own(text(v)?.chars().rev().collect()),
    }
}
fn slice<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    slice_value(v, Some(args.int(0)?), args.opt_int(1)?).map(V::Own)
}
fn quote<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    s_own(serde_json::to_string(text(v)?.as_ref()).map_err(|e| e.to_string())?)
}
fn unquote<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    if let Some(inner) = s.strip_prefix('`').and_then(|x| x.strip_suffix('`')) {
        return s_own(inner.to_string());
    }
    serde_json::from_str::<String>(&s)
        .map(Value::String)
        .map(V::Own)
        .map_err(|e| format!("cannot unquote: {e}"))
}
fn escape_html<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    s_own(out)
}
fn unescape_html<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    s_own(html_escape::decode_html_entities(text(v)?.as_ref()).into_owned())
}
fn escape_url_query<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    s_own(url::form_urlencoded::byte_serialize(raw(v)?.as_ref()).collect())
}
fn unescape_url_query<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?.replace('+', " ");
    percent_encoding::percent_decode_str(&s)
        .decode_utf8()
        .map(|c| V::Own(Value::String(c.into_owned())))
        .map_err(|e| e.to_string())
}
const PATH_SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
fn escape_url_path<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    s_own(percent_encoding::utf8_percent_encode(text(v)?.as_ref(), PATH_SET).to_string())
}
fn unescape_url_path<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    percent_encoding::percent_decode_str(text(v)?.as_ref())
        .decode_utf8()
        .map(|c| V::Own(Value::String(c.into_owned())))
        .map_err(|e| e.to_string())
}
fn strip_html<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let keep: Vec<String> = match args.get(0) {
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_lowercase))
            .collect(),
        _ => Vec::new(),
    };
    let s = text(v)?;
    let mut out = String::with_capacity(s.len());
    let mut rest: &str = &s;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        match after.find('>') {
            Some(close) => {
                let tag = &after[1..close];
                let name: String = tag
                    .trim_start_matches('/')
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect::<String>()
                    .to_lowercase();
                if keep.contains(&name) {
                    out.push_str(&after[..=close]);
                }
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(after);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    s_own(out)
}
/// Words that stand for symbols, per language, as the reference's slug library has them.
fn slug_subs(lang: &str) -> &'static [(char, &'static str)] {
    match lang {
        "de" => &[
            ('&', "und"),
            ('@', "an"),
            ('ä', "ae"),
            ('Ä', "Ae"),
            ('ö', "oe"),
            ('Ö', "Oe"),
            ('ü', "ue"),
            ('Ü', "Ue"),
            ('ß', "ss"),
        ],
        "fr" => &[('&', "et"), ('@', "arobase")],
        "es" => &[('&', "y"), ('@', "en")],
        "nl" => &[('&', "en"), ('@', "at")],
        "it" => &[('&', "e"), ('@', "chiocciola")],
        "pl" => &[('&', "i"), ('@', "na")],
        "sv" => &[('&', "och"), ('@', "snabel a")],
        "fi" => &[('&', "ja"), ('@', "at")],
        "cs" => &[('&', "a"), ('@', "zavinac")],
        "el" => &[('&', "kai")],
        "tr" => &[('&', "ve"), ('@', "et")],
        "hu" => &[('&', "es"), ('@', "kukac")],
        _ => &[('&', "and"), ('@', "at")],
    }
}

fn slug<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let lang = args.str(0)?;
    let subs = slug_subs(lang);
    let mut words = String::new();
    for c in text(v)?.chars() {
        match c {
            '"' | '\'' | '’' => {}
            '‒' | '–' | '—' | '―' => words.push('-'),
            c => match subs.iter().find(|(k, _)| *k == c) {
                Some((k, w)) if k.is_alphabetic() => words.push_str(w),
                Some((_, w)) => {
                    words.push(' ');
                    words.push_str(w);
                    words.push(' ');
                }
                None => words.push(c),
            },
        }
    }
    let s = deunicode::deunicode(&words).to_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut dash = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c);
        } else {
            dash = true;
        }
    }
    s_own(out)
}

/// A small printf: the verbs mappings use, with width and precision.
pub(crate) fn printf(fmt: &str, args: &[&Value]) -> Res<String> {
    let mut out = String::with_capacity(fmt.len() + 64);
    let mut chars = fmt.chars().peekable();
    let mut next = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = String::new();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_digit() || matches!(d, '.' | '-' | '+' | ' ' | '#' | '0') {
                spec.push(d);
                chars.next();
            } else {
                break;
            }
        }
        let Some(verb) = chars.next() else {
            out.push('%');
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        next += 1;
        let left = spec.starts_with('-');
        let zero = spec.trim_start_matches('-').starts_with('0');
        let spec_t = spec.trim_start_matches(['-', '+', ' ', '#', '0']);
        // Width and precision are capped: a format string must not allocate without bound.
        let (w, prec) = match spec_t.split_once('.') {
            Some((w, p)) => (
                w.parse::<usize>().ok(),
                Some(p.parse::<usize>().unwrap_or(0)),
            ),
            None => (spec_t.parse::<usize>().ok(), None),
        };
        let (w, prec) = (w.map(|w| w.min(1024)), prec.map(|p| p.min(64)));
        // Eight arguments of a few megabytes each, or a long format: checked as it grows.
        budget::fits(out.len())?;
        if matches!(verb, 's' | 'v') && w.is_none() {
            // The common case: write the text straight in, no copy.
            match arg {
                Value::String(s) => out.push_str(s),
                Value::Bytes(b) => out.push_str(&String::from_utf8_lossy(b)),
                other => out.push_str(&super::general::to_string_value(other)),
            }
            continue;
        }
        let body = match verb {
            's' | 'v' => super::general::to_string_value(arg),
            'd' => match arg {
                Value::Int(i) => i.to_string(),
                Value::Float(f) if f.fract() == 0.0 => (*f as i64).to_string(),
                other => format!("%!d({})", super::general::to_string_value(other)),
            },
            'f' | 'F' | 'e' | 'g' => match crate::mapping::exec::to_float(arg) {
                Ok(f) => match verb {
                    'e' => format!("{:.*e}", prec.unwrap_or(6), f),
                    'g' => format!("{f}"),
                    _ => format!("{:.*}", prec.unwrap_or(6), f),
                },
                Err(_) => format!("%!{verb}({})", super::general::to_string_value(arg)),
            },
            'q' => serde_json::to_string(&super::general::to_string_value(arg)).unwrap_or_default(),
            'x' | 'X' => {
                let h = match arg {
                    Value::Int(i) => format!("{i:x}"),
                    other => hex::encode(super::general::to_string_value(other)),
                };
                if verb == 'X' {
                    h.to_uppercase()
                } else {
                    h
                }
            }
            't' => match arg {
                Value::Bool(b) => b.to_string(),
                other => format!("%!t({})", super::general::to_string_value(other)),
            },
            'T' => arg.type_name().to_string(),
            other => format!("%!{other}({})", super::general::to_string_value(arg)),
        };
        let len = body.chars().count();
        match w {
            Some(w) if w > len => {
                let pad = w - len;
                if left {
                    out.push_str(&body);
                    out.push_str(&" ".repeat(pad));
                } else {
                    out.push_str(&(if zero { "0" } else { " " }).repeat(pad));
                    out.push_str(&body);
                }
            }
            _ => out.push_str(&body),
        }
    }
    Ok(out)
}

fn format<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let fmt = text(v)?;
    let given: smallvec::SmallVec<[&Value; 8]> = (0..args.len())
        .filter(|i| args.given(*i))
        .map(|i| args.get(i))
        .collect();
    s_own(printf(&fmt, &given)?)
}
fn filepath_join<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let mut out = std::path::PathBuf::new();
    for p in super::array(v)? {
        out.push(text(p)?.as_ref());
    }
    s_own(out.to_string_lossy().into_owned())
}
fn filepath_split<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let (dir, file) = match s.rfind('/') {
        Some(i) => (&s[..=i], &s[i + 1..]),
        None => ("", s.as_ref()),
    };
    own(Value::Array(vec![Value::from(dir), Value::from(file)]))
}
fn unicode_segments<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let s = text(v)?;
    let parts: Vec<Value> = match args.str(0)? {
        "grapheme" => budget::collect(s.chars().map(|c| Value::String(c.to_string())))?,
        "word" => budget::collect(s.split_inclusive(|c: char| !c.is_alphanumeric()).flat_map(
            |w| {
                let (word, sep) =
                    w.split_at(w.trim_end_matches(|c: char| !c.is_alphanumeric()).len());
                [word, sep]
                    .into_iter()
                    .filter(|x| !x.is_empty())
                    .map(Value::from)
                    .collect::<Vec<_>>()
            },
        ))?,
        "sentence" => budget::collect(s.split_inclusive(['.', '!', '?']).map(Value::from))?,
        other => return Err(format!("unknown segmentation type {other:?}")),
    };
    own(Value::Array(parts))
}
