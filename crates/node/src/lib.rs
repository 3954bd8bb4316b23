//! skillbox-node: one node's data dir, store, source store, skills registry and HTTP API.
//!
//! - [`datadir`]: `skillbox init` (keys, token, config) and loading them back.
//! - [`config`]: `config.toml`, every default written out.
//! - [`store`]: SQLite, WAL, embedded migrations, one writer path.
//! - [`sources`]: the encrypted source store; [`sources::Sources::apply`] is the only way
//!   content leaves it.
//! - [`skills`]: SKILL.md import (declaration + body source in one transaction), offer state.
//! - [`agents`]: pack agents, roster entries and org charts, per owner; [`tenants`]: tokens.
//! - [`openwop`]: discovery and inventory bodies; [`openapi`]: the API's OpenAPI document.
//! - [`peering`]: the peer network's config, the offered set, the board the API reads.
//! - [`calls`]: the calls driver: the pure machines of `skillbox-calls` run against the store,
//!   the peers' payloads and the box.
//! - [`ledger`]: the disclosure ledger: every stake made and every consent decision, hash-chained
//!   and signed with the node key.
//! - [`api`]: the axum router; [`node::Node`]: all of it opened from a data dir.

pub mod agents;
pub mod api;
pub mod calls;
pub mod config;
pub mod crypto;
pub mod datadir;
pub mod error;
pub mod ledger;
pub mod log_fields;
pub mod metrics;
pub mod node;
pub mod openapi;
pub mod openwop;
pub mod pack;
pub mod peering;
pub mod pins;
pub mod skills;
pub mod sources;
pub mod store;
pub mod tenants;
pub mod terminal_json;

pub use config::Config;
pub use datadir::DataDir;
pub use error::{NodeError, Result};
pub use node::Node;
pub use skills::Skills;
pub use sources::{SourceKind, SourceMeta, Sources};
