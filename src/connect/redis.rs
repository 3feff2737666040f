//! Redis pieces shared by the stream and pub/sub connectors.

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};

use crate::component::ConnectorError;

pub fn client(url: &str) -> Result<Client, String> {
    Client::open(url).map_err(|e| format!("`url`: {e}"))
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
