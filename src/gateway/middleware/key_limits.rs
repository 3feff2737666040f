//! The key's own rate limit and quota, counted per key across every API it reaches.

use super::{enforce, Ctx, Verdict};
use crate::gateway::api::Api;
use crate::gateway::events::EventKind;

/// The limits are the key's, and its buckets are named with it: nothing is the API's.
pub struct KeyLimits;

impl KeyLimits {
    /// When the API authenticates keys.
    pub fn compile(api: &Api) -> Option<Self> {
        api.auth.is_some().then_some(KeyLimits)
    }

    pub async fn run(&self, ctx: &mut Ctx<'_>) -> Verdict {
        let Some(session) = ctx.session.clone() else {
            return Ok(());
        };
        if let Some(rate) = session.policy.rate() {
            let decision = ctx.gw.limiter.check_rate(&session.rate_bucket, rate).await;
            enforce(
                ctx,
                decision,
                EventKind::RateLimitExceeded,
                "rate limit exceeded",
            )?;
        }
        if let Some(q) = &session.policy.quota {
            let decision = ctx
                .gw
                .limiter
                .check_quota(&session.quota_bucket, q.max, q.renewal.0)
                .await;
            enforce(ctx, decision, EventKind::QuotaExceeded, "quota exceeded")?;
        }
        Ok(())
    }
}
