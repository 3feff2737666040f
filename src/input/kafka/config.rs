//! The `kafka` input's configuration.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::component::registry::Spec;
use crate::component::{ComponentSpec, Example, Kind};
use crate::connect::kafka::{parse_topic, validate, SetupError, TopicError, TopicSpec};
use crate::connect::{SaslConfig, TlsConfig};
use crate::duration::Duration;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaInputConfig {
    /// Bootstrap brokers (`host:9092`); an entry may hold several, comma-separated.
    pub addresses: Vec<String>,
    /// Topics to consume. `name` joins the consumer group's balancing; `name:0`,
    /// `name:0-3` or `name:0,2` read those partitions only (then every entry must name
    /// partitions).
    pub topics: Vec<String>,
    /// The consumer group: its members share the partitions, and offsets are committed
    /// under its name.
    pub consumer_group: String,
    /// The client id brokers see.
    #[serde(default = "crate::connect::kafka::default_client_id")]
    pub client_id: String,
    /// Where a group without a committed offset starts: the oldest message (true) or
    /// only new ones (false).
    #[serde(default = "default_true")]
    pub start_from_oldest: bool,
    /// How often the acknowledged offsets are committed.
    #[serde(default = "default_commit_period")]
    pub commit_period: Duration,
    /// Messages of one partition read but not yet acknowledged, at most; reading pauses
    /// when a partition reaches it.
    #[serde(default = "default_checkpoint_limit")]
    pub checkpoint_limit: usize,
    /// Messages the client keeps prefetched per partition ahead of the stream; lower it
    /// to bound memory, at a cost in throughput.
    #[serde(default = "default_fetch_buffer_cap")]
    pub fetch_buffer_cap: usize,
    /// Largest batch made of messages that are already fetched.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// TLS settings.
    #[serde(default)]
    pub tls: TlsConfig,
    /// SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    #[serde(default)]
    pub sasl: SaslConfig,
    /// Static group membership (`group.instance.id`): a member restarted under the same
    /// id takes its partitions back at once, instead of after the dead member's session
    /// times out and the group rebalances. Unique within the group.
    #[serde(default)]
    pub instance_id: Option<String>,
}

fn default_true() -> bool {
    true
}
fn default_commit_period() -> Duration {
    Duration::from_secs(1)
}
fn default_checkpoint_limit() -> usize {
    1024
}
fn default_fetch_buffer_cap() -> usize {
    // librdkafka's own default: with less prefetch it throttles fetching, and a consumer
    // reads at a fraction of what the broker can send (measured: a third at 10 000).
    100_000
}
fn default_max_batch() -> usize {
    256
}

impl Spec for KafkaInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "kafka",
        kind: Kind::Input,
        summary: "Consumes Kafka topics in a consumer group; commits only acknowledged offsets, in partition order.",
        examples: &[
            Example {
                title: "Join a consumer group",
                yaml: "input:\n  kafka:\n    addresses: [127.0.0.1:9092]\n    topics: [orders]\n    consumer_group: sluice\n    start_from_oldest: true\noutput:\n  stdout: {}\n",
            },
            Example {
                title: "Read two partitions of a topic",
                yaml: "input:\n  kafka:\n    addresses: [127.0.0.1:9092]\n    topics: ['orders:0-1']\n    consumer_group: sluice\n    checkpoint_limit: 512\n    sasl:\n      mechanism: SCRAM-SHA-256\n      user: sluice\n      password: ${KAFKA_PASSWORD:secret}\noutput:\n  stdout: {}\n",
            },
        ],
    };
}

/// A `kafka` input's settings that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("`topics` is empty")]
    NoTopics,
    #[error("`consumer_group` is empty")]
    NoGroup,
    #[error("`checkpoint_limit`, `max_batch` and `fetch_buffer_cap` must be at least 1")]
    ZeroLimit,
    #[error("`topics[{index}]`: {source}")]
    Topic {
        index: usize,
        #[source]
        source: TopicError,
    },
    #[error("`topics`: either every entry names partitions or none does")]
    MixedPartitions,
}

impl KafkaInputConfig {
    /// Checks the config; returns the parsed topics.
    pub fn parsed_topics(&self) -> Result<Vec<TopicSpec>, ConfigError> {
        validate(&self.addresses, &self.tls, &self.sasl)?;
        if self.topics.is_empty() {
            return Err(ConfigError::NoTopics);
        }
        if self.consumer_group.is_empty() {
            return Err(ConfigError::NoGroup);
        }
        if self.checkpoint_limit == 0 || self.max_batch == 0 || self.fetch_buffer_cap == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        let topics = self
            .topics
            .iter()
            .enumerate()
            .map(|(index, t)| parse_topic(t).map_err(|source| ConfigError::Topic { index, source }))
            .collect::<Result<Vec<_>, _>>()?;
        let explicit = topics.iter().filter(|t| t.partitions.is_some()).count();
        if explicit != 0 && explicit != topics.len() {
            return Err(ConfigError::MixedPartitions);
        }
        Ok(topics)
    }
}
