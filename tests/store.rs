//! The store against both backends: one scenario run on a SQLite file and on a real
//! PostgreSQL server, plus the errors of bad locations.
//!
//! PostgreSQL is reached through `SLUICE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Each test creates its own database through
//! that one and drops it at the end, so runs never disturb each other. When the server
//! cannot be reached the tests fail: they do not skip.

use crate::common;

use std::error::Error;

use sluice::store::{DeliveryRecord, KeyRecord, QueueBounds, Store, StoreError, StoredApi};
use sqlx::postgres::PgPool;

fn key(id: &str, hash: &str, org_id: &str) -> KeyRecord {
    KeyRecord {
        id: id.into(),
        hash: hash.into(),
        org_id: org_id.into(),
        policy: r#"{"rate":{"per":60,"limit":100}}"#.into(),
        created_at: 1_700_000_000,
        updated_at: 1_700_000_000,
    }
}

fn api(id: &str, org_id: &str, version: u32) -> StoredApi {
    StoredApi {
        id: id.into(),
        org_id: org_id.into(),
        document: format!(
            r#"{{"openapi":"3.0.3","info":{{"title":"{id}","version":"{version}"}}}}"#
        ),
        updated_at: 1_700_000_000 + i64::from(version),
    }
}

fn delivery(id: &str) -> DeliveryRecord {
    DeliveryRecord {
        id: id.into(),
        org_id: "org-q".into(),
        source: "hook:h".into(),
        event: "auth_failure".into(),
        method: "POST".into(),
        url: "http://127.0.0.1:1/".into(),
        headers: "{}".into(),
        body: b"{}".to_vec(),
        body_sealed: None,
        secret_sealed: None,
        status: "pending".into(),
        attempts: 0,
        max_attempts: 3,
        next_attempt_at: 0,
        lease_until: 0,
        last_status: None,
        last_error: None,
        created_at: 0,
        updated_at: 0,
    }
}

fn ids<T>(items: Vec<T>, id: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|item| id(item).to_owned()).collect()
}

/// The same checks for either backend: `url` names an empty store that two `Store`s open.
async fn scenario(url: String, backend: &str) {
    let a = Store::open(&url).await.expect("first open");
    // The second open finds the schema already migrated.
    let b = Store::open(&url).await.expect("second open");
    assert_eq!(a.backend(), backend);
    assert_eq!(b.backend(), backend);

    // Keys: insert, conflicts on id and on hash, lookups.
    let k1 = key("k1", "hash-1", "org-a");
    a.insert_key(&k1).await.unwrap();
    a.insert_key(&key("k2", "hash-2", "org-b")).await.unwrap();
    b.insert_key(&key("k3", "hash-3", "org-a")).await.unwrap();
    match a.insert_key(&key("k1", "hash-9", "org-c")).await {
        Err(StoreError::Conflict(what)) => assert_eq!(what, "key 'k1'"),
        other => panic!("duplicate id: {other:?}"),
    }
    match b.insert_key(&key("k9", "hash-1", "org-c")).await {
        Err(StoreError::Conflict(what)) => assert!(what.contains("hash"), "{what}"),
        other => panic!("duplicate hash: {other:?}"),
    }
    assert_eq!(b.key("k1").await.unwrap(), Some(k1.clone()));
    assert_eq!(b.key_by_hash("hash-1").await.unwrap(), Some(k1.clone()));
    assert_eq!(b.key_by_hash("hash-9").await.unwrap(), None);
    assert_eq!(a.key("k9").await.unwrap(), None);

    // Update: a missing id is reported, the hash and creation time never change.
    assert!(!a.update_key(&key("nope", "h", "o")).await.unwrap());
    assert_eq!(a.key("nope").await.unwrap(), None);
    let mut changed = key("k1", "hash-changed", "org-b");
    changed.policy = r#"{"rate":{"per":1,"limit":5}}"#.into();
    changed.created_at = 0;
    changed.updated_at = 1_800_000_000;
    assert!(a.update_key(&changed).await.unwrap());
    let got = b
        .key_by_hash("hash-1")
        .await
        .unwrap()
        .expect("still found by its hash");
    assert_eq!(
        got,
        KeyRecord {
            hash: "hash-1".into(),
            created_at: 1_700_000_000,
            ..changed
        }
    );
    assert_eq!(b.key_by_hash("hash-changed").await.unwrap(), None);

    // Listing, with and without the organisation filter.
    let key_ids = |keys| ids(keys, |k: &KeyRecord| &k.id);
    assert_eq!(
        key_ids(a.list_keys(None).await.unwrap()),
        ["k1", "k2", "k3"]
    );
    assert_eq!(key_ids(a.list_keys(Some("org-a")).await.unwrap()), ["k3"]);
    assert_eq!(
        key_ids(b.list_keys(Some("org-b")).await.unwrap()),
        ["k1", "k2"]
    );
    assert!(a.list_keys(Some("org-z")).await.unwrap().is_empty());

    // Delete.
    assert!(b.delete_key("k2").await.unwrap());
    assert!(!a.delete_key("k2").await.unwrap());
    assert_eq!(a.key("k2").await.unwrap(), None);

    // APIs and their revision, seen from the other store.
    let r0 = a.apis_revision().await.unwrap();
    assert_eq!(b.apis_revision().await.unwrap(), r0);
    assert!(a.list_apis().await.unwrap().is_empty());
    a.put_api(&api("api-1", "org-a", 1)).await.unwrap();
    let r1 = b.apis_revision().await.unwrap();
    assert!(r1 > r0, "put: {r0} -> {r1}");
    assert_eq!(
        b.api("api-1").await.unwrap(),
        Some(api("api-1", "org-a", 1))
    );

    b.put_api(&api("api-1", "org-b", 2)).await.unwrap();
    b.put_api(&api("api-0", "org-a", 1)).await.unwrap();
    let r2 = a.apis_revision().await.unwrap();
    assert!(r2 > r1, "upsert: {r1} -> {r2}");
    assert_eq!(
        a.api("api-1").await.unwrap(),
        Some(api("api-1", "org-b", 2))
    );
    assert_eq!(
        a.list_apis().await.unwrap(),
        [api("api-0", "org-a", 1), api("api-1", "org-b", 2)]
    );

    assert!(!a.delete_api("api-9").await.unwrap());
    assert_eq!(b.apis_revision().await.unwrap(), r2, "deleting nothing");
    assert!(a.delete_api("api-1").await.unwrap());
    let r3 = b.apis_revision().await.unwrap();
    assert!(r3 > r2, "delete: {r2} -> {r3}");
    assert_eq!(b.api("api-1").await.unwrap(), None);

    // Concurrent writers through both stores: every change counts once.
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { store.put_api(&api(&format!("c{i}"), "org-c", 1)).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(a.apis_revision().await.unwrap(), r3 + 10);
    assert_eq!(b.list_apis().await.unwrap().len(), 11);

    // The webhook queue: two stores claiming at once never hold the same delivery, and
    // every delivery is claimed once.
    let queued: Vec<DeliveryRecord> = (0..200).map(|i| delivery(&format!("d{i:03}"))).collect();
    assert_eq!(
        a.enqueue_deliveries(&queued, 10, QueueBounds::NONE)
            .await
            .unwrap(),
        200
    );
    assert_eq!(
        b.enqueue_deliveries(&queued[..5], 11, QueueBounds::NONE)
            .await
            .unwrap(),
        0
    );
    let claimers: Vec<_> = (0..8)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let got = store.claim_deliveries(20, 60_000, 7, true).await.unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|d| d.id));
                }
            })
        })
        .collect();
    let mut claimed = Vec::new();
    for task in claimers {
        claimed.extend(task.await.unwrap());
    }
    claimed.sort();
    let all: Vec<String> = queued.iter().map(|d| d.id.clone()).collect();
    assert_eq!(
        claimed, all,
        "{backend}: each delivery claimed exactly once"
    );

    // An organisation's waiting deliveries stay within their bound however many
    // processes queue at once: of eight batches of ten against a bound of 25, two fit.
    let queuers: Vec<_> = (0..8)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let batch: Vec<DeliveryRecord> = (0..10)
                    .map(|j| {
                        let mut d = delivery(&format!("capped-{i}-{j}"));
                        d.org_id = "capped".into();
                        d
                    })
                    .collect();
                store
                    .enqueue_deliveries(
                        &batch,
                        30,
                        QueueBounds {
                            per_org: 25,
                            per_receiver: u64::MAX,
                        },
                    )
                    .await
            })
        })
        .collect();
    let mut queued_batches = 0;
    for task in queuers {
        match task.await.unwrap() {
            Ok(n) => {
                assert_eq!(n, 10);
                queued_batches += 1;
            }
            Err(StoreError::QueueFull { org_id, limit }) => {
                assert_eq!((org_id.as_str(), limit), ("capped", 25))
            }
            Err(e) => panic!("{backend}: {e}"),
        }
    }
    assert_eq!(queued_batches, 2, "{backend}");
    assert_eq!(
        a.delivery_counts("capped").await.unwrap().0,
        20,
        "{backend}"
    );

    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn sqlite_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    scenario(url, "sqlite").await;
}

#[tokio::test]
async fn postgres_scenario() {
    common::postgres::with_postgres("sluice_store", |url| scenario(url, "postgres")).await;
}

/// An error's text, its debug form and the text of every cause below it.
fn everything_printed(error: &StoreError) -> String {
    let mut text = format!("{error}\n{error:?}");
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(&format!("\n{e}"));
        cause = e.source();
    }
    text
}

#[tokio::test]
async fn bad_locations() {
    const SECRET: &str = "pw-Sekr1t-42";
    let dir = tempfile::tempdir().unwrap();
    for url in [
        String::new(),
        format!("mysql://admin:{SECRET}@localhost/db"),
        format!("postgres://u:{SECRET}@localhost:notaport/db"),
        format!("postgresql://u@localhost/db?sslmode=sometimes&password={SECRET}"),
        "sqlite://".to_owned(),
        format!("sqlite://{}?mode=ro", dir.path().join("x.db").display()),
    ] {
        let err = Store::open(&url).await.expect_err(&url);
        assert!(matches!(err, StoreError::InvalidUrl(_)), "{url}: {err:?}");
        let printed = everything_printed(&err);
        assert!(!printed.contains(SECRET), "{url}: {printed}");
    }

    let missing = dir.path().join("no-such-dir").join("store.db");
    let err = Store::open(&missing.display().to_string())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NoDirectory { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    assert!(!missing.parent().unwrap().exists());
}

#[tokio::test]
async fn unreachable_or_missing_postgres_hides_the_password() {
    const SECRET: &str = "pw-Sekr1t-42";
    // Nothing listens on port 1.
    let url = format!("postgres://sluice:{SECRET}@127.0.0.1:1/db");
    let err = Store::open(&url).await.unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    let printed = everything_printed(&err);
    assert!(
        printed.contains("postgres://sluice:***@127.0.0.1:1/db"),
        "{printed}"
    );
    assert!(!printed.contains(SECRET), "{printed}");
    // The reason, not only a pool timeout.
    assert!(printed.to_lowercase().contains("refused"), "{printed}");

    // The real server, but a database that does not exist.
    let mut url = url::Url::parse(&common::postgres::admin_url()).unwrap();
    url.set_password(Some(SECRET)).unwrap();
    url.set_path(&format!(
        "sluice_store_missing_{}",
        uuid::Uuid::new_v4().simple()
    ));
    let err = Store::open(url.as_str()).await.unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    let printed = everything_printed(&err);
    assert!(printed.contains("does not exist"), "{printed}");
    assert!(!printed.contains(SECRET), "{printed}");
}

#[tokio::test]
async fn postgres_database_of_a_newer_version_is_refused() {
    common::postgres::with_postgres("sluice_store", |url| async move {
        let store = Store::open(&url).await.unwrap();
        store.close().await;
        // Pretend a newer binary applied a migration this one does not know.
        let pool = PgPool::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'future', true, '\\x00', 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
        let err = Store::open(&url).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Migrate { backend: "postgres", .. }),
            "{err:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_opening_a_new_sqlite_file_at_once_all_migrate_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    // Each store has its own pool, as separate processes would: their migrations race.
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { Store::open(&url).await })
        })
        .collect();
    for open in opens {
        let store = open.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
        store.put_api(&api("a", "o", 1)).await.unwrap();
    }
}
