//! HTTP server plumbing shared by the server and the components that serve HTTP: body
//! types, response helpers, the route table components mount into, and the delivery hub
//! of the streaming outputs.
//!
//! Components register a [`Handler`] for a path; whoever serves HTTP looks paths up here.
//! Handlers know nothing about where they are mounted, so any server can put them under
//! a prefix of its own.

pub mod caller;
pub mod cors;
pub mod ending;
pub mod event;
pub mod filter;
pub mod history;
pub mod hub;
pub mod outbox;
pub mod record;
pub mod rewind;
pub mod trace;
pub mod wire;
pub mod ws;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{header, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};
use parking_lot::RwLock;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = BoxBody<Bytes, BoxError>;
pub type HttpRequest = http::Request<Body>;
pub type HttpResponse = http::Response<Body>;

/// Serves the requests of one mounted path.
pub trait Handler: Send + Sync {
    fn call(&self, req: HttpRequest) -> BoxFuture<'static, HttpResponse>;
}

impl<F> Handler for F
where
    F: Fn(HttpRequest) -> BoxFuture<'static, HttpResponse> + Send + Sync,
{
    fn call(&self, req: HttpRequest) -> BoxFuture<'static, HttpResponse> {
        self(req)
    }
}

/// A mounted handler and the component that owns it.
type Mounted = (String, Arc<dyn Handler>);

/// The path table components mount into.
#[derive(Default)]
pub struct Routes {
    table: RwLock<HashMap<String, Mounted>>,
}

/// A path that is already served by another component.
#[derive(Debug, Clone, thiserror::Error)]
#[error("path `{path}` is already served by {owner}")]
pub struct RouteConflict {
    pub path: String,
    pub owner: String,
}

impl Routes {
    pub fn new() -> Arc<Self> {
        Arc::new(Routes::default())
    }

    /// Mounts `handler` at `path`; `owner` names the component in conflict errors.
    pub fn mount(
        &self,
        path: &str,
        owner: &str,
        handler: Arc<dyn Handler>,
    ) -> Result<(), RouteConflict> {
        let path = normalize(path);
        let mut table = self.table.write();
        if let Some((existing, _)) = table.get(&path) {
            return Err(RouteConflict {
                path,
                owner: existing.clone(),
            });
        }
        table.insert(path, (owner.to_owned(), handler));
        Ok(())
    }

    pub fn unmount(&self, path: &str) {
        self.table.write().remove(&normalize(path));
    }

    /// Unmounts every path whose owner starts with `prefix` (a stream's `name/`).
    pub fn unmount_owned_by(&self, prefix: &str) {
        self.table
            .write()
            .retain(|_, (owner, _)| !owner.starts_with(prefix));
    }

    pub fn get(&self, path: &str) -> Option<Arc<dyn Handler>> {
        self.table
            .read()
            .get(&normalize(path))
            .map(|(_, h)| h.clone())
    }

    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<_> = self.table.read().keys().cloned().collect();
        paths.sort();
        paths
    }

    /// The paths whose owner starts with `prefix` (a stream's `name/`).
    pub fn paths_owned_by(&self, prefix: &str) -> Vec<String> {
        let mut paths: Vec<_> = self
            .table
            .read()
            .iter()
            .filter(|(_, (owner, _))| owner.starts_with(prefix))
            .map(|(path, _)| path.clone())
            .collect();
        paths.sort();
        paths
    }
}

/// `/a/b/` and `a/b` are the same route.
pub fn normalize(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.starts_with('/') {
        trimmed.to_owned()
    } else {
        format!("/{trimmed}")
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

pub fn empty() -> Body {
    Empty::new()
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// Turns any body (a hyper `Incoming`, say) into ours.
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}

/// A request body that fails when its client sends nothing for `idle`: a stalled upload
/// must not hold its connection and handler forever.
pub struct IdleTimeout<B> {
    inner: B,
    idle: std::time::Duration,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, idle: std::time::Duration) -> Self {
        IdleTimeout {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

/// The client sent no part of its request body in time.
#[derive(Debug, thiserror::Error)]
#[error("the client sent nothing for {0:?} while sending its body")]
pub struct BodyTimedOut(std::time::Duration);

impl<B> http_body::Body for IdleTimeout<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.idle;
                this.timer.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut(this.idle).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body is larger than allowed")]
    TooLarge,
    #[error("cannot read the body: {0}")]
    Read(BoxError),
}

/// Reads a whole body, refusing more than `max` bytes.
pub async fn read_body(mut body: Body, max: usize) -> Result<Bytes, BodyError> {
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// An HTTP method as written in a config (any case), or an error naming it.
/// The value of cookie `name` in a request's headers, unquoted. HTTP/2 clients may
/// split cookies over several `Cookie` headers (RFC 9113 8.2.3), so every one of them
/// is searched.
pub fn cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| std::str::from_utf8(v.as_bytes()).ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| {
            let v = v.trim();
            v.strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v)
        })
}

/// A verb that is not an HTTP method, or none given.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    #[error("`{verb}` is not an HTTP method")]
    NotAMethod {
        verb: String,
        #[source]
        source: http::method::InvalidMethod,
    },
    #[error("`allowed_verbs` is empty")]
    Empty,
}

pub fn parse_method(verb: &str) -> Result<http::Method, VerbError> {
    http::Method::from_bytes(verb.to_ascii_uppercase().as_bytes()).map_err(|source| {
        VerbError::NotAMethod {
            verb: verb.to_owned(),
            source,
        }
    })
}

/// A route's `allowed_verbs`: at least one, each a method.
pub fn parse_verbs(verbs: &[String]) -> Result<Vec<http::Method>, VerbError> {
    if verbs.is_empty() {
        return Err(VerbError::Empty);
    }
    verbs.iter().map(|v| parse_method(v)).collect()
}

/// The answer to a request a stream route will not take: 503 while its stream shuts
/// down, 405 (with `Allow`) for a method it does not accept. `None`: go on.
pub fn refuse(
    shutdown: &tokio_util::sync::CancellationToken,
    verbs: &[http::Method],
    method: &http::Method,
) -> Option<HttpResponse> {
    if shutdown.is_cancelled() {
        return Some(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the stream is shutting down\n",
        ));
    }
    if verbs.contains(method) {
        return None;
    }
    let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    let allow = verbs
        .iter()
        .map(http::Method::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if let Ok(v) = header::HeaderValue::from_str(&allow) {
        resp.headers_mut().insert(header::ALLOW, v);
    }
    Some(resp)
}

pub fn text(status: StatusCode, body: impl Into<Bytes>) -> HttpResponse {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub fn json(status: StatusCode, value: &serde_json::Value) -> HttpResponse {
    let mut resp = Response::new(full(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = http::HeaderMap::new();
        headers.append(
            header::COOKIE,
            http::HeaderValue::from_static("a=1; sluice_portal=x"),
        );
        headers.append(header::COOKIE, http::HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&headers, "sluice_portal"), Some("x"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "sluice"), None);
    }

    fn ok_handler() -> Arc<dyn Handler> {
        Arc::new(|_req: HttpRequest| async { text(StatusCode::OK, "ok") }.boxed())
    }

    #[test]
    fn mount_conflict_names_the_owner() {
        let routes = Routes::new();
        routes
            .mount("/post", "input.http_server", ok_handler())
            .unwrap();
        let e = routes.mount("post/", "other", ok_handler()).unwrap_err();
        assert_eq!(e.owner, "input.http_server");
        assert!(routes.get("/post/").is_some());
        routes.unmount("/post");
        assert!(routes.get("/post").is_none());
    }
}
