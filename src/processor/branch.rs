//! `branch`: runs processors on a copy of each message made by `request_map`, then maps
//! the results back onto the originals with `result_map` (`this` is the result, `root`
//! the original). Use it to enrich messages from a call without losing them. A message
//! the request map deletes skips the branch; a failure anywhere marks the original.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::Chain;
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::MappingText;
use crate::mapping::processors::Branch as Maps;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchConfig {
    /// Builds what the branch processes from each message; a copy when absent.
    #[serde(default)]
    pub request_map: Option<MappingText>,
    /// The processors of the branch.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
    /// Maps each result back onto its original; results are dropped when absent.
    #[serde(default)]
    pub result_map: Option<MappingText>,
}

impl Spec for BranchConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "branch",
        kind: Kind::Processor,
        summary: "Processes a copy of each message and maps the result back onto it.",
        examples: &[Example {
            title: "Enrich without losing the message",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - branch:\n        request_map: 'root.id = this.user_id'\n        processors:\n          - mapping: 'root.score = this.id * 10'\n        result_map: 'root.score = this.score'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for BranchConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(BranchProcessor {
            maps: Maps {
                request_map: self.request_map.as_ref().map(|m| m.mapping().clone()),
                result_map: self.result_map.as_ref().map(|m| m.mapping().clone()),
            },
            chain: Chain::build(&self.processors, cx, &format!("{}.processors", cx.path))?,
        }))
    }
}

pub struct BranchProcessor {
    maps: Maps,
    chain: Chain,
}

#[async_trait]
impl Processor for BranchProcessor {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        let req = self.maps.request(&mut batch);
        if !req.batch.is_empty() {
            let results = self.chain.run_flat(req.batch).await;
            self.maps.merge(&mut batch, &req.origin, &results);
        }
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn enriches_originals() {
        let cfg: BranchConfig = serde_yaml::from_str(
            "request_map: 'root.id = this.user_id'\nprocessors:\n  - mapping: 'root.score = this.id * 10'\nresult_map: 'root.score = this.score'\n",
        )
        .unwrap();
        let cx = BuildContext::new("test", Default::default(), Default::default());
        let p = cfg.build(&cx).unwrap_or_else(|e| panic!("{e}"));
        let out = p
            .process(vec![Message::new("{\"user_id\":4,\"keep\":true}")])
            .await;
        assert_eq!(
            &out[0][0].payload()[..],
            br#"{"keep":true,"score":40,"user_id":4}"#
        );
    }
}
