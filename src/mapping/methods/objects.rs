//! Objects: keys, values, merging and picking fields by path.

use super::general::split_path;
use super::object;
use crate::mapping::budget;
use crate::mapping::exec::{field, own, V};
use crate::mapping::spec::{ex, method, opt, p, type_err, Args, Default, MethodSpec, Res};
use crate::value::{Object, Value};

const CAT: &str = "Object & Array Manipulation";

pub static SPECS: &[MethodSpec] = &[
    method("keys", CAT, "The keys of the object, sorted.", &[],
        &[ex("root.k = this.keys()", r#"{"b":1,"a":2}"#, r#"{"k":["a","b"]}"#)], keys),
    method("values", CAT, "The values of the object, in key order.", &[],
        &[ex("root.v = this.values()", r#"{"b":1,"a":2}"#, r#"{"v":[2,1]}"#)], values),
    method("key_values", CAT, "The object as an array of `{key, value}` objects, in key order.", &[],
        &[ex("root.kv = this.key_values()", r#"{"a":1}"#, r#"{"kv":[{"key":"a","value":1}]}"#)], key_values),
    method("without", CAT, "The object without the fields at the given dot paths.",
        &[p("path"), opt("b", Default::Absent), opt("c", Default::Absent), opt("d", Default::Absent), opt("e", Default::Absent)],
        &[ex(r#"root = this.without("a.b", "c")"#, r#"{"a":{"b":1,"x":2},"c":3}"#, r#"{"a":{"x":2}}"#)], without),
    method("with", CAT, "The object with only the fields at the given dot paths.",
        &[p("path"), opt("b", Default::Absent), opt("c", Default::Absent), opt("d", Default::Absent), opt("e", Default::Absent)],
        &[ex(r#"root = this.with("a.b", "c")"#, r#"{"a":{"b":1,"x":2},"c":3,"d":4}"#, r#"{"a":{"b":1},"c":3}"#)], with),
    method("merge", CAT, "Merges two values: objects key by key (colliding values become arrays), arrays by concatenation.",
        &[p("with")],
        &[ex("root = this.a.merge(this.b)", r#"{"a":{"x":1,"y":1},"b":{"y":2,"z":3}}"#, r#"{"x":1,"y":[1,2],"z":3}"#)], merge),
    method("assign", CAT, "Merges two objects; values from the argument replace colliding ones.", &[p("with")],
        &[ex("root = this.a.assign(this.b)", r#"{"a":{"x":1,"y":{"p":1}},"b":{"y":{"q":2},"z":3}}"#, r#"{"x":1,"y":{"p":1,"q":2},"z":3}"#),
          ex("root = this.foo.assign(this.bar)", r#"{"foo":{"first_name":"fooer","likes":"bars"},"bar":{"second_name":"barer","likes":"foos"}}"#, r#"{"first_name":"fooer","likes":"foos","second_name":"barer"}"#),
          ex("root = this.a.assign(this.b)", r#"{"a":["foo","bar"],"b":["baz","buz"]}"#, r#"["foo","bar","baz","buz"]"#),
          ex("root = this.a.assign(this.b)", r#"{"a":["foo","bar"],"b":{"baz":"buz"}}"#, r#"["foo","bar",{"baz":"buz"}]"#),
          ex("root = this.a.assign(this.b)", r#"{"a":{"l":[1,2]},"b":{"l":[3]}}"#, r#"{"l":[3]}"#)], assign),
    method("get", CAT, "The value at a dot path, or null.", &[p("path")],
        &[ex(r#"root.v = this.get("a.b.0")"#, r#"{"a":{"b":[7]}}"#, r#"{"v":7}"#)], get),
    method("set", CAT, "The value with a dot path set.", &[p("path"), p("value")],
        &[ex(r#"root = this.set("a.b", 2)"#, r#"{"a":{"c":1}}"#, r#"{"a":{"b":2,"c":1}}"#),
          ex(r#"root = this.set("a.1", "x")"#, r#"{"a":[1,2,3]}"#, r#"{"a":[1,"x",3]}"#),
          ex(r#"root = this.set("a.0.b", 5)"#, r#"{"a":[{"b":1},{"b":2}]}"#, r#"{"a":[{"b":5},{"b":2}]}"#),
          ex(r#"root = this.set("-1", 9)"#, "[1,2,3]", "[1,2,9]"),
          ex(r#"root = this.set("a.3", "x")"#, r#"{"a":[1,2,3]}"#, "error:index 3 is out of bounds for an array of length 3")], set),
];

fn keys<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(Value::Array(
        object(v)?
            .keys()
            .map(|k| Value::String(k.clone()))
            .collect(),
    ))
}
fn values<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    own(Value::Array(object(v)?.values().cloned().collect()))
}
fn key_values<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let out = object(v)?
        .iter()
        .map(|(k, v)| {
            let mut o = Object::new();
            o.insert("key".into(), Value::String(k.clone()));
            o.insert("value".into(), v.clone());
            Value::Object(o)
        })
        .collect();
    own(Value::Array(out))
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        cur = match cur {
            Value::Object(o) => match o.get_mut(seg) {
                Some(x) => x,
                None => return,
            },
            _ => return,
        };
    }
    if let Value::Object(o) = cur {
        o.remove(last);
    }
}

fn paths(args: &Args<'_>) -> Res<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for i in 0..args.len() {
        if args.given(i) {
            out.push(split_path(args.str(i)?));
        }
    }
    Ok(out)
}

fn without<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    object(v)?;
    let mut out = v.clone();
    for p in paths(args)? {
        remove_path(&mut out, &p);
    }
    own(out)
}

pub(crate) fn set_path(v: &mut Value, path: &[String], val: Value) {
    let mut cur = v;
    for seg in path {
        if !matches!(cur, Value::Object(_)) {
            *cur = Value::Object(Object::new());
        }
        cur = match cur {
            Value::Object(o) => o.entry(seg.clone()).or_insert(Value::Null),
            other => other,
        };
    }
    *cur = val;
}

fn with<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    object(v)?;
    let mut out = Value::Object(Object::new());
    for p in paths(args)? {
        let mut cur = v;
        let mut found = true;
        for seg in &p {
            match cur {
                Value::Object(o) if o.contains_key(seg) => cur = &o[seg],
                _ => {
                    found = false;
                    break;
                }
            }
        }
        if found {
            set_path(&mut out, &p, cur.clone());
        }
    }
    own(out)
}

/// Objects combine key by key, recursively, and arrays concatenate; `clash` decides
/// the rest (where `merge` and `assign` differ).
fn combine(a: Value, b: Value, clash: fn(Value, Value) -> Value) -> Value {
    match (a, b) {
        (Value::Object(mut x), Value::Object(y)) => {
            for (k, v) in y {
                let merged = match x.remove(&k) {
                    Some(old) => combine(old, v, clash),
                    None => v,
                };
                x.insert(k, merged);
            }
            Value::Object(x)
        }
        (Value::Array(mut x), Value::Array(y)) => {
            x.extend(y);
            Value::Array(x)
        }
        (a, b) => clash(a, b),
    }
}

/// `merge` keeps both values of a clash, in an array.
pub(crate) fn merge_values(a: Value, b: Value) -> Value {
    combine(a, b, |a, b| match (a, b) {
        (Value::Array(mut x), other) => {
            x.push(other);
            Value::Array(x)
        }
        (other, Value::Array(y)) => {
            let mut out = vec![other];
            out.extend(y);
            Value::Array(out)
        }
        (x, y) => Value::Array(vec![x, y]),
    })
}

fn merge<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    // The result holds both: a value merged with itself doubles.
    budget::fits_together([v, args.get(0)])?;
    own(merge_values(v.clone(), args.get(0).clone()))
}

/// `assign` lets the second value win a clash: below the top, objects combine key by key
/// and anything else (arrays too) is replaced.
fn assign_values(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut x), Value::Object(y)) => {
            for (k, v) in y {
                let merged = match x.remove(&k) {
                    Some(old) => assign_values(old, v),
                    None => v,
                };
                x.insert(k, merged);
            }
            Value::Object(x)
        }
        (_, b) => b,
    }
}

fn assign<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    budget::fits_together([v, args.get(0)])?;
    match (v, args.get(0)) {
        // Into an array: an array's items are added, any other value is appended.
        (Value::Array(a), Value::Array(b)) => {
            own(Value::Array(a.iter().chain(b).cloned().collect()))
        }
        (Value::Array(a), b) => {
            let mut out = a.clone();
            out.push(b.clone());
            own(Value::Array(out))
        }
        (Value::Object(_), _) => own(assign_values(v.clone(), args.get(0).clone())),
        _ => Err(type_err("object or array", v)),
    }
}

fn get<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let mut cur = v;
    for seg in split_path(args.str(0)?) {
        cur = field(cur, &seg);
    }
    Ok(V::Ref(cur))
}

fn set<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let path = split_path(args.str(0)?);
    // The path comes from data: refuse it before building a value too deep to drop.
    args.get(1)
        .check_depth(path.len())
        .map_err(|e| e.to_string())?;
    let mut out = v.clone();
    // Through arrays a segment is a position, as the reference's paths read them.
    let mut cur = &mut out;
    for seg in &path {
        cur = match cur {
            Value::Array(items) => {
                let len = items.len();
                let i = seg.parse::<i64>().map_err(|_| {
                    format!("cannot set field `{seg}` of an array: expected an index")
                })?;
                match crate::mapping::exec::norm_index(i, len) {
                    Some(k) => &mut items[k],
                    None => return Err(crate::mapping::exec::out_of_bounds(i, "an array", len)),
                }
            }
            other => {
                if !matches!(other, Value::Object(_)) {
                    *other = Value::Object(Object::new());
                }
                match other {
                    Value::Object(o) => o.entry(seg.clone()).or_insert(Value::Null),
                    _ => unreachable!("just made an object"),
                }
            }
        };
    }
    *cur = args.get(1).clone();
    own(out)
}
