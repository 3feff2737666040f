//! The delivery worker: takes due deliveries from the store's queue, sends them, and
//! records each attempt. Connection errors, timeouts, 5xx, 408 and 429 are tried again
//! after an exponential backoff with jitter; any other 4xx, or the last attempt, makes the
//! delivery dead (replayable). The queue is in the store, so a restart loses nothing, and
//! workers in several processes may share it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use rand::Rng;
use serde::Deserialize;
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::sign;
use crate::connect::outbound::{Outbound, OutboundError, OutboundRequest, OutboundSettings};
use crate::duration::Duration;
use crate::egress::EgressPolicy;
use crate::store::seal::Sealer;
use crate::store::{AfterAttempt, AttemptRecord, AttemptResult, DeliveryRecord, Store};

/// How deliveries are sent and retried.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    /// Run a worker in this process.
    pub enabled: bool,
    /// Attempts per delivery, the first included, before it is dead.
    pub max_attempts: u32,
    /// The wait before the second attempt; it doubles for each further one.
    pub initial_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// How long one attempt may take, answer included.
    pub timeout: Duration,
    /// Attempts in flight at once.
    pub concurrency: usize,
    /// How often the queue is read for deliveries other processes queued.
    pub poll_interval: Duration,
    /// Where the gateway's event handlers read a `templatePath` from; unset, only inline
    /// templates and the event's JSON are sent.
    pub templates: Option<std::path::PathBuf>,
    /// How long a finished delivery (delivered or dead) and its attempt log are kept.
    pub retention: Duration,
    /// Deliveries an organisation may have waiting; events past that are refused rather
    /// than queued, so a receiver that never answers cannot fill the store.
    pub max_pending_per_org: u64,
    /// Deliveries one receiver (a webhook, a handler, a portal subscription) may have
    /// waiting; further ones to it are recorded dead (replayable), so that it cannot
    /// take the whole of its organisation's share.
    pub max_pending_per_receiver: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            enabled: true,
            max_attempts: 8,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(600),
            timeout: Duration::from_secs(10),
            concurrency: 64,
            poll_interval: Duration::from_secs(1),
            templates: None,
            retention: Duration::from_secs(7 * 24 * 3600),
            max_pending_per_org: 100_000,
            max_pending_per_receiver: 10_000,
        }
    }
}

impl DeliveryConfig {
    /// The queue's bounds.
    pub fn bounds(&self) -> crate::store::QueueBounds {
        crate::store::QueueBounds {
            per_org: self.max_pending_per_org,
            per_receiver: self.max_pending_per_receiver,
        }
    }

    /// Every problem of the settings, each with its path under `webhooks`.
    pub fn problems(&self) -> Vec<(&'static str, &'static str)> {
        let mut problems = Vec::new();
        for (path, zero) in [
            ("webhooks.max_attempts", self.max_attempts == 0),
            ("webhooks.concurrency", self.concurrency == 0),
            (
                "webhooks.max_pending_per_org",
                self.max_pending_per_org == 0,
            ),
            (
                "webhooks.max_pending_per_receiver",
                self.max_pending_per_receiver == 0,
            ),
            ("webhooks.timeout", self.timeout.is_zero()),
            ("webhooks.poll_interval", self.poll_interval.is_zero()),
            ("webhooks.retention", self.retention.is_zero()),
        ] {
            if zero {
                problems.push((path, "must be above zero"));
            }
        }
        problems
    }

    /// The wait after failed attempt `attempt` (from 1): `initial_backoff` doubled for
    /// each attempt before, capped at `max_backoff`, then spread by up to 20% either way
    /// so that deliveries failed together do not retry together.
    pub fn backoff(&self, attempt: u32) -> StdDuration {
        let base = self.initial_backoff.0.as_secs_f64()
            * 2f64.powi(attempt.saturating_sub(1).min(60) as i32);
        let capped = base.min(self.max_backoff.0.as_secs_f64());
        let spread = rand::thread_rng().gen_range(0.8..=1.2);
        StdDuration::from_secs_f64(capped * spread)
    }
}

/// Failures that stop a worker from starting.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("cannot build the webhook HTTP client: {0}")]
    Client(String),
}

/// Sends the store's queued deliveries until stopped.
pub struct Deliverer {
    store: Store,
    client: Outbound,
    /// For deliveries an organisation asked for (its webhooks, its APIs' handlers, the
    /// portal's subscriptions): a client held to the egress policy of posted streams.
    posted: Option<Outbound>,
    sealer: Option<Arc<Sealer>>,
    config: DeliveryConfig,
    wake: Arc<Notify>,
}

/// The most attempts recorded in one transaction.
const RECORD_BATCH: usize = 256;

impl Deliverer {
    /// A worker over `store`. With a `sealer` it also sends signed deliveries (it can
    /// open their secrets); without, it leaves them to a worker that can.
    pub fn new(
        store: Store,
        config: DeliveryConfig,
        sealer: Option<Sealer>,
    ) -> Result<Deliverer, DeliveryError> {
        let client = Self::outbound(&config, None)?;
        Ok(Deliverer {
            store,
            client,
            posted: None,
            sealer: sealer.map(Arc::new),
            config,
            wake: Arc::new(Notify::new()),
        })
    }

    /// The same worker, sending what organisations asked for only where `policy` allows
    /// (the egress policy of posted streams). The operator's deliveries (the handlers of
    /// API files with no organisation) go anywhere.
    pub fn with_egress(mut self, policy: Arc<EgressPolicy>) -> Result<Self, DeliveryError> {
        self.posted = Some(Self::outbound(&self.config, Some(policy))?);
        Ok(self)
    }

    /// A client with the deliveries' settings, held to `policy` when given.
    fn outbound(
        config: &DeliveryConfig,
        policy: Option<Arc<EgressPolicy>>,
    ) -> Result<Outbound, DeliveryError> {
        Outbound::new(Self::settings(config), policy)
            .map_err(|e| DeliveryError::Client(e.to_string()))
    }

    fn settings(config: &DeliveryConfig) -> OutboundSettings {
        OutboundSettings {
            timeout: config.timeout.0,
            accept_invalid_certs: false,
            // A redirect would resend the body elsewhere: the receiver's URL is the one
            // configured.
            max_redirects: 0,
        }
    }

    /// The client a delivery goes out with.
    fn client_for(&self, d: &DeliveryRecord) -> &Outbound {
        // Handlers of API files carry no organisation; everything else was asked for by
        // one (its webhooks, its posted APIs' handlers, its portal's subscribers).
        let operators = d.source.starts_with("handler:") && d.org_id.is_empty();
        match &self.posted {
            Some(client) if !operators => client,
            _ => &self.client,
        }
    }

    /// Notifying this makes the worker read the queue now rather than at its next poll;
    /// whoever queues a delivery in this process calls it.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Sends deliveries until `stop`; attempts in flight then finish (each is bounded by
    /// the timeout) and are recorded.
    pub async fn run(self, stop: CancellationToken) {
        let concurrency = self.config.concurrency.max(1);
        let chunk = (concurrency / 4).max(1) as u32;
        let slots = Arc::new(Semaphore::new(concurrency));
        let (results_tx, results_rx) = mpsc::channel(concurrency * 2);
        let recorder = tokio::spawn(record(self.store.clone(), results_rx));
        let pruner = tokio::spawn(prune(
            self.store.clone(),
            self.config.retention.0,
            stop.clone(),
        ));
        // A claimed row is held for one attempt's time and a margin; a worker that dies
        // mid-attempt lets it go when that runs out.
        let lease = self.config.timeout.0 + StdDuration::from_secs(30);
        let this = Arc::new(self);
        while !stop.is_cancelled() {
            // Wait for a share of the slots to be free before claiming, so claimed rows
            // are sent at once and a busy queue is claimed in chunks, not row by row.
            let Ok(held) = slots.clone().acquire_many_owned(chunk).await else {
                break;
            };
            let free = slots.available_permits() + chunk as usize;
            let claimed = this
                .store
                .claim_deliveries(
                    now_ms(),
                    lease.as_millis() as i64,
                    free as i64,
                    this.sealer.is_some(),
                )
                .await;
            let batch = match claimed {
                Ok(batch) => batch,
                Err(e) => {
                    warn!(error = %e, "webhooks: reading the delivery queue failed");
                    Vec::new()
                }
            };
            if batch.is_empty() {
                drop(held);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = this.wake.notified() => {}
                    _ = tokio::time::sleep(this.config.poll_interval.0) => {}
                }
                continue;
            }
            let mut held = Some(held);
            for delivery in batch {
                // Each attempt holds one slot: one of those waited for, then any other.
                let permit = match held.take() {
                    Some(mut many) if many.num_permits() > 1 => match many.split(1) {
                        Some(one) => {
                            held = Some(many);
                            one
                        }
                        None => many,
                    },
                    Some(one) => one,
                    None => match slots.clone().acquire_owned().await {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                };
                let (this, results) = (this.clone(), results_tx.clone());
                tokio::spawn(async move {
                    let result = this.attempt(delivery).await;
                    let _ = results.send(result).await;
                    drop(permit);
                });
            }
        }
        // Every slot back means every attempt in flight has sent its result.
        let _ = slots.acquire_many(concurrency as u32).await;
        drop(results_tx);
        let _ = recorder.await;
        let _ = pruner.await;
    }

    /// One attempt at a delivery, and what follows it.
    async fn attempt(&self, d: DeliveryRecord) -> AttemptResult {
        let attempt = d.attempts + 1;
        let at = now_ms();
        let started = Instant::now();
        let client = self.client_for(&d);
        let dead = |why: String| {
            self.finish(
                &d,
                attempt,
                at,
                started,
                None,
                Some(why),
                AfterAttempt::Dead,
            )
        };
        let (status, error) = match self.request(&d) {
            Ok(req) => match client.send(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    if status.is_success() {
                        (Some(status), None)
                    } else {
                        let body = head(resp).await;
                        let text = String::from_utf8_lossy(&body);
                        (
                            Some(status),
                            Some(format!("answered {status}: {}", text.trim())),
                        )
                    }
                }
                // Where it goes is refused: trying again will not help.
                Err(OutboundError::Refused(e)) => return dead(e.to_string()),
                Err(e) => (None, Some(describe(&e))),
            },
            // Nothing can be sent: trying again will not help.
            Err(why) => return dead(why),
        };
        let then = match status {
            Some(s) if s.is_success() => AfterAttempt::Delivered,
            Some(s) if s.is_client_error() && !retried_client_error(s) => AfterAttempt::Dead,
            _ if attempt >= d.max_attempts => AfterAttempt::Dead,
            _ => AfterAttempt::Retry(
                now_ms() + self.config.backoff(attempt as u32).as_millis() as i64,
            ),
        };
        self.finish(&d, attempt, at, started, status, error, then)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        d: &DeliveryRecord,
        attempt: i64,
        at: i64,
        started: Instant,
        status: Option<StatusCode>,
        error: Option<String>,
        then: AfterAttempt,
    ) -> AttemptResult {
        let latency = started.elapsed();
        let outcome = match then {
            AfterAttempt::Delivered => "delivered",
            AfterAttempt::Retry(_) => "retry",
            AfterAttempt::Dead => "dead",
        };
        metrics::counter!(crate::metrics::WEBHOOK_ATTEMPTS, "outcome" => outcome).increment(1);
        metrics::histogram!(crate::metrics::WEBHOOK_ATTEMPT_DURATION).record(latency.as_secs_f64());
        match (&then, &error) {
            (AfterAttempt::Dead, Some(e)) => {
                warn!(delivery = %d.id, url = %d.url, attempt, error = %e, "webhooks: delivery is dead")
            }
            (_, Some(e)) => {
                debug!(delivery = %d.id, url = %d.url, attempt, error = %e, "webhooks: attempt failed")
            }
            _ => {}
        }
        AttemptResult {
            attempt: AttemptRecord {
                delivery_id: d.id.clone(),
                attempt,
                at,
                status: status.map(|s| i64::from(s.as_u16())),
                error,
                latency_ms: latency.as_millis() as i64,
            },
            then,
        }
    }

    /// The request of one attempt: the stored method, URL, headers and body, the
    /// idempotency key and event headers, and a fresh signature when the delivery is
    /// signed.
    fn request(&self, d: &DeliveryRecord) -> Result<OutboundRequest, String> {
        let method = Method::from_bytes(d.method.as_bytes())
            .map_err(|_| format!("`{}` is not an HTTP method", d.method))?;
        let plain = super::sealed::open_delivery_headers(self.sealer.as_deref(), &d.headers)
            .map_err(|e| e.to_string())?;
        let stored: BTreeMap<String, String> = serde_json::from_str(&plain)
            .map_err(|e| format!("the stored headers are not a JSON object: {e}"))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &stored {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`{name}` is not a header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of `{name}` is not a header value"))?;
            headers.insert(name, value);
        }
        let header =
            |v: &str| HeaderValue::from_str(v).map_err(|_| format!("`{v}` is not a header value"));
        headers.insert(sign::IDEMPOTENCY_HEADER, header(&d.id)?);
        headers.insert(sign::EVENT_HEADER, header(&d.event)?);
        if !headers.contains_key(http::header::CONTENT_TYPE) {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        // A body with a secret of its own (a reset token) is sent from its sealed copy;
        // `body` is the log's, with the secret redacted.
        let body = match &d.body_sealed {
            Some(sealed) => self
                .sealer
                .as_ref()
                .ok_or("no secret to open the sealed body with")?
                .open(sealed)
                .map_err(|_| "the sealed body cannot be opened with this secret".to_owned())?,
            None => d.body.clone(),
        };
        if let Some(sealed) = &d.secret_sealed {
            let sealer = self
                .sealer
                .as_ref()
                .ok_or("no secret to open the signing secret with")?;
            let secret = sealer
                .open(sealed)
                .map_err(|_| "the signing secret cannot be opened with this secret".to_owned())?;
            let signature = sign::sign(&secret, now_ms() / 1000, &body);
            headers.insert(sign::SIGNATURE_HEADER, header(&signature)?);
        }
        let url =
            reqwest::Url::parse(&d.url).map_err(|e| format!("`{}` is not a URL: {e}", d.url))?;
        Ok(OutboundRequest {
            method,
            url,
            headers,
            body: Some(body.into()),
        })
    }
}

/// 4xx answers that mean "later", not "never".
fn retried_client_error(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS
    )
}

fn describe(e: &OutboundError) -> String {
    match e {
        OutboundError::Http(e) if e.is_timeout() => "timed out".into(),
        OutboundError::Http(e) if e.is_connect() => format!(
            "cannot connect: {}",
            std::error::Error::source(e).map_or_else(|| e.to_string(), |s| s.to_string())
        ),
        e => e.to_string(),
    }
}

/// The most of a refusing answer's body kept for the delivery log.
const ERROR_HEAD: usize = 200;

/// The first [`ERROR_HEAD`] bytes of `resp`'s body. Only that much is read: a receiver
/// may answer with an endless body, and the rest is dropped with the connection.
async fn head(mut resp: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < ERROR_HEAD {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(ERROR_HEAD);
    body
}

/// Writes attempt results in batches: whatever arrived while the last batch was written
/// goes in the next transaction. A result that cannot be written is lost only as a
/// record; its lease runs out and the delivery is sent again.
async fn record(store: Store, mut results: mpsc::Receiver<AttemptResult>) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while let Some(first) = results.recv().await {
        batch.push(first);
        while batch.len() < RECORD_BATCH {
            match results.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        if let Err(e) = store.record_attempts(&batch, now_ms()).await {
            warn!(error = %e, attempts = batch.len(), "webhooks: recording attempts failed; they will be sent again");
        }
        batch.clear();
    }
}

/// Finished deliveries removed per transaction: a large backlog goes in steps that leave
/// the queue to the workers in between.
const PRUNE_BATCH: i64 = 500;

/// How often finished deliveries past `retention` are looked for: a tenth of it, at least
/// a second and at most ten minutes.
fn prune_interval(retention: StdDuration) -> StdDuration {
    (retention / 10).clamp(StdDuration::from_secs(1), StdDuration::from_secs(600))
}

/// Removes finished deliveries older than `retention`, with their attempts, until `stop`.
/// Every worker sharing a store does this; the deletes are idempotent.
async fn prune(store: Store, retention: StdDuration, stop: CancellationToken) {
    let every = prune_interval(retention);
    loop {
        let before = now_ms().saturating_sub(retention.as_millis().min(i64::MAX as u128) as i64);
        let mut removed = 0;
        loop {
            match store.prune_deliveries(before, PRUNE_BATCH).await {
                Ok(n) => {
                    removed += n;
                    if n < PRUNE_BATCH as u64 || stop.is_cancelled() {
                        break;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "webhooks: removing old deliveries failed");
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
        if removed > 0 {
            metrics::counter!(crate::metrics::WEBHOOK_PRUNED).increment(removed);
            debug!(
                removed,
                "webhooks: removed finished deliveries past their retention"
            );
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_head_of_an_endless_refusal_is_read() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            // The request first (it has no body), then the answer.
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn
                .write_all(b"HTTP/1.1 500 No\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let chunk = format!("{:x}\r\n{}\r\n", 4096, "é".repeat(2048));
            // An answer that never ends, until the client hangs up.
            while conn.write_all(chunk.as_bytes()).await.is_ok() {}
        });
        let resp = reqwest::get(&url).await.unwrap();
        assert_eq!(resp.status(), 500);
        // Would never end if the whole body were read.
        let body = tokio::time::timeout(StdDuration::from_secs(30), head(resp))
            .await
            .expect("the head is read without the rest");
        assert_eq!(body.len(), ERROR_HEAD);
    }

    #[test]
    fn settings_that_cannot_work_are_named() {
        assert!(DeliveryConfig::default().problems().is_empty());
        let bad = DeliveryConfig {
            max_pending_per_org: 0,
            retention: Duration::from_secs(0),
            ..DeliveryConfig::default()
        };
        let paths: Vec<_> = bad.problems().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            ["webhooks.max_pending_per_org", "webhooks.retention"]
        );
    }

    #[test]
    fn old_deliveries_are_looked_for_often_enough() {
        let secs = |s| StdDuration::from_secs(s);
        assert_eq!(prune_interval(secs(7 * 24 * 3600)), secs(600));
        assert_eq!(prune_interval(secs(300)), secs(30));
        assert_eq!(prune_interval(StdDuration::from_millis(10)), secs(1));
    }

    #[test]
    fn backoff_doubles_within_its_cap_and_jitter() {
        let config = DeliveryConfig {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            ..DeliveryConfig::default()
        };
        for (attempt, base) in [
            (1, 1.0),
            (2, 2.0),
            (3, 4.0),
            (4, 8.0),
            (5, 10.0),
            (60, 10.0),
        ] {
            let d = config.backoff(attempt).as_secs_f64();
            assert!(
                d >= base * 0.8 - 1e-9 && d <= base * 1.2 + 1e-9,
                "{attempt}: {d}"
            );
        }
    }

    #[test]
    fn which_client_errors_retry() {
        assert!(retried_client_error(StatusCode::TOO_MANY_REQUESTS));
        assert!(retried_client_error(StatusCode::REQUEST_TIMEOUT));
        assert!(!retried_client_error(StatusCode::NOT_FOUND));
    }
}
