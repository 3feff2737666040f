//! `memory`: a cache in this process's memory, with a time to live per entry and an
//! optional cap on the number of entries (the least recently used go first).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use async_trait::async_trait;
use moka::sync::Cache as Moka;
use moka::Expiry;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildCache;
use crate::component::registry::Spec;
use crate::component::resources::{Cache, CacheError};
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind};
use crate::duration::Duration;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryCacheConfig {
    /// How long an entry lives when the writer gives no TTL of its own; `0s` keeps entries
    /// until they are deleted or pushed out by `max_entries`.
    pub default_ttl: Duration,
    /// Accepted for compatibility: expired entries are removed as the cache is used.
    pub compaction_interval: Duration,
    /// Entries the cache starts with (they get `default_ttl`).
    pub init_values: BTreeMap<String, String>,
    /// Accepted for compatibility: the cache is sharded internally.
    pub shards: u64,
    /// The most entries kept; past it the least recently used are evicted. `0` for the
    /// largest cap allowed ([`MAX_ENTRIES`]).
    pub max_entries: u64,
}

impl Default for MemoryCacheConfig {
    fn default() -> Self {
        MemoryCacheConfig {
            default_ttl: Duration::from_secs(300),
            compaction_interval: Duration::from_secs(60),
            init_values: BTreeMap::new(),
            shards: 1,
            max_entries: 0,
        }
    }
}

impl Spec for MemoryCacheConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "memory",
        kind: Kind::Cache,
        summary: "A cache in this process's memory, with a TTL per entry and an optional size cap.",
        examples: &[Example {
            title: "Drop repeated ids seen in the last hour",
            yaml: "cache_resources:\n  - label: seen\n    memory:\n      default_ttl: 1h\n      max_entries: 100000\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - dedupe:\n        cache: seen\n        key: '${! this.id }'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildCache for MemoryCacheConfig {
    fn build(&self, cx: &BuildContext) -> Result<Arc<dyn Cache>, BuildError> {
        Ok(Arc::new(self.cache().map_err(|e| cx.error(e))?))
    }
}

/// The most entries a memory cache keeps, whatever its config says (`0` asks for it).
pub const MAX_ENTRIES: u64 = 1_000_000;

impl MemoryCacheConfig {
    fn cache(&self) -> Result<MemoryCache, String> {
        if self.shards == 0 {
            return Err("`shards` must be at least 1".into());
        }
        let default_ttl = (!self.default_ttl.is_zero()).then_some(self.default_ttl.0);
        let mut builder = Moka::builder().expire_after(Expiring { default_ttl });
        // Never unbounded: a cache fed by what clients send would grow with them.
        let cap = match self.max_entries {
            0 => MAX_ENTRIES,
            n => n.min(MAX_ENTRIES),
        };
        builder = builder.max_capacity(cap);
        let cache = MemoryCache {
            entries: builder.build(),
            default_ttl,
        };
        for (k, v) in &self.init_values {
            cache
                .entries
                .insert(k.clone(), cache.entry(v.as_bytes().to_vec(), None));
        }
        Ok(cache)
    }
}

#[derive(Clone)]
struct Entry {
    value: Arc<[u8]>,
    ttl: Option<StdDuration>,
}

/// Each entry expires after its own TTL, counted from its last write.
struct Expiring {
    default_ttl: Option<StdDuration>,
}

impl Expiry<String, Entry> for Expiring {
    fn expire_after_create(&self, _: &String, e: &Entry, _: Instant) -> Option<StdDuration> {
        e.ttl.or(self.default_ttl)
    }

    fn expire_after_update(
        &self,
        _: &String,
        e: &Entry,
        _: Instant,
        _: Option<StdDuration>,
    ) -> Option<StdDuration> {
        e.ttl.or(self.default_ttl)
    }
}

pub struct MemoryCache {
    entries: Moka<String, Entry>,
    default_ttl: Option<StdDuration>,
}

impl MemoryCache {
    fn entry(&self, value: Vec<u8>, ttl: Option<StdDuration>) -> Entry {
        Entry {
            value: value.into(),
            ttl: ttl.or(self.default_ttl),
        }
    }
}

#[async_trait]
impl Cache for MemoryCache {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(self.entries.get(key).map(|e| e.value.to_vec()))
    }

    async fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<StdDuration>,
    ) -> Result<(), CacheError> {
        self.entries.insert(key.to_owned(), self.entry(value, ttl));
        Ok(())
    }

    async fn add(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<StdDuration>,
    ) -> Result<(), CacheError> {
        // One atomic step: two writers adding the same key cannot both succeed.
        let entry = self
            .entries
            .entry_by_ref(key)
            .or_insert_with(|| self.entry(value, ttl));
        if entry.is_fresh() {
            Ok(())
        } else {
            Err(CacheError::KeyExists)
        }
    }

    async fn delete(&self, key: &str) -> Result<(), CacheError> {
        self.entries.invalidate(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(yaml: &str) -> Arc<dyn Cache> {
        let config: MemoryCacheConfig = serde_yaml::from_str(yaml).unwrap();
        let cx = BuildContext::new("test", Default::default(), Default::default());
        config.build(&cx).unwrap()
    }

    #[tokio::test]
    async fn set_get_add_delete() {
        let c = cache("init_values: {a: one}");
        assert_eq!(c.get("a").await.unwrap(), Some(b"one".to_vec()));
        assert_eq!(c.get("b").await.unwrap(), None);
        c.set("b", b"two".to_vec(), None).await.unwrap();
        assert_eq!(c.get("b").await.unwrap(), Some(b"two".to_vec()));
        assert_eq!(
            c.add("b", b"x".to_vec(), None).await,
            Err(CacheError::KeyExists)
        );
        assert_eq!(c.get("b").await.unwrap(), Some(b"two".to_vec()));
        c.add("c", b"three".to_vec(), None).await.unwrap();
        c.delete("b").await.unwrap();
        c.delete("never").await.unwrap();
        assert_eq!(c.get("b").await.unwrap(), None);
        c.add("b", b"again".to_vec(), None).await.unwrap();
        assert_eq!(c.get("b").await.unwrap(), Some(b"again".to_vec()));
    }

    #[tokio::test]
    async fn entries_expire_after_their_ttl() {
        let c = cache("default_ttl: 50ms");
        c.set("short", b"1".to_vec(), None).await.unwrap();
        c.set("long", b"2".to_vec(), Some(StdDuration::from_secs(60)))
            .await
            .unwrap();
        std::thread::sleep(StdDuration::from_millis(120));
        assert_eq!(c.get("short").await.unwrap(), None);
        assert_eq!(c.get("long").await.unwrap(), Some(b"2".to_vec()));
        // An expired key can be added again.
        c.add("short", b"3".to_vec(), None).await.unwrap();
    }

    #[tokio::test]
    async fn the_size_cap_holds() {
        let config: MemoryCacheConfig = serde_yaml::from_str("max_entries: 10").unwrap();
        let c = config.cache().unwrap();
        for i in 0..1000 {
            c.set(&format!("k{i}"), vec![1], None).await.unwrap();
        }
        c.entries.run_pending_tasks();
        assert!(c.entries.entry_count() <= 10, "{}", c.entries.entry_count());
        assert!(c.entries.entry_count() > 0);
    }

    #[test]
    fn zero_shards_is_refused() {
        let config: MemoryCacheConfig = serde_yaml::from_str("shards: 0").unwrap();
        assert!(config.cache().err().unwrap().contains("shards"));
    }
}
