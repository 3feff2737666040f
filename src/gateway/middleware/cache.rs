//! The response cache (`middleware.global.cache`): safe requests are answered from
//! memory while their entry is fresh; a miss goes on, and the upstream's answer is kept
//! (see [`ResponseCache`] for which answers are).

use std::time::Duration;

use http::{HeaderName, Method};

use super::{Ctx, Verdict};
use crate::gateway::api::Api;
use crate::gateway::response_cache::ResponseCache;
use crate::http::HttpResponse;

/// The API's cache settings.
pub struct Cache {
    /// Every safe request is cached, not only those of operations marked `cache`.
    all_safe: bool,
    /// The headers whose values are part of the key (none for a name that is no
    /// header's: it never has a value).
    by_headers: Box<[Option<HeaderName>]>,
    /// The statuses kept; 200 alone when none are listed.
    codes: Box<[u16]>,
    ttl: Duration,
}

/// A request the cache step took on a miss: the upstream's answer is to be kept under
/// its key.
pub struct Pending<'a> {
    cache: &'a Cache,
    key: String,
}

impl Cache {
    /// When the API has the cache on. An operation's `cache` marks it for this cache;
    /// without one it does nothing.
    pub fn compile(api: &Api) -> Option<Self> {
        let cache = api.global.cache.as_ref().filter(|c| c.enabled)?;
        Some(Cache {
            all_safe: cache.cache_all_safe_requests,
            by_headers: cache
                .cache_by_headers
                .iter()
                .map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
                .collect(),
            codes: cache.cache_response_codes.clone().into(),
            ttl: Duration::from_secs(cache.timeout),
        })
    }

    /// Answers from the cache when it holds the request's answer; on a miss, marks the
    /// request for the upstream's answer to be kept.
    pub fn lookup<'a>(&'a self, ctx: &mut Ctx<'a>) -> Verdict {
        let Some(key) = self.key(ctx) else {
            return Ok(());
        };
        if let Some(hit) = ctx.gw.cache.get(&key) {
            return Err(hit);
        }
        ctx.cache = Some(Pending { cache: self, key });
        Ok(())
    }

    /// The cache key of a request, when its response may be cached.
    fn key(&self, ctx: &Ctx<'_>) -> Option<String> {
        let method = ctx.req.method();
        if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        if !self.all_safe && !ctx.operation().is_some_and(|op| op.cache) {
            return None;
        }
        let mut key = format!(
            "{}\0{}\0{}?{}",
            ctx.api.id,
            method,
            ctx.req.uri().path(),
            ctx.req.uri().query().unwrap_or("")
        );
        for name in &self.by_headers {
            key.push('\0');
            if let Some(v) = name.as_ref().and_then(|n| ctx.req.headers().get(n)) {
                key.push_str(&String::from_utf8_lossy(v.as_bytes()));
            }
        }
        Some(key)
    }
}

impl Pending<'_> {
    /// Keeps the upstream's answer in `store` when it is worth keeping, and returns it
    /// to be sent.
    pub async fn keep(self, store: &ResponseCache, resp: HttpResponse) -> HttpResponse {
        store
            .store(self.key, resp, &self.cache.codes, self.cache.ttl)
            .await
    }
}
