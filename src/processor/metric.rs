//! `metric`: updates a metric of the user's own for each message and passes the message
//! on unchanged. The metric is exported with Sluice's own on `/metrics` (Prometheus).
//!
//! `counter` adds one per message; `counter_by` adds `value`; `gauge` sets `value`;
//! `timing` records `value`, in nanoseconds, into a histogram in seconds. `labels` and
//! `value` are interpolated per message. A value that is not a number for its type skips
//! that message's update (logged), and never marks the message.

use std::collections::BTreeMap;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::message::Batch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MetricType {
    Counter,
    CounterBy,
    Gauge,
    Timing,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricConfig {
    /// `counter`, `counter_by`, `gauge` or `timing`.
    #[serde(rename = "type")]
    pub kind: MetricType,
    /// The metric's name, as exported.
    pub name: String,
    /// Labels of the metric; values are interpolated per message.
    #[serde(default)]
    pub labels: BTreeMap<String, Interp>,
    /// The number to add, set or record (interpolated); unused by `counter`.
    #[serde(default)]
    pub value: Option<Interp>,
}

impl Spec for MetricConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "metric",
        kind: Kind::Processor,
        summary: "Updates a custom metric (counter, gauge, timing) from each message.",
        examples: &[Example {
            title: "Count orders by country",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - metric:\n        type: counter\n        name: orders_total\n        labels:\n          country: ${! this.country }\noutput:\n  drop: {}\n",
        }],
    };
}

/// Prometheus accepts `[a-zA-Z_:][a-zA-Z0-9_:]*` for names and the same without `:` for
/// label names.
fn valid_name(name: &str, colon: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

impl BuildProcessor for MetricConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if !valid_name(&self.name, true) {
            return Err(cx.error(format!(
                "name: `{}` is not a metric name (letters, digits, `_` and `:`, not starting with a digit)",
                self.name
            )));
        }
        if self.name.starts_with("sluice_") {
            return Err(cx.error(format!(
                "name: `{}`: names starting with `sluice_` are Sluice's own",
                self.name
            )));
        }
        for key in self.labels.keys() {
            if !valid_name(key, false) || key.starts_with("__") {
                return Err(cx.error(format!(
                    "labels: `{key}` is not a label name (letters, digits and `_`, not starting with a digit or `__`)"
                )));
            }
        }
        let value = match (self.kind, &self.value) {
            (MetricType::Counter, _) => None,
            (_, Some(v)) if !v.source().trim().is_empty() => Some(v.clone()),
            (kind, _) => {
                return Err(cx.error(format!("value is required for type `{}`", kind.as_str())))
            }
        };
        Ok(Box::new(Metric {
            kind: self.kind,
            name: self.name.clone(),
            labels: self.labels.clone().into_iter().collect(),
            value,
        }))
    }
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::CounterBy => "counter_by",
            MetricType::Gauge => "gauge",
            MetricType::Timing => "timing",
        }
    }
}

pub struct Metric {
    kind: MetricType,
    name: String,
    labels: Vec<(String, Interp)>,
    value: Option<Interp>,
}

impl Metric {
    /// Updates the metric once per message of `batch`.
    fn record(&self, batch: &Batch) {
        for i in 0..batch.len() {
            if let Err(e) = self.record_one(batch, i) {
                tracing::warn!(metric = %self.name, "metric not updated: {e}");
            }
        }
    }

    fn record_one(&self, batch: &Batch, i: usize) -> Result<(), String> {
        let mut labels = Vec::with_capacity(self.labels.len());
        for (k, v) in &self.labels {
            let v = v
                .render(batch, i)
                .map_err(|e| format!("label `{k}`: {e}"))?;
            labels.push(metrics::Label::new(k.clone(), v));
        }
        let value = match &self.value {
            Some(v) => v.render(batch, i).map_err(|e| format!("value: {e}"))?,
            None => String::new(),
        };
        let value = value.trim();
        let name = self.name.clone();
        match self.kind {
            MetricType::Counter => metrics::counter!(name, labels).increment(1),
            MetricType::CounterBy => {
                let n: u64 = value
                    .parse()
                    .map_err(|_| format!("value `{value}` is not a positive whole number"))?;
                metrics::counter!(name, labels).increment(n)
            }
            MetricType::Gauge => {
                let n: f64 = value
                    .parse()
                    .map_err(|_| format!("value `{value}` is not a number"))?;
                metrics::gauge!(name, labels).set(n)
            }
            MetricType::Timing => {
                let n: f64 = value
                    .parse()
                    .map_err(|_| format!("value `{value}` is not a number of nanoseconds"))?;
                metrics::histogram!(name, labels).record(n / 1e9)
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Processor for Metric {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        self.record(&batch);
        super::nonempty(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use metrics_exporter_prometheus::PrometheusBuilder;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default()).child("m")
    }

    fn metric(yaml: &str) -> Metric {
        let cfg: MetricConfig = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        cfg.build(&cx()).unwrap_or_else(|e| panic!("{e}"));
        // The runtime type, to record under a recorder of the test's own.
        Metric {
            kind: cfg.kind,
            name: cfg.name.clone(),
            labels: cfg.labels.clone().into_iter().collect(),
            value: cfg.value.clone(),
        }
    }

    /// What Prometheus would scrape after `m` saw `batch`.
    fn scrape(m: &Metric, batch: &Batch) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || m.record(batch));
        handle.render()
    }

    fn batch(docs: &[&str]) -> Batch {
        docs.iter().map(|d| Message::new(d.to_string())).collect()
    }

    #[test]
    fn counters_count_per_label_set() {
        let m =
            metric("type: counter\nname: count_widgets\nlabels:\n  topic: ${! meta(\"topic\") }");
        let b = vec![
            Message::new("a").with_meta("topic", "x"),
            Message::new("b").with_meta("topic", "x"),
            Message::new("c").with_meta("topic", "y"),
        ];
        let text = scrape(&m, &b);
        assert!(text.contains(r#"count_widgets{topic="x"} 2"#), "{text}");
        assert!(text.contains(r#"count_widgets{topic="y"} 1"#), "{text}");
    }

    #[test]
    fn counter_by_adds_the_value_and_skips_bad_ones() {
        let m = metric("type: counter_by\nname: bytes_seen\nvalue: ${! this.size }");
        let text = scrape(
            &m,
            &batch(&[
                r#"{"size":10}"#,
                r#"{"size":5}"#,
                r#"{"size":-3}"#,
                r#"{"size":"x"}"#,
            ]),
        );
        assert!(text.contains("bytes_seen 15"), "{text}");
    }

    #[test]
    fn gauges_keep_the_last_value() {
        let m = metric("type: gauge\nname: queue_depth\nvalue: ${! this.depth }");
        let text = scrape(&m, &batch(&[r#"{"depth":7}"#, r#"{"depth":2.5}"#]));
        assert!(text.contains("queue_depth 2.5"), "{text}");
    }

    #[test]
    fn timings_are_histograms_in_seconds() {
        let m = metric("type: timing\nname: work_time\nvalue: ${! this.ns }");
        let text = scrape(&m, &batch(&[r#"{"ns":1500000000}"#, r#"{"ns":500000000}"#]));
        assert!(text.contains("work_time_sum 2"), "{text}");
        assert!(text.contains("work_time_count 2"), "{text}");
    }

    #[tokio::test]
    async fn messages_pass_unchanged() {
        let cfg: MetricConfig = serde_yaml::from_str("{type: counter, name: seen}").unwrap();
        let p = cfg.build(&cx()).unwrap();
        let out = p.process(batch(&["a", "b"])).await;
        assert_eq!(out[0].len(), 2);
        assert_eq!(&out[0][1].payload()[..], b"b");
        assert!(out[0][1].error().is_none());
    }

    #[test]
    fn bad_configs_are_refused() {
        for (yaml, said) in [
            (
                "{type: gauge, name: g}",
                "value is required for type `gauge`",
            ),
            ("{type: counter, name: '9lives'}", "not a metric name"),
            ("{type: counter, name: sluice_x}", "Sluice's own"),
            (
                "{type: counter, name: c, labels: {'bad-key': x}}",
                "not a label name",
            ),
        ] {
            let cfg: MetricConfig = serde_yaml::from_str(yaml).unwrap();
            let e = cfg.build(&cx()).err().unwrap();
            assert!(e.message.contains(said), "{yaml}: {e}");
        }
        assert!(serde_yaml::from_str::<MetricConfig>("{type: summary, name: s}").is_err());
    }
}
