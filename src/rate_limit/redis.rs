//! `redis`: a rate limit kept in Redis, so that every process using the same server and
//! `key` shares one exact limit. Connects on first use.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::OnceCell;

use super::{default_count, default_interval, rate, BuildRateLimit};
use crate::component::registry::Spec;
use crate::component::resources::{RateLimit, RateLimitError};
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind};
use crate::duration::Duration;
use crate::limit::{Rate, RedisLimiter};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisRateLimitConfig {
    /// `redis://host:port/db`.
    pub url: String,
    /// The Redis key of the limit: processes using the same key share it.
    pub key: String,
    /// Accesses allowed per `interval` (and the largest burst).
    #[serde(default = "default_count")]
    pub count: u64,
    /// The period `count` accesses are spread over.
    #[serde(default = "default_interval")]
    pub interval: Duration,
    /// The longest a connection attempt or a check may take.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

impl Spec for RedisRateLimitConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "redis",
        kind: Kind::RateLimit,
        summary: "A rate limit kept in Redis and shared by every process using the same key.",
        examples: &[Example {
            title: "One limit for every instance of a pipeline",
            yaml: "rate_limit_resources:\n  - label: shared\n    redis:\n      url: redis://127.0.0.1:6379\n      key: 'sluice:limits:enrich'\n      count: 500\n      interval: 1s\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - rate_limit:\n        resource: shared\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildRateLimit for RedisRateLimitConfig {
    fn build(&self, cx: &BuildContext) -> Result<Arc<dyn RateLimit>, BuildError> {
        redis::Client::open(self.url.as_str()).map_err(|e| cx.error(format!("`url`: {e}")))?;
        if self.key.is_empty() {
            return Err(cx.error("`key` must not be empty"));
        }
        cx.refuse_reserved("key", |r| r.check_key(&self.key))?;
        if self.timeout.is_zero() {
            return Err(cx.error("`timeout` must be above zero"));
        }
        Ok(Arc::new(RedisRateLimit {
            rate: rate(self.count, self.interval, cx)?,
            config: self.clone(),
            egress: cx.egress_addresses(std::slice::from_ref(&self.url), 6379)?,
            limiter: OnceCell::new(),
        }))
    }
}

pub struct RedisRateLimit {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    rate: Rate,
    config: RedisRateLimitConfig,
    limiter: OnceCell<RedisLimiter>,
}

#[async_trait]
impl RateLimit for RedisRateLimit {
    async fn access(&self) -> Result<Option<StdDuration>, RateLimitError> {
        if self.limiter.get().is_none() {
            self.egress.check().await?;
        }
        let limiter = self
            .limiter
            .get_or_try_init(|| RedisLimiter::connect(&self.config.url, "", self.config.timeout.0))
            .await
            .map_err(RateLimitError::failed)?;
        let d = limiter
            .check_rate(&self.config.key, self.rate)
            .await
            .map_err(RateLimitError::failed)?;
        Ok(d.retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(yaml: &str) -> Result<Arc<dyn RateLimit>, BuildError> {
        let config: RedisRateLimitConfig = serde_yaml::from_str(yaml).unwrap();
        config.build(&BuildContext::new(
            "test",
            Default::default(),
            Default::default(),
        ))
    }

    // Against the machine's Redis: two instances with one key share one limit, as two
    // processes would.
    #[tokio::test]
    async fn two_instances_share_one_limit() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let key = format!("sluice-test-rl-{}-{nanos}", std::process::id());
        let yaml =
            format!("{{url: 'redis://127.0.0.1:6379', key: '{key}', count: 4, interval: 1h}}");
        let a = limit(&yaml).unwrap();
        let b = limit(&yaml).unwrap();
        let mut allowed = 0;
        for l in [&a, &b, &a, &b, &a, &b] {
            allowed += usize::from(l.access().await.unwrap().is_none());
        }
        assert_eq!(allowed, 4);
        assert!(a.access().await.unwrap().is_some());
    }

    #[test]
    fn bad_settings_are_refused_at_build() {
        assert!(limit("{url: 'redis://127.0.0.1', key: ''}")
            .err()
            .unwrap()
            .message
            .contains("key"));
        assert!(limit("{url: 'nope', key: k}")
            .err()
            .unwrap()
            .message
            .contains("url"));
        assert!(limit("{url: 'redis://127.0.0.1', key: k, interval: 0s}")
            .err()
            .unwrap()
            .message
            .contains("interval"));
    }
}
