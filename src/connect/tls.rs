//! The TLS settings every broker connector accepts, mapped by each connector onto its
//! client library.

use std::path::Path;
use std::sync::{Arc, Once};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use schemars::JsonSchema;
use serde::Deserialize;

/// Makes ring the process's rustls crypto provider. The client libraries bring rustls in
/// with two providers (ring and aws-lc-rs), and rustls then will not choose one by
/// itself: without this, the first TLS connection panics. `Stream::build` calls it before
/// any client exists; later calls do nothing.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error means a provider is installed already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn provider() -> Arc<CryptoProvider> {
    install_crypto_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

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

    /// [`TlsConfig::read`] with the field the path came from named in the error.
    pub fn read_field(path: &str, field: &str) -> Result<Vec<u8>, String> {
        Self::read(path).map_err(|e| format!("`{field}`: {e}"))
    }

    /// The client certificate and key, when both are set.
    pub fn client_pair(&self) -> Option<(&str, &str)> {
        match (&self.client_cert_file, &self.client_key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        }
    }

    /// A rustls client configuration: the CAs of `root_cas_file` (else the system's), the
    /// client certificate if any, and no server check at all with `skip_cert_verify`.
    /// Files are read now; errors name the field.
    pub fn rustls_client_config(&self) -> Result<ClientConfig, String> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = if self.skip_cert_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        } else {
            builder.with_root_certificates(self.root_store()?)
        };
        match self.client_pair() {
            Some((cert, key)) => with_client_cert(
                builder,
                Path::new(cert),
                Path::new(key),
                ["tls.client_cert_file", "tls.client_key_file"],
            ),
            None => Ok(builder.with_no_client_auth()),
        }
    }

    fn root_store(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        match &self.root_cas_file {
            Some(path) => {
                for cert in pem_certs(Path::new(path), "tls.root_cas_file")? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("`tls.root_cas_file`: `{path}`: {e}"))?;
                }
            }
            None => {
                // Certificates the system store holds but rustls cannot parse are skipped,
                // as every TLS client does with such stores.
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(
                        "TLS: the system has no CA certificates; set `tls.root_cas_file`".into(),
                    );
                }
            }
        }
        Ok(roots)
    }
}

/// The certificates of a PEM file; an error names the field when there are none.
pub fn pem_certs(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let path_text = path.display();
    let bytes =
        std::fs::read(path).map_err(|e| format!("`{field}`: cannot read `{path_text}`: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("`{field}`: `{path_text}`: {e}"))?;
    if certs.is_empty() {
        return Err(format!("`{field}`: no PEM certificate in `{path_text}`"));
    }
    Ok(certs)
}

/// Finishes a client configuration with the certificate chain and private key of two
/// PEM files; errors name `fields` (the certificate's, the key's).
pub fn with_client_cert(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    cert: &Path,
    key: &Path,
    fields: [&str; 2],
) -> Result<ClientConfig, String> {
    let [cert_field, key_field] = fields;
    let chain = pem_certs(cert, cert_field)?;
    let key_text = key.display();
    let pem = std::fs::read(key).map_err(|e| format!("cannot read `{key_text}`: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("`{key_field}`: no private key in `{key_text}`: {e}"))?;
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("`{key_field}`: {e}"))
}

/// `skip_cert_verify`: any server certificate is taken. The handshake signatures are still
/// checked, so the peer must hold the key of the certificate it sent.
#[derive(Debug)]
struct AnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
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

    fn write(dir: &std::path::Path, name: &str, text: &str) -> Option<String> {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        Some(path.display().to_string())
    }

    #[test]
    fn rustls_config_from_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_owned()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let t = TlsConfig {
            enabled: true,
            root_cas_file: write(dir.path(), "ca.pem", &ca.pem()),
            client_cert_file: write(dir.path(), "c.pem", &cert.pem()),
            client_key_file: write(dir.path(), "c.key", &key.serialize_pem()),
            ..TlsConfig::default()
        };
        let config = t.rustls_client_config().unwrap();
        assert!(config.client_auth_cert_resolver.has_certs());

        let skip = TlsConfig {
            enabled: true,
            skip_cert_verify: true,
            ..TlsConfig::default()
        };
        assert!(skip.rustls_client_config().is_ok());
    }

    #[test]
    fn bad_pem_files_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let t = TlsConfig {
            enabled: true,
            root_cas_file: write(dir.path(), "ca.pem", "not a certificate"),
            ..TlsConfig::default()
        };
        let e = t.rustls_client_config().unwrap_err();
        assert!(e.contains("`tls.root_cas_file`"), "{e}");

        let t = TlsConfig {
            enabled: true,
            root_cas_file: Some(dir.path().join("missing.pem").display().to_string()),
            ..TlsConfig::default()
        };
        let e = t.rustls_client_config().unwrap_err();
        assert!(
            e.contains("`tls.root_cas_file`") && e.contains("missing.pem"),
            "{e}"
        );

        let t = TlsConfig {
            enabled: true,
            skip_cert_verify: true,
            client_cert_file: write(dir.path(), "c.pem", "nothing"),
            client_key_file: write(dir.path(), "c.key", "nothing"),
            ..TlsConfig::default()
        };
        let e = t.rustls_client_config().unwrap_err();
        assert!(e.contains("`tls.client_cert_file`"), "{e}");
    }
}
