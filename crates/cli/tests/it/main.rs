//! The command line's integration tests, one binary (the layout rust-analyzer and cargo use): the
//! real `skillbox` binary run as a user runs it. `support::procs` starts `skillbox box` / `node`
//! processes and a provider double; `support::reach` drives the agent-tool clients.

mod support {
    pub mod procs;
    pub mod reach;
}

mod agents_cli;
mod attestation_cli;
mod box_e2e;
mod call_cli;
mod check_cli;
mod crash;
mod demo;
mod hostile;
mod nat_call;
mod node_process;
mod peers_process;
mod reach_a2a;
mod reach_mcp;
mod same_machine;
mod secret_names;
mod show_identity;
mod ui;
mod ui_browser;
