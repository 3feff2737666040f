//! The crate's top-level modules depend on each other one way only. A cycle between two
//! of them (`a` uses `crate::b` while something in `b` uses `crate::a`) fails this test,
//! with the files that make each edge of the cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges `from -> to` between top-level modules, each with the files that make it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/stream/input.rs` -> `stream`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// Top-level modules named after `crate::` (or `$crate::` in macros), including each
/// name inside `crate::{a::x, b}`.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "self" {
                    names.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(src, f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let Some(from) = module_of(src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for to in referenced(&text) {
            if to != from && modules.contains(&to) {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(file.strip_prefix(src).unwrap().display().to_string());
            }
        }
    }
    graph
}

/// One cycle, as the modules along it, if there is any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|n| n == node).unwrap();
                let mut cycle = stack[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut marks, &mut Vec::new()))
}

fn describe(graph: &Graph, cycle: &[String]) -> String {
    cycle
        .windows(2)
        .map(|w| {
            let files = &graph[&w[0]][&w[1]];
            let files: Vec<_> = files.iter().map(String::as_str).collect();
            format!("  {} -> {}  ({})", w[0], w[1], files.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn top_level_modules_have_no_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(graph.len() > 5, "the module graph was not read: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "top-level modules import each other in a cycle:\n{}",
            describe(&graph, &cycle)
        );
    }
}

#[test]
fn a_cycle_is_found() {
    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(from.into())
            .or_default()
            .entry(to.into())
            .or_default()
            .insert(format!("{from}.rs"));
    }
    let cycle = find_cycle(&graph).expect("a -> b -> c -> a");
    assert_eq!(cycle, ["a", "b", "c", "a"]);
    graph.get_mut("c").unwrap().remove("a");
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn references_are_read_from_paths_groups_and_macros() {
    let got = referenced(
        "use crate::a::X;\nuse crate::{b::Y, c, self};\n#[serde(default = \"crate::d::f\")]\n$crate::e::Z",
    );
    let want: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
    assert_eq!(got, want);
}
