//! Mock responses: an operation with `mockResponse` on is answered by the gateway, and
//! never reaches the upstream.

use super::Ctx;
use crate::http::{self as h, HttpResponse};

pub fn respond(ctx: &Ctx<'_>) -> Option<HttpResponse> {
    let mock = ctx.operation()?.mock.as_ref()?;
    let mut resp = HttpResponse::new(h::full(mock.body.clone()));
    *resp.status_mut() = mock.status;
    for (name, value) in &mock.headers {
        resp.headers_mut().append(name.clone(), value.clone());
    }
    Some(resp)
}
