//! The node's HTTP API (§10): loopback, bearer token, JSON error envelope everywhere.
//!
//! Routes are added through [`Book`]: each handler carries its `#[utoipa::path]` (method, path,
//! parameters, bodies, responses) and is registered with `utoipa_axum::routes!`, so the router
//! and the OpenAPI document ([`crate::openapi`]) come from the same declaration. The body types
//! are the ones the handlers serialize ([`bodies`]).
//! Store work runs on the blocking pool: handlers never hold the async threads on SQLite.
//!
//! This file is the hub (the book of routes, the router, what surfaces mount); the handlers live
//! by job in the modules below, and what they share to read a request in [`extract`].

mod about;
mod agents;
pub mod bodies;
mod calls;
mod dashboard;
pub mod error;
mod extract;
mod guard;
mod ledger;
mod peers;
mod policy;
mod shared;
mod skills;
mod sources;

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use dashboard::{CODE_LIFETIME, SIGNIN_PATH, SigninCodes, make_room};
pub use error::ApiError;
pub use guard::{
    AGENT_TOKEN_REFUSED, HostGuardState, OPERATOR_TOKEN_OVER_TCP, OverApiSocket, bearer_token,
    host_guard, mark_api_socket,
};
use guard::{label_route, method_not_allowed, no_route, observe, require_operator, require_token};
pub use shared::{Access, Shared};
pub use skills::SKILL_MEDIA_TYPES;

pub type AppState = Arc<Shared>;

/// A path segment or query value for this API, percent-encoded (everything but the unreserved
/// `A-Z a-z 0-9 - _ . ~`): what clients (the CLI, the dashboard) put in the URLs they build.
pub fn url_component(s: &str) -> String {
    const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, COMPONENT).to_string()
}

/// Who reaches a group of routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Without a token.
    Public,
    /// The operator's token only.
    Operator,
    /// Any valid token (the OpenWOP agent surfaces), answering for the caller's owner only.
    Tenant,
}

/// A route as the router has it and as the OpenAPI document names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePath {
    /// The axum path (`/sources/{*name}`).
    pub router: String,
    /// The OpenAPI path (`/sources/{name}`).
    pub openapi: String,
    /// Reachable without a token.
    pub public: bool,
    /// Reachable with a tenant token (the OpenWOP agent surfaces); otherwise, when not public,
    /// the operator's token only.
    pub tenant: bool,
}

/// The node's routes by who reaches them, each group with the OpenAPI paths of its handlers.
pub(crate) struct Book {
    pub(crate) public: OpenApiRouter<AppState>,
    pub(crate) operator: OpenApiRouter<AppState>,
    pub(crate) tenant: OpenApiRouter<AppState>,
}

pub(crate) fn book() -> Book {
    let public = OpenApiRouter::new()
        .routes(routes!(about::healthz))
        .routes(routes!(about::discovery))
        .routes(routes!(about::openapi))
        .routes(routes!(about::task_schema))
        .routes(routes!(about::return_schema));
    let tenant = OpenApiRouter::new()
        .routes(routes!(agents::list_agents))
        .routes(routes!(agents::get_agent))
        .routes(routes!(agents::list_roster))
        .routes(routes!(agents::get_roster_entry))
        .routes(routes!(agents::get_org_chart))
        .routes(routes!(agents::get_department))
        .routes(routes!(agents::put_roster, agents::delete_roster))
        .routes(routes!(agents::put_org_chart));
    let operator = OpenApiRouter::new()
        .routes(routes!(about::metrics_text))
        .routes(routes!(about::node_info))
        .routes(routes!(dashboard::issue_signin_code))
        .routes(routes!(skills::list_skills, skills::post_skill))
        .routes(routes!(
            skills::get_skill,
            skills::patch_skill,
            skills::delete_skill
        ))
        .routes(routes!(peers::board))
        .routes(routes!(peers::list_peers, peers::add_peer))
        .routes(routes!(calls::list_calls, calls::post_call))
        .routes(routes!(calls::get_call))
        .routes(routes!(calls::cancel_call))
        .routes(routes!(calls::intent_skill))
        .routes(routes!(calls::list_approvals))
        .routes(routes!(calls::decide_approval))
        .routes(routes!(policy::get_policy, policy::put_policy))
        .routes(routes!(ledger::get_ledger))
        .routes(routes!(ledger::verify_ledger))
        .routes(routes!(sources::list_sources))
        .routes(routes!(
            sources::get_source,
            sources::put_source,
            sources::patch_source,
            sources::delete_source
        ));
    Book {
        public,
        operator,
        tenant,
    }
}

/// The paths the router serves and who reaches them (for the OpenAPI agreement tests).
pub fn route_paths() -> Vec<RoutePath> {
    let b = book();
    let mut out = Vec::new();
    for (reach, group) in [
        (Reach::Public, &b.public),
        (Reach::Operator, &b.operator),
        (Reach::Tenant, &b.tenant),
    ] {
        for path in group.get_openapi().paths.paths.keys() {
            out.push(RoutePath {
                router: path.clone(),
                openapi: crate::openapi::openapi_path(path),
                public: reach == Reach::Public,
                tenant: reach == Reach::Tenant,
            });
        }
    }
    out
}

/// Routes a surface crate (MCP, A2A, the web dashboard) mounts beside the node's own, over the
/// node's library API. `operator` routes sit behind the operator's bearer token like the node's
/// own management routes; `public` routes do their own authentication (a login page, a cookie)
/// through [`Shared::authorize`]. Neither may carry a fallback: the node's answers 404/405.
///
/// `json_rpc` names the mounted paths that speak JSON-RPC (MCP, A2A): the node's own refusals in
/// front of every route (a foreign `Host` or `Origin`) answer there with a JSON-RPC error body,
/// so a client of that protocol sees an error it can read.
#[derive(Default)]
pub struct Mounts {
    pub public: Router<AppState>,
    pub operator: Router<AppState>,
    pub json_rpc: Vec<&'static str>,
}

impl Mounts {
    /// Both surfaces' routes (their paths must not overlap: axum refuses that at start).
    pub fn merge(mut self, other: Mounts) -> Mounts {
        self.public = self.public.merge(other.public);
        self.operator = self.operator.merge(other.operator);
        self.json_rpc.extend(other.json_rpc);
        self
    }
}

/// The full router over `state`.
pub fn router(state: AppState) -> Router {
    router_with(state, Mounts::default())
}

/// The full router over `state`, with the surfaces in `mounts`.
pub fn router_with(state: AppState, mounts: Mounts) -> Router {
    let b = book();
    let (public, _) = b.public.split_for_parts();
    let (operator, _) = b.operator.split_for_parts();
    let (tenant, _) = b.tenant.split_for_parts();
    let public = public.merge(mounts.public);
    let operator = operator.merge(mounts.operator);
    // Layers run outside in: the token is checked first, then (operator routes) its reach.
    let protected = operator
        .route_layer(middleware::from_fn(require_operator))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let tenant = tenant.route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    public
        .merge(protected)
        .merge(tenant)
        .route_layer(middleware::from_fn(label_route))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}
