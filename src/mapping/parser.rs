//! Turns pest's parse tree into the syntax tree; nothing is resolved here.

use pest::iterators::Pair;
use pest::pratt_parser::{Assoc, Op, PrattParser};
use pest::Parser;

use super::ast::{Arg, BinOp, Expr, ExprKind, Pattern, Seg, Span, Stmt};
use super::diagnostic::{Diagnostic, Diagnostics};
use crate::value::Value;

#[derive(pest_derive::Parser)]
#[grammar = "../grammar/mapping.pest"]
struct Grammar;

/// One piece of an interpolated string.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Expr(Expr),
}

fn pratt() -> PrattParser<Rule> {
    // Lowest first; `&&` and `||` share a level and group left to right, as in Bloblang.
    PrattParser::new()
        .op(Op::infix(Rule::op_pipe, Assoc::Left))
        .op(Op::infix(Rule::op_and, Assoc::Left) | Op::infix(Rule::op_or, Assoc::Left))
        .op(Op::infix(Rule::op_eq, Assoc::Left)
            | Op::infix(Rule::op_ne, Assoc::Left)
            | Op::infix(Rule::op_lt, Assoc::Left)
            | Op::infix(Rule::op_le, Assoc::Left)
            | Op::infix(Rule::op_gt, Assoc::Left)
            | Op::infix(Rule::op_ge, Assoc::Left))
        .op(Op::infix(Rule::op_add, Assoc::Left) | Op::infix(Rule::op_sub, Assoc::Left))
        .op(Op::infix(Rule::op_mul, Assoc::Left)
            | Op::infix(Rule::op_div, Assoc::Left)
            | Op::infix(Rule::op_mod, Assoc::Left))
        .op(Op::prefix(Rule::op_not) | Op::prefix(Rule::op_neg))
}

struct Ctx<'s> {
    src: &'s str,
    pratt: PrattParser<Rule>,
}

type PResult<T> = Result<T, Diagnostic>;

/// Words that mean something of their own and so cannot name a lambda parameter.
const RESERVED: &[&str] = &[
    "this", "root", "true", "false", "null", "if", "else", "match", "let", "meta", "map", "import",
];

/// Deepest bracket nesting a mapping may use. Parsing, compiling and running all recurse
/// over the tree, so the tree's depth is bounded before any of them starts.
pub const MAX_NESTING: usize = 64;
/// Longest run of operators, prefixes or `.`-steps in one expression, for the same reason.
pub const MAX_CHAIN: usize = 256;

/// Grammar rule calls one parse may make: a fixed allowance and so many per byte. The
/// grammar is a PEG: a construct that fails late is read again by the next alternative,
/// and some nestings of those (a `match` without a subject in the first case of another)
/// take time exponential in their depth, within [`MAX_NESTING`]. Past this budget a parse
/// fails at once instead of running for minutes; real mappings use a small part of it.
pub const PARSE_CALLS_BASE: usize = 100_000;
pub const PARSE_CALLS_PER_BYTE: usize = 500;

/// Held while a parse runs under the budget set for it.
static PARSING: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// Sets pest's call budget for a parse of `src`, and holds it until the guard is dropped.
/// The budget is one setting for the whole process (this grammar is its only user), read
/// as a parse runs: without the lock, a small mapping parsed at the same moment on
/// another thread would give a large one its small budget, and the large one would fail.
fn limit_parse_calls(src: &str) -> parking_lot::MutexGuard<'static, ()> {
    let held = PARSING.lock();
    let budget = PARSE_CALLS_PER_BYTE
        .saturating_mul(src.len())
        .saturating_add(PARSE_CALLS_BASE);
    pest::set_call_limit(std::num::NonZeroUsize::new(budget));
    // Track every token tried at the furthest position, so that errors can name what was
    // expected there (`=`, `)`...) and not only the rules.
    pest::set_error_detail(true);
    held
}

/// Rejects input nested deeper than [`MAX_NESTING`] brackets, skipping strings and comments.
fn check_nesting(src: &str) -> Result<(), Diagnostics> {
    let b = src.as_bytes();
    let (mut i, mut depth) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' if b[i..].starts_with(b"\"\"\"") => {
                i += 3;
                while i < b.len() && !b[i..].starts_with(b"\"\"\"") {
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    let d = Diagnostic::at(
                        src,
                        Span::new(i, i + 1),
                        "E009",
                        format!("nesting deeper than {MAX_NESTING} levels"),
                    )
                    .with_hint("split the expression with `let` variables or named maps");
                    return Err(Diagnostics::one(d));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Parses a whole mapping. A mapping that is a single bare expression (`this.foo`) means
/// `root = this.foo`.
pub fn parse_mapping(src: &str) -> Result<Vec<Stmt>, Diagnostics> {
    check_nesting(src)?;
    let _budget = limit_parse_calls(src);
    let cx = Ctx {
        src,
        pratt: pratt(),
    };
    match Grammar::parse(Rule::mapping, src) {
        Ok(mut pairs) => {
            let mut out = Vec::new();
            if let Some(top) = pairs.next() {
                for p in top.into_inner() {
                    if p.as_rule() == Rule::EOI {
                        break;
                    }
                    out.push(cx.statement(p).map_err(Diagnostics::one)?);
                }
            }
            if out.is_empty() {
                // Nothing but whitespace and comments: as in Bloblang, not a mapping.
                let at = src.trim_end().len();
                let d = Diagnostic::at(
                    src,
                    Span::new(at, at + 1),
                    "E001",
                    "expected a statement, found end of input: the mapping is empty",
                )
                .with_hint("a mapping needs at least one statement, such as `root = this`");
                return Err(Diagnostics::one(d));
            }
            cx.check_lines(&out).map_err(Diagnostics::one)?;
            Ok(out)
        }
        Err(stmt_err) => match Grammar::parse(Rule::query, src) {
            Ok(mut pairs) => {
                let Some(expr) = pairs.next().and_then(|q| q.into_inner().next()) else {
                    return Ok(Vec::new());
                };
                let span = span_of(&expr);
                let value = cx.expr(expr).map_err(Diagnostics::one)?;
                Ok(vec![Stmt::Assign {
                    target: Vec::new(),
                    value,
                    span,
                }])
            }
            Err(query_err) => {
                let (a, b) = (err_pos(&stmt_err), err_pos(&query_err));
                if let Some(d) = shorthand_followed(src, a) {
                    return Err(Diagnostics::one(d));
                }
                // Report whichever attempt got further: that is the more useful error.
                let e = if b > a && a == 0 { query_err } else { stmt_err };
                Err(Diagnostics::one(pest_diagnostic(src, &e)))
            }
        },
    }
}

/// Parses one expression (interpolations, `check` fields).
pub fn parse_query(src: &str) -> Result<Expr, Diagnostics> {
    check_nesting(src)?;
    let _budget = limit_parse_calls(src);
    let cx = Ctx {
        src,
        pratt: pratt(),
    };
    let mut pairs =
        Grammar::parse(Rule::query, src).map_err(|e| Diagnostics::one(pest_diagnostic(src, &e)))?;
    let expr = pairs
        .next()
        .and_then(|q| q.into_inner().next())
        .ok_or_else(|| {
            Diagnostics::one(Diagnostic::at(
                src,
                Span::new(0, 0),
                "E001",
                "expected an expression",
            ))
        })?;
    cx.expr(expr).map_err(Diagnostics::one)
}

/// Splits a string field into literal text and `${! expr }` blocks.
pub fn parse_interpolation(src: &str) -> Result<Vec<Piece>, Diagnostics> {
    check_nesting(src)?;
    let _budget = limit_parse_calls(src);
    let cx = Ctx {
        src,
        pratt: pratt(),
    };
    let mut pairs = Grammar::parse(Rule::interpolation, src)
        .map_err(|e| Diagnostics::one(pest_diagnostic(src, &e)))?;
    let mut out: Vec<Piece> = Vec::new();
    let Some(top) = pairs.next() else {
        return Ok(out);
    };
    for p in top.into_inner() {
        match p.as_rule() {
            Rule::interp_text => push_text(&mut out, p.as_str()),
            // `${{! x }}` renders as the literal `${! x }`.
            Rule::interp_escape => {
                let s = p.as_str();
                let inner = &s[3..s.len() - 2];
                push_text(&mut out, &format!("${{{inner}}}"));
            }
            Rule::interp_block => {
                let e = first(p, src)?;
                out.push(Piece::Expr(cx.expr(e).map_err(Diagnostics::one)?));
            }
            _ => {}
        }
    }
    Ok(out)
}

fn push_text(out: &mut Vec<Piece>, s: &str) {
    if let Some(Piece::Text(t)) = out.last_mut() {
        t.push_str(s);
    } else {
        out.push(Piece::Text(s.to_string()));
    }
}

fn first<'i>(p: Pair<'i, Rule>, src: &str) -> Result<Pair<'i, Rule>, Diagnostics> {
    let span = span_of(&p);
    p.into_inner().next().ok_or_else(|| {
        Diagnostics::one(Diagnostic::at(src, span, "E001", "expected an expression"))
    })
}

/// A mapping that starts as a bare query (the shorthand for `root = <query>`) and goes
/// on after it, when reading it as a query got further than reading it as statements:
/// the error says so, in the reference's words.
fn shorthand_followed(src: &str, statements_failed_at: usize) -> Option<Diagnostic> {
    let head = Grammar::parse(Rule::query_head, src).ok()?.next()?;
    let expr = head.into_inner().find(|p| p.as_rule() == Rule::expr)?;
    let (start, end) = (expr.as_span().start(), expr.as_span().end());
    let mut rest = end;
    loop {
        let tail = &src[rest..];
        let trimmed = tail.trim_start();
        rest += tail.len() - trimmed.len();
        if trimmed.starts_with('#') {
            rest += trimmed.find('\n').unwrap_or(trimmed.len());
        } else {
            break;
        }
    }
    if rest >= src.len() || rest <= statements_failed_at {
        return None;
    }
    let query = &src[start..end];
    let shown = match query.char_indices().nth(12) {
        Some((cut, _)) => format!("{}...", &query[..cut]),
        None => query.to_owned(),
    };
    Some(Diagnostic::at(
        src,
        Span::new(rest, rest + 1),
        "E001",
        format!("expected the mapping to end here as the beginning is shorthand for `root = {shown}`, but this shorthand form cannot be followed with more assignments"),
    ))
}

fn err_pos(e: &pest::error::Error<Rule>) -> usize {
    match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    }
}

fn span_of(p: &Pair<'_, Rule>) -> Span {
    let s = p.as_span();
    Span::new(s.start(), s.end())
}

/// A readable name for what the grammar expected at a position.
fn rule_name(r: &Rule) -> Option<&'static str> {
    Some(match r {
        Rule::EOI => "end of input",
        Rule::expr | Rule::term | Rule::lambda | Rule::slice_from => "an expression",
        Rule::slice => "`:` or `]`",
        Rule::statement
        | Rule::assignment
        | Rule::target
        | Rule::target_first
        | Rule::target_field => "a statement (e.g. `root.foo = ...`)",
        Rule::import_stmt | Rule::kw_import => "`import`",
        Rule::map_def | Rule::kw_map => "`map`",
        Rule::let_stmt | Rule::kw_let => "`let`",
        Rule::meta_stmt | Rule::kw_meta => "`meta`",
        Rule::if_stmt | Rule::if_expr | Rule::kw_if => "`if`",
        Rule::kw_else => "`else`",
        Rule::block | Rule::expr_block => "a block `{ ... }`",
        Rule::op_eq
        | Rule::op_ne
        | Rule::op_le
        | Rule::op_ge
        | Rule::op_lt
        | Rule::op_gt
        | Rule::op_and
        | Rule::op_or
        | Rule::op_pipe
        | Rule::op_add
        | Rule::op_sub
        | Rule::op_mul
        | Rule::op_div
        | Rule::op_mod => "an operator",
        Rule::method_call | Rule::context_map | Rule::field => "`.` and a field or method",
        Rule::index => "`[`",
        Rule::string | Rule::raw_string => "a string",
        Rule::ident | Rule::path_ident => "a name",
        Rule::int | Rule::float => "a number",
        Rule::args | Rule::named_arg => "arguments",
        Rule::match_case => "a match case (`pattern => value`)",
        Rule::entry => "an object entry (`\"key\": value`)",
        Rule::interp_block => "`${!`",
        _ => return None,
    })
}

/// A readable name for a literal token the grammar expected, when it is punctuation a user
/// types (keywords and letters are named by their rules instead).
fn token_name(token: &str) -> Option<&'static str> {
    Some(match token {
        "=" => "`=`",
        "->" => "`->`",
        "=>" => "`=>`",
        "(" => "`(`",
        ")" => "`)`",
        "[" => "`[`",
        "]" => "`]`",
        "{" => "`{`",
        "}" => "`}`",
        "," => "`,`",
        ":" => "`:`",
        _ => return None,
    })
}

/// Names that stand for "a new statement could start here".
const STATEMENT_NAMES: &[&str] = &[
    "end of input",
    "`import`",
    "`map`",
    "`let`",
    "`meta`",
    "`if`",
    "a statement (e.g. `root.foo = ...`)",
];

/// What is at `pos`, as a user would name it: a whole word, one character, or the end.
fn found_at(src: &str, pos: usize) -> String {
    let rest = &src[pos.min(src.len())..];
    let Some(c) = rest.chars().next() else {
        return "end of input".into();
    };
    if c == '\n' || c == '\r' {
        return "the end of the line".into();
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .take(40)
        .collect();
    if word.is_empty() {
        format!("`{c}`")
    } else {
        format!("`{word}`")
    }
}

/// When `pos` is inside a `"` string that its line does not close: where the string opens.
fn unclosed_string(src: &str, pos: usize) -> Option<usize> {
    let pos = pos.min(src.len());
    let line_start = src[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[pos..].find('\n').map_or(src.len(), |i| pos + i);
    let line = &src[line_start..line_end];
    let b = line.as_bytes();
    let (mut i, mut open) = (0, None);
    while i < b.len() {
        match (b[i], open) {
            (b'#', None) => break,
            (b'"', None) if line[i..].starts_with("\"\"\"") => return None,
            (b'"', None) => open = Some(i),
            (b'"', Some(_)) => open = None,
            (b'\\', Some(_)) => i += 1,
            _ => {}
        }
        i += 1;
    }
    open.filter(|o| line_start + o <= pos)
        .map(|o| line_start + o)
}

fn pest_diagnostic(src: &str, e: &pest::error::Error<Rule>) -> Diagnostic {
    let mut pos = err_pos(e);
    // Rule names expected at `pos`, and punctuation tokens when parse attempts are known.
    let mut names: Vec<&str> = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            positives.iter().filter_map(rule_name).collect()
        }
        pest::error::ErrorVariant::CustomError { .. } => Vec::new(),
    };
    // A statement could have ended here, and something follows it on its line: that is the
    // mistake to report, even when the rest of the line reads as the start of another
    // statement (`root = this.foo bar` is not `bar` missing its `=`).
    let could_end_here = names.iter().any(|n| STATEMENT_NAMES.contains(n));
    let line_start = src[..pos.min(src.len())].rfind('\n').map_or(0, |i| i + 1);
    let trailing = could_end_here
        && !src[line_start..pos.min(src.len())].trim().is_empty()
        && !src[pos.min(src.len())..]
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .is_empty();
    if let Some(at) = e.parse_attempts().filter(|_| !trailing) {
        if at.max_position > pos {
            // A rule got further than pest's own error says: report there.
            pos = at.max_position;
            names.clear();
            for cs in &at.call_stacks {
                let rule = cs.deepest.get_rule().copied().or(cs.parent);
                names.extend(rule.as_ref().and_then(rule_name));
            }
        }
        if at.max_position == pos {
            names.extend(
                at.expected_tokens()
                    .iter()
                    .filter_map(|t| token_name(&t.to_string())),
            );
        }
    }
    if names.iter().any(|n| {
        matches!(
            *n,
            "an expression" | "an operator" | "`.` and a field or method"
        )
    }) {
        // Brackets that would start an expression say nothing the words do not.
        names.retain(|n| !matches!(*n, "`(`" | "`{`"));
    }
    if names.contains(&"an expression") {
        names.retain(|n| *n != "`[`");
    }
    if let Some(open) = unclosed_string(src, pos) {
        return Diagnostic::at(
            src,
            Span::new(open, open + 1),
            "E001",
            "this string is not closed: expected a `\"` before the end of the line",
        )
        .with_hint("use `\"\"\"` to write text that spans lines");
    }
    let at_end = src[pos.min(src.len())..].trim().is_empty();
    if at_end {
        // At the end, point just past the last token rather than at trailing whitespace.
        pos = src.trim_end().len();
    }
    let line_start = src[..pos.min(src.len())].rfind('\n').map_or(0, |i| i + 1);
    let before = &src[line_start..pos.min(src.len())];
    let line_has_code = !before.trim().is_empty() && !before.trim_start().starts_with('#');
    let found = if at_end {
        "end of input".to_string()
    } else {
        found_at(src, pos)
    };
    let (msg, hint) = match &e.variant {
        pest::error::ErrorVariant::CustomError { message } if message.contains("call limit") => (
            "too complex to parse (it takes too many grammar steps)".to_string(),
            Some("split the expression with `let` variables or named maps".to_string()),
        ),
        pest::error::ErrorVariant::CustomError { message } => (message.clone(), None),
        pest::error::ErrorVariant::ParsingError { .. } => {
            let statement_could_end = names.iter().any(|n| STATEMENT_NAMES.contains(n));
            let mut hint = None;
            if statement_could_end {
                names.retain(|n| !STATEMENT_NAMES.contains(n));
                if line_has_code && !at_end {
                    // Something follows a complete statement on its line.
                    names.push("the end of the line");
                    hint = Some(
                        "a statement ends with its line: start a new line for the next one, or join the two with an operator"
                            .to_string(),
                    );
                } else if at_end && !line_has_code {
                    names.push("a statement (such as `root = this`)");
                } else if !at_end {
                    names.push("a statement (such as `root.foo = ...`)");
                }
            }
            names.sort_unstable();
            names.dedup();
            {
                let expected = match names.len() {
                    0 => "something else".to_string(),
                    1 => names[0].to_string(),
                    _ => {
                        let (last, rest) = names.split_last().unwrap_or((&"", &[]));
                        format!("{} or {}", rest.join(", "), last)
                    }
                };
                (format!("expected {expected}, found {found}"), hint)
            }
        }
    };
    let d = Diagnostic::at(src, Span::new(pos, pos + 1), "E001", msg);
    match hint {
        Some(h) => d.with_hint(h),
        None => d,
    }
}

fn unescape(raw: &str) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('/') => out.push('/'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .map_err(|_| format!("invalid unicode escape `\\u{hex}`"))?;
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some(o) => return Err(format!("invalid escape `\\{o}`")),
            None => return Err("string ends with a lone `\\`".into()),
        }
    }
    Ok(out)
}

impl<'s> Ctx<'s> {
    fn err(&self, span: Span, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::at(self.src, span, "E002", msg)
    }

    /// Statements must each start on a new line, as in Bloblang.
    fn check_lines(&self, stmts: &[Stmt]) -> PResult<()> {
        for w in stmts.windows(2) {
            let between = &self.src[w[0].span().end..w[1].span().start];
            if !between.contains('\n') {
                return Err(self
                    .err(w[1].span(), "expected a new line before this statement")
                    .with_hint("put each statement on its own line"));
            }
        }
        Ok(())
    }

    fn string_lit(&self, p: Pair<'_, Rule>) -> PResult<String> {
        let span = span_of(&p);
        match p.as_rule() {
            Rule::raw_string => Ok(p
                .into_inner()
                .next()
                .map(|i| i.as_str())
                .unwrap_or("")
                .into()),
            _ => {
                let inner = p.into_inner().next().map(|i| i.as_str()).unwrap_or("");
                unescape(inner).map_err(|m| self.err(span, m))
            }
        }
    }

    fn name_or_string(&self, p: Pair<'_, Rule>) -> PResult<String> {
        match p.as_rule() {
            Rule::string | Rule::raw_string => self.string_lit(p),
            _ => Ok(p.as_str().to_string()),
        }
    }

    fn statement(&self, p: Pair<'_, Rule>) -> PResult<Stmt> {
        // A pair's span can include whitespace skipped after its last token; end the
        // statement at its last token so the newline check sees what follows it.
        let last_token = p
            .clone()
            .into_inner()
            .flatten()
            .filter(|q| q.clone().into_inner().next().is_none())
            .map(|q| q.as_span().end())
            .max();
        let mut span = span_of(&p);
        if let Some(end) = last_token {
            span.end = end;
        }
        let rule = p.as_rule();
        let mut inner = p.into_inner();
        match rule {
            Rule::import_stmt => {
                inner.next();
                let s = inner
                    .next()
                    .ok_or_else(|| self.err(span, "expected a path"))?;
                Ok(Stmt::Import {
                    path: self.string_lit(s)?,
                    span,
                })
            }
            Rule::map_def => {
                inner.next();
                let name = inner
                    .next()
                    .map(|n| n.as_str().to_string())
                    .unwrap_or_default();
                let mut body = Vec::new();
                for s in inner {
                    let st = self.statement(s)?;
                    if matches!(st, Stmt::Import { .. } | Stmt::Map { .. }) {
                        return Err(self.err(
                            st.span(),
                            "`import` and `map` are only allowed at the top level",
                        ));
                    }
                    body.push(st);
                }
                self.check_lines(&body)?;
                Ok(Stmt::Map { name, body, span })
            }
            Rule::let_stmt => {
                inner.next();
                let name = inner
                    .next()
                    .ok_or_else(|| self.err(span, "expected a name"))?;
                let name = self.name_or_string(name)?;
                let value = self.expr(
                    inner
                        .next()
                        .ok_or_else(|| self.err(span, "expected a value"))?,
                )?;
                Ok(Stmt::Let { name, value, span })
            }
            Rule::meta_stmt => {
                let mut key = None;
                let mut value = None;
                for q in inner {
                    match q.as_rule() {
                        Rule::kw_meta => {}
                        Rule::path_ident | Rule::string | Rule::raw_string => {
                            key = Some(self.name_or_string(q)?)
                        }
                        _ => value = Some(self.expr(q)?),
                    }
                }
                let value = value.ok_or_else(|| self.err(span, "expected a value"))?;
                Ok(Stmt::Meta { key, value, span })
            }
            Rule::if_stmt => {
                let mut branches = Vec::new();
                let mut otherwise = None;
                let mut cond: Option<Expr> = None;
                for q in inner {
                    match q.as_rule() {
                        Rule::kw_if | Rule::kw_else => {}
                        Rule::expr => cond = Some(self.expr(q)?),
                        Rule::block => {
                            let body = self.block(q)?;
                            match cond.take() {
                                Some(c) => branches.push((c, body)),
                                None => otherwise = Some(body),
                            }
                        }
                        _ => {}
                    }
                }
                Ok(Stmt::If {
                    branches,
                    otherwise,
                    span,
                })
            }
            Rule::assignment => {
                let target = inner
                    .next()
                    .ok_or_else(|| self.err(span, "expected a target"))?;
                let target = self.target(target)?;
                let value = self.expr(
                    inner
                        .next()
                        .ok_or_else(|| self.err(span, "expected a value"))?,
                )?;
                Ok(Stmt::Assign {
                    target,
                    value,
                    span,
                })
            }
            _ => Err(self.err(span, "unexpected statement")),
        }
    }

    fn block(&self, p: Pair<'_, Rule>) -> PResult<Vec<Stmt>> {
        let mut out = Vec::new();
        for s in p.into_inner() {
            let st = self.statement(s)?;
            if matches!(st, Stmt::Import { .. } | Stmt::Map { .. }) {
                return Err(self.err(
                    st.span(),
                    "`import` and `map` are only allowed at the top level",
                ));
            }
            out.push(st);
        }
        self.check_lines(&out)?;
        Ok(out)
    }

    fn target(&self, p: Pair<'_, Rule>) -> PResult<Vec<Seg>> {
        let mut out = Vec::new();
        for q in p.into_inner() {
            match q.as_rule() {
                Rule::kw_root => {}
                Rule::target_first | Rule::target_field => {
                    let f = q.into_inner().next();
                    if let Some(f) = f {
                        out.push(Seg::Field(self.name_or_string(f)?));
                    }
                }
                Rule::target_index => {
                    let span = span_of(&q);
                    let i = q
                        .as_str()
                        .parse::<i64>()
                        .map_err(|_| self.err(span, "index out of range"))?;
                    out.push(Seg::Index(i));
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn expr(&self, p: Pair<'_, Rule>) -> PResult<Expr> {
        // Operators and prefixes chain without brackets; bound them too.
        let n = p.clone().into_inner().count();
        if n > 2 * MAX_CHAIN {
            return Err(self.err(
                span_of(&p),
                format!("expression has more than {MAX_CHAIN} operators"),
            ));
        }
        self.pratt
            .map_primary(|t| self.term(t))
            .map_prefix(|op, rhs| {
                let rhs = rhs?;
                let span = Span::new(op.as_span().start(), rhs.span.end);
                Ok(match op.as_rule() {
                    Rule::op_neg => match rhs.kind {
                        // Fold `-5` into a literal now; it reads as one.
                        ExprKind::Lit(Value::Int(i)) => Expr {
                            kind: ExprKind::Lit(Value::Int(i.wrapping_neg())),
                            span,
                        },
                        ExprKind::Lit(Value::Float(f)) => Expr {
                            kind: ExprKind::Lit(Value::Float(-f)),
                            span,
                        },
                        _ => Expr {
                            kind: ExprKind::Neg(Box::new(rhs)),
                            span,
                        },
                    },
                    _ => Expr {
                        kind: ExprKind::Not(Box::new(rhs)),
                        span,
                    },
                })
            })
            .map_infix(|lhs, op, rhs| {
                let (lhs, rhs) = (lhs?, rhs?);
                let op = match op.as_rule() {
                    Rule::op_add => BinOp::Add,
                    Rule::op_sub => BinOp::Sub,
                    Rule::op_mul => BinOp::Mul,
                    Rule::op_div => BinOp::Div,
                    Rule::op_mod => BinOp::Mod,
                    Rule::op_eq => BinOp::Eq,
                    Rule::op_ne => BinOp::Ne,
                    Rule::op_lt => BinOp::Lt,
                    Rule::op_le => BinOp::Le,
                    Rule::op_gt => BinOp::Gt,
                    Rule::op_ge => BinOp::Ge,
                    Rule::op_and => BinOp::And,
                    Rule::op_or => BinOp::Or,
                    _ => BinOp::Pipe,
                };
                let span = Span::new(lhs.span.start, rhs.span.end);
                Ok(Expr {
                    kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                    span,
                })
            })
            .parse(p.into_inner())
    }

    fn term(&self, p: Pair<'_, Rule>) -> PResult<Expr> {
        let span = span_of(&p);
        if p.clone().into_inner().count() > MAX_CHAIN {
            return Err(self.err(
                span,
                format!("more than {MAX_CHAIN} fields and methods in one chain"),
            ));
        }
        let mut inner = p.into_inner();
        let prim = inner
            .next()
            .ok_or_else(|| self.err(span, "expected a value"))?;
        let mut e = self.primary(prim)?;
        for post in inner {
            let pspan = span_of(&post);
            let full = Span::new(e.span.start, pspan.end);
            let rule = post.as_rule();
            let mut q = post.into_inner();
            let kind = match rule {
                Rule::method_call => {
                    let name = q.next().map(|n| n.as_str().to_string()).unwrap_or_default();
                    let args = match q.next() {
                        Some(a) => self.args(a)?,
                        None => Vec::new(),
                    };
                    ExprKind::Method(Box::new(e), name, args)
                }
                Rule::context_map => {
                    let a = q
                        .next()
                        .ok_or_else(|| self.err(pspan, "expected an expression"))?;
                    ExprKind::Context(Box::new(e), Box::new(self.arg(a)?))
                }
                Rule::field => {
                    let f = q
                        .next()
                        .ok_or_else(|| self.err(pspan, "expected a field"))?;
                    ExprKind::Field(Box::new(e), self.name_or_string(f)?)
                }
                Rule::index => {
                    // `[from]`, `[from:to?]`, `[from?:to?:step?]`: a `slice` part means a slice.
                    let (mut from, mut slice, mut to, mut step) = (None, false, None, None);
                    for part in q {
                        let parts: Vec<Pair<'_, Rule>> = match part.as_rule() {
                            Rule::slice => {
                                slice = true;
                                part.into_inner().collect()
                            }
                            _ => vec![part],
                        };
                        for x in parts {
                            let rule = x.as_rule();
                            let Some(inner) = x.into_inner().next() else {
                                continue;
                            };
                            let v = Some(Box::new(self.expr(inner)?));
                            match rule {
                                Rule::slice_from => from = v,
                                Rule::slice_to => to = v,
                                _ => step = v,
                            }
                        }
                    }
                    match (slice, from) {
                        (true, from) => ExprKind::Slice(Box::new(e), from, to, step),
                        (false, Some(i)) => ExprKind::Index(Box::new(e), i),
                        (false, None) => return Err(self.err(pspan, "expected an index")),
                    }
                }
                _ => return Err(self.err(pspan, "unexpected syntax")),
            };
            e = Expr { kind, span: full };
        }
        Ok(e)
    }

    fn args(&self, p: Pair<'_, Rule>) -> PResult<Vec<Arg>> {
        p.into_inner().map(|a| self.arg(a)).collect()
    }

    fn arg(&self, p: Pair<'_, Rule>) -> PResult<Arg> {
        let span = span_of(&p);
        match p.as_rule() {
            Rule::named_arg => {
                let mut q = p.into_inner();
                let name = q.next().map(|n| n.as_str().to_string());
                let v = q.next().ok_or_else(|| self.err(span, "expected a value"))?;
                let mut a = self.arg(v)?;
                a.name = name;
                a.span = span;
                Ok(a)
            }
            Rule::lambda => {
                let mut q = p.into_inner();
                let param = q.next().map(|n| n.as_str().to_string());
                if let Some(name) = param.as_deref().filter(|n| RESERVED.contains(n)) {
                    let msg = if matches!(name, "this" | "root") {
                        format!("context label `{name}` is not allowed")
                    } else {
                        format!("`{name}` cannot name a lambda parameter")
                    };
                    return Err(self
                        .err(span, msg)
                        .with_hint("pick another name, such as `x -> ...`"));
                }
                let body = q
                    .next()
                    .ok_or_else(|| self.err(span, "expected a lambda body"))?;
                Ok(Arg {
                    name: None,
                    param,
                    value: self.expr(body)?,
                    is_lambda: true,
                    span,
                })
            }
            _ => Ok(Arg {
                name: None,
                param: None,
                value: self.expr(p)?,
                is_lambda: false,
                span,
            }),
        }
    }

    fn primary(&self, p: Pair<'_, Rule>) -> PResult<Expr> {
        let span = span_of(&p);
        let mk = |kind| Ok(Expr { kind, span });
        match p.as_rule() {
            Rule::int => match p.as_str().parse::<i64>() {
                Ok(i) => mk(ExprKind::Lit(Value::Int(i))),
                Err(_) => match p.as_str().parse::<f64>() {
                    Ok(f) => mk(ExprKind::Lit(Value::Float(f))),
                    Err(_) => Err(self.err(span, "number out of range")),
                },
            },
            Rule::float => match p.as_str().parse::<f64>() {
                Ok(f) => mk(ExprKind::Lit(Value::Float(f))),
                Err(_) => Err(self.err(span, "invalid number")),
            },
            Rule::string | Rule::raw_string => {
                mk(ExprKind::Lit(Value::String(self.string_lit(p)?)))
            }
            Rule::kw_true => mk(ExprKind::Lit(Value::Bool(true))),
            Rule::kw_false => mk(ExprKind::Lit(Value::Bool(false))),
            Rule::kw_null => mk(ExprKind::Lit(Value::Null)),
            Rule::kw_this => mk(ExprKind::This),
            Rule::kw_root => mk(ExprKind::Root),
            Rule::bare_field => mk(ExprKind::Name(p.as_str().to_string())),
            Rule::paren => {
                let e = p
                    .into_inner()
                    .next()
                    .ok_or_else(|| self.err(span, "expected an expression"))?;
                self.expr(e)
            }
            Rule::array => {
                let items = p
                    .into_inner()
                    .map(|e| self.expr(e))
                    .collect::<PResult<Vec<_>>>()?;
                mk(ExprKind::Array(items))
            }
            Rule::object => {
                let mut entries = Vec::new();
                for en in p.into_inner() {
                    let espan = span_of(&en);
                    let mut q = en.into_inner();
                    let (Some(k), Some(v)) = (q.next(), q.next()) else {
                        return Err(self.err(espan, "expected `key: value`"));
                    };
                    entries.push((self.expr(k)?, self.expr(v)?));
                }
                mk(ExprKind::Object(entries))
            }
            Rule::meta_ref => {
                let key = match p.into_inner().next() {
                    Some(k) => Some(self.name_or_string(k)?),
                    None => None,
                };
                mk(ExprKind::Meta(key))
            }
            Rule::var_ref => {
                let k = p
                    .into_inner()
                    .next()
                    .ok_or_else(|| self.err(span, "expected a name"))?;
                mk(ExprKind::Var(self.name_or_string(k)?))
            }
            Rule::function_call => {
                let mut q = p.into_inner();
                let name = q.next().map(|n| n.as_str().to_string()).unwrap_or_default();
                let args = match q.next() {
                    Some(a) => self.args(a)?,
                    None => Vec::new(),
                };
                mk(ExprKind::Call(name, args))
            }
            Rule::if_expr => {
                let mut branches = Vec::new();
                let mut otherwise = None;
                let mut cond: Option<Expr> = None;
                for q in p.into_inner() {
                    match q.as_rule() {
                        Rule::expr => cond = Some(self.expr(q)?),
                        Rule::expr_block => {
                            let qs = span_of(&q);
                            let body = q
                                .into_inner()
                                .next()
                                .ok_or_else(|| self.err(qs, "expected an expression"))?;
                            let body = self.expr(body)?;
                            match cond.take() {
                                Some(c) => branches.push((c, body)),
                                None => otherwise = Some(Box::new(body)),
                            }
                        }
                        _ => {}
                    }
                }
                mk(ExprKind::If(branches, otherwise))
            }
            Rule::match_expr => {
                let mut subject = None;
                let mut cases = Vec::new();
                for q in p.into_inner() {
                    match q.as_rule() {
                        Rule::expr => subject = Some(Box::new(self.expr(q)?)),
                        Rule::match_case => {
                            let qs = span_of(&q);
                            let mut c = q.into_inner();
                            let (Some(pat), Some(val)) = (c.next(), c.next()) else {
                                return Err(self.err(qs, "expected `pattern => value`"));
                            };
                            let pat = if pat.as_rule() == Rule::wildcard {
                                Pattern::Wildcard
                            } else {
                                Pattern::Expr(self.expr(pat)?)
                            };
                            cases.push((pat, self.expr(val)?));
                        }
                        _ => {}
                    }
                }
                mk(ExprKind::Match(subject, cases))
            }
            _ => Err(self.err(span, "unexpected syntax")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_expr(src: &str) -> Expr {
        let stmts = parse_mapping(&format!("root = {src}")).unwrap();
        match stmts.into_iter().next() {
            Some(Stmt::Assign { value, .. }) => value,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Renders the tree with explicit grouping so precedence is visible.
    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Lit(v) => v.to_text(),
            ExprKind::Name(n) => n.clone(),
            ExprKind::This => "this".into(),
            ExprKind::Field(b, f) => format!("{}.{f}", show(b)),
            ExprKind::Binary(op, l, r) => format!("({} {} {})", show(l), op.symbol(), show(r)),
            ExprKind::Not(x) => format!("!{}", show(x)),
            ExprKind::Neg(x) => format!("-{}", show(x)),
            ExprKind::Method(r, n, a) => format!("{}.{n}({})", show(r), a.len()),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn precedence_follows_bloblang() {
        assert_eq!(show(&root_expr("1 + 2 * 3")), "(1 + (2 * 3))");
        assert_eq!(show(&root_expr("1 - 2 - 3")), "((1 - 2) - 3)");
        assert_eq!(show(&root_expr("a + 1 > 2 && b")), "(((a + 1) > 2) && b)");
        assert_eq!(show(&root_expr("a || b && c")), "((a || b) && c)");
        assert_eq!(show(&root_expr("a | b + 1")), "(a | (b + 1))");
        assert_eq!(show(&root_expr("!a.b() == c")), "(!a.b(0) == c)");
        assert_eq!(show(&root_expr("-x.y * 2")), "(-x.y * 2)");
        assert_eq!(show(&root_expr("10 % 3 / 2")), "((10 % 3) / 2)");
        assert_eq!(show(&root_expr("-5")), "-5");
    }

    #[test]
    fn statements_need_their_own_lines() {
        let e = parse_mapping("root.a = 1 root.b = 2").unwrap_err();
        assert!(e.to_string().contains("new line"), "{e}");
        assert_eq!(
            parse_mapping("root.a = 1\n\n  root.b = 2 # c\n")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn every_statement_form_parses() {
        let src = r#"
import "x.blobl"
map thing {
  root.a = this.b
}
let v = 5
let "w x" = 6
meta foo = "bar"
meta "a b" = 1
meta = {}
@baz = 2
root = this
root."a.b".c[0] = 1
foo.bar = 2
if this.x { root.y = 1 } else if this.z {
  root.y = 2
} else {
  root.y = 3
}
"#;
        let s = parse_mapping(src).unwrap();
        assert_eq!(s.len(), 12);
        match &s[9] {
            Stmt::Assign { target, .. } => assert_eq!(
                target,
                &vec![
                    Seg::Field("a.b".into()),
                    Seg::Field("c".into()),
                    Seg::Index(0)
                ]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_expression_form_parses() {
        for src in [
            r#"{"a": [1, 2.5, "x", """raw "q" """, true, false, null], (this.k): 1,}"#,
            "this.a.0.b[1][-1][1:3][:2][1:]",
            "@foo | @ | $var | meta(\"x\")",
            "if this.a { 1 } else if this.b { 2 } else { 3 }",
            "match this.x { \"a\" => 1, this.y > 2 => 2\n _ => 3 }",
            "match { this.a == 1 => \"x\" }",
            "this.items.map_each(x -> x.name).filter(n -> n != null)",
            "this.foo.(f -> f.bar + f.baz).(this.x)",
            "this.fold(0, item -> item.tally + item.value)",
            "now().ts_format(format: \"2006\", tz: \"UTC\")",
            "this.\"quoted key\".other",
            "foo.bar.baz",
        ] {
            root_expr(src);
        }
    }

    #[test]
    fn a_bare_expression_is_a_mapping() {
        let s = parse_mapping("this.foo.uppercase()").unwrap();
        assert!(matches!(&s[0], Stmt::Assign { target, .. } if target.is_empty()));
    }

    #[test]
    fn parse_errors_say_where_and_what() {
        let e = parse_mapping("root.a = 1\nroot.b = (this.c + \n").unwrap_err();
        let d = e.first().unwrap();
        assert_eq!(d.line, 2, "{e}");
        assert!(d.message.contains("end of input"), "{e}");
        assert!(d.message.contains("expected"), "{e}");
        let e = parse_mapping("root.a = this.b.\n").unwrap_err();
        assert_eq!(e.first().unwrap().line, 1, "{e}");
    }

    #[test]
    fn interpolation_pieces() {
        let p = parse_interpolation("id-${! this.id }-${{! not }}-${!@k}").unwrap();
        assert_eq!(p.len(), 4, "{p:?}");
        assert_eq!(p[2], Piece::Text("-${! not }-".into()));
    }

    #[test]
    fn nesting_and_chains_are_bounded() {
        let deep = format!(
            "root = {}1{}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        let e = parse_mapping(&deep).unwrap_err();
        assert!(e.to_string().contains("nesting deeper"), "{e}");
        let ok = format!(
            "root = {}1{}",
            "(".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        );
        assert!(parse_mapping(&ok).is_ok());
        // Brackets inside strings and comments do not count.
        assert!(parse_mapping(&format!(
            "root = \"{}\" # {}",
            "(".repeat(500),
            "[".repeat(500)
        ))
        .is_ok());
        let long = format!("root = 1{}", " + 1".repeat(MAX_CHAIN + 1));
        assert!(parse_mapping(&long)
            .unwrap_err()
            .to_string()
            .contains("operators"));
        let chain = format!("root = this{}", ".a".repeat(MAX_CHAIN + 1));
        assert!(parse_mapping(&chain)
            .unwrap_err()
            .to_string()
            .contains("chain"));
        let nots = format!("root = {}true", "!".repeat(3 * MAX_CHAIN));
        assert!(parse_mapping(&nots).is_err());
    }

    #[test]
    fn parse_time_is_bounded() {
        // The parser's call budget is the bound, and it is deterministic: a parse that
        // took time exponential in its input would run out of calls and fail. (A clock
        // here would only measure how busy the machine is.)
        let quick = parse_mapping;
        // Nested indexes, valid or left open, read each level once.
        let n = MAX_NESTING - 1;
        let valid = format!("root = {}0{}", "this.a[".repeat(n), "]".repeat(n));
        assert!(quick(&valid).is_ok());
        let open = format!("root = {}", "a[".repeat(n));
        assert!(quick(&open).is_err());
        let slices = format!("root = {}0{}", "this.a[1:".repeat(n), "]".repeat(n));
        assert!(quick(&slices).is_ok());
        assert!(quick("root = this.s[:]").is_ok());
        assert!(quick("root = this.s[]").is_err());
        // Size alone does not run out of budget: a thousand-line mapping parses.
        let big: String = (0..1000)
            .map(|i| format!("root.f{i} = if this.a.b[{i}] > 3 {{ this.c.uppercase().replace_all(\"x\", \"y\") + \"z\" }} else {{ [1, {{\"k\": this.d.or(null)}}] }}\n"))
            .collect();
        assert!(quick(&big).is_ok());
        // A construct still read twice per level runs out of budget and fails.
        let matches = format!("root = {}", "match { ".repeat(40));
        let e = quick(&matches).unwrap_err().to_string();
        assert!(e.contains("too complex"), "{e}");
    }

    #[test]
    fn string_escapes() {
        let e = root_expr(r#""a\n\"b\" \u00e9""#);
        assert_eq!(e.kind, ExprKind::Lit(Value::String("a\n\"b\" é".into())));
    }
}
