//! One stream on many nodes. Every gateway of a cluster runs every stream of the store's
//! APIs with the same settings, so a broker input's group (a Kafka consumer group, a
//! JetStream durable consumer, a NATS queue group, a Redis streams consumer group) spans
//! the nodes and hands each message to one of them: round-robin delivery then spans
//! the nodes' clients. A stream that broadcasts to its HTTP clients must instead see
//! every message on every node, so there the group is made the node's own.

use std::borrow::Cow;

use crate::http::hub::DeliveryMode;
use crate::input::InputKind;
use crate::output::{OutputConfig, OutputKind};
use crate::stream::StreamConfig;

/// `config` (of stream `stream`) as this node runs it: with its broker groups made the
/// node's own when an output broadcasts to HTTP clients, else as it is.
pub fn for_node<'a>(config: &'a StreamConfig, node: &str, stream: &str) -> Cow<'a, StreamConfig> {
    if !broadcasts(&config.output) {
        return Cow::Borrowed(config);
    }
    let mut own = config.clone();
    if scope(&mut own.input.kind, node, &format!("{stream}/input")) {
        Cow::Owned(own)
    } else {
        Cow::Borrowed(config)
    }
}

/// Whether some output of the tree hands every message to every HTTP client.
fn broadcasts(output: &OutputConfig) -> bool {
    crate::stream::any_output(output, &|kind| match kind {
        OutputKind::HttpServer(o) => o.delivery == DeliveryMode::Broadcast,
        OutputKind::WebsocketServer(o) => o.delivery == DeliveryMode::Broadcast,
        _ => false,
    })
}

/// Makes the groups of `input` (and of a `broker` input's inputs) the node's own;
/// whether there was one.
fn scope(input: &mut InputKind, node: &str, path: &str) -> bool {
    let own = |group: &str| format!("{group}-{node}");
    match input {
        InputKind::Kafka(i) => {
            i.consumer_group = own(&i.consumer_group);
            // The group is this node's alone: a restarted node takes its partitions back
            // at once rather than after its old session times out. Unique per input, as
            // two inputs (of two streams, or of one `broker`) may name the same group.
            i.instance_id.get_or_insert_with(|| {
                format!("{node}-{}", crate::component::bus::topic(path, "kafka"))
            });
            true
        }
        InputKind::NatsJetStream(i) => match &mut i.durable {
            Some(durable) => {
                *durable = own(durable);
                true
            }
            // An ephemeral consumer is each node's own already.
            None => false,
        },
        InputKind::Nats(i) => match &mut i.queue {
            Some(queue) => {
                *queue = own(queue);
                true
            }
            None => false,
        },
        InputKind::RedisStreams(i) => {
            i.consumer_group = own(&i.consumer_group);
            true
        }
        InputKind::Broker(b) => b.inputs.iter_mut().enumerate().fold(false, |any, (n, i)| {
            scope(&mut i.kind, node, &format!("{path}.inputs[{n}]")) | any
        }),
        _ => false,
    }
}

/// This node's name in the cluster: `cluster.node_id`, else the host's name and the port
/// it serves APIs on, kept to characters every broker takes in a group's name.
pub fn node_id(configured: Option<&str>, port: u16) -> String {
    let raw = match configured {
        Some(id) => id.to_owned(),
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            let host = if host.is_empty() { "node".into() } else { host };
            format!("{host}-{port}")
        }
    };
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(yaml: &str) -> StreamConfig {
        let root = crate::stream::config::parse_str("s.yaml", yaml).unwrap();
        root.streams.into_iter().next().unwrap().1
    }

    fn group(config: &StreamConfig) -> String {
        match &config.input.kind {
            InputKind::Kafka(i) => i.consumer_group.clone(),
            InputKind::NatsJetStream(i) => i.durable.clone().unwrap_or_default(),
            InputKind::Nats(i) => i.queue.clone().unwrap_or_default(),
            InputKind::RedisStreams(i) => i.consumer_group.clone(),
            other => panic!("no group on {other:?}"),
        }
    }

    const KAFKA: &str = "input:\n  kafka: {addresses: [k:9092], topics: [t], consumer_group: g}\n";

    #[test]
    fn a_broadcast_stream_takes_the_nodes_own_group() {
        let s = stream(&format!(
            "{KAFKA}output:\n  http_server: {{path: /e, delivery: broadcast}}\n"
        ));
        assert_eq!(group(&for_node(&s, "a-8080", "api.s")), "g-a-8080");
        // Inside a broker, a switch or a fallback too.
        let s = stream(&format!(
            "{KAFKA}output:\n  broker:\n    outputs:\n      - drop: {{}}\n      - switch:\n          cases:\n            - output:\n                websocket_server: {{path: /w, delivery: broadcast}}\n"
        ));
        assert_eq!(group(&for_node(&s, "b", "api.s")), "g-b");
        for input in [
            "nats_jetstream: {urls: ['nats://n:4222'], stream: s, durable: d}",
            "nats: {urls: ['nats://n:4222'], subject: s, queue: q}",
            "redis_streams: {url: 'redis://r:6379', streams: [s], consumer_group: c}",
        ] {
            let s = stream(&format!(
                "input:\n  {input}\noutput:\n  http_server: {{path: /e, delivery: broadcast}}\n"
            ));
            assert!(
                group(&for_node(&s, "n1", "api.s")).ends_with("-n1"),
                "{input}"
            );
        }
    }

    #[test]
    fn every_kafka_input_of_a_node_is_a_static_member_of_its_own() {
        let instance = |s: &StreamConfig| match &s.input.kind {
            InputKind::Kafka(i) => i.instance_id.clone().unwrap(),
            InputKind::Broker(b) => match (&b.inputs[0].kind, &b.inputs[1].kind) {
                (InputKind::Kafka(a), InputKind::Kafka(b)) => {
                    assert_ne!(a.instance_id, b.instance_id, "two inputs of one broker");
                    a.instance_id.clone().unwrap()
                }
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        let s = stream(&format!(
            "{KAFKA}output:\n  http_server: {{path: /e, delivery: broadcast}}\n"
        ));
        let (a, b) = (
            instance(&for_node(&s, "n1", "api.s")),
            instance(&for_node(&s, "n1", "api.t")),
        );
        assert!(a.starts_with("n1-") && b.starts_with("n1-"));
        assert_ne!(a, b, "two streams on one node, one group name");
        assert_eq!(
            a,
            instance(&for_node(&s, "n1", "api.s")),
            "kept across restarts"
        );
        let both = stream(
            "input:\n  broker:\n    inputs:\n      - kafka: {addresses: [k:9092], topics: [t], consumer_group: g}\n      - kafka: {addresses: [k:9092], topics: [u], consumer_group: g}\noutput:\n  http_server: {path: /e, delivery: broadcast}\n",
        );
        instance(&for_node(&both, "n1", "api.s"));
    }

    #[test]
    fn round_robin_and_other_outputs_share_the_group() {
        for output in ["http_server: {path: /e}", "drop: {}"] {
            let s = stream(&format!("{KAFKA}output:\n  {output}\n"));
            assert!(
                matches!(for_node(&s, "a", "api.s"), Cow::Borrowed(_)),
                "{output}"
            );
            assert_eq!(group(&for_node(&s, "a", "api.s")), "g");
        }
    }

    #[test]
    fn node_ids_keep_to_group_name_characters() {
        assert_eq!(node_id(Some("eu.west/1"), 80), "eu_west_1");
        let made = node_id(None, 8090);
        assert!(made.ends_with("-8090"), "{made}");
        assert!(made
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }
}
