//! What handlers share to read a request: the store on the blocking pool, the query string, the
//! path parameter, the media type and a body under a limit.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use http_body_util::BodyExt;
use serde_json::Value;

use super::{ApiError, Shared};

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("store worker failed: {e}")))?
        .map_err(ApiError::from)
}

/// Parse the query string; a key outside `allowed` is refused by name.
pub(super) fn query(uri: &Uri, allowed: &[&str]) -> Result<BTreeMap<String, String>, ApiError> {
    let Query(q) = Query::<BTreeMap<String, String>>::try_from_uri(uri)
        .map_err(|e| ApiError::validation("query", format!("malformed query string: {e}")))?;
    if let Some(k) = q.keys().find(|k| !allowed.contains(&k.as_str())) {
        let accepted = if allowed.is_empty() {
            "none".to_owned()
        } else {
            allowed.join(", ")
        };
        return Err(ApiError::validation(
            &format!("query.{k}"),
            format!("unknown parameter (accepted: {accepted})"),
        ));
    }
    Ok(q)
}

pub(super) fn path_param(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(v)| v)
        .map_err(|e| ApiError::validation("path", e.body_text()))
}

/// The media type of the request (`text/markdown; charset=utf-8` → `text/markdown`).
pub(super) fn media_type(headers: &HeaderMap) -> Option<String> {
    headers.get(header::CONTENT_TYPE).map(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    })
}

/// Read a body up to `limit` bytes; more is a 413 envelope, whether announced or streamed.
pub(super) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::too_large(limit)),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("reading the request body: {e}"),
        )),
    }
}

/// A JSON request body (roster entries, org charts, skill changes): `application/json` only.
pub(super) async fn json_body(
    s: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    let media = media_type(headers);
    if !matches!(
        media.as_deref(),
        Some("application/json" | "application/merge-patch+json")
    ) {
        return Err(ApiError::unsupported_media_type(
            media.as_deref(),
            &["application/json"],
        ));
    }
    let bytes = read_body(body, headers, s.limits.max_skill_bytes).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::validation("body", format!("malformed JSON: {e}")))
}
