//! `broker` input: several inputs feeding one stream, their messages merged.
//!
//! Delivery: each child input keeps its own guarantee; the graph runs each as its own node.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildInput, InputBuild, InputConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrokerInputConfig {
    /// The inputs whose messages are merged.
    pub inputs: Vec<InputConfig>,
}

impl Spec for BrokerInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "broker",
        kind: Kind::Input,
        summary: "Merges the messages of several inputs into one stream.",
        examples: &[Example {
            title: "HTTP and standard input together",
            yaml: "input:\n  broker:\n    inputs:\n      - http_server: {path: /in}\n      - stdin: {}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for BrokerInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        if self.inputs.is_empty() {
            return Err(cx.error("`inputs` is empty: a broker needs at least one input"));
        }
        Ok(InputBuild::Merge(self.inputs.clone()))
    }
}
