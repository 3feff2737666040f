//! Runs compiled mappings: evaluates expressions over borrowed inputs and applies
//! statements to the document, variables and metadata being built.

use std::borrow::Cow;
use std::cmp::Ordering;

use bytes::Bytes;

use super::ast::{BinOp, Seg};
use super::program::{Bin, CStmt, Case, Lambda, Node, Program};
use super::spec::{describe, type_err, Args, MethodImpl};
use crate::message::{Message, Metadata};
use crate::value::{TooDeep, Value, MAX_DEPTH};

pub static NULL: Value = Value::Null;

/// The result of evaluating an expression: borrowed when it was only read, owned when
/// computed, or one of the two markers that change what an assignment does.
#[derive(Debug, Clone)]
pub enum V<'a> {
    Ref(&'a Value),
    Own(Value),
    /// `nothing()`, or no branch of an `if`/`match` taken: the assignment is skipped.
    /// Also stands for an optional argument that was not given.
    Nothing,
    /// `deleted()`: the assignment removes its target.
    Deleted,
}

impl<'a> V<'a> {
    pub fn get(&self) -> &Value {
        match self {
            V::Ref(v) => v,
            V::Own(v) => v,
            V::Nothing | V::Deleted => &NULL,
        }
    }
    pub fn into_owned(self) -> Value {
        match self {
            V::Ref(v) => v.clone(),
            V::Own(v) => v,
            V::Nothing | V::Deleted => Value::Null,
        }
    }
    /// Detaches the result from borrowed inputs, keeping the markers.
    pub fn detach<'b>(self) -> V<'b> {
        match self {
            V::Ref(v) => V::Own(v.clone()),
            V::Own(v) => V::Own(v),
            V::Nothing => V::Nothing,
            V::Deleted => V::Deleted,
        }
    }
    pub fn is_absent(&self) -> bool {
        matches!(self, V::Nothing)
    }
    pub fn is_marker(&self) -> bool {
        matches!(self, V::Nothing | V::Deleted)
    }
}

pub fn own<'a>(v: impl Into<Value>) -> Result<V<'a>, String> {
    Ok(V::Own(v.into()))
}

/// A runtime failure, already phrased for the user.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecError {
    pub msg: String,
}

impl From<super::budget::OverBudget> for ExecError {
    #[cold]
    fn from(e: super::budget::OverBudget) -> Self {
        ExecError::new(e.to_string())
    }
}

impl ExecError {
    pub fn new(msg: impl Into<String>) -> Self {
        ExecError { msg: msg.into() }
    }
}

/// What `this` refers to: a value, or the message whose payload is parsed on first use.
#[derive(Clone, Copy)]
pub enum This<'a> {
    Val(&'a Value),
    Msg(&'a Message),
}

/// The message a mapping runs against.
#[derive(Clone, Copy)]
pub struct MsgView<'a> {
    pub msg: Option<&'a Message>,
    /// The whole batch, for `from` and `from_all`.
    pub batch: Option<&'a [Message]>,
    /// The payload when `msg` is not given (mutation takes the message apart).
    pub payload: Option<&'a Bytes>,
    pub meta_in: Option<&'a Metadata>,
    pub error: Option<&'a str>,
    pub index: usize,
    pub size: usize,
}

impl<'a> MsgView<'a> {
    pub const NONE: MsgView<'static> = MsgView {
        msg: None,
        batch: None,
        payload: None,
        meta_in: None,
        error: None,
        index: 0,
        size: 0,
    };

    pub fn of(batch: &'a [Message], index: usize) -> Self {
        let msg = batch.get(index);
        MsgView {
            msg,
            batch: Some(batch),
            payload: None,
            meta_in: msg.map(Message::metadata),
            error: msg.and_then(Message::error),
            index,
            size: batch.len(),
        }
    }
    pub fn has_message(&self) -> bool {
        self.msg.is_some() || self.payload.is_some()
    }
    pub fn payload(&self) -> Option<&'a Bytes> {
        match self.msg {
            Some(m) => Some(m.payload()),
            None => self.payload,
        }
    }
}

/// A named lambda parameter bound to a value, chained to the enclosing ones.
pub struct Scope<'a> {
    pub slot: u32,
    pub val: &'a Value,
    pub parent: Option<&'a Scope<'a>>,
}

#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub this: This<'a>,
    pub root: Option<&'a Value>,
    pub vars: &'a [Option<Value>],
    pub scope: Option<&'a Scope<'a>>,
    pub meta: &'a Metadata,
    pub msg: MsgView<'a>,
    pub prog: &'a Program,
}

impl<'a> Ctx<'a> {
    pub fn this(&self) -> Result<&'a Value, ExecError> {
        match self.this {
            This::Val(v) => Ok(v),
            This::Msg(m) => m
                .structured()
                .map_err(|e| ExecError::new(format!("unable to reference `this`: {e}"))),
        }
    }
    /// The same context with `this` rebound.
    pub fn with_this<'b>(&self, v: &'b Value) -> Ctx<'b>
    where
        'a: 'b,
    {
        Ctx {
            this: This::Val(v),
            ..*self
        }
    }
}

// ---- conversions shared by the library ---------------------------------------------------

pub fn to_float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Int(i) => Ok(*i as f64),
        Value::Float(f) => Ok(*f),
        Value::BigInt(d) => d.parse().map_err(|_| type_err("number", v)),
        other => Err(type_err("number", other)),
    }
}

pub fn to_int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(f) if f.is_finite() => Ok(f.trunc() as i64),
        Value::BigInt(d) => Err(format!("{d} does not fit a 64-bit integer")),
        other => Err(type_err("number", other)),
    }
}

/// Loose equality: numbers compare by value whatever their representation.
pub fn values_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Int(_) | Value::Float(_), Value::Int(_) | Value::Float(_)) => {
            to_float(a).ok() == to_float(b).ok()
        }
        (Value::BigInt(x), Value::BigInt(y)) => x == y,
        (Value::BigInt(_), Value::Int(_) | Value::Float(_))
        | (Value::Int(_) | Value::Float(_), Value::BigInt(_)) => {
            to_float(a).ok() == to_float(b).ok()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| values_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && values_eq(va, vb))
        }
        (Value::String(s), Value::Bytes(b)) | (Value::Bytes(b), Value::String(s)) => {
            s.as_bytes() == &b[..]
        }
        _ => a == b,
    }
}

/// Ordering for `<`, `sort` and friends: numbers, strings and timestamps.
pub fn compare(a: &Value, b: &Value) -> Result<Ordering, String> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (
            Value::Int(_) | Value::Float(_) | Value::BigInt(_),
            Value::Int(_) | Value::Float(_) | Value::BigInt(_),
        ) => {
            let (x, y) = (to_float(a)?, to_float(b)?);
            x.partial_cmp(&y)
                .ok_or_else(|| "cannot compare NaN".to_string())
        }
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        (Value::Bytes(x), Value::Bytes(y)) => Ok(x.cmp(y)),
        (Value::Timestamp(x), Value::Timestamp(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        _ => Err(format!(
            "cannot compare types {} and {}",
            describe(a),
            describe(b)
        )),
    }
}

/// A field of an object or, for a numeric name, an item of an array; null otherwise.
pub fn field<'v>(v: &'v Value, name: &str) -> &'v Value {
    match v {
        Value::Object(o) => o.get(name).unwrap_or(&NULL),
        Value::Array(a) => match name.parse::<usize>() {
            Ok(i) => a.get(i).unwrap_or(&NULL),
            Err(_) => &NULL,
        },
        _ => &NULL,
    }
}

fn owned_field(v: Value, name: &str) -> Value {
    match v {
        Value::Object(mut o) => o.remove(name).unwrap_or(Value::Null),
        Value::Array(mut a) => match name.parse::<usize>() {
            Ok(i) if i < a.len() => a.swap_remove(i),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// The error for an index past either end of a sequence.
pub fn out_of_bounds(i: i64, what: &str, len: usize) -> String {
    format!("index {i} is out of bounds for {what} of length {len}")
}

pub fn norm_index(i: i64, len: usize) -> Option<usize> {
    let len = len as i64;
    let i = if i < 0 { len + i } else { i };
    (0..len).contains(&i).then_some(i as usize)
}

/// Bounds of a slice, clamped, with negative positions counted from the end.
pub fn slice_bounds(
    len: usize,
    from: Option<i64>,
    to: Option<i64>,
) -> Result<(usize, usize), String> {
    let n = len as i64;
    let fix = |i: i64| if i < 0 { (n + i).max(0) } else { i.min(n) };
    let s = fix(from.unwrap_or(0));
    let e = fix(to.unwrap_or(n));
    if s > e {
        return Err(format!(
            "lower slice bound {s} must not exceed upper bound {e}"
        ));
    }
    Ok((s as usize, e as usize))
}

pub fn slice_value(v: &Value, from: Option<i64>, to: Option<i64>) -> Result<Value, String> {
    match v {
        Value::String(s) => {
            // Slices count characters so a cut never splits one.
            let chars: Vec<char> = s.chars().collect();
            let (a, b) = slice_bounds(chars.len(), from, to)?;
            Ok(Value::String(chars[a..b].iter().collect()))
        }
        Value::Bytes(bs) => {
            let (a, b) = slice_bounds(bs.len(), from, to)?;
            Ok(Value::Bytes(bs.slice(a..b)))
        }
        Value::Array(arr) => {
            let (a, b) = slice_bounds(arr.len(), from, to)?;
            Ok(Value::Array(arr[a..b].to_vec()))
        }
        other => Err(type_err("array, string or bytes", other)),
    }
}

/// The positions a slice with a step takes, as Python's slices do: negative positions count
/// from the end, bounds are clamped, and a negative step walks backwards from the end.
pub fn step_positions(
    len: usize,
    from: Option<i64>,
    to: Option<i64>,
    step: i64,
) -> Result<Vec<usize>, String> {
    if step == 0 {
        return Err("slice step cannot be zero".into());
    }
    let n = len as i64;
    let fix = |i: i64, lo: i64, hi: i64| {
        let i = if i < 0 { i + n } else { i };
        i.clamp(lo, hi)
    };
    let mut out = Vec::new();
    if step > 0 {
        let mut i = from.map_or(0, |i| fix(i, 0, n));
        let end = to.map_or(n, |i| fix(i, 0, n));
        while i < end {
            out.push(i as usize);
            i = match i.checked_add(step) {
                Some(x) => x,
                None => break,
            };
        }
    } else {
        let mut i = from.map_or(n - 1, |i| fix(i, -1, n - 1));
        let end = to.map_or(-1, |i| fix(i, -1, n - 1));
        while i > end {
            out.push(i as usize);
            i = match i.checked_add(step) {
                Some(x) => x,
                None => break,
            };
        }
    }
    Ok(out)
}

/// `x[from:to:step]` over a string (by character), bytes or an array.
pub fn slice_step(
    v: &Value,
    from: Option<i64>,
    to: Option<i64>,
    step: i64,
) -> Result<Value, String> {
    match v {
        Value::String(s) => {
            let chars: Vec<char> = s.chars().collect();
            let at = step_positions(chars.len(), from, to, step)?;
            Ok(Value::String(at.into_iter().map(|i| chars[i]).collect()))
        }
        Value::Bytes(bs) => {
            let at = step_positions(bs.len(), from, to, step)?;
            Ok(Value::Bytes(
                at.into_iter().map(|i| bs[i]).collect::<Vec<u8>>().into(),
            ))
        }
        Value::Array(arr) => {
            let at = step_positions(arr.len(), from, to, step)?;
            Ok(Value::Array(
                at.into_iter().map(|i| arr[i].clone()).collect(),
            ))
        }
        other => Err(type_err("array, string or bytes", other)),
    }
}

// ---- evaluation --------------------------------------------------------------------------

/// Evaluates a node. The common cases are handled here with a small stack frame; the
/// rest (and their larger locals) live in [`eval_other`], so deep recursion stays cheap.
pub fn eval<'a>(node: &'a Node, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    match node {
        Node::Lit(v) => Ok(V::Ref(v)),
        Node::This => Ok(V::Ref(cx.this()?)),
        Node::Param(slot) => {
            let mut s = cx.scope;
            while let Some(sc) = s {
                if sc.slot == *slot {
                    return Ok(V::Ref(sc.val));
                }
                s = sc.parent;
            }
            Err(ExecError::new("lambda parameter used outside its lambda"))
        }
        Node::Path(base, path) => match eval(base, cx)? {
            V::Ref(mut v) => {
                for name in path.iter() {
                    v = field(v, name);
                }
                Ok(V::Ref(v))
            }
            V::Own(mut v) => {
                for name in path.iter() {
                    v = owned_field(v, name);
                }
                Ok(V::Own(v))
            }
            _ => Ok(V::Own(Value::Null)),
        },
        Node::Bin(b) => eval_bin(b, cx),
        Node::Method(call) => {
            super::budget::step()?;
            let v = match call.spec.imp {
                MethodImpl::Lazy(f) => f(call, cx),
                MethodImpl::Eager(f) => eval_eager(call, f, cx),
            }?;
            within_bounds(v, &call.text)
        }
        _ => eval_other(node, cx),
    }
}

/// Refuses a computed array or object that nests deeper than [`MAX_DEPTH`] and, in a
/// tenant's run, a computed value larger than the budget's value cap. Every node that
/// builds a value (methods, functions, literals; `+` checks before it builds) checks its
/// result here, so no value in flight is ever more than a few levels past the depth
/// limit, nor past the cap by more than one step's growth (borrowed results are parts of
/// values that were checked when they were built).
#[inline]
fn within_bounds<'a>(v: V<'a>, what: &str) -> Result<V<'a>, ExecError> {
    match &v {
        V::Own(c @ (Value::Array(_) | Value::Object(_))) if c.nesting_exceeds(MAX_DEPTH) => {
            Err(too_deep(what))
        }
        V::Own(Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_)) => Ok(v),
        V::Own(built) => match super::budget::check(built) {
            Ok(()) => Ok(v),
            Err(e) => Err(too_large(what, e)),
        },
        _ => Ok(v),
    }
}

#[cold]
fn too_large(what: &str, e: super::budget::TooLarge) -> ExecError {
    ExecError::new(format!("{what}: {e}"))
}

#[cold]
fn too_deep(what: &str) -> ExecError {
    ExecError::new(format!("{what}: {TooDeep}"))
}

#[inline(never)]
fn eval_eager<'a>(
    call: &'a super::program::MethodCall,
    f: super::spec::EagerMethod,
    cx: &Ctx<'a>,
) -> Result<V<'a>, ExecError> {
    let recv = eval(&call.recv, cx)?;
    let mut vals = ArgVec::new();
    eval_args(&call.args_values, cx, &mut vals)?;
    let args = Args {
        vals: &vals,
        regexes: &call.regexes,
    };
    let wrap = |e: String| ExecError::new(format!("{}: {e}", call.text));
    match recv {
        // Results borrow only from the receiver, so a borrowed receiver keeps them borrowed.
        V::Ref(r) => f(r, &args).map_err(wrap),
        V::Own(o) => f(&o, &args).map(V::detach).map_err(wrap),
        V::Nothing | V::Deleted => f(&NULL, &args).map(V::detach).map_err(wrap),
    }
}

#[inline(never)]
fn eval_other<'a>(node: &'a Node, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    match node {
        // Handled by `eval`, which calls here only for the other nodes.
        Node::Lit(_)
        | Node::This
        | Node::Param(_)
        | Node::Path(..)
        | Node::Bin(_)
        | Node::Method(_) => eval(node, cx),
        Node::Root => Ok(V::Ref(cx.root.unwrap_or(&NULL))),
        Node::Index(ix) => {
            let target = eval(&ix.target, cx)?;
            let i = eval(&ix.index, cx)?;
            let res = match (target.get(), i.get()) {
                (Value::Object(o), Value::String(k)) => {
                    Ok(o.get(k).cloned().unwrap_or(Value::Null))
                }
                (Value::Array(a), idx @ (Value::Int(_) | Value::Float(_))) => {
                    let n = to_int(idx).map_err(|e| ExecError::new(format!("{}: {e}", ix.text)))?;
                    match norm_index(n, a.len()) {
                        Some(k) => Ok(a[k].clone()),
                        None => Err(out_of_bounds(n, "an array", a.len())),
                    }
                }
                (Value::String(s), idx @ (Value::Int(_) | Value::Float(_))) => {
                    let n = to_int(idx).map_err(|e| ExecError::new(format!("{}: {e}", ix.text)))?;
                    let chars: Vec<char> = s.chars().collect();
                    match norm_index(n, chars.len()) {
                        Some(k) => Ok(Value::String(chars[k].to_string())),
                        None => Err(out_of_bounds(n, "a string", chars.len())),
                    }
                }
                (Value::Bytes(b), idx @ (Value::Int(_) | Value::Float(_))) => {
                    let n = to_int(idx).map_err(|e| ExecError::new(format!("{}: {e}", ix.text)))?;
                    match norm_index(n, b.len()) {
                        Some(k) => Ok(Value::Int(b[k] as i64)),
                        None => Err(out_of_bounds(n, "bytes", b.len())),
                    }
                }
                (Value::Null, _) => Ok(Value::Null),
                (t, i) => Err(format!("cannot index {} with {}", describe(t), describe(i))),
            };
            // Borrow instead of copying when the target was borrowed and the key is plain.
            res.map(V::Own)
                .map_err(|e| ExecError::new(format!("{}: {e}", ix.text)))
        }
        Node::Slice(sl) => {
            let target = eval(&sl.target, cx)?;
            let bound = |n: &'a Option<Node>| -> Result<Option<i64>, ExecError> {
                match n {
                    None => Ok(None),
                    Some(n) => {
                        let v = eval(n, cx)?;
                        to_int(v.get())
                            .map(Some)
                            .map_err(|e| ExecError::new(format!("{}: {e}", sl.text)))
                    }
                }
            };
            let (a, b) = (bound(&sl.from)?, bound(&sl.to)?);
            if let Some(step) = bound(&sl.step)? {
                return slice_step(target.get(), a, b, step)
                    .map(V::Own)
                    .map_err(|e| ExecError::new(format!("{}: {e}", sl.text)));
            }
            slice_value(target.get(), a, b)
                .map(V::Own)
                .map_err(|e| ExecError::new(format!("{}: {e}", sl.text)))
        }
        Node::Meta(key) => Ok(V::Ref(cx.meta.get(&**key).unwrap_or(&NULL))),
        Node::MetaAll => Ok(V::Own(Value::Object(cx.meta.clone()))),
        Node::Var(slot, name) => match cx.vars.get(*slot) {
            Some(Some(v)) => Ok(V::Ref(v)),
            _ => Err(ExecError::new(format!("variable `${name}` is undefined"))),
        },
        Node::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            // `[$a, $a, $a, ...]` copies a value per item: counted as it is built.
            let mut meter = super::budget::Meter::new();
            for it in items {
                match eval(it, cx)? {
                    V::Deleted | V::Nothing => {}
                    v => {
                        meter
                            .add_value(v.get())
                            .map_err(|e| too_large("array literal", e))?;
                        out.push(v.into_owned());
                    }
                }
            }
            within_bounds(V::Own(Value::Array(out)), "array literal")
        }
        Node::Object(entries) => {
            let mut out = crate::value::Object::new();
            let mut meter = super::budget::Meter::new();
            for (k, v) in entries {
                let key = eval(k, cx)?;
                let key = match key.get() {
                    Value::String(s) => s.clone(),
                    other => {
                        return Err(ExecError::new(format!(
                            "object keys must be strings, received: {}",
                            go_type(other)
                        )))
                    }
                };
                match eval(v, cx)? {
                    V::Deleted | V::Nothing => {}
                    val => {
                        let first = if out.is_empty() {
                            crate::value::OBJECT
                        } else {
                            0
                        };
                        meter
                            .add(crate::value::KEY.saturating_add(key.len()) + first)
                            .and_then(|()| meter.add_value(val.get()))
                            .map_err(|e| too_large("object literal", e))?;
                        out.insert(key, val.into_owned());
                    }
                }
            }
            within_bounds(V::Own(Value::Object(out)), "object literal")
        }
        Node::Not(inner) => match eval(inner, cx)?.get() {
            Value::Bool(b) => Ok(V::Own(Value::Bool(!b))),
            other => Err(ExecError::new(format!(
                "cannot negate: {}",
                type_err("bool", other)
            ))),
        },
        Node::Neg(inner) => match eval(inner, cx)?.get() {
            Value::Int(i) => Ok(V::Own(Value::Int(i.wrapping_neg()))),
            Value::Float(f) => Ok(V::Own(Value::Float(-f))),
            other => Err(ExecError::new(format!(
                "cannot negate: {}",
                type_err("number", other)
            ))),
        },
        Node::If(branches, otherwise) => {
            for (cond, body) in branches.iter() {
                if truthy(cond, cx)? {
                    return eval(body, cx);
                }
            }
            match otherwise {
                Some(e) => eval(e, cx),
                None => Ok(V::Nothing),
            }
        }
        Node::Match(m) => {
            let subject;
            let inner_cx;
            let mcx = match &m.subject {
                Some(s) => {
                    subject = eval(s, cx)?;
                    inner_cx = Ctx {
                        this: This::Val(subject.get()),
                        ..*cx
                    };
                    &inner_cx
                }
                None => cx,
            };
            for (case, body) in &m.cases {
                let hit = match case {
                    Case::Any => true,
                    Case::Eq(v) => values_eq(mcx.this()?, v),
                    Case::Cond(c) => match eval(c, mcx)?.get() {
                        Value::Bool(b) => *b,
                        other => values_eq(mcx.this()?, other),
                    },
                };
                if hit {
                    return eval(body, mcx).map(V::detach);
                }
            }
            // No case matched: null, as in Bloblang (an `if` without `else` is skipped).
            Ok(V::Own(Value::Null))
        }
        Node::Func(call) => {
            super::budget::step()?;
            let mut vals = ArgVec::new();
            eval_args(&call.args, cx, &mut vals)?;
            let args = Args {
                vals: &vals,
                regexes: &call.regexes,
            };
            let v = (call.spec.imp)(call, &args, cx).map_err(|e| {
                // `throw`'s message is the mapping's own words, passed on as written.
                if call.spec.name == "throw" {
                    ExecError::new(e)
                } else {
                    ExecError::new(format!("{}: {e}", call.text))
                }
            })?;
            within_bounds(v, &call.text)
        }
        Node::Context(c) => {
            let recv = eval(&c.0, cx)?;
            call_lambda(&c.1, recv.get(), cx).map(V::detach)
        }
        Node::Deleted => Ok(V::Deleted),
        Node::Nothing => Ok(V::Nothing),
    }
}

/// Most calls take a few arguments: keep them on the stack.
type ArgVec<'a> = smallvec::SmallVec<[V<'a>; 4]>;

/// Fills `out` in place: returning the vector would copy all of its inline storage.
fn eval_args<'a>(
    args: &'a [Option<Node>],
    cx: &Ctx<'a>,
    out: &mut ArgVec<'a>,
) -> Result<(), ExecError> {
    for a in args {
        out.push(match a {
            Some(n) => eval(n, cx)?,
            None => V::Nothing,
        });
    }
    Ok(())
}

/// Runs a lambda with `item`: bound to its parameter, or as `this` when it has none.
pub fn call_lambda<'a, 'b>(l: &'b Lambda, item: &'b Value, cx: &Ctx<'a>) -> Result<V<'b>, ExecError>
where
    'a: 'b,
{
    super::budget::step()?;
    match l.param {
        Some(slot) => {
            let scope = Scope {
                slot,
                val: item,
                parent: cx.scope,
            };
            let inner = Ctx {
                scope: Some(&scope),
                ..*cx
            };
            eval(&l.body, &inner).map(V::detach)
        }
        None => {
            let inner = cx.with_this(item);
            eval(&l.body, &inner)
        }
    }
}

/// Runs a two-parameter lambda (fold's tally and value) with an object `{tally, value}`
/// as Bloblang does.
pub fn truthy<'a>(cond: &'a Node, cx: &Ctx<'a>) -> Result<bool, ExecError> {
    match eval(cond, cx)?.get() {
        Value::Bool(b) => Ok(*b),
        other => Err(ExecError::new(format!(
            "expected bool condition, got {}",
            describe(other)
        ))),
    }
}

fn eval_bin<'a>(b: &'a Bin, cx: &Ctx<'a>) -> Result<V<'a>, ExecError> {
    match b.op {
        BinOp::Pipe => match eval(&b.lhs, cx) {
            Ok(v) if !v.get().eq(&Value::Null) && !v.is_marker() => Ok(v),
            _ => eval(&b.rhs, cx),
        },
        BinOp::And | BinOp::Or => {
            let l = eval(&b.lhs, cx)?;
            let lb = match l.get() {
                Value::Bool(x) => *x,
                other => return Err(bin_err(b, other, None)),
            };
            if (b.op == BinOp::And && !lb) || (b.op == BinOp::Or && lb) {
                return Ok(V::Own(Value::Bool(lb)));
            }
            let r = eval(&b.rhs, cx)?;
            match r.get() {
                Value::Bool(x) => Ok(V::Own(Value::Bool(*x))),
                other => Err(bin_err(b, &Value::Bool(lb), Some(other))),
            }
        }
        BinOp::Add => {
            let l = eval(&b.lhs, cx)?;
            let r = eval(&b.rhs, cx)?;
            // Appending to a string built earlier in the same expression reuses its buffer.
            match (l, r.get()) {
                (V::Own(Value::String(mut s)), Value::String(t)) => {
                    s.push_str(t);
                    Ok(V::Own(Value::String(s)))
                }
                (l, _) => binary(b.op, l.get(), r.get())
                    .map(V::Own)
                    .map_err(|e| match e {
                        Some(m) => ExecError::new(format!("{}: {m}", b.text)),
                        None => bin_err(b, l.get(), Some(r.get())),
                    }),
            }
        }
        _ => {
            let l = eval(&b.lhs, cx)?;
            let r = eval(&b.rhs, cx)?;
            binary(b.op, l.get(), r.get())
                .map(V::Own)
                .map_err(|e| match e {
                    Some(m) => ExecError::new(format!("{}: {m}", b.text)),
                    None => bin_err(b, l.get(), Some(r.get())),
                })
        }
    }
}

fn bin_err(b: &Bin, l: &Value, r: Option<&Value>) -> ExecError {
    let verb = match b.op {
        BinOp::Add => "add",
        BinOp::Sub => "subtract",
        BinOp::Mul => "multiply",
        BinOp::Div => "divide",
        BinOp::Mod => "modulo",
        BinOp::And | BinOp::Or => "apply boolean operator to",
        _ => "compare",
    };
    match r {
        Some(r) => ExecError::new(format!(
            "cannot {verb} types {} (from `{}`) and {} (from `{}`)",
            describe(l),
            b.ltext,
            describe(r),
            b.rtext
        )),
        None => ExecError::new(format!(
            "cannot {verb} {} (from `{}`): expected bool",
            describe(l),
            b.ltext
        )),
    }
}

/// Arithmetic and comparison. `Err(None)` means the types do not fit the operator.
/// The longest string or bytes value `+` makes. A loop that adds a value to itself
/// doubles it each step: a few dozen steps, well within any time budget, would
/// otherwise take all of the host's memory.
pub const MAX_CONCAT: usize = 256 << 20;

fn concat_fits(a: usize, b: usize) -> Result<(), Option<String>> {
    let len = a.saturating_add(b);
    if len > MAX_CONCAT {
        return Err(Some(format!(
            "the result would be longer than {MAX_CONCAT} bytes"
        )));
    }
    // A tenant's run is held to less, before the copy is made.
    super::budget::fits(len.saturating_add(crate::value::NODE)).map_err(|e| Some(e.to_string()))
}

pub fn binary(op: BinOp, l: &Value, r: &Value) -> Result<Value, Option<String>> {
    use Value::{Float, Int};
    let num = |v: &Value| matches!(v, Int(_) | Float(_) | Value::BigInt(_));
    Ok(match op {
        BinOp::Eq => Value::Bool(values_eq(l, r)),
        BinOp::Ne => Value::Bool(!values_eq(l, r)),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let ord = compare(l, r).map_err(|_| None)?;
            Value::Bool(match op {
                BinOp::Lt => ord == Ordering::Less,
                BinOp::Le => ord != Ordering::Greater,
                BinOp::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            })
        }
        BinOp::Add => match (l, r) {
            (Int(a), Int(b)) => a
                .checked_add(*b)
                .map(Int)
                .unwrap_or(Float(*a as f64 + *b as f64)),
            (a, b) if num(a) && num(b) => {
                Float(to_float(a).map_err(Some)? + to_float(b).map_err(Some)?)
            }
            (Value::String(a), Value::String(b)) => {
                concat_fits(a.len(), b.len())?;
                // Room to spare: concatenations usually chain (`a + "-" + b`).
                let mut s = String::with_capacity(a.len() + b.len() + 32);
                s.push_str(a);
                s.push_str(b);
                Value::String(s)
            }
            (Value::Bytes(a), Value::Bytes(b)) => {
                concat_fits(a.len(), b.len())?;
                let mut v = a.to_vec();
                v.extend_from_slice(b);
                Value::Bytes(Bytes::from(v))
            }
            _ => return Err(None),
        },
        BinOp::Sub => match (l, r) {
            (Int(a), Int(b)) => a
                .checked_sub(*b)
                .map(Int)
                .unwrap_or(Float(*a as f64 - *b as f64)),
            (a, b) if num(a) && num(b) => {
                Float(to_float(a).map_err(Some)? - to_float(b).map_err(Some)?)
            }
            (Value::Timestamp(a), Value::Timestamp(b)) => {
                Int((*a - *b).num_nanoseconds().unwrap_or(i64::MAX))
            }
            _ => return Err(None),
        },
        BinOp::Mul => match (l, r) {
            (Int(a), Int(b)) => a
                .checked_mul(*b)
                .map(Int)
                .unwrap_or(Float(*a as f64 * *b as f64)),
            (a, b) if num(a) && num(b) => {
                Float(to_float(a).map_err(Some)? * to_float(b).map_err(Some)?)
            }
            _ => return Err(None),
        },
        BinOp::Div => {
            if !(num(l) && num(r)) {
                return Err(None);
            }
            let d = to_float(r).map_err(Some)?;
            if d == 0.0 {
                return Err(Some("attempted to divide by zero".into()));
            }
            Float(to_float(l).map_err(Some)? / d)
        }
        BinOp::Mod => {
            if !(num(l) && num(r)) {
                return Err(None);
            }
            let d = to_int(r).map_err(Some)?;
            if d == 0 {
                return Err(Some("attempted to divide by zero".into()));
            }
            Int(to_int(l).map_err(Some)?.wrapping_rem(d))
        }
        BinOp::And | BinOp::Or | BinOp::Pipe => return Err(None),
    })
}

// ---- statements --------------------------------------------------------------------------

/// What a mapping is building: its root, variables and output metadata.
pub struct Frame<'m> {
    pub root: Slot,
    pub vars: Vec<Option<Value>>,
    pub meta: Cow<'m, Metadata>,
    /// In a mutation `this` is the document being changed.
    pub this_is_root: bool,
}

/// The document under construction.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot {
    Nothing,
    Deleted,
    Val(Value),
}

impl Slot {
    pub fn as_value(&self) -> Option<&Value> {
        match self {
            Slot::Val(v) => Some(v),
            _ => None,
        }
    }
}

/// A failed statement: which line and what went wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct StmtError {
    pub line: usize,
    pub what: &'static str,
    pub msg: String,
}

impl Frame<'_> {
    /// A context over the frame as it stands: in a mutation, `this` is the document
    /// being built.
    fn ctx<'c>(&'c self, prog: &'c Program, this: This<'c>, msg: MsgView<'c>) -> Ctx<'c> {
        let root = self.root.as_value();
        Ctx {
            this: if self.this_is_root {
                This::Val(root.unwrap_or(&NULL))
            } else {
                this
            },
            root,
            vars: &self.vars,
            scope: None,
            meta: &self.meta,
            msg,
            prog,
        }
    }

    /// Evaluates `value`, detached from the frame so that the frame can then change.
    fn eval_detached(
        &self,
        prog: &Program,
        this: This<'_>,
        msg: MsgView<'_>,
        value: &Node,
    ) -> Result<V<'static>, ExecError> {
        eval(value, &self.ctx(prog, this, msg)).map(V::detach)
    }
}

fn stmt_err(line: usize, what: &'static str) -> impl Fn(String) -> StmtError {
    move |msg| StmtError { line, what, msg }
}

pub fn run<'m>(
    prog: &Program,
    stmts: &[CStmt],
    fr: &mut Frame<'m>,
    this: This<'_>,
    msg: MsgView<'_>,
) -> Result<(), StmtError> {
    for st in stmts {
        super::budget::step().map_err(|e| StmtError {
            line: st.line(),
            what: "statement",
            msg: e.to_string(),
        })?;
        match st {
            CStmt::Assign {
                target,
                value,
                line,
            } => {
                let err = stmt_err(*line, "assignment");
                let v = fr
                    .eval_detached(prog, this, msg, value)
                    .map_err(|e| err(e.msg))?;
                stored(&v).map_err(|e| err(e.to_string()))?;
                assign(&mut fr.root, target, v).map_err(err)?;
            }
            CStmt::Let { slot, value, line } => {
                let v = fr
                    .eval_detached(prog, this, msg, value)
                    .map_err(|e| stmt_err(*line, "assignment")(e.msg))?;
                stored(&v).map_err(|e| stmt_err(*line, "assignment")(e.to_string()))?;
                match v {
                    V::Nothing => {}
                    V::Deleted => fr.vars[*slot] = None,
                    v => fr.vars[*slot] = Some(v.into_owned()),
                }
            }
            CStmt::Meta { key, value, line } => {
                let err = stmt_err(*line, "assignment");
                let v = fr
                    .eval_detached(prog, this, msg, value)
                    .map_err(|e| err(e.msg))?;
                stored(&v).map_err(|e| err(e.to_string()))?;
                match (key, v) {
                    (_, V::Nothing) => {}
                    (Some(k), V::Deleted) => {
                        fr.meta.to_mut().remove(k);
                    }
                    (Some(k), v) => {
                        fr.meta.to_mut().insert(k.clone(), v.into_owned());
                    }
                    (None, V::Deleted) => fr.meta.to_mut().clear(),
                    (None, v) => match v.into_owned() {
                        Value::Object(o) => *fr.meta.to_mut() = o,
                        Value::Null => fr.meta.to_mut().clear(),
                        other => {
                            return Err(err(format!(
                                "setting root meta object requires object value, received: {}",
                                other.type_name()
                            )))
                        }
                    },
                }
            }
            CStmt::If {
                branches,
                otherwise,
                line,
            } => {
                let mut chosen = None;
                for (cond, body) in branches {
                    let hit = truthy(cond, &fr.ctx(prog, this, msg))
                        .map_err(|e| stmt_err(*line, "if statement")(e.msg))?;
                    if hit {
                        chosen = Some(body);
                        break;
                    }
                }
                if let Some(body) = chosen.or(otherwise.as_ref()) {
                    run(prog, body, fr, this, msg)?;
                }
            }
        }
    }
    Ok(())
}

/// Counts what an assignment stores against the run's budget: values built were held to
/// the value cap when built, but a run that assigns copies of them again and again
/// would fill memory within its time budget, so what it stores adds up.
fn stored(v: &V<'_>) -> Result<(), super::budget::TooLarge> {
    match v {
        V::Nothing | V::Deleted => Ok(()),
        v => super::budget::store(v.get()),
    }
}

/// Writes `v` at `path` under `root`, creating objects on the way.
pub fn assign(root: &mut Slot, path: &[Seg], v: V<'_>) -> Result<(), String> {
    if matches!(v, V::Nothing) {
        return Ok(());
    }
    if path.is_empty() {
        *root = match v {
            V::Deleted => Slot::Deleted,
            v => Slot::Val(v.into_owned()),
        };
        return Ok(());
    }
    if matches!(v, V::Deleted) {
        if let Slot::Val(r) = root {
            remove_path(r, path);
        }
        return Ok(());
    }
    // Each segment of the path is a level above the value: a long path, or a value
    // assigned under itself over and over, would build a value too deep to drop.
    v.get().check_depth(path.len()).map_err(|e| e.to_string())?;
    // The common case, `root.field = v` on an object, needs no path walk.
    if let ([Seg::Field(name)], Slot::Val(Value::Object(o))) = (path, &mut *root) {
        match o.get_mut(name.as_str()) {
            Some(slot) => *slot = v.into_owned(),
            None => {
                o.insert(name.clone(), v.into_owned());
            }
        }
        return Ok(());
    }
    if !matches!(root, Slot::Val(_)) {
        *root = Slot::Val(Value::Null);
    }
    let Slot::Val(mut cur) = std::mem::replace(root, Slot::Nothing) else {
        return Ok(());
    };
    let res = set_path(&mut cur, path, v.into_owned());
    *root = Slot::Val(cur);
    res
}

/// A target path as written (`foo.bar[2]`).
fn path_text(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn set_path(mut cur: &mut Value, path: &[Seg], v: Value) -> Result<(), String> {
    for (at, seg) in path.iter().enumerate() {
        cur = match seg {
            Seg::Field(name) => {
                match cur {
                    Value::Object(_) => {}
                    Value::Null => *cur = Value::Object(Default::default()),
                    // A field is never set inside a value that is not an object: that
                    // would silently throw the value away.
                    other => {
                        let of = match at {
                            0 => "the root".to_owned(),
                            _ => path_text(&path[..at]),
                        };
                        return Err(format!(
                            "unable to set target path {} as the value of {of} was a non-object type ({})",
                            path_text(path),
                            other.type_name()
                        ));
                    }
                }
                match cur {
                    Value::Object(o) => o.entry(name.clone()).or_insert(Value::Null),
                    _ => return Err("unreachable".into()),
                }
            }
            Seg::Index(i) => match cur {
                Value::Array(a) => {
                    let len = a.len();
                    if *i == len as i64 {
                        a.push(Value::Null);
                        let last = a.len() - 1;
                        &mut a[last]
                    } else {
                        let k = norm_index(*i, len).ok_or_else(|| {
                            format!("index {i} is out of bounds for an array of {len}")
                        })?;
                        &mut a[k]
                    }
                }
                Value::Null => {
                    *cur = Value::Array(vec![Value::Null]);
                    if *i != 0 {
                        return Err(format!("index {i} is out of bounds for a new array"));
                    }
                    match cur {
                        Value::Array(a) => &mut a[0],
                        _ => return Err("unreachable".into()),
                    }
                }
                other => return Err(format!("cannot index {} with {i}", describe(other))),
            },
        };
    }
    *cur = v;
    Ok(())
}

fn remove_path(cur: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = cur;
    for seg in parents {
        let next = match (seg, cur) {
            (Seg::Field(n), Value::Object(o)) => o.get_mut(n),
            (Seg::Index(i), Value::Array(a)) => {
                let len = a.len();
                norm_index(*i, len).and_then(move |k| a.get_mut(k))
            }
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (last, cur) {
        (Seg::Field(n), Value::Object(o)) => {
            o.remove(n);
        }
        (Seg::Index(i), Value::Array(a)) => {
            if let Some(k) = norm_index(*i, a.len()) {
                a.remove(k);
            }
        }
        _ => {}
    }
}

/// A value's type as the reference names it in errors (Go's names for its own types).
pub fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int64",
        Value::Float(_) | Value::BigInt(_) => "float64",
        Value::String(_) => "string",
        Value::Bytes(_) => "[]uint8",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Timestamp(_) => "time.Time",
    }
}
