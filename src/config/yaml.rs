//! YAML documents as a tree that remembers where every node came from.
//!
//! serde_yaml drops positions, so documents are read from yaml-rust2's marked events into
//! [`Node`]s; [`super::de`] then deserializes the typed configs from this tree and reports
//! each error at the node that caused it. `${VAR}` and `${VAR:default}` are substituted in
//! every scalar here, before any value is typed.

use std::collections::HashMap;
use std::sync::Arc;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

use super::error::{ConfigError, ConfigErrors, Location};

/// Where a node starts: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    pub line: usize,
    pub col: usize,
}

impl From<Marker> for Mark {
    fn from(m: Marker) -> Self {
        Mark {
            line: m.line(),
            col: m.col() + 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// `plain` is false for quoted and block scalars, which are always strings.
    Scalar {
        value: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub mark: Mark,
}

impl Node {
    pub fn scalar(value: &str) -> Node {
        Node {
            kind: NodeKind::Scalar {
                value: value.to_owned(),
                plain: true,
            },
            mark: Mark::default(),
        }
    }

    /// True for an empty document, `~`, `null` or an empty value.
    pub fn is_null(&self) -> bool {
        matches!(&self.kind, NodeKind::Scalar { value, plain: true } if matches!(value.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The value under `key` in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn entries(&self) -> &[(Node, Node)] {
        match &self.kind {
            NodeKind::Map(entries) => entries,
            _ => &[],
        }
    }

    pub fn describe(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar { .. } if self.is_null() => "null",
            NodeKind::Scalar { .. } => "a scalar",
            NodeKind::Seq(_) => "a sequence",
            NodeKind::Map(_) => "a mapping",
        }
    }
}

/// A parsed document: its tree and the name it is reported under.
#[derive(Debug, Clone)]
pub struct Document {
    pub file: Arc<str>,
    pub root: Node,
}

impl Document {
    /// Where the node at a document path (`output.broker.outputs[1].http_client`) is
    /// written: the key that names it, or the sequence item. A path that leaves the tree
    /// stops at the deepest node it reached.
    pub fn locate(&self, path: &str) -> Mark {
        let mut node = &self.root;
        let mut mark = first_key(node);
        for part in path.split('.').filter(|p| !p.is_empty()) {
            let (key, indexes) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                let Some((k, v)) = node.entries().iter().find(|(k, _)| k.as_str() == Some(key))
                else {
                    return mark;
                };
                mark = k.mark;
                node = v;
            }
            for index in indexes.split('[').filter_map(|i| i.strip_suffix(']')) {
                let item = match (&node.kind, index.parse::<usize>()) {
                    (NodeKind::Seq(items), Ok(i)) => items.get(i),
                    _ => None,
                };
                let Some(item) = item else {
                    return mark;
                };
                mark = first_key(item);
                node = item;
            }
        }
        mark
    }

    pub fn location(&self, path: &str, mark: Mark) -> Location {
        Location {
            file: self.file.clone(),
            path: path.to_owned(),
            line: mark.line,
            col: mark.col,
        }
    }
}

/// Where a node is written. A block mapping's own mark sits after its first key, so a
/// mapping is placed at that key.
fn first_key(node: &Node) -> Mark {
    node.entries().first().map_or(node.mark, |(k, _)| k.mark)
}

/// Parses one YAML document, substituting environment variables through `env`.
pub fn parse(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Document, ConfigErrors> {
    let file: Arc<str> = file.into();
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    let loaded = builder.read(&mut parser);
    if !builder.errors.is_empty() {
        let errors = builder.errors.into_iter().map(|(message, path, mark)| {
            ConfigError::new(message).at(Location {
                file: file.clone(),
                path,
                line: mark.line,
                col: mark.col,
            })
        });
        return Err(ConfigErrors(errors.collect()));
    }
    if let Err(e) = loaded {
        let mark = Mark::from(*e.marker());
        return Err(ConfigError::new(format!("invalid YAML: {}", e.info()))
            .at(Location {
                file,
                path: String::new(),
                line: mark.line,
                col: mark.col,
            })
            .into());
    }
    let root = builder.root.unwrap_or(Node {
        kind: NodeKind::Map(Vec::new()),
        mark: Mark { line: 1, col: 1 },
    });
    let doc = Document { file, root };
    let mut errors = Vec::new();
    let mut root = doc.root.clone();
    substitute_env(&mut root, env, &doc, "", &mut errors);
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    Ok(Document { root, ..doc })
}

/// How deep collections may nest in a document: as deep as any value may
/// ([`MAX_DEPTH`](crate::value::MAX_DEPTH)). Configs arrive from tenants too, and the
/// YAML scanner's work per token grows with the depth of the flow collections open.
pub const MAX_NESTING: usize = crate::value::MAX_DEPTH;

/// Checks that no collection in `text` nests deeper than [`MAX_NESTING`], reading its
/// events only (linear time, no tree): for YAML that another parser reads afterwards,
/// whose scanner would otherwise spend time quadratic in the depth. Text that does not
/// parse passes; the reader that follows reports it.
pub fn check_nesting(text: &str) -> Result<(), (String, Mark)> {
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let (ev, marker) = match parser.next_token() {
            Ok(next) => next,
            // The scanner's own limit on open flow collections.
            Err(e) if e.info().contains("recursion limit") => {
                return Err((
                    format!("collections nest deeper than {MAX_NESTING} levels"),
                    Mark::from(*e.marker()),
                ))
            }
            Err(_) => break,
        };
        match ev {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err((
                        format!("collections nest deeper than {MAX_NESTING} levels"),
                        Mark::from(marker),
                    ));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            Event::StreamEnd => break,
            _ => {}
        }
    }
    Ok(())
}

/// The most nodes a document may hold once its aliases are expanded. Aliases copy the
/// node they name, so a few hundred bytes of nested aliases ("billion laughs") would
/// otherwise expand to gigabytes; real configs stay far below this.
pub const MAX_NODES: usize = 100_000;

/// A collection being read, with its pending mapping key, its anchor id and its size.
struct Open {
    node: Node,
    pending_key: Option<Node>,
    anchor: usize,
    /// Nodes in this collection so far, itself included.
    size: usize,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    /// Anchored nodes with their sizes in nodes.
    anchors: HashMap<usize, (Node, usize)>,
    root: Option<Node>,
    /// Nodes in the document so far, aliases expanded.
    nodes: usize,
    /// Problems the parser does not see: (message, document path, position).
    errors: Vec<(String, String, Mark)>,
    /// The alias bound was crossed (reported once).
    too_large: bool,
}

impl Builder {
    /// Reads the first document's events into the tree. The parser's own loader recurses
    /// once per level; this loop does not, and it stops at the first collection nested
    /// past [`MAX_NESTING`], so a deep document costs neither stack nor quadratic time.
    fn read(&mut self, parser: &mut Parser<std::str::Chars<'_>>) -> Result<(), ScanError> {
        loop {
            let (ev, marker) = parser.next_token()?;
            let last = matches!(ev, Event::DocumentEnd | Event::StreamEnd);
            self.on_event(ev, marker);
            if last {
                return Ok(());
            }
            if self.stack.len() > MAX_NESTING {
                let mark = Mark::from(marker);
                self.errors.push((
                    format!("collections nest deeper than {MAX_NESTING} levels"),
                    self.path(),
                    mark,
                ));
                return Ok(());
            }
        }
    }

    /// The document path of the value being read now.
    fn path(&self) -> String {
        let mut path = String::new();
        for open in &self.stack {
            match &open.node.kind {
                NodeKind::Seq(items) => path.push_str(&format!("[{}]", items.len())),
                NodeKind::Map(_) => {
                    if let Some(key) = open.pending_key.as_ref().and_then(Node::as_str) {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(key);
                    }
                }
                NodeKind::Scalar { .. } => {}
            }
        }
        path
    }

    fn push_value(&mut self, node: Node, anchor: usize, size: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        let duplicate = match self.stack.last() {
            Some(Open {
                node:
                    Node {
                        kind: NodeKind::Map(entries),
                        ..
                    },
                pending_key: None,
                ..
            }) => node.as_str().and_then(|key| {
                entries
                    .iter()
                    .find(|(k, _)| k.as_str() == Some(key))
                    .map(|(k, _)| (key.to_owned(), k.mark))
            }),
            _ => None,
        };
        if let Some((key, first)) = duplicate {
            let mut path = self.path();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key);
            self.errors.push((
                format!(
                    "duplicate key `{key}`: first given at line {}, column {}",
                    first.line, first.col
                ),
                path,
                node.mark,
            ));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(open) => {
                open.size += size;
                match &mut open.node.kind {
                    NodeKind::Seq(items) => items.push(node),
                    NodeKind::Map(entries) => match open.pending_key.take() {
                        None => open.pending_key = Some(node),
                        Some(key) => entries.push((key, node)),
                    },
                    NodeKind::Scalar { .. } => {}
                }
            }
        }
    }

    fn open(&mut self, kind: NodeKind, mark: Mark, anchor: usize) {
        self.nodes += 1;
        self.stack.push(Open {
            node: Node { kind, mark },
            pending_key: None,
            anchor,
            size: 1,
        });
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, marker: Marker) {
        let mark = Mark::from(marker);
        match ev {
            Event::Scalar(value, style, anchor, _) => {
                let plain = style == TScalarStyle::Plain;
                self.nodes += 1;
                let node = Node {
                    kind: NodeKind::Scalar { value, plain },
                    mark,
                };
                self.push_value(node, anchor, 1);
            }
            Event::SequenceStart(anchor, _) => self.open(NodeKind::Seq(Vec::new()), mark, anchor),
            Event::MappingStart(anchor, _) => self.open(NodeKind::Map(Vec::new()), mark, anchor),
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(open) = self.stack.pop() {
                    self.push_value(open.node, open.anchor, open.size);
                }
            }
            Event::Alias(id) => {
                let null = || Node::scalar("");
                let (node, size) = match self.anchors.get(&id) {
                    Some((_, size)) if self.nodes + size > MAX_NODES => {
                        // Reported once; what follows is read without expanding aliases.
                        if !std::mem::replace(&mut self.too_large, true) {
                            self.errors.push((
                                format!(
                                    "aliases expand the document past {MAX_NODES} nodes; \
                                     write the repeated parts out or nest fewer aliases"
                                ),
                                self.path(),
                                mark,
                            ));
                        }
                        (null(), 1)
                    }
                    Some((node, size)) => (node.clone(), *size),
                    None => (null(), 1),
                };
                self.nodes += size;
                self.push_value(Node { mark, ..node }, 0, size);
            }
            _ => {}
        }
    }
}

fn substitute_env(
    node: &mut Node,
    env: &dyn Fn(&str) -> Option<String>,
    doc: &Document,
    path: &str,
    errors: &mut Vec<ConfigError>,
) {
    match &mut node.kind {
        // A substituted plain value is typed afterwards like any other ("${PORT}" -> 8080).
        NodeKind::Scalar { value, .. } => {
            if value.contains("${") {
                match interpolate_env(value, env) {
                    Ok(v) => *value = v,
                    Err(msg) => {
                        errors.push(ConfigError::new(msg).at(doc.location(path, node.mark)))
                    }
                }
            }
        }
        NodeKind::Seq(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute_env(item, env, doc, &format!("{path}[{i}]"), errors);
            }
        }
        NodeKind::Map(entries) => {
            for (k, v) in entries.iter_mut() {
                let key = k.as_str().unwrap_or("?");
                let child = if path.is_empty() {
                    key.to_owned()
                } else {
                    format!("{path}.{key}")
                };
                substitute_env(v, env, doc, &child, errors);
            }
        }
    }
}

/// Replaces `${VAR}` and `${VAR:default}`; leaves `${! ... }` (message interpolation) alone.
pub fn interpolate_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        if after.starts_with('!') {
            // Message interpolation: copy through to its closing brace untouched.
            let end = after.find('}').map(|e| e + 1).unwrap_or(after.len());
            out.push_str(&rest[start..start + 2 + end]);
            rest = &after[end..];
            continue;
        }
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed `${{` in `{text}`"));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "`${{{inner}}}` is not a valid environment variable reference"
            ));
        }
        match env(name).filter(|v| !v.is_empty()).or(default.map(str::to_owned)) {
            Some(v) => out.push_str(&v),
            None => {
                return Err(format!(
                    "environment variable `{name}` is not set and has no default (write `${{{name}:default}}`)"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("8080".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn keeps_positions() {
        let doc = parse("t.yaml", "input:\n  generate:\n    count: 3\n", &env).unwrap();
        let count = doc
            .root
            .get("input")
            .unwrap()
            .get("generate")
            .unwrap()
            .get("count")
            .unwrap();
        assert_eq!(count.mark, Mark { line: 3, col: 12 });
        assert_eq!(count.as_str(), Some("3"));
    }

    #[test]
    fn env_with_defaults_and_message_interpolation_untouched() {
        let f = |s: &str| interpolate_env(s, &env);
        assert_eq!(f("a${PORT}b").unwrap(), "a8080b");
        assert_eq!(f("${NOPE:x}").unwrap(), "x");
        assert_eq!(f("${EMPTY:d}").unwrap(), "d");
        assert_eq!(f("${NOPE:}").unwrap(), "");
        assert_eq!(
            f("${! meta(\"k\") }-${PORT}").unwrap(),
            "${! meta(\"k\") }-8080"
        );
        assert!(f("${NOPE}").unwrap_err().contains("NOPE"));
        assert!(f("${bad name}").is_err());
    }

    #[test]
    fn missing_env_is_a_positioned_error() {
        let errs = parse("t.yaml", "a:\n  b: ${NOPE}\n", &env).unwrap_err();
        let loc = errs.0[0].location.clone().unwrap();
        assert_eq!((loc.line, loc.col, loc.path.as_str()), (2, 6, "a.b"));
    }

    #[test]
    fn aliases_resolve() {
        let doc = parse("t.yaml", "a: &x {k: 1}\nb: *x\n", &env).unwrap();
        assert_eq!(
            doc.root.get("b").unwrap().get("k").unwrap().as_str(),
            Some("1")
        );
    }

    #[test]
    fn nested_aliases_are_bounded() {
        // Nine levels of ten aliases each would expand to a billion nodes.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let errs = parse("t.yaml", &text, &env).unwrap_err();
        assert_eq!(errs.0.len(), 1, "{errs}");
        let e = &errs.0[0];
        assert!(e.message.contains("aliases expand"), "{e}");
        let loc = e.location.clone().unwrap();
        // a4 holds 10 copies of a3's 11 111 nodes: the eighth crosses the bound.
        assert_eq!(
            (loc.file.as_ref(), loc.line, loc.col),
            ("t.yaml", 5, 45),
            "{e}"
        );
        assert_eq!(loc.path, "a4[7]");
    }

    #[test]
    fn deep_documents_are_refused_at_the_level_past_the_bound() {
        // Flow and block collections, far deeper than the bound: refused where the bound
        // is crossed, without recursing or rescanning per level.
        let flow = format!("a: {}1{}", "[".repeat(200_000), "]".repeat(200_000));
        let block = format!("a:\n  {}x\n", "- ".repeat(200_000));
        let maps = format!("a: {}1{}", "{k: ".repeat(200_000), "}".repeat(200_000));
        for text in [flow, block, maps] {
            let errs = parse("t.yaml", &text, &env).unwrap_err();
            let e = &errs.0[0];
            // The scanner has a limit of its own for block collections, reached first.
            assert!(
                e.message.contains("deeper than 128 levels")
                    || e.message.contains("recursion limit exceeded"),
                "{e}"
            );
            let loc = e.location.clone().unwrap();
            assert!(loc.line <= 2, "{e}");
            assert!(loc.col < 1000, "refused where the bound is crossed: {e}");
        }
        let ok = format!("a: {}1{}", "[".repeat(127), "]".repeat(127));
        parse("t.yaml", &ok, &env).unwrap();
    }

    #[test]
    fn aliases_within_the_bound_expand() {
        let doc = parse("t.yaml", "a: &a [1, 2]\nb: [*a, *a, *a]\n", &env).unwrap();
        let b = &doc.root.get("b").unwrap().kind;
        let NodeKind::Seq(items) = b else {
            panic!("{b:?}")
        };
        assert_eq!(items.len(), 3);
        assert_eq!(items[2].mark, Mark { line: 2, col: 13 });
    }

    #[test]
    fn duplicate_keys_name_both_positions() {
        let text =
            "input: {stdin: {}}\nstreams:\n  a: {x: 1}\n  a: {x: 2}\ninput: {generate: {}}\n";
        let errs = parse("t.yaml", text, &env).unwrap_err();
        let got: Vec<_> = errs
            .0
            .iter()
            .map(|e| {
                let loc = e.location.clone().unwrap();
                (loc.path, loc.line, loc.col, e.message.clone())
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "streams.a".to_owned(),
                    4,
                    3,
                    "duplicate key `a`: first given at line 3, column 3".to_owned()
                ),
                (
                    "input".to_owned(),
                    5,
                    1,
                    "duplicate key `input`: first given at line 1, column 1".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn paths_locate_keys_and_items() {
        let text = "output:\n  broker:\n    outputs:\n      - drop: {}\n      - http_client:\n          url: x\n";
        let doc = parse("t.yaml", text, &env).unwrap();
        let at = |p: &str| {
            let m = doc.locate(p);
            (m.line, m.col)
        };
        assert_eq!(at("output.broker.outputs[1].http_client"), (5, 9));
        assert_eq!(at("output.broker.outputs[1].http_client.url"), (6, 11));
        assert_eq!(at("output.broker.outputs[0]"), (4, 9));
        // Off the tree: the deepest node reached.
        assert_eq!(at("output.broker.outputs[7].x"), (3, 5));
        assert_eq!(at("nope"), (1, 1));
    }

    #[test]
    fn syntax_error_has_position() {
        let errs = parse("t.yaml", "a: [1, 2\nb: c\n", &env).unwrap_err();
        assert!(errs.0[0].location.is_some());
        assert!(errs.to_string().starts_with("t.yaml:"));
    }

    #[test]
    fn empty_document_is_an_empty_map() {
        let doc = parse("t.yaml", "", &env).unwrap();
        assert!(doc.root.entries().is_empty());
    }
}
