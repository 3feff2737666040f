//! Mock responses: an operation with `mockResponse` on is answered by the gateway, and
//! never reaches the upstream.

use super::{Ctx, Verdict};
use crate::gateway::api::Api;
use crate::http::{self as h, HttpResponse};

/// The answers are the operations' own, compiled with them.
pub struct Mock;

impl Mock {
    /// When one of the API's operations is mocked.
    pub fn compile(api: &Api) -> Option<Self> {
        api.operations
            .iter()
            .any(|op| op.mock.is_some())
            .then_some(Mock)
    }

    /// Answers a request for a mocked operation.
    pub fn run(&self, ctx: &Ctx<'_>) -> Verdict {
        let Some(mock) = ctx.operation().and_then(|op| op.mock.as_ref()) else {
            return Ok(());
        };
        let mut resp = HttpResponse::new(h::full(mock.body.clone()));
        *resp.status_mut() = mock.status;
        for (name, value) in &mock.headers {
            resp.headers_mut().append(name.clone(), value.clone());
        }
        Err(resp)
    }
}
