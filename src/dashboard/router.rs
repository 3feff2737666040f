//! The route table and the dispatch of one request: the web console's files first (`/`
//! and `/console/`, never a path under `/api`), then route by path (404), then by method
//! (405 with `Allow`), authenticate (401), read the body within the limit (413), run the
//! handler, and render whatever comes back in the one JSON shape.
//!
//! The table is the only place routes exist, and a test checks it against the OpenAPI
//! document, so a route cannot be served without being documented or the other way.

use std::sync::Arc;

use futures::future::BoxFuture;
use http::{Method, StatusCode};
use percent_encoding::percent_decode_str;

use super::error::ApiError;
use super::manage::{
    apis, assets, asyncapi, certs, deliveries, gateway_keys, hooks, live, mapping, orgs, status,
};
use super::portal::{catalogue, devapps, developers, publisher};
use super::request::{Ctx, Reply};
use super::{auth, openapi, State};
use crate::http::{self as h, HttpResponse};

/// Runs one request.
pub type Handler = fn(Ctx) -> BoxFuture<'static, Result<Reply, ApiError>>;

/// One route: a method, a path pattern whose `{name}` segments are parameters, and
/// whether it needs no credentials.
pub struct Route {
    pub method: Method,
    pub pattern: &'static str,
    pub public: bool,
    pub handler: Handler,
}

macro_rules! route {
    ($method:ident $pattern:literal => $handler:path) => {
        Route {
            method: Method::$method,
            pattern: $pattern,
            public: false,
            handler: |ctx| Box::pin($handler(ctx)),
        }
    };
    ($method:ident $pattern:literal => $handler:path, public) => {
        Route {
            method: Method::$method,
            pattern: $pattern,
            public: true,
            handler: |ctx| Box::pin($handler(ctx)),
        }
    };
}

/// Every route of the management API.
pub fn routes() -> Vec<Route> {
    vec![
        route!(GET "/api/openapi.json" => openapi::serve, public),
        route!(POST "/api/orgs" => orgs::create_org),
        route!(GET "/api/orgs/{orgId}" => orgs::get_org),
        route!(GET "/api/users" => orgs::list_users),
        route!(POST "/api/users" => orgs::create_user),
        route!(DELETE "/api/users/{userId}" => orgs::delete_user),
        route!(GET "/api/keys" => orgs::list_keys),
        route!(POST "/api/keys" => orgs::create_key),
        route!(DELETE "/api/keys/{keyId}" => orgs::delete_key),
        route!(GET "/api/assets" => assets::list),
        route!(POST "/api/assets" => assets::create),
        route!(GET "/api/assets/{assetID}" => assets::get),
        route!(PUT "/api/assets/{assetID}" => assets::update),
        route!(DELETE "/api/assets/{assetID}" => assets::delete),
        route!(GET "/api/certs" => certs::list),
        route!(POST "/api/certs" => certs::create),
        route!(GET "/api/certs/{certId}" => certs::get),
        route!(DELETE "/api/certs/{certId}" => certs::delete),
        route!(POST "/api/mapping/run" => mapping::run),
        route!(GET "/api/hooks" => hooks::list),
        route!(POST "/api/hooks" => hooks::create),
        route!(GET "/api/hooks/{hookId}" => hooks::get),
        route!(PUT "/api/hooks/{hookId}" => hooks::update),
        route!(DELETE "/api/hooks/{hookId}" => hooks::delete),
        route!(GET "/api/gateway/keys" => gateway_keys::list),
        route!(POST "/api/gateway/keys" => gateway_keys::create),
        route!(DELETE "/api/gateway/keys/{keyId}" => gateway_keys::delete),
        route!(GET "/api/apis/requests" => live::requests),
        route!(GET "/api/apis/oas" => apis::list_oas),
        route!(POST "/api/apis/oas" => apis::create_oas),
        route!(GET "/api/apis/oas/{apiId}" => apis::get_oas),
        route!(PUT "/api/apis/oas/{apiId}" => apis::update_oas),
        route!(DELETE "/api/apis/oas/{apiId}" => apis::delete_oas),
        route!(GET "/api/apis/streams" => apis::list_streams),
        route!(POST "/api/apis/streams" => apis::create_streams),
        route!(GET "/api/apis/streams/{apiId}" => apis::get_streams),
        route!(PUT "/api/apis/streams/{apiId}" => apis::update_streams),
        route!(DELETE "/api/apis/streams/{apiId}" => apis::delete_streams),
        route!(GET "/api/apis/streams/{apiId}/live" => live::live),
        route!(GET "/api/apis/streams/{apiId}/asyncapi" => asyncapi::asyncapi),
        route!(GET "/api/apis/streams/{apiId}/status" => status::status),
        route!(POST "/api/apis/streams/{apiId}/tail" => live::tail),
        route!(GET "/api/portal/products" => publisher::list_products),
        route!(POST "/api/portal/products" => publisher::create_product),
        route!(GET "/api/portal/products/{productId}" => publisher::get_product),
        route!(PUT "/api/portal/products/{productId}" => publisher::update_product),
        route!(DELETE "/api/portal/products/{productId}" => publisher::delete_product),
        // Signed with the product's publish secret instead of a dashboard key.
        route!(POST "/api/portal/products/{productId}/events" => publisher::publish_event, public),
        route!(GET "/portal/api/instance" => catalogue::instance, public),
        route!(GET "/portal/api/orgs/{orgId}/products" => catalogue::products, public),
        route!(GET "/portal/api/orgs/{orgId}/products/{productId}/apis/{apiId}/asyncapi" => catalogue::asyncapi, public),
        // The portal's developers: their session cookie instead of a dashboard key.
        route!(GET "/portal/api/orgs/{orgId}/session" => developers::get_session, public),
        route!(POST "/portal/api/orgs/{orgId}/signup" => developers::signup, public),
        route!(POST "/portal/api/orgs/{orgId}/signin" => developers::signin, public),
        route!(POST "/portal/api/orgs/{orgId}/signout" => developers::signout, public),
        route!(POST "/portal/api/orgs/{orgId}/password-reset" => developers::reset_request, public),
        route!(POST "/portal/api/orgs/{orgId}/password-reset/confirm" => developers::reset_confirm, public),
        route!(GET "/portal/api/orgs/{orgId}/apps" => devapps::list, public),
        route!(POST "/portal/api/orgs/{orgId}/apps" => devapps::create, public),
        route!(GET "/portal/api/orgs/{orgId}/apps/{appId}" => devapps::get, public),
        route!(DELETE "/portal/api/orgs/{orgId}/apps/{appId}" => devapps::delete, public),
        route!(POST "/portal/api/orgs/{orgId}/apps/{appId}/key" => devapps::rotate_key, public),
        route!(DELETE "/portal/api/orgs/{orgId}/apps/{appId}/key" => devapps::revoke_key, public),
        route!(POST "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions" => devapps::subscribe, public),
        route!(DELETE "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions/{subscriptionId}" => devapps::unsubscribe, public),
        route!(POST "/portal/api/orgs/{orgId}/apps/{appId}/subscriptions/{subscriptionId}/test" => devapps::test_event, public),
        route!(GET "/portal/api/orgs/{orgId}/apps/{appId}/deliveries" => devapps::log, public),
        route!(POST "/portal/api/orgs/{orgId}/apps/{appId}/deliveries/{deliveryId}/redeliver" => devapps::redeliver, public),
        route!(GET "/api/portal/settings" => developers::get_settings),
        route!(PUT "/api/portal/settings" => developers::put_settings),
        route!(POST "/api/portal/invitations" => developers::invite),
        route!(GET "/api/portal/developers" => developers::list_developers),
        route!(DELETE "/api/portal/developers/{developerId}" => developers::delete_developer),
        route!(GET "/api/portal/apps" => publisher::list_apps),
        route!(POST "/api/portal/apps" => publisher::create_app),
        route!(GET "/api/portal/apps/{appId}" => publisher::get_app),
        route!(PUT "/api/portal/apps/{appId}" => publisher::update_app),
        route!(DELETE "/api/portal/apps/{appId}" => publisher::delete_app),
        route!(POST "/api/portal/apps/{appId}/approve" => publisher::approve_app),
        route!(POST "/api/portal/apps/{appId}/reject" => publisher::reject_app),
        route!(GET "/api/deliveries" => deliveries::list),
        route!(GET "/api/deliveries/{deliveryId}" => deliveries::get),
        route!(POST "/api/deliveries/{deliveryId}/replay" => deliveries::replay),
    ]
}

/// The parameters of `path` if it matches `pattern`.
fn matches(pattern: &'static str, path: &str) -> Option<Vec<(&'static str, String)>> {
    let mut params = Vec::new();
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(params),
            (Some(w), Some(g)) if w.starts_with('{') => {
                if g.is_empty() {
                    return None;
                }
                let param = percent_decode_str(g).decode_utf8().ok()?;
                // No stored id holds NUL, and PostgreSQL refuses it in a query: such a
                // path names nothing.
                if param.contains('\0') {
                    return None;
                }
                let name = w.trim_start_matches('{').trim_end_matches('}');
                params.push((name, param.into_owned()));
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return None,
        }
    }
}

/// Answers one request.
pub async fn handle(
    state: Arc<State>,
    req: http::Request<h::Body>,
    peer: std::net::IpAddr,
) -> HttpResponse {
    if let Some(resp) = state
        .manage
        .console
        .answer(req.method(), req.uri().path(), req.headers())
    {
        return resp;
    }
    match dispatch(state, req, peer).await {
        Ok(reply) => {
            let mut resp = h::json(reply.status, &reply.body);
            resp.headers_mut().extend(reply.headers);
            resp
        }
        Err(e) => e.into_response(),
    }
}

async fn dispatch(
    state: Arc<State>,
    req: http::Request<h::Body>,
    peer: std::net::IpAddr,
) -> Result<Reply, ApiError> {
    let raw_path = req.uri().path();
    // `/api/assets/` is `/api/assets`.
    let path = match raw_path.trim_end_matches('/') {
        "" => "/",
        p => p,
    };
    if path == "/ping" && req.method() == Method::GET {
        return Ok(Reply::value(
            StatusCode::OK,
            serde_json::json!({"Status": "OK", "Message": "pong"}),
        ));
    }
    let mut allowed: Vec<String> = Vec::new();
    let mut found = None;
    for route in state.routes.iter() {
        if let Some(params) = matches(route.pattern, path) {
            if route.method == req.method() {
                found = Some((route, params));
                break;
            }
            allowed.push(route.method.to_string());
        }
    }
    let Some((route, params)) = found else {
        if allowed.is_empty() {
            return Err(ApiError::NotFound(format!("no such path: {raw_path}")));
        }
        return Err(ApiError::MethodNotAllowed {
            allow: allowed.join(", "),
        });
    };
    let (parts, body) = req.into_parts();
    let caller = if route.public {
        auth::Caller {
            org_id: String::new(),
            user_id: String::new(),
            key_id: String::new(),
            role: auth::Role::Member,
        }
    } else {
        auth::authenticate(&state.store, &parts.headers).await?
    };
    let max = state.config.http.max_body_bytes;
    let idle = state.config.http.body_read_timeout.0;
    let body = read_limited(h::boxed(h::IdleTimeout::new(body, idle)), max).await?;
    let query = parts
        .uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let ctx = Ctx {
        state: state.clone(),
        caller,
        peer,
        params,
        query,
        headers: parts.headers,
        body,
    };
    (route.handler)(ctx).await
}

/// How much of a too-large body is still read (and dropped) so that the client, which
/// is usually still sending, gets the 413 rather than a reset connection.
const DRAIN_LIMIT: usize = 16 * 1024 * 1024;

/// Reads the body, refusing more than `max` bytes with 413.
async fn read_limited(mut body: h::Body, max: usize) -> Result<bytes::Bytes, ApiError> {
    use http_body_util::BodyExt;
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen > max {
                if seen > max.saturating_add(DRAIN_LIMIT) {
                    break;
                }
                continue;
            }
            buf.extend_from_slice(&data);
        }
    }
    if seen > max {
        return Err(ApiError::TooLarge(max));
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_take_parameters_and_nothing_else() {
        assert_eq!(matches("/api/assets", "/api/assets"), Some(vec![]));
        assert_eq!(
            matches("/api/assets/{id}", "/api/assets/a%20b"),
            Some(vec![("id", "a b".to_owned())])
        );
        assert_eq!(matches("/api/assets/{id}", "/api/assets"), None);
        assert_eq!(matches("/api/assets/{id}", "/api/assets/a/b"), None);
        assert_eq!(matches("/api/assets/{id}", "/api/assets/%FF"), None);
        assert_eq!(matches("/api/assets/{id}", "/api/assets/a%00"), None);
        assert_eq!(matches("/api/assets", "/api/assetsx"), None);
    }

    #[test]
    fn no_two_routes_share_a_method_and_pattern() {
        let routes = routes();
        let mut seen = std::collections::BTreeSet::new();
        for r in &routes {
            assert!(
                seen.insert((r.method.to_string(), r.pattern)),
                "{} {}",
                r.method,
                r.pattern
            );
        }
        // Only the document itself and events signed with a product's secret are open
        // without a key under `/api`; the portal's paths (its catalogue, and what its
        // developers do with their own session) never take one.
        let public: Vec<_> = routes
            .iter()
            .filter(|r| r.public && !r.pattern.starts_with("/portal/api/"))
            .map(|r| r.pattern)
            .collect();
        assert_eq!(
            public,
            [
                "/api/openapi.json",
                "/api/portal/products/{productId}/events",
            ]
        );
        for r in &routes {
            assert_eq!(
                r.public,
                !r.pattern.starts_with("/api/") || public.contains(&r.pattern),
                "{}",
                r.pattern
            );
        }
    }

    /// The console's files need no key: none of them may shadow an API path.
    #[test]
    fn the_console_never_answers_an_api_path() {
        let console = super::super::manage::console::Console::new();
        for r in routes() {
            let path = r.pattern.replace(['{', '}'], "");
            assert!(
                console
                    .answer(&r.method, &path, &http::HeaderMap::new())
                    .is_none(),
                "{path}"
            );
        }
    }
}
