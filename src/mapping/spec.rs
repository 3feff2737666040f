//! What a function or method declares about itself: name, parameters, examples, and the
//! code that runs it. The registry in `functions/` and `methods/` is a list of these.

use std::borrow::Cow;

use regex::Regex;

use super::exec::{Ctx, ExecError, V};
use super::program::{FuncCall, MethodCall};
use crate::value::Value;

/// A documented example; every one runs as a test.
#[derive(Debug, Clone, Copy)]
pub struct Example {
    pub mapping: &'static str,
    /// JSON text, or raw text when it is not JSON.
    pub input: &'static str,
    /// The expected payload: compared as JSON when both sides parse, else as text.
    /// An output starting with `error:` expects a failure containing the rest.
    pub output: &'static str,
}

pub const fn ex(mapping: &'static str, input: &'static str, output: &'static str) -> Example {
    Example {
        mapping,
        input,
        output,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Default {
    Required,
    /// Optional, and absent unless given.
    Absent,
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Value,
    /// A lambda (`x -> ...`) or a query run with `this` bound to each item.
    Lambda,
    /// A regular expression, compiled once when it is a literal.
    Regex,
}

#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub default: Default,
}

pub const fn p(name: &'static str) -> Param {
    Param {
        name,
        kind: Kind::Value,
        default: Default::Required,
    }
}
pub const fn opt(name: &'static str, default: Default) -> Param {
    Param {
        name,
        kind: Kind::Value,
        default,
    }
}
pub const fn lambda(name: &'static str) -> Param {
    Param {
        name,
        kind: Kind::Lambda,
        default: Default::Required,
    }
}
pub const fn re(name: &'static str) -> Param {
    Param {
        name,
        kind: Kind::Regex,
        default: Default::Required,
    }
}

/// Evaluated arguments, in declared order (named arguments already placed).
pub struct Args<'x> {
    pub vals: &'x [V<'x>],
    pub regexes: &'x [Option<Regex>],
}

pub type Res<T> = Result<T, String>;

pub fn type_err(expected: &str, got: &Value) -> String {
    format!("expected {expected} value, got {}", describe(got))
}

/// `string ("abc")`, the form Bloblang uses to name a value in an error.
pub fn describe(v: &Value) -> String {
    let mut text = v.to_text();
    if text.len() > 40 {
        let mut cut = 37;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    match v {
        Value::String(_) => format!("string ({:?})", text),
        Value::Null => "null".to_string(),
        other => format!("{} ({})", other.type_name(), text),
    }
}

static NULL: Value = Value::Null;

impl<'x> Args<'x> {
    pub fn len(&self) -> usize {
        self.vals.len()
    }
    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }
    /// The argument, or null when it was not given.
    pub fn get(&self, i: usize) -> &Value {
        match self.vals.get(i) {
            Some(v) => v.get(),
            None => &NULL,
        }
    }
    pub fn given(&self, i: usize) -> bool {
        matches!(self.vals.get(i), Some(v) if !v.is_absent())
    }
    pub fn str(&self, i: usize) -> Res<&str> {
        match self.get(i) {
            Value::String(s) => Ok(s),
            other => Err(format!("argument {}: {}", i + 1, type_err("string", other))),
        }
    }
    pub fn opt_str(&self, i: usize) -> Res<Option<&str>> {
        match self.get(i) {
            Value::Null => Ok(None),
            _ => self.str(i).map(Some),
        }
    }
    pub fn int(&self, i: usize) -> Res<i64> {
        super::exec::to_int(self.get(i)).map_err(|e| format!("argument {}: {e}", i + 1))
    }
    pub fn opt_int(&self, i: usize) -> Res<Option<i64>> {
        match self.get(i) {
            Value::Null => Ok(None),
            _ => self.int(i).map(Some),
        }
    }
    pub fn float(&self, i: usize) -> Res<f64> {
        super::exec::to_float(self.get(i)).map_err(|e| format!("argument {}: {e}", i + 1))
    }
    pub fn bool(&self, i: usize) -> Res<bool> {
        match self.get(i) {
            Value::Bool(b) => Ok(*b),
            other => Err(format!("argument {}: {}", i + 1, type_err("bool", other))),
        }
    }
    /// The regex argument: compiled when the mapping was, or now when it varies.
    pub fn regex(&self, i: usize) -> Res<Cow<'_, Regex>> {
        if let Some(Some(r)) = self.regexes.get(i) {
            return Ok(Cow::Borrowed(r));
        }
        let pat = self.str(i)?;
        Regex::new(pat)
            .map(Cow::Owned)
            .map_err(|e| format!("invalid regex: {e}"))
    }
}

/// Runs a method whose receiver and arguments are evaluated first. The result may borrow
/// from the receiver (`index`, `get`) so reads do not copy.
pub type EagerMethod = for<'b> fn(&'b Value, &Args<'_>) -> Res<V<'b>>;
/// Runs a method that controls evaluation itself (lambdas, `catch`, `or`).
pub type LazyMethod = for<'a> fn(&'a MethodCall, &Ctx<'a>) -> Result<V<'a>, ExecError>;
pub type FunctionImpl = for<'a> fn(&'a FuncCall, &Args<'_>, &Ctx<'a>) -> Res<V<'a>>;

#[derive(Clone, Copy)]
pub enum MethodImpl {
    Eager(EagerMethod),
    Lazy(LazyMethod),
}

pub struct MethodSpec {
    pub name: &'static str,
    pub category: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
    pub examples: &'static [Example],
    pub imp: MethodImpl,
}

pub struct FunctionSpec {
    pub name: &'static str,
    pub category: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
    pub examples: &'static [Example],
    /// Same arguments, same result, and no message needed: safe to fold and to use
    /// where no message exists.
    pub pure: bool,
    /// Reads the message (content, metadata, batch position).
    pub needs_message: bool,
    pub imp: FunctionImpl,
}

/// Shorthand for an eager method spec.
pub const fn method(
    name: &'static str,
    category: &'static str,
    description: &'static str,
    params: &'static [Param],
    examples: &'static [Example],
    f: EagerMethod,
) -> MethodSpec {
    MethodSpec {
        name,
        category,
        description,
        params,
        examples,
        imp: MethodImpl::Eager(f),
    }
}

pub const fn lazy_method(
    name: &'static str,
    category: &'static str,
    description: &'static str,
    params: &'static [Param],
    examples: &'static [Example],
    f: LazyMethod,
) -> MethodSpec {
    MethodSpec {
        name,
        category,
        description,
        params,
        examples,
        imp: MethodImpl::Lazy(f),
    }
}
