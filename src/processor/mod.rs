//! Processors: what happens to messages between input and output. One file per
//! processor; the list below registers them.

pub mod branch;
pub mod cache;
pub mod cached;
pub mod catch;
pub mod chain;
pub mod dedupe;
pub mod http;
pub mod log;
pub mod mapping;
pub mod mutation;
pub mod noop;
pub mod rate_limit;
pub mod resource;
pub mod sleep;
pub mod switch;
pub mod try_;

use crate::component::{BuildContext, BuildError, Kind, Processor};

crate::registry!(Kind::Processor, ProcessorKind, ProcessorConfig, BuildProcessor -> Box<dyn Processor> {
    "bloblang" => Bloblang(mapping::BloblangConfig),
    "branch" => Branch(branch::BranchConfig),
    "cache" => Cache(cache::CacheProcessorConfig),
    "cached" => Cached(cached::CachedConfig),
    "catch" => Catch(catch::CatchConfig),
    "dedupe" => Dedupe(dedupe::DedupeConfig),
    "http" => Http(http::HttpProcessorConfig),
    "log" => Log(log::LogConfig),
    "mapping" => Mapping(mapping::MappingConfig),
    "mutation" => Mutation(mutation::MutationConfig),
    "noop" => Noop(noop::NoopConfig),
    "rate_limit" => RateLimit(rate_limit::RateLimitProcessorConfig),
    "resource" => Resource(resource::ResourceProcessorConfig),
    "sleep" => Sleep(sleep::SleepConfig),
    "switch" => Switch(switch::SwitchConfig),
    "try" => Try(try_::TryConfig),
});

/// Implemented by every processor config.
pub trait BuildProcessor {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError>;
}
