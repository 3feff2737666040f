//! The schema migrations, embedded in the binary: one list per backend, each naming the
//! files under `migrations/<backend>/` in order.
//!
//! The files are listed here rather than found by sqlx's `migrate!` macro, which would need
//! sqlx's proc-macro crate for this one use; `include_str!` also makes cargo rebuild when a
//! file changes. A test checks that each list matches its folder, so a new file cannot be
//! forgotten. Versions and descriptions follow sqlx's file naming (`0002_webhooks.sql` is
//! version 2, "webhooks"), so the recorded checksums are those sqlx's own tools compute.

use std::borrow::Cow;

use futures::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{MigrateError, Migration, MigrationSource, MigrationType, Migrator};

/// One embedded migration file: its name and its SQL.
type Embedded = (&'static str, &'static str);

/// SQLite migrations, oldest first.
pub(super) const SQLITE: &[Embedded] = &[
    (
        "0001_keys_and_apis.sql",
        include_str!("../../migrations/sqlite/0001_keys_and_apis.sql"),
    ),
    (
        "0002_dashboard.sql",
        include_str!("../../migrations/sqlite/0002_dashboard.sql"),
    ),
    (
        "0003_webhooks.sql",
        include_str!("../../migrations/sqlite/0003_webhooks.sql"),
    ),
    (
        "0004_instance_org.sql",
        include_str!("../../migrations/sqlite/0004_instance_org.sql"),
    ),
    (
        "0005_portal_publishing.sql",
        include_str!("../../migrations/sqlite/0005_portal_publishing.sql"),
    ),
    (
        "0006_portal_developers.sql",
        include_str!("../../migrations/sqlite/0006_portal_developers.sql"),
    ),
    (
        "0007_delivery_retention.sql",
        include_str!("../../migrations/sqlite/0007_delivery_retention.sql"),
    ),
    (
        "0008_sealed_delivery_bodies.sql",
        include_str!("../../migrations/sqlite/0008_sealed_delivery_bodies.sql"),
    ),
];

/// PostgreSQL migrations, oldest first.
pub(super) const POSTGRES: &[Embedded] = &[
    (
        "0001_keys_and_apis.sql",
        include_str!("../../migrations/postgres/0001_keys_and_apis.sql"),
    ),
    (
        "0002_dashboard.sql",
        include_str!("../../migrations/postgres/0002_dashboard.sql"),
    ),
    (
        "0003_webhooks.sql",
        include_str!("../../migrations/postgres/0003_webhooks.sql"),
    ),
    (
        "0004_instance_org.sql",
        include_str!("../../migrations/postgres/0004_instance_org.sql"),
    ),
    (
        "0005_portal_publishing.sql",
        include_str!("../../migrations/postgres/0005_portal_publishing.sql"),
    ),
    (
        "0006_portal_developers.sql",
        include_str!("../../migrations/postgres/0006_portal_developers.sql"),
    ),
    (
        "0007_delivery_retention.sql",
        include_str!("../../migrations/postgres/0007_delivery_retention.sql"),
    ),
    (
        "0008_sealed_delivery_bodies.sql",
        include_str!("../../migrations/postgres/0008_sealed_delivery_bodies.sql"),
    ),
];

/// A migration source over an embedded list.
#[derive(Debug)]
struct Source(&'static [Embedded]);

impl MigrationSource<'static> for Source {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            self.0
                .iter()
                .map(|(name, sql)| {
                    let (version, description) = version_and_description(name)
                        .ok_or_else(|| format!("bad migration file name {name:?}"))?;
                    Ok(Migration::new(
                        version,
                        Cow::Owned(description),
                        MigrationType::Simple,
                        Cow::Borrowed(*sql),
                        sql.starts_with("-- no-transaction"),
                    ))
                })
                .collect()
        })
    }
}

/// `0001_keys_and_apis.sql` -> `(1, "keys and apis")`, as sqlx names a migration file.
fn version_and_description(name: &str) -> Option<(i64, String)> {
    let (version, rest) = name.split_once('_')?;
    let description = rest.strip_suffix(".sql")?;
    Some((version.parse().ok()?, description.replace('_', " ")))
}

/// The migrator for a list of embedded migrations.
pub(super) async fn migrator(list: &'static [Embedded]) -> Result<Migrator, MigrateError> {
    Migrator::new(Source(list)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each list names exactly the `.sql` files of its folder, in order of increasing
    /// version.
    #[test]
    fn lists_match_their_folders() {
        for (folder, list) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(folder);
            let mut files: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".sql"))
                .collect();
            files.sort();
            let listed: Vec<String> = list.iter().map(|(name, _)| name.to_string()).collect();
            assert_eq!(listed, files, "migrations/{folder}");
            let mut last = 0;
            for (name, _) in list {
                let (version, _) = version_and_description(name).expect(name);
                assert!(version > last, "{folder}/{name}: versions must increase");
                last = version;
            }
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            version_and_description("0001_keys_and_apis.sql"),
            Some((1, "keys and apis".to_owned()))
        );
        assert_eq!(version_and_description("x_a.sql"), None);
        assert_eq!(version_and_description("0001.sql"), None);
    }

    #[tokio::test]
    async fn both_lists_resolve() {
        for list in [SQLITE, POSTGRES] {
            let migrator = migrator(list).await.unwrap();
            assert_eq!(migrator.iter().count(), list.len());
        }
    }
}
