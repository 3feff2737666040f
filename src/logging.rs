//! Log settings of the process (`logger:` in a config file), shared by the CLI, which
//! installs the subscriber, and the `log` processor.

use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Off,
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LoggerConfig {
    pub level: LogLevel,
    pub format: LogFormat,
}
