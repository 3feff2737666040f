//! The API's rate limit (`upstream.rateLimit`) and the operation's (`rateLimit` of
//! `middleware.operations.<id>`): shared by every caller of the API or operation.

use super::{enforce, Ctx, Verdict};
use crate::gateway::api::Api;
use crate::gateway::events::EventKind;
use crate::limit::Rate;

/// The API's limits with their buckets, named once.
pub struct ApiLimit {
    api: Option<Limit>,
    /// Each operation's, in the order of the API's operations.
    operations: Box<[Option<Limit>]>,
}

struct Limit {
    bucket: Box<str>,
    rate: Rate,
}

impl ApiLimit {
    /// When the API or one of its operations has a rate limit.
    pub fn compile(api: &Api) -> Option<Self> {
        let operations: Box<[Option<Limit>]> = api
            .operations
            .iter()
            .map(|op| {
                op.rate.map(|rate| Limit {
                    bucket: format!("op:{}:{}:rate", api.id, op.id).into(),
                    rate,
                })
            })
            .collect();
        let whole = api.rate.map(|rate| Limit {
            bucket: format!("api:{}:rate", api.id).into(),
            rate,
        });
        (whole.is_some() || operations.iter().any(Option::is_some)).then_some(ApiLimit {
            api: whole,
            operations,
        })
    }

    pub async fn run(&self, ctx: &mut Ctx<'_>) -> Verdict {
        if let Some(limit) = &self.api {
            let decision = ctx.gw.limiter.check_rate(&limit.bucket, limit.rate).await;
            enforce(
                ctx,
                decision,
                EventKind::RateLimitExceeded,
                "API rate limit exceeded",
            )?;
        }
        let op = ctx.op_index().and_then(|i| self.operations[i].as_ref());
        if let Some(limit) = op {
            let decision = ctx.gw.limiter.check_rate(&limit.bucket, limit.rate).await;
            enforce(
                ctx,
                decision,
                EventKind::RateLimitExceeded,
                "operation rate limit exceeded",
            )?;
        }
        Ok(())
    }
}
