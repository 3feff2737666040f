//! The last step: forwarding a request to its API's upstream over a pooled client and
//! streaming the answer back (an SSE upstream is relayed event by event, never
//! buffered). WebSocket upgrades pass through.

use std::net::SocketAddr;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tracing::debug;

use super::api::Api;
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
    #[error("cannot build the upstream request: {0}")]
    Request(String),
    /// An API of streams only, and no stream took the request.
    #[error("no stream route at this path")]
    NoUpstream,
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Request(_) => StatusCode::BAD_REQUEST,
            ProxyError::NoUpstream => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

type Pooled = Client<Connector, Body>;

thread_local! {
    /// Each worker thread keeps its own pool, so that a request and the upstream
    /// connection that carries it run on one thread and never wake another.
    static CLIENTS: std::cell::RefCell<Vec<(usize, Pooled)>> = const { std::cell::RefCell::new(Vec::new()) };
}

static NEXT_PROXY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The upstream client, shared by every API: connections are pooled per host and per
/// worker thread.
#[derive(Clone)]
pub struct Proxy {
    id: usize,
    connect_timeout: Duration,
    max_idle_per_host: usize,
    tls: std::sync::Arc<rustls::ClientConfig>,
    timeout: Duration,
}

/// What the proxy needs to know about the client's side of the request.
pub struct Origin {
    pub peer: SocketAddr,
    pub tls: bool,
}

impl Proxy {
    pub fn new(
        timeout: Duration,
        connect_timeout: Duration,
        max_idle_per_host: usize,
    ) -> Result<Self, String> {
        Ok(Proxy {
            id: NEXT_PROXY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            connect_timeout,
            max_idle_per_host,
            tls: std::sync::Arc::new(upstream_tls()?),
            timeout,
        })
    }

    /// This thread's pool.
    fn client(&self) -> Pooled {
        CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some((_, c)) = clients.iter().find(|(id, _)| *id == self.id) {
                return c.clone();
            }
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_connect_timeout(Some(self.connect_timeout));
            http.set_nodelay(true);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config((*self.tls).clone())
                .https_or_http()
                .enable_http1()
                .wrap_connector(http);
            let client = Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(self.max_idle_per_host)
                .pool_idle_timeout(Duration::from_secs(90))
                .build(https);
            clients.push((self.id, client.clone()));
            client
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
        let uri = Uri::builder()
            .scheme(up.scheme.clone())
            .authority(up.authority.clone())
            .path_and_query(target)
            .build()
            .map_err(|e| ProxyError::Request(e.to_string()))?;
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
        if let Ok(host) = HeaderValue::from_str(up.authority.as_str()) {
            parts.headers.insert(header::HOST, host);
        }
        parts.uri = uri;
        // The pool speaks HTTP/1.1 to upstreams whatever the client spoke.
        parts.version = Version::HTTP_11;
        let upstream_req = http::Request::from_parts(parts, body);
        let timeout = up.timeout.unwrap_or(self.timeout);
        let mut resp =
            match tokio::time::timeout(timeout, self.client().request(upstream_req)).await {
                Err(_) => return Err(ProxyError::Timeout(timeout)),
                Ok(Err(e)) if e.is_connect() => {
                    debug!(error = %e, api = %api.id, "Upstream connect failed.");
                    return Err(ProxyError::Connect);
                }
                Ok(Err(e)) => {
                    let text = std::error::Error::source(&e)
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| e.to_string());
                    return Err(ProxyError::Upstream(text));
                }
                Ok(Ok(resp)) => resp,
            };
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            if let Some(client_upgrade) = client_upgrade {
                let upstream_upgrade = hyper::upgrade::on(&mut resp);
                tokio::spawn(async move {
                    let (Ok(client), Ok(upstream)) = (client_upgrade.await, upstream_upgrade.await)
                    else {
                        return;
                    };
                    let mut client = TokioIo::new(client);
                    let mut upstream = TokioIo::new(upstream);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
                let (parts, _) = resp.into_parts();
                return Ok(http::Response::from_parts(parts, h::empty()));
            }
        }
        remove_hop_by_hop(resp.headers_mut());
        Ok(resp.map(h::boxed))
    }
}

/// TLS to upstreams, trusting the system's roots. A machine without them still proxies
/// to plain HTTP upstreams; HTTPS ones then fail at connect (502).
fn upstream_tls() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("upstream TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
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
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

fn forwarded_headers(headers: &mut HeaderMap, origin: &Origin, host: Option<HeaderValue>) {
    let ip = origin.peer.ip().to_string();
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prior) if !prior.is_empty() => format!("{prior}, {ip}"),
        _ => ip,
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", v);
    }
    headers.insert(
        "x-forwarded-proto",
        HeaderValue::from_static(if origin.tls { "https" } else { "http" }),
    );
    if let Some(host) = host {
        headers.insert("x-forwarded-host", host);
    }
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
