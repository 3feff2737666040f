//! Golden tests for the mapping language: every `tests/mapping/<area>/<case>.blobl` is a
//! mapping whose leading comments say what it is run on and what must come out:
//!
//! ```text
//! # input: {"a":1}          the message payload (raw text when not JSON)
//! # meta: {"k":"v"}         optional input metadata
//! # output: {"b":2}         expected payload (compared as JSON when it parses)
//! # output_meta: {"k":"v"}  optional expected metadata subset
//! # error: some text        expected failure (compile or run) containing this text
//! # deleted                 the mapping deletes the message
//! ```

use std::path::{Path, PathBuf};

use sluice::mapping::{Env, Mapping, MappingError};
use sluice::message::Message;
use sluice::value::Value;

fn cases(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            cases(&p, out);
        } else if p.extension().is_some_and(|x| x == "blobl") {
            out.push(p);
        }
    }
}

fn header<'a>(src: &'a str, key: &str) -> Option<&'a str> {
    src.lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .find_map(|l| l.strip_prefix(&format!("# {key}:")).map(str::trim))
}

fn flag(src: &str, key: &str) -> bool {
    src.lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .any(|l| l.trim() == format!("# {key}"))
}

fn same(got: &[u8], want: &str) -> bool {
    match (Value::from_json(got), Value::from_json(want.as_bytes())) {
        (Ok(a), Ok(b)) => a == b,
        _ => got == want.as_bytes(),
    }
}

fn run_case(path: &Path) -> Result<(), String> {
    let src = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let env = Env::with_import_dir(path.parent().unwrap_or(Path::new(".")));
    let want_err = header(&src, "error");
    let m = match Mapping::compile(&src, &env) {
        Ok(m) => m,
        Err(d) => {
            return match want_err {
                Some(w) if d.to_string().contains(w) => Ok(()),
                _ => Err(format!("does not compile:\n{d}")),
            }
        }
    };
    let mut msg = Message::new(header(&src, "input").unwrap_or("").as_bytes().to_vec());
    if let Some(meta) = header(&src, "meta") {
        match Value::from_json(meta.as_bytes()) {
            Ok(Value::Object(o)) => *msg.metadata_mut() = o,
            _ => return Err("bad # meta header".into()),
        }
    }
    // Run on a message it owns, the mapping may edit the input in place: both ways must
    // give what the case wants.
    let owned = m.apply_owned(msg.clone()).map_err(|f| f.error);
    check(&src, m.apply(&[msg], 0), want_err)?;
    check(&src, owned, want_err).map_err(|e| format!("run in place: {e}"))
}

fn check(
    src: &str,
    result: Result<Option<Message>, MappingError>,
    want_err: Option<&str>,
) -> Result<(), String> {
    match (result, want_err) {
        (Err(e), Some(w)) if e.to_string().contains(w) => Ok(()),
        (Err(e), _) => Err(format!("failed: {e}")),
        (Ok(_), Some(w)) => Err(format!("should fail with {w:?}")),
        (Ok(None), None) if flag(src, "deleted") => Ok(()),
        (Ok(None), None) => Err("deleted the message".into()),
        (Ok(Some(_)), None) if flag(src, "deleted") => Err("should delete the message".into()),
        (Ok(Some(out)), None) => {
            if let Some(want) = header(src, "output") {
                if !same(out.payload(), want) {
                    return Err(format!(
                        "got {}\nwant {want}",
                        String::from_utf8_lossy(out.payload())
                    ));
                }
            }
            if let Some(want) = header(src, "output_meta") {
                let Ok(Value::Object(want)) = Value::from_json(want.as_bytes()) else {
                    return Err("bad # output_meta header".into());
                };
                for (k, v) in want {
                    if out.meta(&k) != Some(&v) {
                        return Err(format!("metadata {k}: got {:?}, want {v:?}", out.meta(&k)));
                    }
                }
            }
            Ok(())
        }
    }
}

#[test]
fn golden_mappings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mapping");
    let mut files = Vec::new();
    cases(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the golden files under {}",
        root.display()
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|p| run_case(p).err().map(|e| format!("{}: {e}", p.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} golden files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}
