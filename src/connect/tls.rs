//! The TLS settings every broker connector accepts, mapped by each connector onto its
//! client library.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{Error as PemError, PemObject};
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

/// Why a TLS set-up failed: the config field at fault, the file or text it read, and
/// the cause.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("`tls.client_cert_file` and `tls.client_key_file` must be given together")]
    UnpairedClientCert,
    #[error("`{field}`: cannot read `{}`: {source}", path.display())]
    Read {
        field: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{field}`: {from}: {source}")]
    Pem {
        field: String,
        /// The file (quoted) or text read.
        from: String,
        #[source]
        source: PemError,
    },
    #[error("`{field}`: no PEM certificate in {from}")]
    NoCertificate { field: String, from: String },
    #[error("`{field}`: no private key in {from}: {source}")]
    NoKey {
        field: String,
        from: String,
        #[source]
        source: PemError,
    },
    /// rustls refused what was read: a certificate authority, or a certificate and key
    /// that do not make an identity.
    #[error("`{field}`: {from}: {source}")]
    Refused {
        field: String,
        from: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the system has no CA certificates; set `tls.root_cas_file`")]
    NoSystemRoots,
    #[error("cannot set up TLS: {0}")]
    Setup(#[source] rustls::Error),
}

impl TlsError {
    fn read(field: &str, path: &Path, source: std::io::Error) -> Self {
        TlsError::Read {
            field: field.to_owned(),
            path: path.to_owned(),
            source,
        }
    }

    /// rustls refused what `field` named, read from `from`.
    pub fn refused(field: &str, from: &str, source: rustls::Error) -> Self {
        TlsError::Refused {
            field: field.to_owned(),
            from: from.to_owned(),
            source,
        }
    }
}

/// A PEM file's bytes; errors name `field`.
pub fn read_pem(path: &Path, field: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::read(field, path, e))
}

impl TlsConfig {
    /// Checks the settings that only make sense together.
    pub fn validate(&self) -> Result<(), TlsError> {
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return Err(TlsError::UnpairedClientCert);
        }
        Ok(())
    }

    /// Reads a PEM file named in the config field `field`, for libraries that take the
    /// bytes.
    pub fn read_field(path: &str, field: &str) -> Result<Vec<u8>, TlsError> {
        read_pem(Path::new(path), field)
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
    pub fn rustls_client_config(&self) -> Result<ClientConfig, TlsError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Setup)?;
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

    fn root_store(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        match &self.root_cas_file {
            Some(path) => {
                let field = "tls.root_cas_file";
                for cert in pem_certs(Path::new(path), field)? {
                    roots
                        .add(cert)
                        .map_err(|e| TlsError::refused(field, &format!("`{path}`"), e))?;
                }
            }
            None => {
                // Certificates the system store holds but rustls cannot parse are skipped,
                // as every TLS client does with such stores.
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(TlsError::NoSystemRoots);
                }
            }
        }
        Ok(roots)
    }
}

/// The certificates of a PEM file; an error names the field, also when there are none.
pub fn pem_certs(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(path, field)?;
    certs_of(&bytes, field, &format!("`{}`", path.display()))
}

/// The certificates of PEM text read from `from` (a quoted file name, or what the text
/// is); errors name `field`.
pub fn certs_of(
    pem: &[u8],
    field: &str,
    from: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            field: field.to_owned(),
            from: from.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            field: field.to_owned(),
            from: from.to_owned(),
        });
    }
    Ok(certs)
}

/// The private key of PEM text read from `from`; errors name `field`.
pub fn key_of(pem: &[u8], field: &str, from: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|source| TlsError::NoKey {
        field: field.to_owned(),
        from: from.to_owned(),
        source,
    })
}

/// Finishes a client configuration with the certificate chain and private key of two
/// PEM files; errors name `fields` (the certificate's, the key's).
pub fn with_client_cert(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    cert: &Path,
    key: &Path,
    fields: [&str; 2],
) -> Result<ClientConfig, TlsError> {
    let [cert_field, key_field] = fields;
    let chain = pem_certs(cert, cert_field)?;
    let pem = read_pem(key, key_field)?;
    let from = format!("`{}`", key.display());
    let key = key_of(&pem, key_field, &from)?;
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::refused(key_field, &from, e))
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
        let e = t.rustls_client_config().unwrap_err().to_string();
        assert!(e.contains("`tls.root_cas_file`"), "{e}");

        let t = TlsConfig {
            enabled: true,
            root_cas_file: Some(dir.path().join("missing.pem").display().to_string()),
            ..TlsConfig::default()
        };
        let e = t.rustls_client_config().unwrap_err().to_string();
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
        let e = t.rustls_client_config().unwrap_err().to_string();
        assert!(e.contains("`tls.client_cert_file`"), "{e}");
    }
}
