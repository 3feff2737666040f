//! The conditions an output message of a config test is checked against.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value as Json;

use crate::config::MappingText;
use crate::message::Batch;

/// The condition names, for errors.
pub const NAMES: &[&str] = &[
    "bloblang",
    "content_equals",
    "content_matches",
    "metadata_equals",
    "json_equals",
    "json_contains",
    "file_equals",
    "file_json_equals",
];

pub enum Condition {
    /// A mapping that must give `true`.
    Bloblang(MappingText),
    ContentEquals(String),
    ContentMatches(regex::Regex),
    MetadataEquals(BTreeMap<String, Json>),
    JsonEquals(Json),
    /// The payload is JSON holding at least this structure.
    JsonContains(Json),
    FileEquals(Vec<u8>),
    FileJsonEquals(Json),
}

impl Condition {
    /// Reads condition `name` from its value; files are relative to `base`.
    pub fn parse(name: &str, value: &Json, base: &Path) -> Result<Condition, String> {
        let text = || {
            value
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("`{name}` takes a string, found {}", kind(value)))
        };
        let file = |what: &str| -> Result<Vec<u8>, String> {
            let path = base.join(text()?);
            std::fs::read(&path)
                .map_err(|e| format!("`{what}`: cannot read {}: {e}", path.display()))
        };
        Ok(match name {
            "bloblang" => Condition::Bloblang(
                MappingText::parse(&text()?).map_err(|e| format!("`bloblang`: {e}"))?,
            ),
            "content_equals" => Condition::ContentEquals(match value {
                Json::String(s) => s.clone(),
                // A plain `content_equals: 42` means the text `42`.
                Json::Number(_) | Json::Bool(_) => value.to_string(),
                other => {
                    return Err(format!(
                        "`content_equals` takes a string, found {}",
                        kind(other)
                    ))
                }
            }),
            "content_matches" => Condition::ContentMatches(
                regex::Regex::new(&text()?).map_err(|e| format!("`content_matches`: {e}"))?,
            ),
            "metadata_equals" => match value {
                Json::Object(m) => Condition::MetadataEquals(m.clone().into_iter().collect()),
                other => {
                    return Err(format!(
                        "`metadata_equals` takes a mapping, found {}",
                        kind(other)
                    ))
                }
            },
            "json_equals" => Condition::JsonEquals(value.clone()),
            "json_contains" => Condition::JsonContains(value.clone()),
            "file_equals" => Condition::FileEquals(file("file_equals")?),
            "file_json_equals" => {
                let bytes = file("file_json_equals")?;
                Condition::FileJsonEquals(
                    serde_json::from_slice(&bytes)
                        .map_err(|e| format!("`file_json_equals`: the file is not JSON: {e}"))?,
                )
            }
            other => {
                return Err(format!(
                    "unknown condition `{other}`, expected one of {}",
                    NAMES.join(", ")
                ))
            }
        })
    }

    /// Checks message `i` of `batch`; the error says what differs.
    pub fn check(&self, batch: &Batch, i: usize) -> Result<(), String> {
        let msg = &batch[i];
        let content = || String::from_utf8_lossy(msg.payload()).into_owned();
        let json = || -> Result<Json, String> {
            serde_json::from_slice(msg.payload())
                .map_err(|e| format!("the content is not JSON ({e}): {}", content()))
        };
        match self {
            Condition::Bloblang(m) => match m.mapping().check(batch, i) {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!("`{}` is false for: {}", m.source(), content())),
                Err(e) => Err(format!("`{}` failed: {e}", m.source())),
            },
            Condition::ContentEquals(want) => {
                let got = content();
                if &got == want {
                    Ok(())
                } else {
                    Err(format!("expected {want:?}, got {got:?}"))
                }
            }
            Condition::ContentMatches(re) => {
                let got = content();
                if re.is_match(&got) {
                    Ok(())
                } else {
                    Err(format!("{got:?} does not match /{re}/"))
                }
            }
            Condition::MetadataEquals(want) => {
                for (key, value) in want {
                    let want_text = match value {
                        Json::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    match msg.meta_str(key) {
                        Some(got) if got == want_text => {}
                        Some(got) => {
                            return Err(format!(
                                "metadata `{key}`: expected {want_text:?}, got {got:?}"
                            ))
                        }
                        None => {
                            return Err(format!(
                                "metadata `{key}` is missing (expected {want_text:?})"
                            ))
                        }
                    }
                }
                Ok(())
            }
            Condition::JsonEquals(want) | Condition::FileJsonEquals(want) => {
                let got = json()?;
                if json_eq(&got, want) {
                    Ok(())
                } else {
                    Err(format!("expected {want}, got {got}"))
                }
            }
            Condition::JsonContains(want) => {
                let got = json()?;
                if json_contains(&got, want) {
                    Ok(())
                } else {
                    Err(format!("{got} does not contain {want}"))
                }
            }
            Condition::FileEquals(want) => {
                if msg.payload()[..] == want[..] {
                    Ok(())
                } else {
                    Err(format!(
                        "expected the file's content {:?}, got {:?}",
                        String::from_utf8_lossy(want),
                        content()
                    ))
                }
            }
        }
    }
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

/// Equality in which `1` and `1.0` are the same number.
fn json_eq(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Whether `got` holds `want`: objects hold every key of `want` with a value that holds
/// its value; arrays hold each item of `want` somewhere; other values are equal.
fn json_contains(got: &Json, want: &Json) -> bool {
    match (got, want) {
        (Json::Object(g), Json::Object(w)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| json_contains(gv, v))),
        (Json::Array(g), Json::Array(w)) => {
            w.iter().all(|v| g.iter().any(|gv| json_contains(gv, v)))
        }
        _ => json_eq(got, want),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use serde_json::json;

    fn check(name: &str, value: Json, payload: &str) -> Result<(), String> {
        let c = Condition::parse(name, &value, Path::new("."))?;
        let batch = vec![Message::new(payload.to_owned()).with_meta("topic", "orders")];
        c.check(&batch, 0)
    }

    #[test]
    fn each_condition_passes_and_fails() {
        assert!(check("content_equals", json!("abc"), "abc").is_ok());
        assert_eq!(
            check("content_equals", json!("abc"), "abd").unwrap_err(),
            r#"expected "abc", got "abd""#
        );
        assert!(check("content_matches", json!("^a.c$"), "abc").is_ok());
        assert!(check("content_matches", json!("^x"), "abc").is_err());
        assert!(check("metadata_equals", json!({"topic": "orders"}), "").is_ok());
        assert!(check("metadata_equals", json!({"topic": "x"}), "")
            .unwrap_err()
            .contains("expected \"x\", got \"orders\""));
        assert!(check("metadata_equals", json!({"nope": "x"}), "")
            .unwrap_err()
            .contains("missing"));
        assert!(check(
            "json_equals",
            json!({"a": 1, "b": [1.0]}),
            r#"{"b":[1],"a":1.0}"#
        )
        .is_ok());
        assert!(check("json_equals", json!({"a": 1}), r#"{"a":1,"b":2}"#).is_err());
        assert!(check("json_equals", json!({"a": 1}), "not json")
            .unwrap_err()
            .contains("not JSON"));
        assert!(check(
            "json_contains",
            json!({"a": {"b": 1}, "l": [2]}),
            r#"{"a":{"b":1,"c":2},"l":[1,2],"x":0}"#
        )
        .is_ok());
        assert!(check("json_contains", json!({"a": {"b": 2}}), r#"{"a":{"b":1}}"#).is_err());
        assert!(check("bloblang", json!("this.n > 1"), r#"{"n":2}"#).is_ok());
        assert!(check("bloblang", json!("this.n > 1"), r#"{"n":0}"#)
            .unwrap_err()
            .contains("is false"));
        assert!(check("bloblang", json!("this.n.foo("), "{}")
            .unwrap_err()
            .contains("bloblang"));
    }

    #[test]
    fn files_are_read_relative_to_the_test() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("want.json"), r#"{"a": [1, 2]}"#).unwrap();
        std::fs::write(dir.path().join("want.txt"), "hello").unwrap();
        let batch = vec![Message::new(r#"{"a":[1,2]}"#)];
        let c = Condition::parse("file_json_equals", &json!("want.json"), dir.path()).unwrap();
        assert!(c.check(&batch, 0).is_ok());
        let c = Condition::parse("file_equals", &json!("want.txt"), dir.path()).unwrap();
        assert!(c.check(&batch, 0).unwrap_err().contains("hello"));
        let e = Condition::parse("file_equals", &json!("missing.txt"), dir.path())
            .err()
            .unwrap();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn unknown_conditions_are_named() {
        let e = Condition::parse("content_equal", &json!("x"), Path::new("."))
            .err()
            .unwrap();
        assert!(e.contains("unknown condition `content_equal`") && e.contains("content_equals"));
    }
}
