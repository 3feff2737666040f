//! Assets: documents an organisation keeps, today API templates (`kind: oas-template`,
//! whose `data` is an OpenAPI document that may carry `x-sluice-api-gateway`). An asset
//! is addressed by its database id or by the custom id its owner gave it.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::owned::{self, Owned};
use crate::dashboard::error::{ApiError, ErrorBody};
use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::dashboard::request::{check_identifier, Ctx, Outcome, PageQuery, Reply};
use crate::dashboard::responses::{BadJson, BadQuery, NotFound, NotJson, TooLarge, Unauthorized};
use crate::store::AssetRecord;

/// The path of one asset.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct AssetPath {
    /// The database id or the custom id.
    #[serde(rename = "assetID")]
    id: String,
}

/// The kinds of asset the dashboard accepts.
pub const KINDS: &[&str] = &[OAS_TEMPLATE];
/// An OpenAPI document to start APIs from.
pub const OAS_TEMPLATE: &str = "oas-template";

/// An asset as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Asset {
    /// The database identifier.
    #[serde(rename = "_id")]
    pub db_id: String,
    /// The custom identifier, or the database identifier when none was given.
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub description: String,
    /// `oas-template`.
    pub kind: String,
    #[schema(value_type = Object)]
    pub data: Value,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// RFC 3339, UTC.
    pub updated_at: String,
}

/// The members of an asset a client sends; on `PUT`, only those given change.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetInput {
    /// A custom identifier: letters, digits and `-_.~`, unique in the organisation.
    pub id: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// `oas-template`.
    pub kind: Option<String>,
    /// The content; for `oas-template` an OpenAPI document.
    #[schema(value_type = Option<Object>)]
    pub data: Option<Value>,
}

/// A page of assets.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssetList {
    pub assets: Vec<Asset>,
    /// How many pages the whole list makes.
    pub pages: i64,
}

fn view(record: AssetRecord) -> Asset {
    Asset {
        id: record
            .custom_id
            .clone()
            .unwrap_or_else(|| record.id.clone()),
        db_id: record.id,
        org_id: record.org_id,
        name: record.name,
        description: record.description,
        kind: record.kind,
        data: serde_json::from_str(&record.data).unwrap_or(Value::Null),
        created_at: rfc3339(record.created_at),
        updated_at: rfc3339(record.updated_at),
    }
}

fn check_kind(kind: &str) -> Result<(), ApiError> {
    if KINDS.contains(&kind) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid field `kind`: `{kind}` is not one of: {}",
            KINDS.join(", ")
        )))
    }
}

/// Checks `data` against its kind; errors name the field (`data.info.title`).
pub fn check_data(kind: &str, data: &Value) -> Result<(), ApiError> {
    if kind != OAS_TEMPLATE {
        return Ok(());
    }
    check_oas(data, "data")
}

/// The shape every OpenAPI document the dashboard keeps must have: `openapi` 3.x,
/// `info.title` and `info.version` strings, `paths` an object, and the gateway extension,
/// when present, an object. `at` prefixes the paths in errors.
pub fn check_oas(doc: &Value, at: &str) -> Result<(), ApiError> {
    let field = |path: &str| {
        if at.is_empty() {
            path.to_owned()
        } else {
            format!("{at}.{path}")
        }
    };
    let bad = |path: &str, why: &str| {
        Err(ApiError::bad_request(format!(
            "invalid field `{}`: {why}",
            field(path)
        )))
    };
    let Some(obj) = doc.as_object() else {
        let what = if at.is_empty() {
            "the body".to_owned()
        } else {
            format!("invalid field `{at}`")
        };
        return Err(ApiError::bad_request(format!(
            "{what}: an OpenAPI document (a JSON object) is expected"
        )));
    };
    match obj.get("openapi") {
        Some(Value::String(v)) if v.starts_with("3.") => {}
        Some(Value::String(v)) => {
            return bad(
                "openapi",
                &format!("OpenAPI `{v}` is not supported (3.0 and 3.1 are)"),
            )
        }
        _ => return bad("openapi", "a version string such as \"3.0.3\" is required"),
    }
    let Some(info) = obj.get("info").and_then(Value::as_object) else {
        return bad("info", "an object with `title` and `version` is required");
    };
    if !info.get("title").is_some_and(Value::is_string) {
        return bad("info.title", "a string is required");
    }
    if !info.get("version").is_some_and(Value::is_string) {
        return bad("info.version", "a string is required");
    }
    if !obj.get("paths").is_some_and(Value::is_object) {
        return bad("paths", "an object is required");
    }
    if let Some(ext) = obj.get(crate::apidef::EXTENSION) {
        if !ext.is_object() {
            return bad(crate::apidef::EXTENSION, "an object is expected");
        }
    }
    Ok(())
}

#[utoipa::path(
    get,
    path = "/api/assets",
    tag = "assets",
    params(
        PageQuery,
        ("kind" = Option<String>, Query, description = "Only assets of this kind."),
    ),
    responses(
        (status = 200, description = "A page of the organisation's assets.", body = AssetList),
        BadQuery,
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list(ctx: Ctx) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let kind = ctx.query("kind").filter(|k| !k.is_empty());
    let (records, total) = ctx
        .state
        .store
        .list_assets(&ctx.caller.org_id, kind, paging.page)
        .await?;
    Reply::json(
        StatusCode::OK,
        AssetList {
            assets: records.into_iter().map(view).collect(),
            pages: paging.pages(total),
        },
    )
}

#[utoipa::path(
    post,
    path = "/api/assets",
    tag = "assets",
    request_body(content = AssetInput, content_type = "application/json"),
    responses(
        (status = 201, description = "Created; `ID` is the asset's identifier, `Meta` its database id.", body = Outcome),
        BadJson,
        Unauthorized,
        (status = 409, description = "The custom id is taken.", body = ErrorBody),
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn create(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: AssetInput = ctx.json()?;
    let Some(kind) = input.kind else {
        return Err(ApiError::bad_request("missing field `kind`"));
    };
    check_kind(&kind)?;
    let Some(data) = input.data else {
        return Err(ApiError::bad_request("missing field `data`"));
    };
    check_data(&kind, &data)?;
    if let Some(id) = &input.id {
        check_identifier("id", id)?;
    }
    let name = input.name.unwrap_or_else(|| {
        data.pointer("/info/title")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    });
    let at = now();
    let record = AssetRecord {
        id: new_id(),
        org_id: ctx.caller.org_id.clone(),
        custom_id: input.id,
        name,
        description: input.description.unwrap_or_default(),
        kind,
        data: data.to_string(),
        created_at: at,
        updated_at: at,
    };
    ctx.state.store.insert_asset(&record).await?;
    Reply::outcome(
        StatusCode::CREATED,
        "asset created",
        Some(&record.id),
        record.shown_id(),
    )
}

#[utoipa::path(
    get,
    path = "/api/assets/{assetID}",
    tag = "assets",
    params(AssetPath),
    responses(
        (status = 200, description = "The asset.", body = Asset),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn get(ctx: Ctx) -> Result<Reply, ApiError> {
    let record = owned::find::<AssetRecord>(&ctx, &ctx.path::<AssetPath>()?.id).await?;
    Reply::json(StatusCode::OK, view(record))
}

#[utoipa::path(
    put,
    path = "/api/assets/{assetID}",
    tag = "assets",
    params(AssetPath),
    request_body(content = AssetInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Updated; `ID` is the asset's identifier, `Meta` its database id.", body = Outcome),
        BadJson,
        Unauthorized,
        NotFound,
        (status = 409, description = "The new custom id is taken.", body = ErrorBody),
        TooLarge,
        NotJson,
    ),
    security(("api_key" = []))
)]
pub async fn update(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: AssetInput = ctx.json()?;
    let mut record = owned::find::<AssetRecord>(&ctx, &ctx.path::<AssetPath>()?.id).await?;
    if let Some(kind) = input.kind {
        check_kind(&kind)?;
        record.kind = kind;
    }
    if let Some(data) = input.data {
        record.data = data.to_string();
    }
    // The data is checked against the kind it ends up with, whichever of the two changed.
    let data: Value = serde_json::from_str(&record.data).unwrap_or(Value::Null);
    check_data(&record.kind, &data)?;
    if let Some(id) = input.id {
        check_identifier("id", &id)?;
        record.custom_id = Some(id);
    }
    if let Some(name) = input.name {
        record.name = name;
    }
    if let Some(description) = input.description {
        record.description = description;
    }
    record.updated_at = now();
    if !ctx.state.store.update_asset(&record).await? {
        return Err(ApiError::not_found("asset"));
    }
    Reply::outcome(
        StatusCode::OK,
        "asset updated",
        Some(&record.id),
        record.shown_id(),
    )
}

#[utoipa::path(
    delete,
    path = "/api/assets/{assetID}",
    tag = "assets",
    params(AssetPath),
    responses(
        (status = 200, description = "Deleted.", body = Outcome),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete(ctx: Ctx) -> Result<Reply, ApiError> {
    let record: AssetRecord = owned::find(&ctx, &ctx.path::<AssetPath>()?.id).await?;
    owned::delete(&ctx, &record).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(r: Result<(), ApiError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn templates_must_be_openapi_documents() {
        let good = json!({
            "openapi": "3.0.3",
            "info": {"title": "T", "version": "1"},
            "paths": {},
            "x-sluice-api-gateway": {"middleware": {"global": {"cache": {"enabled": true}}}}
        });
        check_data(OAS_TEMPLATE, &good).unwrap();
        let mut bad = good.clone();
        bad["info"]["title"] = json!(3);
        assert!(message(check_data(OAS_TEMPLATE, &bad)).contains("`data.info.title`"));
        let mut bad = good.clone();
        bad["openapi"] = json!("2.0");
        assert!(message(check_data(OAS_TEMPLATE, &bad)).contains("`data.openapi`"));
        let mut bad = good.clone();
        bad["paths"] = json!([]);
        assert!(message(check_data(OAS_TEMPLATE, &bad)).contains("`data.paths`"));
        let mut bad = good;
        bad["x-sluice-api-gateway"] = json!("on");
        assert!(message(check_data(OAS_TEMPLATE, &bad)).contains("x-sluice-api-gateway"));
        assert!(message(check_data(OAS_TEMPLATE, &json!([]))).contains("`data`"));
    }

    #[test]
    fn kinds_are_named_when_wrong() {
        assert!(check_kind(OAS_TEMPLATE).is_ok());
        assert!(check_kind("other")
            .unwrap_err()
            .to_string()
            .contains("oas-template"));
    }
}
