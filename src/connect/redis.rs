//! Redis pieces shared by the stream and pub/sub connectors.

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, RedisError, TlsCertificates,
};

use super::TlsConfig;
use crate::component::ConnectorError;
use crate::http::history::HistoryError;

/// Why a Redis client could not be made from its config.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("`url`: {0}")]
    Url(#[source] RedisError),
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error("`tls.enabled`: TLS needs a `redis://` or `rediss://` URL, not a Unix socket")]
    TlsOverUnix,
    #[error("`tls`: {0}")]
    Certificates(#[source] RedisError),
}

/// The stream entry field that holds the payload, for the `redis_streams` input and output.
pub fn default_body_key() -> String {
    "body".into()
}

/// Checks the URL and the `tls` block without reading any file.
pub fn validate(url: &str, tls: &TlsConfig) -> Result<(), SetupError> {
    let info = url.into_connection_info().map_err(SetupError::Url)?;
    tls.validate()?;
    with_tls(info, tls).map(drop)
}

/// A client for `url` with the `tls` block applied: TLS is on for a `rediss://` URL, or
/// for a `redis://` one with `tls.enabled`. Reads the certificate files.
pub fn client(url: &str, tls: &TlsConfig) -> Result<Client, SetupError> {
    let info = with_tls(url.into_connection_info().map_err(SetupError::Url)?, tls)?;
    let plain = !matches!(info.addr, ConnectionAddr::TcpTls { .. });
    if plain || (tls.root_cas_file.is_none() && tls.client_pair().is_none()) {
        return Client::open(info).map_err(SetupError::Url);
    }
    let client_tls = match tls.client_pair() {
        Some((cert, key)) => Some(ClientTlsConfig {
            client_cert: TlsConfig::read_field(cert, "tls.client_cert_file")?,
            client_key: TlsConfig::read_field(key, "tls.client_key_file")?,
        }),
        None => None,
    };
    let root_cert = match &tls.root_cas_file {
        Some(path) => Some(TlsConfig::read_field(path, "tls.root_cas_file")?),
        None => None,
    };
    let certs = TlsCertificates {
        client_tls,
        root_cert,
    };
    Client::build_with_tls(info, certs).map_err(SetupError::Certificates)
}

/// The address with TLS switched on by `tls.enabled` and verification off by
/// `tls.skip_cert_verify`.
fn with_tls(mut info: ConnectionInfo, tls: &TlsConfig) -> Result<ConnectionInfo, SetupError> {
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
        ConnectionAddr::Unix(_) if tls.enabled => return Err(SetupError::TlsOverUnix),
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

/// The sequence part of a stream entry position.
const SEQ_MASK: u64 = (1 << 22) - 1;
/// Entries read back at once.
const PAGE: usize = 256;

/// A stream entry id (`<ms>-<seq>`) as one growing number, for an event id: the
/// milliseconds shifted left by 22 bits, plus the sequence; when it fits (milliseconds
/// below 2^41, the year 2039, and fewer than 2^22 entries in one millisecond).
pub fn entry_position(id: &str) -> Option<u64> {
    let (ms, seq) = id_parts(id)?;
    (ms < 1 << 41 && seq <= SEQ_MASK).then_some((ms << 22) | seq)
}

/// The entry id at `position` (see [`entry_position`]).
pub fn position_entry(position: u64) -> String {
    format!("{}-{}", position >> 22, position & SEQ_MASK)
}

/// An entry id's milliseconds and sequence.
fn id_parts(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// A text field of an `XINFO STREAM` reply (a flat list of names and values, or a map).
fn stream_info_field(info: &redis::Value, name: &str) -> Option<String> {
    let pairs: Vec<(&redis::Value, &redis::Value)> = match info {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        redis::Value::Map(items) => items.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| value_text(k).as_deref() == Some(name))
        .and_then(|(_, v)| value_text(v))
}

/// The entries of stream `key` after the one at position `after` (see
/// [`entry_position`]), read in pages up to the last entry there is now, each made a
/// message by `message`. Incomplete when Redis trimmed or deleted entries after it (Redis
/// 7 records the newest it dropped; older servers do not, so they count as incomplete).
pub async fn entries_after(
    mut conn: MultiplexedConnection,
    key: String,
    after: u64,
    message: impl Fn(&redis::streams::StreamId) -> crate::message::Message + Send + Sync + 'static,
) -> Result<crate::http::history::Past, HistoryError> {
    use futures::StreamExt;
    let info: redis::Value = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .map_err(|e| HistoryError::failed("XINFO STREAM failed", e))?;
    let field = |name: &str| stream_info_field(&info, name);
    let complete = match field("max-deleted-entry-id").as_deref().and_then(id_parts) {
        Some(deleted) => deleted <= (after >> 22, after & SEQ_MASK),
        None => false,
    };
    let Some(end) = field("last-generated-id") else {
        return Ok(crate::http::history::Past {
            complete,
            messages: futures::stream::empty().boxed(),
        });
    };
    let first = (conn, format!("({}", position_entry(after)), false);
    let message = std::sync::Arc::new(message);
    let pages = futures::stream::unfold(first, move |(mut conn, from, done)| {
        let (key, end, message) = (key.clone(), end.clone(), message.clone());
        async move {
            if done {
                return None;
            }
            let page: Result<redis::streams::StreamRangeReply, _> =
                redis::AsyncCommands::xrange_count(&mut conn, &key, &from, &end, PAGE).await;
            match page {
                Err(e) => Some((
                    vec![Err(HistoryError::failed("XRANGE failed", e))],
                    (conn, from, true),
                )),
                Ok(page) => {
                    let last = page.ids.last().map(|e| format!("({}", e.id));
                    let done = page.ids.len() < PAGE || last.is_none();
                    let messages = page.ids.iter().map(|e| Ok(message(e))).collect();
                    Some((messages, (conn, last.unwrap_or(from), done)))
                }
            }
        }
    });
    Ok(crate::http::history::Past {
        complete,
        messages: pages.flat_map(futures::stream::iter).boxed(),
    })
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
        assert!(e.to_string().contains("`tls.enabled`"), "{e}");
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
        assert!(e.to_string().contains("`tls.root_cas_file`"), "{e}");
    }

    #[test]
    fn entry_ids_become_growing_positions_where_they_fit() {
        let a = entry_position("1700000000000-0").unwrap();
        let b = entry_position("1700000000000-1").unwrap();
        let c = entry_position("1700000000001-0").unwrap();
        assert!(a < b && b < c);
        assert_eq!(
            entry_position(&format!("1700000000000-{}", 1u64 << 22)),
            None
        );
        assert_eq!(entry_position(&format!("{}-0", 1u64 << 41)), None);
        assert_eq!(entry_position("nonsense"), None);
        assert_eq!(position_entry(b), "1700000000000-1");
        assert_eq!(entry_position(&position_entry(c)), Some(c));
    }
}
