//! The one error type of the management API and its one rendering:
//! `{"Status":"Error","Message":"..."}` with the status that fits, plus `Errors` (each
//! with the path in the document) for a definition that does not compile. Internal
//! causes are logged, never sent.

use http::{header, HeaderValue, StatusCode};
use serde::Serialize;
use utoipa::ToSchema;

use crate::gateway::keys::KeyError;
use crate::http::{self as h, HttpResponse};
use crate::store::StoreError;

/// Why a management request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Bad JSON, a bad query parameter or an invalid field; the text names it.
    #[error("{0}")]
    BadRequest(String),
    /// Missing or unknown credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Known credentials without the right to do this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The path exists but not with this method; `allow` lists the methods it takes.
    #[error("method not allowed (allowed: {allow})")]
    MethodNotAllowed { allow: String },
    #[error("{0}")]
    Conflict(String),
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Too many attempts from this client or at this account; `retry_after` is in
    /// seconds.
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u64 },
    /// A definition that does not compile, with every problem and where it is.
    #[error("{message}")]
    Invalid {
        message: String,
        errors: Vec<Problem>,
    },
    /// A document that does not parse (400), with where the parser stopped, so that an
    /// editor can point at it.
    #[error("{message}")]
    Unparsable { message: String, problem: Problem },
    /// The store failed; a conflict it reports becomes 409, anything else 500.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Something that is not the client's fault, with the cause for the log.
    #[error("internal error: {0}")]
    Internal(String),
}

/// A gateway key refused: its own rules are the caller's to meet.
impl From<KeyError> for ApiError {
    fn from(e: KeyError) -> ApiError {
        match e {
            KeyError::Invalid { field, message } => {
                ApiError::bad_request(format!("invalid field `{field}`: {message}"))
            }
            KeyError::UserTaken(user) => ApiError::Conflict(format!(
                "a key with basic-auth user `{user}` exists already"
            )),
            KeyError::NotFound => ApiError::not_found("key"),
            KeyError::Store(e) => ApiError::Store(e),
        }
    }
}

/// Seconds a caller refused for a full delivery queue is asked to wait.
const QUEUE_FULL_RETRY_AFTER: u64 = 30;

/// One problem in a definition.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Problem {
    /// The dotted path in the document (`x-sluice-api-gateway.upstream.url`); empty for
    /// the whole document.
    pub path: String,
    pub message: String,
    /// Where in the posted text, 1-based: the key at `path`, or the closest enclosing one
    /// written in the text (a member filled in from a template or by the dashboard has
    /// none of its own). Absent when the text could not be placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based, in characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl Problem {
    /// A problem not yet placed in the text.
    pub fn at(path: &str, message: &str) -> Problem {
        Problem {
            path: path.to_owned(),
            message: message.to_owned(),
            line: None,
            column: None,
        }
    }
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Always `Error`.
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "Message")]
    pub message: String,
    /// For 422, each problem of the definition; for a 400 of a document that does not
    /// parse, the one place where parsing stopped.
    #[serde(rename = "Errors", skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<Problem>>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest(message.into())
    }

    pub fn not_found(what: &str) -> ApiError {
        ApiError::NotFound(format!("{what} not found"))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::Unparsable { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) | ApiError::Store(StoreError::Conflict(_)) => {
                StatusCode::CONFLICT
            }
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyRequests { .. } | ApiError::Store(StoreError::QueueFull { .. }) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Store(_) | ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response: the status, the JSON body, and `Allow` or `WWW-Authenticate` where
    /// the status calls for one.
    pub fn into_response(self) -> HttpResponse {
        let status = self.status();
        let allow = match &self {
            ApiError::MethodNotAllowed { allow } => HeaderValue::from_str(allow).ok(),
            _ => None,
        };
        let retry_after = match &self {
            ApiError::TooManyRequests { retry_after, .. } => Some(HeaderValue::from(*retry_after)),
            // Receivers take a while to drain a full queue.
            ApiError::Store(StoreError::QueueFull { .. }) => {
                Some(HeaderValue::from(QUEUE_FULL_RETRY_AFTER))
            }
            _ => None,
        };
        let (message, errors) = match self {
            ApiError::Store(StoreError::Conflict(what)) => (format!("{what} already exists"), None),
            ApiError::Store(e @ StoreError::QueueFull { .. }) => (e.to_string(), None),
            ApiError::Store(_) | ApiError::Internal(_) => {
                tracing::error!(error = %self, "Management request failed.");
                ("internal error; see the dashboard's log".to_owned(), None)
            }
            ApiError::Invalid { message, errors } => (message, Some(errors)),
            ApiError::Unparsable { message, problem } => (message, Some(vec![problem])),
            ref other => (other.to_string(), None),
        };
        let body = ErrorBody {
            status: "Error".into(),
            message,
            errors,
        };
        let value = serde_json::to_value(&body).unwrap_or_default();
        let mut resp = h::json(status, &value);
        if let Some(allow) = allow {
            resp.headers_mut().insert(header::ALLOW, allow);
        }
        if let Some(after) = retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, after);
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice\""),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(resp: HttpResponse) -> serde_json::Value {
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn every_error_has_the_one_shape() {
        let resp = ApiError::bad_request("`name`: expected a string").into_response();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            body(resp).await,
            serde_json::json!({"Status": "Error", "Message": "`name`: expected a string"})
        );
        let resp = ApiError::MethodNotAllowed {
            allow: "GET, PUT".into(),
        }
        .into_response();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[header::ALLOW], "GET, PUT");
        let resp = ApiError::Unauthorized("no key".into()).into_response();
        assert!(resp.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    #[tokio::test]
    async fn conflicts_from_the_store_are_409_and_failures_hide_their_cause() {
        let resp = ApiError::from(StoreError::Conflict("asset 'x'".into())).into_response();
        assert_eq!(resp.status(), StatusCode::CONFLICT);
        assert_eq!(body(resp).await["Message"], "asset 'x' already exists");
        let resp = ApiError::from(StoreError::QueueFull {
            org_id: "o1".into(),
            limit: 10,
        })
        .into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "30");
        let text = body(resp).await["Message"].to_string();
        assert!(text.contains("webhooks.max_pending_per_org"), "{text}");
        let resp = ApiError::Internal("secret detail".into()).into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = body(resp).await.to_string();
        assert!(!text.contains("secret detail"), "{text}");
    }

    #[tokio::test]
    async fn invalid_definitions_list_their_problems() {
        let resp = ApiError::Invalid {
            message: "the definition is invalid".into(),
            errors: vec![Problem::at(
                "x-sluice-api-gateway.upstream.url",
                "not a URL",
            )],
        }
        .into_response();
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let v = body(resp).await;
        assert_eq!(v["Errors"][0]["path"], "x-sluice-api-gateway.upstream.url");
    }
}
