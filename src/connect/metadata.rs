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

impl MetadataConfig {
    pub fn compile(&self) -> Result<MetadataFilter, String> {
        let compile = |field: &str, list: &[String]| {
            list.iter()
                .enumerate()
                .map(|(i, p)| Regex::new(p).map_err(|e| format!("`metadata.{field}[{i}]`: {e}")))
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

impl MetadataFilter {
    pub fn is_empty(&self) -> bool {
        self.include.is_empty()
    }

    pub fn allows(&self, key: &str) -> bool {
        self.include.iter().any(|r| r.is_match(key))
            && !self.exclude.iter().any(|r| r.is_match(key))
    }

    /// The forwarded metadata of a message as text pairs.
    pub fn pairs<'m>(&'m self, msg: &'m Message) -> impl Iterator<Item = (&'m str, String)> + 'm {
        msg.metadata()
            .iter()
            .filter(move |(k, _)| !self.is_empty() && self.allows(k))
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
    }

    #[test]
    fn bad_pattern_names_the_field() {
        let e = MetadataConfig {
            include_patterns: vec!["(".into()],
            exclude_patterns: vec![],
        }
        .compile()
        .unwrap_err();
        assert!(e.contains("include_patterns[0]"), "{e}");
    }
}
