//! `fallback`: tries outputs in order until one confirms (the dead-letter pattern). Each
//! later output sees why the previous failed in the `fallback_error` metadata.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::{indexed, BuildOutput, OutputBuild, OutputConfig};
use crate::component::registry::Spec;
use crate::component::{
    deliver_and_wait, BuildContext, BuildError, ComponentSpec, Example, Kind, Router,
};
use crate::message::{Outcome, Transaction};

/// The outputs, in the order they are tried.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct FallbackConfig(pub Vec<OutputConfig>);

impl Spec for FallbackConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "fallback",
        kind: Kind::Output,
        summary: "Tries outputs in order until one confirms: the dead-letter pattern.",
        examples: &[Example {
            title: "A webhook, and a file for what it refuses",
            yaml: "input:\n  stdin: {}\noutput:\n  fallback:\n    - http_client: {url: http://127.0.0.1:8080/hook, retries: 2}\n    - file: {path: ./dead-letters.log}\n",
        }],
    };
}

impl BuildOutput for FallbackConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        if self.0.len() < 2 {
            return Err(cx.error("a fallback needs at least two outputs"));
        }
        Ok(OutputBuild::Router(
            Box::new(Fallback),
            indexed("", &self.0),
        ))
    }
}

pub struct Fallback;

#[async_trait]
impl Router for Fallback {
    async fn route(&mut self, t: Transaction, children: &[mpsc::Sender<Transaction>]) {
        let mut batch = t.batch;
        let mut last = Outcome::errored("no output tried");
        for child in children {
            last = deliver_and_wait(child, batch.clone()).await;
            if last.is_success() {
                t.ack.resolve(last);
                return;
            }
            let reason = last.reason().unwrap_or_default().to_owned();
            for m in &mut batch {
                m.set_meta("fallback_error", reason.as_str());
            }
        }
        t.ack.resolve(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Ack, Message};

    #[tokio::test]
    async fn second_output_gets_the_reason() {
        let (a_tx, mut a_rx) = mpsc::channel(1);
        let (b_tx, mut b_rx) = mpsc::channel(1);
        let (ack, done) = Ack::channel();
        tokio::spawn(async move {
            Fallback
                .route(
                    Transaction::new(vec![Message::new("x")], ack),
                    &[a_tx, b_tx],
                )
                .await;
        });
        a_rx.recv()
            .await
            .unwrap()
            .ack
            .resolve(Outcome::errored("first down"));
        let t = b_rx.recv().await.unwrap();
        assert_eq!(
            t.batch[0].meta_str("fallback_error").as_deref(),
            Some("first down")
        );
        t.ack.resolve(Outcome::Delivered);
        assert_eq!(done.await.unwrap(), Outcome::Delivered);
    }

    #[test]
    fn one_output_is_refused() {
        let cfg: FallbackConfig = serde_yaml::from_str("[{drop: {}}]").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_err());
    }
}
