//! What stands in front of every route: the `Host`/`Origin` guard, the bearer token and the
//! operator's reach, the per-route metrics, and the envelope's 404/405 fallbacks.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ApiError, AppState};
use crate::tenants::Principal;

/// Refuse a request whose `Host` is not this API's (421 `host_not_allowed`), or whose `Origin`
/// is another site's or that a browser says came from another origin (403 `origin_not_allowed`,
/// `fetched_from_elsewhere`), before anything else looks at it.
/// On a [`Mounts::json_rpc`] path the refusal is a JSON-RPC error (`-32600`, no id: the request
/// was not read) carrying the same code.
pub async fn host_guard(
    State(g): State<Arc<HostGuardState>>,
    req: Request,
    next: Next,
) -> Response {
    let checked = g.hosts.check(req.headers()).and_then(|()| {
        if fetched_from_elsewhere(req.method(), req.headers()) {
            Err(skillbox_jc::JcError::OriginNotAllowed)
        } else {
            Ok(())
        }
    });
    let Err(e) = checked else {
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

/// Whether a browser says this request came from a page of another origin, other than by
/// following a link: the Fetch Metadata resource-isolation policy. `Sec-Fetch-Site` other than
/// `same-origin` (the dashboard's own pages, scripts and forms) or `none` (an address typed, a
/// bookmark) is refused, unless the request is a top-level navigation: `GET`/`HEAD`,
/// `Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document` (a link clicked in a chat, an issue, a
/// page on another local port). Such a navigation arrives signed out (the session cookie is
/// `SameSite=Strict`), changes nothing (every form is a CSRF-token `POST`) and cannot be framed
/// (`frame-ancestors 'none'`; and `iframe`, `object`, `embed` are other `Dest`s, refused here).
/// Everything else from elsewhere is refused: a browser sends no `Origin` with a cross-site `GET`
/// or a `no-cors` load (`<img>`, `<script src>`), so the `Origin` check alone lets those through;
/// a cross-site form `POST` navigates too, and is refused by its method. `same-site` is treated as
/// `cross-site`, because a page on another port of `127.0.0.1` or `localhost` is the same site
/// (sites ignore ports). No page can forge or remove these headers; a client that is no browser
/// sends none and is judged by the other checks. Every value of each header is read (a repeated
/// header cannot hide a refused one), and an unknown value is refused: fail closed.
fn fetched_from_elsewhere(method: &Method, headers: &HeaderMap) -> bool {
    let every = |name: &str, allowed: &[&[u8]]| {
        headers
            .get_all(name)
            .iter()
            .all(|v| allowed.contains(&v.as_bytes()))
    };
    if every("sec-fetch-site", &[b"same-origin", b"none"]) {
        return false;
    }
    let navigation = matches!(*method, Method::GET | Method::HEAD)
        && every("sec-fetch-site", &[b"cross-site", b"same-site"])
        && headers.contains_key("sec-fetch-mode")
        && every("sec-fetch-mode", &[b"navigate"])
        && headers.contains_key("sec-fetch-dest")
        && every("sec-fetch-dest", &[b"document"]);
    !navigation
}

/// What [`host_guard`] checks, and where it answers in JSON-RPC.
pub struct HostGuardState {
    pub hosts: skillbox_jc::server::HostGuard,
    pub json_rpc: Vec<&'static str>,
}

#[derive(Clone)]
struct RouteLabel(String);

pub(super) async fn label_route(req: Request, next: Next) -> Response {
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

/// What every route but the agent surfaces answers the agent token with (403).
pub const AGENT_TOKEN_REFUSED: &str = "this is the agent token (agent.token): it reaches only the agent surfaces (/mcp, /a2a, the agent card, the catalog); this route takes the operator's token (api.token), which the CLI sends over the node's socket";

/// Set on every request that came over `<data_dir>/api.sock` (only this user can connect),
/// never on one over TCP: what lets the agent surfaces take the operator's token from
/// `skillbox mcp` while refusing it over a port anyone may hold while the node is down. A
/// client cannot set it; a request without it is treated as TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverApiSocket;

/// Mark a request as the socket's ([`OverApiSocket`]); layered on the socket's router only.
pub async fn mark_api_socket(mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(OverApiSocket);
    next.run(req).await
}

/// What every route answers the operator's token with over TCP (403).
pub const OPERATOR_TOKEN_OVER_TCP: &str = "this is the operator's token (api.token), which the node takes only over its socket (api.sock), as the CLI and skillbox mcp send it: any local user can hold this port while the node is down and catch what is sent to it. Rotate it (`skillbox token rotate`) if a client of yours sent it here, and give HTTP agent clients the agent token (agent.token)";

/// Every route behind a token: the agent token is refused here, whatever the route, so a
/// leaked one gives only the agent surfaces (which guard themselves, and ask the human); the
/// operator's token only over `api.sock` unless `api.operator_token_over_tcp` (audit of A32-1:
/// a client configured to send it to the TCP port has sent it to whoever held that port while
/// the node was down, and over TCP it then opened every route).
pub(super) async fn require_token(
    State(s): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let tcp_refused =
        req.extensions().get::<OverApiSocket>().is_none() && !s.operator_token_over_tcp;
    match bearer_token(req.headers()).and_then(|t| s.principal(t)) {
        Some(p) if p.agent => ApiError::forbidden(AGENT_TOKEN_REFUSED).into_response(),
        Some(p) if p.operator && tcp_refused => {
            ApiError::forbidden(OPERATOR_TOKEN_OVER_TCP).into_response()
        }
        Some(p) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        None => ApiError::unauthenticated().into_response(),
    }
}

/// Operator routes: skills, sources, peers, the board, metrics. A tenant token reaches only
/// the agent surfaces.
pub(super) async fn require_operator(req: Request, next: Next) -> Response {
    match req.extensions().get::<Principal>() {
        Some(p) if p.operator => next.run(req).await,
        Some(p) if p.agent => ApiError::forbidden(AGENT_TOKEN_REFUSED).into_response(),
        Some(p) => ApiError::forbidden(format!(
            "this token belongs to tenant {:?} and reaches only the OpenWOP agent surfaces (/v1/agents…, /v1/host/skillbox/…); {} is the node operator's",
            p.owner.tenant_id,
            route_of(&req)
        ))
        .into_response(),
        None => ApiError::unauthenticated().into_response(),
    }
}

/// Count and log every request by route template; never the raw path, a body or a header.
pub(super) async fn observe(State(s): State<AppState>, req: Request, next: Next) -> Response {
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

/// The route a request matched, as its template (`/sources/{*name}`): what a refusal may name.
/// Never the path as sent, which may hold a provider key pasted where a name goes
/// (`POST /sources/sk-ant-…`), and a refusal is shown, logged and kept by clients.
fn route_of(req: &Request) -> &str {
    req.extensions()
        .get::<MatchedPath>()
        .map_or("this route", MatchedPath::as_str)
}

/// No route matched: the answer names the method only (the path as sent may hold a key).
pub(super) async fn no_route(method: Method) -> ApiError {
    ApiError::not_found(format!(
        "no route for {method} at this path (the routes are in /openapi.json)"
    ))
}

pub(super) async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), route_of(&req)),
    )
}
