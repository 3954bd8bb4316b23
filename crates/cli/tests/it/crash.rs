//! The crash harness of issue 6, with real processes: a `skillbox box`, an owner node and a
//! caller node (each a `skillbox node` process with its own SQLite store) and a loopback double
//! of an OpenAI-compatible provider that logs every run the box makes.
//!
//! Each case kills one process at one call state and restarts it on the same addresses:
//! - the failpoint `SKILLBOX_CRASH_AT=<role>:<state>` aborts a node right after it persisted a
//!   transition into that state (kill -9 at a known state), for every state each role passes;
//! - a real kill -9 of the caller, then of the owner, while the run is at the provider;
//! - the box's failpoint `--crash-at <step>` aborts the box right after it put that step of the
//!   run on disk (its run store, issue 33): the run opened (no stake yet), the first stake
//!   taken, the run at the provider (before the request), the result kept (before either party
//!   fetched it); and a real kill -9 of the box while the request is out at the provider.
//!
//! After each restart both sides must end `answered`/`ran` or `failed` with a code and a message,
//! within a bound (a call must never hang); both records must exist (no record is lost); the
//! provider must have seen at most one run of the call (no run executes twice), exactly one
//! when the call was answered — but for the box killed while the request was out, which asks
//! once more after its restart (two). Every box case must end `answered`/`ran`, and the box's
//! data dir and log must never hold the skill body, the API key or the request. One trio
//! serves every case, calls one after the other, so only the process a case kills is
//! restarted.

use crate::support::procs;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use procs::{
    Api, BoxProc, NodeDir, ProviderLog, init_node, provider_double, skill_doc, start_box_args,
};
use serde_json::{Value, json};

/// The provider double's answer delay: the window in which a real kill -9 lands while the run
/// is at the provider.
const PROVIDER_DELAY: Duration = Duration::from_secs(2);
/// A call whose peer stays away fails as `stalled` after this long: short so a lost call shows
/// quickly, long enough for a restart and a human's approval on a loaded 2-core machine.
const STALL_SECS: u64 = 12;
/// Every wait is bounded: a call must never hang.
const END_LIMIT: Duration = Duration::from_secs(60);
const STEP_LIMIT: Duration = Duration::from_secs(30);
/// A failpoint that has not fired by then never will for this call.
const FIRE_LIMIT: Duration = Duration::from_secs(20);

/// The states each role passes on the way to its end (design §7).
/// The caller asks its policy between `opened` and its stake, so it never rests in `staked`;
/// its submit goes with its stake (issue 33), so it passes from `opened` to `submitted` (its
/// `submitting` is left for a box that does not take a submit with a stake — the machine's
/// tests cover it).
const CALLER_STATES: [&str; 6] = [
    "requested",
    "accepted",
    "opened",
    "awaiting_consent",
    "submitted",
    "answered",
];
/// The owner records a call only once admitted (issue 12: a refused stranger leaves no row),
/// so its first persisted state is `accepted`; `received` lives in memory only. It asks its
/// policy in the step that takes its stake (issue 33), so it never rests in `staked` either.
const OWNER_STATES: [&str; 6] = [
    "accepted",
    "opened",
    "awaiting_consent",
    "submitting",
    "submitted",
    "ran",
];

/// Inside the stake action, not a state: each side aborts after the box took its stake and
/// before the answer is recorded (`<role>:stake_sent`). The stake entry, written ahead, must be
/// there after the restart, exactly once, and the call must finish without sending it again.
const STAKE_WINDOW: &str = "stake_sent";

/// The box's steps its failpoint stops at (`skillbox box --crash-at`), in run order.
const BOX_STEPS: [&str; 4] = ["opened", "staked", "at_provider", "result"];

/// What must never be on the box's disk nor in its log (the owner's body and key).
const BOX_SECRETS: [&str; 2] = ["BODY-CRASH", "sk-test-CRASH-KEY"];

/// Tests in this file share the machine's two cores: one at a time, so stall limits hold.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Caller,
    Owner,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Caller => "caller",
            Role::Owner => "owner",
        }
    }
}

/// How a case kills its process.
#[derive(Clone, Copy, Debug)]
enum Blow {
    /// `SKILLBOX_CRASH_AT=<role>:<state>`: abort right after persisting that state.
    Failpoint(Role, &'static str),
    /// kill -9 of a node while its record is `submitted` and the run is at the provider.
    KillNode(Role),
    /// kill -9 of the box while both sides are `submitted` and the run is at the provider.
    KillBox,
    /// `skillbox box --crash-at <step>`: the box aborts right after that step is on disk.
    BoxAt(&'static str),
    /// No crash: a healthy call (after the box came back).
    None,
}

/// One line of the table.
struct Row {
    case: String,
    how: &'static str,
    fired: String,
    caller: String,
    owner: String,
    runs: usize,
    secs: f64,
    /// The first failure message, clipped: why the call ended failed.
    reason: String,
}

struct World {
    root: tempfile::TempDir,
    provider_url: String,
    provider: ProviderLog,
    box_listen: String,
    boxp: BoxProc,
    owner: NodeDir,
    caller: NodeDir,
    /// Every call id started, for the final "no record lost" count.
    calls: Vec<String>,
    problems: Vec<String>,
    rows: Vec<Row>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Short schedules: retry each second, sweep each second, stall after `STALL_SECS`.
fn short_schedules(text: String) -> String {
    for key in [
        "advance_secs = 2",
        "sweep_secs = 30",
        "stall_limit_secs = 120",
    ] {
        assert!(text.contains(key), "config.toml lacks {key:?}:\n{text}");
    }
    text.replace("advance_secs = 2", "advance_secs = 1")
        .replace("sweep_secs = 30", "sweep_secs = 1")
        .replace(
            "stall_limit_secs = 120",
            &format!("stall_limit_secs = {STALL_SECS}"),
        )
}

fn start_box_at(listen: &str, provider_url: &str, log: &Path) -> BoxProc {
    start_box_crashing(listen, provider_url, log, None)
}

/// [`start_box_at`], with the box's failpoint at `step` when one is given.
fn start_box_crashing(listen: &str, provider_url: &str, log: &Path, step: Option<&str>) -> BoxProc {
    // The port was just freed by a kill -9: binding it again may take a moment.
    let deadline = Instant::now() + STEP_LIMIT;
    loop {
        let l = listen.to_owned();
        let p = provider_url.to_owned();
        let g = log.to_owned();
        let extra: Vec<String> = step
            .map(|s| vec!["--crash-at".to_owned(), s.to_owned()])
            .unwrap_or_default();
        match std::panic::catch_unwind(move || {
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            start_box_args(&l, &p, &g, "/nonexistent/model.gguf", &extra)
        }) {
            Ok(b) => return b,
            Err(e) if Instant::now() > deadline => std::panic::resume_unwind(e),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn is_terminal(state: &str) -> bool {
    matches!(state, "answered" | "ran" | "failed")
}

/// `answered`, `ran`, or `failed:<code>`; `missing` when the node has no record.
fn outcome(rec: &Option<Value>) -> String {
    match rec {
        None => "missing".into(),
        Some(r) => {
            let state = r["state"].as_str().unwrap_or("?");
            if state == "failed" {
                format!("failed:{}", r["failure"]["code"].as_str().unwrap_or("?"))
            } else {
                state.to_owned()
            }
        }
    }
}

fn record(api: &Api, id: &str) -> Option<Value> {
    let a = api.get(&format!("/calls/{id}"));
    (a.status == 200).then_some(a.body)
}

/// Lines of a node's log that name the call, for a problem report.
fn log_excerpt(node: &NodeDir, id: &str) -> String {
    let log = node.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(id)).collect();
    let from = lines.len().saturating_sub(12);
    lines[from..].join("\n")
}

impl World {
    fn new() -> World {
        let root = tempfile::tempdir().expect("tempdir");
        let (provider_url, provider) = provider_double(PROVIDER_DELAY);
        let box_listen = format!("127.0.0.1:{}", free_port());
        let boxp = start_box_at(&box_listen, &provider_url, &root.path().join("box.log"));
        let mut owner = init_node(root.path(), "owner", &boxp.url, None, short_schedules);
        owner.start(&[]);
        let o = owner.api();
        o.put_source("openai-key", "secret", "sk-test-CRASH-KEY");
        o.add_skill(&skill_doc("taste", "BODY-CRASH", &[]));
        let bootstrap = owner.p2p_addr();
        let mut caller = init_node(
            root.path(),
            "caller",
            &boxp.url,
            Some(&bootstrap),
            short_schedules,
        );
        caller.start(&[]);
        let w = World {
            root,
            provider_url,
            provider,
            box_listen,
            boxp,
            owner,
            caller,
            calls: Vec::new(),
            problems: Vec::new(),
            rows: Vec::new(),
        };
        w.wait_linked();
        w
    }

    fn node(&mut self, role: Role) -> &mut NodeDir {
        match role {
            Role::Caller => &mut self.caller,
            Role::Owner => &mut self.owner,
        }
    }

    /// Both nodes connected (each knowing the other's listen address) and the skill on the
    /// caller's board: a call started now flows without waiting on a retry.
    fn wait_linked(&self) {
        let knows = |api: &Api, peer: &str| {
            api.get("/peers").body["peers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| {
                    p["peer"].as_str() == Some(peer)
                        && p["listen_addrs"]
                            .as_array()
                            .or_else(|| p["listenAddrs"].as_array())
                            .is_some_and(|a| !a.is_empty())
                })
        };
        let (c, o) = (self.caller.api(), self.owner.api());
        let deadline = Instant::now() + STEP_LIMIT;
        while !(knows(&c, &self.owner.peer_id) && knows(&o, &self.caller.peer_id)) {
            assert!(
                Instant::now() < deadline,
                "caller and owner did not reconnect: caller sees {}, owner sees {}",
                c.get("/peers").body,
                o.get("/peers").body
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c.wait_board(&self.owner.peer_id, "taste", STEP_LIMIT);
    }

    fn restart(&mut self, role: Role, env: &[(&str, &str)]) {
        let n = self.node(role);
        n.kill();
        n.start(env);
    }

    fn alive(&mut self, role: Role) -> bool {
        self.node(role)
            .proc
            .as_mut()
            .is_some_and(|p| matches!(p.child.try_wait(), Ok(None)))
    }

    fn set_policy(&self, role: Role, rules: Value) {
        let node = match role {
            Role::Caller => &self.caller,
            Role::Owner => &self.owner,
        };
        let body = json!({"default": "allow", "rules": rules});
        let a = node.api().req(
            "PUT",
            "/policy",
            Some(("application/json", serde_json::to_vec(&body).expect("json"))),
        );
        assert_eq!(
            a.status,
            200,
            "PUT /policy on the {}: {}",
            role.as_str(),
            a.body
        );
    }

    /// Start a call whose request carries `marker`; its id. A failpoint that fires inside
    /// `POST /calls` leaves no answer: then the id is the caller's one record not seen before.
    fn start_call(&mut self, marker: &str) -> Option<String> {
        let a = self.caller.api().post_json(
            "/calls",
            &json!({"peer": self.owner.peer_id, "skill": "taste",
                "request": format!("what do I like? {marker}"), "sources": []}),
        );
        if a.status == 201 {
            let id = a.body["id"].as_str().expect("call id").to_owned();
            self.calls.push(id.clone());
            return Some(id);
        }
        assert_eq!(a.status, 0, "POST /calls refused: {}", a.body);
        None
    }

    /// The caller's record not among the calls started so far (after a restart).
    fn find_new_call(&mut self) -> Option<String> {
        let list = self.caller.api().get("/calls").body;
        let id = list["calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["id"].as_str())
            .find(|id| !self.calls.iter().any(|k| k == id))?
            .to_owned();
        self.calls.push(id.clone());
        Some(id)
    }

    fn runs(&self, marker: &str) -> usize {
        self.provider
            .0
            .lock()
            .expect("provider log")
            .iter()
            .filter(|(_, body)| body.to_string().contains(marker))
            .count()
    }

    /// Both records terminal, or the deadline; (caller's record, owner's record).
    fn wait_end(&self, id: &str) -> (Option<Value>, Option<Value>) {
        let (c, o) = (self.caller.api(), self.owner.api());
        let deadline = Instant::now() + END_LIMIT;
        loop {
            let (rc, ro) = (record(&c, id), record(&o, id));
            let done = |r: &Option<Value>| {
                r.as_ref()
                    .is_some_and(|r| is_terminal(r["state"].as_str().unwrap_or("")))
            };
            if (done(&rc) && done(&ro)) || Instant::now() > deadline {
                return (rc, ro);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until `role`'s record is `submitted` and the run is at the provider.
    fn wait_run_at_provider(&self, id: &str, marker: &str, sides: &[Role]) -> bool {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            let submitted = sides.iter().all(|r| {
                let api = match r {
                    Role::Caller => self.caller.api(),
                    Role::Owner => self.owner.api(),
                };
                record(&api, id).is_some_and(|v| v["state"] == "submitted")
            });
            if submitted && self.runs(marker) == 1 {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Run one case end to end and check it; problems are collected, not panicked, so the
    /// table shows every case.
    fn case(&mut self, blow: Blow) {
        let n = self.rows.len() + 1;
        let marker = format!("CRASH-MARK-{n:02}-{}", std::process::id());
        let t0 = Instant::now();
        let (name, how) = match blow {
            Blow::Failpoint(r, s) => (format!("{}:{s}", r.as_str()), "failpoint"),
            Blow::KillNode(r) => (format!("{}:submitted", r.as_str()), "kill -9"),
            Blow::KillBox => ("box:submitted".to_owned(), "kill -9 box"),
            Blow::BoxAt(step) => (format!("box:{step}"), "box failpoint"),
            Blow::None => ("box restarted".to_owned(), "none"),
        };
        let mut problems = Vec::new();
        let mut fired = "-".to_owned();
        let mut id: Option<String>;
        match blow {
            Blow::Failpoint(role, state) => {
                let consent = state == "awaiting_consent";
                if consent {
                    self.set_policy(role, json!([{"side": role.as_str(), "decision": "ask"}]));
                }
                let point = format!("{}:{state}", role.as_str());
                self.restart(role, &[("SKILLBOX_CRASH_AT", &point)]);
                self.wait_linked();
                // The caller's first state is left only when the owner co-signs, at once: to
                // crash in it, the owner is away, so the caller persists a retry of the
                // request in `requested` (which the failpoint catches).
                let owner_away = role == Role::Caller && state == "requested";
                if owner_away {
                    self.owner.kill();
                }
                id = self.start_call(&marker);
                let exited = self
                    .node(role)
                    .proc
                    .as_mut()
                    .expect("node process")
                    .wait_exit(FIRE_LIMIT);
                fired = if exited { "yes" } else { "NO" }.to_owned();
                if !exited {
                    problems.push(format!(
                        "failpoint {point} never fired within {FIRE_LIMIT:?} (call {id:?}): a \
                         call's first state (caller requested, owner accepted) is persisted by \
                         the insert in Calls::start / the owner's admission, and SKILLBOX_CRASH_AT is \
                         checked only in Calls::apply, so nothing aborts right after it"
                    ));
                }
                if owner_away {
                    self.owner.start(&[]);
                }
                self.restart(role, &[]);
                if id.is_none() {
                    id = self.find_new_call();
                }
                if consent {
                    if let Some(id) = &id {
                        let api = self.node(role).api();
                        if let Some(parked) = api.wait_state(id, &["awaiting_consent"], STEP_LIMIT)
                        {
                            let a = api.post_json(
                                &format!("/approvals/{id}"),
                                &json!({"decision": "allow", "question": parked["question"]}),
                            );
                            if a.status != 200 {
                                problems.push(format!(
                                    "approval after restart: {} {}",
                                    a.status, a.body
                                ));
                            }
                        } else {
                            problems.push(format!(
                                "the {} never showed the call awaiting consent after restart: {:?}",
                                role.as_str(),
                                record(&api, id)
                            ));
                        }
                    }
                    self.set_policy(role, json!([]));
                }
            }
            Blow::KillNode(role) => {
                id = self.start_call(&marker);
                let at = id
                    .as_deref()
                    .is_some_and(|id| self.wait_run_at_provider(id, &marker, &[role]));
                fired = if at { "yes" } else { "NO" }.to_owned();
                if !at {
                    problems.push(format!(
                        "the {} never reached submitted with the run at the provider",
                        role.as_str()
                    ));
                }
                self.node(role).kill();
                self.node(role).start(&[]);
            }
            Blow::KillBox => {
                id = self.start_call(&marker);
                let at = id.as_deref().is_some_and(|id| {
                    self.wait_run_at_provider(id, &marker, &[Role::Caller, Role::Owner])
                });
                fired = if at { "yes" } else { "NO" }.to_owned();
                if !at {
                    problems.push(
                        "the call never reached submitted on both sides with the run at the provider"
                            .into(),
                    );
                }
                self.boxp.proc.kill();
                let log = self.root.path().join("box.log");
                self.boxp = start_box_at(&self.box_listen, &self.provider_url, &log);
            }
            Blow::BoxAt(step) => {
                let log = self.root.path().join("box.log");
                self.boxp.proc.kill();
                self.boxp =
                    start_box_crashing(&self.box_listen, &self.provider_url, &log, Some(step));
                id = self.start_call(&marker);
                let exited = self.boxp.proc.wait_exit(FIRE_LIMIT);
                fired = if exited { "yes" } else { "NO" }.to_owned();
                if !exited {
                    problems.push(format!("the box's failpoint {step} never fired"));
                }
                self.scan_box(&marker, &mut problems);
                self.boxp = start_box_at(&self.box_listen, &self.provider_url, &log);
            }
            Blow::None => {
                id = self.start_call(&marker);
            }
        }
        let (rc, ro) = match &id {
            Some(id) => self.wait_end(id),
            None => {
                problems.push("no call id: POST /calls failed and no new record appeared".into());
                (None, None)
            }
        };
        let runs = self.runs(&marker);
        let id_s = id.clone().unwrap_or_default();
        for (side, rec) in [("caller", &rc), ("owner", &ro)] {
            let Some(r) = rec else {
                problems.push(format!("the {side}'s record of call {id_s} is lost"));
                continue;
            };
            let state = r["state"].as_str().unwrap_or("");
            if !is_terminal(state) {
                problems.push(format!(
                    "the {side}'s record of call {id_s} hangs in {state} after {END_LIMIT:?}"
                ));
            }
            if state == "failed" {
                let code = r["failure"]["code"].as_str().unwrap_or("");
                let message = r["failure"]["message"].as_str().unwrap_or("");
                if code.is_empty() || message.is_empty() {
                    problems.push(format!("the {side} failed without a reason: {r}"));
                }
            }
        }
        // A box killed while the request was out asks once more after its restart; a box
        // stopped at any other step never repeats it.
        let expected = if matches!(blow, Blow::KillBox) { 2 } else { 1 };
        if runs > expected {
            problems.push(format!("call {id_s} ran {runs} times at the provider"));
        }
        if let Some(r) = &rc
            && r["state"] == "answered"
        {
            if runs != expected {
                problems.push(format!("call {id_s} answered with {runs} runs"));
            }
            if r["answer"].as_str().is_none_or(str::is_empty) {
                problems.push(format!("call {id_s} answered without an answer: {r}"));
            }
        }
        if matches!(blow, Blow::None | Blow::KillBox | Blow::BoxAt(_))
            && (outcome(&rc) != "answered" || outcome(&ro) != "ran")
        {
            problems.push(format!(
                "a call through a box restart ({name}) ended {} / {}",
                outcome(&rc),
                outcome(&ro)
            ));
        }
        if matches!(blow, Blow::KillBox | Blow::BoxAt(_)) {
            self.scan_box(&marker, &mut problems);
        }
        if let Blow::Failpoint(role, STAKE_WINDOW) = blow {
            if outcome(&rc) != "answered" || outcome(&ro) != "ran" {
                problems.push(format!(
                    "a crash in the {} stake window ended {} / {}",
                    role.as_str(),
                    outcome(&rc),
                    outcome(&ro)
                ));
            }
            let l = self
                .node(role)
                .api()
                .get(&format!("/ledger?call={id_s}"))
                .body;
            let of = |kind: &str| -> Vec<Value> {
                l["entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|e| e["kind"] == kind && e["role"] == role.as_str())
                    .cloned()
                    .collect()
            };
            let (stakes, taken) = (of("stake"), of("stake_taken"));
            if stakes.len() != 1
                || taken.len() != 1
                || taken[0]["answers"] != stakes[0]["seq"]
                || taken[0]["boxCode"] != "already_staked"
            {
                problems.push(format!(
                    "after a crash in the {} stake window the ledger holds {stakes:?} answered by \
                     {taken:?}",
                    role.as_str()
                ));
            }
        }
        for role in [Role::Caller, Role::Owner] {
            if !self.alive(role) {
                problems.push(format!("the {} died outside its case", role.as_str()));
                self.node(role).kill();
                self.node(role).start(&[]);
            }
        }
        let reason = [&rc, &ro]
            .into_iter()
            .flatten()
            .find_map(|r| r["failure"]["message"].as_str())
            .map(|m| m.chars().take(70).collect())
            .unwrap_or_default();
        let row = Row {
            reason,
            case: name.clone(),
            how,
            fired,
            caller: outcome(&rc),
            owner: outcome(&ro),
            runs,
            secs: t0.elapsed().as_secs_f64(),
        };
        println!(
            "case {n:2} {:<26} {:<11} fired={:<3} caller={:<22} owner={:<22} runs={} {:.1}s",
            row.case, row.how, row.fired, row.caller, row.owner, row.runs, row.secs
        );
        for (side, rec) in [("caller", &rc), ("owner", &ro)] {
            if let Some(f) = rec.as_ref().and_then(|r| r.get("failure")) {
                println!("        {side} failed: {} {}", f["code"], f["message"]);
            }
        }
        if !problems.is_empty() {
            let mut report = String::new();
            for p in &problems {
                let _ = writeln!(report, "  - {p}");
            }
            if !id_s.is_empty() {
                let _ = writeln!(
                    report,
                    "  caller log:\n{}\n  owner log:\n{}",
                    log_excerpt(&self.caller, &id_s),
                    log_excerpt(&self.owner, &id_s)
                );
                let _ = writeln!(report, "  caller record: {rc:?}\n  owner record: {ro:?}");
            }
            self.problems
                .push(format!("case {n} ({name}, {how}):\n{report}"));
        }
        self.rows.push(row);
        // The next case starts from two linked nodes and no open call.
        self.wait_linked();
    }

    /// The box's data dir (its run store, WAL included) and its log hold neither the owner's
    /// body and key nor the caller's request (`marker` is in it).
    fn scan_box(&self, marker: &str, problems: &mut Vec<String>) {
        let data = self.root.path().join("box.data").join("box");
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&data)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| !p.ends_with("store.key"))
            .collect();
        files.push(self.root.path().join("box.log"));
        for f in files {
            let bytes = std::fs::read(&f).unwrap_or_default();
            for secret in BOX_SECRETS.iter().chain([&marker]) {
                if skillbox_testkit::leak::contains(&bytes, secret) {
                    problems.push(format!("{secret} in plaintext in {}", f.display()));
                }
            }
        }
    }

    fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "| # | case | how | fired | caller | owner | runs | s | reason |\n|---|---|---|---|---|---|---|---|---|"
        );
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
                i + 1,
                r.case,
                r.how,
                r.fired,
                r.caller,
                r.owner,
                r.runs,
                r.secs,
                r.reason
            );
        }
        t
    }

    /// No record lost over all the restarts: each side lists every call exactly once.
    fn check_lists(&mut self) {
        for (role, node) in [(Role::Caller, &self.caller), (Role::Owner, &self.owner)] {
            let list = node.api().get("/calls?limit=1000").body;
            let ids: Vec<&str> = list["calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str())
                .collect();
            for id in &self.calls {
                let n = ids.iter().filter(|k| *k == id).count();
                if n != 1 {
                    self.problems.push(format!(
                        "the {}'s list holds call {id} {n} times",
                        role.as_str()
                    ));
                }
            }
            if ids.len() != self.calls.len() {
                self.problems.push(format!(
                    "the {} lists {} calls, {} were started",
                    role.as_str(),
                    ids.len(),
                    self.calls.len()
                ));
            }
        }
    }

    /// Every run the provider saw belongs to one of the cases (none unattributed, none extra).
    fn check_runs(&mut self) {
        let total = self.provider.0.lock().expect("provider log").len();
        let counted: usize = self.rows.iter().map(|r| r.runs).sum();
        if total != counted {
            self.problems.push(format!(
                "the provider saw {total} runs, the cases account for {counted}"
            ));
        }
    }

    fn finish(mut self) {
        self.check_lists();
        self.check_runs();
        println!("\n{}", self.table());
        assert!(
            self.problems.is_empty(),
            "crash harness found {} problem(s):\n{}\n{}",
            self.problems.len(),
            self.problems.join("\n"),
            self.table()
        );
    }
}

/// Every state of each role (but the owner's first, below), then real kill -9 of caller and
/// owner with the run at the provider (the box's cases are the next test).
#[test]
fn every_call_ends_with_a_reason_after_any_process_is_killed_at_any_state() {
    let mut cases: Vec<Blow> = CALLER_STATES
        .into_iter()
        .map(|s| Blow::Failpoint(Role::Caller, s))
        .chain(
            OWNER_STATES
                .into_iter()
                .map(|s| Blow::Failpoint(Role::Owner, s)),
        )
        .collect();
    cases.extend([
        Blow::Failpoint(Role::Caller, STAKE_WINDOW),
        Blow::Failpoint(Role::Owner, STAKE_WINDOW),
        Blow::KillNode(Role::Caller),
        Blow::KillNode(Role::Owner),
    ]);
    run_cases(&cases);
}

/// The box stopped at each step of a run (its failpoint), then a real kill -9 of the box while
/// the request is out at the provider, then a healthy call: every call answered through the
/// restart, the provider asked again only for the request that was out.
#[test]
fn a_box_killed_at_any_step_of_a_run_comes_back_and_answers() {
    let mut cases: Vec<Blow> = BOX_STEPS.into_iter().map(Blow::BoxAt).collect();
    cases.extend([Blow::KillBox, Blow::None]);
    run_cases(&cases);
}

/// One trio, the cases one after the other, then the checks over all of them.
fn run_cases(cases: &[Blow]) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
    let mut w = World::new();
    println!("trio up in {:.1}s", started.elapsed().as_secs_f64());
    for blow in cases {
        w.case(*blow);
    }
    println!("all cases in {:.1}s", started.elapsed().as_secs_f64());
    w.finish();
}
