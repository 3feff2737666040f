//! The `x-sluice-api-gateway` extension of an API definition, as written: typed with
//! serde so that every unknown key and bad value is reported where it is.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Extension {
    pub info: Info,
    /// Optional for an API that only serves streams.
    #[serde(default)]
    pub upstream: Option<Upstream>,
    pub server: Server,
    #[serde(default)]
    pub middleware: Middleware,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Info {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub org_id: Option<String>,
    #[serde(default)]
    pub state: State,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct State {
    #[serde(default = "yes")]
    pub active: bool,
}

impl Default for State {
    fn default() -> Self {
        State { active: true }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Upstream {
    /// Absent or empty on an API that serves streams only (Tyk's streams examples
    /// write `url: ""`), which may still carry an API-wide `rateLimit`.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// Overrides the gateway's `proxy.timeout` for this API.
    #[serde(default)]
    pub timeout: Option<crate::duration::Duration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimit {
    #[serde(default = "yes")]
    pub enabled: bool,
    pub rate: u64,
    pub per: Per,
}

/// A rate's period: a duration string (`1s`, `1m`) or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Per(pub std::time::Duration);

impl<'de> Deserialize<'de> for Per {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) if s > 0.0 && s.is_finite() => {
                Ok(Per(std::time::Duration::from_secs_f64(s)))
            }
            Raw::Secs(s) => Err(serde::de::Error::custom(format!(
                "`per` must be above zero, not {s}"
            ))),
            Raw::Text(t) => crate::duration::parse(&t)
                .map_err(serde::de::Error::custom)
                .and_then(|d| {
                    if d.is_zero() {
                        Err(serde::de::Error::custom("`per` must be above zero"))
                    } else {
                        Ok(Per(d))
                    }
                }),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Server {
    pub listen_path: ListenPath,
    #[serde(default)]
    pub authentication: Option<Authentication>,
    /// Webhooks fired by the API's events.
    #[serde(default)]
    pub event_handlers: Vec<EventHandler>,
}

/// Binds events to a webhook: a stored one (`webhook`, the id or webhook id of
/// `/api/hooks`) or one written here (`targetPath` and the rest).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventHandler {
    #[serde(default = "yes")]
    pub enabled: bool,
    pub events: Vec<String>,
    #[serde(default)]
    pub webhook: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub target_path: Option<String>,
    #[serde(default)]
    pub header_map: BTreeMap<String, String>,
    /// Relative to the gateway's `webhooks.templates` directory.
    #[serde(default)]
    pub template_path: Option<String>,
    /// The body template itself.
    #[serde(default)]
    pub template: Option<String>,
    /// Seconds before the same event fires again for the same key.
    #[serde(default)]
    pub event_timeout: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListenPath {
    pub value: String,
    /// Remove the listen path before proxying.
    #[serde(default)]
    pub strip: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Authentication {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Settings of the document's security schemes, by scheme name (JWT keys, HMAC
    /// algorithms); API key and basic schemes need none.
    #[serde(default)]
    pub security_schemes: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Middleware {
    #[serde(default)]
    pub global: Global,
    #[serde(default)]
    pub operations: BTreeMap<String, Operation>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Global {
    #[serde(default)]
    pub cache: Option<Cache>,
    #[serde(default)]
    pub cors: Option<Cors>,
    #[serde(default)]
    pub request_size_limit: Option<SizeLimit>,
    #[serde(default)]
    pub transform_request_headers: Option<HeaderTransform>,
    #[serde(default)]
    pub transform_response_headers: Option<HeaderTransform>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cache {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Seconds a cached response is served.
    #[serde(default = "default_cache_timeout")]
    pub timeout: u64,
    /// Cache every GET, HEAD and OPTIONS request, not only operations that turn it on.
    #[serde(default)]
    pub cache_all_safe_requests: bool,
    /// Statuses worth caching; 200 when empty.
    #[serde(default)]
    pub cache_response_codes: Vec<u16>,
    /// Request headers whose values make separate cache entries.
    #[serde(default)]
    pub cache_by_headers: Vec<String>,
}

fn default_cache_timeout() -> u64 {
    60
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cors {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub allowed_methods: Vec<String>,
    #[serde(default)]
    pub allowed_headers: Vec<String>,
    #[serde(default)]
    pub exposed_headers: Vec<String>,
    #[serde(default)]
    pub allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer.
    #[serde(default)]
    pub max_age: u64,
    /// Proxy preflights to the upstream instead of answering them.
    #[serde(default)]
    pub options_passthrough: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SizeLimit {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The largest request body, in bytes.
    pub value: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderTransform {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub add: Vec<NamedValue>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamedValue {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Operation {
    #[serde(default)]
    pub request_size_limit: Option<SizeLimit>,
    #[serde(default)]
    pub mock_response: Option<MockResponse>,
    #[serde(default)]
    pub validate_request: Option<ValidateRequest>,
    #[serde(default)]
    pub allow: Option<Toggle>,
    #[serde(default)]
    pub block: Option<Toggle>,
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    #[serde(default)]
    pub cache: Option<Toggle>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toggle {
    #[serde(default = "yes")]
    pub enabled: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MockResponse {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_mock_code")]
    pub code: u16,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub headers: Vec<NamedValue>,
    /// Answer with an example from the operation's `responses` instead of `body`.
    #[serde(default, rename = "fromOASExamples")]
    pub from_oas_examples: Option<FromExamples>,
}

fn default_mock_code() -> u16 {
    200
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FromExamples {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_mock_code")]
    pub code: u16,
    #[serde(default = "default_content_type")]
    pub content_type: String,
    #[serde(default)]
    pub example_name: Option<String>,
}

fn default_content_type() -> String {
    "application/json".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ValidateRequest {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_validation_code")]
    pub error_response_code: u16,
}

fn default_validation_code() -> u16 {
    422
}
