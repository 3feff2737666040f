//! Traces over OpenTelemetry. Off unless the standard `OTEL_*` variables ask for an OTLP
//! exporter; then each request through the gateway and each message through a stream is
//! a span, exported in batches over OTLP (gRPC or HTTP), and the W3C trace context handed
//! to upstreams and written into broker messages is that of Sluice's own spans, so that
//! a consumer elsewhere continues the trace.
//!
//! Off, every entry point here costs one atomic load and changes nothing: a client's
//! `traceparent` then passes through untouched.
//!
//! Spans are bounded twice. The streams an organisation posted run in the scope of its
//! span budget ([`within`]): a token bucket of `SLUICE_TRACES_ORG_SPANS_PER_SECOND` spans
//! a second, past which their spans are not recorded (a batch an input read then gets
//! one span rather than one per message, or none), so that a stream making messages as
//! fast as it can does not make spans as fast. And the export queue holds at most
//! `OTEL_BSP_MAX_QUEUE_SIZE` spans: a span that finds it full is dropped, never waited
//! for. Both drops are counted in `sluice_trace_spans_dropped_total`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};

use crate::message::Message;

/// The metadata keys (and header names) of the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The tracer, when traces are on.
fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// Spans each organisation's posted streams may record a second, unless the
/// environment says otherwise.
pub const DEFAULT_ORG_SPANS_PER_SECOND: u32 = 100;
/// The most `SLUICE_TRACES_ORG_SPANS_PER_SECOND` may be.
const MAX_ORG_SPANS_PER_SECOND: u32 = 1_000_000;
/// Spans the export queue holds unless `OTEL_BSP_MAX_QUEUE_SIZE` says otherwise, and the
/// most it may say: each queued span is a few hundred bytes to a few kilobytes.
pub const DEFAULT_QUEUE_SIZE: usize = 2048;
const MAX_QUEUE_SIZE: usize = 65_536;

/// The installed rate of organisations' span budgets.
static ORG_RATE: OnceLock<u32> = OnceLock::new();
/// Each organisation's span budget, while a stream of it runs.
static ORG_BUDGETS: OnceLock<parking_lot::Mutex<HashMap<String, Weak<SpanBudget>>>> =
    OnceLock::new();

tokio::task_local! {
    /// The budget of the posted stream whose task this is.
    static BUDGET: Arc<SpanBudget>;
}

/// A token bucket of spans: `rate` a second, at most a second's worth at once.
#[derive(Debug)]
pub struct SpanBudget {
    rate: f64,
    state: parking_lot::Mutex<(f64, Instant)>,
}

impl SpanBudget {
    /// A full bucket of `per_second` spans a second.
    pub fn new(per_second: u32) -> SpanBudget {
        let rate = f64::from(per_second);
        SpanBudget {
            rate,
            state: parking_lot::Mutex::new((rate, Instant::now())),
        }
    }

    /// Takes `n` spans from the bucket if it holds that many; whether it did.
    pub fn try_take(&self, n: u64) -> bool {
        self.try_take_at(n, Instant::now())
    }

    fn try_take_at(&self, n: u64, now: Instant) -> bool {
        let mut state = self.state.lock();
        let (tokens, last) = &mut *state;
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * self.rate).min(self.rate);
        *last = (*last).max(now);
        let n = n as f64;
        if *tokens >= n {
            *tokens -= n;
            true
        } else {
            false
        }
    }
}

/// The span budget of organisation `org`'s posted streams, shared by all of them; `None`
/// when traces are off.
pub fn org_budget(org: &str) -> Option<Arc<SpanBudget>> {
    tracer()?;
    let rate = ORG_RATE
        .get()
        .copied()
        .unwrap_or(DEFAULT_ORG_SPANS_PER_SECOND);
    let mut budgets = ORG_BUDGETS.get_or_init(Default::default).lock();
    if let Some(b) = budgets.get(org).and_then(Weak::upgrade) {
        return Some(b);
    }
    // Budgets of organisations with no stream left go, so the map holds only those.
    budgets.retain(|_, b| b.strong_count() > 0);
    let budget = Arc::new(SpanBudget::new(rate));
    budgets.insert(org.to_owned(), Arc::downgrade(&budget));
    Some(budget)
}

/// Runs `task` with the spans it makes held to `budget` (a posted stream's task), or as
/// it is without one.
pub async fn within<F: Future>(budget: Option<Arc<SpanBudget>>, task: F) -> F::Output {
    match budget {
        Some(b) => BUDGET.scope(b, task).await,
        None => task.await,
    }
}

/// Whether `n` more spans may be recorded here: always, outside a posted stream's tasks.
fn allow(n: u64) -> bool {
    BUDGET.try_with(|b| b.try_take(n)).unwrap_or(true)
}

/// Counts `n` spans not recorded for `reason`.
fn dropped(reason: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!(crate::metrics::TRACE_SPANS_DROPPED, "reason" => reason).increment(n);
    }
}

/// Whether spans are being made.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// How spans reach the collector (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
    HttpJson,
}

/// Which traces are kept (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedRatio(f64),
}

impl Sampling {
    fn sampler(self) -> Sampler {
        match self {
            Sampling::AlwaysOn => Sampler::AlwaysOn,
            Sampling::AlwaysOff => Sampler::AlwaysOff,
            Sampling::Ratio(r) => Sampler::TraceIdRatioBased(r),
            Sampling::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            Sampling::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            Sampling::ParentBasedRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

/// What the environment asks of traces, when it asks for any.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub protocol: Protocol,
    /// Where spans are sent: for HTTP the full URL (`…/v1/traces`), for gRPC the server.
    pub endpoint: String,
    pub sampling: Sampling,
    /// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`
    /// names one.
    pub default_service_name: bool,
    /// Spans each organisation's posted streams may record a second
    /// (`SLUICE_TRACES_ORG_SPANS_PER_SECOND`).
    pub org_spans_per_second: u32,
    /// Spans the export queue holds at most (`OTEL_BSP_MAX_QUEUE_SIZE`).
    pub max_queue_size: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}: {message}")]
    Setting { var: &'static str, message: String },
    #[error("cannot start the OTLP exporter for {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

fn bad(var: &'static str, message: impl Into<String>) -> TelemetryError {
    TelemetryError::Setting {
        var,
        message: message.into(),
    }
}

impl Settings {
    /// Reads the `OTEL_*` variables through `get`. Traces are on when
    /// `OTEL_TRACES_EXPORTER` is `otlp` or an OTLP endpoint is set, and neither
    /// `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` turns them off.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Self>, TelemetryError> {
        let var = |name: &str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = var("OTEL_SDK_DISABLED") {
            match v.to_ascii_lowercase().as_str() {
                "true" => return Ok(None),
                "false" => {}
                _ => {
                    return Err(bad(
                        "OTEL_SDK_DISABLED",
                        format!("`{v}` is not `true` or `false`"),
                    ))
                }
            }
        }
        let mut asked = false;
        if let Some(v) = var("OTEL_TRACES_EXPORTER") {
            for name in v.split(',').map(|n| n.trim().to_ascii_lowercase()) {
                match name.as_str() {
                    "none" => return Ok(None),
                    "otlp" => asked = true,
                    other => {
                        return Err(bad(
                            "OTEL_TRACES_EXPORTER",
                            format!(
                                "`{other}` is not an exporter Sluice has: give `otlp` or `none`"
                            ),
                        ))
                    }
                }
            }
        }
        let signal = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let general = var("OTEL_EXPORTER_OTLP_ENDPOINT");
        if !asked && signal.is_none() && general.is_none() {
            return Ok(None);
        }
        let (protocol_var, protocol) = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
            Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Some(p)),
            None => (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                var("OTEL_EXPORTER_OTLP_PROTOCOL"),
            ),
        };
        let protocol = match protocol.as_deref() {
            None | Some("http/protobuf") => Protocol::HttpProtobuf,
            Some("grpc") => Protocol::Grpc,
            Some("http/json") => Protocol::HttpJson,
            Some(other) => {
                return Err(bad(
                    protocol_var,
                    format!(
                        "`{other}` is not a protocol: give `grpc`, `http/protobuf` or `http/json`"
                    ),
                ))
            }
        };
        let http = protocol != Protocol::Grpc;
        let (endpoint_var, endpoint) = match (signal, general) {
            // The signal's own endpoint is taken as it is.
            (Some(e), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e),
            // The general one is a base, to which HTTP adds the signal's path.
            (None, Some(e)) if http => (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("{}/v1/traces", e.trim_end_matches('/')),
            ),
            (None, Some(e)) => ("OTEL_EXPORTER_OTLP_ENDPOINT", e),
            (None, None) if http => ("", "http://localhost:4318/v1/traces".to_owned()),
            (None, None) => ("", "http://localhost:4317".to_owned()),
        };
        match url::Url::parse(&endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(bad(
                    if endpoint_var.is_empty() {
                        "OTEL_EXPORTER_OTLP_ENDPOINT"
                    } else {
                        endpoint_var
                    },
                    format!("`{endpoint}` is not an http:// or https:// URL"),
                ))
            }
        }
        let ratio = match var("OTEL_TRACES_SAMPLER_ARG") {
            None => 1.0,
            Some(a) => match a.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => r,
                _ => {
                    return Err(bad(
                        "OTEL_TRACES_SAMPLER_ARG",
                        format!("`{a}` is not a ratio between 0 and 1"),
                    ))
                }
            },
        };
        let sampling = match var("OTEL_TRACES_SAMPLER").as_deref() {
            None | Some("parentbased_always_on") => Sampling::ParentBasedAlwaysOn,
            Some("always_on") => Sampling::AlwaysOn,
            Some("always_off") => Sampling::AlwaysOff,
            Some("traceidratio") => Sampling::Ratio(ratio),
            Some("parentbased_always_off") => Sampling::ParentBasedAlwaysOff,
            Some("parentbased_traceidratio") => Sampling::ParentBasedRatio(ratio),
            Some(other) => {
                return Err(bad(
                    "OTEL_TRACES_SAMPLER",
                    format!(
                        "`{other}` is not a sampler Sluice has: give always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"
                    ),
                ))
            }
        };
        let count = |name: &'static str, default: u64, max: u64, least: u64| match var(name) {
            None => Ok(default),
            Some(v) => match v.parse::<u64>() {
                Ok(n) if (least..=max).contains(&n) => Ok(n),
                _ => Err(bad(
                    name,
                    format!("`{v}` is not a whole number from {least} to {max}"),
                )),
            },
        };
        let org_spans_per_second = count(
            "SLUICE_TRACES_ORG_SPANS_PER_SECOND",
            DEFAULT_ORG_SPANS_PER_SECOND.into(),
            MAX_ORG_SPANS_PER_SECOND.into(),
            0,
        )? as u32;
        let max_queue_size = count(
            "OTEL_BSP_MAX_QUEUE_SIZE",
            DEFAULT_QUEUE_SIZE as u64,
            MAX_QUEUE_SIZE as u64,
            1,
        )? as usize;
        let named = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
                a.split(',')
                    .any(|kv| kv.split('=').next().map(str::trim) == Some("service.name"))
            });
        Ok(Some(Settings {
            protocol,
            endpoint,
            sampling,
            default_service_name: !named,
            org_spans_per_second,
            max_queue_size,
        }))
    }
}

/// The installed exporter, flushed by [`Traces::shutdown`].
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Sends what is still queued and stops the exporter.
    pub async fn shutdown(self) {
        let provider = self.provider;
        // The SDK waits for its export task by blocking: not on a runtime thread.
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

/// Installs the exporter the environment asks for, if any. Must run inside the Tokio
/// runtime, which then carries the exports. A second install keeps the first tracer.
pub fn install() -> Result<Option<Traces>, TelemetryError> {
    match Settings::from_env(&|k| std::env::var(k).ok())? {
        Some(settings) => install_with(&settings).map(Some),
        None => Ok(None),
    }
}

fn install_with(s: &Settings) -> Result<Traces, TelemetryError> {
    use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithTonicConfig};
    let failed = |source| TelemetryError::Exporter {
        endpoint: s.endpoint.clone(),
        source,
    };
    let exporter = match s.protocol {
        Protocol::Grpc => {
            let mut b = SpanExporter::builder()
                .with_tonic()
                .with_endpoint(s.endpoint.clone());
            if s.endpoint.starts_with("https:") {
                let tls = opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                    .with_native_roots();
                b = b.with_tls_config(tls);
            }
            b.build()
        }
        Protocol::HttpProtobuf | Protocol::HttpJson => SpanExporter::builder()
            .with_http()
            .with_endpoint(s.endpoint.clone())
            .with_protocol(if s.protocol == Protocol::HttpJson {
                opentelemetry_otlp::Protocol::HttpJson
            } else {
                opentelemetry_otlp::Protocol::HttpBinary
            })
            .build(),
    }
    .map_err(failed)?;
    // The queue the SDK keeps is bounded by the same size, so it never refuses a span:
    // the count here is where a span is dropped, and counted.
    let queued = Arc::new(AtomicUsize::new(0));
    let batch = opentelemetry_sdk::trace::BatchConfigBuilder::default()
        .with_max_queue_size(s.max_queue_size)
        .build();
    let processor = Bounded {
        inner:
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                Counted {
                    inner: exporter,
                    queued: queued.clone(),
                },
                opentelemetry_sdk::runtime::Tokio,
            )
            .with_batch_config(batch)
            .build(),
        queued,
        max: s.max_queue_size,
    };
    let mut resource = opentelemetry_sdk::Resource::builder();
    if s.default_service_name {
        resource = resource.with_service_name("sluice");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(s.sampling.sampler())
        .with_resource(resource.build())
        .build();
    let _ = ORG_RATE.set(s.org_spans_per_second);
    let _ = TRACER.set(provider.tracer("sluice"));
    tracing::info!(endpoint = %s.endpoint, protocol = ?s.protocol, sampling = ?s.sampling, org_spans_per_second = s.org_spans_per_second, max_queue_size = s.max_queue_size, "Exporting traces.");
    Ok(Traces { provider })
}

/// The span processor in front of the SDK's batch processor: it keeps count of the spans
/// queued for export (taken off by [`Counted`] as they are exported) and drops, and
/// counts, a span that would take the queue past `max`.
#[derive(Debug)]
struct Bounded<P> {
    inner: P,
    queued: Arc<AtomicUsize>,
    max: usize,
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let room = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            });
        if room.is_err() {
            dropped("queue_full", 1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn shutdown(&self) -> OTelSdkResult {
        self.inner.shutdown()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter behind [`Bounded`]: spans handed to it have left the queue.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let n = batch.len();
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                Some(q.saturating_sub(n))
            });
        self.inner.export(batch)
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn shutdown(&mut self) -> OTelSdkResult {
        self.inner.shutdown()
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Reads a trace context from HTTP headers.
struct HeaderReader<'a>(&'a http::HeaderMap);

impl Extractor for HeaderReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes a trace context into HTTP headers.
struct HeaderWriter<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        // A span without state has none to send (not an empty header).
        if value.is_empty() {
            self.0.remove(key);
            return;
        }
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Reads a trace context from a message's metadata.
struct MetaReader(Option<String>, Option<String>);

impl Extractor for MetaReader {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => self.0.as_deref(),
            TRACESTATE => self.1.as_deref(),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

/// Writes a trace context into a message's metadata.
struct MetaWriter<'a>(&'a mut Message);

impl Injector for MetaWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        if value.is_empty() {
            self.0.metadata_mut().remove(key);
        } else {
            self.0.set_meta(key, value);
        }
    }
}

/// A trace context written out once, to be copied into many messages.
#[derive(Default)]
struct ContextText {
    parent: Option<String>,
    state: Option<String>,
}

impl Injector for ContextText {
    fn set(&mut self, key: &str, value: String) {
        let value = (!value.is_empty()).then_some(value);
        match key {
            TRACEPARENT => self.parent = value,
            TRACESTATE => self.state = value,
            _ => {}
        }
    }
}

impl ContextText {
    fn write_into(&self, m: &mut Message) {
        for (key, value) in [(TRACEPARENT, &self.parent), (TRACESTATE, &self.state)] {
            match value {
                Some(v) => m.set_meta(key, v.as_str()),
                None => {
                    m.metadata_mut().remove(key);
                }
            }
        }
    }
}

/// The context a message's metadata carries: its span's, when it has one.
fn message_parent(m: &Message) -> Context {
    let reader = MetaReader(m.meta_str(TRACEPARENT), m.meta_str(TRACESTATE));
    TraceContextPropagator::new().extract(&reader)
}

/// Writes `cx`'s span into `m`'s metadata as its trace context; a `tracestate` left from
/// before is dropped when the span has none.
fn set_message_context(m: &mut Message, cx: &Context) {
    TraceContextPropagator::new().inject_context(cx, &mut MetaWriter(m));
}

/// A span under way; ended when dropped, with the time of the drop.
pub struct Span {
    cx: Context,
}

impl Span {
    fn start(
        tracer: &SdkTracer,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: &Context,
        attributes: Vec<KeyValue>,
        start: Option<SystemTime>,
    ) -> Span {
        let mut builder = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes);
        if let Some(start) = start {
            builder = builder.with_start_time(start);
        }
        let span = tracer.build_with_context(builder, parent);
        Span {
            cx: parent.with_span(span),
        }
    }

    /// The span's trace id, as 32 hex digits.
    pub fn trace_id(&self) -> String {
        self.cx.span().span_context().trace_id().to_string()
    }

    /// Marks the span failed, with `message`.
    pub fn fail(&self, message: impl Into<String>) {
        self.cx.span().set_status(Status::error(message.into()));
    }

    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.cx.span().set_attribute(KeyValue::new(key, value));
    }

    /// Writes the span's trace context into `headers` (`traceparent`, `tracestate`).
    pub fn inject(&self, headers: &mut http::HeaderMap) {
        TraceContextPropagator::new().inject_context(&self.cx, &mut HeaderWriter(headers));
    }

    /// A child of this span (a `&'static str` name costs no allocation).
    pub fn child(&self, name: impl Into<Cow<'static, str>>, kind: SpanKind) -> Option<Span> {
        let tracer = tracer()?;
        Some(Span::start(
            tracer,
            name.into(),
            kind,
            &self.cx,
            Vec::new(),
            None,
        ))
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// The server span of a request through the gateway, child of the trace context the
/// client sent; `None` when traces are off.
pub fn request_span(
    headers: &http::HeaderMap,
    method: &str,
    api_id: &str,
    path: &str,
) -> Option<Span> {
    let tracer = tracer()?;
    let parent = TraceContextPropagator::new().extract(&HeaderReader(headers));
    Some(Span::start(
        tracer,
        format!("{method} {api_id}"),
        SpanKind::Server,
        &parent,
        vec![
            KeyValue::new("http.request.method", method.to_owned()),
            KeyValue::new("url.path", path.to_owned()),
            KeyValue::new("sluice.api_id", api_id.to_owned()),
        ],
        None,
    ))
}

/// Starts a span for each message of a batch an input read: its parent is the trace
/// context the message came with (the producer's, through a broker's headers or a
/// request's), and the message carries the new span's context on. Past its
/// organisation's span rate, a posted stream's batch gets one span for all its messages
/// (child of the first one's context), or none when not even that one is left.
pub fn received(batch: &mut [Message], stream: &str, input: &str) {
    let Some(tracer) = tracer() else {
        return;
    };
    let n = batch.len() as u64;
    // A receive span; `messages` when it stands for a whole batch.
    let receive = |parent: &Context, messages: Option<u64>| {
        let mut attributes = vec![
            KeyValue::new("sluice.stream", stream.to_owned()),
            KeyValue::new("sluice.component", input.to_owned()),
        ];
        if let Some(n) = messages {
            attributes.push(KeyValue::new("sluice.messages", n as i64));
        }
        Span::start(
            tracer,
            format!("receive {input}"),
            SpanKind::Consumer,
            parent,
            attributes,
            None,
        )
    };
    if !allow(n) {
        if !allow(1) {
            dropped("rate_limited", n);
            return;
        }
        dropped("rate_limited", n.saturating_sub(1));
        let parent = batch.first().map(message_parent).unwrap_or_default();
        let span = receive(&parent, Some(n));
        // The context is written out once and copied into each message.
        let mut carrier = ContextText::default();
        TraceContextPropagator::new().inject_context(&span.cx, &mut carrier);
        for m in batch.iter_mut() {
            carrier.write_into(m);
        }
        return;
    }
    for m in batch.iter_mut() {
        let parent = message_parent(m);
        let span = receive(&parent, None);
        set_message_context(m, &span.cx);
    }
}

/// The distinct trace contexts of a batch's messages that are being recorded: one span
/// per trace is made for a step over the batch, rather than one per message.
pub fn batch_parents(batch: &[Message]) -> Vec<Context> {
    if !enabled() {
        return Vec::new();
    }
    let mut parents: Vec<Context> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for m in batch {
        if !m.metadata().contains_key(TRACEPARENT) {
            continue;
        }
        let cx = message_parent(m);
        let sc = cx.span().span_context().clone();
        if sc.is_valid() && sc.is_sampled() && seen.insert(sc.span_id()) {
            parents.push(cx);
        }
    }
    parents
}

/// Records that a processor ran over messages of the traces `parents`, from `start` until
/// now (for a posted stream, as many of them as its organisation's span rate allows).
pub fn processed(parents: &[Context], processor: &str, start: SystemTime, failed: usize) {
    let Some(tracer) = tracer() else {
        return;
    };
    for (i, parent) in parents.iter().enumerate() {
        if !allow(1) {
            dropped("rate_limited", (parents.len() - i) as u64);
            return;
        }
        let span = Span::start(
            tracer,
            format!("process {processor}"),
            SpanKind::Internal,
            parent,
            vec![KeyValue::new("sluice.component", processor.to_owned())],
            Some(start),
        );
        if failed > 0 {
            span.fail(format!("{failed} messages failed"));
        }
    }
}

/// The spans of one write to an output, one per trace among its messages; each message
/// carries the span of its trace on to the broker or client, so that a consumer's span
/// is a child of the send.
pub struct Sending(Vec<Span>);

impl Sending {
    /// For a posted stream, as many spans as its organisation's span rate allows: a
    /// message of a trace past it goes out with the context it came with.
    pub fn start(batch: &mut [Message], stream: &str, output: &str) -> Sending {
        let Some(tracer) = tracer() else {
            return Sending(Vec::new());
        };
        let mut spans: Vec<Span> = Vec::new();
        // Each parent span seen, with the index of its send span (`None`: not recorded).
        let mut seen: HashMap<opentelemetry::trace::SpanId, Option<usize>> = HashMap::new();
        for m in batch.iter_mut() {
            if !m.metadata().contains_key(TRACEPARENT) {
                continue;
            }
            let parent = message_parent(m);
            let sc = parent.span().span_context().clone();
            if !sc.is_valid() {
                continue;
            }
            let at = match seen.get(&sc.span_id()) {
                Some(at) => *at,
                None if !allow(1) => {
                    dropped("rate_limited", 1);
                    seen.insert(sc.span_id(), None);
                    None
                }
                None => {
                    let span = Span::start(
                        tracer,
                        format!("send {output}"),
                        SpanKind::Producer,
                        &parent,
                        vec![
                            KeyValue::new("sluice.stream", stream.to_owned()),
                            KeyValue::new("sluice.component", output.to_owned()),
                        ],
                        None,
                    );
                    spans.push(span);
                    seen.insert(sc.span_id(), Some(spans.len() - 1));
                    Some(spans.len() - 1)
                }
            };
            if let Some(at) = at {
                set_message_context(m, &spans[at].cx);
            }
        }
        Sending(spans)
    }

    /// Ends the spans with the write's result.
    pub fn end(self, error: Option<&str>) {
        if let Some(e) = error {
            for span in &self.0 {
                span.fail(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn off_unless_an_exporter_or_endpoint_is_named() {
        assert_eq!(Settings::from_env(&env(&[])).unwrap(), None);
        assert_eq!(
            Settings::from_env(&env(&[("OTEL_SERVICE_NAME", "x")])).unwrap(),
            None
        );
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")];
        assert!(Settings::from_env(&env(&on)).unwrap().is_some());
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                Settings::from_env(&env(&[on[0], off])).unwrap(),
                None,
                "{off:?}"
            );
        }
    }

    #[test]
    fn endpoints_follow_the_protocol() {
        let s = Settings::from_env(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]))
            .unwrap()
            .unwrap();
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.endpoint, "http://c:4318/v1/traces");
        let s = Settings::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.protocol, s.endpoint.as_str()),
            (Protocol::Grpc, "http://c:4317")
        );
        let s = Settings::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t/x"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.protocol, s.endpoint.as_str()),
            (Protocol::HttpJson, "https://t/x")
        );
        let s = Settings::from_env(&env(&[("OTEL_TRACES_EXPORTER", "otlp")]))
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://localhost:4318/v1/traces");
        assert!(s.default_service_name);
    }

    #[test]
    fn samplers_and_their_ratio() {
        let base = ("OTEL_TRACES_EXPORTER", "otlp");
        let read = |pairs: &[(&str, &str)]| {
            let mut all = vec![base];
            all.extend_from_slice(pairs);
            Settings::from_env(&env(&all)).map(|s| s.unwrap().sampling)
        };
        assert_eq!(read(&[]).unwrap(), Sampling::ParentBasedAlwaysOn);
        assert_eq!(
            read(&[
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25")
            ])
            .unwrap(),
            Sampling::ParentBasedRatio(0.25)
        );
        assert_eq!(
            read(&[("OTEL_TRACES_SAMPLER", "traceidratio")]).unwrap(),
            Sampling::Ratio(1.0)
        );
        assert_eq!(
            read(&[("OTEL_TRACES_SAMPLER", "always_off")]).unwrap(),
            Sampling::AlwaysOff
        );
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let base = ("OTEL_TRACES_EXPORTER", "otlp");
        for (pair, var) in [
            (
                ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
                "OTEL_TRACES_SAMPLER",
            ),
            (
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift"),
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "file:///etc/passwd"),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector"),
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
            (("OTEL_SDK_DISABLED", "maybe"), "OTEL_SDK_DISABLED"),
        ] {
            let e = Settings::from_env(&env(&[base, pair]))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(var), "{e}");
        }
        let e = Settings::from_env(&env(&[("OTEL_TRACES_EXPORTER", "zipkin")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`zipkin`"), "{e}");
    }

    #[test]
    fn a_named_service_is_kept() {
        let s = Settings::from_env(&env(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment=x, service.name=edge",
            ),
        ]))
        .unwrap()
        .unwrap();
        assert!(!s.default_service_name);
    }

    #[test]
    fn an_organisation_s_budget_refills_at_its_rate_and_never_past_a_second_s_worth() {
        let budget = SpanBudget::new(100);
        let t0 = *budget.state.lock();
        let at = |ms: u64| t0.1 + Duration::from_millis(ms);
        // A full second's worth at first, all or nothing.
        assert!(!budget.try_take_at(101, at(0)));
        assert!(budget.try_take_at(60, at(0)));
        assert!(budget.try_take_at(40, at(0)));
        assert!(!budget.try_take_at(1, at(0)));
        // A tenth of a second later, ten more.
        assert!(!budget.try_take_at(11, at(100)));
        assert!(budget.try_take_at(10, at(100)));
        assert!(!budget.try_take_at(1, at(100)));
        // Idle for a minute: still no more than a second's worth.
        assert!(!budget.try_take_at(101, at(60_100)));
        assert!(budget.try_take_at(100, at(60_100)));
        // Time that seems to go back gives nothing.
        assert!(!budget.try_take_at(1, at(50_000)));
        // A rate of nought records nothing.
        assert!(!SpanBudget::new(0).try_take(1));
    }

    #[test]
    fn with_traces_off_there_is_no_budget() {
        // Traces are off in unit tests: no budget, and nothing is held to one.
        assert!(org_budget("o1").is_none());
        assert!(allow(1_000_000));
    }

    #[tokio::test]
    async fn within_a_budget_spans_are_counted_against_it() {
        let budget = Arc::new(SpanBudget::new(3));
        let took = within(Some(budget.clone()), async {
            [allow(2), allow(2), allow(1), allow(1)]
        })
        .await;
        assert_eq!(took, [true, false, true, false]);
        assert!(within(None, async { allow(1_000) }).await);
    }

    fn span(sampled: bool) -> SpanData {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes([1; 16]),
                SpanId::from_bytes([2; 8]),
                flags,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "x".into(),
            start_time: SystemTime::now(),
            end_time: SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: opentelemetry::InstrumentationScope::builder("test").build(),
        }
    }

    /// Counts the spans it is handed.
    #[derive(Debug, Default)]
    struct Taken(AtomicUsize);

    impl SpanProcessor for Taken {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &Context) {}
        fn on_end(&self, _: SpanData) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Nowhere;

    impl SpanExporter for Nowhere {
        fn export(&self, _: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
            std::future::ready(Ok(()))
        }
    }

    #[test]
    fn a_full_export_queue_drops_spans_until_an_export_takes_some() {
        let queued = Arc::new(AtomicUsize::new(0));
        let bounded = Bounded {
            inner: Taken::default(),
            queued: queued.clone(),
            max: 3,
        };
        for _ in 0..5 {
            bounded.on_end(span(true));
        }
        // Spans not sampled are not queued at all.
        bounded.on_end(span(false));
        assert_eq!(bounded.inner.0.load(Ordering::Relaxed), 3);
        assert_eq!(queued.load(Ordering::Relaxed), 3);
        let exporter = Counted {
            inner: Nowhere,
            queued: queued.clone(),
        };
        drop(exporter.export(vec![span(true), span(true)]));
        assert_eq!(queued.load(Ordering::Relaxed), 1);
        for _ in 0..3 {
            bounded.on_end(span(true));
        }
        assert_eq!(bounded.inner.0.load(Ordering::Relaxed), 5);
        // An export of more than was counted (a flush of what the SDK held) leaves none.
        drop(exporter.export(vec![span(true); 10]));
        assert_eq!(queued.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_span_rate_and_queue_size_are_read_and_bounded() {
        let base = ("OTEL_TRACES_EXPORTER", "otlp");
        let s = Settings::from_env(&env(&[base])).unwrap().unwrap();
        assert_eq!(
            (s.org_spans_per_second, s.max_queue_size),
            (DEFAULT_ORG_SPANS_PER_SECOND, DEFAULT_QUEUE_SIZE)
        );
        let s = Settings::from_env(&env(&[
            base,
            ("SLUICE_TRACES_ORG_SPANS_PER_SECOND", "0"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "512"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((s.org_spans_per_second, s.max_queue_size), (0, 512));
        for (var, value) in [
            ("SLUICE_TRACES_ORG_SPANS_PER_SECOND", "-1"),
            ("SLUICE_TRACES_ORG_SPANS_PER_SECOND", "lots"),
            ("SLUICE_TRACES_ORG_SPANS_PER_SECOND", "1000001"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100000000"),
        ] {
            let e = Settings::from_env(&env(&[base, (var, value)]))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(var), "{e}");
        }
    }

    #[test]
    fn off_nothing_is_touched() {
        let mut batch = vec![Message::new("x").with_meta(TRACEPARENT, "not a context")];
        received(&mut batch, "s", "in");
        let sending = Sending::start(&mut batch, "s", "out");
        sending.end(None);
        assert!(batch_parents(&batch).is_empty());
        assert_eq!(
            batch[0].meta_str(TRACEPARENT).as_deref(),
            Some("not a context")
        );
    }
}
