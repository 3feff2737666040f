//! `bounds_check`: drops a batch whose message count is outside `min_parts..=max_parts`
//! or any of whose messages has a size outside `min_part_size..=max_part_size`, as the
//! Benthos does: the batch goes as a whole, settled as filtered like any deliberate
//! drop.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BoundsCheckConfig {
    /// Largest message allowed, in bytes.
    pub max_part_size: usize,
    /// Smallest message allowed, in bytes.
    pub min_part_size: usize,
    /// Most messages a batch may have.
    pub max_parts: usize,
    /// Fewest messages a batch may have.
    pub min_parts: usize,
}

impl Default for BoundsCheckConfig {
    fn default() -> Self {
        BoundsCheckConfig {
            max_part_size: 1 << 30,
            min_part_size: 1,
            max_parts: 100,
            min_parts: 1,
        }
    }
}

impl Spec for BoundsCheckConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "bounds_check",
        kind: Kind::Processor,
        summary: "Drops messages and batches whose size is out of bounds.",
        examples: &[Example {
            title: "Drop empty and oversized messages",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - bounds_check: {min_part_size: 1, max_part_size: 65536}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for BoundsCheckConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.min_part_size > self.max_part_size {
            return Err(cx.error(format!(
                "`min_part_size` ({}) is larger than `max_part_size` ({})",
                self.min_part_size, self.max_part_size
            )));
        }
        if self.min_parts > self.max_parts {
            return Err(cx.error(format!(
                "`min_parts` ({}) is larger than `max_parts` ({})",
                self.min_parts, self.max_parts
            )));
        }
        Ok(Box::new(BoundsCheck(self.clone())))
    }
}

pub struct BoundsCheck(BoundsCheckConfig);

#[async_trait]
impl Processor for BoundsCheck {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let c = &self.0;
        let n = batch.len();
        if n < c.min_parts || n > c.max_parts {
            tracing::debug!(
                messages = n,
                "Batch dropped: its message count is out of bounds."
            );
            return Vec::new();
        }
        let sizes = c.min_part_size..=c.max_part_size;
        if let Some(m) = batch.iter().find(|m| !sizes.contains(&m.payload_len())) {
            tracing::debug!(
                size = m.payload_len(),
                "Batch dropped: a message size is out of bounds."
            );
            return Vec::new();
        }
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build, build_error};

    #[tokio::test]
    async fn one_message_out_of_size_bounds_drops_the_batch() {
        let p = build::<BoundsCheckConfig>("{min_part_size: 2, max_part_size: 4}");
        let out = p.process(batch(&["ab", "abcd"])).await;
        assert_eq!(all_texts(&out), vec![vec!["ab", "abcd"]]);
        assert!(p.process(batch(&["ab", "abcde"])).await.is_empty());
        assert!(p.process(batch(&["a", "abcd"])).await.is_empty());
    }

    #[tokio::test]
    async fn defaults_drop_empty_messages() {
        let p = build::<BoundsCheckConfig>("{}");
        assert!(p.process(batch(&["", "x"])).await.is_empty());
        assert_eq!(all_texts(&p.process(batch(&["x"])).await), vec![vec!["x"]]);
    }

    #[tokio::test]
    async fn drops_whole_batches_out_of_count_bounds() {
        let p = build::<BoundsCheckConfig>("{min_parts: 2, max_parts: 3}");
        assert!(p.process(batch(&["a"])).await.is_empty());
        assert!(p.process(batch(&["a", "b", "c", "d"])).await.is_empty());
        assert_eq!(p.process(batch(&["a", "b"])).await[0].len(), 2);
        let defaults = build::<BoundsCheckConfig>("{}");
        let many: Vec<String> = (0..101).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(defaults.process(batch(&many)).await.is_empty());
        assert_eq!(defaults.process(batch(&many[..100])).await[0].len(), 100);
    }

    #[test]
    fn inverted_bounds_are_refused() {
        let e = build_error::<BoundsCheckConfig>("{min_part_size: 10, max_part_size: 5}");
        assert!(e.contains("min_part_size"), "{e}");
        let e = build_error::<BoundsCheckConfig>("{min_parts: 10, max_parts: 5}");
        assert!(e.contains("min_parts"), "{e}");
        // A zero maximum would drop every batch.
        let e = build_error::<BoundsCheckConfig>("{max_parts: 0}");
        assert!(e.contains("max_parts"), "{e}");
    }
}
