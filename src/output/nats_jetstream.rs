//! `nats_jetstream` output: publishes each message to a JetStream subject.
//!
//! Delivery: a write succeeds once the server acknowledged every message of the batch as
//! stored in its stream.

use async_trait::async_trait;
use futures::future::try_join_all;
use schemars::JsonSchema;
use serde::Deserialize;
use std::future::IntoFuture;
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
pub struct NatsJetStreamOutputConfig {
    /// Server URLs (`nats://host:4222`).
    pub urls: Vec<String>,
    /// The subject to publish to (interpolated per message).
    pub subject: Interp,
    /// Which metadata to send as NATS headers.
    #[serde(default)]
    pub metadata: MetadataConfig,
    /// Writes allowed at once.
    #[serde(default = "super::nats::default_max_in_flight")]
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

impl Spec for NatsJetStreamOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "nats_jetstream",
        kind: Kind::Output,
        summary: "Publishes messages to JetStream; a write succeeds once the server stored them.",
        examples: &[Example {
            title: "Store messages in a stream",
            yaml: "input:\n  stdin: {}\noutput:\n  nats_jetstream:\n    urls: [nats://127.0.0.1:4222]\n    subject: orders.created\n    max_in_flight: 64\n",
        }],
    };
}

impl BuildOutput for NatsJetStreamOutputConfig {
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
            output: Box::new(JetStreamOutput {
                config: self.clone(),
                name: cx.owner(),
                egress: cx.egress_addresses(&crate::connect::split_addresses(&self.urls), 4222)?,
                headers,
                reserved: cx.reserved_per_message(subject),
                js: RwLock::new(None),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

pub struct JetStreamOutput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: NatsJetStreamOutputConfig,
    name: String,
    headers: MetadataFilter,
    /// For a posted stream whose subject is made per message, the names each subject is
    /// checked against before it is published to.
    reserved: Option<crate::reserved::ReservedNames>,
    js: RwLock<Option<(async_nats::Client, async_nats::jetstream::Context)>>,
}

#[async_trait]
impl Output for JetStreamOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        let mut guard = self.js.write().await;
        if let Some((client, _)) = guard.as_ref() {
            if client.connection_state() == async_nats::connection::State::Connected {
                return Ok(());
            }
            return Err(ConnectorError::not_connected("NATS server is unreachable"));
        }
        let c = &self.config;
        let conn = NatsConn::connect(&c.urls, &c.tls, &c.auth, &self.name, &self.egress).await?;
        let js = async_nats::jetstream::new(conn.client.clone());
        *guard = Some((conn.client, js));
        Ok(())
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let Some((client, js)) = self.js.read().await.clone() else {
            return Err(ConnectorError::not_connected("not connected"));
        };
        let classify = |e: &dyn std::fmt::Display| {
            let text = format!("JetStream publish failed: {e}");
            if client.connection_state() == async_nats::connection::State::Connected {
                ConnectorError::transient(text)
            } else {
                ConnectorError::not_connected(text)
            }
        };
        // Publish the whole batch first, then wait for the acks: one round-trip, not n.
        let mut acks = Vec::with_capacity(batch.len());
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
            let ack = match meta_to_headers(&self.headers, msg) {
                Some(h) => {
                    js.publish_with_headers(subject.into_owned(), h, payload)
                        .await
                }
                None => js.publish(subject.into_owned(), payload).await,
            }
            .map_err(|e| classify(&e))?;
            acks.push(ack.into_future());
        }
        try_join_all(acks).await.map_err(|e| classify(&e))?;
        Ok(())
    }
}
