//! `noop`: passes every batch on unchanged (a placeholder, and a baseline in benchmarks).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct NoopConfig {}

impl Spec for NoopConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "noop",
        kind: Kind::Processor,
        summary: "Passes every batch on unchanged.",
        examples: &[Example {
            title: "A placeholder step",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - noop: {}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for NoopConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Noop))
    }
}

pub struct Noop;

#[async_trait]
impl Processor for Noop {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn passes_unchanged() {
        let out = Noop.process(vec![Message::new("a")]).await;
        assert_eq!(&out[0][0].payload()[..], b"a");
    }
}
