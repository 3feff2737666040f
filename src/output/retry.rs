//! `retry`: sends each batch to its output again, with backoff, until it is confirmed or
//! `max_retries` is used up. One batch at a time, so the order of messages is kept. In
//! streams posted by organisations, `max_retries: 0` is the most allowed (100), not "for
//! ever": a batch still undelivered then fails back to its input, which sends it again
//! or nacks it as it does any failure.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::warn;

use super::{BuildOutput, OutputBuild, OutputConfig};
use crate::backoff::{Backoff, BackoffConfig};
use crate::component::registry::Spec;
use crate::component::{
    deliver_and_wait, BuildContext, BuildError, ComponentSpec, Example, Kind, Router,
};
use crate::message::{Outcome, Transaction};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// The output to retry.
    pub output: Box<OutputConfig>,
    /// Attempts after the first; 0 retries until it works (in streams posted by
    /// organisations, 100 times).
    #[serde(default)]
    pub max_retries: u32,
    /// Waits between attempts.
    #[serde(default)]
    pub backoff: BackoffConfig,
}

impl Spec for RetryConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "retry",
        kind: Kind::Output,
        summary: "Retries an output with backoff until it confirms, keeping message order.",
        examples: &[Example {
            title: "Retry a webhook for up to a minute",
            yaml: "input:\n  stdin: {}\noutput:\n  retry:\n    output:\n      http_client: {url: http://127.0.0.1:8080/hook, retries: 0}\n    backoff: {initial_interval: 100ms, max_interval: 5s, max_elapsed_time: 1m}\n",
        }],
    };
}

impl BuildOutput for RetryConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        let max_retries = match self.max_retries {
            0 if cx.reach.policy.is_some() => crate::processor::retry::MAX_RETRIES,
            n => n,
        };
        Ok(OutputBuild::Router(
            Box::new(Retry {
                max_retries,
                backoff: self.backoff.clone(),
            }),
            vec![("output".to_owned(), (*self.output).clone())],
        ))
    }
}

pub struct Retry {
    max_retries: u32,
    backoff: BackoffConfig,
}

#[async_trait]
impl Router for Retry {
    async fn route(&mut self, t: Transaction, children: &[mpsc::Sender<Transaction>]) {
        let Some(child) = children.first() else {
            t.ack.resolve(Outcome::errored("retry has no output"));
            return;
        };
        let mut backoff = Backoff::new(self.backoff.clone());
        if self.max_retries > 0 {
            backoff = backoff.with_max_attempts(self.max_retries);
        }
        loop {
            let outcome = deliver_and_wait(child, t.batch.clone()).await;
            // A rejection will not change on retry.
            if outcome.is_success() || matches!(outcome, Outcome::Rejected(_)) {
                t.ack.resolve(outcome);
                return;
            }
            let Some(delay) = backoff.next_delay() else {
                t.ack.resolve(outcome);
                return;
            };
            let attempt = backoff.attempts();
            warn!(attempt, reason = outcome.reason().unwrap_or_default(), retry_in = ?delay, "Output failed; retrying.");
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Duration;
    use crate::message::{Ack, Message};

    #[tokio::test]
    async fn retries_until_success() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut r = Retry {
            max_retries: 0,
            backoff: BackoffConfig {
                initial_interval: Duration::from_millis(1),
                max_interval: Duration::from_millis(2),
                max_elapsed_time: Duration::from_secs(0),
            },
        };
        let (ack, done) = Ack::channel();
        tokio::spawn(async move {
            r.route(Transaction::new(vec![Message::new("x")], ack), &[tx])
                .await
        });
        rx.recv().await.unwrap().ack.resolve(Outcome::errored("1"));
        rx.recv().await.unwrap().ack.resolve(Outcome::errored("2"));
        rx.recv().await.unwrap().ack.resolve(Outcome::Delivered);
        assert_eq!(done.await.unwrap(), Outcome::Delivered);
    }

    #[tokio::test]
    async fn in_a_posted_stream_retries_without_a_limit_end_at_the_cap() {
        let cfg: RetryConfig = serde_yaml::from_str(
            "output: {drop: {}}\nbackoff: {initial_interval: 0s, max_interval: 0s, max_elapsed_time: 0s}\n",
        )
        .unwrap();
        let policy = crate::egress::EgressPolicy::new(&Default::default()).unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default())
            .with_egress(Some(std::sync::Arc::new(policy)));
        let Ok(OutputBuild::Router(mut r, _)) = cfg.build(&cx) else {
            panic!("retry is a router");
        };
        let (tx, mut rx) = mpsc::channel(1);
        let (ack, mut done) = Ack::channel();
        tokio::spawn(async move {
            r.route(Transaction::new(vec![Message::new("x")], ack), &[tx])
                .await
        });
        let mut attempts = 0;
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(60));
        tokio::pin!(deadline);
        let outcome = loop {
            tokio::select! {
                biased;
                outcome = &mut done => break outcome.unwrap(),
                () = &mut deadline => panic!("still retrying after {attempts} attempts"),
                Some(t) = rx.recv() => {
                    attempts += 1;
                    t.ack.resolve(Outcome::errored("down"));
                }
            }
        };
        assert_eq!(outcome, Outcome::errored("down"));
        assert_eq!(attempts, 101);
    }

    #[tokio::test]
    async fn gives_up_after_max_retries() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut r = Retry {
            max_retries: 1,
            backoff: BackoffConfig {
                initial_interval: Duration::from_millis(1),
                max_interval: Duration::from_millis(1),
                max_elapsed_time: Duration::from_secs(0),
            },
        };
        let (ack, done) = Ack::channel();
        tokio::spawn(async move {
            r.route(Transaction::new(vec![Message::new("x")], ack), &[tx])
                .await
        });
        rx.recv().await.unwrap().ack.resolve(Outcome::errored("1"));
        rx.recv().await.unwrap().ack.resolve(Outcome::errored("2"));
        assert_eq!(done.await.unwrap(), Outcome::errored("2"));
    }
}
