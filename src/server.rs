//! The standalone HTTP server of `sluice run`: every mounted stream path, plus `/ping`,
//! `/ready` (503 until every component is connected) and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::FutureExt;
use http::StatusCode;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::http::{self as h, HttpResponse, Routes};
use crate::stream::Readiness;

#[derive(Clone)]
pub struct Server {
    pub routes: Arc<Routes>,
    pub readiness: Arc<Readiness>,
    pub metrics: Option<PrometheusHandle>,
}

impl Server {
    /// Answers one request.
    pub async fn handle(&self, req: http::Request<Incoming>) -> HttpResponse {
        let path = req.uri().path().to_owned();
        match path.as_str() {
            "/ping" => h::text(StatusCode::OK, "pong"),
            "/ready" => {
                let waiting = self.readiness.not_ready();
                if waiting.is_empty() {
                    h::text(StatusCode::OK, "OK")
                } else {
                    h::text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not connected: {}\n", waiting.join(", ")),
                    )
                }
            }
            "/metrics" => match &self.metrics {
                Some(handle) => {
                    let mut resp = h::text(StatusCode::OK, handle.render());
                    resp.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("text/plain; version=0.0.4"),
                    );
                    resp
                }
                None => h::text(StatusCode::NOT_FOUND, "metrics are disabled\n"),
            },
            _ => match self.routes.get(&path) {
                Some(handler) => handler.call(req.map(h::boxed)).await,
                None => h::text(StatusCode::NOT_FOUND, "no such path\n"),
            },
        }
    }

    /// Serves on `listener` until `stop` is cancelled; open connections then finish
    /// their current requests.
    pub async fn serve(self, listener: TcpListener, stop: CancellationToken) {
        let server = Arc::new(self);
        let conns = tokio_util::task::TaskTracker::new();
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        debug!(error = %e, "Accept failed.");
                        continue;
                    }
                },
                _ = stop.cancelled() => break,
            };
            let server = server.clone();
            let stop = stop.clone();
            conns.spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    async move { Ok::<_, std::convert::Infallible>(server.handle(req).await) }.boxed()
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                tokio::pin!(conn);
                tokio::select! {
                    r = conn.as_mut() => if let Err(e) = r { debug!(error = %e, %peer, "Connection ended with an error."); },
                    _ = stop.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
        }
        conns.close();
        conns.wait().await;
    }
}

/// Binds `address`, saying clearly what went wrong when it cannot.
pub async fn bind(address: &str) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e}")))?;
    let addr = listener.local_addr()?;
    info!(address = %addr, "HTTP server listening.");
    Ok((listener, addr))
}
