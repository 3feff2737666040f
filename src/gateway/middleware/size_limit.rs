//! The request size limit: the API's global one and the operation's, the smaller wins.
//! A declared `Content-Length` over it is refused at once; a body of unknown length is
//! read up to the limit and refused if it goes over.

use http::StatusCode;

use super::{error, Ctx, Verdict};
use crate::gateway::api::Api;
use crate::http::{self as h, BodyError, HttpRequest};

/// The limits, resolved: the global one, and for each operation the smaller of its own
/// and the global one.
pub struct SizeLimit {
    global: Option<u64>,
    /// In the order of the API's operations.
    operations: Box<[Option<u64>]>,
}

impl SizeLimit {
    /// When the API or one of its operations has a size limit.
    pub fn compile(api: &Api) -> Option<Self> {
        let global = api
            .global
            .request_size_limit
            .as_ref()
            .filter(|l| l.enabled)
            .map(|l| l.value);
        let own = api.operations.iter().map(|op| op.size_limit);
        let acts = global.is_some() || own.clone().any(|l| l.is_some());
        acts.then(|| SizeLimit {
            global,
            operations: own
                .map(|op| match (global, op) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                })
                .collect(),
        })
    }

    /// The limit of a request for the operation at `op` (none when no operation
    /// matched).
    pub(super) fn limit(&self, op: Option<usize>) -> Option<u64> {
        match op {
            Some(i) => self.operations[i],
            None => self.global,
        }
    }

    pub async fn run(&self, ctx: &mut Ctx<'_>) -> Verdict {
        match self.limit(ctx.op_index()) {
            Some(limit) => enforce(ctx, limit).await,
            None => Ok(()),
        }
    }
}

async fn enforce(ctx: &mut Ctx<'_>, limit: u64) -> Verdict {
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
