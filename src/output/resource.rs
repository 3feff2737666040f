//! `resource`: writes to the output that `output_resources` defines under this label, as
//! if it were written here.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::{BuildOutput, OutputBuild, OutputConfig};
use crate::component::registry::Spec;
use crate::component::{
    deliver_and_wait, BuildContext, BuildError, ComponentSpec, Example, Kind, Router,
};
use crate::message::{Outcome, Transaction};

/// The label of an `output_resources` entry.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ResourceOutputConfig(pub String);

impl Spec for ResourceOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "resource",
        kind: Kind::Output,
        summary: "Writes to an output defined once under `output_resources`.",
        examples: &[Example {
            title: "One output used by two switch cases",
            yaml: "output_resources:\n  - label: archive\n    drop: {}\ninput:\n  stdin: {}\noutput:\n  switch:\n    cases:\n      - check: 'this.level == \"error\"'\n        output: {stdout: {}}\n        continue: true\n      - output: {resource: archive}\n",
        }],
    };
}

impl BuildOutput for ResourceOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        let config = cx
            .resources
            .component::<OutputConfig>(Kind::Output, &self.0)
            .map_err(|e| cx.error(e))?;
        // Built by the stream as this one's only child: see the `resource` input for why.
        let mut inner = (*config).clone();
        inner.label = None;
        Ok(OutputBuild::Router(
            Box::new(Passthrough),
            vec![(format!("[{}]", self.0), inner)],
        ))
    }
}

/// Hands every batch to the one child and reports its outcome.
pub struct Passthrough;

#[async_trait]
impl Router for Passthrough {
    async fn route(&mut self, t: Transaction, children: &[mpsc::Sender<Transaction>]) {
        let outcome = match children.first() {
            Some(child) => deliver_and_wait(child, t.batch).await,
            None => Outcome::errored("the resource output has no output"),
        };
        t.ack.resolve(outcome);
    }
}
