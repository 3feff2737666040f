//! `mutation`: edits each message in place with a mapping; what the mapping does not
//! touch stays as it was. A failure marks the message and leaves it otherwise unchanged.

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
pub struct MutationConfig(pub MappingText);

impl Spec for MutationConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "mutation",
        kind: Kind::Processor,
        summary: "Edits each message in place with a mapping.",
        examples: &[Example {
            title: "Add a field, keep the rest",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - mutation: |\n        root.received_at = now()\n        meta source = \"stdin\"\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for MutationConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Mutation(self.0.mapping().clone())))
    }
}

pub struct Mutation(pub Mapping);

#[async_trait]
impl Processor for Mutation {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        super::mapping::run_off_serving_threads(&self.0, batch, run_mutation).await
    }
}

/// The `mutation` processor: each message is edited in place.
fn run_mutation(m: &Mapping, mut batch: Batch) -> Vec<Batch> {
    let size = batch.len();
    let mut keep = vec![true; size];
    for (i, msg) in batch.iter_mut().enumerate() {
        match m.mutate(msg, i, size) {
            Ok(k) => keep[i] = k,
            Err(e) => msg.set_error(e.to_string()),
        }
    }
    let out: Batch = batch
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(m, _)| m)
        .collect();
    if out.is_empty() {
        Vec::new()
    } else {
        vec![out]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::Env;
    use crate::message::Message;

    fn m(src: &str) -> Mapping {
        Mapping::compile(src, &crate::mapping::Env::default()).unwrap()
    }

    #[tokio::test]
    async fn edits_in_place() {
        let p = Mutation(Mapping::compile("root.b = this.a + 1", &Env::default()).unwrap());
        let out = p.process(vec![Message::new("{\"a\":1,\"c\":true}")]).await;
        assert_eq!(&out[0][0].payload()[..], br#"{"a":1,"b":2,"c":true}"#);
    }

    #[test]
    fn mutation_keeps_what_it_does_not_touch() {
        let out = run_mutation(&m("root.b = 2"), vec![Message::new(&br#"{"a":1}"#[..])]);
        assert_eq!(&out[0][0].payload()[..], br#"{"a":1,"b":2}"#);
    }
}
