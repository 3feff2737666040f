//! `dedupe`: drops messages whose key was seen before, remembering keys in a cache
//! resource (so the window is the cache's TTL, and a shared cache deduplicates across
//! streams and processes). Duplicates within one batch are dropped too.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tracing::warn;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::resources::{Cache, CacheError};
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DedupeConfig {
    /// The label of a `cache_resources` entry that remembers the keys.
    pub cache: String,
    /// What makes two messages the same, e.g. `${! this.id }`.
    pub key: Interp,
    /// Drop a message when the cache cannot be asked (the safe choice against duplicates);
    /// `false` lets it through instead (the safe choice against loss).
    #[serde(default = "yes")]
    pub drop_on_err: bool,
}

fn yes() -> bool {
    true
}

impl Spec for DedupeConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "dedupe",
        kind: Kind::Processor,
        summary: "Drops messages whose key is already in a cache.",
        examples: &[Example {
            title: "Drop orders seen in the last ten minutes",
            yaml: "cache_resources:\n  - label: recent\n    memory: {default_ttl: 10m}\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - dedupe:\n        cache: recent\n        key: '${! this.order_id }'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for DedupeConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let cache = cx.resources.cache(&self.cache).map_err(|e| cx.error(e))?;
        Ok(Box::new(Dedupe {
            cache,
            key: self.key.clone(),
            drop_on_err: self.drop_on_err,
            component: cx.id.component.clone(),
        }))
    }
}

pub struct Dedupe {
    cache: Arc<dyn Cache>,
    key: Interp,
    drop_on_err: bool,
    component: String,
}

#[async_trait]
impl Processor for Dedupe {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let keys: Vec<_> = (0..batch.len())
            .map(|i| self.key.render(&batch, i))
            .collect();
        let mut out = Vec::with_capacity(batch.len());
        for (msg, key) in batch.into_iter().zip(keys) {
            let keep = match key {
                Ok(key) => match self.cache.add(&key, vec![b't'], None).await {
                    Ok(()) => true,
                    Err(CacheError::KeyExists) => false,
                    Err(e) => {
                        warn!(component = %self.component, error = %e, "dedupe: cannot reach the cache");
                        !self.drop_on_err
                    }
                },
                Err(e) => {
                    warn!(component = %self.component, error = %e, "dedupe: cannot build the key");
                    !self.drop_on_err
                }
            };
            if keep {
                out.push(msg);
            }
        }
        super::nonempty(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::processor::cache::tests::cx_with_cache;

    fn processor(cx: &BuildContext, yaml: &str) -> Box<dyn Processor> {
        let config: DedupeConfig = serde_yaml::from_str(yaml).unwrap();
        config.build(cx).unwrap()
    }

    fn payloads(out: &[Batch]) -> Vec<String> {
        out.iter()
            .flatten()
            .map(|m| String::from_utf8_lossy(m.payload()).into_owned())
            .collect()
    }

    #[tokio::test]
    async fn repeats_are_dropped_within_and_across_batches() {
        let (cx, _) = cx_with_cache("seen");
        let p = processor(&cx, "{cache: seen, key: '${! this.id }'}");
        let out = p
            .process(vec![
                Message::new(r#"{"id":1,"v":"a"}"#),
                Message::new(r#"{"id":2}"#),
                Message::new(r#"{"id":1,"v":"b"}"#),
            ])
            .await;
        assert_eq!(payloads(&out), [r#"{"id":1,"v":"a"}"#, r#"{"id":2}"#]);
        let out = p.process(vec![Message::new(r#"{"id":2}"#)]).await;
        assert!(out.is_empty(), "a batch of only repeats is filtered");
        let out = p.process(vec![Message::new(r#"{"id":3}"#)]).await;
        assert_eq!(payloads(&out), [r#"{"id":3}"#]);
    }

    #[tokio::test]
    async fn a_key_that_cannot_be_built_follows_drop_on_err() {
        let (cx, _) = cx_with_cache("seen");
        let key = "'${! this.id.number() }'";
        let dropping = processor(&cx, &format!("{{cache: seen, key: {key}}}"));
        assert!(dropping
            .process(vec![Message::new(r#"{"id":"x"}"#)])
            .await
            .is_empty());
        let keeping = processor(
            &cx,
            &format!("{{cache: seen, key: {key}, drop_on_err: false}}"),
        );
        assert_eq!(
            keeping
                .process(vec![Message::new(r#"{"id":"x"}"#)])
                .await
                .len(),
            1
        );
    }
}
