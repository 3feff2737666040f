//! Rate limits for `rate_limit_resources`: the `rate_limit` processor and the HTTP
//! components share them by label. One file per type; the list below registers them.
//!
//! Both types let `count` accesses through per `interval`, in bursts of up to `count`,
//! using the same algorithm as the gateway's limits (see [`crate::limit`]).

pub mod local;
pub mod redis;

use std::sync::Arc;

use crate::component::resources::RateLimit;
use crate::component::{BuildContext, BuildError, Kind};
use crate::limit::Rate;

crate::registry!(Kind::RateLimit, RateLimitKind, RateLimitConfig, BuildRateLimit -> Arc<dyn RateLimit> {
    "local" => Local(local::LocalRateLimitConfig),
    "redis" => Redis(redis::RedisRateLimitConfig),
});

/// Implemented by every rate limit config.
pub trait BuildRateLimit {
    fn build(&self, cx: &BuildContext) -> Result<Arc<dyn RateLimit>, BuildError>;
}

/// `count` per `interval`, checked.
fn rate(
    count: u64,
    interval: crate::duration::Duration,
    cx: &BuildContext,
) -> Result<Rate, BuildError> {
    Rate::new(count, interval.0)
        .map_err(|_| cx.error("`count` and `interval` must both be above zero"))
}

fn default_count() -> u64 {
    1000
}

fn default_interval() -> crate::duration::Duration {
    crate::duration::Duration::from_secs(1)
}
