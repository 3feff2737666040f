//! Turns the syntax tree into the form `exec` runs: names resolved against the registry,
//! argument lists checked and put in declared order, literal sub-expressions folded and
//! literal regular expressions compiled, once.

use std::collections::HashMap;
use std::path::Path;

use regex::Regex;

use super::ast::{Arg, Expr, ExprKind, Pattern, Span, Stmt};
use super::diagnostic::{Diagnostic, Diagnostics};
use super::exec::{self, Ctx, MsgView, This, V};
use super::program::{
    Bin, CStmt, Case, FuncCall, IndexNode, Lambda, MapDef, MatchNode, MethodCall, Node, Program,
    SliceNode,
};
use super::spec::{Default, Kind, MethodImpl, Param};
use super::Env;
use crate::message::Metadata;
use crate::value::Value;

pub struct Compiler<'e> {
    env: &'e Env,
    src: String,
    diags: Vec<Diagnostic>,
    vars: HashMap<String, usize>,
    scopes: Vec<(String, u32)>,
    next_param: u32,
    map_names: Vec<String>,
    reads_this: bool,
    touches_root: bool,
    reads_content: bool,
    in_lambda: usize,
    import_depth: usize,
    /// Where each line after the first starts, to number statements' lines in
    /// logarithmic time (counting from the start each time is quadratic in the program).
    line_starts: Vec<usize>,
}

impl<'e> Compiler<'e> {
    pub fn new(env: &'e Env, src: &str) -> Self {
        Compiler {
            env,
            src: src.to_string(),
            diags: Vec::new(),
            vars: HashMap::new(),
            scopes: Vec::new(),
            next_param: 0,
            map_names: Vec::new(),
            reads_this: false,
            touches_root: false,
            reads_content: false,
            in_lambda: 0,
            import_depth: 0,
            line_starts: memchr::memchr_iter(b'\n', src.as_bytes())
                .map(|i| i + 1)
                .collect(),
        }
    }

    fn line_of(&self, span: Span) -> usize {
        self.line_starts
            .partition_point(|&start| start <= span.start)
            + 1
    }

    fn diag(&mut self, span: Span, code: &'static str, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::at(&self.src, span, code, msg)
    }

    fn text(&self, span: Span) -> Box<str> {
        self.src
            .get(span.start..span.end)
            .unwrap_or("")
            .trim()
            .into()
    }

    pub fn program(mut self, stmts: Vec<Stmt>) -> Result<Program, Diagnostics> {
        let mut prog = Program {
            budget: self.env.budget,
            ..Program::default()
        };
        // Maps first, so statements can apply maps defined below them.
        for st in &stmts {
            if let Stmt::Map { name, .. } = st {
                self.map_names.push(name.clone());
            }
        }
        let mut imported = Vec::new();
        for st in &stmts {
            if let Stmt::Import { path, span } = st {
                match self.import(path) {
                    Ok(maps) => {
                        for m in &maps {
                            self.map_names.push(m.name.clone());
                        }
                        imported.extend(maps);
                    }
                    Err(msg) => {
                        let d = self.diag(*span, "E005", msg);
                        self.diags.push(d);
                    }
                }
            }
        }
        prog.maps = imported;
        let top_reads = std::mem::take(&mut self.reads_this);
        let top_touch = std::mem::take(&mut self.touches_root);
        for st in &stmts {
            if let Stmt::Map { name, body, span } = st {
                if prog.maps.iter().any(|m| &m.name == name) {
                    let d = self.diag(*span, "E006", format!("map `{name}` is defined twice"));
                    self.diags.push(d);
                    continue;
                }
                for s in body {
                    if let Stmt::Meta { span, .. } = s {
                        let d = self.diag(*span, "E007", "metadata cannot be changed inside a map");
                        self.diags.push(d);
                    }
                }
                let body = self.stmts(body);
                prog.maps.push(MapDef {
                    name: name.clone(),
                    body,
                });
            }
        }
        // What maps read happens on values handed to them, not on the message.
        self.reads_this = top_reads;
        self.touches_root = top_touch;
        let top: Vec<&Stmt> = stmts
            .iter()
            .filter(|s| !matches!(s, Stmt::Map { .. } | Stmt::Import { .. }))
            .collect();
        let mut out = Vec::new();
        for st in top {
            if let Some(c) = self.stmt(st) {
                out.push(c);
            }
        }
        if !self.diags.is_empty() {
            return Err(Diagnostics(self.diags));
        }
        prog.stmts = out;
        prog.var_names = vec![String::new(); self.vars.len()];
        for (name, slot) in &self.vars {
            prog.var_names[*slot] = name.clone();
        }
        prog.reads_this = self.reads_this;
        prog.touches_root = self.touches_root || self.reads_this;
        prog.reads_content = self.reads_content;
        prog.in_place = super::in_place::edits_in_place(&prog);
        Ok(prog)
    }

    fn import(&mut self, path: &str) -> Result<Vec<MapDef>, String> {
        if !self.env.imports {
            return Err("imports are not allowed in this mapping".into());
        }
        if self.import_depth > 8 {
            return Err("imports nest too deeply".into());
        }
        let full = match &self.env.import_dir {
            Some(d) if Path::new(path).is_relative() => d.join(path),
            _ => Path::new(path).to_path_buf(),
        };
        let text = std::fs::read_to_string(&full)
            .map_err(|e| format!("cannot import `{}`: {e}", full.display()))?;
        let stmts = super::parser::parse_mapping(&text)
            .map_err(|d| format!("in imported file `{}`:\n{d}", full.display()))?;
        let mut sub = Compiler::new(self.env, &text);
        sub.import_depth = self.import_depth + 1;
        let only_maps: Vec<Stmt> = stmts
            .into_iter()
            .filter(|s| matches!(s, Stmt::Map { .. } | Stmt::Import { .. }))
            .collect();
        let prog = sub
            .program(only_maps)
            .map_err(|d| format!("in imported file `{}`:\n{d}", full.display()))?;
        Ok(prog.maps)
    }

    fn var_slot(&mut self, name: &str) -> usize {
        let n = self.vars.len();
        *self.vars.entry(name.to_string()).or_insert(n)
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Vec<CStmt> {
        stmts.iter().filter_map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, st: &Stmt) -> Option<CStmt> {
        let line = self.line_of(st.span());
        match st {
            Stmt::Assign { target, value, .. } => {
                self.touches_root = true;
                let value = self.expr(value)?;
                Some(CStmt::Assign {
                    target: target.clone(),
                    value,
                    line,
                })
            }
            Stmt::Let { name, value, .. } => {
                let slot = self.var_slot(name);
                let value = self.expr(value)?;
                Some(CStmt::Let { slot, value, line })
            }
            Stmt::Meta { key, value, .. } => {
                let value = self.expr(value)?;
                Some(CStmt::Meta {
                    key: key.clone(),
                    value,
                    line,
                })
            }
            Stmt::If {
                branches,
                otherwise,
                ..
            } => {
                let mut bs = Vec::new();
                for (c, body) in branches {
                    let c = self.expr(c);
                    let body = self.stmts(body);
                    if let Some(c) = c {
                        bs.push((c, body));
                    }
                }
                let otherwise = otherwise.as_ref().map(|b| self.stmts(b));
                Some(CStmt::If {
                    branches: bs,
                    otherwise,
                    line,
                })
            }
            Stmt::Map { .. } | Stmt::Import { .. } => None,
        }
    }

    /// Compiles an expression; on failure the diagnostic is recorded and `None` returned
    /// so that compilation goes on and reports every problem.
    pub fn expr(&mut self, e: &Expr) -> Option<Node> {
        let node = self.expr_inner(e)?;
        Some(fold(node))
    }

    fn expr_inner(&mut self, e: &Expr) -> Option<Node> {
        Some(match &e.kind {
            ExprKind::Lit(v) => Node::Lit(v.clone()),
            ExprKind::This => {
                if self.in_lambda == 0 {
                    self.reads_this = true;
                }
                Node::This
            }
            ExprKind::Root => {
                self.touches_root = true;
                Node::Root
            }
            ExprKind::Name(n) => {
                if let Some((_, slot)) = self.scopes.iter().rev().find(|(s, _)| s == n) {
                    Node::Param(*slot)
                } else {
                    if self.in_lambda == 0 {
                        self.reads_this = true;
                    }
                    Node::Path(Box::new(Node::This), vec![n.clone()].into_boxed_slice())
                }
            }
            ExprKind::Field(base, name) => {
                let base = self.expr_inner(base)?;
                match base {
                    Node::Path(b, p) => {
                        let mut p = p.into_vec();
                        p.push(name.clone());
                        Node::Path(b, p.into_boxed_slice())
                    }
                    other => Node::Path(Box::new(other), vec![name.clone()].into_boxed_slice()),
                }
            }
            ExprKind::Index(t, i) => {
                let target = self.expr(t);
                let index = self.expr(i);
                Node::Index(Box::new(IndexNode {
                    target: target?,
                    index: index?,
                    text: self.text(e.span),
                }))
            }
            ExprKind::Slice(t, a, b, c) => {
                let target = self.expr(t);
                let from = a.as_ref().map(|x| self.expr(x));
                let to = b.as_ref().map(|x| self.expr(x));
                let step = match c.as_ref().map(|x| self.expr(x)) {
                    Some(x) => Some(x?),
                    None => None,
                };
                let from = match from {
                    Some(x) => Some(x?),
                    None => None,
                };
                let to = match to {
                    Some(x) => Some(x?),
                    None => None,
                };
                Node::Slice(Box::new(SliceNode {
                    target: target?,
                    from,
                    to,
                    step,
                    text: self.text(e.span),
                }))
            }
            ExprKind::Meta(Some(k)) => Node::Meta(k.as_str().into()),
            ExprKind::Meta(None) => Node::MetaAll,
            ExprKind::Var(n) => {
                let slot = self.var_slot(n);
                Node::Var(slot, n.as_str().into())
            }
            ExprKind::Array(items) => {
                let items: Vec<Option<Node>> = items.iter().map(|x| self.expr(x)).collect();
                Node::Array(items.into_iter().collect::<Option<Vec<_>>>()?)
            }
            ExprKind::Object(entries) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (k, v) in entries {
                    let key_span = k.span;
                    let (k, v) = (self.expr(k), self.expr(v));
                    if let Some(Node::Lit(key)) = &k {
                        if !matches!(key, Value::String(_)) {
                            let msg = format!(
                                "object keys must be strings, received: {}",
                                super::exec::go_type(key)
                            );
                            let d = self.diag(key_span, "E004", msg);
                            self.diags.push(d);
                            ok = false;
                            continue;
                        }
                    }
                    match (k, v) {
                        (Some(k), Some(v)) => out.push((k, v)),
                        _ => ok = false,
                    }
                }
                if !ok {
                    return None;
                }
                Node::Object(out)
            }
            ExprKind::Not(x) => Node::Not(Box::new(self.expr(x)?)),
            ExprKind::Neg(x) => Node::Neg(Box::new(self.expr(x)?)),
            ExprKind::Binary(op, l, r) => {
                let (lhs, rhs) = (self.expr(l), self.expr(r));
                Node::Bin(Box::new(Bin {
                    op: *op,
                    lhs: lhs?,
                    rhs: rhs?,
                    text: self.text(e.span),
                    ltext: self.text(l.span),
                    rtext: self.text(r.span),
                }))
            }
            ExprKind::If(branches, otherwise) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (c, b) in branches {
                    match (self.expr(c), self.expr(b)) {
                        (Some(c), Some(b)) => out.push((c, b)),
                        _ => ok = false,
                    }
                }
                let otherwise = match otherwise {
                    Some(o) => Some(Box::new(self.expr(o)?)),
                    None => None,
                };
                if !ok {
                    return None;
                }
                Node::If(out.into_boxed_slice(), otherwise)
            }
            ExprKind::Match(subject, cases) => {
                let subject = match subject {
                    Some(s) => Some(self.expr(s)?),
                    None => None,
                };
                // Inside the cases `this` is the subject, so reads there are not reads of
                // the message.
                if subject.is_some() {
                    self.in_lambda += 1;
                }
                let mut out = Vec::new();
                let mut ok = true;
                for (p, body) in cases {
                    let case = match p {
                        Pattern::Wildcard => Some(Case::Any),
                        Pattern::Expr(pe) => match self.expr(pe) {
                            Some(Node::Lit(v)) => Some(Case::Eq(v)),
                            Some(n) => Some(Case::Cond(n)),
                            None => None,
                        },
                    };
                    match (case, self.expr(body)) {
                        (Some(c), Some(b)) => out.push((c, b)),
                        _ => ok = false,
                    }
                }
                if subject.is_some() {
                    self.in_lambda -= 1;
                }
                if !ok {
                    return None;
                }
                Node::Match(Box::new(MatchNode {
                    subject,
                    cases: out,
                }))
            }
            ExprKind::Call(name, args) => self.function(name, args, e.span)?,
            ExprKind::Method(recv, name, args) => self.method(recv, name, args, e.span)?,
            ExprKind::Context(recv, arg) => {
                let recv = self.expr(recv)?;
                let l = self.lambda(arg)?;
                Node::Context(Box::new((recv, l)))
            }
        })
    }

    fn lambda(&mut self, a: &Arg) -> Option<Lambda> {
        match (&a.param, a.is_lambda) {
            (Some(p), true) => {
                if p != "_" && self.scopes.iter().any(|(s, _)| s == p) {
                    let d = self.diag(
                        a.span,
                        "E004",
                        format!("context label `{p}` would shadow a parent context"),
                    );
                    self.diags.push(d);
                    return None;
                }
                let slot = self.next_param;
                self.next_param += 1;
                self.scopes.push((p.clone(), slot));
                let body = self.expr(&a.value);
                self.scopes.pop();
                Some(Lambda {
                    param: Some(slot),
                    body: body?,
                })
            }
            _ => {
                self.in_lambda += 1;
                let body = self.expr(&a.value);
                self.in_lambda -= 1;
                Some(Lambda {
                    param: None,
                    body: body?,
                })
            }
        }
    }

    /// Puts arguments in declared order, checking names and arity.
    fn order_args<'a>(
        &mut self,
        what: &str,
        params: &'static [Param],
        args: &'a [Arg],
        span: Span,
    ) -> Option<Vec<Option<&'a Arg>>> {
        let mut slots: Vec<Option<&Arg>> = vec![None; params.len()];
        let mut ok = true;
        let named = args.iter().any(|a| a.name.is_some());
        if named && args.iter().any(|a| a.name.is_none()) {
            let d = self.diag(
                span,
                "E004",
                format!("{what}: cannot mix named and positional arguments"),
            );
            self.diags.push(d);
            return None;
        }
        for (i, a) in args.iter().enumerate() {
            let idx = match &a.name {
                Some(n) => match params.iter().position(|p| p.name == n) {
                    Some(i) => i,
                    None => {
                        let names: Vec<&str> = params.iter().map(|p| p.name).collect();
                        let d = self
                            .diag(a.span, "E004", format!("{what}: unknown parameter `{n}`"))
                            .with_hint(format!("parameters are: {}", names.join(", ")));
                        self.diags.push(d);
                        ok = false;
                        continue;
                    }
                },
                None => i,
            };
            if idx >= params.len() {
                let d = self.diag(
                    a.span,
                    "E004",
                    format!(
                        "{what}: takes at most {} argument(s), got {}",
                        params.len(),
                        args.len()
                    ),
                );
                self.diags.push(d);
                return None;
            }
            slots[idx] = Some(a);
        }
        for (p, s) in params.iter().zip(&slots) {
            if s.is_none() && p.default == Default::Required {
                let d = self.diag(
                    span,
                    "E004",
                    format!("{what}: missing argument `{}`", p.name),
                );
                self.diags.push(d);
                ok = false;
            }
        }
        ok.then_some(slots)
    }

    fn default_node(p: &Param) -> Option<Node> {
        match p.default {
            Default::Required | Default::Absent => None,
            Default::Null => Some(Node::Lit(Value::Null)),
            Default::Bool(b) => Some(Node::Lit(Value::Bool(b))),
            Default::Int(i) => Some(Node::Lit(Value::Int(i))),
            Default::Float(f) => Some(Node::Lit(Value::Float(f))),
            Default::Str(s) => Some(Node::Lit(Value::String(s.to_string()))),
        }
    }

    fn regex_for(&mut self, p: &Param, n: &Option<Node>, span: Span) -> Option<Regex> {
        if p.kind != Kind::Regex {
            return None;
        }
        if let Some(Node::Lit(Value::String(pat))) = n {
            match Regex::new(pat) {
                Ok(r) => return Some(r),
                Err(e) => {
                    let d = self.diag(span, "E008", format!("invalid regular expression: {e}"));
                    self.diags.push(d);
                }
            }
        }
        None
    }

    fn function(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Node> {
        match name {
            "deleted" if args.is_empty() => return Some(Node::Deleted),
            "nothing" if args.is_empty() => return Some(Node::Nothing),
            _ => {}
        }
        let Some(spec) = self.env.function(name) else {
            if self.env.withholds(name) {
                let d = self.diag(span, "E003", withheld("function", name));
                self.diags.push(d);
                return None;
            }
            let mut d = self.diag(span, "E003", format!("unknown function `{name}`"));
            if let Some(s) = suggest(name, self.env.function_names()) {
                d = d.with_hint(format!("did you mean `{s}`?"));
            }
            self.diags.push(d);
            return None;
        };
        if spec.needs_message {
            self.reads_content = true;
        }
        let slots = self.order_args(&format!("function `{name}`"), spec.params, args, span)?;
        let mut out = Vec::new();
        let mut regexes = Vec::new();
        let mut ok = true;
        for (p, a) in spec.params.iter().zip(slots) {
            let n = match a {
                Some(a) if a.is_lambda => {
                    let d = self.diag(
                        a.span,
                        "E004",
                        format!("function `{name}`: `{}` does not take a lambda", p.name),
                    );
                    self.diags.push(d);
                    ok = false;
                    None
                }
                Some(a) => {
                    let n = self.expr(&a.value);
                    ok &= n.is_some();
                    n
                }
                None => Self::default_node(p),
            };
            regexes.push(self.regex_for(p, &n, span));
            out.push(n);
        }
        if !ok {
            return None;
        }
        Some(Node::Func(Box::new(FuncCall {
            spec,
            args: out,
            regexes,
            text: self.text(span),
            state: std::sync::atomic::AtomicI64::new(i64::MIN),
            counters: self.env.counters.clone(),
        })))
    }

    fn method(&mut self, recv: &Expr, name: &str, args: &[Arg], span: Span) -> Option<Node> {
        let recv_node = self.expr(recv);
        let Some(spec) = self.env.method(name) else {
            if self.env.withholds(name) {
                let d = self.diag(span, "E003", withheld("method", name));
                self.diags.push(d);
                return None;
            }
            let mut d = self.diag(span, "E003", format!("unknown method `{name}`"));
            if let Some(s) = suggest(name, self.env.method_names()) {
                d = d.with_hint(format!("did you mean `{s}`?"));
            }
            self.diags.push(d);
            return None;
        };
        let slots = self.order_args(&format!("method `{name}`"), spec.params, args, span)?;
        let mut values = Vec::new();
        let mut lambdas = Vec::new();
        let mut regexes = Vec::new();
        let mut ok = true;
        for (p, a) in spec.params.iter().zip(slots) {
            match (p.kind, a) {
                (Kind::Lambda, Some(a)) => {
                    let l = self.lambda(a);
                    ok &= l.is_some();
                    lambdas.push(l);
                    values.push(None);
                    regexes.push(None);
                }
                (_, Some(a)) if a.is_lambda => {
                    let d = self.diag(
                        a.span,
                        "E004",
                        format!("method `{name}`: `{}` does not take a lambda", p.name),
                    );
                    self.diags.push(d);
                    ok = false;
                }
                (_, a) => {
                    let n = match a {
                        Some(a) => {
                            let n = self.expr(&a.value);
                            ok &= n.is_some();
                            n
                        }
                        None => Self::default_node(p),
                    };
                    regexes.push(self.regex_for(p, &n, span));
                    values.push(n);
                    lambdas.push(None);
                }
            }
        }
        if name == "apply" {
            if let Some(Some(Node::Lit(Value::String(m)))) = values.first() {
                if !self.map_names.iter().any(|n| n == m) {
                    let d = self.diag(span, "E006", format!("map `{m}` is not defined"));
                    self.diags.push(d);
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        // Trailing optional arguments that were not given need no slot at run time.
        while values.len() > 1
            && matches!(values.last(), Some(None))
            && matches!(lambdas.last(), Some(None))
        {
            values.pop();
            lambdas.pop();
            regexes.pop();
        }
        let recv = recv_node?;
        // `x.filter(f).map_each(g)` runs as one pass over `x`, so the kept items are
        // read where they are instead of being copied into an intermediate array.
        if name == "map_each" {
            if let Node::Method(inner) = &recv {
                if inner.spec.name == "filter" {
                    if let (Node::Method(inner), Some(map_l)) =
                        (recv, lambdas.into_iter().next().flatten())
                    {
                        let inner = *inner;
                        let filter_l = inner.lambdas.into_iter().next().flatten()?;
                        return Some(Node::Method(Box::new(MethodCall {
                            spec: &super::methods::FILTER_MAP_EACH,
                            recv: inner.recv,
                            args_values: vec![None, None],
                            lambdas: vec![Some(filter_l), Some(map_l)],
                            regexes: vec![None, None],
                            text: self.text(span),
                        })));
                    }
                    return None;
                }
            }
        }
        Some(Node::Method(Box::new(MethodCall {
            spec,
            recv,
            args_values: values,
            lambdas,
            regexes,
            text: self.text(span),
        })))
    }
}

fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(s, _)| *s > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Evaluates a node now when everything it depends on is already known.
fn fold(node: Node) -> Node {
    let foldable = match &node {
        Node::Bin(b) => is_lit(&b.lhs) && is_lit(&b.rhs),
        Node::Not(x) | Node::Neg(x) => is_lit(x),
        Node::Array(items) => items.iter().all(is_lit),
        Node::Object(es) => es.iter().all(|(k, v)| is_lit(k) && is_lit(v)),
        Node::Method(m) => {
            matches!(m.spec.imp, MethodImpl::Eager(_))
                && is_lit(&m.recv)
                && m.args_values.iter().all(|a| a.as_ref().is_none_or(is_lit))
                && !IMPURE_METHODS.contains(&m.spec.name)
        }
        Node::Path(b, _) => is_lit(b),
        _ => false,
    };
    if !foldable {
        return node;
    }
    let prog = Program::default();
    let meta = Metadata::new();
    let cx = Ctx {
        this: This::Val(&exec::NULL),
        root: None,
        vars: &[],
        scope: None,
        meta: &meta,
        msg: MsgView::NONE,
        prog: &prog,
    };
    let folded = match exec::eval(&node, &cx) {
        Ok(V::Ref(v)) => Some(v.clone()),
        Ok(V::Own(v)) => Some(v),
        _ => None,
    };
    match folded {
        Some(v) => Node::Lit(v),
        None => node,
    }
}

/// Methods whose result varies between calls even with the same input.
const IMPURE_METHODS: &[&str] = &["ts_tz_local"];

fn is_lit(n: &Node) -> bool {
    matches!(n, Node::Lit(_))
}

/// Why a known function or method cannot be called here.
fn withheld(what: &str, name: &str) -> String {
    format!("{what} `{name}` reads the host and is not available in this mapping")
}
