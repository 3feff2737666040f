//! `mqtt` output: publishes each message to an MQTT topic.
//!
//! Delivery: a write succeeds once the broker confirmed every message: PUBACK for QoS 1,
//! PUBCOMP for QoS 2. QoS 0 succeeds once the message is written to the connection. A
//! lost connection fails the writes still waiting, and the runtime sends them again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use rumqttc::{AsyncClient, Event, Outgoing, Packet, QoS};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{oneshot, Mutex as AsyncMutex, RwLock};
use tokio::task::JoinHandle;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::Interp;
use crate::connect::mqtt::{qos, qos_v5};
use crate::connect::{MetadataConfig, MetadataFilter};
use crate::message::Batch;

crate::mqtt_connection_config! {
    #[derive(Debug, Clone, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct MqttOutputConfig {
        /// The topic to publish to (interpolated per message).
        pub topic: Interp,
        /// The QoS to publish with: 0, 1 or 2.
        #[serde(default = "crate::connect::mqtt::default_qos")]
        pub qos: u8,
        /// Ask the broker to retain the last message of the topic.
        #[serde(default)]
        pub retained: bool,
        /// Writes allowed at once.
        #[serde(default = "default_max_in_flight")]
        pub max_in_flight: usize,
        /// How messages are grouped into writes.
        #[serde(default)]
        pub batching: BatchPolicy,
        /// Which metadata to send as user properties (MQTT 5 only; the trace context
        /// always goes).
        #[serde(default)]
        pub metadata: MetadataConfig,
    }
}

fn default_max_in_flight() -> usize {
    64
}

impl Spec for MqttOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "mqtt",
        kind: Kind::Output,
        summary: "Publishes messages to an MQTT topic; QoS 1/2 writes wait for the broker's ack.",
        examples: &[Example {
            title: "Publish with QoS 1",
            yaml: "input:\n  stdin: {}\noutput:\n  mqtt:\n    urls: [tcp://127.0.0.1:1883]\n    topic: sluice/out\n    qos: 1\n",
        }],
    };
}

impl BuildOutput for MqttOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        let connect = self.connection();
        connect.validate().map_err(|e| cx.error(e))?;
        let qos = qos(self.qos).map_err(|e| cx.error(e))?;
        if self.topic.source().is_empty() {
            return Err(cx.error("`topic` is empty"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        let properties = self.metadata.compile().map_err(|e| cx.error(e))?;
        if !connect.v5() && !properties.is_empty() {
            return Err(
                cx.error("`metadata` is sent as user properties, which need `protocol_version: 5`")
            );
        }
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(MqttOutput {
                config: self.clone(),
                egress: cx.egress_to(crate::connect::mqtt::hosts(&self.urls))?,
                properties,
                qos,
                attempt: AtomicUsize::new(0),
                session: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

type Confirm = oneshot::Sender<Result<(), String>>;

/// Publishes waiting for the broker. rumqttc reports a publish's packet id only when it
/// writes it, in the order the publishes were queued; so waiters queue in that same order
/// and move to `by_pkid` when their id is known.
#[derive(Default)]
struct Waiters {
    /// Each with whether it waits for the broker's ack (QoS 1 and 2).
    unsent: VecDeque<(bool, Confirm)>,
    by_pkid: HashMap<u16, Confirm>,
    lost: Option<String>,
}

impl Waiters {
    fn fail_all(&mut self, reason: &str) {
        self.lost = Some(reason.to_owned());
        for (_, tx) in self.unsent.drain(..) {
            let _ = tx.send(Err(reason.to_owned()));
        }
        for (_, tx) in self.by_pkid.drain() {
            let _ = tx.send(Err(reason.to_owned()));
        }
    }
}

/// The client of a connection, of the version it speaks.
enum Client {
    V3(AsyncClient),
    V5(rumqttc::v5::AsyncClient),
}

struct Session {
    client: Client,
    waiters: Arc<Mutex<Waiters>>,
    /// Keeps "queue the waiter, queue the publish" atomic across concurrent writes.
    order: AsyncMutex<()>,
    driver: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

pub struct MqttOutput {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: MqttOutputConfig,
    /// The metadata sent as MQTT 5 user properties.
    properties: MetadataFilter,
    qos: QoS,
    attempt: AtomicUsize,
    session: RwLock<Option<Arc<Session>>>,
}

impl Waiters {
    /// The next publish written got packet id `pkid`.
    fn written(&mut self, pkid: u16) {
        if let Some((acked, tx)) = self.unsent.pop_front() {
            if acked {
                self.by_pkid.insert(pkid, tx);
            } else {
                let _ = tx.send(Ok(()));
            }
        }
    }

    /// The broker answered publish `pkid`: `Err` with why it refused it.
    fn answered(&mut self, pkid: u16, result: Result<(), String>) {
        if let Some(tx) = self.by_pkid.remove(&pkid) {
            let _ = tx.send(result);
        }
    }
}

fn drive(mut eventloop: rumqttc::EventLoop, waiters: Arc<Mutex<Waiters>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Outgoing(Outgoing::Publish(pkid))) => waiters.lock().written(pkid),
                Ok(Event::Incoming(Packet::PubAck(ack))) => {
                    waiters.lock().answered(ack.pkid, Ok(()));
                }
                Ok(Event::Incoming(Packet::PubComp(comp))) => {
                    waiters.lock().answered(comp.pkid, Ok(()));
                }
                Ok(_) => {}
                Err(e) => {
                    waiters.lock().fail_all(&e.to_string());
                    return;
                }
            }
        }
    })
}

/// [`drive`] for MQTT 5, whose acks say whether the broker took the message.
fn drive_v5(mut eventloop: rumqttc::v5::EventLoop, waiters: Arc<Mutex<Waiters>>) -> JoinHandle<()> {
    use rumqttc::v5::mqttbytes::v5::{Packet as P, PubAckReason, PubCompReason, PubRecReason};
    use rumqttc::v5::Event as E;
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(E::Outgoing(Outgoing::Publish(pkid))) => waiters.lock().written(pkid),
                Ok(E::Incoming(P::PubAck(ack))) => {
                    let result = match ack.reason {
                        PubAckReason::Success | PubAckReason::NoMatchingSubscribers => Ok(()),
                        refused => Err(format!("the broker refused the message: {refused:?}")),
                    };
                    waiters.lock().answered(ack.pkid, result);
                }
                // A refused QoS 2 message gets no PUBCOMP: its PUBREC says so.
                Ok(E::Incoming(P::PubRec(rec)))
                    if !matches!(
                        rec.reason,
                        PubRecReason::Success | PubRecReason::NoMatchingSubscribers
                    ) =>
                {
                    let reason = format!("the broker refused the message: {:?}", rec.reason);
                    waiters.lock().answered(rec.pkid, Err(reason));
                }
                Ok(E::Incoming(P::PubComp(comp))) => {
                    let result = match comp.reason {
                        PubCompReason::Success => Ok(()),
                        other => Err(format!("the broker lost the message: {other:?}")),
                    };
                    waiters.lock().answered(comp.pkid, result);
                }
                Ok(_) => {}
                Err(e) => {
                    waiters.lock().fail_all(&e.to_string());
                    return;
                }
            }
        }
    })
}

/// About how many bytes a PUBLISH of `payload_len` bytes to `topic` takes on the wire:
/// its fixed header, topic, packet id, payload and MQTT 5 properties (counted high).
fn packet_size(topic: &str, payload_len: usize, properties: Option<&PublishProperties>) -> usize {
    let props = properties.map_or(0, |p| {
        4 + p
            .user_properties
            .iter()
            .map(|(k, v)| 5 + k.len() + v.len())
            .sum::<usize>()
    });
    5 + 2 + topic.len() + 2 + payload_len + props
}

/// Waits for the broker's CONNACK.
macro_rules! await_connack {
    ($eventloop:expr, $event:path, $packet:path, $success:expr) => {
        loop {
            match $eventloop.poll().await {
                Ok($event($packet(ack))) => {
                    if ack.code != $success {
                        return Err(ConnectorError::not_connected(format!(
                            "broker refused the connection: {:?}",
                            ack.code
                        )));
                    }
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(ConnectorError::not_connected(format!(
                        "cannot connect to MQTT broker: {e}"
                    )))
                }
            }
        }
    };
}

impl MqttOutput {
    /// MQTT 5 properties of `msg`: its forwarded metadata as user properties.
    fn properties(&self, msg: &crate::message::Message) -> PublishProperties {
        let mut p = PublishProperties::default();
        if self.properties.carries(msg) {
            p.user_properties = self
                .properties
                .pairs(msg)
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        }
        p
    }
}

#[async_trait]
impl Output for MqttOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        let c = &self.config;
        let connect = c.connection();
        let attempt = self.attempt.fetch_add(1, Ordering::Relaxed);
        // Enough queue for every write in flight to have its batch queued.
        let cap = (c.max_in_flight * 64).clamp(64, 65_536);
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let (client, driver) = if connect.v5() {
            use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, Packet as P};
            let options = connect
                .options_v5(attempt)
                .map_err(|e| ConnectorError::rejected(e.to_string()))?;
            let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(options, cap);
            await_connack!(
                eventloop,
                rumqttc::v5::Event::Incoming,
                P::ConnAck,
                ConnectReturnCode::Success
            );
            (Client::V5(client), drive_v5(eventloop, waiters.clone()))
        } else {
            let options = connect
                .options(attempt)
                .map_err(|e| ConnectorError::rejected(e.to_string()))?;
            let (client, mut eventloop) = AsyncClient::new(options, cap);
            await_connack!(
                eventloop,
                Event::Incoming,
                Packet::ConnAck,
                rumqttc::ConnectReturnCode::Success
            );
            (Client::V3(client), drive(eventloop, waiters.clone()))
        };
        *self.session.write().await = Some(Arc::new(Session {
            client,
            waiters,
            order: AsyncMutex::new(()),
            driver,
        }));
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Some(session) = self.session.read().await.clone() else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let lost = |e: String| ConnectorError::not_connected(format!("MQTT publish failed: {e}"));
        let topics = self.config.topic.fields(batch, "topic")?;
        let v5 = matches!(session.client, Client::V5(_));
        let mut properties: Vec<PublishProperties> = if v5 {
            batch.iter().map(|m| self.properties(m)).collect()
        } else {
            Vec::new()
        };
        // A message over the packet limit would fail the connection, and again on every
        // retry: it is left out, the others are sent, and the write then says it was refused.
        let max = self.config.max_packet_bytes;
        let oversize: Vec<(usize, usize)> = batch
            .iter()
            .zip(&topics)
            .enumerate()
            .map(|(i, (msg, topic))| {
                (
                    i,
                    packet_size(topic, msg.payload().len(), properties.get(i)),
                )
            })
            .filter(|&(_, size)| size > max)
            .collect();
        let mut confirms = Vec::with_capacity(batch.len());
        {
            let _order = session.order.lock().await;
            for (i, (msg, topic)) in batch.iter().zip(topics).enumerate() {
                if oversize.iter().any(|&(at, _)| at == i) {
                    continue;
                }
                let (tx, rx) = oneshot::channel();
                {
                    let mut w = session.waiters.lock();
                    if let Some(reason) = &w.lost {
                        return Err(lost(reason.clone()));
                    }
                    w.unsent.push_back((self.qos != QoS::AtMostOnce, tx));
                }
                let (topic, retained, payload) = (
                    topic.into_owned(),
                    self.config.retained,
                    msg.payload().clone(),
                );
                let published = match &session.client {
                    Client::V3(c) => c
                        .publish_bytes(topic, self.qos, retained, payload)
                        .await
                        .map_err(|e| e.to_string()),
                    Client::V5(c) => c
                        .publish_bytes_with_properties(
                            topic,
                            qos_v5(self.config.qos).map_err(|e| lost(e.to_string()))?,
                            retained,
                            payload,
                            std::mem::take(&mut properties[i]),
                        )
                        .await
                        .map_err(|e| e.to_string()),
                };
                published.map_err(lost)?;
                confirms.push(rx);
            }
        }
        for rx in confirms {
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(lost(e)),
                Err(_) => return Err(lost("connection closed".into())),
            }
        }
        match oversize.first() {
            None => Ok(()),
            Some(&(i, size)) => Err(ConnectorError::rejected(format!(
                "{} message(s) not sent, over `max_packet_bytes` ({max}): message {i} makes a packet of about {size} bytes",
                oversize.len()
            ))),
        }
    }

    async fn close(&self) {
        if let Some(s) = self.session.write().await.take() {
            match &s.client {
                Client::V3(c) => drop(c.disconnect().await),
                Client::V5(c) => drop(c.disconnect().await),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_sized_with_their_properties() {
        assert_eq!(packet_size("a/b", 100, None), 112);
        let p = PublishProperties {
            user_properties: vec![("traceparent".into(), "x".repeat(55))],
            ..Default::default()
        };
        assert_eq!(packet_size("a/b", 100, Some(&p)), 112 + 4 + 5 + 11 + 55);
    }

    #[test]
    fn waiters_fail_together() {
        let mut w = Waiters::default();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        w.unsent.push_back((true, tx1));
        w.by_pkid.insert(7, tx2);
        w.fail_all("gone");
        assert!(matches!(rx1.try_recv(), Ok(Err(_))));
        assert!(matches!(rx2.try_recv(), Ok(Err(_))));
        assert!(w.lost.is_some());
    }
}
