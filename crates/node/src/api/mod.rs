//! The node's HTTP API (§10): loopback, bearer token, JSON error envelope everywhere.
//!
//! Routes are added through [`Book`], which records each path with the path the OpenAPI
//! document uses for it, so a test can walk the router and the document and check they agree.
//! Store work runs on the blocking pool: handlers never hold the async threads on SQLite.

mod calls;
pub mod error;
pub mod metrics;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use skillbox_skill::openwop::{RETURN_SCHEMA, RETURN_SCHEMA_PATH, TASK_SCHEMA, TASK_SCHEMA_PATH};

pub use error::ApiError;
use metrics::{Gauges, Metrics};

use crate::config::Limits;
use crate::peering::SharedBoard;
use crate::skills::Skills;
use crate::sources::{self, SourceKind, Sources};

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
    pub limits: Limits,
    pub node_id: String,
    pub public_key: String,
    pub metrics: Metrics,
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
    token_digest: [u8; 32],
}

impl Shared {
    pub fn new(
        sources: Sources,
        skills: Skills,
        limits: Limits,
        node_id: String,
        public_key: String,
        token: &str,
    ) -> Self {
        Shared {
            sources,
            skills,
            limits,
            node_id,
            public_key,
            metrics: Metrics::default(),
            peers: OnceLock::new(),
            board: OnceLock::new(),
            offer_changed: tokio::sync::Notify::new(),
            calls: OnceLock::new(),
            calls_max_request: 64 * 1024,
            token_digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Constant-time check of a presented token (compared as digests, so neither length nor a
    /// matching prefix shows in the timing).
    fn token_ok(&self, presented: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        d.iter()
            .zip(self.token_digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
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
}

struct Book {
    public: Router<AppState>,
    protected: Router<AppState>,
    paths: Vec<RoutePath>,
}

impl Book {
    fn new() -> Book {
        Book {
            public: Router::new(),
            protected: Router::new(),
            paths: Vec::new(),
        }
    }
    fn public(mut self, path: &'static str, route: MethodRouter<AppState>) -> Book {
        self.paths.push(RoutePath {
            router: path,
            openapi: path,
            public: true,
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
        .protected("/v1/agents", get(list_agents))
        .protected("/v1/agents/{agentId}", get(get_agent))
        .protected("/skills", get(list_skills).post(post_skill))
        .protected("/skills/{name}", get(get_skill).delete(delete_skill))
        .protected("/board", get(board))
        .protected("/peers", get(list_peers).post(add_peer))
        .protected("/calls", get(calls::list_calls).post(calls::post_call))
        .protected("/calls/{id}", get(calls::get_call))
        .protected("/calls/{id}/cancel", post(calls::cancel_call))
        .protected("/intents/skill", post(calls::intent_skill))
        .protected("/approvals", get(calls::list_approvals))
        .protected("/approvals/{id}", post(calls::decide_approval))
        .protected("/policy", get(calls::get_policy).put(calls::put_policy))
        .protected("/sources", get(list_sources))
        .protected_as(
            "/sources/{*name}",
            "/sources/{name}",
            get(get_source).put(put_source).delete(delete_source),
        )
}

/// The paths the router serves (for the OpenAPI agreement test).
pub fn route_paths() -> Vec<RoutePath> {
    book().paths
}

/// The full router over `state`.
pub fn router(state: AppState) -> Router {
    let b = book();
    let protected = b
        .protected
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    b.public
        .merge(protected)
        .route_layer(middleware::from_fn(label_route))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

// ---- middleware

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

async fn require_token(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match presented {
        Some(t) if s.token_ok(t) => next.run(req).await,
        _ => ApiError::unauthenticated().into_response(),
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

async fn discovery() -> Json<Value> {
    Json(crate::openwop::discovery())
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
    let gauges = blocking(move || {
        let list = skills.list()?;
        Ok(Gauges {
            skills: list.len() as u64,
            skills_offered: list.iter().filter(|s| s.offered).count() as u64,
            sources: sources.count()?,
        })
    })
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(gauges),
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

fn entries(s: &Shared) -> crate::Result<Vec<Value>> {
    let ns = s.skills.namespace().to_owned();
    Ok(s.skills
        .manifests()?
        .iter()
        .map(|(manifest, digest)| crate::openwop::inventory_entry(manifest, &ns, digest))
        .collect())
}

async fn list_agents(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let list = blocking(move || entries(&s)).await?;
    Ok(Json(crate::openwop::inventory(list)))
}

async fn get_agent(
    State(s): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = path_param(id)?;
    let found = {
        let id = id.clone();
        let s = s.clone();
        blocking(move || s.skills.record_by_agent_id(&id)).await?
    };
    match found {
        Some(r) => Ok(Json(crate::openwop::inventory_entry(
            &r.manifest,
            s.skills.namespace(),
            &r.digest,
        ))),
        None => Err(ApiError::not_found(format!("agent {id:?} not found"))),
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
    let plan = crate::pack::plan(&doc)?;
    let skipped = plan.skipped;
    let notify = s.clone();
    let imported = blocking(move || {
        let docs: Vec<(&[u8], Option<&str>)> = plan
            .skills
            .iter()
            .map(|(_, d)| (d.as_bytes(), None))
            .collect();
        s.skills.import_all(&docs)
    })
    .await?;
    notify.offer_changed.notify_one();
    // 201 when the import created a skill; 200 when it only replaced (or held none).
    let status = if imported.iter().any(|i| !i.replaced) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({ "skills": imported, "skipped": skipped })),
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
    let q = query(&uri, &["kind"])?;
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
        Ok((s.sources.put(&name, kind, &bytes)?, existed))
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
