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
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::component::Spec;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileOutputConfig {
    /// The file to append to; missing directories are created.
    pub path: String,
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
        if self.path.is_empty() {
            return Err(cx.error("`path` is empty"));
        }
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(FileOutput {
                path: PathBuf::from(&self.path),
                codec: self.codec.clone(),
                file: Mutex::new(None),
            }),
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
