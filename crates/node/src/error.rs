//! The node's one error type. Every variant names what is wrong in words a human can act on; none
//! carries source content (bodies, keys, private data), so an error can be logged or sent as an
//! HTTP envelope as it is. A source's name is printed as every surface shows it
//! ([`crate::sources::shown_name`]): an older node stored sources under a pasted provider key as
//! the name, and such a name in a call's failure, an API answer or a log would be the key.

use std::borrow::Cow;
use std::path::PathBuf;

use crate::sources::shown_name;

/// Everything that can go wrong in the node library.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// `skillbox init` found an existing data dir and refuses to overwrite it.
    #[error("data dir {0} is already initialised (found {1}); refusing to overwrite it")]
    AlreadyInitialised(PathBuf, &'static str),
    /// A file the node needs is absent.
    #[error("{what} missing at {path}: run `skillbox init` first (or restore the file)")]
    Missing { what: &'static str, path: PathBuf },
    /// A key or token file exists but is not what the node wrote.
    #[error("{what} at {path} is corrupted: {problem}")]
    Corrupted {
        what: &'static str,
        path: PathBuf,
        problem: String,
    },
    /// The data key opens but does not decrypt this store's check value.
    #[error(
        "data key {0} does not match this store: it was replaced or corrupted (the store's sources cannot be decrypted with it)"
    )]
    DataKeyMismatch(PathBuf),
    /// `config.toml` does not parse or holds a bad value.
    #[error("config {path}: {problem}")]
    Config { path: PathBuf, problem: String },
    /// The data dir is not this user's alone: another user owns it, may write to it or may
    /// swap it, and so could have planted keys, config or the API socket (names the dir).
    #[error(transparent)]
    NotOwnDir(#[from] skillbox_jc::own_dir::NotOwnDir),
    /// File-system failure around the data dir.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// SQLite failure.
    #[error("store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The batch a write was committed with failed to reach the disk (the write did not land).
    #[error("store: the write's batch could not be committed")]
    CommitFailed,
    /// The store's schema is newer than this binary understands.
    #[error(
        "store schema version {found} is newer than this skillbox understands ({known}); upgrade skillbox"
    )]
    SchemaTooNew { found: i64, known: i64 },
    /// Bad input from a user or client: a field path and what is wrong with it.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A SKILL.md that cannot be imported (document error, or a manifest the schema rejects).
    #[error("{0}")]
    Skill(#[from] skillbox_skill::CheckError),
    /// An OpenWOP pack or manifest fails its schema.
    #[error("the pack fails the OpenWOP schema: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Pack(Vec<skillbox_skill::SchemaIssue>),
    /// A roster entry or org chart refused (RFC 0086/0087 rules); `reason()` names why.
    #[error("{0}")]
    Agents(#[from] skillbox_skill::agents::AgentsError),
    /// The caller's token does not reach this route (a tenant token on an operator route).
    #[error("{0}")]
    Forbidden(String),
    /// The request conflicts with what is stored.
    #[error("{0}")]
    Conflict(String),
    /// A named thing does not exist.
    #[error("{kind} {:?} not found", shown_if_source(kind, .name))]
    NotFound { kind: &'static str, name: String },
    /// A source that no caller stake may carry: under a reserved prefix, a secret, or not
    /// marked shareable by its human. `why` is fixed text.
    #[error("source {:?} cannot be staked by a call: {why}", shown_name(.name))]
    NotStakeable { name: String, why: &'static str },
    /// A stored source failed authentication on decrypt (tampered row or wrong key).
    #[error(
        "source {:?} failed to decrypt: the stored row was tampered with or the data key changed",
        shown_name(.0)
    )]
    Decrypt(String),
    /// Writing an applied source into its sink failed.
    #[error("applying source {:?}: {source}", shown_name(.name))]
    Sink {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// The peer network refused to start or failed.
    #[error("peer network: {0}")]
    Peers(#[from] skillbox_peers::PeersError),
    /// A stored row does not deserialize (it was written by a different version or edited by hand).
    #[error("stored {what} {:?} is unreadable: {problem}", shown_if_source(what, .name))]
    StoredRow {
        what: &'static str,
        name: String,
        problem: String,
    },
}

impl NodeError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        NodeError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        NodeError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A stored row (`what` named `name`) that does not read or write back as JSON.
    pub(crate) fn stored_row(
        what: &'static str,
        name: impl Into<String>,
        problem: impl ToString,
    ) -> Self {
        NodeError::StoredRow {
            what,
            name: name.into(),
            problem: problem.to_string(),
        }
    }
}

/// `name` as an error prints it: a source's as every surface shows it ([`shown_name`]); any other
/// thing's (a call's id, a skill's name) as it is — a call id is hex, and would read as a key.
fn shown_if_source<'a>(kind: &str, name: &'a str) -> Cow<'a, str> {
    if kind == "source" {
        shown_name(name)
    } else {
        name.into()
    }
}

pub type Result<T, E = NodeError> = std::result::Result<T, E>;
