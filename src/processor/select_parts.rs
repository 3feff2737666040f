//! `select_parts`: keeps the messages of a batch at the listed indexes, in the order
//! listed (an index may repeat; negative ones count from the end, -1 being the last).
//! Indexes past either end are ignored; a batch left with nothing is filtered.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::non_empty;
use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SelectPartsConfig {
    /// Indexes of the messages to keep.
    pub parts: Vec<i64>,
}

impl Spec for SelectPartsConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "select_parts",
        kind: Kind::Processor,
        summary: "Keeps the messages of a batch at the given indexes.",
        examples: &[Example {
            title: "Keep the first and last message",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - select_parts: {parts: [0, -1]}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for SelectPartsConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(SelectParts(self.parts.clone())))
    }
}

pub struct SelectParts(Vec<i64>);

#[async_trait]
impl Processor for SelectParts {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let n = batch.len() as i64;
        let picked: Batch = self
            .0
            .iter()
            .map(|&i| if i < 0 { n + i } else { i })
            .filter(|i| (0..n).contains(i))
            .map(|i| batch[i as usize].clone())
            .collect();
        non_empty(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};

    #[tokio::test]
    async fn picks_in_the_listed_order() {
        let p = build::<SelectPartsConfig>("{parts: [2, 0, -1, 0, 9, -9]}");
        let out = p.process(batch(&["a", "b", "c", "d"])).await;
        assert_eq!(all_texts(&out), vec![vec!["c", "a", "d", "a"]]);
    }

    #[tokio::test]
    async fn nothing_selected_filters_the_batch() {
        let p = build::<SelectPartsConfig>("{parts: [5]}");
        assert!(p.process(batch(&["a"])).await.is_empty());
        let none = build::<SelectPartsConfig>("{}");
        assert!(none.process(batch(&["a"])).await.is_empty());
    }
}
