//! The node's HTTP API (§10): loopback, bearer token, JSON error envelope everywhere.
//!
//! Routes are added through [`Book`], which records each path with the path the OpenAPI
//! document uses for it, so a test can walk the router and the document and check they agree.
//! Store work runs on the blocking pool: handlers never hold the async threads on SQLite.

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
use axum::routing::{MethodRouter, get, post};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use skillbox_skill::openwop::{RETURN_SCHEMA, RETURN_SCHEMA_PATH, TASK_SCHEMA, TASK_SCHEMA_PATH};

use crate::metrics::{Gauges, Metrics};
pub use error::ApiError;

use crate::agents::Agents;
use crate::config::{Limits, TenantsConfig};
use crate::peering::SharedBoard;
use crate::skills::Skills;
use crate::sources::{self, SourceKind, Sources};
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
}

/// How [`Shared`] learns who may call: the operator's token and the config's tenants.
pub struct Access<'a> {
    pub operator_token: &'a str,
    pub tenants: &'a TenantsConfig,
    /// Where the tenants came from, to pick up tokens added while the node runs.
    pub config_path: Option<PathBuf>,
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

fn file_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

pub type AppState = Arc<Shared>;

/// A route as the router has it and as the OpenAPI document names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutePath {
    /// The axum path (`/sources/{*name}`).
    pub router: &'static str,
    /// The OpenAPI path (`/sources/{name}`).
    pub openapi: &'static str,
    /// Reachable without a token.
    pub public: bool,
    /// Reachable with a tenant token (the OpenWOP agent surfaces); otherwise, when not public,
    /// the operator's token only.
    pub tenant: bool,
}

struct Book {
    public: Router<AppState>,
    protected: Router<AppState>,
    tenant: Router<AppState>,
    paths: Vec<RoutePath>,
}

impl Book {
    fn new() -> Book {
        Book {
            public: Router::new(),
            protected: Router::new(),
            tenant: Router::new(),
            paths: Vec::new(),
        }
    }
    /// A route any valid token reaches, answering for the caller's owner only.
    fn tenant(mut self, path: &'static str, route: MethodRouter<AppState>) -> Book {
        self.paths.push(RoutePath {
            router: path,
            openapi: path,
            public: false,
            tenant: true,
        });
        self.tenant = self.tenant.route(path, route);
        self
    }
    fn public(mut self, path: &'static str, route: MethodRouter<AppState>) -> Book {
        self.paths.push(RoutePath {
            router: path,
            openapi: path,
            public: true,
            tenant: false,
        });
        self.public = self.public.route(path, route);
        self
    }
    fn protected(self, path: &'static str, route: MethodRouter<AppState>) -> Book {
        self.protected_as(path, path, route)
    }
    fn protected_as(
        mut self,
        path: &'static str,
        openapi: &'static str,
        route: MethodRouter<AppState>,
    ) -> Book {
        self.paths.push(RoutePath {
            router: path,
            openapi,
            public: false,
            tenant: false,
        });
        self.protected = self.protected.route(path, route);
        self
    }
}

fn book() -> Book {
    Book::new()
        .public("/healthz", get(healthz))
        .public("/.well-known/openwop", get(discovery))
        .public("/openapi.json", get(openapi))
        .public(TASK_SCHEMA_PATH, get(task_schema))
        .public(RETURN_SCHEMA_PATH, get(return_schema))
        .protected("/metrics", get(metrics_text))
        .protected("/node", get(node_info))
        .tenant("/v1/agents", get(list_agents))
        .tenant("/v1/agents/{agentId}", get(get_agent))
        .tenant("/v1/agents/roster", get(list_roster))
        .tenant("/v1/agents/roster/{rosterId}", get(get_roster_entry))
        .tenant("/v1/agents/org-chart", get(get_org_chart))
        .tenant("/v1/agents/org-chart/{departmentId}", get(get_department))
        .tenant(
            "/v1/host/skillbox/roster/{rosterId}",
            axum::routing::put(put_roster).delete(delete_roster),
        )
        .tenant(
            "/v1/host/skillbox/org-chart",
            axum::routing::put(put_org_chart),
        )
        .protected("/skills", get(list_skills).post(post_skill))
        .protected(
            "/skills/{name}",
            get(get_skill).patch(patch_skill).delete(delete_skill),
        )
        .protected("/board", get(board))
        .protected("/peers", get(list_peers).post(add_peer))
        .protected("/calls", get(calls::list_calls).post(calls::post_call))
        .protected("/calls/{id}", get(calls::get_call))
        .protected("/calls/{id}/cancel", post(calls::cancel_call))
        .protected("/intents/skill", post(calls::intent_skill))
        .protected("/approvals", get(calls::list_approvals))
        .protected("/approvals/{id}", post(calls::decide_approval))
        .protected("/policy", get(calls::get_policy).put(calls::put_policy))
        .protected("/ledger", get(ledger::get_ledger))
        .protected("/ledger/verify", get(ledger::verify_ledger))
        .protected("/sources", get(list_sources))
        .protected_as(
            "/sources/{*name}",
            "/sources/{name}",
            get(get_source)
                .put(put_source)
                .patch(patch_source)
                .delete(delete_source),
        )
}

/// The paths the router serves (for the OpenAPI agreement test).
pub fn route_paths() -> Vec<RoutePath> {
    book().paths
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
    let b = Book {
        public: b.public.merge(mounts.public),
        protected: b.protected.merge(mounts.operator),
        ..b
    };
    // Layers run outside in: the token is checked first, then (operator routes) its reach.
    let protected = b
        .protected
        .route_layer(middleware::from_fn(require_operator))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let tenant = b
        .tenant
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    b.public
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

async fn healthz(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let skills = s.skills.clone();
    blocking(move || skills.count()).await?;
    Ok(Json(json!({ "status": "ok" })))
}

async fn discovery(State(s): State<AppState>) -> Json<Value> {
    Json(crate::openwop::discovery(s.agents.department_nesting()))
}

async fn openapi() -> Json<Value> {
    Json(crate::openapi::document())
}

fn schema_response(text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, "application/schema+json")], text).into_response()
}

async fn task_schema() -> Response {
    schema_response(TASK_SCHEMA)
}

async fn return_schema() -> Response {
    schema_response(RETURN_SCHEMA)
}

// ---- node

async fn metrics_text(State(s): State<AppState>) -> Result<Response, ApiError> {
    let (skills, sources) = (s.skills.clone(), s.sources.clone());
    let store = s.calls.get().map(|c| c.store().clone());
    let mut gauges = blocking(move || {
        let list = skills.list()?;
        Ok(Gauges {
            skills: list.len() as u64,
            skills_offered: list.iter().filter(|s| s.offered).count() as u64,
            sources: sources.count()?,
            calls: match store {
                Some(store) => crate::calls::records::counts_by_state(&store)?,
                None => Vec::new(),
            },
            ..Gauges::default()
        })
    })
    .await?;
    if let Some(h) = s.peers.get() {
        gauges.board = h.with_board(|b, now| b.snapshot(now).len()) as u64;
        gauges.peers = h.peers().await.map(|p| p.len() as u64).unwrap_or(0);
    }
    Ok((
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        s.metrics.render(&gauges),
    )
        .into_response())
}

async fn node_info(State(s): State<AppState>) -> Json<Value> {
    Json(json!({
        "nodeId": s.node_id,
        "publicKey": s.public_key,
        "version": env!("CARGO_PKG_VERSION"),
        "namespace": s.skills.namespace(),
    }))
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

async fn list_agents(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Json<Value>, ApiError> {
    let list = blocking(move || entries(&s, &p.owner)).await?;
    Ok(Json(crate::openwop::inventory(list)))
}

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

async fn get_org_chart(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    query(&uri, &[])?;
    let chart = blocking(move || s.agents.chart(&p.owner)).await?;
    Ok(Json(json!(chart)))
}

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

async fn list_skills(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let list = blocking(move || s.skills.list()).await?;
    Ok(Json(json!({ "skills": list, "total": list.len() })))
}

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
    Ok((status, Json(imported)).into_response())
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
        Json(json!({ "skills": imported, "agents": agents })),
    )
        .into_response())
}

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

async fn list_sources(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let list = blocking(move || s.sources.list()).await?;
    Ok(Json(json!({ "sources": list, "total": list.len() })))
}

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
async fn patch_source(
    State(s): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Change {
        shareable: bool,
    }
    let name = path_param(name)?;
    sources::check_name(&name)?;
    if media_type(&headers).as_deref() != Some("application/json") {
        return Err(ApiError::unsupported_media_type(
            media_type(&headers).as_deref(),
            &["application/json"],
        ));
    }
    let bytes = read_body(body, &headers, 4096).await?;
    let change: Change = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::validation("body", format!("expected {{\"shareable\": bool}}: {e}"))
    })?;
    let n = name.clone();
    let notify = s.clone();
    match blocking(move || s.sources.set_shareable(&n, change.shareable)).await? {
        Some(meta) => {
            notify.offer_changed.notify_one();
            Ok(Json(json!(meta)))
        }
        None => Err(ApiError::not_found(format!("source {name:?} not found"))),
    }
}

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

async fn list_peers(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({
        "peerId": handle.local_peer_id().to_base58(),
        "listenAddrs": addrs,
        "peers": peers,
        "total": peers.len(),
    })))
}

/// `POST /peers {"addr": MULTIADDR}`: dial a peer; answers its id once connected.
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
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::validation("body", format!("malformed JSON: {e}")))?;
    let addr = doc
        .get("addr")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::validation("addr", "required: a multiaddr string"))?;
    let addr: skillbox_peers::Multiaddr = addr
        .parse()
        .map_err(|e| ApiError::validation("addr", format!("{addr:?} is not a multiaddr: {e}")))?;
    let handle = s.peers.get().ok_or_else(peers_unavailable)?;
    match handle.dial(addr.clone()).await {
        Ok(peer) => {
            Ok(Json(json!({ "peer": peer.to_base58(), "addr": addr.to_string() })).into_response())
        }
        Err(skillbox_peers::PeersError::Stopped) => Err(peers_unavailable()),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "dial_failed",
            format!("cannot connect to {addr}: {e}"),
        )),
    }
}
