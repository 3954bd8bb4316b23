//! The dashboard (`/ui`) of real `skillbox node` processes, over HTTP as a browser sends it:
//! sign-in and the cookie, the login page for everyone else, CSRF and cross-site refusals, the
//! security headers on every page, a peer's hostile text shown as text, and a leak scan of every
//! page on both nodes after a call (the browser test, `ui_browser.rs`, drives the same pages).

use std::time::Duration;

use crate::support::procs::{self, NodeDir, assert_no_markers};
use reqwest::header::{HeaderMap, HeaderValue};
use skillbox_node::api::url_component as enc;

const PAGES: &[&str] = &[
    "/ui",
    "/ui/board",
    "/ui/skills",
    "/ui/sources",
    "/ui/calls",
    "/ui/approvals",
    "/ui/ledger",
    "/ui/peers",
    "/ui/metrics",
];

struct Browser {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    base: String,
    /// The node's data dir, where `skillbox dashboard` asks it for a sign-in code.
    dir: std::path::PathBuf,
    /// Each session signed in: its cookie (`name=value`) and its own address (`/ui/s/<random>`),
    /// where the browser asks for its pages. The tests name pages by their logical address
    /// (`/ui/sources`); [`Browser::send`] asks at the session's and answers redirects logically.
    sessions: std::cell::RefCell<Vec<(String, String)>>,
}

struct Page {
    status: u16,
    headers: HeaderMap,
    text: String,
}

/// Where [`Browser::send`] asks: a page by its logical address (`/ui/sources`), asked at the
/// session's address and its redirects answered logically, or a path exactly as written (a
/// page elsewhere guessing addresses).
enum To<'a> {
    Page(&'a str),
    Exactly(&'a str),
}

impl<'a> From<&'a str> for To<'a> {
    fn from(path: &'a str) -> To<'a> {
        To::Page(path)
    }
}

impl Browser {
    fn new(node: &NodeDir) -> Browser {
        Browser {
            rt: tokio::runtime::Runtime::new().expect("runtime"),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: node.base.clone(),
            dir: node.dir.clone(),
            sessions: Default::default(),
        }
    }

    /// The address of the session whose cookie `cookie` carries, if one signed in here.
    fn session_at(&self, cookie: Option<&str>) -> Option<String> {
        let cookie = cookie?;
        self.sessions
            .borrow()
            .iter()
            .find(|(c, _)| cookie.contains(c.as_str()))
            .map(|(_, at)| at.clone())
    }

    /// The path `to` is asked at, and the session's address where it is a page of one (its
    /// redirects then answered logically): a page's logical address at the session's, the
    /// sign-in page and a session's own address as they are.
    fn asked_at(&self, to: To<'_>, cookie: Option<&str>) -> (String, Option<String>) {
        let path = match to {
            To::Exactly(path) => return (path.to_owned(), None),
            To::Page(path) => path,
        };
        let at = self.session_at(cookie);
        let path = match (&at, path.strip_prefix("/ui")) {
            (Some(at), Some(rest))
                if (rest.is_empty() || rest.starts_with(['/', '?']))
                    && !rest.starts_with("/login")
                    && !rest.starts_with("/s/") =>
            {
                format!("{at}{rest}")
            }
            _ => path.to_owned(),
        };
        (path, at)
    }

    /// `method` to `to` with the cookie, the form, and `headers` as a browser adds them
    /// (`Origin`, `Sec-Fetch-Site`).
    fn send<'a>(
        &self,
        method: &str,
        to: impl Into<To<'a>>,
        cookie: Option<&str>,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let (path, at) = self.asked_at(to.into(), cookie);
        let mut page = self.rt.block_on(async {
            let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let mut r = self.http.request(m, format!("{}{path}", self.base));
            if let Some(c) = cookie {
                r = r.header("cookie", c);
            }
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            if method == "POST" {
                let body: String = form
                    .iter()
                    .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
                    .collect::<Vec<_>>()
                    .join("&");
                r = r
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(body);
            }
            let resp = r.send().await.expect("request");
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let text = resp.text().await.unwrap_or_default();
            Page {
                status,
                headers,
                text,
            }
        });
        if let Some(at) = at
            && let Some(logical) = page
                .headers
                .get("location")
                .and_then(|v| v.to_str().ok())
                .and_then(|l| l.strip_prefix(at.as_str()))
                .and_then(|rest| HeaderValue::from_str(&format!("/ui{rest}")).ok())
        {
            page.headers.insert("location", logical);
        }
        page
    }

    fn get(&self, path: &str, cookie: Option<&str>) -> Page {
        self.send("GET", path, cookie, &[], &[])
    }

    fn post(&self, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Page {
        self.send("POST", path, cookie, form, &[])
    }

    /// Sign in with a code from `skillbox dashboard`; the session cookie (`name=value`).
    fn sign_in(&self) -> String {
        let (code, _) = procs::dashboard_code(&self.dir);
        self.sign_in_with(&code)
    }

    /// Sign in with `code`; the session cookie (`name=value`).
    fn sign_in_with(&self, code: &str) -> String {
        let p = self.post("/ui/login", None, &[("code", code)]);
        assert_eq!(p.status, 303, "{}", p.text);
        let set = p
            .headers
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .expect("set-cookie")
            .to_owned();
        for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui/s/"] {
            assert!(set.contains(attr), "{set}");
        }
        let cookie = set.split(';').next().expect("cookie").to_owned();
        let at = header(&p, "location").to_owned();
        assert!(
            set.contains(&format!("Path={at};")),
            "the cookie's path is not the session's address {at}: {set}"
        );
        self.sessions.borrow_mut().push((cookie.clone(), at));
        cookie
    }
}

/// The CSRF token a page's forms carry.
fn csrf_of(page: &str) -> String {
    field_of(page, "csrf")
}

/// The value of the first form field `name` on `page` (a hidden input's).
fn field_of(page: &str, name: &str) -> String {
    let attr = format!("name=\"{name}\" value=\"");
    let at = page
        .find(&attr)
        .unwrap_or_else(|| panic!("a form with a {name} field: {page}"));
    let rest = &page[at + attr.len()..];
    rest[..rest.find('"').expect("end of value")].to_owned()
}

fn header<'a>(p: &'a Page, name: &str) -> &'a str {
    p.headers
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
        .unwrap_or("")
}

/// Words a peer reversed with a right-to-left override (they read "taste.html"), an isolate,
/// and text hidden between zero-width characters.
const SPOOF: &str =
    "\u{202E}lmth.etsat\u{202C} \u{2067}x\u{2069} hid\u{200B}den\u{200D}\u{2060} \u{200F}\u{061C}";

/// Audit U3: no character on a page that reorders what a human reads (bidi overrides,
/// embeddings, isolates, marks) or that a human does not see (zero-width ones).
fn assert_nothing_reordered_or_hidden(what: &str, page: &str) {
    let bad: Vec<char> = page
        .chars()
        .filter(|c| {
            matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200F}' | '\u{2060}' | '\u{061C}' | '\u{FEFF}')
        })
        .collect();
    assert!(bad.is_empty(), "{what}: {bad:?}");
}

#[test]
fn the_dashboard_signs_in_refuses_forgeries_escapes_peers_and_shows_no_secret() {
    let root = tempfile::tempdir().expect("tempdir");
    let (_provider, bx, owner, caller) = procs::pair(root.path());
    let doc = procs::skill_doc("taste", "UI-BODY-MARK", &["songs"]);
    procs::offer_taste(
        &owner,
        &caller,
        "sk-UI-KEY-MARK",
        &doc,
        "UI-SOURCE-MARK Bonobo\n",
    );
    let (oa, ca) = (owner.api(), caller.api());
    // A hostile owner's description: markup and an attribute breakout, shown as text only; a
    // right-to-left override that makes the words after it read as another skill's, an isolate,
    // and zero-width characters that hide text from the human who reads the board.
    oa.add_skill(&format!(
        "---\nname: lure\ndescription: 'Tastes <script>alert(\"x\")</script> \"><img src=x onerror=alert(1)> & more {SPOOF}'\nprovider: openai\nmodel: gpt-ui-model\nkey: openai-key\n---\nLURE-BODY-MARK\n",
    ));
    ca.wait_board(&owner.peer_id, "lure", Duration::from_secs(20));
    // The caller's node holds the peer's bytes as sent (so what follows is no vacuous check).
    let held = ca.get("/board").body.to_string();
    assert!(held.contains('\u{202E}'), "{held}");
    let b = Browser::new(&caller);

    // No session: every page sends the login page's address; a POST is refused.
    for path in PAGES {
        let p = b.get(path, None);
        assert_eq!(p.status, 303, "{path}");
        assert_eq!(header(&p, "location"), "/ui/login", "{path}");
    }
    assert_eq!(b.post("/ui/sources", None, &[("name", "x")]).status, 401);
    let login = b.get("/ui/login", None);
    assert_eq!(login.status, 200);
    assert!(
        login.text.contains("name=\"code\"") && !login.text.contains("type=\"password\""),
        "{}",
        login.text
    );
    // Review 24a L5: what a look-alike page could collect opens nothing. The operator token is
    // no way in on the page (it used to be the only one: 303, signed in); a sign-in code is
    // good once, on the node that issued it.
    let (code, url) = procs::dashboard_code(&caller.dir);
    assert!(url.ends_with("/ui/login") && !url.contains(&code), "{url}");
    let (owners, _) = procs::dashboard_code(&owner.dir);
    let refused = |field: &str, value: &str| {
        let p = b.post("/ui/login", None, &[(field, value)]);
        assert_eq!(p.status, 401, "{field}={value}: {}", p.text);
        assert!(p.headers.get("set-cookie").is_none());
    };
    refused("token", &caller.token);
    refused("code", &caller.token);
    refused("code", "nope");
    refused("code", &owners);
    let cookie = b.sign_in_with(&code);
    refused("code", &code);
    assert_eq!(b.get("/ui", Some("skillbox_ui=nope")).status, 303);
    assert_eq!(b.get("/ui", Some(&cookie)).status, 200);

    // Signed in: every page, each with the strict headers.
    // A page on another port of this host planted a session cookie with a longer path, which
    // the browser sends first: the human is still signed in.
    let planted = format!("skillbox_ui=planted-by-another-port; {cookie}");
    assert_eq!(b.get("/ui/approvals", Some(&planted)).status, 200);
    for path in PAGES {
        let p = b.get(path, Some(&cookie));
        assert_eq!(p.status, 200, "{path}: {}", p.text);
        assert_eq!(
            header(&p, "content-security-policy"),
            skillbox_ui::CSP,
            "{path}"
        );
        assert_eq!(header(&p, "x-frame-options"), "DENY", "{path}");
        assert_eq!(header(&p, "x-content-type-options"), "nosniff", "{path}");
        assert!(!p.text.contains("<script>"), "{path}: inline script");
        assert!(!p.text.contains(" style=\""), "{path}: inline style");
    }
    // The peer's markup is text, with nothing that reorders or hides what a human reads.
    let board = b.get("/ui/board?q=tastes", Some(&cookie)).text;
    assert!(board.contains("&lt;script&gt;"), "{board}");
    assert_nothing_reordered_or_hidden("the board", &board);
    assert!(board.contains("lmth.etsat"), "the words stay: {board}");
    // The terminal's board (`peer_text.rs`) passes the same cleaning.
    let shown = procs::cli_ok(&caller.dir, &["board"]);
    assert_nothing_reordered_or_hidden("skillbox board", &shown);
    assert!(shown.contains("lmth.etsat"), "the words stay: {shown}");
    assert!(
        !board.contains("<script>alert") && !board.contains("<img src=x"),
        "{board}"
    );
    let filtered = b
        .get(
            "/ui/board?provider=openai&platform=insecure-dev",
            Some(&cookie),
        )
        .text;
    assert!(
        filtered.contains(">taste<") && filtered.contains(">lure<"),
        "{filtered}"
    );
    assert!(
        !b.get("/ui/board?platform=sev-snp", Some(&cookie))
            .text
            .contains(">taste<")
    );

    // Forms: without the CSRF token, with another's, or from another site: refused, nothing kept.
    let csrf = csrf_of(&b.get("/ui/sources", Some(&cookie)).text);
    let form = |token: &str| {
        vec![
            ("csrf", token.to_owned()),
            ("name", "forged".to_owned()),
            ("kind", "text".to_owned()),
            ("content", "x".to_owned()),
        ]
    };
    for bad in ["", "00", &"ab".repeat(32)] {
        let f = form(bad);
        let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            b.post("/ui/sources", Some(&cookie), &f).status,
            403,
            "csrf {bad:?}"
        );
    }
    // Every form the dashboard posts, each complete but for its token: one check for all of them,
    // so a route cannot be added without it.
    for (path, fields) in [
        ("/ui/skills", vec![("doc", "---\nname: forged\n---\nx\n")]),
        ("/ui/skills/taste/delete", vec![]),
        ("/ui/sources/delete", vec![("name", "spotify_songs")]),
        ("/ui/sources/unshare", vec![("name", "spotify_songs")]),
        (
            "/ui/calls",
            vec![("peer", "12D3KooW"), ("skill", "taste"), ("request", "x")],
        ),
        ("/ui/approvals", vec![("id", "c1"), ("decision", "allow")]),
        ("/ui/peers", vec![("addr", "/ip4/127.0.0.1/tcp/1")]),
        ("/ui/boxes/check", vec![]),
        ("/ui/logout", vec![]),
    ] {
        for bad in ["", "00"] {
            let mut f = fields.clone();
            f.push(("csrf", bad));
            let refused = b.post(path, Some(&cookie), &f);
            assert_eq!(refused.status, 403, "{path} csrf {bad:?}: {}", refused.text);
        }
    }
    let skills = b.get("/ui/skills", Some(&cookie));
    assert_eq!(skills.status, 200, "the forged sign-out ended nothing");
    assert!(!skills.text.contains("forged"), "{}", skills.text);
    let f = form(&csrf);
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cross = b.send(
        "POST",
        "/ui/sources",
        Some(&cookie),
        &f,
        &[("origin", "http://evil.example")],
    );
    assert_eq!(cross.status, 403, "{}", cross.text);
    // Audit U2: a browser says where a request came from even when it sends no `Origin`; a
    // page of another site, or on another port of this host (the same site), is refused
    // before the form is read, whatever cookie and token it carries.
    for site in ["cross-site", "same-site"] {
        let p = b.send(
            "POST",
            "/ui/sources",
            Some(&cookie),
            &f,
            &[("sec-fetch-site", site)],
        );
        assert_eq!(p.status, 403, "{site}: {}", p.text);
        assert!(p.text.contains("origin_not_allowed"), "{site}: {}", p.text);
        let page = b.send(
            "GET",
            "/ui/sources",
            Some(&cookie),
            &[],
            &[("sec-fetch-site", site)],
        );
        assert_eq!(page.status, 403, "{site}: {}", page.text);
    }
    assert!(!b.get("/ui/sources", Some(&cookie)).text.contains("forged"));
    // The genuine form works, and content is never shown back.
    let ok = b.post("/ui/sources", Some(&cookie), &f);
    assert_eq!(ok.status, 303, "{}", ok.text);
    let listed = b.get("/ui/sources", Some(&cookie)).text;
    assert!(
        listed.contains("forged") && !listed.contains("UI-SOURCE-MARK"),
        "{listed}"
    );
    // Bad input is a page naming what is wrong, not a write.
    let bad_name: Vec<(&str, &str)> = vec![
        ("csrf", &csrf),
        ("name", "../x"),
        ("kind", "text"),
        ("content", "y"),
    ];
    let p = b.post("/ui/sources", Some(&cookie), &bad_name);
    assert_eq!(p.status, 400);
    assert!(p.text.contains("class=\"notice\""), "{}", p.text);

    // A call from the dashboard, then every page of both nodes scanned.
    let started = b.post(
        "/ui/calls",
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("peer", &owner.peer_id),
            ("skill", "taste"),
            ("request", "UI-REQUEST-MARK what do I like?"),
        ],
    );
    assert_eq!(started.status, 303, "{}", started.text);
    let at = header(&started, "location").to_owned();
    let id = at.trim_start_matches("/ui/calls/").to_owned();
    let done = ca
        .wait_state(&id, &["answered", "failed"], Duration::from_secs(30))
        .expect("the call ends");
    assert_eq!(done["state"], "answered", "{done}");
    oa.wait_state(&id, &["ran", "failed"], Duration::from_secs(30));
    let detail = b.get(&at, Some(&cookie)).text;
    assert!(
        detail.contains("The double read") && detail.contains("insecure-dev"),
        "{detail}"
    );
    let ledger = b.get("/ui/ledger?source=songs", Some(&cookie)).text;
    assert!(
        ledger.contains("staked request") && ledger.contains("Verified"),
        "{ledger}"
    );
    let live = b.get("/ui/live/calls", Some(&cookie)).text;
    assert!(live.contains(&id) && live.contains("answered"), "{live}");

    // Health: the box is listed reachable, with its providers; asking again needs the form's
    // token; the metrics page shows the calls just made.
    let overview = b.get("/ui", Some(&cookie)).text;
    assert!(
        overview.contains(&format!("data-box=\"{}\"", bx.url.trim_end_matches('/')))
            && overview.contains(">yes<")
            && overview.contains("openai"),
        "{overview}"
    );
    assert_eq!(b.post("/ui/boxes/check", Some(&cookie), &[]).status, 403);
    let checked = b.post("/ui/boxes/check", Some(&cookie), &[("csrf", &csrf)]);
    assert_eq!(checked.status, 303);
    assert_eq!(header(&checked, "location"), "/ui");
    let metrics = b.get("/ui/metrics", Some(&cookie)).text;
    assert!(
        metrics.contains("call_duration_seconds") && metrics.contains("state=&quot;answered&quot;"),
        "{metrics}"
    );

    let ob = Browser::new(&owner);
    let ocookie = ob.sign_in();
    for name in ["taste", "lure"] {
        let p = ob.get(&format!("/ui/skills/{name}"), Some(&ocookie));
        assert_eq!(p.status, 200, "{}", p.text);
        assert!(
            p.text.contains("OpenWOP manifest") && p.text.contains("Offered"),
            "{}",
            p.text
        );
    }
    let mut seen = String::new();
    for path in PAGES
        .iter()
        .chain(["/ui/live/calls", "/ui/skills/taste", "/ui/skills/lure"].iter())
    {
        seen.push_str(&b.get(path, Some(&cookie)).text);
        seen.push_str(&ob.get(path, Some(&ocookie)).text);
    }
    seen.push_str(&b.get(&at, Some(&cookie)).text);
    seen.push_str(&ob.get(&at, Some(&ocookie)).text);
    assert_no_markers(
        "the dashboard pages",
        &seen,
        &[
            "UI-BODY-MARK",
            "LURE-BODY-MARK",
            "sk-UI-KEY-MARK",
            "gpt-test",
            "gpt-ui-model",
            "UI-SOURCE-MARK",
        ],
    );
    // The owner's node never shows the caller's request.
    let mut owner_pages = String::new();
    for path in PAGES.iter().chain(std::iter::once(&at.as_str())) {
        owner_pages.push_str(&ob.get(path, Some(&ocookie)).text);
    }
    assert_no_markers("the owner's dashboard", &owner_pages, &["UI-REQUEST-MARK"]);

    // Signing out ends the session's forms (the cookie is cleared).
    let out = b.post("/ui/logout", Some(&cookie), &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert!(header(&out, "set-cookie").contains("Max-Age=0"));
}

/// Issue 30, item 1. The dashboard's cookie was the operator token itself: a browser sends a
/// `127.0.0.1` cookie to every port of that host (`SameSite` ignores ports), so any process on
/// another loopback port got the node's full API; signing out left the token valid, and it never
/// changed. Now the cookie is a session's random id, useless against the API, ended on the node
/// by sign-out and by `skillbox token rotate`, which also ends the old token.
#[test]
fn the_cookie_is_a_session_that_sign_out_and_token_rotate_end() {
    let root = tempfile::tempdir().expect("tempdir");
    // No call is made: the box is never reached.
    let mut node = procs::init_node(root.path(), "solo", "http://127.0.0.1:9", None, |t| t);
    node.start(&[]);
    let b = Browser::new(&node);
    // By address, the login page says the cookie reaches every local port (and names no host).
    let config = std::fs::read_to_string(node.dir.join("config.toml")).expect("config");
    let name = config
        .lines()
        .find_map(|l| l.strip_prefix("hosts = [\""))
        .and_then(|l| l.split('"').next())
        .expect("init names the dashboard's host")
        .to_owned();
    let login = b.get("/ui/login", None).text;
    assert!(
        login.contains("data-by-address") && !login.contains(&name),
        "{login}"
    );
    let cookie = b.sign_in();
    let (_, id) = cookie.split_once('=').expect("name=value");
    assert!(
        !id.contains(&node.token) && id.len() == 64 && id.bytes().all(|c| c.is_ascii_hexdigit()),
        "the cookie carries the operator token or is not a session id: {cookie}"
    );
    // What another port's listener would receive, used as a bearer token: refused.
    let stolen = procs::Api {
        base: node.base.clone(),
        token: id.to_owned(),
    };
    assert_eq!(stolen.get("/node").status, 401);
    assert_eq!(stolen.get("/sources").status, 401);
    assert_eq!(node.api().get("/node").status, 200);

    // Review 24a L3: the cookie's path is the session's own random address, and only there do
    // its pages answer. A page on another port (under the address or the node's name alike)
    // can have the browser ask for the dashboard's logical addresses, or guess another
    // session's, and gets no cookie there; sent there anyway, the cookie opens nothing.
    let at = b.session_at(Some(&cookie)).expect("signed in");
    let random = at.strip_prefix("/ui/s/").expect("the session's address");
    assert!(
        random.len() == 32 && random.bytes().all(|c| c.is_ascii_hexdigit()),
        "{at}"
    );
    assert_eq!(b.get("/ui/approvals", Some(&cookie)).status, 200);
    let guessed = format!("/ui/s/{}/approvals", "0".repeat(32));
    for elsewhere in ["/ui", "/ui/approvals", "/ui/x", &guessed] {
        let p = b.send("GET", To::Exactly(elsewhere), Some(&cookie), &[], &[]);
        assert_eq!(
            (p.status, header(&p, "location")),
            (303, "/ui/login"),
            "{elsewhere} answered to the session's cookie: {}",
            p.text
        );
    }
    let csrf = csrf_of(&b.get("/ui/sources", Some(&cookie)).text);
    let posted = b.send(
        "POST",
        To::Exactly("/ui/sources"),
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("name", "elsewhere"),
            ("kind", "text"),
            ("content", "x"),
        ],
        &[],
    );
    assert_eq!(posted.status, 401, "{}", posted.text);
    assert!(
        !b.get("/ui/sources", Some(&cookie))
            .text
            .contains("elsewhere")
    );

    // Sign-out ends the session on the node: a copy of the cookie is dead too; another stays.
    let other = b.sign_in();
    assert_ne!(other, cookie, "every sign-in is a new session");
    let csrf = csrf_of(&b.get("/ui/sources", Some(&cookie)).text);
    let out = b.post("/ui/logout", Some(&cookie), &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert!(header(&out, "set-cookie").contains("Max-Age=0"));
    let after = b.get("/ui", Some(&cookie));
    assert_eq!(after.status, 303, "the signed-out cookie still works");
    assert_eq!(header(&after, "location"), "/ui/login");
    let forged = b.post(
        "/ui/sources",
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("name", "after-sign-out"),
            ("kind", "text"),
            ("content", "x"),
        ],
    );
    assert_eq!(forged.status, 401);
    assert_eq!(b.get("/ui", Some(&other)).status, 200);

    // `skillbox token rotate` while the node runs: a new 0600 file, the old token refused, the
    // new one taken, every session ended, and only the new token signs in.
    let out = procs::cli(&node.dir, &["token", "rotate"]);
    assert!(out.status.success(), "{}", procs::text(&out));
    let path = node.dir.join("api.token");
    let new_token = std::fs::read_to_string(&path)
        .expect("api.token")
        .trim()
        .to_owned();
    assert!(new_token.starts_with("sbx_") && new_token != node.token);
    assert!(
        !procs::text(&out).contains(&new_token),
        "the new token is printed"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let leftovers: Vec<_> = std::fs::read_dir(&node.dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("api.token") && n != "api.token")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(
        node.api().get("/node").status,
        401,
        "the old token still works"
    );
    let fresh = procs::Api {
        base: node.base.clone(),
        token: new_token.clone(),
    };
    assert_eq!(fresh.get("/node").status, 200);
    let ended = b.get("/ui", Some(&other));
    assert_eq!(ended.status, 303, "a session outlived the rotation");
    let signed = b.sign_in();
    assert_eq!(b.get("/ui", Some(&signed)).status, 200);
    // The file rewritten with the same token: nobody is signed out.
    std::fs::write(&path, format!("{new_token}\n")).expect("rewrite api.token");
    assert_eq!(b.get("/ui", Some(&signed)).status, 200);
    assert_eq!(fresh.get("/node").status, 200);
    // A token file that changes into something unreadable leaves no operator token at all
    // (the old one was meant to end); `token rotate` mends it.
    std::fs::write(&path, "short").expect("damage api.token");
    assert_eq!(
        fresh.get("/node").status,
        401,
        "a damaged token file kept the old token"
    );
    assert_eq!(b.get("/ui", Some(&signed)).status, 303);
    procs::cli_ok(&node.dir, &["token", "rotate"]);
    let new_token = std::fs::read_to_string(&path)
        .expect("api.token")
        .trim()
        .to_owned();
    let fresh = procs::Api {
        base: node.base.clone(),
        token: new_token,
    };
    assert_eq!(fresh.get("/node").status, 200);
    // The CLI reads the new token from the file.
    procs::cli_ok(&node.dir, &["source", "list", "--json"]);
}

/// A node whose data dir holds what an older node left — sources stored under pasted provider
/// keys as their names, and the ledger of a call that staked them — prints such a name on no
/// surface: `skillbox source list` (and `--json`), `skillbox ledger` in each format, `GET
/// /sources`, `GET /ledger` in each format, every dashboard page (the ledger's per-source
/// timeline too) and the node's log hold no part of a key; each shows the one masked form. The
/// listing names the handle that still reaches the source: the ledger filters by it and `source
/// rm` removes by it.
#[test]
fn a_source_stored_under_a_pasted_key_is_shown_masked_on_every_surface() {
    use skillbox_node::sources::KEY_NAMED;
    use skillbox_testkit::leak::assert_no_part_of;
    use skillbox_testkit::old_node::{self, PASTED_KEYS};
    let root = tempfile::tempdir().expect("tempdir");
    let mut node = procs::init_node(root.path(), "n", "http://127.0.0.1:9", None, |t| t);
    old_node::sources_named_by(&node.dir, &PASTED_KEYS);
    old_node::ledger_a_stake_of(&node.dir, &PASTED_KEYS);
    node.start(&[]);
    // Everything every surface printed or answered, for the scan at the end.
    let mut shown = String::new();
    let said = |shown: &mut String, args: &[&str]| -> String {
        let o = procs::cli(&node.dir, args);
        let out = procs::text(&o);
        assert!(o.status.success(), "skillbox {}: {out}", args.join(" "));
        shown.push_str(&out);
        out
    };
    let listing = said(&mut shown, &["source", "list"]);
    assert_eq!(listing.matches(KEY_NAMED).count(), 2, "{listing}");
    let handles: Vec<String> = listing
        .split_whitespace()
        .filter(|w| w.starts_with(skillbox_node::sources::HANDLE_PREFIX))
        .map(str::to_owned)
        .collect();
    assert_eq!(handles.len(), 2, "a handle a source: {listing}");
    said(&mut shown, &["source", "list", "--json"]);
    let table = said(&mut shown, &["ledger"]);
    assert!(table.contains(KEY_NAMED), "{table}");
    for format in ["json", "jsonl", "csv"] {
        said(&mut shown, &["ledger", "--format", format]);
    }
    said(&mut shown, &["ledger", "verify"]);
    // Issue keys2: the masked export read as tampered offline (`hash_mismatch` at entry 2, the
    // decision naming the key-named sources). Its masked lines are redactions: it verifies
    // under the node key, naming them (the decision and the stake), and so does the check
    // against a saved head (which reads the node's masked ledger back).
    let stdout = |args: &[&str]| {
        let o = procs::cli(&node.dir, args);
        assert!(
            o.status.success(),
            "skillbox {}: {}",
            args.join(" "),
            procs::text(&o)
        );
        o.stdout
    };
    let page: serde_json::Value =
        serde_json::from_slice(&stdout(&["ledger", "--json"])).expect("json");
    let key = page["nodeKey"].as_str().expect("nodeKey").to_owned();
    let export = root.path().join("ledger.jsonl");
    std::fs::write(&export, stdout(&["ledger", "--format", "jsonl"])).expect("write");
    let export = export.to_str().expect("path");
    let verified = said(
        &mut shown,
        &["ledger", "verify", "--file", export, "--key", &key],
    );
    assert!(
        verified.contains("ledger verified: 3 entries")
            && verified.contains("with 2 redacted entries (2, 3)"),
        "{verified}"
    );
    let saved = root.path().join("head.json");
    std::fs::write(&saved, stdout(&["ledger", "head"])).expect("write");
    let saved = saved.to_str().expect("path");
    said(&mut shown, &["ledger", "verify", "--head", saved]);
    said(
        &mut shown,
        &[
            "ledger", "verify", "--file", export, "--key", &key, "--head", saved,
        ],
    );

    let b = Browser::new(&node);
    let bearer = format!("Bearer {}", node.token);
    let api = |shown: &mut String, path: &str| -> String {
        let p = b.send("GET", path, None, &[], &[("authorization", &bearer)]);
        assert_eq!(p.status, 200, "{path}: {}", p.text);
        shown.push_str(&p.text);
        p.text
    };
    api(&mut shown, "/sources");
    for format in ["json", "jsonl", "csv"] {
        let ledger = api(&mut shown, &format!("/ledger?format={format}"));
        assert!(ledger.contains(KEY_NAMED), "{ledger}");
        if format == "jsonl" {
            // The API's own export, as an auditor would be handed it.
            let v = skillbox_node::ledger::verify_export(&ledger, &key).expect("the node key");
            assert_eq!((v.ok, v.redacted), (true, vec![2, 3]), "{ledger}");
        }
    }
    let by_handle: serde_json::Value = serde_json::from_str(&api(
        &mut shown,
        &format!("/ledger?source={}", enc(&handles[0])),
    ))
    .expect("json");
    assert_eq!(
        by_handle["total"], 2,
        "the decision and the stake naming it: {by_handle}"
    );

    let cookie = b.sign_in();
    for path in PAGES {
        let p = b.get(path, Some(&cookie));
        assert_eq!(p.status, 200, "{path}: {}", p.text);
        shown.push_str(&p.text);
    }
    let ledger = b.get("/ui/ledger", Some(&cookie)).text;
    assert!(
        ledger.contains(&format!("aria-label=\"Source {KEY_NAMED} (sk-a…)\"")),
        "{ledger}"
    );

    for h in &handles {
        said(&mut shown, &["source", "rm", h]);
    }
    let left = said(&mut shown, &["source", "list", "--json"]);
    assert!(left.contains("\"sources\": []"), "{left}");
    node.kill();
    let log = node.log();
    for key in PASTED_KEYS {
        assert_no_part_of("what the surfaces showed", &shown, key);
        assert_no_part_of("node.log", &log, key);
    }
}

/// Review 27 F4. The import form's post answered with the page itself (to show its notes,
/// review 26 V4) and its CSRF token is the session's, so a reload of that page, or a restored
/// tab, sent the same SKILL.md again: the skill was imported again and the ceiling the owner had
/// set since (`skill set`, `PATCH /skills/{name}`) was reset to the file's. Now the post spends
/// the form's one-time ticket and answers 303 to the page that shows the notes, once; the same
/// body sent again imports nothing (409) and the owner's ceiling stays.
#[test]
fn an_import_sent_again_imports_nothing_and_the_owners_ceiling_stays() {
    let root = tempfile::tempdir().expect("tempdir");
    // No call is made: the box is never reached.
    let mut node = procs::init_node(root.path(), "solo", "http://127.0.0.1:9", None, |t| t);
    node.start(&[]);
    let api = node.api();
    let b = Browser::new(&node);
    let cookie = b.sign_in();
    let page = b.get("/ui/skills", Some(&cookie)).text;
    let (csrf, ticket) = (csrf_of(&page), field_of(&page, "ticket"));
    let doc = procs::skill_doc("taste", "F4-BODY-MARK", &[]);
    let form = [
        ("csrf", csrf.as_str()),
        ("ticket", ticket.as_str()),
        ("doc", doc.as_str()),
    ];
    let posted = b.post("/ui/skills", Some(&cookie), &form);
    assert_eq!(posted.status, 303, "{}", posted.text);
    let notes_at = header(&posted, "location").to_owned();
    assert!(notes_at.starts_with("/ui/skills?imported="), "{notes_at}");
    // The notes review 26 V4 added, on the page the redirect leads to; shown once.
    let shown = b.get(&notes_at, Some(&cookie));
    assert_eq!(shown.status, 200, "{}", shown.text);
    for said in [
        "data-imported=\"taste\"",
        "Added taste",
        "What it spends of yours",
        "gpt-test",
        "openai-key",
        "Ceilings in force",
    ] {
        assert!(shown.text.contains(said), "{said:?}: {}", shown.text);
    }
    let reloaded = b.get(&notes_at, Some(&cookie));
    assert_eq!(reloaded.status, 200, "{}", reloaded.text);
    assert!(
        !reloaded.text.contains("data-imported") && reloaded.text.contains("shown once"),
        "{}",
        reloaded.text
    );
    // Another session of the same node finds none of them.
    let other = b.sign_in();
    assert!(
        !b.get(&notes_at, Some(&other))
            .text
            .contains("data-imported"),
        "another session's notes"
    );

    // The owner's ceiling, as `skill set` sets it.
    let calls_per_day = || api.get("/skills").body["skills"][0]["limits"]["callsPerDay"].clone();
    let set = api.req(
        "PATCH",
        "/skills/taste",
        Some((
            "application/json",
            br#"{"limits": {"callsPerDay": 7}}"#.to_vec(),
        )),
    );
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(calls_per_day(), 7);

    // The browser sends the same post again, token and all.
    let resent = b.post("/ui/skills", Some(&cookie), &form);
    assert_eq!(
        calls_per_day(),
        7,
        "the import sent again reset the owner's ceiling (answered {})",
        resent.status
    );
    assert_eq!(resent.status, 409, "{}", resent.text);
    assert!(
        resent.text.contains("Nothing was imported"),
        "{}",
        resent.text
    );
    assert_no_markers("the refused post's page", &resent.text, &["F4-BODY-MARK"]);

    // A fresh form imports the file again, as the owner means to: the file's word again.
    let page = b.get("/ui/skills", Some(&cookie)).text;
    let again = b.post(
        "/ui/skills",
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("ticket", &field_of(&page, "ticket")),
            ("doc", &doc),
        ],
    );
    assert_eq!(again.status, 303, "{}", again.text);
    assert_ne!(
        calls_per_day(),
        7,
        "a fresh form's import is the file's word"
    );
    let replaced = b.get(header(&again, "location"), Some(&cookie)).text;
    assert!(replaced.contains("Replaced taste"), "{replaced}");
    assert_no_markers(
        "the skills pages",
        &(page + &shown.text + &replaced),
        &["F4-BODY-MARK"],
    );
}
