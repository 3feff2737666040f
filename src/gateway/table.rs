//! The table of served APIs, swapped whole on reload: a request takes the table of the
//! moment and keeps its API alive until it ends, so a reload never drops one in flight.
//! Each API comes with the plan of steps its requests run, compiled with the table, so a
//! request never meets a new API with an old plan or the reverse.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::{ArcSwap, Cache};
use tracing::{info, warn};

use super::api::{self, Api};
use super::middleware::plan::{self, Plan};
use crate::apidef::ApiError;
use crate::store::Store;

/// The APIs of one moment.
#[derive(Default)]
pub struct Table {
    /// Longest listen path first, so the most specific API takes a request.
    by_path: Vec<Arc<Api>>,
    /// The plan of each API of `by_path`, at the same place.
    plans: Box<[Plan]>,
    by_id: HashMap<String, Arc<Api>>,
    /// Definitions that did not load, with why.
    pub errors: Vec<ApiError>,
    /// Listen paths claimed by APIs of more than one organisation (see
    /// [`disputes`]): requests below them reach no API.
    disputed: Vec<String>,
}

impl Table {
    /// The API whose listen path holds `path`.
    pub fn route(&self, path: &str) -> Option<&Arc<Api>> {
        self.position(path).map(|i| &self.by_path[i])
    }

    /// Where the API that [`route`](Table::route) finds stands, for [`at`](Table::at).
    pub fn position(&self, path: &str) -> Option<usize> {
        let at = self
            .by_path
            .iter()
            .position(|api| crate::apidef::listen_rest(&api.listen_path, path).is_some());
        if self.disputed.is_empty() {
            return at;
        }
        // A disputed path at least as specific as the API found takes the request from
        // it: neither organisation gets the other's traffic.
        let found = at.map_or(0, |i| self.by_path[i].listen_path.len());
        let blocked = self
            .disputed
            .iter()
            .any(|d| d.len() >= found && crate::apidef::listen_rest(d, path).is_some());
        if blocked {
            None
        } else {
            at
        }
    }

    /// The API at a [`position`](Table::position) of this table.
    pub fn at(&self, position: usize) -> &Arc<Api> {
        &self.by_path[position]
    }

    /// The plan of the API at a [`position`](Table::position) of this table.
    pub fn plan(&self, position: usize) -> &Plan {
        &self.plans[position]
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Api>> {
        self.by_id.get(id)
    }

    pub fn apis(&self) -> impl Iterator<Item = &Arc<Api>> {
        self.by_path.iter()
    }

    /// The APIs, longest listen path first.
    pub fn all(&self) -> &[Arc<Api>] {
        &self.by_path
    }

    pub fn len(&self) -> usize {
        self.by_path.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }
}

/// A thread's handle on a table (see [`ApiTable::for_request`]). The outer allocation
/// is the thread's own, so its count is written by that thread alone.
#[derive(Clone)]
#[allow(clippy::redundant_allocation)]
pub struct TableRef(Arc<Arc<Table>>);

impl std::ops::Deref for TableRef {
    type Target = Table;

    fn deref(&self) -> &Table {
        &self.0
    }
}

/// Where definitions come from.
pub struct Sources {
    pub dir: Option<PathBuf>,
    pub store: Option<Store>,
    pub options: crate::apidef::CompileOptions,
}

/// What the sources looked like at the last load, to tell whether anything changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fingerprint {
    files: BTreeMap<PathBuf, (Option<SystemTime>, u64)>,
    store_revision: Option<i64>,
}

pub struct ApiTable {
    /// Shared with each serving thread's cache of it (see [`ApiTable::for_request`]).
    current: Arc<ArcSwap<Table>>,
    /// Tells this table from any other of the process (an address could be reused).
    id: u64,
    sources: Sources,
    seen: parking_lot::Mutex<Option<Fingerprint>>,
}

impl ApiTable {
    pub fn new(sources: Sources) -> Self {
        ApiTable {
            current: Arc::new(ArcSwap::from_pointee(Table::default())),
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            sources,
            seen: parking_lot::Mutex::new(None),
        }
    }

    /// The table of this moment.
    pub fn current(&self) -> Arc<Table> {
        self.current.load_full()
    }

    /// The table of this moment, for a request. Each thread keeps its own handle on it,
    /// revalidated by one atomic read of the current table's address: taking it costs
    /// no write to memory that the other serving threads also write (the table's
    /// reference count would otherwise move between cores on every request).
    pub fn for_request(&self) -> TableRef {
        type Mine = (u64, Cache<Arc<ArcSwap<Table>>, Arc<Table>>, TableRef);
        thread_local! {
            static MINE: std::cell::RefCell<Option<Mine>> = const { std::cell::RefCell::new(None) };
        }
        MINE.with(|mine| {
            let mut mine = mine.borrow_mut();
            match mine.as_mut() {
                Some((owner, cache, table)) if *owner == self.id => {
                    let now = cache.load();
                    if !Arc::ptr_eq(now, &table.0) {
                        *table = TableRef(Arc::new(now.clone()));
                    }
                    table.clone()
                }
                _ => {
                    let mut cache = Cache::new(self.current.clone());
                    let table = TableRef(Arc::new(cache.load().clone()));
                    *mine = Some((self.id, cache, table.clone()));
                    table
                }
            }
        })
    }

    /// Reloads when a source changed since the last load (or `force`). Returns whether a
    /// new table was built.
    pub async fn refresh(&self, force: bool) -> bool {
        let fingerprint = self.fingerprint().await;
        if !force && self.seen.lock().as_ref() == Some(&fingerprint) {
            return false;
        }
        let table = self.load().await;
        for e in &table.errors {
            warn!(error = %e, "API definition not loaded.");
        }
        info!(
            apis = table.len(),
            failed = table.errors.len(),
            "APIs loaded."
        );
        self.current.store(Arc::new(table));
        *self.seen.lock() = Some(fingerprint);
        true
    }

    async fn fingerprint(&self) -> Fingerprint {
        let mut files = BTreeMap::new();
        if let Some(dir) = &self.sources.dir {
            for path in definition_files(dir) {
                let meta = std::fs::metadata(&path).ok();
                let stamp = (
                    meta.as_ref().and_then(|m| m.modified().ok()),
                    meta.map_or(0, |m| m.len()),
                );
                files.insert(path, stamp);
            }
        }
        let store_revision = match &self.sources.store {
            Some(store) => store.apis_revision().await.ok(),
            None => None,
        };
        Fingerprint {
            files,
            store_revision,
        }
    }

    /// Loads every source. A definition that fails keeps its previous version serving
    /// (when there was one), and never stops the others.
    async fn load(&self) -> Table {
        let previous = self.current();
        let mut loaded: Vec<Result<Api, ApiError>> = Vec::new();
        // The store's APIs of last time, kept when the store cannot be read now.
        let mut kept: Vec<Arc<Api>> = Vec::new();
        if let Some(dir) = &self.sources.dir {
            for path in definition_files(dir) {
                let name = path.display().to_string();
                let result = match std::fs::read_to_string(&path) {
                    Ok(text) => api::from_file_with(&name, &text, &self.sources.options),
                    Err(e) => Err(ApiError {
                        api_id: None,
                        errors: crate::config::ConfigErrors(vec![crate::config::ConfigError::new(
                            format!("cannot read {name}: {e}"),
                        )]),
                    }),
                };
                loaded.push(result);
            }
        }
        if let Some(store) = &self.sources.store {
            match store.list_apis().await {
                Ok(apis) => {
                    for stored in apis {
                        let source = format!("store:{}", stored.id);
                        let result = serde_json::from_str(&stored.document)
                            .map_err(|e| ApiError {
                                api_id: Some(stored.id.clone()),
                                errors: crate::config::ConfigError::new(format!(
                                    "the stored document is not JSON: {e}"
                                ))
                                .into(),
                            })
                            .and_then(|doc| {
                                api::from_json_with(&source, &doc, &self.sources.options)
                            });
                        loaded.push(result);
                    }
                }
                Err(e) => {
                    // Keep serving what the store gave last time.
                    warn!(error = %e, "Cannot read APIs from the store.");
                    kept.extend(
                        previous
                            .apis()
                            .filter(|a| a.source.starts_with("store:"))
                            .cloned(),
                    );
                }
            }
        }
        let mut table = Table::default();
        let mut apis = kept;
        for result in loaded {
            match result {
                Ok(api) => apis.push(Arc::new(api)),
                Err(e) => {
                    // The last good version of this API keeps serving.
                    if let Some(old) = e.api_id.as_deref().and_then(|id| previous.get(id)) {
                        apis.push(old.clone());
                    }
                    table.errors.push(e);
                }
            }
        }
        apis.sort_by(|a, b| a.source.cmp(&b.source));
        for api in apis {
            if !api.active {
                continue;
            }
            if let Some(other) = table.by_id.get(&api.id) {
                if Arc::ptr_eq(other, &api) {
                    continue;
                }
                table.errors.push(clash(
                    &api,
                    format!("id `{}` is also used by {}", api.id, other.source),
                ));
                continue;
            }
            // Organisations that share a path are left to `disputes`.
            if let Some(other) = table.by_path.iter().find(|o| {
                o.listen_path == api.listen_path
                    && (o.org_id == api.org_id || !(from_store(o) || from_store(&api)))
            }) {
                table.errors.push(clash(
                    &api,
                    format!(
                        "listen path `{}` is also used by API `{}` ({})",
                        api.listen_path, other.id, other.source
                    ),
                ));
                continue;
            }
            table.by_id.insert(api.id.clone(), api.clone());
            table.by_path.push(api);
        }
        disputes(&mut table);
        table
            .by_path
            .sort_by_key(|api| std::cmp::Reverse(api.listen_path.len()));
        table.plans = table.by_path.iter().map(|api| plan::compile(api)).collect();
        table
    }
}

/// Whether an API came from the store, where organisations write.
fn from_store(api: &Api) -> bool {
    api.source.starts_with("store:")
}

/// Takes out of the table every API whose listen path is at or below the listen path
/// of another organisation's API (when either came from the store), and keeps its path
/// as disputed so that requests below it reach neither. The dashboard refuses such paths,
/// so this meets only APIs stored before it did, or written by two dashboards at once:
/// which one was there first is not known, and routing either organisation's clients to
/// the other's API would hand it their credentials.
fn disputes(table: &mut Table) {
    let keys: Vec<String> = table
        .by_path
        .iter()
        .map(|a| crate::apidef::path_key(&a.listen_path))
        .collect();
    let mut by_key: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        by_key.entry(key.as_str()).or_default().push(i);
    }
    let mut disputed = vec![false; table.by_path.len()];
    for (i, inner) in table.by_path.iter().enumerate() {
        // The key itself and each path above it: `/a/b/c`, `/a/b`, `/a`, `/`.
        let key = keys[i].as_str();
        let above = key
            .char_indices()
            .filter(|&(at, c)| c == '/' && at > 0)
            .map(|(at, _)| &key[..at])
            .chain([key, "/"]);
        let outer = above
            .filter_map(|k| by_key.get(k))
            .flatten()
            .map(|&j| &table.by_path[j])
            .find(|o| o.org_id != inner.org_id && (from_store(inner) || from_store(o)));
        if let Some(outer) = outer {
            disputed[i] = true;
            table.errors.push(clash(
                inner,
                format!(
                    "listen path `{}` is at or below listen path `{}` of API `{}` of another organisation; neither is served there",
                    inner.listen_path, outer.listen_path, outer.id
                ),
            ));
        }
    }
    let mut kept = Vec::with_capacity(table.by_path.len());
    for (api, out) in std::mem::take(&mut table.by_path).into_iter().zip(disputed) {
        if out {
            table.by_id.remove(&api.id);
            table.disputed.push(api.listen_path.clone());
        } else {
            kept.push(api);
        }
    }
    table.by_path = kept;
}

fn clash(api: &Api, message: String) -> ApiError {
    ApiError {
        api_id: Some(api.id.clone()),
        errors: crate::config::ConfigError::new(format!("{}: {message}", api.source)).into(),
    }
}

/// The definition files of `dir`, sorted: `.yaml`, `.yml` and `.json`, not hidden.
fn definition_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(id: &str) -> String {
        format!(
            "openapi: 3.0.3\ninfo: {{title: {id}, version: '1'}}\npaths: {{}}\nx-sluice-api-gateway:\n  info: {{id: {id}, name: {id}}}\n  upstream: {{url: 'http://127.0.0.1:9'}}\n  server:\n    listenPath: {{value: /{id}/, strip: true}}\n"
        )
    }

    #[tokio::test]
    async fn a_thread_sees_each_new_table() {
        let dir = tempfile::tempdir().unwrap();
        let table = ApiTable::new(Sources {
            dir: Some(dir.path().to_owned()),
            store: None,
            options: crate::apidef::CompileOptions::default(),
        });
        table.refresh(true).await;
        assert!(table.for_request().is_empty());
        assert!(table.for_request().route("/one/x").is_none());
        std::fs::write(dir.path().join("one.yaml"), definition("one")).unwrap();
        table.refresh(true).await;
        let first = table.for_request();
        assert_eq!(first.route("/one/x").map(|a| a.id.as_str()), Some("one"));
        std::fs::write(dir.path().join("two.yaml"), definition("two")).unwrap();
        table.refresh(true).await;
        assert_eq!(table.for_request().len(), 2);
        // A request that began before the reload keeps the table it took.
        assert_eq!(first.len(), 1);

        // Another table on the same thread is not mistaken for this one.
        let other = ApiTable::new(Sources {
            dir: None,
            store: None,
            options: crate::apidef::CompileOptions::default(),
        });
        assert!(other.for_request().is_empty());
        assert_eq!(table.for_request().len(), 2);
    }
}
