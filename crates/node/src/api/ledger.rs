//! `GET /ledger` and `GET /ledger/verify`: the disclosure ledger, filtered and exported (JSON,
//! JSON Lines, CSV), and its check against the node key. Thin handlers over [`crate::ledger`].

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::calls::calls;
use super::{ApiError, AppState, query};
use crate::ledger::{self, Filter};

fn bad(field: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::validation(field, e.to_string())
}

pub(super) async fn get_ledger(State(s): State<AppState>, uri: Uri) -> Result<Response, ApiError> {
    let c = calls(&s)?;
    let q = query(
        &uri,
        &["source", "peer", "call", "since", "limit", "format"],
    )?;
    let since_ms = q
        .get("since")
        .map(|v| ledger::parse_since(v, skillbox_peers::now_ms()))
        .transpose()
        .map_err(|e| bad("query.since", e))?;
    let limit = q
        .get("limit")
        .map(|v| v.parse::<usize>())
        .transpose()
        .map_err(|_| bad("query.limit", "must be a whole number"))?;
    let filter = Filter {
        source: q.get("source").cloned(),
        peer: q.get("peer").cloned(),
        call: q.get("call").cloned(),
        since_ms,
        limit,
    };
    let lines = c.ledger(filter).await?;
    let text = |content_type: &'static str, body: String| {
        (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    let internal = |e: crate::error::NodeError| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    };
    match q.get("format").map(String::as_str).unwrap_or("json") {
        "json" => Ok(Json(json!({
            "entries": lines,
            "total": lines.len(),
            "nodeKey": c.node_key_hex(),
        }))
        .into_response()),
        "jsonl" => Ok(text(
            "application/jsonl",
            ledger::to_jsonl(&lines).map_err(internal)?,
        )),
        "csv" => Ok(text(
            "text/csv; charset=utf-8",
            ledger::to_csv(&lines).map_err(internal)?,
        )),
        other => Err(bad(
            "query.format",
            format!("{other:?} is not json, jsonl or csv"),
        )),
    }
}

pub(super) async fn verify_ledger(
    State(s): State<AppState>,
) -> Result<Json<ledger::Verdict>, ApiError> {
    let c = calls(&s)?;
    Ok(Json(c.verify_ledger().await?))
}
