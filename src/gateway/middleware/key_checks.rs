//! Key checks: an authenticated key must be active, unexpired and allowed on this API,
//! method and path; then the operation's allow/block lists apply to every request.

use http::StatusCode;

use super::{error, Ctx, Step};
use crate::gateway::events::EventKind;

pub fn run(ctx: &mut Ctx<'_>) -> Step {
    if let Some(session) = &ctx.session {
        if session.policy.inactive {
            return Err(error(StatusCode::FORBIDDEN, "the key is inactive"));
        }
        if session.expired(chrono::Utc::now().timestamp()) {
            ctx.gw.events.publish(
                EventKind::KeyExpired,
                &ctx.api.id,
                Some(&session.id),
                ctx.rest,
                "key expired",
            );
            return Err(error(StatusCode::UNAUTHORIZED, "the key has expired"));
        }
        match session.policy.access_rights.get(&ctx.api.id) {
            None => {
                return Err(error(
                    StatusCode::FORBIDDEN,
                    "the key has no access to this API",
                ))
            }
            Some(right) if !right.allows(ctx.req.method(), ctx.rest) => {
                return Err(error(
                    StatusCode::FORBIDDEN,
                    "the key has no access to this method or path",
                ))
            }
            Some(_) => {}
        }
    }
    let op = ctx.operation();
    if op.is_some_and(|op| op.block) {
        return Err(error(StatusCode::FORBIDDEN, "this operation is blocked"));
    }
    if ctx.api.allow_list && !op.is_some_and(|op| op.allow) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "this operation is not allowed",
        ));
    }
    Ok(())
}
