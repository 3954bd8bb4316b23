//! The node's integration tests, one binary (the layout rust-analyzer and cargo use): in-process
//! nodes over the HTTP API (`common`: one node, no network) and nodes with a real box and a
//! provider double on loopback (`support`).

mod agents_pack;
mod agents_roster;
mod api;
mod box_load;
mod box_moves;
mod box_tls;
mod box_trust;
mod calls;
mod ceilings;
mod common;
mod coverage;
mod hostile;
mod intents;
mod key_name;
mod leak;
mod ledger;
mod own_dir;
mod owner_tokens;
mod peers;
mod release_log;
mod router;
mod support;
mod terminal_json;
