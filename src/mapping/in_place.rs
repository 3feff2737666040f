//! Whether a mapping may edit its input document in place. Most mappings start with
//! `root = this` and then change a few fields: run literally, that copies the whole input
//! before editing the copy. When no later statement reads a part of `this` that an
//! earlier one changed, `this` and `root` are the same document at every read, so the
//! mapping can take the input itself and run the rest as a mutation.
//!
//! The check is conservative: anything it cannot follow (a bare `this`, a `match` on
//! `this`, functions that read the message or the batch) keeps the literal copy.

use super::ast::Seg;
use super::program::{CStmt, Case, Lambda, Node, Program};

/// A place a statement writes: a path under `root`.
type Write<'a> = &'a [Seg];

/// A place an expression reads: a path under `this` (empty: all of it).
type Read<'a> = &'a [String];

/// The most reads, and the most writes, the check follows.
const MAX_PATHS: usize = 512;

/// True when `prog` starts with `root = this`, nothing in it (its named maps included)
/// reads the message or the batch, and no later statement reads what an earlier one
/// (after the first) wrote.
pub fn edits_in_place(prog: &Program) -> bool {
    let Some((first, rest)) = prog.stmts.split_first() else {
        return false;
    };
    if !matches!(first, CStmt::Assign { target, value: Node::This, .. } if target.is_empty()) {
        return false;
    }
    let mut exprs = Vec::new();
    stmt_exprs(&prog.stmts, &mut exprs);
    for m in &prog.maps {
        stmt_exprs(&m.body, &mut exprs);
    }
    if exprs.into_iter().any(reads_message) {
        return false;
    }
    let mut written: Vec<Write<'_>> = Vec::new();
    for st in rest {
        let mut reads = Vec::new();
        if !stmt_reads(st, &mut reads) {
            return false;
        }
        let mut own = Vec::new();
        stmt_writes(st, &mut own);
        // An assignment reads before it writes; inside an `if`, one branch statement may
        // read what an earlier one wrote.
        let before_reads: &[Write<'_>] = match st {
            CStmt::If { .. } => &own,
            _ => &[],
        };
        // Each read is compared with each earlier write: past a few hundred of either
        // that costs more than the copy it saves (and a huge program would take
        // quadratic time to compile).
        if reads.len() > MAX_PATHS || written.len() + own.len() > MAX_PATHS {
            return false;
        }
        let clash = reads
            .iter()
            .any(|r| written.iter().chain(before_reads).any(|w| overlaps(r, w)));
        if clash {
            return false;
        }
        written.extend(own);
    }
    true
}

/// Whether `node` reads the message or the batch: those see a different view when the
/// mapping runs as a mutation.
fn reads_message(node: &Node) -> bool {
    let mut found = false;
    walk(node, &mut |n| {
        found |= match n {
            Node::Func(f) => f.spec.needs_message,
            Node::Method(m) => matches!(m.spec.name, "from" | "from_all"),
            _ => false,
        };
    });
    found
}

/// Every expression of `stmts`, nested ones included.
fn stmt_exprs<'a>(stmts: &'a [CStmt], out: &mut Vec<&'a Node>) {
    for st in stmts {
        match st {
            CStmt::Assign { value, .. } | CStmt::Let { value, .. } | CStmt::Meta { value, .. } => {
                out.push(value)
            }
            CStmt::If {
                branches,
                otherwise,
                ..
            } => {
                for (cond, body) in branches {
                    out.push(cond);
                    stmt_exprs(body, out);
                }
                if let Some(body) = otherwise {
                    stmt_exprs(body, out);
                }
            }
        }
    }
}

fn stmt_writes<'a>(st: &'a CStmt, out: &mut Vec<Write<'a>>) {
    match st {
        CStmt::Assign { target, .. } => out.push(target),
        CStmt::Let { .. } | CStmt::Meta { .. } => {}
        CStmt::If {
            branches,
            otherwise,
            ..
        } => {
            for (_, body) in branches {
                body.iter().for_each(|s| stmt_writes(s, out));
            }
            if let Some(body) = otherwise {
                body.iter().for_each(|s| stmt_writes(s, out));
            }
        }
    }
}

/// Collects what `st` reads of `this`; false when it reads in a way not followed here.
fn stmt_reads<'a>(st: &'a CStmt, out: &mut Vec<Read<'a>>) -> bool {
    let mut exprs = Vec::new();
    stmt_exprs(std::slice::from_ref(st), &mut exprs);
    exprs.into_iter().all(|e| reads(e, out))
}

/// Collects the paths of `this` that `node` reads, where `this` is the document.
fn reads<'a>(node: &'a Node, out: &mut Vec<Read<'a>>) -> bool {
    match node {
        Node::This => {
            out.push(&[]);
            true
        }
        Node::Path(base, fields) if matches!(**base, Node::This) => {
            out.push(fields);
            true
        }
        // `this` inside the cases is the subject; without one, the cases compare `this`.
        Node::Match(m) => match &m.subject {
            Some(subject) => reads(subject, out),
            None => {
                out.push(&[]);
                m.cases.iter().all(|(case, body)| {
                    let cond = match case {
                        Case::Cond(c) => reads(c, out),
                        Case::Any | Case::Eq(_) => true,
                    };
                    cond && reads(body, out)
                })
            }
        },
        Node::Context(c) => reads(&c.0, out) && lambda_reads(&c.1, out),
        Node::Method(m) => {
            reads(&m.recv, out)
                && m.args_values.iter().flatten().all(|a| reads(a, out))
                && m.lambdas.iter().flatten().all(|l| lambda_reads(l, out))
        }
        other => {
            let mut ok = true;
            for child in children(other) {
                ok &= reads(child, out);
            }
            ok
        }
    }
}

/// A lambda without a parameter rebinds `this`; with one, `this` is still the document.
fn lambda_reads<'a>(l: &'a Lambda, out: &mut Vec<Read<'a>>) -> bool {
    match l.param {
        Some(_) => reads(&l.body, out),
        None => true,
    }
}

/// The direct sub-expressions of a node (lambda bodies included).
fn children(node: &Node) -> Vec<&Node> {
    match node {
        Node::Lit(_)
        | Node::This
        | Node::Root
        | Node::Param(_)
        | Node::Meta(_)
        | Node::MetaAll
        | Node::Var(..)
        | Node::Deleted
        | Node::Nothing => Vec::new(),
        Node::Path(base, _) => vec![base],
        Node::Index(i) => vec![&i.target, &i.index],
        Node::Slice(s) => std::iter::once(&s.target)
            .chain(s.from.iter())
            .chain(s.to.iter())
            .chain(s.step.iter())
            .collect(),
        Node::Array(items) => items.iter().collect(),
        Node::Object(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        Node::Not(n) | Node::Neg(n) => vec![n],
        Node::Bin(b) => vec![&b.lhs, &b.rhs],
        Node::If(branches, otherwise) => branches
            .iter()
            .flat_map(|(c, v)| [c, v])
            .chain(otherwise.as_deref())
            .collect(),
        Node::Match(m) => m
            .subject
            .iter()
            .chain(m.cases.iter().flat_map(|(case, body)| {
                let cond = match case {
                    Case::Cond(c) => Some(c),
                    _ => None,
                };
                cond.into_iter().chain(std::iter::once(body))
            }))
            .collect(),
        Node::Func(f) => f.args.iter().flatten().collect(),
        Node::Method(m) => std::iter::once(&m.recv)
            .chain(m.args_values.iter().flatten())
            .chain(m.lambdas.iter().flatten().map(|l| &l.body))
            .collect(),
        Node::Context(c) => vec![&c.0, &c.1.body],
    }
}

fn walk(node: &Node, f: &mut impl FnMut(&Node)) {
    f(node);
    for child in children(node) {
        walk(child, f);
    }
}

/// Whether reading `read` can see what writing `write` changed: one path is a prefix
/// of the other. An index may name any item, so it matches any field.
fn overlaps(read: Read<'_>, write: Write<'_>) -> bool {
    read.iter().zip(write).all(|(r, w)| match w {
        Seg::Field(name) => name == r,
        Seg::Index(_) => true,
    })
}

#[cfg(test)]
mod tests {
    use crate::mapping::{Env, Mapping};

    fn in_place(src: &str) -> bool {
        Mapping::compile(src, &Env::default())
            .unwrap()
            .edits_in_place()
    }

    #[test]
    fn edits_that_never_read_back_what_they_changed() {
        assert!(in_place(
            "root = this\nroot.b = this.a.uppercase()\nroot.n = this.x * 2"
        ));
        assert!(in_place("root = this\nroot.a = deleted()\nroot.b = this.c"));
        assert!(in_place(
            "root = this\nroot.tags = this.tags.map_each(t -> t.uppercase())"
        ));
        assert!(in_place(
            "root = this\nroot.ids = this.items.map_each(this.id)\nroot.n = this.n"
        ));
        assert!(in_place("root = this\nlet x = this.a\nroot.a = $x + 1"));
    }

    #[test]
    fn reading_what_an_earlier_statement_changed_keeps_the_copy() {
        assert!(!in_place("root = this\nroot.a = 1\nroot.b = this.a"));
        assert!(!in_place("root = this\nroot.a.b = 1\nroot.c = this.a"));
        assert!(!in_place("root = this\nroot.a = 1\nroot.c = this.a.b"));
        assert!(!in_place(
            "root = this\nroot.a = deleted()\nroot.b = this.a"
        ));
        assert!(!in_place("root = this\nroot.a = 1\nroot.all = this"));
        assert!(!in_place("root = this\nroot.l[0] = 1\nroot.c = this.l"));
        assert!(!in_place(
            "root = this\nroot.a = 1\nroot.x = this.items.map_each(i -> this.a)"
        ));
        assert!(!in_place(
            "root = this\nif this.k { root.a = 1\nroot.b = this.a }"
        ));
        assert!(!in_place("root = this\nroot = {}\nroot.b = this.a"));
    }

    #[test]
    fn mappings_that_do_not_start_from_this_or_read_the_message() {
        assert!(!in_place("root.a = this.a"));
        assert!(!in_place("root = this.a\nroot.b = 1"));
        assert!(!in_place("root = this\nroot.c = content().string()"));
        assert!(!in_place("root = this\nroot.c = this.a.from(0)"));
        assert!(!in_place("root = this\nroot.i = batch_index()"));
    }

    #[test]
    fn in_place_gives_what_the_copy_gives() {
        let cases = [
            (
                "root = this\nroot.b = this.a.uppercase()\nroot.n = this.x * 2",
                r#"{"a":"hi","x":4}"#,
            ),
            (
                "root = this\nroot.a = deleted()\nroot.b = this.a",
                r#"{"a":1}"#,
            ),
            ("root = this\nroot.a = 1\nroot.b = this.a", r#"{"a":2}"#),
            ("root = this\nroot = deleted()", r#"{"a":2}"#),
            ("root = this\nroot.n = this.n + 1", "not json"),
            ("root = this\nroot.x = this.a.number()", r#"{"a":"nan"}"#),
            ("root = this\n@k = this.a\nroot.m = @k", r#"{"a":"v"}"#),
        ];
        for (src, input) in cases {
            let m = Mapping::compile(src, &Env::default()).unwrap();
            let msg = crate::message::Message::new(input.as_bytes().to_vec()).with_meta("old", "m");
            let copied = m.apply(std::slice::from_ref(&msg), 0);
            let owned = m.apply_owned(msg);
            match (copied, owned) {
                (Ok(Some(a)), Ok(Some(b))) => {
                    assert_eq!(a.payload(), b.payload(), "{src}");
                    assert_eq!(a.metadata(), b.metadata(), "{src}");
                }
                (Ok(None), Ok(None)) => {}
                (Err(a), Err(f)) => {
                    assert_eq!(a, f.error, "{src}");
                    assert_eq!(&f.message.payload()[..], input.as_bytes(), "{src}");
                    assert_eq!(f.message.meta_str("old").as_deref(), Some("m"), "{src}");
                }
                (a, b) => panic!("{src}: {a:?} against {b:?}"),
            }
        }
    }
}
