//! The API's one error type: every failure becomes a status and the same message and hints
//! the CLI prints, as JSON (`{"error": …, "hints": […]}`); `assets::error_page` gives a
//! person the same as a page where the browser opens the URL itself (a node's permalink).
//!
//! Statuses follow the CLI's exit codes: busy (exit 75) → 409, an unknown thread, step, node
//! or workflow → 404, refused input → 422, anything else → 500.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::advice::Advice;

/// A failed API call.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub hints: Vec<String>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            hints: Vec::new(),
        }
    }

    /// An engine error: 409 when busy, else `status`, with its hints.
    pub(crate) fn from_engine<E: std::fmt::Display + Advice + ?Sized>(
        error: &E,
        status: StatusCode,
    ) -> ApiError {
        ApiError {
            status: if error.is_busy() {
                StatusCode::CONFLICT
            } else {
                status
            },
            message: error.to_string(),
            hints: error.hints(),
        }
    }

    /// Something the caller named does not exist.
    pub(crate) fn not_found<E: std::fmt::Display + Advice + ?Sized>(error: &E) -> ApiError {
        ApiError::from_engine(error, StatusCode::NOT_FOUND)
    }

    /// The caller's input or action was refused.
    pub(crate) fn refused<E: std::fmt::Display + Advice + ?Sized>(error: &E) -> ApiError {
        ApiError::from_engine(error, StatusCode::UNPROCESSABLE_ENTITY)
    }

    /// A failure the caller did not cause.
    pub(crate) fn internal<E: std::fmt::Display + Advice + ?Sized>(error: &E) -> ApiError {
        ApiError::from_engine(error, StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.message, "hints": self.hints});
        (self.status, Json(body)).into_response()
    }
}
