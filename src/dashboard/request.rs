//! What a handler gets (the caller, path parameters, query, headers, the body already
//! read within the size limit) and what it gives back, with the helpers every resource
//! uses: JSON bodies whose errors name the field, query parameters, pages, and the
//! spec's `{"Status","Message","Meta","ID"}` answer.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::{ApiError, Problem};
use super::State;
use crate::store::Page;

/// One request, as a handler sees it.
pub struct Ctx {
    pub state: Arc<State>,
    pub caller: Caller,
    /// The client's address (the TCP peer).
    pub peer: std::net::IpAddr,
    /// The path's parameters by the names in the route's pattern, percent-decoded; read
    /// them with [`Ctx::path`].
    pub params: Vec<(&'static str, String)>,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A successful answer: a status, a JSON body and any headers of its own (a portal
/// session's cookies).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub headers: HeaderMap,
}

/// The spec's answer to a write: `Status`, `Message`, `Meta` (the record identifier) and
/// `ID` (the resource identifier).
#[derive(Debug, Serialize, ToSchema)]
pub struct Outcome {
    /// `OK`.
    #[serde(rename = "Status")]
    pub status: String,
    /// What was done, in a few words.
    #[serde(rename = "Message")]
    pub message: String,
    /// The database identifier of the record (null for a dry run).
    #[serde(rename = "Meta")]
    #[schema(value_type = Option<String>)]
    pub meta: Value,
    /// The resource's identifier.
    #[serde(rename = "ID")]
    pub id: String,
    /// What is valid but may not do what the caller expects (a dry run), each with
    /// where it is in the document.
    #[serde(rename = "Warnings", skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Problem>,
}

impl Reply {
    pub fn json(status: StatusCode, body: impl Serialize) -> Result<Reply, ApiError> {
        let body = serde_json::to_value(body)
            .map_err(|e| ApiError::Internal(format!("cannot serialise a reply: {e}")))?;
        Ok(Reply::value(status, body))
    }

    /// A reply of a JSON value already made.
    pub fn value(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            body,
            headers: HeaderMap::new(),
        }
    }

    /// The spec's write answer.
    pub fn outcome(
        status: StatusCode,
        message: &str,
        meta: Option<&str>,
        id: &str,
    ) -> Result<Reply, ApiError> {
        Reply::json(status, Outcome::new(message, meta, id, Vec::new()))
    }

    /// [`Reply::outcome`] of a write that saved nothing (a dry run), with warnings.
    pub fn outcome_warning(
        status: StatusCode,
        message: &str,
        id: &str,
        warnings: Vec<Problem>,
    ) -> Result<Reply, ApiError> {
        Reply::json(status, Outcome::new(message, None, id, warnings))
    }
}

impl Outcome {
    fn new(message: &str, meta: Option<&str>, id: &str, warnings: Vec<Problem>) -> Outcome {
        Outcome {
            status: "OK".into(),
            message: message.into(),
            meta: meta.map_or(Value::Null, |m| Value::String(m.into())),
            id: id.into(),
            warnings,
        }
    }
}

impl Ctx {
    /// The path's parameters as `T`, whose fields are named (or renamed) as the route's
    /// pattern names them; one that does not fit is a 400 naming it.
    pub fn path<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        path_params(&self.params)
    }

    /// The last value of query parameter `name`.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean query flag: absent, `false` or `0` is false; `true`, `1` or empty is
    /// true; anything else is a 400 naming it.
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.query(name) {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") | Some("") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "query parameter `{name}`: `{other}` is not true or false"
            ))),
        }
    }

    /// The media type of the body, lower case and without parameters; `None` when the
    /// request has no `Content-Type`.
    pub fn media_type(&self) -> Option<String> {
        let value = self.headers.get(header::CONTENT_TYPE)?;
        let text = value.to_str().unwrap_or("invalid");
        Some(
            text.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase(),
        )
    }

    /// The body as `T`: the request must say JSON (or say nothing), and any error names
    /// the field it is about.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        match self.media_type().as_deref() {
            None | Some("application/json") => {}
            Some(t) if t.ends_with("+json") => {}
            Some(other) => {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "the body must be JSON (Content-Type: application/json), not `{other}`"
                )))
            }
        }
        parse_json(&self.body)
    }

    /// The page that `p` asks for, with the configured page size: absent, 0 or 1 is the
    /// first page, below 0 is everything.
    pub fn page(&self) -> Result<Paging, ApiError> {
        let size = i64::from(self.state.config.pagination.page_size.max(1));
        let p = match self.query("p") {
            None => 1,
            Some(text) => text.trim().parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!("query parameter `p`: `{text}` is not an integer"))
            })?,
        };
        let page = if p < 0 {
            Page::ALL
        } else {
            Page::new(size, p.max(1) - 1)
        };
        Ok(Paging { page, size })
    }
}

/// The query parameter [`Ctx::page`] reads, as the document of a list declares it.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page number from 1; below 0 returns every entry.
    pub p: Option<i64>,
}

/// A requested page and the page size that counts the pages.
#[derive(Debug, Clone, Copy)]
pub struct Paging {
    pub page: Page,
    pub size: i64,
}

impl Paging {
    /// How many pages `total` records make.
    pub fn pages(&self, total: i64) -> i64 {
        if total <= 0 {
            0
        } else {
            (total + self.size - 1) / self.size
        }
    }
}

/// Parses a JSON body into `T`; errors say which field and why.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the body is empty: a JSON object is expected",
        ));
    }
    // Every body here is an object; serde would also fill a struct from an array of its
    // fields in order, which no client means.
    if body.trim_ascii_start().first() == Some(&b'[') {
        return Err(ApiError::bad_request(
            "the body is an array: a JSON object is expected",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let syntax = matches!(
            inner.classify(),
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof
        );
        if syntax {
            ApiError::bad_request(format!("the body is not valid JSON: {inner}"))
        } else if path.is_empty() || path == "." || path == "?" {
            ApiError::bad_request(format!("the body is not valid: {inner}"))
        } else {
            ApiError::bad_request(format!("invalid field `{path}`: {inner}"))
        }
    })
}

/// The path parameters `params` (name and value) as `T`.
fn path_params<T: DeserializeOwned>(params: &[(&'static str, String)]) -> Result<T, ApiError> {
    let map: serde_json::Map<String, Value> = params
        .iter()
        .map(|(name, value)| ((*name).to_owned(), Value::String(value.clone())))
        .collect();
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." || path == "?" {
            ApiError::bad_request(format!("the path is not valid: {inner}"))
        } else {
            ApiError::bad_request(format!("path parameter `{path}`: {inner}"))
        }
    })
}

/// An identifier a client chose: letters, digits and `-_.~`, 1 to 128 of them, so it
/// can stand in a URL path as it is.
pub fn check_identifier(field: &str, id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid field `{field}`: an identifier is 1 to 128 letters, digits, `-`, `_`, `.` or `~`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Input {
        name: Option<String>,
        nested: Option<Nested>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Nested {
        n: u32,
    }

    fn message(e: ApiError) -> String {
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        e.to_string()
    }

    #[test]
    fn json_errors_name_the_field() {
        let e = parse_json::<Input>(br#"{"name": 3}"#).unwrap_err();
        assert!(message(e).contains("`name`"));
        let e = parse_json::<Input>(br#"{"nested": {"n": -1}}"#).unwrap_err();
        assert!(message(e).contains("`nested.n`"));
        let e = parse_json::<Input>(br#"{"nmae": "x"}"#).unwrap_err();
        assert!(message(e).contains("nmae"));
        let e = parse_json::<Input>(b"{").unwrap_err();
        let m = message(e);
        assert!(m.contains("not valid"), "{m}");
        let e = parse_json::<Input>(b"  ").unwrap_err();
        assert!(message(e).contains("empty"));
        // serde alone would read `[null, null]` as the struct's fields in order.
        let e = parse_json::<Input>(b" [null, null]").unwrap_err();
        assert!(message(e).contains("array"));
        let e = parse_json::<Option<Input>>(b"[null]").unwrap_err();
        assert!(message(e).contains("array"));
    }

    #[test]
    fn path_parameters_are_read_by_name_and_errors_name_them() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Path {
            #[serde(rename = "appId")]
            app: String,
            n: u32,
        }
        let params = [("appId", "a1".to_owned()), ("n", "7".to_owned())];
        let e = path_params::<Path>(&params).unwrap_err();
        assert!(message(e).contains("`n`"));
        #[derive(Debug, serde::Deserialize)]
        struct App {
            #[serde(rename = "appId")]
            app: String,
        }
        let got: App = path_params(&params[..1]).unwrap();
        assert_eq!(got.app, "a1");
        let e = path_params::<Path>(&[]).unwrap_err();
        assert!(message(e).contains("appId"));
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("id", "tpl-1.v2~x_y").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(check_identifier("id", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pages_are_counted_up() {
        let paging = Paging {
            page: Page::ALL,
            size: 10,
        };
        assert_eq!(paging.pages(0), 0);
        assert_eq!(paging.pages(1), 1);
        assert_eq!(paging.pages(10), 1);
        assert_eq!(paging.pages(11), 2);
    }
}
