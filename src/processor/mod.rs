//! Processors: what happens to messages between input and output. One file per
//! processor; the list below registers them.

pub mod archive;
pub mod bounds_check;
pub mod branch;
pub mod cache;
pub mod cached;
pub mod catch;
pub mod chain;
pub mod command;
pub mod compress;
pub mod decompress;
pub mod dedupe;
pub mod for_each;
pub mod grok;
pub mod group_by;
pub mod group_by_value;
pub mod http;
pub mod insert_part;
pub mod jmespath;
pub mod jq;
pub mod json_schema;
pub mod log;
pub mod mapping;
pub mod metric;
pub mod mutation;
pub mod noop;
pub mod parallel;
pub mod parse_log;
pub mod processors;
pub mod rate_limit;
pub mod resource;
pub mod retry;
pub mod select_parts;
pub mod sleep;
pub mod split;
pub mod subprocess;
pub mod switch;
pub mod sync_response;
pub mod try_;
pub mod unarchive;
pub mod while_;
pub mod workflow;

use crate::component::{BuildContext, BuildError, Kind, Processor};

crate::registry!(Kind::Processor, ProcessorKind, ProcessorConfig, BuildProcessor -> Box<dyn Processor> {
    "archive" => Archive(archive::ArchiveConfig),
    "bloblang" => Bloblang(mapping::BloblangConfig),
    "bounds_check" => BoundsCheck(bounds_check::BoundsCheckConfig),
    "branch" => Branch(branch::BranchConfig),
    "cache" => Cache(cache::CacheProcessorConfig),
    "cached" => Cached(cached::CachedConfig),
    "catch" => Catch(catch::CatchConfig),
    "command" => Command(command::CommandConfig),
    "compress" => Compress(compress::CompressConfig),
    "decompress" => Decompress(decompress::DecompressConfig),
    "dedupe" => Dedupe(dedupe::DedupeConfig),
    "for_each" => ForEach(for_each::ForEachConfig),
    "grok" => Grok(grok::GrokConfig),
    "group_by" => GroupBy(group_by::GroupByConfig),
    "group_by_value" => GroupByValue(group_by_value::GroupByValueConfig),
    "http" => Http(http::HttpProcessorConfig),
    "insert_part" => InsertPart(insert_part::InsertPartConfig),
    "jmespath" => Jmespath(jmespath::JmespathConfig),
    "jq" => Jq(jq::JqConfig),
    "json_schema" => JsonSchema(json_schema::JsonSchemaConfig),
    "log" => Log(log::LogConfig),
    "mapping" => Mapping(mapping::MappingConfig),
    "metric" => Metric(metric::MetricConfig),
    "mutation" => Mutation(mutation::MutationConfig),
    "noop" => Noop(noop::NoopConfig),
    "parallel" => Parallel(parallel::ParallelConfig),
    "parse_log" => ParseLog(parse_log::ParseLogConfig),
    "processors" => Processors(processors::ProcessorsConfig),
    "rate_limit" => RateLimit(rate_limit::RateLimitProcessorConfig),
    "resource" => Resource(resource::ResourceProcessorConfig),
    "retry" => Retry(retry::RetryConfig),
    "select_parts" => SelectParts(select_parts::SelectPartsConfig),
    "sleep" => Sleep(sleep::SleepConfig),
    "split" => Split(split::SplitConfig),
    "subprocess" => Subprocess(subprocess::SubprocessConfig),
    "switch" => Switch(switch::SwitchConfig),
    "sync_response" => SyncResponse(sync_response::SyncResponseConfig),
    "try" => Try(try_::TryConfig),
    "unarchive" => Unarchive(unarchive::UnarchiveConfig),
    "while" => While(while_::WhileConfig),
    "workflow" => Workflow(workflow::WorkflowConfig),
});

/// A processor's result: the batch, or no batch at all when every message was filtered
/// (which settles it as filtered).
pub(crate) fn nonempty(batch: crate::message::Batch) -> Vec<crate::message::Batch> {
    if batch.is_empty() {
        Vec::new()
    } else {
        vec![batch]
    }
}

/// Implemented by every processor config.
pub trait BuildProcessor {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError>;
}
