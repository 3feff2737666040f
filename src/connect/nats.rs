//! The NATS connection shared by the `nats` and `nats_jetstream` connectors.
//!
//! async-nats reconnects by itself and keeps subscriptions across reconnects; what it does
//! not give is a way to wait for a state change. The event callback feeds a watch channel
//! so that a reader can notice a lost connection (and report it to the runtime, which then
//! waits in `connect` for the client to be back) without polling.

use std::time::Duration as StdDuration;

use async_nats::{Client, ConnectOptions, Event};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::watch;

use crate::egress::Egress;

use super::TlsConfig;
use crate::component::ConnectorError;
use crate::http::history::HistoryError;
use crate::message::Message;

/// How a NATS client authenticates.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NatsAuth {
    /// User name (with `password`).
    pub user: Option<String>,
    pub password: Option<String>,
    /// A token, instead of a user and password.
    pub token: Option<String>,
    /// A `.creds` file (JWT and NKey seed), as issued by an operator.
    pub user_credentials_file: Option<String>,
}

/// A NATS connector's settings that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("`urls` is empty")]
    NoUrls,
    #[error("`{url}` is not a NATS URL: {source}")]
    Url {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error("`auth.user` and `auth.password` must be given together")]
    UnpairedUser,
    #[error("`subject` is empty")]
    NoSubject,
    #[error("`max_in_flight` must be at least 1")]
    NoneInFlight,
}

/// The checks every NATS publishing output makes on top of [`validate`].
pub fn validate_publisher(
    urls: &[String],
    tls: &TlsConfig,
    auth: &NatsAuth,
    subject: &crate::config::Interp,
    max_in_flight: usize,
) -> Result<(), SetupError> {
    validate(urls, tls, auth)?;
    if subject.source().is_empty() {
        return Err(SetupError::NoSubject);
    }
    if max_in_flight == 0 {
        return Err(SetupError::NoneInFlight);
    }
    Ok(())
}

/// Checks the settings every NATS connector shares.
pub fn validate(urls: &[String], tls: &TlsConfig, auth: &NatsAuth) -> Result<(), SetupError> {
    if urls.is_empty() {
        return Err(SetupError::NoUrls);
    }
    for u in urls {
        u.parse::<async_nats::ServerAddr>()
            .map_err(|source| SetupError::Url {
                url: u.clone(),
                source,
            })?;
    }
    tls.validate()?;
    if auth.user.is_some() != auth.password.is_some() {
        return Err(SetupError::UnpairedUser);
    }
    Ok(())
}

/// A connected client and a view of whether it is connected right now.
pub struct NatsConn {
    pub client: Client,
    pub up: watch::Receiver<bool>,
}

impl NatsConn {
    pub async fn connect(
        urls: &[String],
        tls: &TlsConfig,
        auth: &NatsAuth,
        name: &str,
        egress: &Egress,
    ) -> Result<NatsConn, ConnectorError> {
        egress.check().await?;
        let (tx, up) = watch::channel(false);
        let mut opts = ConnectOptions::new()
            .name(name)
            .connection_timeout(StdDuration::from_secs(5))
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    match event {
                        Event::Connected => {
                            tx.send_replace(true);
                        }
                        Event::Disconnected | Event::Closed => {
                            tx.send_replace(false);
                        }
                        _ => {}
                    }
                }
            });
        if egress.policy().is_some() {
            // Servers a posted stream reaches are the ones checked, not those a server
            // names for its cluster.
            opts = opts.ignore_discovered_servers();
        }
        if let (Some(u), Some(p)) = (&auth.user, &auth.password) {
            opts = opts.user_and_password(u.clone(), p.clone());
        }
        if let Some(t) = &auth.token {
            opts = opts.token(t.clone());
        }
        if let Some(f) = &auth.user_credentials_file {
            opts = opts.credentials_file(f).await.map_err(|e| {
                ConnectorError::rejected(format!("cannot read credentials `{f}`")).with_source(e)
            })?;
        }
        if tls.enabled {
            opts = opts.require_tls(true);
        }
        if *tls != TlsConfig::default() {
            // The same rustls set-up as the other connectors, so that `skip_cert_verify`
            // works here too (also for a `tls://` URL without `enabled`); used whenever
            // the server asks for TLS.
            let config = tls
                .rustls_client_config()
                .map_err(|e| ConnectorError::rejected("TLS").with_source(e))?;
            opts = opts.tls_client_config(config);
        }
        let client = opts
            .connect(urls)
            .await
            .map_err(|e| ConnectorError::not_connected("cannot connect to NATS").with_source(e))?;
        Ok(NatsConn { client, up })
    }

    pub fn is_up(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Waits (up to `limit`) for the client's own reconnect to succeed.
    pub async fn wait_up(&mut self, limit: StdDuration) -> Result<(), ConnectorError> {
        let deadline = tokio::time::Instant::now() + limit;
        while !self.is_up() {
            // The event only wakes us; the client's own state is the truth.
            if tokio::time::timeout_at(deadline, self.up.changed())
                .await
                .is_err()
            {
                return Err(ConnectorError::not_connected("NATS server is unreachable"));
            }
        }
        Ok(())
    }

    /// Resolves once the connection is lost. Cancel safe.
    pub async fn lost(&mut self) {
        while self.is_up() {
            if self.up.changed().await.is_err() {
                // The client is gone with its callback: it can no longer change state.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Copies NATS headers into metadata (the first value of each header).
pub fn headers_to_meta(headers: Option<&async_nats::HeaderMap>, msg: &mut Message) {
    if let Some(h) = headers {
        for (name, values) in h.iter() {
            if let Some(v) = values.first() {
                msg.set_meta(name.to_string(), v.as_str());
            }
        }
    }
}

/// Builds the headers an output sends from a message's forwarded metadata.
pub fn meta_to_headers(
    filter: &super::MetadataFilter,
    msg: &Message,
) -> Option<async_nats::HeaderMap> {
    if !filter.carries(msg) {
        return None;
    }
    let mut h = async_nats::HeaderMap::new();
    for (k, v) in filter.pairs(msg) {
        h.insert(k, v.as_str());
    }
    Some(h)
}

/// The messages of stream `stream` (only `subject`'s, when not empty) after stream
/// sequence `after`, through the last there is now, each made a message by `message`:
/// read by an ephemeral consumer that starts there and acknowledges nothing. Incomplete
/// when the stream's retention dropped messages after `after` (perhaps of another
/// subject: sequences are the stream's).
pub async fn messages_after(
    js: &async_nats::jetstream::Context,
    stream: &str,
    subject: String,
    after: u64,
    message: fn(&async_nats::jetstream::Message) -> Message,
) -> Result<crate::http::history::Past, HistoryError> {
    use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
    use futures::StreamExt;
    let mut stream = js
        .get_stream(stream)
        .await
        .map_err(|e| HistoryError::failed("opening the stream", e))?;
    let info = stream
        .info()
        .await
        .map_err(|e| HistoryError::failed("reading the stream's state", e))?;
    let (first, last) = (info.state.first_sequence, info.state.last_sequence);
    let complete = after.saturating_add(1) >= first;
    if after >= last {
        return Ok(crate::http::history::Past {
            complete,
            messages: futures::stream::empty().boxed(),
        });
    }
    let mut consumer: PullConsumer = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: after.saturating_add(1).max(first),
            },
            ack_policy: AckPolicy::None,
            filter_subject: subject,
            // Gone soon after the catch-up stops reading, as nothing deletes it.
            inactive_threshold: StdDuration::from_secs(10),
            ..Default::default()
        })
        .await
        .map_err(|e| HistoryError::failed("creating a reader", e))?;
    let pending = consumer
        .info()
        .await
        .map_err(|e| HistoryError::failed("reading the reader's state", e))?
        .num_pending;
    let messages = consumer
        .messages()
        .await
        .map_err(|e| HistoryError::failed("reading the stream", e))?
        .take(usize::try_from(pending).unwrap_or(usize::MAX))
        .map(move |m| {
            m.map(|m| message(&m))
                .map_err(|e| HistoryError::failed("reading a message", e))
        });
    Ok(crate::http::history::Past {
        complete,
        messages: messages.boxed(),
    })
}
