//! The management API's own OpenAPI document, served at `/api/openapi.json`. It is
//! generated from the handlers' annotations and the request and response types, and a
//! test checks that it lists exactly the routes of the router.

use http::StatusCode;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::ApiError;
use super::manage::{
    apis, assets, asyncapi, certs, deliveries, gateway_keys, hooks, live, mapping, orgs, status,
};
use super::portal::{catalogue, devapps, developers, domain, publisher};
use super::request::{Ctx, Reply};
use super::{error, request};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sluice dashboard management API",
        description = "Assets, certificates, webhooks, APIs (plain and streaming), organisations, users and keys, the developer portal and the webhook delivery log. Every path but this document and the portal's event ingestion (signed with a product's publish secret) takes `Authorization: Bearer <key>` or `Authorization: <key>`. Errors are `{\"Status\":\"Error\",\"Message\":\"...\"}`."
    ),
    paths(
        serve,
        orgs::create_org,
        orgs::get_org,
        orgs::list_users,
        orgs::create_user,
        orgs::delete_user,
        orgs::list_keys,
        orgs::create_key,
        orgs::delete_key,
        assets::list,
        assets::create,
        assets::get,
        assets::update,
        assets::delete,
        certs::list,
        certs::create,
        certs::get,
        certs::delete,
        hooks::list,
        hooks::create,
        hooks::get,
        hooks::update,
        hooks::delete,
        apis::list_oas,
        apis::create_oas,
        apis::get_oas,
        apis::update_oas,
        apis::delete_oas,
        apis::list_streams,
        apis::create_streams,
        apis::get_streams,
        apis::update_streams,
        apis::delete_streams,
        live::live,
        asyncapi::asyncapi,
        status::status,
        catalogue::instance,
        catalogue::products,
        catalogue::asyncapi,
        gateway_keys::list,
        gateway_keys::create,
        gateway_keys::delete,
        live::requests,
        live::tail,
        publisher::list_products,
        publisher::create_product,
        publisher::get_product,
        publisher::update_product,
        publisher::delete_product,
        publisher::publish_event,
        publisher::list_apps,
        publisher::create_app,
        publisher::get_app,
        publisher::update_app,
        publisher::delete_app,
        publisher::approve_app,
        publisher::reject_app,
        developers::get_settings,
        developers::put_settings,
        developers::invite,
        developers::list_developers,
        developers::delete_developer,
        developers::get_session,
        developers::signup,
        developers::signin,
        developers::signout,
        developers::reset_request,
        developers::reset_confirm,
        devapps::list,
        devapps::create,
        devapps::get,
        devapps::delete,
        devapps::rotate_key,
        devapps::revoke_key,
        devapps::subscribe,
        devapps::unsubscribe,
        devapps::test_event,
        devapps::log,
        devapps::redeliver,
        deliveries::list,
        deliveries::get,
        deliveries::replay,
        mapping::run,
    ),
    components(schemas(
        error::ErrorBody,
        error::Problem,
        request::Outcome,
        assets::Asset,
        assets::AssetInput,
        assets::AssetList,
        certs::CertSummary,
        certs::CertList,
        certs::CertDetailed,
        certs::CertDetailedList,
        certs::CertFull,
        certs::CertUpload,
        hooks::Webhook,
        mapping::MappingRun,
        live::LiveApi,
        live::LiveStream,
        live::LiveNode,
        live::LiveRoute,
        live::LiveKey,
        live::Tail,
        gateway_keys::GatewayKeyList,
        live::ApiRequests,
        live::ApiRequestCount,
        live::TailMessage,
        mapping::MappingResult,
        hooks::WebhookInput,
        hooks::WebhookList,
        apis::ApiSummary,
        apis::ApiList,
        orgs::OrgInput,
        orgs::Org,
        orgs::KeyOutcome,
        orgs::User,
        orgs::UserInput,
        orgs::RoleInput,
        orgs::UserList,
        orgs::Key,
        orgs::KeyInput,
        orgs::KeyList,
        domain::ProductWebhooks,
        publisher::Product,
        domain::ProductInput,
        publisher::ProductOutcome,
        publisher::ProductList,
        domain::KeyApproval,
        catalogue::Catalogue,
        catalogue::CatalogueProduct,
        catalogue::CatalogueApi,
        catalogue::Endpoint,
        publisher::Subscription,
        domain::SubscriptionInput,
        publisher::App,
        domain::AppInput,
        publisher::AppList,
        publisher::EventAccepted,
        deliveries::Delivery,
        deliveries::Attempt,
        deliveries::DeliveryDetail,
        deliveries::DeliveryList,
        status::ApiStatus,
        status::StreamStatus,
        crate::stream::health::StreamHealth,
        crate::stream::health::Component,
        crate::stream::health::State,
        developers::Signup,
        developers::Developer,
        developers::Session,
        developers::SignUp,
        developers::SignIn,
        developers::ResetRequest,
        developers::ResetConfirm,
        developers::Settings,
        developers::InvitationInput,
        developers::Invitation,
        developers::DeveloperList,
        devapps::DeveloperApp,
        devapps::DeveloperAppList,
        devapps::AppWithKey,
        devapps::DeveloperAppInput,
        devapps::DeveloperSubscriptionInput,
        devapps::NewSubscription,
        devapps::NewKey,
        devapps::DeveloperDeliveries,
    )),
    modifiers(&Security),
    tags(
        (name = "assets", description = "Stored documents such as API templates."),
        (name = "certs", description = "Certificates and their private keys."),
        (name = "hooks", description = "Webhook definitions."),
        (name = "apis", description = "API definitions served by the gateways."),
        (name = "orgs", description = "Organisations, users and keys."),
        (name = "portal", description = "Developer portal: products, apps, their webhook subscriptions, and published events."),
        (name = "portal-developers", description = "The developer portal's own API, called by its developers with their session cookie (`sluice_portal`) and an `X-CSRF-Token` on every write: sign-up, sign-in, password reset, their apps, keys, subscriptions and delivery log."),
        (name = "deliveries", description = "The webhook delivery log and replays."),
        (name = "gateway-keys", description = "The gateway's keys: access rights, rate limits, quotas."),
        (name = "mapping", description = "The mapping playground: a mapping run on one message."),
        (name = "meta", description = "This document."),
    )
)]
pub struct ManagementApi;

/// Declares the key scheme the `security` entries name.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "A dashboard key, as `Bearer <key>` or bare.",
            ))),
        );
        components.add_security_scheme(
            "portal_session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "sluice_portal",
                "A portal developer's session, set by sign-up or sign-in.",
            ))),
        );
    }
}

/// The document as JSON.
pub fn document() -> serde_json::Value {
    serde_json::to_value(ManagementApi::openapi()).unwrap_or_default()
}

#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "meta",
    responses((status = 200, description = "This OpenAPI document.", body = Object))
)]
pub async fn serve(_ctx: Ctx) -> Result<Reply, ApiError> {
    Ok(Reply::value(StatusCode::OK, document()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn documents_exactly_the_routes() {
        let doc = document();
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                documented.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
        let routed: BTreeSet<_> = super::super::router::routes()
            .iter()
            .map(|r| (r.method.to_string(), r.pattern.to_owned()))
            .collect();
        assert_eq!(documented, routed);
    }

    #[test]
    fn every_protected_operation_names_the_key_scheme_and_401() {
        let doc = document();
        assert!(doc["components"]["securitySchemes"]["api_key"].is_object());
        let public: BTreeSet<_> = super::super::router::routes()
            .iter()
            .filter(|r| r.public)
            .map(|r| (r.method.to_string(), r.pattern))
            .collect();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if path == "/api/openapi.json" {
                    continue;
                }
                if public.contains(&(method.to_ascii_uppercase(), path.as_str())) {
                    // Signed, anonymous or a developer's session: no key scheme.
                    let schemes = op["security"].to_string();
                    assert!(!schemes.contains("api_key"), "{method} {path}");
                } else {
                    assert!(op["security"].is_array(), "{method} {path}");
                }
                // Whatever takes credentials says what happens without them; of the
                // portal's own API, the catalogue and sign-in take none.
                if !path.starts_with("/portal/api/") || op.get("security").is_some() {
                    assert!(op["responses"]["401"].is_object(), "{method} {path}");
                }
            }
        }
    }

    #[test]
    fn path_parameters_are_those_the_path_names() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().unwrap() {
            let named: BTreeSet<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            for (method, op) in item.as_object().unwrap() {
                let params = op["parameters"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let declared: BTreeSet<&str> = params
                    .iter()
                    .filter(|p| p["in"] == "path")
                    .map(|p| {
                        assert_eq!(p["required"], true, "{method} {path}: {p}");
                        p["name"].as_str().unwrap()
                    })
                    .collect();
                assert_eq!(declared, named, "{method} {path}");
            }
        }
    }

    #[test]
    fn every_error_answer_is_the_error_body() {
        let doc = document();
        let mut errors = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for (status, response) in op["responses"].as_object().unwrap() {
                    if status.as_str() < "400" {
                        continue;
                    }
                    errors += 1;
                    let content = response["content"].as_object();
                    let schemas: Vec<_> = content
                        .into_iter()
                        .flatten()
                        .map(|(media, c)| (media.as_str(), c["schema"]["$ref"].as_str()))
                        .collect();
                    assert_eq!(
                        schemas,
                        [("application/json", Some("#/components/schemas/ErrorBody"))],
                        "{method} {path} {status}"
                    );
                }
            }
        }
        assert!(errors > 100, "the responses were not read");
    }
}
