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
use crate::mapping::Mapping;
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
            chain: Chain::build(&self.processors, cx, &format!("{}.processors", cx.id.path))?,
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

/// The mapping halves of a `branch` processor. The engine runs its own processors on
/// what [`Maps::request`] gives and hands the results to [`Maps::merge`].
#[derive(Debug, Clone, Default)]
struct Maps {
    request_map: Option<Mapping>,
    result_map: Option<Mapping>,
}

/// What goes into the branch: copies of the messages to process, with the position of
/// each in the original batch.
#[derive(Debug, Default)]
struct BranchRequest {
    batch: Batch,
    origin: Vec<usize>,
}

impl Maps {
    /// Maps each message into its branch copy. Messages the request map deletes skip
    /// the branch; a failing request map marks the original message.
    fn request(&self, original: &mut Batch) -> BranchRequest {
        let mut req = BranchRequest::default();
        for i in 0..original.len() {
            let mapped = match &self.request_map {
                None => Ok(Some(original[i].clone())),
                Some(m) => m.apply(original, i),
            };
            match mapped {
                Ok(Some(mut msg)) => {
                    msg.clear_error();
                    req.batch.push(msg);
                    req.origin.push(i);
                }
                Ok(None) => {}
                Err(e) => original[i].set_error(format!("branch request map: {e}")),
            }
        }
        req
    }

    /// Maps branch results back onto their originals. `results` must line up with the
    /// request's batch (the engine reports a count mismatch as an error on every
    /// message). A result that failed in the branch marks its original.
    fn merge(&self, original: &mut Batch, origin: &[usize], results: &Batch) {
        if results.len() != origin.len() {
            let msg = format!(
                "branch produced {} message(s) for {} sent; results cannot be matched",
                results.len(),
                origin.len()
            );
            for &i in origin {
                if let Some(m) = original.get_mut(i) {
                    m.set_error(msg.clone());
                }
            }
            return;
        }
        for (res, &i) in results.iter().zip(origin) {
            let Some(target) = original.get_mut(i) else {
                continue;
            };
            if let Some(e) = res.error() {
                target.set_error(format!("branch failed: {e}"));
                continue;
            }
            let Some(m) = &self.result_map else { continue };
            if let Err(e) = m.apply_onto(target, res) {
                target.set_error(format!("branch result map: {e}"));
            }
        }
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

    #[test]
    fn compiled_maps_can_be_shared_between_threads() {
        fn ok<T: Send + Sync>() {}
        ok::<Mapping>();
        ok::<Maps>();
    }

    #[test]
    fn branch_round_trip() {
        let b = Maps {
            request_map: Some(m("root.q = this.id")),
            result_map: Some(m("root.enriched = this.answer\nmeta from_branch = \"yes\"")),
        };
        let mut original = vec![Message::new(&br#"{"id":7}"#[..])];
        let req = b.request(&mut original);
        assert_eq!(&req.batch[0].payload()[..], br#"{"q":7}"#);
        let results = vec![Message::new(&br#"{"answer":42}"#[..])];
        b.merge(&mut original, &req.origin, &results);
        assert_eq!(&original[0].payload()[..], br#"{"enriched":42,"id":7}"#);
        assert_eq!(original[0].meta_str("from_branch").as_deref(), Some("yes"));
    }
}
