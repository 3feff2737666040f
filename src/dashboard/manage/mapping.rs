//! The mapping playground: runs a mapping on one message with the server's own compiler
//! and executor, so what the console shows is what a stream would do. Mappings posted
//! here are sandboxed (nothing that reads the host, no `import`).

use std::collections::BTreeMap;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

use crate::dashboard::error::{ApiError, ErrorBody, Problem};
use crate::dashboard::request::{Ctx, Reply};
use crate::dashboard::responses::{BadJson, NotJson, TooLarge, Unauthorized};
use crate::mapping::{budget, Env, Mapping};
use crate::message::{Message, Metadata};
use crate::value::Value;

/// A mapping and the message to run it on.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MappingRun {
    /// The mapping's text.
    pub mapping: String,
    /// The message's payload, as text (JSON for `this` to be structured).
    #[serde(default)]
    pub input: String,
    /// The message's metadata.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<BTreeMap<String, Json>>,
}

/// What the mapping made of the message.
#[derive(Debug, Serialize, ToSchema)]
pub struct MappingResult {
    /// The new payload, as text; null when the mapping deleted the message or failed.
    pub output: Option<String>,
    /// The new metadata.
    #[schema(value_type = Object)]
    pub metadata: Json,
    /// The mapping deleted the message (`root = deleted()`).
    pub deleted: bool,
    /// Why the mapping failed on this message, when it did.
    pub error: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/mapping/run",
    tag = "mapping",
    request_body(content = MappingRun, content_type = "application/json"),
    responses(
        (status = 200, description = "The mapping ran: its output, or the error it raised on this message.", body = MappingResult),
        BadJson,
        Unauthorized,
        TooLarge,
        NotJson,
        (status = 422, description = "The mapping does not compile (each problem with its line and column), or it ran out of time.", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn run(ctx: Ctx) -> Result<Reply, ApiError> {
    let input: MappingRun = ctx.json()?;
    // Compiling and running take up to the tenant budget each: off the serving threads.
    let result = tokio::task::spawn_blocking(move || compile_and_run(input))
        .await
        .map_err(|e| ApiError::Internal(format!("the mapping run stopped: {e}")))??;
    Reply::json(StatusCode::OK, result)
}

fn compile_and_run(input: MappingRun) -> Result<MappingResult, ApiError> {
    let env = Env::default().sandboxed();
    let out_of_time = |what: &str, limit: std::time::Duration| ApiError::Invalid {
        message: "the mapping ran out of time".into(),
        errors: vec![Problem {
            path: "mapping".into(),
            message: format!(
                "a mapping that arrives as data may take {} ms to {what}",
                limit.as_millis()
            ),
            line: None,
            column: None,
        }],
    };
    let compiling = budget::start(Some(budget::TENANT_COMPILE));
    let compiled = Mapping::compile(&input.mapping, &env);
    if compiling.expired() {
        return Err(out_of_time("compile", budget::TENANT_COMPILE));
    }
    drop(compiling);
    let mapping = compiled.map_err(|diagnostics| ApiError::Invalid {
        message: "the mapping does not compile".into(),
        errors: diagnostics
            .iter()
            .map(|d| Problem {
                path: "mapping".into(),
                message: match &d.hint {
                    Some(hint) => format!("{} ({hint})", d.message),
                    None => d.message.clone(),
                },
                line: Some(d.line),
                column: Some(d.col),
            })
            .collect(),
    })?;
    let mut message = Message::new(input.input.into_bytes());
    if let Some(meta) = input.metadata {
        let converted: Metadata = meta.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        message.set_metadata(converted);
    }
    let batch = vec![message];
    let running = budget::start(Some(budget::TENANT));
    let result = mapping.apply(&batch, 0);
    if running.expired() {
        return Err(out_of_time("run", budget::TENANT));
    }
    Ok(match result {
        Ok(Some(out)) => MappingResult {
            output: Some(String::from_utf8_lossy(out.payload()).into_owned()),
            metadata: metadata_json(out.metadata()),
            deleted: false,
            error: None,
        },
        Ok(None) => MappingResult {
            output: None,
            metadata: metadata_json(batch[0].metadata()),
            deleted: true,
            error: None,
        },
        Err(e) => MappingResult {
            output: None,
            metadata: metadata_json(batch[0].metadata()),
            deleted: false,
            error: Some(e.to_string()),
        },
    })
}

fn metadata_json(meta: &Metadata) -> Json {
    Json::Object(
        meta.iter()
            .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or(Json::Null)))
            .collect(),
    )
}
