//! The gateway's own answers: a JSON body naming what went wrong.

use http::StatusCode;

use crate::http::{self as h, HttpResponse};

/// A gateway error: JSON `{"error": "..."}`.
pub fn error(status: StatusCode, message: &str) -> HttpResponse {
    h::json(status, &serde_json::json!({ "error": message }))
}
