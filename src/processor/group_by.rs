//! `group_by`: splits a batch into a batch per group: a message joins the first group
//! whose `check` passes, and each group's `processors` run on its batch. Messages no
//! group takes form one more batch, last. The batches share the input's
//! acknowledgement. A check that fails marks the message, which goes with the rest.

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

/// The groups, tried in order.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct GroupByConfig(pub Vec<GroupConfig>);

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// A mapping giving a bool: whether a message belongs to this group.
    pub check: MappingText,
    /// The processors for this group's batch.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
}

impl Spec for GroupByConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "group_by",
        kind: Kind::Processor,
        summary: "Splits a batch into a batch per group chosen by checks.",
        examples: &[Example {
            title: "Archive errors apart from the rest",
            yaml: "input:\n  generate: {mapping: 'root.level = if random_int() % 2 == 0 { \"error\" } else { \"info\" }', interval: 10ms, batch_size: 10}\npipeline:\n  processors:\n    - group_by:\n        - check: 'this.level == \"error\"'\n          processors:\n            - archive: {format: lines}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for GroupByConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.0.is_empty() {
            return Err(cx.error("`group_by` needs at least one group"));
        }
        let mut checks = Vec::with_capacity(self.0.len());
        let mut chains = Vec::with_capacity(self.0.len());
        for (i, g) in self.0.iter().enumerate() {
            checks.push(g.check.mapping().clone());
            chains.push(Chain::build(
                &g.processors,
                cx,
                &format!("{}[{i}].processors", cx.id.path),
            )?);
        }
        Ok(Box::new(GroupBy { checks, chains }))
    }
}

pub struct GroupBy {
    checks: Vec<Mapping>,
    chains: Vec<Chain>,
}

impl GroupBy {
    /// The group of message `index`, `None` for the rest.
    fn group_of(&self, batch: &Batch, index: usize) -> Result<Option<usize>, String> {
        for (g, check) in self.checks.iter().enumerate() {
            if check.check(batch, index).map_err(|e| e.to_string())? {
                return Ok(Some(g));
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl Processor for GroupBy {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let picks: Vec<_> = (0..batch.len()).map(|i| self.group_of(&batch, i)).collect();
        let mut groups: Vec<Batch> = self.chains.iter().map(|_| Vec::new()).collect();
        let mut rest: Batch = Vec::new();
        for (mut msg, pick) in batch.into_iter().zip(picks) {
            match pick {
                Ok(Some(g)) => groups[g].push(msg),
                Ok(None) => rest.push(msg),
                Err(e) => {
                    msg.set_error(format!("group_by check: {e}"));
                    rest.push(msg);
                }
            }
        }
        let mut out = Vec::new();
        for (chain, group) in self.chains.iter().zip(groups) {
            if !group.is_empty() {
                out.extend(chain.run(group).await);
            }
        }
        if !rest.is_empty() {
            out.push(rest);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build, build_error};

    #[tokio::test]
    async fn a_batch_per_group_then_the_rest() {
        let p = build::<GroupByConfig>(
            "- check: 'this.t == \"a\"'\n  processors:\n    - archive: {format: lines}\n- check: 'this.t == \"b\"'\n",
        );
        let out = p
            .process(batch(&[
                r#"{"t":"b","n":1}"#,
                r#"{"t":"a","n":2}"#,
                r#"{"t":"c","n":3}"#,
                r#"{"t":"a","n":4}"#,
                "not json",
            ]))
            .await;
        assert_eq!(
            all_texts(&out),
            vec![
                vec!["{\"t\":\"a\",\"n\":2}\n{\"t\":\"a\",\"n\":4}"],
                vec![r#"{"t":"b","n":1}"#],
                vec![r#"{"t":"c","n":3}"#, "not json"],
            ]
        );
        assert!(out[2][1].error().is_some());
        assert!(out[2][0].error().is_none());
    }

    #[tokio::test]
    async fn empty_groups_make_no_batch() {
        let p = build::<GroupByConfig>("- check: 'true'\n");
        let out = p.process(batch(&["1", "2"])).await;
        assert_eq!(all_texts(&out), vec![vec!["1", "2"]]);
    }

    #[test]
    fn no_groups_is_refused() {
        let e = build_error::<GroupByConfig>("[]");
        assert!(e.contains("at least one group"), "{e}");
    }
}
