//! Traces over OpenTelemetry. Off unless the standard `OTEL_*` variables ask for an OTLP
//! exporter; then each request through the gateway and each message through a stream is
//! a span, exported in batches over OTLP (gRPC or HTTP), and the W3C trace context handed
//! to upstreams and written into broker messages is that of Sluice's own spans, so that
//! a consumer elsewhere continues the trace.
//!
//! Off, every entry point here costs one atomic load and changes nothing: a client's
//! `traceparent` then passes through untouched.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::message::Message;

/// The metadata keys (and header names) of the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The tracer, when traces are on.
fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
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
    let processor =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    let mut resource = opentelemetry_sdk::Resource::builder();
    if s.default_service_name {
        resource = resource.with_service_name("sluice");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(s.sampling.sampler())
        .with_resource(resource.build())
        .build();
    let _ = TRACER.set(provider.tracer("sluice"));
    tracing::info!(endpoint = %s.endpoint, protocol = ?s.protocol, sampling = ?s.sampling, "Exporting traces.");
    Ok(Traces { provider })
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
/// request's), and the message carries the new span's context on.
pub fn received(batch: &mut [Message], stream: &str, input: &str) {
    let Some(tracer) = tracer() else {
        return;
    };
    for m in batch.iter_mut() {
        let parent = message_parent(m);
        let span = Span::start(
            tracer,
            format!("receive {input}"),
            SpanKind::Consumer,
            &parent,
            vec![
                KeyValue::new("sluice.stream", stream.to_owned()),
                KeyValue::new("sluice.component", input.to_owned()),
            ],
            None,
        );
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
    for m in batch {
        let cx = message_parent(m);
        let sc = cx.span().span_context().clone();
        if sc.is_valid()
            && sc.is_sampled()
            && !parents
                .iter()
                .any(|p| p.span().span_context().span_id() == sc.span_id())
        {
            parents.push(cx);
        }
    }
    parents
}

/// Records that a processor ran over messages of the traces `parents`, from `start` until
/// now.
pub fn processed(parents: &[Context], processor: &str, start: SystemTime, failed: usize) {
    let Some(tracer) = tracer() else {
        return;
    };
    for parent in parents {
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
    pub fn start(batch: &mut [Message], stream: &str, output: &str) -> Sending {
        let Some(tracer) = tracer() else {
            return Sending(Vec::new());
        };
        let mut spans: Vec<(opentelemetry::trace::SpanId, Span)> = Vec::new();
        for m in batch.iter_mut() {
            let parent = message_parent(m);
            let sc = parent.span().span_context().clone();
            if !sc.is_valid() {
                continue;
            }
            let at = match spans.iter().position(|(id, _)| *id == sc.span_id()) {
                Some(at) => at,
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
                    spans.push((sc.span_id(), span));
                    spans.len() - 1
                }
            };
            set_message_context(m, &spans[at].1.cx);
        }
        Sending(spans.into_iter().map(|(_, s)| s).collect())
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
