//! The dashboard in a real headless browser (Debian's `chromium` through `chromedriver`, driven
//! over WebDriver): sign in, add a source and a skill and see it offered, see a peer's skill on
//! the board, start a call that parks on consent, approve it, watch it become `answered` without
//! reloading, and find its ledger entry. A screenshot of each main page is saved under
//! `$CARGO_TARGET_TMPDIR/ui-screenshots/` (`scripts/browser` installs the browser).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::procs;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// chromedriver, killed when the test ends however it ends.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start_driver() -> (Driver, String) {
    let port = free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run chromedriver ({e}): install the browser with scripts/browser (Debian: apt-get install chromium chromium-driver)")
        });
    let driver = Driver(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (driver, format!("http://127.0.0.1:{port}"))
}

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    std::fs::write(shots().join(format!("{name}.png")), png).expect("write screenshot");
}

async fn fill(c: &Client, css: &str, text: &str) {
    let e = c
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    e.clear().await.expect("clear");
    e.send_keys(text).await.expect("type");
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .expect("click");
}

async fn page_text(c: &Client) -> String {
    c.find(Locator::Css("main"))
        .await
        .expect("main")
        .text()
        .await
        .expect("text")
}

/// Wait until the browser is at `path` (a click on a form returns before its navigation ends).
async fn wait_path(c: &Client, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let at = c.current_url().await.expect("url");
        if at.path() == path {
            return;
        }
        assert!(Instant::now() < deadline, "never reached {path}: at {at}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the browser is in a session (sign-in leads to the session's own address,
/// `/ui/s/<random>`, the only path its cookie is sent to); that address.
async fn wait_session(c: &Client) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let at = c.current_url().await.expect("url");
        if at.path().starts_with("/ui/s/") {
            return at.path().to_owned();
        }
        assert!(Instant::now() < deadline, "never signed in: at {at}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait (polling the live page, no reload) until `css` holds `want`.
async fn wait_text(c: &Client, css: &str, want: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await
            && e.text().await.is_ok_and(|t| t.trim() == want)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{css} never showed {want:?}: {}",
            page_text(c).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_human_signs_in_adds_a_skill_calls_a_peer_approves_and_sees_the_ledger() {
    let root = tempfile::tempdir().expect("tempdir");
    let (_log, _bx, owner, caller) = procs::pair_with(
        root.path(),
        procs::provider_double(Duration::ZERO),
        &[],
        procs::asking_before(&["songs"]),
    );
    let doc = procs::skill_doc("taste", "BROWSER-BODY", &["songs"]);
    // The caller's human is asked before `songs` leaves.
    procs::offer_taste(&owner, &caller, "sk-browser-key", &doc, "Bonobo - Kerala\n");

    let (_driver, webdriver) = start_driver();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"] }),
        );
        let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&webdriver)
            .await
            .expect("a WebDriver session with headless chromium");
        let base = caller.base.clone();

        // Signed out: the login page; a code from `skillbox dashboard`, typed.
        c.goto(&format!("{base}/ui")).await.expect("goto");
        assert!(c.current_url().await.expect("url").path().ends_with("/ui/login"));
        shot(&c, "login").await;
        let (code, _) = procs::dashboard_code(&caller.dir);
        fill(&c, "#code", &code).await;
        click(&c, "form[action='/ui/login'] button").await;
        let at = wait_session(&c).await;
        let ui = format!("{base}{at}");
        assert!(page_text(&c).await.contains("Waiting for you"));
        shot(&c, "overview").await;

        // A key source, then a skill that spends it: offered.
        c.goto(&format!("{ui}/sources")).await.expect("goto");
        fill(&c, "#src-name", "my-openai-key").await;
        c.find(Locator::Css("#src-kind option[value='secret']"))
            .await
            .expect("kind")
            .click()
            .await
            .expect("pick secret");
        fill(&c, "#src-content", "sk-my-own").await;
        click(&c, &format!("form[action='{at}/sources'] button[type=submit]")).await;
        wait_text(&c, "tr[data-source='my-openai-key'] td:first-child", "my-openai-key", Duration::from_secs(10)).await;
        let t = page_text(&c).await;
        assert!(t.contains("my-openai-key") && !t.contains("sk-my-own"), "{t}");
        shot(&c, "sources").await;
        c.goto(&format!("{ui}/skills")).await.expect("goto");
        fill(
            &c,
            "#skill-doc",
            "---\nname: haiku\ndescription: Writes a haiku about the request.\nprovider: openai\nmodel: gpt-test\nkey: my-openai-key\n---\nWrite a haiku.\n",
        )
        .await;
        click(&c, &format!("form[action='{at}/skills'] button[type=submit]")).await;
        wait_text(&c, "tr[data-skill='haiku'] td:nth-child(4)", "offered", Duration::from_secs(5)).await;
        shot(&c, "skills").await;

        // The peer's skill on the board, filtered by search.
        c.goto(&format!("{ui}/board?q=taste")).await.expect("goto");
        let t = page_text(&c).await;
        assert!(t.contains("taste") && t.contains("music-taste"), "{t}");
        shot(&c, "board").await;

        // A call from the board's link: it parks on consent.
        click(&c, &format!("a[href^='{at}/calls?peer=']")).await;
        wait_path(&c, &format!("{at}/calls")).await;
        fill(&c, "#call-request", "what do I like?").await;
        click(&c, &format!("form[action='{at}/calls'] button[type=submit]")).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        let at_path = at.clone();
        let call_url = loop {
            let at = c.current_url().await.expect("url");
            if at.path().starts_with(&format!("{at_path}/calls/")) {
                break at;
            }
            assert!(Instant::now() < deadline, "the call form did not lead to a call: {at}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let id = call_url.path().trim_start_matches(&format!("{at_path}/calls/")).to_owned();
        assert_eq!(id.len(), 32, "{call_url}");
        let state = format!("[data-call-state='{id}:caller']");
        wait_text(&c, &state, "awaiting_consent", Duration::from_secs(20)).await;
        c.goto(&format!("{ui}/approvals")).await.expect("goto");
        let t = page_text(&c).await;
        assert!(t.contains("songs") && t.contains("NO hardware isolation"), "{t}");
        shot(&c, "approvals").await;
        click(&c, &format!("form[action='{at}/approvals'] button[data-decision='allow']")).await;
        // Back on the call's page: the state changes to answered with no reload.
        wait_path(&c, &format!("{at}/calls/{id}")).await;
        wait_text(&c, &state, "answered", Duration::from_secs(30)).await;
        c.refresh().await.expect("reload");
        let t = page_text(&c).await;
        assert!(t.contains("The double read"), "{t}");
        shot(&c, "call").await;
        c.goto(&format!("{ui}/calls")).await.expect("goto");
        shot(&c, "calls").await;

        // The ledger: the human's yes, then the stake of `songs`.
        c.goto(&format!("{ui}/ledger?source=songs")).await.expect("goto");
        let t = page_text(&c).await;
        assert!(
            t.contains("Verified") && t.contains("allowed by human") && t.contains("source songs"),
            "{t}"
        );
        shot(&c, "ledger").await;
        c.goto(&format!("{ui}/peers")).await.expect("goto");
        assert!(page_text(&c).await.contains(&owner.peer_id));
        shot(&c, "peers").await;

        // Sign out: back to the login page.
        click(&c, "form.logout button").await;
        wait_path(&c, "/ui/login").await;
        c.close().await.expect("close the session");
    });
    for name in [
        "login",
        "overview",
        "sources",
        "skills",
        "board",
        "approvals",
        "call",
        "calls",
        "ledger",
        "peers",
    ] {
        assert!(
            shots().join(format!("{name}.png")).exists(),
            "{name} screenshot"
        );
    }
}

/// Another process on this machine: an HTTP listener on another loopback port that records the
/// `Cookie` header of every request a browser sends it (empty when it sent none).
fn cookie_catcher() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the catcher");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let log = log.clone();
            // One thread per connection: a browser opens sockets it sends nothing on (preconnect),
            // which must not hold up the one carrying the request.
            std::thread::spawn(move || {
                let Ok(read) = conn.try_clone() else { return };
                let mut reader = BufReader::new(read);
                let mut line = String::new();
                let mut cookie = String::new();
                let mut any = false;
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    any = true;
                    if line.to_ascii_lowercase().starts_with("cookie:") {
                        cookie = line[7..].trim().to_owned();
                    }
                    line.clear();
                }
                if !any {
                    return;
                }
                log.lock().expect("log").push(cookie);
                let page = "<!doctype html><title>caught</title><p>caught</p>";
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                        page.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    (port, seen)
}

/// Issue 30, item 1, and review 24a L3, the attack as it happens: the operator signs in to the
/// dashboard in a real browser, then the browser visits a page served on another loopback port
/// (any local process can listen there) under the dashboard's path. Cookies are not isolated by
/// port: that listener received the dashboard's cookie — first the operator's API token, then a
/// session id (by address; and under the node's `sbx-<random>.localhost` name too, once another
/// user learnt the name, from a launcher's argv). The cookie's path is now the session's own
/// random address: the listener receives nothing, by address or by name; and what a browser
/// holds for the dashboard is a session id, refused as a bearer token.
#[test]
fn a_listener_on_another_loopback_port_gets_no_dashboard_cookie_from_the_browser() {
    let root = tempfile::tempdir().expect("tempdir");
    // No call is made: the box is never reached.
    let mut node = procs::init_node(root.path(), "solo", "http://127.0.0.1:9", None, |t| t);
    // `init` gave the node a name of its own; `skillbox node` prints the dashboard under it.
    let config = std::fs::read_to_string(node.dir.join("config.toml")).expect("config");
    let name = config
        .lines()
        .find_map(|l| l.strip_prefix("hosts = [\""))
        .and_then(|l| l.split('"').next())
        .filter(|n| n.starts_with("sbx-") && n.ends_with(".localhost"))
        .unwrap_or_else(|| panic!("init named no dashboard host: {config}"))
        .to_owned();
    node.start(&[]);
    let port = node.base.rsplit(':').next().expect("port").to_owned();
    let (catcher_port, caught) = cookie_catcher();
    let (_driver, webdriver) = start_driver();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let token = node.token.clone();
    let held = rt.block_on(async {
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] }),
        );
        let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&webdriver)
            .await
            .expect("a WebDriver session with headless chromium");
        let mut held = Vec::new();
        // By address, then under the node's name (which the other user has learnt).
        for (host, others) in [
            ("127.0.0.1", vec!["127.0.0.1", "localhost"]),
            (name.as_str(), vec![name.as_str(), "127.0.0.1", "localhost"]),
        ] {
            caught.lock().expect("log").clear();
            c.goto(&format!("http://{host}:{port}/ui/login")).await.expect("goto");
            let (code, _) = procs::dashboard_code(&node.dir);
            fill(&c, "#code", &code).await;
            click(&c, "form[action='/ui/login'] button").await;
            let at = wait_session(&c).await;
            assert!(page_text(&c).await.contains("Waiting for you"));
            // The other port, under each path a page there can name: the dashboard's logical
            // addresses, the sessions' root.
            for other in others {
                for path in ["/ui/overview", "/ui/approvals", "/ui/s/x"] {
                    c.goto(&format!("http://{other}:{catcher_port}{path}"))
                        .await
                        .expect("goto the other port");
                }
            }
            let cookies = caught.lock().expect("log").clone();
            assert!(cookies.len() >= 6, "the other port was not reached: {cookies:?}");
            assert!(
                !cookies.iter().any(|c| c.contains("skillbox_ui") || c.contains(&token)),
                "a listener on another port received the dashboard's cookie ({host}): {cookies:?}"
            );
            // What the browser holds for the dashboard, scoped to the session's address.
            c.goto(&format!("http://{host}:{port}{at}")).await.expect("back");
            let cookie = c.get_named_cookie("skillbox_ui").await.expect("the session cookie");
            assert_eq!(cookie.path(), Some(at.as_str()));
            held.push(cookie.value().to_owned());
            // The operator signs out.
            click(&c, "form.logout button").await;
            wait_path(&c, "/ui/login").await;
        }
        c.close().await.expect("close the session");
        held
    });
    for id in held {
        assert!(!id.contains(&node.token) && id.len() == 64, "{id}");
        let as_bearer = procs::Api {
            base: node.base.clone(),
            token: id,
        };
        assert_eq!(
            as_bearer.get("/node").status,
            401,
            "the cookie opens the API"
        );
    }
}
