//! The HTTP client that `http_client` inputs and outputs and the `http` processor share:
//! their common config fields, retries with backoff, and the connection analytics the
//! spec asks of HTTP outputs.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use metrics::{counter, Counter};

use crate::backoff::Backoff;
use crate::component::{BuildContext, BuildError, ConnectorError};
use crate::config::Interp;
use crate::connect::outbound::{
    Outbound, OutboundError, OutboundRequest, OutboundSettings, RESERVED_FIELDS,
};
use crate::duration::Duration;
use crate::message::Batch;
use crate::metrics::{CONNECTION_ATTEMPTS, CONNECTION_ERRORS};

/// Declares a component config holding the common client fields plus its own.
#[macro_export]
macro_rules! http_client_config {
    ($(#[$meta:meta])* pub struct $Name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        pub struct $Name {
            /// The URL to call (interpolated per message).
            pub url: $crate::config::Interp,
            /// Headers sent with every request (values interpolated per message).
            #[serde(default)]
            pub headers: ::std::collections::BTreeMap<String, $crate::config::Interp>,
            /// Time allowed for one request, response included.
            #[serde(default = "crate::connect::http_client::default_timeout")]
            pub timeout: $crate::duration::Duration,
            /// Attempts after the first for connection failures, 5xx and 429 answers.
            #[serde(default = "crate::connect::http_client::default_retries")]
            pub retries: u32,
            /// Wait before the first retry; doubles up to `max_retry_backoff`.
            #[serde(default = "crate::connect::http_client::default_retry_period")]
            pub retry_period: $crate::duration::Duration,
            /// Longest wait between retries.
            #[serde(default = "crate::connect::http_client::default_max_retry_backoff")]
            pub max_retry_backoff: $crate::duration::Duration,
            /// Status codes that count as success besides 2xx.
            #[serde(default)]
            pub successful_on: Vec<u16>,
            /// Accept any server certificate (testing only).
            #[serde(default)]
            pub tls_skip_verify: bool,
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $Name {
            fn client(&self, verb: &str, cx: &$crate::component::BuildContext)
                -> Result<$crate::connect::http_client::HttpClient, $crate::component::BuildError> {
                $crate::connect::http_client::HttpClient::new(
                    $crate::connect::http_client::ClientSettings {
                        url: self.url.clone(),
                        verb: verb.to_owned(),
                        headers: self.headers.clone(),
                        timeout: self.timeout,
                        retries: self.retries,
                        retry_period: self.retry_period,
                        max_retry_backoff: self.max_retry_backoff,
                        successful_on: self.successful_on.clone(),
                        tls_skip_verify: self.tls_skip_verify,
                    },
                    cx,
                )
            }
        }
    };
}

pub fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
pub fn default_retries() -> u32 {
    3
}
pub fn default_retry_period() -> Duration {
    Duration::from_secs(1)
}
pub fn default_max_retry_backoff() -> Duration {
    Duration::from_secs(300)
}
pub fn default_post() -> String {
    "POST".into()
}
pub fn default_get() -> String {
    "GET".into()
}

#[derive(Debug, Clone)]
pub struct ClientSettings {
    pub url: Interp,
    pub verb: String,
    pub headers: BTreeMap<String, Interp>,
    pub timeout: Duration,
    pub retries: u32,
    pub retry_period: Duration,
    pub max_retry_backoff: Duration,
    pub successful_on: Vec<u16>,
    pub tls_skip_verify: bool,
}

/// A response that counted as success.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Where requests go: fixed, or rendered per message.
enum Target {
    Static(reqwest::Url),
    Dynamic(Interp),
}

pub struct HttpClient {
    /// Sends each request; for a posted stream, only where the egress policy allows,
    /// redirects included.
    client: Outbound,
    target: Target,
    method: Method,
    headers: HeaderMap,
    dynamic_headers: Vec<(HeaderName, Interp)>,
    settings: ClientSettings,
    attempts: Counter,
    errors: Counter,
}

impl HttpClient {
    pub fn new(settings: ClientSettings, cx: &BuildContext) -> Result<Self, BuildError> {
        let target = match settings.url.static_value() {
            Some(url) => Target::Static(parse_url(url).map_err(|e| cx.error(e))?),
            None => Target::Dynamic(settings.url.clone()),
        };
        // A fixed URL is checked now when it is an address; every URL is checked again,
        // resolved, before each request.
        let egress = match &target {
            Target::Static(url) => cx.egress_to(vec![(
                url.host_str().unwrap_or_default().to_owned(),
                url.port_or_known_default().unwrap_or(80),
            )])?,
            Target::Dynamic(_) => cx.egress_to(Vec::new())?,
        };
        let method = crate::http::parse_method(&settings.verb)
            .map_err(|e| cx.error(format!("`verb`: {e}")))?;
        let mut headers = HeaderMap::new();
        let mut dynamic_headers = Vec::new();
        for (k, v) in &settings.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| cx.error(format!("invalid header name `{k}`")))?;
            // `Host` would reach another site behind an address the policy allows.
            if cx.reach.policy.is_some() && RESERVED_FIELDS.contains(&name.as_str()) {
                return Err(cx.error(format!(
                    "`headers.{k}`: set by the HTTP client itself; a stream posted by an organisation cannot set it"
                )));
            }
            match v.static_value() {
                Some(value) => {
                    let value = HeaderValue::from_str(value)
                        .map_err(|_| cx.error(format!("invalid value for header `{k}`")))?;
                    headers.insert(name, value);
                }
                None => dynamic_headers.push((name, v.clone())),
            }
        }
        let client = Outbound::new(
            OutboundSettings {
                timeout: settings.timeout.0,
                accept_invalid_certs: settings.tls_skip_verify,
                max_redirects: 10,
            },
            egress.policy().cloned(),
        )
        .map_err(|e| cx.error(e))?;
        let labels = cx.metric_labels();
        Ok(HttpClient {
            client,
            target,
            method,
            headers,
            dynamic_headers,
            attempts: counter!(CONNECTION_ATTEMPTS, &labels),
            errors: counter!(CONNECTION_ERRORS, &labels),
            settings,
        })
    }

    /// The URL and headers for one message (`None`: a request no message asked for).
    fn resolve(
        &self,
        msg: Option<(&Batch, usize)>,
    ) -> Result<(reqwest::Url, HeaderMap), ConnectorError> {
        let empty = Vec::new();
        let (batch, index) = msg.unwrap_or((&empty, 0));
        let url = match &self.target {
            Target::Static(u) => u.clone(),
            Target::Dynamic(i) => {
                let text = i.render(batch, index).map_err(|e| {
                    ConnectorError::rejected(format!("cannot build the url `{i}`")).with_source(e)
                })?;
                parse_url(&text).map_err(ConnectorError::rejected)?
            }
        };
        let mut headers = self.headers.clone();
        for (name, value) in &self.dynamic_headers {
            let text = value.render(batch, index).map_err(|e| {
                ConnectorError::rejected(format!("cannot build header `{name}`")).with_source(e)
            })?;
            let value = HeaderValue::from_str(&text).map_err(|_| {
                ConnectorError::rejected(format!("header `{name}` got an invalid value"))
            })?;
            headers.insert(name.clone(), value);
        }
        Ok((url, headers))
    }

    /// Whether the configured `headers` set `name` on every request.
    pub fn sets_header(&self, name: &HeaderName) -> bool {
        self.headers.contains_key(name) || self.dynamic_headers.iter().any(|(n, _)| n == name)
    }

    fn is_success(&self, status: StatusCode) -> bool {
        status.is_success() || self.settings.successful_on.contains(&status.as_u16())
    }

    /// Sends one request, retrying connection failures, 5xx and 429 with backoff. A 4xx
    /// is refused at once (sending it again cannot help).
    /// `msg` is the message the request is for, whose values fill interpolated fields.
    pub async fn send(
        &self,
        msg: Option<(&Batch, usize)>,
        body: Option<Bytes>,
        extra_headers: &HeaderMap,
    ) -> Result<HttpResponse, ConnectorError> {
        let (url, headers) = self.resolve(msg)?;
        if let Err(e) = self.client.check(&url).await {
            self.errors.increment(1);
            return Err(outbound_error(&url, e));
        }
        // Waits double from `retry_period` up to `max_retry_backoff`, exactly, as documented.
        let mut backoff = Backoff::exponential(
            self.settings.retry_period.0,
            self.settings
                .max_retry_backoff
                .0
                .max(StdDuration::from_millis(1)),
        )
        .with_max_attempts(self.settings.retries);
        loop {
            let mut all_headers = headers.clone();
            for (k, v) in extra_headers {
                all_headers.append(k, v.clone());
            }
            let req = OutboundRequest {
                method: self.method.clone(),
                url: url.clone(),
                headers: all_headers,
                body: body.clone(),
            };
            self.attempts.increment(1);
            let err = match self.client.send(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    let headers = resp.headers().clone();
                    match resp.bytes().await {
                        Ok(body) if self.is_success(status) => {
                            return Ok(HttpResponse {
                                status,
                                headers,
                                body,
                            })
                        }
                        Ok(body) => {
                            let text =
                                String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                            let e = format!("{} answered {status}: {}", url, text.trim());
                            if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
                                self.errors.increment(1);
                                return Err(ConnectorError::rejected(e));
                            }
                            ConnectorError::transient(e)
                        }
                        Err(e) => ConnectorError::transient(format!(
                            "{}: reading the answer failed: {e}",
                            url
                        )),
                    }
                }
                Err(e) if e.is_timeout() => ConnectorError::transient(format!(
                    "{}: no answer within {}",
                    url, self.settings.timeout
                )),
                // Where it (or a redirect) goes is refused, or cannot be followed:
                // trying again will not help.
                Err(
                    e @ (OutboundError::Refused(_)
                    | OutboundError::BadRedirect { .. }
                    | OutboundError::TooManyRedirects(_)),
                ) => {
                    self.errors.increment(1);
                    return Err(outbound_error(&url, e));
                }
                Err(e) => ConnectorError::not_connected(format!("{}: {}", url, root_cause(&e))),
            };
            self.errors.increment(1);
            let Some(wait) = backoff.next_delay() else {
                return Err(err);
            };
            let attempt = backoff.attempts();
            tracing::debug!(error = %err, attempt, retry_in = ?wait, "HTTP request failed; retrying.");
            tokio::time::sleep(wait).await;
        }
    }
}

fn parse_url(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("invalid url `{text}`: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("url `{text}` must be http or https"));
    }
    Ok(url)
}

/// A request that cannot go where it is asked to: the message is refused.
fn outbound_error(url: &reqwest::Url, e: OutboundError) -> ConnectorError {
    match e {
        OutboundError::Refused(e) => e.into(),
        e => ConnectorError::rejected(format!("{url}: {e}")),
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> ClientSettings {
        ClientSettings {
            url: Interp::parse(url).unwrap(),
            verb: "POST".into(),
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(1),
            retries: 1,
            retry_period: Duration::from_millis(1),
            max_retry_backoff: Duration::from_millis(1),
            successful_on: vec![],
            tls_skip_verify: false,
        }
    }

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default())
    }

    #[test]
    fn bad_settings_are_build_errors() {
        assert!(HttpClient::new(settings("not a url"), &cx()).is_err());
        assert!(HttpClient::new(settings("ftp://x/"), &cx()).is_err());
        let mut s = settings("http://127.0.0.1:1/");
        s.verb = "BAD VERB".into();
        assert!(HttpClient::new(s, &cx()).is_err());
        let mut s = settings("http://127.0.0.1:1/");
        s.headers
            .insert("bad header".into(), Interp::parse("x").unwrap());
        assert!(HttpClient::new(s, &cx()).is_err());
    }

    #[test]
    fn a_posted_stream_may_not_set_the_host_or_the_framing() {
        let mut posted = cx();
        posted.reach.policy = Some(Default::default());
        for name in ["Host", "transfer-encoding", "Connection"] {
            let mut s = settings("http://203.0.113.7/");
            s.headers.insert(name.into(), Interp::parse("x").unwrap());
            let e = HttpClient::new(s.clone(), &posted).err().expect(name);
            assert!(e.to_string().contains("set by the HTTP client"), "{e}");
            // The operator's streams may.
            assert!(HttpClient::new(s, &cx()).is_ok());
        }
    }

    #[tokio::test]
    async fn interpolated_url_and_headers_follow_the_message() {
        let mut s = settings("http://127.0.0.1:1/${! meta(\"path\") }");
        s.headers
            .insert("X-Id".into(), Interp::parse("${! this.id }").unwrap());
        let c = HttpClient::new(s, &cx()).unwrap();
        let batch = vec![crate::message::Message::new(r#"{"id":7}"#).with_meta("path", "orders")];
        let (url, headers) = c.resolve(Some((&batch, 0))).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:1/orders");
        assert_eq!(headers["x-id"], "7");
        let bad = vec![crate::message::Message::new("not json")];
        assert_eq!(
            c.resolve(Some((&bad, 0))).unwrap_err().kind,
            crate::component::ErrorKind::Rejected
        );
    }

    #[tokio::test]
    async fn refused_connection_is_not_connected_after_retries() {
        // Port 1 on loopback is closed.
        let c = HttpClient::new(settings("http://127.0.0.1:1/"), &cx()).unwrap();
        let e = c
            .send(None, Some(Bytes::from_static(b"x")), &HeaderMap::new())
            .await
            .unwrap_err();
        assert_eq!(e.kind, crate::component::ErrorKind::NotConnected);
    }
}
