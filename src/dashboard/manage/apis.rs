//! APIs: OpenAPI documents with `x-sluice-api-gateway`, plain (`/api/apis/oas`) or
//! streaming (`/api/apis/streams`, also carrying `x-sluice-streaming`). A definition is
//! compiled by the gateway's own compiler before it is stored, so what the dashboard
//! accepts the gateway serves; problems come back as 422 with the path of each in the
//! document. Stored APIs reach every gateway that uses the same store.

use std::collections::HashMap;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::assets::OAS_TEMPLATE;
use super::gateway_keys;
use crate::dashboard::error::{ApiError, Problem};
use crate::dashboard::ids::{new_id, now, rfc3339};
use crate::dashboard::request::{Ctx, Outcome, PageQuery, Reply};
use crate::dashboard::responses::{
    BadDefinition, BadQuery, DoesNotCompile, IdOrListenPathTaken, ListenPathTaken, NotFound,
    NotJsonOrYaml, NotStreamsMediaType, StreamingOff, TooLarge, Unauthorized,
};
use std::sync::Arc;

use crate::apidef::{self, EXTENSION};
use crate::config::yaml;
use crate::egress::{EgressError, EgressPolicy, EgressTarget};
use crate::store::{Store, StoredApi};

/// The path of one API, and of what is under it (its live view, status, AsyncAPI
/// document).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct ApiPath {
    /// The API's id.
    #[serde(rename = "apiId")]
    id: String,
}

/// The media type of a streaming API definition (JSON or YAML).
pub const STREAMS_MEDIA_TYPE: &str = "application/vnd.sluice.streams.oas";
/// The extension that makes an API a streaming one.
pub const STREAMING_EXTENSION: &str = "x-sluice-streaming";

/// Which of the two collections a request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Plain OpenAPI APIs.
    Oas,
    /// Streaming APIs.
    Streams,
}

impl Kind {
    fn of(doc: &Value) -> Kind {
        if doc.get(STREAMING_EXTENSION).is_some() {
            Kind::Streams
        } else {
            Kind::Oas
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Oas => "API",
            Kind::Streams => "streaming API",
        }
    }
}

/// An API in a list.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiSummary {
    pub id: String,
    pub name: String,
    pub listen_path: String,
    /// Whether it carries `x-sluice-streaming`.
    pub streaming: bool,
    /// `x-sluice-api-gateway.info.state.active`: whether gateways serve it (true when
    /// the document does not say).
    pub active: bool,
    /// RFC 3339, UTC.
    pub updated_at: String,
}

/// A page of APIs.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiList {
    pub apis: Vec<ApiSummary>,
    pub pages: i64,
}

/// The body as a document: JSON or YAML, whichever it is, and an object.
fn read_document(ctx: &Ctx, kind: Kind) -> Result<Value, ApiError> {
    let media = ctx.media_type();
    match (kind, media.as_deref()) {
        (Kind::Streams, Some(t)) if t.starts_with(STREAMS_MEDIA_TYPE) => {}
        (Kind::Streams, other) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "a streaming API is sent with `Content-Type: {STREAMS_MEDIA_TYPE}`{}",
                other.map(|t| format!(", not `{t}`")).unwrap_or_default()
            )))
        }
        (
            Kind::Oas,
            None
            | Some("application/json")
            | Some("application/yaml")
            | Some("application/x-yaml")
            | Some("text/yaml")
            | Some("application/vnd.oai.openapi")
            | Some("application/vnd.oai.openapi+json"),
        ) => {}
        (Kind::Oas, Some(other)) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "an API definition is JSON (application/json) or YAML (application/yaml), not `{other}`"
            )))
        }
    }
    let text = std::str::from_utf8(&ctx.body)
        .map_err(|_| ApiError::bad_request("the body is not UTF-8 text"))?;
    let trimmed = text.trim_start();
    let doc: Value = if trimmed.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty: an OpenAPI document is expected",
        ));
    } else if trimmed.starts_with('{') {
        serde_json::from_str(text).map_err(|e| {
            unparsable(
                format!("the body is not valid JSON: {e}"),
                Some((e.line(), e.column())),
            )
        })?
    } else {
        // Parsed to a plain value: nothing in a request is substituted from the host's
        // environment, unlike API files on disk.
        yaml::check_nesting(text)
            .map_err(|(message, at)| unparsable(message, Some((at.line, at.col))))?;
        serde_yaml::from_str(text).map_err(|e| {
            unparsable(
                format!("the body is not a JSON or YAML document: {e}"),
                e.location().map(|l| (l.line(), l.column())),
            )
        })?
    };
    if !doc.is_object() {
        return Err(ApiError::bad_request(
            "the body is not an OpenAPI document: a mapping (JSON object) is expected",
        ));
    }
    Ok(doc)
}

/// A 400 for a body that does not parse, placed where the parser stopped.
fn unparsable(message: String, at: Option<(usize, usize)>) -> ApiError {
    let mut problem = Problem::at("", &message);
    if let Some((line, column)) = at.filter(|&(line, _)| line > 0) {
        problem.line = Some(line);
        problem.column = Some(column.max(1));
    }
    ApiError::Unparsable { message, problem }
}

/// Places each problem of a definition that does not compile at its key in the posted
/// `text`, so that an editor can point at it; other errors pass unchanged.
fn place(e: ApiError, text: &str) -> ApiError {
    let ApiError::Invalid {
        message,
        mut errors,
    } = e
    else {
        return e;
    };
    place_all(&mut errors, text);
    ApiError::Invalid { message, errors }
}

/// Gives each problem its line and column in the posted text, where it can be found.
fn place_all(problems: &mut [Problem], text: &str) {
    // Read again, this time keeping positions; `${...}` is not the host's environment
    // here, so every variable reads as empty rather than failing the parse.
    if let Ok(doc) = yaml::parse("request", text, &|_| Some(String::new())) {
        for problem in problems {
            let mark = doc.locate(&problem.path);
            if mark.line > 0 {
                problem.line = Some(mark.line);
                problem.column = Some(mark.col);
            }
        }
    }
}

/// Puts `over` onto `base`: objects merge member by member, anything else replaces.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The object member `key` of `map`, created empty when absent; 422 when it is there
/// but not an object.
fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a mut Map<String, Value>, ApiError> {
    let slot = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    slot.as_object_mut()
        .ok_or_else(|| invalid(path, "an object is expected"))
}

fn invalid(path: &str, message: &str) -> ApiError {
    ApiError::Invalid {
        message: format!("the definition is invalid: {path}: {message}"),
        errors: vec![Problem::at(path, message)],
    }
}

/// What a definition compiled to that the dashboard needs.
#[derive(Debug)]
struct Prepared {
    id: String,
    listen_path: String,
    /// The named hosts its streams connect to, for [`check_egress`] to resolve.
    egress_targets: Vec<EgressTarget>,
    /// What a dry run warns of, placed in the posted text.
    warnings: Vec<Problem>,
}

/// [`prepare`] on the blocking pool (compiling a definition compiles its streams'
/// mappings, which may take up to their compile budget each, and no serving thread
/// should wait for a tenant's program), then the egress check of the names its streams
/// connect to. Errors are placed in the posted text; the document comes back completed.
async fn compile_posted(
    ctx: &Ctx,
    mut doc: Value,
    kind: Kind,
    path_id: Option<String>,
) -> Result<(Value, Prepared), ApiError> {
    let text = std::str::from_utf8(&ctx.body).unwrap_or_default();
    let org_id = ctx.caller.org_id.clone();
    let egress = ctx.state.egress.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        prepare(&mut doc, kind, &org_id, path_id.as_deref(), Some(&egress)).map(|p| (doc, p))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("compiling the definition stopped: {e}")))?;
    let (doc, mut prepared) = prepared.map_err(|e| place(e, text))?;
    place_all(&mut prepared.warnings, text);
    check_egress(&prepared, &ctx.state.egress)
        .await
        .map_err(|e| place(e, text))?;
    Ok((doc, prepared))
}

/// Completes the gateway extension (id, name, organisation, listen path, when absent),
/// checks the kind, and compiles the document as the gateway will.
fn prepare(
    doc: &mut Value,
    kind: Kind,
    org_id: &str,
    path_id: Option<&str>,
    egress: Option<&Arc<EgressPolicy>>,
) -> Result<Prepared, ApiError> {
    match (kind, doc.get(STREAMING_EXTENSION)) {
        (Kind::Streams, None) => {
            return Err(invalid(
                STREAMING_EXTENSION,
                "a streaming API carries `x-sluice-streaming` with its `streams`",
            ))
        }
        (Kind::Streams, Some(ext)) => check_streaming_shape(ext)?,
        (Kind::Oas, Some(_)) => {
            return Err(invalid(
                STREAMING_EXTENSION,
                "streaming APIs are created with POST /api/apis/streams",
            ))
        }
        (Kind::Oas, None) => {}
    }
    let title = doc
        .pointer("/info/title")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(root) = doc.as_object_mut() else {
        return Err(invalid("", "an OpenAPI document (an object) is expected"));
    };
    let ext = object_at(root, EXTENSION, EXTENSION)?;
    let info = object_at(ext, "info", &format!("{EXTENSION}.info"))?;
    let id = match info.get("id") {
        Some(Value::String(id)) if !id.trim().is_empty() => {
            if let Some(path_id) = path_id {
                if id != path_id {
                    return Err(ApiError::bad_request(format!(
                        "invalid field `{EXTENSION}.info.id`: it is `{id}`, but the path names `{path_id}`"
                    )));
                }
            }
            id.clone()
        }
        Some(Value::String(_)) | None => {
            let id = path_id.map_or_else(new_id, str::to_owned);
            info.insert("id".into(), Value::String(id.clone()));
            id
        }
        Some(_) => {
            return Err(invalid(
                &format!("{EXTENSION}.info.id"),
                "a string is expected",
            ))
        }
    };
    if !info.contains_key("name") {
        info.insert(
            "name".into(),
            Value::String(title.unwrap_or_else(|| id.clone())),
        );
    }
    match info.get("orgId") {
        Some(Value::String(org)) if org != org_id => {
            return Err(ApiError::bad_request(format!(
            "invalid field `{EXTENSION}.info.orgId`: an API belongs to the caller's organisation"
        )))
        }
        _ => {
            info.insert("orgId".into(), Value::String(org_id.to_owned()));
        }
    }
    let server = object_at(ext, "server", &format!("{EXTENSION}.server"))?;
    if !server.contains_key("listenPath") {
        server.insert(
            "listenPath".into(),
            serde_json::json!({"value": format!("/{id}/"), "strip": true}),
        );
    }
    let options = apidef::CompileOptions {
        egress: egress.cloned(),
        ..Default::default()
    };
    let compiled = apidef::from_json_with("request", doc, &options).map_err(|e| {
        let errors: Vec<Problem> = e
            .errors
            .0
            .iter()
            .map(|c| {
                let path = c.location.as_ref().map(|l| l.path.as_str());
                Problem::at(path.unwrap_or_default(), &c.message)
            })
            .collect();
        ApiError::Invalid {
            message: format!(
                "the definition is invalid: {}",
                errors
                    .iter()
                    .map(|p| format!("{}: {}", p.path, p.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            errors,
        }
    })?;
    Ok(Prepared {
        egress_targets: compiled
            .streams
            .iter()
            .flat_map(|s| s.egress_targets.iter().cloned())
            .chain(compiled.egress_targets.iter().cloned())
            .collect(),
        warnings: apidef::streaming::cluster_warnings(&compiled)
            .into_iter()
            .map(|(path, message)| Problem::at(&path, &message))
            .collect(),
        id: compiled.id,
        listen_path: compiled.listen_path,
    })
}

/// The most names one definition has resolved at once, and the longest all of them may
/// take: a name not resolved in time is left to the check made when connecting.
const RESOLVING_AT_ONCE: usize = 8;
const RESOLVING_TIME: std::time::Duration = std::time::Duration::from_secs(3);

/// Resolves the named hosts a posted definition's streams connect to and refuses those
/// whose addresses the egress policy refuses (a name that does not resolve here may on
/// the gateway's host, and is checked there when connecting).
async fn check_egress(prepared: &Prepared, policy: &Arc<EgressPolicy>) -> Result<(), ApiError> {
    use futures::StreamExt;
    let mut unique: Vec<EgressTarget> = Vec::new();
    for t in &prepared.egress_targets {
        if !unique.iter().any(|u| u.host == t.host && u.port == t.port) {
            unique.push(t.clone());
        }
    }
    let lookups = futures::stream::iter(unique)
        .map(|t| {
            let policy = policy.clone();
            async move {
                let result = policy.resolve(&t.host, t.port).await;
                (t, result)
            }
        })
        .buffer_unordered(RESOLVING_AT_ONCE)
        .take_until(tokio::time::sleep(RESOLVING_TIME))
        .collect::<Vec<_>>()
        .await;
    let mut problems: Vec<Problem> = lookups
        .into_iter()
        .filter_map(|(t, result)| match result {
            Err(e @ (EgressError::Denied { .. } | EgressError::Refused { .. })) => {
                Some(Problem::at(&t.path, &e.to_string()))
            }
            _ => None,
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    Err(ApiError::Invalid {
        message: format!(
            "the definition is invalid: {}",
            problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        errors: problems,
    })
}

/// The part of `x-sluice-streaming` the dashboard itself relies on: one bare stream
/// object, or a non-empty `streams` object of stream objects. The streams' contents are
/// the compiler's to check.
fn check_streaming_shape(ext: &Value) -> Result<(), ApiError> {
    if apidef::streaming::is_bare(ext) {
        return Ok(());
    }
    let at = format!("{STREAMING_EXTENSION}.streams");
    let Some(streams) = ext.get("streams").and_then(Value::as_object) else {
        return Err(invalid(
            &at,
            "an object of named stream configurations (or one stream's `input`, `pipeline` and `output`) is expected",
        ));
    };
    if streams.is_empty() {
        return Err(invalid(&at, "no stream is defined"));
    }
    for (name, stream) in streams {
        if !stream.is_object() {
            return Err(invalid(
                &format!("{at}.{name}"),
                "a stream configuration (an object with `input` and `output`) is expected",
            ));
        }
    }
    Ok(())
}

/// The listen path a stored document declares, normalised as the compiler does.
fn stored_listen_path(doc: &Value) -> Option<String> {
    let lp = doc
        .get(EXTENSION)?
        .pointer("/server/listenPath/value")?
        .as_str()?
        .trim();
    let trimmed = lp.trim_end_matches('/');
    Some(if trimmed.is_empty() && !lp.is_empty() {
        "/".to_owned()
    } else {
        trimmed.to_owned()
    })
}

/// The listen path of every stored API, as of one revision of the store's APIs. API
/// writes hold it locked, which also makes each check-then-write atomic in this process.
#[derive(Debug, Default)]
pub struct ListenPaths {
    /// The `apis_revision` the map reflects; `None` until loaded, or after a write whose
    /// revision showed that another process wrote too.
    revision: Option<i64>,
    /// API id to (organisation, listen path).
    by_api: HashMap<String, (String, String)>,
}

impl ListenPaths {
    /// Brings the map up to date: a read of one counter when nothing changed, every
    /// stored document when something did.
    async fn refresh(&mut self, store: &Store) -> Result<(), ApiError> {
        let revision = store.apis_revision().await?;
        if self.revision == Some(revision) {
            return Ok(());
        }
        // The revision is read first: a write landing in between makes the next refresh
        // load again, never miss it.
        self.by_api = store
            .list_apis()
            .await?
            .into_iter()
            .filter_map(|api| {
                let doc = serde_json::from_str::<Value>(&api.document).ok()?;
                let lp = stored_listen_path(&doc)?;
                Some((api.id, (api.org_id, lp)))
            })
            .collect();
        self.revision = Some(revision);
        Ok(())
    }

    /// 409 when another API (of any organisation: one gateway serves them all) listens
    /// on `listen_path`, or when an API of another organisation listens above or below
    /// it: the gateway routes by the longest listen path, so a path below another
    /// organisation's would take that organisation's clients' requests, credentials
    /// and all. Another organisation's API is never named.
    fn check(&self, caller_org: &str, id: &str, listen_path: &str) -> Result<(), ApiError> {
        let others = self.by_api.iter().filter(|(other, _)| other.as_str() != id);
        if let Some((other, (org, _))) = others.clone().find(|(_, (_, lp))| lp == listen_path) {
            let whose = if org == caller_org {
                format!(" by API `{other}`")
            } else {
                String::new()
            };
            return Err(ApiError::Conflict(format!(
                "listen path `{listen_path}` is already used{whose}"
            )));
        }
        let mine = apidef::path_key(listen_path);
        let nested = others
            .filter(|(_, (org, _))| org != caller_org)
            .find_map(|(_, (_, lp))| apidef::nesting(&mine, &apidef::path_key(lp)));
        match nested {
            None => Ok(()),
            Some(apidef::Nesting::Same) => Err(ApiError::Conflict(format!(
                "listen path `{listen_path}` is already used"
            ))),
            Some(apidef::Nesting::Below) => Err(ApiError::Conflict(format!(
                "listen path `{listen_path}` is below a listen path of another organisation"
            ))),
            Some(apidef::Nesting::Above) => Err(ApiError::Conflict(format!(
                "listen path `{listen_path}` is above a listen path of another organisation"
            ))),
        }
    }

    /// Records this process's write of `id` (`None`: deleted). When the store's revision
    /// moved by more than this one write, another process wrote as well, and the map is
    /// reloaded next time instead.
    async fn wrote(&mut self, store: &Store, id: &str, now: Option<(&str, &str)>) {
        let after = store.apis_revision().await.ok();
        match (self.revision, after) {
            (Some(before), Some(after)) if after == before + 1 => {
                match now {
                    Some((org, lp)) => {
                        self.by_api
                            .insert(id.to_owned(), (org.to_owned(), lp.to_owned()));
                    }
                    None => {
                        self.by_api.remove(id);
                    }
                }
                self.revision = Some(after);
            }
            _ => self.revision = None,
        }
    }
}

fn refuse_if_streaming_off(ctx: &Ctx, kind: Kind) -> Result<(), ApiError> {
    if kind == Kind::Streams && !ctx.state.config.streaming.enabled {
        return Err(ApiError::Forbidden(
            "streaming is disabled in this dashboard: set `streaming.enabled: true` in its config (or SLUICE_DB_STREAMING_ENABLED=true) to manage streaming APIs".into(),
        ));
    }
    Ok(())
}

/// The template asset named by `templateID`, when given.
async fn template(ctx: &Ctx) -> Result<Option<Value>, ApiError> {
    let Some(id) = ctx.query("templateID").filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let asset = ctx
        .state
        .store
        .asset(&ctx.caller.org_id, id)
        .await?
        .filter(|a| a.kind == OAS_TEMPLATE)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "query parameter `templateID`: no `{OAS_TEMPLATE}` asset `{id}`"
            ))
        })?;
    Ok(Some(
        serde_json::from_str(&asset.data).unwrap_or(Value::Null),
    ))
}

async fn create(ctx: Ctx, kind: Kind) -> Result<Reply, ApiError> {
    refuse_if_streaming_off(&ctx, kind)?;
    let dry_run = ctx.flag("dry_run")?;
    let posted = read_document(&ctx, kind)?;
    let doc = match template(&ctx).await? {
        Some(mut base) if base.is_object() => {
            merge(&mut base, posted);
            base
        }
        _ => posted,
    };
    let (doc, prepared) = compile_posted(&ctx, doc, kind, None).await?;
    if dry_run {
        return dry_run_reply(&ctx, &prepared).await;
    }
    save(&ctx, kind, &doc, &prepared, false).await?;
    let message = format!("{} created", kind.noun());
    Reply::outcome(
        StatusCode::CREATED,
        &message,
        Some(&prepared.id),
        &prepared.id,
    )
}

/// Checks what a dry run can without saving: that the listen path is free.
async fn dry_run_reply(ctx: &Ctx, prepared: &Prepared) -> Result<Reply, ApiError> {
    let mut paths = ctx.state.manage.api_writes.lock().await;
    paths.refresh(&ctx.state.store).await?;
    paths.check(&ctx.caller.org_id, &prepared.id, &prepared.listen_path)?;
    drop(paths);
    Reply::outcome_warning(
        StatusCode::OK,
        "the definition is valid (dry run: nothing was saved)",
        &prepared.id,
        prepared.warnings.clone(),
    )
}

/// Stores a prepared definition under the write lock once its listen path is checked,
/// and tells the gateway. A new one (`replace` false) is inserted, which the store
/// refuses (409) when the id is taken, whichever process took it; a replaced one must
/// still exist.
async fn save(
    ctx: &Ctx,
    kind: Kind,
    doc: &Value,
    prepared: &Prepared,
    replace: bool,
) -> Result<(), ApiError> {
    let mut paths = ctx.state.manage.api_writes.lock().await;
    if replace {
        // Deleted since it was found: replacing it would bring it back.
        find(ctx, kind).await?;
    }
    paths.refresh(&ctx.state.store).await?;
    paths.check(&ctx.caller.org_id, &prepared.id, &prepared.listen_path)?;
    if kind == Kind::Streams {
        // Under the write lock, so that two writes cannot both pass on the last place.
        check_quotas(ctx, doc, &prepared.id).await?;
    }
    let api = StoredApi {
        id: prepared.id.clone(),
        org_id: ctx.caller.org_id.clone(),
        document: doc.to_string(),
        updated_at: now(),
    };
    if replace {
        ctx.state.store.put_api(&api).await?;
    } else {
        ctx.state.store.insert_api(&api).await?;
    }
    paths
        .wrote(
            &ctx.state.store,
            &prepared.id,
            Some((&ctx.caller.org_id, &prepared.listen_path)),
        )
        .await;
    ctx.state.api_changed.notify_one();
    Ok(())
}

/// The streams a stored or posted document defines.
fn stream_count(doc: &Value) -> usize {
    doc.get(STREAMING_EXTENSION)
        .map_or(0, |ext| apidef::streaming::streams_of(ext).len())
}

/// 403 when writing `doc` as the API `id` would take the caller's organisation past its
/// quotas (`quotas.max_streaming_apis`, `quotas.max_streams`); the API it replaces does
/// not count.
async fn check_quotas(ctx: &Ctx, doc: &Value, id: &str) -> Result<(), ApiError> {
    let quotas = &ctx.state.config.quotas;
    let (mut apis, mut streams) = (1, stream_count(doc));
    for api in ctx.state.store.list_apis_of_org(&ctx.caller.org_id).await? {
        let Ok(other) = serde_json::from_str::<Value>(&api.document) else {
            continue;
        };
        if api.id != id && Kind::of(&other) == Kind::Streams {
            apis += 1;
            streams += stream_count(&other);
        }
    }
    if apis > quotas.max_streaming_apis {
        return Err(ApiError::Forbidden(format!(
            "quota `quotas.max_streaming_apis` reached: an organisation may have {} streaming APIs",
            quotas.max_streaming_apis
        )));
    }
    if streams > quotas.max_streams {
        return Err(ApiError::Forbidden(format!(
            "quota `quotas.max_streams` reached: an organisation may have {} streams across its streaming APIs, and this would make {streams}",
            quotas.max_streams
        )));
    }
    Ok(())
}

/// The caller's API of this kind with the path's id, or 404.
pub(super) async fn find(ctx: &Ctx, kind: Kind) -> Result<(StoredApi, Value), ApiError> {
    let missing = || ApiError::not_found(kind.noun());
    let api = ctx
        .state
        .store
        .api(&ctx.path::<ApiPath>()?.id)
        .await?
        .filter(|a| a.org_id == ctx.caller.org_id)
        .ok_or_else(missing)?;
    let doc: Value = serde_json::from_str(&api.document).map_err(|_| missing())?;
    if Kind::of(&doc) != kind {
        return Err(missing());
    }
    Ok((api, doc))
}

async fn update(ctx: Ctx, kind: Kind) -> Result<Reply, ApiError> {
    refuse_if_streaming_off(&ctx, kind)?;
    let dry_run = ctx.flag("dry_run")?;
    find(&ctx, kind).await?;
    let doc = read_document(&ctx, kind)?;
    let (doc, prepared) = compile_posted(&ctx, doc, kind, Some(ctx.path::<ApiPath>()?.id)).await?;
    if dry_run {
        return dry_run_reply(&ctx, &prepared).await;
    }
    save(&ctx, kind, &doc, &prepared, true).await?;
    let message = format!("{} updated", kind.noun());
    Reply::outcome(StatusCode::OK, &message, Some(&prepared.id), &prepared.id)
}

async fn get(ctx: Ctx, kind: Kind) -> Result<Reply, ApiError> {
    let (_, doc) = find(&ctx, kind).await?;
    Ok(Reply::value(StatusCode::OK, doc))
}

async fn delete(ctx: Ctx, kind: Kind) -> Result<Reply, ApiError> {
    let (api, _) = find(&ctx, kind).await?;
    let mut paths = ctx.state.manage.api_writes.lock().await;
    // The map is brought up to date first, so that `wrote` compares with this write only.
    paths.refresh(&ctx.state.store).await?;
    if !ctx.state.store.delete_api(&api.id).await? {
        return Err(ApiError::not_found(kind.noun()));
    }
    paths.wrote(&ctx.state.store, &api.id, None).await;
    ctx.state.api_changed.notify_one();
    drop(paths);
    // An API made later with this id, by any organisation, must not be reached by the
    // keys that named this one.
    gateway_keys::keys(&ctx)
        .forget_api(&api.org_id, &api.id)
        .await
        .map_err(ApiError::from)?;
    let message = format!("{} deleted", kind.noun());
    Reply::outcome(StatusCode::OK, &message, Some(&api.id), &api.id)
}

async fn list(ctx: Ctx, kind: Kind) -> Result<Reply, ApiError> {
    let paging = ctx.page()?;
    let mut apis = Vec::new();
    for api in ctx.state.store.list_apis_of_org(&ctx.caller.org_id).await? {
        let Ok(doc) = serde_json::from_str::<Value>(&api.document) else {
            continue;
        };
        if Kind::of(&doc) != kind {
            continue;
        }
        apis.push(ApiSummary {
            name: doc
                .get(EXTENSION)
                .and_then(|e| e.pointer("/info/name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            listen_path: stored_listen_path(&doc).unwrap_or_default(),
            streaming: kind == Kind::Streams,
            active: doc
                .get(EXTENSION)
                .and_then(|e| e.pointer("/info/state/active"))
                .and_then(Value::as_bool)
                .unwrap_or(true),
            updated_at: rfc3339(api.updated_at),
            id: api.id,
        });
    }
    let total = i64::try_from(apis.len()).unwrap_or(i64::MAX);
    let offset = usize::try_from(paging.page.offset).unwrap_or(usize::MAX);
    let limit = usize::try_from(paging.page.limit).unwrap_or(usize::MAX);
    let apis = apis.into_iter().skip(offset).take(limit).collect();
    Reply::json(
        StatusCode::OK,
        ApiList {
            apis,
            pages: paging.pages(total),
        },
    )
}

// The handlers of the routes, one per method and collection, each documented.

#[utoipa::path(
    get,
    path = "/api/apis/oas",
    tag = "apis",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the organisation's plain APIs.", body = ApiList),
        BadQuery,
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list_oas(ctx: Ctx) -> Result<Reply, ApiError> {
    list(ctx, Kind::Oas).await
}

#[utoipa::path(
    post,
    path = "/api/apis/oas",
    tag = "apis",
    params(
        ("dry_run" = Option<bool>, Query, description = "Validate only; nothing is saved."),
        ("templateID" = Option<String>, Query, description = "An `oas-template` asset the document is merged onto."),
    ),
    request_body(
        description = "An OpenAPI 3 document with `x-sluice-api-gateway`, JSON or YAML. Its `info.id` is generated when absent.",
        content((Object = "application/json"), (String = "application/yaml"))
    ),
    responses(
        (status = 200, description = "Dry run: the definition is valid.", body = Outcome),
        (status = 201, description = "Created; `ID` and `Meta` are the API's id.", body = Outcome),
        BadDefinition,
        Unauthorized,
        IdOrListenPathTaken,
        TooLarge,
        NotJsonOrYaml,
        DoesNotCompile,
    ),
    security(("api_key" = []))
)]
pub async fn create_oas(ctx: Ctx) -> Result<Reply, ApiError> {
    create(ctx, Kind::Oas).await
}

#[utoipa::path(
    get,
    path = "/api/apis/oas/{apiId}",
    tag = "apis",
    params(ApiPath),
    responses(
        (status = 200, description = "The stored definition.", body = Object),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn get_oas(ctx: Ctx) -> Result<Reply, ApiError> {
    get(ctx, Kind::Oas).await
}

#[utoipa::path(
    put,
    path = "/api/apis/oas/{apiId}",
    tag = "apis",
    params(
        ApiPath,
        ("dry_run" = Option<bool>, Query, description = "Validate only; nothing is saved."),
    ),
    request_body(
        description = "The whole new definition, JSON or YAML.",
        content((Object = "application/json"), (String = "application/yaml"))
    ),
    responses(
        (status = 200, description = "Replaced (or, dry run, valid).", body = Outcome),
        BadDefinition,
        Unauthorized,
        NotFound,
        ListenPathTaken,
        TooLarge,
        NotJsonOrYaml,
        DoesNotCompile,
    ),
    security(("api_key" = []))
)]
pub async fn update_oas(ctx: Ctx) -> Result<Reply, ApiError> {
    update(ctx, Kind::Oas).await
}

#[utoipa::path(
    delete,
    path = "/api/apis/oas/{apiId}",
    tag = "apis",
    params(ApiPath),
    responses(
        (status = 200, description = "Deleted; gateways stop serving it.", body = Outcome),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete_oas(ctx: Ctx) -> Result<Reply, ApiError> {
    delete(ctx, Kind::Oas).await
}

#[utoipa::path(
    get,
    path = "/api/apis/streams",
    tag = "apis",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the organisation's streaming APIs.", body = ApiList),
        BadQuery,
        Unauthorized,
    ),
    security(("api_key" = []))
)]
pub async fn list_streams(ctx: Ctx) -> Result<Reply, ApiError> {
    list(ctx, Kind::Streams).await
}

#[utoipa::path(
    post,
    path = "/api/apis/streams",
    tag = "apis",
    params(
        ("dry_run" = Option<bool>, Query, description = "Validate only; nothing is saved."),
        ("templateID" = Option<String>, Query, description = "An `oas-template` asset the document is merged onto."),
    ),
    request_body(
        description = "An OpenAPI 3 document with `x-sluice-streaming` (and optionally `x-sluice-api-gateway`), JSON or YAML. Its id is generated when absent.",
        content((Object = "application/vnd.sluice.streams.oas"))
    ),
    responses(
        (status = 200, description = "Dry run: the definition is valid.", body = Outcome),
        (status = 201, description = "Created; `ID` and `Meta` are the API's id.", body = Outcome),
        BadDefinition,
        Unauthorized,
        StreamingOff,
        IdOrListenPathTaken,
        TooLarge,
        NotStreamsMediaType,
        DoesNotCompile,
    ),
    security(("api_key" = []))
)]
pub async fn create_streams(ctx: Ctx) -> Result<Reply, ApiError> {
    create(ctx, Kind::Streams).await
}

#[utoipa::path(
    get,
    path = "/api/apis/streams/{apiId}",
    tag = "apis",
    params(ApiPath),
    responses(
        (status = 200, description = "The stored definition.", body = Object),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn get_streams(ctx: Ctx) -> Result<Reply, ApiError> {
    get(ctx, Kind::Streams).await
}

#[utoipa::path(
    put,
    path = "/api/apis/streams/{apiId}",
    tag = "apis",
    params(
        ApiPath,
        ("dry_run" = Option<bool>, Query, description = "Validate only; nothing is saved."),
    ),
    request_body(
        description = "The whole new definition, JSON or YAML.",
        content((Object = "application/vnd.sluice.streams.oas"))
    ),
    responses(
        (status = 200, description = "Replaced (or, dry run, valid).", body = Outcome),
        BadDefinition,
        Unauthorized,
        StreamingOff,
        NotFound,
        ListenPathTaken,
        TooLarge,
        NotStreamsMediaType,
        DoesNotCompile,
    ),
    security(("api_key" = []))
)]
pub async fn update_streams(ctx: Ctx) -> Result<Reply, ApiError> {
    update(ctx, Kind::Streams).await
}

#[utoipa::path(
    delete,
    path = "/api/apis/streams/{apiId}",
    tag = "apis",
    params(ApiPath),
    responses(
        (status = 200, description = "Deleted; gateways stop serving it.", body = Outcome),
        Unauthorized,
        NotFound,
    ),
    security(("api_key" = []))
)]
pub async fn delete_streams(ctx: Ctx) -> Result<Reply, ApiError> {
    delete(ctx, Kind::Streams).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn petstore() -> Value {
        json!({
            "openapi": "3.0.3",
            "info": {"title": "Pets", "version": "1"},
            "paths": {},
            "x-sluice-api-gateway": {
                "upstream": {"url": "http://127.0.0.1:9000"},
            }
        })
    }

    #[test]
    fn missing_ids_names_and_listen_paths_are_filled_in() {
        let mut doc = petstore();
        let p = prepare(&mut doc, Kind::Oas, "org1", None, None).unwrap();
        assert_eq!(p.id.len(), 32);
        assert_eq!(p.listen_path, format!("/{}", p.id));
        let info = &doc[EXTENSION]["info"];
        assert_eq!(info["name"], "Pets");
        assert_eq!(info["orgId"], "org1");

        let mut doc = petstore();
        doc[EXTENSION]["info"] = json!({"id": "pets", "name": "P"});
        doc[EXTENSION]["server"] = json!({"listenPath": {"value": "/pets/"}});
        let p = prepare(&mut doc, Kind::Oas, "org1", Some("pets"), None).unwrap();
        assert_eq!((p.id.as_str(), p.listen_path.as_str()), ("pets", "/pets"));
        let e = prepare(
            &mut petstore_with_id("a"),
            Kind::Oas,
            "org1",
            Some("b"),
            None,
        )
        .unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    fn petstore_with_id(id: &str) -> Value {
        let mut doc = petstore();
        doc[EXTENSION]["info"] = json!({"id": id});
        doc
    }

    #[test]
    fn compile_errors_are_422_with_paths() {
        let mut doc = petstore();
        doc[EXTENSION]["upstream"]["url"] = json!("ftp://x");
        let e = prepare(&mut doc, Kind::Oas, "o", None, None).unwrap_err();
        let ApiError::Invalid { errors, .. } = e else {
            panic!("{e:?}")
        };
        assert!(
            errors.iter().any(|p| p.path.ends_with("upstream.url")),
            "{errors:?}"
        );
    }

    #[test]
    fn kinds_do_not_mix_and_another_org_is_refused() {
        let mut doc = petstore();
        doc[STREAMING_EXTENSION] = json!({"streams": {}});
        let e = prepare(&mut doc.clone(), Kind::Oas, "o", None, None).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let e = prepare(&mut doc, Kind::Streams, "o", None, None).unwrap_err();
        assert!(e.to_string().contains("no stream"), "{e}");
        let e = prepare(&mut petstore(), Kind::Streams, "o", None, None).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let mut doc = petstore();
        doc[EXTENSION]["info"] = json!({"orgId": "other"});
        let e = prepare(&mut doc, Kind::Oas, "o", None, None).unwrap_err();
        assert!(e.to_string().contains("orgId"), "{e}");
    }

    #[test]
    fn a_bare_stream_is_a_streaming_api_of_one_stream() {
        let mut doc = petstore();
        doc[EXTENSION]["upstream"] = json!({"url": ""});
        doc[STREAMING_EXTENSION] = json!({
            "input": {"http_server": {"path": "/in"}},
            "output": {"drop": {}}
        });
        prepare(&mut doc, Kind::Streams, "o", None, None).unwrap();
        assert_eq!(stream_count(&doc), 1);
        // Neither shape: said where, with both shapes named.
        doc[STREAMING_EXTENSION] = json!({"pipeline": {}});
        let e = prepare(&mut doc, Kind::Streams, "o", None, None).unwrap_err();
        assert!(
            e.to_string().contains("`input`, `pipeline` and `output`"),
            "{e}"
        );
    }

    #[test]
    fn posted_streams_cannot_reach_the_host() {
        let posted = |processor: Value| {
            let mut doc = petstore();
            doc[STREAMING_EXTENSION] = json!({"streams": {"main": {
                "input": {"http_server": {"path": "/in"}},
                "pipeline": {"processors": [processor]},
                "output": {"drop": {}}
            }}});
            prepare(&mut doc, Kind::Streams, "o", None, None).unwrap_err()
        };
        for (processor, said) in [
            (
                json!({"command": {"name": "sh"}}),
                "`command` reaches the gateway's host",
            ),
            (
                json!({"subprocess": {"name": "cat"}}),
                "`subprocess` reaches the gateway's host",
            ),
            (
                json!({"json_schema": {"schema_path": "/etc/passwd"}}),
                "`json_schema.schema_path` reads the gateway's files",
            ),
            (
                json!({"grok": {"expressions": ["%{WORD:w}"], "pattern_paths": ["/etc"]}}),
                "`grok.pattern_paths` reads the gateway's files",
            ),
            (
                json!({"jq": {"query": "def f: [f]; f"}}),
                "`jq` runs a language that can recurse without bound",
            ),
        ] {
            let e = posted(processor.clone());
            assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY, "{processor}");
            let ApiError::Invalid { errors, .. } = e else {
                panic!("{e:?}")
            };
            assert!(
                errors.iter().any(|p| p.message.contains(said)),
                "{processor}: {errors:?}"
            );
        }
    }

    #[test]
    fn templates_merge_under_the_posted_document() {
        let mut base = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge(&mut base, json!({"a": {"c": 3}, "d": [2], "e": true}));
        assert_eq!(base, json!({"a": {"b": 1, "c": 3}, "d": [2], "e": true}));
    }

    #[tokio::test]
    async fn the_listen_path_map_follows_the_store() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let api = |id: &str, lp: &str| StoredApi {
            id: id.into(),
            org_id: "o".into(),
            document: json!({EXTENSION: {"server": {"listenPath": {"value": lp}}}}).to_string(),
            updated_at: 0,
        };
        store.put_api(&api("a", "/a/")).await.unwrap();
        let mut paths = ListenPaths::default();
        paths.refresh(&store).await.unwrap();
        assert!(paths.check("o", "b", "/a").is_err());
        assert!(paths.check("o", "a", "/a").is_ok());
        // Its own write is recorded without a reload.
        store.put_api(&api("b", "/b/")).await.unwrap();
        paths.wrote(&store, "b", Some(("o", "/b"))).await;
        assert!(paths.revision.is_some());
        assert!(paths.check("o", "c", "/b").is_err());
        // A write by someone else in between: the next refresh reloads.
        store.put_api(&api("c", "/c/")).await.unwrap();
        store.delete_api("b").await.unwrap();
        paths.wrote(&store, "b", None).await;
        assert!(paths.revision.is_none());
        paths.refresh(&store).await.unwrap();
        assert!(paths.check("o", "x", "/c").is_err());
        assert!(paths.check("o", "x", "/b").is_ok());
    }

    #[test]
    fn problems_are_placed_in_the_posted_text() {
        let text = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths: {}\nx-sluice-api-gateway:\n  upstream:\n    url: ftp://x\n";
        let mut doc: Value = serde_yaml::from_str(text).unwrap();
        let e = place(
            prepare(&mut doc, Kind::Oas, "o", None, None).unwrap_err(),
            text,
        );
        let ApiError::Invalid { errors, .. } = e else {
            panic!("{e:?}")
        };
        let p = errors
            .iter()
            .find(|p| p.path.ends_with("upstream.url"))
            .expect("the url's problem");
        assert_eq!((p.line, p.column), (Some(6), Some(5)), "{p:?}");
    }

    #[test]
    fn unparsable_documents_say_where() {
        let yaml = "openapi: 3.0.3\ninfo: [\n";
        let e = serde_yaml::from_str::<Value>(yaml).unwrap_err();
        let ApiError::Unparsable { problem, .. } =
            unparsable(e.to_string(), e.location().map(|l| (l.line(), l.column())))
        else {
            panic!()
        };
        assert_eq!(problem.line, Some(3));
        let e = serde_json::from_str::<Value>("{\n  \"a\": ,\n}").unwrap_err();
        assert_eq!((e.line(), e.column()), (2, 8));
    }

    #[test]
    fn listen_paths_are_normalised() {
        let doc = json!({EXTENSION: {"server": {"listenPath": {"value": " /a/ "}}}});
        assert_eq!(stored_listen_path(&doc).as_deref(), Some("/a"));
        assert_eq!(stored_listen_path(&json!({})), None);
    }
}
