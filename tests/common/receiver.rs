//! A webhook receiver: records every request (method, path, headers, body) and answers
//! with the statuses of a script, then with a status the test can change.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    /// What it was answered.
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub struct Receiver {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<u16>>>,
    then: Arc<AtomicU16>,
    /// A `Location` sent with every answer: a receiver answering 3xx is a redirector.
    location: Arc<Mutex<Option<String>>>,
}

impl Receiver {
    /// Answers the first requests with `script`, every later one with `then`.
    pub async fn start(script: &[u16], then: u16) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
        let then = Arc::new(AtomicU16::new(then));
        let location = Arc::new(Mutex::new(None::<String>));
        let (rec, scr, th, loc) = (
            received.clone(),
            script.clone(),
            then.clone(),
            location.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (rec, scr, th, loc) = (rec.clone(), scr.clone(), th.clone(), loc.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (rec, scr, th, loc) =
                            (rec.clone(), scr.clone(), th.clone(), loc.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let status = scr
                                .lock()
                                .unwrap()
                                .pop_front()
                                .unwrap_or_else(|| th.load(Ordering::SeqCst));
                            rec.lock().unwrap().push(Received {
                                method: parts.method.to_string(),
                                path: parts.uri.path().to_owned(),
                                headers: parts.headers,
                                body,
                                status,
                            });
                            let mut resp = Response::new(Full::new(Bytes::from_static(b"noted")));
                            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
                            if let Some(to) = loc.lock().unwrap().clone() {
                                resp.headers_mut().insert("location", to.parse().unwrap());
                            }
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            received,
            script,
            then,
            location,
        }
    }

    /// Sends `Location: to` with every later answer.
    pub fn redirect_to(&self, to: &str) {
        *self.location.lock().unwrap() = Some(to.to_owned());
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers every later request (after the script) with `status`.
    pub fn answer(&self, status: u16) {
        self.then.store(status, Ordering::SeqCst);
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until `n` requests arrived; panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let start = Instant::now();
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                start.elapsed() < within,
                "the receiver got {} requests, not {n}, within {within:?}: {got:?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
