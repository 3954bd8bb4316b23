//! `skillbox`: one binary for the node, the box, the CLI that talks to a node, and the demo.
//!
//! This file only parses the command line and dispatches; each area lives in its own module
//! (`*_cmd.rs`) that calls into the library crates. Exit codes: 0 success, 1 refused or invalid
//! input, 2 usage error (clap's own).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `println!` that ignores a closed stdout (`skillbox skill show x | head` must not panic).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod agents_cmd;
mod attestation_cmd;
mod box_cmd;
mod call_cmd;
mod demo_cmd;
mod ledger_cmd;
mod mcp_cmd;
mod model_cmd;
mod node_cmd;
mod own_dir;
mod peer_text;
mod pin_identity;
mod secret_prompt;
mod skill_cmd;

#[derive(Parser, Debug)]
#[command(
    name = "skillbox",
    version,
    about = "Skills advertised to peers and run in a box neither side owns"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand understands.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// The node's data directory (default: $XDG_DATA_HOME/skillbox or ~/.local/share/skillbox).
    #[arg(long, global = true, env = "SKILLBOX_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

impl Global {
    /// The data dir in force: the flag, the environment, or the XDG default.
    #[allow(dead_code)] // used by the node-side commands
    pub fn data_dir(&self) -> PathBuf {
        if let Some(dir) = &self.data_dir {
            return dir.clone();
        }
        if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
            return PathBuf::from(xdg).join("skillbox");
        }
        // `HOME`, else this user's home from the password database — never the current
        // directory: a service started in /tmp without HOME made its data dir under a
        // /tmp/.local another user could own, and sent its token to that user's socket. With
        // no home at all, a path nobody but root can make, so every use fails naming it.
        let home = std::env::home_dir().unwrap_or_else(|| PathBuf::from("/nonexistent"));
        home.join(".local/share/skillbox")
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Skills: check SKILL.md documents (no node needed).
    #[command(subcommand)]
    Skill(skill_cmd::SkillCommand),
    /// OpenWOP manifests: check AgentManifests or pack.json files against the schemas.
    #[command(subcommand)]
    Manifest(skill_cmd::ManifestCommand),
    /// Run a box: the joint-compute service calls run in (its own process and keys).
    Box(Box<box_cmd::BoxArgs>),
    /// The embedded model: fetch it into the data dir, show where it is.
    #[command(subcommand)]
    Model(model_cmd::ModelCommand),
    /// Create a node's data dir: keys, API token and the full config.
    Init(node_cmd::InitArgs),
    /// Run a node: the HTTP API and the peer network.
    Node(node_cmd::NodeArgs),
    /// Sign in to the running node's dashboard: prints its address and a sign-in code, good once
    /// for a minute, to type there (the dashboard never asks for api.token).
    Dashboard(node_cmd::DashboardArgs),
    /// What peers offer right now: one row per offered skill.
    Board(node_cmd::BoardArgs),
    /// This node's peer id and its connected peers.
    Peers(node_cmd::PeersArgs),
    /// Connect to a peer: `peer add MULTIADDR`.
    #[command(subcommand)]
    Peer(node_cmd::PeerCommand),
    /// Sources on the running node: add, list, rm.
    #[command(subcommand)]
    Source(node_cmd::SourceCommand),
    /// Call a peer's skill: `call PEER SKILL REQUEST`, or `call show ID`, `call cancel ID`.
    Call(call_cmd::CallArgs),
    /// List this node's calls, both sides.
    Calls(call_cmd::CallsArgs),
    /// Allow a call parked on policy `ask`: shows what it discloses and asks you to type `yes`
    /// (needs a terminal; an agent cannot approve).
    Approve(call_cmd::DecideArgs),
    /// Deny a call parked on policy `ask`.
    Deny(call_cmd::DecideArgs),
    /// The skill intent: route a request to the best skill the board offers right now.
    Ask(call_cmd::AskArgs),
    /// The disclosure ledger: every stake this node made and every consent decision, signed;
    /// `ledger verify` checks it.
    Ledger(ledger_cmd::LedgerArgs),
    /// A box and two nodes on loopback, one call end to end with the embedded model.
    Demo(demo_cmd::DemoArgs),
    /// API tokens: `token add --tenant ID [--workspace ID]` for a tenant, `token rotate` for the
    /// operator's own (`api.token`), `token rotate --agent` for the HTTP agent clients'
    /// (`agent.token`).
    #[command(subcommand)]
    Token(agents_cmd::TokenCommand),
    /// Hardware attestation evidence, offline: `attestation verify --platform … --evidence …`.
    #[command(subcommand)]
    Attestation(attestation_cmd::AttestationCommand),
    /// An MCP server on stdio for agent tools (Claude Code, Codex, Cursor); acts through the
    /// running node. The node also serves it at /mcp.
    Mcp(mcp_cmd::McpArgs),
}

/// Dependencies whose events below info carry what passes through them: rmcp logs every request
/// and result it handles at debug (`rmcp::service`: an agent's `apply_skill` request and the
/// answer) and every message at trace (`rmcp::transport::streamable_http_server`); reqwest can
/// log the bytes of a connection at trace; hyper, hyper-util, h2, axum (its rejections) and
/// tower-http sit on the same bodies; llama.cpp's own log (turned off in the provider) would
/// see the prompt. Capped at info whatever `SKILLBOX_LOG` says.
const CAPPED_AT_INFO: &[&str] = &[
    "rmcp",
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "axum",
    "tower_http",
    "llama_cpp_2",
];

/// The one log filter of every entry point (the node, `skillbox mcp`, the box): `SKILLBOX_LOG`
/// (else `default`), and with it a fixed one that holds [`CAPPED_AT_INFO`] at info. Both must
/// let an event through, so no directive of `SKILLBOX_LOG` (`trace`, `rmcp=trace`,
/// `rmcp::service=trace`, a span filter) turns the capped targets on: an `EnvFilter` directive
/// added after the environment's would lose to a more specific one of the environment's.
fn log_filter<S>(default: &str) -> impl tracing_subscriber::layer::Filter<S> + use<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
    let chosen = tracing_subscriber::EnvFilter::try_from_env("SKILLBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let caps = CAPPED_AT_INFO
        .iter()
        .fold(Targets::new().with_default(LevelFilter::TRACE), |t, c| {
            t.with_target(*c, LevelFilter::INFO)
        });
    chosen.and(caps)
}

/// Logs to stderr through [`log_filter`]; `ansi` colours them when given (the MCP server's
/// stderr is an agent tool's log, never coloured), else the library decides.
fn init_logs(default: &str, ansi: Option<bool>) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let layer = tracing_subscriber::fmt::layer()
        .fmt_fields(skillbox_node::log_fields::escaped_fields())
        .with_writer(std::io::stderr);
    let layer = match ansi {
        Some(ansi) => layer.with_ansi(ansi),
        None => layer,
    };
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(log_filter(default)))
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Skill(cmd) => skill_cmd::run_skill(&cli.global, cmd),
        Command::Manifest(cmd) => skill_cmd::run_manifest(&cli.global, cmd),
        Command::Box(args) => box_cmd::run(&cli.global, *args),
        Command::Model(cmd) => model_cmd::run(&cli.global, cmd),
        Command::Init(args) => node_cmd::run_init(&cli.global, args),
        Command::Node(args) => node_cmd::run_node(&cli.global, args),
        Command::Dashboard(args) => node_cmd::run_dashboard(&cli.global, args),
        Command::Source(cmd) => node_cmd::run_source(&cli.global, cmd),
        Command::Board(args) => node_cmd::run_board(&cli.global, args),
        Command::Peers(args) => node_cmd::run_peers(&cli.global, args),
        Command::Peer(cmd) => node_cmd::run_peer(&cli.global, cmd),
        Command::Call(args) => call_cmd::run_call(&cli.global, args),
        Command::Calls(args) => call_cmd::run_calls(&cli.global, args),
        Command::Approve(args) => call_cmd::run_decide(&cli.global, args, true),
        Command::Deny(args) => call_cmd::run_decide(&cli.global, args, false),
        Command::Ask(args) => call_cmd::run_ask(&cli.global, args),
        Command::Ledger(args) => ledger_cmd::run(&cli.global, args),
        Command::Demo(args) => demo_cmd::run(&cli.global, args),
        Command::Token(cmd) => agents_cmd::run_token(&cli.global, cmd),
        Command::Attestation(cmd) => attestation_cmd::run(&cli.global, cmd),
        Command::Mcp(args) => mcp_cmd::run(&cli.global, args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            let text = format!("{err:#}");
            eprintln!("error: {text}");
            if let Some(hint) = hint(&text) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(1)
        }
    }
}

/// The human's next step after a refusal, by its code. The node's message names no command: an
/// agent's model reads the same message through MCP and A2A, and marking a source shareable is
/// the human's act. Here, at the human's own terminal, the command is the help.
fn hint(error: &str) -> Option<&'static str> {
    if error.contains("(required_sources_not_held)") {
        Some(
            "if one of the skill's required sources is your own data, mark it shareable: `skillbox source share NAME` (a secret never can be; `skillbox board` lists what each skill requires)",
        )
    } else if error.contains("(source_not_shareable)") && error.contains("not marked it shareable")
    {
        Some("mark it shareable first: `skillbox source share NAME`")
    } else {
        None
    }
}
