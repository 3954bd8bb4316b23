//! The node's HTTP API (§10): loopback, bearer token, JSON error envelope everywhere.
//!
//! Routes are added through [`Book`]: each handler carries its `#[utoipa::path]` (method, path,
//! parameters, bodies, responses) and is registered with `utoipa_axum::routes!`, so the router
//! and the OpenAPI document ([`crate::openapi`]) come from the same declaration. The body types
//! are the ones the handlers serialize ([`bodies`]).
//! Store work runs on the blocking pool: handlers never hold the async threads on SQLite.

pub mod bodies;
mod calls;
pub mod error;
mod ledger;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Extension;
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use skillbox_skill::openwop::{RETURN_SCHEMA, RETURN_SCHEMA_PATH, TASK_SCHEMA, TASK_SCHEMA_PATH};

use crate::metrics::{Gauges, Metrics};
use bodies::*;
pub use error::ApiError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::agents::Agents;
use crate::config::{Limits, TenantsConfig};
use crate::peering::SharedBoard;
use crate::skills::SkillDetail;
use crate::skills::Skills;
use crate::sources::{self, SourceKind, SourceMeta, Sources};
use crate::tenants::{Principal, Tokens};

/// Media types `POST /skills` accepts for a SKILL.md.
pub const SKILL_MEDIA_TYPES: &[&str] = &["text/markdown", "text/plain", "text/x-markdown"];
/// Everything `POST /skills` takes: a SKILL.md, or a pack.json / AgentManifest as JSON.
const ACCEPTED_ON_POST_SKILLS: &[&str] = &[
    "text/markdown",
    "text/plain",
    "text/x-markdown",
    "application/json",
];

/// What every handler shares.
pub struct Shared {
    pub sources: Sources,
    pub skills: Skills,
    pub agents: Agents,
    pub limits: Limits,
    pub node_id: String,
    pub public_key: String,
    pub metrics: Arc<Metrics>,
    /// The running peer network, once started (`GET /peers`, `POST /peers`).
    pub peers: OnceLock<skillbox_peers::PeersHandle>,
    /// What `GET /board` reads: the network's board, or one fed in-process (benches).
    pub board: OnceLock<SharedBoard>,
    /// Poked after anything that can change the offered set (skills, sources), so the advert
    /// goes out at once rather than at the next interval.
    pub offer_changed: tokio::sync::Notify,
    /// The calls driver, once the peer network runs.
    pub calls: OnceLock<crate::calls::Calls>,
    /// `calls.max_request_bytes`, for the body limit of `POST /calls`.
    pub calls_max_request: usize,
    tokens: RwLock<Tokens>,
    /// `config.toml`, re-read for tenant tokens when an unknown token arrives and the file
    /// changed since (so `skillbox token add` works against a running node).
    config_path: Option<PathBuf>,
    config_stamp: Mutex<Option<(std::time::SystemTime, u64)>>,
    /// `api.token`, whose identity (inode, size, times) is checked on every authorization:
    /// `skillbox token rotate` renames a new file over it, and from the next request on only the
    /// new token is the operator's (a stat per request; no API call carries the new token).
    token_path: Option<PathBuf>,
    /// The identity of `api.token` when last read (`None`: not read yet).
    token_seen: Mutex<Option<Option<TokenStamp>>>,
    /// Bumped each time the operator's token changes: what a dashboard session is bound to.
    operator_epoch: std::sync::atomic::AtomicU64,
}

/// How [`Shared`] learns who may call: the operator's token and the config's tenants.
pub struct Access<'a> {
    pub operator_token: &'a str,
    pub tenants: &'a TenantsConfig,
    /// Where the tenants came from, to pick up tokens added while the node runs.
    pub config_path: Option<PathBuf>,
    /// Where the operator's token lives, to follow `skillbox token rotate` while the node runs
    /// (`None`: the token given is the operator's for good).
    pub token_path: Option<PathBuf>,
}

impl Shared {
    pub fn new(
        sources: Sources,
        skills: Skills,
        agents: Agents,
        limits: Limits,
        node_id: String,
        public_key: String,
        access: Access<'_>,
    ) -> Self {
        let stamp = access.config_path.as_deref().and_then(file_stamp);
        Shared {
            sources,
            skills,
            agents,
            limits,
            node_id,
            public_key,
            metrics: Arc::new(Metrics::default()),
            peers: OnceLock::new(),
            board: OnceLock::new(),
            offer_changed: tokio::sync::Notify::new(),
            calls: OnceLock::new(),
            calls_max_request: 64 * 1024,
            tokens: RwLock::new(Tokens::new(access.operator_token, access.tenants)),
            config_path: access.config_path,
            config_stamp: Mutex::new(stamp),
            token_path: access.token_path,
            token_seen: Mutex::new(None),
            operator_epoch: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Which generation of the operator's token is current: a number that changes whenever
    /// `api.token` is replaced (checked now). A dashboard session started under one generation
    /// ends when it changes.
    pub fn operator_epoch(&self) -> u64 {
        self.follow_token_file();
        self.operator_epoch
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Re-read `api.token` if it is not the file last read. A file that changed and does not
    /// load leaves no operator token at all (fail closed: the old one was meant to end).
    fn follow_token_file(&self) {
        let Some(path) = self.token_path.as_deref() else {
            return;
        };
        // Held across the stat and the reload, so a request racing a rotation waits for it
        // rather than passing on the old token (or reloading from a stale stat).
        let mut seen = self.token_seen.lock().unwrap_or_else(|p| p.into_inner());
        let now = token_stamp(path);
        if *seen == Some(now) {
            return;
        }
        *seen = Some(now);
        let loaded = crate::datadir::read_api_token(path);
        let mut tokens = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        let changed = match &loaded {
            Ok(token) => tokens.set_operator(Some(token)),
            Err(e) => {
                tracing::warn!(error = %e, "api.token changed and does not load: no operator token is accepted until it does");
                tokens.set_operator(None)
            }
        };
        drop(tokens);
        // A file touched or rewritten with the same token signs nobody out.
        if changed {
            tracing::info!(
                "api.token replaced: the old operator token and every dashboard session end"
            );
            self.operator_epoch
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Who a presented bearer token stands for (`None`: nobody). Surfaces that authenticate on
    /// their own (a dashboard's cookie) call this with the token they hold.
    pub fn authorize(&self, presented: &str) -> Option<Principal> {
        self.principal(presented)
    }

    /// Who a presented token stands for. An unknown token re-reads the config's tenants once
    /// the file has changed (a token added by `skillbox token add` while the node runs).
    fn principal(&self, presented: &str) -> Option<Principal> {
        self.follow_token_file();
        let known = self
            .tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .principal(presented);
        if known.is_some() {
            return known;
        }
        let path = self.config_path.as_deref()?;
        let now = file_stamp(path);
        {
            let mut stamp = self.config_stamp.lock().unwrap_or_else(|p| p.into_inner());
            if now.is_none() || *stamp == now {
                return None;
            }
            *stamp = now;
        }
        match crate::config::Config::load(path) {
            Ok(config) => {
                let mut tokens = self.tokens.write().unwrap_or_else(|p| p.into_inner());
                tokens.set_tenants(&config.tenants);
                tracing::info!(
                    tokens = config.tenants.tokens.len(),
                    "tenant tokens reloaded"
                );
                tokens.principal(presented)
            }
            Err(e) => {
                tracing::warn!(error = %e, "config changed but does not load; tenant tokens kept");
                None
            }
        }
    }
}

/// What tells one `api.token` file from another: a rename gives a new inode, an edit in place
/// new times or size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TokenStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn token_stamp(path: &std::path::Path) -> Option<TokenStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(TokenStamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

fn file_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

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
        .routes(routes!(healthz))
        .routes(routes!(discovery))
        .routes(routes!(openapi))
        .routes(routes!(task_schema))
        .routes(routes!(return_schema));
    let tenant = OpenApiRouter::new()
        .routes(routes!(list_agents))
        .routes(routes!(get_agent))
        .routes(routes!(list_roster))
        .routes(routes!(get_roster_entry))
        .routes(routes!(get_org_chart))
        .routes(routes!(get_department))
        .routes(routes!(put_roster, delete_roster))
        .routes(routes!(put_org_chart));
    let operator = OpenApiRouter::new()
        .routes(routes!(metrics_text))
        .routes(routes!(node_info))
        .routes(routes!(list_skills, post_skill))
        .routes(routes!(get_skill, patch_skill, delete_skill))
        .routes(routes!(board))
        .routes(routes!(list_peers, add_peer))
        .routes(routes!(calls::list_calls, calls::post_call))
        .routes(routes!(calls::get_call))
        .routes(routes!(calls::cancel_call))
        .routes(routes!(calls::intent_skill))
        .routes(routes!(calls::list_approvals))
        .routes(routes!(calls::decide_approval))
        .routes(routes!(calls::get_policy, calls::put_policy))
        .routes(routes!(ledger::get_ledger))
        .routes(routes!(ledger::verify_ledger))
        .routes(routes!(list_sources))
        .routes(routes!(get_source, put_source, patch_source, delete_source));
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

// ---- middleware

/// Refuse a request whose `Host` is not this API's (421 `host_not_allowed`) or whose `Origin` is
/// another site's (403 `origin_not_allowed`), before anything else looks at it.
/// On a [`Mounts::json_rpc`] path the refusal is a JSON-RPC error (`-32600`, no id: the request
/// was not read) carrying the same code.
pub async fn host_guard(
    State(g): State<Arc<HostGuardState>>,
    req: Request,
    next: Next,
) -> Response {
    let Err(e) = g.hosts.check(req.headers()) else {
        return next.run(req).await;
    };
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::FORBIDDEN);
    if g.json_rpc.iter().any(|p| *p == req.uri().path()) {
        let body = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": { "code": -32600, "message": e.fixed_message(), "data": { "code": e.code() } },
        });
        return (status, Json(body)).into_response();
    }
    ApiError::new(status, e.code(), e.fixed_message()).into_response()
}

/// What [`host_guard`] checks, and where it answers in JSON-RPC.
pub struct HostGuardState {
    pub hosts: skillbox_jc::server::HostGuard,
    pub json_rpc: Vec<&'static str>,
}

#[derive(Clone)]
struct RouteLabel(String);

async fn label_route(req: Request, next: Next) -> Response {
    let label = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let mut resp = next.run(req).await;
    if let Some(label) = label {
        resp.extensions_mut().insert(RouteLabel(label));
    }
    resp
}

/// The token of an `Authorization: Bearer …` header, if there is one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

async fn require_token(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    match bearer_token(req.headers()).and_then(|t| s.principal(t)) {
        Some(p) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        None => ApiError::unauthenticated().into_response(),
    }
}

/// Operator routes: skills, sources, peers, the board, metrics. A tenant token reaches only
/// the agent surfaces.
async fn require_operator(req: Request, next: Next) -> Response {
    match req.extensions().get::<Principal>() {
        Some(p) if p.operator => next.run(req).await,
        Some(p) => ApiError::forbidden(format!(
            "this token belongs to tenant {:?} and reaches only the OpenWOP agent surfaces (/v1/agents…, /v1/host/skillbox/…); {} is the node operator's",
            p.owner.tenant_id,
            req.uri().path()
        ))
        .into_response(),
        None => ApiError::unauthenticated().into_response(),
    }
}

/// Count and log every request by route template; never the raw path, a body or a header.
async fn observe(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let method = match *req.method() {
        Method::GET
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::HEAD
        | Method::PATCH
        | Method::OPTIONS => req.method().as_str().to_owned(),
        _ => "OTHER".to_owned(),
    };
    let start = Instant::now();
    let resp = next.run(req).await;
    let route = resp
        .extensions()
        .get::<RouteLabel>()
        .map(|r| r.0.clone())
        .unwrap_or_else(|| "unmatched".into());
    let status = resp.status().as_u16();
    s.metrics.record(&route, &method, status);
    let micros = start.elapsed().as_micros() as u64;
    if status >= 500 {
        tracing::warn!(%method, %route, status, micros, "request");
    } else {
        tracing::debug!(%method, %route, status, micros, "request");
    }
    resp
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

// ---- helpers

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

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("store worker failed: {e}")))?
        .map_err(ApiError::from)
}

/// Parse the query string; a key outside `allowed` is refused by name.
fn query(uri: &Uri, allowed: &[&str]) -> Result<BTreeMap<String, String>, ApiError> {
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

fn path_param(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(v)| v)
        .map_err(|e| ApiError::validation("path", e.body_text()))
}

/// The media type of the request (`text/markdown; charset=utf-8` → `text/markdown`).
fn media_type(headers: &HeaderMap) -> Option<String> {
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
async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, ApiError> {
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

// ---- public routes

#[utoipa::path(
    get, path = "/healthz",
    summary = "Liveness: the API answers and the store is readable.",
    responses((status = 200, description = "Healthy.", body = Health))
)]
async fn healthz(State(s): State<AppState>) -> Result<Json<Health>, ApiError> {
    let skills = s.skills.clone();
    blocking(move || skills.count()).await?;
    Ok(Json(Health { status: "ok" }))
}

#[utoipa::path(
    get, path = "/.well-known/openwop",
    summary = "OpenWOP discovery (a Capabilities document; `agents` at the root and under `capabilities`).",
    responses((status = 200, description = "Capabilities.", body = Capabilities))
)]
async fn discovery(State(s): State<AppState>) -> Json<Value> {
    Json(crate::openwop::discovery(s.agents.department_nesting()))
}

#[utoipa::path(
    get, path = "/openapi.json",
    summary = "This document.",
    responses((status = 200, description = "OpenAPI 3.1 document.", body = Object))
)]
async fn openapi() -> Json<Value> {
    Json(crate::openapi::document().clone())
}

fn schema_response(text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, "application/schema+json")], text).into_response()
}

#[utoipa::path(
    get, path = TASK_SCHEMA_PATH,
    summary = "The skill handoff task schema (`{request, sources}`), JSON Schema 2020-12.",
    responses((status = 200, description = "The task schema.", body = JsonSchema, content_type = "application/schema+json"))
)]
async fn task_schema() -> Response {
    schema_response(TASK_SCHEMA)
}

#[utoipa::path(
    get, path = RETURN_SCHEMA_PATH,
    summary = "The skill handoff return schema (`{answer, truncated}`), JSON Schema 2020-12.",
    responses((status = 200, description = "The return schema.", body = JsonSchema, content_type = "application/schema+json"))
)]
async fn return_schema() -> Response {
    schema_response(RETURN_SCHEMA)
}

// ---- node

#[utoipa::path(
    get, path = "/metrics",
    summary = "Metrics in the OpenMetrics text format (prometheus-client): HTTP requests, calls by side and state, call/box/run latency histograms, skills, sources, board and peer gauges.",
    responses((status = 200, description = "Counters, histograms and gauges.", body = String, content_type = "application/openmetrics-text"))
)]
async fn metrics_text(State(s): State<AppState>) -> Result<Response, ApiError> {
    let text = s.metrics_text().await?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

#[utoipa::path(
    get, path = "/node",
    summary = "This node's identity.",
    responses((status = 200, description = "Node identity.", body = NodeInfo))
)]
async fn node_info(State(s): State<AppState>) -> Json<NodeInfo> {
    Json(NodeInfo {
        node_id: s.node_id.clone(),
        public_key: s.public_key.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        namespace: s.skills.namespace().to_owned(),
    })
}

// ---- OpenWOP agents

/// Every installed manifest's inventory entry, each with the caller's `roster[]` projection.
fn entries(s: &Shared, owner: &skillbox_skill::agents::Owner) -> crate::Result<Vec<Value>> {
    let ns = s.skills.namespace().to_owned();
    let mut roster = s.agents.roster_projection(owner)?;
    let mut out: Vec<Value> = s
        .skills
        .manifests()?
        .iter()
        .map(|(manifest, digest)| crate::openwop::inventory_entry(manifest, &ns, digest))
        .collect();
    out.extend(
        s.agents
            .pack_agents()?
            .iter()
            .map(|a| crate::openwop::inventory_entry(&a.manifest, &a.pack_name, &a.pack_version)),
    );
    for e in &mut out {
        let id = e["agentId"].as_str().unwrap_or_default().to_owned();
        e["roster"] = Value::Array(roster.remove(&id).unwrap_or_default());
    }
    Ok(out)
}

#[utoipa::path(
    get, path = "/v1/agents",
    summary = "OpenWOP agent inventory: every declared skill and pack agent as an AgentInventoryEntry, agentId-sorted, each with the caller's `roster[]` instances of it.",
    responses((status = 200, description = "AgentInventoryResponse.", body = AgentInventory))
)]
async fn list_agents(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Json<Value>, ApiError> {
    let list = blocking(move || entries(&s, &p.owner)).await?;
    Ok(Json(crate::openwop::inventory(list)))
}

#[utoipa::path(
    get, path = "/v1/agents/{agentId}",
    summary = "One agent's inventory entry.",
    params(("agentId" = String, Path, description = "The OpenWOP agentId (`<namespace>.<skill>`).")),
    responses(
        (status = 200, description = "AgentInventoryEntry.", body = AgentInventoryEntry),
        (status = 404, description = "No such agent (`not_found`)."),
    )
)]
async fn get_agent(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = path_param(id)?;
    let found = {
        let id = id.clone();
        blocking(move || {
            let entry = match s.skills.record_by_agent_id(&id)? {
                Some(r) => Some(crate::openwop::inventory_entry(
                    &r.manifest,
                    s.skills.namespace(),
                    &r.digest,
                )),
                None => s.agents.pack_agent(&id)?.map(|a| {
                    crate::openwop::inventory_entry(&a.manifest, &a.pack_name, &a.pack_version)
                }),
            };
            Ok(match entry {
                Some(mut e) => {
                    let mine = s.agents.roster_projection(&p.owner)?.remove(&id);
                    e["roster"] = Value::Array(mine.unwrap_or_default());
                    Some(e)
                }
                None => None,
            })
        })
        .await?
    };
    found
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?} not found")))
}

/// A JSON request body (roster entries, org charts, skill changes): `application/json` only.
async fn json_body(s: &Shared, headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
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

#[utoipa::path(
    get, path = "/v1/agents/roster",
    summary = "The caller's standing roster (RFC 0086): rosterId-sorted, `total == roster.length`.",
    responses(
        (status = 200, description = "AgentRosterResponse.", body = AgentRoster),
        (status = 400, description = "Unknown query parameter (`validation_error`)."),
    )
)]
async fn list_roster(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    query(&uri, &[])?;
    let roster = blocking(move || s.agents.roster(&p.owner)).await?;
    let total = roster.len();
    Ok(Json(json!({ "roster": roster, "total": total })))
}

fn roster_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("roster entry {id:?} not found"))
}

#[utoipa::path(
    get, path = "/v1/agents/roster/{rosterId}",
    summary = "One of the caller's roster entries.",
    params(("rosterId" = String, Path, description = "A `host:<id>` roster id.")),
    responses(
        (status = 200, description = "AgentRosterEntry.", body = AgentRosterEntry),
        (status = 404, description = "No such entry for this tenant (`not_found`) — another tenant's answers the same."),
    )
)]
async fn get_roster_entry(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = path_param(id)?;
    let i = id.clone();
    match blocking(move || s.agents.roster_entry(&p.owner, &i)).await? {
        Some(e) => Ok(Json(json!(e))),
        None => Err(roster_not_found(&id)),
    }
}

#[utoipa::path(
    put, path = "/v1/host/skillbox/roster/{rosterId}",
    summary = "Write one of the caller's roster entries: the schema, rosterId path = body, owner = the caller's, agentRef an installed manifest that is not a skill, version xor channel, unique workflows.",
    params(("rosterId" = String, Path, description = "The `host:<id>` roster id; must equal the body's.")),
    request_body = AgentRosterEntry,
    responses(
        (status = 201, description = "Created.", body = AgentRosterEntry),
        (status = 200, description = "Replaced.", body = AgentRosterEntry),
        (status = 400, description = "Refused, nothing stored (`validation_error`; `details.reason` names the rule: schema, roster_id_mismatch, tenant_mismatch, unknown_agent, skill_in_roster, duplicate_department, unknown_parent_department, nesting_disabled, department_cycle, duplicate_role, duplicate_member, unknown_roster_entry, unknown_department, unknown_role, self_report, unknown_manager, reports_to_cycle; `details.errors` the schema errors)."),
        (status = 413, description = "Body too large (`payload_too_large`)."),
        (status = 415, description = "Not application/json (`unsupported_media_type`)."),
    )
)]
async fn put_roster(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = path_param(id)?;
    let doc = json_body(&s, &headers, body).await?;
    let (entry, created) = blocking(move || s.agents.put_roster(&p.owner, &id, &doc)).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!(entry))).into_response())
}

#[utoipa::path(
    delete, path = "/v1/host/skillbox/roster/{rosterId}",
    summary = "Remove one of the caller's roster entries.",
    params(("rosterId" = String, Path, description = "The `host:<id>` roster id.")),
    responses(
        (status = 204, description = "Removed."),
        (status = 404, description = "No such entry for this tenant (`not_found`)."),
        (status = 409, description = "The entry is a member of the caller's org chart (`conflict`)."),
    )
)]
async fn delete_roster(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let id = path_param(id)?;
    let i = id.clone();
    if blocking(move || s.agents.delete_roster(&p.owner, &i)).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(roster_not_found(&id))
    }
}

#[utoipa::path(
    get, path = "/v1/agents/org-chart",
    summary = "The caller's org chart (RFC 0087), exactly the AgentOrgChart shape; empty until one is written.",
    responses(
        (status = 200, description = "AgentOrgChart.", body = AgentOrgChart),
        (status = 400, description = "Unknown query parameter (`validation_error`)."),
    )
)]
async fn get_org_chart(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    query(&uri, &[])?;
    let chart = blocking(move || s.agents.chart(&p.owner)).await?;
    Ok(Json(json!(chart)))
}

#[utoipa::path(
    put, path = "/v1/host/skillbox/org-chart",
    summary = "Write the caller's whole org chart: closed schema (no authority-bearing field), members are the caller's roster entries, departments and roles exist, reportsTo names a member and is acyclic, departments nest as a tree (refused when nesting is off).",
    request_body = AgentOrgChart,
    responses(
        (status = 201, description = "Created.", body = AgentOrgChart),
        (status = 200, description = "Replaced.", body = AgentOrgChart),
        (status = 400, description = "Refused, nothing stored (`validation_error`; `details.reason` names the rule: schema, roster_id_mismatch, tenant_mismatch, unknown_agent, skill_in_roster, duplicate_department, unknown_parent_department, nesting_disabled, department_cycle, duplicate_role, duplicate_member, unknown_roster_entry, unknown_department, unknown_role, self_report, unknown_manager, reports_to_cycle; `details.errors` the schema errors)."),
        (status = 413, description = "Body too large (`payload_too_large`)."),
        (status = 415, description = "Not application/json (`unsupported_media_type`)."),
    )
)]
async fn put_org_chart(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let doc = json_body(&s, &headers, body).await?;
    let (chart, created) = blocking(move || s.agents.put_chart(&p.owner, &doc)).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!(chart))).into_response())
}

#[utoipa::path(
    get, path = "/v1/agents/org-chart/{departmentId}",
    summary = "The responsibility view: the department, its members (recursively by default) and the deduplicated union of their workflows.",
    params(
        ("departmentId" = String, Path, description = "A department of the caller's chart."),
        ("recursive" = Option<bool>, Query, description = "Include nested departments' members (default true)."),
    ),
    responses(
        (status = 200, description = "OrgChartResponsibilityView.", body = OrgChartResponsibilityView),
        (status = 400, description = "Bad `recursive` or unknown query parameter (`validation_error`)."),
        (status = 404, description = "No such department for this tenant (`not_found`)."),
    )
)]
async fn get_department(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let id = path_param(id)?;
    let q = query(&uri, &["recursive"])?;
    let recursive = match q.get("recursive").map(String::as_str) {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(ApiError::validation(
                "query.recursive",
                format!("{other:?} is not true or false"),
            ));
        }
    };
    let d = id.clone();
    match blocking(move || s.agents.view(&p.owner, &d, recursive)).await? {
        Some(view) => Ok(Json(view)),
        None => Err(ApiError::not_found(format!("department {id:?} not found"))),
    }
}

// ---- skills

#[utoipa::path(
    get, path = "/skills",
    summary = "Every declared skill, with whether it is offered and why not.",
    responses((status = 200, description = "Skills.", body = SkillList))
)]
async fn list_skills(State(s): State<AppState>) -> Result<Json<SkillList>, ApiError> {
    let skills = blocking(move || s.skills.list()).await?;
    let total = skills.len();
    Ok(Json(SkillList { skills, total }))
}

#[utoipa::path(
    post, path = "/skills",
    summary = "Import a SKILL.md: the body becomes source `skill/<name>/body`, the declaration is stored (one transaction). Re-import replaces.",
    description = "With `application/json`: an OpenWOP pack.json (agents[]) or a bare AgentManifest; each role:\"skill\" agent with an inline systemPrompt becomes a skill (all or nothing); other agents are stored as pack agents (listed in /v1/agents, never offered); one invalid agent refuses the whole pack.",
    params(("name" = Option<String>, Query, description = "Fallback skill name when the front matter has none.", pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64, min_length = 1)),
    request_body(content(
        (String = "text/markdown"),
        (String = "text/plain"),
        (Object = "application/json"),
    )),
    responses(
        (status = 201, description = "Imported (a pack: `{skills, agents}`).", body = SkillImported),
        (status = 200, description = "Replaced an existing skill (a pack: replaced every one).", body = SkillImported),
        (status = 400, description = "Invalid SKILL.md or malformed JSON (`validation_error`), or a manifest/pack that fails the OpenWOP schema (`pack_validation_failed`, details.errors = schema errors with paths)."),
        (status = 409, description = "Another skill or pack agent already has this agentId (`conflict`)."),
        (status = 413, description = "Body over the SKILL.md limit (`payload_too_large`)."),
        (status = 415, description = "Not text/markdown, text/plain or application/json (`unsupported_media_type`)."),
    )
)]
async fn post_skill(
    State(s): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let q = query(&uri, &["name"])?;
    let media = media_type(&headers);
    if media.as_deref() == Some("application/json") {
        return post_pack(s, &headers, body).await;
    }
    if !media
        .as_deref()
        .is_some_and(|m| SKILL_MEDIA_TYPES.contains(&m))
    {
        return Err(ApiError::unsupported_media_type(
            media.as_deref(),
            ACCEPTED_ON_POST_SKILLS,
        ));
    }
    let bytes = read_body(body, &headers, s.limits.max_skill_bytes).await?;
    let fallback = q.get("name").cloned();
    let imported = {
        let s = s.clone();
        blocking(move || s.skills.import(&bytes, fallback.as_deref())).await?
    };
    s.offer_changed.notify_one();
    let status = if imported.replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(SkillImported::Skill(imported))).into_response())
}

/// `POST /skills` with `application/json`: an OpenWOP pack.json (or a bare AgentManifest); its
/// `role:"skill"` agents are imported together, all or nothing.
async fn post_pack(s: AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(body, headers, s.limits.max_skill_bytes).await?;
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::validation("body", format!("malformed JSON: {e}")))?;
    if !doc.is_object() {
        return Err(ApiError::validation(
            "body",
            "expected a JSON object: a pack.json or an AgentManifest",
        ));
    }
    let plan = crate::pack::plan(&doc, s.skills.namespace())?;
    let notify = s.clone();
    let (imported, agents) = blocking(move || {
        let docs: Vec<(&[u8], Option<&str>)> = plan
            .skills
            .iter()
            .map(|(_, d)| (d.as_bytes(), None))
            .collect();
        s.skills.import_pack(&docs, &plan.agents)
    })
    .await?;
    notify.offer_changed.notify_one();
    // 201 when the import created a skill or agent; 200 when it only replaced.
    let status = if imported.iter().any(|i| !i.replaced) || agents.iter().any(|a| !a.replaced) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(SkillImported::Pack(PackImported {
            skills: imported,
            agents,
        })),
    )
        .into_response())
}

#[utoipa::path(
    get, path = "/skills/{name}",
    summary = "One skill: declaration, manifest, offer state, body source metadata — never the body.",
    params(("name" = String, Path, description = "Skill name.", pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64, min_length = 1)),
    responses(
        (status = 200, description = "Skill.", body = SkillDetail),
        (status = 404, description = "No such skill (`not_found`)."),
    )
)]
async fn get_skill(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let name = path_param(name)?;
    let n = name.clone();
    match blocking(move || s.skills.detail(&n)).await? {
        Some(detail) => Ok(Json(detail).into_response()),
        None => Err(ApiError::not_found(format!("skill {name:?} not found"))),
    }
}

/// `PATCH /skills/{name}` `{provider?, model?, key?}`: each a string to set or `null` to clear;
/// what the owner stakes, so a pack-imported skill can be offered.
#[utoipa::path(
    patch, path = "/skills/{name}",
    summary = "Set what the owner stakes for a skill: provider, model, key (a source name), limits. A string sets a field, null clears it; a pack-imported skill is offered once these and its sources are present.",
    params(("name" = String, Path, description = "Skill name.", pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64, min_length = 1)),
    request_body = SkillPatch,
    responses(
        (status = 200, description = "The skill after the change.", body = SkillDetail),
        (status = 400, description = "Unknown field or bad value (`validation_error`)."),
        (status = 404, description = "No such skill (`not_found`)."),
        (status = 415, description = "Not application/json (`unsupported_media_type`)."),
    )
)]
async fn patch_skill(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let name = path_param(name)?;
    let doc = json_body(&s, &headers, body).await?;
    let Some(obj) = doc.as_object() else {
        return Err(ApiError::validation(
            "body",
            "expected an object {provider?, model?, key?}",
        ));
    };
    let mut change = crate::skills::SkillChange::default();
    let mut limits: Vec<(String, Option<u64>)> = Vec::new();
    for (k, v) in obj {
        if k == "limits" {
            // Each ceiling given is set (a whole number) or cleared (null); the rest stay.
            let Some(fields) = v.as_object() else {
                return Err(ApiError::validation(
                    "limits",
                    "expected an object of ceilings (maxRequestBytes, maxSourceBytes, maxOutputBytes, callsPerPeerPerDay, callsPerDay)",
                ));
            };
            for (f, n) in fields {
                let n = match n {
                    Value::Null => None,
                    v => Some(
                        v.as_u64()
                            .filter(|n| *n <= skillbox_skill::Limits::MAX)
                            .ok_or_else(|| {
                                ApiError::validation(
                                    &format!("limits.{f}"),
                                    "must be a whole number (or null to clear it)",
                                )
                            })?,
                    ),
                };
                if !skillbox_skill::Limits::FIELDS.contains(&f.as_str()) {
                    return Err(ApiError::validation(
                        &format!("limits.{f}"),
                        format!(
                            "unknown ceiling (accepted: {})",
                            skillbox_skill::Limits::FIELDS.join(", ")
                        ),
                    ));
                }
                limits.push((f.clone(), n));
            }
            continue;
        }
        let v = match v {
            Value::Null => None,
            Value::String(t) => Some(t.clone()),
            _ => {
                return Err(ApiError::validation(
                    k,
                    "must be a string, or null to clear it",
                ));
            }
        };
        match k.as_str() {
            "provider" => change.provider = Some(v),
            "model" => change.model = Some(v),
            "key" => change.key = Some(v),
            other => {
                return Err(ApiError::validation(
                    other,
                    "unknown field (accepted: provider, model, key, limits)",
                ));
            }
        }
    }
    let n = name.clone();
    let notify = s.clone();
    match blocking(move || {
        if !limits.is_empty() {
            let Some(rec) = s.skills.record(&n)? else {
                return Ok(None);
            };
            let mut merged = rec.declaration.limits;
            for (f, v) in &limits {
                merged.set(f, *v);
            }
            change.limits = Some(merged);
        }
        s.skills.set(&n, &change)
    })
    .await?
    {
        Some(detail) => {
            notify.offer_changed.notify_one();
            Ok(Json(detail).into_response())
        }
        None => Err(ApiError::not_found(format!("skill {name:?} not found"))),
    }
}

#[utoipa::path(
    delete, path = "/skills/{name}",
    summary = "Remove a skill: its declaration and its body source.",
    params(("name" = String, Path, description = "Skill name.", pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64, min_length = 1)),
    responses(
        (status = 204, description = "Removed."),
        (status = 404, description = "No such skill (`not_found`)."),
    )
)]
async fn delete_skill(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let name = path_param(name)?;
    let n = name.clone();
    let notify = s.clone();
    if blocking(move || s.skills.delete(&n)).await? {
        notify.offer_changed.notify_one();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("skill {name:?} not found")))
    }
}

// ---- sources

#[utoipa::path(
    get, path = "/sources",
    summary = "Every source: name, kind, size, digest — never content.",
    responses((status = 200, description = "Sources.", body = SourceList))
)]
async fn list_sources(State(s): State<AppState>) -> Result<Json<SourceList>, ApiError> {
    let sources = blocking(move || s.sources.list()).await?;
    let total = sources.len();
    Ok(Json(SourceList { sources, total }))
}

#[utoipa::path(
    get, path = "/sources/{*name}",
    summary = "One source's metadata (never content).",
    params(("name" = String, Path, description = "Source name; may contain `/` (e.g. `skill/<name>/body`), sent as is or percent-encoded.", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$", min_length = 1, max_length = 256)),
    responses(
        (status = 200, description = "Source metadata.", body = SourceMeta),
        (status = 400, description = "Bad source name (`validation_error`)."),
        (status = 404, description = "No such source (`not_found`)."),
    )
)]
async fn get_source(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let name = path_param(name)?;
    sources::check_name(&name)?;
    let n = name.clone();
    match blocking(move || s.sources.meta(&n)).await? {
        Some(meta) => Ok(Json(meta).into_response()),
        None => Err(ApiError::not_found(format!("source {name:?} not found"))),
    }
}

#[utoipa::path(
    put, path = "/sources/{*name}",
    summary = "Store or replace a source; the body is the content, encrypted at rest. Names under `skill/` are refused (skill import writes them).",
    params(
        ("name" = String, Path, description = "Source name; may contain `/` (e.g. `skill/<name>/body`), sent as is or percent-encoded.", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$", min_length = 1, max_length = 256),
        ("kind" = Option<SourceKind>, Query, description = "text | secret | file (or header X-Source-Kind). Default: text when UTF-8, file otherwise."),
        ("shareable" = Option<bool>, Query, description = "Mark the source as user data a call may stake (default false; never a secret)."),
    ),
    request_body(content = inline(Content), content_type = "*/*", description = "The content."),
    responses(
        (status = 201, description = "Created.", body = SourceMeta),
        (status = 200, description = "Replaced.", body = SourceMeta),
        (status = 400, description = "Bad name, kind or content (`validation_error`)."),
        (status = 413, description = "Body over the source limit (`payload_too_large`)."),
    )
)]
async fn put_source(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let name = path_param(name)?;
    sources::check_name(&name)?;
    let q = query(&uri, &["kind", "shareable"])?;
    let shareable = match q.get("shareable").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::validation(
                "query.shareable",
                format!("{other:?} is not true or false"),
            ));
        }
    };
    let header_kind = headers
        .get("x-source-kind")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let kind = match q.get("kind").cloned().or(header_kind) {
        Some(k) => Some(k.parse::<SourceKind>().map_err(|_| {
            ApiError::validation("kind", format!("{k:?} is not one of text, secret, file"))
        })?),
        None => None,
    };
    let bytes = read_body(body, &headers, s.limits.max_source_bytes).await?;
    // Without a kind: text when it is UTF-8, bytes otherwise.
    let kind = kind.unwrap_or(if std::str::from_utf8(&bytes).is_ok() {
        SourceKind::Text
    } else {
        SourceKind::File
    });
    let notify = s.clone();
    let (meta, existed) = blocking(move || {
        let existed = s.sources.meta(&name)?.is_some();
        Ok((s.sources.put_with(&name, kind, &bytes, shareable)?, existed))
    })
    .await?;
    notify.offer_changed.notify_one();
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(meta)).into_response())
}

/// `PATCH /sources/{name}` `{"shareable": bool}`: mark user data as stakeable by calls (or not),
/// without sending its content again.
#[utoipa::path(
    patch, path = "/sources/{*name}",
    summary = "Mark a source shareable (a call may stake it) or not, without its content.",
    params(("name" = String, Path, description = "Source name; may contain `/` (e.g. `skill/<name>/body`), sent as is or percent-encoded.", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$", min_length = 1, max_length = 256)),
    request_body = SourceChange,
    responses(
        (status = 200, description = "The source's metadata.", body = SourceMeta),
        (status = 400, description = "A secret or reserved source cannot be shareable (`validation_error`)."),
        (status = 404, description = "No such source (`not_found`)."),
        (status = 415, description = "Not application/json (`unsupported_media_type`)."),
    )
)]
async fn patch_source(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<SourceMeta>, ApiError> {
    let name = path_param(name)?;
    sources::check_name(&name)?;
    if media_type(&headers).as_deref() != Some("application/json") {
        return Err(ApiError::unsupported_media_type(
            media_type(&headers).as_deref(),
            &["application/json"],
        ));
    }
    let bytes = read_body(body, &headers, 4096).await?;
    let change: SourceChange = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::validation("body", format!("expected {{\"shareable\": bool}}: {e}"))
    })?;
    let n = name.clone();
    let notify = s.clone();
    match blocking(move || s.sources.set_shareable(&n, change.shareable)).await? {
        Some(meta) => {
            notify.offer_changed.notify_one();
            Ok(Json(meta))
        }
        None => Err(ApiError::not_found(format!("source {name:?} not found"))),
    }
}

#[utoipa::path(
    delete, path = "/sources/{*name}",
    summary = "Remove a source.",
    params(("name" = String, Path, description = "Source name; may contain `/` (e.g. `skill/<name>/body`), sent as is or percent-encoded.", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$", min_length = 1, max_length = 256)),
    responses(
        (status = 204, description = "Removed."),
        (status = 400, description = "Bad source name (`validation_error`)."),
        (status = 404, description = "No such source (`not_found`)."),
    )
)]
async fn delete_source(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let name = path_param(name)?;
    sources::check_name(&name)?;
    let n = name.clone();
    let notify = s.clone();
    if blocking(move || s.sources.delete(&n)).await? {
        notify.offer_changed.notify_one();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("source {name:?} not found")))
    }
}

// ---- peers and the board

fn peers_unavailable() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "peers_unavailable",
        "the peer network is not running on this node",
    )
}

/// `GET /board`: one row per offered skill of every peer on the board. The rows come
/// pre-rendered from the board (no per-request serialization of 10,000 adverts).
#[utoipa::path(
    get, path = "/board",
    summary = "What peers offer right now: one row per offered skill of every peer's newest unexpired advert.",
    responses(
        (status = 200, description = "The board.", body = Board),
        (status = 400, description = "Unknown query parameter (`validation_error`)."),
        (status = 503, description = "The peer network is not running (`peers_unavailable`)."),
    )
)]
async fn board(State(s): State<AppState>, uri: Uri) -> Result<Response, ApiError> {
    query(&uri, &[])?;
    let view = s.board.get().ok_or_else(peers_unavailable)?.clone();
    let (rows, peers) = view.board_json();
    let mut body = String::with_capacity(rows.len() + 32);
    body.push_str("{\"board\":");
    body.push_str(&rows);
    body.push_str(",\"peerCount\":");
    body.push_str(&peers.to_string());
    body.push('}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[utoipa::path(
    get, path = "/peers",
    summary = "This node's peer id and listen addresses, and the peers it is connected to.",
    responses(
        (status = 200, description = "Peers.", body = PeerList),
        (status = 503, description = "The peer network is not running (`peers_unavailable`)."),
    )
)]
async fn list_peers(State(s): State<AppState>) -> Result<Json<PeerList>, ApiError> {
    let handle = s.peers.get().ok_or_else(peers_unavailable)?;
    let peers = handle
        .peers()
        .await
        .map_err(|e| ApiError::internal(format!("peer network: {e}")))?;
    let addrs: Vec<String> = handle
        .listen_addrs()
        .await
        .map_err(|e| ApiError::internal(format!("peer network: {e}")))?
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(Json(PeerList {
        peer_id: handle.local_peer_id().to_base58(),
        listen_addrs: addrs,
        total: peers.len(),
        peers,
    }))
}

/// `POST /peers {"addr": MULTIADDR}`: dial a peer; answers its id once connected.
#[utoipa::path(
    post, path = "/peers",
    summary = "Dial a peer by multiaddr (`/p2p/<peer id>` may be omitted); answers once connected.",
    request_body = Dial,
    responses(
        (status = 200, description = "Connected.", body = Dialled),
        (status = 400, description = "Missing or malformed addr (`validation_error`)."),
        (status = 413, description = "Body too large (`payload_too_large`)."),
        (status = 415, description = "Not application/json (`unsupported_media_type`)."),
        (status = 502, description = "The peer could not be reached (`dial_failed`)."),
        (status = 503, description = "The peer network is not running (`peers_unavailable`)."),
    )
)]
async fn add_peer(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let media = media_type(&headers);
    if media.as_deref() != Some("application/json") {
        return Err(ApiError::unsupported_media_type(
            media.as_deref(),
            &["application/json"],
        ));
    }
    let bytes = read_body(body, &headers, 4096).await?;
    let dial: Dial = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::validation(
            "body",
            format!("not the expected JSON (addr: a multiaddr): {e}"),
        )
    })?;
    let addr: skillbox_peers::Multiaddr = dial.addr.parse().map_err(|e| {
        ApiError::validation("addr", format!("{:?} is not a multiaddr: {e}", dial.addr))
    })?;
    let handle = s.peers.get().ok_or_else(peers_unavailable)?;
    match handle.dial(addr.clone()).await {
        Ok(peer) => Ok(Json(Dialled {
            peer: peer.to_base58(),
            addr: addr.to_string(),
        })
        .into_response()),
        Err(skillbox_peers::PeersError::Stopped) => Err(peers_unavailable()),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "dial_failed",
            format!("cannot connect to {addr}: {e}"),
        )),
    }
}
