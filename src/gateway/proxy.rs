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
use super::upstream::{Client, ClientError, Outbound, Reply, RequestBodyError};
use crate::connect::tls;
use crate::http::wire::{is_hop_by_hop, remembered, ConnectionTokens};
use crate::http::{self as h, Body, HttpResponse};

/// Why the upstream gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot connect to the upstream")]
    Connect,
    #[error("the upstream failed: {0}")]
    Upstream(#[source] ClientError),
    #[error("the upstream failed: it switched protocols unasked")]
    SwitchedUnasked,
    /// The client's request body could not be read (bad chunked framing, cut short).
    #[error("the request body could not be read: {0}")]
    RequestBody(#[source] RequestBodyError),
    /// An API of streams only, and no stream took the request.
    #[error("no stream route at this path")]
    NoUpstream,
}

impl ProxyError {
    /// What the client is told: fixed words, never the upstream's own error text (which
    /// can name internal hosts and addresses); the cause goes to the log.
    pub fn public_message(&self) -> &'static str {
        match self {
            ProxyError::Timeout(_) => "the upstream did not answer in time",
            ProxyError::Connect => "cannot connect to the upstream",
            ProxyError::Upstream(_) | ProxyError::SwitchedUnasked => "the upstream failed",
            ProxyError::RequestBody(_) => "the request body could not be read",
            ProxyError::NoUpstream => "no stream route at this path",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::NoUpstream => StatusCode::NOT_FOUND,
            ProxyError::RequestBody(_) => StatusCode::BAD_REQUEST,
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
    pub fn new(config: &ProxyConfig) -> Result<Self, tls::TlsError> {
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
    ///
    /// The request's head is written out here, before the returned future is first
    /// polled: the future then holds neither the request's parts nor the fields made for
    /// it, and every request's future is that much smaller to make, move and touch.
    pub fn forward<'a>(
        &'a self,
        api: &'a Api,
        mut req: http::Request<Body>,
        rest: &str,
        origin: &Origin,
    ) -> impl std::future::Future<Output = Result<HttpResponse, ProxyError>> + Send + 'a {
        let prepared = api.upstream.as_ref().map(|up| {
            let outgoing = Outgoing::of(req.headers(), req.uri(), origin, &up.host);
            let client_upgrade = outgoing.upgrade.then(|| hyper::upgrade::on(&mut req));
            let (parts, body) = req.into_parts();
            let path = if api.strip { rest } else { parts.uri.path() };
            let path = if path.is_empty() { "/" } else { path };
            let mut target = String::with_capacity(up.base_path.len() + path.len() + 32);
            target.push_str(&up.base_path);
            target.push_str(path);
            if let Some(q) = parts.uri.query() {
                target.push('?');
                target.push_str(q);
            }
            let fields = outgoing.fields(&parts.headers);
            let outbound = Outbound::new(parts.method, &target, fields, body);
            (up, outbound, client_upgrade)
        });
        async move {
            let Some((up, outbound, client_upgrade)) = prepared else {
                return Err(ProxyError::NoUpstream);
            };
            let timeout = up.timeout.unwrap_or(self.timeout);
            let send = self.client.send(&up.target, outbound);
            let (head, reply) = match tokio::time::timeout(timeout, send).await {
                Err(_) => return Err(ProxyError::Timeout(timeout)),
                Ok(Err(e @ (ClientError::Connect(_) | ClientError::ConnectTimeout(_)))) => {
                    debug!(error = %e, api = %api.id, "Upstream connect failed.");
                    return Err(ProxyError::Connect);
                }
                Ok(Err(e @ ClientError::Refused(_))) => {
                    // The organisation's own setting: the operator may want to know, the
                    // caller learns only that the upstream cannot be reached.
                    tracing::warn!(error = %e, api = %api.id, "Upstream refused by the egress policy.");
                    return Err(ProxyError::Connect);
                }
                Ok(Err(ClientError::RequestBody(e))) => return Err(ProxyError::RequestBody(e)),
                Ok(Err(e)) => return Err(ProxyError::Upstream(e)),
                Ok(Ok(answer)) => answer,
            };
            let body = match reply {
                Reply::Body(body) => body,
                Reply::Upgraded(upstream) => {
                    let Some(client_upgrade) = client_upgrade else {
                        return Err(ProxyError::SwitchedUnasked);
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
            // The client's connection fields were read and left out on the way in: the
            // answer carries its end-to-end fields only.
            Ok(http::Response::from_parts(head, body))
        }
    }
}

/// TLS to upstreams: the system's roots and those of `ca_file`, and the client
/// certificate when one is set. A machine without system roots still proxies to plain
/// HTTP upstreams; HTTPS ones then fail at connect (502) unless `ca_file` vouches for
/// them. Errors name the field.
fn upstream_tls(config: &ProxyConfig) -> Result<rustls::ClientConfig, tls::TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    // Certificates the system store holds but rustls cannot parse are skipped, as every
    // TLS client does with such stores.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = &config.ca_file {
        let field = "proxy.ca_file";
        for cert in tls::pem_certs(path, field)? {
            roots
                .add(cert)
                .map_err(|e| tls::TlsError::refused(field, &format!("`{}`", path.display()), e))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls::TlsError::Setup)?
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

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The request's fields as the upstream gets them: the client's end-to-end fields as they
/// are, then those the proxy sets. Read in one pass over the client's fields and written
/// straight into the upstream request, so the request's map is neither searched nor
/// changed for each field the proxy drops or sets.
struct Outgoing {
    /// The fields the client's `Connection` names: they belong to its connection alone
    /// (RFC 9110 7.6.1).
    named: SmallVec<[HeaderName; 2]>,
    /// `Host`, `X-Forwarded-*`, and for an upgrade `Connection` and `Upgrade`.
    set: SmallVec<[(HeaderName, HeaderValue); 6]>,
    /// The client asks to switch protocols (a WebSocket, say).
    upgrade: bool,
}

/// An `Upgrade` value without its `h2c` protocols; `None` when nothing else is left.
fn without_h2c(value: &HeaderValue) -> Option<HeaderValue> {
    let bytes = value.as_bytes();
    let kept: Vec<&[u8]> = crate::http::wire::tokens(bytes)
        .filter(|t| !t.eq_ignore_ascii_case(b"h2c"))
        .collect();
    match kept.len() {
        0 => None,
        n if n == crate::http::wire::tokens(bytes).count() => Some(value.clone()),
        _ => HeaderValue::from_bytes(&kept.join(&b", "[..])).ok(),
    }
}

impl Outgoing {
    fn of(headers: &HeaderMap, uri: &http::Uri, origin: &Origin, host: &HeaderValue) -> Self {
        let mut connection = ConnectionTokens::default();
        let mut upgrade = None;
        let mut original_host = None;
        let mut prior: SmallVec<[&HeaderValue; 2]> = SmallVec::new();
        for (name, value) in headers {
            if *name == header::CONNECTION {
                connection.read(value.as_bytes());
            } else if *name == header::UPGRADE {
                upgrade = upgrade.or(Some(value));
            } else if *name == header::HOST {
                original_host = original_host.or(Some(value));
            } else if *name == X_FORWARDED_FOR {
                prior.push(value);
            }
        }
        let named = connection.named;
        if named.contains(&header::HOST) {
            original_host = None;
        }
        if named.contains(&X_FORWARDED_FOR) {
            prior.clear();
        }
        // HTTP/2 over cleartext (`h2c`) is never passed on: an upstream that switched
        // would take the connection's later requests past every check of the gateway.
        let upgrade = upgrade.filter(|_| connection.upgrade).and_then(without_h2c);
        let mut set = SmallVec::new();
        set.push((header::HOST, host.clone()));
        set.push((X_FORWARDED_FOR, forwarded_for(&prior, origin)));
        set.push((
            X_FORWARDED_PROTO,
            HeaderValue::from_static(if origin.tls { "https" } else { "http" }),
        ));
        let original_host = original_host.cloned().or_else(|| {
            uri.authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        if let Some(h) = original_host {
            set.push((X_FORWARDED_HOST, h));
        }
        if let Some(u) = &upgrade {
            set.push((header::CONNECTION, HeaderValue::from_static("upgrade")));
            set.push((header::UPGRADE, u.clone()));
        }
        Outgoing {
            named,
            set,
            upgrade: upgrade.is_some(),
        }
    }

    /// Whether a field of the client's goes on as it is.
    fn keeps(&self, name: &HeaderName) -> bool {
        !(is_hop_by_hop(name)
            || *name == header::HOST
            || *name == X_FORWARDED_FOR
            || *name == X_FORWARDED_PROTO
            || *name == X_FORWARDED_HOST
            || self.named.contains(name))
    }

    fn fields<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)> {
        headers
            .iter()
            .filter(|(name, _)| self.keeps(name))
            .chain(self.set.iter().map(|(name, value)| (name, value)))
    }
}

/// `X-Forwarded-For`: the addresses earlier proxies gave, then the client's.
fn forwarded_for(prior: &[&HeaderValue], origin: &Origin) -> HeaderValue {
    let peer = peer_text(origin.peer.ip());
    let prior: SmallVec<[&str; 2]> = prior
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if prior.is_empty() {
        return peer;
    }
    let mut xff = String::with_capacity(prior.iter().map(|p| p.len() + 2).sum::<usize>() + 48);
    for p in prior {
        xff.push_str(p);
        xff.push_str(", ");
    }
    xff.push_str(peer.to_str().unwrap_or_default());
    HeaderValue::from_maybe_shared(bytes::Bytes::from(xff)).unwrap_or(peer)
}

/// A client address as header text. A connection's requests come from one address, so
/// the last one's text is kept per thread rather than written out for each request.
fn peer_text(ip: std::net::IpAddr) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(std::net::IpAddr, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    remembered(&LAST, ip, |ip| {
        HeaderValue::from_maybe_shared(bytes::Bytes::from(ip.to_string()))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(peer: &str, tls: bool) -> Origin {
        Origin {
            peer: peer.parse().unwrap(),
            tls,
        }
    }

    /// The fields the upstream gets, as text.
    fn sent(headers: &HeaderMap, uri: &str, origin: &Origin) -> Vec<(String, String)> {
        let up = HeaderValue::from_static("upstream:9000");
        let out = Outgoing::of(headers, &uri.parse().unwrap(), origin, &up);
        out.fields(headers)
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    fn get<'a>(fields: &'a [(String, String)], name: &str) -> Vec<&'a str> {
        fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-private".parse().unwrap());
        h.insert("x-private", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert(header::TE, "trailers".parse().unwrap());
        h.insert(header::PROXY_AUTHORIZATION, "Basic eA==".parse().unwrap());
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        h.insert("x-kept", "1".parse().unwrap());
        h.append("x-kept", "2".parse().unwrap());
        let out = Outgoing::of(
            &h,
            &"/".parse().unwrap(),
            &origin("10.0.0.9:1", false),
            &HeaderValue::from_static("up"),
        );
        assert!(
            !out.upgrade,
            "an Upgrade the Connection does not name asks nothing"
        );
        let fields = sent(&h, "/", &origin("10.0.0.9:1", false));
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "x-kept",
                "x-kept",
                "host",
                "x-forwarded-for",
                "x-forwarded-proto"
            ]
        );
        assert_eq!(get(&fields, "host"), ["upstream:9000"]);
    }

    #[test]
    fn h2c_is_never_asked_of_an_upstream() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(without_h2c(&v("h2c")), None);
        assert_eq!(without_h2c(&v("H2C")), None);
        assert_eq!(without_h2c(&v("websocket")), Some(v("websocket")));
        assert_eq!(without_h2c(&v("h2c, websocket")), Some(v("websocket")));
    }

    #[test]
    fn an_upgrade_goes_on_with_its_connection_fields() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "Upgrade".parse().unwrap());
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        h.insert(header::HOST, "api.example".parse().unwrap());
        let o = origin("10.0.0.9:1", true);
        let up = HeaderValue::from_static("up");
        assert!(Outgoing::of(&h, &"/".parse().unwrap(), &o, &up).upgrade);
        let fields = sent(&h, "/", &o);
        assert_eq!(get(&fields, "connection"), ["upgrade"]);
        assert_eq!(get(&fields, "upgrade"), ["websocket"]);
        assert_eq!(get(&fields, "x-forwarded-host"), ["api.example"]);
        assert_eq!(get(&fields, "x-forwarded-proto"), ["https"]);
    }

    #[test]
    fn forwarded_for_names_each_client() {
        for peer in ["10.1.2.3:1", "[2001:db8::1]:2", "10.1.2.3:3"] {
            let o = origin(peer, false);
            let fields = sent(&HeaderMap::new(), "/", &o);
            let ip = o.peer.ip().to_string();
            assert_eq!(get(&fields, "x-forwarded-for"), [ip.as_str()]);
            assert_eq!(get(&fields, "x-forwarded-proto"), ["http"]);
            assert!(get(&fields, "x-forwarded-host").is_empty());
        }
    }

    #[test]
    fn forwarded_fields_extend_or_replace_the_clients() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        h.append("x-forwarded-for", "10.0.0.2, 10.0.0.3".parse().unwrap());
        h.insert("x-forwarded-proto", "gopher".parse().unwrap());
        h.insert("x-forwarded-host", "spoofed".parse().unwrap());
        let fields = sent(&h, "http://api.example/a", &origin("127.0.0.1:5000", true));
        assert_eq!(
            get(&fields, "x-forwarded-for"),
            ["10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.1"]
        );
        assert_eq!(get(&fields, "x-forwarded-proto"), ["https"]);
        assert_eq!(get(&fields, "x-forwarded-host"), ["api.example"]);
        // Fields the client's Connection names are not taken from it.
        h.insert(header::CONNECTION, "x-forwarded-for".parse().unwrap());
        let fields = sent(&h, "/", &origin("127.0.0.1:5000", false));
        assert_eq!(get(&fields, "x-forwarded-for"), ["127.0.0.1"]);
    }
}
