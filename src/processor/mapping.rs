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
use crate::mapping::Mapping;
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
        run_off_serving_threads(&self.0, batch, run_mapping).await
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
    // Its time counts against the stream's CPU share, as the stream's own tasks' does.
    let work = crate::component::cpu::charged(move || run(&mapping, batch));
    match tokio::task::spawn_blocking(work).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only when the runtime shuts down, with nothing left to deliver to.
        Err(_) => Vec::new(),
    }
}

/// The `mapping` processor: each message is replaced by what the mapping builds.
/// Deleted messages leave the batch; an empty result means all were filtered.
fn run_mapping(m: &Mapping, batch: Batch) -> Vec<Batch> {
    let out: Batch = if m.edits_in_place() {
        // No message reads another of the batch: each can be handed over whole.
        batch
            .into_iter()
            .filter_map(|msg| match m.apply_owned(msg) {
                Ok(out) => out,
                Err(failed) => {
                    let crate::mapping::Failed { mut message, error } = *failed;
                    message.set_error(error.to_string());
                    Some(message)
                }
            })
            .collect()
    } else {
        (0..batch.len())
            .filter_map(|i| match m.apply(&batch, i) {
                Ok(out) => out,
                Err(e) => {
                    let mut failed = batch[i].clone();
                    failed.set_error(e.to_string());
                    Some(failed)
                }
            })
            .collect()
    };
    if out.is_empty() {
        Vec::new()
    } else {
        vec![out]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn m(src: &str) -> Mapping {
        Mapping::compile(src, &crate::mapping::Env::default()).unwrap()
    }

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

    #[test]
    fn mapping_filters_and_marks_errors() {
        let batch = vec![
            Message::new(&br#"{"n":1}"#[..]),
            Message::new(&br#"{"n":-1}"#[..]),
            Message::new(&br#"{"n":"x"}"#[..]),
        ];
        let out = run_mapping(
            &m("root = if this.n < 0 { deleted() } else { this.n + 1 }"),
            batch,
        );
        assert_eq!(out.len(), 1);
        let b = &out[0];
        assert_eq!(b.len(), 2);
        assert_eq!(&b[0].payload()[..], b"2");
        assert!(b[1].error().is_some());
        assert_eq!(&b[1].payload()[..], br#"{"n":"x"}"#);
        assert!(run_mapping(&m("root = deleted()"), vec![Message::new("x")]).is_empty());
    }
}
