//! Request and response header transforms (`transformRequestHeaders`,
//! `transformResponseHeaders`): remove, then add.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::Ctx;
use crate::apidef::extension::HeaderTransform;
use crate::http::HttpResponse;

pub fn transform_request(ctx: &mut Ctx<'_>) {
    if let Some(t) = ctx.api.global.transform_request_headers.as_ref() {
        apply(t, ctx.req.headers_mut());
    }
}

pub fn transform_response(ctx: &Ctx<'_>, resp: &mut HttpResponse) {
    if let Some(t) = ctx.api.global.transform_response_headers.as_ref() {
        apply(t, resp.headers_mut());
    }
}

fn apply(t: &HeaderTransform, headers: &mut HeaderMap) {
    if !t.enabled {
        return;
    }
    for name in &t.remove {
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            headers.remove(name);
        }
    }
    // Names and values were checked when the API loaded.
    for nv in &t.add {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(nv.name.as_bytes()),
            HeaderValue::from_str(&nv.value),
        ) {
            headers.insert(name, value);
        }
    }
}
