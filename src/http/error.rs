//! The API's one error: every 4xx and 5xx is JSON `{"error", "field", "reason"}`, and the status
//! of an application-layer failure is decided here, in [`status_of`], once.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::ops::{Kind, OpError};

/// The body of every error response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The whole message.
    pub error: String,
    /// The field at fault (`limit`, `payload.function`, `runs[3].params`), if one is.
    pub field: Option<String>,
    /// Why, without the field's name.
    pub reason: String,
}

/// An error answered to a request.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
    /// Seconds a client should wait (429, 503).
    pub retry_after: Option<u64>,
    /// Sent with 401: how to authenticate.
    pub challenge: bool,
}

/// The HTTP status of a kind of failure (the CLI maps the same kinds to exit codes).
pub fn status_of(kind: Kind) -> StatusCode {
    match kind {
        Kind::Usage => StatusCode::BAD_REQUEST,
        Kind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::Conflict => StatusCode::CONFLICT,
        // No catalog, or one that cannot be used: the node's state, not the request's fault.
        Kind::Unavailable | Kind::NoInput => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Config | Kind::Storage => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    /// An error with a status, a field and a reason.
    pub fn new(status: StatusCode, field: Option<&str>, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        let error = match field {
            Some(f) => format!("{f}: {reason}"),
            None => reason.clone(),
        };
        Self {
            status,
            body: ErrorBody {
                error,
                field: field.map(String::from),
                reason,
            },
            retry_after: None,
            challenge: false,
        }
    }

    /// 400: the request is malformed.
    pub fn bad_request(field: Option<&str>, reason: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, field, reason)
    }

    /// 422: a field's value is invalid.
    pub fn invalid(field: &str, reason: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, Some(field), reason)
    }

    /// 401, with a challenge.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Self {
            challenge: true,
            ..Self::new(StatusCode::UNAUTHORIZED, None, reason)
        }
    }

    /// 403.
    pub fn forbidden(reason: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, None, reason)
    }

    /// 503: the node cannot serve now.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, None, reason)
        }
    }
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        // To the CLI a catalog file with errors is configuration (exit 78); here the file is
        // the request's body: bad input, with each error's line and column.
        let status = match e {
            OpError::File { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            _ => status_of(e.kind()),
        };
        let mut reason = e.reason();
        if status.is_server_error() {
            // The cause goes to the log; the body says what happened without internals.
            tracing::error!(error = %e, "request failed");
            if status == StatusCode::INTERNAL_SERVER_ERROR {
                reason = "the catalog failed; the node's log has the cause".into();
            }
        }
        let mut err = Self::new(status, e.field(), reason.trim_end());
        if status == StatusCode::SERVICE_UNAVAILABLE {
            err.retry_after = Some(1);
        }
        err
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.body.error)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        if let Some(s) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, s.to_string()));
        }
        if self.challenge {
            res.insert_header((
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"jobvisor\""),
            ));
        }
        res.json(&self.body)
    }
}

/// An error response for a status an extractor or the router produced without a JSON body.
pub fn for_status(status: StatusCode) -> ApiError {
    let reason = match status {
        StatusCode::NOT_FOUND => {
            "no route for this method and path: see /api/v1/openapi.json".to_string()
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            "this route does not take that method: see /api/v1/openapi.json".to_string()
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            format!("the body is larger than {} bytes", super::BODY_LIMIT)
        }
        other => other
            .canonical_reason()
            .unwrap_or("request refused")
            .to_lowercase(),
    };
    ApiError::new(status, None, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_status_and_bad_input_is_4xx() {
        assert_eq!(status_of(Kind::Invalid), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status_of(Kind::Usage), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(Kind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status_of(Kind::Conflict), StatusCode::CONFLICT);
        assert_eq!(
            status_of(Kind::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status_of(Kind::Storage), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn an_invalid_field_is_named_in_the_body() {
        let e = ApiError::from(OpError::invalid("cron", "bad expression"));
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.body.field.as_deref(), Some("cron"));
        assert_eq!(e.body.error, "cron: bad expression");
    }
}
