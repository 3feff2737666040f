//! `cache`: reads and writes a cache resource per message: `set`, `add`, `get` (the cached
//! value replaces the payload) or `delete`. A failed operation (a missing key on `get`, an
//! existing one on `add`, an unreachable cache) marks the message and leaves it unchanged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::resources::{Cache, CacheError};
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::message::Batch;

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    Set,
    Add,
    Get,
    Delete,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheProcessorConfig {
    /// The label of a `cache_resources` entry.
    pub resource: String,
    pub operator: Operator,
    /// The key, usually built from the message (`${! this.id }`).
    pub key: Interp,
    /// What `set` and `add` store; the payload when unset.
    #[serde(default)]
    pub value: Option<Interp>,
    /// How long `set` and `add` keep the entry (`60s`), instead of the cache's default.
    #[serde(default)]
    pub ttl: Option<Interp>,
}

impl Spec for CacheProcessorConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "cache",
        kind: Kind::Processor,
        summary: "Sets, adds, gets or deletes a key in a cache resource for each message.",
        examples: &[Example {
            title: "Enrich messages with a profile stored earlier",
            yaml: "cache_resources:\n  - label: profiles\n    memory: {default_ttl: 10m}\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - branch:\n        request_map: 'root = \"\"'\n        processors:\n          - cache:\n              resource: profiles\n              operator: get\n              key: '${! this.user_id }'\n        result_map: 'root.profile = this'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for CacheProcessorConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let cache = cx
            .resources
            .cache(&self.resource)
            .map_err(|e| cx.error(e))?;
        if matches!(self.operator, Operator::Get | Operator::Delete) {
            for (field, set) in [("value", self.value.is_some()), ("ttl", self.ttl.is_some())] {
                if set {
                    return Err(cx.error(format!(
                        "`{field}` has no meaning for the `{}` operator",
                        operator_name(self.operator)
                    )));
                }
            }
        }
        Ok(Box::new(CacheProcessor {
            cache,
            config: self.clone(),
        }))
    }
}

fn operator_name(op: Operator) -> &'static str {
    match op {
        Operator::Set => "set",
        Operator::Add => "add",
        Operator::Get => "get",
        Operator::Delete => "delete",
    }
}

pub struct CacheProcessor {
    cache: Arc<dyn Cache>,
    config: CacheProcessorConfig,
}

/// A per-message TTL field: a duration such as `30s`.
pub(crate) fn render_ttl(ttl: &Interp, batch: &Batch, i: usize) -> Result<Duration, String> {
    let text = ttl.render(batch, i).map_err(|e| format!("`ttl`: {e}"))?;
    crate::duration::parse(&text).map_err(|e| format!("`ttl`: {e}"))
}

impl CacheProcessor {
    /// What one message asks of the cache: its key, and for writes the value and TTL.
    fn request(
        &self,
        batch: &Batch,
        i: usize,
    ) -> Result<(String, Vec<u8>, Option<Duration>), String> {
        let c = &self.config;
        let key = c.key.render(batch, i).map_err(|e| format!("`key`: {e}"))?;
        let value = match (&c.value, c.operator) {
            (_, Operator::Get | Operator::Delete) => Vec::new(),
            (Some(v), _) => v
                .render_bytes(batch, i)
                .map_err(|e| format!("`value`: {e}"))?
                .to_vec(),
            (None, _) => batch[i].payload().to_vec(),
        };
        let ttl = c
            .ttl
            .as_ref()
            .map(|t| render_ttl(t, batch, i))
            .transpose()?;
        Ok((key, value, ttl))
    }
}

#[async_trait]
impl Processor for CacheProcessor {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let requests: Vec<_> = (0..batch.len()).map(|i| self.request(&batch, i)).collect();
        let mut out = batch;
        for (msg, request) in out.iter_mut().zip(requests) {
            let (key, value, ttl) = match request {
                Ok(r) => r,
                Err(e) => {
                    msg.set_error(format!("cache: {e}"));
                    continue;
                }
            };
            let result = match self.config.operator {
                Operator::Set => self.cache.set(&key, value, ttl).await,
                Operator::Add => self.cache.add(&key, value, ttl).await,
                Operator::Delete => self.cache.delete(&key).await,
                Operator::Get => match self.cache.get(&key).await {
                    Ok(Some(v)) => {
                        msg.set_payload(v);
                        Ok(())
                    }
                    Ok(None) => Err(CacheError::Failed(format!("key `{key}` not found"))),
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = result {
                msg.set_error(format!(
                    "cache {}: {e}",
                    operator_name(self.config.operator)
                ));
            }
        }
        vec![out]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::{memory::MemoryCacheConfig, BuildCache};
    use crate::component::resources::Resources;
    use crate::message::Message;

    pub(crate) fn cx_with_cache(label: &str) -> (BuildContext, Arc<dyn Cache>) {
        let cx = BuildContext::new("test", Default::default(), Default::default());
        let cache = MemoryCacheConfig::default().build(&cx).unwrap();
        let mut r = Resources::default();
        r.add_cache(label, cache.clone());
        (cx.with_resources(Arc::new(r)), cache)
    }

    fn processor(cx: &BuildContext, yaml: &str) -> Result<Box<dyn Processor>, BuildError> {
        let config: CacheProcessorConfig = serde_yaml::from_str(yaml).unwrap();
        config.build(cx)
    }

    #[tokio::test]
    async fn set_then_get_by_a_key_from_the_message() {
        let (cx, cache) = cx_with_cache("c");
        let set = processor(&cx, "{resource: c, operator: set, key: '${! this.id }'}").unwrap();
        let out = set.process(vec![Message::new(r#"{"id":"a","v":1}"#)]).await;
        assert_eq!(out[0][0].error(), None);
        assert_eq!(
            cache.get("a").await.unwrap().unwrap(),
            br#"{"id":"a","v":1}"#
        );

        let get = processor(&cx, "{resource: c, operator: get, key: '${! this.id }'}").unwrap();
        let out = get
            .process(vec![
                Message::new(r#"{"id":"a"}"#),
                Message::new(r#"{"id":"zz"}"#),
            ])
            .await;
        assert_eq!(&out[0][0].payload()[..], br#"{"id":"a","v":1}"#);
        assert_eq!(
            &out[0][1].payload()[..],
            br#"{"id":"zz"}"#,
            "a miss keeps the payload"
        );
        assert!(out[0][1].error().unwrap().contains("not found"));
    }

    #[tokio::test]
    async fn add_refuses_an_existing_key_and_value_and_ttl_apply() {
        let (cx, cache) = cx_with_cache("c");
        let add = processor(
            &cx,
            "{resource: c, operator: add, key: k, value: '${! this.n }', ttl: '${! \"50ms\" }'}",
        )
        .unwrap();
        let out = add
            .process(vec![Message::new(r#"{"n":1}"#), Message::new(r#"{"n":2}"#)])
            .await;
        assert_eq!(out[0][0].error(), None);
        assert!(out[0][1].error().unwrap().contains("already exists"));
        assert_eq!(cache.get("k").await.unwrap().unwrap(), b"1");
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(cache.get("k").await.unwrap(), None, "the ttl field applies");

        let del = processor(&cx, "{resource: c, operator: delete, key: k}").unwrap();
        cache.set("k", b"x".to_vec(), None).await.unwrap();
        del.process(vec![Message::new("")]).await;
        assert_eq!(cache.get("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_bad_ttl_marks_the_message() {
        let (cx, _) = cx_with_cache("c");
        let set = processor(&cx, "{resource: c, operator: set, key: k, ttl: soon}").unwrap();
        let out = set.process(vec![Message::new("x")]).await;
        assert!(
            out[0][0].error().unwrap().contains("ttl"),
            "{:?}",
            out[0][0].error()
        );
    }

    #[test]
    fn config_mistakes_are_build_errors() {
        let (cx, _) = cx_with_cache("c");
        let e = processor(&cx, "{resource: other, operator: get, key: k}")
            .err()
            .unwrap();
        assert!(e.message.contains("no cache resource `other`"), "{e}");
        let e = processor(&cx, "{resource: c, operator: get, key: k, value: v}")
            .err()
            .unwrap();
        assert!(e.message.contains("`value`"), "{e}");
    }
}
