//! `catch`: runs processors only on messages marked with an error, then clears the
//! error. Messages without one pass on untouched. Inside, `error()` reads the failure.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::Chain;
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

/// The processors for failed messages.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CatchConfig(#[schemars(with = "Vec<serde_json::Value>")] pub Vec<ProcessorConfig>);

impl Spec for CatchConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "catch",
        kind: Kind::Processor,
        summary: "Runs processors on failed messages only, then clears their error.",
        examples: &[Example {
            title: "Record why a message failed",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - mapping: 'root = this.n.number()'\n    - catch:\n        - mapping: 'root = {\"error\": error(), \"raw\": content().string()}'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for CatchConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Catch(Chain::build(&self.0, cx, &cx.id.path)?)))
    }
}

pub struct Catch(Chain);

#[async_trait]
impl Processor for Catch {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        if batch.iter().all(|m| m.error().is_none()) {
            return vec![batch];
        }
        let (failed, mut out): (Batch, Batch) =
            batch.into_iter().partition(|m| m.error().is_some());
        let handled = self.0.run_flat(failed).await;
        out.extend(handled.into_iter().map(|mut m| {
            m.clear_error();
            m
        }));
        super::nonempty(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn handles_only_failed_messages() {
        let cfg: CatchConfig = serde_yaml::from_str("- mapping: 'root.why = error()'\n").unwrap();
        let cx = BuildContext::new("test", Default::default(), Default::default());
        let p = cfg.build(&cx).unwrap_or_else(|e| panic!("{e}"));
        let mut bad = Message::new("x");
        bad.set_error("boom");
        let out = p.process(vec![Message::new("ok"), bad]).await;
        assert_eq!(&out[0][0].payload()[..], b"ok");
        assert_eq!(&out[0][1].payload()[..], br#"{"why":"boom"}"#);
        assert!(out[0][1].error().is_none());
    }
}
