//! Processors: what happens to messages between input and output. One file per
//! processor; the list below registers them.

pub mod branch;
pub mod cache;
pub mod cached;
pub mod catch;
pub mod chain;
pub mod command;
pub mod dedupe;
pub mod grok;
pub mod http;
pub mod jmespath;
pub mod jq;
pub mod json_schema;
pub mod log;
pub mod mapping;
pub mod metric;
pub mod mutation;
pub mod noop;
pub mod parse_log;
pub mod rate_limit;
pub mod resource;
pub mod sleep;
pub mod subprocess;
pub mod switch;
pub mod try_;

use crate::component::{BuildContext, BuildError, Kind, Processor};

crate::registry!(Kind::Processor, ProcessorKind, ProcessorConfig, BuildProcessor -> Box<dyn Processor> {
    "bloblang" => Bloblang(mapping::BloblangConfig),
    "branch" => Branch(branch::BranchConfig),
    "cache" => Cache(cache::CacheProcessorConfig),
    "cached" => Cached(cached::CachedConfig),
    "catch" => Catch(catch::CatchConfig),
    "command" => Command(command::CommandConfig),
    "dedupe" => Dedupe(dedupe::DedupeConfig),
    "grok" => Grok(grok::GrokConfig),
    "http" => Http(http::HttpProcessorConfig),
    "jmespath" => Jmespath(jmespath::JmespathConfig),
    "jq" => Jq(jq::JqConfig),
    "json_schema" => JsonSchema(json_schema::JsonSchemaConfig),
    "log" => Log(log::LogConfig),
    "mapping" => Mapping(mapping::MappingConfig),
    "metric" => Metric(metric::MetricConfig),
    "mutation" => Mutation(mutation::MutationConfig),
    "noop" => Noop(noop::NoopConfig),
    "parse_log" => ParseLog(parse_log::ParseLogConfig),
    "rate_limit" => RateLimit(rate_limit::RateLimitProcessorConfig),
    "resource" => Resource(resource::ResourceProcessorConfig),
    "sleep" => Sleep(sleep::SleepConfig),
    "subprocess" => Subprocess(subprocess::SubprocessConfig),
    "switch" => Switch(switch::SwitchConfig),
    "try" => Try(try_::TryConfig),
});

/// Implemented by every processor config.
pub trait BuildProcessor {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError>;
}
