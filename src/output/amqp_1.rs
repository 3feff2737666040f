//! `amqp_1` output: sends each message to a target address of an AMQP 1.0 broker.
//!
//! Delivery: every message is sent unsettled and the write succeeds once the broker
//! settled each with `accepted`. A `rejected` outcome fails the write as rejected (sending
//! it again cannot help); `released` or `modified` fails it for a retry; a lost link or
//! connection reports `NotConnected`, so the runtime reconnects and sends the batch again.

use std::sync::Arc;

use async_trait::async_trait;
use fe2o3_amqp::link::{SendError, Sender};
use fe2o3_amqp::types::messaging::{AmqpValue as ValueSection, ApplicationProperties};
use fe2o3_amqp::types::messaging::{
    Body, Data, Header, Message as AmqpMessage, MessageAnnotations, Outcome as AmqpOutcome,
    Properties, Target,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value as AmqpValue};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::{Interp, MappingText};
use crate::connect::amqp1::{link_lost, Endpoint, Link, Sasl};
use crate::connect::metadata::TRACE_CONTEXT;
use crate::connect::{MetadataConfig, MetadataFilter, TlsConfig};
use crate::message::Batch;
use crate::value::Value;

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ContentType {
    /// The payload as one data section (bytes).
    #[default]
    OpaqueBinary,
    /// The payload as a string value section; it must be UTF-8.
    String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amqp1OutputConfig {
    /// Broker URLs (`amqp://user:pass@host:5672`, `amqps://` for TLS); the first that
    /// answers is used. Entries may hold several URLs separated by commas.
    #[serde(default)]
    pub urls: Vec<String>,
    /// A single broker URL, the older form of `urls`.
    #[serde(default)]
    pub url: Option<String>,
    /// The address to send to, e.g. `/queue/orders` or `/exchange/events/created` on
    /// RabbitMQ.
    pub target_address: String,
    /// Capabilities asked of the target node (e.g. `queue`, `topic`).
    #[serde(default)]
    pub target_capabilities: Vec<String>,
    /// Writes allowed at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// TLS settings (on for `amqps://` URLs, or for all with `enabled`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// SASL authentication.
    #[serde(default)]
    pub sasl: Sasl,
    /// A mapping run on each message whose result (an object of simple values) becomes the
    /// message's application properties.
    #[serde(default)]
    pub application_properties_map: Option<MappingText>,
    /// Which metadata to send, as message annotations with text values.
    #[serde(default)]
    pub metadata: MetadataConfig,
    /// How the payload is sent: `opaque_binary` (a data section) or `string` (a string
    /// value).
    #[serde(default)]
    pub content_type: ContentType,
    /// Mark messages durable (the broker keeps them across a restart in a durable queue).
    #[serde(default)]
    pub persistent: bool,
    // The message properties are boxed: unset (the usual case) they take a word each in
    // the config enum of every output.
    /// The `to` property (interpolated per message).
    #[serde(default)]
    pub message_properties_to: Option<Box<Interp>>,
    /// The `message-id` property (interpolated per message).
    #[serde(default)]
    pub message_properties_message_id: Option<Box<Interp>>,
    /// The `correlation-id` property (interpolated per message).
    #[serde(default)]
    pub message_properties_correlation_id: Option<Box<Interp>>,
    /// The `subject` property (interpolated per message).
    #[serde(default)]
    pub message_properties_subject: Option<Box<Interp>>,
    /// The `reply-to` property (interpolated per message).
    #[serde(default)]
    pub message_properties_reply_to: Option<Box<Interp>>,
    /// The `group-id` property (interpolated per message).
    #[serde(default)]
    pub message_properties_group_id: Option<Box<Interp>>,
    /// The `reply-to-group-id` property (interpolated per message).
    #[serde(default)]
    pub message_properties_reply_to_group_id: Option<Box<Interp>>,
    /// The `user-id` property (interpolated per message; the broker may check it against
    /// the connection's user).
    #[serde(default)]
    pub message_properties_user_id: Option<Box<Interp>>,
    /// The `content-type` property (interpolated per message).
    #[serde(default)]
    pub message_properties_content_type: Option<Box<Interp>>,
    /// The `content-encoding` property (interpolated per message).
    #[serde(default)]
    pub message_properties_content_encoding: Option<Box<Interp>>,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
}

fn default_max_in_flight() -> usize {
    64
}

impl Spec for Amqp1OutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "amqp_1",
        kind: Kind::Output,
        summary: "Sends messages to an AMQP 1.0 target address and waits for the broker to accept each.",
        examples: &[Example {
            title: "Send to a RabbitMQ queue with application properties",
            yaml: "input:\n  stdin: {}\noutput:\n  amqp_1:\n    urls: ['amqp://guest:guest@127.0.0.1:5672']\n    target_address: /queue/orders\n    persistent: true\n    message_properties_subject: order.created\n    application_properties_map: |\n      root.source = \"sluice\"\n      root.size = content().length()\n",
        }],
    };
}

impl BuildOutput for Amqp1OutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        let endpoint = Endpoint::new(&self.urls, self.url.as_deref(), &self.tls, &self.sasl)
            .map_err(|e| cx.error(e))?;
        if self.target_address.trim().is_empty() {
            return Err(cx.error("`target_address` is empty"));
        }
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        let annotations = self.metadata.compile().map_err(|e| cx.error(e))?;
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(Amqp1Output {
                config: self.clone(),
                egress: cx.egress_addresses(&endpoint.url_texts(), 5672)?,
                endpoint,
                annotations,
                session: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

struct OutSession {
    link: Link,
    sender: Arc<Mutex<Sender>>,
}

pub struct Amqp1Output {
    /// Where a posted stream may connect (checked in `connect`).
    egress: crate::egress::Egress,
    config: Amqp1OutputConfig,
    endpoint: Endpoint,
    annotations: MetadataFilter,
    session: RwLock<Option<OutSession>>,
}

type OutMessage = AmqpMessage<Body<AmqpValue>>;

impl Amqp1Output {
    /// The AMQP message for message `i` of `batch`; an error names the field that could not
    /// be built.
    fn encode(&self, batch: &Batch, i: usize) -> Result<OutMessage, ConnectorError> {
        let c = &self.config;
        let msg = &batch[i];
        let body = match c.content_type {
            ContentType::OpaqueBinary => {
                Body::Data(vec![Data(Binary::from(msg.payload().to_vec()))].into())
            }
            ContentType::String => {
                let text = std::str::from_utf8(msg.payload()).map_err(|e| {
                    ConnectorError::rejected(format!(
                        "`content_type: string`: the payload is not UTF-8: {e}"
                    ))
                })?;
                Body::Value(ValueSection(AmqpValue::String(text.to_owned())))
            }
        };
        let field =
            |f: &Option<Box<Interp>>, name: &str| -> Result<Option<String>, ConnectorError> {
                match f {
                    Some(f) => Ok(Some(f.field(batch, i, name)?.into_owned())),
                    None => Ok(None),
                }
            };
        let properties = Properties {
            message_id: field(
                &c.message_properties_message_id,
                "message_properties_message_id",
            )?
            .map(Into::into),
            user_id: field(&c.message_properties_user_id, "message_properties_user_id")?
                .map(|u| Binary::from(u.into_bytes())),
            to: field(&c.message_properties_to, "message_properties_to")?,
            subject: field(&c.message_properties_subject, "message_properties_subject")?,
            reply_to: field(
                &c.message_properties_reply_to,
                "message_properties_reply_to",
            )?,
            correlation_id: field(
                &c.message_properties_correlation_id,
                "message_properties_correlation_id",
            )?
            .map(Into::into),
            content_type: field(
                &c.message_properties_content_type,
                "message_properties_content_type",
            )?
            .map(Symbol::from),
            content_encoding: field(
                &c.message_properties_content_encoding,
                "message_properties_content_encoding",
            )?
            .map(Symbol::from),
            group_id: field(
                &c.message_properties_group_id,
                "message_properties_group_id",
            )?,
            reply_to_group_id: field(
                &c.message_properties_reply_to_group_id,
                "message_properties_reply_to_group_id",
            )?,
            ..Properties::default()
        };
        let has_properties = properties != Properties::default();
        let mut application_properties = match &c.application_properties_map {
            Some(m) => Some(application_properties(m, batch, i)?),
            None => None,
        };
        // The trace context always travels, as application properties: annotation keys
        // without `x-` are reserved to the AMQP specification, and consumers (and the
        // amqp_1 input) read `traceparent` from the properties. A key the mapping set
        // itself is left as it made it.
        for key in TRACE_CONTEXT {
            if let Some(v) = msg.meta(key).filter(|_| self.annotations.allows(key)) {
                let props = application_properties.get_or_insert_with(Default::default);
                if props.get(key).is_none() {
                    props.insert(key.to_owned(), SimpleValue::String(v.to_text()));
                }
            }
        }
        let message_annotations = if self.annotations.is_empty() {
            None
        } else {
            let mut a = MessageAnnotations::default();
            for (k, v) in self.annotations.pairs(msg) {
                a.insert(Symbol::from(k).into(), AmqpValue::String(v));
            }
            (!a.is_empty()).then_some(a)
        };
        Ok(AmqpMessage {
            header: c.persistent.then(|| Header {
                durable: true,
                ..Header::default()
            }),
            delivery_annotations: None,
            message_annotations,
            properties: has_properties.then_some(properties),
            application_properties,
            body,
            footer: None,
        })
    }
}

/// Runs `application_properties_map` on message `i`: its result must be an object of
/// simple values (text, numbers, booleans, timestamps, bytes, null).
fn application_properties(
    m: &MappingText,
    batch: &Batch,
    i: usize,
) -> Result<ApplicationProperties, ConnectorError> {
    let reject = |e: String| ConnectorError::rejected(format!("`application_properties_map`: {e}"));
    let value = m
        .mapping()
        .query_in(batch, i)
        .map_err(|e| reject(e.to_string()))?;
    let mut props = ApplicationProperties::default();
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                let simple = simple_value(v).map_err(|kind| {
                    reject(format!(
                        "`{k}` is {kind}; application properties hold only simple values"
                    ))
                })?;
                props.insert(k, simple);
            }
        }
        Value::Null => {}
        other => {
            return Err(reject(format!(
                "the result must be an object, not {}",
                kind_of(&other)
            )))
        }
    }
    Ok(props)
}

fn simple_value(v: Value) -> Result<SimpleValue, &'static str> {
    Ok(match v {
        Value::Null => SimpleValue::Null,
        Value::Bool(b) => SimpleValue::Bool(b),
        Value::Int(n) => SimpleValue::Long(n),
        Value::Float(f) => SimpleValue::from(f),
        Value::String(s) => SimpleValue::String(s),
        Value::Bytes(b) => SimpleValue::Binary(Binary::from(b.to_vec())),
        Value::Timestamp(t) => {
            SimpleValue::Timestamp(Timestamp::from_milliseconds(t.timestamp_millis()))
        }
        other => return Err(kind_of(&other)),
    })
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
        Value::String(_) => "a string",
        Value::Bool(_) => "a boolean",
        Value::Int(_) | Value::Float(_) => "a number",
        _ => "a scalar",
    }
}

fn send_error(e: SendError) -> ConnectorError {
    match e {
        SendError::LinkStateError(e) => link_lost(&e, "send failed"),
        SendError::Detached(e) => ConnectorError::not_connected("send failed").with_source(e),
        e @ (SendError::MessageSizeExceeded(_) | SendError::MessageEncodeError) => {
            ConnectorError::rejected("send failed").with_source(e)
        }
        other => ConnectorError::transient(format!("send failed: {other}")),
    }
}

fn outcome_error(outcome: AmqpOutcome) -> Option<ConnectorError> {
    match outcome {
        AmqpOutcome::Accepted(_) => None,
        AmqpOutcome::Rejected(r) => Some(ConnectorError::rejected(match r.error {
            Some(e) => format!(
                "the broker rejected the message: {:?}{}",
                e.condition,
                e.description.map(|d| format!(": {d}")).unwrap_or_default()
            ),
            None => "the broker rejected the message".to_owned(),
        })),
        AmqpOutcome::Released(_) => Some(ConnectorError::transient(
            "the broker released the message without taking it",
        )),
        AmqpOutcome::Modified(_) => Some(ConnectorError::transient(
            "the broker did not take the message (modified)",
        )),
    }
}

#[async_trait]
impl Output for Amqp1Output {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.egress.check().await?;
        if let Some(old) = self.session.write().await.take() {
            old.link.close().await;
        }
        let c = &self.config;
        let mut link = self.endpoint.connect().await?;
        let mut target = Target::builder().address(c.target_address.clone());
        if !c.target_capabilities.is_empty() {
            let caps: Vec<Symbol> = c
                .target_capabilities
                .iter()
                .map(|s| Symbol::from(s.as_str()))
                .collect();
            target = target.capabilities(caps);
        }
        let sender = Sender::builder()
            .name(format!("sluice-sender-{}", uuid::Uuid::new_v4()))
            .target(target.build())
            .attach(&mut link.session)
            .await;
        let sender = match sender {
            Ok(s) => s,
            Err(e) => {
                link.close().await;
                return Err(ConnectorError::not_connected(format!(
                    "cannot send to `{}`: {e}",
                    c.target_address
                )));
            }
        };
        *self.session.write().await = Some(OutSession {
            link,
            sender: Arc::new(Mutex::new(sender)),
        });
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Some(sender) = self.session.read().await.as_ref().map(|s| s.sender.clone()) else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let messages = (0..batch.len())
            .map(|i| self.encode(batch, i))
            .collect::<Result<Vec<_>, _>>()?;
        // Transfers go out in order under the lock; the settlements are awaited after it,
        // so that concurrent writes share the link.
        let mut pending = Vec::with_capacity(messages.len());
        {
            let mut sender = sender.lock().await;
            for m in messages {
                pending.push(sender.send_batchable(m).await.map_err(send_error)?);
            }
        }
        let mut first_error = None;
        for settlement in pending {
            let err = match settlement.await {
                Ok(outcome) => outcome_error(outcome),
                Err(e) => Some(send_error(e)),
            };
            if let (Some(e), None) = (err, &first_error) {
                first_error = Some(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn close(&self) {
        if let Some(s) = self.session.write().await.take() {
            if let Ok(sender) = Arc::try_unwrap(s.sender) {
                let _ = sender.into_inner().close().await;
            }
            s.link.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn parse(yaml: &str) -> Amqp1OutputConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default())
    }

    fn output(yaml: &str) -> Amqp1Output {
        let c = parse(yaml);
        Amqp1Output {
            egress: crate::egress::Egress::open(),
            endpoint: Endpoint::new(&c.urls, c.url.as_deref(), &c.tls, &c.sasl).unwrap(),
            annotations: c.metadata.compile().unwrap(),
            config: c,
            session: RwLock::new(None),
        }
    }

    fn build_err(yaml: &str) -> String {
        match parse(yaml).build(&cx()) {
            Ok(_) => panic!("built: {yaml}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(build_err("{urls: ['amqp://h'], target_address: ''}").contains("`target_address`"));
        assert!(build_err("{urls: [], target_address: q}").contains("`urls` is empty"));
        assert!(
            build_err("{urls: ['amqp://h'], target_address: q, max_in_flight: 0}")
                .contains("`max_in_flight`")
        );
        assert!(build_err(
            "{urls: ['amqp://h'], target_address: q, metadata: {include_patterns: ['(']}}"
        )
        .contains("`metadata.include_patterns[0]`"));
        assert!(serde_yaml::from_str::<Amqp1OutputConfig>(
            "{urls: ['amqp://h'], target_address: q, content_type: json}"
        )
        .is_err());
        assert!(serde_yaml::from_str::<Amqp1OutputConfig>(
            "{urls: ['amqp://h'], target_address: q, application_properties_map: 'root = '}"
        )
        .is_err());
    }

    #[test]
    fn messages_carry_properties_annotations_and_application_properties() {
        let out = output(
            r#"
urls: ['amqp://h']
target_address: /queue/q
persistent: true
content_type: string
message_properties_subject: '${! meta("kind") }'
message_properties_message_id: id-1
metadata: {include_patterns: ['^kind$']}
application_properties_map: |
  root.n = 3
  root.who = meta("kind")
  root.ok = true
"#,
        );
        let batch = vec![Message::new("héllo")
            .with_meta("kind", "order")
            .with_meta("other", "x")];
        let m = out.encode(&batch, 0).unwrap();
        assert!(m.header.as_ref().unwrap().durable);
        match &m.body {
            Body::Value(ValueSection(AmqpValue::String(s))) => assert_eq!(s, "héllo"),
            other => panic!("{other:?}"),
        }
        let p = m.properties.as_ref().unwrap();
        assert_eq!(p.subject.as_deref(), Some("order"));
        assert!(p.message_id.is_some());
        let ap = m.application_properties.as_ref().unwrap();
        assert_eq!(ap.get("n"), Some(&SimpleValue::Long(3)));
        assert_eq!(ap.get("who"), Some(&SimpleValue::String("order".into())));
        assert_eq!(ap.get("ok"), Some(&SimpleValue::Bool(true)));
        let ma = m.message_annotations.as_ref().unwrap();
        assert_eq!(ma.len(), 1, "only the included key");

        let plain = output("{urls: ['amqp://h'], target_address: q}");
        let m = plain.encode(&batch, 0).unwrap();
        assert!(m.header.is_none() && m.properties.is_none());
        assert!(m.message_annotations.is_none() && m.application_properties.is_none());
        assert!(matches!(m.body, Body::Data(_)));
    }

    #[test]
    fn the_trace_context_travels_without_include_patterns() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let batch = vec![Message::new("x")
            .with_meta("traceparent", traceparent)
            .with_meta("other", "y")];
        let m = output("{urls: ['amqp://h'], target_address: q}")
            .encode(&batch, 0)
            .unwrap();
        assert!(m.message_annotations.is_none());
        let ap = m.application_properties.as_ref().expect("properties");
        assert_eq!(ap.len(), 1, "only the trace context");
        assert_eq!(
            ap.get("traceparent"),
            Some(&SimpleValue::String(traceparent.into()))
        );
        // Beside what the mapping makes, which keeps a key it set itself.
        let m = output(
            "{urls: ['amqp://h'], target_address: q, application_properties_map: 'root.n = 1'}",
        )
        .encode(&batch, 0)
        .unwrap();
        assert_eq!(m.application_properties.as_ref().unwrap().len(), 2);
        let m = output(
            "{urls: ['amqp://h'], target_address: q, application_properties_map: 'root.traceparent = \"mine\"'}",
        )
        .encode(&batch, 0)
        .unwrap();
        assert_eq!(
            m.application_properties
                .as_ref()
                .unwrap()
                .get("traceparent"),
            Some(&SimpleValue::String("mine".into()))
        );
        // An exclude pattern keeps it back.
        let m = output(
            "{urls: ['amqp://h'], target_address: q, metadata: {exclude_patterns: ['^trace']}}",
        )
        .encode(&batch, 0)
        .unwrap();
        assert!(m.application_properties.is_none());
    }

    #[test]
    fn unusable_values_reject_the_message() {
        let out = output(
            "{urls: ['amqp://h'], target_address: q, application_properties_map: 'root.a = [1]'}",
        );
        let e = out.encode(&vec![Message::new("x")], 0).unwrap_err();
        assert_eq!(e.kind, crate::component::ErrorKind::Rejected);
        assert!(e.message.contains("`a` is an array"), "{}", e.message);
        let out = output(
            "{urls: ['amqp://h'], target_address: q, application_properties_map: 'root = \"s\"'}",
        );
        let e = out.encode(&vec![Message::new("x")], 0).unwrap_err();
        assert!(e.message.contains("must be an object"), "{}", e.message);
        let out = output("{urls: ['amqp://h'], target_address: q, content_type: string}");
        let e = out
            .encode(&vec![Message::new(vec![0xff, 0xfe])], 0)
            .unwrap_err();
        assert!(e.message.contains("not UTF-8"), "{}", e.message);
    }
}
