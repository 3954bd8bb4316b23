//! Three real `skillbox node` processes on 127.0.0.1 (mDNS off, 1 s adverts, 3 s board TTL),
//! driven by the real CLI: `init --p2p --bootstrap`, `peer add`, `peers`, `board --json`,
//! and the leak scan of what the other nodes see.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::procs::{self, BIN};
const BODY_MARKER: &str = "BODYMARKER-5d1e";
const KEY_MARKER: &str = "sk-or-v1-KEYMARKER-0b7c";
const MODEL_MARKER: &str = "anthropic/claude-sonnet-4.5";

fn skillbox(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    procs::skillbox_with(dir, args, &[], stdin)
}

/// The owner's provider key, added as a secret source from stdin as a user types it.
fn add_key(dir: &Path) {
    let o = skillbox(
        dir,
        &["source", "add", "openrouter-key", "--secret"],
        Some(KEY_MARKER.as_bytes()),
    );
    ok(o, "source add");
}

fn ok(o: Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A running node; killed when dropped so a failing test leaves nothing behind.
struct NodeProc {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    peer_id: String,
    p2p: String,
}

impl NodeProc {
    fn start(root: &Path, name: &str, bootstrap: Option<&str>) -> NodeProc {
        let dir = root.join(name);
        let mut args = procs::LOOPBACK_INIT.to_vec();
        if let Some(b) = bootstrap {
            args.extend(["--bootstrap", b]);
        }
        ok(skillbox(&dir, &args, None), "init");
        let config = dir.join("config.toml");
        let text = fs::read_to_string(&config).expect("config");
        assert!(text.contains("mdns = false"), "mDNS is off by default");
        let text = text
            .replace("advertise_secs = 60", "advertise_secs = 1")
            .replace("board_ttl_secs = 180", "board_ttl_secs = 3");
        fs::write(&config, text).expect("write config");

        let log = root.join(format!("{name}.log"));
        let out = fs::File::create(&log).expect("log");
        let child = Command::new(BIN)
            .arg("--data-dir")
            .arg(&dir)
            .arg("node")
            .env("SKILLBOX_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().expect("clone")))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("spawn node");
        let mut node = NodeProc {
            child,
            dir,
            log,
            peer_id: String::new(),
            p2p: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let printed = fs::read_to_string(&node.log).unwrap_or_default();
            let peer = printed.lines().find_map(|l| l.strip_prefix("peer id: "));
            let listen = printed
                .lines()
                .find_map(|l| l.strip_prefix("listening on "));
            if let (Some(p), Some(l)) = (peer, listen)
                && node.dir.join("api.addr").exists()
            {
                node.peer_id = p.trim().to_owned();
                node.p2p = l.trim().to_owned();
                break;
            }
            if let Ok(Some(status)) = node.child.try_wait() {
                panic!("node exited early ({status}): {printed}");
            }
            assert!(Instant::now() < deadline, "node did not start: {printed}");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            node.p2p.ends_with(&format!("/p2p/{}", node.peer_id)),
            "{}",
            node.p2p
        );
        node
    }

    fn cli(&self, args: &[&str]) -> String {
        ok(skillbox(&self.dir, args, None), &args.join(" "))
    }

    fn board(&self) -> (String, Value) {
        let out = self.cli(&["board", "--json"]);
        let v: Value = serde_json::from_str(&out).expect("board JSON");
        (out, v)
    }

    fn skills_of(&self, peer: &str) -> Vec<String> {
        let (_, v) = self.board();
        v["board"]
            .as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["peer"] == peer)
            .map(|r| r["skill"].as_str().unwrap_or("").to_owned())
            .collect()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

#[test]
fn a_skill_imported_on_one_node_appears_on_the_others_boards_and_leaves_them() {
    let root = tempfile::tempdir().expect("tempdir");
    let a = NodeProc::start(root.path(), "a", None);
    let b = NodeProc::start(root.path(), "b", Some(&a.p2p));
    let c = NodeProc::start(root.path(), "c", None);

    // `peer add`: C dials B; `peers` shows it.
    let out = c.cli(&["peer", "add", &b.p2p]);
    assert!(out.contains(&b.peer_id), "{out}");
    let peers: Value = serde_json::from_str(&c.cli(&["peers", "--json"])).expect("peers JSON");
    assert_eq!(peers["peerId"], c.peer_id.as_str());
    assert!(
        peers["peers"]
            .as_array()
            .expect("peers")
            .iter()
            .any(|p| p["peer"] == b.peer_id.as_str()),
        "{peers}"
    );
    let human = c.cli(&["peers"]);
    assert!(human.contains(&b.peer_id), "{human}");

    // A imports a skill and adds its key: offered, so on B's and C's boards within 5 s.
    let skill = root.path().join("taste.md");
    fs::write(
        &skill,
        format!("---\nname: taste\ndescription: Builds a music-taste profile.\nprovider: openrouter\nmodel: {MODEL_MARKER}\nkey: openrouter-key\nrequiredSources: spotify_songs\n---\nYou are a music critic ({BODY_MARKER}).\n"),
    )
    .expect("write skill");
    add_key(&a.dir);
    let added = Instant::now();
    a.cli(&["skill", "add", skill.to_str().expect("utf-8 path")]);
    for n in [&b, &c] {
        wait_for(
            "taste on the board",
            Duration::from_secs(5) - added.elapsed().min(Duration::from_secs(5)),
            || n.skills_of(&a.peer_id) == ["taste"],
        );
    }
    let (text, v) = c.board();
    let row = v["board"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["peer"] == a.peer_id.as_str())
        .expect("row")
        .clone();
    assert_eq!(row["provider"], "openrouter");
    assert_eq!(row["requiredSources"], serde_json::json!(["spotify_songs"]));
    assert_eq!(row["description"], "Builds a music-taste profile.");
    assert!(row["age"].is_u64(), "{row}");
    let human = c.cli(&["board"]);
    assert!(
        human.contains("taste") && human.contains(&a.peer_id),
        "{human}"
    );

    // Leak scan: no body, key or model in what other nodes show, print or log.
    for n in [&b, &c] {
        let (board, _) = n.board();
        let log = fs::read_to_string(&n.log).unwrap_or_default();
        for marker in [BODY_MARKER, KEY_MARKER, MODEL_MARKER] {
            assert!(!board.contains(marker), "{marker} on a board: {board}");
            assert!(!log.contains(marker), "{marker} in another node's log");
        }
    }
    assert!(!text.contains(KEY_MARKER));

    // The key source goes: the skill leaves the boards.
    a.cli(&["source", "rm", "openrouter-key"]);
    for n in [&b, &c] {
        wait_for("taste leaves the board", Duration::from_secs(5), || {
            n.skills_of(&a.peer_id).is_empty()
        });
    }

    // A stops (SIGKILL, no goodbye): it leaves the boards after the 3 s TTL.
    add_key(&a.dir);
    wait_for("taste back", Duration::from_secs(5), || {
        c.skills_of(&a.peer_id) == ["taste"]
    });
    let pa = a.peer_id.clone();
    drop(a);
    let stopped = Instant::now();
    for n in [&b, &c] {
        wait_for("A leaves the board", Duration::from_secs(10), || {
            n.skills_of(&pa).is_empty()
        });
    }
    let gone = stopped.elapsed();
    assert!(gone <= Duration::from_secs(3 + 3), "A left after {gone:?}");
    // B keeps advertising: still on C's board after more than one TTL.
    std::thread::sleep(Duration::from_secs(4));
    let (_, v) = c.board();
    assert!(v["peerCount"].as_u64().is_some_and(|n| n >= 1), "{v}");
}

// ---- `skillbox board` over a board of many pages, fed in-process

/// `skillbox <args>` against a node whose board has `peers` peers of `skills` skills each
/// ([`skillbox_testkit::node_api::board_of_rows`]): the board's skills in board order (peer id,
/// then skill), and what the command printed (stdout, stderr).
fn against_board(peers: usize, skills: usize, args: &[&str]) -> (Vec<String>, String, String) {
    let board = skillbox_testkit::node_api::board_of_rows(peers, skills);
    let order = board
        .rows_after(skillbox_peers::now_ms(), None)
        .map(|r| r.skill.name.clone())
        .collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let node = rt.block_on(skillbox_testkit::node_api::TestNode::start_with_board(
        std::sync::Arc::new(std::sync::Mutex::new(board)),
    ));
    let o = procs::cli(&node.path(), args);
    rt.block_on(node.stop());
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "{out}{err}");
    (order, out, err)
}

/// The skills of `skillbox board`'s rows, in the order printed (a row's second column).
fn printed_skills(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|s| s.starts_with("skill-"))
        .map(str::to_owned)
        .collect()
}

/// `skillbox board --json`'s object and the skills of its rows.
fn json_skills(out: &str) -> (Value, Vec<String>) {
    let v: Value = serde_json::from_str(out).expect("one JSON object");
    let skills = v["board"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["skill"].as_str().map(str::to_owned))
        .collect();
    (v, skills)
}

/// `GET /board` answers 100 rows a page since def74bd, and `skillbox board` printed the first
/// page only: a user saw 100 of the board's 1,250 skills. It follows `next` to the end: every
/// row once, in board order, framed as before, in `--json` too.
#[test]
fn skillbox_board_prints_every_page_of_the_board() {
    let (order, out, _) = against_board(5, 250, &["board"]);
    let printed = printed_skills(&out);
    assert_eq!(printed.len(), 1_250, "rows printed");
    assert_eq!(printed, order, "in board order");
    assert_eq!(
        out.matches("⟦Synthetic skill of a long board.⟧").count(),
        1_250,
        "each description framed"
    );
    assert!(!out.contains("stopped after"), "{out}");

    let (order, out, err) = against_board(5, 250, &["board", "--json"]);
    let (v, skills) = json_skills(&out);
    assert_eq!(skills, order, "{err}");
    assert_eq!(v["peerCount"], 5);
    let notice = v["notice"].as_str().unwrap_or_default();
    assert!(notice.contains("untrusted"), "{notice}");
    assert!(v.get("next").is_none() && err.is_empty(), "{err}");
}

/// A board longer than the command's bound (10,000 rows) is not read whole: the command
/// prints the first 10,000 rows and says it stopped; with `--json`, `next` is where
/// `GET /board?after=` goes on.
#[test]
fn skillbox_board_stops_at_its_bound_and_says_so() {
    let (order, out, _) = against_board(40, 256, &["board"]);
    assert_eq!(order.len(), 10_240);
    let printed = printed_skills(&out);
    assert_eq!(printed.len(), 10_000, "rows printed");
    assert_eq!(printed, order[..10_000], "the first 10,000 rows");
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("stopped after 10000 rows") && last.contains("10000 rows or 16 MiB"),
        "{last}"
    );

    let (order, out, err) = against_board(40, 256, &["board", "--json"]);
    let (v, skills) = json_skills(&out);
    assert_eq!(skills, order[..10_000]);
    let at = &v["board"][9_999];
    let next = format!(
        "{}.{}",
        at["peer"].as_str().expect("peer"),
        hex::encode(at["skill"].as_str().expect("skill"))
    );
    assert_eq!(v["next"], next.as_str(), "after the last row printed");
    assert!(err.contains("stopped after 10000 rows"), "{err}");
}
