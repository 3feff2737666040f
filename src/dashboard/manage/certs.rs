//! Certificates: uploaded as PEM (a chain, the leaf first, optionally with the leaf's
//! private key), as the body or as a file field of a multipart form. They are parsed
//! with `x509-parser`; the summary the spec lists is kept in columns, the details as
//! JSON, and the private key sealed with the dashboard's secret. A private key is never
//! returned.

use base64::Engine;
use http::StatusCode;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use utoipa::{IntoParams, ToSchema};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::objects::{oid2sn, oid_registry};
use x509_parser::oid_registry::Oid;
use x509_parser::x509::X509Name;

use super::owned;
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::now;
use crate::dashboard::request::{Ctx, Outcome, PageQuery, Reply};
use crate::dashboard::responses::{BadQuery, NotFound, TooLarge, Unauthorized};
use crate::store::{CertRecord, KeyFilter};

/// The path of one certificate.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct CertPath {
    /// The certificate's id (SHA-256 fingerprint, hex).
    #[serde(rename = "certId")]
    id: String,
}

/// A certificate in a list: the spec's summary.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CertSummary {
    /// The SHA-256 fingerprint of the leaf, hex.
    pub id: String,
    /// Host names of the certificate (its DNS subject alternative names, wildcards as
    /// written: `*.example.com`).
    pub dns_names: Vec<String>,
    /// Whether a private key is held with it.
    pub has_private: bool,
    pub is_ca: bool,
    pub issuer_cn: String,
    pub subject_cn: String,
    /// RFC 3339, UTC.
    pub not_before: String,
    /// RFC 3339, UTC.
    pub not_after: String,
}

/// `GET /api/certs`: a page of summaries (`null` when the page is empty).
#[derive(Debug, Serialize, ToSchema)]
pub struct CertList {
    pub cert_basics: Option<Vec<CertSummary>>,
    /// How many pages the whole list makes.
    pub pages: i64,
}

/// A certificate with its details (`mode=detailed`, `GET /api/certs/{certId}`): the
/// summary's members plus `details`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CertDetailed {
    #[serde(flatten)]
    pub basics: CertSummary,
    /// Fingerprint, serial, signature algorithm, key type and size, key usages, subject
    /// alternative names, issuer and subject details, chain length.
    #[schema(value_type = Object)]
    pub details: Value,
}

/// `GET /api/certs?mode=detailed`: under the same key as the summaries, as the spec and
/// Tyk's dashboard answer it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CertDetailedList {
    pub cert_basics: Option<Vec<CertDetailed>>,
    pub pages: i64,
}

/// One certificate with its chain, as `GET /api/certs/{certId}` shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CertFull {
    #[serde(flatten)]
    pub detailed: CertDetailed,
    /// The certificate chain, PEM (never the private key).
    pub pem: String,
}

/// A multipart upload: a file field holding the PEM text (any field name works).
#[derive(Debug, ToSchema)]
pub struct CertUpload {
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}

/// A PEM block: its label (`CERTIFICATE`) and decoded bytes, with its text.
struct Block {
    label: String,
    der: Vec<u8>,
    text: String,
}

/// Every PEM block in `text`, ignoring whatever lies between blocks (multipart framing,
/// comments). A block whose base64 is broken is an error naming it.
fn pem_blocks(text: &str) -> Result<Vec<Block>, ApiError> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = after[..label_end].trim().to_owned();
        let end_marker = format!("-----END {label}-----");
        let body_start = label_end + 5;
        let Some(end) = after[body_start..].find(&end_marker) else {
            return Err(ApiError::bad_request(format!(
                "the PEM block `{label}` has no END line"
            )));
        };
        let body = &after[body_start..body_start + end];
        // Header lines (`Proc-Type: ...`) mark encrypted legacy keys; they are not base64.
        if body.contains(':') {
            return Err(ApiError::bad_request(format!(
                "the PEM block `{label}` is encrypted or has headers; upload it unencrypted"
            )));
        }
        let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| {
                ApiError::bad_request(format!("the PEM block `{label}` is not valid base64"))
            })?;
        let total_end = start + "-----BEGIN ".len() + body_start + end + end_marker.len();
        blocks.push(Block {
            label,
            der,
            text: rest[start..total_end].to_owned(),
        });
        rest = &rest[total_end..];
    }
    Ok(blocks)
}

/// The first common name of a name, or "".
fn common_name(name: &X509Name<'_>) -> String {
    name.iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn texts<'a>(
    attrs: impl Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'a>>,
) -> Vec<String> {
    attrs
        .filter_map(|a| a.as_str().ok().map(str::to_owned))
        .collect()
}

fn name_details(name: &X509Name<'_>) -> Value {
    json!({
        "dn": name.to_string(),
        "cn": common_name(name),
        "o": texts(name.iter_organization()),
        "ou": texts(name.iter_organizational_unit()),
        "c": texts(name.iter_country()),
    })
}

fn oid_name(oid: &Oid<'_>) -> String {
    oid2sn(oid, oid_registry())
        .map(str::to_owned)
        .unwrap_or_else(|_| oid.to_id_string())
}

fn time(t: x509_parser::time::ASN1Time) -> String {
    crate::dashboard::ids::rfc3339(t.timestamp())
}

fn ip_text(bytes: &[u8]) -> String {
    match bytes.len() {
        4 => std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string(),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(bytes);
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => hex::encode(bytes),
    }
}

/// A parsed upload, ready to store.
struct Parsed {
    record: CertRecord,
    /// The private key's PEM, when one came with the certificate.
    key_pem: Option<String>,
}

impl std::fmt::Debug for Parsed {
    // Never the key itself, even in a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parsed")
            .field("id", &self.record.id)
            .field("has_key", &self.key_pem.is_some())
            .finish()
    }
}

/// Reads an upload: the chain (leaf first) and at most one private key, which must
/// belong to the leaf.
fn parse_upload(org_id: &str, text: &str) -> Result<Parsed, ApiError> {
    let blocks = pem_blocks(text)?;
    let mut certs = Vec::new();
    let mut key: Option<(PrivateKeyDer<'static>, String)> = None;
    for block in blocks {
        let der =
            match block.label.as_str() {
                "CERTIFICATE" => {
                    certs.push(block);
                    continue;
                }
                "PRIVATE KEY" => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(block.der)),
                "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(block.der)),
                "EC PRIVATE KEY" => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(block.der)),
                "ENCRYPTED PRIVATE KEY" => return Err(ApiError::bad_request(
                    "the private key is encrypted; upload it unencrypted (it is sealed at rest)",
                )),
                // Parameters (`EC PARAMETERS`) and the like carry nothing to keep.
                _ => continue,
            };
        if key.is_some() {
            return Err(ApiError::bad_request(
                "more than one private key: upload the leaf's key only",
            ));
        }
        key = Some((der, block.text));
    }
    let Some(leaf_block) = certs.first() else {
        return Err(ApiError::bad_request(
            "no certificate: the body must hold a PEM `CERTIFICATE` block",
        ));
    };
    let mut parsed_chain = Vec::new();
    for (i, block) in certs.iter().enumerate() {
        let (_, cert) = x509_parser::parse_x509_certificate(&block.der).map_err(|e| {
            ApiError::bad_request(format!(
                "certificate {} of the chain cannot be read: {e}",
                i + 1
            ))
        })?;
        parsed_chain.push(cert);
    }
    let Some(leaf) = parsed_chain.first() else {
        return Err(ApiError::bad_request(
            "no certificate: the body must hold a PEM `CERTIFICATE` block",
        ));
    };
    if let Some((der, _)) = &key {
        check_key_matches(der, leaf)?;
    }
    let id = hex::encode(Sha256::digest(&leaf_block.der));
    let summary = summary_of(&id, leaf, key.is_some());
    let details = details_of(&id, leaf, parsed_chain.len());
    let pem = certs
        .iter()
        .map(|b| b.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    let record = CertRecord {
        org_id: org_id.to_owned(),
        id,
        subject_cn: summary.subject_cn,
        issuer_cn: summary.issuer_cn,
        not_before: summary.not_before,
        not_after: summary.not_after,
        is_ca: summary.is_ca,
        dns_names: serde_json::to_string(&summary.dns_names).unwrap_or_else(|_| "[]".into()),
        details: details.to_string(),
        pem,
        key_sealed: None,
        created_at: now(),
    };
    Ok(Parsed {
        record,
        key_pem: key.map(|(_, text)| text),
    })
}

/// The key must be readable and be the leaf's: a certificate stored with someone else's
/// key would fail only later, at a TLS handshake.
fn check_key_matches(key: &PrivateKeyDer<'_>, leaf: &X509Certificate<'_>) -> Result<(), ApiError> {
    let signing = rustls::crypto::ring::sign::any_supported_type(key)
        .map_err(|e| ApiError::bad_request(format!("the private key cannot be used: {e}")))?;
    match signing.public_key() {
        Some(spki) if spki.as_ref() != leaf.public_key().raw => Err(ApiError::bad_request(
            "the private key does not belong to the (first) certificate",
        )),
        _ => Ok(()),
    }
}

fn summary_of(id: &str, cert: &X509Certificate<'_>, has_private: bool) -> CertSummary {
    let dns_names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some((*d).to_owned()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    CertSummary {
        id: id.to_owned(),
        dns_names,
        has_private,
        is_ca: cert.is_ca(),
        issuer_cn: common_name(cert.issuer()),
        subject_cn: common_name(cert.subject()),
        not_before: time(cert.validity().not_before),
        not_after: time(cert.validity().not_after),
    }
}

fn details_of(id: &str, cert: &X509Certificate<'_>, chain_length: usize) -> Value {
    let (mut dns, mut ip, mut email, mut uri) = (vec![], vec![], vec![], vec![]);
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                GeneralName::IPAddress(b) => ip.push(ip_text(b)),
                GeneralName::RFC822Name(e) => email.push((*e).to_owned()),
                GeneralName::URI(u) => uri.push((*u).to_owned()),
                _ => {}
            }
        }
    }
    let key_usage: Vec<&str> = match cert.key_usage() {
        Ok(Some(ku)) => {
            let k = ku.value;
            [
                (k.digital_signature(), "digital_signature"),
                (k.non_repudiation(), "non_repudiation"),
                (k.key_encipherment(), "key_encipherment"),
                (k.data_encipherment(), "data_encipherment"),
                (k.key_agreement(), "key_agreement"),
                (k.key_cert_sign(), "key_cert_sign"),
                (k.crl_sign(), "crl_sign"),
                (k.encipher_only(), "encipher_only"),
                (k.decipher_only(), "decipher_only"),
            ]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect()
        }
        _ => Vec::new(),
    };
    let ext_key_usage: Vec<String> = match cert.extended_key_usage() {
        Ok(Some(eku)) => {
            let e = eku.value;
            let mut out: Vec<String> = [
                (e.any, "any"),
                (e.server_auth, "server_auth"),
                (e.client_auth, "client_auth"),
                (e.code_signing, "code_signing"),
                (e.email_protection, "email_protection"),
                (e.time_stamping, "time_stamping"),
                (e.ocsp_signing, "ocsp_signing"),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| name.to_owned())
            .collect();
            out.extend(e.other.iter().map(|o| o.to_id_string()));
            out
        }
        _ => Vec::new(),
    };
    let spki = cert.public_key();
    let (key_type, key_bits) = match spki.parsed() {
        Ok(x509_parser::public_key::PublicKey::RSA(rsa)) => ("RSA".to_owned(), rsa.key_size()),
        Ok(x509_parser::public_key::PublicKey::EC(ec)) => ("EC".to_owned(), ec.key_size()),
        Ok(other) => (oid_name(&spki.algorithm.algorithm), other.key_size()),
        Err(_) => (oid_name(&spki.algorithm.algorithm), 0),
    };
    json!({
        "fingerprint_sha256": id,
        "serial": cert.raw_serial_as_string(),
        "version": cert.version().0 + 1,
        "signature_algorithm": oid_name(&cert.signature_algorithm.algorithm),
        "key_type": key_type,
        "key_bits": key_bits,
        "key_usage": key_usage,
        "ext_key_usage": ext_key_usage,
        "sans": {"dns": dns, "ip": ip, "email": email, "uri": uri},
        "issuer": name_details(cert.issuer()),
        "subject": name_details(cert.subject()),
        "is_self_signed": cert.subject() == cert.issuer(),
        "chain_length": chain_length,
    })
}

/// The summary of a stored certificate.
fn basics(record: &CertRecord) -> CertSummary {
    CertSummary {
        id: record.id.clone(),
        dns_names: serde_json::from_str(&record.dns_names).unwrap_or_default(),
        has_private: record.key_sealed.is_some(),
        is_ca: record.is_ca,
        issuer_cn: record.issuer_cn.clone(),
        subject_cn: record.subject_cn.clone(),
        not_before: record.not_before.clone(),
        not_after: record.not_after.clone(),
    }
}

fn detailed(record: &CertRecord) -> CertDetailed {
    CertDetailed {
        basics: basics(record),
        details: serde_json::from_str(&record.details).unwrap_or(Value::Null),
    }
}

#[utoipa::path(
    get,
    path = "/api/certs",
    tag = "certs",
    params(
        PageQuery,
        ("mode" = Option<String>, Query, description = "`detailed`: entries carry their details too."),
        ("filter" = Option<String>, Query, description = "With `mode=detailed` only: `omit` (all), `with_pk`, `without_pk`."),
    ),
    responses(
        (status = 200, description = "A page of certificates: `{cert_basics, pages}`; with `mode=detailed` each entry also has `details`.", body = CertList),
        BadQuery,
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let detailed_mode = match ctx.query("mode") {
        None | Some("") => false,
        Some("detailed") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "query parameter `mode`: `{other}` is not `detailed`"
            )))
        }
    };
    let filter = match ctx.query("filter") {
        None | Some("") | Some("omit") => KeyFilter::All,
        Some("with_pk") => KeyFilter::WithKey,
        Some("without_pk") => KeyFilter::WithoutKey,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "query parameter `filter`: `{other}` is not one of omit, with_pk, without_pk"
            )))
        }
    };
    if filter != KeyFilter::All && !detailed_mode {
        return Err(ApiError::bad_request(
            "query parameter `filter` works only with `mode=detailed`",
        ));
    }
    let (records, total) = ctx
        .state
        .store
        .list_certs(&ctx.caller.org_id, filter, paging.page)
        .await?;
    let pages = paging.pages(total);
    if detailed_mode {
        let certs: Vec<_> = records.iter().map(detailed).collect();
        Reply::json(
            StatusCode::OK,
            CertDetailedList {
                cert_basics: (!certs.is_empty()).then_some(certs),
                pages,
            },
        )
    } else {
        let certs: Vec<_> = records.iter().map(basics).collect();
        Reply::json(
            StatusCode::OK,
            CertList {
                cert_basics: (!certs.is_empty()).then_some(certs),
                pages,
            },
        )
    }
}

#[utoipa::path(
    post,
    path = "/api/certs",
    tag = "certs",
    request_body(
        description = "PEM: the certificate chain, leaf first, optionally with the leaf's private key; as the body, or as a file field of a multipart form.",
        content((String = "text/plain"), (String = "application/x-pem-file"), (CertUpload = "multipart/form-data"))
    ),
    responses(
        (status = 201, description = "Added; `ID` and `Meta` are the certificate's id (its SHA-256 fingerprint).", body = Outcome),
        (status = 400, description = "No certificate, an unreadable one, or a key that does not match.", body = ErrorBody),
        Unauthorized,
        (status = 409, description = "The organisation already has this certificate.", body = ErrorBody),
        TooLarge,
        (status = 415, description = "Not PEM text or a multipart form.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn create(ctx: Ctx) -> Result<Reply, ApiError> {
    match ctx.media_type().as_deref() {
        None
        | Some("text/plain")
        | Some("application/x-pem-file")
        | Some("application/pem-certificate-chain")
        | Some("application/x-x509-ca-cert")
        | Some("application/octet-stream")
        | Some("multipart/form-data") => {}
        Some(other) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "send the PEM text as the body (Content-Type: text/plain or application/x-pem-file) or as a multipart file field, not `{other}`"
            )))
        }
    }
    let text = std::str::from_utf8(&ctx.body)
        .map_err(|_| ApiError::bad_request("the body is not PEM text (it is not UTF-8)"))?;
    let Parsed {
        mut record,
        key_pem,
    } = parse_upload(&ctx.caller.org_id, text)?;
    if let Some(key_pem) = key_pem {
        let Some(sealer) = &ctx.state.sealer else {
            return Err(ApiError::bad_request(
                "this dashboard keeps no private keys: set `secret` in its config (or SLUICE_DB_SECRET) to store them sealed",
            ));
        };
        record.key_sealed = Some(
            sealer
                .seal(key_pem.as_bytes())
                .map_err(|e| ApiError::Internal(e.to_string()))?,
        );
    }
    ctx.state.store.insert_cert(&record).await?;
    Reply::outcome(
        StatusCode::CREATED,
        "certificate added",
        Some(&record.id),
        &record.id,
    )
}

#[utoipa::path(
    get,
    path = "/api/certs/{certId}",
    tag = "certs",
    params(CertPath),
    responses(
        (status = 200, description = "The certificate with its details and chain; never its private key.", body = CertFull),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn get(ctx: Ctx) -> Result<Reply, ApiError> {
    let record: CertRecord = owned::find(&ctx, &ctx.path::<CertPath>()?.id).await?;
    Reply::json(
        StatusCode::OK,
        CertFull {
            detailed: detailed(&record),
            pem: record.pem,
        },
    )
}

#[utoipa::path(
    delete,
    path = "/api/certs/{certId}",
    tag = "certs",
    params(CertPath),
    responses(
        (status = 200, description = "Deleted, with its private key.", body = Outcome),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete(ctx: Ctx) -> Result<Reply, ApiError> {
    let record: CertRecord = owned::find(&ctx, &ctx.path::<CertPath>()?.id).await?;
    owned::delete(&ctx, &record).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(names: &[&str]) -> rcgen::CertifiedKey {
        rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
    }

    #[test]
    fn reads_a_certificate_with_its_key() {
        let ck = self_signed(&["api.example.com", "*.example.org"]);
        let text = format!("{}{}", ck.cert.pem(), ck.key_pair.serialize_pem());
        let parsed = parse_upload("o1", &text).unwrap();
        let r = &parsed.record;
        assert_eq!(r.id.len(), 64);
        assert_eq!(r.dns_names, r#"["api.example.com","*.example.org"]"#);
        assert!(!r.is_ca);
        assert!(r.not_before.ends_with('Z') && r.not_after > r.not_before);
        assert!(parsed.key_pem.as_deref().unwrap().contains("PRIVATE KEY"));
        assert!(!r.pem.contains("PRIVATE"));
        let details: Value = serde_json::from_str(&r.details).unwrap();
        assert_eq!(details["key_type"], "EC");
        assert_eq!(details["chain_length"], 1);
        assert_eq!(details["sans"]["dns"][1], "*.example.org");
    }

    #[test]
    fn odd_pem_text_is_an_error_not_a_panic() {
        for text in [
            "-----BEGIN -----",
            "-----BEGIN X",
            "-----BEGIN X----------END X-----",
            "-----BEGIN é-----\nAAAA\n-----END é-----",
            "-----BEGIN CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "\u{0}-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n-----END CERTIFICATE-----",
        ] {
            assert!(parse_upload("o", text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn multipart_framing_is_ignored() {
        let ck = self_signed(&["a.example"]);
        let text = format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.pem\"\r\n\r\n{}\r\n--XyZ--\r\n",
            ck.cert.pem()
        );
        let parsed = parse_upload("o1", &text).unwrap();
        assert!(parsed.key_pem.is_none());
    }

    #[test]
    fn refuses_what_it_cannot_keep() {
        let a = self_signed(&["a.example"]);
        let b = self_signed(&["b.example"]);
        let mismatched = format!("{}{}", a.cert.pem(), b.key_pair.serialize_pem());
        let e = parse_upload("o", &mismatched).unwrap_err();
        assert!(e.to_string().contains("does not belong"), "{e}");
        let e = parse_upload("o", "hello").unwrap_err();
        assert!(e.to_string().contains("no certificate"), "{e}");
        let e = parse_upload(
            "o",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
        let e = parse_upload(
            "o",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot be read"), "{e}");
        let e = parse_upload("o", "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap_err();
        assert!(e.to_string().contains("END"), "{e}");
        let two_keys = format!(
            "{}{}{}",
            a.cert.pem(),
            a.key_pair.serialize_pem(),
            a.key_pair.serialize_pem()
        );
        assert!(parse_upload("o", &two_keys).is_err());
    }
}
