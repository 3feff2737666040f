//! The syntax tree the parser produces: what the source said, nothing resolved yet.

use crate::value::Value;

/// Byte offsets into the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    Import {
        path: String,
        span: Span,
    },
    Map {
        name: String,
        body: Vec<Stmt>,
        span: Span,
    },
    Let {
        name: String,
        value: Expr,
        span: Span,
    },
    /// `meta foo = x` (key set) or `meta = {...}` (all metadata).
    Meta {
        key: Option<String>,
        value: Expr,
        span: Span,
    },
    /// `root.a.b = x`; an empty target is `root` itself.
    Assign {
        target: Vec<Seg>,
        value: Expr,
        span: Span,
    },
    If {
        branches: Vec<(Expr, Vec<Stmt>)>,
        otherwise: Option<Vec<Stmt>>,
        span: Span,
    },
}

impl Stmt {
    pub fn span(&self) -> Span {
        match self {
            Stmt::Import { span, .. }
            | Stmt::Map { span, .. }
            | Stmt::Let { span, .. }
            | Stmt::Meta { span, .. }
            | Stmt::Assign { span, .. }
            | Stmt::If { span, .. } => *span,
        }
    }
}

/// One step of an assignment target.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    Field(String),
    Index(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Pipe,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::Pipe => "|",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Lit(Value),
    This,
    Root,
    /// A bare name: a lambda parameter if one is in scope, else a field of `this`.
    Name(String),
    Field(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    /// `x[from:to]` or `x[from:to:step]`.
    Slice(
        Box<Expr>,
        Option<Box<Expr>>,
        Option<Box<Expr>>,
        Option<Box<Expr>>,
    ),
    /// `@foo`, or `@` for all metadata.
    Meta(Option<String>),
    Var(String),
    Array(Vec<Expr>),
    Object(Vec<(Expr, Expr)>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    If(Vec<(Expr, Expr)>, Option<Box<Expr>>),
    Match(Option<Box<Expr>>, Vec<(Pattern, Expr)>),
    Call(String, Vec<Arg>),
    Method(Box<Expr>, String, Vec<Arg>),
    /// `x.(y -> ...)` or `x.(expr)`.
    Context(Box<Expr>, Box<Arg>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    Wildcard,
    Expr(Expr),
}

/// A call argument: maybe named, maybe a lambda.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub name: Option<String>,
    pub param: Option<String>,
    pub value: Expr,
    pub is_lambda: bool,
    pub span: Span,
}
