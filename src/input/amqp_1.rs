//! `amqp_1` input: receives messages from a source address of an AMQP 1.0 broker.
//!
//! Delivery: at least once. The link's receiver runs in a task of its own, which owns it:
//! deliveries come out of it over a channel, and settlements go back into it over another.
//! A delivery is accepted once every output confirmed it; a failed one is released (after
//! `nack_delay`, so that a failing output does not spin), so the broker delivers it again;
//! a rejected one is rejected (dead-lettered or dropped, as the broker is set up). What was
//! not settled when the connection went is delivered again by the broker.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::CreditMode;
use fe2o3_amqp::link::RecvError;
use fe2o3_amqp::types::definitions::{self, AmqpError};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage, MessageId};
use fe2o3_amqp::types::primitives::{Timestamp, Value as AmqpValue};
use fe2o3_amqp::Receiver;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::warn;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::amqp1::{link_lost, Endpoint, Link, Sasl};
use crate::connect::{AckSpawner, TlsConfig};
use crate::duration::Duration;
use crate::message::{Batch, Message, Outcome};
use crate::value::{Object, Value};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amqp1InputConfig {
    /// Broker URLs (`amqp://user:pass@host:5672`, `amqps://` for TLS); the first that
    /// answers is used. Entries may hold several URLs separated by commas.
    #[serde(default)]
    pub urls: Vec<String>,
    /// A single broker URL, the older form of `urls`.
    #[serde(default)]
    pub url: Option<String>,
    /// The address to receive from, e.g. `/queue/orders` on RabbitMQ.
    pub source_address: String,
    /// Azure Service Bus lock renewal: not supported, refused when set.
    #[serde(default)]
    pub azure_renew_lock: bool,
    /// Also copy the message header (durable, priority, ttl, first acquirer, delivery
    /// count) into metadata.
    #[serde(default)]
    pub read_header: bool,
    /// Messages the broker may send ahead before they are settled, at most.
    #[serde(default = "default_credit")]
    pub credit: u32,
    /// TLS settings (on for `amqps://` URLs, or for all with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// SASL authentication.
    #[serde(default)]
    pub sasl: Sasl,
    /// Wait before releasing a message whose delivery failed, so that the broker does not
    /// hand it straight back to a failing pipeline.
    #[serde(default = "default_nack_delay")]
    pub nack_delay: Duration,
}

fn default_credit() -> u32 {
    64
}
fn default_nack_delay() -> Duration {
    Duration::from_secs(1)
}

impl Spec for Amqp1InputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "amqp_1",
        kind: Kind::Input,
        summary: "Receives from an AMQP 1.0 source address; accepts after delivery, releases on failure.",
        examples: &[Example {
            title: "Consume a RabbitMQ queue over AMQP 1.0",
            yaml: "input:\n  amqp_1:\n    urls: ['amqp://guest:guest@127.0.0.1:5672']\n    source_address: /queue/orders\n    credit: 32\n    read_header: true\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for Amqp1InputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        let endpoint = Endpoint::new(&self.urls, self.url.as_deref(), &self.tls, &self.sasl)
            .map_err(|e| cx.error(e))?;
        if self.source_address.trim().is_empty() {
            return Err(cx.error("`source_address` is empty"));
        }
        if self.azure_renew_lock {
            return Err(cx.error("`azure_renew_lock` is not supported"));
        }
        if self.credit == 0 {
            return Err(cx.error("`credit` must be at least 1"));
        }
        Ok(InputBuild::Leaf(Box::new(Amqp1Input {
            config: self.clone(),
            egress: cx.egress_addresses(&endpoint.url_texts(), 5672)?,
            endpoint,
            session: None,
        })))
    }
}

/// What the input asks the receiver task to do with deliveries it handed out.
enum Settle {
    Accept,
    Release,
    Reject(String),
}

struct Settlement {
    deliveries: Vec<DeliveryInfo>,
    how: Settle,
}

struct Session {
    link: Option<Link>,
    deliveries: mpsc::UnboundedReceiver<Result<Received, ConnectorError>>,
    settlements: mpsc::UnboundedSender<Settlement>,
    task: tokio::task::JoinHandle<()>,
    spawner: AckSpawner,
}

struct Received {
    message: Message,
    info: DeliveryInfo,
}

pub struct Amqp1Input {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: Amqp1InputConfig,
    endpoint: Endpoint,
    session: Option<Session>,
}

impl Amqp1Input {
    async fn drop_session(&mut self) {
        if let Some(mut s) = self.session.take() {
            s.task.abort();
            if let Some(link) = s.link.take() {
                link.close().await;
            }
        }
    }
}

/// Owns the receiver: hands out what arrives, settles what the input sends back. Ends
/// when the link fails (after reporting it) or when the input drops its side.
async fn run_receiver(
    mut receiver: Receiver,
    out: mpsc::UnboundedSender<Result<Received, ConnectorError>>,
    mut settlements: mpsc::UnboundedReceiver<Settlement>,
    read_header: bool,
) {
    loop {
        tokio::select! {
            // Settling first frees credit before more is taken.
            biased;
            s = settlements.recv() => {
                let Some(s) = s else { break };
                if let Err(e) = settle(&receiver, s).await {
                    // The link is gone; the broker delivers what was not settled again.
                    warn!(error = %e, "AMQP 1.0 settlement failed.");
                }
            }
            d = receiver.recv::<Body<AmqpValue>>() => {
                let item = match d {
                    Ok(d) => {
                        let (info, msg) = d.into_parts();
                        Ok(Received { message: to_message(msg, read_header), info })
                    }
                    Err(e) => Err(recv_error(e)),
                };
                let failed = item.is_err();
                // An unbounded channel: the link's credit bounds what can be in it, and
                // the task must never wait here while settlements (which free credit)
                // queue up behind it.
                if out.send(item).is_err() || failed {
                    break;
                }
            }
        }
    }
    let _ = receiver.close().await;
}

async fn settle(receiver: &Receiver, s: Settlement) -> Result<(), String> {
    let r = match s.how {
        Settle::Accept => receiver.accept_all(s.deliveries).await,
        Settle::Release => receiver.release_all(s.deliveries).await,
        Settle::Reject(reason) => {
            let error = definitions::Error::new(AmqpError::InternalError, Some(reason), None);
            receiver.reject_all(s.deliveries, error).await
        }
    };
    r.map_err(|e| e.to_string())
}

fn recv_error(e: RecvError) -> ConnectorError {
    match e {
        RecvError::LinkStateError(e) => link_lost(&e, "receive failed"),
        // Anything else breaks the link's state too (the client detaches it).
        other => ConnectorError::not_connected(format!("receive failed: {other}")),
    }
}

/// The payload and metadata of a received message. Data sections are the payload as they
/// are; a string or binary value is its bytes; any other value or sequence is JSON.
fn to_message(m: AmqpMessage<Body<AmqpValue>>, read_header: bool) -> Message {
    let payload: Bytes = match m.body {
        Body::Data(sections) => {
            if sections.len() == 1 {
                Bytes::from(
                    sections
                        .into_iter()
                        .next()
                        .map(|d| d.0.into_vec())
                        .unwrap_or_default(),
                )
            } else {
                let mut all = Vec::new();
                for d in sections {
                    all.extend_from_slice(&d.0);
                }
                Bytes::from(all)
            }
        }
        Body::Value(v) => match v.0 {
            AmqpValue::String(s) => Bytes::from(s),
            AmqpValue::Binary(b) => Bytes::from(b.into_vec()),
            other => json_bytes(&to_value(other)),
        },
        Body::Sequence(seqs) => {
            let items = seqs.into_iter().flat_map(|s| s.0).map(to_value).collect();
            json_bytes(&Value::Array(items))
        }
        Body::Empty => Bytes::new(),
    };
    let mut msg = Message::new(payload);
    if let Some(p) = &m.properties {
        if let Some(ct) = &p.content_type {
            msg.set_meta("amqp_content_type", ct.0.as_str());
        }
        if let Some(ce) = &p.content_encoding {
            msg.set_meta("amqp_content_encoding", ce.0.as_str());
        }
        if let Some(t) = &p.creation_time {
            msg.set_meta("amqp_creation_time", rfc3339(t));
        }
        if let Some(id) = &p.message_id {
            msg.set_meta("amqp_message_id", message_id(id));
        }
        if let Some(id) = &p.correlation_id {
            msg.set_meta("amqp_correlation_id", message_id(id));
        }
        if let Some(s) = &p.subject {
            msg.set_meta("amqp_subject", s.as_str());
        }
        if let Some(to) = &p.to {
            msg.set_meta("amqp_to", to.as_str());
        }
        if let Some(r) = &p.reply_to {
            msg.set_meta("amqp_reply_to", r.as_str());
        }
    }
    if read_header {
        if let Some(h) = &m.header {
            msg.set_meta("amqp_durable", h.durable);
            msg.set_meta("amqp_priority", i64::from(h.priority.0));
            if let Some(ttl) = h.ttl {
                msg.set_meta("amqp_ttl", i64::from(ttl));
            }
            msg.set_meta("amqp_first_acquirer", h.first_acquirer);
            msg.set_meta("amqp_delivery_count", i64::from(h.delivery_count));
        }
    }
    // Message annotations with text values, under their names with `-` made `_`
    // (`x-opt-source` becomes `x_opt_source`), as other stream processors name them.
    if let Some(annotations) = &m.message_annotations {
        for (k, v) in annotations.iter() {
            let OwnedKey::Symbol(k) = k else { continue };
            let text = match v {
                AmqpValue::String(s) => s.as_str(),
                AmqpValue::Symbol(s) => s.0.as_str(),
                _ => continue,
            };
            msg.set_meta(k.0.replace('-', "_"), text);
        }
    }
    // Application properties under their own names, typed.
    if let Some(props) = &m.application_properties {
        for (k, v) in props.iter() {
            msg.set_meta(k.as_str(), to_value(AmqpValue::from(v.clone())));
        }
    }
    msg
}

fn json_bytes(v: &Value) -> Bytes {
    Bytes::from(v.to_json())
}

fn rfc3339(t: &Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_millis(t.milliseconds())
        .map(|d| d.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| t.milliseconds().to_string())
}

fn message_id(id: &MessageId) -> String {
    match id {
        MessageId::String(s) => s.clone(),
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => uuid::Uuid::from_bytes(*u.as_inner()).to_string(),
        MessageId::Binary(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// An AMQP value as a Sluice value; types with no counterpart become text.
fn to_value(v: AmqpValue) -> Value {
    use AmqpValue as A;
    match v {
        A::Null => Value::Null,
        A::Bool(b) => Value::Bool(b),
        A::Ubyte(n) => Value::Int(n.into()),
        A::Ushort(n) => Value::Int(n.into()),
        A::Uint(n) => Value::Int(n.into()),
        A::Ulong(n) => i64::try_from(n)
            .map(Value::Int)
            .unwrap_or(Value::Float(n as f64)),
        A::Byte(n) => Value::Int(n.into()),
        A::Short(n) => Value::Int(n.into()),
        A::Int(n) => Value::Int(n.into()),
        A::Long(n) => Value::Int(n),
        A::Float(f) => Value::Float(f.0.into()),
        A::Double(f) => Value::Float(f.0),
        A::Char(c) => Value::String(c.to_string()),
        A::Timestamp(t) => DateTime::<Utc>::from_timestamp_millis(t.milliseconds())
            .map(|d| Value::Timestamp(d.fixed_offset()))
            .unwrap_or(Value::Int(t.milliseconds())),
        A::Uuid(u) => Value::String(uuid::Uuid::from_bytes(u.into_inner()).to_string()),
        A::Binary(b) => Value::Bytes(Bytes::from(b.into_vec())),
        A::String(s) => Value::String(s),
        A::Symbol(s) => Value::String(s.0),
        A::List(items) => Value::Array(items.into_iter().map(to_value).collect()),
        A::Array(items) => Value::Array(items.0.into_iter().map(to_value).collect()),
        A::Map(map) => {
            let mut o = Object::new();
            for (k, v) in map {
                let key = match to_value(k) {
                    Value::String(s) => s,
                    other => String::from_utf8_lossy(&other.to_json()).into_owned(),
                };
                o.insert(key, to_value(v));
            }
            Value::Object(o)
        }
        A::Described(d) => to_value(d.value),
        other => Value::String(format!("{other:?}")),
    }
}

#[async_trait]
impl Input for Amqp1Input {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        self.drop_session().await;
        let mut link = self.endpoint.connect().await?;
        let receiver = Receiver::builder()
            .name(format!("sluice-receiver-{}", uuid::Uuid::new_v4()))
            .source(self.config.source_address.as_str())
            .credit_mode(CreditMode::Auto(self.config.credit))
            .auto_accept(false)
            .attach(&mut link.session)
            .await;
        let receiver = match receiver {
            Ok(r) => r,
            Err(e) => {
                link.close().await;
                return Err(ConnectorError::not_connected(format!(
                    "cannot receive from `{}`: {e}",
                    self.config.source_address
                )));
            }
        };
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (settle_tx, settle_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_receiver(
            receiver,
            out_tx,
            settle_rx,
            self.config.read_header,
        ));
        self.session = Some(Session {
            link: Some(link),
            deliveries: out_rx,
            settlements: settle_tx,
            task,
            spawner: AckSpawner::current(),
        });
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let Some(session) = &mut self.session else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        // Cancel safe: a pending `recv` on the channel loses nothing when dropped.
        let first = match session.deliveries.recv().await {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                self.drop_session().await;
                return Err(e);
            }
            None => {
                self.drop_session().await;
                return Err(ConnectorError::not_connected("receiver stopped"));
            }
        };
        // Everything already received goes into this batch; nothing waits for more.
        let mut received = vec![first];
        let mut failure = None;
        while received.len() < self.config.credit as usize {
            match session.deliveries.try_recv() {
                Ok(Ok(r)) => received.push(r),
                Ok(Err(e)) => {
                    failure = Some(e);
                    break;
                }
                Err(_) => break,
            }
        }
        if let Some(e) = failure {
            // The link failed after these arrived: they cannot be settled any more, and the
            // broker delivers them again; the next read reports the loss.
            warn!(error = %e, "AMQP 1.0 link failed.");
            self.drop_session().await;
            return Err(e);
        }
        let (batch, infos): (Batch, Vec<DeliveryInfo>) =
            received.into_iter().map(|r| (r.message, r.info)).unzip();
        let tx = session.settlements.clone();
        let spawner = session.spawner.clone();
        let delay: StdDuration = self.config.nack_delay.0;
        Ok(ReadBatch::new(batch, move |outcome: Outcome| {
            let how = match outcome {
                Outcome::Delivered | Outcome::Filtered => Settle::Accept,
                Outcome::Errored(_) => Settle::Release,
                Outcome::Rejected(reason) => Settle::Reject(reason.to_string()),
            };
            let s = Settlement {
                deliveries: infos,
                how,
            };
            if matches!(s.how, Settle::Release) && !delay.is_zero() {
                spawner.spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = tx.send(s);
                });
            } else {
                // A closed channel means the link is gone; the broker redelivers.
                let _ = tx.send(s);
            }
        }))
    }

    fn handles_nacks(&self) -> bool {
        true
    }

    async fn close(&mut self) {
        if let Some(mut s) = self.session.take() {
            // Let the receiver task settle what was already answered, then close the link.
            drop(s.settlements);
            let _ = tokio::time::timeout(StdDuration::from_secs(5), &mut s.task).await;
            s.task.abort();
            if let Some(link) = s.link.take() {
                link.close().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::messaging::{
        ApplicationProperties, Data, Header, MessageAnnotations, Properties,
    };
    use fe2o3_amqp::types::primitives::{Binary, SimpleValue};

    fn parse(yaml: &str) -> Amqp1InputConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn build_input_err(c: &Amqp1InputConfig) -> String {
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        match c.build(&cx) {
            Ok(_) => panic!("built"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_and_refusals() {
        let c = parse("{urls: ['amqp://h'], source_address: /queue/a}");
        assert_eq!(c.credit, 64);
        assert!(!c.read_header);
        let e = build_input_err(&parse("{urls: ['amqp://h'], source_address: ''}"));
        assert!(e.contains("`source_address` is empty"), "{e}");
        let e = build_input_err(&parse(
            "{urls: ['amqp://h'], source_address: q, azure_renew_lock: true}",
        ));
        assert!(e.contains("`azure_renew_lock` is not supported"), "{e}");
        let e = build_input_err(&parse("{urls: ['amqp://h'], source_address: q, credit: 0}"));
        assert!(e.contains("`credit`"), "{e}");
        let e = build_input_err(&parse("{urls: ['nats://h'], source_address: q}"));
        assert!(e.contains("`urls`"), "{e}");
        let e = build_input_err(&parse(
            "{urls: ['amqp://h'], source_address: q, sasl: {mechanism: plain}}",
        ));
        assert!(e.contains("`sasl.user`"), "{e}");
        assert!(serde_yaml::from_str::<Amqp1InputConfig>(
            "{urls: ['amqp://h'], source_address: q, sasl: {mechanism: kerberos}}"
        )
        .is_err());
    }

    #[test]
    fn message_sections_become_payload_and_metadata() {
        let mut annotations = MessageAnnotations::default();
        annotations.insert(
            OwnedKey::Symbol("x-opt-region".into()),
            AmqpValue::String("eu".into()),
        );
        annotations.insert(OwnedKey::Symbol("x-opt-n".into()), AmqpValue::Int(3));
        let mut props = ApplicationProperties::default();
        props.insert("tenant".into(), SimpleValue::String("acme".into()));
        props.insert("attempt".into(), SimpleValue::Int(2));
        let m = AmqpMessage {
            header: Some(Header {
                durable: true,
                priority: 7.into(),
                ttl: Some(1000),
                first_acquirer: false,
                delivery_count: 2,
            }),
            delivery_annotations: None,
            message_annotations: Some(annotations),
            properties: Some(Properties {
                content_type: Some("application/json".into()),
                content_encoding: Some("gzip".into()),
                creation_time: Some(Timestamp::from_milliseconds(1_700_000_000_123)),
                message_id: Some(MessageId::String("m-1".into())),
                subject: Some("created".into()),
                ..Properties::default()
            }),
            application_properties: Some(props),
            body: Body::Data(
                vec![
                    Data(Binary::from(b"{\"a\":".to_vec())),
                    Data(Binary::from(b"1}".to_vec())),
                ]
                .into(),
            ),
            footer: None,
        };
        let msg = to_message(m.clone(), true);
        assert_eq!(msg.payload().as_ref(), b"{\"a\":1}");
        let meta = |k: &str| msg.meta(k).cloned();
        assert_eq!(
            meta("amqp_content_type"),
            Some(Value::from("application/json"))
        );
        assert_eq!(meta("amqp_content_encoding"), Some(Value::from("gzip")));
        assert_eq!(
            meta("amqp_creation_time"),
            Some(Value::from("2023-11-14T22:13:20.123Z"))
        );
        assert_eq!(meta("amqp_message_id"), Some(Value::from("m-1")));
        assert_eq!(meta("amqp_subject"), Some(Value::from("created")));
        assert_eq!(meta("x_opt_region"), Some(Value::from("eu")));
        assert_eq!(meta("x_opt_n"), None, "only text annotations are copied");
        assert_eq!(meta("tenant"), Some(Value::from("acme")));
        assert_eq!(meta("attempt"), Some(Value::Int(2)));
        assert_eq!(meta("amqp_durable"), Some(Value::Bool(true)));
        assert_eq!(meta("amqp_priority"), Some(Value::Int(7)));
        assert_eq!(meta("amqp_ttl"), Some(Value::Int(1000)));
        assert_eq!(meta("amqp_first_acquirer"), Some(Value::Bool(false)));
        assert_eq!(meta("amqp_delivery_count"), Some(Value::Int(2)));

        let without_header = to_message(m, false);
        assert_eq!(without_header.meta("amqp_durable"), None);
    }

    #[test]
    fn value_bodies_are_text_bytes_or_json() {
        let body = |b: Body<AmqpValue>| {
            let m = AmqpMessage::builder().body(b).build();
            to_message(m, false).payload().clone()
        };
        use fe2o3_amqp::types::messaging::AmqpValue as Section;
        assert_eq!(
            body(Body::Value(Section(AmqpValue::String("hi".into())))).as_ref(),
            b"hi"
        );
        assert_eq!(
            body(Body::Value(Section(AmqpValue::List(vec![
                AmqpValue::Int(1),
                AmqpValue::Bool(true)
            ]))))
            .as_ref(),
            b"[1,true]"
        );
        assert_eq!(body(Body::Empty).as_ref(), b"");
    }
}
