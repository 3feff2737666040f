//! The function library (`name(args)`), one family per file. Each entry is a
//! [`FunctionSpec`](super::spec::FunctionSpec) whose examples run as tests.

mod environment;
mod fake_data;
mod generators;
mod message;
mod values;

use super::spec::FunctionSpec;

pub use generators::Counters;

/// The functions that read the host (environment variables, files, its name): what a mapping that
/// arrives as data must not reach.
pub fn host() -> impl Iterator<Item = &'static str> {
    environment::SPECS.iter().map(|f| f.name)
}

/// Every function, in one explicit list.
pub fn all() -> Vec<&'static FunctionSpec> {
    [
        message::SPECS,
        generators::SPECS,
        environment::SPECS,
        values::SPECS,
        fake_data::SPECS,
    ]
    .into_iter()
    .flatten()
    .collect()
}
