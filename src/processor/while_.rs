//! `while`: runs its processors over a batch again and again for as long as `check`
//! passes against the batch's first message. With `at_least_once` they run once before
//! the first check; `max_loops` caps the rounds of each batch (0: no cap, except in
//! streams posted by organisations, where 0 is [`MAX_LOOPS`]: what a message says,
//! such as a `limit` field an anonymous caller sent, cannot make the loop endless).
//! When a round leaves several batches, the check reads the first; when it leaves none,
//! the loop ends. A check that fails (not a bool) marks the messages it read and ends
//! the loop.

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

/// The most rounds `max_loops` may ask for, and the rounds of a posted stream's `while`
/// that gives none.
pub const MAX_LOOPS: usize = 100_000;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WhileConfig {
    /// Run the processors once before the first check, like do-while.
    #[serde(default)]
    pub at_least_once: bool,
    /// Most rounds per batch (0: no limit; in streams posted by organisations, 100000).
    #[serde(default)]
    pub max_loops: usize,
    /// A mapping giving a bool, read against the first message of the batch.
    pub check: MappingText,
    /// The processors to repeat.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
}

impl Spec for WhileConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "while",
        kind: Kind::Processor,
        summary: "Repeats processors over a batch while a check passes.",
        examples: &[Example {
            title: "Count up to ten",
            yaml: "input:\n  generate: {payload: '{\"n\":0}', count: 1, interval: 0s}\npipeline:\n  processors:\n    - while:\n        check: 'this.n < 10'\n        max_loops: 100\n        processors:\n          - mutation: 'root.n = this.n + 1'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for WhileConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        // A posted stream's loops end: 0 there is the most allowed, not "for ever".
        let max_loops = match self.max_loops {
            0 if cx.reach.policy.is_some() => MAX_LOOPS,
            n => n,
        };
        Ok(Box::new(While {
            at_least_once: self.at_least_once,
            max_loops,
            check: self.check.mapping().clone(),
            chain: Chain::build(&self.processors, cx, &format!("{}.processors", cx.id.path))?,
        }))
    }
}

pub struct While {
    at_least_once: bool,
    max_loops: usize,
    check: Mapping,
    chain: Chain,
}

impl While {
    /// Whether to go round again; a failing check marks `batch` and stops.
    fn again(&self, batch: &mut Batch) -> bool {
        match self.check.check(batch, 0) {
            Ok(go) => go,
            Err(e) => {
                for m in batch.iter_mut() {
                    m.set_error(format!("while check: {e}"));
                }
                false
            }
        }
    }
}

#[async_trait]
impl Processor for While {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        let mut go = self.at_least_once || self.again(&mut batch);
        let mut batches = vec![batch];
        let mut loops = 0;
        while go {
            if self.max_loops > 0 && loops >= self.max_loops {
                break;
            }
            let mut next = Vec::with_capacity(batches.len());
            for b in batches {
                next.extend(self.chain.run(b).await);
            }
            batches = next;
            loops += 1;
            let Some(first) = batches.first_mut() else {
                break;
            };
            go = self.again(first);
            // A loop of processors that never wait would otherwise hold this worker.
            tokio::task::yield_now().await;
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};

    #[tokio::test]
    async fn loops_while_the_check_passes() {
        let p = build::<WhileConfig>(
            "check: 'this.n < 5'\nprocessors:\n  - mutation: 'root.n = this.n + 1'\n",
        );
        let out = p.process(batch(&[r#"{"n":0}"#, r#"{"n":100}"#])).await;
        // The check reads the first message; every message goes round.
        assert_eq!(all_texts(&out), vec![vec![r#"{"n":5}"#, r#"{"n":105}"#]]);
        let untouched = p.process(batch(&[r#"{"n":9}"#])).await;
        assert_eq!(all_texts(&untouched), vec![vec![r#"{"n":9}"#]]);
    }

    #[tokio::test]
    async fn at_least_once_and_max_loops() {
        let once = build::<WhileConfig>(
            "at_least_once: true\ncheck: 'false'\nprocessors:\n  - mapping: 'root = this + 1'\n",
        );
        assert_eq!(
            all_texts(&once.process(batch(&["1"])).await),
            vec![vec!["2"]]
        );
        let capped = build::<WhileConfig>(
            "max_loops: 3\ncheck: 'true'\nprocessors:\n  - mapping: 'root = this + 1'\n",
        );
        assert_eq!(
            all_texts(&capped.process(batch(&["0"])).await),
            vec![vec!["3"]]
        );
    }

    #[tokio::test]
    async fn ends_when_nothing_is_left_or_the_check_fails() {
        let p = build::<WhileConfig>(
            "check: 'true'\nprocessors:\n  - mapping: 'root = if this > 2 { deleted() } else { this + 1 }'\n",
        );
        assert!(p.process(batch(&["0"])).await.is_empty());
        let bad = build::<WhileConfig>("check: 'this'\nprocessors:\n  - noop: {}\n");
        let out = bad.process(batch(&["\"text\""])).await;
        assert!(out[0][0].error().unwrap().contains("bool"));
    }

    #[tokio::test]
    async fn in_a_posted_stream_a_loop_without_max_loops_ends_at_the_cap() {
        // The check reads a bound the message brings: an anonymous caller's `limit`.
        let yaml =
            "check: 'this.n < this.limit'\nprocessors:\n  - mutation: 'root.n = this.n + 1'\n";
        let cfg: WhileConfig = serde_yaml::from_str(yaml).unwrap();
        let policy = crate::egress::EgressPolicy::new(&Default::default()).unwrap();
        let posted = crate::processor::chain::test_support::cx()
            .with_egress(Some(std::sync::Arc::new(policy)));
        let p = cfg.build(&posted).unwrap();
        // A minute is far more than 100 000 rounds take, and far less than 10^9 do.
        let capped = p.process(batch(&[
            r#"{"n":0,"limit":1000000000}"#,
            r#"{"n":7,"limit":0}"#,
        ]));
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), capped)
            .await
            .expect("the loop ended at its cap");
        // The cap holds per batch, and every message of the batch went round with it.
        assert_eq!(
            all_texts(&out),
            vec![vec![
                r#"{"limit":1000000000,"n":100000}"#,
                r#"{"limit":0,"n":100007}"#
            ]]
        );
        // A bound below the cap still ends the loop where the check says.
        let out = p.process(batch(&[r#"{"n":0,"limit":3}"#])).await;
        assert_eq!(all_texts(&out), vec![vec![r#"{"limit":3,"n":3}"#]]);
        // The operator's own streams keep 0 as "no cap": the same config goes past it.
        let own = build::<WhileConfig>(
            "check: 'this.n < this.limit'\nprocessors:\n  - mutation: 'root.n = this.n + 1'\n",
        );
        let out = own.process(batch(&[r#"{"n":0,"limit":100005}"#])).await;
        assert_eq!(
            all_texts(&out),
            vec![vec![r#"{"limit":100005,"n":100005}"#]]
        );
    }

    #[test]
    fn a_check_is_required() {
        let e = serde_yaml::from_str::<WhileConfig>("at_least_once: true\nprocessors: []\n")
            .unwrap_err();
        assert!(e.to_string().contains("check"), "{e}");
    }
}
