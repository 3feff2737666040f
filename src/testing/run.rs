//! Running the tests of one file: each test builds its target processors from the config
//! (with its environment and mocks applied), feeds its input batches, and checks what
//! comes out. Every failure is placed at the condition, message or test that failed.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::conditions::Condition;
use super::{target_of, InputMessage, TestCase};
use crate::component::{BuildContext, Kind};
use crate::config::error::Location;
use crate::config::yaml::{self, Document, Node, NodeKind};
use crate::config::{de, process_env, ConfigError, ConfigErrors};
use crate::message::{Batch, Message};
use crate::processor::chain::Chain;
use crate::processor::ProcessorConfig;
use crate::stream::config::parse_document;
use crate::stream::StreamEnv;

/// How one test went.
#[derive(Debug)]
pub struct TestOutcome {
    pub name: String,
    /// Where the test is written.
    pub location: Location,
    /// Each failure, placed (`file:line:col: what`); empty when the test passed.
    pub failures: Vec<String>,
}

impl TestOutcome {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs every test in `path`: a config with `tests:`, or a `_sluice_test.yaml` file whose
/// tests target its config. A file that cannot be read as tests is an error.
pub async fn run_file(path: &Path) -> Result<Vec<TestOutcome>, ConfigErrors> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(format!("{name}: cannot read: {e}")))?;
    let test_doc = yaml::parse(&name, &text, &process_env)?;
    let config_path = target_of(path).unwrap_or_else(|| path.to_owned());
    let config_text = std::fs::read_to_string(&config_path).map_err(|e| {
        ConfigError::new(format!(
            "{name}: cannot read the config it tests, {}: {e}",
            config_path.display()
        ))
    })?;
    let Some(tests) = test_doc.root.get("tests") else {
        return Err(ConfigError::new(format!("{name}: no `tests` list"))
            .at(test_doc.location("", test_doc.root.mark))
            .into());
    };
    let NodeKind::Seq(items) = &tests.kind else {
        return Err(ConfigError::new(format!(
            "`tests` must be a list, found {}",
            tests.describe()
        ))
        .at(test_doc.location("tests", tests.mark))
        .into());
    };
    let mut cases = Vec::new();
    let mut errors = Vec::new();
    for (i, node) in items.iter().enumerate() {
        match de::from_node::<TestCase>(&test_doc, node, &format!("tests[{i}]")) {
            Ok(c) => cases.push((i, c)),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let file = TestFile {
        doc: &test_doc,
        base,
        config_path: &config_path,
        config_text: &config_text,
    };
    let mut outcomes = Vec::new();
    for (i, case) in cases {
        outcomes.push(file.run(i, &case).await);
    }
    Ok(outcomes)
}

struct TestFile<'a> {
    doc: &'a Document,
    base: &'a Path,
    config_path: &'a Path,
    config_text: &'a str,
}

impl TestFile<'_> {
    fn place(&self, path: &str) -> Location {
        self.doc.location(path, self.doc.locate(path))
    }

    async fn run(&self, i: usize, case: &TestCase) -> TestOutcome {
        let at = format!("tests[{i}]");
        let mut outcome = TestOutcome {
            name: case.name.clone(),
            location: self.place(&at),
            failures: Vec::new(),
        };
        let shutdown = CancellationToken::new();
        match self.build(i, case, &shutdown) {
            Ok(chain) => self.exercise(i, case, &chain, &mut outcome.failures).await,
            Err(failures) => outcome.failures = failures,
        }
        shutdown.cancel();
        outcome
    }

    /// The target processors, built from the config with the test's environment and mocks.
    fn build(
        &self,
        i: usize,
        case: &TestCase,
        shutdown: &CancellationToken,
    ) -> Result<Chain, Vec<String>> {
        let one = |e: String| vec![e];
        let placed = |path: &str, msg: String| format!("{}: {msg}", self.place(path));
        let env = |var: &str| {
            case.environment
                .get(var)
                .cloned()
                .or_else(|| process_env(var))
        };
        let config_name = self.config_path.display().to_string();
        let mut doc =
            yaml::parse(&config_name, self.config_text, &env).map_err(|e| one(e.to_string()))?;
        for pointer in case.mocks.keys() {
            let mock_path = format!("tests[{i}].mocks");
            let mock = self
                .doc
                .root
                .get("tests")
                .and_then(|t| match &t.kind {
                    NodeKind::Seq(items) => items.get(i),
                    _ => None,
                })
                .and_then(|t| t.get("mocks"))
                .and_then(|m| m.get(pointer))
                .cloned()
                .ok_or_else(|| one(placed(&mock_path, format!("mock `{pointer}` has no value"))))?;
            let slot = node_at(&mut doc.root, pointer).ok_or_else(|| {
                one(placed(
                    &mock_path,
                    format!("mock `{pointer}`: no such place in {config_name}"),
                ))
            })?;
            *slot = mock;
        }
        let stem = self
            .config_path
            .file_stem()
            .map_or_else(|| "stream".to_owned(), |s| s.to_string_lossy().into_owned());
        let root = parse_document(doc.clone(), &stem).map_err(|e| one(e.to_string()))?;
        let stream_env = StreamEnv::standalone()
            .with_resources(&root.resources)
            .map_err(|errors| {
                errors
                    .iter()
                    .map(|e| format!("{config_name}: {e}"))
                    .collect::<Vec<_>>()
            })?;
        let (configs, path) = self.targets(i, case, &doc, &stream_env)?;
        let cx = BuildContext::new(&case.name, stream_env.routes.clone(), shutdown.clone())
            .with_resources(stream_env.resources.clone());
        Chain::build(&configs, &cx, &path).map_err(|e| one(format!("{config_name}: {e}")))
    }

    /// What the test targets: a mapping file, processors at a pointer, or a resource.
    fn targets(
        &self,
        i: usize,
        case: &TestCase,
        doc: &Document,
        env: &StreamEnv,
    ) -> Result<(Vec<ProcessorConfig>, String), Vec<String>> {
        let placed = |field: &str, msg: String| {
            vec![format!(
                "{}: {msg}",
                self.place(&format!("tests[{i}].{field}"))
            )]
        };
        if let Some(file) = &case.target_mapping {
            let path = self.base.join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                placed(
                    "target_mapping",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let config: ProcessorConfig =
                serde_json::from_value(serde_json::json!({ "mapping": text }))
                    .map_err(|e| placed("target_mapping", format!("{}: {e}", path.display())))?;
            return Ok((vec![config], "target_mapping".into()));
        }
        let target = &case.target_processors;
        if !target.starts_with('/') {
            let config = env
                .resources
                .component::<ProcessorConfig>(Kind::Processor, target)
                .map_err(|e| placed("target_processors", e.to_string()))?;
            return Ok((
                vec![(*config).clone()],
                format!("processor_resources.{target}"),
            ));
        }
        let path = dotted(target);
        let mut root = doc.root.clone();
        if let Some(stream) = target.strip_suffix("/pipeline/processors") {
            let mut probe = doc.root.clone();
            if node_at(&mut probe, stream).is_some_and(|s| s.get("pipeline").is_none()) {
                // A stream without processors: the test checks what reaches its output.
                return Ok((Vec::new(), path));
            }
        }
        let node = node_at(&mut root, target).ok_or_else(|| {
            placed(
                "target_processors",
                format!("`{target}` is no place in {}", doc.file),
            )
        })?;
        let configs = match &node.kind {
            NodeKind::Seq(_) => de::from_node::<Vec<ProcessorConfig>>(doc, node, &path),
            _ => de::from_node::<ProcessorConfig>(doc, node, &path).map(|c| vec![c]),
        }
        .map_err(|e| vec![e.to_string()])?;
        Ok((configs, path))
    }

    /// Feeds the input batches and checks the output batches.
    async fn exercise(&self, i: usize, case: &TestCase, chain: &Chain, failures: &mut Vec<String>) {
        let inputs: Vec<(String, &Vec<InputMessage>)> =
            match (&case.input_batch, &case.input_batches) {
                (Some(b), None) => vec![(format!("tests[{i}].input_batch"), b)],
                (None, Some(bs)) => bs
                    .iter()
                    .enumerate()
                    .map(|(n, b)| (format!("tests[{i}].input_batches[{n}]"), b))
                    .collect(),
                (Some(_), Some(_)) => {
                    failures.push(format!(
                        "{}: give `input_batch` or `input_batches`, not both",
                        self.place(&format!("tests[{i}]"))
                    ));
                    return;
                }
                (None, None) => {
                    failures.push(format!(
                        "{}: the test has no `input_batch`",
                        self.place(&format!("tests[{i}]"))
                    ));
                    return;
                }
            };
        let mut outputs: Vec<Batch> = Vec::new();
        for (path, batch) in inputs {
            let mut messages = Vec::with_capacity(batch.len());
            for (n, m) in batch.iter().enumerate() {
                match self.message(m) {
                    Ok(msg) => messages.push(msg),
                    Err(e) => {
                        failures.push(format!("{}: {e}", self.place(&format!("{path}[{n}]"))))
                    }
                }
            }
            if !failures.is_empty() {
                return;
            }
            outputs.extend(chain.run(messages).await);
        }
        self.compare(i, case, &outputs, failures);
    }

    fn message(&self, m: &InputMessage) -> Result<Message, String> {
        let payload: Vec<u8> = match (&m.content, &m.json_content, &m.file_content) {
            (Some(c), None, None) => c.clone().into_bytes(),
            (None, Some(j), None) => j.to_string().into_bytes(),
            (None, None, Some(f)) => {
                let path = self.base.join(f);
                std::fs::read(&path)
                    .map_err(|e| format!("`file_content`: cannot read {}: {e}", path.display()))?
            }
            (None, None, None) => Vec::new(),
            _ => return Err("give one of `content`, `json_content` and `file_content`".into()),
        };
        let mut msg = Message::new(payload);
        for (k, v) in &m.metadata {
            let value = match v {
                serde_json::Value::String(s) => crate::value::Value::from(s.as_str()),
                other => crate::value::Value::from(other.clone()),
            };
            msg.set_meta(k.clone(), value);
        }
        Ok(msg)
    }

    fn compare(&self, i: usize, case: &TestCase, outputs: &[Batch], failures: &mut Vec<String>) {
        let expected = &case.output_batches;
        if outputs.len() != expected.len() {
            failures.push(format!(
                "{}: expected {} output batch(es), got {}: {}",
                self.place(&format!("tests[{i}].output_batches")),
                expected.len(),
                outputs.len(),
                show(outputs)
            ));
            return;
        }
        for (b, (got, want)) in outputs.iter().zip(expected).enumerate() {
            let at = format!("tests[{i}].output_batches[{b}]");
            if got.len() != want.len() {
                failures.push(format!(
                    "{}: output batch {b}: expected {} message(s), got {}: {}",
                    self.place(&at),
                    want.len(),
                    got.len(),
                    show(std::slice::from_ref(got))
                ));
                continue;
            }
            for (m, conditions) in want.iter().enumerate() {
                for (name, value) in conditions {
                    let here = format!("{at}[{m}].{name}");
                    let result =
                        Condition::parse(name, value, self.base).and_then(|c| c.check(got, m));
                    if let Err(e) = result {
                        let carried = got[m]
                            .error()
                            .map(|err| format!(" (the message carries the error: {err})"))
                            .unwrap_or_default();
                        failures.push(format!(
                            "{}: batch {b}, message {m}: {name}: {e}{carried}",
                            self.place(&here)
                        ));
                    }
                }
            }
        }
    }
}

/// The payloads of some batches, for a failure message.
fn show(batches: &[Batch]) -> String {
    let parts: Vec<String> = batches
        .iter()
        .map(|b| {
            let msgs: Vec<String> = b
                .iter()
                .map(|m| format!("{:?}", String::from_utf8_lossy(m.payload())))
                .collect();
            format!("[{}]", msgs.join(", "))
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// A JSON Pointer as a document path: `/pipeline/processors/0` -> `pipeline.processors[0]`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        if part.parse::<usize>().is_ok() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part);
        }
    }
    out
}

/// The node a JSON Pointer names, to read or replace.
fn node_at<'a>(root: &'a mut Node, pointer: &str) -> Option<&'a mut Node> {
    let mut node = root;
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        node = match &mut node.kind {
            NodeKind::Map(entries) => entries
                .iter_mut()
                .find(|(k, _)| k.as_str() == Some(part.as_str()))
                .map(|(_, v)| v)?,
            NodeKind::Seq(items) => items.get_mut(part.parse::<usize>().ok()?)?,
            NodeKind::Scalar { .. } => return None,
        };
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_paths() {
        assert_eq!(dotted("/pipeline/processors/0"), "pipeline.processors[0]");
        assert_eq!(
            dotted("/streams/a~1b/pipeline/processors"),
            "streams.a/b.pipeline.processors"
        );
    }

    async fn run(config: &str, tests: &str) -> Vec<TestOutcome> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.yaml"), config).unwrap();
        let test_file = dir.path().join("c_sluice_test.yaml");
        std::fs::write(&test_file, tests).unwrap();
        run_file(&test_file).await.unwrap()
    }

    const CONFIG: &str = "input:\n  stdin: {}\npipeline:\n  processors:\n    - mapping: 'root = content().uppercase()'\n    - http: {url: 'http://127.0.0.1:1/never'}\noutput:\n  stdout: {}\n";

    #[tokio::test]
    async fn a_passing_test_with_a_mock() {
        let out = run(
            CONFIG,
            "tests:\n  - name: upper\n    mocks:\n      /pipeline/processors/1:\n        mapping: 'root = content().string() + \"!\"'\n    input_batch:\n      - content: hi\n        metadata: {k: v}\n    output_batches:\n      - - content_equals: HI!\n          metadata_equals: {k: v}\n",
        )
        .await;
        assert_eq!(out.len(), 1);
        assert!(out[0].passed(), "{:?}", out[0].failures);
    }

    #[tokio::test]
    async fn failures_are_placed_at_the_condition() {
        let out = run(
            CONFIG,
            "tests:\n  - name: wrong\n    target_processors: /pipeline/processors/0\n    input_batch:\n      - content: hi\n    output_batches:\n      - - content_equals: hi\n",
        )
        .await;
        assert_eq!(out[0].failures.len(), 1);
        let f = &out[0].failures[0];
        assert!(
            f.contains(":7:11") && f.contains(r#"expected "hi", got "HI""#),
            "{f}"
        );
        assert_eq!(out[0].location.line, 2);
    }

    #[tokio::test]
    async fn wrong_counts_and_bad_targets_are_reported() {
        let out = run(
            CONFIG,
            "tests:\n  - name: count\n    target_processors: /pipeline/processors/0\n    input_batch: [{content: a}, {content: b}]\n    output_batches:\n      - - content_equals: A\n  - name: target\n    target_processors: /pipeline/nothing\n    input_batch: [{content: a}]\n  - name: env\n    environment: {X: y}\n    target_processors: nope\n    input_batch: [{content: a}]\n",
        )
        .await;
        assert!(
            out[0].failures[0].contains("expected 1 message(s), got 2"),
            "{:?}",
            out[0].failures
        );
        assert!(
            out[1].failures[0].contains("`/pipeline/nothing` is no place"),
            "{:?}",
            out[1].failures
        );
        assert!(
            out[2].failures[0].contains("no processor resource `nope`"),
            "{:?}",
            out[2].failures
        );
    }
}
