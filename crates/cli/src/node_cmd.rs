//! `skillbox init`, `skillbox node`, `skillbox source ...` and the node-side `skill add | list |
//! show | rm`. The client commands find the node's API address (`api.addr`) and token
//! (`api.token`) in the data dir and talk to its HTTP API.

use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;
use skillbox_node::sources::shown_name;
use skillbox_node::{Config, DataDir, Node};
use zeroize::Zeroizing;

// ---- init

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// HTTP API listen address (default 127.0.0.1:7420; port 0 = OS-chosen).
    #[arg(long)]
    pub api: Option<SocketAddr>,
    /// libp2p listen multiaddr (repeatable; default /ip4/0.0.0.0/tcp/0).
    #[arg(long = "p2p", value_name = "MULTIADDR")]
    pub p2p: Vec<String>,
    /// Peer to dial at start (repeatable); `/p2p/<peer id>` may be omitted.
    #[arg(long = "bootstrap", value_name = "MULTIADDR")]
    pub bootstrap: Vec<String>,
    /// Base URL of a box this node accepts (repeatable).
    #[arg(long = "box", value_name = "URL")]
    pub boxes: Vec<String>,
    /// Accept a box's insecure-dev attestation (no hardware isolation). Development only.
    #[arg(long)]
    pub allow_insecure_dev: bool,
}

pub fn run_init(global: &crate::Global, args: InitArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::default();
    if let Some(api) = args.api {
        config.api.listen = api;
    }
    if !args.p2p.is_empty() {
        config.p2p.listen = args.p2p;
    }
    config.p2p.bootstrap = args.bootstrap;
    config.boxes.accept = args.boxes;
    config.boxes.allow_insecure_dev = args.allow_insecure_dev;
    // A name of the node's own for the dashboard: a browser sends a `127.0.0.1` cookie to every
    // port of that host, but a `<random>.localhost` cookie only to that name (browsers resolve
    // `*.localhost` to loopback themselves), and a process on another port does not know it.
    if config.api.listen.ip().is_loopback() {
        let raw = skillbox_node::crypto::random_bytes::<8>()
            .context("generating the dashboard's host name")?;
        config
            .api
            .hosts
            .push(format!("sbx-{}.localhost", hex::encode(raw)));
    }
    // Check the values the same way a node will read them back, before writing anything.
    let rendered = config.render();
    Config::parse(&rendered, Path::new("config.toml"))?;
    let dir = DataDir::new(global.data_dir());
    let report = dir.init(&config)?;
    say!("initialised {}", report.data_dir.display());
    say!("node id: {}", report.peer_id);
    say!(
        "api: http://{} (token in {})",
        config.api.listen,
        dir.api_token().display()
    );
    say!(
        "agent clients over HTTP (/mcp, /a2a): token in {}",
        dir.agent_token().display()
    );
    Ok(ExitCode::SUCCESS)
}

// ---- node

/// The node's own `*.localhost` name among `api.hosts` (what `init` adds), if any.
fn dashboard_name(hosts: &[String]) -> Option<&str> {
    hosts
        .iter()
        .map(|h| h.trim())
        .find(|h| h.ends_with(".localhost") && !h.contains(':'))
}

#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// Listen on this address instead of the configured one.
    #[arg(long)]
    pub api: Option<SocketAddr>,
}

/// The node's blocking pool (the store's reads and group-committed writes, sealing stakes):
/// tokio's default of 512 threads is what a node under load grew to, each step a thread of its
/// own contending for the writer, and the switches between them were the largest self-time
/// entry of its profile (issue 33). Past the blocking pool's size, work waits in its queue
/// rather than in a thread; a group commit still gathers up to this many members. Measured at
/// 2,000 calls in flight (`crates/cli/benches/PROFILE.md`): 8, 16, 32 and 64 threads against
/// 512, the CPU per answered call lowest at 32 to 64 (-10 %), 8 worse than 512.
const BLOCKING_THREADS: usize = 64;

pub fn run_node(global: &crate::Global, args: NodeArgs) -> anyhow::Result<ExitCode> {
    crate::init_logs("info", Some(std::io::stderr().is_terminal()));
    // The node's database and its journals, `api.addr` and the lock are its user's alone,
    // whatever the umask and however the data dir's mode drifts later (audit 32 A32-4).
    crate::box_cmd::private_umask();
    let data_dir = global.data_dir();
    let node = Node::open(&data_dir)
        .with_context(|| format!("cannot start the node in {}", data_dir.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let mut node = node;
        let listener = node.bind(args.api).await?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let peers = node
            .start_peers()
            .await
            .context("cannot start the peer network")?;
        say!("skillbox node {}", node.node_id());
        say!("api: http://{addr}");
        match dashboard_name(&node.config().api.hosts).filter(|_| addr.ip().is_loopback()) {
            Some(name) => {
                say!("dashboard: http://{name}:{}/ui", addr.port());
                say!(
                    "dashboard by address: http://{addr}/ui (its cookie reaches every local port)"
                );
            }
            None => say!("dashboard: http://{addr}/ui"),
        }
        say!("dashboard sign-in: run `skillbox dashboard` for a code (the page never asks for api.token)");
        say!("peer id: {}", peers.peer_id);
        for a in &peers.listen_addrs {
            say!("listening on {a}/p2p/{}", peers.peer_id);
        }
        say!("data dir: {}", data_dir.display());
        std::io::stdout().flush().ok();
        node.start_calls()
            .context("cannot start the calls driver")?;
        // The agent surfaces (MCP at /mcp, A2A) and the dashboard (/ui), over the node's
        // library API.
        let state = node.state();
        let reach = skillbox_reach::ReachSettings::for_state(&state, Some(addr.ip()));
        let mounts =
            skillbox_reach::mounts(state.clone(), &reach).merge(skillbox_ui::mounts(state));
        node.serve_with(listener, mounts, shutdown_signal()).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutting down");
}

// ---- dashboard

#[derive(clap::Args, Debug)]
pub struct DashboardArgs {}

/// `skillbox dashboard`: a single-use sign-in code from the running node (asked for over its
/// 0600 socket with the operator token, `POST /dashboard/codes`) and the sign-in page's
/// address, printed. The code goes to this terminal only: it is put in no URL and no browser is
/// started with it, because another local user reads every program's command line (a
/// launcher's and a browser's argv) and can reach the node's loopback port, where a live code
/// is a session. The human types it on the page.
pub fn run_dashboard(global: &crate::Global, _args: DashboardArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    // The code first: a node that is down issues none, and then no address is printed for a
    // look-alike page that may hold its port.
    let ans = client.send(reqwest::Method::POST, "/dashboard/codes", None)?;
    let (Some(code), Some(path), Some(secs)) = (
        ans.body["code"].as_str(),
        ans.body["path"].as_str(),
        ans.body["expiresInSeconds"].as_u64(),
    ) else {
        bail!("the node's answer to POST /dashboard/codes has no code, path or expiresInSeconds");
    };
    let code = Zeroizing::new(code.to_owned());
    let dir = DataDir::new(global.data_dir());
    let addr = dir.load_api_addr()?;
    let config = dir.load_config()?;
    match dashboard_name(&config.api.hosts).filter(|_| addr.ip().is_loopback()) {
        Some(name) => say!("dashboard: http://{name}:{}{path}", addr.port()),
        None => say!("dashboard: http://{addr}{path}"),
    }
    say!(
        "sign-in code: {} (type it on that page; it works once, within {secs} s)",
        code.as_str()
    );
    Ok(ExitCode::SUCCESS)
}

// ---- the API client

pub(crate) struct Client {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    base: String,
    /// The socket's path, for error messages.
    socket: String,
    token: String,
}

/// A JSON answer from the node, or its error envelope turned into an anyhow error.
pub(crate) struct Answer {
    pub(crate) status: reqwest::StatusCode,
    pub(crate) body: Value,
    /// The body's length as received.
    pub(crate) bytes: usize,
}

impl Client {
    pub(crate) fn from_data_dir(global: &crate::Global) -> anyhow::Result<Client> {
        let root = global.data_dir();
        crate::own_dir::check(&root)?;
        let dir = DataDir::new(root);
        let token = dir.load_api_token()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        // The token goes only to the node's Unix socket in the 0700 data dir, never to the TCP
        // port in `api.addr` (see `socket_client`).
        let socket = dir.api_socket();
        let http =
            skillbox_reach::backend::socket_client(&socket).context("building the HTTP client")?;
        Ok(Client {
            rt,
            http,
            base: skillbox_reach::backend::SOCKET_BASE.into(),
            socket: socket.display().to_string(),
            token,
        })
    }

    pub(crate) fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<Answer> {
        let body = body.map(|(content_type, bytes)| (content_type, reqwest::Body::from(bytes)));
        self.send_body(method, path, body)
    }

    /// [`Client::send`] of content kept in memory that is wiped when the last reference to it
    /// goes (a source's content, a typed key): the body is that very buffer, not a copy, so no
    /// unwiped copy is freed by the HTTP client once it is sent.
    pub(crate) fn send_wiped(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        content: Zeroizing<Vec<u8>>,
    ) -> anyhow::Result<Answer> {
        let body = reqwest::Body::from(bytes::Bytes::from_owner(content));
        self.send_body(method, path, Some((content_type, body)))
    }

    fn send_body(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, reqwest::Body)>,
    ) -> anyhow::Result<Answer> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(&self.token);
        if let Some((content_type, bytes)) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes);
        }
        let (status, bytes) = self.rt.block_on(async {
            let resp = req.send().await.with_context(|| {
                format!(
                    "cannot reach the node at {} (is `skillbox node` running?)",
                    self.socket
                )
            })?;
            let status = resp.status();
            let bytes = resp.bytes().await.context("reading the node's answer")?;
            Ok::<_, anyhow::Error>((status, bytes))
        })?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).with_context(|| {
                format!("{method} {path}: the node answered {status} with a body that is not JSON")
            })?
        };
        if !status.is_success() {
            bail!("{}", envelope_text(&body, status));
        }
        Ok(Answer {
            status,
            body,
            bytes: bytes.len(),
        })
    }
}

/// `message` plus one line per detailed error, from an `{error, message, details?}` envelope.
fn envelope_text(body: &Value, status: reqwest::StatusCode) -> String {
    let mut out = format!(
        "{} ({})",
        body.get("message")
            .and_then(Value::as_str)
            .unwrap_or("the node refused the request"),
        body.get("error")
            .and_then(Value::as_str)
            .unwrap_or(status.as_str())
    );
    if let Some(errors) = body.pointer("/details/errors").and_then(Value::as_array) {
        for e in errors {
            let at = e
                .get("path")
                .or_else(|| e.get("field"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let line = e
                .get("line")
                .and_then(Value::as_u64)
                .map(|l| format!("line {l}: "))
                .unwrap_or_default();
            let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
            out.push_str(&format!("\n  {line}{at}: {msg}"));
        }
    }
    out
}

impl Client {
    /// One request whose answer a command prints: with `--json` as the node gave it (and `None`,
    /// nothing left to print), otherwise returned for the command to put in words.
    pub(crate) fn ask(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        json: bool,
    ) -> anyhow::Result<Option<Value>> {
        let ans = self.send(method, path, body)?;
        if json {
            print_json(&ans.body)?;
            return Ok(None);
        }
        Ok(Some(ans.body))
    }
}

/// [`Client::ask`] of the node whose data dir the command names.
pub(crate) fn ask(
    global: &crate::Global,
    method: reqwest::Method,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
    json: bool,
) -> anyhow::Result<Option<Value>> {
    Client::from_data_dir(global)?.ask(method, path, body, json)
}

/// A `--json` answer, written by the one writer that escapes what a terminal obeys or hides
/// (`terminal_json`): a node's answer carries peers' text.
pub(crate) fn print_json(v: &Value) -> anyhow::Result<()> {
    say!(
        "{}",
        skillbox_node::terminal_json::to_string(v).context("printing JSON")?
    );
    Ok(())
}

// ---- sources

#[derive(clap::Subcommand, Debug)]
pub enum SourceCommand {
    /// Store a source (encrypted at rest). Exactly one of --file, --text, --secret.
    Add(SourceAddArgs),
    /// List sources: names, kinds, sizes, digests (never content).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a source.
    Rm { name: String },
    /// Mark a source shareable: user data a call may stake (asked for consent first, by
    /// default). Never a secret, never a skill's or a call's own material.
    Share { name: String },
    /// Take the shareable mark off a source: no call stakes it any more.
    Unshare { name: String },
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("content").required(true).multiple(false)))]
pub struct SourceAddArgs {
    /// Source name, e.g. `openrouter-key` or `spotify_songs`.
    pub name: String,
    /// Content from a file (kind `file`, or `text` with --kind text).
    #[arg(long, group = "content")]
    pub file: Option<PathBuf>,
    /// Content given inline (kind `text`), for convenience: every user of this machine sees a
    /// command line (`ps`, /proc/PID/cmdline) and shell history keeps it. For private content use
    /// --file PATH (`--file /dev/stdin` reads standard input).
    #[arg(long, group = "content")]
    pub text: Option<String>,
    /// Read a secret (an API key) from standard input (kind `secret`); typed at a terminal it is
    /// not shown.
    #[arg(long, group = "content")]
    pub secret: bool,
    /// Override the kind: text, secret or file.
    #[arg(long)]
    pub kind: Option<String>,
    /// Mark it shareable: user data a call may stake (a secret never is).
    #[arg(long)]
    pub share: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run_source(global: &crate::Global, cmd: SourceCommand) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    match cmd {
        SourceCommand::Add(a) => {
            // The node's own name rule, before a secret is asked for: a provider's key pasted
            // where the name goes is refused here, with a fixed message that repeats none of it,
            // and is never typed again, sent or stored.
            skillbox_node::sources::check_name(&a.name)?;
            // A secret on the command line is in /proc/<pid>/cmdline (every local user reads
            // it) and in shell history: it comes from standard input or a file.
            if a.text.is_some() && a.kind.as_deref() == Some("secret") {
                bail!(
                    "a secret is not taken on the command line (other users of this machine see \
                     it): use --secret (standard input) or --file PATH"
                );
            }
            let (content, default_kind) = if let Some(path) = &a.file {
                let read =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                (Zeroizing::new(read), "file")
            } else if let Some(text) = a.text {
                (Zeroizing::new(text.into_bytes()), "text")
            } else {
                (read_secret(&a.name)?, "secret")
            };
            let kind = a.kind.as_deref().unwrap_or(default_kind);
            let path = format!("/sources/{}?kind={kind}&shareable={}", a.name, a.share);
            let ans = client.send_wiped(
                reqwest::Method::PUT,
                &path,
                "application/octet-stream",
                content,
            )?;
            if a.json {
                print_json(&ans.body)?;
            } else {
                let verb = if ans.status == reqwest::StatusCode::CREATED {
                    "added"
                } else {
                    "replaced"
                };
                say!(
                    "{verb} source {} ({}, {} bytes{})",
                    a.name,
                    ans.body["kind"].as_str().unwrap_or(kind),
                    ans.body["size"].as_u64().unwrap_or(0),
                    if ans.body["shareable"].as_bool() == Some(true) {
                        ", shareable"
                    } else {
                        ""
                    }
                );
            }
        }
        SourceCommand::List { json } => {
            if let Some(body) = client.ask(reqwest::Method::GET, "/sources", None, json)? {
                for s in listed(&body["sources"], "no sources") {
                    // The node lists a name that reads as a pasted provider key masked; shown
                    // again here, so no node's listing puts a key into the terminal.
                    say!(
                        "{:<32} {:<6} {:>10} bytes  {:<9}  {}",
                        shown_name(s["name"].as_str().unwrap_or("")),
                        s["kind"].as_str().unwrap_or(""),
                        s["size"].as_u64().unwrap_or(0),
                        said(&s["shareable"], "shareable", "private"),
                        s["digest"].as_str().unwrap_or("")
                    );
                    if let Some(handle) = s["handle"].as_str() {
                        say!(
                            "  revoke that key with its provider, then remove this source: skillbox source rm {handle}"
                        );
                    }
                }
            }
        }
        SourceCommand::Rm { name } => {
            client.send(reqwest::Method::DELETE, &format!("/sources/{name}"), None)?;
            // A name an older node took from a pasted key is removed, and not written out again.
            if skillbox_skill::looks_like_a_provider_key(&name) {
                say!(
                    "removed the source (its name looks like a provider's API key: revoke that key with the provider)"
                );
            } else {
                say!("removed source {name}");
            }
        }
        SourceCommand::Share { name } => set_shareable(&client, &name, true)?,
        SourceCommand::Unshare { name } => set_shareable(&client, &name, false)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The secret of `source add NAME --secret`, from standard input. At a terminal it is typed with
/// echo off, so it is not on the screen, in the terminal's scrollback or in a recording of it
/// (the prompt goes to stderr); from a pipe or a file, standard input is read to its end. Held,
/// from the moment it is read until it is sent, in memory wiped when dropped.
fn read_secret(name: &str) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        let config = rpassword::ConfigBuilder::new()
            // The terminal on stdin (the one that is a terminal), not /dev/tty.
            .input_file_path("/dev/stdin")
            .output_writer(std::io::stderr())
            .build();
        let prompt = format!("secret for source {name} (not shown; Enter ends it): ");
        // Up before the prompt turns echo off, down after it is back on: a signal in between
        // puts the terminal back rather than leaving it silent (see `secret_prompt`).
        let kept = crate::secret_prompt::TerminalKept::new()
            .context("setting up the terminal for the secret")?;
        let typed = rpassword::prompt_password_with_config(prompt, config);
        drop(kept);
        let mut typed = match typed {
            Ok(typed) => Zeroizing::new(typed),
            // Ctrl-D at the empty prompt: rpassword has put the terminal back already.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                bail!("no secret typed (input ended)")
            }
            Err(e) => return Err(e).context("reading the secret at the terminal"),
        };
        if typed.is_empty() {
            bail!("no secret typed");
        }
        // The same buffer, moved (not copied) out of the String.
        return Ok(Zeroizing::new(std::mem::take(&mut *typed).into_bytes()));
    }
    // Standard input's own descriptor, unbuffered: `Stdin` would pass the secret through its
    // buffer, which lives (unwiped) as long as the process.
    let unbuffered = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .context("reading the secret from standard input")?;
    let mut buf = read_wiped(unbuffered).context("reading the secret from standard input")?;
    // `echo` adds a line end; it is not part of the key (wiped with the rest: a Vec's wipe
    // covers its whole capacity).
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    if buf.is_empty() {
        bail!("no secret on standard input");
    }
    Ok(buf)
}

/// All of `from`, in memory wiped when dropped. `read_to_end` grows its `Vec` by reallocating,
/// which frees each outgrown buffer with the start of the secret still in it; this grows by
/// copying into a larger wiped buffer and dropping (so wiping) the old one.
fn read_wiped(mut from: impl Read) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut buf = Zeroizing::new(Vec::with_capacity(4096));
    let mut chunk = Zeroizing::new([0u8; 4096]);
    loop {
        let n = match from.read(&mut chunk[..]) {
            Ok(0) => return Ok(buf),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.len() + n > buf.capacity() {
            let mut bigger =
                Zeroizing::new(Vec::with_capacity((buf.len() + n).max(2 * buf.capacity())));
            bigger.extend_from_slice(&buf);
            buf = bigger;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn set_shareable(client: &Client, name: &str, shareable: bool) -> anyhow::Result<()> {
    let body = serde_json::to_vec(&serde_json::json!({ "shareable": shareable }))?;
    client.send(
        reqwest::Method::PATCH,
        &format!("/sources/{name}"),
        Some(("application/json", body)),
    )?;
    // A name an older node took from a pasted key (only unsharing it is let through) is not
    // written out again.
    let shown = if skillbox_skill::looks_like_a_provider_key(name) {
        "(its name looks like a provider's API key: revoke that key with the provider)".to_owned()
    } else {
        name.to_owned()
    };
    if shareable {
        say!(
            "source {shown} is shareable: a call may stake it (consent is asked first by default)"
        );
    } else {
        say!("source {shown} is private: no call stakes it");
    }
    Ok(())
}

// ---- skills on the node

#[derive(clap::Args, Debug)]
pub struct SkillAddArgs {
    /// A SKILL.md file, or a skill folder holding SKILL.md.
    pub path: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct SkillListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct SkillNameArgs {
    pub name: String,
    #[arg(long)]
    pub json: bool,
}

pub fn skill_add(global: &crate::Global, args: SkillAddArgs) -> anyhow::Result<ExitCode> {
    let (file, fallback) = crate::skill_cmd::resolve_skill_path(&args.path);
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let client = Client::from_data_dir(global)?;
    let path = match &fallback {
        Some(name)
            if name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') =>
        {
            format!("/skills?name={name}")
        }
        _ => "/skills".to_owned(),
    };
    let body = Some(("text/markdown", bytes));
    let Some(b) = client.ask(reqwest::Method::POST, &path, body, args.json)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let verb = said(&b["replaced"], "replaced", "added");
    say!(
        "{verb} skill {} ({}, {})",
        b["name"].as_str().unwrap_or(""),
        b["agentId"].as_str().unwrap_or(""),
        b["digest"].as_str().unwrap_or("")
    );
    print_state(&b["state"]);
    crate::skill_cmd::print_import_notes(&b);
    Ok(ExitCode::SUCCESS)
}

/// The items of a JSON array the node listed, after saying `empty` when there are none.
pub(crate) fn listed(v: &Value, empty: &str) -> Vec<Value> {
    let items = v.as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        say!("{empty}");
    }
    items
}

/// `yes` where the node's answer says `true`, else `no` (absent counts as not).
pub(crate) fn said<'a>(v: &Value, yes: &'a str, no: &'a str) -> &'a str {
    if v.as_bool() == Some(true) { yes } else { no }
}

/// The strings of a JSON array (absent or non-string items are skipped).
fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

pub(crate) fn print_state(state: &Value) {
    if state["offered"] == Value::Bool(true) {
        say!("  offered");
    } else {
        let reasons: Vec<&str> = str_list(&state["reasons"]);
        say!("  not offered: {}", reasons.join("; "));
    }
}

pub fn skill_list(global: &crate::Global, args: SkillListArgs) -> anyhow::Result<ExitCode> {
    let Some(body) = ask(global, reqwest::Method::GET, "/skills", None, args.json)? else {
        return Ok(ExitCode::SUCCESS);
    };
    for s in listed(&body["skills"], "no skills") {
        let state = if s["offered"] == Value::Bool(true) {
            "offered".to_owned()
        } else {
            format!("not offered: {}", s["reason"].as_str().unwrap_or(""))
        };
        say!(
            "{:<24} {:<12} {}",
            s["name"].as_str().unwrap_or(""),
            s["provider"].as_str().unwrap_or("-"),
            state
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn skill_show(global: &crate::Global, args: SkillNameArgs) -> anyhow::Result<ExitCode> {
    let path = format!("/skills/{}", args.name);
    let Some(b) = ask(global, reqwest::Method::GET, &path, None, args.json)? else {
        return Ok(ExitCode::SUCCESS);
    };
    say!(
        "skill {} ({})",
        b["name"].as_str().unwrap_or(""),
        b["agentId"].as_str().unwrap_or("")
    );
    say!("  digest: {}", b["digest"].as_str().unwrap_or(""));
    print_state(&b["state"]);
    say!("declaration:");
    say!(
        "{}",
        skillbox_node::terminal_json::to_string(&b["declaration"]).context("printing")?
    );
    say!("manifest:");
    say!(
        "{}",
        skillbox_node::terminal_json::to_string(&b["manifest"]).context("printing")?
    );
    Ok(ExitCode::SUCCESS)
}

pub fn skill_rm(global: &crate::Global, args: SkillNameArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    client.send(
        reqwest::Method::DELETE,
        &format!("/skills/{}", args.name),
        None,
    )?;
    say!("removed skill {} and its body source", args.name);
    Ok(ExitCode::SUCCESS)
}

// ---- peers and the board

/// Rows `skillbox board` prints at most, and bytes of the node's pages it reads at most: the
/// board is peers' text, up to `p2p.board_max_mib` (256 MiB by default), and the command
/// follows the node's pages to the end, so it stops at a size a terminal or a script can take.
const BOARD_ROWS_MAX: usize = 10_000;
const BOARD_BYTES_MAX: usize = 16 << 20;
/// Rows asked for a page: the node's most (`GET /board?limit=`), so a long board takes few
/// requests.
const BOARD_PAGE_ROWS: usize = 500;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "The node answers the board a page at a time; this follows its pages to the end, \
                  and stops after 10,000 rows or 16 MiB of the node's pages, saying so (with \
                  --json, `next` is where GET /board?after= goes on)."
)]
pub struct BoardArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct PeersArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum PeerCommand {
    /// Connect to a peer by multiaddr (`/p2p/<peer id>` may be omitted).
    Add {
        multiaddr: String,
        #[arg(long)]
        json: bool,
    },
}

/// How `skillbox board` walked the node's pages.
struct BoardRead {
    rows: usize,
    /// Where the node's board goes on past what was read (`None`: read to its end).
    next: Option<String>,
    peer_count: Value,
    notice: Value,
}

/// `GET /board` page after page through `next`, each page's rows to `row`, until the end or
/// [`BOARD_ROWS_MAX`] rows or [`BOARD_BYTES_MAX`] bytes of pages. The cursor the node hands
/// out is a peer id and hex; it is sent back percent-encoded whatever it holds.
fn read_board(client: &Client, mut row: impl FnMut(Value)) -> anyhow::Result<BoardRead> {
    let (mut rows, mut bytes, mut after) = (0usize, 0usize, None::<String>);
    loop {
        let limit = BOARD_PAGE_ROWS.min(BOARD_ROWS_MAX - rows);
        let path = match &after {
            Some(a) => format!(
                "/board?limit={limit}&after={}",
                skillbox_node::api::url_component(a)
            ),
            None => format!("/board?limit={limit}"),
        };
        let page = client.send(reqwest::Method::GET, &path, None)?;
        bytes = bytes.saturating_add(page.bytes);
        let mut body = page.body;
        for r in body["board"]
            .as_array_mut()
            .map(std::mem::take)
            .unwrap_or_default()
        {
            if rows == BOARD_ROWS_MAX {
                break;
            }
            row(r);
            rows += 1;
        }
        after = body["next"].as_str().map(str::to_owned);
        if after.is_none() || rows >= BOARD_ROWS_MAX || bytes >= BOARD_BYTES_MAX {
            return Ok(BoardRead {
                rows,
                next: after,
                peer_count: body["peerCount"].take(),
                notice: body["notice"].take(),
            });
        }
    }
}

/// `skillbox board`: what peers offer right now, one line per skill, every page of the node's
/// board up to [`BOARD_ROWS_MAX`] rows.
pub fn run_board(global: &crate::Global, args: BoardArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    let stopped = |read: &BoardRead| {
        format!(
            "stopped after {} rows: the board holds more than `skillbox board` reads at once \
             ({BOARD_ROWS_MAX} rows or {} MiB of the node's pages)",
            read.rows,
            BOARD_BYTES_MAX >> 20
        )
    };
    if args.json {
        // One object as `GET /board` answers it, its rows those of every page read.
        let mut all = Vec::new();
        let read = read_board(&client, |r| all.push(r))?;
        let mut out = serde_json::json!({
            "board": all,
            "peerCount": read.peer_count,
            "notice": read.notice,
        });
        if let Some(next) = &read.next {
            out["next"] = Value::String(next.clone());
            eprintln!("{}", stopped(&read));
        }
        print_json(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut framed = false;
    let read = read_board(&client, |r| {
        if !framed {
            say!("(between ⟦ ⟧: each peer's own description of its skill — untrusted)");
            framed = true;
        }
        let sources = crate::peer_text::lines(&r["requiredSources"], 64);
        say!(
            "{:<52} {:<24} {:<12} {:>4}s  {}{}",
            crate::peer_text::line(&r["peer"], 128),
            crate::peer_text::line(&r["skill"], 64),
            crate::peer_text::line(&r["provider"], 64),
            r["age"].as_u64().unwrap_or(0),
            crate::peer_text::quoted(&r["description"]),
            if sources.is_empty() {
                String::new()
            } else {
                format!(" (needs: {})", sources.join(", "))
            }
        );
    })?;
    if read.rows == 0 {
        say!("the board is empty (no peer offers a skill right now)");
    }
    if read.next.is_some() {
        say!("{}", stopped(&read));
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillbox peers`: this node's peer id and the peers it is connected to.
pub fn run_peers(global: &crate::Global, args: PeersArgs) -> anyhow::Result<ExitCode> {
    let Some(body) = ask(global, reqwest::Method::GET, "/peers", None, args.json)? else {
        return Ok(ExitCode::SUCCESS);
    };
    say!("peer id: {}", body["peerId"].as_str().unwrap_or(""));
    for a in body["listenAddrs"].as_array().into_iter().flatten() {
        say!("listening on {}", a.as_str().unwrap_or(""));
    }
    for p in listed(&body["peers"], "no connected peers") {
        let addrs = crate::peer_text::lines(&p["addresses"], 256);
        say!(
            "{:<52} {}",
            crate::peer_text::line(&p["peer"], 128),
            addrs.join(" ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillbox peer add MULTIADDR`.
pub fn run_peer(global: &crate::Global, cmd: PeerCommand) -> anyhow::Result<ExitCode> {
    let PeerCommand::Add { multiaddr, json } = cmd;
    let client = Client::from_data_dir(global)?;
    let body = serde_json::to_vec(&serde_json::json!({ "addr": multiaddr }))
        .context("encoding the request")?;
    let body = Some(("application/json", body));
    if let Some(b) = client.ask(reqwest::Method::POST, "/peers", body, json)? {
        say!(
            "connected to {} at {multiaddr}",
            b["peer"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}
