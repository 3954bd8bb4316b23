//! A provider's key pasted where a source's NAME goes (`skillbox source add sk-ant-… --secret`,
//! `PUT /sources/<key>`): the CLI refuses it before it asks for the secret, the node refuses it
//! with a fixed message, and no part of the key is printed, answered, logged or kept as a name.

use std::io::Write;

use skillbox_node::sources::KEY_IS_NOT_A_SOURCE_NAME;
use skillbox_testkit::leak::assert_no_part_of;

use crate::support::procs::{self, assert_no_markers, text};

/// Keys as pasted: one the name rule takes (unrefused, it became a source's name: listed, in
/// the ledger, in consent questions), one it refuses (`+`, `=`: its refusal quoted it).
const PASTED: [&str; 2] = [
    "sk-ant-api03-Xq7PASTEDnAmE9kLw2Rt5Vb8Zc",
    "sk-proj-Q3vT9xLm2+PASTED=kEy7wZr4Nd8Hs1Fb6",
];

/// The owner pastes a key where the name goes, at a terminal and from a script, and a client
/// sends it as the name over the API. The CLI exits non-zero before its secret prompt (which
/// would show the name, and take the secret for nothing); the API answers 400; nothing of the
/// key is in what either printed or answered, in the node's log or in its data dir, and no
/// source was made; the way in (a name, the key piped) works.
#[test]
fn a_key_pasted_as_a_source_name_is_refused_and_kept_nowhere() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut node = procs::init_node(root.path(), "n", "http://127.0.0.1:9", None, |t| t);
    node.start(&[]);
    let api = node.api();
    for key in PASTED {
        let mut typing = procs::at_terminal(&node.dir, &format!("source add '{key}' --secret"));
        if let Some(mut stdin) = typing.stdin.take() {
            let _ = writeln!(stdin, "THE-CONTENT-TYPED");
        }
        let at_terminal = typing.wait_with_output().expect("script");
        let piped = procs::skillbox_with(
            &node.dir,
            &["source", "add", key, "--secret"],
            &[],
            Some(b"THE-CONTENT-PIPED\n"),
        );
        for o in [at_terminal, piped] {
            let said = text(&o);
            assert_ne!(
                o.status.code(),
                Some(0),
                "the key was taken as a name: {said}"
            );
            assert_no_part_of("the CLI's output", &said, key);
            assert!(
                !said.contains("secret for source"),
                "the secret was asked for: {said}"
            );
            assert!(said.contains(KEY_IS_NOT_A_SOURCE_NAME), "{said}");
        }

        let answer = api.req(
            "PUT",
            &format!("/sources/{key}?kind=secret"),
            Some(("application/octet-stream", b"THE-CONTENT-SENT".to_vec())),
        );
        let body = answer.body.to_string();
        assert_eq!(answer.status, 400, "{body}");
        assert_eq!(answer.body["error"], "validation_error", "{body}");
        assert_no_part_of("the API's answer", &body, key);
    }
    let listed = api.get("/sources");
    assert_eq!(
        listed.body["sources"],
        serde_json::json!([]),
        "{}",
        listed.body
    );
    // The way in the refusal names works, for a secret longer than one read of standard input
    // (it is read into wiped memory that grows by copying): all of it, less the line end.
    let long = format!("{}\n", "k".repeat(10_000));
    let o = procs::skillbox_with(
        &node.dir,
        &["source", "add", "anthropic-key", "--secret"],
        &[],
        Some(long.as_bytes()),
    );
    assert!(o.status.success(), "{}", text(&o));
    let held = api.get("/sources/anthropic-key");
    assert_eq!(held.body["size"], 10_000, "{}", held.body);

    node.kill();
    let log = node.log();
    let kept =
        String::from_utf8_lossy(&skillbox_testkit::leak::every_file_under(&node.dir)).into_owned();
    for key in PASTED {
        assert_no_part_of("node.log", &log, key);
        assert_no_markers("the data dir and its store", &kept, &[key]);
    }
}

/// A source an older node stored under a pasted key (as its name) is unshared and removed with
/// `skillbox source unshare|rm <that name>`, and the CLI's words do not write the key out
/// again: they say to revoke it instead.
#[test]
fn unsharing_and_removing_a_source_named_by_a_pasted_key_does_not_print_the_key() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut node = procs::init_node(root.path(), "n", "http://127.0.0.1:9", None, |t| t);
    node.start(&[]);
    let key = PASTED[0];
    let added = procs::skillbox_with(
        &node.dir,
        &["source", "add", "old-name", "--secret"],
        &[],
        Some(b"THE-CONTENT\n"),
    );
    assert!(added.status.success(), "{}", text(&added));
    // As an older node wrote it: the row under the key as its name.
    let conn = rusqlite::Connection::open(node.dir.join("node.db")).expect("open db");
    let renamed = conn
        .execute(
            "UPDATE sources SET name = ?1 WHERE name = 'old-name'",
            rusqlite::params![key],
        )
        .expect("rename the row");
    assert_eq!(renamed, 1);
    let unshared = procs::skillbox_with(&node.dir, &["source", "unshare", key], &[], None);
    let said = text(&unshared);
    assert!(unshared.status.success(), "{said}");
    assert!(said.contains("revoke that key"), "{said}");
    assert_no_part_of("the CLI's output", &said, key);
    let removed = procs::skillbox_with(&node.dir, &["source", "rm", key], &[], None);
    let said = text(&removed);
    assert!(removed.status.success(), "{said}");
    assert!(said.contains("revoke that key"), "{said}");
    assert_no_part_of("the CLI's output", &said, key);
    let listed = node.api().get("/sources");
    assert_eq!(
        listed.body["sources"],
        serde_json::json!([]),
        "{}",
        listed.body
    );
}
