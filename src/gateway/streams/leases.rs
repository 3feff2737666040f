//! Access decided for the whole life of a stream connection, not only at its first byte.
//!
//! Each SSE, long-poll or WebSocket connection holds a lease: who let it in (the key, the
//! token's expiry, or nobody), on which API, method and path. The leases
//! are reviewed against the keys as stored and the API table, at once when this gateway
//! changes or deletes a key (before it answers, so that nothing published after the
//! answer reaches a revoked client) and every second otherwise; a lease that no longer
//! holds ends its connection with the reason (see [`crate::http::ending`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use http::Method;
use parking_lot::Mutex;

use crate::gateway::api::Api;
use crate::gateway::keys::{KeyError, Keys, Session};
use crate::http::ending::Ending;

/// Why a connection was ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    KeyDeleted,
    KeyInactive,
    KeyExpired,
    NoAccess,
    TokenExpired,
    ApiGone,
    RouteGone,
    AuthRequired,
    /// The key's metadata changed: what the connection was given (a filter's
    /// `@caller.meta`) no longer holds, so it is told to come back.
    KeyChanged,
}

impl Revoked {
    /// What the client reads.
    pub fn text(self) -> &'static str {
        match self {
            Revoked::KeyDeleted => "the key was revoked",
            Revoked::KeyInactive => "the key was deactivated",
            Revoked::KeyExpired => "the key has expired",
            Revoked::NoAccess => "the key no longer has access to this API",
            Revoked::TokenExpired => "the token has expired",
            Revoked::ApiGone => "the API was removed or deactivated",
            Revoked::RouteGone => "the API no longer serves this stream",
            Revoked::AuthRequired => "the API now requires credentials",
            Revoked::KeyChanged => "the key was changed: reconnect",
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Revoked::KeyDeleted => "key_deleted",
            Revoked::KeyInactive => "key_inactive",
            Revoked::KeyExpired => "key_expired",
            Revoked::NoAccess => "no_access",
            Revoked::TokenExpired => "token_expired",
            Revoked::ApiGone => "api_gone",
            Revoked::RouteGone => "route_gone",
            Revoked::AuthRequired => "auth_required",
            Revoked::KeyChanged => "key_changed",
        }
    }
}

/// What a connection was let in on.
#[derive(Debug, Clone)]
pub struct Terms {
    pub api_id: String,
    /// The key that authenticated it, if one did.
    pub key_id: Option<String>,
    pub method: Method,
    /// The path below the API's listen path, which the key's rights are checked on.
    pub rest: String,
    /// When the caller's token stops being good (its `exp`), in unix seconds.
    pub token_expires: Option<i64>,
    /// Whether authentication let it in (a key, a token): one that came in without
    /// credentials is ended when the API starts to require them.
    pub authenticated: bool,
    /// A fingerprint of the key's metadata when it let the connection in (see
    /// [`meta_print`]).
    pub key_meta: Option<u64>,
}

/// A fingerprint of a key's metadata, to tell when it changed.
pub fn meta_print(meta: &serde_json::Map<String, serde_json::Value>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(meta).unwrap_or_default().hash(&mut h);
    h.finish()
}

struct Lease {
    terms: Terms,
    ending: Ending,
}

type Open = Mutex<HashMap<u64, Lease>>;

/// When a connection whose key changed is told to come back (SSE `retry:`).
const RECONNECT: std::time::Duration = std::time::Duration::from_secs(1);

/// The leases of every gateway in this process, for the operator's live view: the
/// dashboard that `sluice serve` runs beside its gateway reads them (see [`open_by_key`]).
static ALL: LazyLock<Mutex<Vec<Weak<Open>>>> = LazyLock::new(Default::default);

/// The leases of the open connections of one gateway.
pub struct Leases {
    open: Arc<Open>,
    next: AtomicU64,
}

impl Default for Leases {
    fn default() -> Self {
        let open: Arc<Open> = Arc::default();
        let mut all = ALL.lock();
        all.retain(|o| o.strong_count() > 0);
        all.push(Arc::downgrade(&open));
        Leases {
            open,
            next: AtomicU64::new(0),
        }
    }
}

/// The connections open now on API `api_id` in this process, by the key that let each
/// in (`None`: no key), most first.
pub fn open_by_key(api_id: &str) -> Vec<(Option<String>, usize)> {
    let mut counts: BTreeMap<Option<String>, usize> = BTreeMap::new();
    let all: Vec<Arc<Open>> = ALL.lock().iter().filter_map(Weak::upgrade).collect();
    for open in all {
        for lease in open.lock().values() {
            if lease.terms.api_id == api_id && lease.ending.in_use() {
                *counts.entry(lease.terms.key_id.clone()).or_default() += 1;
            }
        }
    }
    let mut out: Vec<_> = counts.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

impl Leases {
    /// A lease on `terms`: the returned ending is to be held by the connection for as long
    /// as it is open. A lease whose ending no connection holds any more is forgotten at
    /// the next review.
    pub fn open(&self, terms: Terms) -> Ending {
        let ending = Ending::new();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.open.lock().insert(
            id,
            Lease {
                terms,
                ending: ending.clone(),
            },
        );
        ending
    }

    /// The connections open under a lease.
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reviews every lease against the keys as stored now and `served` (the APIs of the
    /// table); returns how many connections were ended.
    pub async fn review(&self, keys: &Keys, served: &[Arc<Api>]) -> Result<usize, KeyError> {
        let ids: Vec<String> = {
            let open = self.open.lock();
            let ids: BTreeSet<&String> = open
                .values()
                .filter_map(|l| l.terms.key_id.as_ref())
                .collect();
            ids.into_iter().cloned().collect()
        };
        let mut stored = if ids.is_empty() {
            HashMap::new()
        } else {
            keys.current(&ids).await?
        };
        // Every key asked for, found or gone: a lease opened since the ids were taken
        // names a key not asked for, which this review leaves alone.
        let current: HashMap<String, Option<Session>> = ids
            .into_iter()
            .map(|id| {
                let key = stored.remove(&id);
                (id, key)
            })
            .collect();
        let apis: HashMap<&str, &Api> = served.iter().map(|a| (a.id.as_str(), &**a)).collect();
        let now = chrono::Utc::now().timestamp();
        Ok(self.end_where(|terms| verdict(terms, now, Some(&current), Some(&apis))))
    }

    /// Ends every open connection because this gateway restarts: each client is told to
    /// come back after `retry` (through the load balancer, to another node), resuming
    /// where it was. Returns how many were told.
    pub fn restart_all(&self, retry: std::time::Duration) -> usize {
        let mut open = self.open.lock();
        let told = open.values().filter(|l| l.ending.in_use()).count();
        for lease in open.values() {
            lease.ending.restart(retry, "the gateway is restarting");
        }
        open.clear();
        told
    }

    /// Ends the connections whose token has expired, between full reviews.
    pub fn expire(&self) -> usize {
        let now = chrono::Utc::now().timestamp();
        self.end_where(|terms| verdict(terms, now, None, None))
    }

    /// Ends the connections `verdict` refuses, and forgets the leases no connection holds.
    fn end_where(&self, verdict: impl Fn(&Terms) -> Option<Revoked>) -> usize {
        let mut ended = 0;
        self.open.lock().retain(|_, lease| {
            if !lease.ending.in_use() {
                return false;
            }
            let Some(why) = verdict(&lease.terms) else {
                return true;
            };
            match why {
                // Still let in, on other terms: it comes back at once.
                Revoked::KeyChanged => lease.ending.restart(RECONNECT, why.text()),
                _ => lease.ending.end(why.text()),
            }
            metrics::counter!(
                crate::metrics::STREAM_CONNECTIONS_REVOKED,
                "api_id" => lease.terms.api_id.clone(),
                "reason" => why.label(),
            )
            .increment(1);
            ended += 1;
            false
        });
        ended
    }
}

/// Why the connection let in on `terms` may no longer be served at `now`, if it may not.
/// `keys` (each key asked for, by id, as stored or `None` when gone) and `apis` (the
/// served APIs by id) are left out between full reviews, when only the clock is looked at.
fn verdict(
    terms: &Terms,
    now: i64,
    keys: Option<&HashMap<String, Option<Session>>>,
    apis: Option<&HashMap<&str, &Api>>,
) -> Option<Revoked> {
    if terms.token_expires.is_some_and(|exp| exp <= now) {
        return Some(Revoked::TokenExpired);
    }
    let (Some(keys), Some(apis)) = (keys, apis) else {
        return None;
    };
    let Some(api) = apis.get(terms.api_id.as_str()) else {
        return Some(Revoked::ApiGone);
    };
    if !api
        .stream_paths
        .contains(&crate::http::normalize(&terms.rest))
    {
        return Some(Revoked::RouteGone);
    }
    let Some(key_id) = terms.key_id.as_ref() else {
        return (!terms.authenticated && api.auth.is_some()).then_some(Revoked::AuthRequired);
    };
    let Some(key) = keys.get(key_id)?.as_ref() else {
        return Some(Revoked::KeyDeleted);
    };
    if key.policy.inactive {
        return Some(Revoked::KeyInactive);
    }
    if key.expired(now) {
        return Some(Revoked::KeyExpired);
    }
    // As the key checks decide for a request: a key of an organisation reaches only its
    // organisation's APIs, and only those its rights name, on their methods and paths.
    let other_org = !key.org_id.is_empty() && key.org_id != api.org_id;
    match key.policy.access_rights.get(&terms.api_id) {
        Some(right) if !other_org && right.allows(&terms.method, &terms.rest) => {
            let changed = terms
                .key_meta
                .is_some_and(|print| print != meta_print(&key.policy.meta));
            changed.then_some(Revoked::KeyChanged)
        }
        _ => Some(Revoked::NoAccess),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(key: Option<&str>) -> Terms {
        Terms {
            api_id: "api".into(),
            key_id: key.map(str::to_owned),
            method: Method::GET,
            rest: "/events".into(),
            token_expires: None,
            authenticated: key.is_some(),
            key_meta: None,
        }
    }

    #[test]
    fn a_token_past_its_expiry_ends_its_connection() {
        let leases = Leases::default();
        let mut t = terms(None);
        t.token_expires = Some(chrono::Utc::now().timestamp() + 3600);
        let later = leases.open(t.clone());
        t.token_expires = Some(chrono::Utc::now().timestamp() - 1);
        let past = leases.open(t);
        assert_eq!(leases.expire(), 1);
        assert_eq!(past.reason(), Some("the token has expired"));
        assert!(!later.is_ended());
        assert_eq!(leases.len(), 1);
    }

    #[test]
    fn a_lease_no_connection_holds_is_forgotten() {
        let leases = Leases::default();
        let held = leases.open(terms(Some("k")));
        drop(leases.open(terms(Some("k"))));
        assert_eq!(leases.len(), 2);
        assert_eq!(leases.expire(), 0);
        assert_eq!(leases.len(), 1);
        drop(held);
    }

    #[test]
    fn the_live_view_counts_each_apis_open_connections_by_key() {
        let leases = Leases::default();
        let mut t = terms(Some("k1"));
        t.api_id = "counted".into();
        let held = [
            leases.open(t.clone()),
            leases.open(t.clone()),
            leases.open(Terms {
                key_id: Some("k2".into()),
                ..t.clone()
            }),
            leases.open(Terms {
                key_id: None,
                ..t.clone()
            }),
        ];
        // Another gateway of the process, and a connection that closed.
        let other = Leases::default();
        let also = other.open(Terms {
            key_id: Some("k2".into()),
            ..t.clone()
        });
        drop(leases.open(t));
        assert_eq!(
            open_by_key("counted"),
            [
                (Some("k1".to_owned()), 2),
                (Some("k2".to_owned()), 2),
                (None, 1)
            ]
        );
        assert!(open_by_key("api-with-nothing-open").is_empty());
        drop((held, also));
        assert!(open_by_key("counted").is_empty());
    }
}
