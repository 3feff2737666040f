//! The log of webhook deliveries: what the service sent or still owes each receiver,
//! every attempt with its outcome, and the replay of a delivery that is dead. Signing
//! secrets are never shown, and neither is a secret a body carries (a portal's
//! password-reset token): such a delivery sends a sealed copy of its body and shows
//! `body`, which has the secret redacted.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::request::{Ctx, Outcome, Reply};
use crate::dashboard::responses::{NotFound, Unauthorized};
use crate::store::{AttemptRecord, DeliveryRecord, DEAD, DELIVERED, PENDING};

/// The path of one delivery.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct DeliveryPath {
    /// The delivery's id.
    #[serde(rename = "deliveryId")]
    id: String,
}

/// A delivery as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Delivery {
    /// Also the `Idempotency-Key` of every attempt.
    pub id: String,
    /// What made it: `subscription:<id>`, `hook:<webhook id>` or `handler:<api id>`.
    pub source: String,
    pub event: String,
    pub method: String,
    pub url: String,
    /// `pending`, `delivered` or `dead`.
    pub status: String,
    /// Attempts made so far.
    pub attempts: i64,
    pub max_attempts: i64,
    /// When the next attempt is due; null unless pending.
    pub next_attempt_at: Option<String>,
    /// The HTTP status of the last attempt, when one came back.
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The body sent, as text; a password-reset token in it shows as `[redacted]`.
    pub body: String,
}

/// One attempt at a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct Attempt {
    /// From 1.
    pub attempt: i64,
    pub at: String,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<i64>,
    /// Why the attempt failed, when it did.
    pub error: Option<String>,
    pub latency_ms: i64,
}

/// A delivery with its attempts, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryDetail {
    pub delivery: Delivery,
    pub attempts: Vec<Attempt>,
}

/// A page of deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
    pub pages: i64,
}

/// Unix milliseconds as RFC 3339 UTC, to the millisecond.
fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A delivery with its attempts as the API shows them.
pub fn detail(d: DeliveryRecord, attempts: Vec<AttemptRecord>) -> DeliveryDetail {
    DeliveryDetail {
        delivery: view(d),
        attempts: attempts.into_iter().map(attempt_view).collect(),
    }
}

fn view(d: DeliveryRecord) -> Delivery {
    Delivery {
        next_attempt_at: (d.status == PENDING).then(|| rfc3339_ms(d.next_attempt_at)),
        body: String::from_utf8_lossy(&d.body).into_owned(),
        id: d.id,
        source: d.source,
        event: d.event,
        method: d.method,
        url: d.url,
        status: d.status,
        attempts: d.attempts,
        max_attempts: d.max_attempts,
        last_status: d.last_status,
        last_error: d.last_error,
        created_at: rfc3339_ms(d.created_at),
        updated_at: rfc3339_ms(d.updated_at),
    }
}

fn attempt_view(a: AttemptRecord) -> Attempt {
    Attempt {
        attempt: a.attempt,
        at: rfc3339_ms(a.at),
        status: a.status,
        error: a.error,
        latency_ms: a.latency_ms,
    }
}

#[utoipa::path(
    get,
    path = "/api/deliveries",
    tag = "deliveries",
    params(
        ("p" = Option<i64>, Query, description = "Page number from 1: the log is read a page at a time."),
        ("status" = Option<String>, Query, description = "Only deliveries with this status: `pending`, `delivered` or `dead`."),
    ),
    responses(
        (status = 200, description = "A page of the organisation's deliveries, newest first.", body = DeliveryList),
        (status = 400, description = "A bad query parameter (`p` below 0 included: the log is read a page at a time).", body = ErrorBody),
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    // The log holds every event's body for the retention: read a page at a time, never
    // at once (which `p` below 0 means elsewhere).
    if paging.page == crate::store::Page::ALL {
        return Err(ApiError::bad_request(
            "query parameter `p`: the delivery log is read a page at a time; pages start at 1",
        ));
    }
    let status = match ctx.query("status") {
        None => None,
        Some(s) if [PENDING, DELIVERED, DEAD].contains(&s) => Some(s),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "query parameter `status`: `{other}` is not pending, delivered or dead"
            )))
        }
    };
    let (records, total) = ctx
        .state
        .store
        .list_deliveries(&ctx.caller.org_id, status, paging.page)
        .await?;
    Reply::json(
        StatusCode::OK,
        DeliveryList {
            deliveries: records.into_iter().map(view).collect(),
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    get,
    path = "/api/deliveries/{deliveryId}",
    tag = "deliveries",
    params(DeliveryPath),
    responses(
        (status = 200, description = "The delivery with its attempts.", body = DeliveryDetail),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn get(ctx: Ctx) -> Result<Reply, ApiError> {
    let (delivery, attempts) = ctx
        .state
        .store
        .delivery(&ctx.caller.org_id, &ctx.path::<DeliveryPath>()?.id)
        .await?
        .ok_or_else(|| ApiError::not_found("delivery"))?;
    Reply::json(StatusCode::OK, detail(delivery, attempts))
}

#[utoipa::path(
    post,
    path = "/api/deliveries/{deliveryId}/replay",
    tag = "deliveries",
    params(DeliveryPath),
    responses(
        (status = 200, description = "Queued again, due now, with `webhooks.max_attempts` more attempts.", body = Outcome),
        Unauthorized,
        NotFound,
        (status = 409, description = "The delivery is not dead (it is pending or delivered).", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn replay(ctx: Ctx) -> Result<Reply, ApiError> {
    let DeliveryPath { id } = ctx.path()?;
    let id = id.as_str();
    let Some((delivery, _)) = ctx.state.store.delivery(&ctx.caller.org_id, id).await? else {
        return Err(ApiError::not_found("delivery"));
    };
    replay_dead(&ctx, &delivery).await?;
    Reply::outcome(StatusCode::OK, "delivery queued again", Some(id), id)
}

/// Queues a dead delivery again, due now, with `webhooks.max_attempts` more attempts;
/// 409 when it is not dead.
pub async fn replay_dead(ctx: &Ctx, delivery: &DeliveryRecord) -> Result<(), ApiError> {
    let more = i64::from(ctx.state.config.webhooks.max_attempts.max(1));
    let now_ms = chrono::Utc::now().timestamp_millis();
    // The store re-checks `dead` in the update itself, so a replay that races another
    // is refused rather than doubled.
    if delivery.status != DEAD
        || !ctx
            .state
            .store
            .replay_delivery(&delivery.org_id, &delivery.id, more, now_ms)
            .await?
    {
        return Err(ApiError::Conflict(format!(
            "delivery `{}` is {}: only a dead delivery is replayed",
            delivery.id, delivery.status
        )));
    }
    ctx.state.deliveries_queued.notify_one();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_keep_milliseconds() {
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
