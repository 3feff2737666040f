//! The largest value every size, count, buffer and interval field of a stream may take.
//!
//! One table for every component, checked on the written document before it is
//! deserialized, so each refusal carries the field's path, line and column. The caps
//! hold for every stream, the operator's files included: each is far above what a
//! working pipeline needs, and far below what would let one stream take the host's
//! memory or hold work for days. A field is named by its key and the key of the mapping
//! it sits in (the component's type key, or `batching`, `replay_buffer`, ...); `*` is
//! any mapping.

use std::fmt::Write as _;
use std::time::Duration;

use crate::config::yaml::{Document, Node, NodeKind};
use crate::config::{de, ConfigError};

/// The most a field may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// A count of messages, items, attempts or workers.
    Count(u64),
    /// A size in bytes.
    Bytes(u64),
    /// A duration (written `500ms`, `10s`, `1h`).
    Time(Duration),
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// `(mapping, field, cap)`, `*` standing for any mapping.
pub const BOUNDS: &[(&str, &str, Cap)] = &[
    // What one read or one batch holds in memory.
    ("generate", "batch_size", Cap::Count(10_000)),
    ("generate", "interval", Cap::Time(DAY)),
    ("*", "max_batch", Cap::Count(10_000)),
    ("batching", "count", Cap::Count(100_000)),
    ("batching", "byte_size", Cap::Bytes(64 * MIB)),
    ("batching", "period", Cap::Time(HOUR)),
    ("split", "size", Cap::Count(100_000)),
    ("split", "byte_size", Cap::Bytes(64 * MIB)),
    ("http_server", "max_body_bytes", Cap::Bytes(64 * MIB)),
    ("mqtt", "max_packet_bytes", Cap::Bytes(64 * MIB)),
    ("*", "max_buffer", Cap::Bytes(64 * MIB)),
    // Queues, buffers and concurrency.
    ("*", "channel_capacity", Cap::Count(1024)),
    ("pipeline", "threads", Cap::Count(256)),
    ("*", "max_in_flight", Cap::Count(1024)),
    ("parallel", "cap", Cap::Count(1024)),
    ("replay_buffer", "size", Cap::Count(100_000)),
    ("replay_buffer", "max_age", Cap::Time(DAY)),
    ("kafka", "checkpoint_limit", Cap::Count(100_000)),
    ("kafka", "fetch_buffer_cap", Cap::Count(10_000)),
    ("redis_streams", "limit", Cap::Count(10_000)),
    ("amqp_1", "credit", Cap::Count(10_000)),
    ("nats_jetstream", "max_ack_pending", Cap::Count(100_000)),
    (
        "while",
        "max_loops",
        Cap::Count(crate::processor::while_::MAX_LOOPS as u64),
    ),
    // Caches and rate limits.
    (
        "memory",
        "max_entries",
        Cap::Count(crate::cache::memory::MAX_ENTRIES),
    ),
    ("memory", "shards", Cap::Count(1024)),
    (
        "*",
        "default_ttl",
        Cap::Time(Duration::from_secs(7 * 24 * 3600)),
    ),
    ("*", "compaction_interval", Cap::Time(DAY)),
    ("local", "count", Cap::Count(1_000_000_000)),
    ("local", "interval", Cap::Time(DAY)),
    ("redis", "count", Cap::Count(1_000_000_000)),
    ("redis", "interval", Cap::Time(DAY)),
    // Waits, timeouts and retries.
    ("*", "timeout", Cap::Time(HOUR)),
    ("*", "write_timeout", Cap::Time(HOUR)),
    ("*", "heartbeat", Cap::Time(HOUR)),
    ("*", "keepalive", Cap::Time(HOUR)),
    ("*", "rate_limit", Cap::Time(DAY)),
    ("sleep", "duration", Cap::Time(HOUR)),
    ("*", "retries", Cap::Count(100)),
    (
        "*",
        "max_retries",
        Cap::Count(crate::processor::retry::MAX_RETRIES as u64),
    ),
    ("*", "retry_period", Cap::Time(Duration::from_secs(10 * 60))),
    ("*", "max_retry_backoff", Cap::Time(HOUR)),
    (
        "*",
        "initial_interval",
        Cap::Time(Duration::from_secs(10 * 60)),
    ),
    ("*", "max_interval", Cap::Time(HOUR)),
    ("*", "max_elapsed_time", Cap::Time(DAY)),
    ("*", "nack_delay", Cap::Time(HOUR)),
    ("*", "nak_delay", Cap::Time(HOUR)),
    ("*", "ack_wait", Cap::Time(HOUR)),
    ("*", "commit_period", Cap::Time(HOUR)),
    ("*", "claim_idle_after", Cap::Time(DAY)),
];

/// The cap of `field` in the mapping under the key `parent`.
pub fn cap_of(parent: &str, field: &str) -> Option<Cap> {
    // A rule for this very mapping wins over one for any mapping.
    let exact = BOUNDS.iter().find(|(p, f, _)| *p == parent && *f == field);
    exact
        .or_else(|| BOUNDS.iter().find(|(p, f, _)| *p == "*" && *f == field))
        .map(|(_, _, cap)| *cap)
}

/// Every field in `node` (at `path` in `doc`, under the key `parent`) above its cap,
/// reported at its value. Values that are not numbers or durations are left to the
/// deserializer, which says what it expected.
pub fn check(doc: &Document, node: &Node, path: &str, parent: &str, errors: &mut Vec<ConfigError>) {
    match &node.kind {
        NodeKind::Map(entries) => {
            for (key, value) in entries {
                if let Some(k) = key.as_str() {
                    check_field(doc, parent, k, value, &de::join(path, k), errors);
                }
            }
        }
        NodeKind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                // Items of a list belong to the mapping the list is under.
                check(doc, item, &format!("{path}[{i}]"), parent, errors);
            }
        }
        NodeKind::Scalar { .. } => {}
    }
}

/// The field `key` of the mapping under `parent`, whose value `value` sits at `path`, and
/// everything below it.
pub fn check_field(
    doc: &Document,
    parent: &str,
    key: &str,
    value: &Node,
    path: &str,
    errors: &mut Vec<ConfigError>,
) {
    if let (Some(cap), Some(text)) = (cap_of(parent, key), value.as_str()) {
        if let Some(message) = over(cap, text) {
            errors.push(
                ConfigError::new(format!("`{key}` {message}")).at(doc.location(path, value.mark)),
            );
        }
    }
    check(doc, value, path, key, errors);
}

/// Why `text` is above `cap`, or `None` when it is not (or is not a value of its kind).
fn over(cap: Cap, text: &str) -> Option<String> {
    let text = text.trim();
    match cap {
        Cap::Count(max) | Cap::Bytes(max) => {
            let n: i128 = text.replace('_', "").parse().ok()?;
            (n > i128::from(max)).then(|| {
                let unit = if matches!(cap, Cap::Bytes(_)) {
                    " bytes"
                } else {
                    ""
                };
                format!("is {n}{unit}, above the most allowed, {max}{unit}")
            })
        }
        Cap::Time(max) => {
            let d = crate::duration::parse(text).ok()?;
            (d > max).then(|| format!("is `{text}`, above the most allowed, {}", show(max)))
        }
    }
}

/// A cap as it would be written in a config.
fn show(d: Duration) -> String {
    let s = d.as_secs();
    let mut out = String::new();
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    for (n, unit) in [(h, "h"), (m, "m"), (sec, "s")] {
        if n > 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    format!("`{out}`")
}

/// The caps as a table for people: field, where, largest value.
pub fn describe() -> Vec<(String, String)> {
    BOUNDS
        .iter()
        .map(|(parent, field, cap)| {
            let at = if *parent == "*" {
                format!("{field} (any component)")
            } else {
                format!("{parent}.{field}")
            };
            let max = match cap {
                Cap::Count(n) => n.to_string(),
                Cap::Bytes(n) => format!("{n} bytes"),
                Cap::Time(d) => show(*d),
            };
            (at, max)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<ConfigError> {
        let doc = crate::config::yaml::parse("t.yaml", text, &|_| None).unwrap();
        let mut out = Vec::new();
        check(&doc, &doc.root, "", "", &mut out);
        out
    }

    #[test]
    fn a_value_above_its_cap_is_placed_at_the_value() {
        let e = errors("input:\n  generate:\n    payload: x\n    batch_size: 4000000000\n");
        assert_eq!(e.len(), 1, "{e:?}");
        let loc = e[0].location.clone().unwrap();
        assert_eq!(
            (loc.path.as_str(), loc.line, loc.col),
            ("input.generate.batch_size", 4, 17)
        );
        assert!(e[0].message.contains("10000"), "{}", e[0].message);
    }

    #[test]
    fn nested_lists_durations_and_any_component_rules_are_checked() {
        let e = errors(
            "pipeline:\n  processors:\n    - sleep: {duration: 2h}\n    - split: {size: 5}\noutput:\n  http_client:\n    url: http://x\n    max_in_flight: 100000\n    batching: {count: 10, byte_size: 1000000000}\n",
        );
        let paths: Vec<_> = e.iter().map(|e| e.location.clone().unwrap().path).collect();
        assert_eq!(
            paths,
            [
                "pipeline.processors[0].sleep.duration",
                "output.http_client.max_in_flight",
                "output.http_client.batching.byte_size"
            ]
        );
        assert!(e[0].message.contains("`1h`"), "{}", e[0].message);
    }

    #[test]
    fn values_within_caps_and_values_of_other_kinds_pass() {
        assert!(errors("input:\n  generate: {batch_size: 10000, interval: 0s}\n").is_empty());
        // Not a number: the deserializer reports it with what it expected.
        assert!(errors("input:\n  generate: {batch_size: lots}\n").is_empty());
        // A header that happens to be called `timeout` is text, not a duration.
        assert!(errors("output:\n  http_client: {headers: {timeout: soon}}\n").is_empty());
    }

    #[test]
    fn an_exact_rule_wins_over_the_any_component_rule() {
        assert_eq!(cap_of("generate", "interval"), Some(Cap::Time(DAY)));
        assert_eq!(cap_of("http_client", "timeout"), Some(Cap::Time(HOUR)));
        assert_eq!(cap_of("http_client", "url"), None);
    }
}
