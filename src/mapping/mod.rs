//! The mapping language: a Bloblang dialect compiled once and run per message.
//!
//! `Mapping::compile` parses (`parser`), resolves and folds (`compile`) a mapping; `apply`,
//! `mutate` and `query` run it (`exec`) for the `mapping`, `mutation` and `check` uses.
//! `InterpolatedString` handles `${! expr }` fields. The library of functions and methods
//! lives in `functions/` and `methods/`, one family per file, each entry with examples
//! that run as tests.

pub mod ast;
pub mod budget;
pub mod compile;
pub mod diagnostic;
pub mod exec;
pub mod functions;
pub mod go_json;
pub mod go_time;
mod in_place;
pub mod interp;
pub mod methods;
pub mod parser;
pub mod period;
pub mod program;
pub mod spec;
pub mod time;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;

pub use diagnostic::{Diagnostic, Diagnostics};
pub use interp::InterpolatedString;

use compile::Compiler;
use exec::{Frame, MsgView, Slot, StmtError, This};
use program::Program;
use spec::{FunctionSpec, MethodSpec};

use crate::message::{Batch, Message};
use crate::value::Value;

/// A runtime failure: which statement, which expression, which types.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MappingError {
    #[error("failed {what} (line {line}): {msg}")]
    Statement {
        line: usize,
        what: &'static str,
        msg: String,
    },
    #[error("{0}")]
    Query(String),
    #[error("message {index} is not in the batch (batch size {size})")]
    NoMessage { index: usize, size: usize },
}

/// A message a mapping failed on, given back as it was, and why.
#[derive(Debug)]
pub struct Failed {
    pub message: Message,
    pub error: MappingError,
}

impl From<StmtError> for MappingError {
    fn from(e: StmtError) -> Self {
        MappingError::Statement {
            line: e.line,
            what: e.what,
            msg: e.msg,
        }
    }
}

static FUNCTIONS: LazyLock<BTreeMap<&'static str, &'static FunctionSpec>> =
    LazyLock::new(|| functions::all().into_iter().map(|f| (f.name, f)).collect());
static METHODS: LazyLock<BTreeMap<&'static str, &'static MethodSpec>> =
    LazyLock::new(|| methods::all().into_iter().map(|m| (m.name, m)).collect());

/// What a mapping may call, and where `import` looks.
#[derive(Clone)]
pub struct Env {
    import_dir: Option<PathBuf>,
    /// Functions left out of this environment.
    without: Arc<Vec<&'static str>>,
    /// Methods left out of this environment.
    without_methods: Arc<Vec<&'static str>>,
    /// Whether `import` may read files (not for mappings that arrive with the data).
    imports: bool,
    /// The counters of `count()`: the process-wide ones when `None`.
    counters: Option<Arc<functions::Counters>>,
    /// How long one run (or compile) may take: unlimited when `None`.
    budget: Option<std::time::Duration>,
}

impl Default for Env {
    fn default() -> Self {
        Env {
            import_dir: None,
            without: Arc::new(Vec::new()),
            without_methods: Arc::new(Vec::new()),
            imports: true,
            counters: None,
            budget: None,
        }
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("import_dir", &self.import_dir)
            .field("without", &self.without)
            .field("without_methods", &self.without_methods)
            .field("imports", &self.imports)
            .field("counters", &self.counters.is_some())
            .field("budget", &self.budget)
            .finish()
    }
}

impl Env {
    /// Every function, with `import` paths relative to `dir`.
    pub fn with_import_dir(dir: impl Into<PathBuf>) -> Self {
        Env {
            import_dir: Some(dir.into()),
            ..Env::default()
        }
    }

    /// Only functions whose result depends on their arguments alone.
    pub fn only_pure(&self) -> Self {
        let without = FUNCTIONS
            .values()
            .filter(|f| !f.pure)
            .map(|f| f.name)
            .collect();
        Env {
            without: Arc::new(without),
            ..self.clone()
        }
    }

    /// No functions that read a message (for places where there is none).
    pub fn no_message(&self) -> Self {
        let mut without: Vec<&'static str> = (*self.without).clone();
        without.extend(
            FUNCTIONS
                .values()
                .filter(|f| f.needs_message)
                .map(|f| f.name),
        );
        Env {
            without: Arc::new(without),
            ..self.clone()
        }
    }

    /// For a mapping that arrives as data: no function or method that reads the host
    /// (every one of the environment and GeoIP families, so one added there is kept out
    /// too), no `import`, counters of its own and a time budget per run.
    pub fn sandboxed(&self) -> Self {
        let mut without: Vec<&'static str> = (*self.without).clone();
        without.extend(functions::host());
        let mut without_methods: Vec<&'static str> = (*self.without_methods).clone();
        without_methods.extend(methods::host());
        Env {
            without: Arc::new(without),
            without_methods: Arc::new(without_methods),
            imports: false,
            budget: Some(budget::TENANT),
            counters: Some(
                self.counters
                    .clone()
                    .unwrap_or_else(|| Arc::new(functions::Counters::scoped())),
            ),
            ..self.clone()
        }
    }

    /// `count()` in this environment's mappings uses `counters` (shared by the mappings
    /// of one stream) instead of the process-wide ones.
    pub fn with_counters(&self, counters: Arc<functions::Counters>) -> Self {
        Env {
            counters: Some(counters),
            ..self.clone()
        }
    }

    /// Whether `name` is a function or method this environment leaves out (it exists).
    pub fn withholds(&self, name: &str) -> bool {
        self.without.contains(&name) || self.without_methods.contains(&name)
    }

    pub fn function(&self, name: &str) -> Option<&'static FunctionSpec> {
        FUNCTIONS
            .get(name)
            .copied()
            .filter(|f| !self.without.contains(&f.name))
    }
    pub fn method(&self, name: &str) -> Option<&'static MethodSpec> {
        METHODS
            .get(name)
            .copied()
            .filter(|m| !self.without_methods.contains(&m.name))
    }
    pub fn function_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        FUNCTIONS
            .keys()
            .copied()
            .filter(|n| !self.without.contains(n))
    }
    pub fn method_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        METHODS
            .keys()
            .copied()
            .filter(|m| !self.without_methods.contains(m))
    }
    pub fn functions(&self) -> impl Iterator<Item = &'static FunctionSpec> + '_ {
        FUNCTIONS
            .values()
            .copied()
            .filter(|f| !self.without.contains(&f.name))
    }
    pub fn methods(&self) -> impl Iterator<Item = &'static MethodSpec> + '_ {
        METHODS.values().copied()
    }
}

/// A compiled mapping. Cheap to share between threads.
#[derive(Debug, Clone)]
pub struct Mapping {
    prog: Arc<Program>,
}

impl Mapping {
    pub fn compile(src: &str, env: &Env) -> Result<Mapping, Diagnostics> {
        // Constant parts are computed while compiling, under a budget too.
        let _budget = budget::start(env.budget.map(|_| budget::TENANT_COMPILE));
        let stmts = parser::parse_mapping(src)?;
        let prog = Compiler::new(env, src).program(stmts)?;
        Ok(Mapping {
            prog: Arc::new(prog),
        })
    }

    fn frame<'m>(&self, meta: Cow<'m, crate::message::Metadata>, this_is_root: bool) -> Frame<'m> {
        Frame {
            root: Slot::Nothing,
            vars: vec![None; self.prog.var_names.len()],
            meta,
            this_is_root,
        }
    }

    /// Runs the mapping against message `index` of `batch`, from an empty root.
    fn run_on<'b>(
        &self,
        batch: &'b [Message],
        index: usize,
    ) -> Result<(&'b Message, Frame<'b>), MappingError> {
        let _budget = budget::start(self.prog.budget);
        let msg = batch.get(index).ok_or(MappingError::NoMessage {
            index,
            size: batch.len(),
        })?;
        let mut fr = self.frame(Cow::Borrowed(msg.metadata()), false);
        exec::run(
            &self.prog,
            &self.prog.stmts,
            &mut fr,
            This::Msg(msg),
            MsgView::of(batch, index),
        )?;
        Ok((msg, fr))
    }

    /// Runs the mapping with `this` bound to a bare value: no message, no metadata.
    fn run_on_value(&self, this: &Value) -> Result<Frame<'static>, MappingError> {
        let _budget = budget::start(self.prog.budget);
        let mut fr = self.frame(Cow::Owned(crate::message::Metadata::new()), false);
        exec::run(
            &self.prog,
            &self.prog.stmts,
            &mut fr,
            This::Val(this),
            MsgView::NONE,
        )?;
        Ok(fr)
    }

    /// The `mapping` processor: builds a new message from message `index` of `batch`.
    /// `None` means the mapping deleted it. Metadata carries over unless changed.
    pub fn apply(&self, batch: &[Message], index: usize) -> Result<Option<Message>, MappingError> {
        let (msg, fr) = self.run_on(batch, index)?;
        let mut out = match fr.root {
            Slot::Deleted => return Ok(None),
            Slot::Nothing => Message::new(msg.payload().clone()),
            Slot::Val(v) => Message::from_value(v),
        };
        match fr.meta {
            // Unchanged: share the input's metadata rather than copy it.
            Cow::Borrowed(_) => out.share_metadata(msg),
            Cow::Owned(meta) => out.set_metadata(meta),
        }
        if let Some(e) = msg.error() {
            out.set_error(e);
        }
        Ok(Some(out))
    }

    /// Whether runs have a time budget: the mapping arrived as data.
    pub fn is_budgeted(&self) -> bool {
        self.prog.budget.is_some()
    }

    /// Whether [`Mapping::apply_owned`] edits the input document instead of a copy.
    pub fn edits_in_place(&self) -> bool {
        self.prog.in_place
    }

    /// Whether the mapping reads `this` (the parsed payload) at all.
    pub fn reads_this(&self) -> bool {
        self.prog.reads_this
    }

    /// [`Mapping::apply`] on a message the caller gives up: a mapping that starts with
    /// `root = this` edits the parsed input instead of a copy of it (see `in_place`).
    /// On failure the message comes back as it was, with the error.
    pub fn apply_owned(&self, mut msg: Message) -> Result<Option<Message>, Box<Failed>> {
        let _budget = budget::start(self.prog.budget);
        let prog = &*self.prog;
        // What gives the message back on failure: its bytes (the rest of the message is
        // left as it was), or a copy when only the parsed form is current.
        let raw = match msg.payload_if_current() {
            Some(raw) if prog.in_place => raw.clone(),
            _ => return self.apply_copied(msg),
        };
        let Ok(doc) = msg.take_structured() else {
            // Not JSON (the message is left whole, the parse error cached): the copying
            // run reports it, as `root = this` does.
            return self.apply_copied(msg);
        };
        let meta = msg.shared_metadata().cloned();
        let mut fr = self.frame(borrowed(&meta), true);
        fr.root = Slot::Val(doc);
        // Nothing run here reads the message (see `in_place`): no view of it.
        let res = exec::run(
            prog,
            &prog.stmts[1..],
            &mut fr,
            This::Val(&exec::NULL),
            MsgView::NONE,
        );
        match res {
            Ok(()) => Ok(write_back(fr, &mut msg, true).then_some(msg)),
            Err(e) => {
                msg.set_payload(raw);
                Err(Box::new(Failed {
                    message: msg,
                    error: e.into(),
                }))
            }
        }
    }

    /// [`Mapping::apply`] on a message of its own, handed back on failure.
    fn apply_copied(&self, msg: Message) -> Result<Option<Message>, Box<Failed>> {
        self.apply(std::slice::from_ref(&msg), 0).map_err(|error| {
            Box::new(Failed {
                message: msg,
                error,
            })
        })
    }

    /// Runs the mapping with no input message (the `generate` input): `this` is null.
    pub fn generate(&self) -> Result<Option<Message>, MappingError> {
        let fr = self.run_on_value(&exec::NULL)?;
        let mut out = match fr.root {
            Slot::Deleted => return Ok(None),
            Slot::Nothing => Message::new(Bytes::new()),
            Slot::Val(v) => Message::from_value(v),
        };
        out.set_metadata(fr.meta.into_owned());
        Ok(Some(out))
    }

    /// The `mutation` processor: edits `msg` in place. `index` and `size` are its place
    /// in the batch. Returns false when the mapping deleted the message.
    pub fn mutate(
        &self,
        msg: &mut Message,
        index: usize,
        size: usize,
    ) -> Result<bool, MappingError> {
        let prog = &*self.prog;
        let _budget = budget::start(self.prog.budget);
        let payload = prog.reads_content.then(|| msg.payload().clone());
        let error = msg.error().map(str::to_owned);
        let meta = msg.shared_metadata().cloned();
        let mut fr = self.frame(borrowed(&meta), true);
        let mut took = false;
        if prog.touches_root {
            match msg.take_structured() {
                Ok(v) => {
                    fr.root = Slot::Val(v);
                    took = true;
                }
                Err(e) if prog.reads_this => {
                    return Err(MappingError::Query(format!(
                        "unable to reference `this`: {e}"
                    )));
                }
                Err(_) => {}
            }
        }
        let view = MsgView {
            msg: None,
            batch: None,
            payload: payload.as_ref(),
            meta_in: None,
            error: error.as_deref(),
            index,
            size,
        };
        let res = exec::run(prog, &prog.stmts, &mut fr, This::Val(&exec::NULL), view);
        let kept = write_back(fr, msg, took);
        res?;
        Ok(kept)
    }

    /// Convenience for a batch: mutates message `index` of `batch`.
    pub fn mutate_in(&self, batch: &mut Batch, index: usize) -> Result<bool, MappingError> {
        let size = batch.len();
        let msg = batch
            .get_mut(index)
            .ok_or(MappingError::NoMessage { index, size })?;
        self.mutate(msg, index, size)
    }

    /// The `branch` result map: runs with `this` bound to `source` (the branch's result)
    /// and `root` starting as `target`'s document, editing `target` in place. Metadata
    /// writes go to `target`.
    pub fn apply_onto(&self, target: &mut Message, source: &Message) -> Result<bool, MappingError> {
        let _budget = budget::start(self.prog.budget);
        let prog = &*self.prog;
        let meta = target.shared_metadata().cloned();
        let mut fr = self.frame(borrowed(&meta), false);
        let mut took = false;
        if prog.touches_root {
            if let Ok(v) = target.take_structured() {
                fr.root = Slot::Val(v);
                took = true;
            }
        }
        let batch = std::slice::from_ref(source);
        let res = exec::run(
            prog,
            &prog.stmts,
            &mut fr,
            This::Msg(source),
            MsgView::of(batch, 0),
        );
        let kept = write_back(fr, target, took);
        res?;
        Ok(kept)
    }

    /// Runs the mapping as a query (a `switch` check) and returns what it assigned to
    /// `root`, null when nothing.
    pub fn query(&self, msg: &Message) -> Result<Value, MappingError> {
        self.query_in(std::slice::from_ref(msg), 0)
    }

    /// Evaluates a check (a `switch` case's, a `while`'s) for message `index` of
    /// `batch`: it must give a bool.
    pub fn check(&self, batch: &[Message], index: usize) -> Result<bool, MappingError> {
        match self.query_in(batch, index)? {
            Value::Bool(b) => Ok(b),
            other => Err(MappingError::Query(format!(
                "check must give a bool, got {}",
                spec::describe(&other)
            ))),
        }
    }

    /// Evaluates a check for `msg` with `meta` standing for its metadata (what `@` and
    /// `metadata()` read): a hub's per-subscriber filter, which sees the subscriber
    /// under `@caller` beside the message's own metadata without copying either.
    pub fn check_with_meta(
        &self,
        msg: &Message,
        meta: &crate::message::Metadata,
    ) -> Result<bool, MappingError> {
        let _budget = budget::start(self.prog.budget);
        let mut fr = self.frame(Cow::Borrowed(meta), false);
        let batch = std::slice::from_ref(msg);
        let view = MsgView {
            meta_in: Some(meta),
            ..MsgView::of(batch, 0)
        };
        exec::run(&self.prog, &self.prog.stmts, &mut fr, This::Msg(msg), view)?;
        match fr.root {
            Slot::Val(Value::Bool(b)) => Ok(b),
            Slot::Val(other) => Err(MappingError::Query(format!(
                "check must give a bool, got {}",
                spec::describe(&other)
            ))),
            _ => Err(MappingError::Query(
                "check must give a bool, got nothing".into(),
            )),
        }
    }

    /// Like [`Mapping::query`], with the message's place in its batch.
    pub fn query_in(&self, batch: &[Message], index: usize) -> Result<Value, MappingError> {
        let (_, fr) = self.run_on(batch, index)?;
        Ok(match fr.root {
            Slot::Val(v) => v,
            _ => Value::Null,
        })
    }

    /// Runs the mapping over a bare value (no message): tests and tools.
    pub fn query_value(&self, value: &Value) -> Result<Value, MappingError> {
        let fr = self.run_on_value(value)?;
        Ok(match fr.root {
            Slot::Val(v) => v,
            _ => Value::Null,
        })
    }
}

/// A message's metadata for a frame that edits the message in place, borrowed from a
/// handle of its own (the message is changed meanwhile): a mapping that leaves the
/// metadata alone neither copies a map other copies of the message share (the one kept
/// for sending it again) nor allocates a new one; the first write copies it.
fn borrowed(meta: &Option<Arc<crate::message::Metadata>>) -> Cow<'_, crate::message::Metadata> {
    Cow::Borrowed(meta.as_deref().unwrap_or(&crate::message::NO_METADATA))
}

/// Puts what a frame built back into `target` (document and metadata); false when the
/// mapping deleted the message. `took`: the document was moved into the frame, so a root
/// left unset means null.
fn write_back(fr: Frame<'_>, target: &mut Message, took: bool) -> bool {
    // Borrowed: the mapping left the metadata alone, and the target still holds it.
    if let Cow::Owned(meta) = fr.meta {
        target.set_metadata(meta);
    }
    match fr.root {
        Slot::Deleted => false,
        Slot::Val(v) => {
            target.set_structured(v);
            true
        }
        Slot::Nothing => {
            if took {
                target.set_structured(Value::Null);
            }
            true
        }
    }
}

#[cfg(test)]
mod tests;
