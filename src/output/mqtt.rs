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
use crate::connect::mqtt::qos;
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
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(MqttOutput {
                config: self.clone(),
                egress: cx.egress_to(crate::connect::mqtt::hosts(&self.urls))?,
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
    unsent: VecDeque<(QoS, Confirm)>,
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

struct Session {
    client: AsyncClient,
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
    qos: QoS,
    attempt: AtomicUsize,
    session: RwLock<Option<Arc<Session>>>,
}

fn drive(mut eventloop: rumqttc::EventLoop, waiters: Arc<Mutex<Waiters>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                    let mut w = waiters.lock();
                    if let Some((qos, tx)) = w.unsent.pop_front() {
                        if qos == QoS::AtMostOnce {
                            let _ = tx.send(Ok(()));
                        } else {
                            w.by_pkid.insert(pkid, tx);
                        }
                    }
                }
                Ok(Event::Incoming(Packet::PubAck(ack))) => {
                    if let Some(tx) = waiters.lock().by_pkid.remove(&ack.pkid) {
                        let _ = tx.send(Ok(()));
                    }
                }
                Ok(Event::Incoming(Packet::PubComp(comp))) => {
                    if let Some(tx) = waiters.lock().by_pkid.remove(&comp.pkid) {
                        let _ = tx.send(Ok(()));
                    }
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

#[async_trait]
impl Output for MqttOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        let c = &self.config;
        let connect = c.connection();
        let options = connect
            .options(self.attempt.fetch_add(1, Ordering::Relaxed))
            .map_err(ConnectorError::rejected)?;
        // Enough queue for every write in flight to have its batch queued.
        let cap = (c.max_in_flight * 64).clamp(64, 65_536);
        let (client, mut eventloop) = AsyncClient::new(options, cap);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    if ack.code != rumqttc::ConnectReturnCode::Success {
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
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let driver = drive(eventloop, waiters.clone());
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
        let mut confirms = Vec::with_capacity(batch.len());
        {
            let _order = session.order.lock().await;
            for (msg, topic) in batch.iter().zip(topics) {
                let (tx, rx) = oneshot::channel();
                {
                    let mut w = session.waiters.lock();
                    if let Some(reason) = &w.lost {
                        return Err(lost(reason.clone()));
                    }
                    w.unsent.push_back((self.qos, tx));
                }
                session
                    .client
                    .publish_bytes(
                        topic.into_owned(),
                        self.qos,
                        self.config.retained,
                        msg.payload().clone(),
                    )
                    .await
                    .map_err(|e| lost(e.to_string()))?;
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
        Ok(())
    }

    async fn close(&self) {
        if let Some(s) = self.session.write().await.take() {
            let _ = s.client.disconnect().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_fail_together() {
        let mut w = Waiters::default();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        w.unsent.push_back((QoS::AtLeastOnce, tx1));
        w.by_pkid.insert(7, tx2);
        w.fail_all("gone");
        assert!(matches!(rx1.try_recv(), Ok(Err(_))));
        assert!(matches!(rx2.try_recv(), Ok(Err(_))));
        assert!(w.lost.is_some());
    }
}
