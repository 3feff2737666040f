//! API definitions: OpenAPI 3.0/3.1 documents carrying `x-sluice-api-gateway`, checked
//! and compiled into what the middleware chain runs. Every problem is reported with the
//! API's id, the file and the path in the document.

pub mod extension;
pub mod handlers;
pub mod paths;
pub mod streaming;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::Value;

use crate::config::yaml::{Document, Mark, Node, NodeKind};
use crate::config::{de, yaml, ConfigError, ConfigErrors};
use crate::egress::EgressPolicy;

use super::auth::api_key::KeyLocation;
use super::auth::hmac::HmacSettings;
use super::auth::jwt::{JwtSettings, JwtVerifier};
use super::upstream::Target;
use crate::limit::Rate;
use extension::{Extension, HeaderTransform, MockResponse};
use paths::PathTemplate;
use validate::RequestValidator;

/// Path parameters by name, as a request matched them.
pub type Params = Vec<(String, String)>;

/// The extension key that marks a document as a gateway API.
pub const EXTENSION: &str = "x-sluice-api-gateway";

/// A loaded API, ready to serve.
pub struct Api {
    pub id: String,
    pub name: String,
    pub org_id: String,
    pub active: bool,
    /// Normalised: starts with `/`, no trailing `/` (except the root `/`).
    pub listen_path: String,
    pub strip: bool,
    /// Where requests that no stream takes go; none for an API of streams only.
    pub upstream: Option<Upstream>,
    pub auth: Option<Auth>,
    pub operations: Vec<Operation>,
    /// Some operation is on the allow list: every other one is refused.
    pub allow_list: bool,
    pub global: extension::Global,
    pub rate: Option<Rate>,
    /// No step of the middleware chain can act on this API's requests (no
    /// authentication, limit, per-operation or global middleware, stream): they go
    /// straight to the proxy.
    pub passthrough: bool,
    /// The limiter's bucket of `rate`.
    pub rate_bucket: String,
    /// The streams of `x-sluice-streaming`.
    pub streams: Vec<streaming::ApiStream>,
    /// The paths (below the listen path) the streams serve.
    pub stream_paths: Vec<String>,
    /// The webhooks its events fire.
    pub handlers: Vec<handlers::Handler>,
    /// Where the definition came from (a file path, or `store`).
    pub source: String,
    /// The whole document, for the parts other modules read (streams).
    pub document: Value,
    /// The API's request metrics, registered on its first request.
    pub metrics: std::sync::OnceLock<ApiMetrics>,
}

/// Handles of an API's series, so that a request records without looking them up.
pub struct ApiMetrics {
    /// By status class: 1xx to 5xx.
    pub requests: [metrics::Counter; 5],
    pub duration: metrics::Histogram,
}

impl ApiMetrics {
    pub fn new(api_id: &str) -> Self {
        let class = |c: &'static str| metrics::counter!(crate::metrics::GATEWAY_REQUESTS, "api_id" => api_id.to_owned(), "status_class" => c);
        ApiMetrics {
            requests: [
                class("1xx"),
                class("2xx"),
                class("3xx"),
                class("4xx"),
                class("5xx"),
            ],
            duration: metrics::histogram!(crate::metrics::GATEWAY_REQUEST_DURATION, "api_id" => api_id.to_owned()),
        }
    }

    pub fn record(&self, status: http::StatusCode, took: Duration) {
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.requests[class].increment(1);
        self.duration.record(took.as_secs_f64());
    }
}

pub struct Upstream {
    /// Where to connect: `http(s)://host:port`, resolved.
    pub target: Target,
    /// The `Host` header sent upstream: the URL's authority.
    pub host: http::HeaderValue,
    /// The URL's path, without a trailing `/`.
    pub base_path: String,
    pub timeout: Option<Duration>,
}

/// The security requirements: any alternative passes when all its schemes pass.
pub struct Auth {
    pub schemes: Vec<NamedScheme>,
    pub alternatives: Vec<Vec<usize>>,
}

pub struct NamedScheme {
    pub name: String,
    pub scheme: Scheme,
}

pub enum Scheme {
    /// A key issued by the gateway's key API.
    ApiKey {
        location: KeyLocation,
        name: String,
        /// `name` as a header name, read once at load, when the key is in a header.
        header: Option<http::HeaderName>,
    },
    /// A JWT bearer token.
    Jwt(Arc<JwtVerifier>),
    /// HTTP basic, checked against keys that carry basic credentials.
    Basic,
    /// An HMAC request signature made with a key's HMAC secret.
    Hmac(HmacSettings),
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

impl Operation {
    /// No middleware is set for this operation.
    fn is_plain(&self) -> bool {
        self.size_limit.is_none()
            && self.mock.is_none()
            && self.validator.is_none()
            && !self.allow
            && !self.block
            && self.rate.is_none()
            && !self.cache
    }
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

impl Api {
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
        let mut best: Option<(usize, &Operation, Params)> = None;
        for op in &self.operations {
            if op.method != method {
                continue;
            }
            if let Some((score, params)) = op.template.matches(path) {
                if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
                    best = Some((score, op, params));
                }
            }
        }
        best.map(|(_, op, params)| (op, params))
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
pub fn from_file(file: &str, text: &str) -> Result<Api, ApiError> {
    from_file_with(file, text, &CompileOptions::default())
}

pub fn from_file_with(file: &str, text: &str, options: &CompileOptions) -> Result<Api, ApiError> {
    let doc = yaml::parse(file, text, &crate::config::process_env).map_err(|errors| ApiError {
        api_id: None,
        errors,
    })?;
    compile(&doc, file, options, None)
}

/// Compiles a definition that came as JSON (the store, the gateway API, the dashboard).
/// Nothing is substituted and its mappings cannot read the host: text from a request
/// never reads the host's environment or files.
pub fn from_json(source: &str, value: &Value) -> Result<Api, ApiError> {
    from_json_with(source, value, &CompileOptions::default())
}

pub fn from_json_with(
    source: &str,
    value: &Value,
    options: &CompileOptions,
) -> Result<Api, ApiError> {
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

fn compile(
    doc: &Document,
    source: &str,
    options: &CompileOptions,
    egress: Option<&Arc<EgressPolicy>>,
) -> Result<Api, ApiError> {
    let mut errors = Vec::new();
    let err_at = |path: &str, message: String| -> ConfigError {
        ConfigError::new(message).at(doc.location(path, doc.locate(path)))
    };
    let fail = |api_id: Option<String>, errors: Vec<ConfigError>| ApiError {
        api_id,
        errors: ConfigErrors(errors),
    };
    let whole: Value = de::from_node(doc, &doc.root, "").map_err(|e| fail(None, vec![e]))?;
    match whole.get("openapi").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.") => {}
        Some(v) => errors.push(err_at(
            "openapi",
            format!("OpenAPI `{v}` is not supported (3.0 and 3.1 are)"),
        )),
        None => errors.push(err_at(
            "openapi",
            "not an OpenAPI 3 document: no `openapi` version".into(),
        )),
    }
    let Some(ext_node) = doc.root.get(EXTENSION) else {
        errors.push(err_at("", format!("no `{EXTENSION}` section")));
        return Err(fail(None, errors));
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
    let x = |p: &str| format!("{EXTENSION}.{p}");
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        errors.push(err_at(
            &x("info.id"),
            format!("`{id}`: an id is letters, digits, `-`, `_` and `.`"),
        ));
    }

    // Listen path.
    let lp = ext.server.listen_path.value.trim();
    let listen_path = if !lp.starts_with('/') {
        errors.push(err_at(
            &x("server.listenPath.value"),
            format!("`{lp}` does not start with `/`"),
        ));
        String::from("/")
    } else if lp.len() > 1 && !lp.trim_end_matches('/').is_empty() {
        lp.trim_end_matches('/').to_owned()
    } else {
        "/".to_owned()
    };
    if listen_path.starts_with("/sluice") && listen_rest("/sluice", &listen_path).is_some() {
        errors.push(err_at(
            &x("server.listenPath.value"),
            "`/sluice` is the gateway's own API".into(),
        ));
    }

    // Streams.
    let (streams, stream_paths) =
        match streaming::parse(doc, &whole, &id, &options.allow_unsafe, egress) {
            Ok(s) => s,
            Err(e) => {
                errors.extend(e);
                (Vec::new(), Vec::new())
            }
        };

    // Upstream: needed unless the API serves streams only.
    let url = ext
        .upstream
        .as_ref()
        .and_then(|u| u.url.as_deref())
        .filter(|u| !u.is_empty());
    let upstream = match url {
        Some(url) => match parse_upstream(url) {
            Ok(upstream) => Some(Upstream {
                timeout: ext.upstream.as_ref().and_then(|u| u.timeout).map(|d| d.0),
                ..upstream
            }),
            Err(e) => {
                errors.push(err_at(&x("upstream.url"), e));
                None
            }
        },
        None => {
            if doc.root.get(streaming::STREAMING).is_none() {
                let (at, what) = match &ext.upstream {
                    Some(_) => ("upstream.url", "no upstream `url`"),
                    None => ("info", "no `upstream`"),
                };
                errors.push(err_at(
                    &x(at),
                    format!(
                        "{what}: an API needs one unless it has `{}`",
                        streaming::STREAMING
                    ),
                ));
            }
            None
        }
    };
    let rate = match ext.upstream.as_ref().and_then(|u| u.rate_limit.as_ref()) {
        Some(r) => check_rate(r, &x("upstream.rateLimit"), &err_at, &mut errors),
        None => None,
    };

    // Operations from `paths`.
    let mut operations = Vec::new();
    let mut seen_ids: BTreeMap<String, String> = BTreeMap::new();
    if let Some(paths) = whole.get("paths").and_then(Value::as_object) {
        for (template_text, item) in paths {
            let item_at = format!("paths.{template_text}");
            let template = match PathTemplate::parse(template_text) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(err_at(&item_at, e));
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
                    // Operations without an id cannot carry middleware; they still proxy.
                    continue;
                };
                if let Some(other) = seen_ids.insert(op_id.to_owned(), op_at.clone()) {
                    errors.push(err_at(
                        &format!("{op_at}.operationId"),
                        format!("operationId `{op_id}` is also used at {other}"),
                    ));
                    continue;
                }
                let method = Method::from_bytes(method_name.to_ascii_uppercase().as_bytes())
                    .unwrap_or(Method::GET);
                operations.push((
                    op_id.to_owned(),
                    method,
                    template.clone(),
                    op_at,
                    item.get("parameters"),
                    op.clone(),
                ));
            }
        }
    }

    // Middleware per operation.
    let mut compiled = Vec::new();
    let mut allow_list = false;
    for (op_id, mw) in &ext.middleware.operations {
        if !seen_ids.contains_key(op_id) {
            errors.push(err_at(
                &x(&format!("middleware.operations.{op_id}")),
                format!("no operation `{op_id}` in `paths`"),
            ));
        }
        let enabled = |t: &Option<extension::Toggle>| t.as_ref().is_some_and(|t| t.enabled);
        if enabled(&mw.allow) && enabled(&mw.block) {
            errors.push(err_at(
                &x(&format!("middleware.operations.{op_id}")),
                "`allow` and `block` are both on".into(),
            ));
        }
        allow_list |= enabled(&mw.allow);
    }
    for (op_id, method, template, op_at, path_params, op) in operations {
        let mw = ext
            .middleware
            .operations
            .get(&op_id)
            .cloned()
            .unwrap_or_default();
        let mw_at = x(&format!("middleware.operations.{op_id}"));
        let size_limit = mw
            .request_size_limit
            .as_ref()
            .filter(|s| s.enabled)
            .map(|s| s.value);
        let mock = match mw.mock_response.as_ref().filter(|m| m.enabled) {
            Some(m) => match mock_of(m, &op) {
                Ok(mock) => Some(mock),
                Err(e) => {
                    errors.push(err_at(&format!("{mw_at}.mockResponse"), e));
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
                        errors.push(err_at(
                            &format!("{mw_at}.validateRequest.errorResponseCode"),
                            format!("{} is not a 4xx status", v.error_response_code),
                        ));
                        http::StatusCode::UNPROCESSABLE_ENTITY
                    }
                };
                match RequestValidator::compile(&whole, path_params, &op, &op_at) {
                    Ok(validator) => Some((validator, status)),
                    Err((path, e)) => {
                        errors.push(err_at(&path, e));
                        None
                    }
                }
            }
            None => None,
        };
        let rate = match &mw.rate_limit {
            Some(r) => check_rate(r, &format!("{mw_at}.rateLimit"), &err_at, &mut errors),
            None => None,
        };
        compiled.push(Operation {
            id: op_id,
            method,
            template,
            size_limit,
            mock,
            validator,
            allow: mw.allow.as_ref().is_some_and(|t| t.enabled),
            block: mw.block.as_ref().is_some_and(|t| t.enabled),
            rate,
            cache: mw.cache.as_ref().is_some_and(|t| t.enabled),
        });
    }

    // Global middleware.
    let global = ext.middleware.global.clone();
    if let Some(cache) = &global.cache {
        if cache.enabled && cache.timeout == 0 {
            errors.push(err_at(
                &x("middleware.global.cache.timeout"),
                "must be above zero".into(),
            ));
        }
        for (i, code) in cache.cache_response_codes.iter().enumerate() {
            if http::StatusCode::from_u16(*code).is_err() {
                errors.push(err_at(
                    &x(&format!("middleware.global.cache.cacheResponseCodes[{i}]")),
                    format!("{code} is not an HTTP status"),
                ));
            }
        }
    }
    if let Some(cors) = &global.cors {
        for (i, m) in cors.allowed_methods.iter().enumerate() {
            if crate::http::parse_method(m).is_err() {
                errors.push(err_at(
                    &x(&format!("middleware.global.cors.allowedMethods[{i}]")),
                    format!("`{m}` is not an HTTP method"),
                ));
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
            check_transform(
                t,
                &x(&format!("middleware.global.{name}")),
                &err_at,
                &mut errors,
            );
        }
    }

    // Authentication.
    let auth = match &ext.server.authentication {
        Some(a) if a.enabled => match auth_of(&whole, a, &x("server.authentication")) {
            Ok(auth) => Some(auth),
            Err((path, e)) => {
                errors.push(err_at(&path, e));
                None
            }
        },
        _ => None,
    };

    // Event handlers.
    let mut handler_errors = Vec::new();
    let handlers = handlers::check(
        &ext.server.event_handlers,
        &x("server.eventHandlers"),
        &mut handler_errors,
    );
    errors.extend(handler_errors.into_iter().map(|(p, m)| err_at(&p, m)));

    if !errors.is_empty() {
        return Err(fail(Some(id), errors));
    }
    let passthrough = auth.is_none()
        && rate.is_none()
        && !allow_list
        && streams.is_empty()
        && global.is_idle()
        && compiled.iter().all(Operation::is_plain);
    Ok(Api {
        passthrough,
        handlers,
        rate_bucket: format!("api:{id}:rate"),
        org_id: ext.info.org_id.clone().unwrap_or_default(),
        name: ext.info.name.clone(),
        active: ext.info.state.active,
        id,
        listen_path,
        strip: ext.server.listen_path.strip,
        upstream,
        auth,
        operations: compiled,
        allow_list,
        global,
        rate,
        streams,
        stream_paths,
        source: source.to_owned(),
        document: whole,
        metrics: std::sync::OnceLock::new(),
    })
}

fn check_rate(
    r: &extension::RateLimit,
    at: &str,
    err_at: &dyn Fn(&str, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<Rate> {
    if !r.enabled {
        return None;
    }
    if r.rate == 0 {
        errors.push(err_at(&format!("{at}.rate"), "must be above zero".into()));
        return None;
    }
    Some(Rate {
        rate: r.rate,
        per: r.per.0,
    })
}

fn check_transform(
    t: &HeaderTransform,
    at: &str,
    err_at: &dyn Fn(&str, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) {
    for (i, nv) in t.add.iter().enumerate() {
        if http::HeaderName::from_bytes(nv.name.as_bytes()).is_err() {
            errors.push(err_at(
                &format!("{at}.add[{i}].name"),
                format!("`{}` is not a header name", nv.name),
            ));
        }
        if http::HeaderValue::from_str(&nv.value).is_err() {
            errors.push(err_at(
                &format!("{at}.add[{i}].value"),
                "not a valid header value".into(),
            ));
        }
    }
    for (i, name) in t.remove.iter().enumerate() {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            errors.push(err_at(
                &format!("{at}.remove[{i}]"),
                format!("`{name}` is not a header name"),
            ));
        }
    }
}

/// The upstream of `url`, with no timeout of its own.
fn parse_upstream(url: &str) -> Result<Upstream, String> {
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
    let target = Target::new(https, &authority).map_err(|e| format!("`{url}`: {e}"))?;
    let host = http::HeaderValue::from_str(authority.as_str())
        .map_err(|_| format!("`{url}`: the host cannot be sent as a header"))?;
    Ok(Upstream {
        target,
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

/// The schemes named in the document's `security` (or all of `components.securitySchemes`
/// when it has none), with the settings of `server.authentication.securitySchemes`.
fn auth_of(
    whole: &Value,
    a: &extension::Authentication,
    at: &str,
) -> Result<Auth, (String, String)> {
    let defined = whole
        .pointer("/components/securitySchemes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for name in a.security_schemes.keys() {
        if !defined.contains_key(name) {
            return Err((
                format!("{at}.securitySchemes.{name}"),
                format!("`{name}` is not in `components.securitySchemes`"),
            ));
        }
    }
    let requirements: Vec<Vec<String>> = match whole.get("security").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|req| {
                req.as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default()
            })
            .collect(),
        _ => defined.keys().map(|k| vec![k.clone()]).collect(),
    };
    if requirements.is_empty() || requirements.iter().all(Vec::is_empty) {
        return Err((
            at.to_owned(),
            "authentication is on but the document has no `security` requirement nor `components.securitySchemes`".into(),
        ));
    }
    let mut schemes: Vec<NamedScheme> = Vec::new();
    let mut alternatives = Vec::new();
    for req in requirements {
        let mut alt = Vec::new();
        for name in req {
            if let Some(i) = schemes.iter().position(|s| s.name == name) {
                alt.push(i);
                continue;
            }
            let def_at = format!("components.securitySchemes.{name}");
            let Some(def) = defined.get(&name) else {
                return Err((
                    "security".into(),
                    format!("`{name}` is not in `components.securitySchemes`"),
                ));
            };
            let settings = a.security_schemes.get(&name);
            let settings_at = format!("{at}.securitySchemes.{name}");
            if settings
                .and_then(|s| s.get("enabled"))
                .and_then(Value::as_bool)
                == Some(false)
            {
                continue;
            }
            let scheme = scheme_of(def, &def_at, settings, &settings_at)?;
            schemes.push(NamedScheme { name, scheme });
            alt.push(schemes.len() - 1);
        }
        if !alt.is_empty() {
            alternatives.push(alt);
        }
    }
    if alternatives.is_empty() {
        return Err((
            at.to_owned(),
            "authentication is on but every scheme is disabled".into(),
        ));
    }
    Ok(Auth {
        schemes,
        alternatives,
    })
}

fn scheme_of(
    def: &Value,
    def_at: &str,
    settings: Option<&Value>,
    settings_at: &str,
) -> Result<Scheme, (String, String)> {
    let ty = def.get("type").and_then(Value::as_str).unwrap_or("");
    let bad = |m: String| (def_at.to_owned(), m);
    match ty {
        "apiKey" => {
            let name = def
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("an apiKey scheme needs `name`".into()))?;
            let location = match def.get("in").and_then(Value::as_str) {
                Some("header") => KeyLocation::Header,
                Some("query") => KeyLocation::Query,
                Some("cookie") => KeyLocation::Cookie,
                other => {
                    return Err(bad(format!(
                        "`in` must be header, query or cookie, not {other:?}"
                    )))
                }
            };
            let header = match location {
                KeyLocation::Header => Some(
                    http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| bad(format!("`{name}` is not a header name")))?,
                ),
                _ => None,
            };
            Ok(Scheme::ApiKey {
                location,
                name: name.to_owned(),
                header,
            })
        }
        "http" => match def
            .get("scheme")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("basic") => Ok(Scheme::Basic),
            Some("bearer") => {
                let settings = settings.ok_or_else(|| {
                    (
                        settings_at.to_owned(),
                        "a bearer (JWT) scheme needs its settings here: `signingMethod` and `source` or `jwksUri`".into(),
                    )
                })?;
                let jwt: JwtSettings = serde_json::from_value(settings.clone())
                    .map_err(|e| (settings_at.to_owned(), e.to_string()))?;
                let verifier = JwtVerifier::new(&jwt).map_err(|e| (settings_at.to_owned(), e))?;
                Ok(Scheme::Jwt(Arc::new(verifier)))
            }
            Some("signature") => {
                let hmac: HmacSettings = match settings {
                    Some(s) => serde_json::from_value(s.clone())
                        .map_err(|e| (settings_at.to_owned(), e.to_string()))?,
                    None => HmacSettings {
                        enabled: true,
                        ..HmacSettings::default()
                    },
                };
                hmac.validate().map_err(|e| (settings_at.to_owned(), e))?;
                Ok(Scheme::Hmac(hmac))
            }
            other => Err(bad(format!(
                "http scheme {other:?} is not supported (basic, bearer, signature)"
            ))),
        },
        other => Err(bad(format!(
            "security scheme type `{other}` is not supported (apiKey, http)"
        ))),
    }
}

#[cfg(test)]
mod tests;
