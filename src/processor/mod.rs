//! Processors: what happens to messages between input and output. One file per
//! processor; the list below registers them.

pub mod archive;
pub mod bounds_check;
pub mod branch;
pub mod catch;
pub mod chain;
pub mod compress;
pub mod decompress;
pub mod for_each;
pub mod group_by;
pub mod group_by_value;
pub mod http;
pub mod insert_part;
pub mod log;
pub mod mapping;
pub mod mutation;
pub mod noop;
pub mod parallel;
pub mod processors;
pub mod retry;
pub mod select_parts;
pub mod sleep;
pub mod split;
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
    "catch" => Catch(catch::CatchConfig),
    "compress" => Compress(compress::CompressConfig),
    "decompress" => Decompress(decompress::DecompressConfig),
    "for_each" => ForEach(for_each::ForEachConfig),
    "group_by" => GroupBy(group_by::GroupByConfig),
    "group_by_value" => GroupByValue(group_by_value::GroupByValueConfig),
    "http" => Http(http::HttpProcessorConfig),
    "insert_part" => InsertPart(insert_part::InsertPartConfig),
    "log" => Log(log::LogConfig),
    "mapping" => Mapping(mapping::MappingConfig),
    "mutation" => Mutation(mutation::MutationConfig),
    "noop" => Noop(noop::NoopConfig),
    "parallel" => Parallel(parallel::ParallelConfig),
    "processors" => Processors(processors::ProcessorsConfig),
    "retry" => Retry(retry::RetryConfig),
    "select_parts" => SelectParts(select_parts::SelectPartsConfig),
    "sleep" => Sleep(sleep::SleepConfig),
    "split" => Split(split::SplitConfig),
    "switch" => Switch(switch::SwitchConfig),
    "sync_response" => SyncResponse(sync_response::SyncResponseConfig),
    "try" => Try(try_::TryConfig),
    "unarchive" => Unarchive(unarchive::UnarchiveConfig),
    "while" => While(while_::WhileConfig),
    "workflow" => Workflow(workflow::WorkflowConfig),
});

/// Implemented by every processor config.
pub trait BuildProcessor {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError>;
}
