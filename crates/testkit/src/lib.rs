//! Test support for the workspace's integration tests and benches, one crate instead of copies
//! pulled in with `#[path]`. A dev-dependency only: never used from a library's `#[cfg(test)]`
//! unit tests (those compile the library a second time, and its types would not match).
//!
//! Modules by job:
//! - [`procs`]: real `skillbox box` / `init` / `node` processes and a blocking API client;
//!   [`reach`]: the MCP and A2A tests' world of three processes.
//! - [`node_api`]: one node in this process, API only (no network); [`node`]: nodes with
//!   libp2p on loopback around an in-process box, the calls tests' world.
//! - [`provider`]: the OpenAI-compatible provider doubles (a blocking one on a thread, an
//!   async one on axum); [`box_fixture`]: a box server with an in-process provider, the box
//!   crate's tests' fixture; [`prompt`]: the box's prompt as those doubles read it.
//! - [`answer`]: every answer a test reads is checked against `/openapi.json`; [`stake`]: a
//!   call that ended staked once; [`leak`]: the marker scans.
//! - [`old_node`]: what an older node left in a data dir (sources named by a pasted key,
//!   the ledger of a call that staked them).
//! - [`skills`]: skill documents; [`guard`]: the encoders an obedient model hides a prompt
//!   with; [`llama_bench`]: llama.cpp's own benchmark, the embedded model's yardstick.
//! - [`nat`]: the NAT tests' network namespaces and the processes started in them.
//! - [`bench`]: the benches' sizes from the environment, percentiles, synthetic peers' keys.
//! - [`other_user`]: a process of another user of the machine (a listener on a loopback port).
//! - [`floors`]: the TCB floors of the hardware test vectors, as pins name them.

pub mod answer;
pub mod bench;
pub mod box_fixture;
pub mod floors;
pub mod guard;
pub mod leak;
pub mod llama_bench;
pub mod nat;
pub mod node;
pub mod node_api;
pub mod old_node;
pub mod other_user;
pub mod procs;
pub mod prompt;
pub mod provider;
pub mod reach;
pub mod skills;
pub mod stake;
