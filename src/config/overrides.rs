//! Environment overrides of a service config: `<PREFIX><SECTION>_<KEY>=value` sets
//! `section.key`, and `<PREFIX><KEY>` a top-level key. The value is typed as YAML would
//! type it, so `true` is a boolean and `8081` a number. Unknown names are errors that
//! name the variable, so a misspelt override never passes silently.

use super::yaml::{Document, Mark, NodeKind};
use super::{ConfigError, ConfigErrors, Location, Node};

/// The keys a config lets the environment override.
#[derive(Debug, Clone, Copy)]
pub struct Overridable {
    /// Each section with its keys.
    pub sections: &'static [(&'static str, &'static [&'static str])],
    /// Keys at the top level.
    pub top_level: &'static [&'static str],
}

/// Applies every variable of `env` that starts with `prefix` to `doc`, whose root must be
/// a mapping (an empty document becomes one). Every bad variable is reported.
pub fn apply(
    doc: &mut Document,
    prefix: &str,
    keys: &Overridable,
    env: &[(String, String)],
) -> Result<(), ConfigErrors> {
    if doc.root.is_null() {
        doc.root = Node {
            kind: NodeKind::Map(Vec::new()),
            mark: Mark { line: 1, col: 1 },
        };
    }
    let mut errors = Vec::new();
    for (var, value) in env {
        if let Some(rest) = var.strip_prefix(prefix) {
            if let Err(e) = apply_one(&mut doc.root, keys, rest, value) {
                errors.push(ConfigError::new(e).at(Location {
                    file: "environment".into(),
                    path: var.clone(),
                    line: 0,
                    col: 0,
                }));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The name and text of a service config: `file`, or an empty document (every default)
/// when there is none.
pub fn read(file: Option<&std::path::Path>) -> Result<(String, String), ConfigErrors> {
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigErrors(vec![ConfigError::new(format!(
                    "cannot read {}: {e}",
                    path.display()
                ))])
            })?;
            Ok((path.display().to_string(), text))
        }
        None => Ok(("(defaults)".to_owned(), String::new())),
    }
}

/// Parses a service config with the `prefix` variables of `env` applied. The document
/// comes back too, for checks that report positions.
pub fn parse<T: serde::de::DeserializeOwned>(
    name: &str,
    text: &str,
    prefix: &str,
    keys: &Overridable,
    env: &[(String, String)],
) -> Result<(T, Document), ConfigErrors> {
    let mut doc = super::yaml::parse(name, text, &super::process_env)?;
    apply(&mut doc, prefix, keys, env)?;
    let config = super::de::from_node(&doc, &doc.root, "").map_err(ConfigErrors::from)?;
    Ok((config, doc))
}

/// The process's variables that start with `prefix`.
pub fn from_process(prefix: &str) -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with(prefix))
        .collect()
}

fn apply_one(root: &mut Node, keys: &Overridable, name: &str, value: &str) -> Result<(), String> {
    let lower = name.to_ascii_lowercase();
    if keys.top_level.contains(&lower.as_str()) {
        return set(root, &lower, value);
    }
    // The longest section that names the variable: `streaming.egress` takes
    // `STREAMING_EGRESS_ALLOW` before `streaming` would.
    let mut found: Option<(&str, &[&str], &str)> = None;
    for &(section, section_keys) in keys.sections {
        let env_name = section.replace('.', "_");
        let Some(key) = lower
            .strip_prefix(env_name.as_str())
            .and_then(|rest| rest.strip_prefix('_'))
        else {
            continue;
        };
        if found.is_none_or(|(s, _, _)| section.len() > s.len()) {
            found = Some((section, section_keys, key));
        }
    }
    if let Some((section, section_keys, key)) = found {
        if !section_keys.contains(&key) {
            return Err(format!(
                "`{key}` is not a key of `{section}` (keys: {})",
                section_keys.join(", ")
            ));
        }
        let mut node = root;
        for part in section.split('.') {
            node = child_map(node, part)?;
        }
        return set(node, key, value);
    }
    Err(format!(
        "no such config key; sections: {}",
        keys.sections
            .iter()
            .map(|(s, _)| *s)
            .chain(keys.top_level.iter().copied())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The mapping under `name` in the mapping `node`, made when missing or empty.
fn child_map<'a>(node: &'a mut Node, name: &str) -> Result<&'a mut Node, String> {
    let NodeKind::Map(entries) = &mut node.kind else {
        return Err(format!("cannot set `{name}`: its parent is not a mapping"));
    };
    let index = match entries.iter().position(|(k, _)| k.as_str() == Some(name)) {
        Some(i) => i,
        None => {
            entries.push((
                Node::scalar(name),
                Node {
                    kind: NodeKind::Map(Vec::new()),
                    mark: Mark::default(),
                },
            ));
            entries.len() - 1
        }
    };
    let child = &mut entries[index].1;
    if child.is_null() {
        child.kind = NodeKind::Map(Vec::new());
    }
    Ok(child)
}

/// Replaces or adds `key` in the mapping `node` with a plain scalar, or with a list
/// written as YAML's flow sequence (`[10.0.0.0/8, db.internal]`).
fn set(node: &mut Node, key: &str, value: &str) -> Result<(), String> {
    let NodeKind::Map(entries) = &mut node.kind else {
        return Err(format!("cannot set `{key}`: its section is not a mapping"));
    };
    let new = if value.trim_start().starts_with('[') {
        super::yaml::parse("environment", value, &|_| None)
            .map_err(|e| format!("`{key}`: not a list: {e}"))?
            .root
    } else {
        Node::scalar(value)
    };
    match entries.iter_mut().find(|(k, _)| k.as_str() == Some(key)) {
        Some((_, v)) => {
            // Keep the file's position, so a bad value still points somewhere useful.
            let mark = v.mark;
            *v = new;
            v.mark = mark;
        }
        None => entries.push((Node::scalar(key), new)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml;

    const KEYS: Overridable = Overridable {
        sections: &[("listen", &["address", "port"]), ("page", &["size"])],
        top_level: &["secret"],
    };

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sets_sections_and_top_level_keys() {
        let mut doc = yaml::parse("c.yaml", "listen:\n  port: 1\n", &|_| None).unwrap();
        apply(
            &mut doc,
            "X_",
            &KEYS,
            &env(&[
                ("X_LISTEN_PORT", "2"),
                ("X_SECRET", "s"),
                ("X_PAGE_SIZE", "5"),
            ]),
        )
        .unwrap();
        assert_eq!(
            doc.root
                .get("listen")
                .unwrap()
                .get("port")
                .unwrap()
                .as_str(),
            Some("2")
        );
        assert_eq!(doc.root.get("secret").unwrap().as_str(), Some("s"));
        assert_eq!(
            doc.root.get("page").unwrap().get("size").unwrap().as_str(),
            Some("5")
        );
    }

    #[test]
    fn unknown_variables_are_named() {
        let mut doc = yaml::parse("c.yaml", "", &|_| None).unwrap();
        let e = apply(
            &mut doc,
            "X_",
            &KEYS,
            &env(&[
                ("X_LISTEN_PROT", "1"),
                ("X_NOPE", "1"),
                ("Y_LISTEN_PORT", "1"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
        assert!(e.to_string().contains("X_LISTEN_PROT"), "{e}");
        assert!(
            e.to_string().contains("`prot` is not a key of `listen`"),
            "{e}"
        );
        assert!(e.to_string().contains("X_NOPE"), "{e}");
    }
}
