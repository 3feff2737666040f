//! `local`: a rate limit kept in this process's memory.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{default_count, default_interval, rate, BuildRateLimit};
use crate::component::registry::Spec;
use crate::component::resources::{RateLimit, RateLimitError};
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind};
use crate::duration::Duration;
use crate::limit::{LocalLimiter, Rate};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalRateLimitConfig {
    /// Accesses allowed per `interval` (and the largest burst).
    #[serde(default = "default_count")]
    pub count: u64,
    /// The period `count` accesses are spread over.
    #[serde(default = "default_interval")]
    pub interval: Duration,
}

impl Spec for LocalRateLimitConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "local",
        kind: Kind::RateLimit,
        summary: "A rate limit kept in this process's memory.",
        examples: &[Example {
            title: "At most 100 calls a second to an API",
            yaml: "rate_limit_resources:\n  - label: api_calls\n    local:\n      count: 100\n      interval: 1s\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - rate_limit:\n        resource: api_calls\n    - http:\n        url: http://127.0.0.1:8080/enrich\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildRateLimit for LocalRateLimitConfig {
    fn build(&self, cx: &BuildContext) -> Result<Arc<dyn RateLimit>, BuildError> {
        Ok(Arc::new(LocalRateLimit {
            rate: rate(self.count, self.interval, cx)?,
            state: LocalLimiter::new(),
        }))
    }
}

pub struct LocalRateLimit {
    rate: Rate,
    state: LocalLimiter,
}

#[async_trait]
impl RateLimit for LocalRateLimit {
    async fn access(&self) -> Result<Option<StdDuration>, RateLimitError> {
        let d = self
            .state
            .check_rate("", self.rate)
            .map_err(RateLimitError::failed)?;
        Ok(d.retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(yaml: &str) -> Result<Arc<dyn RateLimit>, BuildError> {
        let config: LocalRateLimitConfig = serde_yaml::from_str(yaml).unwrap();
        config.build(&BuildContext::new(
            "test",
            Default::default(),
            Default::default(),
        ))
    }

    #[tokio::test]
    async fn count_per_interval_then_a_wait() {
        let l = limit("{count: 3, interval: 1h}").unwrap();
        for _ in 0..3 {
            assert_eq!(l.access().await.unwrap(), None);
        }
        let wait = l.access().await.unwrap().expect("the fourth access waits");
        // One access refills every interval / count: 20 minutes.
        assert!(
            wait > StdDuration::from_secs(19 * 60) && wait <= StdDuration::from_secs(20 * 60),
            "{wait:?}"
        );
    }

    #[test]
    fn zero_count_is_refused() {
        let e = limit("{count: 0}").err().unwrap();
        assert!(e.message.contains("count"), "{e}");
    }
}
