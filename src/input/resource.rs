//! `resource`: reads from the input that `input_resources` defines under this label, as if
//! it were written here.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildInput, InputBuild, InputConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind};

/// The label of an `input_resources` entry.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ResourceInputConfig(pub String);

impl Spec for ResourceInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "resource",
        kind: Kind::Input,
        summary: "Reads from an input defined once under `input_resources`.",
        examples: &[Example {
            title: "An input defined once",
            yaml: "input_resources:\n  - label: ticks\n    generate: {interval: 1s, mapping: 'root.at = now()'}\ninput:\n  resource: ticks\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for ResourceInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        let config = cx
            .resources
            .component::<InputConfig>(Kind::Input, &self.0)
            .map_err(|e| cx.error(e))?;
        // The stream builds it in this one's place, having entered the resource (so one
        // that comes back to itself is caught there). Its label names the resource, not a
        // component of this stream: it would clash when the resource is used twice.
        let mut inner = (*config).clone();
        inner.label = None;
        Ok(InputBuild::Merge(vec![inner]))
    }
}
