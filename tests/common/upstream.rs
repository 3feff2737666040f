//! A real HTTP upstream for gateway tests: echoes what it received as JSON, and has
//! paths that are slow, stream server-sent events or answer a chosen status.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub struct Upstream {
    pub addr: SocketAddr,
    /// Whether it speaks HTTPS.
    https: bool,
    /// Requests received.
    pub hits: Arc<AtomicUsize>,
    /// Releases the second event of `/sse`.
    pub sse_gate: Arc<Notify>,
}

type Body = BoxBody<Bytes, Infallible>;

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into()).boxed()
}

impl Upstream {
    pub async fn start() -> Upstream {
        Self::start_on(None).await
    }

    /// An upstream that speaks HTTPS through `tls`.
    pub async fn start_tls(tls: tokio_rustls::TlsAcceptor) -> Upstream {
        Self::start_on(Some(tls)).await
    }

    async fn start_on(tls: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let sse_gate = Arc::new(Notify::new());
        let (h, g) = (hits.clone(), sse_gate.clone());
        let https = tls.is_some();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (h, g, tls) = (h.clone(), g.clone(), tls.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let (h, g) = (h.clone(), g.clone());
                        async move { Ok::<_, Infallible>(answer(req, &h, &g).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        None => {
                            http.serve_connection(TokioIo::new(stream), service)
                                .with_upgrades()
                                .await
                        }
                        Some(tls) => {
                            // A refused handshake (no client certificate, say) ends here.
                            let Ok(stream) = tls.accept(stream).await else {
                                return;
                            };
                            http.serve_connection(TokioIo::new(stream), service)
                                .with_upgrades()
                                .await
                        }
                    };
                });
            }
        });
        Upstream {
            addr,
            https,
            hits,
            sse_gate,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    hits: &AtomicUsize,
    gate: &Arc<Notify>,
) -> Response<Body> {
    hits.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_owned();
    if path.ends_with("/slow") {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    if path.ends_with("/ws") {
        return websocket_echo(req);
    }
    if path.ends_with("/stream-echo") {
        // Answers at once and sends each piece of the body back as it arrives.
        let body = req.into_body();
        let pieces = futures::stream::unfold(body, |mut body| async move {
            match body.frame().await {
                Some(Ok(frame)) => Some((Ok::<_, Infallible>(frame), body)),
                _ => None,
            }
        });
        return Response::new(StreamBody::new(pieces).boxed());
    }
    if path.ends_with("/sse") {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        let gate = gate.clone();
        tokio::spawn(async move {
            let _ = tx
                .send(Ok(Frame::data(Bytes::from_static(b"data: one\n\n"))))
                .await;
            // The second event waits for the test: the first must arrive without it.
            gate.notified().await;
            let _ = tx
                .send(Ok(Frame::data(Bytes::from_static(b"data: two\n\n"))))
                .await;
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let mut resp = Response::new(StreamBody::new(stream).boxed());
        resp.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        return resp;
    }
    let mut headers = serde_json::Map::new();
    for (k, v) in req.headers() {
        headers.insert(
            k.as_str().to_owned(),
            String::from_utf8_lossy(v.as_bytes()).into(),
        );
    }
    let method = req.method().to_string();
    let query = req.uri().query().unwrap_or("").to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let status = path
        .rsplit('/')
        .next()
        .and_then(|last| last.strip_prefix("status-"))
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let echo = serde_json::json!({
        "method": method,
        "path": path,
        "query": query,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
        "n": hits.load(Ordering::SeqCst),
    });
    let mut resp = Response::new(full(echo.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    resp.headers_mut()
        .insert("connection", "x-upstream-private".parse().unwrap());
    resp.headers_mut()
        .insert("x-upstream-private", "1".parse().unwrap());
    resp
}

/// Accepts a WebSocket upgrade and echoes every text message back.
fn websocket_echo(mut req: Request<hyper::body::Incoming>) -> Response<Body> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{handshake::derive_accept_key, protocol::Role};
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        let mut resp = Response::new(full("not a websocket request"));
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        return resp;
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            None,
        )
        .await;
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_text() && ws.send(msg).await.is_err() {
                return;
            }
        }
    });
    let mut resp = Response::new(full(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert("connection", "upgrade".parse().unwrap());
    h.insert("upgrade", "websocket".parse().unwrap());
    h.insert(
        "sec-websocket-accept",
        derive_accept_key(key.as_bytes()).parse().unwrap(),
    );
    resp
}
