//! Interpolated strings: config fields with `${! expr }` blocks evaluated per message.
//! `${{! x }}` writes a literal `${! x }`.

use bytes::Bytes;

use super::compile::Compiler;
use super::exec::{self, Ctx, MsgView, This};
use super::parser::{parse_interpolation, Piece};
use super::program::{Node, Program};
use super::{Diagnostics, Env, MappingError};
use crate::message::{Batch, Metadata};
use crate::value::Value;

#[derive(Debug)]
enum Part {
    Text(String),
    Expr(Node),
}

/// A string field that may vary per message.
#[derive(Debug)]
pub struct InterpolatedString {
    parts: Vec<Part>,
    prog: Program,
}

impl InterpolatedString {
    pub fn parse(s: &str, env: &Env) -> Result<Self, Diagnostics> {
        let _budget = super::budget::start(env.budget.map(|_| super::budget::TENANT_COMPILE));
        let pieces = parse_interpolation(s)?;
        let mut c = Compiler::new(env, s);
        let mut parts = Vec::with_capacity(pieces.len());
        let mut failed = false;
        for p in pieces {
            match p {
                Piece::Text(t) => parts.push(Part::Text(t)),
                Piece::Expr(e) => match c.expr(&e) {
                    Some(n) => parts.push(Part::Expr(n)),
                    None => failed = true,
                },
            }
        }
        // Surface the compiler's diagnostics (unknown functions and the like).
        let prog = c.program(Vec::new())?;
        if failed {
            return Err(Diagnostics(Vec::new()));
        }
        Ok(InterpolatedString { parts, prog })
    }

    /// True when no part depends on the message.
    pub fn is_static(&self) -> bool {
        self.parts
            .iter()
            .all(|p| matches!(p, Part::Text(_) | Part::Expr(Node::Lit(_))))
    }

    pub fn render(&self, batch: &Batch, index: usize) -> Result<String, MappingError> {
        let bytes = self.render_vec(batch, index)?;
        // Everything written is UTF-8 except raw bytes values, which are made valid here.
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    pub fn render_bytes(&self, batch: &Batch, index: usize) -> Result<Bytes, MappingError> {
        self.render_vec(batch, index).map(Bytes::from)
    }

    fn render_vec(&self, batch: &Batch, index: usize) -> Result<Vec<u8>, MappingError> {
        let mut out: Vec<u8> = Vec::with_capacity(64);
        self.render_into(
            batch,
            index,
            |v, out: &mut Vec<u8>| match v {
                Value::String(s) => out.extend_from_slice(s.as_bytes()),
                Value::Bytes(b) => out.extend_from_slice(b),
                Value::Timestamp(t) => {
                    out.extend_from_slice(crate::mapping::time::format_default(t).as_bytes())
                }
                other => other.write_json(out),
            },
            &mut out,
        )?;
        Ok(out)
    }

    fn render_into<O>(
        &self,
        batch: &Batch,
        index: usize,
        mut write: impl FnMut(&Value, &mut O),
        out: &mut O,
    ) -> Result<(), MappingError>
    where
        O: AsTextSink,
    {
        let _budget = super::budget::start(self.prog.budget);
        let empty = Metadata::new();
        let msg = batch.get(index);
        let cx = Ctx {
            this: match msg {
                Some(m) => This::Msg(m),
                None => This::Val(&exec::NULL),
            },
            root: None,
            vars: &[],
            scope: None,
            meta: msg.map(|m| m.metadata()).unwrap_or(&empty),
            msg: MsgView::of(batch, index),
            prog: &self.prog,
        };
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_text(t),
                Part::Expr(n) => {
                    let v = exec::eval(n, &cx).map_err(|e| MappingError::Query(e.msg))?;
                    write(v.get(), out);
                }
            }
        }
        Ok(())
    }
}

/// Where rendered text goes: a `String` or a byte buffer.
pub trait AsTextSink {
    fn push_text(&mut self, s: &str);
}
impl AsTextSink for String {
    fn push_text(&mut self, s: &str) {
        self.push_str(s);
    }
}
impl AsTextSink for Vec<u8> {
    fn push_text(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[test]
    fn renders_per_message() {
        let i = InterpolatedString::parse(
            "id-${! this.id }-${! @k }-${!batch_index()}",
            &Env::default(),
        )
        .unwrap();
        assert!(!i.is_static());
        let batch = vec![Message::new(&br#"{"id":7}"#[..]).with_meta("k", "v")];
        assert_eq!(i.render(&batch, 0).unwrap(), "id-7-v-0");
        assert_eq!(&i.render_bytes(&batch, 0).unwrap()[..], b"id-7-v-0");
    }

    #[test]
    fn braces_and_strings_inside_blocks() {
        let i = InterpolatedString::parse(
            r#"${! this.x.or("}") }|${!{"a": 1}.a}|${! [1,2].join(",").catch("n") }"#,
            &Env::default(),
        )
        .unwrap();
        let batch = vec![Message::new("{}")];
        assert_eq!(i.render(&batch, 0).unwrap(), "}|1|n");
        let i = InterpolatedString::parse("plain ${VAR} and $! text", &Env::default()).unwrap();
        assert!(i.is_static());
        assert_eq!(i.render(&batch, 0).unwrap(), "plain ${VAR} and $! text");
    }

    #[test]
    fn escapes_and_static() {
        let i = InterpolatedString::parse("a ${{! this.x }} b", &Env::default()).unwrap();
        assert!(i.is_static());
        assert_eq!(i.render(&vec![], 0).unwrap(), "a ${! this.x } b");
    }

    #[test]
    fn bad_expression_is_a_diagnostic() {
        let e = InterpolatedString::parse("x ${! this.foo.nope_method() }", &Env::default())
            .unwrap_err();
        assert!(e.to_string().contains("unknown method"), "{e}");
        assert!(InterpolatedString::parse("x ${! this. }", &Env::default()).is_err());
    }
}
