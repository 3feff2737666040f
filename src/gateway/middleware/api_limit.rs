//! The API's rate limit (`upstream.rateLimit`) and the operation's (`rateLimit` of
//! `middleware.operations.<id>`): shared by every caller of the API or operation.

use super::{enforce, Ctx, Verdict};
use crate::gateway::events::EventKind;

pub async fn run(ctx: &mut Ctx<'_>) -> Verdict {
    if let Some(rate) = ctx.api.rate {
        let decision = ctx.gw.limiter.check_rate(&ctx.api.rate_bucket, rate).await;
        enforce(
            ctx,
            decision,
            EventKind::RateLimitExceeded,
            "API rate limit exceeded",
        )?;
    }
    let op_rate = ctx
        .operation()
        .and_then(|op| op.rate.map(|r| (op.id.clone(), r)));
    if let Some((op_id, rate)) = op_rate {
        let bucket = format!("op:{}:{}:rate", ctx.api.id, op_id);
        let decision = ctx.gw.limiter.check_rate(&bucket, rate).await;
        enforce(
            ctx,
            decision,
            EventKind::RateLimitExceeded,
            "operation rate limit exceeded",
        )?;
    }
    Ok(())
}
