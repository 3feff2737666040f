//! Querying and checking whole documents: JSONPath, JSON Schema, and changelogs
//! (`diff` to compute one, `patch` to apply one).

use super::{array, text, Memo};
use crate::mapping::exec::{own, values_eq, V};
use crate::mapping::spec::{describe, ex, method, p, Args, MethodSpec, Res};
use crate::value::{Object, Value};

const CAT: &str = "Object & Array Manipulation";

pub static SPECS: &[MethodSpec] = &[
    method(
        "json_path",
        CAT,
        "Runs a JSONPath expression (RFC 9535: `$.a.b`, `$..name`, `$.items[?(@.kind=='x')]`, `[0:2]`, `*`) over the value. A path that can match many nodes gives an array of them; a path naming one node gives that node, or null when it is missing.",
        &[p("expression")],
        &[
            ex(r#"root.all_names = this.json_path("$..name")"#, r#"{"name":"alice","foo":{"name":"bob"}}"#, r#"{"all_names":["alice","bob"]}"#),
            ex(r#"root.all_names = this.json_path("$..name")"#, r#"{"thing":["this","bar",{"name":"alice"}]}"#, r#"{"all_names":["alice"]}"#),
            ex(r#"root.text_objects = this.json_path("$.body[?(@.type=='text')]")"#,
               r#"{"body":[{"type":"image","id":"foo"},{"type":"text","id":"bar"}]}"#, r#"{"text_objects":[{"id":"bar","type":"text"}]}"#),
            ex(r#"root.first = this.json_path("$.body[0].id")"#, r#"{"body":[{"id":"foo"}]}"#, r#"{"first":"foo"}"#),
            ex(r#"root.v = this.json_path("$.[")"#, "{}", "error:invalid JSONPath"),
        ],
        json_path,
    ),
    method(
        "json_schema",
        CAT,
        "Checks the value against a JSON Schema (given as JSON text, drafts 4 to 2020-12) and gives the value back when it conforms, or fails naming each violation. External `$ref`s are not fetched.",
        &[p("schema")],
        &[
            ex(
                "root = this.json_schema(\"\"\"{\n  \"type\":\"object\",\n  \"properties\":{\n    \"foo\":{\n      \"type\":\"string\"\n    }\n  }\n}\"\"\")",
                r#"{"foo":"bar"}"#,
                r#"{"foo":"bar"}"#,
            ),
            ex(
                "root = this.json_schema(\"\"\"{\n  \"type\":\"object\",\n  \"properties\":{\n    \"foo\":{\n      \"type\":\"string\"\n    }\n  }\n}\"\"\")",
                r#"{"foo":5}"#,
                "error:foo: 5 is not of type \"string\"",
            ),
            ex(r#"root = this.json_schema("{nope")"#, "{}", "error:invalid JSON schema"),
        ],
        json_schema,
    ),
    method(
        "diff",
        CAT,
        "The changes that turn the value into the argument, as an array of `{Type, Path, From, To}` objects: `Type` is `create`, `update` or `delete`, and `Path` the keys (and array positions, as strings) leading to the change. Array items are matched by value first, so moving an item is not a change. `patch` applies the result.",
        &[p("other")],
        &[
            ex(
                "root.changes = this.before.diff(this.after)",
                r#"{"before":{"name":"Alice","age":30},"after":{"name":"Alice","age":31,"city":"NYC"}}"#,
                r#"{"changes":[{"From":30,"Path":["age"],"To":31,"Type":"update"},{"From":null,"Path":["city"],"To":"NYC","Type":"create"}]}"#,
            ),
            ex(
                "root.changelog = this.old_config.diff(this.new_config)",
                r#"{"old_config":{"debug":true,"timeout":30},"new_config":{"timeout":60}}"#,
                r#"{"changelog":[{"From":true,"Path":["debug"],"To":null,"Type":"delete"},{"From":30,"Path":["timeout"],"To":60,"Type":"update"}]}"#,
            ),
            ex(
                "root = this.nope.diff(this.b)",
                r#"{"b":{"x":1,"y":{"z":2}}}"#,
                r#"[{"From":null,"Path":["x"],"To":1,"Type":"create"},{"From":null,"Path":["y"],"To":{"z":2},"Type":"create"}]"#,
            ),
            ex(
                "root = this.a.diff(this.nope)",
                r#"{"a":{"x":1}}"#,
                r#"[{"From":1,"Path":["x"],"To":null,"Type":"delete"}]"#,
            ),
            ex(
                "root = this.a.diff(this.b)",
                r#"{"a":{"x":{"p":1}},"b":{}}"#,
                r#"[{"From":{"p":1},"Path":["x"],"To":null,"Type":"delete"}]"#,
            ),
            ex(
                "root = this.a.diff(this.b)",
                r#"{"a":{"tags":["x","y"]},"b":{"tags":["y","z"]}}"#,
                r#"[{"From":"x","Path":["tags","0"],"To":null,"Type":"delete"},{"From":null,"Path":["tags","1"],"To":"z","Type":"create"}]"#,
            ),
        ],
        diff,
    ),
    method(
        "patch",
        CAT,
        "Applies a changelog as `diff` makes it, giving the changed value: `create` inserts (into an array, at the position), `update` replaces and `delete` removes.",
        &[p("changelog")],
        &[
            ex(
                "root = this.before.patch(this.before.diff(this.after)) == this.after",
                r#"{"before":{"a":[1,2,3],"b":{"c":1}},"after":{"a":[2,3,4],"b":{"d":2}}}"#,
                "true",
            ),
            ex(
                r#"root = this.patch([{"Type":"update","Path":["age"],"From":30,"To":31}])"#,
                r#"{"name":"Alice","age":30}"#,
                r#"{"name":"Alice","age":31}"#,
            ),
            ex(
                r#"root = this.patch([{"Type":"delete","Path":["nope","x"]}])"#,
                r#"{"name":"Alice"}"#,
                "error:no field \"nope\"",
            ),
        ],
        patch,
    ),
];

static PATHS: Memo<(serde_json_path::JsonPath, bool)> = Memo::new();
static SCHEMAS: Memo<jsonschema::Validator> = Memo::new();

/// Whether a JSONPath can select more than one node: it has a wildcard, a descendant
/// segment, a filter, a slice or a union. Quoted names are skipped.
fn selects_many(expr: &str) -> bool {
    let mut quote = None;
    let mut prev = '\0';
    let mut depth = 0;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if c == q && prev != '\\' {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' => depth += 1,
                ']' => depth -= 1,
                '*' | '?' => return true,
                '.' if prev == '.' => return true,
                ',' | ':' if depth > 0 => return true,
                _ => {}
            },
        }
        prev = if prev == '\\' && c == '\\' { '\0' } else { c };
    }
    false
}

fn json_path<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let expr = args.str(0)?;
    let compiled = PATHS.get(expr, || {
        let path = serde_json_path::JsonPath::parse(expr)
            .map_err(|e| format!("invalid JSONPath {expr:?}: {e}"))?;
        Ok((path, selects_many(expr)))
    })?;
    let (path, many) = &*compiled;
    let doc = serde_json::to_value(v).map_err(|e| e.to_string())?;
    let nodes = path.query(&doc).all();
    if *many {
        // `$..*` gives every part of the document with all that is under it: a deep
        // document many times over, counted as it is copied.
        return own(Value::Array(crate::mapping::budget::collect(
            nodes.into_iter().map(|n| Value::from(n.clone())),
        )?));
    }
    own(nodes
        .first()
        .map(|n| Value::from((*n).clone()))
        .unwrap_or(Value::Null))
}

fn json_schema<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let schema_text = text(args.get(0)).map_err(|e| format!("schema: {e}"))?;
    let validator = SCHEMAS.get(&schema_text, || {
        let schema: serde_json::Value =
            serde_json::from_str(&schema_text).map_err(|e| format!("invalid JSON schema: {e}"))?;
        jsonschema::validator_for(&schema).map_err(|e| format!("invalid JSON schema: {e}"))
    })?;
    let doc = serde_json::to_value(v).map_err(|e| e.to_string())?;
    let problems: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| {
            // `/a/0/b` reads better as `a.0.b`, the dot paths mappings use.
            let at = e
                .instance_path()
                .as_str()
                .trim_start_matches('/')
                .replace('/', ".");
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(V::Ref(v))
    } else {
        Err(problems.join("; "))
    }
}

fn change(kind: &str, path: &[String], from: Value, to: Value) -> Value {
    let mut o = Object::new();
    o.insert("Type".into(), Value::from(kind));
    o.insert(
        "Path".into(),
        Value::Array(path.iter().map(|s| Value::String(s.clone())).collect()),
    );
    o.insert("From".into(), from);
    o.insert("To".into(), to);
    Value::Object(o)
}

/// Positions of the items of `a` that have no equal in `b`, each item of `b` matching
/// at most one of `a`.
fn unmatched(a: &[Value], b: &[Value]) -> Vec<usize> {
    let mut used = vec![false; b.len()];
    a.iter()
        .enumerate()
        .filter_map(
            |(i, x)| match (0..b.len()).find(|&j| !used[j] && values_eq(x, &b[j])) {
                Some(j) => {
                    used[j] = true;
                    None
                }
                None => Some(i),
            },
        )
        .collect()
}

fn diff_into(path: &mut Vec<String>, a: &Value, b: &Value, out: &mut Vec<Value>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                path.push(k.clone());
                match (x.get(k), y.get(k)) {
                    (Some(xv), Some(yv)) => diff_into(path, xv, yv, out),
                    (Some(xv), None) => out.push(change("delete", path, xv.clone(), Value::Null)),
                    (None, Some(yv)) => out.push(change("create", path, Value::Null, yv.clone())),
                    (None, None) => {}
                }
                path.pop();
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            let gone = unmatched(x, y);
            let new = unmatched(y, x);
            // Positions missing on both sides are compared in place; then deletions from
            // the highest position down and insertions from the lowest up, the order in
            // which `patch` can apply them one by one.
            let mut deletes = Vec::new();
            for &i in &gone {
                if new.contains(&i) {
                    path.push(i.to_string());
                    diff_into(path, &x[i], &y[i], out);
                    path.pop();
                } else {
                    deletes.push(i);
                }
            }
            for &i in deletes.iter().rev() {
                path.push(i.to_string());
                out.push(change("delete", path, x[i].clone(), Value::Null));
                path.pop();
            }
            for &i in new.iter().filter(|i| !gone.contains(i)) {
                path.push(i.to_string());
                out.push(change("create", path, Value::Null, y[i].clone()));
                path.pop();
            }
        }
        _ if values_eq(a, b) => {}
        _ => out.push(change("update", path, a.clone(), b.clone())),
    }
}

/// Each member of a whole object (or item of an array) that appears or goes away: one
/// change per member, as the reference's diff lists a created or removed document.
fn members_changed(kind: &str, v: &Value, out: &mut Vec<Value>) {
    let mut path = Vec::new();
    let mut one = |k: String, x: &Value| {
        path.push(k);
        out.push(match kind {
            "create" => change(kind, &path, Value::Null, x.clone()),
            _ => change(kind, &path, x.clone(), Value::Null),
        });
        path.pop();
    };
    match v {
        Value::Object(o) => o.iter().for_each(|(k, x)| one(k.clone(), x)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| one(i.to_string(), x)),
        _ => {}
    }
}

fn diff<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let other = args.get(0);
    let mut out = Vec::new();
    match (v, other) {
        (Value::Null, Value::Null) => {}
        // A document that appears or goes away: each of its members is a change.
        (Value::Null, Value::Object(_) | Value::Array(_)) => {
            members_changed("create", other, &mut out)
        }
        (Value::Object(_) | Value::Array(_), Value::Null) => members_changed("delete", v, &mut out),
        _ => diff_into(&mut Vec::new(), v, other, &mut out),
    }
    own(Value::Array(out))
}

/// A field of a change object; `diff` writes `Type`, but any case is read.
fn change_field<'v>(c: &'v Object, name: &str) -> Option<&'v Value> {
    c.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

fn path_key(v: &Value) -> Res<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(format!(
            "path elements are strings, got {}",
            describe(other)
        )),
    }
}

fn index_in(key: &str, len: usize, allow_end: bool) -> Res<usize> {
    let i: usize = key
        .parse()
        .map_err(|_| format!("{key:?} is not an array position"))?;
    if i < len || (allow_end && i == len) {
        Ok(i)
    } else {
        Err(format!("position {i} is past the end of an array of {len}"))
    }
}

fn apply_change(doc: &mut Value, kind: &str, path: &[String], to: &Value) -> Res<()> {
    let Some((last, parents)) = path.split_last() else {
        return match kind {
            "delete" => {
                *doc = Value::Null;
                Ok(())
            }
            _ => {
                *doc = to.clone();
                Ok(())
            }
        };
    };
    let mut at = doc;
    for key in parents {
        at = match at {
            Value::Object(o) => match (o.contains_key(key), kind) {
                (true, _) => o.get_mut(key).ok_or("unreachable")?,
                // Creating below a missing field makes the objects on the way.
                (false, "create") => o.entry(key.clone()).or_insert(Value::Object(Object::new())),
                (false, _) => return Err(format!("no field {key:?}")),
            },
            Value::Array(a) => {
                let i = index_in(key, a.len(), false)?;
                &mut a[i]
            }
            other => return Err(format!("cannot go into {} at {key:?}", describe(other))),
        };
    }
    match (at, kind) {
        (Value::Object(o), "delete") => o
            .remove(last)
            .map(|_| ())
            .ok_or_else(|| format!("no field {last:?}")),
        (Value::Object(o), "update") if !o.contains_key(last) => Err(format!("no field {last:?}")),
        (Value::Object(o), _) => {
            o.insert(last.clone(), to.clone());
            Ok(())
        }
        (Value::Array(a), "delete") => {
            let i = index_in(last, a.len(), false)?;
            a.remove(i);
            Ok(())
        }
        (Value::Array(a), "update") => {
            let i = index_in(last, a.len(), false)?;
            a[i] = to.clone();
            Ok(())
        }
        (Value::Array(a), _) => {
            let i = index_in(last, a.len(), true)?;
            a.insert(i, to.clone());
            Ok(())
        }
        (other, _) => Err(format!("cannot change a field of {}", describe(other))),
    }
}

fn patch<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    if matches!(v, Value::Null) {
        return own(Value::Null);
    }
    let mut doc = v.clone();
    for (n, c) in array(args.get(0))
        .map_err(|e| format!("changelog: {e}"))?
        .iter()
        .enumerate()
    {
        let Value::Object(c) = c else {
            return Err(format!(
                "change {n}: expected an object, got {}",
                describe(c)
            ));
        };
        let kind = change_field(c, "type")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !matches!(kind, "create" | "update" | "delete") {
            return Err(format!(
                "change {n}: Type must be create, update or delete, got {kind:?}"
            ));
        }
        let path = match change_field(c, "path") {
            Some(Value::Array(p)) => p.iter().map(path_key).collect::<Res<Vec<_>>>(),
            Some(other) => Err(format!("Path must be an array, got {}", describe(other))),
            None => Err("no Path".to_string()),
        }
        .map_err(|e| format!("change {n}: {e}"))?;
        let to = change_field(c, "to").unwrap_or(&Value::Null);
        apply_change(&mut doc, kind, &path, to)
            .map_err(|e| format!("change {n} ({kind} {}): {e}", path.join(".")))?;
    }
    own(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> Value {
        Value::from_json(s.as_bytes()).unwrap()
    }

    #[test]
    fn patch_undoes_diff_for_reordered_and_nested_arrays() {
        let cases = [
            (r#"[1,2,3]"#, r#"[1,3]"#),
            (r#"[1,2]"#, r#"[1,5,2]"#),
            (r#"[1,2,3]"#, r#"[4]"#),
            (r#"[1]"#, r#"[2,3,4]"#),
            (r#"[1,2]"#, r#"[2,3]"#),
            (r#"[1,2,3,4]"#, r#"[2,9]"#),
            (r#"[1,7,8]"#, r#"[2,3,7]"#),
            (
                r#"{"a":[{"b":1},{"c":[1,2]}]}"#,
                r#"{"a":[{"b":2},{"c":[2]}],"d":null}"#,
            ),
            (r#"{"a":1}"#, r#"{"a":{"b":[1]}}"#),
            (r#"{"a":{"b":1}}"#, r#"{}"#),
        ];
        for (a, b) in cases {
            let (a, b) = (json(a), json(b));
            let mut changes = Vec::new();
            diff_into(&mut Vec::new(), &a, &b, &mut changes);
            let mut doc = a.clone();
            for c in &changes {
                let Value::Object(c) = c else { unreachable!() };
                let path: Vec<String> = match &c["Path"] {
                    Value::Array(p) => p.iter().map(|s| path_key(s).unwrap()).collect(),
                    _ => unreachable!(),
                };
                apply_change(&mut doc, c["Type"].as_str().unwrap(), &path, &c["To"]).unwrap();
            }
            assert!(
                values_eq(&doc, &b),
                "{a:?} -> {b:?} gave {doc:?} via {changes:?}"
            );
        }
    }

    #[test]
    fn singular_paths_are_told_from_many() {
        for p in ["$.a", "$['a.b']", "$.a[0].b", "$[\"x*\"]"] {
            assert!(!selects_many(p), "{p}");
        }
        for p in ["$..a", "$.*", "$[0,1]", "$[0:2]", "$[?@.a]", "$.a[*]"] {
            assert!(selects_many(p), "{p}");
        }
    }
}
