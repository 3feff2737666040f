//! Kafka settings shared by the `kafka` input and output, and topic syntax.

use rdkafka::ClientConfig;

use super::{split_addresses, SaslConfig, SaslMechanism, TlsConfig};

/// The client id Kafka inputs and outputs send unless told otherwise.
pub fn default_client_id() -> String {
    "sluice".into()
}

/// Client properties for librdkafka from the settings both connectors share.
pub fn client_config(
    addresses: &[String],
    client_id: &str,
    tls: &TlsConfig,
    sasl: &SaslConfig,
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", split_addresses(addresses).join(","));
    c.set("client.id", client_id);
    let protocol = match (tls.enabled, sasl.mechanism != SaslMechanism::None) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    c.set("security.protocol", protocol);
    if tls.enabled {
        if let Some(ca) = &tls.root_cas_file {
            c.set("ssl.ca.location", ca);
        }
        if let Some((cert, key)) = tls.client_pair() {
            c.set("ssl.certificate.location", cert);
            c.set("ssl.key.location", key);
        }
        if tls.skip_cert_verify {
            c.set("enable.ssl.certificate.verification", "false");
            c.set("ssl.endpoint.identification.algorithm", "none");
        }
    }
    if let Some(mechanism) = sasl.mechanism.as_str() {
        c.set("sasl.mechanism", mechanism);
        c.set("sasl.username", &sasl.user);
        c.set("sasl.password", &sasl.password);
    }
    c
}

/// A Kafka connector's settings that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("`addresses` is empty")]
    NoAddresses,
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error(transparent)]
    Sasl(#[from] super::sasl::NoUser),
}

/// Checks what both connectors share.
pub fn validate(
    addresses: &[String],
    tls: &TlsConfig,
    sasl: &SaslConfig,
) -> Result<(), SetupError> {
    if split_addresses(addresses).is_empty() {
        return Err(SetupError::NoAddresses);
    }
    tls.validate()?;
    Ok(sasl.validate()?)
}

/// A topic as the input's `topics` lists it: a name, optionally with partitions
/// (`orders:0`, `orders:0-3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    /// Explicit partitions; None means "all, as the consumer group assigns them".
    pub partitions: Option<Vec<i32>>,
}

/// A `topics` entry that names no topic or no partitions.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("empty topic")]
    Empty,
    #[error("`{0}`: no topic name")]
    NoName(String),
    #[error("`{text}`: partitions must be `N` or `N-M` (e.g. `{topic}:0-3`)")]
    Partitions { text: String, topic: String },
}

pub fn parse_topic(text: &str) -> Result<TopicSpec, TopicError> {
    let text = text.trim();
    let Some((topic, parts)) = text.rsplit_once(':') else {
        if text.is_empty() {
            return Err(TopicError::Empty);
        }
        return Ok(TopicSpec {
            topic: text.to_owned(),
            partitions: None,
        });
    };
    if topic.is_empty() {
        return Err(TopicError::NoName(text.to_owned()));
    }
    let bad = || TopicError::Partitions {
        text: text.to_owned(),
        topic: topic.to_owned(),
    };
    let mut partitions = Vec::new();
    for part in parts.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: i32 = a.trim().parse().map_err(|_| bad())?;
                let b: i32 = b.trim().parse().map_err(|_| bad())?;
                if a < 0 || b < a {
                    return Err(bad());
                }
                partitions.extend(a..=b);
            }
            None => {
                let p: i32 = part.trim().parse().map_err(|_| bad())?;
                if p < 0 {
                    return Err(bad());
                }
                partitions.push(p);
            }
        }
    }
    Ok(TopicSpec {
        topic: topic.to_owned(),
        partitions: Some(partitions),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_with_partitions_and_ranges() {
        assert_eq!(parse_topic("a").unwrap().partitions, None);
        assert_eq!(parse_topic("a:2").unwrap().partitions, Some(vec![2]));
        assert_eq!(
            parse_topic("a:0-2,5").unwrap().partitions,
            Some(vec![0, 1, 2, 5])
        );
        assert!(parse_topic("a:3-1").is_err());
        assert!(parse_topic("a:x").is_err());
        assert!(parse_topic(":1").is_err());
    }

    #[test]
    fn protocol_follows_tls_and_sasl() {
        let sasl = SaslConfig {
            mechanism: SaslMechanism::ScramSha256,
            user: "u".into(),
            password: "p".into(),
        };
        let c = client_config(&["a:1,b:2".into()], "id", &TlsConfig::default(), &sasl);
        assert_eq!(c.get("security.protocol"), Some("sasl_plaintext"));
        assert_eq!(c.get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
    }
}
