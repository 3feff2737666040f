//! `resource`: runs the processor defined under `processor_resources` with this label, as
//! if it were written here. One definition can then serve many places.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

/// The label of a `processor_resources` entry.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ResourceProcessorConfig(pub String);

impl Spec for ResourceProcessorConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "resource",
        kind: Kind::Processor,
        summary: "Runs a processor defined once under `processor_resources`.",
        examples: &[Example {
            title: "One cleaning step shared by two streams",
            yaml: "processor_resources:\n  - label: clean\n    mapping: 'root = this.without(\"password\")'\nstreams:\n  users:\n    input: {stdin: {}}\n    pipeline:\n      processors:\n        - resource: clean\n    output: {stdout: {}}\n  audit:\n    input: {generate: {count: 1, mapping: 'root = {\"user\": \"a\", \"password\": \"x\"}'}}\n    pipeline:\n      processors:\n        - resource: clean\n    output: {drop: {}}\n",
        }],
    };
}

impl BuildProcessor for ResourceProcessorConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let config = cx
            .resources
            .component::<ProcessorConfig>(Kind::Processor, &self.0)
            .map_err(|e| cx.error(e))?;
        let inner = cx.entering_resource(Kind::Processor, &self.0)?;
        let built = config.kind.build(&inner).map_err(|e| BuildError {
            path: cx.id.path.clone(),
            message: format!("processor resource `{}`: {}", self.0, e.message),
        })?;
        Ok(Box::new(Resource(built)))
    }
}

pub struct Resource(Box<dyn Processor>);

#[async_trait]
impl Processor for Resource {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        self.0.process(batch).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::component::resources::Resources;
    use crate::message::Message;

    fn processor_config(yaml: &str) -> ProcessorConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn cx(resources: Resources) -> BuildContext {
        BuildContext::new("test", Default::default(), Default::default())
            .with_resources(Arc::new(resources))
    }

    #[tokio::test]
    async fn runs_the_labelled_processor() {
        let mut r = Resources::default();
        r.add_component(
            Kind::Processor,
            "upper",
            processor_config("mapping: 'root = content().uppercase()'"),
        );
        let p = ResourceProcessorConfig("upper".into())
            .build(&cx(r))
            .unwrap();
        let out = p.process(vec![Message::new("abc")]).await;
        assert_eq!(&out[0][0].payload()[..], b"ABC");
    }

    #[test]
    fn unknown_and_self_referring_resources_are_build_errors() {
        let mut r = Resources::default();
        r.add_component(Kind::Processor, "a", processor_config("resource: b"));
        r.add_component(
            Kind::Processor,
            "b",
            processor_config("try: [{resource: a}]"),
        );
        r.add_component(Kind::Processor, "c", processor_config("resource: c"));
        let cx = cx(r);
        let e = ResourceProcessorConfig("zz".into())
            .build(&cx)
            .err()
            .unwrap();
        assert!(e.message.contains("no processor resource `zz`"), "{e}");
        assert!(e.message.contains("`a`, `b`, `c`"), "{e}");
        let e = ResourceProcessorConfig("c".into())
            .build(&cx)
            .err()
            .unwrap();
        assert!(e.message.contains("loop"), "{e}");
        let e = ResourceProcessorConfig("a".into())
            .build(&cx)
            .err()
            .unwrap();
        assert!(
            e.message.contains(
                "processor resource `a` -> processor resource `b` -> processor resource `a`"
            ),
            "{e}"
        );
    }
}
