//! `drop`: accepts every message and writes it nowhere. Counts as delivered.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct DropConfig {
    /// How messages are grouped before they are dropped.
    #[serde(default)]
    pub batching: BatchPolicy,
}

impl Spec for DropConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "drop",
        kind: Kind::Output,
        summary: "Accepts every message and writes it nowhere.",
        examples: &[Example {
            title: "Discard after logging",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - log: {message: seen}\noutput:\n  drop: {}\n",
        }],
    };
}

impl BuildOutput for DropConfig {
    fn build(&self, _cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(Drop),
            max_in_flight: 1,
            batching: self.batching.clone(),
        }))
    }
}

pub struct Drop;

#[async_trait]
impl Output for Drop {
    async fn write(&self, _batch: &Batch) -> Result<(), ConnectorError> {
        Ok(())
    }
}
