//! Every metric name Sluice exports, its help text, and the per-node handles the runtime
//! updates (once per batch, never per message).
//!
//! Labels: `stream`, `component` (the label, or the node's document path), `kind` (input,
//! processor or output) and `type` (the YAML key). Never an error text, URL or key.

use std::sync::OnceLock;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics::{Counter, Gauge, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const RECEIVED_MESSAGES: &str = "sluice_component_received_messages_total";
pub const RECEIVED_BYTES: &str = "sluice_component_received_bytes_total";
pub const SENT_MESSAGES: &str = "sluice_component_sent_messages_total";
pub const SENT_BYTES: &str = "sluice_component_sent_bytes_total";
pub const ERRORS: &str = "sluice_component_errors_total";
pub const DISCARDED: &str = "sluice_component_discarded_messages_total";
pub const BATCH_SIZE: &str = "sluice_component_batch_size_messages";
pub const LATENCY: &str = "sluice_component_latency_seconds";
pub const CONNECTED: &str = "sluice_component_connected";
pub const CONNECTION_ATTEMPTS: &str = "sluice_output_connection_attempts_total";
pub const CONNECTION_ERRORS: &str = "sluice_output_connection_errors_total";
pub const RETRIES: &str = "sluice_component_retries_total";
/// Messages a consumer is behind, by `topic` (or queue, or stream) and `partition`.
pub const INPUT_LAG: &str = "sluice_input_lag_messages";
pub const STREAM_ACTIVE: &str = "sluice_stream_active";
pub const STREAM_STATE: &str = "sluice_stream_state";
pub const STREAM_RECOVERIES: &str = "sluice_stream_recoveries_total";
/// Streams stopped for good because an input gave up connecting (label `stream`).
pub const STREAM_FAILURES: &str = "sluice_stream_failures_total";
/// Open stream connections ended because their access no longer holds, by `api_id` and
/// `reason`.
pub const STREAM_CONNECTIONS_REVOKED: &str = "sluice_stream_connections_revoked_total";
/// Changes of a running stream, by `api_id` and `outcome`: `live` (its clients stayed
/// connected), `clients_ended` (a hub's routes or settings changed), `failed`.
pub const STREAM_CHANGES: &str = "sluice_stream_changes_total";
/// Open stream connections a draining gateway told to reconnect elsewhere.
pub const STREAM_CONNECTIONS_RESTARTED: &str = "sluice_stream_connections_restarted_total";

// Stream analytics of the HTTP stream routes (SSE, raw streams, WebSocket, GET), labelled
// with the standard labels plus `route` (from config) and `transport`.
pub const HTTP_STREAM_CONNECTION_ATTEMPTS: &str = "sluice_http_stream_connection_attempts_total";
pub const HTTP_STREAM_ACTIVE_CONNECTIONS: &str = "sluice_http_stream_active_connections";
pub const HTTP_STREAM_DELIVERED_MESSAGES: &str = "sluice_http_stream_delivered_messages_total";
pub const HTTP_STREAM_DELIVERED_BYTES: &str = "sluice_http_stream_delivered_bytes_total";
pub const HTTP_STREAM_WRITE_ERRORS: &str = "sluice_http_stream_write_errors_total";
pub const HTTP_STREAM_REPLAYED_EVENTS: &str = "sluice_http_stream_replayed_events_total";
pub const HTTP_STREAM_FILTERED_MESSAGES: &str = "sluice_http_stream_filtered_messages_total";
pub const HTTP_STREAM_FILTER_ERRORS: &str = "sluice_http_stream_filter_errors_total";
pub const HTTP_STREAM_SLOW_DROPPED: &str = "sluice_http_stream_slow_client_dropped_messages_total";
pub const HTTP_STREAM_SLOW_DISCONNECTED: &str = "sluice_http_stream_slow_client_disconnects_total";

// The gateway, labelled with `api_id` (and `status_class` or `event`), never a path.
pub const GATEWAY_REQUESTS: &str = "sluice_gateway_requests_total";
pub const GATEWAY_REQUEST_DURATION: &str = "sluice_gateway_request_duration_seconds";
pub const GATEWAY_EVENTS: &str = "sluice_gateway_events_total";
pub const GATEWAY_WEBHOOKS_FIRED: &str = "sluice_gateway_webhooks_fired_total";
pub const GATEWAY_WEBHOOKS_HELD: &str = "sluice_gateway_webhooks_held_total";

// Webhook deliveries, by `outcome` (delivered, retry, dead).
pub const WEBHOOK_ATTEMPTS: &str = "sluice_webhook_attempts_total";
pub const WEBHOOK_ATTEMPT_DURATION: &str = "sluice_webhook_attempt_seconds";
pub const WEBHOOK_REFUSED: &str = "sluice_webhook_deliveries_refused_total";
pub const WEBHOOK_PRUNED: &str = "sluice_webhook_deliveries_pruned_total";

// The CPU share of each organisation's posted streams, labelled with `org_id`.
pub const ORG_CPU: &str = "sluice_org_cpu_seconds_total";
pub const ORG_CPU_THROTTLED: &str = "sluice_org_cpu_throttled_seconds_total";

// Messages a node read from the cluster bus and dropped, labelled with `reason`.
pub const BUS_REFUSED: &str = "sluice_bus_messages_refused_total";
// Spans not exported, labelled with `reason` (`rate_limited`, `queue_full`).
pub const TRACE_SPANS_DROPPED: &str = "sluice_trace_spans_dropped_total";

/// Every metric above: `docs/metrics.md` documents each, and the Grafana dashboard in
/// `docs/` queries no other.
pub const ALL: &[&str] = &[
    RECEIVED_MESSAGES,
    RECEIVED_BYTES,
    SENT_MESSAGES,
    SENT_BYTES,
    ERRORS,
    DISCARDED,
    BATCH_SIZE,
    LATENCY,
    CONNECTED,
    CONNECTION_ATTEMPTS,
    CONNECTION_ERRORS,
    RETRIES,
    INPUT_LAG,
    STREAM_ACTIVE,
    STREAM_STATE,
    STREAM_RECOVERIES,
    STREAM_FAILURES,
    STREAM_CONNECTIONS_REVOKED,
    STREAM_CHANGES,
    STREAM_CONNECTIONS_RESTARTED,
    HTTP_STREAM_CONNECTION_ATTEMPTS,
    HTTP_STREAM_ACTIVE_CONNECTIONS,
    HTTP_STREAM_DELIVERED_MESSAGES,
    HTTP_STREAM_DELIVERED_BYTES,
    HTTP_STREAM_WRITE_ERRORS,
    HTTP_STREAM_REPLAYED_EVENTS,
    HTTP_STREAM_FILTERED_MESSAGES,
    HTTP_STREAM_FILTER_ERRORS,
    HTTP_STREAM_SLOW_DROPPED,
    HTTP_STREAM_SLOW_DISCONNECTED,
    GATEWAY_REQUESTS,
    GATEWAY_REQUEST_DURATION,
    GATEWAY_EVENTS,
    GATEWAY_WEBHOOKS_FIRED,
    GATEWAY_WEBHOOKS_HELD,
    WEBHOOK_ATTEMPTS,
    WEBHOOK_ATTEMPT_DURATION,
    WEBHOOK_REFUSED,
    WEBHOOK_PRUNED,
    ORG_CPU,
    ORG_CPU_THROTTLED,
    BUS_REFUSED,
    TRACE_SPANS_DROPPED,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The handle of this process's recorder, when one was installed.
pub fn installed() -> Option<PrometheusHandle> {
    HANDLE.get().cloned()
}

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Folds histogram samples into their buckets every [`UPKEEP_INTERVAL`]. The recorder
/// keeps every sample until then; without this only a scrape of `/metrics` would, and a
/// process nobody scrapes would grow by every batch it ever carried.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("sluice-metrics".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_INTERVAL);
            handle.run_upkeep();
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "Cannot start the metrics upkeep thread.");
    }
}

/// Installs the Prometheus recorder once per process and returns the handle that renders
/// `/metrics`. Later calls return the same handle.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".into()),
                    &[
                        0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
                    ],
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(BATCH_SIZE.into()),
                        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0],
                    )
                })
                .map(|b| b.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Another recorder may already be installed (tests): then ours only renders.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            spawn_upkeep(handle.clone());
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        GATEWAY_REQUESTS,
        Unit::Count,
        "Requests an API of the gateway answered, by status class."
    );
    describe_histogram!(
        GATEWAY_REQUEST_DURATION,
        Unit::Seconds,
        "Time from a request's arrival at the gateway to its response headers."
    );
    describe_counter!(
        GATEWAY_EVENTS,
        Unit::Count,
        "Gateway events (auth failures, limits hit, expired keys, upstream errors)."
    );
    describe_counter!(
        GATEWAY_WEBHOOKS_FIRED,
        Unit::Count,
        "Webhooks an API's event handlers fired, after their cool-down."
    );
    describe_counter!(
        GATEWAY_WEBHOOKS_HELD,
        Unit::Count,
        "Webhooks an API's event handlers held back: the same event within its cool-down."
    );
    describe_counter!(
        WEBHOOK_ATTEMPTS,
        Unit::Count,
        "Webhook delivery attempts, by what followed: delivered, retry or dead."
    );
    describe_histogram!(
        WEBHOOK_ATTEMPT_DURATION,
        Unit::Seconds,
        "Time of one webhook delivery attempt, answer included."
    );
    describe_counter!(
        WEBHOOK_REFUSED,
        Unit::Count,
        "Webhook deliveries not queued because their organisation had max_pending_per_org waiting."
    );
    describe_counter!(
        WEBHOOK_PRUNED,
        Unit::Count,
        "Finished webhook deliveries removed once older than the retention."
    );
    describe_counter!(
        ORG_CPU,
        Unit::Seconds,
        "Time an organisation's posted streams ran, charged against its CPU share (whole seconds)."
    );
    describe_counter!(
        ORG_CPU_THROTTLED,
        Unit::Seconds,
        "Time the tasks of an organisation's posted streams waited because the organisation was over its CPU share, added up over tasks (whole seconds)."
    );
    describe_counter!(
        BUS_REFUSED,
        Unit::Count,
        "Messages read from the cluster bus and dropped: `signature` when a node of the cluster did not sign them."
    );
    describe_counter!(
        TRACE_SPANS_DROPPED,
        Unit::Count,
        "Spans not exported: `rate_limited` past an organisation's span rate, `queue_full` when the export queue was full."
    );
    describe_counter!(
        RECEIVED_MESSAGES,
        Unit::Count,
        "Messages a component received."
    );
    describe_counter!(
        RECEIVED_BYTES,
        Unit::Bytes,
        "Payload bytes a component received."
    );
    describe_counter!(
        SENT_MESSAGES,
        Unit::Count,
        "Messages a component passed on or delivered."
    );
    describe_counter!(
        SENT_BYTES,
        Unit::Bytes,
        "Payload bytes a component passed on or delivered."
    );
    describe_counter!(
        ERRORS,
        Unit::Count,
        "Failures, by stage (connect, read, process, write)."
    );
    describe_counter!(
        DISCARDED,
        Unit::Count,
        "Messages filtered on purpose, by reason."
    );
    describe_histogram!(
        BATCH_SIZE,
        Unit::Count,
        "Messages per batch a component handled."
    );
    describe_histogram!(
        LATENCY,
        Unit::Seconds,
        "Time a processor or an output write took per batch."
    );
    describe_gauge!(CONNECTED, "1 while a component is connected, 0 otherwise.");
    describe_counter!(
        CONNECTION_ATTEMPTS,
        Unit::Count,
        "Connection attempts of an output."
    );
    describe_counter!(
        CONNECTION_ERRORS,
        Unit::Count,
        "Failed connection attempts of an output."
    );
    describe_counter!(
        RETRIES,
        Unit::Count,
        "Batches sent again after a failed delivery."
    );
    describe_gauge!(STREAM_ACTIVE, "1 while a stream runs.");
    describe_gauge!(
        INPUT_LAG,
        "Messages an input's consumer is behind: Kafka's high watermark minus the committed offset, JetStream's pending count, an AMQP queue's depth."
    );
    describe_gauge!(
        STREAM_STATE,
        "1 for a stream's state (starting, running, failing, stopped), 0 for the others."
    );
    describe_counter!(
        STREAM_RECOVERIES,
        Unit::Count,
        "Times a stream went from failing back to running."
    );
    describe_counter!(
        STREAM_FAILURES,
        Unit::Count,
        "Streams stopped because an input gave up connecting."
    );
    describe_counter!(
        HTTP_STREAM_CONNECTION_ATTEMPTS,
        Unit::Count,
        "Client connections (or GETs) to an HTTP stream route, accepted or refused."
    );
    describe_gauge!(
        HTTP_STREAM_ACTIVE_CONNECTIONS,
        "Clients connected to an HTTP stream route."
    );
    describe_counter!(
        HTTP_STREAM_DELIVERED_MESSAGES,
        Unit::Count,
        "Messages written to clients of an HTTP stream route."
    );
    describe_counter!(
        HTTP_STREAM_DELIVERED_BYTES,
        Unit::Bytes,
        "Payload bytes written to clients of an HTTP stream route."
    );
    describe_counter!(
        HTTP_STREAM_WRITE_ERRORS,
        Unit::Count,
        "Deliveries a client of an HTTP stream route failed to write (handed to another client or nacked)."
    );
    describe_counter!(
        HTTP_STREAM_REPLAYED_EVENTS,
        Unit::Count,
        "Events replayed to clients resuming with a last event id."
    );
    describe_counter!(
        HTTP_STREAM_FILTERED_MESSAGES,
        Unit::Count,
        "Messages a client of an HTTP stream route did not get because the output's filter withheld them from it."
    );
    describe_counter!(
        HTTP_STREAM_FILTER_ERRORS,
        Unit::Count,
        "Messages withheld from a client of an HTTP stream route because the output's filter failed on them."
    );
    describe_counter!(
        HTTP_STREAM_SLOW_DROPPED,
        Unit::Count,
        "Messages dropped from the queue of a client of an HTTP stream route that did not read them in time (slow_clients: drop_oldest)."
    );
    describe_counter!(
        HTTP_STREAM_SLOW_DISCONNECTED,
        Unit::Count,
        "Clients of an HTTP stream route disconnected for not reading in time (slow_clients: disconnect, or hold past write_timeout)."
    );
}

/// Which part of a component's work failed.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    Connect,
    Read,
    Process,
    Write,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Connect => "connect",
            Stage::Read => "read",
            Stage::Process => "process",
            Stage::Write => "write",
        }
    }
}

/// The handles of one node, registered once when the node starts.
#[derive(Clone)]
pub struct NodeMetrics {
    labels: Vec<(&'static str, String)>,
    pub received_messages: Counter,
    pub received_bytes: Counter,
    pub sent_messages: Counter,
    pub sent_bytes: Counter,
    pub batch_size: Histogram,
    pub latency: Histogram,
    pub connected: Gauge,
    pub retries: Counter,
}

impl NodeMetrics {
    /// `labels` are the node's standard labels: `stream`, `component`, `kind`, `type`.
    pub fn new(labels: Vec<(&'static str, String)>) -> Self {
        NodeMetrics {
            received_messages: counter!(RECEIVED_MESSAGES, &labels),
            received_bytes: counter!(RECEIVED_BYTES, &labels),
            sent_messages: counter!(SENT_MESSAGES, &labels),
            sent_bytes: counter!(SENT_BYTES, &labels),
            batch_size: histogram!(BATCH_SIZE, &labels),
            latency: histogram!(LATENCY, &labels),
            connected: gauge!(CONNECTED, &labels),
            retries: counter!(RETRIES, &labels),
            labels,
        }
    }

    /// The node's `component` label (its label in the config, or its place).
    pub fn component(&self) -> &str {
        self.label("component")
    }

    /// The value of the node's label `key` ("" without one).
    pub fn label(&self, key: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| *k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    pub fn error(&self, stage: Stage) {
        self.errors(stage, 1);
    }

    pub fn errors(&self, stage: Stage, n: u64) {
        if n == 0 {
            return;
        }
        let mut labels = self.labels.clone();
        labels.push(("stage", stage.as_str().to_owned()));
        counter!(ERRORS, &labels).increment(n);
    }

    pub fn discarded(&self, reason: &'static str, n: u64) {
        let mut labels = self.labels.clone();
        labels.push(("reason", reason.to_owned()));
        counter!(DISCARDED, &labels).increment(n);
    }

    pub fn connection_attempt(&self, ok: bool) {
        counter!(CONNECTION_ATTEMPTS, &self.labels).increment(1);
        if !ok {
            counter!(CONNECTION_ERRORS, &self.labels).increment(1);
        }
    }

    /// Labels of this node, for components that record analytics of their own.
    pub fn labels(&self) -> &[(&'static str, String)] {
        &self.labels
    }
}

pub fn stream_active(labels: &[(&'static str, String)]) -> Gauge {
    gauge!(STREAM_ACTIVE, labels)
}

/// Whose a stream of a gateway's API is: the gateway names it `<api_id>.<stream>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOwner {
    pub api_id: String,
    pub org_id: String,
}

/// The labels naming a stream in every metric of it: for a stream of a gateway's API,
/// `api_id`, `org_id` and `stream` (its name in the API), each bounded by what the
/// organisations defined; otherwise `stream` alone.
pub fn stream_labels(stream: &str, owner: Option<&StreamOwner>) -> Vec<(&'static str, String)> {
    let own = owner.and_then(|o| {
        let rest = stream.strip_prefix(o.api_id.as_str())?.strip_prefix('.')?;
        Some((o, rest))
    });
    match own {
        Some((o, rest)) => vec![
            ("api_id", o.api_id.clone()),
            ("org_id", o.org_id.clone()),
            ("stream", rest.to_owned()),
        ],
        None => vec![("stream", stream.to_owned())],
    }
}
