//! Messages and batches: what flows between the nodes of a stream.
//!
//! A message is payload bytes plus metadata. Its structured form is parsed from the payload
//! on first use and cached; setting a structured value serializes the payload only when
//! something asks for the bytes. A pipeline that never looks inside a message never parses it.

mod ack;

use std::collections::BTreeMap;
use std::sync::Arc;
// once_cell builds a cell that is already set without going through its
// initialisation lock, which std's OnceLock cannot: every message is created (and,
// for sources that cannot take a nack, copied) with its payload set.
use once_cell::sync::OnceCell;

use bytes::Bytes;

pub use ack::{Ack, Outcome, ReplySlot, Transaction};

use crate::value::Value;

/// Metadata of a message: sorted keys, typed values (strings unless a mapping set others).
pub type Metadata = BTreeMap<String, Value>;

/// What `metadata()` lends for a message that has none.
pub(crate) static NO_METADATA: Metadata = BTreeMap::new();

/// The metadata key of a message's media type (header names are kept in lower case).
pub const CONTENT_TYPE: &str = "content-type";

/// The media type a payload without a declared one is sent as: JSON, plain text when it
/// is UTF-8, bytes otherwise.
pub fn sniff_content_type(payload: &[u8]) -> &'static str {
    if serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok() {
        "application/json"
    } else if std::str::from_utf8(payload).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    }
}

/// The media type of messages answered together: theirs when they agree, each line's
/// own type otherwise (JSON lines are NDJSON), bytes when they mix.
pub fn content_type_of_all<'a>(types: impl IntoIterator<Item = &'a str>) -> String {
    let mut types = types.into_iter();
    let Some(first) = types.next() else {
        return "text/plain; charset=utf-8".to_owned();
    };
    let mut several = false;
    for t in types {
        several = true;
        if t != first {
            return "application/octet-stream".to_owned();
        }
    }
    if several && first == "application/json" {
        "application/x-ndjson".to_owned()
    } else {
        first.to_owned()
    }
}

/// Why a payload has no structured form.
#[derive(Debug, Clone, thiserror::Error)]
#[error("payload is not valid JSON: {0}")]
pub struct ParseError(String);

#[derive(Debug, Clone, Default)]
pub struct Message {
    /// The payload bytes; unset only while the structured value is newer.
    raw: OnceCell<Bytes>,
    /// The parsed payload (or why it did not parse), set on first use.
    structured: OnceCell<Result<Value, ParseError>>,
    /// Shared between copies until one of them changes it: inputs that cannot take a
    /// nack keep a copy of every batch for sending it again, and copying a map of
    /// strings per message cost more than the rest of the copy. `None`: no metadata.
    metadata: Option<Arc<Metadata>>,
    /// Set when a processor failed on this message; cleared by `catch`.
    error: Option<String>,
}

impl Message {
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Message {
            raw: OnceCell::from(payload.into()),
            ..Default::default()
        }
    }

    /// A message whose content is a structured value.
    pub fn from_value(value: Value) -> Self {
        Message {
            structured: OnceCell::from(Ok(value)),
            ..Default::default()
        }
    }

    /// The payload bytes, serializing the structured value if that is newer.
    pub fn payload(&self) -> &Bytes {
        self.raw.get_or_init(|| match self.structured.get() {
            Some(Ok(v)) => v.to_payload(),
            // A message always holds at least one of the two forms.
            _ => Bytes::new(),
        })
    }

    /// Appends the payload to `out`: a newer structured value is serialized straight into
    /// it, without building (and keeping) payload bytes of its own.
    pub fn write_payload(&self, out: &mut Vec<u8>) {
        match (self.raw.get(), self.structured.get()) {
            (Some(raw), _) => out.extend_from_slice(raw),
            (None, Some(Ok(Value::String(s)))) => out.extend_from_slice(s.as_bytes()),
            (None, Some(Ok(Value::Bytes(b)))) => out.extend_from_slice(b),
            (None, Some(Ok(v))) => v.write_json(out),
            // A message always holds at least one of the two forms.
            (None, _) => {}
        }
    }

    /// The payload bytes if they are current, without serializing a newer value.
    pub fn payload_if_current(&self) -> Option<&Bytes> {
        self.raw.get()
    }

    pub fn payload_len(&self) -> usize {
        self.payload().len()
    }

    pub fn set_payload(&mut self, payload: impl Into<Bytes>) {
        self.raw = OnceCell::from(payload.into());
        self.structured = OnceCell::new();
    }

    /// The payload parsed as JSON, parsed once and cached.
    pub fn structured(&self) -> Result<&Value, &ParseError> {
        self.structured
            .get_or_init(|| {
                let raw = self.raw.get().map(|b| &b[..]).unwrap_or_default();
                Value::from_json(raw).map_err(|e| ParseError(e.to_string()))
            })
            .as_ref()
    }

    /// Takes the structured value out for editing in place (parsing if needed); put it back
    /// with [`Message::set_structured`].
    pub fn take_structured(&mut self) -> Result<Value, ParseError> {
        self.structured().map_err(Clone::clone)?;
        let taken = self.structured.take();
        self.raw = OnceCell::new();
        match taken {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(e),
            None => Ok(Value::Null),
        }
    }

    pub fn set_structured(&mut self, value: Value) {
        self.structured = OnceCell::from(Ok(value));
        self.raw = OnceCell::new();
    }

    pub fn metadata(&self) -> &Metadata {
        self.metadata.as_deref().unwrap_or(&NO_METADATA)
    }

    /// The metadata for editing; copied first if another copy of the message shares it.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        Arc::make_mut(self.metadata.get_or_insert_with(Default::default))
    }

    /// Replaces all metadata.
    pub fn set_metadata(&mut self, metadata: Metadata) {
        self.metadata = (!metadata.is_empty()).then(|| Arc::new(metadata));
    }

    /// Gives this message the same metadata as `other`, shared until either changes it.
    pub fn share_metadata(&mut self, other: &Message) {
        self.metadata = other.metadata.clone();
    }

    /// The metadata in its shared form (none if empty), for an input to hand to the next
    /// messages that carry the same.
    pub fn shared_metadata(&self) -> Option<&Arc<Metadata>> {
        self.metadata.as_ref()
    }

    /// Sets metadata another message shares (see [`Message::shared_metadata`]).
    pub fn with_shared_metadata(mut self, metadata: Arc<Metadata>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.metadata().get(key)
    }

    /// Metadata as text, the form connectors write into headers.
    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.meta(key).map(Value::to_text)
    }

    pub fn set_meta(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.metadata_mut().insert(key.into(), value.into());
    }

    pub fn with_meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.set_meta(key, value);
        self
    }

    /// The media type of the payload: the `content-type` metadata (which the
    /// `http_server` input keeps from the producer's request), else what the payload is:
    /// JSON, UTF-8 text or bytes.
    pub fn content_type(&self) -> std::borrow::Cow<'_, str> {
        match self.meta(CONTENT_TYPE) {
            Some(Value::String(t)) if !t.trim().is_empty() => std::borrow::Cow::Borrowed(t),
            _ => std::borrow::Cow::Borrowed(sniff_content_type(self.payload())),
        }
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    pub fn set_error(&mut self, error: impl Into<String>) {
        self.error = Some(error.into());
    }

    pub fn clear_error(&mut self) {
        self.error = None;
    }
}

/// The unit components pass: usually one message, more when an input or a batching policy
/// groups them.
pub type Batch = Vec<Message>;

/// Sum of payload sizes, for byte counters and `byte_size` batching.
pub fn batch_bytes(batch: &[Message]) -> usize {
    batch.iter().map(Message::payload_len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_is_parsed_lazily_once() {
        let m = Message::new(&br#"{"a":1}"#[..]);
        assert!(m.structured.get().is_none());
        let v = m.structured().unwrap();
        assert_eq!(v.type_name(), "object");
        assert!(std::ptr::eq(v, m.structured().unwrap()));
    }

    #[test]
    fn setting_a_value_reserializes_on_demand() {
        let mut m = Message::new("x");
        m.set_structured(Value::from_json(br#"{"b":[1,2]}"#).unwrap());
        assert_eq!(&m.payload()[..], br#"{"b":[1,2]}"#);
    }

    #[test]
    fn take_structured_then_set_round_trips() {
        let mut m = Message::new(&br#"{"n":1}"#[..]);
        let mut v = m.take_structured().unwrap();
        if let Value::Object(o) = &mut v {
            o.insert("n".into(), Value::Int(2));
        }
        m.set_structured(v);
        assert_eq!(&m.payload()[..], br#"{"n":2}"#);
    }

    #[test]
    fn bad_json_is_an_error_not_a_panic() {
        let m = Message::new("not json");
        assert!(m.structured().is_err());
        assert_eq!(&m.payload()[..], b"not json");
    }

    #[test]
    fn copies_share_metadata_until_one_changes_it() {
        let mut a = Message::new("").with_meta("k", "v");
        let b = a.clone();
        assert!(std::ptr::eq(a.metadata(), b.metadata()));
        a.set_meta("k", "changed");
        assert_eq!(b.meta_str("k").as_deref(), Some("v"));
        assert_eq!(a.meta_str("k").as_deref(), Some("changed"));
        a.set_metadata(Metadata::new());
        assert!(a.metadata().is_empty());
        a.set_metadata(b.metadata().clone());
        assert_eq!(a.meta_str("k").as_deref(), Some("v"));
    }

    #[test]
    fn metadata_text() {
        let m = Message::new("").with_meta("k", "v").with_meta("n", 5i64);
        assert_eq!(m.meta_str("k").as_deref(), Some("v"));
        assert_eq!(m.meta_str("n").as_deref(), Some("5"));
    }
}
