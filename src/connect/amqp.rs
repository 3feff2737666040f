//! AMQP 0.9.1 pieces shared by the `amqp_0_9` input and output.

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Connection, ConnectionProperties};

use crate::component::ConnectorError;
use crate::message::Message;

/// Connects to the first URL that answers.
pub async fn connect(urls: &[String]) -> Result<Connection, ConnectorError> {
    let mut last = String::from("no URL");
    for url in urls {
        match Connection::connect(url, ConnectionProperties::default()).await {
            Ok(c) => return Ok(c),
            Err(e) => last = e.to_string(),
        }
    }
    Err(ConnectorError::not_connected(format!(
        "cannot connect to AMQP broker: {last}"
    )))
}

pub fn validate_urls(urls: &[String]) -> Result<(), String> {
    if urls.is_empty() {
        return Err("`urls` is empty".into());
    }
    for u in urls {
        if !(u.starts_with("amqp://") || u.starts_with("amqps://")) {
            return Err(format!("`{u}` is not an `amqp://` or `amqps://` URL"));
        }
    }
    Ok(())
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
