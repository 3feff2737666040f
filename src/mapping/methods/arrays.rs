//! Arrays: building, reshaping and summarising.

use super::{array, text};
use crate::mapping::budget;
use crate::mapping::exec::{compare, own, to_float, V};
use crate::mapping::spec::{ex, method, opt, p, type_err, Args, Default, MethodSpec, Res};
use crate::value::{Object, Value};

const CAT: &str = "Object & Array Manipulation";

pub static SPECS: &[MethodSpec] = &[
    method("append", CAT, "The array with the arguments added at the end.",
        &[p("value"), opt("b", Default::Absent), opt("c", Default::Absent), opt("d", Default::Absent)],
        &[ex("root.a = this.a.append(3, 4)", r#"{"a":[1,2]}"#, r#"{"a":[1,2,3,4]}"#)], append),
    method("concat", CAT, "The array followed by the items of each argument array.",
        &[p("array"), opt("b", Default::Absent), opt("c", Default::Absent)],
        &[ex("root.a = this.a.concat(this.b)", r#"{"a":[1],"b":[2,3]}"#, r#"{"a":[1,2,3]}"#)], concat),
    method("flatten", CAT, "The array with nested arrays spliced in, one level deep.", &[],
        &[ex("root.a = this.a.flatten()", r#"{"a":[1,[2,[3]],4]}"#, r#"{"a":[1,2,[3],4]}"#)], flatten),
    method("index", CAT, "The item at a position; negative positions count from the end.", &[p("index")],
        &[ex("root.a = this.a.index(-1)", r#"{"a":[1,2,3]}"#, r#"{"a":3}"#),
          ex("root.a = this.a.index(3)", r#"{"a":[1,2,3]}"#, "error:index 3 is out of bounds for an array of length 3"),
          ex(r#"root.a = "hi".bytes().index(1)"#, "{}", r#"{"a":105}"#),
          ex("root.last_byte = this.name.bytes().index(-1)", r#"{"name":"foobar bazson"}"#, r#"{"last_byte":110}"#)], index),
    method("join", CAT, "The strings of the array joined with a delimiter.", &[opt("delimiter", Default::Str(""))],
        &[ex(r#"root.s = this.a.join(", ")"#, r#"{"a":["x","y"]}"#, r#"{"s":"x, y"}"#)], join),
    method("sum", CAT, "The sum of the numbers of the array.", &[],
        &[ex("root.n = this.a.sum()", r#"{"a":[1,2,3.5]}"#, r#"{"n":6.5}"#),
          ex("root.n = this.a.sum()", r#"{"a":[1,2]}"#, r#"{"n":3}"#)], sum),
    method("enumerated", CAT, "The items as objects of `index` and `value`.", &[],
        &[ex("root.a = this.a.enumerated()", r#"{"a":["x","y"]}"#, r#"{"a":[{"index":0,"value":"x"},{"index":1,"value":"y"}]}"#)],
        enumerated),
    method("zip", CAT, "Arrays of the items at each position of this and the argument arrays.",
        &[p("array"), opt("b", Default::Absent), opt("c", Default::Absent)],
        &[ex("root.a = this.a.zip(this.b)", r#"{"a":[1,2],"b":["x","y"]}"#, r#"{"a":[[1,"x"],[2,"y"]]}"#),
          ex("root.a = this.a.zip(this.b)", r#"{"a":[1,2],"b":["x"]}"#, "error:cannot zip arrays of different lengths (2 and 1)")], zip),
    method("first", CAT, "The first item, or an error when the array is empty.", &[],
        &[ex("root.a = this.a.first()", r#"{"a":[7,8]}"#, r#"{"a":7}"#)], first),
    method("last", CAT, "The last item, or an error when the array is empty.", &[],
        &[ex("root.a = this.a.last()", r#"{"a":[7,8]}"#, r#"{"a":8}"#)], last),
    method("collapse", CAT, "The object (or array) flattened into one object of dot paths to leaf values.",
        &[opt("include_empty", Default::Bool(false))],
        &[ex("root = this.collapse()", r#"{"a":{"b":[1,{"c":2}]}}"#, r#"{"a.b.0":1,"a.b.1.c":2}"#)], collapse),
    method("explode", CAT, "One document per item of the array (or field of the object) at `path`, each with that item in its place.",
        &[p("path")],
        &[ex(r#"root = this.explode("v")"#, r#"{"id":1,"v":[2,3]}"#, r#"[{"id":1,"v":2},{"id":1,"v":3}]"#)], explode),
    method("squash", CAT, "The array of objects merged into one object, as `merge` merges: values under the same key are gathered into an array (arrays join), objects merge key by key.", &[],
        &[ex("root = this.a.squash()", r#"{"a":[{"x":1},{"y":2},{"x":3}]}"#, r#"{"x":[1,3],"y":2}"#),
          ex("root.locations = this.locations.map_each(loc -> {loc.state: [loc.name]}).squash()",
             r#"{"locations":[{"name":"Seattle","state":"WA"},{"name":"New York","state":"NY"},{"name":"Bellevue","state":"WA"},{"name":"Olympia","state":"WA"}]}"#,
             r#"{"locations":{"NY":["New York"],"WA":["Seattle","Bellevue","Olympia"]}}"#),
          ex("root = this.squash()", r#"[{"a":{"b":1}},{"a":{"c":2}}]"#, r#"{"a":{"b":1,"c":2}}"#)], squash),
];

/// The arguments given, in order.
fn given<'a>(args: &'a Args<'_>) -> impl Iterator<Item = &'a Value> + 'a {
    (0..args.len())
        .filter(|i| args.given(*i))
        .map(|i| args.get(i))
}

fn append<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    // The result holds a copy of each: an array appended to itself doubles.
    budget::fits_together(std::iter::once(v).chain(given(args)))?;
    let mut out = array(v)?.clone();
    out.extend(given(args).cloned());
    own(Value::Array(out))
}
fn concat<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    budget::fits_together(std::iter::once(v).chain(given(args)))?;
    let mut out = array(v)?.clone();
    for a in given(args) {
        out.extend(array(a)?.iter().cloned());
    }
    own(Value::Array(out))
}
fn flatten<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let mut out = Vec::new();
    for x in array(v)? {
        match x {
            Value::Array(inner) => out.extend(inner.iter().cloned()),
            other => out.push(other.clone()),
        }
    }
    own(Value::Array(out))
}
fn index<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    use crate::mapping::exec::{norm_index, out_of_bounds};
    let i = args.int(0)?;
    match v {
        // Bytes index like an array of numbers.
        Value::Bytes(b) => match norm_index(i, b.len()) {
            Some(k) => own(b[k] as i64),
            None => Err(out_of_bounds(i, "bytes", b.len())),
        },
        _ => {
            let a = array(v).map_err(|_| type_err("array or bytes", v))?;
            match norm_index(i, a.len()) {
                Some(k) => Ok(V::Ref(&a[k])),
                None => Err(out_of_bounds(i, "an array", a.len())),
            }
        }
    }
}
fn join<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let d = args.str(0)?;
    let items = array(v)?;
    // Sized up front so the result is allocated once.
    let room: usize = items
        .iter()
        .map(|x| match x {
            Value::String(s) => s.len() + d.len(),
            Value::Bytes(b) => b.len() + d.len(),
            _ => d.len(),
        })
        .fold(0, usize::saturating_add);
    // A long delimiter between many short items: the product of the two sizes.
    budget::fits(room.saturating_add(crate::value::NODE))?;
    let mut out = String::with_capacity(room.min(crate::mapping::exec::MAX_CONCAT));
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(d);
        }
        out.push_str(&text(x)?);
    }
    own(out)
}
fn sum<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let mut int: Option<i64> = Some(0);
    let mut float = 0f64;
    for x in array(v)? {
        float += to_float(x)?;
        int = match (int, x) {
            (Some(acc), Value::Int(i)) => acc.checked_add(*i),
            _ => None,
        };
    }
    match int {
        Some(i) => own(i),
        None => own(float),
    }
}
fn enumerated<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let out = budget::collect(array(v)?.iter().enumerate().map(|(i, x)| {
        let mut o = Object::new();
        o.insert("index".into(), Value::Int(i as i64));
        o.insert("value".into(), x.clone());
        Value::Object(o)
    }))?;
    own(Value::Array(out))
}
fn zip<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let mut arrays = vec![array(v)?];
    for i in 0..args.len() {
        if args.given(i) {
            arrays.push(array(args.get(i))?);
        }
    }
    let n = arrays[0].len();
    if let Some(other) = arrays.iter().find(|a| a.len() != n) {
        return Err(format!(
            "cannot zip arrays of different lengths ({n} and {})",
            other.len()
        ));
    }
    own(Value::Array(budget::collect((0..n).map(|i| {
        Value::Array(arrays.iter().map(|a| a[i].clone()).collect())
    }))?))
}
fn first<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    array(v)?
        .first()
        .map(V::Ref)
        .ok_or_else(|| "the array is empty".into())
}
fn last<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    array(v)?
        .last()
        .map(V::Ref)
        .ok_or_else(|| "the array is empty".into())
}

/// Each leaf's key is its whole path, so the keys of a deep value take many times its
/// size: counted by `meter` as they are made.
fn collapse_into(
    prefix: &str,
    v: &Value,
    keep_empty: bool,
    out: &mut Object,
    meter: &mut budget::Meter,
) -> Res<()> {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(o) if !o.is_empty() => {
            for (k, x) in o {
                collapse_into(&key(k), x, keep_empty, out, meter)?;
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                collapse_into(&key(&i.to_string()), x, keep_empty, out, meter)?;
            }
        }
        Value::Object(_) | Value::Array(_) if !keep_empty => {}
        other => {
            meter.add_key(prefix)?;
            meter.add_value(other)?;
            out.insert(prefix.to_string(), other.clone());
        }
    }
    Ok(())
}
fn collapse<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    if !matches!(v, Value::Object(_) | Value::Array(_)) {
        return Err(type_err("object or array", v));
    }
    let mut out = Object::new();
    collapse_into("", v, args.bool(0)?, &mut out, &mut budget::Meter::new())?;
    own(Value::Object(out))
}
fn explode<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let path = super::general::split_path(args.str(0)?);
    let mut target = v;
    for seg in &path {
        target = crate::mapping::exec::field(target, seg);
    }
    let with = |item: &Value| -> Value {
        let mut doc = v.clone();
        let mut cur = &mut doc;
        for seg in &path {
            cur = match cur {
                Value::Object(o) => o.entry(seg.clone()).or_insert(Value::Null),
                other => other,
            };
        }
        *cur = item.clone();
        doc
    };
    // One copy of the whole document per item: counted as each is made.
    match target {
        Value::Array(a) => own(Value::Array(budget::collect(a.iter().map(with))?)),
        Value::Object(o) => own(Value::Object(budget::collect_object(
            o.iter().map(|(k, x)| (k.clone(), with(x))),
        )?)),
        other => Err(type_err("array or object at the path", other)),
    }
}
fn squash<'b>(v: &'b Value, _: &Args<'_>) -> Res<V<'b>> {
    let mut out = Value::Object(Object::new());
    for x in array(v)? {
        match x {
            Value::Object(_) => out = super::objects::merge_values(out, x.clone()),
            other => return Err(type_err("object", other)),
        }
    }
    own(out)
}

/// A stable merge sort driven by a fallible "comes first" test. The standard sort may
/// panic when a comparison is inconsistent, and user queries can be; this one cannot.
pub(crate) fn merge_sort<T: Clone, E>(
    items: Vec<T>,
    less: &mut impl FnMut(&T, &T) -> Result<bool, E>,
) -> Result<Vec<T>, E> {
    if items.len() <= 1 {
        return Ok(items);
    }
    let mut items = items;
    let right = items.split_off(items.len() / 2);
    let left = merge_sort(items, less)?;
    let right = merge_sort(right, less)?;
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(a), Some(b)) = (l.peek(), r.peek()) {
        // Take from the right only when it strictly comes first: keeps the sort stable.
        if less(b, a)? {
            out.extend(r.next());
        } else {
            out.extend(l.next());
        }
    }
    out.extend(l);
    out.extend(r);
    Ok(out)
}

/// Sorting order used by `sort`: numbers, strings or timestamps, not mixed.
pub(crate) fn sort_values(items: Vec<Value>) -> Res<Vec<Value>> {
    merge_sort(items, &mut |a, b| {
        compare(a, b).map(|o| o == std::cmp::Ordering::Less)
    })
}
