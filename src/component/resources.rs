//! Resources: caches, rate limits and labelled component configs that components reach by
//! name (`cache: foo`, `rate_limit: bar`, `resource: baz`).
//!
//! Caches and rate limits are built once and shared: every component naming `foo` uses the
//! same cache, and streams share the resources of the file they came from. Component
//! resources (`processor_resources`, ...) are configs, built where they are referenced.
//! They are kept type-erased so that this contracts module does not depend on the
//! component families that hold their types.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::Kind;

/// Why a cache operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// `add` found the key already there.
    #[error("key already exists")]
    KeyExists,
    /// The cache could not be reached or answered with an error.
    #[error("{0}")]
    Failed(String),
}

/// A key/value store shared by the components that name it.
#[async_trait]
pub trait Cache: Send + Sync {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError>;

    /// Sets `key`, replacing any value; `ttl` overrides the cache's default expiry.
    async fn set(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>)
        -> Result<(), CacheError>;

    /// Sets `key` only when it is absent: [`CacheError::KeyExists`] otherwise.
    async fn add(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>)
        -> Result<(), CacheError>;

    /// Removes `key`; removing an absent key succeeds.
    async fn delete(&self, key: &str) -> Result<(), CacheError>;
}

/// A rate limit shared by the components that name it.
#[async_trait]
pub trait RateLimit: Send + Sync {
    /// Takes one access. `Ok(None)` when allowed now; `Ok(Some(wait))` when refused, with
    /// how long to wait before asking again.
    async fn access(&self) -> Result<Option<Duration>, RateLimitError>;
}

/// Why a rate limit could not tell whether an access is allowed.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitError {
    /// The stream may not connect to where the limit is kept.
    #[error(transparent)]
    Refused(#[from] crate::egress::EgressError),
    /// Where the limit is kept could not be reached or answered with an error.
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl RateLimitError {
    pub fn failed(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        RateLimitError::Failed(source.into())
    }
}

/// A resource that no layer has, with the labels there are of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no {} resource `{label}`{}", .kind.noun(), known_list(*.kind, .known))]
pub struct Missing {
    pub kind: ResourceKind,
    pub label: String,
    /// Every label of the kind, nearest layer first.
    pub known: Vec<String>,
}

/// What a [`Missing`] resource's message says of the labels there are.
fn known_list(kind: ResourceKind, known: &[String]) -> String {
    let field = kind.field();
    if known.is_empty() {
        format!(": `{field}` defines none")
    } else {
        let list: Vec<String> = known.iter().map(|l| format!("`{l}`")).collect();
        format!(" (`{field}` has {})", list.join(", "))
    }
}

/// The resources components can name. Lookups fall back to the parent, so a stream's own
/// resources sit over those of its file.
#[derive(Default)]
pub struct Resources {
    caches: BTreeMap<String, Arc<dyn Cache>>,
    rate_limits: BTreeMap<String, Arc<dyn RateLimit>>,
    components: BTreeMap<(Kind, String), Arc<dyn Any + Send + Sync>>,
    parent: Option<Arc<Resources>>,
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resources")
            .field("caches", &self.caches.keys().collect::<Vec<_>>())
            .field("rate_limits", &self.rate_limits.keys().collect::<Vec<_>>())
            .field("components", &self.components.keys().collect::<Vec<_>>())
            .field("parent", &self.parent)
            .finish()
    }
}

impl Resources {
    /// Resources layered over `parent`'s.
    pub fn over(parent: Arc<Resources>) -> Self {
        Resources {
            parent: Some(parent),
            ..Default::default()
        }
    }

    pub fn add_cache(&mut self, label: &str, cache: Arc<dyn Cache>) {
        self.caches.insert(label.to_owned(), cache);
    }

    pub fn add_rate_limit(&mut self, label: &str, limit: Arc<dyn RateLimit>) {
        self.rate_limits.insert(label.to_owned(), limit);
    }

    /// Keeps a component config (`T` is its family's config type) under its label.
    pub fn add_component<T: Any + Send + Sync>(&mut self, kind: Kind, label: &str, config: T) {
        self.components
            .insert((kind, label.to_owned()), Arc::new(config));
    }

    /// Whether this layer (not its parent) already has a resource of this kind and label.
    pub fn has_own(&self, kind: ResourceKind, label: &str) -> bool {
        match kind {
            ResourceKind::Cache => self.caches.contains_key(label),
            ResourceKind::RateLimit => self.rate_limits.contains_key(label),
            ResourceKind::Component(k) => self.components.contains_key(&(k, label.to_owned())),
        }
    }

    pub fn cache(&self, label: &str) -> Result<Arc<dyn Cache>, Missing> {
        self.find(|r| r.caches.get(label).cloned())
            .ok_or_else(|| self.missing(ResourceKind::Cache, label))
    }

    pub fn rate_limit(&self, label: &str) -> Result<Arc<dyn RateLimit>, Missing> {
        self.find(|r| r.rate_limits.get(label).cloned())
            .ok_or_else(|| self.missing(ResourceKind::RateLimit, label))
    }

    /// The config of a component resource, of its family's config type `T`.
    pub fn component<T: Any + Send + Sync>(
        &self,
        kind: Kind,
        label: &str,
    ) -> Result<Arc<T>, Missing> {
        self.find(|r| {
            r.components
                .get(&(kind, label.to_owned()))
                .and_then(|c| c.clone().downcast::<T>().ok())
        })
        .ok_or_else(|| self.missing(ResourceKind::Component(kind), label))
    }

    fn find<T>(&self, get: impl Fn(&Resources) -> Option<T>) -> Option<T> {
        let mut layer = Some(self);
        while let Some(r) = layer {
            if let Some(found) = get(r) {
                return Some(found);
            }
            layer = r.parent.as_deref();
        }
        None
    }

    /// Every label of one kind, nearest layer first, for error messages.
    fn labels(&self, kind: ResourceKind) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut layer = Some(self);
        while let Some(r) = layer {
            let names: Vec<String> = match kind {
                ResourceKind::Cache => r.caches.keys().cloned().collect(),
                ResourceKind::RateLimit => r.rate_limits.keys().cloned().collect(),
                ResourceKind::Component(k) => r
                    .components
                    .keys()
                    .filter(|(kk, _)| *kk == k)
                    .map(|(_, l)| l.clone())
                    .collect(),
            };
            for n in names {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
            layer = r.parent.as_deref();
        }
        out
    }

    fn missing(&self, kind: ResourceKind, label: &str) -> Missing {
        Missing {
            kind,
            label: label.to_owned(),
            known: self.labels(kind),
        }
    }
}

/// The kinds of resource, for lookups and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    Cache,
    RateLimit,
    Component(Kind),
}

impl ResourceKind {
    /// The config field that lists resources of this kind.
    pub fn field(self) -> &'static str {
        match self {
            ResourceKind::Cache => "cache_resources",
            ResourceKind::RateLimit => "rate_limit_resources",
            ResourceKind::Component(Kind::Input) => "input_resources",
            ResourceKind::Component(Kind::Processor) => "processor_resources",
            ResourceKind::Component(Kind::Output) => "output_resources",
            ResourceKind::Component(k) => k.as_str(),
        }
    }

    fn noun(self) -> &'static str {
        match self {
            ResourceKind::Cache => "cache",
            ResourceKind::RateLimit => "rate limit",
            ResourceKind::Component(k) => k.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Always;

    #[async_trait]
    impl RateLimit for Always {
        async fn access(&self) -> Result<Option<Duration>, RateLimitError> {
            Ok(None)
        }
    }

    #[test]
    fn lookups_fall_back_to_the_parent_and_name_what_exists() {
        let mut file = Resources::default();
        file.add_rate_limit("shared", Arc::new(Always));
        file.add_component(Kind::Processor, "upper", "file's".to_owned());
        let mut stream = Resources::over(Arc::new(file));
        stream.add_component(Kind::Processor, "upper", "stream's".to_owned());

        assert!(stream.rate_limit("shared").is_ok());
        let upper = stream
            .component::<String>(Kind::Processor, "upper")
            .unwrap();
        assert_eq!(*upper, "stream's");

        let e = stream.rate_limit("other").err().unwrap();
        assert_eq!(
            e.to_string(),
            "no rate limit resource `other` (`rate_limit_resources` has `shared`)"
        );
        let e = stream.cache("c").err().unwrap();
        assert_eq!(
            e.to_string(),
            "no cache resource `c`: `cache_resources` defines none"
        );
        let e = stream
            .component::<String>(Kind::Input, "upper")
            .err()
            .unwrap();
        assert!(e.to_string().contains("input_resources"), "{e}");
    }
}
