//! Processors: what happens to messages between input and output. One file per
//! processor; the list below registers them.

pub mod http;
pub mod log;
pub mod mapping;
pub mod mutation;
pub mod noop;
pub mod sleep;

use crate::component::{BuildContext, BuildError, Kind, Processor};

crate::registry!(Kind::Processor, ProcessorKind, ProcessorConfig, BuildProcessor -> Box<dyn Processor> {
    "bloblang" => Bloblang(mapping::BloblangConfig),
    "http" => Http(http::HttpProcessorConfig),
    "log" => Log(log::LogConfig),
    "mapping" => Mapping(mapping::MappingConfig),
    "mutation" => Mutation(mutation::MutationConfig),
    "noop" => Noop(noop::NoopConfig),
    "sleep" => Sleep(sleep::SleepConfig),
});

/// Implemented by every processor config.
pub trait BuildProcessor {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError>;
}
