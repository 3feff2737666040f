//! `amqp_0_9` output: publishes each message to an exchange of an AMQP 0.9.1 broker.
//!
//! Delivery: the channel runs in confirm mode; a write succeeds once the broker confirmed
//! every message of the batch. A nack fails the write (sent again by the runtime); with
//! `mandatory`, a message no queue took is rejected.

use async_trait::async_trait;
use futures::future::join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::RwLock;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::Interp;
use crate::connect::amqp::{classify, connect, header_table, validate};
use crate::connect::{MetadataConfig, MetadataFilter, TlsConfig};
use crate::message::Batch;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ExchangeDeclare {
    /// Declare the exchange (create it when missing).
    pub enabled: bool,
    /// `direct`, `fanout`, `topic` or `headers`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Survives a broker restart.
    pub durable: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AmqpOutputConfig {
    /// Broker URLs (`amqp://user:pass@host:5672/vhost`, `amqps://` for TLS); the first
    /// that answers is used.
    pub urls: Vec<String>,
    /// TLS settings (on for `amqps://` URLs, or for all with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// The exchange to publish to; empty: the default exchange (the key names a queue).
    #[serde(default)]
    pub exchange: String,
    /// Whether and how to declare the exchange.
    #[serde(default)]
    pub exchange_declare: ExchangeDeclare,
    /// The routing key (interpolated per message).
    #[serde(default)]
    pub key: Option<Interp>,
    /// Content type property of the messages.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Persistent messages (delivery mode 2) survive a broker restart in a durable queue.
    #[serde(default = "default_true")]
    pub persistent: bool,
    /// Reject messages no queue takes, instead of letting the broker drop them.
    #[serde(default)]
    pub mandatory: bool,
    /// Which metadata to send as message headers.
    #[serde(default)]
    pub metadata: MetadataConfig,
    /// Writes allowed at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
}

fn default_true() -> bool {
    true
}
fn default_max_in_flight() -> usize {
    64
}

impl Spec for AmqpOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "amqp_0_9",
        kind: Kind::Output,
        summary: "Publishes messages to an AMQP 0.9.1 exchange with publisher confirms.",
        examples: &[Example {
            title: "Publish to a topic exchange",
            yaml: "input:\n  stdin: {}\noutput:\n  amqp_0_9:\n    urls: ['amqp://guest:guest@127.0.0.1:5672/']\n    exchange: events\n    exchange_declare: {enabled: true, type: topic, durable: true}\n    key: events.created\n    mandatory: true\n",
        }],
    };
}

fn exchange_kind(kind: Option<&str>) -> Result<ExchangeKind, String> {
    Ok(match kind.unwrap_or("direct") {
        "direct" => ExchangeKind::Direct,
        "fanout" => ExchangeKind::Fanout,
        "topic" => ExchangeKind::Topic,
        "headers" => ExchangeKind::Headers,
        other => {
            return Err(format!(
                "`exchange_declare.type`: `{other}` is not direct, fanout, topic or headers"
            ))
        }
    })
}

impl BuildOutput for AmqpOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        validate(&self.urls, &self.tls).map_err(|e| cx.error(e))?;
        exchange_kind(self.exchange_declare.kind.as_deref()).map_err(|e| cx.error(e))?;
        if self.exchange_declare.enabled && self.exchange.is_empty() {
            return Err(cx.error("`exchange_declare` needs an `exchange`"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        let headers = self.metadata.compile().map_err(|e| cx.error(e))?;
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(AmqpOutput {
                config: self.clone(),
                egress: cx.egress_addresses(&crate::connect::split_addresses(&self.urls), 5672)?,
                headers,
                session: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

pub struct AmqpOutput {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: AmqpOutputConfig,
    headers: MetadataFilter,
    session: RwLock<Option<(Connection, Channel)>>,
}

#[async_trait]
impl Output for AmqpOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        let c = &self.config;
        let conn = connect(&c.urls, &c.tls).await?;
        let channel = conn
            .create_channel()
            .await
            .map_err(|e| classify(e, "cannot open channel"))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| classify(e, "cannot enable confirms"))?;
        if c.exchange_declare.enabled {
            let kind = exchange_kind(c.exchange_declare.kind.as_deref())
                .map_err(ConnectorError::rejected)?;
            channel
                .exchange_declare(
                    &c.exchange,
                    kind,
                    ExchangeDeclareOptions {
                        durable: c.exchange_declare.durable,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(|e| classify(e, "cannot declare exchange"))?;
        }
        *self.session.write().await = Some((conn, channel));
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Some(channel) = self.session.read().await.as_ref().map(|(_, ch)| ch.clone()) else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        if !channel.status().connected() {
            return Err(ConnectorError::not_connected("AMQP channel is closed"));
        }
        let c = &self.config;
        let options = BasicPublishOptions {
            mandatory: c.mandatory,
            ..Default::default()
        };
        let keys = (0..batch.len())
            .map(|i| match &c.key {
                Some(k) => k.field(batch, i, "key").map(|k| k.into_owned()),
                None => Ok(String::new()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut confirms = Vec::with_capacity(batch.len());
        for (msg, key) in batch.iter().zip(&keys) {
            let mut props = BasicProperties::default();
            if c.persistent {
                props = props.with_delivery_mode(2);
            }
            if let Some(ct) = &c.content_type {
                props = props.with_content_type(ShortString::from(ct.clone()));
            }
            if self.headers.carries(msg) {
                props = props.with_headers(header_table(self.headers.pairs(msg)));
            }
            let confirm = channel
                .basic_publish(&c.exchange, key, options, msg.payload(), props)
                .await
                .map_err(|e| classify(e, "publish failed"))?;
            confirms.push(confirm);
        }
        for result in join_all(confirms).await {
            match result.map_err(|e| classify(e, "publish not confirmed"))? {
                Confirmation::Ack(None) | Confirmation::NotRequested => {}
                Confirmation::Ack(Some(_)) => {
                    return Err(ConnectorError::rejected(
                        "no queue is bound for this routing key (mandatory)",
                    ))
                }
                Confirmation::Nack(_) => {
                    return Err(ConnectorError::transient("the broker nacked a message"))
                }
            }
        }
        Ok(())
    }

    async fn close(&self) {
        if let Some((conn, _)) = self.session.write().await.take() {
            let _ = conn.close(200, "closing").await;
        }
    }
}
