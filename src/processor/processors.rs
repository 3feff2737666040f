//! `processors`: a list of processors run in order as one, for places that take a
//! single processor (and to group steps under one label).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::Chain;
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

/// The processors, in order.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ProcessorsConfig(#[schemars(with = "Vec<serde_json::Value>")] pub Vec<ProcessorConfig>);

impl Spec for ProcessorsConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "processors",
        kind: Kind::Processor,
        summary: "Runs a list of processors in order, as one processor.",
        examples: &[Example {
            title: "Two steps under one label",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - label: normalise\n      processors:\n        - mapping: 'root = this'\n        - mutation: 'root.seen = true'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for ProcessorsConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Processors(Chain::build(
            &self.0,
            cx,
            &cx.id.path,
        )?)))
    }
}

pub struct Processors(Chain);

#[async_trait]
impl Processor for Processors {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        self.0.run(batch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};

    #[tokio::test]
    async fn runs_in_order_and_keeps_batches_apart() {
        let p = build::<ProcessorsConfig>("- split: {size: 1}\n- mapping: 'root = this * 10'\n");
        let out = p.process(batch(&["1", "2"])).await;
        assert_eq!(all_texts(&out), vec![vec!["10"], vec!["20"]]);
    }
}
