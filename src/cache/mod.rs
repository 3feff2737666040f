//! Caches for `cache_resources`: key/value stores that the `cache`, `cached` and `dedupe`
//! processors share by label. One file per cache type; the list below registers them.

pub mod memory;
pub mod redis;

use std::sync::Arc;

use crate::component::resources::Cache;
use crate::component::{BuildContext, BuildError, Kind};

crate::registry!(Kind::Cache, CacheKind, CacheConfig, BuildCache -> Arc<dyn Cache> {
    "memory" => Memory(memory::MemoryCacheConfig),
    "redis" => Redis(redis::RedisCacheConfig),
});

/// Implemented by every cache config.
pub trait BuildCache {
    fn build(&self, cx: &BuildContext) -> Result<Arc<dyn Cache>, BuildError>;
}
