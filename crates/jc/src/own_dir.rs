//! Whether a directory is this user's alone before skillbox reads keys from it, runs from it or
//! talks through it.
//!
//! A node's data dir holds its keys, token, config and the API socket; a box's holds its
//! identity key, its run-store key, its spent-program list and its runs. A directory another
//! user of the machine owns, or may write to, or may rename out of the way (it sits in a
//! directory others write to without the sticky bit) is one where that user can have planted
//! keys or config of their own, or a socket that collects the operator token and whatever a
//! command carries. Such a directory is refused, naming it, before anything in it is read,
//! written or sent to: by the CLI and `skillbox mcp` (the socket), by `skillbox node` and
//! `skillbox box` at start, and by the demo's `--keep`. One copy of the rule, here: the lowest
//! crate the node, the box start and the CLI all use.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Permission bits: written by group or others; the sticky bit (only an entry's owner renames
/// it).
const OTHERS_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Why a directory is not this user's alone. Its text names what the directory is (`what`: "data
/// dir", "box key's directory") and where (a path, no secret) and the fix; nothing else.
#[derive(Debug, thiserror::Error)]
pub enum NotOwnDir {
    #[error(
        "the {what} {dir} belongs to another user, who could have put keys, config or a socket of their own in it: nothing was read from it or sent through it; run skillbox as that directory's owner"
    )]
    OwnedByAnother { what: &'static str, dir: PathBuf },
    #[error(
        "the {what} {dir} is writable by other users, who could have put keys, config or a socket of their own in it: nothing was read from it or sent through it; make it private (`chmod 700 {dir}`) once you are sure its files are yours"
    )]
    WritableByOthers { what: &'static str, dir: PathBuf },
    #[error(
        "the {what} {dir} sits in {parent}, which another user owns or may write to (and so swap the {what} for theirs): nothing was read from it or sent through it; keep it under a directory only you (or root) write to"
    )]
    SwappableBy {
        what: &'static str,
        dir: PathBuf,
        parent: PathBuf,
    },
    #[error("the {what} {dir} cannot be examined: {source}")]
    Unreadable {
        what: &'static str,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Takes group and other access off `dir` when it is this user's and has any (a data dir left
/// 0755 by a restore or `chmod -R a+rX`): its files are 0600 (umask 077 in `skillbox node` and
/// `skillbox box`), but a listable dir still shows every local user their names, sizes and
/// times — when the node's store grew, when a box last ran. Returns whether it changed the mode;
/// a dir that does not exist, or is another's (root's), is left alone. Call it after [`check`].
pub fn close_to_others(dir: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if meta.uid() != this_user() || meta.mode() & 0o077 == 0 {
        return Ok(false);
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(meta.mode() & 0o7700))?;
    Ok(true)
}

/// The directory `dir` (a `what`, for the message) must be this user's (or root's), written by
/// nobody else, and every directory above it (as written, and after links are resolved) owned by
/// this user or root and written by nobody else unless sticky. A directory that does not exist passes: the
/// caller then fails on what is missing, naming it, or makes it (and should check again).
pub fn check(what: &'static str, dir: &Path) -> Result<(), NotOwnDir> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(NotOwnDir::Unreadable {
                what,
                dir: dir.to_owned(),
                source,
            });
        }
    };
    let me = this_user();
    match judge(meta.uid(), meta.mode(), me) {
        Judged::Ours => {}
        Judged::Another => {
            return Err(NotOwnDir::OwnedByAnother {
                what,
                dir: dir.to_owned(),
            });
        }
        Judged::Open => {
            return Err(NotOwnDir::WritableByOthers {
                what,
                dir: dir.to_owned(),
            });
        }
    }
    unswappable(what, dir, me)
}

/// Every directory above `path` (as written, and after links are resolved) owned by `me` or
/// root and written by nobody else unless sticky: nobody else can rename `path` away and put
/// theirs in its place.
fn unswappable(what: &'static str, path: &Path, me: u32) -> Result<(), NotOwnDir> {
    let unreadable = |at: &Path, source| NotOwnDir::Unreadable {
        what,
        dir: at.to_owned(),
        source,
    };
    let written = std::path::absolute(path).map_err(|e| unreadable(path, e))?;
    let resolved = path.canonicalize().map_err(|e| unreadable(path, e))?;
    for at in [&written, &resolved] {
        for parent in at.ancestors().skip(1) {
            let m = std::fs::metadata(parent).map_err(|e| unreadable(parent, e))?;
            let owner_ok = m.uid() == me || m.uid() == 0;
            let shut = m.mode() & OTHERS_WRITE == 0 || m.mode() & STICKY != 0;
            if !(owner_ok && shut) {
                return Err(NotOwnDir::SwappableBy {
                    what,
                    dir: path.to_owned(),
                    parent: parent.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// Why a file the box trusts by its path (the model it loads, its allow-list, its GPU evidence
/// collector) is not this user's alone (audit 32 A32-3, A32-6). Its text names the file and the
/// fix; nothing of its content.
#[derive(Debug, thiserror::Error)]
pub enum NotOwnFile {
    #[error(
        "the {what} {path} belongs to another user (uid {owner}), who could change it while skillbox uses it: it was not used; use a copy that you (or root) own"
    )]
    OwnedByAnother {
        what: &'static str,
        path: PathBuf,
        owner: u32,
    },
    #[error(
        "the {what} {path} is writable by other users (mode {mode:o}), who could change it while skillbox uses it: it was not used; `chmod go-w {path}` once you are sure it is yours"
    )]
    WritableByOthers {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
    #[error("the {what} {path} is not a regular file: it was not used")]
    NotAFile { what: &'static str, path: PathBuf },
    /// A directory above it another user owns or writes (they could swap the file), or one
    /// that cannot be examined.
    #[error(transparent)]
    Where(#[from] NotOwnDir),
}

/// The file `path` (a `what`, for the message) must be a regular file this user's (or root's)
/// that nobody else may write, in directories nobody else may swap it out of (the rule of
/// [`check`] for the directories above). A file that does not exist passes: the caller fails
/// on what is missing, naming it.
pub fn check_file(what: &'static str, path: &Path) -> Result<(), NotOwnFile> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(NotOwnDir::Unreadable {
                what,
                dir: path.to_owned(),
                source,
            }
            .into());
        }
    };
    if !meta.is_file() {
        return Err(NotOwnFile::NotAFile {
            what,
            path: path.to_owned(),
        });
    }
    let me = this_user();
    match judge(meta.uid(), meta.mode(), me) {
        Judged::Ours => {}
        Judged::Another => {
            return Err(NotOwnFile::OwnedByAnother {
                what,
                path: path.to_owned(),
                owner: meta.uid(),
            });
        }
        Judged::Open => {
            return Err(NotOwnFile::WritableByOthers {
                what,
                path: path.to_owned(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    Ok(unswappable(what, path, me)?)
}

/// How the directory itself stands, from its owner and mode and who runs skillbox.
#[derive(Debug, PartialEq, Eq)]
enum Judged {
    Ours,
    Another,
    Open,
}

/// Ours, or root's (a key under `/run/secrets` or `/etc/skillbox`, a data dir an admin made):
/// root can read the keys anyway, and a root-owned dir nobody else writes is what the ancestors'
/// rule already trusts. Any other owner could have planted files; group or other write lets
/// others plant them. (Group write is refused even for a user-private group: telling one apart
/// needs the group database, and skillbox makes its own dirs 0700 whatever the umask.)
fn judge(owner: u32, mode: u32, me: u32) -> Judged {
    if owner != me && owner != 0 {
        Judged::Another
    } else if mode & OTHERS_WRITE != 0 {
        Judged::Open
    } else {
        Judged::Ours
    }
}

fn this_user() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    }

    #[test]
    fn a_private_dir_passes_and_an_open_or_swappable_one_is_refused_by_name() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("data");
        assert!(check("data dir", &dir).is_ok(), "a dir not made yet passes");
        std::fs::create_dir(&dir).expect("mkdir");
        mode(&dir, 0o700);
        check("data dir", &dir).expect("private");
        mode(&dir, 0o777);
        let e = check("data dir", &dir).expect_err("0777");
        assert!(matches!(e, NotOwnDir::WritableByOthers { .. }), "{e}");
        assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
        mode(&dir, 0o700);
        mode(root.path(), 0o777);
        let e = check("data dir", &dir).expect_err("open parent");
        assert!(matches!(e, NotOwnDir::SwappableBy { .. }), "{e}");
        assert!(e.to_string().contains("swap the data dir"), "{e}");
        mode(root.path(), 0o1777);
        check("data dir", &dir).expect("a sticky parent, as /tmp");
    }

    #[test]
    fn a_file_others_may_write_or_swap_is_refused_by_name() {
        let root = tempfile::tempdir().expect("tempdir");
        mode(root.path(), 0o700);
        let file = root.path().join("model.gguf");
        check_file("model file", &file).expect("a file not there passes");
        std::fs::write(&file, b"GGUF").expect("write");
        mode(&file, 0o644);
        check_file("model file", &file).expect("ours, 0644");
        for open in [0o666, 0o664, 0o646] {
            mode(&file, open);
            let e = check_file("model file", &file).expect_err("writable by others");
            assert!(matches!(e, NotOwnFile::WritableByOthers { .. }), "{e}");
            assert!(e.to_string().contains(&file.display().to_string()), "{e}");
        }
        mode(&file, 0o600);
        mode(root.path(), 0o777);
        let e = check_file("model file", &file).expect_err("in a dir others write");
        assert!(
            matches!(e, NotOwnFile::Where(NotOwnDir::SwappableBy { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("swap the model file"), "{e}");
        mode(root.path(), 0o1777);
        check_file("model file", &file).expect("a sticky dir, as /tmp");
        mode(root.path(), 0o700);
        let e = check_file("model file", root.path()).expect_err("a directory");
        assert!(matches!(e, NotOwnFile::NotAFile { .. }), "{e}");
        // Another owner's file, judged as it stands (chown needs root, so the rule itself).
        assert_eq!(judge(1001, 0o100644, 1000), Judged::Another);
        assert_eq!(judge(0, 0o100644, 1000), Judged::Ours);
    }

    /// A key under `/run/secrets` or `/etc/skillbox` (root's, 0755) read by a service user:
    /// only root could swap what is in it, and root reads the key anyway.
    #[test]
    fn a_root_owned_dir_nobody_else_writes_passes_for_any_user() {
        const SERVICE_USER: u32 = 997;
        assert_eq!(judge(0, 0o40755, SERVICE_USER), Judged::Ours);
        assert_eq!(judge(0, 0o40775, SERVICE_USER), Judged::Open);
        assert_eq!(judge(1000, 0o40700, SERVICE_USER), Judged::Another);
        assert_eq!(judge(SERVICE_USER, 0o40700, SERVICE_USER), Judged::Ours);
        check("box key's directory", Path::new("/etc")).expect("root's /etc, 0755");
    }
}
