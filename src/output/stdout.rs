//! `stdout`: writes each message to standard output, one per line by default.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::codec::Codec;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// What follows each message: `lines` (a newline), `all-bytes` (nothing) or `delim:X`.
    #[serde(default)]
    pub codec: Codec,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
}

impl Spec for StdoutConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "stdout",
        kind: Kind::Output,
        summary: "Writes each message to standard output, one per line by default.",
        examples: &[Example {
            title: "Print messages",
            yaml:
                "input:\n  generate: {payload: hi, count: 1}\noutput:\n  stdout: {codec: lines}\n",
        }],
    };
}

impl BuildOutput for StdoutConfig {
    fn build(&self, _cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(Stdout {
                out: Mutex::new(tokio::io::stdout()),
                codec: self.codec.clone(),
            }),
            max_in_flight: 1,
            batching: self.batching.clone(),
        }))
    }
}

pub struct Stdout {
    out: Mutex<tokio::io::Stdout>,
    codec: Codec,
}

/// Joins a batch into one buffer with the codec's separator after each message.
pub(crate) fn encode(batch: &Batch, codec: &Codec) -> Vec<u8> {
    let sep = codec.separator();
    // A guess for messages whose payload is still to be serialized (into `buf` itself).
    let size = |m: &crate::message::Message| m.payload_if_current().map_or(256, |p| p.len());
    let mut buf = Vec::with_capacity(batch.iter().map(|m| size(m) + sep.len()).sum());
    for m in batch {
        m.write_payload(&mut buf);
        buf.extend_from_slice(sep);
    }
    buf
}

#[async_trait]
impl Output for Stdout {
    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let buf = encode(batch, &self.codec);
        let mut out = self.out.lock().await;
        out.write_all(&buf)
            .await
            .map_err(|e| ConnectorError::transient("stdout").with_source(e))?;
        out.flush()
            .await
            .map_err(|e| ConnectorError::transient("stdout").with_source(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[test]
    fn encodes_with_separator() {
        let batch = vec![Message::new("a"), Message::new("b")];
        assert_eq!(encode(&batch, &Codec::Lines), b"a\nb\n");
        assert_eq!(encode(&batch, &Codec::AllBytes), b"ab");
        assert_eq!(encode(&batch, &"delim:,".parse().unwrap()), b"a,b,");
    }
}
