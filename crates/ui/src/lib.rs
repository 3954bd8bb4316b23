//! skillbox-ui: the human's view of a node — a web dashboard at `/ui` on the node's loopback API.
//!
//! Server-rendered pages ([`maud`] escapes every interpolated string, so a peer's advert text is
//! shown as text, never markup) over the node's library API, with one small script of progressive
//! enhancement (live call states, loading a SKILL.md file into the form); everything works without
//! it. No asset comes from outside the node.
//!
//! Access: the operator's bearer token, entered once on `/ui/login` and kept in a cookie that is
//! `HttpOnly` (no script reads it) and `SameSite=Strict` (no other site's page sends it). Every
//! form carries a CSRF token derived from the session's token (HMAC), checked in constant time;
//! the node's own guard in front of every route already refuses another site's `Origin` and a
//! foreign `Host`. Every page is sent with a strict Content-Security-Policy (no inline script or
//! style, nothing from elsewhere, no framing).
//!
//! What the dashboard never shows: a source's content (names, kinds, sizes, digests only), a
//! skill's body, model or key (the library gives declarations and manifests only), or a peer's
//! failure message (codes and this node's fixed words only).

mod pages;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use skillbox_node::api::{AppState, Mounts};

/// Where the dashboard lives.
pub const PREFIX: &str = "/ui";
const COOKIE: &str = "skillbox_ui";
const CSRF_LABEL: &[u8] = b"skillbox-ui-csrf-v1";

/// Every page's security headers.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The routes this crate mounts on the node's router (as `public`: they authenticate with the
/// session cookie themselves, and send a login page rather than a JSON 401).
pub fn mounts(state: AppState) -> Mounts {
    let open = Router::new()
        .route("/ui/login", get(pages::login_page).post(pages::login))
        .route("/ui/static/app.css", get(pages::css))
        .route("/ui/static/app.js", get(pages::js));
    let session = Router::new()
        .route("/ui", get(pages::overview))
        .route("/ui/logout", post(pages::logout))
        .route("/ui/board", get(pages::board))
        .route("/ui/skills", get(pages::skills).post(pages::add_skill))
        .route("/ui/skills/{name}", get(pages::skill))
        .route("/ui/skills/{name}/delete", post(pages::delete_skill))
        .route("/ui/sources", get(pages::sources).post(pages::add_source))
        .route("/ui/sources/delete", post(pages::delete_source))
        .route("/ui/calls", get(pages::calls).post(pages::start_call))
        .route("/ui/calls/{id}", get(pages::call))
        .route("/ui/live/calls", get(pages::live_calls))
        .route("/ui/approvals", get(pages::approvals).post(pages::decide))
        .route("/ui/ledger", get(pages::ledger))
        .route("/ui/peers", get(pages::peers).post(pages::add_peer))
        .route("/ui/metrics", get(pages::metrics))
        .route("/ui/boxes/check", post(pages::check_boxes))
        .route_layer(middleware::from_fn_with_state(state, require_session));
    Mounts {
        public: open
            .merge(session)
            .layer(middleware::map_response(security_headers)),
        operator: Router::new(),
        json_rpc: Vec::new(),
    }
}

/// The signed-in operator, as handlers see it: the CSRF token its forms must carry.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) csrf: String,
}

impl Session {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub(crate) fn csrf_ok(&self, presented: &str) -> bool {
        let (Ok(a), Ok(b)) = (hex::decode(&self.csrf), hex::decode(presented)) else {
            return false;
        };
        a.len() == b.len() && a.iter().zip(&b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// The CSRF token of a session whose cookie holds `token`.
fn csrf_for(token: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(CSRF_LABEL);
    hex::encode(mac.finalize().into_bytes())
}

/// The session cookie's value, if the request carries one.
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

/// The cookie that signs the browser in (`HttpOnly`, `SameSite=Strict`, scoped to `/ui`).
pub(crate) fn session_cookie(token: &str) -> String {
    format!("{COOKIE}={token}; Path={PREFIX}; HttpOnly; SameSite=Strict; Max-Age=604800")
}

/// The cookie that signs it out.
pub(crate) fn cleared_cookie() -> String {
    format!("{COOKIE}=; Path={PREFIX}; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Whether `token` is the node operator's (a tenant's token reaches only the agent surfaces).
pub(crate) fn is_operator(state: &AppState, token: &str) -> bool {
    // A token is plain ASCII (the API's own rule); anything else cannot be one and must not
    // reach a header.
    token.bytes().all(|b| b.is_ascii_graphic())
        && state.authorize(token).is_some_and(|p| p.operator)
}

async fn require_session(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    match cookie_token(req.headers()) {
        Some(token) if is_operator(&state, &token) => {
            req.extensions_mut().insert(Session {
                csrf: csrf_for(&token),
            });
            next.run(req).await
        }
        _ if req.method() == axum::http::Method::GET => Redirect::to("/ui/login").into_response(),
        _ => (
            StatusCode::UNAUTHORIZED,
            pages::plain_page("Signed out", "Sign in again at /ui/login."),
        )
            .into_response(),
    }
}

async fn security_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
    // the dashboard's own form posts, which the node (rightly) refuses as cross-site.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_are_per_token_and_checked_whole() {
        let s = Session {
            csrf: csrf_for("tok-a"),
        };
        assert!(s.csrf_ok(&csrf_for("tok-a")));
        assert!(!s.csrf_ok(&csrf_for("tok-b")));
        assert!(!s.csrf_ok(""));
        assert!(!s.csrf_ok(&s.csrf[..10]));
        assert!(!s.csrf_ok("not hex"));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; skillbox_ui=tok; b=2"),
        );
        assert_eq!(cookie_token(&h).as_deref(), Some("tok"));
        h.insert(header::COOKIE, HeaderValue::from_static("skillbox_ui="));
        assert_eq!(cookie_token(&h), None);
        let c = session_cookie("tok");
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/ui"));
    }
}
