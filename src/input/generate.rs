//! `generate`: creates messages on an interval, a fixed number of times or forever.
//!
//! Delivery: nothing to acknowledge to; a batch whose delivery failed is generated again
//! by the runtime (the same content), so nothing is lost.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::{Instant, MissedTickBehavior};

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::config::MappingText;
use crate::duration::Duration;
use crate::message::Message;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerateConfig {
    /// A mapping that builds each message (`this` is null; `root`, `meta`, functions such
    /// as `uuid_v4()`, `now()` and `count("name")` are available).
    #[serde(default)]
    pub mapping: Option<MappingText>,
    /// A fixed content for every message, instead of a mapping.
    #[serde(default)]
    pub payload: Option<String>,
    /// How many messages to create, then stop (the last batch may be smaller than
    /// `batch_size`); 0 means no end. A message a mapping deletes counts too.
    #[serde(default)]
    pub count: u64,
    /// Wait between two batches; `0s` creates them as fast as the stream takes them.
    #[serde(default = "default_interval")]
    pub interval: Duration,
    /// Messages per batch.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
}

fn default_interval() -> Duration {
    Duration::from_secs(1)
}

fn default_batch_size() -> usize {
    1
}

impl Spec for GenerateConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "generate",
        kind: Kind::Input,
        summary: "Creates messages on an interval, a fixed number of times or forever.",
        examples: &[
            Example {
                title: "Three greetings, one a second",
                yaml: "input:\n  generate:\n    payload: hello\n    count: 3\n    interval: 1s\noutput:\n  stdout: {}\n",
            },
            Example {
                title: "Numbered JSON documents",
                yaml: "input:\n  generate:\n    mapping: |\n      root.id = count(\"ids\")\n      root.at = now()\n    interval: 100ms\noutput:\n  stdout: {}\n",
            },
        ],
    };
}

impl BuildInput for GenerateConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        if self.batch_size == 0 {
            return Err(cx.error("`batch_size` must be at least 1"));
        }
        let content = match (&self.mapping, &self.payload) {
            (Some(_), Some(_)) => {
                return Err(cx.error("set either `mapping` or `payload`, not both"))
            }
            (Some(m), None) => Content::Mapping(m.clone()),
            (None, Some(p)) => Content::Payload(bytes::Bytes::from(p.clone())),
            (None, None) => return Err(cx.error("set `mapping` (or a fixed `payload`)")),
        };
        Ok(InputBuild::Leaf(Box::new(Generate {
            content,
            remaining: (self.count > 0).then_some(self.count),
            interval: self.interval.0,
            batch_size: self.batch_size,
            ticker: None,
        })))
    }
}

enum Content {
    Payload(bytes::Bytes),
    Mapping(MappingText),
}

pub struct Generate {
    content: Content,
    remaining: Option<u64>,
    interval: StdDuration,
    batch_size: usize,
    ticker: Option<tokio::time::Interval>,
}

#[async_trait]
impl Input for Generate {
    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        if self.remaining == Some(0) {
            return Err(ConnectorError::end_of_input());
        }
        if !self.interval.is_zero() {
            let interval = self.interval;
            let ticker = self.ticker.get_or_insert_with(|| {
                let mut t = tokio::time::interval_at(Instant::now(), interval);
                t.set_missed_tick_behavior(MissedTickBehavior::Delay);
                t
            });
            ticker.tick().await;
        }
        // With a `count`, the last batch holds only what is left of it.
        let size = match &mut self.remaining {
            Some(left) => {
                let size = (*left).min(self.batch_size as u64);
                *left -= size;
                size as usize
            }
            None => self.batch_size,
        };
        let mut batch = Vec::with_capacity(size);
        for _ in 0..size {
            match &self.content {
                Content::Payload(p) => batch.push(Message::new(p.clone())),
                Content::Mapping(m) => match m.mapping().generate() {
                    Ok(Some(msg)) => batch.push(msg),
                    Ok(None) => {}
                    // A mapping that fails for every message would fail forever: report
                    // it as a read error (logged and counted) rather than emit junk.
                    Err(e) => {
                        return Err(ConnectorError::transient(format!(
                            "generate mapping failed: {e}"
                        )))
                    }
                },
            }
        }
        Ok(ReadBatch::unacked(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(yaml: &str) -> Box<dyn Input> {
        let cfg: GenerateConfig = serde_yaml::from_str(yaml).unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        match cfg.build(&cx).unwrap() {
            InputBuild::Leaf(i) => i,
            InputBuild::Merge(_) => panic!("generate is a leaf"),
        }
    }

    #[tokio::test]
    async fn stops_after_count_messages() {
        let mut g = build("{payload: hi, count: 7, interval: 0s, batch_size: 3}");
        for want in [3, 3, 1] {
            let r = g.read().await.unwrap();
            assert_eq!(r.batch.len(), want);
            assert_eq!(&r.batch[0].payload()[..], b"hi");
        }
        assert_eq!(
            g.read().await.err().map(|e| e.kind),
            Some(crate::component::ErrorKind::EndOfInput)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_interval() {
        let mut g = build("{payload: x, interval: 10s}");
        let start = Instant::now();
        g.read().await.unwrap();
        g.read().await.unwrap();
        assert!(start.elapsed() >= StdDuration::from_secs(10));
    }

    #[tokio::test]
    async fn mapping_builds_each_message() {
        let mut g = build(
            "{mapping: 'root.n = count(\"generate-input-unit-test\")', interval: 0s, count: 2}",
        );
        let a = g.read().await.unwrap();
        let b = g.read().await.unwrap();
        assert_eq!(&a.batch[0].payload()[..], br#"{"n":1}"#);
        assert_eq!(&b.batch[0].payload()[..], br#"{"n":2}"#);
    }

    #[test]
    fn payload_and_mapping_together_are_refused() {
        let cfg: GenerateConfig =
            serde_yaml::from_str("{payload: x, mapping: 'root = 1'}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_err());
    }

    #[test]
    fn zero_batch_size_is_refused() {
        let cfg: GenerateConfig = serde_yaml::from_str("{payload: x, batch_size: 0}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_err());
    }
}
