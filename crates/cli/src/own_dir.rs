//! Whether a data dir is this user's alone before the CLI talks through it.
//!
//! The CLI and `skillbox mcp` send the operator token, and with it whatever the command carries
//! (`source add --secret`'s key, a call's request), to the Unix socket in the data dir. A data
//! dir another user owns, or may write to, or may rename out of the way (it sits in a directory
//! others write to without the sticky bit) is one where that user can have put a socket of their
//! own: they would be sent the token and the secret. Such a dir is refused, naming it, before
//! anything is read or sent. The demo's `--keep` dir, which it runs nodes from, the same.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Permission bits: written by group or others; the sticky bit (only an entry's owner renames
/// it).
const OTHERS_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Why a data dir is not this user's alone. Its text names the directory (a path, no secret)
/// and the fix; nothing else.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotOwnDir {
    #[error(
        "the data dir {0} belongs to another user: the CLI sends the API token (and what a command carries) only through a data dir of this user's own; run it as that dir's owner"
    )]
    OwnedByAnother(PathBuf),
    #[error(
        "the data dir {0} is writable by other users, who could have put their own socket in it: nothing was sent; make it private (`chmod 700 {0}`) once you are sure its files are yours"
    )]
    WritableByOthers(PathBuf),
    #[error(
        "the data dir {dir} sits in {parent}, which another user owns or may write to (and so swap the data dir for theirs): nothing was sent; keep the data dir under a directory only you (or root) write to"
    )]
    SwappableBy { dir: PathBuf, parent: PathBuf },
    #[error("the data dir {0} cannot be examined: {1}")]
    Unreadable(PathBuf, std::io::Error),
}

/// The data dir `dir` must be this user's, written by nobody else, and every directory above
/// it (as written, and after links are resolved) owned by this user or root and written by
/// nobody else unless sticky. A dir that does not exist passes: commands then fail on the
/// missing token, naming it, as before.
pub(crate) fn check(dir: &Path) -> Result<(), NotOwnDir> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(NotOwnDir::Unreadable(dir.to_owned(), e)),
    };
    let me = this_user();
    if meta.uid() != me {
        return Err(NotOwnDir::OwnedByAnother(dir.to_owned()));
    }
    if meta.mode() & OTHERS_WRITE != 0 {
        return Err(NotOwnDir::WritableByOthers(dir.to_owned()));
    }
    let written = std::path::absolute(dir).map_err(|e| NotOwnDir::Unreadable(dir.to_owned(), e))?;
    let resolved = dir
        .canonicalize()
        .map_err(|e| NotOwnDir::Unreadable(dir.to_owned(), e))?;
    for path in [&written, &resolved] {
        for parent in path.ancestors().skip(1) {
            let m = std::fs::metadata(parent)
                .map_err(|e| NotOwnDir::Unreadable(parent.to_owned(), e))?;
            let owner_ok = m.uid() == me || m.uid() == 0;
            let shut = m.mode() & OTHERS_WRITE == 0 || m.mode() & STICKY != 0;
            if !(owner_ok && shut) {
                return Err(NotOwnDir::SwappableBy {
                    dir: dir.to_owned(),
                    parent: parent.to_owned(),
                });
            }
        }
    }
    Ok(())
}

fn this_user() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}
