//! Configuration errors that say where they are: file, document path, line and column.

use std::fmt;
use std::sync::Arc;

/// A position in a configuration document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: Arc<str>,
    /// Dotted path inside the document, e.g. `input.http_server.timeout` or `output.broker.outputs[1]`.
    pub path: String,
    /// 1-based.
    pub line: usize,
    /// 1-based.
    pub col: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)?;
        if !self.path.is_empty() {
            write!(f, " ({})", self.path)?;
        }
        Ok(())
    }
}

/// One problem in a configuration document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub location: Option<Location>,
    pub message: String,
    /// The closest valid key or value, when the problem is a misspelling.
    pub suggestion: Option<String>,
}

impl ConfigError {
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            location: None,
            message: message.into(),
            suggestion: None,
        }
    }

    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{loc}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(s) = &self.suggestion {
            write!(f, " (did you mean `{s}`?)")?;
        }
        Ok(())
    }
}

/// Every problem found in one or more documents.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

/// The candidate closest to `word`, if one is close enough to be a likely misspelling.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Pulls a suggestion out of messages shaped like serde's
/// "unknown field `x`, expected one of `a`, `b`" (also used for unknown component types).
pub(crate) fn suggest_from_serde(message: &str) -> Option<String> {
    if !message.starts_with("unknown ") {
        return None;
    }
    let (_, rest) = message.split_once('`')?;
    let (word, after) = rest.split_once('`')?;
    let (_, expected) = after.split_once("expected")?;
    let candidates: Vec<&str> = expected
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s)
        .collect();
    closest(word, candidates).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_from_serde_messages() {
        assert_eq!(
            suggest_from_serde("unknown field `intervl`, expected one of `count`, `interval`"),
            Some("interval".into())
        );
        assert_eq!(
            suggest_from_serde("unknown field `zzzzzz`, expected `count`"),
            None
        );
        assert_eq!(
            suggest_from_serde("unknown input type `genrate`, expected one of `generate`, `file`"),
            Some("generate".into())
        );
    }

    #[test]
    fn closest_ignores_far_words() {
        assert_eq!(closest("genrate", ["generate", "stdin"]), Some("generate"));
        assert_eq!(closest("kafka", ["stdin", "file"]), None);
    }

    #[test]
    fn display_names_file_line_col_and_path() {
        let e = ConfigError::new("unknown field `x`").at(Location {
            file: "a.yaml".into(),
            path: "input.generate".into(),
            line: 3,
            col: 5,
        });
        assert_eq!(
            e.to_string(),
            "a.yaml:3:5 (input.generate): unknown field `x`"
        );
    }
}
