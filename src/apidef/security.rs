//! The security requirements of a definition: the schemes of
//! `components.securitySchemes` its `security` names, each with its settings from
//! `server.authentication.securitySchemes`, checked when the definition loads.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::extension;
use super::hmac::HmacSettings;
use super::jwt::{JwtKeys, JwtSettings};
use crate::egress::{EgressPolicy, EgressTarget};

/// Where a request carries its API key: the `in` field of an OpenAPI `apiKey` scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyLocation {
    /// A request header (`in: header`).
    Header,
    /// A query-string parameter (`in: query`).
    Query,
    /// A cookie (`in: cookie`).
    Cookie,
}

/// The security requirements: any alternative passes when all its schemes pass.
pub struct Security {
    pub schemes: Vec<NamedScheme>,
    pub alternatives: Vec<Vec<usize>>,
}

pub struct NamedScheme {
    pub name: String,
    pub scheme: SchemeSettings,
}

/// One scheme, checked.
pub enum SchemeSettings {
    /// A key issued by the gateway's key API.
    ApiKey {
        location: KeyLocation,
        name: String,
        /// `name` as a header name, read once at load, when the key is in a header.
        header: Option<http::HeaderName>,
    },
    /// A JWT bearer token, with where its keys come from.
    Jwt(JwtSettings, JwtKeys),
    /// HTTP basic, checked against keys that carry basic credentials.
    Basic,
    /// An HMAC request signature made with a key's HMAC secret.
    Hmac(HmacSettings),
}

/// The schemes named in the document's `security` (or all of `components.securitySchemes`
/// when it has none), with the settings of `server.authentication.securitySchemes`.
pub(super) fn security_of(
    whole: &Value,
    a: &extension::Authentication,
    at: &str,
    egress: Option<&Arc<EgressPolicy>>,
    targets: &mut Vec<EgressTarget>,
) -> Result<Security, (String, String)> {
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
            let scheme = scheme_of(def, &def_at, settings, &settings_at, egress, targets)?;
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
    Ok(Security {
        schemes,
        alternatives,
    })
}

fn scheme_of(
    def: &Value,
    def_at: &str,
    settings: Option<&Value>,
    settings_at: &str,
    egress: Option<&Arc<EgressPolicy>>,
    targets: &mut Vec<EgressTarget>,
) -> Result<SchemeSettings, (String, String)> {
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
            Ok(SchemeSettings::ApiKey {
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
            Some("basic") => Ok(SchemeSettings::Basic),
            Some("bearer") => {
                let settings = settings.ok_or_else(|| {
                    (
                        settings_at.to_owned(),
                        "a bearer (JWT) scheme needs its settings here: `signingMethod` and `source` or `jwksUri`".into(),
                    )
                })?;
                let jwt: JwtSettings = serde_json::from_value(settings.clone())
                    .map_err(|e| (settings_at.to_owned(), e.to_string()))?;
                let keys = jwt
                    .check(egress.map(|p| &**p))
                    .map_err(|e| (settings_at.to_owned(), e))?;
                if let Some(url) = egress
                    .and(jwt.jwks_uri.as_deref())
                    .and_then(|u| url::Url::parse(u.trim()).ok())
                {
                    if let Some(url::Host::Domain(host)) = url.host() {
                        targets.push(EgressTarget {
                            path: format!("{settings_at}.jwksUri"),
                            host: host.to_owned(),
                            port: url.port_or_known_default().unwrap_or(80),
                        });
                    }
                }
                Ok(SchemeSettings::Jwt(jwt, keys))
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
                Ok(SchemeSettings::Hmac(hmac))
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
