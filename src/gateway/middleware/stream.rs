//! The stream middleware: a request whose path is a stream route of its API is handed
//! to that stream (see [`crate::gateway::streams`]) and never proxied.

use futures::future::BoxFuture;

use super::Ctx;
use crate::http::{HttpRequest, HttpResponse};

pub fn divert(
    ctx: &Ctx<'_>,
    req: HttpRequest,
) -> Result<BoxFuture<'static, HttpResponse>, HttpRequest> {
    let caller = crate::gateway::streams::context::Caller {
        key_id: ctx.key_id(),
        identity: ctx.identity.as_deref(),
        claims: ctx.claims.as_ref(),
    };
    ctx.gw.streams.divert(ctx.api, ctx.rest, req, &caller)
}
