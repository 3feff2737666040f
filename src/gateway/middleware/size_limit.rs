//! The request size limit: the API's global one and the operation's, the smaller wins.
//! A declared `Content-Length` over it is refused at once; a body of unknown length is
//! read up to the limit and refused if it goes over.

use http::StatusCode;

use super::{error, Ctx, Verdict};
use crate::http::{self as h, BodyError, HttpRequest};

pub async fn run(ctx: &mut Ctx<'_>) -> Verdict {
    let global = ctx
        .api
        .global
        .request_size_limit
        .as_ref()
        .filter(|l| l.enabled)
        .map(|l| l.value);
    let op = ctx.operation().and_then(|op| op.size_limit);
    let limit = match (global, op) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => match a.or(b) {
            Some(l) => l,
            None => return Ok(()),
        },
    };
    let declared = ctx
        .req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit => Err(too_large(limit)),
        Some(_) => Ok(()),
        None if http_body::Body::is_end_stream(ctx.req.body()) => Ok(()),
        None => {
            let max = usize::try_from(limit).unwrap_or(usize::MAX);
            buffer(ctx, max).await.map(drop).map_err(|e| match e {
                BodyError::TooLarge => too_large(limit),
                BodyError::Read(e) => error(
                    StatusCode::BAD_REQUEST,
                    &format!("cannot read the request body: {e}"),
                ),
            })
        }
    }
}

fn too_large(limit: u64) -> crate::http::HttpResponse {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than {limit} bytes"),
    )
}

/// Reads the request body into memory (at most `max` bytes), leaving it in place for
/// the steps after.
pub async fn buffer(ctx: &mut Ctx<'_>, max: usize) -> Result<bytes::Bytes, BodyError> {
    let req = ctx.take_req();
    let (mut parts, body) = req.into_parts();
    let result = h::read_body(body, max).await;
    let bytes = result.as_ref().cloned().unwrap_or_default();
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    if result.is_ok() {
        parts.headers.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(bytes.len()),
        );
    }
    ctx.req = HttpRequest::from_parts(parts, h::full(bytes.clone()));
    result
}
