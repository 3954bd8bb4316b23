//! The error envelope every route answers with: `{error, message, details?}` (OpenWOP's
//! ErrorEnvelope). Messages come from [`NodeError`]'s and [`CallError`]'s Display, which never
//! carries content; each domain error enum maps to the envelope here, once.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use skillbox_skill::CheckError;
use skillbox_skill::agents::AgentsError;

use crate::calls::CallError;
use crate::error::NodeError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }
    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }
    pub fn validation(field: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "validation_error",
            format!("{field}: {message}"),
        )
        .with_details(json!({ "errors": [{ "path": field, "message": message }] }))
    }
    pub fn unauthenticated() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "missing or wrong bearer token (send `Authorization: Bearer <api.token>`)",
        )
    }
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body is larger than this route's limit of {limit} bytes"),
        )
        .with_details(json!({ "limit": limit }))
    }
    pub fn unsupported_media_type(found: Option<&str>, accepted: &[&str]) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "content type {} is not accepted here; send one of: {}",
                found
                    .map(|f| format!("{f:?}"))
                    .unwrap_or_else(|| "(none)".into()),
                accepted.join(", ")
            ),
        )
        .with_details(json!({ "accepted": accepted }))
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }
}

impl From<NodeError> for ApiError {
    fn from(err: NodeError) -> ApiError {
        match err {
            NodeError::Invalid { field, message } => ApiError::validation(&field, message),
            NodeError::NotFound { .. } => ApiError::not_found(err.to_string()),
            NodeError::Agents(e) => {
                let errors = match &e {
                    AgentsError::Schema { issues } => json!(issues),
                    other => json!([{ "path": "body", "message": other.to_string() }]),
                };
                ApiError::new(StatusCode::BAD_REQUEST, "validation_error", e.to_string())
                    .with_details(json!({ "reason": e.reason(), "errors": errors }))
            }
            NodeError::Forbidden(m) => ApiError::forbidden(m),
            NodeError::NotStakeable { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "source_not_shareable",
                err.to_string(),
            ),
            NodeError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            NodeError::Skill(CheckError::Document(doc)) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "validation_error",
                format!("invalid SKILL.md: {doc}"),
            )
            .with_details(json!({ "errors": doc.problems })),
            NodeError::Skill(CheckError::Manifest { issues, located }) => schema_failure(
                "the skill's OpenWOP AgentManifest fails the schema",
                &issues,
            )
            .with_details(json!({ "errors": issues, "located": located })),
            NodeError::Pack(issues) => schema_failure("the pack fails the OpenWOP schema", &issues)
                .with_details(json!({ "errors": issues })),
            other => {
                tracing::error!(error = %other, "request failed");
                ApiError::internal(other.to_string())
            }
        }
    }
}

/// A manifest or pack the OpenWOP schema refuses (`pack_validation_failed`): `what` and every
/// issue, one message for both.
fn schema_failure(what: &str, issues: &[skillbox_skill::SchemaIssue]) -> ApiError {
    let issues: Vec<String> = issues.iter().map(ToString::to_string).collect();
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "pack_validation_failed",
        format!("{what}: {}", issues.join("; ")),
    )
}

/// A call's refusal: its own status and closed code; a selection or pick failure carries its
/// public facts as `details`, and `no_common_box` the peer whose advert the call was tried on
/// (`details.peer`, a peer id): `POST /intents/skill` chose that peer itself, and an agent
/// surface over this API (`skillbox mcp`) reads that advert's box platforms from it instead of
/// from the message, which quotes the advert.
impl From<CallError> for ApiError {
    fn from(e: CallError) -> ApiError {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let details = match &e {
            CallError::Selection(s) => serde_json::to_value(s).ok(),
            CallError::NoPick(p) => serde_json::to_value(p).ok(),
            CallError::NoCommonBox { peer, .. } => Some(json!({ "peer": peer })),
            _ => None,
        };
        let err = ApiError::new(status, e.code(), e.to_string());
        match details {
            Some(d) => err.with_details(d),
            None => err,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.code, "message": self.message });
        if let Some(details) = self.details {
            body["details"] = details;
        }
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
