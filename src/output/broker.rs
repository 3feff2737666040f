//! `broker` output: sends messages to several outputs by a pattern.
//!
//! - `fan_out`: every output gets every message, concurrently; delivered when all confirmed.
//! - `fan_out_sequential`: every output in order, each after the previous confirmed.
//! - `round_robin`: each message to the next output in turn.
//! - `greedy`: each message to whichever output is free first.

use async_trait::async_trait;
use futures::future::select_all;
use futures::FutureExt;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::{indexed, BuildOutput, OutputBuild, OutputConfig};
use crate::component::registry::Spec;
use crate::component::{
    deliver_and_wait, BuildContext, BuildError, ComponentSpec, Example, Kind, Router,
};
use crate::message::{Outcome, Transaction};

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    #[default]
    FanOut,
    FanOutSequential,
    RoundRobin,
    Greedy,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrokerOutputConfig {
    /// How messages are spread: fan_out, fan_out_sequential, round_robin or greedy.
    #[serde(default)]
    pub pattern: Pattern,
    /// The outputs.
    pub outputs: Vec<OutputConfig>,
}

impl Spec for BrokerOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "broker",
        kind: Kind::Output,
        summary: "Sends messages to several outputs: fan out, in sequence, round robin or greedy.",
        examples: &[Example {
            title: "Print and keep a copy",
            yaml: "input:\n  stdin: {}\noutput:\n  broker:\n    pattern: fan_out\n    outputs:\n      - stdout: {}\n      - file: {path: ./copy.log}\n",
        }],
    };
}

impl BuildOutput for BrokerOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        if self.outputs.is_empty() {
            return Err(cx.error("`outputs` is empty: a broker needs at least one output"));
        }
        Ok(OutputBuild::Router(
            Box::new(Broker {
                pattern: self.pattern,
                next: 0,
            }),
            indexed("outputs", &self.outputs),
        ))
    }
}

pub struct Broker {
    pattern: Pattern,
    next: usize,
}

#[async_trait]
impl Router for Broker {
    async fn route(&mut self, t: Transaction, children: &[mpsc::Sender<Transaction>]) {
        match self.pattern {
            Pattern::FanOut => {
                // Each child holds a clone of the ack: the input hears once all confirmed.
                for child in children {
                    let copy = Transaction::new(t.batch.clone(), t.ack.clone());
                    let _ = child.send(copy).await;
                }
                t.ack.resolve(Outcome::Delivered);
            }
            Pattern::FanOutSequential => {
                for child in children {
                    let outcome = deliver_and_wait(child, t.batch.clone()).await;
                    if !outcome.is_success() {
                        t.ack.resolve(outcome);
                        return;
                    }
                }
                t.ack.resolve(Outcome::Delivered);
            }
            Pattern::RoundRobin => {
                let child = &children[self.next % children.len()];
                self.next = self.next.wrapping_add(1);
                let _ = child.send(t).await;
            }
            Pattern::Greedy => {
                let reserves = children.iter().map(|c| c.reserve().boxed());
                match select_all(reserves).await {
                    (Ok(permit), _, _) => permit.send(t),
                    (Err(_), _, _) => t.ack.resolve(Outcome::errored("output is shut down")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Ack, Message};

    fn channels(
        n: usize,
    ) -> (
        Vec<mpsc::Sender<Transaction>>,
        Vec<mpsc::Receiver<Transaction>>,
    ) {
        (0..n).map(|_| mpsc::channel(8)).unzip()
    }

    #[tokio::test]
    async fn round_robin_takes_turns() {
        let (tx, mut rx) = channels(3);
        let mut b = Broker {
            pattern: Pattern::RoundRobin,
            next: 0,
        };
        for i in 0..6 {
            b.route(
                Transaction::new(vec![Message::new(i.to_string())], Ack::noop()),
                &tx,
            )
            .await;
        }
        for (i, r) in rx.iter_mut().enumerate() {
            let a = r.recv().await.unwrap();
            let b = r.recv().await.unwrap();
            assert_eq!(&a.batch[0].payload()[..], i.to_string().as_bytes());
            assert_eq!(&b.batch[0].payload()[..], (i + 3).to_string().as_bytes());
            a.ack.resolve(Outcome::Delivered);
            b.ack.resolve(Outcome::Delivered);
        }
    }

    #[tokio::test]
    async fn fan_out_acks_after_every_output() {
        let (tx, mut rx) = channels(2);
        let mut b = Broker {
            pattern: Pattern::FanOut,
            next: 0,
        };
        let (ack, done) = Ack::channel();
        b.route(Transaction::new(vec![Message::new("x")], ack), &tx)
            .await;
        let first = rx[0].recv().await.unwrap();
        let second = rx[1].recv().await.unwrap();
        first.ack.resolve(Outcome::Delivered);
        second.ack.resolve(Outcome::errored("down"));
        assert_eq!(done.await.unwrap(), Outcome::errored("down"));
    }

    #[tokio::test]
    async fn fan_out_sequential_stops_at_the_first_failure() {
        let (tx, mut rx) = channels(2);
        let (ack, done) = Ack::channel();
        let route = tokio::spawn(async move {
            let mut b = Broker {
                pattern: Pattern::FanOutSequential,
                next: 0,
            };
            b.route(Transaction::new(vec![Message::new("x")], ack), &tx)
                .await;
        });
        rx[0]
            .recv()
            .await
            .unwrap()
            .ack
            .resolve(Outcome::errored("no"));
        route.await.unwrap();
        assert!(rx[1].try_recv().is_err());
        assert_eq!(done.await.unwrap(), Outcome::errored("no"));
    }

    #[tokio::test]
    async fn greedy_picks_a_free_output() {
        let (a_tx, mut a_rx) = mpsc::channel(1);
        let (b_tx, mut b_rx) = mpsc::channel(1);
        // Fill the first output.
        a_tx.send(Transaction::new(vec![], Ack::noop()))
            .await
            .unwrap();
        let mut g = Broker {
            pattern: Pattern::Greedy,
            next: 0,
        };
        g.route(
            Transaction::new(vec![Message::new("x")], Ack::noop()),
            &[a_tx, b_tx],
        )
        .await;
        assert_eq!(b_rx.recv().await.unwrap().batch.len(), 1);
        assert!(a_rx.recv().await.unwrap().batch.is_empty());
    }
}
