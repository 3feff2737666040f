//! The gateway's own configuration (`sluice gateway --config gateway.yaml`): where it
//! listens, TLS, where API definitions come from, the store, Redis, streaming and the
//! secret of its `/sluice/` API. Every key can be overridden by an environment variable
//! `SLUICE_GW_<SECTION>_<KEY>` (`SLUICE_GW_STREAMING_ENABLED=true`,
//! `SLUICE_GW_LISTEN_PORT=8081`, `SLUICE_GW_SECRET=...`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::overrides::{self, Overridable};
use crate::config::{yaml, ConfigError, ConfigErrors};
use crate::duration::Duration;
use crate::logging::LoggerConfig;

/// The prefix of the environment variables that override config keys.
pub const ENV_PREFIX: &str = "SLUICE_GW_";

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    pub listen: ListenConfig,
    /// The port of `/metrics`, `/ready` and the gateway API, apart from the APIs' port.
    pub control: ControlConfig,
    pub tls: TlsConfig,
    pub apps: AppsConfig,
    pub store: StoreConfig,
    pub redis: RedisConfig,
    pub streaming: StreamingConfig,
    /// This gateway as one node of several.
    pub cluster: ClusterConfig,
    /// Guards the gateway's own API under `/sluice/`; without it that API is off.
    pub secret: Option<String>,
    /// The dashboard's `secret`: opens what the dashboard sealed in the store (webhooks'
    /// header values and URL credentials), and seals their deliveries' headers.
    pub store_secret: Option<String>,
    pub proxy: ProxyConfig,
    pub http: HttpTimeouts,
    pub keys: KeysConfig,
    pub logger: LoggerConfig,
    /// One log line per request (target `sluice::access`).
    pub access_log: bool,
    /// Threads that serve requests; one per core when unset.
    pub workers: Option<usize>,
    pub metrics: MetricsConfig,
    /// Delivery of the webhooks that event handlers fire.
    pub webhooks: crate::webhook::DeliveryConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: ListenConfig::default(),
            control: ControlConfig::default(),
            tls: TlsConfig::default(),
            apps: AppsConfig::default(),
            store: StoreConfig::default(),
            redis: RedisConfig::default(),
            streaming: StreamingConfig::default(),
            cluster: ClusterConfig::default(),
            secret: None,
            store_secret: None,
            proxy: ProxyConfig::default(),
            http: HttpTimeouts::default(),
            keys: KeysConfig::default(),
            logger: LoggerConfig::default(),
            access_log: true,
            workers: None,
            metrics: MetricsConfig::default(),
            webhooks: crate::webhook::DeliveryConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    pub address: String,
    pub port: u16,
    /// Connections open at once; past it a new one is answered 503 and closed. Unset:
    /// three quarters of the process's descriptor limit.
    pub max_connections: Option<usize>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            address: "127.0.0.1".into(),
            port: 8080,
            max_connections: None,
        }
    }
}

/// Where the gateway's own endpoints are served: `/metrics` (which names every API and
/// stream), `/ready` and the gateway API under `/sluice/`. Never the public port, so that
/// anonymous callers of the APIs reach none of them; loopback unless told otherwise.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    pub address: String,
    pub port: u16,
    /// Requests with a wrong or missing secret one client address may make to the
    /// gateway API in a minute; past it they are answered 429 until the minute is over.
    pub failed_secrets_per_minute: u32,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            address: "127.0.0.1".into(),
            port: 8081,
            failed_secrets_per_minute: 10,
        }
    }
}

impl ControlConfig {
    /// `address:port`, bracketing an IPv6 address.
    pub fn socket(&self) -> String {
        crate::server::socket_address(&self.address, self.port)
    }
}

impl ListenConfig {
    /// `address:port`, bracketing an IPv6 address.
    pub fn socket(&self) -> String {
        crate::server::socket_address(&self.address, self.port)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    pub enabled: bool,
    /// PEM certificate chain.
    pub cert_file: Option<PathBuf>,
    /// PEM private key.
    pub key_file: Option<PathBuf>,
    /// Or a certificate stored by the dashboard, by its SHA-256 fingerprint (its id)...
    pub certificate_id: Option<String>,
    /// ...whose private key is opened with the dashboard's `secret`.
    pub store_secret: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AppsConfig {
    /// A directory of API definitions (`.yaml`, `.yml`, `.json`).
    pub path: Option<PathBuf>,
    /// How often the directory and the store are checked for changes.
    pub poll_interval: Duration,
}

impl Default for AppsConfig {
    fn default() -> Self {
        AppsConfig {
            path: None,
            poll_interval: Duration::from_millis(250),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite://file.db`, a file path, or `postgres://...`.
    pub url: String,
    /// Serve the API definitions kept in the store as well as those of `apps.path`.
    pub apis: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: crate::store::DEFAULT_URL.into(),
            apis: true,
        }
    }
}

/// Where the gateway's limits live in Redis when `redis.prefix` is not set.
pub const LIMIT_KEY_PREFIX: &str = "sluice:";

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://host:port`: rate-limit and quota counters shared by every gateway that
    /// uses the same Redis. Unset, each gateway counts in memory.
    pub url: Option<String>,
    pub prefix: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This node's name, unique in the cluster and kept across restarts: a stream that
    /// broadcasts to its clients reads its brokers in groups of this node's own. Unset,
    /// the host's name and the APIs' port.
    pub node_id: Option<String>,
    /// The broker that carries streams fed by HTTP clients to the HTTP clients of every
    /// node (`nats_jetstream` or `redis_streams`). Unset, such a stream is each node's own.
    pub bus: crate::bus::BusConfig,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StreamingConfig {
    /// Run the streams of APIs with `x-sluice-streaming`.
    pub enabled: bool,
    /// Components that reach the host (`file`, `stdin`, `stdout`) that streams may use.
    pub allow_unsafe: Vec<String>,
    /// How long a stopped stream may take to deliver what it holds.
    pub drain_timeout: Duration,
    /// Per-client stream instances (`$sluice_context`) one API may run at once.
    pub max_client_streams: usize,
    /// A per-client instance that no client used for this long is stopped.
    pub client_idle_timeout: Duration,
    /// Per-client stream instances one organisation's APIs may run at once, together.
    pub org_max_client_streams: usize,
    /// Bytes of messages one organisation's streams may hold in flight, together; a read
    /// past it waits until earlier messages are delivered.
    pub org_max_inflight_bytes: usize,
    /// Cores one organisation's posted streams may use, together (`0.5`: half a core):
    /// past it their tasks wait until their share allows them to run again.
    pub org_cpu_share: f64,
    /// Failed connection attempts in a row after which an input of a posted stream gives
    /// up and its stream stops (reported in `/sluice/apis` as `failed_streams`).
    pub max_connect_failures: u32,
    /// Where the streams of posted APIs (from the store) may connect.
    pub egress: crate::egress::EgressConfig,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            enabled: false,
            allow_unsafe: Vec::new(),
            drain_timeout: Duration::from_secs(10),
            max_client_streams: 1000,
            client_idle_timeout: Duration::from_secs(60),
            org_max_client_streams: 200,
            org_max_inflight_bytes: 256 * 1024 * 1024,
            org_cpu_share: 1.0,
            max_connect_failures: 10,
            egress: Default::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// The longest wait for an upstream's response headers (504 after it).
    pub timeout: Duration,
    /// The longest wait to connect to an upstream (502 after it).
    pub connect_timeout: Duration,
    /// Idle connections kept per upstream host.
    pub max_idle_per_host: usize,
    /// PEM file of certificate authorities trusted for HTTPS upstreams, besides the
    /// system's (an internal CA, a self-signed upstream).
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain the gateway shows to HTTPS upstreams that ask for one
    /// (mutual TLS).
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_idle_per_host: 256,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpTimeouts {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        HttpTimeouts {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KeysConfig {
    /// How long a key read from the store is trusted before it is read again; other
    /// gateways' changes to a key show within this time.
    pub cache_ttl: Duration,
}

impl Default for KeysConfig {
    fn default() -> Self {
        KeysConfig {
            cache_ttl: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Serve Prometheus metrics on `/metrics`.
    pub enabled: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { enabled: true }
    }
}

/// Loads `file` (or the defaults when `None`), applies the `SLUICE_GW_` overrides from
/// `env`, and checks what can be checked without touching the network.
pub fn load(file: Option<&Path>, env: &[(String, String)]) -> Result<GatewayConfig, ConfigErrors> {
    let (name, text) = overrides::read(file)?;
    parse(&name, &text, env)
}

/// Parses a gateway config document; see [`load`].
pub fn parse(
    name: &str,
    text: &str,
    env: &[(String, String)],
) -> Result<GatewayConfig, ConfigErrors> {
    let (config, doc): (GatewayConfig, _) =
        overrides::parse(name, text, ENV_PREFIX, &OVERRIDABLE, env)?;
    config.check(&doc)?;
    Ok(config)
}

/// The keys the environment may override.
const OVERRIDABLE: Overridable = Overridable {
    sections: &[
        ("listen", &["address", "port", "max_connections"]),
        ("control", &["address", "port", "failed_secrets_per_minute"]),
        (
            "tls",
            &[
                "enabled",
                "cert_file",
                "key_file",
                "certificate_id",
                "store_secret",
            ],
        ),
        ("apps", &["path", "poll_interval"]),
        ("store", &["url", "apis"]),
        ("redis", &["url", "prefix"]),
        ("cluster", &["node_id"]),
        (
            "streaming",
            &[
                "enabled",
                "allow_unsafe",
                "drain_timeout",
                "max_client_streams",
                "client_idle_timeout",
                "org_max_client_streams",
                "org_max_inflight_bytes",
                "org_cpu_share",
                "max_connect_failures",
            ],
        ),
        ("streaming.egress", &["allow"]),
        (
            "proxy",
            &[
                "timeout",
                "connect_timeout",
                "max_idle_per_host",
                "ca_file",
                "client_cert_file",
                "client_key_file",
            ],
        ),
        ("http", &["header_read_timeout", "body_read_timeout"]),
        ("keys", &["cache_ttl"]),
        ("logger", &["level", "format"]),
        ("metrics", &["enabled"]),
        (
            "webhooks",
            &[
                "enabled",
                "max_attempts",
                "initial_backoff",
                "max_backoff",
                "timeout",
                "concurrency",
                "poll_interval",
                "templates",
                "retention",
                "max_pending_per_org",
                "max_pending_per_receiver",
            ],
        ),
    ],
    top_level: &["secret", "store_secret", "access_log", "workers"],
};

impl GatewayConfig {
    /// The names posted streams may not use: the cluster bus's subjects, stream and keys,
    /// and the keys under which the gateway keeps its shared limits in Redis.
    pub fn reserved_names(&self) -> crate::reserved::ReservedNames {
        let mut names = self.cluster.bus.reserved();
        names.add_key_prefix(self.redis.prefix.as_deref().unwrap_or(LIMIT_KEY_PREFIX));
        names
    }

    fn check(&self, doc: &yaml::Document) -> Result<(), ConfigErrors> {
        let mut errors = Vec::new();
        let at = |path: &str| doc.location(path, doc.locate(path));
        let files = self.tls.cert_file.is_some() || self.tls.key_file.is_some();
        let stored = self.tls.certificate_id.is_some();
        if self.tls.enabled {
            let problem = match (files, stored) {
                (true, true) => Some("give either `cert_file` and `key_file`, or `certificate_id`, not both"),
                (false, false) => Some("TLS is enabled: `cert_file` and `key_file` are both needed, or a stored `certificate_id`"),
                (true, false) if self.tls.cert_file.is_none() || self.tls.key_file.is_none() => {
                    Some("TLS is enabled: `cert_file` and `key_file` are both needed")
                }
                (false, true) if self.tls.store_secret.is_none() => Some(
                    "a stored certificate needs `store_secret` (the dashboard's secret) to open its key",
                ),
                _ => None,
            };
            if let Some(problem) = problem {
                errors.push(ConfigError::new(problem).at(at("tls")));
            }
        }
        if self.control.port != 0
            && self.control.port == self.listen.port
            && self.control.address == self.listen.address
        {
            errors.push(
                ConfigError::new(
                    "the control port must differ from `listen.port`: it serves /metrics and the gateway API, which the APIs' port must not",
                )
                .at(at("control.port")),
            );
        }
        if self.listen.max_connections == Some(0) {
            errors.push(ConfigError::new("must be above zero").at(at("listen.max_connections")));
        }
        if let Some(secret) = &self.secret {
            if secret.len() < 8 {
                errors.push(
                    ConfigError::new("the secret is shorter than 8 characters").at(at("secret")),
                );
            }
        }
        if let Some(url) = &self.redis.url {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                errors.push(
                    ConfigError::new(format!(
                        "`{url}` is not a Redis URL (redis://host:port or rediss://...)"
                    ))
                    .at(at("redis.url")),
                );
            }
        }
        for (path, problem) in self.webhooks.problems() {
            errors.push(ConfigError::new(problem).at(at(path)));
        }
        for (path, problem) in self.cluster.bus.problems() {
            errors.push(ConfigError::new(problem).at(at(&path)));
        }
        for (i, name) in self.streaming.allow_unsafe.iter().enumerate() {
            let allowable = crate::apidef::streaming::allowable();
            if !allowable.contains(&name.as_str()) {
                let path = format!("streaming.allow_unsafe[{i}]");
                errors.push(
                    ConfigError::new(format!(
                        "`{name}` is not a component that reaches the host ({})",
                        allowable.join(", ")
                    ))
                    .at(at(&path)),
                );
            }
        }
        if let Err(bad) = crate::egress::EgressPolicy::new(&self.streaming.egress) {
            for (i, e) in bad {
                let path = format!("streaming.egress.allow[{i}]");
                errors.push(ConfigError::new(e.to_string()).at(at(&path)));
            }
        }
        let share = self.streaming.org_cpu_share;
        let most = crate::component::cpu::MAX_CORES;
        if !(share > 0.0 && share <= most) {
            errors.push(
                ConfigError::new(format!(
                    "must be a number of cores above 0 and at most {most} (0.5 is half a core)"
                ))
                .at(at("streaming.org_cpu_share")),
            );
        }
        if self.apps.poll_interval.is_zero() {
            errors.push(ConfigError::new("must be above zero").at(at("apps.poll_interval")));
        }
        if self.proxy.client_cert_file.is_some() != self.proxy.client_key_file.is_some() {
            errors.push(
                ConfigError::new("`client_cert_file` and `client_key_file` go together")
                    .at(at("proxy")),
            );
        }
        if self.proxy.timeout.is_zero() {
            errors.push(ConfigError::new("must be above zero").at(at("proxy.timeout")));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

/// The process's `SLUICE_GW_` variables.
pub fn env_overrides() -> Vec<(String, String)> {
    overrides::from_process(ENV_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_without_a_file() {
        let c = parse("gw.yaml", "", &[]).unwrap();
        assert_eq!(c.listen.socket(), "127.0.0.1:8080");
        assert!(!c.streaming.enabled);
        assert!(c.secret.is_none());
    }

    #[test]
    fn environment_overrides_keys_and_types_them() {
        let text = "listen:\n  port: 9000\nstreaming:\n  enabled: false\n";
        let c = parse(
            "gw.yaml",
            text,
            &env(&[
                ("SLUICE_GW_STREAMING_ENABLED", "true"),
                ("SLUICE_GW_LISTEN_PORT", "9100"),
                ("SLUICE_GW_TLS_CERT_FILE", "/certs/a.pem"),
                ("SLUICE_GW_SECRET", "0123456789"),
            ]),
        )
        .unwrap();
        assert!(c.streaming.enabled);
        assert_eq!(c.listen.port, 9100);
        assert_eq!(c.tls.cert_file.as_deref(), Some(Path::new("/certs/a.pem")));
        assert_eq!(c.secret.as_deref(), Some("0123456789"));
    }

    #[test]
    fn an_unknown_variable_is_named() {
        let e = parse("gw.yaml", "", &env(&[("SLUICE_GW_LISTEN_PROT", "1")])).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("SLUICE_GW_LISTEN_PROT"), "{text}");
        assert!(text.contains("`prot` is not a key of `listen`"), "{text}");
    }

    #[test]
    fn errors_are_positioned() {
        let e = parse("gw.yaml", "listen:\n  port: eighty\n", &[]).unwrap_err();
        assert!(e.to_string().starts_with("gw.yaml:2:"), "{e}");
        let e = parse("gw.yaml", "listen:\n  prot: 80\n", &[]).unwrap_err();
        assert!(e.to_string().contains("gw.yaml:2:3"), "{e}");
        let e = parse("gw.yaml", "tls:\n  enabled: true\n", &[]).unwrap_err();
        assert!(e.to_string().contains("cert_file"), "{e}");
        let e = parse("gw.yaml", "redis:\n  url: http://x\n", &[]).unwrap_err();
        assert!(e.to_string().contains("gw.yaml:2:"), "{e}");
    }

    #[test]
    fn the_cpu_share_comes_from_the_file_or_the_environment_and_must_be_above_zero() {
        assert_eq!(
            parse("gw.yaml", "", &[]).unwrap().streaming.org_cpu_share,
            1.0
        );
        let c = parse("gw.yaml", "streaming:\n  org_cpu_share: 0.25\n", &[]).unwrap();
        assert_eq!(c.streaming.org_cpu_share, 0.25);
        let c = parse(
            "gw.yaml",
            "",
            &env(&[("SLUICE_GW_STREAMING_ORG_CPU_SHARE", "2")]),
        )
        .unwrap();
        assert_eq!(c.streaming.org_cpu_share, 2.0);
        for bad in ["0", "-1", "1e9"] {
            let e = parse(
                "gw.yaml",
                &format!("streaming:\n  org_cpu_share: {bad}\n"),
                &[],
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("gw.yaml:2:") && e.contains("org_cpu_share") && e.contains("above 0"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_limit_keys_and_the_bus_are_reserved() {
        let mut c = GatewayConfig::default();
        let names = c.reserved_names();
        assert!(names.check_key("sluice:rate:api:x:rate").is_err());
        assert!(names.check_channel("sluice:*", true).is_err());
        assert!(names.check_key("orders").is_ok());
        c.redis.prefix = Some("limits/".into());
        let names = c.reserved_names();
        assert!(names.check_key("limits/quota:k").is_err());
    }

    #[test]
    fn egress_entries_come_from_the_file_or_the_environment() {
        let c = parse(
            "gw.yaml",
            "streaming:\n  egress:\n    allow: [10.0.0.0/8]\n",
            &env(&[("SLUICE_GW_STREAMING_ENABLED", "true")]),
        )
        .unwrap();
        assert_eq!(c.streaming.egress.allow, vec!["10.0.0.0/8"]);
        assert!(c.streaming.enabled);
        let c = parse(
            "gw.yaml",
            "",
            &env(&[(
                "SLUICE_GW_STREAMING_EGRESS_ALLOW",
                "[127.0.0.1, 'db.internal:5432']",
            )]),
        )
        .unwrap();
        assert_eq!(
            c.streaming.egress.allow,
            vec!["127.0.0.1", "db.internal:5432"]
        );
        let e = parse(
            "gw.yaml",
            "streaming:\n  egress:\n    allow:\n      - 10.0.0.0/8\n      - 'bad host'\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("gw.yaml:5:") && e.contains("allow[1]"), "{e}");
        let e = parse(
            "gw.yaml",
            "",
            &env(&[("SLUICE_GW_STREAMING_EGRESS_DENY", "x")]),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`deny` is not a key of `streaming.egress`"),
            "{e}"
        );
    }
}
