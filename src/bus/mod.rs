//! The cluster bus (`cluster.bus` in the gateway config): carries the messages of streams
//! whose producer and consumer are both HTTP clients between the gateway nodes, over a
//! broker the operator already runs (NATS JetStream or Redis Streams). How the HTTP
//! outputs use it is in [`crate::component::bus`].
//!
//! Each hub output of such a stream has a topic of its own. Its messages are published
//! once, on the node that took the POST, and fed to every node's clients: with broadcast
//! delivery every node reads every message; with round robin the nodes share one reader
//! group and a node takes a message only while it has a client for it.
//!
//! Posted streams are kept off the bus by name (see [`crate::reserved`]): the subjects,
//! stream and keys of the configured bus, and the default ones, are refused in every
//! posted stream. With the gateway's `secret` set, each node also signs what it publishes
//! (HMAC-SHA256 over the topic, the payload and the metadata, with a key derived from the
//! secret) and drops what it reads without a good signature, so that a message put on the
//! bus by anyone but a node of the cluster reaches no client.

mod jetstream;
mod redis;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::component::bus::{Bus, Feed, Past};
use crate::connect::nats::NatsAuth;
use crate::connect::TlsConfig;
use crate::duration::Duration;
use crate::message::{Message, Metadata};
use crate::reserved::ReservedNames;

pub use self::jetstream::JetStreamBus;
pub use self::redis::RedisBus;

/// `cluster.bus`: exactly one of the two.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct BusConfig {
    pub nats_jetstream: Option<JetStreamBusConfig>,
    pub redis_streams: Option<RedisBusConfig>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JetStreamBusConfig {
    /// Server URLs (`nats://host:4222`).
    pub urls: Vec<String>,
    /// The JetStream stream that holds the bus's messages, created when missing.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// The subjects of the bus are `<subject_prefix>.<topic>`.
    #[serde(default = "default_subject_prefix")]
    pub subject_prefix: String,
    /// How long the stream keeps a message: how far back a node that was down, or a
    /// client resuming, can still read.
    #[serde(default = "default_max_age")]
    pub max_age: Duration,
    /// Copies of the stream kept by a NATS cluster.
    #[serde(default = "one")]
    pub replicas: usize,
    /// Bytes the stream keeps at most; the oldest messages go first.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub auth: NatsAuth,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RedisBusConfig {
    /// `redis://host:port` (`rediss://` for TLS).
    pub url: String,
    /// The bus's Redis streams are `<key_prefix><topic>`.
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
    /// Entries each topic's stream keeps, about (`MAXLEN ~`).
    #[serde(default = "default_max_len")]
    pub max_len: u64,
    /// How long a topic's stream is kept after its last message.
    #[serde(default = "default_max_age")]
    pub max_age: Duration,
    #[serde(default)]
    pub tls: TlsConfig,
}

fn default_stream() -> String {
    "SLUICE_BUS".into()
}
fn default_subject_prefix() -> String {
    "sluice.bus".into()
}
fn default_max_age() -> Duration {
    Duration::from_secs(3600)
}
fn one() -> usize {
    1
}
fn default_max_bytes() -> u64 {
    1 << 30
}
fn default_key_prefix() -> String {
    "sluice:bus:".into()
}
fn default_max_len() -> u64 {
    100_000
}

impl BusConfig {
    /// Whether a bus is configured.
    pub fn is_set(&self) -> bool {
        self.nats_jetstream.is_some() || self.redis_streams.is_some()
    }

    /// Every problem of the settings, each with its path under `cluster.bus`; nothing is
    /// connected and no file is read.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |path: &str, message: String| {
            problems.push((format!("cluster.bus{path}"), message));
        };
        if self.nats_jetstream.is_some() && self.redis_streams.is_some() {
            problem(
                "",
                "give one of `nats_jetstream` and `redis_streams`".into(),
            );
        }
        if let Some(c) = &self.nats_jetstream {
            if let Err(e) = crate::connect::nats::validate(&c.urls, &c.tls, &c.auth) {
                problem(".nats_jetstream", e.to_string());
            }
            if !is_name(&c.stream) {
                problem(
                    ".nats_jetstream.stream",
                    format!(
                        "`{}` is not a JetStream stream name (letters, digits, `-` and `_`)",
                        c.stream
                    ),
                );
            }
            let tokens_ok = c.subject_prefix.split('.').all(|t| {
                !t.is_empty()
                    && !t.contains(['*', '>'])
                    && t.is_ascii()
                    && !t.contains(char::is_whitespace)
            });
            if !tokens_ok {
                problem(
                    ".nats_jetstream.subject_prefix",
                    format!("`{}` is not a subject without wildcards", c.subject_prefix),
                );
            }
            if c.max_age.0.is_zero() {
                problem(".nats_jetstream.max_age", "must be above zero".into());
            }
            if c.replicas == 0 || c.replicas > 5 {
                problem(".nats_jetstream.replicas", "must be from 1 to 5".into());
            }
            if c.max_bytes == 0 || i64::try_from(c.max_bytes).is_err() {
                problem(".nats_jetstream.max_bytes", "must be above zero".into());
            }
        }
        if let Some(c) = &self.redis_streams {
            if let Err(e) = crate::connect::redis::validate(&c.url, &c.tls) {
                problem(".redis_streams", e.to_string());
            }
            if c.key_prefix.is_empty() {
                // Posted streams are kept off the keys under it: none would be kept off.
                problem(".redis_streams.key_prefix", "must not be empty".into());
            }
            if c.max_len == 0 {
                problem(".redis_streams.max_len", "must be above zero".into());
            }
            if c.max_age.0.as_secs() == 0 {
                problem(".redis_streams.max_age", "must be a second or more".into());
            }
        }
        problems
    }

    /// The bus of node `node`, if one is configured, signing with a key derived from
    /// `secret` (the gateway's, the same on every node) when there is one. Nothing
    /// connects yet.
    pub fn build(&self, node: &str, secret: Option<&str>) -> Result<Option<Arc<dyn Bus>>, String> {
        let seal = Seal::new(secret);
        if self.is_set() && seal.key.is_none() {
            tracing::warn!(
                "The cluster bus carries unsigned messages: set the gateway's `secret` (the same on every node) so that nodes drop what they did not publish."
            );
        }
        if let Some(c) = &self.nats_jetstream {
            return Ok(Some(Arc::new(JetStreamBus::new(c.clone(), node, seal))));
        }
        if let Some(c) = &self.redis_streams {
            let bus = RedisBus::new(c.clone(), node, seal)
                .map_err(|e| format!("cluster.bus.redis_streams: {e}"))?;
            return Ok(Some(Arc::new(bus)));
        }
        Ok(None)
    }

    /// The names of this bus (and the default ones) that posted streams may not use.
    pub fn reserved(&self) -> ReservedNames {
        let mut names = ReservedNames::default();
        if let Some(c) = &self.nats_jetstream {
            names.add_subject_prefix(&c.subject_prefix);
            names.add_stream(&c.stream);
        }
        if let Some(c) = &self.redis_streams {
            names.add_key_prefix(&c.key_prefix);
        }
        names
    }
}

/// Counts a message dropped for its signature, and says so in the log for the 1st, 2nd,
/// 4th, 8th… of them: whoever floods the bus does not flood the log too.
fn refused_unsigned(topic: &str) {
    static REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    metrics::counter!(crate::metrics::BUS_REFUSED, "reason" => "signature").increment(1);
    let n = REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            topic,
            dropped = n,
            "A message on the cluster bus without a good signature was dropped."
        );
    }
}

/// Where a message read from the bus carries, until [`Seal::open`] checks it, the
/// signature it was published with and its metadata as published.
const SIGNATURE_KEY: &str = "sluice_bus_signature";
const SIGNED_META_KEY: &str = "sluice_bus_signed_meta";

/// Signs what a node publishes on the bus and checks what it reads. Without a key (no
/// gateway `secret`) it signs nothing and lets everything through.
#[derive(Clone, Default)]
pub struct Seal {
    key: Option<[u8; 32]>,
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

impl Seal {
    /// The seal of the nodes that share `secret`. The key is derived from it rather than
    /// the secret itself, so that a signature says nothing about what else it opens.
    pub fn new(secret: Option<&str>) -> Seal {
        use hmac::Mac;
        let key = secret.filter(|s| !s.is_empty()).and_then(|s| {
            let mut mac = HmacSha256::new_from_slice(s.as_bytes()).ok()?;
            mac.update(b"sluice cluster bus v1");
            Some(mac.finalize().into_bytes().into())
        });
        Seal { key }
    }

    fn mac(&self, topic: &str, payload: &[u8], meta: Option<&[u8]>) -> Option<HmacSha256> {
        use hmac::Mac;
        let mut mac = HmacSha256::new_from_slice(&self.key?).ok()?;
        // Each part with its length first, so that no two messages sign the same bytes.
        for part in [Some(topic.as_bytes()), Some(payload), meta] {
            match part {
                Some(p) => {
                    mac.update(&(p.len() as u64).to_be_bytes());
                    mac.update(p);
                }
                None => mac.update(&u64::MAX.to_be_bytes()),
            }
        }
        Some(mac)
    }

    /// The signature of a message of `topic`, in hex; `None` without a key.
    fn sign(&self, topic: &str, payload: &[u8], meta: Option<&str>) -> Option<String> {
        use hmac::Mac;
        let mac = self.mac(topic, payload, meta.map(str::as_bytes))?;
        Some(hex::encode(mac.finalize().into_bytes()))
    }

    /// `msg` as read from `topic`, once its signature is checked (and its record of it
    /// removed); `None` for a message the nodes did not sign.
    fn open(&self, topic: &str, mut msg: Message) -> Option<Message> {
        use hmac::Mac;
        let signature = msg.metadata_mut().remove(SIGNATURE_KEY);
        let meta = msg.metadata_mut().remove(SIGNED_META_KEY);
        if self.key.is_none() {
            return Some(msg);
        }
        let text = |v: Option<crate::value::Value>| v.and_then(|v| v.as_str().map(str::to_owned));
        let signature = text(signature).and_then(|s| hex::decode(s).ok());
        let meta = text(meta);
        let good = match (
            signature,
            self.mac(topic, msg.payload(), meta.as_deref().map(str::as_bytes)),
        ) {
            (Some(signature), Some(mac)) => mac.verify_slice(&signature).is_ok(),
            _ => false,
        };
        if !good {
            refused_unsigned(topic);
            return None;
        }
        Some(msg)
    }

    /// The messages of `past` that the nodes signed.
    fn open_past(&self, topic: String, past: Past) -> Past {
        use futures::StreamExt;
        let seal = self.clone();
        Past {
            complete: past.complete,
            messages: past
                .messages
                .filter_map(move |m| {
                    let kept = match m {
                        Ok(m) => seal.open(&topic, m).map(Ok),
                        Err(e) => Some(Err(e)),
                    };
                    std::future::ready(kept)
                })
                .boxed(),
        }
    }
}

/// Whether `name` is safe as a stream, consumer or group name on every bus.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The metadata of a message as the bus carries it: one JSON object, without what looks
/// like a credential (an HTTP producer's `authorization` or `cookie` header, say), which
/// the bus would otherwise keep for its whole retention.
fn encode_meta(msg: &Message) -> Option<String> {
    let kept: Metadata = msg
        .metadata()
        .iter()
        .filter(|(k, _)| !is_credential(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if kept.is_empty() {
        return None;
    }
    serde_json::to_string(&kept).ok()
}

/// Whether a metadata key names a credential.
fn is_credential(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    matches!(
        key.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || [
        "token", "secret", "password", "api-key", "apikey", "api_key",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// A message as it came off the bus: its payload, and the metadata it was published with;
/// with `signature`, the signature and the metadata as published, for [`Seal::open`].
fn decode(payload: bytes::Bytes, meta: Option<&[u8]>, signature: Option<&str>) -> Message {
    let mut msg = Message::new(payload);
    if let Some(meta) = meta.and_then(|m| serde_json::from_slice::<Metadata>(m).ok()) {
        msg.set_metadata(meta);
    }
    if let Some(signature) = signature {
        msg.set_meta(SIGNATURE_KEY, signature);
        if let Some(meta) = meta.and_then(|m| std::str::from_utf8(m).ok()) {
            msg.set_meta(SIGNED_META_KEY, meta);
        }
    }
    msg
}

/// Runs `run` until it ends (`Ok`: the feed stopped), running it again after each
/// failure with a growing back-off.
async fn keep_reading<F, Fut>(feed: &Feed, mut run: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), crate::component::ConnectorError>>,
{
    let mut backoff = crate::backoff::Backoff::exponential(
        StdDuration::from_millis(100),
        StdDuration::from_secs(3),
    )
    .with_jitter(0.2);
    while !feed.stop.is_cancelled() {
        match run().await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, topic = %feed.topic, "The bus's reader failed; opening it again.");
                let wait = backoff.next_delay().unwrap_or(StdDuration::from_secs(3));
                if pause(&feed.stop, wait).await {
                    return;
                }
            }
        }
    }
}

/// Sleeps `wait`, or less when `stop` is cancelled first; whether it was.
async fn pause(stop: &CancellationToken, wait: StdDuration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(wait) => false,
    }
}

/// How long a node waits between checks for a client while it has none (round robin).
const IDLE_CHECK: StdDuration = StdDuration::from_millis(50);
/// How long one read from the bus waits for a message.
const READ_WAIT: StdDuration = StdDuration::from_secs(1);
/// How long a message handed to a node may go unacknowledged before the bus gives it to
/// another (round robin).
const ACK_WAIT: StdDuration = StdDuration::from_secs(30);
/// A node's own readers that stay unused this long are removed by the broker, so that a
/// node gone for good leaves nothing behind.
const INACTIVE: StdDuration = StdDuration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> BusConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn a_bus_is_one_broker_with_sound_settings() {
        let both = parse(
            "nats_jetstream: {urls: ['nats://127.0.0.1:4222']}\nredis_streams: {url: 'redis://127.0.0.1:6379'}\n",
        );
        assert_eq!(both.problems()[0].0, "cluster.bus");
        let bad = parse(
            "nats_jetstream: {urls: ['nats://127.0.0.1:4222'], stream: 'a.b', subject_prefix: 'x.*', max_age: 0s, replicas: 0}\n",
        );
        let paths: Vec<_> = bad.problems().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            [
                "cluster.bus.nats_jetstream.stream",
                "cluster.bus.nats_jetstream.subject_prefix",
                "cluster.bus.nats_jetstream.max_age",
                "cluster.bus.nats_jetstream.replicas"
            ]
        );
        let redis = parse("redis_streams: {url: 'http://x', max_len: 0}\n");
        assert_eq!(redis.problems().len(), 2);
        let good = parse("redis_streams: {url: 'redis://127.0.0.1:6379'}\n");
        assert!(good.problems().is_empty() && good.is_set());
        assert!(!BusConfig::default().is_set());
    }

    #[test]
    fn metadata_crosses_the_bus_whole() {
        let msg = Message::new("hi")
            .with_meta("event", "greeting")
            .with_meta("n", 3i64);
        let back = decode(
            msg.payload().clone(),
            encode_meta(&msg).as_deref().map(str::as_bytes),
            None,
        );
        assert_eq!(back.payload().as_ref(), b"hi");
        assert_eq!(back.metadata(), msg.metadata());
        assert!(encode_meta(&Message::new("x")).is_none());
        // Credentials a producer sent stay off the bus.
        let sent = Message::new("x")
            .with_meta("authorization", "Bearer k")
            .with_meta("Cookie", "s=1")
            .with_meta("x-api-token", "t")
            .with_meta("event", "e");
        let carried = encode_meta(&sent).unwrap();
        assert!(
            !carried.contains("Bearer") && !carried.contains("s=1"),
            "{carried}"
        );
        assert!(
            !carried.contains("\"t\"") && carried.contains("event"),
            "{carried}"
        );
        // Metadata that is not an object is dropped, not a failure.
        assert!(decode("x".into(), Some(b"[1]"), None).metadata().is_empty());
    }

    /// A message as a node would publish it on `topic`, and as the bus hands it back.
    fn carried(seal: &Seal, topic: &str, msg: &Message) -> Message {
        let meta = encode_meta(msg);
        let signature = seal.sign(topic, msg.payload(), meta.as_deref());
        decode(
            msg.payload().clone(),
            meta.as_deref().map(str::as_bytes),
            signature.as_deref(),
        )
    }

    #[test]
    fn nodes_with_one_secret_read_what_they_signed_and_drop_the_rest() {
        let seal = Seal::new(Some("cluster-secret"));
        let msg = Message::new("hi").with_meta("event", "greeting");
        let back = seal
            .open("t1", carried(&seal, "t1", &msg))
            .expect("a signed message is read");
        assert_eq!(back.payload(), msg.payload());
        assert_eq!(
            back.metadata(),
            msg.metadata(),
            "the signature is not handed on"
        );
        // Unsigned, signed by another secret, moved to another topic, or changed: dropped.
        let forged = decode("hi".into(), None, None);
        assert!(seal.open("t1", forged).is_none());
        let other = Seal::new(Some("another-secret"));
        assert!(seal.open("t1", carried(&other, "t1", &msg)).is_none());
        assert!(seal.open("t2", carried(&seal, "t1", &msg)).is_none());
        let mut changed = carried(&seal, "t1", &msg);
        changed.set_meta("event", "forged");
        let meta = changed.metadata().clone();
        let changed_payload = {
            let mut m = Message::new("evil");
            m.set_metadata(meta);
            m
        };
        assert!(seal.open("t1", changed_payload).is_none());
        let mut bad_meta = carried(&seal, "t1", &msg);
        bad_meta.set_meta(SIGNED_META_KEY, "{\"event\":\"forged\"}");
        assert!(seal.open("t1", bad_meta).is_none());
        // Without a secret nothing is signed and everything is read.
        let open = Seal::new(None);
        assert!(open.sign("t1", b"hi", None).is_none());
        let read = open.open("t1", decode("hi".into(), None, None)).unwrap();
        assert_eq!(read.payload().as_ref(), b"hi");
    }

    #[test]
    fn a_bus_reserves_its_names_and_the_defaults() {
        let bus = parse(
            "nats_jetstream: {urls: ['nats://127.0.0.1:4222'], stream: HT29, subject_prefix: ht29bus}\n",
        );
        let names = bus.reserved();
        assert!(names.check_subject("ht29bus.>").is_err());
        assert!(names.check_subject("sluice.bus.x").is_err());
        assert!(names.check_stream("ht29").is_err());
        assert!(names.check_key("sluice:bus:x").is_err());
        let redis = parse("redis_streams: {url: 'redis://127.0.0.1:6379', key_prefix: 'ht:'}\n");
        assert!(redis.reserved().check_key("ht:abc").is_err());
        let empty = parse("redis_streams: {url: 'redis://127.0.0.1:6379', key_prefix: ''}\n");
        assert_eq!(
            empty.problems()[0].0,
            "cluster.bus.redis_streams.key_prefix"
        );
    }
}
