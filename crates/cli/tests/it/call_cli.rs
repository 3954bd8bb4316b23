//! The calls verbs of the CLI against real processes: a box, an owner node and a caller node
//! (`skillbox box`, `skillbox node`), a loopback OpenAI-compatible double as the box's provider.
//! `call --wait --json`, `calls --json`, `call show`, `ask`, `approve`, `deny`, and refusals
//! with exit code 1. A request from a file or standard input (`--request-file`), off the command
//! line other local users read.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::procs::{self, cli};
use serde_json::Value;

/// `skillbox approve ID` at a terminal, answering the confirmation with `answer`.
fn approve_at_terminal(dir: &std::path::Path, id: &str, answer: &str) -> Output {
    procs::approve_at_terminal(dir, id, "", answer)
}

/// `skillbox ARGS` that must succeed, its output read as JSON.
fn cli_json(dir: &std::path::Path, args: &[&str]) -> Value {
    let o = cli(dir, args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    json_of(&o)
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The command failed (exit 1) and `out`, its stdout or stderr, says `word`.
fn failed_saying(o: &std::process::Output, out: &[u8], word: &str) {
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(out);
    assert!(text.contains(word), "{text}");
}

#[test]
fn call_calls_show_ask_approve_and_deny_from_the_command_line() {
    let root = tempfile::tempdir().expect("tempdir");
    let (provider_url, provider) = procs::provider_double(Duration::ZERO);
    let bx = procs::start_box("127.0.0.1:0", &provider_url, &root.path().join("box.log"));
    let (owner, mut caller) =
        procs::owner_and_caller(root.path(), &bx.url, &[], procs::asking_before(&["songs"]));
    let doc = procs::skill_doc("taste", "BODY", &["songs"]);
    // The caller asks its human before applying `songs`; a call without sources runs at once.
    procs::offer_taste(&owner, &caller, "sk-cli-test", &doc, "Bonobo - Kerala\n");
    let api = caller.api();
    let dir = caller.dir.clone();
    let peer = owner.peer_id.clone();

    // No sources: straight through, the answer in the JSON record.
    let rec = cli_json(
        &dir,
        &[
            "call",
            &peer,
            "taste",
            "what do I like?",
            "--no-sources",
            "--wait",
            "--json",
        ],
    );
    assert_eq!(rec["state"], "answered", "{rec}");
    assert_eq!(rec["role"], "caller");
    assert!(
        rec["answer"]
            .as_str()
            .unwrap_or("")
            .starts_with("The double read"),
        "{rec}"
    );
    let first = rec["id"].as_str().expect("id").to_owned();

    // `call show` prints the answer; `calls --json` lists the record with role and state.
    let o = cli(&dir, &["call", "show", &first]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("answer:") && text.contains("answered"),
        "{text}"
    );
    // … and the box as this side verified it: platform, measurement, no hardware isolation.
    assert!(
        text.contains(": insecure-dev (measurement ") && text.contains("NO hardware isolation"),
        "{text}"
    );
    assert_eq!(rec["attested"]["platform"], "insecure-dev", "{rec}");
    assert_eq!(rec["attested"]["hardwareIsolation"], false, "{rec}");
    let o = cli(&dir, &["calls", "--json"]);
    let list = json_of(&o);
    assert_eq!(list["calls"][0]["id"], first.as_str());
    assert_eq!(list["calls"][0]["state"], "answered");
    // The owner's record reaches `ran` when its receipt is written, which can trail the
    // caller's answer by a moment: wait for it instead of racing it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let list = loop {
        let list = json_of(&cli(&owner.dir, &["calls", "--json"]));
        if list["calls"][0]["state"] == "ran" || std::time::Instant::now() > deadline {
            break list;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(list["calls"][0]["role"], "owner", "{list}");
    assert_eq!(list["calls"][0]["state"], "ran", "{list}");

    // Refusals: exit 1 with the reason.
    let o = cli(&dir, &["call", &peer, "nope", "x"]);
    failed_saying(&o, &o.stderr, "skill_not_offered");
    let o = cli(
        &dir,
        &["call", &peer, "taste", "x", "--source", "passwords"],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("source_not_required") && err.contains("passwords"),
        "{err}"
    );
    // Usage errors: exit 2.
    let o = cli(&dir, &["call", &peer]);
    assert_eq!(o.status.code(), Some(2));

    // `songs` is applied (omitted sources = the required ones held): policy parks it.
    let parked = cli_json(&dir, &["call", &peer, "taste", "what do I like?", "--json"])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.wait_state(&parked, &["awaiting_consent"], Duration::from_secs(20))
        .expect("parked for consent");
    let o = cli(&dir, &["calls", "--state", "awaiting_consent", "--json"]);
    assert_eq!(json_of(&o)["total"], 1);
    // An agent's shell tool has no terminal: `approve` is refused before anything is sent.
    let o = cli(&dir, &["approve", &parked]);
    failed_saying(&o, &o.stderr, "terminal");
    let o = cli(&dir, &["call", "show", &parked, "--json"]);
    assert_eq!(json_of(&o)["state"], "awaiting_consent");
    // At a terminal: the disclosure is shown; anything but `yes` leaves the call waiting.
    let o = approve_at_terminal(&dir, &parked, "no");
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("songs") && shown.contains("Type yes"),
        "{shown}"
    );
    let o = cli(&dir, &["call", "show", &parked, "--json"]);
    assert_eq!(json_of(&o)["state"], "awaiting_consent");
    let o = approve_at_terminal(&dir, &parked, "yes");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let done = api
        .wait_state(&parked, &["answered", "failed"], Duration::from_secs(20))
        .expect("ends");
    assert_eq!(done["state"], "answered", "{done}");

    // `ask` routes by the board's descriptions, then the human denies the source.
    let pick = cli_json(
        &dir,
        &[
            "ask",
            "build a music taste profile from my listening history",
            "--json",
        ],
    );
    assert_eq!(pick["skill"], "taste", "{pick}");
    assert_eq!(pick["peer"], peer.as_str());
    assert!(pick["score"].as_f64().unwrap_or(0.0) > 0.0);
    let asked = pick["callId"].as_str().expect("callId").to_owned();
    api.wait_state(&asked, &["awaiting_consent"], Duration::from_secs(20))
        .expect("parked for consent");
    let o = cli(&dir, &["deny", &asked]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = cli(&dir, &["call", "show", &asked, "--json"]);
    let rec = json_of(&o);
    assert_eq!(rec["state"], "failed");
    assert_eq!(rec["failure"]["code"], "consent_denied");
    // Deciding twice is refused.
    let o = approve_at_terminal(&dir, &asked, "yes");
    failed_saying(&o, &o.stdout, "not awaiting consent");
    // An unrelated request picks nothing.
    let o = cli(&dir, &["ask", "what's the weather in Paris tomorrow"]);
    failed_saying(&o, &o.stderr, "no_offered_skill");

    // Two runs happened in all (the first call and the approved one).
    assert_eq!(provider.0.lock().expect("log").len(), 2);

    // The ledger: `songs` left once (the human's yes), and was refused once (the human's no).
    let l = cli_json(&dir, &["ledger", "--source", "songs", "--json"]);
    let entries = l["entries"].as_array().expect("entries");
    let summary: Vec<(String, String, String)> = entries
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (s("call"), s("kind"), s("decision"))
        })
        .collect();
    assert_eq!(
        summary,
        [
            (parked.clone(), "decision".into(), "allow".into()),
            (parked.clone(), "stake".into(), "allow".into()),
            (asked.clone(), "decision".into(), "deny".into()),
        ],
        "{l}"
    );
    let key = l["nodeKey"].as_str().expect("nodeKey").to_owned();
    let o = cli(&dir, &["ledger"]);
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        table.contains("refused by human:cli for songs") && table.contains("staked request"),
        "{table}"
    );
    assert!(table.contains("no hardware isolation"), "{table}");
    let o = cli(&dir, &["ledger", "--format", "csv"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("seq,at,kind,call,role,peer,skill,box"));
    let o = cli(&dir, &["ledger", "verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ledger verified"));
    // An export verifies offline under the node key; an edited one does not.
    let o = cli(&dir, &["ledger", "--format", "jsonl"]);
    let export = root.path().join("ledger.jsonl");
    std::fs::write(&export, &o.stdout).expect("write export");
    let verify_file = |path: &std::path::Path| {
        cli(
            &dir,
            &[
                "ledger",
                "verify",
                "--file",
                path.to_str().expect("path"),
                "--key",
                &key,
            ],
        )
    };
    let o = verify_file(&export);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let edited = root.path().join("edited.jsonl");
    let original = std::fs::read_to_string(&export).expect("read export");
    assert!(
        original.contains("\"decidedBy\":\"human:cli\""),
        "{original}"
    );
    std::fs::write(
        &edited,
        original.replacen("\"decidedBy\":\"human:cli\"", "\"decidedBy\":\"rule:1\"", 1),
    )
    .expect("write edited");
    let o = verify_file(&edited);
    failed_saying(&o, &o.stdout, "BROKEN");
    let o = cli(
        &dir,
        &["ledger", "verify", "--file", export.to_str().expect("path")],
    );
    assert_eq!(o.status.code(), Some(2), "--file needs --key");

    // The signed head, saved off the node, pins everything up to it: the node's ledger and its
    // export extend it; an export cut before it (or a rolled-back ledger) does not.
    let o = cli(&dir, &["ledger", "head"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let head = json_of(&o);
    assert!(head["seq"].as_u64().is_some_and(|n| n >= 4), "{head}");
    let saved = root.path().join("head.json");
    std::fs::write(&saved, &o.stdout).expect("save head");
    let saved = saved.to_str().expect("path");
    let o = cli(&dir, &["ledger", "verify", "--head", saved]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let with_head = |path: &std::path::Path| {
        let path = path.to_str().expect("path");
        cli(
            &dir,
            &[
                "ledger", "verify", "--file", path, "--key", &key, "--head", saved,
            ],
        )
    };
    assert!(with_head(&export).status.success());
    let cut = root.path().join("cut.jsonl");
    let lines: Vec<&str> = original.lines().collect();
    std::fs::write(&cut, lines[..lines.len() - 1].join("\n")).expect("write cut");
    // Without the saved head a cut export reads as a shorter ledger; with it, it does not.
    assert!(verify_file(&cut).status.success());
    let o = with_head(&cut);
    failed_saying(&o, &o.stdout, "rolled_back");

    // The reproduction: the per-source index edited in the stopped node's database (its
    // trigger dropped first) no longer hides `songs` from `ledger --source songs`, and `ledger
    // verify` — and the table view itself — say the database was edited.
    caller.kill();
    {
        let store = skillbox_node::store::Store::open(&dir.join("node.db")).expect("store");
        store
            .write(|tx| {
                tx.execute_batch(
                    "DROP TRIGGER IF EXISTS ledger_sources_no_delete;
                     DELETE FROM ledger_sources WHERE name = 'songs';",
                )?;
                Ok(())
            })
            .expect("edit the index");
    }
    caller.start(&[]);
    let o = cli(&dir, &["ledger", "--source", "songs", "--json"]);
    assert_eq!(json_of(&o)["entries"].as_array().map(Vec::len), Some(3));
    let o = cli(&dir, &["ledger", "verify"]);
    assert_eq!(o.status.code(), Some(1));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        said.contains("BROKEN") && said.contains("index_mismatch"),
        "{said}"
    );
    let o = cli(&dir, &["ledger", "--source", "songs"]);
    assert_eq!(o.status.code(), Some(1));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        said.contains("staked request") && said.contains("does NOT verify"),
        "{said}"
    );
}

/// Whether any prompt the provider double was sent holds `text`: the request reached the box.
fn provider_saw(provider: &procs::ProviderLog, text: &str) -> bool {
    let log = provider.0.lock().expect("log");
    log.iter().any(|(_, body)| body.to_string().contains(text))
}

/// /proc/PID/cmdline, as any local user reads it (arguments joined by spaces). The parent can
/// wake from `spawn` while the kernel is still between closing the exec pipe and setting up the
/// new arguments: an empty read is retried.
fn command_line(pid: u32) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).expect("read cmdline");
        if !raw.is_empty() || std::time::Instant::now() > deadline {
            return String::from_utf8_lossy(&raw).replace('\0', " ");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The same-machine door: every user of the machine reads /proc/PID/cmdline, so a request given
/// as an argument is theirs to read. `--request-file -` (stdin) and `--request-file PATH` carry
/// it to the answer while the process's command line, read while it runs, holds none of it.
#[test]
fn a_request_from_stdin_or_a_file_reaches_the_answer_and_never_the_command_line() {
    const ON_STDIN: &str = "my diagnosis, read from stdin: PRIVATE-REQUEST-7f3a";
    const IN_FILE: &str = "my diagnosis, read from a file: PRIVATE-REQUEST-c91e";
    let root = tempfile::tempdir().expect("tempdir");
    let (provider_url, provider) = procs::provider_double(Duration::ZERO);
    let bx = procs::start_box("127.0.0.1:0", &provider_url, &root.path().join("box.log"));
    let (owner, caller) = procs::owner_and_caller(root.path(), &bx.url, &[], |t| t);
    let doc = procs::skill_doc("taste", "BODY", &["songs"]);
    procs::offer_taste(&owner, &caller, "sk-cli-test", &doc, "Bonobo - Kerala\n");
    let dir = caller.dir.clone();
    let peer = owner.peer_id.clone();
    let answered = |o: &Output| {
        assert!(o.status.success(), "{}", procs::text(o));
        let rec = json_of(o);
        assert_eq!(rec["state"], "answered", "{rec}");
        assert!(
            rec["answer"]
                .as_str()
                .is_some_and(|a| a.starts_with("The double read")),
            "{rec}"
        );
    };

    // Standard input: the command line is read from /proc while the process waits for it.
    let mut child = Command::new(procs::BIN)
        .arg("--data-dir")
        .arg(&dir)
        .args(["call", &peer, "taste", "--request-file", "-"])
        .args(["--no-sources", "--wait", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skillbox call");
    let cmdline = command_line(child.id());
    assert!(cmdline.contains("--request-file -"), "{cmdline}");
    assert!(!cmdline.contains("PRIVATE-REQUEST"), "{cmdline}");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(ON_STDIN.as_bytes())
        .expect("write the request");
    let o = child.wait_with_output().expect("skillbox call");
    answered(&o);
    assert!(
        provider_saw(&provider, ON_STDIN),
        "the request never reached the box"
    );

    // A file: only its path is on the command line.
    let file = root.path().join("request.txt");
    std::fs::write(&file, IN_FILE).expect("write the request file");
    let path = file.to_str().expect("path");
    let args = ["call", &peer, "taste", "--request-file", path];
    let o = cli(
        &dir,
        &[&args[..], &["--no-sources", "--wait", "--json"]].concat(),
    );
    answered(&o);
    assert!(
        provider_saw(&provider, IN_FILE),
        "the request never reached the box"
    );

    // `ask` takes its text (the request of the call it starts) the same way.
    let text = b"build a music taste profile from my listening history";
    let o = procs::skillbox_with(
        &dir,
        &["ask", "--text-file", "-", "--wait", "--json"],
        &[],
        Some(text),
    );
    assert!(o.status.success(), "{}", procs::text(&o));
    let pick = json_of(&o);
    assert_eq!(pick["skill"], "taste", "{pick}");
    assert_eq!(pick["call"]["state"], "answered", "{pick}");
    assert!(provider_saw(&provider, "listening history"));

    // Bad input: a clear refusal naming what is wrong, nothing sent.
    let runs = provider.0.lock().expect("log").len();
    let missing = root.path().join("missing.txt");
    let o = cli(
        &dir,
        &[
            "call",
            &peer,
            "taste",
            "--request-file",
            missing.to_str().expect("path"),
        ],
    );
    failed_saying(&o, &o.stderr, "missing.txt");
    std::fs::write(&file, [0xff, 0xfe, b'x']).expect("write");
    let o = cli(&dir, &["call", &peer, "taste", "--request-file", path]);
    failed_saying(&o, &o.stderr, "not UTF-8");
    let o = procs::skillbox_with(
        &dir,
        &["call", &peer, "taste", "--request-file", "-"],
        &[],
        Some(b""),
    );
    failed_saying(&o, &o.stderr, "empty");
    // Both, or neither: a usage error (exit 2).
    let o = cli(
        &dir,
        &["call", &peer, "taste", "inline", "--request-file", path],
    );
    assert_eq!(o.status.code(), Some(2), "{}", procs::text(&o));
    let o = cli(&dir, &["call", &peer, "taste"]);
    assert_eq!(o.status.code(), Some(2), "{}", procs::text(&o));
    assert_eq!(provider.0.lock().expect("log").len(), runs);

    // The help says the argument is visible and where to put a private request instead.
    let help = procs::cli_ok(&dir, &["call", "--help"]);
    assert!(
        help.contains("every user of this machine sees") && help.contains("--request-file"),
        "{help}"
    );
}

/// Review 32 A32-7: an agent's 10 kB request — a head of song titles in curly quotes (each
/// escaped to 8 characters in the question), then the private notes it read — is shown whole by
/// `skillbox approve` before it asks: every line, the last one included, above the prompt, and
/// the question's own count of what its quote leaves out and its closing words. Before, the
/// terminal showed the question cut at 4,096 characters (ending in `…`, no count, no closing
/// words) and nothing of the rest.
#[test]
fn approve_shows_the_whole_agent_request() {
    let root = tempfile::tempdir().expect("tempdir");
    let (provider_url, _provider) = procs::provider_double(Duration::ZERO);
    let bx = procs::start_box("127.0.0.1:0", &provider_url, &root.path().join("box.log"));
    let (owner, caller) =
        procs::owner_and_caller(root.path(), &bx.url, &[], procs::asking_before(&["songs"]));
    let doc = procs::skill_doc("taste", "BODY", &["songs"]);
    procs::offer_taste(&owner, &caller, "sk-cli-a32-7", &doc, "Bonobo - Kerala\n");
    let mut request = "“Creep”, “Airbag”, “Lucky”, “Reckoner”, ".repeat(50);
    request.push('\n');
    for i in 0..150 {
        request.push_str(&format!(
            "private note {i:03} the agent read from ~/notes.txt: the rent, the doctor, the key\n"
        ));
    }
    request.push_str("LAST-LINE-A32-7 of the agent's request");
    assert!(request.len() > 10_000, "{}", request.len());
    let api = caller.api();
    let started = api.post_json(
        "/calls",
        &serde_json::json!({
            "peer": owner.peer_id, "skill": "taste", "request": request, "surface": "agent",
        }),
    );
    assert_eq!(started.status, 201, "{}", started.body);
    let id = started.body["id"].as_str().expect("id").to_owned();
    api.wait_state(&id, &["awaiting_consent"], Duration::from_secs(20))
        .expect("parked for consent");

    let o = approve_at_terminal(&caller.dir, &id, "no");
    let shown = procs::text(&o);
    let prompt = shown
        .find("Approve? Type yes")
        .unwrap_or_else(|| panic!("no prompt: {shown}"));
    let before = &shown[..prompt];
    assert!(
        before.contains("| LAST-LINE-A32-7 of the agent's request"),
        "the request's last line is not shown before the prompt: {before}"
    );
    for i in 0..150 {
        assert!(
            before.contains(&format!("| private note {i:03} ")),
            "{i}: {before}"
        );
    }
    assert!(before.contains("| “Creep”, “Airbag”"), "{before}");
    assert!(
        before.contains(" more characters) (End of the agent's request."),
        "the question's count and closing words are cut: {before}"
    );
    // Answered `no`: still parked.
    assert_eq!(o.status.code(), Some(1), "{shown}");
    assert_eq!(
        api.get(&format!("/calls/{id}")).body["state"],
        "awaiting_consent"
    );
}
