//! `file` output: appends messages to a file, one per line by default. A write counts as
//! delivered once the bytes are handed to the operating system (flushed).

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use super::stdout::encode;
use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::codec::Codec;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::Interp;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileOutputConfig {
    /// The file to append to; missing directories are created. Interpolated per message,
    /// so `./out/${! meta("kind") }.log` spreads messages over files.
    pub path: Interp,
    /// What follows each message: `lines` (a newline), `all-bytes` (nothing) or `delim:X`.
    #[serde(default)]
    pub codec: Codec,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
}

impl Spec for FileOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "file",
        kind: Kind::Output,
        summary: "Appends messages to a file, one per line by default.",
        examples: &[Example {
            title: "Keep messages in a file",
            yaml: "input:\n  stdin: {}\noutput:\n  file:\n    path: ./out/messages.log\n    codec: lines\n",
        }],
    };
}

impl BuildOutput for FileOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        if self.path.source().is_empty() {
            return Err(cx.error("`path` is empty"));
        }
        let output: Box<dyn Output> = match self.path.static_value() {
            Some(path) => Box::new(FileOutput {
                path: PathBuf::from(path),
                codec: self.codec.clone(),
                file: Mutex::new(None),
            }),
            None => Box::new(DynamicFileOutput {
                path: self.path.clone(),
                codec: self.codec.clone(),
            }),
        };
        Ok(OutputBuild::Writer(Writer {
            output,
            max_in_flight: 1,
            batching: self.batching.clone(),
        }))
    }
}

pub struct FileOutput {
    path: PathBuf,
    codec: Codec,
    file: Mutex<Option<tokio::fs::File>>,
}

impl FileOutput {
    fn err(&self, e: std::io::Error) -> ConnectorError {
        ConnectorError::not_connected(format!("{}: {e}", self.path.display()))
    }
}

#[async_trait]
impl Output for FileOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| self.err(e))?;
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await
            .map_err(|e| self.err(e))?;
        *self.file.lock().await = Some(file);
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let buf = encode(batch, &self.codec);
        let mut guard = self.file.lock().await;
        let Some(file) = guard.as_mut() else {
            return Err(ConnectorError::not_connected("file is not open"));
        };
        let result = async {
            file.write_all(&buf).await?;
            file.flush().await
        }
        .await;
        if let Err(e) = result {
            *guard = None;
            return Err(self.err(e));
        }
        Ok(())
    }

    async fn close(&self) {
        if let Some(mut f) = self.file.lock().await.take() {
            let _ = f.flush().await;
        }
    }
}

/// A file output whose path depends on the message: each write opens the files its
/// messages go to, appends, flushes and closes them.
pub struct DynamicFileOutput {
    path: Interp,
    codec: Codec,
}

#[async_trait]
impl Output for DynamicFileOutput {
    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        // Group by file, keeping each file's messages in order.
        let mut groups: Vec<(String, Vec<u8>)> = Vec::new();
        for (i, msg) in batch.iter().enumerate() {
            let path = self.path.render(batch, i).map_err(|e| {
                ConnectorError::rejected(format!("cannot build the path `{}`: {e}", self.path))
            })?;
            let at = match groups.iter().position(|(p, _)| *p == path) {
                Some(at) => at,
                None => {
                    groups.push((path, Vec::new()));
                    groups.len() - 1
                }
            };
            let buf = &mut groups[at].1;
            msg.write_payload(buf);
            buf.extend_from_slice(self.codec.separator());
        }
        for (path, buf) in groups {
            let err = |e: std::io::Error| ConnectorError::transient(path.clone()).with_source(e);
            let path_buf = PathBuf::from(&path);
            if let Some(dir) = path_buf.parent().filter(|d| !d.as_os_str().is_empty()) {
                tokio::fs::create_dir_all(dir).await.map_err(err)?;
            }
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path_buf)
                .await
                .map_err(err)?;
            file.write_all(&buf).await.map_err(err)?;
            file.flush().await.map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn appends_lines_and_creates_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/out.log");
        let out = FileOutput {
            path: path.clone(),
            codec: Codec::Lines,
            file: Mutex::new(None),
        };
        out.connect().await.unwrap();
        out.write(&vec![Message::new("a"), Message::new("b")])
            .await
            .unwrap();
        out.write(&vec![Message::new("c")]).await.unwrap();
        out.close().await;
        assert_eq!(std::fs::read_to_string(path).unwrap(), "a\nb\nc\n");
    }

    #[tokio::test]
    async fn interpolated_path_spreads_messages_over_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = DynamicFileOutput {
            path: Interp::parse(&format!("{}/${{! this.kind }}.log", dir.path().display()))
                .unwrap(),
            codec: Codec::Lines,
        };
        let batch = vec![
            Message::new(r#"{"kind":"a","v":1}"#),
            Message::new(r#"{"kind":"b","v":2}"#),
            Message::new(r#"{"kind":"a","v":3}"#),
        ];
        out.write(&batch).await.unwrap();
        let a = std::fs::read_to_string(dir.path().join("a.log")).unwrap();
        assert_eq!(a, "{\"kind\":\"a\",\"v\":1}\n{\"kind\":\"a\",\"v\":3}\n");
        let b = std::fs::read_to_string(dir.path().join("b.log")).unwrap();
        assert_eq!(b.lines().count(), 1);
        // A message the path cannot be built from is refused, not written somewhere odd.
        let missing = vec![Message::new("not json")];
        assert_eq!(
            out.write(&missing).await.unwrap_err().kind,
            crate::component::ErrorKind::Rejected
        );
    }

    #[tokio::test]
    async fn write_before_connect_is_not_connected() {
        let out = FileOutput {
            path: "x".into(),
            codec: Codec::Lines,
            file: Mutex::new(None),
        };
        let e = out.write(&vec![Message::new("a")]).await.unwrap_err();
        assert_eq!(e.kind, crate::component::ErrorKind::NotConnected);
    }
}
