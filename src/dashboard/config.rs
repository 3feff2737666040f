//! The dashboard's configuration (`sluice dashboard --config dashboard.yaml`): where it
//! listens, the store, streaming, list pages, request limits, the secret that seals
//! certificate private keys, and the first organisation. Every key can be overridden by
//! an environment variable `SLUICE_DB_<SECTION>_<KEY>` (`SLUICE_DB_STREAMING_ENABLED=true`,
//! `SLUICE_DB_LISTEN_PORT=3001`, `SLUICE_DB_ADMIN_KEY=...`, `SLUICE_DB_SECRET=...`).

use std::path::Path;

use serde::Deserialize;

use crate::config::overrides::{self, Overridable};
use crate::config::{yaml, ConfigError, ConfigErrors};
use crate::duration::Duration;
use crate::logging::LoggerConfig;
use crate::webhook::DeliveryConfig;

/// The prefix of the environment variables that override config keys.
pub const ENV_PREFIX: &str = "SLUICE_DB_";

/// The store used when the config names none (the gateway's default too): a SQLite file
/// under `./data`, which is created when missing.
pub use crate::store::DEFAULT_URL as DEFAULT_STORE_URL;

/// The shortest secret accepted: it is stretched into a 256-bit key by SHA-256, so a
/// short one would be guessable.
const MIN_SECRET_LEN: usize = 16;

/// The shortest admin key accepted from the config or environment.
pub const MIN_ADMIN_KEY_LEN: usize = 16;

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DashboardConfig {
    pub listen: ListenConfig,
    pub store: StoreConfig,
    pub streaming: StreamingConfig,
    pub pagination: PaginationConfig,
    pub http: HttpConfig,
    pub admin: AdminConfig,
    /// Seals the private keys of uploaded certificates (AES-256-GCM with a key derived
    /// from it). Without it the dashboard refuses private keys.
    pub secret: Option<String>,
    /// The worker that sends webhook deliveries (the portal's subscriptions), and how
    /// many attempts each delivery gets.
    pub webhooks: DeliveryConfig,
    pub console: ConsoleConfig,
    pub logger: LoggerConfig,
    /// What one organisation's streaming APIs may hold.
    pub quotas: QuotasConfig,
    /// The developer portal's accounts: sessions, tokens and the bounds on what
    /// anonymous callers may do.
    pub portal: PortalConfig,
}

/// The developer portal's accounts. Anyone on the internet may call the sign-up and
/// sign-in endpoints, so each has a bound here.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PortalConfig {
    /// How long a signed-in session lasts.
    pub session_ttl: Duration,
    /// How long a password-reset token works.
    pub reset_ttl: Duration,
    /// How long an invitation to sign up works.
    pub invite_ttl: Duration,
    /// Sign-in attempts one account gets per 15 minutes, and password resets it may ask
    /// for per hour.
    pub attempts_per_account: u64,
    /// Sign-up, sign-in and reset attempts one client address gets per minute.
    pub attempts_per_address: u64,
    /// Catalogue reads (product lists, AsyncAPI documents) one client address gets per
    /// minute: each reads and parses the products' API documents.
    pub reads_per_address: u64,
    /// Developers one organisation's portal may have.
    pub max_developers: usize,
    /// Apps one developer may have.
    pub max_apps_per_developer: usize,
    /// Mark session cookies `Secure` even when the request did not come over TLS (set it
    /// when a TLS proxy in front does not send `X-Forwarded-Proto: https`).
    pub secure_cookies: bool,
    /// Proxies in front (addresses or ranges, `10.0.0.0/8`): from them the client's
    /// address, which the limits count, is read from `X-Forwarded-For`.
    pub trusted_proxies: Vec<String>,
}

impl PortalConfig {
    /// `trusted_proxies` as ranges; the index and text of each entry that is not one.
    pub fn proxies(&self) -> Result<Vec<ipnet::IpNet>, Vec<(usize, String)>> {
        let mut nets = Vec::new();
        let mut bad = Vec::new();
        for (i, entry) in self.trusted_proxies.iter().enumerate() {
            let text = entry.trim();
            match text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            {
                Ok(net) => nets.push(net),
                Err(_) => bad.push((i, entry.clone())),
            }
        }
        if bad.is_empty() {
            Ok(nets)
        } else {
            Err(bad)
        }
    }
}

impl Default for PortalConfig {
    fn default() -> Self {
        PortalConfig {
            session_ttl: Duration::from_secs(12 * 3600),
            reset_ttl: Duration::from_secs(3600),
            invite_ttl: Duration::from_secs(7 * 24 * 3600),
            attempts_per_account: 10,
            attempts_per_address: 30,
            reads_per_address: 300,
            max_developers: 10_000,
            max_apps_per_developer: 20,
            secure_cookies: false,
            trusted_proxies: Vec::new(),
        }
    }
}

/// Per-organisation quotas on streaming APIs. Every organisation gets the same; each is
/// checked where it applies: the counts when an API is written, the instances and the
/// memory by the gateway that runs the streams (`sluice serve` hands it these).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QuotasConfig {
    /// Streaming APIs one organisation may have.
    pub max_streaming_apis: usize,
    /// Streams (entries of `x-sluice-streaming.streams`) across one organisation's APIs.
    pub max_streams: usize,
    /// Per-client stream instances (`$sluice_context`) running at once for one
    /// organisation, across its APIs.
    pub max_client_streams: usize,
    /// Bytes of messages one organisation's streams may hold in flight (read and not yet
    /// delivered); a read past it waits until earlier messages are delivered.
    pub max_inflight_bytes: usize,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        QuotasConfig {
            max_streaming_apis: 50,
            max_streams: 200,
            max_client_streams: 200,
            max_inflight_bytes: 256 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Metadata keys (any case) a stream's live tail shows as `***`, besides the ones that
    /// always are (`authorization`, `proxy-authorization`, `cookie`, `set-cookie`,
    /// `x-api-key`).
    pub redact: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    pub address: String,
    pub port: u16,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            address: "127.0.0.1".into(),
            port: 3000,
        }
    }
}

impl ListenConfig {
    /// `address:port`, bracketing an IPv6 address.
    pub fn socket(&self) -> String {
        crate::server::socket_address(&self.address, self.port)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite://file.db`, a file path, or `postgres://...`.
    pub url: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: DEFAULT_STORE_URL.into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct StreamingConfig {
    /// Accept streaming APIs (`POST /api/apis/streams`).
    pub enabled: bool,
    /// Where posted streams may connect; their addresses are checked when posted.
    pub egress: crate::egress::EgressConfig,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PaginationConfig {
    /// Records per page of every list (`?p=`).
    pub page_size: u32,
}

impl Default for PaginationConfig {
    fn default() -> Self {
        PaginationConfig { page_size: 10 }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// The largest request body, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: 2 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// The first admin's key, used only when the store is empty; unset, a random key is
    /// made and printed once.
    pub key: Option<String>,
    /// The name of the first organisation.
    pub org: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            key: None,
            org: "default".into(),
        }
    }
}

const OVERRIDABLE: Overridable = Overridable {
    sections: &[
        ("listen", &["address", "port"]),
        ("store", &["url"]),
        ("streaming", &["enabled"]),
        ("streaming.egress", &["allow"]),
        ("pagination", &["page_size"]),
        (
            "http",
            &["max_body_bytes", "header_read_timeout", "body_read_timeout"],
        ),
        ("admin", &["key", "org"]),
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
                "retention",
                "max_pending_per_org",
                "max_pending_per_receiver",
            ],
        ),
        ("logger", &["level", "format"]),
        (
            "quotas",
            &[
                "max_streaming_apis",
                "max_streams",
                "max_client_streams",
                "max_inflight_bytes",
            ],
        ),
        (
            "portal",
            &[
                "session_ttl",
                "reset_ttl",
                "invite_ttl",
                "attempts_per_account",
                "attempts_per_address",
                "reads_per_address",
                "max_developers",
                "max_apps_per_developer",
                "secure_cookies",
                "trusted_proxies",
            ],
        ),
    ],
    top_level: &["secret"],
};

/// Loads `file` (or the defaults when `None`), applies the `SLUICE_DB_` overrides from
/// `env`, and checks what can be checked without touching the network.
pub fn load(
    file: Option<&Path>,
    env: &[(String, String)],
) -> Result<DashboardConfig, ConfigErrors> {
    let (name, text) = overrides::read(file)?;
    parse(&name, &text, env)
}

/// Parses a dashboard config document; see [`load`].
pub fn parse(
    name: &str,
    text: &str,
    env: &[(String, String)],
) -> Result<DashboardConfig, ConfigErrors> {
    let (config, doc): (DashboardConfig, _) =
        overrides::parse(name, text, ENV_PREFIX, &OVERRIDABLE, env)?;
    config.check(&doc)?;
    Ok(config)
}

/// The process's `SLUICE_DB_` variables.
pub fn env_overrides() -> Vec<(String, String)> {
    overrides::from_process(ENV_PREFIX)
}

impl DashboardConfig {
    fn check(&self, doc: &yaml::Document) -> Result<(), ConfigErrors> {
        let mut errors = Vec::new();
        let at = |path: &str| doc.location(path, doc.locate(path));
        if let Err(bad) = crate::egress::EgressPolicy::new(&self.streaming.egress) {
            for (i, e) in bad {
                let path = format!("streaming.egress.allow[{i}]");
                errors.push(ConfigError::new(e.to_string()).at(at(&path)));
            }
        }
        if self.pagination.page_size == 0 {
            errors.push(ConfigError::new("must be above zero").at(at("pagination.page_size")));
        }
        if self.http.max_body_bytes == 0 {
            errors.push(ConfigError::new("must be above zero").at(at("http.max_body_bytes")));
        }
        if let Some(secret) = &self.secret {
            if secret.len() < MIN_SECRET_LEN {
                errors.push(
                    ConfigError::new(format!(
                        "the secret is shorter than {MIN_SECRET_LEN} characters"
                    ))
                    .at(at("secret")),
                );
            }
        }
        if let Some(key) = &self.admin.key {
            if key.len() < MIN_ADMIN_KEY_LEN || key.chars().any(|c| c.is_whitespace()) {
                errors.push(
                    ConfigError::new(format!(
                        "an admin key is at least {MIN_ADMIN_KEY_LEN} characters, without spaces"
                    ))
                    .at(at("admin.key")),
                );
            }
        }
        if self.admin.org.trim().is_empty() {
            errors.push(ConfigError::new("must not be empty").at(at("admin.org")));
        }
        for (path, problem) in self.webhooks.problems() {
            errors.push(ConfigError::new(problem).at(at(path)));
        }
        for (key, value) in [
            ("quotas.max_streaming_apis", self.quotas.max_streaming_apis),
            ("quotas.max_streams", self.quotas.max_streams),
            ("quotas.max_client_streams", self.quotas.max_client_streams),
            ("quotas.max_inflight_bytes", self.quotas.max_inflight_bytes),
            ("portal.max_developers", self.portal.max_developers),
            (
                "portal.max_apps_per_developer",
                self.portal.max_apps_per_developer,
            ),
            (
                "portal.attempts_per_account",
                self.portal.attempts_per_account as usize,
            ),
            (
                "portal.attempts_per_address",
                self.portal.attempts_per_address as usize,
            ),
            (
                "portal.reads_per_address",
                self.portal.reads_per_address as usize,
            ),
        ] {
            if value == 0 {
                errors.push(ConfigError::new("must be above zero").at(at(key)));
            }
        }
        for (key, value) in [
            ("portal.session_ttl", self.portal.session_ttl),
            ("portal.reset_ttl", self.portal.reset_ttl),
            ("portal.invite_ttl", self.portal.invite_ttl),
        ] {
            if value.0.is_zero() {
                errors.push(ConfigError::new("must be above zero").at(at(key)));
            }
        }
        if let Err(bad) = self.portal.proxies() {
            for (i, entry) in bad {
                let path = format!("portal.trusted_proxies[{i}]");
                errors.push(
                    ConfigError::new(format!(
                        "`{entry}` is not an address or a range (10.0.0.0/8)"
                    ))
                    .at(at(&path)),
                );
            }
        }
        if self.store.url.trim().is_empty() {
            errors.push(ConfigError::new("must not be empty").at(at("store.url")));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(errors))
        }
    }
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
        let c = parse("db.yaml", "", &[]).unwrap();
        assert_eq!(c.listen.socket(), "127.0.0.1:3000");
        assert_eq!(c.store.url, DEFAULT_STORE_URL);
        assert!(!c.streaming.enabled);
        assert_eq!(c.pagination.page_size, 10);
        assert!(c.secret.is_none());
        assert!(c.admin.key.is_none());
        assert_eq!(c.webhooks, DeliveryConfig::default());
    }

    #[test]
    fn webhooks_are_configured_and_overridden() {
        let text = "webhooks:\n  enabled: false\n  max_attempts: 3\n";
        let c = parse(
            "db.yaml",
            text,
            &env(&[
                ("SLUICE_DB_WEBHOOKS_MAX_ATTEMPTS", "5"),
                ("SLUICE_DB_WEBHOOKS_INITIAL_BACKOFF", "250ms"),
            ]),
        )
        .unwrap();
        assert!(!c.webhooks.enabled);
        assert_eq!(c.webhooks.max_attempts, 5);
        assert_eq!(c.webhooks.initial_backoff, Duration::from_millis(250));
        let e = parse("db.yaml", "webhooks:\n  max_attempts: 0\n", &[]).unwrap_err();
        assert!(e.to_string().contains("webhooks.max_attempts"), "{e}");
        // The queue's bounds, from the file and from the environment.
        let c = parse(
            "db.yaml",
            "webhooks:\n  retention: 24h\n",
            &env(&[("SLUICE_DB_WEBHOOKS_MAX_PENDING_PER_ORG", "50")]),
        )
        .unwrap();
        assert_eq!(c.webhooks.retention, Duration::from_secs(86_400));
        assert_eq!(c.webhooks.max_pending_per_org, 50);
        let e = parse(
            "db.yaml",
            "webhooks:\n  max_pending_per_org: 0\n  retention: 0s\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("db.yaml:2:"), "{e}");
        assert!(e.contains("webhooks.max_pending_per_org"), "{e}");
        assert!(e.contains("webhooks.retention"), "{e}");
    }

    #[test]
    fn environment_overrides_keys_and_types_them() {
        let text = "streaming:\n  enabled: false\npagination:\n  page_size: 5\n";
        let c = parse(
            "db.yaml",
            text,
            &env(&[
                ("SLUICE_DB_STREAMING_ENABLED", "true"),
                ("SLUICE_DB_LISTEN_PORT", "3100"),
                ("SLUICE_DB_PAGINATION_PAGE_SIZE", "7"),
                ("SLUICE_DB_ADMIN_KEY", "0123456789abcdef"),
                ("SLUICE_DB_SECRET", "a-long-enough-secret"),
                ("SLUICE_DB_STORE_URL", "postgres://db/x"),
            ]),
        )
        .unwrap();
        assert!(c.streaming.enabled);
        assert_eq!(c.listen.port, 3100);
        assert_eq!(c.pagination.page_size, 7);
        assert_eq!(c.admin.key.as_deref(), Some("0123456789abcdef"));
        assert_eq!(c.secret.as_deref(), Some("a-long-enough-secret"));
        assert_eq!(c.store.url, "postgres://db/x");
    }

    #[test]
    fn the_console_redacts_more_keys_when_told() {
        let c = parse("db.yaml", "console:\n  redact: [x-trace-token]\n", &[]).unwrap();
        assert_eq!(c.console.redact, ["x-trace-token"]);
        let e = parse("db.yaml", "console:\n  redcat: []\n", &[]).unwrap_err();
        assert!(e.to_string().contains("db.yaml:2:"), "{e}");
    }

    #[test]
    fn the_portal_trusts_the_proxies_it_is_told() {
        let c = parse(
            "db.yaml",
            "portal:\n  trusted_proxies: [10.0.0.0/8, '::1']\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.portal.proxies().unwrap().len(), 2);
        let e = parse("db.yaml", "portal:\n  trusted_proxies: [nope]\n", &[]).unwrap_err();
        assert!(e.to_string().contains("portal.trusted_proxies[0]"), "{e}");
    }

    #[test]
    fn quotas_have_defaults_and_are_overridden() {
        let c = parse("db.yaml", "", &[]).unwrap();
        assert_eq!(c.quotas, QuotasConfig::default());
        let c = parse(
            "db.yaml",
            "quotas:\n  max_streams: 3\n",
            &env(&[("SLUICE_DB_QUOTAS_MAX_STREAMING_APIS", "2")]),
        )
        .unwrap();
        assert_eq!((c.quotas.max_streaming_apis, c.quotas.max_streams), (2, 3));
        let e = parse("db.yaml", "quotas:\n  max_client_streams: 0\n", &[]).unwrap_err();
        assert!(e.to_string().contains("db.yaml:2:"), "{e}");
        assert!(e.to_string().contains("quotas.max_client_streams"), "{e}");
    }

    #[test]
    fn errors_are_positioned() {
        let e = parse("db.yaml", "listen:\n  port: eighty\n", &[]).unwrap_err();
        assert!(e.to_string().starts_with("db.yaml:2:"), "{e}");
        let e = parse("db.yaml", "pagination:\n  page_size: 0\n", &[]).unwrap_err();
        assert!(e.to_string().contains("db.yaml:2:"), "{e}");
        assert!(e.to_string().contains("pagination.page_size"), "{e}");
        let e = parse("db.yaml", "secret: short\n", &[]).unwrap_err();
        assert!(e.to_string().contains("db.yaml:1:"), "{e}");
        let e = parse("db.yaml", "", &env(&[("SLUICE_DB_LISTEN_PROT", "1")])).unwrap_err();
        assert!(e.to_string().contains("SLUICE_DB_LISTEN_PROT"), "{e}");
        let e = parse("db.yaml", "", &env(&[("SLUICE_DB_ADMIN_KEY", "short")])).unwrap_err();
        assert!(e.to_string().contains("admin.key"), "{e}");
    }
}
