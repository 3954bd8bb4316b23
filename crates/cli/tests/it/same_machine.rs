//! The same-machine door: what another user of this machine, or anyone who sees this screen,
//! can read. A secret typed for `source add NAME --secret` is not echoed at the terminal (not on
//! the screen, in scrollback or in a recording); from a pipe it is read as before; the help says
//! which arguments other local users read. (A call's request off the command line is
//! `call_cli`'s.)

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::procs::{self, ServedNode, assert_no_markers, cli, cli_ok, text};

/// A node's data dir, `node` in a fresh temporary dir, made by `skillbox init` as a user makes
/// it (its API on a free loopback port): the temporary dir (remove it last) and the data dir.
fn inited_node() -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("node");
    cli_ok(&dir, &["init", "--api", "127.0.0.1:0"]);
    (root, dir)
}

/// `skillbox source add NAME --secret` with `key` piped to it, as a script adds a key; its output.
fn add_secret_piped(dir: &Path, name: &str, key: &[u8]) -> std::process::Output {
    procs::skillbox_with(dir, &["source", "add", name, "--secret"], &[], Some(key))
}

/// The `skillbox` process (not `script`, not its shell) whose command line holds `dir` and
/// `--secret`, once it runs.
fn secret_reader(dir: &Path) -> Option<u32> {
    let dir = dir.to_string_lossy();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let raw = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let ours = args.first().is_some_and(|a| a == procs::bin())
            && args.iter().any(|a| *a == dir)
            && args.iter().any(|a| a == "--secret");
        ours.then_some(pid)
    })
}

/// Whether the terminal on `pid`'s standard input echoes what is typed (`stty -a`).
fn echoes(pid: u32) -> Option<bool> {
    let tty = std::fs::read_link(format!("/proc/{pid}/fd/0")).ok()?;
    let out = Command::new("stty")
        .arg("-F")
        .arg(&tty)
        .arg("-a")
        .output()
        .ok()?;
    let modes = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = modes.split_whitespace();
    Some(words.any(|w| w == "echo"))
}

/// Someone at the terminal types a key for `source add typed-key --secret` while the screen is
/// watched (a pseudo-terminal from util-linux `script`; what it prints is what the screen
/// shows). The key is typed once the terminal is set for it (echo off), or after 5 s: a
/// command that never turns echo off has the key on the screen.
#[test]
fn a_secret_typed_at_a_terminal_is_not_on_the_screen() {
    const TYPED: &str = "sk-TYPED-AT-THE-TERMINAL-4d1c";
    let (_root, dir) = inited_node();
    let _node = ServedNode::start(&dir, "node.log");

    let mut screen = procs::at_terminal(&dir, "source add typed-key --secret");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if secret_reader(&dir).and_then(echoes) == Some(false) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut keyboard = screen.stdin.take().expect("stdin");
    // The key and Enter; then Ctrl-D, which ends input for a reader that waits for the end.
    keyboard
        .write_all(format!("{TYPED}\n\x04").as_bytes())
        .expect("type");
    let mut shown = String::new();
    let mut out = screen.stdout.take().expect("stdout");
    out.read_to_string(&mut shown).expect("read the screen");
    drop(keyboard);
    let status = screen.wait().expect("script");
    assert!(
        !shown.contains(TYPED),
        "the secret was on the screen: {shown}"
    );
    assert!(status.success(), "{shown}");
    assert!(
        shown.contains("secret for source typed-key") && shown.contains("added source typed-key"),
        "{shown}"
    );

    // What was typed is the key, whole; and from a pipe the key is read as before (its line end
    // dropped).
    let o = add_secret_piped(&dir, "piped-key", b"sk-PIPED\n");
    assert!(o.status.success(), "{}", text(&o));
    // Private text off the command line: `--file /dev/stdin`, as the help says.
    let o = procs::skillbox_with(
        &dir,
        &[
            "source",
            "add",
            "songs",
            "--file",
            "/dev/stdin",
            "--kind",
            "text",
        ],
        &[],
        Some(b"Bonobo - Kerala"),
    );
    assert!(o.status.success(), "{}", text(&o));
    let list = cli(&dir, &["source", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).expect("JSON");
    let size = |name: &str| {
        list["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == name)
            .map(|s| (s["kind"].clone(), s["size"].clone()))
    };
    assert_eq!(
        size("typed-key"),
        Some(("secret".into(), TYPED.len().into())),
        "{list}"
    );
    assert_eq!(
        size("piped-key"),
        Some(("secret".into(), 8.into())),
        "{list}"
    );
    assert_eq!(size("songs"), Some(("text".into(), 15.into())), "{list}");
}

/// The secret prompt turns the terminal's echo (and line editing, and Ctrl-C) off; a prompt
/// ended any other way than Enter must hand the terminal back as it found it. Otherwise what the
/// user types next at their shell (the key again, another secret) is invisible to them, and
/// typed believing the prompt is still up it goes to the shell. Each way out is taken at a
/// terminal (util-linux `script`), and the same terminal's modes are read right after by `stty
/// -a` in the same session: Ctrl-C typed at the prompt, Ctrl-D (end of input), and SIGINT,
/// SIGTERM and SIGHUP sent to the process.
#[test]
fn the_terminal_echoes_again_after_the_secret_prompt_is_left() {
    let (_root, dir) = inited_node();
    // (the way out, what the shell's `$?` says after it)
    let ways: [(&str, &str); 5] = [
        ("typed Ctrl-C", "exit=130"),
        ("typed Ctrl-D", "exit=1"),
        ("INT", "exit=130"),
        ("TERM", "exit=143"),
        ("HUP", "exit=129"),
    ];
    let (mut left_silent, mut unsaid) = (Vec::new(), Vec::new());
    for (way, exit) in ways {
        let mut screen = procs::at_terminal(
            &dir,
            "source add left-key --secret; echo \"exit=$?\"; stty -a",
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let reader = loop {
            if let Some(pid) = secret_reader(&dir).filter(|p| echoes(*p) == Some(false)) {
                break pid;
            }
            assert!(Instant::now() < deadline, "{way}: the prompt never came up");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut keyboard = screen.stdin.take().expect("stdin");
        match way {
            "typed Ctrl-C" => keyboard.write_all(b"sk-HALF\x03").expect("type"),
            "typed Ctrl-D" => keyboard.write_all(b"\x04").expect("type"),
            signal => {
                let sent = Command::new("kill")
                    .args([format!("-{signal}"), reader.to_string()])
                    .status()
                    .expect("kill");
                assert!(sent.success(), "{way}: kill");
            }
        }
        let mut shown = String::new();
        let mut out = screen.stdout.take().expect("stdout");
        out.read_to_string(&mut shown).expect("read the screen");
        drop(keyboard);
        screen.wait().expect("script");
        let after = shown
            .split_once(exit)
            .map(|(_, modes)| modes)
            .unwrap_or_else(|| panic!("{way}: no {exit} on the screen: {shown}"));
        let modes: Vec<&str> = after.split_whitespace().collect();
        let lost: Vec<&str> = ["echo", "icanon", "isig"]
            .into_iter()
            .filter(|m| !modes.contains(m))
            .collect();
        if !lost.is_empty() {
            left_silent.push(format!("{way}: left without {}", lost.join(", ")));
        }
        if way != "typed Ctrl-D" && !shown.contains("secret not read: interrupted") {
            unsaid.push(format!("{way}: {shown}"));
        }
    }
    assert!(
        left_silent.is_empty(),
        "the terminal was left silent: {left_silent:?}"
    );
    assert!(unsaid.is_empty(), "no word of the interruption: {unsaid:?}");
}

/// What stays on a command line other local users read is said so in its help: `skill set`'s
/// fields are no secret (the key itself goes in with `source add --secret`); `source add --text`
/// is visible, and points at `--file`.
#[test]
fn the_help_says_what_a_command_line_shows() {
    let root = tempfile::tempdir().expect("tempdir");
    let help = cli_ok(root.path(), &["skill", "set", "--help"]);
    assert!(
        help.contains("None of them is a secret") && help.contains("source add NAME --secret"),
        "{help}"
    );
    let help = cli_ok(root.path(), &["source", "add", "--help"]);
    assert!(
        help.contains("every user of this machine sees") && help.contains("--file /dev/stdin"),
        "{help}"
    );
}

/// `skill set NAME key=` takes the *name* of a source holding the key; an owner who pastes the
/// key itself there has put it on a command line (other local users read it in `ps`), and the
/// node would keep it as the skill's key name, in its store, shown by `skill show`. The CLI
/// refuses any `key=` that is not a secret source of the node's, before anything is sent, with
/// a fixed message that repeats nothing of the value and names the way in (`source add NAME
/// --secret`, then `key=NAME`). The same for a key pasted without `key=` (`skill set NAME
/// KEY`): no error repeats it.
#[test]
fn a_key_pasted_into_skill_set_is_refused_and_kept_nowhere() {
    const PASTED: &str = "sk-proj-Q3vT9xLm2PASTEDkEy7wZr4Nd8Hs1Fb6";
    const ENCODED: &str = "c2stUEFTVEVELWJhc2U2NC1rZXktOTk=";
    let (root, dir) = inited_node();
    let node = ServedNode::start(&dir, "node.log");
    let skill = root.path().join("taste");
    std::fs::create_dir(&skill).expect("mkdir");
    std::fs::write(
        skill.join("SKILL.md"),
        skillbox_testkit::skills::skill_doc("taste", "BODY-7f3a", &[]),
    )
    .expect("write SKILL.md");
    cli_ok(&dir, &["skill", "add", &skill.display().to_string()]);
    let o = add_secret_piped(&dir, "openai-key", b"sk-THE-REAL-ONE\n");
    assert!(o.status.success(), "{}", text(&o));
    cli_ok(
        &dir,
        &["source", "add", "songs", "--text", "Bonobo - Kerala"],
    );

    let attempts: [&[&str]; 5] = [
        &["skill", "set", "taste", &format!("key={PASTED}")],
        &["skill", "set", "taste", &format!("key={ENCODED}")],
        &["skill", "set", "taste", "provider=openai", PASTED],
        &["skill", "set", "taste", ENCODED],
        &[
            "skill",
            "set",
            "taste",
            &format!("maxRequestBytes={PASTED}"),
        ],
    ];
    for args in attempts {
        let o = cli(&dir, args);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?} was taken: {said}");
        assert_no_markers(
            "the CLI's output",
            &said,
            &[PASTED, ENCODED, "c2stUEFTVEVE"],
        );
    }
    let o = cli(&dir, &["skill", "set", "taste", &format!("key={PASTED}")]);
    let said = text(&o);
    assert!(
        said.contains("source add NAME --secret") && said.contains("key=NAME"),
        "the refusal names no way in: {said}"
    );
    // Names that are not a secret source of this node: refused too, without repeating them.
    for name in ["no-such-source", "songs"] {
        let o = cli(&dir, &["skill", "set", "taste", &format!("key={name}")]);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "key={name} was taken: {said}");
        assert!(said.contains("source add NAME --secret"), "{said}");
    }

    let shown = cli_ok(&dir, &["skill", "show", "taste", "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(shown["declaration"]["key"], "openai-key", "{shown}");
    // The way in works: a secret source's name.
    cli_ok(&dir, &["skill", "set", "taste", "key=openai-key"]);
    let log = node.kill();
    let everything =
        String::from_utf8_lossy(&skillbox_testkit::leak::every_file_under(root.path()))
            .into_owned();
    assert_no_markers(
        "the data dir, the store and the logs",
        &format!("{everything}{log}"),
        &[PASTED, ENCODED],
    );
}

/// Another user's listener where the node's socket goes (`<data dir>/api.sock`): every byte a
/// client sends it, kept; each connection answered `201 {}`.
struct TheirSocket {
    heard: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    _serving: std::thread::JoinHandle<()>,
}

impl TheirSocket {
    fn listen(dir: &Path) -> TheirSocket {
        let path = skillbox_node::DataDir::new(dir).api_socket();
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind their socket");
        let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = heard.clone();
        let _serving = std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let _ = conn.set_read_timeout(Some(Duration::from_millis(300)));
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    into.lock().expect("lock").extend_from_slice(&buf[..n]);
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                );
            }
        });
        TheirSocket { heard, _serving }
    }

    fn heard(&self) -> String {
        String::from_utf8_lossy(&self.heard.lock().expect("lock")).into_owned()
    }
}

/// The CLI sends the operator token, and with `source add --secret` the key, to the socket in
/// the data dir. In a data dir another user may write to (left 0777), owns, or may swap (it sits
/// in a directory others write to without the sticky bit), that user can have put their own
/// socket: the CLI refuses the dir, naming it, before the key is asked for or anything is sent.
/// `skillbox mcp` too. (The same listener in a private data dir of ours hears the key: the
/// listener works.)
#[test]
fn the_cli_sends_nothing_through_a_data_dir_another_user_can_write() {
    use procs::set_mode as mode;
    const KEY: &str = "sk-FOR-MY-OWN-NODE-ONLY-8e21";
    let (root, dir) = inited_node();
    let token = std::fs::read_to_string(dir.join("api.token")).expect("token");
    let theirs = TheirSocket::listen(&dir);
    let add = |dir: &Path| add_secret_piped(dir, "my-key", format!("{KEY}\n").as_bytes());
    let refused = |o: &std::process::Output, why: &str, what: &str| {
        let said = text(o);
        assert_eq!(o.status.code(), Some(1), "{what}: taken: {said}");
        assert!(said.contains(why), "{what}: {said}");
        let heard = theirs.heard();
        assert!(
            !heard.contains(KEY) && !heard.contains(token.trim()),
            "{what}: the other user's socket heard: {heard}"
        );
    };

    // Left writable to every user of the machine.
    mode(&dir, 0o777);
    refused(&add(&dir), "writable by other users", "a 0777 data dir");
    let o = procs::skillbox_with(&dir, &["mcp"], &[], Some(b""));
    refused(
        &o,
        "writable by other users",
        "skillbox mcp in a 0777 data dir",
    );

    // Private again, inside a directory others may rename entries of (no sticky bit).
    mode(&dir, 0o700);
    mode(root.path(), 0o777);
    refused(
        &add(&dir),
        "swap the data dir",
        "a data dir in an open parent",
    );
    mode(root.path(), 0o1777);

    // Owned by another user (only root can make one to try).
    procs::while_another_user_owns(&dir, || {
        refused(
            &add(&dir),
            "belongs to another user",
            "another user's data dir",
        )
    });

    // Ours alone: the command goes through (to the listener standing in for the node).
    let o = add(&dir);
    assert!(o.status.success(), "{}", text(&o));
    assert!(theirs.heard().contains(KEY), "the listener heard nothing");
}

/// `o` (the command `what`) stopped with exit 1, saying `why` and naming `at`: the directory the
/// own-dir rule refused.
fn refused_for_where_it_is(o: &std::process::Output, why: &str, at: &Path, what: &str) {
    let said = text(o);
    assert_eq!(o.status.code(), Some(1), "{what}: went ahead: {said}");
    assert!(
        said.contains(why) && said.contains(&at.display().to_string()),
        "{what}: not refused for where it is: {said}"
    );
}

/// `skillbox node` and `skillbox box` read keys and config from their data dir (and a box's
/// key files from theirs) and serve the node's API socket there: a dir another user may write to
/// (left 0777), owns, or may swap would run on that user's keys (a box identity they know, a
/// store key that opens every kept stake) or hand them the socket. Each is refused at start,
/// naming the dir, before any key is read or made; the same dir made private starts.
#[test]
fn a_node_or_a_box_does_not_start_on_a_dir_another_user_can_write() {
    use procs::set_mode as mode;
    const PLANTED: &str = "5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a";
    let (root, dir) = inited_node();
    let show_identity = [
        "box",
        "--insecure-dev",
        "--listen",
        "127.0.0.1:0",
        "--show-identity",
    ];
    let refused = refused_for_where_it_is;

    mode(&dir, 0o777);
    // Bounded: a node that does start runs until stopped (`timeout` says 124 then).
    let node = Command::new("timeout")
        .args(["20", procs::BIN, "--data-dir"])
        .arg(&dir)
        .arg("node")
        .output()
        .expect("run skillbox node");
    refused(
        &node,
        "writable by other users",
        &dir,
        "a node on a 0777 data dir",
    );
    refused(
        &cli(&dir, &show_identity),
        "writable by other users",
        &dir,
        "a box on a 0777 data dir",
    );
    assert!(
        !dir.join("box").exists(),
        "the box made its key in an open data dir"
    );
    mode(&dir, 0o700);

    // A box key file in a directory others write to, with a key of theirs in it.
    let open = root.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    mode(&open, 0o777);
    let planted = open.join("box.key");
    std::fs::write(&planted, PLANTED).expect("plant");
    let key_file = planted.display().to_string();
    let mut with_key = show_identity.to_vec();
    with_key.extend(["--key-file", &key_file]);
    let o = cli(&dir, &with_key);
    refused(
        &o,
        "writable by other users",
        &open,
        "a box key in an open directory",
    );
    let o = cli(
        &dir,
        &[
            "box",
            "--insecure-dev",
            "--store-key-file",
            &key_file,
            "--show-identity",
        ],
    );
    refused(
        &o,
        "writable by other users",
        &open,
        "a store key in an open directory",
    );

    // The box's own directory handed to another user (only root can make one to try).
    let box_dir = dir.join("box");
    std::fs::create_dir_all(&box_dir).expect("mkdir box");
    procs::while_another_user_owns(&box_dir, || {
        refused(
            &cli(&dir, &show_identity),
            "belongs to another user",
            &box_dir,
            "another user's box dir",
        )
    });

    // Ours alone: the box starts (prints what nodes pin) on a key of its own making.
    let pin = cli_ok(&dir, &show_identity);
    assert!(pin.contains("insecure-dev"), "{pin}");
    assert!(!pin.contains(PLANTED), "{pin}");
}

/// `skillbox demo --keep DIR` writes two nodes' keys, tokens and config under DIR and runs what
/// it finds there: a DIR other users may write to, or one made where they may swap it, would
/// run their config (their box) and keys. Refused, naming it, before anything starts.
#[test]
fn the_demo_keeps_nothing_where_another_user_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("tempdir");
    let open = root.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    for (keep, why) in [
        (open.clone(), "writable by other users"),
        (open.join("kept"), "swap the data dir"),
    ] {
        let o = cli(
            root.path(),
            &[
                "demo",
                "--keep",
                &keep.display().to_string(),
                "--model",
                "/nonexistent/model.gguf",
            ],
        );
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "{said}");
        assert!(
            said.contains(why) && said.contains(&keep.display().to_string()),
            "--keep {}: not refused for where it is: {said}",
            keep.display()
        );
    }
}

/// CI's target directory sits in /var/tmp, which every local user writes: a directory another
/// user made there first (or left writable to others) would hand them the build scripts, test
/// binaries and agent-tool clients CI then runs. `scripts/target-dir` takes only a directory of
/// this user's that nobody else can write; the shared name falls back to a per-user one.
#[test]
fn ci_builds_only_into_a_target_directory_of_its_own() {
    use std::os::unix::fs::PermissionsExt;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/target-dir");
    let base = tempfile::tempdir().expect("base");
    let pick = |target: Option<&Path>| {
        let mut c = Command::new("bash");
        c.arg(&script)
            .env("SKILLBOX_TARGET_BASE", base.path())
            .env_remove("CARGO_TARGET_DIR");
        if let Some(t) = target {
            c.env("CARGO_TARGET_DIR", t);
        }
        let out = c.output().expect("run scripts/target-dir");
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), said, err)
    };
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    let shared = base.path().join("skillbox-target");
    let uid =
        String::from_utf8(Command::new("id").arg("-u").output().expect("id").stdout).expect("uid");
    let mine = base.path().join(format!("skillbox-target-{}", uid.trim()));

    // A fresh machine: the shared name, made private.
    let (ok, said, err) = pick(None);
    assert!(ok, "{err}");
    assert_eq!(Path::new(&said), shared);
    assert_eq!(mode(&shared), 0o700);

    // Another user's squat: the shared name left writable to everyone. Not used.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (ok, said, err) = pick(None);
    assert!(ok, "{err}");
    assert_eq!(
        Path::new(&said),
        mine,
        "the squatted shared directory was used"
    );
    assert_eq!(mode(&mine), 0o700);

    // The per-user name squatted too: refused, naming it, rather than built into.
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (ok, said, err) = pick(None);
    assert!(!ok, "a squatted directory was taken: {said}");
    assert!(err.contains(&mine.display().to_string()), "{err}");

    // A link planted under the shared name (to a directory of ours, even) is no directory of ours.
    std::fs::remove_dir(&shared).expect("rm shared");
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    std::os::unix::fs::symlink(elsewhere.path(), &shared).expect("symlink");
    let (ok, said, err) = pick(None);
    assert!(ok, "{err}");
    assert_eq!(Path::new(&said), mine, "the planted link was followed");

    // A named target dir that others can write is refused, not quietly replaced.
    let named = tempfile::tempdir().expect("named");
    std::fs::set_permissions(named.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (ok, _, err) = pick(Some(named.path()));
    assert!(!ok);
    assert!(err.contains("CARGO_TARGET_DIR"), "{err}");
    std::fs::set_permissions(named.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (ok, said, err) = pick(Some(named.path()));
    assert!(ok, "{err}");
    assert_eq!(Path::new(&said), named.path());

    // Ours, but inside a directory others may rename entries of (no sticky bit): they could
    // swap it for theirs after the check. Refused; with the sticky bit, taken.
    let open_parent = tempfile::tempdir().expect("parent");
    let inside = open_parent.path().join("target");
    std::fs::create_dir(&inside).expect("mkdir");
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::set_permissions(open_parent.path(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    let (ok, _, err) = pick(Some(&inside));
    assert!(!ok, "a directory another user could swap was taken");
    assert!(err.contains("swap"), "{err}");
    std::fs::set_permissions(open_parent.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod");
    let (ok, _, err) = pick(Some(&inside));
    assert!(ok, "{err}");

    // Owned by another user (only root can make one to try): not used.
    if uid.trim() == "0" {
        let theirs = base.path().join("theirs");
        std::fs::create_dir(&theirs).expect("mkdir");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let chown = Command::new("chown")
            .args(["65534", &theirs.display().to_string()])
            .status()
            .expect("chown");
        assert!(chown.success());
        let (ok, _, err) = pick(Some(&theirs));
        assert!(!ok, "another user's directory was taken");
        assert!(err.contains("not this user's own"), "{err}");
    }
}

/// `skillbox demo --keep DIR` under `umask 002` (the shell default on systems with user-private
/// groups): the dirs it made were group-writable, and its own data-dir rule refused them on the
/// next line, so the demo could not run with `--keep` there. Every dir it makes is now 0700.
/// (`--model` names no file, so the demo stops right after the rule, starting nothing.)
#[test]
fn demo_keep_made_under_umask_002_passes_the_data_dir_rule() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("tempdir");
    let keep = root.path().join("x/y");
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 002 && exec \"$0\" \"$@\"")
        .arg(procs::bin())
        .arg("demo")
        .arg("--keep")
        .arg(&keep)
        .arg("--model")
        .arg(root.path().join("no-model.gguf"))
        .env("SKILLBOX_DATA_DIR", root.path().join("home"))
        .output()
        .expect("run demo");
    let said = text(&out);
    assert!(
        said.contains("no such file") && !said.contains("other users"),
        "the demo stopped before the model check: {said}"
    );
    for dir in [root.path().join("x"), keep] {
        let mode = std::fs::metadata(&dir).expect("made").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
}

/// `skillbox model fetch` and the demo's first fetch run pip in the data dir and put there the
/// model every box loads: a data dir another user may write to (left 0777), owns, or may swap
/// (made in an open parent) would let that user plant what pip runs, or swap the GGUF after its
/// sha256 check. Refused, naming it, before pip runs (the interpreter here records that it
/// ran); the same dir made private runs it.
#[test]
fn the_model_is_fetched_into_no_data_dir_another_user_can_write() {
    use procs::set_mode as mode;
    let root = tempfile::tempdir().expect("tempdir");
    let ran = root.path().join("pip-ran");
    let python = root.path().join("python3");
    std::fs::write(
        &python,
        format!("#!/bin/sh\n: > '{}'\nexit 1\n", ran.display()),
    )
    .expect("write the interpreter");
    mode(&python, 0o755);
    let python = python.display().to_string();
    let fetch = |dir: &Path| cli(dir, &["model", "fetch", "--python", &python]);
    let refused = |o: &std::process::Output, why: &str, at: &Path, what: &str| {
        refused_for_where_it_is(o, why, at, what);
        assert!(!ran.exists(), "{what}: pip ran");
    };

    let dir = root.path().join("data");
    std::fs::create_dir(&dir).expect("mkdir");
    mode(&dir, 0o777);
    refused(
        &fetch(&dir),
        "writable by other users",
        &dir,
        "a 0777 data dir",
    );
    // The demo, with no model of its own and none fetched yet, fetches into the data dir too
    // (kept off the network should the rule not hold). An empty SKILLBOX_MODEL is none: the
    // test run's shared model (scripts/test names it there) would otherwise be the demo's.
    let demo = procs::skillbox_with(
        &dir,
        &["demo"],
        &[("PIP_NO_INDEX", "1"), ("SKILLBOX_MODEL", "")],
        None,
    );
    refused(&demo, "writable by other users", &dir, "the demo's fetch");
    mode(&dir, 0o700);

    let open = root.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    mode(&open, 0o777);
    let inside = open.join("data");
    refused(
        &fetch(&inside),
        "swap the data dir",
        &inside,
        "a data dir made in an open parent",
    );

    procs::while_another_user_owns(&dir, || {
        refused(
            &fetch(&dir),
            "belongs to another user",
            &dir,
            "another user's data dir",
        )
    });

    // Ours alone: pip runs (and fails here, offline and fake).
    let o = fetch(&dir);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        ran.exists(),
        "pip did not run in a private data dir: {}",
        text(&o)
    );
}

/// Every local user reads `/proc/PID/cmdline`: a set-up command in the docs that expands the
/// operator token into an argument (`--header "Authorization: Bearer $(cat …/api.token)"`, a
/// `curl -H` that waits minutes for an answer) hands it to them. No command in the README or
/// ARCHITECTURE (fenced blocks, and inline code elsewhere) substitutes anything into a
/// `Bearer` argument, or runs a `$(…)` on a line that names a token.
#[test]
fn the_docs_put_no_token_on_a_command_line() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let puts_token_in_argv = |code: &str| {
        code.contains("Bearer $(")
            || code.contains("Bearer `")
            || (code.contains("$(") && code.to_ascii_lowercase().contains("token"))
    };
    let mut found = Vec::new();
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = std::fs::read_to_string(repo.join(doc)).expect("read the doc");
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let bad = if fenced {
                puts_token_in_argv(line)
            } else {
                // Inline code: the odd pieces between backticks.
                line.split('`').skip(1).step_by(2).any(puts_token_in_argv)
            };
            if bad {
                found.push(format!("{doc}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a command in the docs puts the token on a command line (read it through a file or a pipe):\n{}",
        found.join("\n")
    );
}

/// Audit 32 A32-3, A32-6: files the box trusts by their path — the model it loads (mapped
/// shared by llama.cpp, so a write after the box hashed it changes the running model under its
/// attested digest), the allow-list (a line another user adds is their node key, served), the GPU
/// evidence collector (run as the box's user at every attestation). Each one another user may
/// write, owns, or may swap is refused at start, naming it, before it is read, hashed or run; a
/// collector named without an absolute path is refused; each made the user's alone starts.
#[test]
fn a_box_refuses_a_model_allow_list_or_collector_another_user_may_write() {
    use procs::set_mode as mode;
    const THEIR_KEY: &str = "5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a5eed0f1a";
    let (root, dir) = inited_node();
    let files = root.path().join("files");
    std::fs::create_dir(&files).expect("mkdir");
    mode(&files, 0o700);
    let show_identity = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec![
            "box",
            "--insecure-dev",
            "--listen",
            "127.0.0.1:0",
            "--show-identity",
        ];
        args.extend_from_slice(extra);
        procs::skillbox_with(&dir, &args, env, None)
    };
    let refused = refused_for_where_it_is;

    // The model: another user may write it (0666, 0664), by flag or by SKILLBOX_MODEL.
    let model = files.join("their-model.gguf");
    std::fs::write(&model, b"GGUF not a real model").expect("write");
    let model_arg = model.display().to_string();
    for open in [0o666, 0o664] {
        mode(&model, open);
        let o = show_identity(&["--local-model", &model_arg], &[]);
        refused(
            &o,
            "writable by other users",
            &model,
            "a model others may write",
        );
        let o = show_identity(&[], &[("SKILLBOX_MODEL", &model_arg)]);
        refused(
            &o,
            "writable by other users",
            &model,
            "SKILLBOX_MODEL others may write",
        );
    }
    mode(&model, 0o644);
    let pin = show_identity(&["--local-model", &model_arg], &[]);
    assert!(pin.status.success(), "{}", text(&pin));
    procs::while_another_user_owns(&model, || {
        let o = show_identity(&["--local-model", &model_arg], &[]);
        refused(
            &o,
            "belongs to another user",
            &model,
            "another user's model",
        );
    });
    // In a directory others write to, where they could put another file in its place.
    mode(&files, 0o777);
    let o = show_identity(&["--local-model", &model_arg], &[]);
    refused(
        &o,
        "swap the model file",
        &model,
        "a model in an open directory",
    );
    mode(&files, 0o700);

    // The allow-list, with another user's key appended.
    let list = files.join("allowed-keys");
    std::fs::write(&list, format!("{THEIR_KEY}\n")).expect("write");
    let list_arg = list.display().to_string();
    mode(&list, 0o666);
    let o = show_identity(&["--allow-keys-file", &list_arg], &[]);
    refused(
        &o,
        "writable by other users",
        &list,
        "an allow-list others may write",
    );
    mode(&list, 0o600);
    let o = show_identity(&["--allow-keys-file", &list_arg], &[]);
    assert!(o.status.success(), "{}", text(&o));

    // The collector: by a bare name (looked up on PATH), and a file others may write.
    let o = show_identity(&["--gpu-evidence-cmd", "nvidia-collect"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("absolute path"), "{}", text(&o));
    let collector = files.join("collect");
    std::fs::write(&collector, "#!/bin/sh\necho '[]'\n").expect("write");
    mode(&collector, 0o777);
    let o = show_identity(
        &["--gpu-evidence-cmd", &collector.display().to_string()],
        &[],
    );
    refused(
        &o,
        "writable by other users",
        &collector,
        "a collector others may write",
    );
}

/// Audit 32 A32-4: every file a node and a box make in their data dir is their user's alone
/// (no group or other bit), even under `umask 022` and though the data dir's own mode may drift
/// later (a restore, a `chmod -R a+rX`): the ledger, peers, call metadata, source names and
/// sizes, the box's run store are not another user's to read.
#[test]
fn every_file_a_node_or_a_box_makes_is_its_users_alone() {
    use std::os::unix::fs::PermissionsExt;
    let (_root, dir) = inited_node();
    // A data dir and a box dir left listable (a restore, `chmod -R a+rX`) are closed at start.
    std::fs::create_dir_all(dir.join("box")).expect("box dir");
    for d in [dir.clone(), dir.join("box")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    for args in [
        vec!["node"],
        vec!["box", "--insecure-dev", "--listen", "127.0.0.1:0"],
    ] {
        // Bounded: each runs until stopped; `timeout` stops it once its files are made.
        let o = Command::new("sh")
            .arg("-c")
            .arg("umask 022; exec timeout 6 \"$@\"")
            .arg("sh")
            .arg(procs::BIN)
            .arg("--data-dir")
            .arg(&dir)
            .args(&args)
            .output()
            .expect("run skillbox");
        assert_eq!(o.status.code(), Some(124), "{}", text(&o));
    }
    let mut open = Vec::new();
    let mut seen = 0;
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(e.path());
                if meta.permissions().mode() & 0o077 != 0 {
                    open.push(format!(
                        "{}/ {:o}",
                        e.path().display(),
                        meta.permissions().mode() & 0o777
                    ));
                }
            } else if meta.is_file() {
                seen += 1;
                if meta.permissions().mode() & 0o077 != 0 {
                    open.push(format!(
                        "{} {:o}",
                        e.path().display(),
                        meta.permissions().mode() & 0o777
                    ));
                }
            }
        }
    }
    for made in ["node.db", "box/runs.sqlite"] {
        assert!(dir.join(made).exists(), "{made} was not made");
    }
    assert!(seen > 5, "only {seen} files");
    let root_mode = std::fs::metadata(&dir)
        .expect("data dir")
        .permissions()
        .mode();
    if root_mode & 0o077 != 0 {
        open.push(format!("{}/ {:o}", dir.display(), root_mode & 0o777));
    }
    assert!(
        open.is_empty(),
        "files or dirs other users may read: {open:?}"
    );
}
