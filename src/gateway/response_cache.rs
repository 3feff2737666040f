//! The memory behind `middleware.global.cache`: whole responses kept under a request's
//! key while they are fresh. Only responses of known, modest length are kept; an event
//! stream or a large download always streams from the upstream. Which requests use it,
//! and under which key, is the cache step's to say (`middleware::cache`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;

use crate::http::{self as h, HttpResponse};

/// Responses larger than this are not cached.
const MAX_CACHED_BODY: u64 = 1024 * 1024;
/// Entries kept at most; expired ones go first, then the cache starts afresh.
const MAX_ENTRIES: usize = 10_000;

struct Entry {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    expires: Instant,
}

#[derive(Default)]
pub struct ResponseCache {
    entries: Mutex<HashMap<String, Entry>>,
}

impl ResponseCache {
    pub fn get(&self, key: &str) -> Option<HttpResponse> {
        let entries = self.entries.lock();
        let entry = entries.get(key).filter(|e| e.expires > Instant::now())?;
        let mut resp = HttpResponse::new(h::full(entry.body.clone()));
        *resp.status_mut() = entry.status;
        *resp.headers_mut() = entry.headers.clone();
        resp.headers_mut()
            .insert("x-cache", HeaderValue::from_static("HIT"));
        Some(resp)
    }

    /// Keeps `resp` under `key` for `ttl` if it is worth caching (its status among
    /// `codes`, or 200 when none are listed), and returns it to be sent.
    pub async fn store(
        &self,
        key: String,
        resp: HttpResponse,
        codes: &[u16],
        ttl: Duration,
    ) -> HttpResponse {
        let status_ok = if codes.is_empty() {
            resp.status() == StatusCode::OK
        } else {
            codes.contains(&resp.status().as_u16())
        };
        let length = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let streaming = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let no_store = resp
            .headers()
            .get(http::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("no-store") || v.contains("private"));
        if !status_ok || streaming || no_store || length.is_none_or(|n| n > MAX_CACHED_BODY) {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                // The upstream broke off: the client gets the same failure.
                return HttpResponse::from_parts(
                    parts,
                    h::boxed(http_body_util::StreamBody::new(futures::stream::once(
                        async move { Err::<http_body::Frame<Bytes>, _>(e) },
                    ))),
                );
            }
        };
        let entry = Entry {
            status: parts.status,
            headers: parts.headers.clone(),
            body: body.clone(),
            expires: Instant::now() + ttl,
        };
        {
            let mut entries = self.entries.lock();
            if entries.len() >= MAX_ENTRIES {
                let now = Instant::now();
                entries.retain(|_, e| e.expires > now);
                if entries.len() >= MAX_ENTRIES {
                    entries.clear();
                }
            }
            entries.insert(key, entry);
        }
        parts
            .headers
            .insert("x-cache", HeaderValue::from_static("MISS"));
        HttpResponse::from_parts(parts, h::full(body))
    }

    /// Drops the entries of an API (after it changed).
    pub fn forget_api(&self, api_id: &str) {
        let prefix = format!("{api_id}\0");
        self.entries.lock().retain(|k, _| !k.starts_with(&prefix));
    }
}
