//! The TLS settings every broker connector accepts, mapped by each connector onto its
//! client library.

use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Connect with TLS.
    pub enabled: bool,
    /// Accept any server certificate. Only for testing: it removes the protection TLS gives.
    pub skip_cert_verify: bool,
    /// PEM file of the certificate authorities to trust instead of the system's.
    pub root_cas_file: Option<String>,
    /// PEM file of a client certificate, for brokers that authenticate clients by TLS.
    pub client_cert_file: Option<String>,
    /// PEM file of the client certificate's private key.
    pub client_key_file: Option<String>,
}

impl TlsConfig {
    /// Checks the settings that only make sense together; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return Err(
                "`tls.client_cert_file` and `tls.client_key_file` must be given together".into(),
            );
        }
        Ok(())
    }

    /// Reads a PEM file named in the config, for libraries that take the bytes.
    pub fn read(path: &str) -> Result<Vec<u8>, String> {
        std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))
    }

    /// The client certificate and key, when both are set.
    pub fn client_pair(&self) -> Option<(&str, &str)> {
        match (&self.client_cert_file, &self.client_key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_without_key_is_refused() {
        let t: TlsConfig =
            serde_yaml::from_str("{enabled: true, client_cert_file: c.pem}").unwrap();
        assert!(t.validate().is_err());
        assert!(TlsConfig::default().validate().is_ok());
    }
}
