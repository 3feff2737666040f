//! `insert_part`: adds a message with `content` to the batch at `index`. Negative indexes
//! count from the end (-1, the default, appends); indexes past either end are clamped.
//! `content` may interpolate; it is rendered against the first message of the batch,
//! whose metadata the new message takes. When it cannot be rendered nothing is inserted
//! and the first message is marked with the error.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::message::{Batch, Message};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InsertPartConfig {
    /// The content of the new message; may use `${! ... }`.
    #[serde(default = "empty")]
    pub content: Interp,
    /// Where the new message goes; negative counts from the end, -1 appends.
    #[serde(default = "append")]
    pub index: i64,
}

fn empty() -> Interp {
    Interp::parse("").expect("an empty interpolation parses")
}

fn append() -> i64 {
    -1
}

impl Spec for InsertPartConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "insert_part",
        kind: Kind::Processor,
        summary: "Inserts a new message into each batch at a given index.",
        examples: &[Example {
            title: "Start every batch with a header line",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - insert_part: {index: 0, content: 'batch of ${! batch_size() }'}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for InsertPartConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(InsertPart(self.clone())))
    }
}

pub struct InsertPart(InsertPartConfig);

#[async_trait]
impl Processor for InsertPart {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        let n = batch.len() as i64;
        let at = if self.0.index < 0 {
            (n + self.0.index + 1).max(0)
        } else {
            self.0.index.min(n)
        } as usize;
        let mut part = match self.0.content.render_bytes(&batch, 0) {
            Ok(content) => Message::new(content),
            Err(e) => {
                if let Some(first) = batch.first_mut() {
                    first.set_error(format!("insert_part content: {e}"));
                }
                return vec![batch];
            }
        };
        if let Some(first) = batch.first() {
            part.share_metadata(first);
        }
        batch.insert(at, part);
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};

    #[tokio::test]
    async fn inserts_at_positive_negative_and_clamped_indexes() {
        let cases = [
            ("{content: X}", vec!["a", "b", "X"]),
            ("{content: X, index: 0}", vec!["X", "a", "b"]),
            ("{content: X, index: 1}", vec!["a", "X", "b"]),
            ("{content: X, index: -2}", vec!["a", "X", "b"]),
            ("{content: X, index: 10}", vec!["a", "b", "X"]),
            ("{content: X, index: -10}", vec!["X", "a", "b"]),
        ];
        for (yaml, want) in cases {
            let p = build::<InsertPartConfig>(yaml);
            let out = p.process(batch(&["a", "b"])).await;
            assert_eq!(all_texts(&out), vec![want], "{yaml}");
        }
    }

    #[tokio::test]
    async fn content_interpolates_against_the_batch() {
        let p = build::<InsertPartConfig>(
            "{content: '${! batch_size() } after ${! this.id }', index: 0}",
        );
        let out = p.process(batch(&[r#"{"id":7}"#, "{}"])).await;
        assert_eq!(out[0][0].payload().as_ref(), b"2 after 7");
        let bad = build::<InsertPartConfig>("{content: '${! this.id.uppercase() }'}");
        let out = bad.process(batch(&["{}", "x"])).await;
        assert_eq!(all_texts(&out), vec![vec!["{}", "x"]]);
        assert!(out[0][0].error().is_some());
    }

    #[tokio::test]
    async fn the_new_message_takes_the_first_metadata() {
        let p = build::<InsertPartConfig>("{content: new}");
        let out = p
            .process(vec![Message::new("a").with_meta("topic", "t1")])
            .await;
        assert_eq!(out[0][1].meta_str("topic").as_deref(), Some("t1"));
    }
}
