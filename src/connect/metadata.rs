//! Which metadata an output forwards as broker headers.

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::message::Message;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetadataConfig {
    /// Regular expressions: metadata keys matching any of them are sent as headers. Empty
    /// sends none, so that a pipeline does not leak the metadata of its input by default.
    pub include_patterns: Vec<String>,
    /// Regular expressions: keys matching any of them are never sent, even when included.
    pub exclude_patterns: Vec<String>,
}

/// A metadata pattern that is no regular expression.
#[derive(Debug, thiserror::Error)]
#[error("`metadata.{field}[{index}]`: {source}")]
pub struct PatternError {
    pub field: &'static str,
    pub index: usize,
    #[source]
    pub source: regex::Error,
}

impl MetadataConfig {
    pub fn compile(&self) -> Result<MetadataFilter, PatternError> {
        let compile = |field: &'static str, list: &[String]| {
            list.iter()
                .enumerate()
                .map(|(index, p)| {
                    Regex::new(p).map_err(|source| PatternError {
                        field,
                        index,
                        source,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(MetadataFilter {
            include: compile("include_patterns", &self.include_patterns)?,
            exclude: compile("exclude_patterns", &self.exclude_patterns)?,
        })
    }
}

/// The compiled form of [`MetadataConfig`].
#[derive(Debug, Clone, Default)]
pub struct MetadataFilter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

/// Metadata that travels as headers whatever the include patterns say (unless an exclude
/// pattern names it): the W3C Trace Context, so that whoever consumes the message
/// continues the trace of whoever produced it.
pub const TRACE_CONTEXT: [&str; 2] = ["traceparent", "tracestate"];

impl MetadataFilter {
    /// Whether no pattern includes anything (the trace context still travels).
    pub fn is_empty(&self) -> bool {
        self.include.is_empty()
    }

    pub fn allows(&self, key: &str) -> bool {
        (TRACE_CONTEXT.contains(&key) || self.include.iter().any(|r| r.is_match(key)))
            && !self.exclude.iter().any(|r| r.is_match(key))
    }

    /// Whether `msg` has metadata to send as headers: some is included, or it carries
    /// a trace context.
    pub fn carries(&self, msg: &Message) -> bool {
        !self.is_empty()
            || TRACE_CONTEXT
                .iter()
                .any(|k| msg.meta(k).is_some() && self.allows(k))
    }

    /// The forwarded metadata of a message as text pairs.
    pub fn pairs<'m>(&'m self, msg: &'m Message) -> impl Iterator<Item = (&'m str, String)> + 'm {
        msg.metadata()
            .iter()
            .filter(move |(k, _)| self.allows(k))
            .map(|(k, v)| (k.as_str(), v.to_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_then_exclude() {
        let f = MetadataConfig {
            include_patterns: vec![".*".into()],
            exclude_patterns: vec!["^kafka_".into()],
        }
        .compile()
        .unwrap();
        let m = Message::new("x")
            .with_meta("a", "1")
            .with_meta("kafka_key", "k");
        let got: Vec<_> = f.pairs(&m).collect();
        assert_eq!(got, vec![("a", "1".to_string())]);
        assert_eq!(MetadataFilter::default().pairs(&m).count(), 0);
        assert!(!MetadataFilter::default().carries(&m));
    }

    #[test]
    fn the_trace_context_travels_unless_excluded() {
        let traced = Message::new("x").with_meta("a", "1").with_meta(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        let none = MetadataFilter::default();
        assert!(none.carries(&traced));
        let got: Vec<_> = none.pairs(&traced).map(|(k, _)| k).collect();
        assert_eq!(got, ["traceparent"]);
        let excluded = MetadataConfig {
            include_patterns: vec![],
            exclude_patterns: vec!["^trace".into()],
        }
        .compile()
        .unwrap();
        assert!(!excluded.carries(&traced));
        assert_eq!(excluded.pairs(&traced).count(), 0);
    }

    #[test]
    fn bad_pattern_names_the_field() {
        let e = MetadataConfig {
            include_patterns: vec!["(".into()],
            exclude_patterns: vec![],
        }
        .compile()
        .unwrap_err()
        .to_string();
        assert!(e.contains("include_patterns[0]"), "{e}");
    }
}
