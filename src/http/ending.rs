//! Ending a long-lived answer from outside: an SSE stream, a long poll or a WebSocket
//! whose caller may no longer be served (its key was revoked, its token expired, its API
//! went) ends with a reason the client can read, instead of running until the client
//! leaves.
//!
//! The one who grants access holds an [`Ending`]; the answer carries a clone of it (an
//! SSE or long-poll body is wrapped by [`govern`], a WebSocket handler finds it in the
//! request's extensions with [`Ending::of`]). Each frame is held back until the answer
//! knows it has not ended, so that nothing published after the ending reaches the client.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::FutureExt;
use http_body::{Frame, SizeHint};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{boxed, Body, BoxError, HttpRequest, HttpResponse};

/// Why answers were ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The caller may no longer be served (SSE: `event: error`; WebSocket: 1008).
    Refused,
    /// The server is restarting: the caller is to come back after `retry` (SSE: a
    /// `retry:` hint and an `event: restart`; WebSocket: 1012).
    Restart { retry: std::time::Duration },
}

impl Cause {
    /// The WebSocket close code that tells it: 1008 (policy violation) or 1012 (service
    /// restart).
    pub fn close_code(self) -> tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode {
        use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
        match self {
            Cause::Refused => CloseCode::Policy,
            Cause::Restart { .. } => CloseCode::Restart,
        }
    }
}

/// A signal that ends the answers holding it, with the first reason given.
#[derive(Clone, Default)]
pub struct Ending {
    token: CancellationToken,
    reason: Arc<OnceLock<(Cause, String)>>,
}

impl std::fmt::Debug for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ending")
            .field("reason", &self.reason())
            .finish()
    }
}

impl Ending {
    pub fn new() -> Self {
        Ending::default()
    }

    /// Ends every answer holding this signal. The first reason is the one clients read.
    pub fn end(&self, reason: &str) {
        self.end_for(Cause::Refused, reason);
    }

    /// Ends every answer holding this signal because the server restarts: clients are
    /// told to come back after `retry`.
    pub fn restart(&self, retry: std::time::Duration, reason: &str) {
        self.end_for(Cause::Restart { retry }, reason);
    }

    fn end_for(&self, cause: Cause, reason: &str) {
        let _ = self.reason.set((cause, reason.to_owned()));
        self.token.cancel();
    }

    /// Why the answers ended, once they have.
    pub fn reason(&self) -> Option<&str> {
        self.token
            .is_cancelled()
            .then(|| self.reason.get().map(|(_, r)| r.as_str()))
            .flatten()
    }

    /// What ended the answers, once they have.
    pub fn cause(&self) -> Option<Cause> {
        self.token
            .is_cancelled()
            .then(|| self.reason.get().map(|(c, _)| *c))
            .flatten()
    }

    /// Whether an answer other than this one still holds the signal: once none does,
    /// whoever keeps this one can forget it.
    pub fn in_use(&self) -> bool {
        Arc::strong_count(&self.reason) > 1
    }

    pub fn is_ended(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Waits for the ending and gives its cause and reason.
    pub async fn ended(&self) -> (Cause, String) {
        self.token.cancelled().await;
        self.reason
            .get()
            .cloned()
            .unwrap_or((Cause::Refused, String::new()))
    }

    /// The ending a request was given by the one who let it in, if any.
    pub fn of(req: &HttpRequest) -> Option<Ending> {
        req.extensions().get::<Ending>().cloned()
    }
}

/// `resp` ending when `ending` does. An event stream (`text/event-stream`) is sent an
/// `event: error` naming the reason before it closes; any other body just ends.
pub fn govern(resp: HttpResponse, ending: Ending) -> HttpResponse {
    let events = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    resp.map(|inner| {
        boxed(Governed {
            waiting: Box::pin(ending.token.clone().cancelled_owned()),
            inner,
            ending,
            events,
            done: false,
        })
    })
}

/// The SSE event that tells a client why its stream ended: `error` when it may no longer
/// be served, `restart` (after a `retry:` hint in milliseconds) when it is to come back.
pub fn end_event(cause: Cause, reason: &str) -> Bytes {
    let mut out = String::with_capacity(reason.len() + 40);
    match cause {
        Cause::Refused => out.push_str("event: error\n"),
        Cause::Restart { retry } => {
            out.push_str(&format!("retry: {}\nevent: restart\n", retry.as_millis()));
        }
    }
    // A reason is one line of text; a line break would start a field of its own.
    for line in reason.lines() {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    if reason.is_empty() {
        out.push_str("data: \n");
    }
    out.push('\n');
    Bytes::from(out)
}

struct Governed {
    inner: Body,
    ending: Ending,
    waiting: Pin<Box<WaitForCancellationFutureOwned>>,
    events: bool,
    done: bool,
}

impl http_body::Body for Governed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        // The ending is looked at before the body: a frame the body has ready once the
        // answer ended is not sent.
        if self.waiting.poll_unpin(cx).is_ready() {
            self.done = true;
            if self.events {
                let reason = self.ending.reason().unwrap_or_default().to_owned();
                let cause = self.ending.cause().unwrap_or(Cause::Refused);
                return Poll::Ready(Some(Ok(Frame::data(end_event(cause, &reason)))));
            }
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.done = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // The error event may be added: the length is no longer known.
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower());
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn stream_of(chunks: Vec<&'static str>, content_type: &str) -> HttpResponse {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, BoxError>>();
        for c in chunks {
            tx.unbounded_send(Ok(Frame::data(Bytes::from(c)))).unwrap();
        }
        // Kept open: the stream runs until it is ended.
        std::mem::forget(tx);
        let body = http_body_util::StreamBody::new(rx);
        let mut resp = HttpResponse::new(boxed(body));
        resp.headers_mut()
            .insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
        resp
    }

    #[tokio::test]
    async fn an_ended_event_stream_sends_the_reason_and_nothing_after_it() {
        let ending = Ending::new();
        let resp = govern(
            stream_of(vec!["data: one\n\n"], "text/event-stream"),
            ending.clone(),
        );
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "data: one\n\n");
        ending.end("the key was revoked");
        ending.end("a later reason is not the one read");
        let last = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(last, "event: error\ndata: the key was revoked\n\n");
        assert!(body.frame().await.is_none());
        assert!(http_body::Body::is_end_stream(&body));
    }

    #[tokio::test]
    async fn a_ready_frame_is_held_back_once_the_answer_ended() {
        let ending = Ending::new();
        let resp = govern(
            stream_of(vec!["data: published after\n\n"], "text/event-stream"),
            ending.clone(),
        );
        ending.end("gone");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "event: error\ndata: gone\n\n");
    }

    #[tokio::test]
    async fn a_restart_tells_the_client_when_to_come_back() {
        let ending = Ending::new();
        let resp = govern(
            stream_of(vec!["data: in flight\n\n"], "text/event-stream"),
            ending.clone(),
        );
        let mut body = resp.into_body();
        body.frame().await.unwrap().unwrap();
        ending.restart(
            std::time::Duration::from_millis(1500),
            "the gateway is restarting",
        );
        let last = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(
            last,
            "retry: 1500\nevent: restart\ndata: the gateway is restarting\n\n"
        );
        assert!(body.frame().await.is_none());
        assert_eq!(
            ending.cause(),
            Some(Cause::Restart {
                retry: std::time::Duration::from_millis(1500)
            })
        );
    }

    #[tokio::test]
    async fn another_body_just_ends() {
        let ending = Ending::new();
        let resp = govern(stream_of(vec!["{}"], "application/json"), ending.clone());
        ending.end("gone");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(body.is_empty());
    }

    #[test]
    fn a_reason_over_lines_stays_inside_its_event() {
        assert_eq!(
            end_event(Cause::Refused, "one\nevent: forged"),
            "event: error\ndata: one\ndata: event: forged\n\n"
        );
    }
}
