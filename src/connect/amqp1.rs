//! AMQP 1.0 pieces shared by the `amqp_1` input and output: the connection (URL, TLS,
//! SASL) and how client errors map onto the runtime's error kinds.

use std::time::Duration as StdDuration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::LinkStateError;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use percent_encoding::percent_decode_str;
use rustls::pki_types::ServerName;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use url::Url;

use super::{split_addresses, TlsConfig};
use crate::component::ConnectorError;

/// How long opening a connection (TCP, TLS, SASL, AMQP open and begin) may take.
const OPEN_TIMEOUT: StdDuration = StdDuration::from_secs(15);

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SaslMechanism {
    /// No SASL block: the URL's `user:password`, if any, is sent as PLAIN; otherwise the
    /// connection opens without SASL.
    #[default]
    None,
    /// PLAIN with `user` and `password`.
    Plain,
    /// ANONYMOUS.
    Anonymous,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Sasl {
    /// `none`, `plain` or `anonymous`.
    pub mechanism: SaslMechanism,
    /// The user for `plain`.
    pub user: String,
    /// The password for `plain`.
    pub password: String,
}

/// Where and how to connect, as both components configure it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Checked URLs, in the order to try them.
    pub urls: Vec<Url>,
    pub tls: TlsConfig,
    pub sasl: Sasl,
}

impl Endpoint {
    /// The URLs as text, for the egress check of the brokers it connects to.
    pub fn url_texts(&self) -> Vec<String> {
        self.urls.iter().map(|u| u.to_string()).collect()
    }
}

impl Endpoint {
    /// Checks `urls` (and the older single `url`), `tls` and `sasl`; the message names the
    /// field.
    pub fn new(
        urls: &[String],
        url: Option<&str>,
        tls: &TlsConfig,
        sasl: &Sasl,
    ) -> Result<Endpoint, SetupError> {
        let mut all = split_addresses(urls);
        if let Some(u) = url.filter(|u| !u.trim().is_empty()) {
            all.push(u.trim().to_owned());
        }
        if all.is_empty() {
            return Err(SetupError::NoUrls);
        }
        let urls = all
            .iter()
            .map(|u| {
                parse_url(u).map_err(|source| SetupError::Url {
                    url: u.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        tls.validate()?;
        if sasl.mechanism == SaslMechanism::Plain && sasl.user.is_empty() {
            return Err(SetupError::PlainWithoutUser);
        }
        Ok(Endpoint {
            urls,
            tls: tls.clone(),
            sasl: sasl.clone(),
        })
    }

    /// Opens a connection to the first URL that answers, and a session on it.
    pub async fn connect(&self) -> Result<Link, ConnectorError> {
        let mut last = String::from("no URL");
        for url in &self.urls {
            match tokio::time::timeout(OPEN_TIMEOUT, self.open(url)).await {
                Ok(Ok(link)) => return Ok(link),
                Ok(Err(OpenFailure::Config(e))) => return Err(ConnectorError::rejected(e)),
                Ok(Err(OpenFailure::Net(e))) => last = format!("{}: {e}", redacted(url)),
                Err(_) => last = format!("{}: no answer within {OPEN_TIMEOUT:?}", redacted(url)),
            }
        }
        Err(ConnectorError::not_connected(format!(
            "cannot connect to AMQP 1.0 broker: {last}"
        )))
    }

    async fn open(&self, url: &Url) -> Result<Link, OpenFailure> {
        let host = url.host_str().unwrap_or_default().to_owned();
        let use_tls = self.tls.enabled || url.scheme() == "amqps";
        let port = url
            .port()
            .unwrap_or(if url.scheme() == "amqps" { 5671 } else { 5672 });
        // Brackets of an IPv6 literal are URL syntax, not part of the address.
        let addr_host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tcp = TcpStream::connect((addr_host.as_str(), port))
            .await
            .map_err(|e| OpenFailure::Net(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let container = format!("sluice-{}", uuid::Uuid::new_v4());
        let mut builder = Connection::builder()
            .container_id(container)
            .scheme("amqp")
            .hostname(host.as_str());
        if let Some(profile) = self.profile(url) {
            builder = builder.sasl_profile(profile);
        }
        let mut connection = if use_tls {
            let config = self
                .tls
                .rustls_client_config()
                .map_err(|e| OpenFailure::Config(e.to_string()))?;
            let name = ServerName::try_from(addr_host.clone())
                .map_err(|e| OpenFailure::Config(format!("`urls`: host `{host}`: {e}")))?;
            let stream = TlsConnector::from(std::sync::Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| OpenFailure::Net(format!("TLS: {e}")))?;
            // The TLS session is already up: the connection speaks plain AMQP over it.
            builder.open_with_stream(stream).await
        } else {
            builder.open_with_stream(tcp).await
        }
        .map_err(|e| OpenFailure::Net(e.to_string()))?;
        match Session::begin(&mut connection).await {
            Ok(session) => Ok(Link {
                connection,
                session,
            }),
            Err(e) => {
                let _ = connection.close().await;
                Err(OpenFailure::Net(format!("cannot begin a session: {e}")))
            }
        }
    }

    fn profile(&self, url: &Url) -> Option<SaslProfile> {
        match self.sasl.mechanism {
            SaslMechanism::Plain => Some(SaslProfile::Plain {
                username: self.sasl.user.clone(),
                password: self.sasl.password.clone(),
            }),
            SaslMechanism::Anonymous => Some(SaslProfile::Anonymous),
            SaslMechanism::None if !url.username().is_empty() => Some(SaslProfile::Plain {
                username: decode(url.username()),
                password: decode(url.password().unwrap_or_default()),
            }),
            SaslMechanism::None => None,
        }
    }
}

enum OpenFailure {
    /// The configuration cannot work (an unreadable certificate): retrying will not help.
    Config(String),
    /// The broker could not be reached or refused us.
    Net(String),
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// An AMQP 1.0 connector's settings that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("`urls` is empty")]
    NoUrls,
    #[error("`urls`: `{url}`: {source}")]
    Url {
        url: String,
        #[source]
        source: UrlError,
    },
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error("`sasl.user` is required with `mechanism: plain`")]
    PlainWithoutUser,
}

/// Why one of `urls` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error(transparent)]
    Parse(#[from] url::ParseError),
    #[error("not an `amqp://` or `amqps://` URL")]
    Scheme,
    #[error("no host")]
    NoHost,
}

fn parse_url(u: &str) -> Result<Url, UrlError> {
    let url = Url::parse(u)?;
    if !matches!(url.scheme(), "amqp" | "amqps") {
        return Err(UrlError::Scheme);
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost);
    }
    Ok(url)
}

/// The URL without its password, for messages.
fn redacted(url: &Url) -> String {
    let mut u = url.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    u.to_string()
}

/// An open connection and its session. Links are attached on the session.
pub struct Link {
    pub connection: ConnectionHandle<()>,
    pub session: SessionHandle<()>,
}

impl Link {
    /// Ends the session and closes the connection; a broker that does not answer is given
    /// up on after a few seconds (the socket then just goes).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(StdDuration::from_secs(5), async {
            let _ = self.session.end().await;
            let _ = self.connection.close().await;
        })
        .await;
    }
}

/// A link's state error as the runtime sees it: every one of them means the link, the
/// session or the connection is gone, so the component reconnects.
pub fn link_lost(e: &LinkStateError, what: &str) -> ConnectorError {
    ConnectorError::not_connected(what).with_source(e.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(urls: &[&str]) -> Result<Endpoint, SetupError> {
        let urls: Vec<String> = urls.iter().map(|s| s.to_string()).collect();
        Endpoint::new(&urls, None, &TlsConfig::default(), &Sasl::default())
    }

    #[test]
    fn urls_are_checked_and_split() {
        let e = endpoint(&["amqp://a:5672, amqps://u:p@b"]).unwrap();
        assert_eq!(e.urls.len(), 2);
        let err = endpoint(&["http://h"]).unwrap_err().to_string();
        assert!(err.contains("`urls`") && err.contains("http://h"), "{err}");
        let err = endpoint(&["amqp://h:port"]).unwrap_err().to_string();
        assert!(err.contains("`urls`"), "{err}");
        assert!(endpoint(&[])
            .unwrap_err()
            .to_string()
            .contains("`urls` is empty"));
        let one = Endpoint::new(
            &[],
            Some("amqp://h"),
            &TlsConfig::default(),
            &Sasl::default(),
        )
        .unwrap();
        assert_eq!(one.urls.len(), 1);
    }

    #[test]
    fn plain_needs_a_user_and_url_credentials_are_decoded() {
        let sasl = Sasl {
            mechanism: SaslMechanism::Plain,
            ..Sasl::default()
        };
        let err = Endpoint::new(&["amqp://h".into()], None, &TlsConfig::default(), &sasl)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`sasl.user`"), "{err}");
        let e = endpoint(&["amqp://us%40er:p%3Aw@h"]).unwrap();
        match e.profile(&e.urls[0]) {
            Some(SaslProfile::Plain { username, password }) => {
                assert_eq!((username.as_str(), password.as_str()), ("us@er", "p:w"));
            }
            other => panic!("{other:?}"),
        }
        assert!(e.profile(&parse_url("amqp://h").unwrap()).is_none());
        assert_eq!(redacted(&e.urls[0]), "amqp://us%40er:***@h");
    }

    #[tokio::test]
    async fn unreadable_certificates_are_refused_and_closed_ports_are_not_connected() {
        let tls = TlsConfig {
            enabled: true,
            root_cas_file: Some("/nonexistent/ca.pem".into()),
            ..TlsConfig::default()
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("amqp://127.0.0.1:{port}");
        let e = Endpoint::new(&[url], None, &tls, &Sasl::default()).unwrap();
        let err = e.connect().await.err().unwrap();
        assert_eq!(err.kind, crate::component::ErrorKind::Rejected);
        assert!(
            err.message.contains("`tls.root_cas_file`"),
            "{}",
            err.message
        );
        drop(listener);

        let e = endpoint(&["amqp://127.0.0.1:1"]).unwrap();
        let err = e.connect().await.err().unwrap();
        assert_eq!(err.kind, crate::component::ErrorKind::NotConnected);
    }
}
