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
    fn after(&self, after: u64) -> BoxFuture<'static, Result<Past, String>>;

    /// The metadata key of the positions it reads by: a hub takes the history only when
    /// its ids come from the same key.
    fn position_key(&self) -> &str;
}

/// What the broker still holds after a position.
pub struct Past {
    /// Whether it holds every message after the position (its retention dropped none).
    pub complete: bool,
    pub messages: BoxStream<'static, Result<Message, String>>,
}
