//! MQTT settings shared by the `mqtt` input and output, and how they become rumqttc options.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use rumqttc::{LastWill, MqttOptions, QoS, TlsConfiguration, Transport};
use schemars::JsonSchema;
use serde::Deserialize;

use super::TlsConfig;
use crate::duration::Duration;

/// A message the broker publishes on the client's behalf when it disappears.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WillConfig {
    /// Topic of the will message.
    pub topic: String,
    /// Its payload.
    #[serde(default)]
    pub payload: String,
    /// Its QoS (0, 1 or 2).
    #[serde(default)]
    pub qos: u8,
    /// Whether the broker retains it.
    #[serde(default)]
    pub retained: bool,
}

/// Declares an MQTT component config: the connection fields every MQTT client has, plus
/// the component's own, and `connection()` to view them as an [`MqttConnect`].
#[macro_export]
macro_rules! mqtt_connection_config {
    ($(#[$meta:meta])* pub struct $Name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        pub struct $Name {
            /// Broker URLs (`tcp://host:1883`, `ssl://host:8883`); tried in turn on reconnect.
            pub urls: Vec<String>,
            /// The client id; required for a persistent session. Unset: a random one.
            #[serde(default)]
            pub client_id: String,
            /// Start each connection with a fresh session. Set false (with a `client_id`) so
            /// that the broker keeps the session (subscriptions, unacknowledged messages).
            #[serde(default = "crate::connect::mqtt::default_true")]
            pub clean_session: bool,
            /// Interval of keep-alive pings.
            #[serde(default = "crate::connect::mqtt::default_keepalive")]
            pub keepalive: $crate::duration::Duration,
            /// User name.
            #[serde(default)]
            pub user: String,
            /// Password.
            #[serde(default)]
            pub password: String,
            /// TLS settings (or use an `ssl://` URL).
            #[serde(default)]
            pub tls: $crate::connect::TlsConfig,
            /// A message the broker publishes if this client disappears.
            #[serde(default)]
            pub will: Option<$crate::connect::mqtt::WillConfig>,
            /// The MQTT version: 3 (3.1.1) or 5. Version 5 carries metadata as user
            /// properties.
            #[serde(default = "crate::connect::mqtt::default_protocol_version")]
            pub protocol_version: u8,
            /// The largest packet sent or taken, in bytes: a message is at most this
            /// (with its topic and properties). The broker's own limit may be lower.
            #[serde(default = "crate::connect::mqtt::default_max_packet_bytes")]
            pub max_packet_bytes: usize,
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $Name {
            pub fn connection(&self) -> $crate::connect::mqtt::MqttConnect<'_> {
                $crate::connect::mqtt::MqttConnect {
                    urls: &self.urls,
                    client_id: &self.client_id,
                    clean_session: self.clean_session,
                    keepalive: self.keepalive,
                    user: &self.user,
                    password: &self.password,
                    tls: &self.tls,
                    will: self.will.as_ref(),
                    protocol_version: self.protocol_version,
                    max_packet_bytes: self.max_packet_bytes,
                }
            }
        }
    };
}

/// The QoS level MQTT inputs and outputs use unless told otherwise.
pub fn default_qos() -> u8 {
    1
}

/// One MiB: far above a message's usual size, and what one message may hold in memory.
pub fn default_max_packet_bytes() -> usize {
    1024 * 1024
}

/// MQTT 3.1.1, which every broker speaks.
pub fn default_protocol_version() -> u8 {
    3
}

pub fn default_true() -> bool {
    true
}

pub fn default_keepalive() -> Duration {
    Duration::from_secs(30)
}

/// Connection settings common to the MQTT input and output.
#[derive(Debug, Clone)]
pub struct MqttConnect<'a> {
    pub urls: &'a [String],
    pub client_id: &'a str,
    pub clean_session: bool,
    pub keepalive: Duration,
    pub user: &'a str,
    pub password: &'a str,
    pub tls: &'a TlsConfig,
    pub will: Option<&'a WillConfig>,
    pub protocol_version: u8,
    pub max_packet_bytes: usize,
}

/// An MQTT connector's settings that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("QoS {0} does not exist: use 0, 1 or 2")]
    Qos(u8),
    #[error("`{url}`: unsupported scheme `{scheme}`")]
    Scheme { url: String, scheme: String },
    #[error("`{url}`: bad port `{port}`")]
    Port {
        url: String,
        port: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("`{0}`: no host")]
    NoHost(String),
    #[error("`urls` is empty")]
    NoUrls,
    #[error("`protocol_version` {0} is not one Sluice speaks: use 3 (MQTT 3.1.1) or 5")]
    Version(u8),
    #[error("`max_packet_bytes` must be at least 1024")]
    SmallPackets,
    #[error("a persistent session (`clean_session: false`) needs a `client_id`")]
    SessionWithoutId,
    #[error("`keepalive` must be at least 1s (or 0s to disable it)")]
    Keepalive,
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error("`will.topic` is empty")]
    WillWithoutTopic,
}

pub fn qos(level: u8) -> Result<QoS, SetupError> {
    match level {
        0 => Ok(QoS::AtMostOnce),
        1 => Ok(QoS::AtLeastOnce),
        2 => Ok(QoS::ExactlyOnce),
        n => Err(SetupError::Qos(n)),
    }
}

/// An MQTT 5 QoS level (the same levels, rumqttc's type of its v5 client).
pub fn qos_v5(level: u8) -> Result<rumqttc::v5::mqttbytes::QoS, SetupError> {
    use rumqttc::v5::mqttbytes::QoS as Q;
    Ok(match qos(level)? {
        QoS::AtMostOnce => Q::AtMostOnce,
        QoS::AtLeastOnce => Q::AtLeastOnce,
        QoS::ExactlyOnce => Q::ExactlyOnce,
    })
}

/// Host, port and whether the scheme asks for TLS: `tcp://h:1883`, `mqtt://`, `ssl://`,
/// `tls://`, `mqtts://`; a bare `host:port` is plain TCP.
/// The hosts and ports of the URLs that parse, for the egress check (a URL that does not
/// parse is reported where the client is configured).
pub fn hosts(urls: &[String]) -> Vec<(String, u16)> {
    urls.iter()
        .filter_map(|u| parse_url(u).ok())
        .map(|(host, port, _)| (host, port))
        .collect()
}

pub fn parse_url(url: &str) -> Result<(String, u16, bool), SetupError> {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("tcp".to_owned(), url),
    };
    let tls = match scheme.as_str() {
        "tcp" | "mqtt" => false,
        "ssl" | "tls" | "mqtts" => true,
        other => {
            return Err(SetupError::Scheme {
                url: url.to_owned(),
                scheme: other.to_owned(),
            })
        }
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>().map_err(|source| SetupError::Port {
                url: url.to_owned(),
                port: p.to_owned(),
                source,
            })?,
        ),
        None => (rest, if tls { 8883 } else { 1883 }),
    };
    if host.is_empty() {
        return Err(SetupError::NoHost(url.to_owned()));
    }
    Ok((host.trim_matches(['[', ']']).to_owned(), port, tls))
}

impl MqttConnect<'_> {
    pub fn validate(&self) -> Result<(), SetupError> {
        if self.urls.is_empty() {
            return Err(SetupError::NoUrls);
        }
        for u in self.urls {
            parse_url(u)?;
        }
        if !matches!(self.protocol_version, 3 | 5) {
            return Err(SetupError::Version(self.protocol_version));
        }
        if self.max_packet_bytes < 1024 {
            return Err(SetupError::SmallPackets);
        }
        if self.client_id.is_empty() && !self.clean_session {
            return Err(SetupError::SessionWithoutId);
        }
        if self.keepalive.0 < StdDuration::from_secs(1) && !self.keepalive.is_zero() {
            return Err(SetupError::Keepalive);
        }
        self.tls.validate()?;
        if let Some(w) = self.will {
            qos(w.qos)?;
            if w.topic.is_empty() {
                return Err(SetupError::WillWithoutTopic);
            }
        }
        Ok(())
    }

    /// Whether the connection speaks MQTT 5.
    pub fn v5(&self) -> bool {
        self.protocol_version == 5
    }

    /// The broker and client id of the `attempt`th connection (URLs are tried in turn, one
    /// per attempt), and the TLS transport when it asks for one.
    fn endpoint(
        &self,
        attempt: usize,
    ) -> Result<(String, u16, String, Option<Transport>), SetupError> {
        let url = &self.urls[attempt % self.urls.len()];
        let (host, port, url_tls) = parse_url(url)?;
        let id = if self.client_id.is_empty() {
            format!("sluice-{:016x}", rand::random::<u64>())
        } else {
            self.client_id.to_owned()
        };
        let transport = if self.tls.enabled || url_tls {
            // One rustls set-up for every TLS client: the configured CA (else the
            // system's), a client certificate, or no server check with `skip_cert_verify`.
            let config = self.tls.rustls_client_config()?;
            Some(Transport::Tls(TlsConfiguration::Rustls(Arc::new(config))))
        } else {
            None
        };
        Ok((host, port, id, transport))
    }

    /// MQTT 5 options for the `attempt`th connection.
    pub fn options_v5(&self, attempt: usize) -> Result<rumqttc::v5::MqttOptions, SetupError> {
        use rumqttc::v5::mqttbytes::v5::LastWill as LastWill5;
        let (host, port, id, transport) = self.endpoint(attempt)?;
        let mut o = rumqttc::v5::MqttOptions::new(id, host, port);
        o.set_clean_start(self.clean_session);
        // Told to the broker in CONNECT (it sends nothing larger), and the incoming limit.
        o.set_max_packet_size(Some(
            u32::try_from(self.max_packet_bytes).unwrap_or(u32::MAX),
        ));
        o.set_keep_alive(self.keepalive.0);
        o.set_manual_acks(true);
        if !self.user.is_empty() {
            o.set_credentials(self.user, self.password);
        }
        if let Some(w) = self.will {
            o.set_last_will(LastWill5::new(
                &w.topic,
                w.payload.clone(),
                qos_v5(w.qos)?,
                w.retained,
                None,
            ));
        }
        if let Some(t) = transport {
            o.set_transport(t);
        }
        Ok(o)
    }

    /// MQTT 3.1.1 options for the `attempt`th connection.
    pub fn options(&self, attempt: usize) -> Result<MqttOptions, SetupError> {
        let (host, port, id, transport) = self.endpoint(attempt)?;
        let mut o = MqttOptions::new(id, host, port);
        o.set_max_packet_size(self.max_packet_bytes, self.max_packet_bytes);
        o.set_clean_session(self.clean_session);
        // rumqttc refuses keepalives under 1s; zero turns pings off.
        o.set_keep_alive(self.keepalive.0);
        o.set_manual_acks(true);
        if !self.user.is_empty() {
            o.set_credentials(self.user, self.password);
        }
        if let Some(w) = self.will {
            o.set_last_will(LastWill::new(
                &w.topic,
                w.payload.clone(),
                qos(w.qos)?,
                w.retained,
            ));
        }
        if let Some(t) = transport {
            o.set_transport(t);
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("tcp://localhost:1883").unwrap(),
            ("localhost".into(), 1883, false)
        );
        assert_eq!(parse_url("ssl://b").unwrap(), ("b".into(), 8883, true));
        assert_eq!(
            parse_url("127.0.0.1:1").unwrap(),
            ("127.0.0.1".into(), 1, false)
        );
        assert!(parse_url("http://x:1").is_err());
        assert!(parse_url("tcp://x:port").is_err());
    }

    #[test]
    fn qos_levels() {
        assert_eq!(qos(1).unwrap(), QoS::AtLeastOnce);
        assert!(qos(3).is_err());
    }
}
