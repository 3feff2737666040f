//! `file`: reads messages from files (glob patterns allowed), one per line by default.
//!
//! Delivery: nothing to acknowledge to; failed batches are sent again by the runtime.
//! The input ends after the last file. Each message carries its file in `path` metadata.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildInput, InputBuild};
use crate::codec::{Codec, Splitter, MAX_BATCH};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::message::{Message, Metadata};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileInputConfig {
    /// Files to read, in order; glob patterns such as `logs/*.log` are expanded.
    pub paths: Vec<String>,
    /// How each file splits into messages: `lines`, `all-bytes` or `delim:X`.
    #[serde(default)]
    pub codec: Codec,
    /// Largest message accepted, in bytes.
    #[serde(default = "super::stdin::default_max_buffer")]
    pub max_buffer: usize,
}

impl Spec for FileInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "file",
        kind: Kind::Input,
        summary: "Reads messages from files, one per line by default.",
        examples: &[Example {
            title: "Replay a log file",
            yaml: "input:\n  file:\n    paths: [./events.log]\n    codec: lines\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for FileInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        if self.paths.is_empty() {
            return Err(cx.error("`paths` is empty: name at least one file"));
        }
        for p in &self.paths {
            glob::Pattern::new(p).map_err(|e| cx.error(format!("bad pattern `{p}`: {e}")))?;
        }
        Ok(InputBuild::Leaf(Box::new(FileInput {
            config: self.clone(),
            queue: VecDeque::new(),
            current: None,
        })))
    }
}

pub struct FileInput {
    config: FileInputConfig,
    queue: VecDeque<PathBuf>,
    /// The file being read: its messages' metadata and its splitter.
    current: Option<(Arc<Metadata>, Splitter<tokio::fs::File>)>,
}

#[async_trait]
impl Input for FileInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        let mut found = Vec::new();
        for pattern in &self.config.paths {
            let matches = glob::glob(pattern).map_err(|e| {
                ConnectorError::rejected(format!("bad pattern `{pattern}`")).with_source(e)
            })?;
            let before = found.len();
            found.extend(matches.filter_map(Result::ok).filter(|p| p.is_file()));
            if found.len() == before {
                return Err(ConnectorError::transient(format!(
                    "no file matches `{pattern}`"
                )));
            }
        }
        self.queue = found.into();
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        loop {
            if self.current.is_none() {
                let Some(path) = self.queue.pop_front() else {
                    return Err(ConnectorError::end_of_input());
                };
                let file = tokio::fs::File::open(&path).await.map_err(|e| {
                    ConnectorError::transient(format!("cannot open {}: {e}", path.display()))
                })?;
                // Every message of a file carries the same metadata: one map, shared.
                let meta = Message::new("")
                    .with_meta("path", path.display().to_string())
                    .shared_metadata()
                    .cloned()
                    .unwrap_or_default();
                let splitter =
                    Splitter::new(file, self.config.codec.clone(), self.config.max_buffer);
                self.current = Some((meta, splitter));
            }
            let Some((meta, splitter)) = &mut self.current else {
                continue;
            };
            // Every line already read goes in one batch; none is waited for.
            match splitter.next_batch(MAX_BATCH).await {
                Ok(Some(messages)) => {
                    let batch = messages
                        .into_iter()
                        .map(|bytes| Message::new(bytes).with_shared_metadata(meta.clone()))
                        .collect();
                    return Ok(ReadBatch::unacked(batch));
                }
                Ok(None) => self.current = None,
                Err(e) => return Err(ConnectorError::transient(e.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn input(cfg: FileInputConfig) -> Box<dyn Input> {
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        match cfg.build(&cx).unwrap() {
            InputBuild::Leaf(i) => i,
            InputBuild::Merge(_) => panic!("leaf expected"),
        }
    }

    #[tokio::test]
    async fn reads_lines_of_every_matching_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in [("a.log", "1\n2\n"), ("b.log", "3")] {
            let mut f = std::fs::File::create(dir.path().join(name)).unwrap();
            f.write_all(body.as_bytes()).unwrap();
        }
        let cfg: FileInputConfig =
            serde_yaml::from_str(&format!("paths: ['{}/*.log']", dir.path().display())).unwrap();
        let mut i = input(cfg);
        i.connect().await.unwrap();
        let mut got = Vec::new();
        let mut batches = 0;
        loop {
            match i.read().await {
                Ok(r) => {
                    // One batch per file: every line it had read.
                    let paths: Vec<_> = r.batch.iter().map(|m| m.meta_str("path")).collect();
                    assert!(paths.iter().all(|p| p == &paths[0]), "{paths:?}");
                    assert!(paths[0].as_ref().unwrap().ends_with(".log"));
                    batches += 1;
                    got.extend(
                        r.batch
                            .iter()
                            .map(|m| String::from_utf8(m.payload().to_vec()).unwrap()),
                    );
                }
                Err(e) => {
                    assert_eq!(e.kind, crate::component::ErrorKind::EndOfInput);
                    break;
                }
            }
        }
        assert_eq!(got, vec!["1", "2", "3"]);
        assert_eq!(batches, 2);
    }

    #[tokio::test]
    async fn missing_file_fails_to_connect() {
        let cfg: FileInputConfig = serde_yaml::from_str("paths: [/nonexistent/x.log]").unwrap();
        let mut i = input(cfg);
        assert!(i.connect().await.is_err());
    }
}
