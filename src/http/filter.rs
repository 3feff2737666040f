//! A hub's per-subscriber filter: a check in the mapping language over each message
//! and the subscriber (`this.tenant == @caller.claims.tenant`), run in the hub for each
//! connected client, so one stream (one broker consumer) serves many clients that each
//! see only their own events.
//!
//! The check sees the message as `this`, its metadata as usual, and the subscriber as
//! the metadata key `caller` (see [`super::caller`]), which hides a message metadata key
//! of that name. A check that fails (a payload that is not JSON, a value that is not a
//! bool) withholds the message from that client: a filter keeps tenants apart, so it
//! fails closed.

use std::sync::Arc;

use crate::mapping::budget::Guard;
use crate::mapping::{Mapping, MappingError};
use crate::message::{Message, Metadata};
use crate::value::Value;

/// The metadata key the subscriber is seen under.
pub const CALLER_KEY: &str = "caller";

/// A compiled filter; two are the same when their sources are.
#[derive(Clone)]
pub struct Filter {
    source: Arc<str>,
    mapping: Arc<Mapping>,
}

impl Filter {
    pub fn new(source: &str, mapping: Arc<Mapping>) -> Self {
        Filter {
            source: source.into(),
            mapping,
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Holds the checks of one publish, over all its subscribers, to one run's time when
    /// the filter arrived as data: a slow filter then withholds messages from its own
    /// subscribers instead of holding the thread (and the hub) for each of them in turn.
    /// The guard's deadline applies to every check made while it lives.
    pub fn publish_budget(&self) -> Guard {
        let limit = self
            .mapping
            .is_budgeted()
            .then_some(crate::mapping::budget::TENANT);
        crate::mapping::budget::start(limit)
    }

    /// The view of `msg` that subscribers are matched against: its metadata with room
    /// for the subscriber. Made once per message, whatever the number of subscribers.
    pub fn view<'m>(&self, msg: &'m Message) -> View<'m> {
        let mut meta = msg.metadata().clone();
        meta.insert(CALLER_KEY.to_owned(), Value::Null);
        View { msg, meta }
    }

    /// Whether the subscriber `caller` gets the message of `view`. The caller is lent
    /// to the view for the check and given back, so nothing is copied per subscriber.
    pub fn admits(&self, view: &mut View<'_>, caller: &mut Value) -> Result<bool, MappingError> {
        let slot = view.slot();
        std::mem::swap(slot, caller);
        let admitted = self.mapping.check_with_meta(view.msg, &view.meta);
        std::mem::swap(view.slot(), caller);
        admitted
    }
}

impl Filter {
    /// Whether the client `caller` gets the message of `view`, counted into `tally`.
    /// Once `budget` (one [`publish_budget`](Self::publish_budget)) is spent, nothing
    /// more is checked: the rest are withheld as failed without running a step.
    pub fn decide(
        &self,
        view: &mut View<'_>,
        caller: &mut Value,
        budget: &Guard,
        tally: &mut Tally,
    ) -> bool {
        if budget.expired() {
            tally.failed += 1;
            return false;
        }
        tally.count(self.admits(view, caller))
    }
}

impl PartialEq for Filter {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({:?})", self.source)
    }
}

/// A message as the filter sees it (see [`Filter::view`]).
pub struct View<'m> {
    msg: &'m Message,
    meta: Metadata,
}

impl View<'_> {
    fn slot(&mut self) -> &mut Value {
        self.meta.entry(CALLER_KEY.to_owned()).or_default()
    }
}

/// What filtering one publish did to one subscriber, summed for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Messages withheld because the check said no.
    pub withheld: u64,
    /// Messages withheld because the check failed.
    pub failed: u64,
}

impl Tally {
    /// Counts what a check gave: true when the message is admitted.
    fn count(&mut self, checked: Result<bool, MappingError>) -> bool {
        match checked {
            Ok(true) => true,
            Ok(false) => {
                self.withheld += 1;
                false
            }
            Err(_) => {
                self.failed += 1;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::Env;

    fn filter(src: &str) -> Filter {
        Filter::new(
            src,
            Arc::new(Mapping::compile(src, &Env::default()).unwrap()),
        )
    }

    fn caller(tenant: &str) -> Value {
        let json = serde_json::json!({"claims": {"tenant": tenant}, "query": {}});
        Value::from(json)
    }

    #[test]
    fn each_subscriber_is_matched_as_itself_and_kept_whole() {
        let f = filter("this.tenant == @caller.claims.tenant");
        let msg = Message::new(r#"{"tenant":"a"}"#).with_meta("caller", "spoofed");
        let mut view = f.view(&msg);
        let (mut a, mut b) = (caller("a"), caller("b"));
        assert!(f.admits(&mut view, &mut a).unwrap());
        assert!(!f.admits(&mut view, &mut b).unwrap());
        // The callers are given back as they were.
        assert_eq!(a, caller("a"));
        assert_eq!(b, caller("b"));
        // The message's other metadata is there as usual.
        let f = filter(r#"@kind == "x" && metadata("caller").claims.tenant == "a""#);
        let msg = Message::new("{}").with_meta("kind", "x");
        let mut view = f.view(&msg);
        assert!(f.admits(&mut view, &mut a).unwrap());
    }

    #[test]
    fn a_check_that_cannot_be_made_is_an_error_not_a_match() {
        let f = filter("this.tenant == @caller.claims.tenant");
        let msg = Message::new("not json");
        let mut view = f.view(&msg);
        assert!(f.admits(&mut view, &mut caller("a")).is_err());
        let f = filter("this.tenant");
        let msg = Message::new(r#"{"tenant":"a"}"#);
        let mut view = f.view(&msg);
        let err = f.admits(&mut view, &mut caller("a")).unwrap_err();
        assert!(err.to_string().contains("must give a bool"), "{err}");
    }
}
