//! Request and response header transforms (`transformRequestHeaders`,
//! `transformResponseHeaders`): remove, then add.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::Ctx;
use crate::apidef::extension::HeaderTransform;
use crate::gateway::api::Api;
use crate::http::HttpResponse;

/// `transformRequestHeaders`.
pub struct RequestHeaders(Transform);

/// `transformResponseHeaders`.
pub struct ResponseHeaders(Transform);

/// A transform with its names and values parsed.
struct Transform {
    remove: Box<[HeaderName]>,
    add: Box<[(HeaderName, HeaderValue)]>,
}

impl RequestHeaders {
    /// When the API transforms its requests' headers.
    pub fn compile(api: &Api) -> Option<Self> {
        Transform::compile(api.global.transform_request_headers.as_ref()).map(RequestHeaders)
    }

    pub fn run(&self, ctx: &mut Ctx<'_>) {
        self.0.apply(ctx.req.headers_mut());
    }
}

impl ResponseHeaders {
    /// When the API transforms its answers' headers.
    pub fn compile(api: &Api) -> Option<Self> {
        Transform::compile(api.global.transform_response_headers.as_ref()).map(ResponseHeaders)
    }

    pub fn run(&self, resp: &mut HttpResponse) {
        self.0.apply(resp.headers_mut());
    }
}

impl Transform {
    fn compile(t: Option<&HeaderTransform>) -> Option<Self> {
        let t = t.filter(|t| t.enabled)?;
        // Names and values were checked when the API loaded.
        Some(Transform {
            remove: t
                .remove
                .iter()
                .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
                .collect(),
            add: t
                .add
                .iter()
                .filter_map(|nv| {
                    Some((
                        HeaderName::from_bytes(nv.name.as_bytes()).ok()?,
                        HeaderValue::from_str(&nv.value).ok()?,
                    ))
                })
                .collect(),
        })
    }

    fn apply(&self, headers: &mut HeaderMap) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.add {
            headers.insert(name.clone(), value.clone());
        }
    }
}
