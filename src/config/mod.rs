//! Reading configuration: positioned YAML, a serde deserializer over it that reports
//! errors with file, document path, line and column, `${VAR}` substitution and
//! interpolated strings. What the documents mean is up to the modules that read them
//! (the stream files of `sluice run` in `stream::config`).

pub mod de;
pub mod error;
pub mod mapped;
pub mod overrides;
pub mod yaml;

pub use error::{ConfigError, ConfigErrors, Location};
pub use mapped::{Interp, MappingText};
pub use yaml::{Document, Node};

/// Reads the process environment for `${VAR}`.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// An unknown key, positioned, with the closest valid key as a suggestion.
pub fn unknown_key(
    doc: &Document,
    key_node: &Node,
    key: &str,
    path: &str,
    valid: &[&str],
) -> ConfigError {
    let mut e = ConfigError::new(format!("unknown key `{key}`"))
        .at(doc.location(&de::join(path, key), key_node.mark));
    e.suggestion = error::closest(key, valid.iter().copied()).map(str::to_owned);
    e
}
