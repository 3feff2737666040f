//! `group_by_value`: splits a batch into a batch per distinct `value`, an interpolated
//! string rendered for each message; batches come in the order their value first
//! appears and share the input's acknowledgement. A message whose value cannot be
//! rendered is marked and grouped with the other such messages.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupByValueConfig {
    /// The value to group by, e.g. `${! meta("kafka_key") }`.
    pub value: Interp,
}

impl Spec for GroupByValueConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "group_by_value",
        kind: Kind::Processor,
        summary: "Splits a batch into a batch per distinct interpolated value.",
        examples: &[Example {
            title: "A batch per customer",
            yaml: "input:\n  generate: {mapping: 'root.customer = random_int() % 3', interval: 10ms, batch_size: 10}\npipeline:\n  processors:\n    - group_by_value: {value: '${! this.customer }'}\n    - archive: {format: json_array}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for GroupByValueConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(GroupByValue(self.value.clone())))
    }
}

pub struct GroupByValue(Interp);

#[async_trait]
impl Processor for GroupByValue {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let keys: Vec<Result<String, String>> = (0..batch.len())
            .map(|i| self.0.render(&batch, i).map_err(|e| e.to_string()))
            .collect();
        // Few groups per batch: a linear search keeps first-seen order without a map.
        let mut groups: Vec<(Option<String>, Batch)> = Vec::new();
        for (mut msg, key) in batch.into_iter().zip(keys) {
            let key = match key {
                Ok(k) => Some(k),
                Err(e) => {
                    msg.set_error(format!("group_by_value: {e}"));
                    None
                }
            };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, group)) => group.push(msg),
                None => groups.push((key, vec![msg])),
            }
        }
        groups.into_iter().map(|(_, b)| b).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{all_texts, batch, build};

    #[tokio::test]
    async fn groups_in_first_seen_order() {
        let p = build::<GroupByValueConfig>("{value: '${! this.k }'}");
        let out = p
            .process(batch(&[
                r#"{"k":"x","n":1}"#,
                r#"{"k":"y","n":2}"#,
                r#"{"k":"x","n":3}"#,
                "oops",
                r#"{"k":"z","n":4}"#,
            ]))
            .await;
        assert_eq!(
            all_texts(&out),
            vec![
                vec![r#"{"k":"x","n":1}"#, r#"{"k":"x","n":3}"#],
                vec![r#"{"k":"y","n":2}"#],
                vec!["oops"],
                vec![r#"{"k":"z","n":4}"#],
            ]
        );
        assert!(out[2][0].error().is_some());
    }

    #[tokio::test]
    async fn metadata_values_group_too() {
        let p = build::<GroupByValueConfig>("{value: '${! meta(\"key\") }'}");
        let input = vec![
            crate::message::Message::new("1").with_meta("key", "a"),
            crate::message::Message::new("2").with_meta("key", "a"),
        ];
        assert_eq!(p.process(input).await.len(), 1);
    }
}
