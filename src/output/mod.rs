//! Outputs: where messages go. One file per output; the list below registers them.
//! Leaf outputs write; `broker`, `fallback` and `retry` route to child outputs.

pub mod amqp_0_9;
pub mod amqp_1;
pub mod broker;
pub mod drop;
pub mod fallback;
pub mod file;
pub mod http_client;
pub mod http_server;
pub mod hub;
pub mod hubs;
pub mod kafka;
pub mod mqtt;
pub mod nats;
pub mod nats_jetstream;
pub mod portal_webhook;
pub mod redis_pubsub;
pub mod redis_streams;
pub mod resource;
pub mod retry;
pub mod stdout;
pub mod switch;
pub mod websocket_server;

use crate::component::{BuildContext, BuildError, Kind, Router, Writer};

crate::registry!(Kind::Output, OutputKind, OutputConfig, BuildOutput -> OutputBuild, attached: crate::processor::ProcessorConfig {
    "amqp_0_9" => Amqp09(amqp_0_9::AmqpOutputConfig),
    "amqp_1" => Amqp1(amqp_1::Amqp1OutputConfig),
    "broker" => Broker(broker::BrokerOutputConfig),
    "drop" => Drop(drop::DropConfig),
    "fallback" => Fallback(fallback::FallbackConfig),
    "file" => File(file::FileOutputConfig),
    "http_client" => HttpClient(http_client::HttpClientOutputConfig),
    "http_server" => HttpServer(http_server::HttpServerOutputConfig),
    "kafka" => Kafka(kafka::KafkaOutputConfig),
    "mqtt" => Mqtt(mqtt::MqttOutputConfig),
    "nats" => Nats(nats::NatsOutputConfig),
    "nats_jetstream" => NatsJetStream(nats_jetstream::NatsJetStreamOutputConfig),
    "portal_webhook" => PortalWebhook(portal_webhook::PortalWebhookConfig),
    "redis_pubsub" => RedisPubSub(redis_pubsub::RedisPubSubOutputConfig),
    "redis_streams" => RedisStreams(redis_streams::RedisStreamsOutputConfig),
    "resource" => Resource(resource::ResourceOutputConfig),
    "retry" => Retry(retry::RetryConfig),
    "stdout" => Stdout(stdout::StdoutConfig),
    "switch" => Switch(switch::SwitchOutputConfig),
    "websocket_server" => WebsocketServer(websocket_server::WebsocketServerOutputConfig),
});

/// What an output config builds into.
pub enum OutputBuild {
    Writer(Writer),
    /// A router and its children, each with its path below the router (`outputs[0]`).
    Router(Box<dyn Router>, Vec<(String, OutputConfig)>),
}

impl OutputKind {
    /// Builds the output; the hub outputs get `wiring`, which no other output needs.
    pub fn build_wired(
        &self,
        cx: &BuildContext,
        wiring: &hub::HubWiring,
    ) -> Result<OutputBuild, BuildError> {
        match self {
            OutputKind::HttpServer(c) => c.build_hub(cx, wiring),
            OutputKind::WebsocketServer(c) => c.build_hub(cx, wiring),
            kind => kind.build(cx),
        }
    }
}

/// Implemented by every output config.
pub trait BuildOutput {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError>;
}

/// Children paths for a list of outputs: `outputs[0]`, `outputs[1]`, ...
pub(crate) fn indexed(field: &str, outputs: &[OutputConfig]) -> Vec<(String, OutputConfig)> {
    outputs
        .iter()
        .enumerate()
        .map(|(i, o)| (format!("{field}[{i}]"), o.clone()))
        .collect()
}
