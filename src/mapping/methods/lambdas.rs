//! Methods that run a lambda (or a query with `this` bound) per item.

use crate::mapping::budget;
use crate::mapping::exec::{call_lambda, compare, values_eq, Ctx, ExecError, V};
use crate::mapping::program::{Lambda, MethodCall};
use crate::mapping::spec::{
    describe, ex, lambda, lazy_method, p, Default, Kind, MethodSpec, Param,
};
use crate::value::{Object, Value, MAX_DEPTH};

const CAT: &str = "Object & Array Manipulation";

const OPT_LAMBDA: Param = Param {
    name: "compare",
    kind: Kind::Lambda,
    default: Default::Absent,
};
const OPT_EMIT: Param = Param {
    name: "emit",
    kind: Kind::Lambda,
    default: Default::Absent,
};

pub static SPECS: &[MethodSpec] = &[
    lazy_method("map_each", CAT,
        "Each item of an array (or each `{key, value}` of an object) through the query; `deleted()` drops it, `nothing()` keeps it as it was.",
        &[lambda("query")],
        &[ex("root.a = this.a.map_each(x -> x * 2)", r#"{"a":[1,2]}"#, r#"{"a":[2,4]}"#),
          ex("root.a = this.a.map_each(this.uppercase())", r#"{"a":["x"]}"#, r#"{"a":["X"]}"#),
          ex("root.o = this.o.map_each(kv -> kv.value + 1)", r#"{"o":{"a":1}}"#, r#"{"o":{"a":2}}"#),
          ex("root.a = this.a.map_each(x -> if x > 1 { deleted() } else { x })", r#"{"a":[1,2]}"#, r#"{"a":[1]}"#),
          ex("root.a = this.a.filter(x -> x > 1).map_each(x -> x * 10)", r#"{"a":[1,2,3]}"#, r#"{"a":[20,30]}"#),
          ex("root.o = this.o.filter(kv -> kv.value > 1).map_each(kv -> kv.key)", r#"{"o":{"a":1,"b":2}}"#, r#"{"o":{"b":"b"}}"#)],
        map_each),
    lazy_method("map_each_key", CAT, "The object with each key through the query.", &[lambda("query")],
        &[ex("root.o = this.o.map_each_key(k -> k.uppercase())", r#"{"o":{"a":1}}"#, r#"{"o":{"A":1}}"#)], map_each_key),
    lazy_method("filter", CAT, "The items (or `{key, value}` entries) for which the query is true.", &[lambda("test")],
        &[ex("root.a = this.a.filter(x -> x > 1)", r#"{"a":[1,2,3]}"#, r#"{"a":[2,3]}"#),
          ex("root.o = this.o.filter(kv -> kv.value > 1)", r#"{"o":{"a":1,"b":2}}"#, r#"{"o":{"b":2}}"#)], filter),
    lazy_method("fold", CAT, "Reduces the array: the query sees `tally` and `value`.", &[p("initial"), lambda("query")],
        &[ex("root.n = this.a.fold(0, item -> item.tally + item.value)", r#"{"a":[1,2,3]}"#, r#"{"n":6}"#)], fold),
    lazy_method("any", CAT, "Whether the query is true for any item.", &[lambda("test")],
        &[ex("root.b = this.a.any(x -> x > 2)", r#"{"a":[1,3]}"#, r#"{"b":true}"#)], any),
    lazy_method("all", CAT, "Whether the query is true for every item (and the array is not empty).", &[lambda("test")],
        &[ex("root.b = this.a.all(x -> x > 2)", r#"{"a":[1,3]}"#, r#"{"b":false}"#)], all),
    lazy_method("find", CAT, "The position of the first item equal to the value, or -1.", &[p("value")],
        &[ex("root.i = this.a.find(\"b\")", r#"{"a":["a","b"]}"#, r#"{"i":1}"#)], find),
    lazy_method("find_all", CAT, "The positions of every item equal to the value.", &[p("value")],
        &[ex("root.i = this.a.find_all(1)", r#"{"a":[1,2,1]}"#, r#"{"i":[0,2]}"#)], find_all),
    lazy_method("find_by", CAT, "The position of the first item for which the query is true, or -1.", &[lambda("query")],
        &[ex("root.i = this.a.find_by(x -> x > 1)", r#"{"a":[1,2,3]}"#, r#"{"i":1}"#)], find_by),
    lazy_method("find_all_by", CAT, "The positions of the items for which the query is true.", &[lambda("query")],
        &[ex("root.i = this.a.find_all_by(x -> x != 2)", r#"{"a":[1,2,3]}"#, r#"{"i":[0,2]}"#)], find_all_by),
    lazy_method("sort", CAT, "The array sorted; an optional query sees `left` and `right` and says whether left comes first.",
        &[OPT_LAMBDA],
        &[ex("root.a = this.a.sort()", r#"{"a":[3,1,2]}"#, r#"{"a":[1,2,3]}"#),
          ex("root.a = this.a.sort(x -> x.left > x.right)", r#"{"a":[3,1,2]}"#, r#"{"a":[3,2,1]}"#)], sort),
    lazy_method("sort_by", CAT, "The array sorted by the value the query gives for each item.", &[lambda("query")],
        &[ex("root.a = this.a.sort_by(x -> x.n)", r#"{"a":[{"n":2},{"n":1}]}"#, r#"{"a":[{"n":1},{"n":2}]}"#)], sort_by),
    lazy_method("unique", CAT,
        "The array without repeated items, keeping the first of each. Strings and bytes compare by text, numbers by value; any other item (or `emit` result) is an error. The optional `emit` query gives the value compared for each item.",
        &[OPT_EMIT],
        &[ex("root.a = this.a.unique()", r#"{"a":[1,"a",1,2,"a",1.0]}"#, r#"{"a":[1,"a",2]}"#),
          ex("root.uniques = this.foo.unique()", r#"{"foo":["a","b","a","c"]}"#, r#"{"uniques":["a","b","c"]}"#),
          ex("root = this.unique()", r#"["5",5,"5",5.0]"#, r#"["5",5]"#),
          ex("root.a = this.a.unique(x -> x.id)", r#"{"a":[{"id":1,"v":1},{"id":1,"v":2},{"id":2}]}"#, r#"{"a":[{"id":1,"v":1},{"id":2}]}"#),
          ex("root.a = this.a.unique()", r#"{"a":[[1],[1]]}"#, "error:index 0: expected string or number value, got array")],
        unique),
    lazy_method("split_by", CAT,
        "Splits a string (by character), bytes (by byte, seen as a number) or array (by item) wherever the predicate is true; the matching items are left out. Empty pieces are kept; in an array the first piece, when empty, is null.",
        &[lambda("predicate")],
        &[ex(r#"root.words = this.sentence.split_by(c -> c == " ")"#, r#"{"sentence":"Hello Bento!"}"#, r#"{"words":["Hello","Bento!"]}"#),
          ex(r#"root.tokens = this.text.split_by(c -> c == "," || c == ".")"#, r#"{"text":"foo,bar.baz"}"#, r#"{"tokens":["foo","bar","baz"]}"#),
          ex("root = this.split_by(x -> x > 8)", "[1,2,10,3,4,20,7]", "[[1,2],[3,4],[7]]"),
          ex(r#"root.authors = this.writers.split_by(x -> x.contains("Kafka"))"#, r#"{"writers": ["George Orwell", "Franz Kafka", "Anton Chekhov"]}"#, r#"{"authors":[["George Orwell"],["Anton Chekhov"]]}"#),
          ex(r#"root.groups = this.items.split_by(item -> item.type == "separator")"#, r#"{"items": [{"id": 1, "type": "data"}, {"id": 2, "type": "separator"}, {"id": 3, "type": "data"}]}"#,
             r#"{"groups":[[{"id":1,"type":"data"}],[{"id":3,"type":"data"}]]}"#),
          ex(r#"root = this.split_by(c -> c == "💛")"#, r#""❤️ 🧡 💛 💚""#, r#"["❤️ 🧡 "," 💚"]"#),
          ex("root = this.split_by(x -> x == 5)", "[1,5,5,2]", "[[1],[],[2]]"),
          ex(r#"root = this.split_by(c -> c == "a")"#, r#""aaaaa""#, r#"["","","","","",""]"#),
          ex(r#"root = this.split_by(c -> c == " ")"#, r#""""#, r#"[""]"#),
          ex(r#"root = this.split_by(c -> c == "x")"#, r#""hello""#, r#"["hello"]"#),
          ex(r#"root = this.split_by(c -> "aeiou".contains(c))"#, r#""hello""#, r#"["h","ll",""]"#),
          ex(r#"root = content().split_by(b -> b == 44).map_each(b -> b.string())"#, "foo,bar,baz", r#"["foo","bar","baz"]"#),
          ex(r#"root = this.n.split_by(c -> c == " ")"#, r#"{"n":5}"#, "error:expected string, array or bytes value, got number")],
        split_by),
    lazy_method("unique_by", CAT, "Old name of `unique` with an `emit` query.", &[OPT_EMIT],
        &[ex("root.a = this.a.unique_by(x -> x.id)", r#"{"a":[{"id":1,"v":1},{"id":1,"v":2}]}"#, r#"{"a":[{"id":1,"v":1}]}"#)], unique_by),
    lazy_method("group_by", CAT, "Objects of `group` and `items`, one per distinct query value.", &[lambda("query")],
        &[ex("root.g = this.a.group_by(x -> x % 2)", r#"{"a":[1,2,3]}"#, r#"{"g":[{"group":1,"items":[1,3]},{"group":0,"items":[2]}]}"#)], group_by),
];

/// `filter` followed by `map_each`, fused by the compiler; not callable by name.
pub static FILTER_MAP_EACH: MethodSpec = lazy_method(
    "map_each",
    CAT,
    "filter then map_each in one pass",
    &[lambda("test"), lambda("query")],
    &[],
    filter_map_each,
);

fn filter_map_each<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    map_items(call, cx, Some(call.lambda(0)?), call.lambda(1)?)
}

fn map_each<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    map_items(call, cx, None, call.lambda(0)?)
}

/// Each item (or `{key, value}` entry) that passes `test` through `query`: `deleted()`
/// drops it, `nothing()` keeps it as it was.
fn map_items<'a>(
    call: &'a MethodCall,
    cx: &Ctx<'a>,
    test: Option<&'a Lambda>,
    query: &'a Lambda,
) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let passes = |item: &Value| match test {
        Some(t) => test_bool(call, call_lambda(t, item, cx)?),
        None => Ok(true),
    };
    let mapped = |item: &Value, original: &Value| {
        Ok::<_, ExecError>(match call_lambda(query, item, cx)? {
            V::Deleted => None,
            V::Nothing => Some(original.clone()),
            r => Some(r.into_owned()),
        })
    };
    // Each item may map to a value as large as any: counted as they come, where the
    // whole would be many times the cap before the result is checked.
    let mut meter = budget::Meter::new();
    let mut count = |v: &Value| meter.add_value(v).map_err(|e| call.err(e));
    match recv.get() {
        Value::Array(items) => {
            // Room for every item: one allocation, where growing would take several.
            let mut out = Vec::with_capacity(items.len());
            for it in items {
                if passes(it)? {
                    if let Some(r) = mapped(it, it)? {
                        count(&r)?;
                        out.push(r);
                    }
                }
            }
            Ok(V::Own(Value::Array(out)))
        }
        Value::Object(o) => {
            let mut out = Object::new();
            for (k, v) in o {
                let entry = kv(k, v);
                if passes(&entry)? {
                    if let Some(r) = mapped(&entry, v)? {
                        count(&r)?;
                        out.insert(k.clone(), r);
                    }
                }
            }
            Ok(V::Own(Value::Object(out)))
        }
        other => Err(call.err(format!(
            "expected array or object value, got {}",
            describe(other)
        ))),
    }
}

fn kv(k: &str, v: &Value) -> Value {
    let mut o = Object::new();
    o.insert("key".into(), Value::String(k.to_string()));
    o.insert("value".into(), v.clone());
    Value::Object(o)
}

fn recv_array<'a>(call: &'a MethodCall, v: &'a V<'a>) -> Result<&'a Vec<Value>, ExecError> {
    match v.get() {
        Value::Array(a) => Ok(a),
        other => Err(call.err(format!("expected array value, got {}", describe(other)))),
    }
}

fn test_bool(call: &MethodCall, v: V<'_>) -> Result<bool, ExecError> {
    match v.get() {
        Value::Bool(b) => Ok(*b),
        other => Err(call.err(format!(
            "expected the query to give a bool, got {}",
            describe(other)
        ))),
    }
}

fn map_each_key<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    let Value::Object(o) = recv.get() else {
        return Err(call.err(format!(
            "expected object value, got {}",
            describe(recv.get())
        )));
    };
    let mut out = Object::new();
    let mut meter = budget::Meter::new();
    for (k, v) in o {
        let key = Value::String(k.clone());
        match call_lambda(l, &key, cx)? {
            V::Deleted => {}
            V::Nothing => {
                out.insert(k.clone(), v.clone());
            }
            r => match r.into_owned() {
                Value::String(s) => {
                    // A key can be made as long as any string, one per member.
                    meter.add_key(&s).map_err(|e| call.err(e))?;
                    out.insert(s, v.clone());
                }
                other => {
                    return Err(call.err(format!("keys must be strings, got {}", describe(&other))))
                }
            },
        }
    }
    Ok(V::Own(Value::Object(out)))
}

fn filter<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    match recv.get() {
        Value::Array(items) => {
            // Room for every item: one allocation, where growing would take several.
            let mut out = Vec::with_capacity(items.len());
            for it in items {
                if test_bool(call, call_lambda(l, it, cx)?)? {
                    out.push(it.clone());
                }
            }
            Ok(V::Own(Value::Array(out)))
        }
        Value::Object(o) => {
            let mut out = Object::new();
            for (k, v) in o {
                if test_bool(call, call_lambda(l, &kv(k, v), cx)?)? {
                    out.insert(k.clone(), v.clone());
                }
            }
            Ok(V::Own(Value::Object(out)))
        }
        other => Err(call.err(format!(
            "expected array or object value, got {}",
            describe(other)
        ))),
    }
}

fn fold<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let items = recv_array(call, &recv)?;
    let l = call.lambda(1)?;
    let mut tally = call.arg(0, cx)?.into_owned();
    for it in items {
        let mut o = Object::new();
        o.insert("tally".into(), tally);
        o.insert("value".into(), it.clone());
        let ctx_val = Value::Object(o);
        tally = call_lambda(l, &ctx_val, cx)?.into_owned();
        // A fold can nest its tally once per item; values that deep would overflow the
        // stack when written out or dropped.
        if tally.nesting_exceeds(MAX_DEPTH) {
            return Err(call.err(format!("the tally nests deeper than {MAX_DEPTH} levels")));
        }
    }
    Ok(V::Own(tally))
}

fn any<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    for it in recv_array(call, &recv)? {
        if test_bool(call, call_lambda(l, it, cx)?)? {
            return Ok(V::Own(Value::Bool(true)));
        }
    }
    Ok(V::Own(Value::Bool(false)))
}

fn all<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    let items = recv_array(call, &recv)?;
    for it in items {
        if !test_bool(call, call_lambda(l, it, cx)?)? {
            return Ok(V::Own(Value::Bool(false)));
        }
    }
    Ok(V::Own(Value::Bool(!items.is_empty())))
}

fn find<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let want = call.arg(0, cx)?;
    let pos = recv_array(call, &recv)?
        .iter()
        .position(|x| values_eq(x, want.get()));
    Ok(V::Own(Value::Int(pos.map(|p| p as i64).unwrap_or(-1))))
}

fn find_all<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let want = call.arg(0, cx)?;
    let out = recv_array(call, &recv)?
        .iter()
        .enumerate()
        .filter(|(_, x)| values_eq(x, want.get()))
        .map(|(i, _)| Value::Int(i as i64))
        .collect();
    Ok(V::Own(Value::Array(out)))
}

fn find_by<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    for (i, it) in recv_array(call, &recv)?.iter().enumerate() {
        if test_bool(call, call_lambda(l, it, cx)?)? {
            return Ok(V::Own(Value::Int(i as i64)));
        }
    }
    Ok(V::Own(Value::Int(-1)))
}

fn find_all_by<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    let mut out = Vec::new();
    for (i, it) in recv_array(call, &recv)?.iter().enumerate() {
        if test_bool(call, call_lambda(l, it, cx)?)? {
            out.push(Value::Int(i as i64));
        }
    }
    Ok(V::Own(Value::Array(out)))
}

fn sort<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let items = recv_array(call, &recv)?.clone();
    let sorted = match call.lambdas.first() {
        Some(Some(l)) => super::arrays::merge_sort(items, &mut |a: &Value, b: &Value| {
            let mut o = Object::new();
            o.insert("left".into(), a.clone());
            o.insert("right".into(), b.clone());
            let ctx_val = Value::Object(o);
            call_lambda(l, &ctx_val, cx).and_then(|v| test_bool(call, v))
        })?,
        _ => super::arrays::sort_values(items).map_err(|e| call.err(e))?,
    };
    Ok(V::Own(Value::Array(sorted)))
}

fn sort_by<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    let items = recv_array(call, &recv)?;
    let mut keyed = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        keyed.push((call_lambda(l, it, cx)?.into_owned(), i));
    }
    let sorted = super::arrays::merge_sort(keyed, &mut |a, b| {
        compare(&a.0, &b.0).map(|o| o == std::cmp::Ordering::Less)
    })
    .map_err(|e| call.err(e))?;
    Ok(V::Own(Value::Array(
        sorted.into_iter().map(|(_, i)| items[i].clone()).collect(),
    )))
}

fn unique_by<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let items = recv_array(call, &recv)?;
    let mut seen: Vec<Value> = Vec::new();
    let mut out = Vec::new();
    for it in items {
        let key = match call.lambdas.first() {
            Some(Some(l)) => call_lambda(l, it, cx)?.into_owned(),
            _ => it.clone(),
        };
        if !seen.iter().any(|s| values_eq(s, &key)) {
            seen.push(key);
            out.push(it.clone());
        }
    }
    Ok(V::Own(Value::Array(out)))
}

fn group_by<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    let mut groups: Vec<(Value, Vec<Value>)> = Vec::new();
    for it in recv_array(call, &recv)? {
        let key = call_lambda(l, it, cx)?.into_owned();
        match groups.iter_mut().find(|(k, _)| values_eq(k, &key)) {
            Some((_, items)) => items.push(it.clone()),
            None => groups.push((key, vec![it.clone()])),
        }
    }
    let out = groups
        .into_iter()
        .map(|(k, items)| {
            let mut o = Object::new();
            o.insert("group".into(), k);
            o.insert("items".into(), Value::Array(items));
            Value::Object(o)
        })
        .collect();
    Ok(V::Own(Value::Array(out)))
}

/// `unique`: items compare as text (strings, bytes) or as numbers; others cannot be
/// compared and fail, as in Bloblang.
fn unique<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let items = recv_array(call, &recv)?;
    let emit = match call.lambdas.first() {
        Some(Some(l)) => Some(l),
        _ => None,
    };
    let mut texts: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    let mut nums: Vec<f64> = Vec::new();
    let mut out = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let key = match emit {
            Some(l) => {
                call_lambda(l, it, cx).map_err(|e| call.err(format!("index {i}: {}", e.msg)))?
            }
            None => V::Ref(it),
        };
        let fresh = match key.get() {
            Value::String(s) => texts.insert(s.as_bytes().to_vec()),
            Value::Bytes(b) => texts.insert(b.to_vec()),
            Value::Int(n) => {
                let f = *n as f64;
                !nums.contains(&f) && {
                    nums.push(f);
                    true
                }
            }
            Value::Float(f) => {
                !nums.contains(f) && {
                    nums.push(*f);
                    true
                }
            }
            other => {
                return Err(call.err(format!(
                    "index {i}: expected string or number value, got {}",
                    describe(other)
                )))
            }
        };
        if fresh {
            out.push(it.clone());
        }
    }
    Ok(V::Own(Value::Array(out)))
}

/// Pieces of an array split where `hit` holds, the matching items left out. As in
/// Bloblang, an empty first piece is null and an empty input gives one empty piece.
pub(crate) fn split_items<E>(
    items: &[Value],
    mut hit: impl FnMut(&Value) -> Result<bool, E>,
) -> Result<Value, E> {
    if items.is_empty() {
        return Ok(Value::Array(vec![Value::Array(Vec::new())]));
    }
    let mut out = Vec::new();
    let mut cur: Option<Vec<Value>> = None;
    for it in items {
        if hit(it)? {
            out.push(cur.take().map_or(Value::Null, Value::Array));
            cur = Some(Vec::new());
        } else {
            cur.get_or_insert_with(Vec::new).push(it.clone());
        }
    }
    out.push(cur.map_or(Value::Null, Value::Array));
    Ok(Value::Array(out))
}

fn split_by<'a>(call: &'a MethodCall, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    let recv = call.recv(cx)?;
    let l = call.lambda(0)?;
    match recv.get() {
        Value::Array(items) => {
            let out = split_items(items, |it| test_bool(call, call_lambda(l, it, cx)?))?;
            Ok(V::Own(out))
        }
        Value::String(s) => {
            let mut out = Vec::new();
            let mut start = 0;
            for (i, c) in s.char_indices() {
                let ch = Value::String(c.to_string());
                if test_bool(call, call_lambda(l, &ch, cx)?)? {
                    out.push(Value::String(s[start..i].to_string()));
                    start = i + c.len_utf8();
                }
            }
            out.push(Value::String(s[start..].to_string()));
            Ok(V::Own(Value::Array(out)))
        }
        Value::Bytes(b) => {
            let mut out = Vec::new();
            let mut start = 0;
            for (i, byte) in b.iter().enumerate() {
                let n = Value::Int(*byte as i64);
                if test_bool(call, call_lambda(l, &n, cx)?)? {
                    out.push(Value::Bytes(b.slice(start..i)));
                    start = i + 1;
                }
            }
            out.push(Value::Bytes(b.slice(start..)));
            Ok(V::Own(Value::Array(out)))
        }
        other => Err(call.err(format!(
            "expected string, array or bytes value, got {}",
            describe(other)
        ))),
    }
}
