//! The compiled form of a mapping, as the compiler leaves it and the executor runs it:
//! names resolved to their specs, arguments in declared order, literals folded.

use regex::Regex;

use super::ast::{BinOp, Seg};
use super::spec::{FunctionSpec, MethodSpec};
use crate::value::Value;

#[derive(Debug)]
pub enum Node {
    Lit(Value),
    This,
    Root,
    Param(u32),
    /// A chain of field reads, `this.a.b.c`.
    Path(Box<Node>, Box<[String]>),
    Index(Box<IndexNode>),
    Slice(Box<SliceNode>),
    Meta(Box<str>),
    MetaAll,
    Var(usize, Box<str>),
    Array(Vec<Node>),
    Object(Vec<(Node, Node)>),
    Not(Box<Node>),
    Neg(Box<Node>),
    Bin(Box<Bin>),
    If(Box<[(Node, Node)]>, Option<Box<Node>>),
    Match(Box<MatchNode>),
    Func(Box<FuncCall>),
    Method(Box<MethodCall>),
    Context(Box<(Node, Lambda)>),
    Deleted,
    Nothing,
}

#[derive(Debug)]
pub struct IndexNode {
    pub target: Node,
    pub index: Node,
    pub text: Box<str>,
}

#[derive(Debug)]
pub struct SliceNode {
    pub target: Node,
    pub from: Option<Node>,
    pub to: Option<Node>,
    pub step: Option<Node>,
    pub text: Box<str>,
}

#[derive(Debug)]
pub struct Bin {
    pub op: BinOp,
    pub lhs: Node,
    pub rhs: Node,
    pub text: Box<str>,
    pub ltext: Box<str>,
    pub rtext: Box<str>,
}

#[derive(Debug)]
pub struct MatchNode {
    pub subject: Option<Node>,
    pub cases: Vec<(Case, Node)>,
}

#[derive(Debug)]
pub enum Case {
    Any,
    Eq(Value),
    Cond(Node),
}

#[derive(Debug)]
pub struct Lambda {
    /// The parameter's slot, or `None` when the body runs with `this` rebound.
    pub param: Option<u32>,
    pub body: Node,
}

pub struct FuncCall {
    pub spec: &'static FunctionSpec,
    pub args: Vec<Option<Node>>,
    pub regexes: Vec<Option<Regex>>,
    pub text: Box<str>,
    /// Per-call state for functions that keep some (`counter`).
    pub state: std::sync::atomic::AtomicI64,
    /// The counters `count()` uses when the mapping has its own (it arrived as data).
    pub counters: Option<std::sync::Arc<crate::mapping::functions::Counters>>,
}

impl std::fmt::Debug for FuncCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FuncCall({})", self.spec.name)
    }
}

pub struct MethodCall {
    pub spec: &'static MethodSpec,
    pub recv: Node,
    /// Arguments that are values (lambda slots are `None`).
    pub args_values: Vec<Option<Node>>,
    /// Arguments that are lambdas (value slots are `None`).
    pub lambdas: Vec<Option<Lambda>>,
    pub regexes: Vec<Option<Regex>>,
    pub text: Box<str>,
}

impl std::fmt::Debug for MethodCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MethodCall({}, {:?})", self.spec.name, self.recv)
    }
}

#[derive(Debug)]
pub enum CStmt {
    Assign {
        target: Vec<Seg>,
        value: Node,
        line: usize,
    },
    Let {
        slot: usize,
        value: Node,
        line: usize,
    },
    Meta {
        key: Option<String>,
        value: Node,
        line: usize,
    },
    If {
        branches: Vec<(Node, Vec<CStmt>)>,
        otherwise: Option<Vec<CStmt>>,
        line: usize,
    },
}

impl CStmt {
    /// The line the statement starts on.
    pub fn line(&self) -> usize {
        match self {
            CStmt::Assign { line, .. }
            | CStmt::Let { line, .. }
            | CStmt::Meta { line, .. }
            | CStmt::If { line, .. } => *line,
        }
    }
}

#[derive(Debug)]
pub struct MapDef {
    pub name: String,
    pub body: Vec<CStmt>,
}

/// A compiled mapping: statements plus the named maps they can apply.
#[derive(Debug, Default)]
pub struct Program {
    pub stmts: Vec<CStmt>,
    pub maps: Vec<MapDef>,
    /// Variable names by slot, for `var("name")`.
    pub var_names: Vec<String>,
    /// Reads `this` at the top level: the payload must parse.
    pub reads_this: bool,
    /// Reads or writes the document at all.
    pub touches_root: bool,
    /// Calls `content()` or similar.
    pub reads_content: bool,
    /// Starts with `root = this` and can run on the input document itself (see
    /// `in_place`).
    pub in_place: bool,
    /// How long one run may take (see `budget`): unlimited when `None`.
    pub budget: Option<std::time::Duration>,
}

impl Program {
    pub fn map(&self, name: &str) -> Option<&MapDef> {
        self.maps.iter().find(|m| m.name == name)
    }
}
