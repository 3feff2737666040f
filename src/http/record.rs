//! What a hub may catch its clients up from: a broker's record of its messages by
//! position. Apart from the catch-up itself (`history`), which uses the hub, so that the
//! hub can hold a record without the two needing each other.

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::message::Message;

/// A broker's record of a hub's messages, by position.
pub trait History: Send + Sync {
    /// The messages after position `after`, oldest first, through the newest there is
    /// now, each with its position under [`History::position_key`].
    fn after(&self, after: u64) -> BoxFuture<'static, Result<Past, HistoryError>>;

    /// The metadata key of the positions it reads by: a hub takes the history only when
    /// its ids come from the same key.
    fn position_key(&self) -> &str;
}

/// What the broker still holds after a position.
pub struct Past {
    /// Whether it holds every message after the position (its retention dropped none).
    pub complete: bool,
    pub messages: BoxStream<'static, Result<Message, HistoryError>>,
}

/// Why a broker's record could not be read back (the resuming client then gets the
/// `gap` notice).
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The stream may not connect to the broker.
    #[error(transparent)]
    Refused(#[from] crate::egress::EgressError),
    /// What the broker holds has no positions to read by (a topic of several partitions).
    #[error("{0}")]
    NoPositions(String),
    /// Talking to the broker failed.
    #[error("{what}: {source}")]
    Failed {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl HistoryError {
    /// A failure of step `what`, caused by `source`.
    pub fn failed(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        HistoryError::Failed {
            what,
            source: source.into(),
        }
    }
}
