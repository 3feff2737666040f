//! Inputs: where messages come from. One file per input; the list below registers them.

pub mod amqp_0_9;
pub mod amqp_1;
pub mod broker;
pub mod file;
pub mod generate;
pub mod http_client;
pub mod http_server;
pub mod kafka;
pub mod mqtt;
pub mod nats;
pub mod nats_jetstream;
pub mod redis_pubsub;
pub mod redis_streams;
pub mod resource;
pub mod stdin;

use crate::component::{BuildContext, BuildError, Input, Kind};

crate::registry!(Kind::Input, InputKind, InputConfig, BuildInput -> InputBuild, attached: crate::processor::ProcessorConfig {
    "amqp_0_9" => Amqp09(amqp_0_9::AmqpInputConfig),
    "amqp_1" => Amqp1(amqp_1::Amqp1InputConfig),
    "broker" => Broker(broker::BrokerInputConfig),
    "file" => File(file::FileInputConfig),
    "generate" => Generate(generate::GenerateConfig),
    "http_client" => HttpClient(http_client::HttpClientInputConfig),
    "http_server" => HttpServer(http_server::HttpServerInputConfig),
    "kafka" => Kafka(kafka::KafkaInputConfig),
    "mqtt" => Mqtt(mqtt::MqttInputConfig),
    "nats" => Nats(nats::NatsInputConfig),
    "nats_jetstream" => NatsJetStream(nats_jetstream::NatsJetStreamInputConfig),
    "redis_pubsub" => RedisPubSub(redis_pubsub::RedisPubSubInputConfig),
    "redis_streams" => RedisStreams(redis_streams::RedisStreamsInputConfig),
    "resource" => Resource(resource::ResourceInputConfig),
    "stdin" => Stdin(stdin::StdinConfig),
});

/// What an input config builds into.
pub enum InputBuild {
    Leaf(Box<dyn Input>),
    /// Several inputs feeding the same stream (`broker`).
    Merge(Vec<InputConfig>),
}

/// Implemented by every input config.
pub trait BuildInput {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError>;
}
