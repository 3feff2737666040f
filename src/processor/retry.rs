//! `retry`: runs its processors on each message and, while any result is marked with
//! an error, runs them again on the message as it first came in, after a growing
//! backoff, until they succeed, `max_retries` is used up (0: no limit, except in
//! streams posted by organisations, where 0 is [`MAX_RETRIES`]) or
//! `backoff.max_elapsed_time` has passed (0s: never). Then the results pass on as they are (errors
//! included, for `catch`). Errors a message carries on arrival are cleared first, so a
//! failure from earlier does not loop forever. Each result gets `retry_count` metadata
//! (the failed attempts, as Benthos counts them: `max_retries: 3` means at most
//! three attempts) and `backoff_duration` (nanoseconds waited). Messages are retried one
//! after another, or all at once with `parallel`.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::chain::{non_empty, Chain};
use super::{BuildProcessor, ProcessorConfig};
use crate::backoff::{Backoff, BackoffConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::duration::Duration;
use crate::message::{Batch, Message};

/// The most failed attempts `max_retries` may allow, and those of a posted stream's
/// `retry` that gives none: with `max_elapsed_time: 0s` and waits of 0s, nothing else
/// would end the loop.
pub const MAX_RETRIES: u32 = 100;

/// The waits between attempts.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryBackoff {
    /// Wait before the first retry; it doubles with each retry.
    pub initial_interval: Duration,
    /// Longest wait between two attempts.
    pub max_interval: Duration,
    /// Stop retrying once this much time has been spent waiting (0s: never).
    pub max_elapsed_time: Duration,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff {
            initial_interval: Duration::from_millis(500),
            max_interval: Duration::from_secs(10),
            max_elapsed_time: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    #[serde(default)]
    pub backoff: RetryBackoff,
    /// The processors to run until they succeed.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
    /// Retry the messages of a batch all at once rather than one after another.
    #[serde(default)]
    pub parallel: bool,
    /// Most failed attempts per message before giving up (0: until `max_elapsed_time`;
    /// in streams posted by organisations, at most 100).
    #[serde(default)]
    pub max_retries: u32,
}

impl Spec for RetryConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "retry",
        kind: Kind::Processor,
        summary: "Runs processors again, with backoff, until they succeed.",
        examples: &[Example {
            title: "Call a flaky service up to five times",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - retry:\n        max_retries: 5\n        backoff: {initial_interval: 100ms, max_interval: 2s}\n        processors:\n          - http: {url: 'http://127.0.0.1:8080/enrich'}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for RetryConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.processors.is_empty() {
            return Err(cx.error("`retry` needs at least one processor"));
        }
        let b = &self.backoff;
        if b.max_interval.0 < b.initial_interval.0 {
            return Err(cx.error(format!(
                "`backoff.max_interval` ({}) is shorter than `backoff.initial_interval` ({})",
                b.max_interval, b.initial_interval
            )));
        }
        Ok(Box::new(Retry {
            backoff: BackoffConfig {
                initial_interval: b.initial_interval,
                max_interval: b.max_interval,
                max_elapsed_time: b.max_elapsed_time,
            },
            // A posted stream's retries end: 0 there is the most allowed, not "for ever".
            max_retries: match self.max_retries {
                0 if cx.reach.policy.is_some() => MAX_RETRIES,
                n => n,
            },
            parallel: self.parallel,
            chain: Chain::build(&self.processors, cx, &format!("{}.processors", cx.id.path))?,
            shutdown: cx.lifecycle.shutdown.clone(),
        }))
    }
}

pub struct Retry {
    backoff: BackoffConfig,
    max_retries: u32,
    parallel: bool,
    chain: Chain,
    shutdown: CancellationToken,
}

impl Retry {
    async fn wait(&self, delay: StdDuration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = self.shutdown.cancelled() => false,
        }
    }

    async fn attempt(&self, mut msg: Message) -> Batch {
        msg.clear_error();
        let mut backoff = Backoff::new(self.backoff.clone());
        let mut failures: u32 = 0;
        let mut waited = StdDuration::ZERO;
        let mut out = loop {
            let out = self.chain.run_flat(vec![msg.clone()]).await;
            if !out.iter().any(|m| m.error().is_some()) {
                break out;
            }
            failures += 1;
            if self.max_retries > 0 && failures >= self.max_retries {
                break out;
            }
            // Out of time, or stopping: the failed results go on for `catch`.
            let Some(delay) = backoff.next_delay() else {
                break out;
            };
            if !self.wait(delay).await {
                break out;
            }
            waited += delay;
        };
        for m in &mut out {
            m.set_meta("retry_count", i64::from(failures));
            m.set_meta(
                "backoff_duration",
                i64::try_from(waited.as_nanos()).unwrap_or(i64::MAX),
            );
        }
        out
    }
}

#[async_trait]
impl Processor for Retry {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let out: Vec<Batch> = if self.parallel {
            futures::future::join_all(batch.into_iter().map(|m| self.attempt(m))).await
        } else {
            let mut out = Vec::with_capacity(batch.len());
            for m in batch {
                out.push(self.attempt(m).await);
            }
            out
        };
        non_empty(out.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{batch, build, build_error, texts};
    use std::time::Instant;

    // The first attempt fails on a fresh counter; later ones see it grown.
    const FLAKY: &str = "processors:\n  - mapping: |\n      root = if count(\"retry-%s\".format(this.id)) < this.fails { throw(\"not yet\") } else { this }\n";

    #[tokio::test]
    async fn retries_until_success_with_the_original_message() {
        let p = build::<RetryConfig>(&format!(
            "backoff: {{initial_interval: 10ms, max_interval: 20ms}}\n{FLAKY}"
        ));
        let mut m = Message::new(r#"{"id":"a","fails":3}"#);
        m.set_error("from before");
        let out = p.process(vec![m]).await;
        assert_eq!(texts(&out[0]), vec![r#"{"fails":3,"id":"a"}"#]);
        assert!(out[0][0].error().is_none());
        assert_eq!(out[0][0].meta_str("retry_count").as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn gives_up_after_max_retries_and_passes_the_error() {
        let p = build::<RetryConfig>(&format!(
            "max_retries: 2\nbackoff: {{initial_interval: 1ms, max_interval: 1ms}}\n{FLAKY}"
        ));
        let out = p.process(batch(&[r#"{"id":"b","fails":100}"#])).await;
        assert!(out[0][0].error().unwrap().contains("not yet"));
        assert_eq!(out[0][0].meta_str("retry_count").as_deref(), Some("2"));
        // Two attempts in all: the counter they bumped gives 3 next.
        let next = crate::mapping::Mapping::compile(
            r#"root = count("retry-b")"#,
            &crate::mapping::Env::default(),
        )
        .unwrap()
        .query(&Message::new("{}"))
        .unwrap();
        assert_eq!(next, crate::value::Value::Int(3));
    }

    #[tokio::test]
    async fn parallel_retries_overlap() {
        let yaml = "backoff: {initial_interval: 300ms, max_interval: 300ms}\n";
        let serial = build::<RetryConfig>(&format!("{yaml}{FLAKY}"));
        let start = Instant::now();
        serial
            .process(batch(&[
                r#"{"id":"s1","fails":2}"#,
                r#"{"id":"s2","fails":2}"#,
            ]))
            .await;
        let serial_time = start.elapsed();
        let parallel = build::<RetryConfig>(&format!("parallel: true\n{yaml}{FLAKY}"));
        let start = Instant::now();
        let out = parallel
            .process(batch(&[
                r#"{"id":"p1","fails":2}"#,
                r#"{"id":"p2","fails":2}"#,
            ]))
            .await;
        assert_eq!(out[0].len(), 2);
        assert!(
            start.elapsed() + StdDuration::from_millis(100) < serial_time,
            "{:?} vs {serial_time:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn in_a_posted_stream_retries_without_a_limit_end_at_the_cap() {
        // No attempt limit, no time limit and no waits: only the cap ends it.
        let yaml = "backoff: {initial_interval: 0s, max_interval: 0s, max_elapsed_time: 0s}\nprocessors:\n  - mapping: 'root = throw(\"never\")'\n";
        let cfg: RetryConfig = serde_yaml::from_str(yaml).unwrap();
        let policy = crate::egress::EgressPolicy::new(&Default::default()).unwrap();
        let posted = crate::processor::chain::test_support::cx()
            .with_egress(Some(std::sync::Arc::new(policy)));
        let p = cfg.build(&posted).unwrap();
        let out = tokio::time::timeout(StdDuration::from_secs(60), p.process(batch(&["{}"])))
            .await
            .expect("the retries ended at their cap");
        assert!(out[0][0].error().unwrap().contains("never"));
        assert_eq!(out[0][0].meta_str("retry_count").as_deref(), Some("100"));
    }

    #[test]
    fn bad_config_is_refused() {
        let e = build_error::<RetryConfig>("processors: []\n");
        assert!(e.contains("at least one"), "{e}");
        let e = build_error::<RetryConfig>(
            "backoff: {initial_interval: 2s, max_interval: 1s}\nprocessors:\n  - noop: {}\n",
        );
        assert!(e.contains("max_interval"), "{e}");
    }
}
