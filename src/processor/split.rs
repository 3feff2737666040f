//! `split`: breaks a batch into batches of at most `size` messages and, when `byte_size`
//! is set, at most that many payload bytes (whichever is reached first). The new batches
//! share the acknowledgement of the one they came from: the input hears back once all of
//! them are settled.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SplitConfig {
    /// Most messages per batch (0: no count limit).
    pub size: usize,
    /// Most payload bytes per batch (0: no byte limit). A message larger than this
    /// still travels, alone in its batch.
    pub byte_size: usize,
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig {
            size: 1,
            byte_size: 0,
        }
    }
}

impl Spec for SplitConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "split",
        kind: Kind::Processor,
        summary: "Breaks batches into smaller batches by message count or byte size.",
        examples: &[Example {
            title: "Batches of ten",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - split: {size: 10}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for SplitConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.size == 0 && self.byte_size == 0 {
            return Err(cx.error("one of `size` and `byte_size` must be above zero"));
        }
        Ok(Box::new(Split(self.clone())))
    }
}

pub struct Split(SplitConfig);

#[async_trait]
impl Processor for Split {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let SplitConfig { size, byte_size } = self.0;
        let mut out = Vec::new();
        let mut current: Batch = Vec::new();
        let mut bytes = 0;
        for msg in batch {
            let len = if byte_size > 0 { msg.payload_len() } else { 0 };
            let full =
                (size > 0 && current.len() >= size) || (byte_size > 0 && bytes + len > byte_size);
            if full && !current.is_empty() {
                out.push(std::mem::take(&mut current));
                bytes = 0;
            }
            bytes += len;
            current.push(msg);
        }
        if !current.is_empty() {
            out.push(current);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build, build_error};

    #[tokio::test]
    async fn splits_by_count_with_a_remainder() {
        let p = build::<SplitConfig>("{size: 2}");
        let out = p.process(batch(&["a", "b", "c", "d", "e"])).await;
        assert_eq!(
            all_texts(&out),
            vec![vec!["a", "b"], vec!["c", "d"], vec!["e"]]
        );
        let ones = build::<SplitConfig>("{}");
        assert_eq!(ones.process(batch(&["a", "b", "c"])).await.len(), 3);
    }

    #[tokio::test]
    async fn splits_by_bytes_whichever_limit_comes_first() {
        let p = build::<SplitConfig>("{size: 3, byte_size: 5}");
        let out = p
            .process(batch(&["aaa", "bb", "c", "toolarge", "d", "e", "f", "g"]))
            .await;
        assert_eq!(
            all_texts(&out),
            vec![
                vec!["aaa", "bb"],
                vec!["c"],
                vec!["toolarge"],
                vec!["d", "e", "f"],
                vec!["g"]
            ]
        );
    }

    #[test]
    fn no_limit_at_all_is_refused() {
        let e = build_error::<SplitConfig>("{size: 0}");
        assert!(e.contains("size"), "{e}");
    }
}
