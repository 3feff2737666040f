//! API definitions: OpenAPI 3.0/3.1 documents carrying `x-sluice-api-gateway` (and
//! `x-sluice-streaming`), parsed and checked into the model both the gateway and the
//! dashboard read. Nothing here runs: the gateway compiles a [`Definition`] into what
//! serves it. Every problem is reported with the API's id, the file and the path in the
//! document.

pub mod asyncapi;
pub mod extension;
pub mod handlers;
pub mod hmac;
pub mod jwt;
pub mod paths;
pub mod security;
pub mod streaming;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::Value;

use crate::config::yaml::{Document, Mark, Node, NodeKind};
use crate::config::{de, yaml, ConfigError, ConfigErrors};
use crate::egress::{EgressPolicy, EgressTarget};
use crate::limit::Rate;
use extension::{Extension, HeaderTransform, MockResponse};
use paths::PathTemplate;
use security::Security;
use validate::RequestValidator;

/// Path parameters by name, as a request matched them.
pub type Params = Vec<(String, String)>;

/// The extension key that marks a document as a gateway API.
pub const EXTENSION: &str = "x-sluice-api-gateway";

/// A checked API definition.
pub struct Definition {
    pub id: String,
    pub name: String,
    pub org_id: String,
    pub active: bool,
    /// Normalised: starts with `/`, no trailing `/` (except the root `/`).
    pub listen_path: String,
    pub strip: bool,
    /// Where requests that no stream takes go; none for an API of streams only.
    pub upstream_url: Option<UpstreamUrl>,
    pub security: Option<Security>,
    pub operations: Vec<Operation>,
    /// Some operation is on the allow list: every other one is refused.
    pub allow_list: bool,
    pub global: extension::Global,
    pub rate: Option<Rate>,
    /// The streams of `x-sluice-streaming`.
    pub streams: Vec<streaming::ApiStream>,
    /// The paths (below the listen path) the streams serve.
    pub stream_paths: Vec<String>,
    /// The webhooks its events fire.
    pub handlers: Vec<handlers::Handler>,
    /// The named hosts a posted definition's own settings reach (its upstream, its
    /// JWKS), for the dashboard to resolve in a dry run; its streams keep their own.
    pub egress_targets: Vec<EgressTarget>,
    /// The policy a posted definition is held to (its upstream, its JWKS); none for the
    /// operator's files.
    pub egress: Option<Arc<EgressPolicy>>,
    /// Where the definition came from (a file path, or `store`).
    pub source: String,
    /// The whole document, for the parts other modules read (streams).
    pub document: Value,
}

/// The upstream URL, checked.
pub struct UpstreamUrl {
    pub https: bool,
    pub authority: http::uri::Authority,
    /// The host connected to: the authority's, without brackets.
    pub host_name: String,
    pub port: u16,
    /// The `Host` header sent upstream: the URL's authority.
    pub host: http::HeaderValue,
    /// The URL's path, without a trailing `/`.
    pub base_path: String,
    pub timeout: Option<Duration>,
}

pub struct Operation {
    pub id: String,
    pub method: Method,
    pub template: PathTemplate,
    pub size_limit: Option<u64>,
    pub mock: Option<Mock>,
    pub validator: Option<(RequestValidator, http::StatusCode)>,
    pub allow: bool,
    pub block: bool,
    pub rate: Option<Rate>,
    pub cache: bool,
}

/// A fixed answer.
pub struct Mock {
    pub status: http::StatusCode,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub body: bytes::Bytes,
}

/// One API that could not be loaded: its id when known, and what is wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("API `{}`: {errors}", api_id.as_deref().unwrap_or("?"))]
pub struct ApiError {
    pub api_id: Option<String>,
    pub errors: ConfigErrors,
}

impl Definition {
    /// Whether the definition was posted (to the dashboard, or the gateway's API) rather
    /// than written by the operator in a file: its streams are then held to the egress
    /// policy, and its mappings kept away from the host.
    pub fn posted(&self) -> bool {
        self.source.starts_with("store:") || self.source == "request"
    }

    /// The operation that a request (method and path below the listen path) resolves to.
    pub fn operation(
        &self,
        method: &Method,
        path: &str,
    ) -> Option<(&Operation, Vec<(String, String)>)> {
        self.operation_index(method, path)
            .map(|(i, params)| (&self.operations[i], params))
    }

    /// As [`operation`](Definition::operation), by the operation's place in
    /// `operations`: what the gateway compiled per operation is kept in that order.
    pub fn operation_index(&self, method: &Method, path: &str) -> Option<(usize, Params)> {
        let mut best: Option<(usize, usize, Params)> = None;
        for (i, op) in self.operations.iter().enumerate() {
            if op.method != method {
                continue;
            }
            if let Some((score, params)) = op.template.matches(path) {
                if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
                    best = Some((score, i, params));
                }
            }
        }
        best.map(|(_, i, params)| (i, params))
    }

    /// The part of a request path below the listen path, or `None` if it is not below.
    pub fn below<'a>(&self, path: &'a str) -> Option<&'a str> {
        listen_rest(&self.listen_path, path)
    }
}

/// `path` below `listen` (`/api` takes `/api`, `/api/x`, not `/apix`).
pub fn listen_rest<'a>(listen: &str, path: &'a str) -> Option<&'a str> {
    if listen == "/" {
        return Some(path);
    }
    let rest = path.strip_prefix(listen)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// How one listen path stands to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nesting {
    /// Both take the same requests.
    Same,
    /// The first is inside the second: it takes part of the second's requests.
    Below,
    /// The first holds the second.
    Above,
}

/// A listen path in the form ownership is compared in: percent-decoded, in lower case,
/// without empty or `.` segments. Looser than routing on purpose: an upstream may decode
/// or fold case, so paths that differ only so still belong to one owner.
pub fn path_key(listen: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(listen).decode_utf8_lossy();
    let mut key = String::with_capacity(decoded.len());
    for segment in decoded.split('/') {
        if segment.is_empty() || segment == "." {
            continue;
        }
        key.push('/');
        key.push_str(&segment.to_lowercase());
    }
    if key.is_empty() {
        key.push('/');
    }
    key
}

/// How `a` stands to `b` (both from [`path_key`]), when one holds the other.
pub fn nesting(a: &str, b: &str) -> Option<Nesting> {
    if a == b {
        Some(Nesting::Same)
    } else if listen_rest(b, a).is_some() {
        Some(Nesting::Below)
    } else if listen_rest(a, b).is_some() {
        Some(Nesting::Above)
    } else {
        None
    }
}

/// What the gateway allows in the definitions it loads.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Components that reach the host (`file`, `stdin`, `stdout`) streams may use anyway.
    pub allow_unsafe: Vec<String>,
    /// Where the streams of posted definitions (JSON: the store, a request) may connect;
    /// their literal addresses are checked when compiled. Files are the operator's and
    /// are not held to it.
    pub egress: Option<Arc<EgressPolicy>>,
}

/// Parses and compiles one definition from a file's text (YAML or JSON). `${VAR}` is
/// substituted from the environment, as in stream configs.
pub fn from_file(file: &str, text: &str) -> Result<Definition, ApiError> {
    from_file_with(file, text, &CompileOptions::default())
}

pub fn from_file_with(
    file: &str,
    text: &str,
    options: &CompileOptions,
) -> Result<Definition, ApiError> {
    let doc = yaml::parse(file, text, &crate::config::process_env).map_err(|errors| ApiError {
        api_id: None,
        errors,
    })?;
    compile(&doc, file, options, None)
}

/// Compiles a definition that came as JSON (the store, the gateway API, the dashboard).
/// Nothing is substituted and its mappings cannot read the host: text from a request
/// never reads the host's environment or files.
pub fn from_json(source: &str, value: &Value) -> Result<Definition, ApiError> {
    from_json_with(source, value, &CompileOptions::default())
}

pub fn from_json_with(
    source: &str,
    value: &Value,
    options: &CompileOptions,
) -> Result<Definition, ApiError> {
    let doc = Document {
        file: source.into(),
        root: node_of(value),
    };
    crate::config::mapped::sandboxed(|| compile(&doc, source, options, options.egress.as_ref()))
}

/// A position-less tree of a JSON value; strings stay strings whatever they look like.
pub(crate) fn node_of(value: &Value) -> Node {
    let kind = match value {
        Value::Null => NodeKind::Scalar {
            value: "null".into(),
            plain: true,
        },
        Value::Bool(b) => NodeKind::Scalar {
            value: b.to_string(),
            plain: true,
        },
        Value::Number(n) => NodeKind::Scalar {
            value: n.to_string(),
            plain: true,
        },
        Value::String(s) => NodeKind::Scalar {
            value: s.clone(),
            plain: false,
        },
        Value::Array(items) => NodeKind::Seq(items.iter().map(node_of).collect()),
        Value::Object(map) => NodeKind::Map(
            map.iter()
                .map(|(k, v)| {
                    (
                        Node {
                            kind: NodeKind::Scalar {
                                value: k.clone(),
                                plain: false,
                            },
                            mark: Mark::default(),
                        },
                        node_of(v),
                    )
                })
                .collect(),
        ),
    };
    Node {
        kind,
        mark: Mark::default(),
    }
}

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The problems found while compiling one definition, each at its place in the document.
struct Problems<'d> {
    doc: &'d Document,
    found: Vec<ConfigError>,
}

impl Problems<'_> {
    fn at(&mut self, path: &str, message: impl Into<String>) {
        let doc = self.doc;
        self.found
            .push(ConfigError::new(message.into()).at(doc.location(path, doc.locate(path))));
    }
}

/// `p` under the extension: `x-sluice-api-gateway.<p>`.
fn x(p: &str) -> String {
    format!("{EXTENSION}.{p}")
}

fn compile(
    doc: &Document,
    source: &str,
    options: &CompileOptions,
    egress: Option<&Arc<EgressPolicy>>,
) -> Result<Definition, ApiError> {
    let fail = |api_id: Option<String>, errors: Vec<ConfigError>| ApiError {
        api_id,
        errors: ConfigErrors(errors),
    };
    let mut problems = Problems {
        doc,
        found: Vec::new(),
    };
    let whole: Value = de::from_node(doc, &doc.root, "").map_err(|e| fail(None, vec![e]))?;
    match whole.get("openapi").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.") => {}
        Some(v) => problems.at(
            "openapi",
            format!("OpenAPI `{v}` is not supported (3.0 and 3.1 are)"),
        ),
        None => problems.at("openapi", "not an OpenAPI 3 document: no `openapi` version"),
    }
    let Some(ext_node) = doc.root.get(EXTENSION) else {
        problems.at("", format!("no `{EXTENSION}` section"));
        return Err(fail(None, problems.found));
    };
    let ext: Extension = de::from_node(doc, ext_node, EXTENSION).map_err(|e| {
        // The id, when it can be read, makes the report findable.
        let id = ext_node
            .get("info")
            .and_then(|i| i.get("id"))
            .and_then(Node::as_str)
            .map(str::to_owned);
        fail(id, vec![e])
    })?;
    let id = ext.info.id.trim().to_owned();
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        problems.at(
            &x("info.id"),
            format!("`{id}`: an id is letters, digits, `-`, `_` and `.`"),
        );
    }
    let listen_path = listen_path_of(&ext, &mut problems);
    let (streams, stream_paths) =
        match streaming::parse(doc, &whole, &id, &options.allow_unsafe, egress) {
            Ok(s) => s,
            Err(e) => {
                problems.found.extend(e);
                (Vec::new(), Vec::new())
            }
        };
    let mut egress_targets = Vec::new();
    let upstream = upstream_of(doc, &ext, egress, &mut egress_targets, &mut problems);
    let rate = match ext.upstream.as_ref().and_then(|u| u.rate_limit.as_ref()) {
        Some(r) => check_rate(r, &x("upstream.rateLimit"), &mut problems),
        None => None,
    };
    let (operations, allow_list) = operations_of(&whole, &ext, &mut problems);
    let global = ext.middleware.global.clone();
    check_global(&global, &mut problems);
    let auth = match &ext.server.authentication {
        Some(a) if a.enabled => match security::security_of(
            &whole,
            a,
            &x("server.authentication"),
            egress,
            &mut egress_targets,
        ) {
            Ok(auth) => Some(auth),
            Err((path, e)) => {
                problems.at(&path, e);
                None
            }
        },
        _ => None,
    };
    let mut handler_errors = Vec::new();
    let handlers = handlers::check(
        &ext.server.event_handlers,
        &x("server.eventHandlers"),
        egress.map(|p| &**p),
        &mut handler_errors,
    );
    for (path, message) in handler_errors {
        problems.at(&path, message);
    }

    if !problems.found.is_empty() {
        return Err(fail(Some(id), problems.found));
    }
    Ok(Definition {
        handlers,
        org_id: ext.info.org_id.clone().unwrap_or_default(),
        name: ext.info.name.clone(),
        active: ext.info.state.active,
        id,
        listen_path,
        strip: ext.server.listen_path.strip,
        upstream_url: upstream,
        security: auth,
        operations,
        allow_list,
        global,
        rate,
        streams,
        stream_paths,
        egress_targets,
        source: source.to_owned(),
        document: whole,
        egress: egress.cloned(),
    })
}

/// The listen path, normalised: starts with `/`, no trailing `/` (but the root's).
fn listen_path_of(ext: &Extension, problems: &mut Problems<'_>) -> String {
    let lp = ext.server.listen_path.value.trim();
    let listen_path = if !lp.starts_with('/') {
        problems.at(
            &x("server.listenPath.value"),
            format!("`{lp}` does not start with `/`"),
        );
        String::from("/")
    } else if lp.len() > 1 && !lp.trim_end_matches('/').is_empty() {
        lp.trim_end_matches('/').to_owned()
    } else {
        "/".to_owned()
    };
    if listen_path.starts_with("/sluice") && listen_rest("/sluice", &listen_path).is_some() {
        problems.at(
            &x("server.listenPath.value"),
            "`/sluice` is the gateway's own API",
        );
    }
    listen_path
}

/// The upstream: needed unless the API serves streams only.
fn upstream_of(
    doc: &Document,
    ext: &Extension,
    egress: Option<&Arc<EgressPolicy>>,
    targets: &mut Vec<EgressTarget>,
    problems: &mut Problems<'_>,
) -> Option<UpstreamUrl> {
    let url = ext
        .upstream
        .as_ref()
        .and_then(|u| u.url.as_deref())
        .filter(|u| !u.is_empty());
    match url {
        Some(url) => match parse_upstream(url, egress) {
            Ok(upstream) => {
                if egress.is_some() && upstream.host_name.parse::<std::net::IpAddr>().is_err() {
                    targets.push(EgressTarget {
                        path: x("upstream.url"),
                        host: upstream.host_name.clone(),
                        port: upstream.port,
                    });
                }
                Some(UpstreamUrl {
                    timeout: ext.upstream.as_ref().and_then(|u| u.timeout).map(|d| d.0),
                    ..upstream
                })
            }
            Err(e) => {
                problems.at(&x("upstream.url"), e);
                None
            }
        },
        None => {
            if doc.root.get(streaming::STREAMING).is_none() {
                let (at, what) = match &ext.upstream {
                    Some(_) => ("upstream.url", "no upstream `url`"),
                    None => ("info", "no `upstream`"),
                };
                problems.at(
                    &x(at),
                    format!(
                        "{what}: an API needs one unless it has `{}`",
                        streaming::STREAMING
                    ),
                );
            }
            None
        }
    }
}

/// An operation of `paths`, before its middleware is compiled.
struct Declared<'v> {
    id: String,
    method: Method,
    template: PathTemplate,
    /// Where it is in the document.
    at: String,
    /// The path item's `parameters`.
    path_params: Option<&'v Value>,
    op: &'v Value,
}

/// The operations of `paths` that have an `operationId` (only those can carry
/// middleware; the others still proxy), each with its middleware compiled; and whether
/// some operation is on the allow list.
fn operations_of(
    whole: &Value,
    ext: &Extension,
    problems: &mut Problems<'_>,
) -> (Vec<Operation>, bool) {
    let mut declared = Vec::new();
    let mut seen_ids: BTreeMap<String, String> = BTreeMap::new();
    if let Some(paths) = whole.get("paths").and_then(Value::as_object) {
        for (template_text, item) in paths {
            let item_at = format!("paths.{template_text}");
            let template = match PathTemplate::parse(template_text) {
                Ok(t) => t,
                Err(e) => {
                    problems.at(&item_at, e);
                    continue;
                }
            };
            let Some(item_map) = item.as_object() else {
                continue;
            };
            for (method_name, op) in item_map {
                if !METHODS.contains(&method_name.as_str()) {
                    continue;
                }
                let op_at = format!("{item_at}.{method_name}");
                let Some(op_id) = op.get("operationId").and_then(Value::as_str) else {
                    continue;
                };
                if let Some(other) = seen_ids.insert(op_id.to_owned(), op_at.clone()) {
                    problems.at(
                        &format!("{op_at}.operationId"),
                        format!("operationId `{op_id}` is also used at {other}"),
                    );
                    continue;
                }
                let method = Method::from_bytes(method_name.to_ascii_uppercase().as_bytes())
                    .unwrap_or(Method::GET);
                declared.push(Declared {
                    id: op_id.to_owned(),
                    method,
                    template: template.clone(),
                    at: op_at,
                    path_params: item.get("parameters"),
                    op,
                });
            }
        }
    }
    let mut allow_list = false;
    let enabled = |t: &Option<extension::Toggle>| t.as_ref().is_some_and(|t| t.enabled);
    for (op_id, mw) in &ext.middleware.operations {
        let mw_at = x(&format!("middleware.operations.{op_id}"));
        if !seen_ids.contains_key(op_id) {
            problems.at(&mw_at, format!("no operation `{op_id}` in `paths`"));
        }
        if enabled(&mw.allow) && enabled(&mw.block) {
            problems.at(&mw_at, "`allow` and `block` are both on");
        }
        allow_list |= enabled(&mw.allow);
    }
    let operations = declared
        .into_iter()
        .map(|d| operation(whole, ext, d, problems))
        .collect();
    (operations, allow_list)
}

/// One operation with its middleware (`middleware.operations.<id>`) compiled.
fn operation(
    whole: &Value,
    ext: &Extension,
    d: Declared<'_>,
    problems: &mut Problems<'_>,
) -> Operation {
    let mw = ext
        .middleware
        .operations
        .get(&d.id)
        .cloned()
        .unwrap_or_default();
    let mw_at = x(&format!("middleware.operations.{}", d.id));
    let size_limit = mw
        .request_size_limit
        .as_ref()
        .filter(|s| s.enabled)
        .map(|s| s.value);
    let mock = match mw.mock_response.as_ref().filter(|m| m.enabled) {
        Some(m) => match mock_of(m, d.op) {
            Ok(mock) => Some(mock),
            Err(e) => {
                problems.at(&format!("{mw_at}.mockResponse"), e);
                None
            }
        },
        None => None,
    };
    let validator = match mw.validate_request.as_ref().filter(|v| v.enabled) {
        Some(v) => {
            let status = match http::StatusCode::from_u16(v.error_response_code) {
                Ok(s) if s.is_client_error() => s,
                _ => {
                    problems.at(
                        &format!("{mw_at}.validateRequest.errorResponseCode"),
                        format!("{} is not a 4xx status", v.error_response_code),
                    );
                    http::StatusCode::UNPROCESSABLE_ENTITY
                }
            };
            match RequestValidator::compile(whole, d.path_params, d.op, &d.at) {
                Ok(validator) => Some((validator, status)),
                Err((path, e)) => {
                    problems.at(&path, e);
                    None
                }
            }
        }
        None => None,
    };
    let rate = match &mw.rate_limit {
        Some(r) => check_rate(r, &format!("{mw_at}.rateLimit"), problems),
        None => None,
    };
    Operation {
        id: d.id,
        method: d.method,
        template: d.template,
        size_limit,
        mock,
        validator,
        allow: mw.allow.as_ref().is_some_and(|t| t.enabled),
        block: mw.block.as_ref().is_some_and(|t| t.enabled),
        rate,
        cache: mw.cache.as_ref().is_some_and(|t| t.enabled),
    }
}

/// Checks the global middleware (`middleware.global`).
fn check_global(global: &extension::Global, problems: &mut Problems<'_>) {
    if let Some(cache) = &global.cache {
        if cache.enabled && cache.timeout == 0 {
            problems.at(&x("middleware.global.cache.timeout"), "must be above zero");
        }
        for (i, code) in cache.cache_response_codes.iter().enumerate() {
            if http::StatusCode::from_u16(*code).is_err() {
                problems.at(
                    &x(&format!("middleware.global.cache.cacheResponseCodes[{i}]")),
                    format!("{code} is not an HTTP status"),
                );
            }
        }
    }
    if let Some(cors) = &global.cors {
        for (i, m) in cors.allowed_methods.iter().enumerate() {
            if crate::http::parse_method(m).is_err() {
                problems.at(
                    &x(&format!("middleware.global.cors.allowedMethods[{i}]")),
                    format!("`{m}` is not an HTTP method"),
                );
            }
        }
    }
    for (name, t) in [
        ("transformRequestHeaders", &global.transform_request_headers),
        (
            "transformResponseHeaders",
            &global.transform_response_headers,
        ),
    ] {
        if let Some(t) = t {
            check_transform(t, &x(&format!("middleware.global.{name}")), problems);
        }
    }
}

fn check_rate(r: &extension::RateLimit, at: &str, problems: &mut Problems<'_>) -> Option<Rate> {
    if !r.enabled {
        return None;
    }
    if r.rate == 0 {
        problems.at(&format!("{at}.rate"), "must be above zero");
        return None;
    }
    Some(Rate {
        rate: r.rate,
        per: r.per.0,
    })
}

fn check_transform(t: &HeaderTransform, at: &str, problems: &mut Problems<'_>) {
    for (i, nv) in t.add.iter().enumerate() {
        if http::HeaderName::from_bytes(nv.name.as_bytes()).is_err() {
            problems.at(
                &format!("{at}.add[{i}].name"),
                format!("`{}` is not a header name", nv.name),
            );
        }
        if http::HeaderValue::from_str(&nv.value).is_err() {
            problems.at(&format!("{at}.add[{i}].value"), "not a valid header value");
        }
    }
    for (i, name) in t.remove.iter().enumerate() {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.at(
                &format!("{at}.remove[{i}]"),
                format!("`{name}` is not a header name"),
            );
        }
    }
}

/// The upstream of `url`, with no timeout of its own. Under `egress` (a posted
/// definition) a literal address is checked now and a name whenever it is connected to.
fn parse_upstream(url: &str, egress: Option<&Arc<EgressPolicy>>) -> Result<UpstreamUrl, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(format!(
                "`{url}`: the upstream must be an http:// or https:// URL"
            ))
        }
    };
    let authority = uri
        .authority()
        .cloned()
        .ok_or_else(|| format!("`{url}` has no host"))?;
    if uri.query().is_some() {
        return Err(format!("`{url}`: an upstream URL takes no query"));
    }
    let base_path = uri.path().trim_end_matches('/').to_owned();
    let host_name = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    // What the TLS handshake names; checked for plain HTTP too, as connecting does.
    if rustls::pki_types::ServerName::try_from(host_name.clone()).is_err() {
        return Err(format!("`{url}`: `{host_name}` is not a valid server name"));
    }
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    if let Some(policy) = egress {
        policy
            .check_literal(&host_name, port)
            .map_err(|e| format!("`{url}`: {e}"))?;
    }
    let host = http::HeaderValue::from_str(authority.as_str())
        .map_err(|_| format!("`{url}`: the host cannot be sent as a header"))?;
    Ok(UpstreamUrl {
        https,
        authority,
        host_name,
        port,
        host,
        base_path,
        timeout: None,
    })
}

fn mock_of(m: &MockResponse, op: &Value) -> Result<Mock, String> {
    let mut headers = Vec::new();
    for nv in &m.headers {
        let name = http::HeaderName::from_bytes(nv.name.as_bytes())
            .map_err(|_| format!("`{}` is not a header name", nv.name))?;
        let value = http::HeaderValue::from_str(&nv.value)
            .map_err(|_| format!("header `{}` has a bad value", nv.name))?;
        headers.push((name, value));
    }
    let (code, body) = match m.from_oas_examples.as_ref().filter(|f| f.enabled) {
        Some(f) => {
            let content = op
                .pointer(&format!("/responses/{}/content", f.code))
                .and_then(|c| c.get(&f.content_type))
                .ok_or_else(|| {
                    format!(
                        "`fromOASExamples`: the operation has no `{}` response of type `{}`",
                        f.code, f.content_type
                    )
                })?;
            let example = match &f.example_name {
                Some(name) => content.pointer(&format!("/examples/{name}/value")),
                None => content.get("example").or_else(|| {
                    content
                        .get("examples")
                        .and_then(Value::as_object)
                        .and_then(|e| e.values().next())
                        .and_then(|e| e.get("value"))
                }),
            }
            .ok_or_else(|| "`fromOASExamples`: the response has no such example".to_owned())?;
            let body = match example {
                Value::String(s) if !f.content_type.contains("json") => s.clone(),
                other => other.to_string(),
            };
            if !headers.iter().any(|(n, _)| n == http::header::CONTENT_TYPE) {
                if let Ok(v) = http::HeaderValue::from_str(&f.content_type) {
                    headers.push((http::header::CONTENT_TYPE, v));
                }
            }
            (f.code, body)
        }
        None => (m.code, m.body.clone().unwrap_or_default()),
    };
    let status =
        http::StatusCode::from_u16(code).map_err(|_| format!("{code} is not an HTTP status"))?;
    Ok(Mock {
        status,
        headers,
        body: body.into(),
    })
}

#[cfg(test)]
pub(crate) mod tests;
