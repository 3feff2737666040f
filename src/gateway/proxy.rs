//! The last step: forwarding a request to its API's upstream (over `upstream`'s pooled
//! connections) and streaming the answer back (an SSE upstream is relayed event by event, never
//! buffered). WebSocket upgrades pass through.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use hyper_util::rt::TokioIo;
use smallvec::SmallVec;
use tracing::debug;

use super::api::Api;
use super::config::ProxyConfig;
use super::upstream::{Client, ClientError, Reply};
use crate::connect::tls;
use crate::http::{self as h, Body, HttpResponse};

/// Why the upstream gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot connect to the upstream")]
    Connect,
    #[error("the upstream failed: {0}")]
    Upstream(String),
    /// An API of streams only, and no stream took the request.
    #[error("no stream route at this path")]
    NoUpstream,
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::NoUpstream => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

/// The upstream client, shared by every API: connections are pooled per upstream and
/// per serving thread.
#[derive(Clone)]
pub struct Proxy {
    client: Arc<Client>,
    timeout: Duration,
}

/// What the proxy needs to know about the client's side of the request.
pub struct Origin {
    pub peer: SocketAddr,
    pub tls: bool,
}

/// How long an idle upstream connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

impl Proxy {
    /// A proxy with the settings of the config's `proxy` section; its files are read now.
    pub fn new(config: &ProxyConfig) -> Result<Self, String> {
        Ok(Proxy {
            client: Arc::new(Client::new(
                config.connect_timeout.0,
                config.max_idle_per_host,
                IDLE_TIMEOUT,
                upstream_tls(config)?,
            )),
            timeout: config.timeout.0,
        })
    }

    /// Sends `req` to `api`'s upstream; `rest` is the path below the listen path.
    pub async fn forward(
        &self,
        api: &Api,
        mut req: http::Request<Body>,
        rest: &str,
        origin: &Origin,
    ) -> Result<HttpResponse, ProxyError> {
        let Some(up) = &api.upstream else {
            return Err(ProxyError::NoUpstream);
        };
        let upgrade = wants_upgrade(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let path = if api.strip { rest } else { parts.uri.path() };
        let path = if path.is_empty() { "/" } else { path };
        let mut target = String::with_capacity(up.base_path.len() + path.len() + 32);
        target.push_str(&up.base_path);
        target.push_str(path);
        if let Some(q) = parts.uri.query() {
            target.push('?');
            target.push_str(q);
        }
        let original_host = parts.headers.get(header::HOST).cloned().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        let upgrade_value = parts.headers.get(header::UPGRADE).cloned();
        remove_hop_by_hop(&mut parts.headers);
        if let Some(u) = upgrade_value.filter(|_| upgrade) {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, u);
        }
        forwarded_headers(&mut parts.headers, origin, original_host);
        parts.headers.insert(header::HOST, up.host.clone());
        let timeout = up.timeout.unwrap_or(self.timeout);
        let send = self
            .client
            .send(&up.target, &parts.method, &target, &parts.headers, body);
        let (mut head, reply) = match tokio::time::timeout(timeout, send).await {
            Err(_) => return Err(ProxyError::Timeout(timeout)),
            Ok(Err(ClientError::Connect(e))) => {
                debug!(error = %e, api = %api.id, "Upstream connect failed.");
                return Err(ProxyError::Connect);
            }
            Ok(Err(e)) => return Err(ProxyError::Upstream(e.to_string())),
            Ok(Ok(answer)) => answer,
        };
        let body = match reply {
            Reply::Body(body) => body,
            Reply::Upgraded(upstream) => {
                let Some(client_upgrade) = client_upgrade else {
                    return Err(ProxyError::Upstream(
                        "the upstream switched protocols unasked".into(),
                    ));
                };
                tokio::spawn(async move {
                    let Ok(client) = client_upgrade.await else {
                        return;
                    };
                    let mut client = TokioIo::new(client);
                    let mut upstream = upstream;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
                h::empty()
            }
        };
        if head.status != StatusCode::SWITCHING_PROTOCOLS {
            remove_hop_by_hop(&mut head.headers);
        }
        Ok(http::Response::from_parts(head, body))
    }
}

/// TLS to upstreams: the system's roots and those of `ca_file`, and the client
/// certificate when one is set. A machine without system roots still proxies to plain
/// HTTP upstreams; HTTPS ones then fail at connect (502) unless `ca_file` vouches for
/// them. Errors name the field.
fn upstream_tls(config: &ProxyConfig) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    // Certificates the system store holds but rustls cannot parse are skipped, as every
    // TLS client does with such stores.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = &config.ca_file {
        for cert in tls::pem_certs(path, "proxy.ca_file")? {
            roots
                .add(cert)
                .map_err(|e| format!("`proxy.ca_file`: {}: {e}", path.display()))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("upstream TLS: {e}"))?
        .with_root_certificates(roots);
    match (&config.client_cert_file, &config.client_key_file) {
        (Some(cert), Some(key)) => tls::with_client_cert(
            builder,
            cert,
            key,
            ["proxy.client_cert_file", "proxy.client_key_file"],
        ),
        _ => Ok(builder.with_no_client_auth()),
    }
}

fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes the headers that belong to one connection (RFC 9110 7.6.1), including those
/// the `Connection` header names.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names present, rather than a hashed removal of every hop-by-hop
    // name: most messages carry one or none of them.
    let mut doomed: SmallVec<[HeaderName; 4]> = headers
        .keys()
        .filter(|name| HOP_BY_HOP.contains(name) || name.as_str() == "keep-alive")
        .cloned()
        .collect();
    if doomed.is_empty() {
        return;
    }
    doomed.extend(
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok()),
    );
    for name in doomed {
        headers.remove(name);
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

fn forwarded_headers(headers: &mut HeaderMap, origin: &Origin, host: Option<HeaderValue>) {
    let prior = headers
        .get(&X_FORWARDED_FOR)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty());
    let xff = match prior {
        Some(prior) => {
            let mut xff = String::with_capacity(prior.len() + 48);
            xff.push_str(prior);
            xff.push_str(", ");
            xff.push_str(peer_text(origin.peer.ip()).to_str().unwrap_or_default());
            HeaderValue::from_maybe_shared(bytes::Bytes::from(xff)).ok()
        }
        None => Some(peer_text(origin.peer.ip())),
    };
    if let Some(v) = xff {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(
        X_FORWARDED_PROTO,
        HeaderValue::from_static(if origin.tls { "https" } else { "http" }),
    );
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST, host);
    }
}

/// A client address as header text. A connection's requests come from one address, so
/// the last one's text is kept per thread rather than written out for each request.
fn peer_text(ip: std::net::IpAddr) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(std::net::IpAddr, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((seen, text)) = last.as_ref() {
            if *seen == ip {
                return text.clone();
            }
        }
        let text = HeaderValue::from_maybe_shared(bytes::Bytes::from(ip.to_string()))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        *last = Some((ip, text.clone()));
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-private".parse().unwrap());
        h.insert("x-private", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("x-kept", "1".parse().unwrap());
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn forwarded_for_names_each_client() {
        for peer in ["10.1.2.3:1", "[2001:db8::1]:2", "10.1.2.3:3"] {
            let mut h = HeaderMap::new();
            let origin = Origin {
                peer: peer.parse().unwrap(),
                tls: false,
            };
            forwarded_headers(&mut h, &origin, None);
            let ip = origin.peer.ip().to_string();
            assert_eq!(h["x-forwarded-for"], ip.as_str());
            assert_eq!(h["x-forwarded-proto"], "http");
            assert!(!h.contains_key("x-forwarded-host"));
        }
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        let origin = Origin {
            peer: "127.0.0.1:5000".parse().unwrap(),
            tls: true,
        };
        forwarded_headers(
            &mut h,
            &origin,
            Some(HeaderValue::from_static("api.example")),
        );
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "api.example");
    }
}
