//! The method library (`value.name(args)`), one family per file. Each entry is a
//! [`MethodSpec`](super::spec::MethodSpec) whose examples run as tests.

mod arrays;
mod crypto;
pub(crate) mod encoding;
mod general;
mod geoip;
mod jwt;
mod lambdas;
mod numbers;
mod objects;
mod parsing;
mod regexes;
mod strings;
mod structured;
mod timestamps;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

pub use lambdas::FILTER_MAP_EACH;
pub(crate) use timestamps::to_ts;

use super::exec::{eval, Ctx, ExecError, V};
use super::program::{Lambda, MethodCall};
use super::spec::{type_err, MethodSpec, Res};
use crate::value::Value;

/// The methods that read the host's files: left out of mappings that arrive as data.
pub fn host() -> impl Iterator<Item = &'static str> {
    geoip::SPECS.iter().map(|m| m.name)
}

/// Every method, in one explicit list.
pub fn all() -> Vec<&'static MethodSpec> {
    [
        general::SPECS,
        strings::SPECS,
        regexes::SPECS,
        numbers::SPECS,
        arrays::SPECS,
        lambdas::SPECS,
        objects::SPECS,
        structured::SPECS,
        timestamps::SPECS,
        encoding::SPECS,
        crypto::SPECS,
        parsing::SPECS,
        jwt::SPECS,
        geoip::SPECS,
    ]
    .into_iter()
    .flatten()
    .collect()
}

impl MethodCall {
    pub fn err(&self, msg: impl std::fmt::Display) -> ExecError {
        ExecError::new(format!("{}: {msg}", self.text))
    }
    pub fn recv<'a>(&'a self, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
        eval(&self.recv, cx)
    }
    /// A value argument, evaluated now.
    pub fn arg<'a>(&'a self, i: usize, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
        match self.args_values.get(i) {
            Some(Some(n)) => eval(n, cx),
            _ => Ok(V::Nothing),
        }
    }
    pub fn lambda(&self, i: usize) -> Result<&Lambda, ExecError> {
        match self.lambdas.get(i) {
            Some(Some(l)) => Ok(l),
            _ => Err(self.err("missing lambda argument")),
        }
    }
}

/// Values compiled or parsed from text (queries, schemas, mappings, keys), by that text,
/// so a literal argument is handled once rather than per message. Only successes are
/// kept, so an error is reported again each time. Cleared when full: a mapping with a
/// varying argument is rare.
pub(super) struct Memo<T>(LazyLock<Mutex<HashMap<String, Arc<T>>>>);

impl<T> Memo<T> {
    pub(super) const fn new() -> Self {
        Memo(LazyLock::new(|| Mutex::new(HashMap::new())))
    }
    pub(super) fn get(&self, key: &str, make: impl FnOnce() -> Res<T>) -> Res<Arc<T>> {
        if let Some(v) = self.0.lock().get(key) {
            return Ok(v.clone());
        }
        let made = Arc::new(make()?);
        let mut map = self.0.lock();
        if map.len() >= 64 {
            map.clear();
        }
        map.insert(key.to_string(), made.clone());
        Ok(made)
    }
}

/// Text of a string or bytes value.
pub(crate) fn text(v: &Value) -> Res<Cow<'_, str>> {
    match v {
        Value::String(s) => Ok(Cow::Borrowed(s)),
        Value::Bytes(b) => Ok(String::from_utf8_lossy(b)),
        other => Err(type_err("string", other)),
    }
}

/// Raw bytes of a string or bytes value.
pub(crate) fn raw(v: &Value) -> Res<Cow<'_, [u8]>> {
    match v {
        Value::String(s) => Ok(Cow::Borrowed(s.as_bytes())),
        Value::Bytes(b) => Ok(Cow::Borrowed(&b[..])),
        other => Err(type_err("string or bytes", other)),
    }
}

pub(crate) fn array(v: &Value) -> Res<&Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(type_err("array", other)),
    }
}

pub(crate) fn object(v: &Value) -> Res<&crate::value::Object> {
    match v {
        Value::Object(o) => Ok(o),
        other => Err(type_err("object", other)),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::mapping::spec::Example;
    use crate::mapping::{Env, Mapping};
    use crate::message::Message;
    use crate::value::Value;

    /// Runs one documented example and explains any mismatch.
    pub fn run_example(owner: &str, e: &Example) -> Result<(), String> {
        let m = Mapping::compile(e.mapping, &Env::default())
            .map_err(|d| format!("{owner}: example does not compile:\n{}\n{d}", e.mapping))?;
        let batch = vec![Message::new(e.input.as_bytes().to_vec())];
        let res = m.apply(&batch, 0);
        if let Some(want) = e.output.strip_prefix("error:") {
            return match res {
                Err(err) if err.to_string().contains(want) => Ok(()),
                Err(err) => Err(format!(
                    "{owner}: `{}` failed with {err}, wanted {want}",
                    e.mapping
                )),
                Ok(_) => Err(format!("{owner}: `{}` should fail with {want}", e.mapping)),
            };
        }
        let out = res
            .map_err(|err| format!("{owner}: `{}` on {} failed: {err}", e.mapping, e.input))?
            .ok_or_else(|| format!("{owner}: `{}` deleted the message", e.mapping))?;
        let got = out.payload();
        let same = match (Value::from_json(got), Value::from_json(e.output.as_bytes())) {
            (Ok(a), Ok(b)) => a == b,
            _ => &got[..] == e.output.as_bytes(),
        };
        if same {
            Ok(())
        } else {
            Err(format!(
                "{owner}: `{}` on {}\n   got: {}\n  want: {}",
                e.mapping,
                e.input,
                String::from_utf8_lossy(got),
                e.output
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::run_example;

    #[test]
    fn every_method_example_holds() {
        let mut failures = Vec::new();
        let mut n = 0;
        for m in super::all() {
            for e in m.examples {
                n += 1;
                if let Err(f) = run_example(m.name, e) {
                    failures.push(f);
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {n} examples failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn every_function_example_holds() {
        let mut failures = Vec::new();
        for f in crate::mapping::functions::all() {
            for e in f.examples {
                if let Err(msg) = run_example(f.name, e) {
                    failures.push(msg);
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = super::all().iter().map(|m| m.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(n, names.len(), "a method is registered twice");
    }
}
