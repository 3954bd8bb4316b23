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
mod peer_text;
mod pin_identity;
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
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
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
    /// operator's own (`api.token`).
    #[command(subcommand)]
    Token(agents_cmd::TokenCommand),
    /// Hardware attestation evidence, offline: `attestation verify --platform … --evidence …`.
    #[command(subcommand)]
    Attestation(attestation_cmd::AttestationCommand),
    /// An MCP server on stdio for agent tools (Claude Code, Codex, Cursor); acts through the
    /// running node. The node also serves it at /mcp.
    Mcp(mcp_cmd::McpArgs),
}

/// Logs to stderr at `SKILLBOX_LOG`'s level (else `default`); `ansi` colours them when given
/// (the MCP server's stderr is an agent tool's log, never coloured), else the library decides.
fn init_logs(default: &str, ansi: Option<bool>) {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SKILLBOX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr);
    let _ = match ansi {
        Some(ansi) => logs.with_ansi(ansi).try_init(),
        None => logs.try_init(),
    };
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
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}
