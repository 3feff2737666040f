//! The stream middleware: a request whose path is a stream route of its API is handed
//! to that stream (see [`crate::gateway::streams`]) and never proxied.

use super::{Ctx, Verdict};
use crate::gateway::api::Api;
use crate::telemetry;

/// The streams are the stream host's, started from the API when the table changes.
pub struct Streams;

impl Streams {
    /// When the API has streams.
    pub fn compile(api: &Api) -> Option<Self> {
        (!api.streams.is_empty()).then_some(Streams)
    }

    /// Hands the request to its stream, when its path is one; `span` is this step's.
    pub async fn run(&self, ctx: &mut Ctx<'_>, span: Option<&telemetry::Span>) -> Verdict {
        let mut req = ctx.take_req();
        // The stream's messages are children of this step.
        if let Some(span) = span {
            span.inject(req.headers_mut());
        }
        let caller = crate::gateway::streams::context::Caller {
            key_id: ctx.key_id(),
            identity: ctx.identity.as_deref(),
            claims: ctx.claims.as_ref(),
            meta: ctx.session.as_ref().map(|s| &s.policy.meta),
        };
        match ctx.gw.streams.divert(ctx.api, ctx.rest, req, &caller) {
            Ok(diverted) => Err(diverted.await),
            Err(req) => {
                ctx.req = req;
                Ok(())
            }
        }
    }
}
