//! JSON error responses with honest status codes (DESIGN §2).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use gitstate_core::{BackendError, CatalogError, RegistryError, SealError, StoreError};

/// Seconds a client is told to wait before retrying a 503.
const RETRY_AFTER_SECONDS: &str = "2";

/// An error answer: a status and one clear sentence, or the holder's LockInfo for 423.
#[derive(Debug)]
pub enum ApiError {
    /// A status with a sentence, rendered as `{"error": "..."}`.
    Message(StatusCode, String),
    /// 423 with the lock holder's LockInfo exactly as stored.
    Locked(Bytes),
}

impl ApiError {
    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::Message(StatusCode::BAD_REQUEST, message.into())
    }

    /// The status code this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Message(status, _) => *status,
            ApiError::Locked(_) => StatusCode::LOCKED,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let status = match &e {
            StoreError::Stale | StoreError::Unavailable(_) | StoreError::Busy(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            StoreError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            StoreError::Forbidden(_) | StoreError::Refused(_) => StatusCode::FORBIDDEN,
            StoreError::Remote(_) => StatusCode::BAD_GATEWAY,
            StoreError::Conflict(_) => StatusCode::CONFLICT,
            StoreError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::Message(status, e.to_string())
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::BadRequest(m) => ApiError::Message(StatusCode::BAD_REQUEST, m),
            BackendError::Unauthenticated(m) => ApiError::Message(StatusCode::UNAUTHORIZED, m),
            BackendError::NotFound(m) => ApiError::Message(StatusCode::NOT_FOUND, m),
            BackendError::Conflict(m) => ApiError::Message(StatusCode::CONFLICT, m),
            BackendError::Locked(holder) => ApiError::Locked(holder),
            e @ BackendError::TooLarge { .. } => {
                ApiError::Message(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
            }
            e @ BackendError::Busy { .. } => {
                ApiError::Message(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            BackendError::Store(e) => e.into(),
            BackendError::Seal(e) => e.into(),
        }
    }
}

impl From<SealError> for ApiError {
    fn from(e: SealError) -> Self {
        let status = match &e {
            SealError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            SealError::BadInput(_) => StatusCode::BAD_REQUEST,
            // What is stored cannot be served: a server-side condition that no retry of the
            // same request changes (the next full write from Terraform replaces it).
            SealError::NoKey(_)
            | SealError::Tampered(_)
            | SealError::Misplaced(_)
            | SealError::NotSealedHere(_)
            | SealError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::Message(status, e.to_string())
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        // DynamoDB unreachable, throttled or refusing: the catalog is a service like the git
        // server; the client may retry.
        ApiError::Message(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

impl From<gitstate_core::scope::Refusal> for ApiError {
    fn from(refusal: gitstate_core::scope::Refusal) -> Self {
        ApiError::Message(StatusCode::FORBIDDEN, refusal.0)
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::UnknownRepository(_) => {
                ApiError::Message(StatusCode::NOT_FOUND, e.to_string())
            }
            RegistryError::Unauthenticated(m) => ApiError::Message(StatusCode::UNAUTHORIZED, m),
            RegistryError::NotAllowed(m) => ApiError::Message(StatusCode::FORBIDDEN, m),
            RegistryError::BadAddress(m) => ApiError::Message(StatusCode::BAD_REQUEST, m),
            RegistryError::Busy(m) => ApiError::Message(StatusCode::SERVICE_UNAVAILABLE, m),
            RegistryError::Store(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = match self {
            ApiError::Locked(holder) => {
                (status, [(header::CONTENT_TYPE, "application/json")], holder).into_response()
            }
            ApiError::Message(status, message) => {
                // Every 5xx with its cause, inside the request's span (its id): the access line
                // alone says only the status.
                if status.is_server_error() {
                    tracing::warn!(status = status.as_u16(), error = %message, "answered with an error");
                }
                let body = serde_json::json!({ "error": message });
                (status, axum::Json(body)).into_response()
            }
        };
        let headers = response.headers_mut();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"gitstate\""),
            );
        }
        response
    }
}
