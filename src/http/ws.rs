//! The server side of the WebSocket handshake (RFC 6455) on top of a mounted handler: the
//! handler answers 101 and the connection, once hyper hands it over, becomes a
//! [`WebSocketStream`]. Works wherever the handler is mounted, as long as the server keeps
//! the request's upgrade extension (the server of `sluice run` does).

use http::{header, HeaderValue, Method, StatusCode};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use super::{empty, text, HttpRequest, HttpResponse};

pub type ServerSocket = WebSocketStream<TokioIo<Upgraded>>;

/// A future resolving to the upgraded socket, or `None` when the client went away first.
pub type PendingSocket = futures::future::BoxFuture<'static, Option<ServerSocket>>;

/// Largest message accepted from a client: 16 MiB, so that one frame cannot exhaust memory.
const MAX_MESSAGE: usize = 16 << 20;

/// Checks that `req` asks for a WebSocket and answers it: the 101 response to return and
/// the socket to come. A request that is not a valid handshake gets its error response
/// (boxed: a response is large next to the success value).
pub fn accept(req: HttpRequest) -> Result<(HttpResponse, PendingSocket), Box<HttpResponse>> {
    handshake(req).map_err(Box::new)
}

#[allow(clippy::result_large_err)] // private, and boxed by `accept`
fn handshake(mut req: HttpRequest) -> Result<(HttpResponse, PendingSocket), HttpResponse> {
    if req.method() != Method::GET {
        return Err(text(
            StatusCode::METHOD_NOT_ALLOWED,
            "a WebSocket handshake is a GET\n",
        ));
    }
    let headers = req.headers();
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .map(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
                .unwrap_or(false)
        })
    };
    if !has_token(header::UPGRADE, "websocket") || !has_token(header::CONNECTION, "upgrade") {
        return Err(text(
            StatusCode::UPGRADE_REQUIRED,
            "this path speaks WebSocket: send Upgrade: websocket\n",
        ));
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        let mut resp = text(
            StatusCode::BAD_REQUEST,
            "unsupported WebSocket version (13 is supported)\n",
        );
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return Err(resp);
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(text(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key\n"));
    };
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = HttpResponse::new(empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    let socket = Box::pin(async move {
        let upgraded = on_upgrade.await.ok()?;
        // A small read buffer: most stream clients only listen, and each idle socket
        // would otherwise hold the default 128 KiB.
        let config = WebSocketConfig::default()
            .read_buffer_size(4096)
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        Some(
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await,
        )
    });
    Ok((resp, socket))
}
