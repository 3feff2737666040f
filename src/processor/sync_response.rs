//! `sync_response`: sets the messages of the batch, as they are at this point, as the
//! answer a synchronous input gives its client (an `http_server` request or WebSocket
//! frame waiting for its result). The first processor or output to reply wins, so a
//! later output does not replace it. Without a waiting client it does nothing.
//! Messages pass on unchanged.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::{Batch, ReplySlot};

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncResponseConfig {}

impl Spec for SyncResponseConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "sync_response",
        kind: Kind::Processor,
        summary: "Answers a waiting HTTP client with the messages as they are here.",
        examples: &[Example {
            title: "Answer with the parsed request, store the enriched one",
            yaml: "input:\n  http_server: {path: /in}\npipeline:\n  processors:\n    - mapping: 'root.received = this'\n    - sync_response: {}\n    - mutation: 'root.stored_at = now()'\noutput:\n  drop: {}\n",
        }],
    };
}

impl BuildProcessor for SyncResponseConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(SyncResponse))
    }
}

pub struct SyncResponse;

#[async_trait]
impl Processor for SyncResponse {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        ReplySlot::offer_current(&batch);
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{batch, build, texts};

    #[tokio::test]
    async fn offers_the_batch_to_the_waiting_client() {
        let p = build::<SyncResponseConfig>("{}");
        let slot = ReplySlot::for_processors();
        let out = ReplySlot::scope(Some(slot.clone()), p.process(batch(&["a", "b"]))).await;
        assert_eq!(texts(&out[0]), vec!["a", "b"]);
        assert_eq!(texts(&slot.take().expect("a reply")), vec!["a", "b"]);
    }

    #[tokio::test]
    async fn the_first_reply_wins_and_outputs_of_a_processor_slot_do_not_reply() {
        let p = build::<SyncResponseConfig>("{}");
        let slot = ReplySlot::for_processors();
        ReplySlot::scope(Some(slot.clone()), async {
            p.process(batch(&["first"])).await;
            p.process(batch(&["second"])).await;
        })
        .await;
        assert_eq!(texts(&slot.take().unwrap()), vec!["first"]);

        let ack = crate::message::Ack::returning(|_, _| {}, Some(slot.clone()));
        ack.offer_reply(&batch(&["from an output"]));
        ack.resolve(crate::message::Outcome::Delivered);
        assert!(slot.take().is_none());
    }

    #[tokio::test]
    async fn without_a_client_it_passes_messages_on() {
        let p = build::<SyncResponseConfig>("{}");
        let out = p.process(batch(&["x"])).await;
        assert_eq!(texts(&out[0]), vec!["x"]);
    }
}
