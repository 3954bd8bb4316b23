//! A real `skillbox node` process, driven by the real CLI: init, serve, skills and sources, the
//! leak scan, restart after kill -9, and clear errors for a missing or corrupted data key.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::procs::{self, BIN, ServedNode, cli as skillbox, raw_http, text};

fn skillbox_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    procs::skillbox_with(dir, args, &[], Some(input))
}

fn init(root: &Path) -> PathBuf {
    let dir = root.join("node");
    let o = skillbox(&dir, &["init", "--api", "127.0.0.1:0"]);
    assert!(o.status.success(), "init: {}", text(&o));
    // These tests read the API's answers with raw requests to the port, the operator's token
    // among them (as shipped it is taken only over the socket: node it `api` tests that).
    let config = dir.join("config.toml");
    let text = fs::read_to_string(&config).expect("config");
    assert!(text.contains("operator_token_over_tcp = false"), "{text}");
    fs::write(
        &config,
        text.replace(
            "operator_token_over_tcp = false",
            "operator_token_over_tcp = true",
        ),
    )
    .expect("write config");
    dir
}

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("{tag}-{}-{nanos:x}", std::process::id())
}

fn assert_absent(haystack: &[u8], needle: &str, what: &str) {
    assert!(
        !haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes()),
        "{needle} found in {what}"
    );
}

#[test]
fn leak_scan_body_and_key_never_leave_the_store() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = init(root.path());
    let token = fs::read_to_string(dir.join("api.token"))
        .expect("token")
        .trim()
        .to_owned();
    let body_marker = unique("BODYMARKER");
    let key_marker = unique("KEYMARKER");

    let skill_dir = root.path().join("taste");
    fs::create_dir(&skill_dir).expect("mkdir");
    fs::write(
        skill_dir.join("SKILL.md"),
        format!(
            "---\ndescription: Builds a music-taste profile.\nprovider: openrouter\nmodel: some/model\nkey: openrouter-key\nrequiredSources: spotify_songs\n---\nYou are a critic. {body_marker}\n"
        ),
    )
    .expect("write skill");

    let node = ServedNode::start(&dir, "node1.log");
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    let mut cli = |args: &[&str], input: Option<&[u8]>| {
        let o = match input {
            Some(i) => skillbox_stdin(&dir, args, i),
            None => skillbox(&dir, args),
        };
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        seen.push((format!("cli {args:?}"), text(&o).into_bytes()));
        text(&o)
    };
    // Import (the folder name is the fallback name), the key from stdin, list and inventory.
    let added = cli(&["skill", "add", skill_dir.to_str().expect("utf8")], None);
    assert!(added.contains("added skill taste"), "{added}");
    cli(
        &["source", "add", "openrouter-key", "--secret"],
        Some(format!("{key_marker}\n").as_bytes()),
    );
    let list = cli(&["skill", "list", "--json"], None);
    assert!(
        list.contains("\"offered\": true"),
        "the skill is offered once the key is there: {list}"
    );
    cli(&["skill", "list"], None);
    cli(&["skill", "show", "taste"], None);
    cli(&["skill", "show", "taste", "--json"], None);
    let sources = cli(&["source", "list", "--json"], None);
    assert!(
        sources.contains("skill/taste/body") && sources.contains("openrouter-key"),
        "{sources}"
    );
    cli(&["source", "list"], None);
    // A secret given on the command line (readable by every local user in /proc) is refused
    // before anything is sent, and no source is made.
    let argv_secret = skillbox(
        &dir,
        &[
            "source", "add", "argv-key", "--text", "sk-ARGV", "--kind", "secret",
        ],
    );
    assert!(!argv_secret.status.success(), "{}", text(&argv_secret));
    assert!(
        text(&argv_secret).contains("--secret"),
        "{}",
        text(&argv_secret)
    );
    assert!(!cli(&["source", "list", "--json"], None).contains("argv-key"));

    let paths = [
        "/skills",
        "/skills/taste",
        "/sources",
        "/sources/openrouter-key",
        "/sources/skill/taste/body",
        "/v1/agents",
        "/v1/agents/local.skillbox.taste",
        "/.well-known/openwop",
        "/openapi.json",
        "/metrics",
        "/node",
        "/healthz",
    ];
    let scan_http = |addr: &str, seen: &mut Vec<(String, Vec<u8>)>| {
        for p in paths {
            let (status, body) = raw_http(addr, "GET", p, Some(&token));
            assert_eq!(status, 200, "GET {p}: {body}");
            seen.push((format!("GET {p}"), body.into_bytes()));
        }
        // Error answers too.
        for p in ["/skills/nope", "/v1/agents/nope", "/sources/nope"] {
            let (status, body) = raw_http(addr, "GET", p, Some(&token));
            assert_eq!(status, 404);
            seen.push((format!("GET {p}"), body.into_bytes()));
        }
    };
    scan_http(&node.addr.clone(), &mut seen);
    let log1 = node.kill();
    assert!(
        log1.contains("skill imported"),
        "the node logs at debug level, so the scan means something: {log1}"
    );

    // Restart: everything is still there, and still nothing leaks.
    let node = ServedNode::start(&dir, "node2.log");
    let (status, body) = raw_http(&node.addr, "GET", "/skills", Some(&token));
    assert_eq!(status, 200);
    assert!(body.contains("\"offered\":true"), "{body}");
    scan_http(&node.addr.clone(), &mut seen);
    let log2 = node.kill();
    seen.push(("node log (first run)".into(), log1.into_bytes()));
    seen.push(("node log (after restart)".into(), log2.into_bytes()));

    // The SQLite files, byte for byte (the WAL too: kill -9 leaves it un-checkpointed).
    let mut db_files = 0;
    for name in ["node.db", "node.db-wal", "node.db-shm"] {
        if let Ok(bytes) = fs::read(dir.join(name)) {
            db_files += 1;
            seen.push((name.into(), bytes));
        }
    }
    assert!(db_files >= 1);
    // The content really is in there (encrypted): the source sizes say so.
    assert!(
        sources.contains(&format!("\"size\": {}", key_marker.len())),
        "{sources}"
    );

    for (what, bytes) in &seen {
        assert_absent(bytes, &body_marker, what);
        assert_absent(bytes, &key_marker, what);
    }
}

#[test]
fn restart_keeps_everything_and_a_bad_data_key_is_a_clear_error() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = init(root.path());
    let node = ServedNode::start(&dir, "a.log");
    let skill = root.path().join("haiku.md");
    fs::write(
        &skill,
        "---\ndescription: Writes a haiku.\nprovider: local\n---\nWrite a haiku.\n",
    )
    .expect("write");
    let o = skillbox(&dir, &["skill", "add", skill.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    let o = skillbox(&dir, &["source", "add", "notes", "--text", "some notes"]);
    assert!(o.status.success(), "{}", text(&o));
    let skills_before = skillbox(&dir, &["skill", "list", "--json"]);
    let sources_before = skillbox(&dir, &["source", "list", "--json"]);
    node.kill();

    let node = ServedNode::start(&dir, "b.log");
    assert_eq!(
        skillbox(&dir, &["skill", "list", "--json"]).stdout,
        skills_before.stdout
    );
    assert_eq!(
        skillbox(&dir, &["source", "list", "--json"]).stdout,
        sources_before.stdout
    );
    assert!(String::from_utf8_lossy(&skills_before.stdout).contains("\"name\": \"haiku\""));
    node.kill();

    let key = dir.join("data.key");
    let good = fs::read(&key).expect("key");
    let start_fails = |expect: &str| {
        let o = Command::new(BIN)
            .arg("--data-dir")
            .arg(&dir)
            .arg("node")
            .stdin(Stdio::null())
            .output()
            .expect("run node");
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains(expect), "expected {expect:?} in: {t}");
        assert!(!t.contains("panicked"), "{t}");
    };
    let mut flipped = good.clone();
    flipped[7] ^= 0x80;
    fs::write(&key, &flipped).expect("corrupt");
    start_fails("does not match this store");
    fs::write(&key, &good[..20]).expect("truncate");
    start_fails("expected exactly 32 bytes, found 20");
    fs::remove_file(&key).expect("remove");
    start_fails("data key missing");
    fs::write(&key, &good).expect("restore");
    let node = ServedNode::start(&dir, "c.log");
    assert_eq!(
        skillbox(&dir, &["skill", "list", "--json"]).stdout,
        skills_before.stdout
    );
    node.kill();
}

#[test]
fn init_writes_private_files_and_refuses_to_overwrite() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("n");
    let o = skillbox(
        &dir,
        &[
            &procs::LOOPBACK_INIT[..],
            &[
                "--bootstrap",
                "/ip4/127.0.0.1/tcp/4001",
                "--box",
                "http://127.0.0.1:7430",
                "--allow-insecure-dev",
            ],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("node id: 12D3KooW"), "{}", text(&o));
    use std::os::unix::fs::PermissionsExt;
    for f in ["node.key", "data.key", "api.token", "config.toml"] {
        let mode = fs::metadata(dir.join(f)).expect(f).permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    let config = fs::read_to_string(dir.join("config.toml")).expect("config");
    for needle in [
        "listen = \"127.0.0.1:0\"",
        "bootstrap = [\"/ip4/127.0.0.1/tcp/4001\"]",
        "accept = [\"http://127.0.0.1:7430\"]",
        "allow_insecure_dev = true",
        "advertise_secs = 60",
        "advance_secs = 2",
        "sweep_secs = 30",
        "stall_limit_secs = 120",
        "board_ttl_secs = 180",
        "namespace = \"local.skillbox\"",
        "[policy]",
    ] {
        assert!(
            config.contains(needle),
            "config lacks {needle:?}:\n{config}"
        );
    }
    let key_before = fs::read(dir.join("node.key")).expect("key");
    let o = skillbox(&dir, &["init"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("already initialised"), "{}", text(&o));
    assert_eq!(fs::read(dir.join("node.key")).expect("key"), key_before);

    // Bad flag values are refused before anything is written.
    let other = root.path().join("m");
    let o = skillbox(&other, &["init", "--bootstrap", "not-a-multiaddr"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("not a multiaddr"), "{}", text(&o));
    assert!(!other.join("node.key").exists());
}

#[test]
fn cli_reports_a_rejected_skill_and_a_missing_node_clearly() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = init(root.path());
    // No node running: a clear error, exit 1.
    let skill = root.path().join("memo.md");
    fs::write(&skill, "---\ndescription: Remembers.\nprovider: local\nmemory:\n  longTerm: true\n---\nRemember.\n").expect("write");
    let o = skillbox(&dir, &["skill", "list"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("is `skillbox node` running?"),
        "{}",
        text(&o)
    );

    let node = ServedNode::start(&dir, "n.log");
    let o = skillbox(&dir, &["skill", "add", skill.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("pack_validation_failed") && t.contains("memoryShape"),
        "{t}"
    );
    let list = skillbox(&dir, &["skill", "list", "--json"]);
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("\"total\": 0"),
        "{}",
        text(&list)
    );
    let o = skillbox(&dir, &["source", "rm", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not found"), "{}", text(&o));
    node.kill();
}

/// A process started without `HOME` (a service unit, `env -i`) takes its data dir under this
/// user's home from the password database, never under the current directory: started in
/// /tmp, that was a /tmp/.local another user could have made first, whose `api.sock` then
/// received the operator token.
#[test]
fn without_home_the_data_dir_is_not_under_the_current_directory() {
    let cwd = tempfile::tempdir().expect("dir");
    let out = Command::new(BIN)
        .args(["skill", "list"])
        .current_dir(cwd.path())
        .env_remove("HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("run");
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("/.local/share/skillbox") && !said.contains("./.local"),
        "{said}"
    );
    assert_eq!(
        fs::read_dir(cwd.path()).expect("list").count(),
        0,
        "something was made in the current directory"
    );
}

/// Review 25 S1 through the CLI, performed: `skill add` of someone else's SKILL.md asking for
/// 2^53-1 calls a day on `openai/o1-pro` under the owner's `openrouter-key` printed only "added
/// … not offered", and the node applied the file's ceilings. Now it says what the skill spends
/// (provider, model, key source) and the ceilings in force — the node's for every field the
/// file raised, each named in a warning — and nothing of the file's text reaches the terminal
/// raw (its field name is an OSC 52 write).
#[test]
fn skill_add_says_what_someone_elses_file_spends_and_holds_it_to_the_ceilings() {
    use skillbox_testkit::skills::{HOSTILE_SKILL_MD, holds_terminal_controls};
    let root = tempfile::tempdir().expect("tempdir");
    let dir = init(root.path());
    let node = ServedNode::start(&dir, "a.log");
    let skill = root.path().join("evil-skill");
    fs::create_dir(&skill).expect("mkdir");
    fs::write(skill.join("SKILL.md"), HOSTILE_SKILL_MD).expect("write");
    let o = skillbox(&dir, &["skill", "add", skill.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.contains(
            "  spends: provider openrouter, model openai/o1-pro, key source openrouter-key\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("  ceilings in force: maxRequestBytes 65536, maxSourceBytes 1048576, maxOutputBytes 16384, callsPerPeerPerDay 100, callsPerDay 1000\n"),
        "{out}"
    );
    for (field, ceiling) in [
        ("maxOutputBytes", 16384),
        ("callsPerPeerPerDay", 100),
        ("callsPerDay", 1000),
    ] {
        assert!(
            out.contains(&format!("  warning: limits.{field}: ")),
            "{field}: {out}"
        );
        assert!(
            out.contains(&format!("[ceilings] ({ceiling}), so {ceiling} applies")),
            "{field}: {out}"
        );
    }
    assert!(
        out.contains("  warning: ]52;c;Y3VybCBldmlsLnNofHNo [31mX: unknown field"),
        "{out}"
    );
    assert!(!holds_terminal_controls(&out), "raw controls: {out:?}");
    let shown = skillbox(&dir, &["skill", "show", "evil-skill", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    assert_eq!(
        v["declaration"]["limits"],
        serde_json::json!(null),
        "nothing of the file's ceilings is stored: {v}"
    );
    node.kill();
}
