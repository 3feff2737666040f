//! `sluice test`: unit tests of stream configs, in the format other stream processors
//! use. A config file lists `tests:` beside its streams, or a file `<name>_sluice_test.yaml`
//! (or `<name>_benthos_test.yaml`) holds the tests of `<name>.yaml`. Each test feeds
//! batches to the processors at `target_processors` (a JSON Pointer into the config,
//! `/pipeline/processors` by default, or a `processor_resources` label) or to the mapping
//! file `target_mapping`, and checks every message that comes out against conditions.

mod conditions;
mod run;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use conditions::Condition;
pub use run::{run_file, TestOutcome};

use crate::config::error::Location;
use crate::config::ConfigError;

/// One test as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    pub name: String,
    /// Variables for `${VAR}` in the config, over the process environment.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    /// A JSON Pointer to a processor or a list of them, or a processor resource label.
    #[serde(default = "default_target")]
    pub target_processors: String,
    /// A mapping file to test instead, relative to the test file.
    #[serde(default)]
    pub target_mapping: Option<String>,
    /// Processors replacing those at a JSON Pointer (read from the document itself).
    #[serde(default)]
    pub mocks: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub input_batch: Option<Vec<InputMessage>>,
    #[serde(default)]
    pub input_batches: Option<Vec<Vec<InputMessage>>>,
    #[serde(default)]
    pub output_batches: Vec<Vec<Conditions>>,
}

fn default_target() -> String {
    "/pipeline/processors".into()
}

/// One message fed to the processors.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct InputMessage {
    #[serde(default)]
    pub content: Option<String>,
    /// A structure, sent as its JSON text.
    #[serde(default)]
    pub json_content: Option<serde_json::Value>,
    /// A file whose bytes are the payload, relative to the test file.
    #[serde(default)]
    pub file_content: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// The conditions one output message must meet.
pub type Conditions = BTreeMap<String, serde_json::Value>;

/// Config test files among `paths`: files as given, directories searched recursively for
/// YAML files that hold tests. A path written `dir/...` means the same as `dir`.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        let p = match p.to_str().and_then(|s| s.strip_suffix("...")) {
            Some(stem) => PathBuf::from(if stem.is_empty() { "." } else { stem }),
            None => p.clone(),
        };
        if p.is_dir() {
            walk(&p, &mut out).map_err(|e| format!("{}: {e}", p.display()))?;
        } else if p.is_file() {
            out.push(p);
        } else {
            return Err(format!("{}: no such file or directory", p.display()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if is_yaml(&path) && (is_test_file(&path) || has_tests(&path)) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_yaml(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// The config a separate test file targets: `x_sluice_test.yaml` tests `x.yaml`.
pub fn target_of(test_file: &Path) -> Option<PathBuf> {
    let name = test_file.file_name()?.to_str()?;
    let (stem, ext) = name.rsplit_once('.')?;
    ["_sluice_test", "_benthos_test"]
        .iter()
        .find_map(|suffix| stem.strip_suffix(suffix))
        .map(|base| test_file.with_file_name(format!("{base}.{ext}")))
}

fn is_test_file(p: &Path) -> bool {
    target_of(p).is_some()
}

/// Whether a YAML file has a top-level `tests` key (read cheaply, without parsing).
fn has_tests(p: &Path) -> bool {
    std::fs::read_to_string(p).is_ok_and(|t| t.lines().any(|l| l.starts_with("tests:")))
}

/// A problem that stops a test from running (an unreadable file, a bad pointer), placed.
pub fn setup_error(location: Location, message: impl Into<String>) -> ConfigError {
    ConfigError::new(message).at(location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separate_test_files_name_their_config() {
        assert_eq!(
            target_of(Path::new("dir/orders_sluice_test.yaml")),
            Some(PathBuf::from("dir/orders.yaml"))
        );
        assert_eq!(
            target_of(Path::new("orders_benthos_test.yml")),
            Some(PathBuf::from("orders.yml"))
        );
        assert_eq!(target_of(Path::new("orders.yaml")), None);
    }

    #[test]
    fn directories_are_searched_for_files_with_tests() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(dir.path().join("a.yaml"), "input: {stdin: {}}\ntests: []\n").unwrap();
        std::fs::write(dir.path().join("b.yaml"), "input: {stdin: {}}\n").unwrap();
        std::fs::write(sub.join("c_sluice_test.yaml"), "tests: []\n").unwrap();
        std::fs::write(sub.join("notes.txt"), "tests:\n").unwrap();
        let found = discover(&[PathBuf::from(format!("{}/...", dir.path().display()))]).unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.yaml", "c_sluice_test.yaml"]);
        assert!(discover(&[dir.path().join("missing")]).is_err());
    }
}
