//! AMQP 0.9.1 pieces shared by the `amqp_0_9` input and output.

use std::time::Duration as StdDuration;

use lapin::tcp::{HandshakeResult, RustlsConnector, TcpStream};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Connection, ConnectionProperties};

use super::TlsConfig;
use crate::component::ConnectorError;
use crate::message::Message;

/// Connects to the first URL that answers. TLS is on for `amqps://` URLs and for every
/// URL when `tls.enabled` is set; the `tls` block then says what to trust and which
/// client certificate to show.
// The socket opener's result type is lapin's, large error and all.
#[allow(clippy::result_large_err)]
pub async fn connect(urls: &[String], tls: &TlsConfig) -> Result<Connection, ConnectorError> {
    // Built on first use only, so that plain connections never read certificate files.
    let mut connector: Option<RustlsConnector> = None;
    let mut last = String::from("no URL");
    for url in urls {
        let uri: AMQPUri = url
            .parse()
            .map_err(|e| ConnectorError::rejected(format!("`urls`: `{url}`: {e}")))?;
        let use_tls = tls.enabled || matches!(uri.scheme, AMQPScheme::AMQPS);
        let stream_tls = if use_tls {
            if connector.is_none() {
                let config = tls
                    .rustls_client_config()
                    .map_err(|e| ConnectorError::rejected("TLS").with_source(e))?;
                connector = Some(RustlsConnector::from(config));
            }
            connector.clone()
        } else {
            None
        };
        let open = Box::new(move |uri: &AMQPUri| open_stream(uri, stream_tls));
        match Connection::connector(uri, open, ConnectionProperties::default()).await {
            Ok(c) => return Ok(c),
            Err(e) => last = e.to_string(),
        }
    }
    Err(ConnectorError::not_connected(format!(
        "cannot connect to AMQP broker: {last}"
    )))
}

/// Opens the socket lapin talks over (it runs this on a blocking thread), as lapin's own
/// connector does, but with our TLS configuration: lapin's takes a client certificate
/// only as PKCS#12 and has no way to skip verification.
#[allow(clippy::result_large_err)]
fn open_stream(uri: &AMQPUri, tls: Option<RustlsConnector>) -> HandshakeResult {
    let addr = (uri.authority.host.as_str(), uri.authority.port);
    let stream = match uri.query.connection_timeout {
        Some(ms) => TcpStream::connect_timeout(addr, StdDuration::from_millis(ms)),
        None => TcpStream::connect(addr),
    }?;
    let stream = match tls {
        Some(c) => stream.into_rustls(&c, &uri.authority.host)?,
        None => stream,
    };
    stream.set_nonblocking(true)?;
    Ok(stream)
}

/// An AMQP 0.9.1 connector's settings that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("`urls` is empty")]
    NoUrls,
    #[error("`{0}` is not an `amqp://` or `amqps://` URL")]
    Scheme(String),
    /// The URL parser says why only in words.
    #[error("`urls`: `{url}`: {why}")]
    Url { url: String, why: String },
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
}

/// Checks the URLs and the `tls` block.
pub fn validate(urls: &[String], tls: &TlsConfig) -> Result<(), SetupError> {
    if urls.is_empty() {
        return Err(SetupError::NoUrls);
    }
    for u in urls {
        if !(u.starts_with("amqp://") || u.starts_with("amqps://")) {
            return Err(SetupError::Scheme(u.clone()));
        }
        u.parse::<AMQPUri>().map_err(|why| SetupError::Url {
            url: u.clone(),
            why,
        })?;
    }
    Ok(tls.validate()?)
}

/// A lapin error as the runtime sees it: a broken connection or channel is NotConnected.
pub fn classify(e: lapin::Error, what: &str) -> ConnectorError {
    use lapin::Error as E;
    let text = format!("{what}: {e}");
    match e {
        E::InvalidChannelState(_) | E::InvalidConnectionState(_) | E::IOError(_) => {
            ConnectorError::not_connected(text)
        }
        _ => ConnectorError::transient(text),
    }
}

/// Copies AMQP headers into metadata as text.
pub fn headers_to_meta(headers: Option<&FieldTable>, msg: &mut Message) {
    let Some(h) = headers else { return };
    for (k, v) in h.inner() {
        let text = match v {
            AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            AMQPValue::ShortString(s) => s.as_str().to_owned(),
            AMQPValue::Boolean(b) => b.to_string(),
            AMQPValue::LongInt(n) => n.to_string(),
            AMQPValue::LongLongInt(n) => n.to_string(),
            AMQPValue::ShortInt(n) => n.to_string(),
            AMQPValue::LongUInt(n) => n.to_string(),
            AMQPValue::Double(n) => n.to_string(),
            AMQPValue::Float(n) => n.to_string(),
            AMQPValue::Timestamp(n) => n.to_string(),
            other => format!("{other:?}"),
        };
        msg.set_meta(k.as_str(), text);
    }
}

pub fn header_table<'a>(pairs: impl Iterator<Item = (&'a str, String)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert(
            ShortString::from(k.to_owned()),
            AMQPValue::LongString(LongString::from(v)),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_tls_block_are_checked() {
        let ok = vec!["amqps://u:p@127.0.0.1:5671/%2f".to_owned()];
        assert!(validate(&ok, &TlsConfig::default()).is_ok());
        let e = validate(&["http://h".to_owned()], &TlsConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("http://h"), "{e}");
        let e = validate(&["amqp://h:port".to_owned()], &TlsConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`urls`"), "{e}");
        let half = TlsConfig {
            enabled: true,
            client_key_file: Some("k.pem".into()),
            ..TlsConfig::default()
        };
        let e = validate(&ok, &half).unwrap_err().to_string();
        assert!(e.contains("tls.client_cert_file"), "{e}");
    }

    #[tokio::test]
    async fn unreadable_certificates_are_reported_when_connecting() {
        let tls = TlsConfig {
            enabled: true,
            root_cas_file: Some("/nonexistent/ca.pem".into()),
            ..TlsConfig::default()
        };
        let e = connect(&["amqp://127.0.0.1:1".to_owned()], &tls)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("`tls.root_cas_file`"), "{e}");
    }
}
