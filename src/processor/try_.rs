//! `try`: runs processors in order; a message that fails at one step skips the rest and
//! passes on marked with its error.

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
pub struct TryConfig(#[schemars(with = "Vec<serde_json::Value>")] pub Vec<ProcessorConfig>);

impl Spec for TryConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "try",
        kind: Kind::Processor,
        summary: "Runs processors in order; a message that fails skips the remaining ones.",
        examples: &[Example {
            title: "Stop at the first failure",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - try:\n        - mapping: 'root = this.payload.parse_json()'\n        - mutation: 'root.parsed = true'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for TryConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let steps = self
            .0
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Chain::build(std::slice::from_ref(c), cx, &format!("{}[{i}]", cx.id.path))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(Try(steps)))
    }
}

pub struct Try(Vec<Chain>);

#[async_trait]
impl Processor for Try {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let mut current = batch;
        // Messages that failed stop here and rejoin the output at the end.
        let mut failed: Batch = Vec::new();
        for step in &self.0 {
            let (ok, bad): (Batch, Batch) = current.into_iter().partition(|m| m.error().is_none());
            failed.extend(bad);
            current = if ok.is_empty() {
                ok
            } else {
                step.run_flat(ok).await
            };
        }
        current.extend(failed);
        super::nonempty(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn failures_skip_later_steps() {
        let cfg: TryConfig = serde_yaml::from_str(
            "- mapping: 'root = this.n.number()'\n- mapping: 'root = this + 1'\n",
        )
        .unwrap();
        let cx = BuildContext::new("test", Default::default(), Default::default());
        let p = cfg.build(&cx).unwrap_or_else(|e| panic!("{e}"));
        let out = p
            .process(vec![
                Message::new("{\"n\":\"1\"}"),
                Message::new("{\"n\":\"x\"}"),
            ])
            .await;
        assert_eq!(&out[0][0].payload()[..], b"2");
        assert!(out[0][1].error().is_some());
        assert_eq!(&out[0][1].payload()[..], br#"{"n":"x"}"#);
    }
}
