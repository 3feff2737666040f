//! `parallel`: runs its processors on each message of a batch as a batch of one, up to
//! `cap` messages at a time (0: all at once), and joins the results into one batch in
//! the original order. Useful around slow calls (`http`) that do not depend on each
//! other.

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::{non_empty, Chain};
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParallelConfig {
    /// Most messages processed at once (0: no limit).
    #[serde(default)]
    pub cap: usize,
    /// The processors to run on each message.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
}

impl Spec for ParallelConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "parallel",
        kind: Kind::Processor,
        summary: "Runs processors on the messages of a batch concurrently.",
        examples: &[Example {
            title: "Enrich up to eight messages at once",
            yaml: "input:\n  generate: {mapping: 'root.id = uuid_v4()', interval: 1s, batch_size: 20}\npipeline:\n  processors:\n    - parallel:\n        cap: 8\n        processors:\n          - http: {url: 'http://127.0.0.1:8080/enrich'}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for ParallelConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Parallel {
            cap: self.cap,
            chain: Chain::build(&self.processors, cx, &format!("{}.processors", cx.id.path))?,
        }))
    }
}

pub struct Parallel {
    cap: usize,
    chain: Chain,
}

#[async_trait]
impl Processor for Parallel {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let limit = if self.cap == 0 { batch.len() } else { self.cap }.max(1);
        // `buffered` keeps the results in the order the messages came in.
        let results: Vec<Batch> = stream::iter(batch)
            .map(|msg| self.chain.run_flat(vec![msg]))
            .buffered(limit)
            .collect()
            .await;
        non_empty(results.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn runs_concurrently_and_keeps_order() {
        let p = build::<ParallelConfig>(
            "processors:\n  - sleep: {duration: 200ms}\n  - mapping: 'root = this + 1'\n",
        );
        let start = Instant::now();
        let out = p.process(batch(&["1", "2", "3", "4"])).await;
        assert!(
            start.elapsed() < Duration::from_millis(700),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(all_texts(&out), vec![vec!["2", "3", "4", "5"]]);
    }

    #[tokio::test]
    async fn cap_limits_how_many_run_at_once() {
        let p = build::<ParallelConfig>("cap: 1\nprocessors:\n  - sleep: {duration: 100ms}\n");
        let start = Instant::now();
        p.process(batch(&["1", "2", "3"])).await;
        assert!(
            start.elapsed() >= Duration::from_millis(300),
            "{:?}",
            start.elapsed()
        );
    }
}
