//! The persistent store shared by the gateway (keys, API definitions) and the dashboard.
//!
//! One [`Store`] type over two backends: an embedded SQLite file by default, which needs no
//! set-up, and PostgreSQL when several processes share one state. The URL given to
//! [`Store::open`] picks the backend; opening runs the schema migrations embedded in the
//! binary (`migrations/sqlite/`, `migrations/postgres/`).
//!
//! Each kind of resource has its own file with its record type and its `impl Store` block
//! (`keys.rs`, `apis.rs`, the dashboard's `orgs.rs`, `assets.rs`, `certs.rs`,
//! `hooks.rs`, `portal.rs`, and the webhook queue, `deliveries.rs`). The query code is
//! written once for both backends: `with_pool!`
//! compiles a body once per backend, and the SQL uses `$1`-style placeholders, which both
//! SQLite and PostgreSQL accept. Adding a resource means a new migration file in each
//! folder (listed in `migrations.rs`) and a new file here.
//!
//! Times are unix seconds chosen by the caller; the store keeps what it is given.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Connection;

/// Runs `$body` with `$pool` bound to the store's connection pool, whichever backend it is.
/// The body is compiled once per backend, so query code is written once; `?` inside it
/// returns from the calling function.
macro_rules! with_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.pool {
            $crate::store::Pool::Sqlite($pool) => $body,
            $crate::store::Pool::Postgres($pool) => $body,
        }
    };
}

mod apis;
mod assets;
mod certs;
mod deliveries;
mod developers;
mod hooks;
mod keys;
mod location;
mod migrations;
mod orgs;
mod portal;
pub mod seal;

pub use apis::StoredApi;
pub use assets::AssetRecord;
pub use certs::{CertRecord, KeyFilter};
pub use deliveries::{
    AfterAttempt, AttemptRecord, AttemptResult, DeliveryRecord, QueueBounds, DEAD, DELIVERED,
    PENDING,
};
pub use developers::{DeveloperRecord, PortalSettings, TokenKind};
pub use hooks::HookRecord;
pub use keys::KeyRecord;
pub use orgs::{DashboardKeyRecord, OrgRecord, UserRecord};
pub use portal::{
    AppRecord, ProductRecord, SubscriptionRecord, APPROVED, PENDING_APPROVAL, REJECTED,
};

use location::Location;

/// How long a SQLite statement waits for another connection's write lock before failing.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// SQLite connections per store: WAL lets readers run beside the one writer.
const SQLITE_CONNECTIONS: u32 = 4;
/// PostgreSQL connections per store; several processes may share one server.
const POSTGRES_CONNECTIONS: u32 = 8;
/// How long a query waits for a free connection (or for the server to answer a connect).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The persistent store: a pool of connections to a SQLite file or a PostgreSQL database.
/// Cloning is cheap and shares the pool.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// Queue writes of one SQLite store wait their turn here: SQLite takes one writer at
    /// a time, and connections that collide otherwise back off in sleeps of
    /// milliseconds, which dominated busy webhook queues.
    queue_writes: std::sync::Arc<tokio::sync::Mutex<()>>,
}

/// The tables whose rows each belong to one organisation, with `org_id` and `id`
/// columns: their deletes and counts share one shape. The names are the store's own,
/// never from a request.
#[derive(Debug, Clone, Copy)]
enum OrgTable {
    Assets,
    Certs,
    Hooks,
    Users,
    DashboardKeys,
    PortalProducts,
    PortalApps,
}

impl OrgTable {
    fn name(self) -> &'static str {
        match self {
            OrgTable::Assets => "assets",
            OrgTable::Certs => "certs",
            OrgTable::Hooks => "hooks",
            OrgTable::Users => "users",
            OrgTable::DashboardKeys => "dashboard_keys",
            OrgTable::PortalProducts => "portal_products",
            OrgTable::PortalApps => "portal_apps",
        }
    }
}

impl Store {
    /// Deletes row `id` of organisation `org_id` from `table`; whether there was one.
    async fn delete_in_org(
        &self,
        table: OrgTable,
        org_id: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        let sql = format!("DELETE FROM {} WHERE org_id = $1 AND id = $2", table.name());
        let n = with_pool!(self, |pool| {
            sqlx::query(&sql)
                .bind(org_id)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// How many rows of `table` organisation `org_id` has.
    async fn count_in_org(&self, table: OrgTable, org_id: &str) -> Result<i64, StoreError> {
        let sql = format!("SELECT COUNT(*) FROM {} WHERE org_id = $1", table.name());
        let (n,): (i64,) = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(org_id).fetch_one(pool).await?
        });
        Ok(n)
    }
}

/// The connection pool of one backend.
#[derive(Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Why a store operation failed. No variant's text holds a password from the URL.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is malformed or names an unsupported backend. The text holds the redacted
    /// URL and the reason.
    #[error("invalid store URL {0}")]
    InvalidUrl(String),
    /// The directory that should hold the SQLite file does not exist. The store does not
    /// create directories, so a mistyped path fails here rather than silently starting
    /// an empty store somewhere else.
    #[error("cannot open the SQLite store {}: its directory does not exist", path.display())]
    NoDirectory {
        /// The SQLite file's path.
        path: PathBuf,
    },
    /// The database could not be opened or reached.
    #[error("cannot open the store at {url_redacted}: {source}")]
    Open {
        /// The URL, with any password replaced by `***`.
        url_redacted: String,
        /// What the driver reported.
        #[source]
        source: sqlx::Error,
    },
    /// The schema migrations failed, or the database holds migrations this binary does not
    /// know (it was migrated by a newer version).
    #[error("cannot migrate the {backend} store at {url_redacted}: {source}")]
    Migrate {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The URL, with any password replaced by `***`.
        url_redacted: String,
        /// What the migrator reported.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// The default store's directory could not be created.
    #[error("cannot create the store's directory {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A query failed (connection lost, database locked for too long, ...).
    #[error("store query failed: {0}")]
    Query(#[from] sqlx::Error),
    /// A record with the same identity already exists; the text says which
    /// (`key 'abc'`).
    #[error("{0} already exists")]
    Conflict(String),
    /// An organisation already has as many deliveries waiting as it may
    /// (`webhooks.max_pending_per_org`); nothing was queued.
    #[error(
        "organisation `{org_id}` already has {limit} webhook deliveries waiting \
         (webhooks.max_pending_per_org); try again once its receivers catch up"
    )]
    QueueFull { org_id: String, limit: u64 },
}

/// A slice of a list: at most `limit` records after skipping `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: i64,
    pub offset: i64,
}

impl Page {
    /// Every record.
    pub const ALL: Page = Page {
        limit: i64::MAX,
        offset: 0,
    };

    /// Page `index` (from 0) of pages of `size` records.
    pub fn new(size: i64, index: i64) -> Page {
        Page {
            limit: size,
            offset: size.saturating_mul(index),
        }
    }
}

/// The change counter of API definitions in the `revisions` table.
const APIS_REVISION: &str = "apis";
const SELECT_REVISION: &str = "SELECT revision FROM revisions WHERE name = $1";
const BUMP_REVISION: &str = "UPDATE revisions SET revision = revision + 1 WHERE name = $1";

/// The store the dashboard and the gateway share when neither config names one, so that
/// the two started side by side on their defaults see the same APIs and keys.
pub const DEFAULT_URL: &str = "sqlite://./data/sluice.db";

/// The directory of the default store, created on first use.
const DEFAULT_DIR: &str = "./data";

impl Store {
    /// Opens a configured store: as [`Store::open`], except that the default store's
    /// directory is created when missing so that a first run needs no set-up. A store
    /// the config names must have its directory already, so that a mistyped path fails
    /// instead of starting empty.
    pub async fn open_configured(url: &str) -> Result<Store, StoreError> {
        if url == DEFAULT_URL {
            std::fs::create_dir_all(DEFAULT_DIR).map_err(|source| StoreError::DataDir {
                path: DEFAULT_DIR.into(),
                source,
            })?;
        }
        Store::open(url).await
    }

    /// Opens the store at `url` and brings its schema up to date.
    ///
    /// `url` is one of `sqlite://path/to/file.db` (or `sqlite:path`, `sqlite:///abs/path`),
    /// `sqlite::memory:` (a private in-memory database, gone when the store is dropped), a
    /// bare file path (a SQLite file), or `postgres://user:password@host:5432/db` (also
    /// `postgresql://`). A SQLite file is created if missing, but its directory must exist.
    /// Errors never show the URL's password.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let url_redacted = location::redact(url);
        let open_error = |source: sqlx::Error| StoreError::Open {
            url_redacted: url_redacted.clone(),
            source,
        };
        let pool = match Location::parse(url)? {
            Location::SqliteMemory => {
                let options = SqliteConnectOptions::from_str("sqlite::memory:")
                    .map_err(open_error)?
                    .foreign_keys(true);
                // The database lives as long as a connection to it: keep exactly one, for good.
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect_with(options)
                    .await
                    .map_err(open_error)?;
                Pool::Sqlite(pool)
            }
            Location::SqliteFile(path) => {
                if let Some(dir) = path.parent() {
                    if !dir.as_os_str().is_empty() && !dir.is_dir() {
                        return Err(StoreError::NoDirectory { path });
                    }
                }
                let options = SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true)
                    // WAL: readers do not block the writer, and several processes can share
                    // the file; the busy timeout makes a second writer wait, not fail.
                    .journal_mode(SqliteJournalMode::Wal)
                    // In WAL mode, NORMAL syncs at checkpoints rather than at every commit:
                    // a committed write survives the process being killed (it is in the
                    // WAL file), and only an operating-system crash can lose the last
                    // commits. Every commit syncing (FULL) made each webhook event and
                    // delivery record wait for the disk.
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(SQLITE_BUSY_TIMEOUT)
                    .foreign_keys(true);
                Pool::Sqlite(open_sqlite_file(options).await.map_err(open_error)?)
            }
            Location::Postgres(options) => {
                let options = options.application_name("sluice");
                // One plain connection first: it fails at once with the server's reason
                // (refused, no such database, authentication), where the pool would retry
                // until its timeout and then report only the timeout.
                PgConnection::connect_with(&options)
                    .await
                    .map_err(open_error)?
                    .close()
                    .await
                    .map_err(open_error)?;
                let pool = PgPoolOptions::new()
                    .max_connections(POSTGRES_CONNECTIONS)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .connect_with(options)
                    .await
                    .map_err(open_error)?;
                Pool::Postgres(pool)
            }
        };
        let store = Store {
            pool,
            queue_writes: Default::default(),
        };
        store.migrate(&url_redacted).await?;
        Ok(store)
    }

    /// The backend in use: `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// Closes the pool, waiting for connections in use to be returned. Later calls on this
    /// store or its clones fail with [`StoreError::Query`].
    pub async fn close(&self) {
        with_pool!(self, |pool| pool.close().await)
    }

    async fn migrate(&self, url_redacted: &str) -> Result<(), StoreError> {
        let migrate_error = |source| StoreError::Migrate {
            backend: self.backend(),
            url_redacted: url_redacted.to_owned(),
            source,
        };
        let list = match self.pool {
            Pool::Sqlite(_) => migrations::SQLITE,
            Pool::Postgres(_) => migrations::POSTGRES,
        };
        let migrator = migrations::migrator(list).await.map_err(migrate_error)?;
        // PostgreSQL migrations hold an advisory lock; SQLite's take none, so two
        // processes opening a new file at once (a dashboard and a gateway started side by
        // side) race, and the loser's transaction rolls back. Running again then finds
        // what the winner applied and goes on from there.
        let mut tries = 0;
        loop {
            match with_pool!(self, |pool| migrator.run(pool).await) {
                Ok(()) => return Ok(()),
                Err(e) if tries < 5 && matches!(self.pool, Pool::Sqlite(_)) => {
                    tries += 1;
                    tracing::debug!(error = %e, tries, "Migrating the store failed; trying again.");
                    tokio::time::sleep(std::time::Duration::from_millis(100 * tries)).await;
                }
                Err(e) => return Err(migrate_error(e)),
            }
        }
    }

    /// The current value of the change counter `name` (a row of `revisions`).
    async fn revision(&self, name: &str) -> Result<i64, StoreError> {
        let (revision,): (i64,) = with_pool!(self, |pool| {
            sqlx::query_as(SELECT_REVISION)
                .bind(name)
                .fetch_one(pool)
                .await?
        });
        Ok(revision)
    }
}

impl Store {
    /// How to begin a transaction that reads, then writes what it read decides. SQLite's
    /// default deferred `BEGIN` would fail such a transaction when another process wrote
    /// in between; `IMMEDIATE` takes the write lock first (waiting its busy timeout).
    pub(crate) fn begin_read_then_write(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "BEGIN IMMEDIATE",
            Pool::Postgres(_) => "BEGIN",
        }
    }

    /// A statement that, run first in a transaction with a key bound as `$1`, makes
    /// transactions on the same key run one after another, so a count checked in one
    /// still holds at its write: PostgreSQL's advisory lock, released at the end of the
    /// transaction. `None` on SQLite, whose writers already take turns.
    pub(crate) fn key_lock(&self) -> Option<&'static str> {
        match self.pool {
            Pool::Sqlite(_) => None,
            Pool::Postgres(_) => Some("SELECT pg_advisory_xact_lock(hashtext($1))"),
        }
    }

    /// Takes the turn of a queue write on SQLite; PostgreSQL lets writers run together.
    pub(crate) async fn queue_write_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.pool {
            Pool::Sqlite(_) => Some(self.queue_writes.lock().await),
            Pool::Postgres(_) => None,
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

/// A pool on a SQLite file. Switching a new file to WAL takes its write lock, and SQLite
/// answers a second process switching at the same moment with "database is locked" at
/// once, without waiting out the busy timeout (two processes started side by side on a
/// new file). Opening again then finds the file in WAL mode already.
async fn open_sqlite_file(options: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    let deadline = tokio::time::Instant::now() + SQLITE_BUSY_TIMEOUT;
    let mut wait = Duration::from_millis(20);
    loop {
        let opened = SqlitePoolOptions::new()
            .max_connections(SQLITE_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await;
        match opened {
            Err(e) if is_busy(&e) && tokio::time::Instant::now() + wait < deadline => {
                tracing::debug!(error = %e, "The new SQLite file is busy; opening again.");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            opened => return opened,
        }
    }
}

/// Whether `error` is SQLite's "busy" or "locked" (primary codes 5 and 6, with any
/// extended code).
fn is_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// Whether `error` is a unique-constraint violation, which the callers report as
/// [`StoreError::Conflict`].
fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opens_each_sqlite_form() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.db");
        for url in [
            "sqlite::memory:".to_owned(),
            format!("sqlite://{}", file.display()),
            format!("sqlite:{}", dir.path().join("b.db").display()),
            dir.path().join("c.db").display().to_string(),
        ] {
            let store = Store::open(&url)
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(store.backend(), "sqlite");
            assert_eq!(store.apis_revision().await.unwrap(), 0, "{url}");
            store.close().await;
        }
        assert!(file.is_file());
    }

    #[tokio::test]
    async fn reopening_keeps_data_and_skips_applied_migrations() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("store.db").display().to_string();
        let store = Store::open(&url).await.unwrap();
        store
            .put_api(&StoredApi {
                id: "a".into(),
                org_id: "o".into(),
                document: "{}".into(),
                updated_at: 1,
            })
            .await
            .unwrap();
        store.close().await;
        let store = Store::open(&url).await.unwrap();
        assert_eq!(store.apis_revision().await.unwrap(), 1);
        assert!(store.api("a").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_store_migrated_by_a_newer_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("store.db").display().to_string();
        let store = Store::open(&url).await.unwrap();
        let Pool::Sqlite(pool) = &store.pool else {
            panic!("not sqlite")
        };
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'future', true, x'00', 0)",
        )
        .execute(pool)
        .await
        .unwrap();
        store.close().await;
        let err = Store::open(&url).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Migrate {
                    backend: "sqlite",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn sqlite_file_uses_wal() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db").display().to_string())
            .await
            .unwrap();
        let Pool::Sqlite(pool) = &store.pool else {
            panic!("not sqlite")
        };
        let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[tokio::test]
    async fn missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope").join("store.db");
        let err = Store::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap_err();
        assert!(matches!(&err, StoreError::NoDirectory { path: p } if *p == path));
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert!(!path.parent().unwrap().exists());
    }

    #[tokio::test]
    async fn a_directory_is_not_a_store_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = Store::open(&dir.path().display().to_string())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Open { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_memory_store_is_private() {
        let a = Store::open("sqlite::memory:").await.unwrap();
        let b = Store::open("sqlite::memory:").await.unwrap();
        a.put_api(&StoredApi {
            id: "x".into(),
            org_id: "o".into(),
            document: "{}".into(),
            updated_at: 1,
        })
        .await
        .unwrap();
        assert_eq!(a.list_apis().await.unwrap().len(), 1);
        assert!(b.list_apis().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn debug_shows_no_url() {
        // A lazy pool never connects, so this needs no database.
        let options = SqliteConnectOptions::from_str("sqlite::memory:").unwrap();
        let store = Store {
            queue_writes: Default::default(),
            pool: Pool::Sqlite(SqlitePoolOptions::new().connect_lazy_with(options)),
        };
        assert_eq!(format!("{store:?}"), "Store { backend: \"sqlite\", .. }");
    }
}
