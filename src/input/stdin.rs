//! `stdin`: reads messages from standard input, one per line by default.
//!
//! Delivery: nothing to acknowledge to; failed batches are sent again by the runtime.
//! The input ends at the end of standard input.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildInput, InputBuild};
use crate::codec::{Codec, Splitter, MAX_BATCH};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::message::Message;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinConfig {
    /// How the input splits into messages: `lines`, `all-bytes` or `delim:X`.
    #[serde(default)]
    pub codec: Codec,
    /// Largest message accepted, in bytes.
    #[serde(default = "default_max_buffer")]
    pub max_buffer: usize,
}

pub(crate) fn default_max_buffer() -> usize {
    1 << 20
}

impl Spec for StdinConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "stdin",
        kind: Kind::Input,
        summary: "Reads messages from standard input, one per line by default.",
        examples: &[Example {
            title: "Echo standard input",
            yaml: "input:\n  stdin: {}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for StdinConfig {
    fn build(&self, _cx: &BuildContext) -> Result<InputBuild, BuildError> {
        Ok(InputBuild::Leaf(Box::new(Stdin {
            splitter: Splitter::new(tokio::io::stdin(), self.codec.clone(), self.max_buffer),
        })))
    }
}

pub struct Stdin {
    splitter: Splitter<tokio::io::Stdin>,
}

#[async_trait]
impl Input for Stdin {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        // Every line already read goes in one batch; none is waited for.
        match self.splitter.next_batch(MAX_BATCH).await {
            Ok(Some(messages)) => Ok(ReadBatch::unacked(
                messages.into_iter().map(Message::new).collect(),
            )),
            Ok(None) => Err(ConnectorError::end_of_input()),
            Err(e) => Err(ConnectorError::transient(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c: StdinConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c.codec, Codec::Lines);
        assert_eq!(c.max_buffer, 1 << 20);
        assert!(serde_yaml::from_str::<StdinConfig>("{codec: nope}").is_err());
    }
}
