//! skillbox-ui: the human's view of a node — a web dashboard at `/ui` on the node's loopback API.
//!
//! Server-rendered pages ([`maud`] escapes every interpolated string, so a peer's advert text is
//! shown as text, never markup) over the node's library API, with one small script of progressive
//! enhancement (live call states, loading a SKILL.md file into the form); everything works without
//! it. No asset comes from outside the node.
//!
//! Access: a single-use sign-in code, which `skillbox dashboard` asks the node for over its 0600
//! socket (`POST /dashboard/codes`, `Shared::signin_codes`) and prints, typed on `/ui/login`, opens
//! a session. The page never takes the operator token: a look-alike page served on the node's
//! port while it is down would collect whatever the human is used to typing there, and a code is
//! good once, for a minute, on the node that issued it. The cookie holds only the session's id
//! (32 random bytes, never the token: a browser sends a `127.0.0.1` cookie to every port of that
//! host, so whatever else listens there receives it). Sessions live in
//! the node's memory (`Sessions`): they end on sign-out, after [`IDLE`] unused or [`LIFETIME`] in
//! all, when the node restarts, and when `api.token` is replaced (`skillbox token rotate`). The
//! cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends it) and
//! `Path` of the session's own random address, [`SESSION_ROOT`]`<128 random bits>`: the session's
//! pages are served there and nowhere else, so a browser sends the cookie to no other program (a
//! cookie ignores ports, but not paths, and a listener on another port, under the address or the
//! node's `*.localhost` name alike, cannot name a path it does not know). Every form carries the
//! session's CSRF token, drawn at sign-in apart from the id (nothing in the cookie computes it),
//! checked in constant time; the node's own guard in front of every route already refuses another site's
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
use axum::routing::{any, get, post};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use skillbox_node::api::{AppState, Mounts};
use tower::ServiceExt as _;

/// Where the dashboard lives.
pub const PREFIX: &str = "/ui";
/// Where each session's pages are served: this, then the session's own random part ([`Base`]).
pub const SESSION_ROOT: &str = "/ui/s/";
/// The random bytes of a session's address (128 bits: a listener cannot guess it).
const BASE_BYTES: usize = 16;
const COOKIE: &str = "skillbox_ui";
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
    // The session's pages at their logical addresses (`/ui/board`, as the pages name them),
    // reached only through [`in_session`], which maps a session's own address onto them: none
    // of these paths is a route of the node's.
    let session_pages = Router::new()
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
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ))
        .layer(Extension(sessions.clone()))
        .layer(Extension(Arc::new(pages::FormTickets::default())))
        .with_state(state);
    let open = Router::new()
        .route("/ui/login", get(pages::login_page).post(pages::login))
        .route("/ui/static/app.css", get(pages::css))
        .route("/ui/static/app.js", get(pages::js))
        // The address `skillbox node` prints, and a page's logical address (an old bookmark):
        // no session is served there (its cookie is not sent there), so they lead to sign-in.
        .route("/ui", any(signed_out))
        .route("/ui/{*page}", any(signed_out))
        .route("/ui/s/{base}", any(in_session))
        .route("/ui/s/{base}/{*page}", any(in_session));
    Mounts {
        public: open
            .layer(Extension(SessionPages(session_pages)))
            .layer(Extension(sessions))
            .layer(middleware::map_response(security_headers)),
        operator: Router::new(),
        json_rpc: Vec::new(),
    }
}

/// The session's pages (see [`mounts`]), as [`in_session`] reaches them.
#[derive(Clone)]
struct SessionPages(Router);

/// The random part of a session's address (`/ui/s/<this>`), as a request's path named it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Base(pub(crate) String);

impl Base {
    /// The session's address, the cookie's `Path`.
    pub(crate) fn path(&self) -> String {
        format!("{SESSION_ROOT}{}", self.0)
    }

    /// A page's logical address (`/ui/board?q=x`) at this session's (`/ui/s/<base>/board?q=x`);
    /// `None` for what is not a session's page: the sign-in page, the static files, an address
    /// already a session's, anything outside the dashboard. The one place the address's shape
    /// is written: the pages link through [`Session::at`], the page script reads the address
    /// a page gives it (`data-live`).
    fn at(&self, url: &str) -> Option<String> {
        let rest = url.strip_prefix(PREFIX)?;
        let page = rest.is_empty() || rest.starts_with('/') || rest.starts_with('?');
        let open = ["/login", "/static/", "/s/"]
            .iter()
            .any(|p| rest.starts_with(p));
        (page && !open).then(|| format!("{}{rest}", self.path()))
    }
}

/// `/ui/s/<base>/<page>`: the session's page `/ui/<page>`. The pages write every dashboard
/// address (links, forms, redirects) at the session's own as they render
/// ([`Session::at`]), so the browser keeps to the path its cookie is scoped to. Which session
/// the address is, the cookie says ([`require_session`] checks both).
async fn in_session(
    Extension(SessionPages(pages)): Extension<SessionPages>,
    req: Request,
) -> Response {
    let Some((base, page)) = req
        .uri()
        .path()
        .strip_prefix(SESSION_ROOT)
        .map(|p| p.split_once('/').unwrap_or((p, "")))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if base.len() != 2 * BASE_BYTES || !base.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return signed_out(req.method().clone()).await;
    }
    let base = Base(base.to_owned());
    let logical = match (page, req.uri().query()) {
        ("", None) => PREFIX.to_owned(),
        ("", Some(q)) => format!("{PREFIX}?{q}"),
        (p, None) => format!("{PREFIX}/{p}"),
        (p, Some(q)) => format!("{PREFIX}/{p}?{q}"),
    };
    let Ok(uri) = logical.parse() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // A new request, not this one re-addressed: this route's own path parameters ride in its
    // extensions, and the pages' `Path` extractors would be handed them too.
    let (parts, body) = req.into_parts();
    let mut page = Request::new(body);
    *page.method_mut() = parts.method;
    *page.uri_mut() = uri;
    *page.version_mut() = parts.version;
    *page.headers_mut() = parts.headers;
    page.extensions_mut().insert(base);
    match pages.oneshot(page).await {
        Ok(res) => res,
        Err(never) => match never {},
    }
}

/// The signed-in operator, as handlers see it: the CSRF token its forms must carry.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) csrf: String,
    /// The digest of the session's id (what sign-out ends).
    pub(crate) key: [u8; 32],
    /// The session's address, where its pages link.
    pub(crate) base: Base,
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
    /// The session's address ([`Base`]): its pages answer there only.
    base: Base,
    /// The session's CSRF token, drawn at sign-in: no part of the cookie, so whoever holds only
    /// the cookie cannot compute it.
    csrf: String,
}

/// A session just opened: the cookie's id (64 hex digits) and the session's address.
pub(crate) struct Opened {
    pub(crate) id: zeroize::Zeroizing<String>,
    pub(crate) base: Base,
}

impl Sessions {
    /// Open a session under the token generation `epoch`.
    pub(crate) fn open(&self, epoch: u64) -> std::io::Result<Opened> {
        use skillbox_node::crypto::random_bytes;
        let raw = zeroize::Zeroizing::new(random_bytes::<32>()?);
        let id = zeroize::Zeroizing::new(hex::encode(raw.as_ref()));
        let base = Base(hex::encode(random_bytes::<BASE_BYTES>()?));
        let csrf = hex::encode(random_bytes::<32>()?);
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, h| h.live(now, epoch));
        skillbox_node::api::make_room(&mut map, MAX_SESSIONS, |h| h.used);
        map.insert(
            key_of(&id),
            Held {
                epoch,
                started: now,
                used: now,
                base: base.clone(),
                csrf,
            },
        );
        Ok(Opened { id, base })
    }

    /// The live session `id` names under the current token generation, asked for at its own
    /// address `base` (marked used when the request is [`Use::Human`]); an ended one is
    /// forgotten.
    pub(crate) fn find(&self, id: &str, base: &Base, epoch: u64, by: Use) -> Option<Session> {
        self.find_at(id, base, epoch, by, Instant::now())
    }

    /// [`Sessions::find`] at `now` (the session clock, which the tests move).
    fn find_at(&self, id: &str, base: &Base, epoch: u64, by: Use, now: Instant) -> Option<Session> {
        let key = key_of(id);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let held = map.get_mut(&key)?;
        if !held.live(now, epoch) {
            map.remove(&key);
            return None;
        }
        if held.base != *base {
            return None;
        }
        if by == Use::Human {
            held.used = now;
        }
        Some(Session {
            csrf: held.csrf.clone(),
            key,
            base: held.base.clone(),
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
    /// The page at the logical address `logical` (`/ui/board?q=x`, as the pages name them) at
    /// this session's address, where a page links it: the only path the session's cookie is
    /// sent to. What is no session page (`/ui/login`, `/ui/static/…`) is left as it is.
    pub(crate) fn at(&self, logical: &str) -> String {
        self.base.at(logical).unwrap_or_else(|| logical.to_owned())
    }

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

/// The cookie that signs the browser in (`HttpOnly`, `SameSite=Strict`, scoped to the session's
/// own address `base`, so a browser sends it to no other path, whatever the port): the
/// session's id, never the operator's token.
pub(crate) fn session_cookie(id: &str, base: &Base) -> String {
    format!(
        "{COOKIE}={id}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}",
        base.path(),
        LIFETIME.as_secs()
    )
}

/// The cookie that signs the session at `base` out.
pub(crate) fn cleared_cookie(base: &Base) -> String {
    format!(
        "{COOKIE}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0",
        base.path()
    )
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
    // Set by [`in_session`] from the address asked for; nothing else reaches these routes.
    let base = req.extensions().get::<Base>().cloned();
    let found = base.and_then(|base| {
        cookie_tokens(req.headers())
            .iter()
            .find_map(|id| sessions.find(id, &base, epoch, by))
    });
    match found {
        Some(session) => {
            req.extensions_mut().insert(session);
            next.run(req).await
        }
        None => signed_out(req.method().clone()).await,
    }
}

/// The answer to a request no session is found for: a page asked for goes to sign-in, a form
/// posted is refused.
async fn signed_out(method: axum::http::Method) -> Response {
    if method == axum::http::Method::GET {
        return Redirect::to("/ui/login").into_response();
    }
    (
        StatusCode::UNAUTHORIZED,
        pages::plain_page("Signed out", "Sign in again at /ui/login."),
    )
        .into_response()
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

    /// A session opened now, found at its own address: its id and what handlers see.
    fn opened(s: &Sessions) -> (Opened, Session) {
        let o = s.open(0).expect("open");
        let found = s.find(&o.id, &o.base, 0, Use::Human).expect("live");
        (o, found)
    }

    #[test]
    fn csrf_tokens_are_per_session_and_checked_whole() {
        let s = Sessions::default();
        let (_, a) = opened(&s);
        let (_, b) = opened(&s);
        assert!(a.csrf_ok(&a.csrf.clone()));
        assert!(!a.csrf_ok(&b.csrf));
        assert!(!a.csrf_ok(""));
        assert!(!a.csrf_ok(&a.csrf[..10]));
        assert!(!a.csrf_ok("not hex"));
    }

    /// Review 24a L3, the token half: the CSRF token was an HMAC keyed by the cookie's id alone,
    /// so whoever caught the cookie computed every form's token without a page. Computed that
    /// way now, it is refused; the session's token is none of the cookie's derivations.
    #[test]
    fn the_csrf_token_cannot_be_computed_from_the_cookie() {
        let s = Sessions::default();
        let (o, session) = opened(&s);
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(o.id.as_bytes()).expect("key");
        mac.update(b"skillbox-ui-csrf-v1");
        let from_the_cookie = hex::encode(mac.finalize().into_bytes());
        assert!(
            !session.csrf_ok(&from_the_cookie),
            "the CSRF token is computed from the cookie's id"
        );
        for derived in [hex::encode(key_of(&o.id)), o.id.to_string()] {
            assert!(!session.csrf_ok(&derived));
        }
    }

    /// Review 24a L3: the cookie was `Path=/ui`, and a cookie ignores ports, so a listener on
    /// another port under the node's name (or its address) whose page asked for `/ui/x` received
    /// it. Its path is now the session's own random address, which no other page knows; the
    /// sign-in page and the logical addresses lie outside it.
    #[test]
    fn the_cookie_is_scoped_to_the_sessions_own_random_address() {
        let s = Sessions::default();
        let a = s.open(0).expect("open");
        let b = s.open(0).expect("open");
        let cookie = session_cookie(&a.id, &a.base);
        let path = cookie
            .split("; ")
            .find_map(|attr| attr.strip_prefix("Path="))
            .expect("a Path");
        assert_eq!(path, a.base.path());
        let random = path.strip_prefix(SESSION_ROOT).expect("under the root");
        assert_eq!(random.len(), 32, "128 bits");
        assert!(random.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.base, b.base, "each session its own");
        // A cookie's path covers the paths it is a prefix of: none of these.
        for elsewhere in [
            "/ui",
            "/ui/",
            "/ui/login",
            "/ui/approvals",
            "/ui/s/",
            "/ui/static/app.js",
        ] {
            assert!(!elsewhere.starts_with(path), "{elsewhere} under {path}");
        }
        assert!(cleared_cookie(&a.base).contains(&format!("Path={path};")));
        // The session answers at its own address only.
        assert!(s.find(&a.id, &a.base, 0, Use::Human).is_some());
        assert!(s.find(&a.id, &b.base, 0, Use::Human).is_none());
    }

    /// What the pages link (`/ui/board`) is written at the session's address; the sign-in page,
    /// the static files and what is not the dashboard's are left as they are. (Every page's
    /// links, rendered: `pages::sources::tests::every_pages_addresses_are_the_sessions`.)
    #[test]
    fn a_pages_addresses_are_written_at_the_sessions() {
        let s = Sessions::default();
        let (o, session) = opened(&s);
        let base = o.base;
        let at = base.path();
        for (logical, there) in [
            ("/ui", at.clone()),
            ("/ui/board?q=a&b=c", format!("{at}/board?q=a&b=c")),
            ("/ui/approvals", format!("{at}/approvals")),
            ("/ui/static/app.css", "/ui/static/app.css".to_owned()),
            ("/ui/login", "/ui/login".to_owned()),
            ("/uix", "/uix".to_owned()),
        ] {
            assert_eq!(session.at(logical), there, "{logical}");
        }
        assert_eq!(
            base.at("/ui/calls/x?y=1"),
            Some(format!("{at}/calls/x?y=1"))
        );
        assert_eq!(base.at(&format!("{at}/calls")), None);
        assert_eq!(base.at("/ui/login"), None);
        assert_eq!(base.at("https://example.com/ui"), None);
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
        let c = session_cookie("tok", &Base("00".into()));
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/ui/s/00;")
        );
    }

    #[test]
    fn sessions_end_on_sign_out_and_when_the_token_changes() {
        let s = Sessions::default();
        let find = |o: &Opened, epoch| s.find(&o.id, &o.base, epoch, Use::Human);
        let o = s.open(0).expect("open");
        assert_eq!(o.id.len(), 64);
        let session = find(&o, 0).expect("live");
        assert_eq!(session.csrf.len(), 64);
        assert!(s.find("00", &o.base, 0, Use::Human).is_none());
        // Another token generation: ended, and forgotten.
        assert!(find(&o, 1).is_none());
        assert!(find(&o, 0).is_none());
        let o = s.open(0).expect("open");
        s.end(&key_of(&o.id));
        assert!(find(&o, 0).is_none());
        // Past the cap, the least recently used goes.
        let first = s.open(0).expect("open");
        let rest: Vec<_> = (1..MAX_SESSIONS)
            .map(|_| s.open(0).expect("open"))
            .collect();
        std::thread::sleep(Duration::from_millis(2));
        assert!(find(&first, 0).is_some());
        let extra = s.open(0).expect("open");
        assert!(find(&extra, 0).is_some() && find(&first, 0).is_some());
        let ended = rest.iter().filter(|o| find(o, 0).is_none()).count();
        assert_eq!(ended, 1, "one of the least recently used ended");
    }

    /// A page on another port of this host planted a `skillbox_ui` cookie with a longer path,
    /// which the browser sends ahead of the real one: the human stays signed in.
    #[test]
    fn a_planted_cookie_ahead_of_the_session_does_not_sign_the_human_out() {
        let s = Sessions::default();
        let (o, session) = opened(&s);
        let mut h = HeaderMap::new();
        let sent = format!(
            "skillbox_ui=planted-by-another-port; skillbox_ui={}",
            &*o.id
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&sent).expect("header"),
        );
        let found = cookie_tokens(&h)
            .iter()
            .find_map(|c| s.find(c, &o.base, 0, Use::Human));
        assert_eq!(found.map(|f| f.csrf), Some(session.csrf));
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
        let Opened { id, base } = s.open(0).expect("open");
        let signed_in = Instant::now();
        let minute = Duration::from_secs(60);
        // A poll a minute, for longer than the idle limit: each is answered while it lasts.
        let mut t = signed_in;
        while t < signed_in + IDLE - minute {
            t += minute;
            assert!(
                s.find_at(&id, &base, 0, Use::Poll, t).is_some(),
                "a poll at {t:?}"
            );
        }
        let left = signed_in + IDLE + minute;
        assert!(
            s.find_at(&id, &base, 0, Use::Poll, left).is_none(),
            "polled for {:?}, idle since sign-in: still signed in",
            left - signed_in
        );
        // A page the human asks for is use: that session lasts IDLE past it.
        let Opened { id, base } = s.open(0).expect("open");
        let opened = Instant::now();
        let page = opened + IDLE - minute;
        assert!(s.find_at(&id, &base, 0, Use::Human, page).is_some());
        assert!(
            s.find_at(&id, &base, 0, Use::Poll, page + IDLE - minute)
                .is_some()
        );
        assert!(
            s.find_at(&id, &base, 0, Use::Poll, page + IDLE + minute)
                .is_none()
        );
    }

    #[test]
    fn sessions_end_when_idle_or_old() {
        let now = Instant::now();
        let ago = |d: Duration| now.checked_sub(d).expect("a monotonic clock this old");
        let held = |started, used| Held {
            epoch: 0,
            started,
            used,
            base: Base(String::new()),
            csrf: String::new(),
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
