//! `nats` input: subscribes to a core NATS subject, optionally in a queue group so that
//! several consumers share the messages.
//!
//! Delivery: at most once. Core NATS has no acknowledgement and no storage: a message
//! published while this input is disconnected is not kept for it. Use `nats_jetstream`
//! when messages must survive an outage.

use std::sync::Arc;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildInput, InputBuild};
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Input, Kind, ReadBatch,
};
use crate::connect::nats::{headers_to_meta, validate, NatsAuth, NatsConn};
use crate::connect::TlsConfig;
use crate::message::{Batch, Message, Metadata};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsInputConfig {
    /// Server URLs (`nats://host:4222`); the client picks one and fails over to the others.
    pub urls: Vec<String>,
    /// The subject to subscribe to; `*` and `>` wildcards are allowed.
    pub subject: String,
    /// A queue group: each message goes to one member of the group only.
    #[serde(default)]
    pub queue: Option<String>,
    /// Largest batch made of messages that are already waiting (1: one message per batch).
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// TLS settings.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Authentication.
    #[serde(default)]
    pub auth: NatsAuth,
}

pub(crate) fn default_max_batch() -> usize {
    64
}

impl Spec for NatsInputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "nats",
        kind: Kind::Input,
        summary: "Subscribes to a core NATS subject (at most once), optionally in a queue group.",
        examples: &[Example {
            title: "Share a subject's messages with other consumers",
            yaml: "input:\n  nats:\n    urls: [nats://127.0.0.1:4222]\n    subject: orders.>\n    queue: workers\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildInput for NatsInputConfig {
    fn build(&self, cx: &BuildContext) -> Result<InputBuild, BuildError> {
        validate(&self.urls, &self.tls, &self.auth).map_err(|e| cx.error(e))?;
        if self.subject.is_empty() {
            return Err(cx.error("`subject` is empty"));
        }
        cx.refuse_reserved("subject", |r| r.check_subject(&self.subject))?;
        if self.max_batch == 0 {
            return Err(cx.error("`max_batch` must be at least 1"));
        }
        Ok(InputBuild::Leaf(Box::new(NatsInput {
            config: self.clone(),
            name: cx.owner(),
            egress: cx.egress_addresses(&crate::connect::split_addresses(&self.urls), 4222)?,
            conn: None,
            sub: None,
            convert: Convert::default(),
        })))
    }
}

pub struct NatsInput {
    /// Where a posted stream may connect, checked before connecting.
    egress: crate::egress::Egress,
    config: NatsInputConfig,
    name: String,
    conn: Option<NatsConn>,
    sub: Option<async_nats::Subscriber>,
    convert: Convert,
}

/// Turns NATS messages into stream messages. Messages of one subject with neither
/// headers nor a reply subject all carry the same metadata, so they share one map
/// (copied only if a processor changes it) instead of building a map each.
#[derive(Default)]
struct Convert {
    last: Option<(async_nats::Subject, Arc<Metadata>)>,
}

impl Convert {
    fn message(&mut self, m: async_nats::Message) -> Message {
        let plain = m.headers.is_none() && m.reply.is_none();
        if plain {
            if let Some((subject, meta)) = &self.last {
                if *subject == m.subject {
                    return Message::new(m.payload).with_shared_metadata(meta.clone());
                }
            }
        }
        let mut msg = Message::new(m.payload);
        headers_to_meta(m.headers.as_ref(), &mut msg);
        msg.set_meta("nats_subject", m.subject.as_str());
        if let Some(reply) = &m.reply {
            msg.set_meta("nats_reply_subject", reply.as_str());
        }
        if plain {
            // A copy of the subject: the received one may hold on to the client's read
            // buffer for as long as it is kept.
            let subject = async_nats::Subject::from(m.subject.as_str());
            self.last = msg.shared_metadata().map(|meta| (subject, meta.clone()));
        }
        msg
    }
}

#[async_trait]
impl Input for NatsInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        // The client reconnects by itself and keeps the subscription: after a lost
        // connection, only wait for it to be back.
        if let (Some(conn), Some(_)) = (&mut self.conn, &self.sub) {
            return conn.wait_up(std::time::Duration::from_secs(5)).await;
        }
        let c = &self.config;
        let conn = NatsConn::connect(&c.urls, &c.tls, &c.auth, &self.name, &self.egress).await?;
        let sub = match &c.queue {
            Some(q) => {
                conn.client
                    .queue_subscribe(c.subject.clone(), q.clone())
                    .await
            }
            None => conn.client.subscribe(c.subject.clone()).await,
        }
        .map_err(|e| ConnectorError::not_connected("cannot subscribe").with_source(e))?;
        self.sub = Some(sub);
        self.conn = Some(conn);
        Ok(())
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        let (Some(conn), Some(sub)) = (&mut self.conn, &mut self.sub) else {
            return Err(ConnectorError::not_connected("not subscribed"));
        };
        let first = tokio::select! {
            m = sub.next() => m,
            _ = conn.lost() => return Err(ConnectorError::not_connected("connection to NATS lost")),
        };
        let Some(first) = first else {
            self.sub = None;
            self.conn = None;
            return Err(ConnectorError::not_connected("subscription closed"));
        };
        let convert = &mut self.convert;
        let mut batch: Batch = vec![convert.message(first)];
        while batch.len() < self.config.max_batch {
            match sub.next().now_or_never() {
                Some(Some(m)) => batch.push(convert.message(m)),
                _ => break,
            }
        }
        Ok(ReadBatch::unacked(batch))
    }

    async fn close(&mut self) {
        if let Some(mut sub) = self.sub.take() {
            let _ = sub.unsubscribe().await;
        }
        if let Some(conn) = self.conn.take() {
            let _ = conn.client.drain().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default())
    }

    fn nats_message(subject: &str, reply: Option<&str>) -> async_nats::Message {
        async_nats::Message {
            subject: subject.into(),
            reply: reply.map(Into::into),
            payload: "p".into(),
            headers: None,
            status: None,
            description: None,
            length: 1,
        }
    }

    #[test]
    fn messages_of_one_subject_share_their_metadata() {
        let mut c = Convert::default();
        let a = c.message(nats_message("a.b", None));
        let b = c.message(nats_message("a.b", None));
        assert!(std::ptr::eq(a.metadata(), b.metadata()));
        let other = c.message(nats_message("a.c", None));
        assert_eq!(other.meta_str("nats_subject").as_deref(), Some("a.c"));
        let reply = c.message(nats_message("a.c", Some("inbox.1")));
        assert_eq!(
            reply.meta_str("nats_reply_subject").as_deref(),
            Some("inbox.1")
        );
        let after = c.message(nats_message("a.c", None));
        assert!(after.meta("nats_reply_subject").is_none());
        assert!(std::ptr::eq(other.metadata(), after.metadata()));
    }

    #[test]
    fn config_defaults_and_validation() {
        let c: NatsInputConfig =
            serde_yaml::from_str("{urls: [nats://127.0.0.1:4222], subject: a.b}").unwrap();
        assert_eq!(c.max_batch, 64);
        assert!(c.build(&cx()).is_ok());
        let bad: NatsInputConfig = serde_yaml::from_str("{urls: [], subject: a}").unwrap();
        assert!(bad.build(&cx()).is_err());
        assert!(
            serde_yaml::from_str::<NatsInputConfig>("{urls: [x], subject: a, nope: 1}").is_err()
        );
    }
}
