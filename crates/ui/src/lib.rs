//! skillbox-ui: the human's view of a node — a web dashboard at `/ui` on the node's loopback API.
//!
//! Server-rendered pages ([`maud`] escapes every interpolated string, so a peer's advert text is
//! shown as text, never markup) over the node's library API, with one small script of progressive
//! enhancement (live call states, loading a SKILL.md file into the form); everything works without
//! it. No asset comes from outside the node.
//!
//! Access: the operator's bearer token, entered once on `/ui/login`, opens a session; the cookie
//! holds only the session's id (32 random bytes, never the token: a browser sends a `127.0.0.1`
//! cookie to every port of that host, so whatever else listens there receives it). Sessions live in
//! the node's memory (`Sessions`): they end on sign-out, after [`IDLE`] unused or [`LIFETIME`] in
//! all, when the node restarts, and when `api.token` is replaced (`skillbox token rotate`). The
//! cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends it) and
//! `Path=/ui`. Every form carries a CSRF token derived from the session's id (HMAC), checked in
//! constant time; the node's own guard in front of every route already refuses another site's
//! `Origin`, a foreign `Host`, and any request a browser marks as sent from another origin
//! (`Sec-Fetch-Site`: a page on another port of this host included). Every page is sent with a strict Content-Security-Policy (no
//! inline script or style, nothing from elsewhere, no framing).
//!
//! What the dashboard never shows: a source's content (names, kinds, sizes, digests only), a
//! source name an older node took from a pasted provider key (a fixed label and its first four
//! characters; its forms post a per-session handle, `Session::source_handle`), a skill's body,
//! model or key (the library gives declarations and manifests only), or a peer's failure message
//! (codes and this node's fixed words only).

mod pages;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use skillbox_node::api::{AppState, Mounts};

/// Where the dashboard lives.
pub const PREFIX: &str = "/ui";
const COOKIE: &str = "skillbox_ui";
const CSRF_LABEL: &[u8] = b"skillbox-ui-csrf-v1";
/// What a row's opaque handle is computed under (see [`Session::source_handle`]).
const HANDLE_LABEL: &[u8] = b"skillbox-ui-source-handle-v1";
/// A session ends this long after the human last used it: a page, a form, a sign-in. The live
/// calls page's polling is not use ([`Use::Poll`]): a page left open still ends.
pub const IDLE: Duration = Duration::from_secs(2 * 3600);
/// A session ends this long after sign-in, used or not (the cookie's `Max-Age` too).
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions held at once; signing in past it ends the least recently used.
const MAX_SESSIONS: usize = 32;

/// Every page's security headers.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The routes this crate mounts on the node's router (as `public`: they authenticate with the
/// session cookie themselves, and send a login page rather than a JSON 401).
pub fn mounts(state: AppState) -> Mounts {
    let sessions = Arc::new(Sessions::default());
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
        .route("/ui/sources/unshare", post(pages::unshare_source))
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
            .layer(Extension(sessions))
            .layer(middleware::map_response(security_headers)),
        operator: Router::new(),
        json_rpc: Vec::new(),
    }
}

/// The signed-in operator, as handlers see it: the CSRF token its forms must carry.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) csrf: String,
    /// The digest of the session's id (what sign-out ends).
    pub(crate) key: [u8; 32],
}

/// The dashboard's sessions, in the node's memory only (a restart signs everyone out), keyed by
/// the SHA-256 of the cookie's id so the map's own lookups say nothing about a guessed id.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<[u8; 32], Held>>,
}

struct Held {
    /// The operator token's generation at sign-in (`Shared::operator_epoch`).
    epoch: u64,
    started: Instant,
    used: Instant,
}

impl Sessions {
    /// Open a session under the token generation `epoch`; the cookie's id (64 hex digits).
    pub(crate) fn open(&self, epoch: u64) -> std::io::Result<zeroize::Zeroizing<String>> {
        let raw = zeroize::Zeroizing::new(skillbox_node::crypto::random_bytes::<32>()?);
        let id = zeroize::Zeroizing::new(hex::encode(raw.as_ref()));
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, h| h.live(now, epoch));
        while map.len() >= MAX_SESSIONS {
            let Some(oldest) = map.iter().min_by_key(|(_, h)| h.used).map(|(k, _)| *k) else {
                break;
            };
            map.remove(&oldest);
        }
        map.insert(
            key_of(&id),
            Held {
                epoch,
                started: now,
                used: now,
            },
        );
        Ok(id)
    }

    /// The live session `id` names under the current token generation (marked used when the
    /// request is [`Use::Human`]); an ended one is forgotten.
    pub(crate) fn find(&self, id: &str, epoch: u64, by: Use) -> Option<Session> {
        self.find_at(id, epoch, by, Instant::now())
    }

    /// [`Sessions::find`] at `now` (the session clock, which the tests move).
    fn find_at(&self, id: &str, epoch: u64, by: Use, now: Instant) -> Option<Session> {
        let key = key_of(id);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let held = map.get_mut(&key)?;
        if !held.live(now, epoch) {
            map.remove(&key);
            return None;
        }
        if by == Use::Human {
            held.used = now;
        }
        Some(Session {
            csrf: csrf_for(id),
            key,
        })
    }

    /// End a session (sign-out).
    pub(crate) fn end(&self, key: &[u8; 32]) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// What a request is to a session's idle clock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Use {
    /// The human asked: a page, a form. Keeps the session from going idle.
    Human,
    /// The page's script asked on its own (`/ui/live/…`, every second while a page is open):
    /// answered, but the session still ends [`IDLE`] after the human last did something, so a
    /// tab left open on a shared or unattended machine does not stay signed in for [`LIFETIME`].
    Poll,
}

impl Use {
    /// A request to `path`.
    fn of(path: &str) -> Use {
        if path.starts_with(LIVE) {
            Use::Poll
        } else {
            Use::Human
        }
    }
}

/// Where the page script's polls go.
const LIVE: &str = "/ui/live/";

impl Held {
    fn live(&self, now: Instant, epoch: u64) -> bool {
        self.epoch == epoch
            && now.duration_since(self.started) < LIFETIME
            && now.duration_since(self.used) < IDLE
    }
}

fn key_of(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Session {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub(crate) fn csrf_ok(&self, presented: &str) -> bool {
        same_hex(&self.csrf, presented)
    }

    /// The opaque handle a page's forms post for the stored source `name` instead of the name
    /// itself, where the name must not stand on the page (an older node's source named by a
    /// pasted API key). Keyed by the session's secret digest, which never leaves the node: a
    /// handle is good for this session only, and a page seen, cached or screenshotted gives no
    /// value that confirms a guess of the key.
    pub(crate) fn source_handle(&self, name: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(HANDLE_LABEL);
        mac.update(name.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `presented` is [`Session::source_handle`] of `name` (constant time).
    pub(crate) fn is_handle_of(&self, presented: &str, name: &str) -> bool {
        same_hex(&self.source_handle(name), presented)
    }
}

/// Whether two hex strings are the same bytes, compared in constant time (a token or handle a
/// form posts against the one this node computed).
fn same_hex(ours: &str, presented: &str) -> bool {
    let (Ok(a), Ok(b)) = (hex::decode(ours), hex::decode(presented)) else {
        return false;
    };
    a.len() == b.len() && a.iter().zip(&b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The CSRF token of the session whose cookie holds `id`.
fn csrf_for(id: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(id.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(CSRF_LABEL);
    hex::encode(mac.finalize().into_bytes())
}

/// Session cookies a request may carry and each be looked up (more are not read).
const MAX_SESSION_COOKIES: usize = 8;

/// The values of the request's session cookies, in the order the browser sent them. Every one
/// is a candidate, not only the first: a page on another port of this host may set a
/// `skillbox_ui` cookie with a longer path (`Path=/ui/approvals`), which browsers send first,
/// and taking only the first would keep the human signed out of that page whatever they do.
pub(crate) fn cookie_tokens(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .filter(|(k, v)| *k == COOKIE && !v.is_empty())
        .map(|(_, v)| v.to_owned())
        .take(MAX_SESSION_COOKIES)
        .collect()
}

/// The cookie that signs the browser in (`HttpOnly`, `SameSite=Strict`, scoped to `/ui`): the
/// session's id, never the operator's token.
pub(crate) fn session_cookie(id: &str) -> String {
    format!(
        "{COOKIE}={id}; Path={PREFIX}; HttpOnly; SameSite=Strict; Max-Age={}",
        LIFETIME.as_secs()
    )
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

async fn require_session(
    State(state): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    mut req: Request,
    next: Next,
) -> Response {
    // The token's generation first: a replaced `api.token` ends every session from here on.
    let epoch = state.operator_epoch();
    let by = Use::of(req.uri().path());
    let found = cookie_tokens(req.headers())
        .iter()
        .find_map(|id| sessions.find(id, epoch, by));
    match found {
        Some(session) => {
            req.extensions_mut().insert(session);
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
            key: key_of("tok-a"),
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
        assert_eq!(cookie_tokens(&h), ["tok"]);
        h.insert(header::COOKIE, HeaderValue::from_static("skillbox_ui="));
        assert!(cookie_tokens(&h).is_empty());
        let c = session_cookie("tok");
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/ui"));
    }

    #[test]
    fn sessions_end_on_sign_out_and_when_the_token_changes() {
        let s = Sessions::default();
        let id = s.open(0).expect("open");
        assert_eq!(id.len(), 64);
        let session = s.find(&id, 0, Use::Human).expect("live");
        assert_eq!(session.csrf, csrf_for(&id));
        assert!(s.find("00", 0, Use::Human).is_none());
        // Another token generation: ended, and forgotten.
        assert!(s.find(&id, 1, Use::Human).is_none());
        assert!(s.find(&id, 0, Use::Human).is_none());
        let id = s.open(0).expect("open");
        s.end(&key_of(&id));
        assert!(s.find(&id, 0, Use::Human).is_none());
        // Past the cap, the least recently used goes.
        let first = s.open(0).expect("open");
        let rest: Vec<_> = (1..MAX_SESSIONS)
            .map(|_| s.open(0).expect("open"))
            .collect();
        std::thread::sleep(Duration::from_millis(2));
        assert!(s.find(&first, 0, Use::Human).is_some());
        let extra = s.open(0).expect("open");
        assert!(s.find(&extra, 0, Use::Human).is_some() && s.find(&first, 0, Use::Human).is_some());
        let ended = rest
            .iter()
            .filter(|id| s.find(id, 0, Use::Human).is_none())
            .count();
        assert_eq!(ended, 1, "one of the least recently used ended");
    }

    /// A page on another port of this host planted a `skillbox_ui` cookie with a longer path,
    /// which the browser sends ahead of the real one: the human stays signed in.
    #[test]
    fn a_planted_cookie_ahead_of_the_session_does_not_sign_the_human_out() {
        let s = Sessions::default();
        let id = s.open(0).expect("open");
        let mut h = HeaderMap::new();
        let sent = format!("skillbox_ui=planted-by-another-port; skillbox_ui={}", &*id);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&sent).expect("header"),
        );
        let found = cookie_tokens(&h)
            .iter()
            .find_map(|c| s.find(c, 0, Use::Human));
        assert_eq!(found.map(|f| f.csrf), Some(csrf_for(&id)));
        // Bounded: a request with many planted cookies has at most a few looked up.
        let many = (0..100)
            .map(|i| format!("skillbox_ui=p{i}"))
            .collect::<Vec<_>>()
            .join("; ");
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&many).expect("header"),
        );
        assert_eq!(cookie_tokens(&h).len(), MAX_SESSION_COOKIES);
    }

    /// Audit U4: the calls page polls `/ui/live/calls` every second, and each poll counted as
    /// use, so a page left open never went idle. Now polls keep nothing alive: a session the
    /// human left is ended [`IDLE`] after their last page, however long the script polled.
    #[test]
    fn the_live_pages_polling_does_not_keep_a_session_alive() {
        assert_eq!(Use::of("/ui/live/calls"), Use::Poll);
        assert_eq!(Use::of("/ui/calls"), Use::Human);
        assert_eq!(Use::of("/ui/calls/live"), Use::Human);
        let s = Sessions::default();
        let id = s.open(0).expect("open");
        let signed_in = Instant::now();
        let minute = Duration::from_secs(60);
        // A poll a minute, for longer than the idle limit: each is answered while it lasts.
        let mut t = signed_in;
        while t < signed_in + IDLE - minute {
            t += minute;
            assert!(s.find_at(&id, 0, Use::Poll, t).is_some(), "a poll at {t:?}");
        }
        let left = signed_in + IDLE + minute;
        assert!(
            s.find_at(&id, 0, Use::Poll, left).is_none(),
            "polled for {:?}, idle since sign-in: still signed in",
            left - signed_in
        );
        // A page the human asks for is use: that session lasts IDLE past it.
        let id = s.open(0).expect("open");
        let opened = Instant::now();
        let page = opened + IDLE - minute;
        assert!(s.find_at(&id, 0, Use::Human, page).is_some());
        assert!(s.find_at(&id, 0, Use::Poll, page + IDLE - minute).is_some());
        assert!(s.find_at(&id, 0, Use::Poll, page + IDLE + minute).is_none());
    }

    #[test]
    fn sessions_end_when_idle_or_old() {
        let now = Instant::now();
        let ago = |d: Duration| now.checked_sub(d).expect("a monotonic clock this old");
        let held = |started, used| Held {
            epoch: 0,
            started,
            used,
        };
        assert!(held(now, now).live(now, 0));
        assert!(!held(now, now).live(now, 1), "another token generation");
        let minute = Duration::from_secs(60);
        assert!(held(ago(IDLE - minute), ago(IDLE - minute)).live(now, 0));
        assert!(!held(ago(IDLE), ago(IDLE)).live(now, 0), "idle");
        assert!(held(ago(LIFETIME - minute), now).live(now, 0));
        assert!(!held(ago(LIFETIME), now).live(now, 0), "used, but too old");
    }
}
