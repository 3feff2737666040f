//! Redis pieces shared by the stream and pub/sub connectors.

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, RedisError, TlsCertificates,
};

use super::TlsConfig;
use crate::component::ConnectorError;

/// Checks the URL and the `tls` block without reading any file.
/// The stream entry field that holds the payload, for the `redis_streams` input and output.
pub fn default_body_key() -> String {
    "body".into()
}

pub fn validate(url: &str, tls: &TlsConfig) -> Result<(), String> {
    let info = url
        .into_connection_info()
        .map_err(|e| format!("`url`: {e}"))?;
    tls.validate().map_err(|e| e.to_string())?;
    with_tls(info, tls).map(drop)
}

/// A client for `url` with the `tls` block applied: TLS is on for a `rediss://` URL, or
/// for a `redis://` one with `tls.enabled`. Reads the certificate files.
pub fn client(url: &str, tls: &TlsConfig) -> Result<Client, String> {
    let info = with_tls(
        url.into_connection_info()
            .map_err(|e| format!("`url`: {e}"))?,
        tls,
    )?;
    let plain = !matches!(info.addr, ConnectionAddr::TcpTls { .. });
    if plain || (tls.root_cas_file.is_none() && tls.client_pair().is_none()) {
        return Client::open(info).map_err(|e| format!("`url`: {e}"));
    }
    let client_tls = match tls.client_pair() {
        Some((cert, key)) => Some(ClientTlsConfig {
            client_cert: TlsConfig::read_field(cert, "tls.client_cert_file")
                .map_err(|e| e.to_string())?,
            client_key: TlsConfig::read_field(key, "tls.client_key_file")
                .map_err(|e| e.to_string())?,
        }),
        None => None,
    };
    let root_cert = match &tls.root_cas_file {
        Some(path) => {
            Some(TlsConfig::read_field(path, "tls.root_cas_file").map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let certs = TlsCertificates {
        client_tls,
        root_cert,
    };
    Client::build_with_tls(info, certs).map_err(|e| format!("`tls`: {e}"))
}

/// The address with TLS switched on by `tls.enabled` and verification off by
/// `tls.skip_cert_verify`.
fn with_tls(mut info: ConnectionInfo, tls: &TlsConfig) -> Result<ConnectionInfo, String> {
    info.addr = match info.addr {
        ConnectionAddr::Tcp(host, port) if tls.enabled => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: tls.skip_cert_verify,
            tls_params: None,
        },
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            tls_params,
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: insecure || tls.skip_cert_verify,
            tls_params,
        },
        ConnectionAddr::Unix(_) if tls.enabled => {
            return Err(
                "`tls.enabled`: TLS needs a `redis://` or `rediss://` URL, not a Unix socket"
                    .into(),
            )
        }
        other => other,
    };
    Ok(info)
}

/// A Redis failure as the runtime sees it: a lost or refused connection is NotConnected.
pub fn classify(e: RedisError, what: &str) -> ConnectorError {
    let text = format!("{what}: {e}");
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        ConnectorError::not_connected(text)
    } else {
        ConnectorError::transient(text)
    }
}

/// A multiplexed connection. `timeout` bounds each reply (a blocking read must set it
/// above its block time).
pub async fn connect(
    client: &Client,
    timeout: std::time::Duration,
) -> Result<MultiplexedConnection, ConnectorError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(std::time::Duration::from_secs(5))
        .set_response_timeout(timeout);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| classify(e, "cannot connect to Redis"))
}

/// Text of a field value for metadata.
pub fn value_text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(enabled: bool, skip: bool) -> TlsConfig {
        TlsConfig {
            enabled,
            skip_cert_verify: skip,
            ..TlsConfig::default()
        }
    }

    #[test]
    fn tls_block_switches_a_plain_url_to_tls() {
        let info = "redis://127.0.0.1:6380".into_connection_info().unwrap();
        let addr = with_tls(info.clone(), &tls(true, true)).unwrap().addr;
        assert!(matches!(
            addr,
            ConnectionAddr::TcpTls {
                port: 6380,
                insecure: true,
                ..
            }
        ));
        let plain = with_tls(info, &TlsConfig::default()).unwrap().addr;
        assert!(matches!(plain, ConnectionAddr::Tcp(_, 6380)));
        let rediss = "rediss://h:1".into_connection_info().unwrap();
        let addr = with_tls(rediss, &TlsConfig::default()).unwrap().addr;
        assert!(matches!(
            addr,
            ConnectionAddr::TcpTls {
                insecure: false,
                ..
            }
        ));
    }

    #[test]
    fn bad_settings_name_the_field() {
        let e = validate("redis+unix:///tmp/r.sock", &tls(true, false)).unwrap_err();
        assert!(e.contains("`tls.enabled`"), "{e}");
        let half = TlsConfig {
            client_cert_file: Some("c.pem".into()),
            ..TlsConfig::default()
        };
        assert!(validate("rediss://h:1", &half).is_err());
        let missing = TlsConfig {
            root_cas_file: Some("/nonexistent/ca.pem".into()),
            ..TlsConfig::default()
        };
        let e = client("rediss://h:1", &missing).unwrap_err();
        assert!(e.contains("`tls.root_cas_file`"), "{e}");
    }
}
