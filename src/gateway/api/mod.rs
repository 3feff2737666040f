//! An API as the gateway serves it: its checked definition ([`crate::apidef`]) compiled
//! into what requests use (the upstream to connect to, the verifiers of its security
//! schemes) and the metrics it records. The steps its requests run are compiled from it
//! by the middleware, with the table (`middleware::plan`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::apidef::security::{SchemeSettings, Security};
use crate::apidef::{self, ApiError, CompileOptions, Definition};
use crate::config::{ConfigError, ConfigErrors};

use super::auth::api_key::KeyLocation;
use super::auth::hmac::HmacSettings;
use super::auth::jwt::JwtVerifier;
use super::upstream::Target;

pub use crate::apidef::{Operation, Params, EXTENSION};

/// A loaded API, ready to serve.
pub struct Api {
    /// What the document says, checked.
    pub definition: Definition,
    /// Where requests that no stream takes go; none for an API of streams only.
    pub upstream: Option<Upstream>,
    /// Shared with the authentication step of its plan.
    pub auth: Option<Arc<Auth>>,
    /// The API's request metrics, registered on its first request.
    pub metrics: std::sync::OnceLock<ApiMetrics>,
}

// An API is its definition with what it compiled into: the request path reads the
// definition's settings through it as its own.
impl std::ops::Deref for Api {
    type Target = Definition;

    fn deref(&self) -> &Definition {
        &self.definition
    }
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

/// Parses and compiles one definition from a file's text (YAML or JSON). `${VAR}` is
/// substituted from the environment, as in stream configs.
pub fn from_file(file: &str, text: &str) -> Result<Api, ApiError> {
    from_file_with(file, text, &CompileOptions::default())
}

pub fn from_file_with(file: &str, text: &str, options: &CompileOptions) -> Result<Api, ApiError> {
    compile(apidef::from_file_with(file, text, options)?)
}

/// Compiles a definition that came as JSON (the store, the gateway API). Nothing is
/// substituted and its mappings cannot read the host.
pub fn from_json(source: &str, value: &Value) -> Result<Api, ApiError> {
    from_json_with(source, value, &CompileOptions::default())
}

pub fn from_json_with(
    source: &str,
    value: &Value,
    options: &CompileOptions,
) -> Result<Api, ApiError> {
    compile(apidef::from_json_with(source, value, options)?)
}

/// Compiles a checked definition into the API the gateway serves. What can still fail
/// here is the host's, not the document's (a JWKS client that cannot be made).
pub fn compile(definition: Definition) -> Result<Api, ApiError> {
    let fail = |path: String, message: String| ApiError {
        api_id: Some(definition.id.clone()),
        errors: ConfigErrors(vec![ConfigError::new(format!("{path}: {message}"))]),
    };
    let egress = definition.egress.as_ref();
    // Under `egress` (a posted definition) a name is checked whenever it is connected to.
    let upstream = match &definition.upstream_url {
        Some(url) => {
            let mut target = Target::new(url.https, &url.authority)
                .map_err(|e| fail(format!("{EXTENSION}.upstream.url"), e))?;
            if let Some(policy) = egress {
                target = target.held_to(policy.clone(), url.authority.as_str());
            }
            Some(Upstream {
                target,
                host: url.host.clone(),
                base_path: url.base_path.clone(),
                timeout: url.timeout,
            })
        }
        None => None,
    };
    let auth = match &definition.security {
        Some(security) => Some(Arc::new(
            auth_of(security, egress).map_err(|(path, e)| fail(path, e))?,
        )),
        None => None,
    };
    Ok(Api {
        definition,
        upstream,
        auth,
        metrics: std::sync::OnceLock::new(),
    })
}

fn auth_of(
    security: &Security,
    egress: Option<&Arc<crate::egress::EgressPolicy>>,
) -> Result<Auth, (String, String)> {
    let mut schemes = Vec::with_capacity(security.schemes.len());
    for named in &security.schemes {
        let scheme = match &named.scheme {
            SchemeSettings::ApiKey {
                location,
                name,
                header,
            } => Scheme::ApiKey {
                location: *location,
                name: name.clone(),
                header: header.clone(),
            },
            SchemeSettings::Jwt(settings, keys) => Scheme::Jwt(Arc::new(
                JwtVerifier::checked(settings, keys.clone(), egress.cloned()).map_err(|e| {
                    (
                        format!(
                            "{EXTENSION}.server.authentication.securitySchemes.{}",
                            named.name
                        ),
                        format!("jwksUri: {e}"),
                    )
                })?,
            )),
            SchemeSettings::Basic => Scheme::Basic,
            SchemeSettings::Hmac(settings) => Scheme::Hmac(settings.clone()),
        };
        schemes.push(NamedScheme {
            name: named.name.clone(),
            scheme,
        });
    }
    Ok(Auth {
        schemes,
        alternatives: security.alternatives.clone(),
    })
}
