//! `nats` output: publishes each message to a core NATS subject.
//!
//! Delivery: a write succeeds once the client has flushed the messages to the server's
//! connection, which is as far as core NATS goes: there is no acknowledgement, and a
//! subject with no subscriber at that moment drops them. Use `nats_jetstream` for stored, acknowledged publishing.

use async_trait::async_trait;
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
use crate::connect::nats::{meta_to_headers, validate_publisher, NatsAuth, NatsConn};
use crate::connect::{MetadataConfig, MetadataFilter, TlsConfig};
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsOutputConfig {
    /// Server URLs (`nats://host:4222`).
    pub urls: Vec<String>,
    /// The subject to publish to (interpolated per message).
    pub subject: Interp,
    /// Which metadata to send as NATS headers.
    #[serde(default)]
    pub metadata: MetadataConfig,
    /// Writes allowed at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// How messages are grouped into writes.
    #[serde(default)]
    pub batching: BatchPolicy,
    /// TLS settings.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Authentication.
    #[serde(default)]
    pub auth: NatsAuth,
}

pub(crate) fn default_max_in_flight() -> usize {
    64
}

impl Spec for NatsOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "nats",
        kind: Kind::Output,
        summary: "Publishes messages to a core NATS subject.",
        examples: &[Example {
            title: "Publish to a subject",
            yaml: "input:\n  stdin: {}\noutput:\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: events\n    metadata:\n      include_patterns: ['.*']\n",
        }],
    };
}

impl BuildOutput for NatsOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        validate_publisher(
            &self.urls,
            &self.tls,
            &self.auth,
            &self.subject,
            self.max_in_flight,
        )
        .map_err(|e| cx.error(e))?;
        let headers = self.metadata.compile().map_err(|e| cx.error(e))?;
        let subject = &self.subject;
        cx.refuse_reserved("subject", |r| match subject.static_value() {
            Some(s) => r.check_subject(s),
            None => r.check_subject_template(subject.source()),
        })?;
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(NatsOutput {
                config: self.clone(),
                name: cx.owner(),
                egress: cx.egress_addresses(&crate::connect::split_addresses(&self.urls), 4222)?,
                headers,
                reserved: cx.reserved_per_message(subject),
                client: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

pub struct NatsOutput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: NatsOutputConfig,
    name: String,
    headers: MetadataFilter,
    /// For a posted stream whose subject is made per message, the names each subject is
    /// checked against before it is published to.
    reserved: Option<crate::reserved::ReservedNames>,
    client: RwLock<Option<async_nats::Client>>,
}

#[async_trait]
impl Output for NatsOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        let mut guard = self.client.write().await;
        if let Some(client) = guard.as_ref() {
            if client.connection_state() == async_nats::connection::State::Connected {
                return Ok(());
            }
            // The client is reconnecting by itself; report it down until it is back.
            return Err(ConnectorError::not_connected("NATS server is unreachable"));
        }
        let c = &self.config;
        let conn = NatsConn::connect(&c.urls, &c.tls, &c.auth, &self.name, &self.egress).await?;
        *guard = Some(conn.client);
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Some(client) = self.client.read().await.clone() else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            return Err(ConnectorError::not_connected("NATS server is unreachable"));
        }
        let lost = |e: &dyn std::fmt::Display| {
            ConnectorError::not_connected(format!("publish failed: {e}"))
        };
        let subjects = self.config.subject.fields(batch, "subject")?;
        if let Some(reserved) = &self.reserved {
            for subject in &subjects {
                reserved
                    .check_subject(subject)
                    .map_err(|e| ConnectorError::rejected(format!("`subject`: {e}")))?;
            }
        }
        for (msg, subject) in batch.iter().zip(subjects) {
            let payload = msg.payload().clone();
            match meta_to_headers(&self.headers, msg) {
                Some(h) => {
                    client
                        .publish_with_headers(subject.into_owned(), h, payload)
                        .await
                }
                None => client.publish(subject.into_owned(), payload).await,
            }
            .map_err(|e| lost(&e))?;
        }
        // Without a flush the messages could still sit in the client's buffer.
        client.flush().await.map_err(|e| lost(&e))
    }

    async fn close(&self) {
        if let Some(client) = self.client.write().await.take() {
            let _ = client.flush().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    /// A posted stream's context, whose policy lets it reach the NATS server on loopback.
    fn posted() -> BuildContext {
        let mut cx = BuildContext::new("t", Default::default(), Default::default());
        let policy = crate::egress::EgressPolicy::new(&crate::egress::EgressConfig {
            allow: vec!["127.0.0.1".into()],
            ..Default::default()
        })
        .unwrap();
        cx.reach.policy = Some(std::sync::Arc::new(policy));
        cx.id.path = "output.nats".into();
        cx
    }

    fn output(subject: &str, cx: &BuildContext) -> Result<Box<dyn Output>, BuildError> {
        let config: NatsOutputConfig = serde_yaml::from_str(&format!(
            "{{urls: ['nats://127.0.0.1:4222'], subject: '{subject}'}}"
        ))
        .unwrap();
        match config.build(cx)? {
            OutputBuild::Writer(w) => Ok(w.output),
            OutputBuild::Router(..) => unreachable!("nats is a writer"),
        }
    }

    #[test]
    fn a_posted_stream_s_subject_may_not_be_the_bus_s() {
        let e = output("sluice.bus.x", &posted()).err().unwrap();
        assert_eq!(e.path, "output.nats.subject");
        let e = output("sluice.bus.${! meta(\"t\") }", &posted())
            .err()
            .unwrap();
        assert_eq!(e.path, "output.nats.subject");
        // The operator's own streams name what they like.
        let own = BuildContext::new("t", Default::default(), Default::default());
        assert!(output("sluice.bus.x", &own).is_ok());
    }

    // Against the machine's NATS: a subject made per message is checked before it is
    // published to, and the batch is refused without anything sent.
    #[tokio::test]
    async fn a_subject_made_per_message_is_checked_each_time() {
        let out = output("${! meta(\"to\") }", &posted()).unwrap();
        out.connect().await.unwrap();
        let client = async_nats::connect("nats://127.0.0.1:4222").await.unwrap();
        let mut bus = client.subscribe("sluice.bus.>").await.unwrap();
        client.flush().await.unwrap();
        let own = format!("own_{}", std::process::id());
        let batch = vec![
            Message::new("ok").with_meta("to", own.as_str()),
            Message::new("forged").with_meta("to", "sluice.bus.0a1b"),
        ];
        let e = out.write(&batch).await.unwrap_err();
        assert_eq!(e.kind, crate::component::ErrorKind::Rejected, "{e}");
        assert!(e.to_string().contains("cluster bus"), "{e}");
        out.write(&vec![Message::new("ok").with_meta("to", own.as_str())])
            .await
            .unwrap();
        // What the output sent was flushed before `write` returned: a marker published
        // after it is the first thing on the bus's subjects only if nothing else was.
        client
            .publish("sluice.bus.marker", "marker".into())
            .await
            .unwrap();
        let first = futures::StreamExt::next(&mut bus).await.unwrap();
        assert_eq!(first.payload.as_ref(), b"marker");
    }
}
