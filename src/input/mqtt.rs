//! `mqtt` input: subscribes to MQTT topics (wildcards allowed).
//!
//! Delivery: with QoS 1 or 2 a message is acknowledged to the broker (PUBACK / PUBCOMP)
//! only once every output confirmed it; with `clean_session: false` and a fixed
//! `client_id` the broker keeps unacknowledged messages across a lost connection and sends
//! them again, so nothing is lost. QoS 0 is at most once.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use rumqttc::v5::mqttbytes::v5::Publish as Publish5;
use rumqttc::v5::mqttbytes::QoS as Qos5;
use rumqttc::{AsyncClient, Event, Packet, Publish, QoS};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::mqtt::qos;
use crate::message::{Batch, Message, Outcome};

crate::mqtt_connection_config! {
    #[derive(Debug, Clone, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct MqttInputConfig {
        /// Topic filters to subscribe to; `+` and `#` wildcards are allowed.
        pub topics: Vec<String>,
        /// The QoS to subscribe with: 0, 1 or 2.
        #[serde(default = "crate::connect::mqtt::default_qos")]
        pub qos: u8,
    }
}

impl Spec for MqttInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "mqtt",
        kind: Kind::Input,
        summary: "Subscribes to MQTT topics; QoS 1/2 messages are acknowledged after delivery.",
        examples: &[Example {
            title: "A persistent QoS 1 subscription",
            yaml: "input:\n  mqtt:\n    urls: [tcp://127.0.0.1:1883]\n    topics: [sensors/+/temperature]\n    qos: 1\n    client_id: sluice-sensors\n    clean_session: false\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for MqttInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        self.connection().validate().map_err(|e| cx.error(e))?;
        let qos = qos(self.qos).map_err(|e| cx.error(e))?;
        if self.topics.is_empty() || self.topics.iter().any(String::is_empty) {
            return Err(cx.error("`topics` must list at least one non-empty topic"));
        }
        Ok(InputBuild::Leaf(Box::new(MqttInput {
            config: self.clone(),
            egress: cx.egress_to(crate::connect::mqtt::hosts(&self.urls))?,
            qos,
            attempt: AtomicUsize::new(0),
            session: None,
        })))
    }
}

/// The client of a connection, of the version it speaks, to ack with.
#[derive(Clone)]
enum Client {
    V3(AsyncClient),
    V5(rumqttc::v5::AsyncClient),
}

/// A message as the broker delivered it.
enum Delivered {
    V3(Publish),
    V5(Publish5),
}

impl Delivered {
    fn message(&self) -> Message {
        match self {
            Delivered::V3(p) => to_message(p),
            Delivered::V5(p) => to_message_v5(p),
        }
    }

    /// Acknowledges a QoS 1 or 2 message to the broker.
    fn ack(&self, client: &Client) {
        let sent = match (self, client) {
            (Delivered::V3(p), Client::V3(c)) if p.qos != QoS::AtMostOnce => {
                c.try_ack(p).map_err(|e| e.to_string())
            }
            (Delivered::V5(p), Client::V5(c)) if p.qos != Qos5::AtMostOnce => {
                c.try_ack(p).map_err(|e| e.to_string())
            }
            _ => Ok(()),
        };
        if let Err(e) = sent {
            // The connection that delivered it is gone; the broker redelivers.
            debug!(error = %e, "MQTT ack not sent.");
        }
    }
}

/// One connection: the client (to ack with), what its event loop task receives, and the
/// task itself.
struct Session {
    client: Client,
    rx: mpsc::Receiver<Result<Delivered, String>>,
    driver: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

pub struct MqttInput {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: MqttInputConfig,
    qos: QoS,
    attempt: AtomicUsize,
    session: Option<Session>,
}

/// Room for messages the event loop received before the stream takes them. The broker
/// bounds how many unacknowledged QoS 1/2 messages it sends, so this rarely fills.
const RECEIVED_CAPACITY: usize = 1024;
const MAX_BATCH: usize = 64;

fn to_message(p: &Publish) -> Message {
    let mut m = Message::new(p.payload.clone());
    m.set_meta("mqtt_topic", p.topic.as_str());
    m.set_meta("mqtt_qos", p.qos as i64);
    m.set_meta("mqtt_retained", p.retain);
    m.set_meta("mqtt_duplicate", p.dup);
    m.set_meta("mqtt_message_id", p.pkid as i64);
    m
}

/// An MQTT 5 message: its user properties (a trace context among them) and content type
/// become metadata, bounded by the client's largest packet; the `mqtt_*` keys are set
/// last, so a property cannot pass for them.
fn to_message_v5(p: &Publish5) -> Message {
    let mut m = Message::new(p.payload.clone());
    if let Some(props) = &p.properties {
        for (k, v) in &props.user_properties {
            m.set_meta(k.as_str(), v.as_str());
        }
        if let Some(ct) = &props.content_type {
            m.set_meta(crate::message::CONTENT_TYPE, ct.as_str());
        }
    }
    m.set_meta("mqtt_topic", String::from_utf8_lossy(&p.topic).into_owned());
    m.set_meta("mqtt_qos", p.qos as i64);
    m.set_meta("mqtt_retained", p.retain);
    m.set_meta("mqtt_duplicate", p.dup);
    m.set_meta("mqtt_message_id", p.pkid as i64);
    m
}

fn refused(code: impl std::fmt::Debug) -> ConnectorError {
    ConnectorError::not_connected(format!("broker refused the connection: {code:?}"))
}

fn unreachable(e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::not_connected(format!("cannot connect to MQTT broker: {e}"))
}

impl MqttInput {
    async fn connect_v3(&self, attempt: usize) -> Result<Session, ConnectorError> {
        let options = self
            .config
            .connection()
            .options(attempt)
            .map_err(|e| ConnectorError::rejected(e.to_string()))?;
        let (client, mut eventloop) = AsyncClient::new(options, RECEIVED_CAPACITY);
        // Wait for the broker's CONNACK here, so that a refused or unreachable broker is a
        // connect failure (retried with backoff) rather than a failed read.
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    if ack.code != rumqttc::ConnectReturnCode::Success {
                        return Err(refused(ack.code));
                    }
                    break;
                }
                Ok(_) => {}
                Err(e) => return Err(unreachable(e)),
            }
        }
        for topic in &self.config.topics {
            client
                .subscribe(topic.clone(), self.qos)
                .await
                .map_err(|e| ConnectorError::not_connected("cannot subscribe").with_source(e))?;
        }
        let (tx, rx) = mpsc::channel(RECEIVED_CAPACITY);
        let driver = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        if tx.send(Ok(Delivered::V3(p))).await.is_err() {
                            return;
                        }
                    }
                    Ok(Event::Incoming(Packet::SubAck(ack))) => {
                        debug!(?ack.return_codes, "Subscribed.");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        // The next connect makes a new client; this loop is done.
                        let _ = tx.send(Err(e.to_string())).await;
                        return;
                    }
                }
            }
        });
        Ok(Session {
            client: Client::V3(client),
            rx,
            driver,
        })
    }

    async fn connect_v5(&self, attempt: usize) -> Result<Session, ConnectorError> {
        use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, Packet as Packet5};
        use rumqttc::v5::Event as Event5;
        let connection = self.config.connection();
        let options = connection
            .options_v5(attempt)
            .map_err(|e| ConnectorError::rejected(e.to_string()))?;
        let qos = crate::connect::mqtt::qos_v5(self.config.qos)
            .map_err(|e| ConnectorError::rejected(e.to_string()))?;
        let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(options, RECEIVED_CAPACITY);
        loop {
            match eventloop.poll().await {
                Ok(Event5::Incoming(Packet5::ConnAck(ack))) => {
                    if ack.code != ConnectReturnCode::Success {
                        return Err(refused(ack.code));
                    }
                    break;
                }
                Ok(_) => {}
                Err(e) => return Err(unreachable(e)),
            }
        }
        for topic in &self.config.topics {
            client
                .subscribe(topic.clone(), qos)
                .await
                .map_err(|e| ConnectorError::not_connected("cannot subscribe").with_source(e))?;
        }
        let (tx, rx) = mpsc::channel(RECEIVED_CAPACITY);
        let driver = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event5::Incoming(Packet5::Publish(p))) => {
                        if tx.send(Ok(Delivered::V5(p))).await.is_err() {
                            return;
                        }
                    }
                    Ok(Event5::Incoming(Packet5::SubAck(ack))) => {
                        debug!(?ack.return_codes, "Subscribed.");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string())).await;
                        return;
                    }
                }
            }
        });
        Ok(Session {
            client: Client::V5(client),
            rx,
            driver,
        })
    }
}

#[async_trait]
impl Input for MqttInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        self.session = None;
        let attempt = self.attempt.fetch_add(1, Ordering::Relaxed);
        let session = if self.config.connection().v5() {
            self.connect_v5(attempt).await?
        } else {
            self.connect_v3(attempt).await?
        };
        self.session = Some(session);
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(session) = &mut self.session else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let first = match session.rx.recv().await {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                self.session = None;
                return Err(ConnectorError::not_connected(format!(
                    "connection lost: {e}"
                )));
            }
            None => {
                self.session = None;
                return Err(ConnectorError::not_connected("connection closed"));
            }
        };
        let mut publishes = vec![first];
        while publishes.len() < MAX_BATCH {
            match session.rx.try_recv() {
                Ok(Ok(p)) => publishes.push(p),
                // An error stays for the next read: deliver what arrived before it first.
                _ => break,
            }
        }
        let batch: Batch = publishes.iter().map(Delivered::message).collect();
        let client = session.client.clone();
        Ok(ReadBatch::new(batch, move |outcome: Outcome| {
            // An errored outcome reaches here only when the stream was aborted: leave the
            // messages unacknowledged so that the broker sends them again.
            if matches!(outcome, Outcome::Errored(_)) {
                return;
            }
            for p in &publishes {
                p.ack(&client);
            }
        }))
    }

    async fn close(&mut self) {
        if let Some(s) = self.session.take() {
            match &s.client {
                Client::V3(c) => drop(c.try_disconnect()),
                Client::V5(c) => drop(c.try_disconnect()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default())
    }

    #[test]
    fn validation() {
        let ok: MqttInputConfig =
            serde_yaml::from_str("{urls: [tcp://127.0.0.1:1883], topics: [a/#]}").unwrap();
        assert!(ok.build(&cx()).is_ok());
        for bad in [
            "{urls: [tcp://127.0.0.1:1883], topics: [a], qos: 3}",
            "{urls: [tcp://127.0.0.1:1883], topics: []}",
            "{urls: [tcp://127.0.0.1:1883], topics: [a], clean_session: false}",
            "{urls: [http://x], topics: [a]}",
        ] {
            let c: MqttInputConfig = serde_yaml::from_str(bad).unwrap();
            assert!(c.build(&cx()).is_err(), "{bad}");
        }
    }
}
