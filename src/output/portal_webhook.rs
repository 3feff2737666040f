//! `portal_webhook` output: publishes each message as an event of a developer-portal API
//! product. The portal (the dashboard's `POST /api/portal/products/{id}/events`) checks
//! the signature made with the product's publish `secret`, stores one delivery per
//! subscriber that chose the event, and answers; only then is the message acked, so a
//! stream loses nothing. The portal's worker then delivers to each subscriber, signed with
//! the subscriber's own secret.

use std::collections::BTreeMap;

use async_trait::async_trait;
use http::{HeaderMap, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BuildOutput, OutputBuild};
use crate::batching::BatchPolicy;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, ConnectorError, Example, Kind, Output, Writer,
};
use crate::config::Interp;
use crate::connect::http_client::{self, ClientSettings, HttpClient};
use crate::duration::Duration;
use crate::message::Batch;
use crate::webhook::sign;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PortalWebhookConfig {
    /// The event's name; one the product opens to subscription (interpolated per
    /// message).
    pub event_type: Interp,
    /// The product's events address:
    /// `http://<dashboard>/api/portal/products/<product id>/events`.
    pub portal_url: String,
    /// The product's publish secret; signs each request.
    pub secret: String,
    /// More headers sent to the portal (values interpolated per message).
    #[serde(default)]
    pub headers: BTreeMap<String, Interp>,
    /// Time allowed for one request, answer included.
    #[serde(default = "http_client::default_timeout")]
    pub timeout: Duration,
    /// Attempts after the first for connection failures, 5xx and 429 answers.
    #[serde(default = "http_client::default_retries")]
    pub retries: u32,
    /// Wait before the first retry; doubles up to `max_retry_backoff`.
    #[serde(default = "http_client::default_retry_period")]
    pub retry_period: Duration,
    /// Longest wait between retries.
    #[serde(default = "http_client::default_max_retry_backoff")]
    pub max_retry_backoff: Duration,
    /// Events published at once.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// How messages are grouped into writes (each message is still its own event).
    #[serde(default)]
    pub batching: BatchPolicy,
    /// Accept any server certificate (testing only).
    #[serde(default)]
    pub tls_skip_verify: bool,
}

fn default_max_in_flight() -> usize {
    64
}

/// The shortest publish secret accepted, as the portal requires.
const MIN_SECRET_LEN: usize = 16;

impl Spec for PortalWebhookConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "portal_webhook",
        kind: Kind::Output,
        summary: "Publishes each message as an event to the developer portal's webhook subscribers.",
        examples: &[Example {
            title: "Order events to portal subscribers",
            yaml: "input:\n  stdin: {}\noutput:\n  portal_webhook:\n    event_type: order.created\n    portal_url: http://127.0.0.1:3000/api/portal/products/orders/events\n    secret: publish-secret-of-the-orders-product\n",
        }],
    };
}

impl BuildOutput for PortalWebhookConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        if self.max_in_flight == 0 {
            return Err(cx.error("`max_in_flight` must be at least 1"));
        }
        if self.secret.len() < MIN_SECRET_LEN {
            return Err(cx.error(format!(
                "`secret` must be the product's publish secret, at least {MIN_SECRET_LEN} characters"
            )));
        }
        if let Some(event) = self.event_type.static_value() {
            check_event(event).map_err(|e| cx.error(format!("`event_type`: {e}")))?;
        }
        let url =
            Interp::parse(&self.portal_url).map_err(|e| cx.error(format!("`portal_url`: {e}")))?;
        let client = HttpClient::new(
            ClientSettings {
                url,
                verb: "POST".into(),
                headers: self.headers.clone(),
                timeout: self.timeout,
                retries: self.retries,
                retry_period: self.retry_period,
                max_retry_backoff: self.max_retry_backoff,
                successful_on: Vec::new(),
                tls_skip_verify: self.tls_skip_verify,
            },
            cx,
        )?;
        Ok(OutputBuild::Writer(Writer {
            output: Box::new(PortalWebhookOutput {
                client,
                event_type: self.event_type.clone(),
                secret: self.secret.clone().into_bytes(),
            }),
            max_in_flight: self.max_in_flight,
            batching: self.batching.clone(),
        }))
    }
}

/// An event name: 1 to 100 of letters, digits, `_`, `.`, `:` and `-`.
pub fn check_event(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not an event name (1 to 100 letters, digits, `_`, `.`, `:`, `-`)"
        ))
    }
}

pub struct PortalWebhookOutput {
    client: HttpClient,
    event_type: Interp,
    secret: Vec<u8>,
}

#[async_trait]
impl Output for PortalWebhookOutput {
    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        for (i, msg) in batch.iter().enumerate() {
            let event = self.event_type.render(batch, i).map_err(|e| {
                ConnectorError::rejected("cannot build `event_type`").with_source(e)
            })?;
            check_event(&event).map_err(ConnectorError::rejected)?;
            let body = msg.payload().clone();
            let signature = sign::sign(&self.secret, chrono::Utc::now().timestamp(), &body);
            // One key for every attempt at this event: the portal queues it once.
            let key = uuid::Uuid::now_v7().to_string();
            let mut headers = HeaderMap::new();
            for (name, value) in [
                (sign::EVENT_HEADER, event.as_str()),
                (sign::SIGNATURE_HEADER, signature.as_str()),
                (sign::IDEMPOTENCY_HEADER, key.as_str()),
            ] {
                let value = HeaderValue::from_str(value).map_err(|_| {
                    ConnectorError::rejected(format!("`{value}` is not a header value"))
                })?;
                headers.insert(name, value);
            }
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            self.client
                .send(Some((batch, i)), Some(body), &headers)
                .await?;
        }
        Ok(())
    }

    fn connects_per_write(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names() {
        assert!(check_event("order.created").is_ok());
        assert!(check_event("a:b-c_d").is_ok());
        assert!(check_event("").is_err());
        assert!(check_event("with space").is_err());
        assert!(check_event(&"x".repeat(101)).is_err());
    }

    #[test]
    fn config_errors() {
        let yaml = "event_type: order.created\nportal_url: http://127.0.0.1:1/api/portal/products/p/events\nsecret: short\n";
        let config: PortalWebhookConfig = serde_yaml::from_str(yaml).unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        let e = config.build(&cx).err().unwrap();
        assert!(e.to_string().contains("at least 16"), "{e}");
        let yaml =
            "event_type: 'bad name'\nportal_url: http://127.0.0.1:1/x\nsecret: 0123456789abcdef\n";
        let config: PortalWebhookConfig = serde_yaml::from_str(yaml).unwrap();
        let e = config.build(&cx).err().unwrap();
        assert!(e.to_string().contains("event_type"), "{e}");
    }
}
