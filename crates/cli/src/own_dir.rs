//! Whether a data dir is this user's alone before the CLI talks through it.
//!
//! The CLI and `skillbox mcp` send the operator token, and with it whatever the command carries
//! (`source add --secret`'s key, a call's request), to the Unix socket in the data dir; the demo
//! runs nodes and a box from its `--keep` dir. A data dir another user owns, or may write to, or
//! may rename out of the way is one where that user can have put a socket, keys or config of
//! their own: refused, naming it, before anything is read or sent. `skillbox model fetch` (and the
//! demo's first fetch) runs pip in it and puts the model there that every box then loads. The
//! rule is `skillbox_jc::own_dir`'s, the one copy `skillbox node` and `skillbox box` apply at
//! start too.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use anyhow::Context;

pub(crate) use skillbox_jc::own_dir::NotOwnDir;

/// The data dir `dir` must be this user's alone (see `skillbox_jc::own_dir::check`); one that
/// does not exist passes, and the command then fails on the missing token, naming it.
pub(crate) fn check(dir: &Path) -> Result<(), NotOwnDir> {
    skillbox_jc::own_dir::check("data dir", dir)
}

/// Makes `dir` (a `what`, for the messages) and any missing parent 0700, whatever the umask
/// (`umask 002` would leave them group-writable and refused just after), then applies the rule:
/// a directory about to be made is judged by where it sits once it exists.
pub(crate) fn make_private(what: &'static str, dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating the {what} {}", dir.display()))?;
    skillbox_jc::own_dir::check(what, dir)?;
    Ok(())
}
