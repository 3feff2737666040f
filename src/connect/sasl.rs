//! SASL authentication settings (Kafka).

use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum SaslMechanism {
    /// No SASL authentication.
    #[default]
    #[serde(rename = "none")]
    None,
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name on the wire.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            SaslMechanism::None => None,
            SaslMechanism::Plain => Some("PLAIN"),
            SaslMechanism::ScramSha256 => Some("SCRAM-SHA-256"),
            SaslMechanism::ScramSha512 => Some("SCRAM-SHA-512"),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SaslConfig {
    /// `none`, `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: SaslMechanism,
    /// The user to authenticate as.
    pub user: String,
    /// The user's password.
    pub password: String,
}

/// A SASL mechanism set without the user to authenticate as.
#[derive(Debug, thiserror::Error)]
#[error("`sasl.user` is required with a SASL mechanism")]
pub struct NoUser;

impl SaslConfig {
    pub fn validate(&self) -> Result<(), NoUser> {
        if self.mechanism != SaslMechanism::None && self.user.is_empty() {
            return Err(NoUser);
        }
        Ok(())
    }
}
