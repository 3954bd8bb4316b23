//! What stands in front of `/mcp` and the A2A routes, before any protocol code runs: the Host
//! and `Origin` check (DNS rebinding), the bearer token (the agent token; the operator's only
//! over the node's socket), and a body size limit. Each
//! refusal is an HTTP status with a JSON-RPC error body (both surfaces speak JSON-RPC), so a
//! client sees a proper error and the handler never sees the request.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use skillbox_node::api::AppState;
use skillbox_node::calls::StartedBy;

/// Who may reach a surface and how much it may send.
#[derive(Debug, Clone)]
pub struct Guard {
    /// Hostnames (no port) a request's `Host` and `Origin` may name: loopback, plus the API's
    /// bind address when the human bound it elsewhere.
    pub hosts: Arc<Vec<String>>,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// The JSON-RPC code a refused token answers with (MCP and A2A differ).
    pub unauthorized_code: i64,
}

/// What the agent surfaces answer the operator's token with over TCP (403): an HTTP agent
/// client set up by an older recipe fails loudly here instead of working on, sending the
/// operator's token to a port another local user can hold whenever the node is down.
pub const OPERATOR_TOKEN_OVER_TCP: &str = "this is the operator's token (api.token), which the agent surfaces refuse over TCP: any local user can hold this port while the node is down and catch it. Send the agent token (agent.token in the node's data dir) instead, rotate api.token (`skillbox token rotate`), or run `skillbox mcp` on stdio";

/// Hostnames that are always this machine.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]"];

impl Guard {
    pub fn new(bind: Option<IpAddr>, max_body: usize, unauthorized_code: i64) -> Guard {
        let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
        if let Some(ip) = bind.filter(|ip| !ip.is_loopback() && !ip.is_unspecified()) {
            hosts.push(match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            });
        }
        Guard {
            hosts: Arc::new(hosts),
            max_body,
            unauthorized_code,
        }
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let host = strip_port(authority).to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// `None` when the request may pass; otherwise the refusal. `over_socket`: the request came
    /// over `api.sock` ([`skillbox_node::api::OverApiSocket`]), not TCP.
    // The refusal is built once per refused request and returned straight to the client:
    // boxing it would buy nothing.
    #[allow(clippy::result_large_err)]
    pub fn check(
        &self,
        state: &AppState,
        headers: &HeaderMap,
        over_socket: bool,
    ) -> Result<Credential, Response> {
        if let Some(host) = headers.get(header::HOST) {
            let ok = host.to_str().is_ok_and(|h| self.host_allowed(h));
            if !ok {
                return Err(rpc_error(
                    StatusCode::FORBIDDEN,
                    -32600,
                    "Host is not this machine: requests must name localhost, 127.0.0.1 or [::1] (DNS rebinding protection)",
                ));
            }
        }
        if !origin_allowed(headers) {
            return Err(rpc_error(
                StatusCode::FORBIDDEN,
                -32600,
                "Origin is not this server: only its own pages may call it",
            ));
        }
        let principal = skillbox_node::api::bearer_token(headers).and_then(|t| state.authorize(t));
        let credential = match principal {
            // The agent token: over TCP and over the socket alike.
            Some(p) if p.agent => Credential::AgentToken,
            // The operator's token only over `api.sock`, where only this user connects
            // (`skillbox mcp`); over TCP the port may have been another user's while the node
            // was down, so a client configured to send it there has already sent it to them.
            Some(p) if p.operator && over_socket => Credential::OverSocket,
            Some(p) if p.operator => {
                return Err(rpc_error(
                    StatusCode::FORBIDDEN,
                    self.unauthorized_code,
                    OPERATOR_TOKEN_OVER_TCP,
                ));
            }
            Some(_) => {
                return Err(rpc_error(
                    StatusCode::FORBIDDEN,
                    self.unauthorized_code,
                    "this token is a tenant's: the agent surfaces act for the node operator and take the agent token (agent.token)",
                ));
            }
            None => {
                let mut r = rpc_error(
                    StatusCode::UNAUTHORIZED,
                    self.unauthorized_code,
                    "missing or wrong bearer token (send `Authorization: Bearer <agent.token>`, the file in the node's data dir)",
                );
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"skillbox\""),
                );
                return Err(r);
            }
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body as u64) {
            return Err(too_large(self.max_body));
        }
        Ok(credential)
    }
}

/// Whether the request's `Origin`, when it has one, is this server's own: `http://` or
/// `https://` and exactly the `Host` it was sent to (host and port; the `Host` itself is checked
/// against this machine's names above). Any port of localhost was accepted, so a page on
/// another loopback port (a dev server showing hostile content, another user's listener) was
/// a page of this server. A browser sets `Host` to the address it connects to and no page can
/// change it, so an equal `Origin` is a page of this very address. No `Host` to compare: refused.
fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let (Ok(origin), Some(Ok(host))) = (
        origin.to_str(),
        headers.get(header::HOST).map(|h| h.to_str()),
    ) else {
        return false;
    };
    let origin = origin.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host.as_str()))
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        // [v6]:port
        return match authority.find(']') {
            Some(i) => &authority[..=i],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
}

/// A JSON-RPC error response with no id (the request was not read).
pub fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body =
        json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message } });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The token a request to an agent surface passed the guard with, put in its extensions: the
/// calls it starts are marked by it ([`started_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// The agent token (`agent.token`), over TCP or the socket.
    AgentToken,
    /// The operator's token, over `api.sock` only.
    OverSocket,
}

/// Who a call started under an HTTP request that passed the guard with `credential` is started
/// by: an agent over this user's own channel (the operator's token over the socket), else an
/// HTTP agent client holding the agent token — also when the request carries no credential, so
/// a route the guard missed errs toward asking. (`skillbox mcp`'s stdio carries no HTTP request:
/// a local agent's.)
pub fn started_by(credential: Option<Credential>) -> StartedBy {
    match credential {
        Some(Credential::OverSocket) => StartedBy::Agent,
        Some(Credential::AgentToken) | None => StartedBy::AgentToken,
    }
}

pub fn too_large(max: usize) -> Response {
    rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        -32600,
        &format!("request body exceeds {max} bytes"),
    )
}

/// The guard as axum middleware.
pub async fn layer(
    State((state, guard)): State<(AppState, Guard)>,
    req: Request,
    next: Next,
) -> Response {
    let over_socket = req
        .extensions()
        .get::<skillbox_node::api::OverApiSocket>()
        .is_some();
    let credential = match guard.check(&state, req.headers(), over_socket) {
        Ok(c) => c,
        Err(refusal) => return refusal,
    };
    // A body without a length (chunked) is cut at the limit while it streams.
    let (mut parts, body) = req.into_parts();
    // What the surfaces read to mark the calls they start (`started_by`).
    parts.extensions.insert(credential);
    let limited = Body::new(http_body_util::Limited::new(body, guard.max_body));
    next.run(Request::from_parts(parts, limited)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_ports() {
        let g = Guard::new(None, 10, -32001);
        assert!(g.host_allowed("127.0.0.1:7420"));
        assert!(g.host_allowed("localhost"));
        assert!(g.host_allowed("[::1]:80"));
        assert!(!g.host_allowed("evil.example:7420"));
        assert!(!g.host_allowed("127.0.0.1.evil.example"));
        let g = Guard::new(Some("192.0.2.7".parse().expect("ip")), 10, -32001);
        assert!(g.host_allowed("192.0.2.7:7420"));
    }

    /// Audit U4: the guard's own `Origin` check took any port of a loopback name, so a page
    /// served on another port of this machine passed it. Now only this server's own address.
    #[test]
    fn only_a_page_of_this_very_address_passes_the_origin_check() {
        let with = |host: Option<&str>, origin: Option<&str>| {
            let mut h = HeaderMap::new();
            for (name, v) in [(header::HOST, host), (header::ORIGIN, origin)] {
                if let Some(v) = v {
                    h.insert(name, HeaderValue::from_str(v).expect("header"));
                }
            }
            origin_allowed(&h)
        };
        let node = Some("127.0.0.1:7420");
        for other in [
            "http://127.0.0.1:3000",
            "http://127.0.0.1",
            "http://localhost:7420",
            "http://[::1]:7420",
            "http://127.0.0.1:7420/",
            "http://127.0.0.1:7420.evil.example",
            "null",
            "file://",
        ] {
            assert!(!with(node, Some(other)), "{other}");
        }
        for own in [
            "http://127.0.0.1:7420",
            "https://127.0.0.1:7420",
            "HTTP://127.0.0.1:7420",
        ] {
            assert!(with(node, Some(own)), "{own}");
        }
        assert!(with(node, None), "no Origin: not a page's request");
        assert!(with(Some("localhost:7420"), Some("http://localhost:7420")));
        assert!(
            !with(None, Some("http://127.0.0.1:7420")),
            "no Host to compare"
        );
    }
}
