//! The key's own rate limit and quota, counted per key across every API it reaches.

use super::{enforce, Ctx, Verdict};
use crate::gateway::events::EventKind;

pub async fn run(ctx: &mut Ctx<'_>) -> Verdict {
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
        let bucket = format!("key:{}:quota", session.id);
        let decision = ctx
            .gw
            .limiter
            .check_quota(&bucket, q.max, q.renewal.0)
            .await;
        enforce(ctx, decision, EventKind::QuotaExceeded, "quota exceeded")?;
    }
    Ok(())
}
