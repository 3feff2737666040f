//! Request validation against the operation's OpenAPI schemas (`validateRequest`).

use http::StatusCode;

use super::size_limit::buffer;
use super::{Ctx, Verdict};
use crate::apidef::validate::RequestView;
use crate::gateway::api::Api;
use crate::http::{self as h, BodyError};

/// Bodies are read whole to be validated; this bounds them when no size limit does.
const MAX_VALIDATED_BODY: usize = 16 * 1024 * 1024;

/// The validators are the operations' own, compiled with them.
pub struct Validate;

impl Validate {
    /// When one of the API's operations validates its requests.
    pub fn compile(api: &Api) -> Option<Self> {
        api.operations
            .iter()
            .any(|op| op.validator.is_some())
            .then_some(Validate)
    }

    pub async fn run(&self, ctx: &mut Ctx<'_>) -> Verdict {
        validate(ctx).await
    }
}

async fn validate(ctx: &mut Ctx<'_>) -> Verdict {
    // The operation outlives the context: holding it does not hold the context.
    let Some((op, params)) = ctx.op.as_ref().map(|m| (m.op, m.params.clone())) else {
        return Ok(());
    };
    let Some((validator, status)) = &op.validator else {
        return Ok(());
    };
    let status = *status;
    let body = match buffer(ctx, MAX_VALIDATED_BODY).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return Err(super::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is too large to validate",
            ))
        }
        Err(BodyError::Read(e)) => {
            return Err(super::error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}"),
            ))
        }
    };
    let content_type = ctx
        .req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let problems = validator.check(&RequestView {
        path_params: &params,
        query: ctx.req.uri().query(),
        headers: ctx.req.headers(),
        content_type,
        body: &body,
    });
    if problems.is_empty() {
        return Ok(());
    }
    Err(h::json(
        status,
        &serde_json::json!({
            "error": format!("request validation failed: {}", problems.join("; ")),
            "details": problems,
        }),
    ))
}
