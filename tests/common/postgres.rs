//! A PostgreSQL database of its own for each test: created through
//! `SLUICE_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and
//! dropped at the end, so runs never disturb each other. An unreachable server fails the
//! test: it never skips.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The database that tests create theirs through.
pub fn admin_url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

async fn admin_pool() -> PgPool {
    let url = admin_url();
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} is unreachable: {e}"))
}

/// Runs `test` with the URL of a new, empty database named after `prefix`, and drops the
/// database afterwards, whether `test` passed or panicked.
pub async fn with_postgres<F, Fut>(prefix: &str, test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let admin = admin_pool().await;
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
    let mut url = url::Url::parse(&admin_url()).expect("SLUICE_TEST_POSTGRES_URL is a URL");
    url.set_path(&name);
    // A task, so that a failed assertion comes back here as an error and the database is
    // still dropped.
    let outcome = tokio::spawn(test(url.to_string())).await;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot drop database {name}: {e}"));
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
