//! Every error answer of the API: a status and `{"error": {"code", "message"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shared::protocol::{ErrorBody, ErrorDetail};

use crate::sessions::SessionError;
use crate::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "{}", self.message);
        }
        let body = ErrorBody { error: ErrorDetail { code: self.code.into(), message: self.message } };
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(_) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_archive", e.to_string()),
            StoreError::TooLarge { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.to_string()),
            StoreError::Backend { unreachable: true, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string())
            }
            _ => ApiError::internal(e.to_string()),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::UnknownArchive(_) | SessionError::UnknownSession(_) | SessionError::ArchiveDeleted(_) => {
                ApiError::not_found(e.to_string())
            }
            SessionError::UnknownDevice(_) => ApiError::new(StatusCode::BAD_REQUEST, "unknown_device", e.to_string()),
            SessionError::BadRequest(_) => ApiError::bad_request(e.to_string()),
            SessionError::Forbidden => ApiError::new(StatusCode::FORBIDDEN, "forbidden", e.to_string()),
            SessionError::Store(e) => e.into(),
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        ApiError::internal(format!("a background task failed: {e}"))
    }
}
