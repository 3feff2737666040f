//! An HTTP server standing in for an output's target: it records request bodies and
//! fails chosen requests, for tests of what a failed write does.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// An HTTP server that records request bodies and fails the requests numbered in
/// `fail` (1-based, counting every request) with 500.
pub struct Sink {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<String>>>,
    pub requests: Arc<AtomicUsize>,
}

impl Sink {
    pub async fn start(fail: Vec<usize>) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let (rec, reqs) = (received.clone(), requests.clone());
        let fail = Arc::new(fail);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (rec, reqs, fail) = (rec.clone(), reqs.clone(), fail.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (rec, reqs, fail) = (rec.clone(), reqs.clone(), fail.clone());
                        async move {
                            let n = reqs.fetch_add(1, Ordering::SeqCst) + 1;
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let status = if fail.contains(&n) {
                                StatusCode::INTERNAL_SERVER_ERROR
                            } else {
                                rec.lock()
                                    .unwrap()
                                    .push(String::from_utf8_lossy(&body).into_owned());
                                StatusCode::OK
                            };
                            let mut resp = Response::new(Full::new(Bytes::from_static(b"ok")));
                            *resp.status_mut() = status;
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Sink {
            addr,
            received,
            requests,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/in", self.addr)
    }

    pub fn bodies(&self) -> Vec<String> {
        self.received.lock().unwrap().clone()
    }
}
