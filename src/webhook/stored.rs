//! Deliveries through a webhook: a dashboard's stored webhook opened into a call, and
//! a call made into the delivery the store queues, its secrets sealed again.

use super::{sealed, Hook};
use crate::store::seal::Sealer;
use crate::store::{DeliveryRecord, HookRecord, DEAD, PENDING};

/// Where a delivery through `hook` goes: its URL and its headers as a delivery stores
/// them. A sealed webhook's secrets stay sealed in its deliveries (`sealer` given): the
/// URL's credentials travel as the basic authorization they stand for, in the sealed
/// headers. A failure to seal is put in `failed`.
fn target(hook: &Hook, sealer: Option<&Sealer>, failed: &mut Option<String>) -> (String, String) {
    match sealer {
        Some(sealer) => {
            let (bare, basic) = sealed::split_credentials(&hook.url);
            let mut headers = hook.headers.clone();
            if let Some(basic) = basic {
                if !headers
                    .keys()
                    .any(|k| k.eq_ignore_ascii_case("authorization"))
                {
                    headers.insert("Authorization".into(), basic);
                }
            }
            match sealed::store_delivery_headers(Some(sealer), &headers, true) {
                Ok(headers) => (bare, headers),
                Err(e) => {
                    failed.get_or_insert(e.to_string());
                    (bare, "{}".into())
                }
            }
        }
        None => (
            hook.url.clone(),
            serde_json::to_string(&hook.headers).unwrap_or_else(|_| "{}".into()),
        ),
    }
}

/// One delivery of `event` with `body` (JSON, no template) through the organisation's
/// stored webhook `record`: what the dashboard sends through a webhook of its own (a
/// portal's password-reset tokens).
pub fn stored_delivery(
    record: HookRecord,
    sealer: Option<&Sealer>,
    event: &str,
    body: Vec<u8>,
    max_attempts: i64,
) -> Result<DeliveryRecord, sealed::SealedError> {
    let source = format!("hook:{}", record.webhook_id);
    let org_id = record.org_id.clone();
    let (hook, secret) = stored_hook(record, sealer)?;
    Ok(hook_delivery(
        &hook,
        sealer.filter(|_| secret),
        (org_id, source),
        event,
        body,
        max_attempts,
        None,
    ))
}

/// A delivery of `event` with `body` through `hook`, made for `(org_id, source)`, its
/// secrets sealed with `sealer` when given; dead from the start, with why, when it
/// `failed` to be made (or its headers cannot be sealed).
pub fn hook_delivery(
    hook: &Hook,
    sealer: Option<&Sealer>,
    (org_id, source): (String, String),
    event: &str,
    body: Vec<u8>,
    max_attempts: i64,
    mut failed: Option<String>,
) -> DeliveryRecord {
    let (url, headers) = target(hook, sealer, &mut failed);
    DeliveryRecord {
        id: uuid::Uuid::now_v7().to_string(),
        org_id,
        source,
        event: event.to_owned(),
        method: hook.method.clone(),
        url,
        headers,
        body,
        body_sealed: None,
        secret_sealed: None,
        status: if failed.is_some() { DEAD } else { PENDING }.into(),
        attempts: 0,
        max_attempts,
        next_attempt_at: 0,
        lease_until: 0,
        last_status: None,
        last_error: failed,
        created_at: 0,
        updated_at: 0,
    }
}

/// A dashboard webhook as a handler's call, its sealed parts opened; and whether it had
/// any.
pub fn stored_hook(
    record: HookRecord,
    sealer: Option<&Sealer>,
) -> Result<(Hook, bool), sealed::SealedError> {
    let secret = [
        record.header_map.as_deref(),
        Some(record.target_path.as_str()),
    ]
    .into_iter()
    .flatten()
    .any(|t| t.starts_with("v1:"));
    let headers = sealed::open_headers(sealer, record.header_map.as_deref())?.unwrap_or_default();
    let url = sealed::open_url(sealer, &record.target_path)?;
    let hook = Hook {
        method: record.method,
        url,
        headers,
        template_path: record.template_path,
        template: None,
        event_timeout: u64::try_from(record.event_timeout).unwrap_or(0),
    };
    Ok((hook, secret))
}
