//! `skillbox mcp`: the MCP server on stdio, for a client that starts it as a subprocess.
//!
//! The node runs as its own process (it holds the data dir's lock), so this server acts through
//! the running node's HTTP API on its Unix socket with the operator token, both in the data
//! dir; the same rmcp handler serves `/mcp` on the node itself over its in-process state. stdout
//! carries only MCP messages: logs go to stderr.

use std::process::ExitCode;

use anyhow::Context;
use skillbox_node::DataDir;
use skillbox_reach::backend::NodeHttp;
use skillbox_reach::mcp::{McpSettings, serve_stdio};

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// How long `apply_skill` and `ask` wait for an answer before returning the call's state.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub wait: u64,
}

pub fn run(global: &crate::Global, args: McpArgs) -> anyhow::Result<ExitCode> {
    crate::init_logs("warn", Some(false));
    let root = global.data_dir();
    // The token and every agent's request go to the socket in it (see `own_dir`).
    crate::own_dir::check(&root)?;
    let dir = DataDir::new(root);
    let token = dir.load_api_token()?;
    let max_request_bytes = dir
        .load_config()
        .map(|c| c.calls.max_request_bytes)
        .unwrap_or(64 * 1024);
    let backend = NodeHttp::new(dir.api_socket(), token).map_err(|e| anyhow::anyhow!("{e}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(serve_stdio(
        backend,
        McpSettings {
            wait: std::time::Duration::from_secs(args.wait),
            max_request_bytes,
        },
    ))
    .map_err(|e| anyhow::anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}
