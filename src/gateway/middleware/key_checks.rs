//! Key checks: an authenticated key must be active, unexpired, of the API's organisation
//! and allowed on this API, method and path; then the operation's allow/block lists
//! apply to every request.

use http::StatusCode;

use super::{error, Ctx, Verdict};
use crate::gateway::api::Api;
use crate::gateway::events::EventKind;

pub struct KeyChecks {
    /// Some operation is on the allow list: every other one is refused.
    allow_list: bool,
}

impl KeyChecks {
    /// When the API authenticates keys (a key is there only once authentication found
    /// one), or has an allow or a block list.
    pub fn compile(api: &Api) -> Option<Self> {
        let acts = api.auth.is_some() || api.allow_list || api.operations.iter().any(|op| op.block);
        acts.then_some(KeyChecks {
            allow_list: api.allow_list,
        })
    }

    pub fn run(&self, ctx: &Ctx<'_>) -> Verdict {
        check_key(ctx)?;
        let op = ctx.operation();
        if op.is_some_and(|op| op.block) {
            return Err(error(StatusCode::FORBIDDEN, "this operation is blocked"));
        }
        if self.allow_list && !op.is_some_and(|op| op.allow) {
            return Err(error(
                StatusCode::FORBIDDEN,
                "this operation is not allowed",
            ));
        }
        Ok(())
    }
}

/// The authenticated key, if any: its state and its rights on this API.
fn check_key(ctx: &Ctx<'_>) -> Verdict {
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
        // A key made for an organisation reaches that organisation's APIs only: an id in
        // its access rights may since name another organisation's API. A key of no
        // organisation is the operator's, made with the gateway's secret.
        let other_org = !session.org_id.is_empty() && session.org_id != ctx.api.org_id;
        match session.policy.access_rights.get(&ctx.api.id) {
            _ if other_org => {
                return Err(error(
                    StatusCode::FORBIDDEN,
                    "the key has no access to this API",
                ))
            }
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
    Ok(())
}
