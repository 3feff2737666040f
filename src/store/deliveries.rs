//! The webhook delivery queue: calls the service owes receivers, with the log of every
//! attempt. Rows stay after delivery (the log is what the management API shows); a row
//! that used its last attempt is `dead` until replayed.
//!
//! Workers claim due rows with a lease (`lease_until`): the claim is one `UPDATE` whose
//! condition re-checks the lease, so two workers, in one process or several sharing a
//! PostgreSQL store, never hold the same row at once. A worker killed mid-attempt leaves a
//! lease that simply runs out, and the row is sent again: delivery is at least once.

use std::collections::{BTreeMap, BTreeSet};

use super::{Page, Store, StoreError};

/// A delivery waiting to be, or already, sent.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeliveryRecord {
    /// Also the `Idempotency-Key` of every attempt.
    pub id: String,
    pub org_id: String,
    /// What made it: `hook:<webhook id>`, `handler:<api id>` or `subscription:<id>`.
    pub source: String,
    /// The event's name.
    pub event: String,
    pub method: String,
    pub url: String,
    /// A JSON object of header names to values.
    pub headers: String,
    /// The body as the delivery log shows it: the body sent, unless `body_sealed` is set.
    pub body: Vec<u8>,
    /// The body sent, sealed, when it carries a secret of its own (a portal's
    /// password-reset token): `body` then shows it with the secret redacted, so that no
    /// reader of the log learns it.
    pub body_sealed: Option<String>,
    /// The receiver's signing secret, sealed; unsigned deliveries have none.
    pub secret_sealed: Option<String>,
    /// `pending`, `delivered` or `dead`.
    pub status: String,
    pub attempts: i64,
    pub max_attempts: i64,
    /// Unix milliseconds.
    pub next_attempt_at: i64,
    /// Unix milliseconds; a worker holds the row until then.
    pub lease_until: i64,
    /// The HTTP status of the last attempt, when one came back.
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
}

/// How many deliveries may wait to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBounds {
    /// In one organisation (`webhooks.max_pending_per_org`).
    pub per_org: u64,
    /// For one receiver: a webhook, a handler or a portal subscription
    /// (`webhooks.max_pending_per_receiver`).
    pub per_receiver: u64,
}

impl QueueBounds {
    /// No bound, for tests and tools.
    pub const NONE: QueueBounds = QueueBounds {
        per_org: u64::MAX,
        per_receiver: u64::MAX,
    };
}

/// The status of a delivery still to be sent.
pub const PENDING: &str = "pending";
/// The status of a delivery a receiver took.
pub const DELIVERED: &str = "delivered";
/// The status of a delivery whose attempts ran out, or that a receiver refused.
pub const DEAD: &str = "dead";

/// One attempt at a delivery.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AttemptRecord {
    pub delivery_id: String,
    /// From 1.
    pub attempt: i64,
    /// Unix milliseconds.
    pub at: i64,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<i64>,
    /// Why the attempt failed, when it did.
    pub error: Option<String>,
    pub latency_ms: i64,
}

/// What becomes of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAttempt {
    Delivered,
    /// Try again at this unix millisecond.
    Retry(i64),
    Dead,
}

/// An attempt's result, to record.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptResult {
    pub attempt: AttemptRecord,
    pub then: AfterAttempt,
}

const COLUMNS: &str = "id, org_id, source, event, method, url, headers, body, body_sealed, \
     secret_sealed, status, attempts, max_attempts, next_attempt_at, lease_until, last_status, last_error, \
     created_at, updated_at";

const INSERT: &str = "INSERT INTO deliveries (id, org_id, source, event, method, url, headers, \
     body, secret_sealed, status, attempts, max_attempts, next_attempt_at, lease_until, \
     last_error, created_at, updated_at, body_sealed) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $12, 0, $10, $11, 0, $13, $11, $11, $14) \
     ON CONFLICT (id) DO NOTHING";

const INSERT_ATTEMPT: &str = "INSERT INTO delivery_attempts \
     (delivery_id, attempt, at, status, error, latency_ms) VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (delivery_id, attempt) DO NOTHING";

const AFTER_ATTEMPT: &str = "UPDATE deliveries SET status = $2, attempts = $3, \
     next_attempt_at = $4, lease_until = 0, last_status = $5, last_error = $6, updated_at = $7 \
     WHERE id = $1";

/// How many deliveries of one receiver, or one organisation, are waiting. The count walks
/// at most `$2` rows, however long the queue is.
const WAITING_FOR_SOURCE: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM deliveries \
     WHERE source = $1 AND status = 'pending' LIMIT $2) AS w";
const WAITING_IN_ORG: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM deliveries \
     WHERE org_id = $1 AND status = 'pending' LIMIT $2) AS w";

/// Runs one of the `WAITING_*` counts for `$key` up to `$limit` in transaction `$tx`.
macro_rules! waiting {
    ($tx:ident, $sql:expr, $key:expr, $limit:expr) => {{
        let (n,): (i64,) = sqlx::query_as($sql)
            .bind($key)
            .bind(i64::try_from($limit).unwrap_or(i64::MAX))
            .fetch_one(&mut *$tx)
            .await?;
        n as u64
    }};
}

impl Store {
    /// Queues deliveries, all or none. A delivery whose id is already queued is skipped
    /// (a sender retrying the same event queues it once); returns how many were added.
    /// One given as [`DEAD`] (it could not be made) is recorded with its `last_error`
    /// and never sent.
    ///
    /// Waiting deliveries are bounded twice over ([`QueueBounds`]). A receiver (one
    /// webhook, handler or subscription: a delivery's `source`) past its share has the
    /// batch's further deliveries to it recorded [`DEAD`], replayable, so that one
    /// receiver that never answers cannot take the organisation's whole share. A batch
    /// that would then take its organisation past its bound queues nothing and is
    /// [`StoreError::QueueFull`]: no receiver can grow the store without end.
    pub async fn enqueue_deliveries(
        &self,
        deliveries: &[DeliveryRecord],
        now_ms: i64,
        bounds: QueueBounds,
    ) -> Result<u64, StoreError> {
        // The organisations and receivers the batch would add to.
        let mut orgs = BTreeSet::new();
        let mut sources: BTreeMap<&str, u64> = BTreeMap::new();
        for d in deliveries.iter().filter(|d| d.status != DEAD) {
            orgs.insert(d.org_id.as_str());
            sources.insert(d.source.as_str(), 0);
        }
        let receiver_full = format!(
            "its receiver already had {} deliveries waiting (webhooks.max_pending_per_receiver); \
             replay it once the receiver catches up",
            bounds.per_receiver
        );
        // SQLite writes one at a time (an immediate transaction); on PostgreSQL a lock per
        // organisation, held to the end of the transaction, keeps two batches from both
        // passing the counts.
        let lock = self.key_lock();
        let begin = self.begin_read_then_write();
        let _turn = self.queue_write_turn().await;
        let added: u64 = with_pool!(self, |pool| {
            let mut tx = pool.begin_with(begin).await?;
            if let Some(lock) = lock {
                for org in &orgs {
                    sqlx::query(lock)
                        .bind(format!("deliveries:{org}"))
                        .execute(&mut *tx)
                        .await?;
                }
            }
            for (source, waiting) in sources.iter_mut() {
                *waiting = waiting!(tx, WAITING_FOR_SOURCE, *source, bounds.per_receiver);
            }
            // Each delivery's status as queued: past its receiver's share, dead.
            let mut statuses = Vec::with_capacity(deliveries.len());
            let mut adding: BTreeMap<&str, u64> = BTreeMap::new();
            for d in deliveries {
                if d.status == DEAD {
                    statuses.push((DEAD, d.last_error.as_deref()));
                    continue;
                }
                let waiting = sources.entry(d.source.as_str()).or_default();
                if *waiting >= bounds.per_receiver {
                    statuses.push((DEAD, Some(receiver_full.as_str())));
                } else {
                    *waiting += 1;
                    *adding.entry(d.org_id.as_str()).or_default() += 1;
                    statuses.push((PENDING, None));
                }
            }
            for (org, n) in &adding {
                let waiting = waiting!(tx, WAITING_IN_ORG, *org, bounds.per_org);
                if waiting.saturating_add(*n) > bounds.per_org {
                    return Err(StoreError::QueueFull {
                        org_id: (*org).to_owned(),
                        limit: bounds.per_org,
                    });
                }
            }
            let mut added = 0;
            for (d, (status, last_error)) in deliveries.iter().zip(statuses) {
                added += sqlx::query(INSERT)
                    .bind(d.id.as_str())
                    .bind(d.org_id.as_str())
                    .bind(d.source.as_str())
                    .bind(d.event.as_str())
                    .bind(d.method.as_str())
                    .bind(d.url.as_str())
                    .bind(d.headers.as_str())
                    .bind(d.body.as_slice())
                    .bind(d.secret_sealed.as_deref())
                    .bind(d.max_attempts)
                    .bind(now_ms)
                    .bind(status)
                    .bind(last_error)
                    .bind(d.body_sealed.as_deref())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            added
        });
        Ok(added)
    }

    /// Removes up to `limit` finished deliveries (delivered or dead) that finished before
    /// `before_ms`, with their attempts; returns how many went. Pending ones are never
    /// removed, however old.
    pub async fn prune_deliveries(&self, before_ms: i64, limit: i64) -> Result<u64, StoreError> {
        let _turn = self.queue_write_turn().await;
        // One statement: what it removes is finished when it removes it, and the
        // attempts go with their delivery (`ON DELETE CASCADE`).
        let removed = with_pool!(self, |pool| {
            sqlx::query(
                "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries \
                 WHERE status IN ('delivered', 'dead') AND updated_at < $1 \
                 ORDER BY status, updated_at LIMIT $2)",
            )
            .bind(before_ms)
            .bind(limit)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(removed)
    }

    /// Claims up to `limit` due deliveries for `lease_ms`, oldest due first. With
    /// `signed: false` only deliveries without a signing secret, sealed headers or a
    /// sealed body are taken (a worker that cannot open sealed secrets leaves them to one
    /// that can).
    pub async fn claim_deliveries(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: i64,
        signed: bool,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let _turn = self.queue_write_turn().await;
        let unsigned_only = if signed {
            ""
        } else {
            " AND secret_sealed IS NULL AND body_sealed IS NULL AND headers NOT LIKE 'v1:%'"
        };
        // The outer condition repeats the inner one: a row another worker claimed between
        // the two is re-checked and skipped. It is written `status || ''` so that SQLite
        // finds the rows by id rather than walking every pending row by status.
        let sql = format!(
            "UPDATE deliveries SET lease_until = $1 + $2 WHERE id IN (SELECT id FROM deliveries \
             WHERE status = 'pending' AND next_attempt_at <= $1 AND lease_until <= $1{unsigned_only} \
             ORDER BY next_attempt_at LIMIT $3) AND status || '' = 'pending' AND lease_until <= $1 \
             RETURNING {COLUMNS}"
        );
        let rows = with_pool!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(now_ms)
                .bind(lease_ms)
                .bind(limit)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }

    /// Records attempts and what follows each, in one transaction.
    pub async fn record_attempts(
        &self,
        results: &[AttemptResult],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let _turn = self.queue_write_turn().await;
        with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            for r in results {
                let a = &r.attempt;
                sqlx::query(INSERT_ATTEMPT)
                    .bind(a.delivery_id.as_str())
                    .bind(a.attempt)
                    .bind(a.at)
                    .bind(a.status)
                    .bind(a.error.as_deref())
                    .bind(a.latency_ms)
                    .execute(&mut *tx)
                    .await?;
                let (status, next) = match r.then {
                    AfterAttempt::Delivered => (DELIVERED, 0),
                    AfterAttempt::Retry(at) => (PENDING, at),
                    AfterAttempt::Dead => (DEAD, 0),
                };
                sqlx::query(AFTER_ATTEMPT)
                    .bind(a.delivery_id.as_str())
                    .bind(status)
                    .bind(a.attempt)
                    .bind(next)
                    .bind(a.status)
                    .bind(a.error.as_deref())
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// One page of the organisation's deliveries, newest first, optionally of one status,
    /// and how many there are.
    pub async fn list_deliveries(
        &self,
        org_id: &str,
        status: Option<&str>,
        page: Page,
    ) -> Result<(Vec<DeliveryRecord>, i64), StoreError> {
        let filter = if status.is_some() {
            "org_id = $1 AND status = $2"
        } else {
            "org_id = $1 AND $2 IS NULL"
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM deliveries WHERE {filter} \
             ORDER BY created_at DESC, id LIMIT $3 OFFSET $4"
        );
        let count = format!("SELECT COUNT(*) FROM deliveries WHERE {filter}");
        let (rows, (total,)) = with_pool!(self, |pool| {
            let rows = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(status)
                .bind(page.limit)
                .bind(page.offset)
                .fetch_all(pool)
                .await?;
            let total: (i64,) = sqlx::query_as(&count)
                .bind(org_id)
                .bind(status)
                .fetch_one(pool)
                .await?;
            (rows, total)
        });
        Ok((rows, total))
    }

    /// One page of the organisation's deliveries made by any of `sources` (at most a
    /// few dozen: one app's subscriptions), newest first, and how many there are.
    pub async fn list_deliveries_from(
        &self,
        org_id: &str,
        sources: &[String],
        page: Page,
    ) -> Result<(Vec<DeliveryRecord>, i64), StoreError> {
        if sources.is_empty() {
            return Ok((Vec::new(), 0));
        }
        // `org_id = $1 AND source IN ($<from>, ...)`.
        let filter = |from: usize| {
            let marks: Vec<String> = (0..sources.len())
                .map(|i| format!("${}", i + from))
                .collect();
            format!("org_id = $1 AND source IN ({})", marks.join(", "))
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM deliveries WHERE {} \
             ORDER BY created_at DESC, id LIMIT $2 OFFSET $3",
            filter(4)
        );
        let count = format!("SELECT COUNT(*) FROM deliveries WHERE {}", filter(2));
        let (rows, (total,)) = with_pool!(self, |pool| {
            let mut q = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(page.limit)
                .bind(page.offset);
            let mut c = sqlx::query_as(&count).bind(org_id);
            for s in sources {
                q = q.bind(s.as_str());
                c = c.bind(s.as_str());
            }
            let rows: Vec<DeliveryRecord> = q.fetch_all(pool).await?;
            let total: (i64,) = c.fetch_one(pool).await?;
            (rows, total)
        });
        Ok((rows, total))
    }

    /// The organisation's delivery `id` with its attempts, oldest first.
    pub async fn delivery(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<Option<(DeliveryRecord, Vec<AttemptRecord>)>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM deliveries WHERE org_id = $1 AND id = $2");
        let found: Option<(DeliveryRecord, Vec<AttemptRecord>)> = with_pool!(self, |pool| {
            let row: Option<DeliveryRecord> = sqlx::query_as(&sql)
                .bind(org_id)
                .bind(id)
                .fetch_optional(pool)
                .await?;
            match row {
                None => None,
                Some(row) => {
                    let attempts = sqlx::query_as(
                        "SELECT delivery_id, attempt, at, status, error, latency_ms \
                         FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt",
                    )
                    .bind(id)
                    .fetch_all(pool)
                    .await?;
                    Some((row, attempts))
                }
            }
        });
        Ok(found)
    }

    /// Puts a dead delivery back in the queue, due now, with `attempts` more attempts.
    /// `false` when the organisation has no dead delivery `id`.
    pub async fn replay_delivery(
        &self,
        org_id: &str,
        id: &str,
        attempts: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let _turn = self.queue_write_turn().await;
        let n = with_pool!(self, |pool| {
            sqlx::query(
                "UPDATE deliveries SET status = 'pending', max_attempts = attempts + $3, \
                 next_attempt_at = $4, lease_until = 0, updated_at = $4 \
                 WHERE org_id = $1 AND id = $2 AND status = 'dead'",
            )
            .bind(org_id)
            .bind(id)
            .bind(attempts)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// How many deliveries of the organisation have each status, as
    /// `(pending, delivered, dead)`.
    pub async fn delivery_counts(&self, org_id: &str) -> Result<(i64, i64, i64), StoreError> {
        let rows: Vec<(String, i64)> = with_pool!(self, |pool| {
            sqlx::query_as(
                "SELECT status, COUNT(*) FROM deliveries WHERE org_id = $1 GROUP BY status",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        let count = |s: &str| {
            rows.iter()
                .find(|(status, _)| status == s)
                .map_or(0, |(_, n)| *n)
        };
        Ok((count(PENDING), count(DELIVERED), count(DEAD)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn delivery(id: &str, org: &str) -> DeliveryRecord {
        DeliveryRecord {
            id: id.into(),
            org_id: org.into(),
            source: "hook:h".into(),
            event: "auth_failure".into(),
            method: "POST".into(),
            url: "http://127.0.0.1:1/".into(),
            headers: "{}".into(),
            body: b"{}".to_vec(),
            body_sealed: None,
            secret_sealed: None,
            status: PENDING.into(),
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

    fn attempt(id: &str, n: i64, status: Option<i64>) -> AttemptRecord {
        AttemptRecord {
            delivery_id: id.into(),
            attempt: n,
            at: 100,
            status,
            error: None,
            latency_ms: 3,
        }
    }

    #[tokio::test]
    async fn enqueue_claim_record_replay() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let mut signed = delivery("d2", "o1");
        signed.secret_sealed = Some("sealed".into());
        let queued = vec![delivery("d1", "o1"), signed];
        assert_eq!(
            store
                .enqueue_deliveries(&queued, 10, QueueBounds::NONE)
                .await
                .unwrap(),
            2
        );
        // The same ids again add nothing.
        assert_eq!(
            store
                .enqueue_deliveries(&queued, 11, QueueBounds::NONE)
                .await
                .unwrap(),
            0
        );

        // A worker without the sealing secret takes only the unsigned one.
        let got = store.claim_deliveries(20, 1000, 10, false).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "d1");
        assert_eq!(got[0].lease_until, 1020);
        // Leased rows are not claimed twice.
        let got = store.claim_deliveries(21, 1000, 10, true).await.unwrap();
        assert_eq!(
            got.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
            ["d2"]
        );
        assert!(store
            .claim_deliveries(22, 1000, 10, true)
            .await
            .unwrap()
            .is_empty());

        store
            .record_attempts(
                &[
                    AttemptResult {
                        attempt: attempt("d1", 1, Some(503)),
                        then: AfterAttempt::Retry(500),
                    },
                    AttemptResult {
                        attempt: attempt("d2", 1, Some(404)),
                        then: AfterAttempt::Dead,
                    },
                ],
                30,
            )
            .await
            .unwrap();
        // Not due yet; then due once its time comes, lease or not.
        assert!(store
            .claim_deliveries(400, 1000, 10, true)
            .await
            .unwrap()
            .is_empty());
        let got = store.claim_deliveries(500, 1000, 10, true).await.unwrap();
        assert_eq!(got[0].id, "d1");
        assert_eq!((got[0].attempts, got[0].last_status), (1, Some(503)));
        store
            .record_attempts(
                &[AttemptResult {
                    attempt: attempt("d1", 2, Some(200)),
                    then: AfterAttempt::Delivered,
                }],
                600,
            )
            .await
            .unwrap();

        let (d1, attempts) = store.delivery("o1", "d1").await.unwrap().unwrap();
        assert_eq!(d1.status, DELIVERED);
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[1].status, Some(200));
        assert!(store.delivery("o2", "d1").await.unwrap().is_none());

        let (dead, total) = store
            .list_deliveries("o1", Some(DEAD), Page::ALL)
            .await
            .unwrap();
        assert_eq!((dead.len(), total), (1, 1));
        assert_eq!(
            store
                .list_deliveries("o1", None, Page::ALL)
                .await
                .unwrap()
                .1,
            2
        );
        assert_eq!(store.delivery_counts("o1").await.unwrap(), (0, 1, 1));

        // Only dead deliveries replay, and only in their organisation.
        assert!(!store.replay_delivery("o1", "d1", 3, 700).await.unwrap());
        assert!(!store.replay_delivery("o2", "d2", 3, 700).await.unwrap());
        assert!(store.replay_delivery("o1", "d2", 3, 700).await.unwrap());
        let got = store.claim_deliveries(700, 1000, 10, true).await.unwrap();
        assert_eq!((got[0].id.as_str(), got[0].max_attempts), ("d2", 4));
    }

    #[tokio::test]
    async fn a_sealed_body_is_kept_apart_and_left_to_a_worker_that_can_open_it() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let mut reset = delivery("r1", "o1");
        reset.body = br#"{"token":"[redacted]"}"#.to_vec();
        reset.body_sealed = Some("v1:sealed".into());
        store
            .enqueue_deliveries(&[reset.clone()], 1, QueueBounds::NONE)
            .await
            .unwrap();
        assert!(store
            .claim_deliveries(2, 1000, 10, false)
            .await
            .unwrap()
            .is_empty());
        let got = store.claim_deliveries(2, 1000, 10, true).await.unwrap();
        assert_eq!(got[0].body_sealed.as_deref(), Some("v1:sealed"));
        let (shown, _) = store.delivery("o1", "r1").await.unwrap().unwrap();
        assert_eq!(shown.body, reset.body);
    }

    /// An organisation's bound alone.
    fn org(per_org: u64) -> QueueBounds {
        QueueBounds {
            per_org,
            ..QueueBounds::NONE
        }
    }

    #[tokio::test]
    async fn a_receiver_past_its_share_gets_dead_deliveries_and_the_others_are_queued() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let bounds = QueueBounds {
            per_org: 10,
            per_receiver: 2,
        };
        let to = |id: &str, source: &str| {
            let mut d = delivery(id, "o1");
            d.source = source.into();
            d
        };
        let first = [to("a1", "subscription:a"), to("b1", "subscription:b")];
        assert_eq!(
            store.enqueue_deliveries(&first, 1, bounds).await.unwrap(),
            2
        );
        // `a` has one waiting: one more fits, the third is dead; `b` is untouched.
        let more = [
            to("a2", "subscription:a"),
            to("a3", "subscription:a"),
            to("b2", "subscription:b"),
        ];
        assert_eq!(store.enqueue_deliveries(&more, 2, bounds).await.unwrap(), 3);
        let (a3, _) = store.delivery("o1", "a3").await.unwrap().unwrap();
        assert_eq!(a3.status, DEAD);
        let why = a3.last_error.unwrap_or_default();
        assert!(why.contains("webhooks.max_pending_per_receiver"), "{why}");
        for waiting in ["a1", "a2", "b1", "b2"] {
            let (d, _) = store.delivery("o1", waiting).await.unwrap().unwrap();
            assert_eq!(d.status, PENDING, "{waiting}");
        }
        assert_eq!(store.delivery_counts("o1").await.unwrap(), (4, 0, 1));
    }

    #[tokio::test]
    async fn an_organisation_is_held_to_its_waiting_deliveries() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let batch = |from: usize, n: usize, org: &str| -> Vec<DeliveryRecord> {
            (from..from + n)
                .map(|i| delivery(&format!("{org}-{i}"), org))
                .collect()
        };
        assert_eq!(
            store
                .enqueue_deliveries(&batch(0, 3, "o1"), 1, org(4))
                .await
                .unwrap(),
            3
        );
        // Two more would make five: the whole batch is refused, the other organisation's
        // deliveries with it, and nothing is queued.
        let mut mixed = batch(3, 2, "o1");
        mixed.extend(batch(0, 1, "o2"));
        let e = store
            .enqueue_deliveries(&mixed, 2, org(4))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::QueueFull { org_id, limit: 4 } if org_id == "o1"),
            "{e}"
        );
        assert_eq!(store.delivery_counts("o1").await.unwrap(), (3, 0, 0));
        assert_eq!(store.delivery_counts("o2").await.unwrap(), (0, 0, 0));
        // One fits; deliveries recorded dead on arrival do not wait and do not count.
        let mut fits = batch(3, 1, "o1");
        let mut dead = delivery("o1-dead", "o1");
        dead.status = DEAD.into();
        fits.push(dead);
        assert_eq!(store.enqueue_deliveries(&fits, 3, org(4)).await.unwrap(), 2);
        // Finished deliveries make room.
        let claimed = store.claim_deliveries(10, 1000, 1, true).await.unwrap();
        store
            .record_attempts(
                &[AttemptResult {
                    attempt: attempt(&claimed[0].id, 1, Some(200)),
                    then: AfterAttempt::Delivered,
                }],
                11,
            )
            .await
            .unwrap();
        assert_eq!(
            store
                .enqueue_deliveries(&batch(10, 1, "o1"), 12, org(4))
                .await
                .unwrap(),
            1
        );
    }

    #[tokio::test]
    async fn finished_deliveries_past_their_time_are_removed_with_their_attempts() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let queued: Vec<_> = ["old-ok", "old-dead", "new-ok", "waiting"]
            .iter()
            .map(|id| delivery(id, "o1"))
            .collect();
        store
            .enqueue_deliveries(&queued, 0, QueueBounds::NONE)
            .await
            .unwrap();
        let claimed = store.claim_deliveries(1, 1000, 3, true).await.unwrap();
        assert_eq!(claimed.len(), 3);
        let finish = |id: &str, then| AttemptResult {
            attempt: attempt(id, 1, Some(200)),
            then,
        };
        store
            .record_attempts(
                &[
                    finish("old-ok", AfterAttempt::Delivered),
                    finish("old-dead", AfterAttempt::Dead),
                ],
                100,
            )
            .await
            .unwrap();
        store
            .record_attempts(&[finish("new-ok", AfterAttempt::Delivered)], 300)
            .await
            .unwrap();
        // `waiting` was never finished: it stays however old it is. One at a time, then
        // nothing more before 200.
        assert_eq!(store.prune_deliveries(200, 1).await.unwrap(), 1);
        assert_eq!(store.prune_deliveries(200, 10).await.unwrap(), 1);
        assert_eq!(store.prune_deliveries(200, 10).await.unwrap(), 0);
        for gone in ["old-ok", "old-dead"] {
            assert!(
                store.delivery("o1", gone).await.unwrap().is_none(),
                "{gone}"
            );
        }
        let (_, attempts) = store.delivery("o1", "new-ok").await.unwrap().unwrap();
        assert_eq!(attempts.len(), 1);
        let (orphans,): (i64,) = with_pool!(store, |pool| {
            sqlx::query_as("SELECT COUNT(*) FROM delivery_attempts WHERE delivery_id LIKE 'old-%'")
                .fetch_one(pool)
                .await
                .unwrap()
        });
        assert_eq!(orphans, 0);
        assert_eq!(store.delivery_counts("o1").await.unwrap(), (1, 1, 0));
    }
}
