//! `mapping` (and its older name `bloblang`): replaces each message with what a mapping
//! builds from it. A message the mapping deletes is filtered; one it fails on is passed
//! on unchanged and marked with the error. The language is described in `docs/mapping.md`.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::MappingText;
use crate::mapping::{processors, Mapping};
use crate::message::Batch;

/// The mapping text.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MappingConfig(pub MappingText);

/// The same processor under its older name.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct BloblangConfig(pub MappingText);

impl Spec for MappingConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "mapping",
        kind: Kind::Processor,
        summary: "Replaces each message with the document a mapping builds from it.",
        examples: &[Example {
            title: "Rename a field and add one",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - mapping: |\n        root.id = this.user_id\n        root.seen_at = now()\noutput:\n  stdout: {}\n",
        }],
    };
}

impl Spec for BloblangConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "bloblang",
        kind: Kind::Processor,
        summary: "The `mapping` processor under its older name.",
        examples: &[Example {
            title: "Keep only some messages",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - bloblang: 'root = if this.level == \"debug\" { deleted() } else { this }'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for MappingConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(MappingProcessor(self.0.mapping().clone())))
    }
}

impl BuildProcessor for BloblangConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(MappingProcessor(self.0.mapping().clone())))
    }
}

pub struct MappingProcessor(pub Mapping);

#[async_trait]
impl Processor for MappingProcessor {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        run_off_serving_threads(&self.0, batch, processors::run_mapping).await
    }
}

/// Runs `run` over the batch: inline for the operator's mappings, on the blocking pool for
/// a tenant's (those with a time budget), so that one slow tenant holds none of the
/// threads that serve everyone's requests.
pub(crate) async fn run_off_serving_threads(
    mapping: &Mapping,
    batch: Batch,
    run: fn(&Mapping, Batch) -> Vec<Batch>,
) -> Vec<Batch> {
    if !mapping.is_budgeted() {
        return run(mapping, batch);
    }
    let mapping = mapping.clone();
    match tokio::task::spawn_blocking(move || run(&mapping, batch)).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only when the runtime shuts down, with nothing left to deliver to.
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn maps_filters_and_flags() {
        let p = MappingProcessor(
            Mapping::compile(
                "root = if this.n == 0 { deleted() } else { this.n * 2 }",
                &crate::mapping::Env::default(),
            )
            .unwrap(),
        );
        let out = p
            .process(vec![
                Message::new("{\"n\":2}"),
                Message::new("{\"n\":0}"),
                Message::new("oops"),
            ])
            .await;
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0].payload()[..], b"4");
        assert!(out[0][1].error().is_some());
    }

    #[test]
    fn config_is_the_mapping_text() {
        let c: MappingConfig = serde_yaml::from_str("'root = this'").unwrap();
        assert_eq!(c.0.source(), "root = this");
        // A broken mapping is refused while the config is read.
        assert!(serde_yaml::from_str::<MappingConfig>("'root = '").is_err());
    }
}
