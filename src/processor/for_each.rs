//! `for_each`: runs its processors on each message of a batch as though it were a
//! batch of one, then joins everything they return into one batch, in order.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::{non_empty, Chain};
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

/// The processors to run per message.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ForEachConfig(#[schemars(with = "Vec<serde_json::Value>")] pub Vec<ProcessorConfig>);

impl Spec for ForEachConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "for_each",
        kind: Kind::Processor,
        summary: "Runs processors on each message of a batch on its own.",
        examples: &[Example {
            title: "Expand each message on its own",
            yaml: "input:\n  generate: {payload: '[1,2,3]', interval: 1s, batch_size: 2}\npipeline:\n  processors:\n    - for_each:\n        - unarchive: {format: json_array}\n        - mapping: 'root = {\"n\": this, \"of\": batch_size()}'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for ForEachConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(ForEach(Chain::build(&self.0, cx, &cx.id.path)?)))
    }
}

pub struct ForEach(Chain);

#[async_trait]
impl Processor for ForEach {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let mut out = Vec::with_capacity(batch.len());
        for msg in batch {
            out.extend(self.0.run_flat(vec![msg]).await);
        }
        non_empty(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};

    #[tokio::test]
    async fn each_message_is_a_batch_of_one() {
        let p = build::<ForEachConfig>(
            "- unarchive: {format: json_array}\n- mapping: 'root = \"%v/%v\".format(this, batch_size())'\n",
        );
        let out = p.process(batch(&["[1,2,3]", "[4]"])).await;
        assert_eq!(all_texts(&out), vec![vec!["1/3", "2/3", "3/3", "4/1"]]);
    }

    #[tokio::test]
    async fn filtered_messages_leave() {
        let p = build::<ForEachConfig>("- mapping: 'root = if this > 1 { deleted() }'\n");
        let out = p.process(batch(&["1", "2", "0"])).await;
        assert_eq!(all_texts(&out), vec![vec!["1", "0"]]);
        assert!(p.process(batch(&["5"])).await.is_empty());
    }
}
