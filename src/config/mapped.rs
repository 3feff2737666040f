//! Config fields written in the mapping language: whole mappings (`mapping:`, `check:`)
//! and interpolated strings (`${! expr }` in URLs, paths, headers, topics). Both are
//! compiled while the config is read, so a mistake is reported with the field's position
//! (and the mapping's own line, column and caret) by `sluice lint` and before anything runs.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Deserializer};

use crate::mapping::functions::Counters;
use crate::mapping::{Env, InterpolatedString, Mapping, MappingError};
use crate::message::{Batch, Message};

thread_local! {
    static SANDBOXED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The `count()` counters of the config being read in the sandbox.
    static COUNTERS: std::cell::RefCell<Option<Arc<Counters>>> =
        const { std::cell::RefCell::new(None) };
}

/// Reads a config that arrived as data (posted to the gateway or the dashboard): every
/// mapping and interpolation that `read` compiles leaves out the functions and methods
/// that read the host (its environment, files, GeoIP databases). Deserializing is
/// synchronous, so a flag of this thread covers exactly the configs read inside. The
/// mappings read inside share one set of `count()` counters, their own.
pub fn sandboxed<T>(read: impl FnOnce() -> T) -> T {
    struct Restore(bool, Option<Arc<Counters>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SANDBOXED.with(|s| s.set(self.0));
            COUNTERS.with(|c| *c.borrow_mut() = self.1.take());
        }
    }
    let _restore = Restore(
        SANDBOXED.with(|s| s.replace(true)),
        COUNTERS.with(|c| c.borrow_mut().replace(Arc::new(Counters::scoped()))),
    );
    read()
}

/// Whether the config being read arrived as data (see [`sandboxed`]): components that
/// could reach the host through their own languages (jq's `env`) leave that out.
pub fn is_sandboxed() -> bool {
    SANDBOXED.with(|s| s.get())
}

/// The environment configs compile mappings in.
fn env() -> Env {
    if SANDBOXED.with(|s| s.get()) {
        match COUNTERS.with(|c| c.borrow().clone()) {
            Some(counters) => Env::default().with_counters(counters).sandboxed(),
            None => Env::default().sandboxed(),
        }
    } else {
        Env::default()
    }
}

/// A mapping, compiled once when the config is read.
#[derive(Clone)]
pub struct MappingText {
    source: String,
    compiled: Arc<Mapping>,
}

impl MappingText {
    pub fn parse(source: &str) -> Result<Self, String> {
        let compiled =
            Mapping::compile(source, &env()).map_err(|d| format!("invalid mapping:\n{d}"))?;
        Ok(MappingText {
            source: source.to_owned(),
            compiled: Arc::new(compiled),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn mapping(&self) -> &Mapping {
        &self.compiled
    }

    pub fn shared(&self) -> Arc<Mapping> {
        self.compiled.clone()
    }
}

impl fmt::Debug for MappingText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappingText({:?})", self.source)
    }
}

impl<'de> Deserialize<'de> for MappingText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MappingText::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for MappingText {
    fn schema_name() -> String {
        "Mapping".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            format: Some("mapping".into()),
            ..Default::default()
        }
        .into()
    }
}

/// A string that may vary per message through `${! expr }` blocks.
#[derive(Clone)]
pub struct Interp {
    source: String,
    compiled: Arc<InterpolatedString>,
    /// The value, when it does not depend on the message (most topics and URLs): the
    /// hot path then borrows it instead of evaluating anything.
    fixed: Option<String>,
}

impl Interp {
    pub fn parse(source: &str) -> Result<Self, String> {
        let compiled = InterpolatedString::parse(source, &env())
            .map_err(|d| format!("invalid interpolation in `{source}`:\n{d}"))?;
        let fixed = if compiled.is_static() {
            compiled.render(&Vec::new(), 0).ok()
        } else {
            None
        };
        Ok(Interp {
            source: source.to_owned(),
            compiled: Arc::new(compiled),
            fixed,
        })
    }

    /// The text as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The value when it does not depend on the message.
    pub fn static_value(&self) -> Option<&str> {
        self.fixed.as_deref()
    }

    pub fn is_static(&self) -> bool {
        self.compiled.is_static()
    }

    /// The value for message `index` of `batch`.
    pub fn render(&self, batch: &Batch, index: usize) -> Result<String, MappingError> {
        self.compiled.render(batch, index)
    }

    pub fn render_bytes(&self, batch: &Batch, index: usize) -> Result<Bytes, MappingError> {
        self.compiled.render_bytes(batch, index)
    }

    /// The value of this field for message `index`, or a rejection naming the field (a
    /// message a topic or key cannot be built from cannot be sent anywhere).
    pub fn field(
        &self,
        batch: &Batch,
        index: usize,
        name: &str,
    ) -> Result<std::borrow::Cow<'_, str>, FieldError> {
        if let Some(fixed) = &self.fixed {
            return Ok(std::borrow::Cow::Borrowed(fixed));
        }
        self.render(batch, index)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| FieldError(format!("cannot build `{name}` from `{self}`: {e}")))
    }

    /// This field for every message of `batch`, built before anything is sent: a message
    /// it cannot be built for fails the batch. A static value is borrowed, not copied.
    pub fn fields(
        &self,
        batch: &Batch,
        name: &str,
    ) -> Result<Vec<std::borrow::Cow<'_, str>>, FieldError> {
        (0..batch.len())
            .map(|i| self.field(batch, i, name))
            .collect()
    }

    /// The value for a single message.
    pub fn render_message(&self, msg: &Message) -> Result<String, MappingError> {
        self.compiled.render(&vec![msg.clone()], 0)
    }
}

/// A message an interpolated field (a topic, a key) cannot be built from: sending it
/// again cannot help.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct FieldError(pub String);

impl fmt::Debug for Interp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Interp({:?})", self.source)
    }
}

impl fmt::Display for Interp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl PartialEq for Interp {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl<'de> Deserialize<'de> for Interp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Interp::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Interp {
    fn schema_name() -> String {
        "Interpolated".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            format: Some("interpolated".into()),
            ..Default::default()
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_dynamic_strings() {
        let s = Interp::parse("http://x/a").unwrap();
        assert_eq!(s.static_value(), Some("http://x/a"));
        let d = Interp::parse("http://x/${! meta(\"k\") }").unwrap();
        assert!(d.static_value().is_none());
        let msg = Message::new("").with_meta("k", "v");
        assert_eq!(d.render_message(&msg).unwrap(), "http://x/v");
    }

    #[test]
    fn bad_interpolation_is_an_error() {
        assert!(Interp::parse("${! nope_fn() }").is_err());
        assert!(MappingText::parse("root = ").is_err());
    }
}
