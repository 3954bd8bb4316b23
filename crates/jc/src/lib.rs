//! skillbox-jc: the box (joint compute), design §8 and §10.
//!
//! - [`day`]: the owner's day limits and the box's day book of what a caller's answers carried.
//! - [`program`]: the canonical program (RFC 8785), canonical-or-reject, its hash and schema.
//! - [`dsse`]: DSSE envelopes with Ed25519; a program is approved when both parties signed it.
//! - [`attest`]: the attestation statement, `Attester` / `Verifier`, the `insecure-dev` platform.
//! - [`seal`]: HPKE stakes and the sealed answer, padded to size buckets.
//! - [`run`]: the run logic (open, attest, stake, submit, execute, result), no HTTP.
//! - [`own_dir`]: whether a data dir or key file's directory is this user's alone (node, box
//!   and CLI all refuse one that is not).
//! - [`server`]: the box's HTTP API; [`client`]: what nodes use to talk to a box; [`tls`]: the
//!   box's own TLS key, bound into its attestation, and the node's pinning of it.

pub mod attest;
pub mod client;
pub mod day;
pub mod dsse;
pub mod error;
pub mod hardware;
pub mod jcs;
mod kept;
pub mod nsm;
pub mod own_dir;
pub mod program;
pub mod prompt;
pub mod receipt;
pub mod registry;
pub mod run;
pub mod seal;
pub mod server;
pub mod spent;
pub mod tls;
pub mod tsm;

/// The Ed25519 implementation programs and receipts are signed with (node keys are its
/// `SigningKey`s), so nodes use the same copy.
pub use ed25519_dalek;
pub use error::{JcError, Result};
pub use program::{Program, ProgramHash, Role};
