//! Inputs: where messages come from. One file per input; the list below registers them.

pub mod broker;
pub mod file;
pub mod generate;
pub mod http_client;
pub mod http_server;
pub mod stdin;

use crate::component::{BuildContext, BuildError, Input, Kind};

crate::registry!(Kind::Input, InputKind, InputConfig, BuildInput -> InputBuild {
    "broker" => Broker(broker::BrokerInputConfig),
    "file" => File(file::FileInputConfig),
    "generate" => Generate(generate::GenerateConfig),
    "http_client" => HttpClient(http_client::HttpClientInputConfig),
    "http_server" => HttpServer(http_server::HttpServerInputConfig),
    "stdin" => Stdin(stdin::StdinConfig),
});

/// What an input config builds into.
pub enum InputBuild {
    Leaf(Box<dyn Input>),
    /// Several inputs feeding the same stream (`broker`).
    Merge(Vec<InputConfig>),
}

/// Implemented by every input config.
pub trait BuildInput {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError>;
}
