//! What the node says about itself: liveness, OpenWOP discovery, this document, the handoff
//! schemas (public), and its metrics and identity (operator).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use skillbox_skill::openwop::{RETURN_SCHEMA, RETURN_SCHEMA_PATH, TASK_SCHEMA, TASK_SCHEMA_PATH};

use super::bodies::*;
use super::extract::blocking;
use super::{ApiError, AppState, Shared};
use crate::metrics::Gauges;

impl Shared {
    /// The metrics in the OpenMetrics text format, the store's and the network's gauges read
    /// now (`GET /metrics`; the dashboard renders the same text).
    pub async fn metrics_text(self: &Arc<Self>) -> Result<String, ApiError> {
        let (skills, sources) = (self.skills.clone(), self.sources.clone());
        let store = self.calls.get().map(|c| c.store().clone());
        let mut gauges = blocking(move || {
            let list = skills.list()?;
            let written =
                store
                    .as_ref()
                    .map(|s| s.write_stats())
                    .unwrap_or(crate::store::WriteStats {
                        writes: 0,
                        commits: 0,
                    });
            Ok(Gauges {
                skills: list.len() as u64,
                skills_offered: list.iter().filter(|s| s.offered).count() as u64,
                sources: sources.count()?,
                store_writes: written.writes,
                store_commits: written.commits,
                calls: match store {
                    Some(store) => crate::calls::records::counts_by_state(&store)?,
                    None => Vec::new(),
                },
                ..Gauges::default()
            })
        })
        .await?;
        if let Some(h) = self.peers.get() {
            gauges.board = h.with_board(|b, now| b.row_count(now)) as u64;
            gauges.peers = h.peers().await.map(|p| p.len() as u64).unwrap_or(0);
        }
        Ok(self.metrics.render(&gauges))
    }
}

#[utoipa::path(
    get, path = "/healthz",
    summary = "Liveness: the API answers and the store is readable.",
    responses((status = 200, description = "Healthy.", body = Health))
)]
pub(super) async fn healthz(State(s): State<AppState>) -> Result<Json<Health>, ApiError> {
    let skills = s.skills.clone();
    blocking(move || skills.count()).await?;
    Ok(Json(Health { status: "ok" }))
}

#[utoipa::path(
    get, path = "/.well-known/openwop",
    summary = "OpenWOP discovery (a Capabilities document; `agents` at the root and under `capabilities`).",
    responses((status = 200, description = "Capabilities.", body = Capabilities))
)]
pub(super) async fn discovery(State(s): State<AppState>) -> Json<Value> {
    Json(crate::openwop::discovery(s.agents.department_nesting()))
}

#[utoipa::path(
    get, path = "/openapi.json",
    summary = "This document.",
    responses((status = 200, description = "OpenAPI 3.1 document.", body = Object))
)]
pub(super) async fn openapi() -> Json<Value> {
    Json(crate::openapi::document().clone())
}

/// The handoff schemas, each served as published (`application/schema+json`). A row names the
/// route, its path and text, and what the document says of it.
macro_rules! schema_routes {
    ($($name:ident = $path:ident, $text:ident, $summary:literal, $ok:literal;)*) => {$(
        #[utoipa::path(
            get, path = $path,
            summary = $summary,
            responses((status = 200, description = $ok, body = JsonSchema, content_type = "application/schema+json"))
        )]
        pub(super) async fn $name() -> Response {
            ([(header::CONTENT_TYPE, "application/schema+json")], $text).into_response()
        }
    )*};
}

schema_routes! {
    task_schema = TASK_SCHEMA_PATH, TASK_SCHEMA,
        "The skill handoff task schema (`{request, sources}`), JSON Schema 2020-12.", "The task schema.";
    return_schema = RETURN_SCHEMA_PATH, RETURN_SCHEMA,
        "The skill handoff return schema (`{answer, truncated}`), JSON Schema 2020-12.", "The return schema.";
}

// ---- node

#[utoipa::path(
    get, path = "/metrics",
    summary = "Metrics in the OpenMetrics text format (prometheus-client): HTTP requests, calls by side and state, call/box/run latency histograms, skills, sources, board and peer gauges.",
    responses((status = 200, description = "Counters, histograms and gauges.", body = String, content_type = "application/openmetrics-text"))
)]
pub(super) async fn metrics_text(State(s): State<AppState>) -> Result<Response, ApiError> {
    let text = s.metrics_text().await?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

#[utoipa::path(
    get, path = "/node",
    summary = "This node's identity.",
    responses((status = 200, description = "Node identity.", body = NodeInfo))
)]
pub(super) async fn node_info(State(s): State<AppState>) -> Json<NodeInfo> {
    Json(NodeInfo {
        node_id: s.node_id.clone(),
        public_key: s.public_key.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        namespace: s.skills.namespace().to_owned(),
    })
}
