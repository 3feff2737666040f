//! Event handlers: turns the gateway's events into webhook deliveries. For each event,
//! the handlers of its API that list it fire, unless the same handler fired the same
//! event for the same key within its `event_timeout`. A fired handler's call (method,
//! URL, headers, rendered body) is queued in the store, from where the delivery worker
//! sends it until it is taken.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::api::Api;
use super::events::{Event, EventKind};
use super::shared::Shared;
use crate::apidef::handlers::{Handler, Target};
use crate::store::seal::Sealer;
use crate::store::{DeliveryRecord, QueueBounds, Store, StoreError};
use crate::webhook::delivery::now_ms;
use crate::webhook::stored::{hook_delivery, stored_hook};
use crate::webhook::Hook;
use crate::webhook::{DeliveryConfig, Templates};

/// What a body template sees.
#[derive(Debug, Serialize)]
pub struct TemplateContext<'a> {
    pub event: &'static str,
    pub api_id: &'a str,
    pub api_name: &'a str,
    pub org_id: &'a str,
    pub key_id: Option<&'a str>,
    pub path: &'a str,
    pub message: &'a str,
    /// Unix milliseconds.
    pub at: i64,
    /// RFC 3339, UTC.
    pub time: String,
}

/// The events one organisation's worker may have waiting.
const ORG_QUEUE: usize = 1024;

/// One handler firing for one key: the cool-down's unit.
type CoolKey = (String, usize, EventKind, Option<String>);

pub struct Dispatcher {
    store: Store,
    templates: Templates,
    /// Opens what the dashboard sealed in stored webhooks, and seals their deliveries'
    /// headers in turn.
    sealer: Option<Sealer>,
    max_attempts: i64,
    /// How many deliveries may wait (`webhooks.max_pending_*`).
    bounds: QueueBounds,
    /// Wakes this process's delivery worker, when it runs one.
    wake: Option<Arc<Notify>>,
    last_fired: HashMap<CoolKey, Instant>,
}

impl Dispatcher {
    pub fn new(
        store: Store,
        templates: Templates,
        sealer: Option<Sealer>,
        config: &DeliveryConfig,
        wake: Option<Arc<Notify>>,
    ) -> Dispatcher {
        Dispatcher {
            store,
            templates,
            sealer,
            max_attempts: i64::from(config.max_attempts.max(1)),
            bounds: config.bounds(),
            wake,
            last_fired: HashMap::new(),
        }
    }

    /// Handles `events` until `stop`: each organisation's events go to a worker of its
    /// own, through a queue of [`ORG_QUEUE`] events, so that one organisation's slow
    /// handlers (or a flood of its events) hold up neither the others' nor the bus:
    /// when its queue is full, that organisation's events are dropped, and only its. The
    /// caller subscribes before spawning this, so that no event published once requests
    /// are served can be missed.
    pub async fn run(
        self,
        shared: Arc<Shared>,
        mut events: broadcast::Receiver<Event>,
        stop: CancellationToken,
    ) {
        let mut workers: HashMap<String, mpsc::Sender<Event>> = HashMap::new();
        loop {
            let received = tokio::select! {
                _ = stop.cancelled() => return,
                e = events.recv() => e,
            };
            let event = match received {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(
                        missed = n,
                        "webhooks: events came faster than they were queued; some were missed"
                    );
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let Some(org) = shared
                .table
                .current()
                .get(&event.api_id)
                .filter(|api| !api.handlers.is_empty())
                .map(|api| api.org_id.clone())
            else {
                continue;
            };
            let worker = workers.entry(org.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::channel(ORG_QUEUE);
                let mine = self.for_worker();
                tokio::spawn(mine.work(shared.clone(), rx, stop.clone()));
                tx
            });
            if let Err(mpsc::error::TrySendError::Full(_)) = worker.try_send(event) {
                warn!(org_id = %org, "webhooks: the organisation's events come faster than its handlers run; one was dropped");
            }
        }
    }

    /// A dispatcher with the same settings and a cool-down of its own.
    fn for_worker(&self) -> Dispatcher {
        Dispatcher {
            store: self.store.clone(),
            templates: self.templates.clone(),
            sealer: self.sealer.clone(),
            max_attempts: self.max_attempts,
            bounds: self.bounds,
            wake: self.wake.clone(),
            last_fired: HashMap::new(),
        }
    }

    /// One organisation's worker: events that arrive together are queued in one
    /// transaction.
    async fn work(
        mut self,
        shared: Arc<Shared>,
        mut events: mpsc::Receiver<Event>,
        stop: CancellationToken,
    ) {
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => return,
                e = events.recv() => e,
            };
            let Some(first) = first else { return };
            let mut batch = vec![first];
            while batch.len() < 256 {
                match events.try_recv() {
                    Ok(e) => batch.push(e),
                    Err(_) => break,
                }
            }
            let current = shared.table.current();
            let mut deliveries = Vec::new();
            for event in &batch {
                if let Some(api) = current.get(&event.api_id) {
                    deliveries.extend(self.fire(api, event).await);
                }
                // Rendering does not wait on anything: let the other organisations'
                // workers run between events.
                tokio::task::yield_now().await;
            }
            if deliveries.is_empty() {
                continue;
            }
            match self
                .store
                .enqueue_deliveries(&deliveries, now_ms(), self.bounds)
                .await
            {
                Ok(_) => {
                    if let Some(wake) = &self.wake {
                        wake.notify_one();
                    }
                }
                Err(e @ StoreError::QueueFull { .. }) => {
                    metrics::counter!(crate::metrics::WEBHOOK_REFUSED, "reason" => "queue_full")
                        .increment(deliveries.len() as u64);
                    warn!(error = %e, lost = deliveries.len(), "webhooks: an organisation's delivery queue is full; its events were dropped")
                }
                Err(e) => {
                    warn!(error = %e, lost = deliveries.len(), "webhooks: queueing deliveries failed")
                }
            }
        }
    }

    /// The deliveries `event` makes through the handlers of `api`.
    pub async fn fire(&mut self, api: &Api, event: &Event) -> Vec<DeliveryRecord> {
        let mut out = Vec::new();
        for (i, handler) in api.handlers.iter().enumerate() {
            if !handler.events.contains(&event.kind) {
                continue;
            }
            let (hook, source, secret) = match self.resolve(api, handler).await {
                Some(found) => found,
                None => continue,
            };
            if !self.cooled_down(api, i, event, hook.event_timeout) {
                metrics::counter!(crate::metrics::GATEWAY_WEBHOOKS_HELD, "api_id" => api.id.clone(), "event" => event.kind.as_str())
                    .increment(1);
                continue;
            }
            metrics::counter!(crate::metrics::GATEWAY_WEBHOOKS_FIRED, "api_id" => api.id.clone(), "event" => event.kind.as_str())
                .increment(1);
            out.push(self.delivery(api, event, &hook, source, secret));
        }
        out
    }

    /// The handler's webhook, the delivery's source, and whether the webhook's headers
    /// and URL were sealed (so its deliveries' are too); `None` (logged) when a stored
    /// webhook is gone or cannot be opened.
    async fn resolve(&self, api: &Api, handler: &Handler) -> Option<(Hook, String, bool)> {
        match &handler.target {
            Target::Inline(hook) => Some((hook.clone(), format!("handler:{}", api.id), false)),
            Target::Stored(id) => match self.store.hook(&api.org_id, id).await {
                Ok(Some(record)) => {
                    let source = format!("hook:{}", record.webhook_id);
                    match stored_hook(record, self.sealer.as_ref()) {
                        Ok((hook, secret)) => Some((hook, source, secret)),
                        Err(e) => {
                            warn!(api_id = %api.id, webhook = %id, error = %e, "webhooks: the webhook cannot be opened; set the gateway's `store_secret` to the dashboard's `secret`");
                            None
                        }
                    }
                }
                Ok(None) => {
                    warn!(api_id = %api.id, webhook = %id, "webhooks: the handler's webhook does not exist in the API's organisation");
                    None
                }
                Err(e) => {
                    warn!(api_id = %api.id, webhook = %id, error = %e, "webhooks: reading the webhook failed");
                    None
                }
            },
        }
    }

    /// Whether handler `i` of `api` may fire `event` now; records the firing when so.
    fn cooled_down(&mut self, api: &Api, i: usize, event: &Event, timeout: u64) -> bool {
        if timeout == 0 {
            return true;
        }
        let now = Instant::now();
        let window = Duration::from_secs(timeout);
        let key = (api.id.clone(), i, event.kind, event.key_id.clone());
        match self.last_fired.get(&key) {
            Some(last) if now.duration_since(*last) < window => false,
            _ => {
                // Forget firings whose window passed, so the map stays small.
                if self.last_fired.len() > 10_000 {
                    self.last_fired
                        .retain(|_, at| now.duration_since(*at) < Duration::from_secs(3600));
                }
                self.last_fired.insert(key, now);
                true
            }
        }
    }

    fn delivery(
        &self,
        api: &Api,
        event: &Event,
        hook: &Hook,
        source: String,
        secret: bool,
    ) -> DeliveryRecord {
        let context = TemplateContext {
            event: event.kind.as_str(),
            api_id: &api.id,
            api_name: &api.name,
            org_id: &api.org_id,
            key_id: event.key_id.as_deref(),
            path: &event.path,
            message: &event.message,
            at: event.at,
            time: chrono::DateTime::from_timestamp_millis(event.at)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        let mut failed = None;
        let body = match self.render(hook, &context) {
            Ok(body) => body,
            Err(e @ crate::webhook::TemplateError::OverBudget { .. }) => {
                // Recorded as failed with why, for its owner to see; a replay sends the
                // event as JSON.
                warn!(api_id = %api.id, error = %e, "webhooks: the body template is over its budget; the delivery failed");
                failed = Some(e.to_string());
                serde_json::to_vec(&context).unwrap_or_default()
            }
            Err(e) => {
                // The event still goes out, as JSON: a broken template must not hide it.
                warn!(api_id = %api.id, error = %e, "webhooks: the body template failed; sending the event as JSON");
                serde_json::to_vec(&context).unwrap_or_default()
            }
        };
        hook_delivery(
            hook,
            self.sealer.as_ref().filter(|_| secret),
            (api.org_id.clone(), source),
            event.kind.as_str(),
            body,
            self.max_attempts,
            failed,
        )
    }

    fn render(
        &self,
        hook: &Hook,
        context: &TemplateContext<'_>,
    ) -> Result<Vec<u8>, crate::webhook::TemplateError> {
        let source = match (&hook.template, hook.template_path.as_str()) {
            (Some(inline), _) => inline.clone(),
            (None, "") => return Ok(serde_json::to_vec(context).unwrap_or_default()),
            (None, path) => self.templates.read(path)?,
        };
        let name = if hook.template.is_some() {
            "template"
        } else {
            hook.template_path.as_str()
        };
        Templates::render(name, &source, context).map(String::into_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::api;

    fn api_with(handlers: &str) -> Api {
        let doc = format!(
            "openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: pets, name: Pets, orgId: o1}}\n  upstream: {{url: 'http://127.0.0.1:9'}}\n  server:\n    listenPath: {{value: /pets}}\n    eventHandlers:\n{handlers}"
        );
        api::from_file("test.yaml", &doc).unwrap()
    }

    fn event(kind: EventKind, key: Option<&str>) -> Event {
        Event {
            kind,
            api_id: "pets".into(),
            key_id: key.map(str::to_owned),
            message: "no key".into(),
            path: "/pets/1".into(),
            at: 1_700_000_000_000,
        }
    }

    /// A dispatcher over an empty store, giving deliveries 5 attempts.
    async fn dispatcher() -> Dispatcher {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let config = DeliveryConfig {
            max_attempts: 5,
            ..DeliveryConfig::default()
        };
        Dispatcher::new(store, Templates::default(), None, &config, None)
    }

    #[tokio::test]
    async fn fires_matching_handlers_with_cool_down() {
        let mut d = dispatcher().await;
        let api = api_with(
            "      - events: [auth_failure]\n        targetPath: http://127.0.0.1:9/a\n        headerMap: {X-Team: ops}\n        template: '{\"e\": \"{{ event }}\", \"k\": {{ key_id | tojson }}, \"p\": \"{{ path }}\"}'\n        eventTimeout: 60\n      - events: [quota_exceeded]\n        targetPath: http://127.0.0.1:9/b\n",
        );
        let got = d
            .fire(&api, &event(EventKind::AuthFailure, Some("k1")))
            .await;
        assert_eq!(got.len(), 1);
        let first = &got[0];
        assert_eq!(first.url, "http://127.0.0.1:9/a");
        assert_eq!(first.org_id, "o1");
        assert_eq!(first.max_attempts, 5);
        assert_eq!(first.headers, r#"{"X-Team":"ops"}"#);
        assert_eq!(
            String::from_utf8_lossy(&first.body),
            r#"{"e": "auth_failure", "k": "k1", "p": "/pets/1"}"#
        );
        // Cooling down for k1, not for another key.
        assert!(d
            .fire(&api, &event(EventKind::AuthFailure, Some("k1")))
            .await
            .is_empty());
        assert_eq!(
            d.fire(&api, &event(EventKind::AuthFailure, Some("k2")))
                .await
                .len(),
            1
        );
        // No template: the event as JSON; no cool-down.
        for _ in 0..2 {
            let got = d.fire(&api, &event(EventKind::QuotaExceeded, None)).await;
            let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
            assert_eq!(body["event"], "quota_exceeded");
            assert_eq!(body["api_id"], "pets");
            assert_eq!(body["time"], "2023-11-14T22:13:20.000Z");
        }
        assert!(d
            .fire(&api, &event(EventKind::UpstreamError, None))
            .await
            .is_empty());
    }

    #[tokio::test]
    async fn a_broken_template_still_sends_the_event() {
        let mut d = dispatcher().await;
        let api = api_with(
            "      - events: [auth_failure]\n        targetPath: http://127.0.0.1:9/a\n        templatePath: missing.json\n",
        );
        let got = d.fire(&api, &event(EventKind::AuthFailure, None)).await;
        let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
        assert_eq!(body["event"], "auth_failure");
    }
}
