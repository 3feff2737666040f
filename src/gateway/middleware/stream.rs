//! The stream middleware's place in the chain. Streaming APIs plug in here: a request
//! whose path is a stream route of its API is diverted to the stream and never proxied.

use futures::future::BoxFuture;

use super::Ctx;
use crate::gateway::api::Api;
use crate::http::{HttpRequest, HttpResponse};

/// Serves the stream routes of APIs. `Err` gives the request back: not a stream route.
pub trait StreamRoutes: Send + Sync {
    fn divert(
        &self,
        api: &Api,
        rest: &str,
        req: HttpRequest,
    ) -> Result<BoxFuture<'static, HttpResponse>, HttpRequest>;
}

pub fn divert(
    ctx: &Ctx<'_>,
    req: HttpRequest,
) -> Result<BoxFuture<'static, HttpResponse>, HttpRequest> {
    match &ctx.gw.streams {
        Some(streams) => streams.divert(ctx.api, &ctx.rest, req),
        None => Err(req),
    }
}
