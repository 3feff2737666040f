//! Processors: what happens to messages between input and output. One file per
//! processor; the list below registers them.

pub mod archive;
pub mod bounds_check;
pub mod branch;
pub mod catch;
pub mod chain;
pub mod compress;
pub mod decompress;
pub mod http;
pub mod insert_part;
pub mod log;
pub mod mapping;
pub mod mutation;
pub mod noop;
pub mod select_parts;
pub mod sleep;
pub mod split;
pub mod switch;
pub mod try_;
pub mod unarchive;

use crate::component::{BuildContext, BuildError, Kind, Processor};

crate::registry!(Kind::Processor, ProcessorKind, ProcessorConfig, BuildProcessor -> Box<dyn Processor> {
    "archive" => Archive(archive::ArchiveConfig),
    "bloblang" => Bloblang(mapping::BloblangConfig),
    "bounds_check" => BoundsCheck(bounds_check::BoundsCheckConfig),
    "branch" => Branch(branch::BranchConfig),
    "catch" => Catch(catch::CatchConfig),
    "compress" => Compress(compress::CompressConfig),
    "decompress" => Decompress(decompress::DecompressConfig),
    "http" => Http(http::HttpProcessorConfig),
    "insert_part" => InsertPart(insert_part::InsertPartConfig),
    "log" => Log(log::LogConfig),
    "mapping" => Mapping(mapping::MappingConfig),
    "mutation" => Mutation(mutation::MutationConfig),
    "noop" => Noop(noop::NoopConfig),
    "select_parts" => SelectParts(select_parts::SelectPartsConfig),
    "sleep" => Sleep(sleep::SleepConfig),
    "split" => Split(split::SplitConfig),
    "switch" => Switch(switch::SwitchConfig),
    "try" => Try(try_::TryConfig),
    "unarchive" => Unarchive(unarchive::UnarchiveConfig),
});

/// Implemented by every processor config.
pub trait BuildProcessor {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError>;
}
