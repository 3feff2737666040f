//! Acknowledgement: every message carries a handle back to its input.
//!
//! An [`Ack`] is a counted handle. Cloning it (fan-out, a batch split by a processor) adds
//! a holder; each holder resolves it with an [`Outcome`], the worst outcome wins, and when
//! the last holder is gone the input's callback runs once with that outcome. Dropping a
//! holder without resolving it counts as a failure: a message cannot vanish silently.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::Batch;

/// How a message's journey ended. Ordered from best to worst.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every output it reached confirmed it.
    Delivered,
    /// A processor removed it on purpose (a deliberate drop, not a loss).
    Filtered,
    /// Delivery failed; the source should retry or report the failure.
    Errored(Arc<str>),
    /// The message itself was refused and retrying cannot help.
    Rejected(Arc<str>),
}

impl Outcome {
    pub fn errored(reason: impl fmt::Display) -> Self {
        Outcome::Errored(reason.to_string().into())
    }

    pub fn rejected(reason: impl fmt::Display) -> Self {
        Outcome::Rejected(reason.to_string().into())
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Delivered | Outcome::Filtered)
    }

    /// The failure reason, if any.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Errored(r) | Outcome::Rejected(r) => Some(r),
            _ => None,
        }
    }

    fn severity(&self) -> u8 {
        match self {
            Outcome::Filtered => 0,
            Outcome::Delivered => 1,
            Outcome::Errored(_) => 2,
            Outcome::Rejected(_) => 3,
        }
    }
}

/// Called once with the merged outcome and the messages a failed writer handed back.
type Callback = Box<dyn FnOnce(Outcome, Option<Batch>) + Send>;

struct Shared {
    state: Mutex<State>,
    reply: Option<ReplySlot>,
}

struct State {
    outcome: Option<Outcome>,
    callback: Option<Callback>,
    returned: Option<Batch>,
}

/// Where a synchronous source (an HTTP request waiting for its answer) receives the
/// messages a `sync_response` processor set, or else as the first output delivered them.
#[derive(Clone, Debug)]
pub struct ReplySlot {
    batch: Arc<Mutex<Option<Batch>>>,
    /// Whether outputs reply too; a source that answers only with what a processor set
    /// spares the outputs a copy of every batch.
    from_outputs: bool,
}

impl Default for ReplySlot {
    fn default() -> Self {
        ReplySlot::new()
    }
}

impl ReplySlot {
    pub fn new() -> Self {
        ReplySlot {
            batch: Default::default(),
            from_outputs: true,
        }
    }

    /// A slot only a `sync_response` processor fills.
    pub fn for_processors() -> Self {
        ReplySlot {
            from_outputs: false,
            ..ReplySlot::new()
        }
    }

    /// Keeps `batch` unless an earlier processor or output already replied.
    pub fn offer(&self, batch: &[super::Message]) {
        let mut slot = self.batch.lock();
        if slot.is_none() {
            *slot = Some(batch.to_vec());
        }
    }

    pub fn take(&self) -> Option<Batch> {
        self.batch.lock().take()
    }

    /// Runs `fut` (the pipeline's processors for one transaction) with `slot` as the
    /// reply slot [`ReplySlot::offer_current`] reaches: processors see batches, not acks,
    /// so the slot travels with the task instead.
    pub async fn scope<F: std::future::Future>(slot: Option<ReplySlot>, fut: F) -> F::Output {
        CURRENT_REPLY.scope(slot, fut).await
    }

    /// Offers `batch` to the reply slot of the transaction being processed; false when
    /// there is none (the input does not answer synchronously).
    pub fn offer_current(batch: &[super::Message]) -> bool {
        CURRENT_REPLY
            .try_with(|slot| match slot {
                Some(slot) => {
                    slot.offer(batch);
                    true
                }
                None => false,
            })
            .unwrap_or(false)
    }
}

tokio::task_local! {
    static CURRENT_REPLY: Option<ReplySlot>;
}

impl Shared {
    fn new(callback: Callback, reply: Option<ReplySlot>) -> Arc<Self> {
        Arc::new(Shared {
            state: Mutex::new(State {
                outcome: None,
                callback: Some(callback),
                returned: None,
            }),
            reply,
        })
    }

    fn merge(&self, outcome: Outcome, returned: Option<Batch>) {
        let mut state = self.state.lock();
        let worse = match &state.outcome {
            None => true,
            // A delivery anywhere outranks a filter elsewhere: the message did go out.
            Some(cur) => outcome.severity() > cur.severity(),
        };
        if worse {
            state.outcome = Some(outcome);
        }
        if state.returned.is_none() {
            state.returned = returned;
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        if let Some(callback) = state.callback.take() {
            let outcome = state.outcome.take().unwrap_or(Outcome::Delivered);
            callback(outcome, state.returned.take());
        }
    }
}

/// A counted acknowledgement handle; see the module docs.
pub struct Ack {
    shared: Option<Arc<Shared>>,
}

impl Ack {
    /// An ack whose last resolution calls `callback` once with the merged outcome.
    pub fn new(callback: impl FnOnce(Outcome) + Send + 'static) -> Self {
        Ack {
            shared: Some(Shared::new(Box::new(move |o, _| callback(o)), None)),
        }
    }

    /// An ack whose callback also receives the messages a writer handed back with a
    /// failure ([`Ack::resolve_returning`]), so that a source that sends failed messages
    /// again need not keep a copy. With `reply`, it also collects the delivered messages
    /// into that slot.
    pub fn returning(
        callback: impl FnOnce(Outcome, Option<Batch>) + Send + 'static,
        reply: Option<ReplySlot>,
    ) -> Self {
        Ack {
            shared: Some(Shared::new(Box::new(callback), reply)),
        }
    }

    /// Called by outputs after a successful write: a waiting synchronous source answers
    /// with these messages.
    pub fn offer_reply(&self, batch: &[super::Message]) {
        if let Some(slot) = self.reply_slot().filter(|s| s.from_outputs) {
            slot.offer(batch);
        }
    }

    /// The slot a synchronous source waits on, if any.
    pub fn reply_slot(&self) -> Option<&ReplySlot> {
        self.shared.as_ref().and_then(|s| s.reply.as_ref())
    }

    /// An ack nobody waits for (tests, benchmarks, sources without acknowledgement).
    pub fn noop() -> Self {
        Ack::new(|_| {})
    }

    /// An ack whose outcome arrives on the returned receiver.
    pub fn channel() -> (Self, oneshot::Receiver<Outcome>) {
        let (tx, rx) = oneshot::channel();
        (
            Ack::new(move |o| {
                let _ = tx.send(o);
            }),
            rx,
        )
    }

    /// Resolves this holder. The input hears the worst outcome once every holder resolved.
    pub fn resolve(mut self, outcome: Outcome) {
        if let Some(shared) = self.shared.take() {
            shared.merge(outcome, None);
        }
    }

    /// Resolves this holder with a failure and hands back the messages it carried, as
    /// they came (only a writer that received them unchanged from the input may).
    pub fn resolve_returning(mut self, outcome: Outcome, messages: Batch) {
        if let Some(shared) = self.shared.take() {
            shared.merge(outcome, Some(messages));
        }
    }
}

impl Clone for Ack {
    fn clone(&self) -> Self {
        Ack {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.merge(
                Outcome::errored("message dropped before it was delivered"),
                None,
            );
        }
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack")
            .field("resolved", &self.shared.is_none())
            .finish()
    }
}

/// A batch travelling through the graph with the acknowledgement of the input it came from.
#[derive(Debug)]
pub struct Transaction {
    pub batch: Batch,
    pub ack: Ack,
}

impl Transaction {
    pub fn new(batch: Batch, ack: Ack) -> Self {
        Transaction { batch, ack }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reply_slot_keeps_the_first_offer() {
        let slot = ReplySlot::new();
        let (tx, rx) = oneshot::channel();
        let ack = Ack::returning(
            move |o, _| {
                let _ = tx.send(o);
            },
            Some(slot.clone()),
        );
        ack.offer_reply(&[super::super::Message::new("first")]);
        ack.offer_reply(&[super::super::Message::new("second")]);
        ack.resolve(Outcome::Delivered);
        assert_eq!(rx.await.unwrap(), Outcome::Delivered);
        assert_eq!(&slot.take().unwrap()[0].payload()[..], b"first");
    }

    #[tokio::test]
    async fn last_holder_fires_once_with_worst_outcome() {
        let (ack, rx) = Ack::channel();
        let a2 = ack.clone();
        let a3 = ack.clone();
        ack.resolve(Outcome::Delivered);
        a2.resolve(Outcome::errored("boom"));
        a3.resolve(Outcome::Delivered);
        assert_eq!(rx.await.unwrap(), Outcome::errored("boom"));
    }

    #[test]
    fn a_failed_writer_hands_the_messages_back() {
        let got = Arc::new(Mutex::new(None));
        let seen = got.clone();
        let ack = Ack::returning(move |o, back| *seen.lock() = Some((o, back)), None);
        let other = ack.clone();
        ack.resolve_returning(
            Outcome::errored("down"),
            vec![super::super::Message::new("a")],
        );
        // A later holder's messages do not replace the first ones.
        other.resolve_returning(
            Outcome::errored("down"),
            vec![super::super::Message::new("b")],
        );
        let (outcome, back) = got.lock().take().expect("callback ran");
        assert_eq!(outcome, Outcome::errored("down"));
        assert_eq!(&back.expect("messages back")[0].payload()[..], b"a");
    }

    #[test]
    fn plain_resolutions_hand_nothing_back() {
        let got = Arc::new(Mutex::new(None));
        let seen = got.clone();
        let ack = Ack::returning(move |o, back| *seen.lock() = Some((o, back)), None);
        ack.resolve(Outcome::errored("down"));
        let (outcome, back) = got.lock().take().expect("callback ran");
        assert_eq!(outcome, Outcome::errored("down"));
        assert!(back.is_none());
    }

    #[tokio::test]
    async fn dropping_unresolved_is_a_failure() {
        let (ack, rx) = Ack::channel();
        let other = ack.clone();
        other.resolve(Outcome::Delivered);
        drop(ack);
        assert!(!rx.await.unwrap().is_success());
    }

    #[tokio::test]
    async fn delivered_outranks_filtered() {
        let (ack, rx) = Ack::channel();
        let f = ack.clone();
        f.resolve(Outcome::Filtered);
        ack.resolve(Outcome::Delivered);
        assert_eq!(rx.await.unwrap(), Outcome::Delivered);
    }

    #[tokio::test]
    async fn rejected_outranks_errored() {
        let (ack, rx) = Ack::channel();
        ack.clone().resolve(Outcome::rejected("bad"));
        ack.resolve(Outcome::errored("later"));
        assert_eq!(rx.await.unwrap(), Outcome::rejected("bad"));
    }
}
