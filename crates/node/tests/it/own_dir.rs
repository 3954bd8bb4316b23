//! A node opened on a data dir another user of the machine owns, may write to or may swap would
//! run on their keys and config and serve its API socket where they can replace it: `Node::open`
//! (what `skillbox node` starts with) refuses such a dir, naming it, before reading anything.

use std::path::Path;

use skillbox_node::{Node, NodeError};
use skillbox_testkit::procs::{set_mode as mode, while_another_user_owns};

fn refused(dir: &Path, why: &str) {
    let err = Node::open(dir).expect_err("opened on a data dir that is not ours alone");
    assert!(matches!(err, NodeError::NotOwnDir(_)), "{err}");
    let said = err.to_string();
    assert!(
        said.contains(why) && said.contains(&dir.display().to_string()),
        "{said}"
    );
}

#[test]
fn a_node_does_not_start_on_a_data_dir_another_user_can_write() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("node");
    let mut config = skillbox_node::Config::default();
    config.api.listen = "127.0.0.1:0".parse().expect("addr");
    skillbox_node::DataDir::new(&dir)
        .init(&config)
        .expect("init");

    // Left writable to every user of the machine.
    mode(&dir, 0o777);
    refused(&dir, "writable by other users");
    // Private, inside a directory others may rename entries of (no sticky bit).
    mode(&dir, 0o700);
    mode(root.path(), 0o777);
    refused(&dir, "swap the data dir");
    mode(root.path(), 0o700);
    // Owned by another user (only root can make one to try).
    while_another_user_owns(&dir, || refused(&dir, "belongs to another user"));
    // Ours alone: it opens.
    Node::open(&dir).expect("a private data dir opens");
}

/// Set in the child the umask test starts: the data dir to make there.
const UMASK_002_CHILD: &str = "SKILLBOX_TEST_DATA_DIR_UNDER_UMASK_002";

/// On systems with user-private groups the shell's umask is often 002. `init` on a fresh account
/// makes the data dir's parents too (`~/.local/share`); made group-writable, they would have the
/// own-dir rule refuse every later start of the node. The test runs itself again in a child
/// whose umask is 002 (the umask is process-wide, so not in this test binary's threads).
#[test]
fn a_data_dir_made_under_umask_002_opens() {
    if let Some(dir) = std::env::var_os(UMASK_002_CHILD) {
        let dir = std::path::PathBuf::from(dir);
        let mut config = skillbox_node::Config::default();
        config.api.listen = "127.0.0.1:0".parse().expect("addr");
        skillbox_node::DataDir::new(&dir)
            .init(&config)
            .expect("init");
        if let Err(e) = Node::open(&dir) {
            panic!("a data dir init made under umask 002 is refused: {e}");
        }
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("a/b/skillbox");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 002 && exec \"$0\" \"$@\"")
        .arg(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "own_dir::a_data_dir_made_under_umask_002_opens",
            "--nocapture",
        ])
        .env(UMASK_002_CHILD, &dir)
        .output()
        .expect("run the child");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 passed"), "the child ran no test: {said}");
}
