//! The developer portal's public catalogue: what an organisation published, readable
//! without credentials (`/portal/api/orgs/{orgId}/...`). Only published products, and of
//! them only what a developer needs: names, descriptions, the APIs with their listen
//! paths, the events open to webhook subscription, whether keys come at once, and each
//! streaming API's AsyncAPI document, which leaves out the brokers behind the streams.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::developers::OrgPath;
use super::domain::KeyApproval;
use crate::apidef::{asyncapi, streaming::STREAMING, EXTENSION};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{BadQuery, TooManyReads};
use crate::store::ProductRecord;

/// The path of one streaming API of a published product, below the portal's
/// [`OrgPath`].
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct ApiPath {
    /// A published product.
    #[serde(rename = "productId")]
    product_id: String,
    /// A streaming API of the product.
    #[serde(rename = "apiId")]
    api_id: String,
}

/// A published product as developers see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogueProduct {
    pub id: String,
    pub name: String,
    pub description: String,
    pub key_approval: KeyApproval,
    /// The events a webhook subscription may choose; empty when the product has none.
    pub events: Vec<String>,
    pub apis: Vec<CatalogueApi>,
}

/// An API of a published product.
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogueApi {
    pub id: String,
    pub name: String,
    pub listen_path: String,
    pub streaming: bool,
    /// Where its AsyncAPI document is, for a streaming API.
    pub asyncapi: Option<String>,
    /// The operations of its OpenAPI document (at most 100).
    pub endpoints: Vec<Endpoint>,
}

/// One operation of an API's OpenAPI document.
#[derive(Debug, Serialize, ToSchema)]
pub struct Endpoint {
    /// Upper case.
    pub method: String,
    /// As the document writes it, below the API's listen path.
    pub path: String,
    pub summary: String,
}

/// The most operations the catalogue shows of one API.
const MAX_ENDPOINTS: usize = 100;

/// The operations of an OpenAPI document, in its order.
fn endpoints(doc: &Value) -> Vec<Endpoint> {
    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    let Some(paths) = doc.get("paths").and_then(Value::as_object) else {
        return Vec::new();
    };
    paths
        .iter()
        .filter_map(|(path, item)| Some((path, item.as_object()?)))
        .flat_map(|(path, item)| {
            item.iter()
                .filter(|(m, _)| METHODS.contains(&m.as_str()))
                .map(move |(method, op)| Endpoint {
                    method: method.to_ascii_uppercase(),
                    path: path.clone(),
                    summary: op
                        .get("summary")
                        .or_else(|| op.get("description"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .chars()
                        .take(300)
                        .collect(),
                })
        })
        .take(MAX_ENDPOINTS)
        .collect()
}

#[utoipa::path(
    get,
    path = "/portal/api/instance",
    tag = "portal",
    responses(
        (status = 200, description = "The organisation whose portal `/portal/` shows when no `?org=` names one: the instance's first.", body = Object),
        (status = 404, description = "The store has no organisation yet.", body = ErrorBody),
    ),
)]
pub async fn instance(ctx: Ctx) -> Result<Reply, ApiError> {
    let org = ctx
        .state
        .store
        .instance_org()
        .await?
        .ok_or_else(|| ApiError::not_found("portal"))?;
    Reply::json(StatusCode::OK, serde_json::json!({"org_id": org}))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Catalogue {
    pub products: Vec<CatalogueProduct>,
    pub pages: i64,
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/products",
    tag = "portal",
    params(
        OrgPath,
        ("p" = Option<i64>, Query, description = "Page number from 1."),
    ),
    responses(
        (status = 200, description = "A page of the organisation's published products.", body = Catalogue),
        BadQuery,
        TooManyReads,
    ),
)]
pub async fn products(ctx: Ctx) -> Result<Reply, ApiError> {
    super::developers::address_read(&ctx)?;
    let paging = ctx.page()?;
    // No "every page at once" (a page below 0) for anonymous readers.
    if let Some(p) = ctx.query("p").and_then(|p| p.trim().parse::<i64>().ok()) {
        if p < 1 {
            return Err(ApiError::bad_request(
                "query parameter `p`: pages start at 1",
            ));
        }
    }
    let OrgPath { org } = ctx.path()?;
    let org = org.as_str();
    let (records, total) = ctx
        .state
        .store
        .list_published_products(org, paging.page)
        .await?;
    let mut products = Vec::with_capacity(records.len());
    for record in records {
        products.push(product(&ctx, record).await?);
    }
    Reply::json(
        StatusCode::OK,
        Catalogue {
            products,
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    get,
    path = "/portal/api/orgs/{orgId}/products/{productId}/apis/{apiId}/asyncapi",
    tag = "portal",
    params(
        OrgPath,
        ApiPath,
    ),
    responses(
        (status = 200, description = "The AsyncAPI 3.0 document, without the brokers behind the streams.", body = Object),
        (status = 404, description = "No such published product, or no such streaming API in it.", body = ErrorBody),
        TooManyReads,
    ),
)]
pub async fn asyncapi(ctx: Ctx) -> Result<Reply, ApiError> {
    super::developers::address_read(&ctx)?;
    let missing = || ApiError::not_found("published streaming API");
    let OrgPath { org } = ctx.path()?;
    let ApiPath { product_id, api_id } = ctx.path()?;
    let (org, product_id, api_id) = (org.as_str(), product_id.as_str(), api_id.as_str());
    let product = ctx
        .state
        .store
        .product(org, product_id)
        .await?
        .filter(|p| p.published && p.api_ids.iter().any(|a| a == api_id))
        .ok_or_else(missing)?;
    let stored = ctx
        .state
        .store
        .api(api_id)
        .await?
        .filter(|a| a.org_id == product.org_id)
        .ok_or_else(missing)?;
    let doc: Value = serde_json::from_str(&stored.document).map_err(|_| missing())?;
    if doc.get(STREAMING).is_none() {
        return Err(missing());
    }
    let compiled = crate::dashboard::manage::asyncapi::compile(&ctx, &stored)
        .await?
        .ok_or_else(missing)?;
    let target = asyncapi::Target {
        host: crate::dashboard::manage::asyncapi::default_host(&compiled.document),
        tls: crate::dashboard::manage::asyncapi::default_tls(&compiled.document),
        brokers: false,
    };
    Reply::json(StatusCode::OK, asyncapi::document(&compiled, &target))
}

/// `record` with its APIs as the catalogue shows them; an API gone since is left out.
async fn product(ctx: &Ctx, record: ProductRecord) -> Result<CatalogueProduct, ApiError> {
    let mut apis = Vec::new();
    for id in &record.api_ids {
        let Some(stored) = ctx.state.store.api(id).await? else {
            continue;
        };
        if stored.org_id != record.org_id {
            continue;
        }
        let doc: Value = serde_json::from_str(&stored.document).unwrap_or_default();
        let ext = doc.get(EXTENSION);
        let text = |pointer: &str| {
            ext.and_then(|e| e.pointer(pointer))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let streaming = doc.get(STREAMING).is_some();
        apis.push(CatalogueApi {
            name: text("/info/name").unwrap_or_else(|| id.clone()),
            listen_path: text("/server/listenPath/value").unwrap_or_default(),
            streaming,
            asyncapi: streaming.then(|| {
                format!(
                    "/portal/api/orgs/{}/products/{}/apis/{id}/asyncapi",
                    record.org_id, record.id
                )
            }),
            endpoints: endpoints(&doc),
            id: id.clone(),
        });
    }
    Ok(CatalogueProduct {
        events: if record.webhooks_enabled {
            record.events
        } else {
            Vec::new()
        },
        key_approval: KeyApproval::stored_or_auto(&record.key_approval),
        id: record.id,
        name: record.name,
        description: record.description,
        apis,
    })
}
