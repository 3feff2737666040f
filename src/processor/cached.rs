//! `cached`: runs its processors on a message only when the cache has no result for the
//! message's key; otherwise the cached result replaces the payload. Results of failed
//! runs are not cached, nor those `skip_on` says to skip.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::cache::render_ttl;
use super::chain::Chain;
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::resources::Cache;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::{Interp, MappingText};
use crate::mapping::Mapping;
use crate::message::{Batch, Message};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CachedConfig {
    /// The label of a `cache_resources` entry.
    pub cache: String,
    /// The key results are stored under, usually built from the message.
    pub key: Interp,
    /// How long a result is kept, instead of the cache's default.
    #[serde(default)]
    pub ttl: Option<Interp>,
    /// A mapping run on each result; when it gives `true` the result is not cached.
    #[serde(default)]
    pub skip_on: Option<MappingText>,
    /// The processors whose result is cached. They must give one message per message.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
}

impl Spec for CachedConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "cached",
        kind: Kind::Processor,
        summary: "Runs processors only for keys the cache has no result for, and caches their result.",
        examples: &[Example {
            title: "Call a slow service once per city an hour",
            yaml: "cache_resources:\n  - label: weather\n    memory: {default_ttl: 1h}\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - branch:\n        request_map: 'root.city = this.city'\n        processors:\n          - cached:\n              cache: weather\n              key: '${! this.city }'\n              skip_on: 'errored()'\n              processors:\n                - http:\n                    url: http://127.0.0.1:8080/weather\n        result_map: 'root.weather = this'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for CachedConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let cache = cx.resources.cache(&self.cache).map_err(|e| cx.error(e))?;
        if self.processors.is_empty() {
            return Err(cx.error("`processors` must list at least one processor"));
        }
        let chain = Chain::build(&self.processors, cx, &format!("{}.processors", cx.id.path))?;
        Ok(Box::new(Cached {
            cache,
            key: self.key.clone(),
            ttl: self.ttl.clone(),
            skip_on: self.skip_on.as_ref().map(|m| m.shared()),
            chain,
        }))
    }
}

pub struct Cached {
    cache: Arc<dyn Cache>,
    key: Interp,
    ttl: Option<Interp>,
    skip_on: Option<Arc<Mapping>>,
    chain: Chain,
}

impl Cached {
    /// Runs the processors on a message the cache had nothing for, and caches the result
    /// unless it failed or `skip_on` says so.
    async fn compute(&self, msg: Message, key: &str, ttl: Option<std::time::Duration>) -> Message {
        let original = msg.clone();
        let mut out = self.chain.run_flat(vec![msg]).await;
        if out.len() != 1 {
            let mut msg = original;
            msg.set_error(format!(
                "cached: the processors gave {} messages for one; they must give exactly one",
                out.len()
            ));
            return msg;
        }
        if out[0].error().is_some() {
            return out.swap_remove(0);
        }
        let skip = match &self.skip_on {
            None => Ok(false),
            Some(m) => m.check(&out, 0),
        };
        let mut result = out.swap_remove(0);
        match skip {
            Ok(true) => {}
            Ok(false) => {
                if let Err(e) = self.cache.set(key, result.payload().to_vec(), ttl).await {
                    result.set_error(format!("cached: cannot store the result: {e}"));
                }
            }
            Err(e) => result.set_error(format!("cached: `skip_on`: {e}")),
        }
        result
    }
}

#[async_trait]
impl Processor for Cached {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let fields: Vec<Result<(String, Option<std::time::Duration>), String>> = (0..batch.len())
            .map(|i| {
                let key = self
                    .key
                    .render(&batch, i)
                    .map_err(|e| format!("`key`: {e}"))?;
                let ttl = self
                    .ttl
                    .as_ref()
                    .map(|t| render_ttl(t, &batch, i))
                    .transpose()?;
                Ok((key, ttl))
            })
            .collect();
        let mut out = Vec::with_capacity(batch.len());
        for (mut msg, field) in batch.into_iter().zip(fields) {
            let (key, ttl) = match field {
                Ok(f) => f,
                Err(e) => {
                    msg.set_error(format!("cached: {e}"));
                    out.push(msg);
                    continue;
                }
            };
            match self.cache.get(&key).await {
                Ok(Some(hit)) => {
                    msg.set_payload(hit);
                    out.push(msg);
                }
                Ok(None) => out.push(self.compute(msg, &key, ttl).await),
                Err(e) => {
                    msg.set_error(format!("cached: cannot read the cache: {e}"));
                    out.push(msg);
                }
            }
        }
        vec![out]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::cache::tests::cx_with_cache;

    fn processor(cx: &BuildContext, yaml: &str) -> Result<Box<dyn Processor>, BuildError> {
        let config: CachedConfig = serde_yaml::from_str(yaml).unwrap();
        config.build(cx)
    }

    #[tokio::test]
    async fn processors_run_once_per_key() {
        let (cx, cache) = cx_with_cache("c");
        // A fresh UUID per run makes each run visible: a cached result keeps the first.
        let p = processor(
            &cx,
            "{cache: c, key: '${! this.k }', processors: [{mapping: 'root = this.k + \"-\" + uuid_v4()'}]}",
        )
        .unwrap();
        let out = p
            .process(vec![
                Message::new(r#"{"k":"a"}"#),
                Message::new(r#"{"k":"b"}"#),
                Message::new(r#"{"k":"a"}"#),
            ])
            .await;
        let texts: Vec<_> = out[0].iter().map(|m| m.payload().clone()).collect();
        assert_eq!(texts[0], texts[2], "the second `a` gets the cached result");
        assert_ne!(texts[0], texts[1]);
        assert_eq!(cache.get("a").await.unwrap().unwrap(), texts[0].to_vec());
    }

    #[tokio::test]
    async fn failed_and_skipped_results_are_not_cached() {
        let (cx, cache) = cx_with_cache("c");
        let p = processor(
            &cx,
            "{cache: c, key: '${! this.k }', skip_on: 'this.skip == true', processors: [{mutation: 'root.n = this.n.number()'}]}",
        )
        .unwrap();
        let out = p
            .process(vec![
                Message::new(r#"{"k":"bad","n":"x"}"#),
                Message::new(r#"{"k":"skip","n":"1","skip":true}"#),
                Message::new(r#"{"k":"ok","n":"2"}"#),
            ])
            .await;
        assert!(out[0][0].error().is_some());
        assert_eq!(cache.get("bad").await.unwrap(), None);
        assert_eq!(cache.get("skip").await.unwrap(), None);
        assert_eq!(
            cache.get("ok").await.unwrap().unwrap(),
            br#"{"k":"ok","n":2}"#
        );
    }

    #[tokio::test]
    async fn a_filtering_processor_is_an_error_not_a_lost_message() {
        let (cx, _) = cx_with_cache("c");
        let p = processor(
            &cx,
            "{cache: c, key: k, processors: [{mapping: 'root = deleted()'}]}",
        )
        .unwrap();
        let out = p.process(vec![Message::new("keep me")]).await;
        assert_eq!(&out[0][0].payload()[..], b"keep me");
        assert!(out[0][0].error().unwrap().contains("exactly one"));
    }

    #[test]
    fn an_unknown_cache_is_a_build_error() {
        let (cx, _) = cx_with_cache("c");
        let e = processor(&cx, "{cache: nope, key: k, processors: [{noop: {}}]}")
            .err()
            .unwrap();
        assert!(e.message.contains("no cache resource `nope`"), "{e}");
    }
}
