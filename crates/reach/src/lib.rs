//! skillbox-reach: skillbox from the agent tools people already use.
//!
//! - [`mcp`]: an MCP server (rmcp) on stdio and at `/mcp` on the node's API: tools
//!   `list_skills`, `apply_skill`, `ask`, `call_status`, `list_sources`, and SEP-2640 skill stubs.
//! - [`a2a`]: an A2A 1.0 agent: the AgentCard and `SendMessage` / `GetTask` / `CancelTask`.
//!
//! One crate for both because they share everything below the wire: the [`backend`] (one trait,
//! in process or over the node's HTTP API), the [`catalog`] of callable board skills with its
//! framing of peers' untrusted text, and the [`guard`] (Host, `Origin`, token, size) in front of
//! both HTTP surfaces. Two crates would need a third for that, or one depending on the other.
//!
//! What this crate never does: serve a skill's body, model or key (it has no way to read one:
//! the node's library API gives it declarations, board rows and call records only); show a
//! peer's text without framing it as untrusted; pass a peer's failure message on (codes only).

pub mod a2a;
pub mod backend;
pub mod catalog;
pub mod guard;
pub mod mcp;
pub mod stub;

use std::net::IpAddr;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use skillbox_node::api::{AppState, Mounts};

use backend::Backend;

/// What the surfaces are allowed, from the node's config.
#[derive(Debug, Clone)]
pub struct ReachSettings {
    /// The API's bind address (loopback unless the human chose otherwise).
    pub bind: Option<IpAddr>,
    /// Largest request text (`calls.max_request_bytes`).
    pub max_request_bytes: usize,
    /// How long a tool call or `SendMessage` waits for its answer.
    pub wait: std::time::Duration,
}

impl ReachSettings {
    pub fn for_state(state: &AppState, bind: Option<IpAddr>) -> ReachSettings {
        ReachSettings {
            bind,
            max_request_bytes: state.calls_max_request,
            wait: std::time::Duration::from_secs(300),
        }
    }
    /// The body limit: the request text plus room for the JSON-RPC envelope around it (JSON
    /// escaping can grow text up to 6×; a request that large is refused by the node anyway).
    fn max_body(&self) -> usize {
        self.max_request_bytes
            .saturating_mul(2)
            .saturating_add(64 * 1024)
    }
}

/// The routes this crate mounts on the node's router: `/mcp`, the A2A card and endpoint, and
/// the catalog and advertised platforms `skillbox mcp` reads over HTTP. All sit behind [`guard::Guard`], which checks the
/// operator token itself (so they are mounted as `public` and answer refusals in JSON-RPC).
pub fn mounts(state: AppState, settings: &ReachSettings) -> Mounts {
    let mcp_guard = guard::Guard::new(settings.bind, settings.max_body(), -32001);
    let a2a_guard = guard::Guard::new(settings.bind, settings.max_body(), a2a::UNAUTHORIZED);
    let mcp = mcp::router(
        state.clone(),
        mcp_guard.clone(),
        mcp::McpSettings {
            wait: settings.wait,
            max_request_bytes: settings.max_request_bytes,
        },
    );
    let a2a = a2a::router(
        state.clone(),
        a2a_guard,
        a2a::A2aSettings {
            wait: settings.wait,
            max_request_bytes: settings.max_request_bytes,
        },
    );
    let catalog: Router<AppState> = Router::new()
        .route(backend::CATALOG_PATH, get(catalog_route))
        .route(
            &format!("{}/{{peer}}", backend::ADVERTISED_PATH),
            get(advertised_route),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            (state, mcp_guard),
            guard::layer,
        ));
    Mounts {
        public: mcp.merge(a2a).merge(catalog),
        operator: Router::new(),
        json_rpc: vec![mcp::PATH, a2a::RPC_PATH],
    }
}

/// `GET /v1/host/skillbox/reach/catalog[?after=C | ?skill=S[&peer=P] | ?only=boxes]`: a page of
/// the callable board skills, the ones a skill argument may name, or none, with this node's
/// boxes ([`catalog::Wanted`]). A query of another shape, or a cursor it did not hand out, is
/// refused in fixed words that quote nothing sent.
async fn catalog_route(
    State(s): State<AppState>,
    pairs: Result<
        axum::extract::Query<Vec<(String, String)>>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Response {
    // The query's pairs in order, repeats kept (`from_query` refuses a key twice); a query the
    // decoder refuses is refused as any other shape, in the same fixed words.
    let wanted = pairs
        .ok()
        .and_then(|axum::extract::Query(pairs)| catalog::Wanted::from_query(pairs));
    let Some(wanted) = wanted else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            Json(serde_json::json!({
                "error": "validation_error",
                "message": "the query is one of after=CURSOR, skill=S (and peer=P), only=boxes"
            })),
        )
            .into_response();
    };
    match backend::InProcess(s).catalog(&wanted).await {
        Ok(c) => Json(c).into_response(),
        Err(e @ backend::BackendError::Refused { status, .. }) => (
            axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_REQUEST),
            Json(serde_json::json!({ "error": e.code(), "message": e.to_string() })),
        )
            .into_response(),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": e.code(), "message": e.to_string() })),
        )
            .into_response(),
    }
}

/// `GET /v1/host/skillbox/reach/advertised/{peer}`: the platforms of the boxes the peer's
/// advert names (public in the advert), `{"platforms": [...]}`: what `skillbox mcp` summarizes
/// a `no_common_box` refusal from. A path that is not a peer id, a peer the board holds no
/// advert of, no peer network: each a fixed refusal ([`backend::AdvertUnread`]) that never
/// echoes the path, which whoever holds the token wrote.
async fn advertised_route(
    State(s): State<AppState>,
    peer: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let read = match peer {
        Ok(axum::extract::Path(peer)) => backend::InProcess(s).advertised_platforms(&peer),
        // Not UTF-8 once decoded (axum's own rejection text would quote it).
        Err(_) => Err(backend::AdvertUnread::NotAPeerId),
    };
    match read {
        Ok(platforms) => Json(serde_json::json!({ "platforms": platforms })).into_response(),
        Err(e) => (
            axum::http::StatusCode::from_u16(e.status())
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
            Json(serde_json::json!({ "error": e.code(), "message": e.to_string() })),
        )
            .into_response(),
    }
}
