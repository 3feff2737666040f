//! `redis`: a cache in Redis, shared by every process that uses the same server and prefix.
//! Connects on first use and reconnects after a failure; expiry is Redis's own.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::OnceCell;

use super::BuildCache;
use crate::component::registry::Spec;
use crate::component::resources::{Cache, CacheError};
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind};
use crate::connect::TlsConfig;
use crate::duration::Duration;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisCacheConfig {
    /// `redis://host:port/db` or `rediss://` for TLS.
    pub url: String,
    /// Put before every key, so that several caches can share one database.
    #[serde(default)]
    pub prefix: String,
    /// How long an entry lives when the writer gives no TTL of its own; unset, entries stay
    /// until deleted.
    #[serde(default)]
    pub default_ttl: Option<Duration>,
    /// The longest a connection attempt or a command may take.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    #[serde(default)]
    pub tls: TlsConfig,
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

impl Spec for RedisCacheConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "redis",
        kind: Kind::Cache,
        summary: "A cache in Redis, shared by every process that uses the same server and prefix.",
        examples: &[Example {
            title: "Remember the last reading of each sensor",
            yaml: "cache_resources:\n  - label: last_reading\n    redis:\n      url: redis://127.0.0.1:6379\n      prefix: 'readings:'\n      default_ttl: 24h\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - cache:\n        resource: last_reading\n        operator: set\n        key: '${! this.sensor }'\n        value: '${! content() }'\noutput:\n  drop: {}\n",
        }],
    };
}

impl BuildCache for RedisCacheConfig {
    fn build(&self, cx: &BuildContext) -> Result<Arc<dyn Cache>, BuildError> {
        crate::connect::redis::validate(&self.url, &self.tls).map_err(|e| cx.error(e))?;
        if self.timeout.is_zero() {
            return Err(cx.error("`timeout` must be above zero"));
        }
        if self
            .default_ttl
            .is_some_and(|t| t.0 < StdDuration::from_millis(1))
        {
            return Err(cx.error("`default_ttl` must be at least 1ms"));
        }
        cx.refuse_reserved("prefix", |r| r.check_key(&self.prefix))?;
        Ok(Arc::new(RedisCache {
            config: self.clone(),
            egress: cx.egress_addresses(std::slice::from_ref(&self.url), 6379)?,
            reserved: cx.reach.policy.as_ref().map(|p| p.reserved().clone()),
            conn: OnceCell::new(),
        }))
    }
}

pub struct RedisCache {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: RedisCacheConfig,
    /// For a posted stream, the names its keys are checked against: a key made from a
    /// message could otherwise overwrite or delete the cluster bus's.
    reserved: Option<crate::reserved::ReservedNames>,
    conn: OnceCell<ConnectionManager>,
}

impl RedisCache {
    /// The shared connection, opened on first use; a failed attempt is tried again next time.
    async fn conn(&self) -> Result<ConnectionManager, CacheError> {
        let timeout = self.config.timeout.0;
        self.conn
            .get_or_try_init(|| async {
                self.egress
                    .check()
                    .await
                    .map_err(|e| CacheError::Failed(e.to_string()))?;
                let client = crate::connect::redis::client(&self.config.url, &self.config.tls)
                    .map_err(|e| CacheError::Failed(e.to_string()))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                tokio::time::timeout(timeout, ConnectionManager::new_with_config(client, config))
                    .await
                    .map_err(|_| {
                        CacheError::Failed(format!("cannot reach Redis within {timeout:?}"))
                    })?
                    .map_err(failed)
            })
            .await
            .cloned()
    }

    fn key(&self, key: &str) -> Result<String, CacheError> {
        let key = format!("{}{key}", self.config.prefix);
        if let Some(reserved) = &self.reserved {
            reserved
                .check_key(&key)
                .map_err(|e| CacheError::Failed(e.to_string()))?;
        }
        Ok(key)
    }

    fn ttl_ms(&self, ttl: Option<StdDuration>) -> Option<u64> {
        ttl.or(self.config.default_ttl.map(|d| d.0))
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1))
    }

    /// `SET key value [NX] [PX ttl]`; true when Redis stored it.
    async fn store(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<StdDuration>,
        only_new: bool,
    ) -> Result<bool, CacheError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(key)?).arg(value);
        if only_new {
            cmd.arg("NX");
        }
        if let Some(ms) = self.ttl_ms(ttl) {
            cmd.arg("PX").arg(ms);
        }
        let reply: Option<String> = cmd
            .query_async(&mut self.conn().await?)
            .await
            .map_err(failed)?;
        Ok(reply.is_some())
    }
}

fn failed(e: redis::RedisError) -> CacheError {
    CacheError::Failed(format!("redis: {e}"))
}

#[async_trait]
impl Cache for RedisCache {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        let key = self.key(key)?;
        let mut conn = self.conn().await?;
        conn.get(key).await.map_err(failed)
    }

    async fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<StdDuration>,
    ) -> Result<(), CacheError> {
        self.store(key, value, ttl, false).await.map(drop)
    }

    async fn add(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<StdDuration>,
    ) -> Result<(), CacheError> {
        if self.store(key, value, ttl, true).await? {
            Ok(())
        } else {
            Err(CacheError::KeyExists)
        }
    }

    async fn delete(&self, key: &str) -> Result<(), CacheError> {
        let key = self.key(key)?;
        let mut conn = self.conn().await?;
        conn.del::<_, ()>(key).await.map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> RedisCacheConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn cx() -> BuildContext {
        BuildContext::new("test", Default::default(), Default::default())
    }

    #[test]
    fn bad_settings_are_refused_at_build() {
        let e = config("url: 'http://x'").build(&cx()).err().unwrap();
        assert!(e.message.contains("url"), "{e}");
        let e = config("{url: 'redis://127.0.0.1', timeout: 0s}")
            .build(&cx())
            .err()
            .unwrap();
        assert!(e.message.contains("timeout"), "{e}");
    }

    // Against the machine's Redis: the same operations as the memory cache, shared by two
    // cache instances as two processes would share them.
    #[tokio::test]
    async fn two_instances_share_entries_in_redis() {
        let prefix = format!("sluice-test-cache-{}:", std::process::id());
        let yaml =
            format!("{{url: 'redis://127.0.0.1:6379', prefix: '{prefix}', default_ttl: 1s}}");
        let a = config(&yaml).build(&cx()).unwrap();
        let b = config(&yaml).build(&cx()).unwrap();
        a.delete("k").await.unwrap();
        assert_eq!(b.get("k").await.unwrap(), None);
        a.add("k", b"v1".to_vec(), None).await.unwrap();
        assert_eq!(
            b.add("k", b"v2".to_vec(), None).await,
            Err(CacheError::KeyExists)
        );
        assert_eq!(b.get("k").await.unwrap(), Some(b"v1".to_vec()));
        b.set("k", b"v3".to_vec(), Some(StdDuration::from_millis(100)))
            .await
            .unwrap();
        assert_eq!(a.get("k").await.unwrap(), Some(b"v3".to_vec()));
        tokio::time::sleep(StdDuration::from_millis(250)).await;
        assert_eq!(
            a.get("k").await.unwrap(),
            None,
            "the TTL given on set applies"
        );
        b.set("k", b"v4".to_vec(), None).await.unwrap();
        a.delete("k").await.unwrap();
        assert_eq!(b.get("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_unreachable_server_is_an_error_not_a_hang() {
        let c = config("{url: 'redis://127.0.0.1:1', timeout: 500ms}")
            .build(&cx())
            .unwrap();
        assert!(matches!(c.get("k").await, Err(CacheError::Failed(_))));
    }
}
