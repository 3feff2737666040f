//! What a hub hands its clients: events (with their ids), chunks of them with their wire
//! forms, and deliveries that report whether they were written.

use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::oneshot;

/// One event as clients see it.
#[derive(Debug)]
pub struct Event {
    /// None for notices (a gap) that must not move the client's last seen id.
    pub id: Option<u64>,
    pub name: Option<Box<str>>,
    pub data: Bytes,
    /// The media type the message declared (its `content-type` metadata), if any.
    pub content_type: Option<Box<str>>,
}

impl Event {
    /// The media type of the event's data: the declared one, else what the data is.
    pub fn content_type(&self) -> &str {
        self.content_type
            .as_deref()
            .unwrap_or_else(|| crate::message::sniff_content_type(&self.data))
    }
}

/// The name of the notice sent when a resume cannot be served in full.
pub const GAP_EVENT: &str = "gap";

/// Events handed to a client in one go, with their wire forms computed once (a broadcast
/// shares one chunk between all clients).
#[derive(Debug)]
pub struct Chunk {
    pub events: Vec<Arc<Event>>,
    sse: OnceLock<Bytes>,
    lines: OnceLock<Bytes>,
}

impl Chunk {
    pub fn new(events: Vec<Arc<Event>>) -> Self {
        Chunk {
            events,
            sse: OnceLock::new(),
            lines: OnceLock::new(),
        }
    }

    /// Messages in the chunk that count as deliveries (notices do not).
    pub fn messages(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e.id.is_some() || e.name.as_deref() != Some(GAP_EVENT))
            .count()
    }

    pub fn payload_bytes(&self) -> usize {
        self.events.iter().map(|e| e.data.len()).sum()
    }

    /// Server-Sent Events framing: `id:`, `event:` when named, one `data:` per line.
    pub fn sse(&self) -> &Bytes {
        self.sse.get_or_init(|| {
            let mut buf = BytesMut::with_capacity(self.payload_bytes() + 32 * self.events.len());
            for e in &self.events {
                encode_sse(e, &mut buf);
            }
            buf.freeze()
        })
    }

    /// One message per line, without ids.
    pub fn lines(&self) -> &Bytes {
        self.lines.get_or_init(|| {
            let mut buf = BytesMut::with_capacity(self.payload_bytes() + self.events.len());
            for e in self.events.iter().filter(|e| e.id.is_some()) {
                buf.put_slice(&e.data);
                buf.put_u8(b'\n');
            }
            buf.freeze()
        })
    }
}

fn encode_sse(e: &Event, buf: &mut BytesMut) {
    if let Some(id) = e.id {
        buf.put_slice(b"id: ");
        buf.put_slice(id.to_string().as_bytes());
        buf.put_u8(b'\n');
    }
    if let Some(name) = &e.name {
        buf.put_slice(b"event: ");
        buf.put_slice(name.as_bytes());
        buf.put_u8(b'\n');
    }
    // SSE ends a line at CRLF, LF or CR; each payload line becomes its own `data:` field so
    // the client rebuilds the payload joined by LF.
    let data = &e.data[..];
    let mut start = 0;
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'\n' || data[i] == b'\r' {
            buf.put_slice(b"data: ");
            buf.put_slice(&data[start..i]);
            buf.put_u8(b'\n');
            if data[i] == b'\r' && data.get(i + 1) == Some(&b'\n') {
                i += 1;
            }
            start = i + 1;
        }
        i += 1;
    }
    buf.put_slice(b"data: ");
    buf.put_slice(&data[start..]);
    buf.put_slice(b"\n\n");
}

/// A chunk on its way to one client. Dropping it unwritten reports a failed write, and the
/// publisher hands the messages to another client.
pub struct Delivery {
    pub chunk: Arc<Chunk>,
    done: Option<oneshot::Sender<()>>,
}

impl Delivery {
    /// A delivery nobody waits for (a replay, a notice, or under a slow-client policy
    /// that does not hold the producer).
    pub fn unconfirmed(chunk: Arc<Chunk>) -> Self {
        Delivery { chunk, done: None }
    }

    /// A delivery whose publisher waits for it to be written: the receiver resolves
    /// when it was, and fails when it was dropped unwritten.
    pub fn confirmed(chunk: Arc<Chunk>) -> (Self, oneshot::Receiver<()>) {
        let (done, written) = oneshot::channel();
        (
            Delivery {
                chunk,
                done: Some(done),
            },
            written,
        )
    }

    /// True when the publisher stopped waiting for this client (it was too slow), so
    /// writing it now would duplicate what another client got.
    pub fn is_withdrawn(&self) -> bool {
        self.done.as_ref().is_some_and(|d| d.is_closed())
    }

    /// Takes the confirmation out, for transports that confirm later (after hyper took
    /// the frame). None for replays, which nobody waits for.
    pub fn into_done(mut self) -> Option<oneshot::Sender<()>> {
        self.done.take()
    }

    /// The bytes went to the client's connection.
    pub fn written(mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

/// The notice for a client resuming after `last` that some of what followed is gone.
pub(crate) fn gap(last: &str, oldest: Option<u64>) -> Arc<Event> {
    gap_notice(serde_json::json!({
        "last_event_id": last,
        "oldest_available": oldest.map(|id| id.to_string()),
        "message": "some events after last_event_id are no longer available",
    }))
}

/// A `gap` notice saying `what`: it has no id, so the client's last seen id stays.
pub(crate) fn gap_notice(what: serde_json::Value) -> Arc<Event> {
    Arc::new(Event {
        id: None,
        name: Some(GAP_EVENT.into()),
        data: Bytes::from(what.to_string()),
        content_type: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_framing_splits_lines_and_names_events() {
        let chunk = Chunk::new(vec![Arc::new(Event {
            id: Some(7),
            name: Some("tick".into()),
            data: Bytes::from_static(b"a\nb\r\nc\rd"),
            content_type: None,
        })]);
        assert_eq!(
            &chunk.sse()[..],
            b"id: 7\nevent: tick\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
        );
        assert_eq!(&chunk.lines()[..], b"a\nb\r\nc\rd\n");
    }
}
