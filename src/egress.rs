//! Where streams posted by organisations may connect (`streaming.egress`). The operator's
//! own streams (config files, the apps directory, `sluice run`) reach anything; a stream
//! that came from the store (posted to the dashboard or the gateway's API) reaches public
//! addresses and only the private hosts, ranges and ports the operator allows. Loopback,
//! link-local, cloud metadata and unspecified addresses and the process's own listeners
//! are refused unless allowed by name.
//!
//! The same policy holds for everything else an organisation's definitions reach: a
//! posted API's upstream and JWKS, its webhooks and event handlers, its portal's
//! subscriptions.
//!
//! Addresses are checked when a connection is made, after the name is resolved, so a
//! name that resolves to a refused address is refused too: HTTP requests resolve each
//! hop once and connect to exactly the checked addresses
//! (`connect::outbound`, the gateway's upstream client); broker clients resolve and
//! check their addresses in `connect` ([`Egress::check`]). Building a posted stream
//! checks literal addresses at once and records names, which the dashboard resolves for
//! a dry run.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use serde::Deserialize;

/// `streaming.egress` in the gateway's and the dashboard's configs.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// What posted streams may reach besides public addresses: addresses (`127.0.0.1`),
    /// ranges (`10.0.0.0/8`, `fc00::/7`) and host names (`broker.internal`), each
    /// optionally with a port (`10.1.2.3:5432`, `[fd00::1]:443`, `db.internal:5432`).
    pub allow: Vec<String>,
    /// Listeners of the process besides the server's own (`sluice serve` gives the
    /// gateway the dashboard's, and the dashboard the gateway's). Not read from files.
    #[serde(skip)]
    pub also_own: Vec<SocketAddr>,
    /// Names posted streams may not use whatever they may reach (the cluster bus's; see
    /// [`crate::reserved`]). Not read from files: `sluice serve` gives the dashboard its
    /// gateway's.
    #[serde(skip)]
    pub reserved: crate::reserved::ReservedNames,
}

/// The address a listener setting (`127.0.0.1:3000`, `[::]:8080`, `localhost:3000`)
/// listens on, when it can be told without the network.
pub fn listener_address(socket: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    socket.to_socket_addrs().ok()?.next()
}

/// Why an address may not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error(
        "`{entry}` is not an address, a range or a host name, with an optional port ({reason})"
    )]
    BadRule { entry: String, reason: String },
    #[error("`{host}:{port}` is refused for what organisations post: {addr} is {why} (the operator can allow it in `streaming.egress.allow`)")]
    Denied {
        host: String,
        port: u16,
        addr: IpAddr,
        why: &'static str,
    },
    #[error("`{target}` is refused for what organisations post: {why}")]
    Refused { target: String, why: String },
    #[error("cannot resolve `{host}`: {reason}")]
    Unresolved { host: String, reason: String },
}

#[derive(Debug, Clone, PartialEq)]
enum Target {
    Net(IpNet),
    Host(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    target: Target,
    port: Option<u16>,
}

impl Rule {
    fn parse(entry: &str) -> Result<Rule, EgressError> {
        let bad = |reason: &str| EgressError::BadRule {
            entry: entry.to_owned(),
            reason: reason.to_owned(),
        };
        let text = entry.trim();
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        // `[v6]:port`, a bare v6 address or range (more than one colon), or `x[:port]`.
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| bad("no closing `]`"))?;
            match after {
                "" => (host, None),
                p => (
                    host,
                    Some(
                        p.strip_prefix(':')
                            .ok_or_else(|| bad("`]` is not followed by `:port`"))?,
                    ),
                ),
            }
        } else if text.matches(':').count() > 1 {
            (text, None)
        } else {
            match text.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            }
        };
        let port = match port {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
            ),
            None => None,
        };
        let target = if let Ok(net) = host.parse::<IpNet>() {
            Target::Net(net.trunc())
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            Target::Net(IpNet::from(ip))
        } else if !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        {
            Target::Host(normal_host(host))
        } else {
            return Err(bad("the host is neither an address, a range nor a name"));
        };
        Ok(Rule { target, port })
    }

    fn matches(&self, host: &str, addr: SocketAddr) -> bool {
        if self.port.is_some_and(|p| p != addr.port()) {
            return false;
        }
        match &self.target {
            Target::Net(net) => net.contains(&canonical(addr.ip())),
            Target::Host(name) => *name == normal_host(host),
        }
    }
}

fn normal_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// IPv4 addresses written as IPv6 (`::ffff:127.0.0.1`) are checked as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The IPv4 address an IPv6 address stands for, when it is of a prefix that carries one:
/// the well-known NAT64 prefix `64:ff9b::/96`, IPv4-compatible `::a.b.c.d` (not `::` or
/// `::1`), and 6to4 `2002:aabb:ccdd::/48`. (`::ffff:a.b.c.d` is made canonical before.)
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    // The IPv4 address in segments `i` and `i + 1`.
    let v4_at = |i: usize| Ipv4Addr::from((u32::from(s[i]) << 16) | u32::from(s[i + 1]));
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    let compatible = s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1);
    if nat64 || compatible {
        Some(v4_at(6))
    } else if s[0] == 0x2002 {
        Some(v4_at(1))
    } else {
        None
    }
}

/// Why an address is refused unless allowed, or `None` for a public address.
pub fn restricted(ip: IpAddr) -> Option<&'static str> {
    const METADATA_V4: [Ipv4Addr; 2] = [
        Ipv4Addr::new(169, 254, 169, 254),
        // Alibaba Cloud's metadata service.
        Ipv4Addr::new(100, 100, 100, 200),
    ];
    // AWS's metadata service over IPv6.
    const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    let in_net = |net: &str, ip: IpAddr| net.parse::<IpNet>().is_ok_and(|n| n.contains(&ip));
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let ip = IpAddr::V4(v4);
            if METADATA_V4.contains(&v4) {
                Some("a cloud metadata address")
            } else if v4.is_unspecified() || in_net("0.0.0.0/8", ip) {
                Some("an unspecified address")
            } else if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_link_local() {
                Some("a link-local address")
            } else if v4.is_private() || in_net("100.64.0.0/10", ip) {
                Some("a private address")
            } else if v4.is_multicast() || v4.is_broadcast() || in_net("240.0.0.0/4", ip) {
                Some("not a unicast address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            // An IPv4 address carried in IPv6 (NAT64, IPv4-compatible, 6to4) reaches that
            // IPv4 address on hosts that route these prefixes: judge it as that address.
            if let Some(v4) = embedded_v4(v6) {
                return restricted(IpAddr::V4(v4));
            }
            let ip = IpAddr::V6(v6);
            if v6 == METADATA_V6 {
                Some("a cloud metadata address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if v6.is_loopback() {
                Some("a loopback address")
            } else if in_net("fe80::/10", ip) {
                Some("a link-local address")
            } else if in_net("fc00::/7", ip) {
                Some("a private address")
            } else if v6.is_multicast() {
                Some("not a unicast address")
            } else {
                None
            }
        }
    }
}

/// Resolves a name to addresses in place of the system's resolver.
pub type LookupFn = dyn Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>> + Send + Sync;

/// How names are resolved: the system's resolver, or a function (an embedding
/// application's own resolver; the tests' resolver that answers differently each time).
#[derive(Clone, Default)]
struct Lookup(Option<Arc<LookupFn>>);

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "custom" } else { "system" })
    }
}

impl PartialEq for Lookup {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The rules posted streams connect under.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EgressPolicy {
    allow: Vec<Rule>,
    /// The process's own listeners (the gateway's, the dashboard's): refused even when
    /// their address is allowed, unless a rule names their port.
    own: Vec<SocketAddr>,
    lookup: Lookup,
    /// The names posted streams may not use (the cluster bus's subjects, streams, keys).
    reserved: crate::reserved::ReservedNames,
}

impl EgressPolicy {
    /// The policy of `config`; every bad entry is reported with its index.
    pub fn new(config: &EgressConfig) -> Result<Self, Vec<(usize, EgressError)>> {
        let mut allow = Vec::new();
        let mut errors = Vec::new();
        for (i, entry) in config.allow.iter().enumerate() {
            match Rule::parse(entry) {
                Ok(r) => allow.push(r),
                Err(e) => errors.push((i, e)),
            }
        }
        if errors.is_empty() {
            Ok(EgressPolicy {
                allow,
                own: config.also_own.clone(),
                lookup: Lookup::default(),
                reserved: config.reserved.clone(),
            })
        } else {
            Err(errors)
        }
    }

    /// The same policy, resolving names with `lookup` instead of the system's resolver.
    pub fn with_lookup(mut self, lookup: Arc<LookupFn>) -> Self {
        self.lookup = Lookup(Some(lookup));
        self
    }

    /// The same policy, also refusing `listener` (one of the process's own).
    pub fn with_own_listener(mut self, listener: SocketAddr) -> Self {
        self.own.push(listener);
        self
    }

    /// The same policy, also refusing the names `reserved` refuses.
    pub fn with_reserved(mut self, reserved: &crate::reserved::ReservedNames) -> Self {
        self.reserved.extend(reserved);
        self
    }

    /// The names posted streams may not use, whatever this policy lets them reach.
    pub fn reserved(&self) -> &crate::reserved::ReservedNames {
        &self.reserved
    }

    /// Whether `addr`, reached by the name `host` (or the address itself), is allowed.
    pub fn check(&self, host: &str, addr: SocketAddr) -> Result<(), EgressError> {
        let ip = canonical(addr.ip());
        let denied = |why: &'static str| EgressError::Denied {
            host: host.to_owned(),
            port: addr.port(),
            addr: ip,
            why,
        };
        let own = self.own.iter().any(|l| {
            l.port() == addr.port() && (l.ip().is_unspecified() || canonical(l.ip()) == ip)
        });
        if own {
            // Only a rule that names the port opens the process's own listener.
            if self
                .allow
                .iter()
                .any(|r| r.port.is_some() && r.matches(host, addr))
            {
                return Ok(());
            }
            return Err(denied("this server's own listener"));
        }
        if self.allow.iter().any(|r| r.matches(host, addr)) {
            return Ok(());
        }
        match restricted(ip) {
            Some(why) => Err(denied(why)),
            None => Ok(()),
        }
    }

    /// Checks `host:port` without resolving: a literal address is checked, a name
    /// answers `None` (it is checked when resolved).
    pub fn check_literal(&self, host: &str, port: u16) -> Result<Option<()>, EgressError> {
        match literal(host) {
            Some(ip) => self.check(host, SocketAddr::new(ip, port)).map(Some),
            None => Ok(None),
        }
    }

    /// The allowed addresses of `host:port`; an error when none is (naming the first
    /// refused one) or when the name does not resolve.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, EgressError> {
        if let Some(ip) = literal(host) {
            let addr = SocketAddr::new(ip, port);
            self.check(host, addr)?;
            return Ok(vec![addr]);
        }
        let unresolved = |e: std::io::Error| EgressError::Unresolved {
            host: host.to_owned(),
            reason: e.to_string(),
        };
        let found: Vec<SocketAddr> = match &self.lookup.0 {
            None => tokio::net::lookup_host((host, port))
                .await
                .map_err(unresolved)?
                .collect(),
            Some(lookup) => lookup(host, port).map_err(unresolved)?,
        };
        let mut allowed = Vec::new();
        let mut first_refusal = None;
        for addr in found {
            match self.check(host, addr) {
                Ok(()) => allowed.push(addr),
                Err(e) => {
                    first_refusal.get_or_insert(e);
                }
            }
        }
        match (allowed.is_empty(), first_refusal) {
            (false, _) => Ok(allowed),
            (true, Some(e)) => Err(e),
            (true, None) => Err(EgressError::Unresolved {
                host: host.to_owned(),
                reason: "no address".into(),
            }),
        }
    }
}

/// `host` as an address, brackets allowed (`[::1]`).
fn literal(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok()
}

/// The host and port of an address as connectors take them (`nats://h:4222`,
/// `h:9092`, `amqps://u:p@h/vhost`), with `default_port` when none is written. A Unix
/// socket (`redis+unix://`, `unix://`) is refused outright: it reaches the host's files.
pub fn host_port(address: &str, default_port: u16) -> Result<(String, u16), EgressError> {
    let refused = |why: &str| EgressError::Refused {
        target: address.to_owned(),
        why: why.to_owned(),
    };
    let text = address.trim();
    let with_scheme = if text.contains("://") {
        text.to_owned()
    } else {
        format!("tcp://{text}")
    };
    let url =
        url::Url::parse(&with_scheme).map_err(|e| refused(&format!("not an address: {e}")))?;
    if url.scheme().contains("unix") {
        return Err(refused("a Unix socket reaches the server's own files"));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| refused("no host"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok((host, url.port().unwrap_or(default_port)))
}

/// One address a posted stream connects to, as building it found it: named hosts are
/// resolved later (by the dashboard's dry run, and by the connection itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressTarget {
    /// The component's path in its document.
    pub path: String,
    pub host: String,
    pub port: u16,
}

/// A component's view of the policy: none for the operator's own streams.
#[derive(Debug, Clone, Default)]
pub struct Egress {
    policy: Option<Arc<EgressPolicy>>,
    targets: Vec<(String, u16)>,
}

impl Egress {
    /// Reaches anything (the operator's streams).
    pub fn open() -> Self {
        Egress::default()
    }

    pub fn new(policy: Option<Arc<EgressPolicy>>, targets: Vec<(String, u16)>) -> Self {
        Egress { policy, targets }
    }

    pub fn policy(&self) -> Option<&Arc<EgressPolicy>> {
        self.policy.as_ref()
    }

    /// Resolves and checks every target before a client connects to them. Clients
    /// resolve names again themselves, so this keeps out what the name resolves to now.
    pub async fn check(&self) -> Result<(), EgressError> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        for (host, port) in &self.targets {
            policy.resolve(host, *port).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> EgressPolicy {
        EgressPolicy::new(&EgressConfig {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .unwrap()
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn restricted_ranges_are_refused_by_default() {
        let p = policy(&[]);
        for a in [
            "127.0.0.1:80",
            "127.8.9.1:80",
            "169.254.169.254:80",
            "169.254.1.1:80",
            "0.0.0.0:80",
            "10.1.2.3:80",
            "172.16.0.1:80",
            "192.168.1.1:80",
            "100.100.100.200:80",
            "[::1]:80",
            "[::]:80",
            "[fe80::1]:80",
            "[fd00::1]:80",
            "[::ffff:127.0.0.1]:80",
            "[fd00:ec2::254]:80",
            // IPv4 inside IPv6: NAT64, IPv4-compatible, 6to4.
            "[64:ff9b::a00:1]:80",
            "[64:ff9b::7f00:1]:80",
            "[::10.0.0.1]:80",
            "[::169.254.169.254]:80",
            "[2002:a9fe:a9fe::1]:80",
            "[2002:c0a8:101::]:80",
        ] {
            assert!(p.check("h", addr(a)).is_err(), "{a} should be refused");
        }
        for a in [
            "93.184.216.34:80",
            "[2606:4700::1111]:443",
            "172.32.0.1:80",
            "[64:ff9b::5db8:d822]:80",
            "[2002:5db8:d822::1]:80",
        ] {
            assert!(p.check("h", addr(a)).is_ok(), "{a} should be allowed");
        }
    }

    #[test]
    fn rules_allow_addresses_ranges_names_and_ports() {
        let p = policy(&[
            "127.0.0.1",
            "10.0.0.0/8",
            "db.internal:5432",
            "[fd00::1]:443",
        ]);
        assert!(p.check("x", addr("127.0.0.1:9000")).is_ok());
        assert!(p.check("x", addr("10.9.9.9:1")).is_ok());
        assert!(p.check("db.internal", addr("192.168.0.5:5432")).is_ok());
        assert!(p.check("DB.Internal.", addr("192.168.0.5:5432")).is_ok());
        assert!(p.check("db.internal", addr("192.168.0.5:22")).is_err());
        assert!(p.check("x", addr("[fd00::1]:443")).is_ok());
        assert!(p.check("x", addr("[fd00::1]:80")).is_err());
        assert!(p.check("x", addr("192.168.0.5:80")).is_err());
    }

    #[test]
    fn own_listeners_need_a_rule_with_their_port() {
        let p = policy(&["127.0.0.1"]).with_own_listener(addr("127.0.0.1:3000"));
        let e = p.check("localhost", addr("127.0.0.1:3000")).unwrap_err();
        assert!(e.to_string().contains("own listener"), "{e}");
        assert!(p.check("x", addr("127.0.0.1:3001")).is_ok());
        let p = policy(&["127.0.0.1:3000"]).with_own_listener(addr("0.0.0.0:3000"));
        assert!(p.check("x", addr("127.0.0.1:3000")).is_ok());
        assert!(p.check("x", addr("10.0.0.1:3000")).is_err());
    }

    #[test]
    fn bad_rules_are_named() {
        let e = EgressPolicy::new(&EgressConfig {
            allow: vec![
                "ok.example".into(),
                "a b".into(),
                "h:99999".into(),
                "[::1".into(),
            ],
            ..Default::default()
        })
        .unwrap_err();
        let at: Vec<usize> = e.iter().map(|(i, _)| *i).collect();
        assert_eq!(at, vec![1, 2, 3]);
    }

    #[test]
    fn addresses_as_connectors_write_them() {
        assert_eq!(
            host_port("nats://u:p@n.example:4223", 4222).unwrap(),
            ("n.example".into(), 4223)
        );
        assert_eq!(
            host_port("k.example", 9092).unwrap(),
            ("k.example".into(), 9092)
        );
        assert_eq!(
            host_port("10.0.0.1:9093", 9092).unwrap(),
            ("10.0.0.1".into(), 9093)
        );
        assert_eq!(host_port("[::1]:5672", 1).unwrap(), ("::1".into(), 5672));
        assert!(host_port("redis+unix:///tmp/redis.sock", 6379).is_err());
    }

    #[tokio::test]
    async fn names_are_checked_after_resolving() {
        let e = policy(&[]).resolve("localhost", 80).await.unwrap_err();
        assert!(matches!(e, EgressError::Denied { .. }), "{e}");
        assert!(policy(&["127.0.0.1", "::1"])
            .resolve("localhost", 80)
            .await
            .is_ok());
    }
}
