//! HTTP requests that a tenant's settings send (a posted stream's `http_client`, `http`
//! processor and HTTP outputs, webhook deliveries, JWKS documents), held to the egress
//! policy at every hop.
//!
//! Checking a name and then letting the HTTP client resolve it again would leave a gap:
//! a name that answers a public address to the check and a loopback one to the
//! connection (DNS rebinding) would get through, and a resolver cannot hold an address
//! to a port rule, since it is never told the port. So each hop is resolved once, here,
//! its addresses checked with the port it will use, and the request goes to exactly
//! those addresses (a client pinned to them). Redirects are followed here too, each hop
//! checked the same way, so a `302` to `http://localhost:8081/` goes nowhere.
//!
//! The operator's requests (no policy) go through one plain client that follows
//! redirects as configured.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};
use reqwest::{Method, StatusCode, Url};

use crate::egress::{EgressError, EgressPolicy};

/// How long the addresses a name resolved to are used before the name is resolved (and
/// checked) again.
const PIN_FOR: Duration = Duration::from_secs(30);

/// The most hosts one client keeps pinned clients for; past it the stalest go.
const MAX_PINNED: usize = 64;

/// Fields a tenant may not set on a request: the client owns the message's framing and
/// connection, and `Host` would reach other sites behind an address the policy allows.
pub const RESERVED_FIELDS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
];

/// How a client is made: the settings of the component that sends.
#[derive(Debug, Clone)]
pub struct OutboundSettings {
    /// The whole request's time limit, each hop's.
    pub timeout: Duration,
    /// Accept any certificate (the component's `tls_skip_verify`).
    pub accept_invalid_certs: bool,
    /// How many redirects to follow (0: answer the redirect itself).
    pub max_redirects: usize,
}

/// Why a request was not answered.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// Where it (or a redirect) goes is refused.
    #[error(transparent)]
    Refused(#[from] EgressError),
    #[error("{0}")]
    Http(#[source] reqwest::Error),
    #[error("cannot create the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("a redirect to `{location}` cannot be followed: {why}")]
    BadRedirect { location: String, why: String },
    /// The redirects together took longer than one request may.
    #[error("no answer within {0:?}, redirects included")]
    Timeout(Duration),
}

impl OutboundError {
    pub fn is_timeout(&self) -> bool {
        match self {
            OutboundError::Http(e) => e.is_timeout(),
            OutboundError::Timeout(_) => true,
            _ => false,
        }
    }
}

/// One request: what [`Outbound::send`] sends.
pub struct OutboundRequest {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
}

struct Pinned {
    client: reqwest::Client,
    until: Instant,
}

/// An HTTP client that sends what a tenant asked for only where the policy allows.
pub struct Outbound {
    settings: OutboundSettings,
    policy: Option<Arc<EgressPolicy>>,
    /// The operator's client (no policy), or the one for literal addresses (with one).
    direct: reqwest::Client,
    /// Per host and port: a client that reaches only the addresses checked for them.
    pinned: parking_lot::Mutex<HashMap<(String, u16), Pinned>>,
}

impl Outbound {
    pub fn new(
        settings: OutboundSettings,
        policy: Option<Arc<EgressPolicy>>,
    ) -> Result<Self, OutboundError> {
        let redirects = match (&policy, settings.max_redirects) {
            // Followed here, hop by hop.
            (Some(_), _) | (None, 0) => reqwest::redirect::Policy::none(),
            (None, n) => reqwest::redirect::Policy::limited(n),
        };
        let direct = builder(&settings, policy.is_some())
            .redirect(redirects)
            .build()
            .map_err(OutboundError::Client)?;
        Ok(Outbound {
            settings,
            policy,
            direct,
            pinned: Default::default(),
        })
    }

    pub fn policy(&self) -> Option<&Arc<EgressPolicy>> {
        self.policy.as_ref()
    }

    /// Checks where `url` goes without sending anything: resolved, with its port.
    pub async fn check(&self, url: &Url) -> Result<(), OutboundError> {
        if let Some(policy) = &self.policy {
            self.client_for(policy, url).await?;
        }
        Ok(())
    }

    /// Sends `req`, following redirects as configured; under a policy each hop goes
    /// only to addresses checked for it.
    pub async fn send(&self, req: OutboundRequest) -> Result<reqwest::Response, OutboundError> {
        let Some(policy) = &self.policy else {
            return build(&self.direct, req)
                .send()
                .await
                .map_err(OutboundError::Http);
        };
        // One deadline for the request and its redirects, as one request has.
        let timeout = self.settings.timeout;
        tokio::time::timeout(timeout, self.follow(policy, req))
            .await
            .unwrap_or(Err(OutboundError::Timeout(timeout)))
    }

    /// Sends `req` under `policy`, following redirects hop by hop.
    async fn follow(
        &self,
        policy: &EgressPolicy,
        req: OutboundRequest,
    ) -> Result<reqwest::Response, OutboundError> {
        let OutboundRequest {
            mut method,
            mut url,
            mut headers,
            mut body,
        } = req;
        let mut hops = 0;
        loop {
            let client = self.client_for(policy, &url).await?;
            let resp = build(
                &client,
                OutboundRequest {
                    method: method.clone(),
                    url: url.clone(),
                    headers: headers.clone(),
                    body: body.clone(),
                },
            )
            .send()
            .await
            .map_err(OutboundError::Http)?;
            let status = resp.status();
            let location = resp.headers().get(reqwest::header::LOCATION);
            let (true, Some(location)) = (is_redirect(status), location) else {
                return Ok(resp);
            };
            if self.settings.max_redirects == 0 {
                return Ok(resp);
            }
            if hops >= self.settings.max_redirects {
                return Err(OutboundError::TooManyRedirects(self.settings.max_redirects));
            }
            hops += 1;
            let next = next_url(&url, location)?;
            // As browsers and reqwest do: 303, 301 and 302 turn anything but GET and
            // HEAD into a GET without a body; 307 and 308 repeat the request as it was.
            let keeps = matches!(method, Method::GET | Method::HEAD);
            let to_get = !keeps
                && matches!(
                    status,
                    StatusCode::SEE_OTHER | StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND
                );
            if to_get {
                method = Method::GET;
                body = None;
                for h in [
                    "content-type",
                    "content-length",
                    "content-encoding",
                    "transfer-encoding",
                ] {
                    headers.remove(h);
                }
            }
            // Credentials are for the origin they were written for.
            if !same_origin(&url, &next) {
                for h in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, www_auth()] {
                    headers.remove(h);
                }
            }
            url = next;
        }
    }

    /// The client that reaches `url`'s host only at the addresses checked for its port.
    async fn client_for(
        &self,
        policy: &EgressPolicy,
        url: &Url,
    ) -> Result<reqwest::Client, OutboundError> {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(80);
        let name = match url.host() {
            Some(url::Host::Domain(name)) => name.to_owned(),
            // A literal address: nothing to resolve, so nothing can change under it.
            _ => {
                policy.resolve(host, port).await?;
                return Ok(self.direct.clone());
            }
        };
        let key = (name.clone(), port);
        let now = Instant::now();
        if let Some(p) = self.pinned.lock().get(&key).filter(|p| p.until > now) {
            return Ok(p.client.clone());
        }
        let addrs: Vec<SocketAddr> = policy.resolve(&name, port).await?;
        let client = builder(&self.settings, true)
            .redirect(reqwest::redirect::Policy::none())
            .resolve_to_addrs(&name, &addrs)
            .build()
            .map_err(OutboundError::Client)?;
        let mut pinned = self.pinned.lock();
        if pinned.len() >= MAX_PINNED {
            pinned.retain(|_, p| p.until > now);
            if pinned.len() >= MAX_PINNED {
                let stalest = pinned
                    .iter()
                    .min_by_key(|(_, p)| p.until)
                    .map(|(k, _)| k.clone());
                if let Some(k) = stalest {
                    pinned.remove(&k);
                }
            }
        }
        pinned.insert(
            key,
            Pinned {
                client: client.clone(),
                until: now + PIN_FOR,
            },
        );
        Ok(client)
    }
}

/// A client builder; `held` (a policy applies) leaves out a proxy from the environment,
/// which would resolve the name itself and so reach what was never checked.
fn builder(settings: &OutboundSettings, held: bool) -> reqwest::ClientBuilder {
    let b = reqwest::Client::builder()
        .timeout(settings.timeout)
        .danger_accept_invalid_certs(settings.accept_invalid_certs);
    if held {
        b.no_proxy()
    } else {
        b
    }
}

fn build(client: &reqwest::Client, req: OutboundRequest) -> reqwest::RequestBuilder {
    let mut b = client.request(req.method, req.url).headers(req.headers);
    if let Some(body) = req.body {
        b = b.body(body);
    }
    b
}

fn www_auth() -> HeaderName {
    HeaderName::from_static("www-authenticate")
}

fn is_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

/// Where a `Location` field sends the request from `from`: http or https only.
fn next_url(from: &Url, location: &reqwest::header::HeaderValue) -> Result<Url, OutboundError> {
    let text = String::from_utf8_lossy(location.as_bytes()).into_owned();
    let bad = |why: &str| OutboundError::BadRedirect {
        location: text.clone(),
        why: why.to_owned(),
    };
    let next = from
        .join(&text)
        .map_err(|e| bad(&format!("not a URL ({e})")))?;
    if !matches!(next.scheme(), "http" | "https") {
        return Err(bad("only http and https are followed"));
    }
    if next.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    Ok(next)
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::EgressConfig;

    fn policy(allow: &[&str]) -> Arc<EgressPolicy> {
        Arc::new(
            EgressPolicy::new(&EgressConfig {
                allow: allow.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })
            .unwrap(),
        )
    }

    fn settings(max_redirects: usize) -> OutboundSettings {
        OutboundSettings {
            timeout: Duration::from_secs(5),
            accept_invalid_certs: false,
            max_redirects,
        }
    }

    /// A one-route HTTP server on loopback answering every request with `answer`
    /// (status line and fields); returns its address and a count of requests.
    async fn server(answer: String) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        (addr, hits)
    }

    /// A client held to a policy that allows only `127.0.0.1:<port>`.
    fn only(port: u16, max_redirects: usize) -> Outbound {
        let allow = format!("127.0.0.1:{port}");
        Outbound::new(settings(max_redirects), Some(policy(&[&allow]))).unwrap()
    }

    /// GET `http://127.0.0.1:<port>/` through `out`.
    async fn get_at(out: &Outbound, port: u16) -> Result<reqwest::Response, OutboundError> {
        out.send(get(&format!("http://127.0.0.1:{port}/"))).await
    }

    fn ok() -> String {
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".into()
    }

    fn redirect(status: u16, to: &str) -> String {
        format!(
            "HTTP/1.1 {status} Moved\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    }

    fn get(url: &str) -> OutboundRequest {
        OutboundRequest {
            method: Method::GET,
            url: url.parse().unwrap(),
            headers: HeaderMap::new(),
            body: None,
        }
    }

    #[tokio::test]
    async fn a_redirect_to_a_port_not_allowed_goes_nowhere() {
        let (secret, secret_hits) = server(ok()).await;
        let (hop, _) = server(redirect(
            302,
            &format!("http://localhost:{}/", secret.port()),
        ))
        .await;
        // Only the redirector's port is allowed.
        let out = only(hop.port(), 10);
        let e = get_at(&out, hop.port()).await.unwrap_err();
        assert!(matches!(e, OutboundError::Refused(_)), "{e}");
        assert_eq!(secret_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        // A literal loopback address in the redirect, the same.
        let (hop, _) = server(redirect(307, &format!("http://[::1]:{}/", secret.port()))).await;
        let out = only(hop.port(), 10);
        assert!(get_at(&out, hop.port()).await.is_err());
        assert_eq!(secret_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn allowed_hops_are_followed_and_the_operator_is_not_held() {
        let (target, hits) = server(ok()).await;
        let (hop, _) = server(redirect(
            302,
            &format!("http://localhost:{}/", target.port()),
        ))
        .await;
        let both = policy(&[
            &format!("127.0.0.1:{}", hop.port()),
            &format!("127.0.0.1:{}", target.port()),
            &format!("[::1]:{}", target.port()),
        ]);
        let out = Outbound::new(settings(10), Some(both)).unwrap();
        let resp = get_at(&out, hop.port()).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Without redirects the redirect itself is the answer.
        let out = only(hop.port(), 0);
        let resp = get_at(&out, hop.port()).await.unwrap();
        assert_eq!(resp.status(), 302);
        // The operator's requests go anywhere.
        let out = Outbound::new(settings(10), None).unwrap();
        let resp = get_at(&out, hop.port()).await.unwrap();
        assert_eq!(resp.status(), 200);
    }

    #[tokio::test]
    async fn a_name_is_held_to_the_port_it_is_used_with() {
        let (target, hits) = server(ok()).await;
        // `localhost` is allowed on another port only: the resolver alone would pass its
        // address, since it never learns the port.
        let out = Outbound::new(
            settings(10),
            Some(policy(&[&format!("127.0.0.1:{}", target.port() ^ 1)])),
        )
        .unwrap();
        let e = out
            .send(get(&format!("http://localhost:{}/", target.port())))
            .await
            .unwrap_err();
        assert!(matches!(e, OutboundError::Refused(_)), "{e}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_name_connects_to_exactly_the_addresses_checked() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (allowed, allowed_hits) = server(ok()).await;
        // The same port on another loopback address: what a rebinding name would reach.
        let hidden = tokio::net::TcpListener::bind(("127.0.0.2", allowed.port())).await;
        let Ok(hidden) = hidden else {
            panic!("127.0.0.2 must be bindable on Linux loopback");
        };
        let hidden_hits = Arc::new(AtomicUsize::new(0));
        let counted = hidden_hits.clone();
        tokio::spawn(async move {
            while let Ok((_s, _)) = hidden.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        // The first answer is allowed; every later one points elsewhere.
        let lookups = Arc::new(AtomicUsize::new(0));
        let seen = lookups.clone();
        let port = allowed.port();
        let rebinding: Arc<crate::egress::LookupFn> = Arc::new(move |_host: &str, _port: u16| {
            let ip = if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                "127.0.0.1"
            } else {
                "127.0.0.2"
            };
            Ok(vec![SocketAddr::new(ip.parse().unwrap(), port)])
        });
        let policy = Arc::new(
            EgressPolicy::new(&EgressConfig {
                allow: vec![format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")],
                ..Default::default()
            })
            .unwrap()
            .with_lookup(rebinding),
        );
        let out = Outbound::new(settings(0), Some(policy)).unwrap();
        let url: Url = format!("http://rebind.test:{port}/").parse().unwrap();
        out.check(&url).await.unwrap();
        let resp = out.send(get(url.as_str())).await.unwrap();
        assert_eq!(resp.status(), 200);
        // Checked once, connected to what was checked.
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        assert_eq!(allowed_hits.load(Ordering::SeqCst), 1);
        assert_eq!(hidden_hits.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn redirect_loops_end() {
        let (hop, _) = server(redirect(302, "/again")).await;
        let out = only(hop.port(), 3);
        let e = get_at(&out, hop.port()).await.unwrap_err();
        assert!(matches!(e, OutboundError::TooManyRedirects(3)), "{e}");
        let (hop, _) = server(redirect(302, "file:///etc/passwd")).await;
        let out = only(hop.port(), 3);
        let e = get_at(&out, hop.port()).await.unwrap_err();
        assert!(matches!(e, OutboundError::BadRedirect { .. }), "{e}");
    }
}
