//! `log`: writes a log line for each message and passes it on unchanged.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::logging::LogLevel;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// Level of the log line: error, warn, info, debug or trace.
    #[serde(default)]
    pub level: LogLevel,
    /// The text of the log line (interpolated per message).
    #[serde(default)]
    pub message: Option<Interp>,
    /// Also log the message's payload and metadata as fields.
    #[serde(default)]
    pub include_content: bool,
}

impl Spec for LogConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "log",
        kind: Kind::Processor,
        summary: "Logs each message and passes it on unchanged.",
        examples: &[Example {
            title: "Log every message",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - log: {level: info, message: received, include_content: true}\noutput:\n  drop: {}\n",
        }],
    };
}

impl BuildProcessor for LogConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.level == LogLevel::Off {
            return Err(cx.error("`level: off` would log nothing: remove the processor instead"));
        }
        Ok(Box::new(Log(self.clone())))
    }
}

pub struct Log(LogConfig);

#[async_trait]
impl Processor for Log {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        for (i, msg) in batch.iter().enumerate() {
            let text = match &self.0.message {
                Some(m) => m
                    .render(&batch, i)
                    .unwrap_or_else(|e| format!("{} (interpolation failed: {e})", m.source())),
                None => String::new(),
            };
            let (content, meta) = if self.0.include_content {
                (
                    String::from_utf8_lossy(msg.payload()).into_owned(),
                    serde_json::to_string(msg.metadata()).unwrap_or_default(),
                )
            } else {
                (String::new(), String::new())
            };
            let error = msg.error().unwrap_or_default();
            // A message that came over HTTP names its request and trace: the line joins
            // the gateway's access line and the client's.
            let text_meta = |key: &str| msg.meta(key).map(|v| v.to_text()).unwrap_or_default();
            let (request, traceparent) = (text_meta("x-request-id"), text_meta("traceparent"));
            let request_id = crate::http::trace::request_id_of(&request).unwrap_or_default();
            let trace_id = crate::http::trace::trace_id_of(&traceparent).unwrap_or_default();
            macro_rules! emit {
                ($m:ident) => {
                    tracing::$m!(target: "sluice::log", content = %content, metadata = %meta, error = %error, request_id, trace_id, "{text}")
                };
            }
            match self.0.level {
                LogLevel::Error => emit!(error),
                LogLevel::Warn => emit!(warn),
                LogLevel::Info => emit!(info),
                LogLevel::Debug => emit!(debug),
                LogLevel::Trace => emit!(trace),
                LogLevel::Off => {}
            }
        }
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test]
    async fn passes_messages_unchanged() {
        let cfg: LogConfig =
            serde_yaml::from_str("{message: 'hi ${! content() }', include_content: true}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        let p = cfg.build(&cx).unwrap();
        let out = p.process(vec![Message::new("a"), Message::new("b")]).await;
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][1].payload()[..], b"b");
    }

    /// A writer that keeps what is written, for the test to read.
    #[derive(Clone, Default)]
    struct Kept(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Kept {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn lines_name_the_request_and_the_trace_of_a_message_from_http() {
        let kept = Kept::default();
        let writer = kept.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let cfg: LogConfig = serde_yaml::from_str("{message: seen}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        let p = cfg.build(&cx).unwrap();
        let traced = Message::new("a")
            .with_meta("x-request-id", "req-7")
            .with_meta(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            );
        p.process(vec![traced, Message::new("b")]).await;
        let text = String::from_utf8(kept.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["fields"]["request_id"], "req-7", "{text}");
        assert_eq!(
            lines[0]["fields"]["trace_id"],
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(lines[1]["fields"]["request_id"], "", "{text}");
    }

    #[test]
    fn level_off_is_refused() {
        let cfg: LogConfig = serde_yaml::from_str("{level: off}").unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        assert!(cfg.build(&cx).is_err());
    }
}
