//! `skillbox call`, `calls`, `call show`, `call cancel`, `approve`, `deny`: the calls API from
//! the command line. `call --wait` follows the call through its states and prints the answer;
//! it exits 0 when answered, 1 when refused or failed. `approve` asks at a terminal.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use reqwest::Method;
use serde_json::{Value, json};

use crate::node_cmd::{Client, listed, print_json, said};

/// Most characters of a consent question shown: the node's bound on the question, so the
/// count of what its quote of an agent's request leaves out and its closing words are never cut.
const QUESTION_SHOWN: usize = skillbox_node::calls::Disclosure::QUESTION_SHOWN;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(group(clap::ArgGroup::new("request_from").required(true).multiple(false)))]
pub struct CallArgs {
    /// The owner's peer id (from `skillbox board`).
    #[arg(required = true)]
    pub peer: Option<String>,
    /// The skill's name.
    #[arg(required = true)]
    pub skill: Option<String>,
    /// The request text, for convenience: every user of this machine sees a command line (`ps`,
    /// /proc/PID/cmdline) and shell history keeps it. For anything private use --request-file.
    #[arg(group = "request_from")]
    pub request: Option<String>,
    /// Read the request from this file, or from standard input with `-`: it never enters the
    /// command line, which other local users can read.
    #[arg(long, value_name = "PATH", group = "request_from")]
    pub request_file: Option<PathBuf>,
    /// Apply exactly these sources (repeatable; each must be in the skill's requiredSources).
    #[arg(long = "source", value_name = "NAME", conflicts_with = "no_sources")]
    pub sources: Vec<String>,
    /// Apply no source at all (the request text alone).
    #[arg(long)]
    pub no_sources: bool,
    /// Follow the call to its end and print the answer.
    #[arg(long)]
    pub wait: bool,
    /// Print the call record as JSON (with `--wait`: the final one, with `state` and `answer`).
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Option<CallCommand>,
}

#[derive(clap::Subcommand, Debug)]
pub enum CallCommand {
    /// One call: its state, failure, receipt, and (caller side) its answer.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a call: fail it here, cancel its run, tell the peer.
    Cancel {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct CallsArgs {
    /// Only calls in this state (requested, ..., answered, ran, failed).
    #[arg(long)]
    pub state: Option<String>,
    /// Only this side: caller or owner.
    #[arg(long)]
    pub role: Option<String>,
    /// Only calls with this peer.
    #[arg(long)]
    pub peer: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct DecideArgs {
    /// The call id (from `skillbox calls --state awaiting_consent`).
    pub id: String,
    /// Also record the decision as a policy rule: this peer, this skill, these sources are not
    /// asked again.
    #[arg(long)]
    pub remember: bool,
    #[arg(long)]
    pub json: bool,
}

/// A path segment or query value, percent-encoded.
pub(crate) use skillbox_node::api::url_component as enc;

/// `base`, with `?k=v&…` for the filters given (values percent-encoded).
pub(crate) fn query_path(base: &str, filters: &[(&str, &Option<String>)]) -> String {
    let q: Vec<String> = filters
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    if q.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", q.join("&"))
    }
}

fn terminal(state: &str) -> bool {
    matches!(state, "answered" | "ran" | "failed")
}

fn line(c: &Value) -> String {
    let s = |k: &str| crate::peer_text::line(&c[k], 128);
    let mut out = format!(
        "{:<32} {:<6} {:<17} {:<24} {}",
        s("id"),
        s("role"),
        s("state"),
        s("skill"),
        s("peer")
    );
    if let Some(code) = c.pointer("/failure/code") {
        out.push_str(&format!("  ({})", crate::peer_text::line(code, 64)));
    }
    out
}

fn show(c: &Value) {
    let s = |k: &str| crate::peer_text::line(&c[k], 256);
    say!("call {} ({} side)", s("id"), s("role"));
    say!("  skill {} with peer {}", s("skill"), s("peer"));
    say!("  state {}", s("state"));
    if let Some(f) = c.get("failure").filter(|f| !f.is_null()) {
        say!(
            "  failed: {} ({})",
            f["message"].as_str().unwrap_or(""),
            f["code"].as_str().unwrap_or("")
        );
    }
    let sources = crate::peer_text::lines(&c["sources"], 64);
    if !sources.is_empty() {
        say!("  sources applied: {}", sources.join(", "));
    }
    if c["box"].is_string() {
        // The URL the owner advertised.
        let b = crate::peer_text::line(&c["box"], 512);
        match c.get("attested").filter(|a| a.is_object()) {
            Some(a) => say!(
                "  box {b}: {} (measurement {}), {}",
                a["platform"].as_str().unwrap_or(""),
                a["measurement"].as_str().unwrap_or(""),
                said(
                    &a["hardwareIsolation"],
                    "hardware-isolated",
                    "NO hardware isolation: its operator can read what is staked"
                )
            ),
            None => say!("  box {b} (not verified yet)"),
        }
        if let Some(tcb) = c.pointer("/attested/tcbStatus").and_then(Value::as_str) {
            say!("  box TCB: {tcb}");
        }
    }
    if let Some(text) = c
        .pointer("/disclosure/text")
        .map(|t| crate::peer_text::line(t, QUESTION_SHOWN))
        && !text.is_empty()
    {
        say!("  awaiting your consent: {text}");
        say!(
            "  your human decides: on the dashboard, or at their terminal with skillbox approve {id} [--remember] | skillbox deny {id}",
            id = s("id")
        );
    }
    if let Some(r) = c.get("receipt").filter(|r| !r.is_null()) {
        say!(
            "  receipt: run {} {} (output bucket {} bytes){}",
            r["run_id"].as_str().unwrap_or(""),
            r["status"].as_str().unwrap_or(""),
            r["output_bucket"].as_u64().unwrap_or(0),
            said(
                &r["noHardwareIsolation"],
                ", NO hardware isolation (insecure-dev box)",
                ""
            )
        );
    }
    if let Some(a) = c["answer"].as_str() {
        say!(
            "answer:\n{}",
            crate::peer_text::answer(&s("peer"), &s("skill"), a)
        );
    }
}

fn exit_for(state: &str) -> ExitCode {
    if state == "answered" || state == "ran" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Poll the call until it ends, printing each state it passes through.
fn follow(client: &Client, id: &str, quiet: bool) -> anyhow::Result<Value> {
    let mut last = String::new();
    let start = Instant::now();
    loop {
        let ans = client.send(Method::GET, &format!("/calls/{}", enc(id)), None)?;
        let c = ans.body;
        let state = c["state"].as_str().unwrap_or("").to_owned();
        if state != last {
            if !quiet {
                say!("{:>7.2}s  {state}", start.elapsed().as_secs_f64());
                if let Some(text) = c
                    .pointer("/disclosure/text")
                    .map(|t| crate::peer_text::line(t, QUESTION_SHOWN))
                    .filter(|t| !t.is_empty())
                {
                    say!("          {text}");
                    say!(
                        "          your human decides: on the dashboard, or at their terminal with skillbox approve {id} [--remember] | skillbox deny {id}"
                    );
                }
            }
            last = state.clone();
        }
        if terminal(&state) {
            return Ok(c);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn run_call(global: &crate::Global, args: CallArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    match args.command {
        Some(CallCommand::Show { id, json }) => {
            let path = format!("/calls/{}", enc(&id));
            if let Some(c) = client.ask(Method::GET, &path, None, json)? {
                show(&c);
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(CallCommand::Cancel { id, json }) => {
            let path = format!("/calls/{}/cancel", enc(&id));
            if let Some(c) = client.ask(Method::POST, &path, None, json)? {
                show(&c);
            }
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    let request = match (args.request, &args.request_file) {
        (Some(text), None) => text,
        (None, Some(path)) => read_request(path)?,
        _ => anyhow::bail!(CALL_USAGE),
    };
    let (Some(peer), Some(skill)) = (args.peer, args.skill) else {
        anyhow::bail!(CALL_USAGE);
    };
    let mut body = json!({ "peer": peer, "skill": skill, "request": request });
    if args.no_sources {
        body["sources"] = json!([]);
    } else if !args.sources.is_empty() {
        body["sources"] = json!(args.sources);
    }
    let bytes = serde_json::to_vec(&body).context("encoding the request")?;
    let ans = client.send(Method::POST, "/calls", Some(("application/json", bytes)))?;
    let id = ans.body["id"]
        .as_str()
        .context("the node's answer has no call id")?
        .to_owned();
    if !args.wait {
        if args.json {
            print_json(&ans.body)?;
        } else {
            say!("call {id} {}", ans.body["state"].as_str().unwrap_or(""));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        say!("call {id}");
    }
    let last = follow(&client, &id, args.json)?;
    if args.json {
        print_json(&last)?;
    } else {
        show(&last);
    }
    Ok(exit_for(last["state"].as_str().unwrap_or("")))
}

const CALL_USAGE: &str =
    "usage: skillbox call PEER SKILL (REQUEST | --request-file PATH | --request-file -)";

/// The most a request file or standard input is read for: a bound on this process's memory, not
/// the rule (the node refuses anything over its own `calls.max_request_bytes`, far below).
const REQUEST_READ_CAP: u64 = 16 << 20;

/// The request text from `path`, or from standard input when `path` is `-`: the way to pass a
/// request that no other user of this machine reads off the command line.
pub(crate) fn read_request(path: &Path) -> anyhow::Result<String> {
    use std::io::{IsTerminal, Read};
    let from_stdin = path == Path::new("-");
    let what = if from_stdin {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    };
    let reader: Box<dyn Read> = if from_stdin {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            eprintln!("request (end it with Ctrl-D on a line of its own):");
        }
        Box::new(stdin)
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("opening {what}"))?)
    };
    let mut buf = Vec::new();
    reader
        .take(REQUEST_READ_CAP + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading the request from {what}"))?;
    if buf.len() as u64 > REQUEST_READ_CAP {
        anyhow::bail!("the request in {what} is over 16 MiB");
    }
    if buf.is_empty() {
        anyhow::bail!("the request in {what} is empty");
    }
    String::from_utf8(buf).map_err(|_| anyhow::anyhow!("the request in {what} is not UTF-8 text"))
}

pub fn run_calls(global: &crate::Global, args: CallsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    let filters = [
        ("state", &args.state),
        ("role", &args.role),
        ("peer", &args.peer),
    ];
    let path = query_path("/calls", &filters);
    let Some(body) = client.ask(Method::GET, &path, None, args.json)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let calls = listed(&body["calls"], "no calls");
    for c in &calls {
        say!("{}", line(c));
    }
    Ok(ExitCode::SUCCESS)
}

/// `skillbox approve ID` / `deny ID`. Approving discloses, so it is confirmed at a terminal:
/// the disclosure is shown and the person types `yes`. Without a terminal on stdin and stderr
/// (an agent's shell tool, a pipe) it is refused before anything is sent: a tool result or a
/// peer's text that talks an agent into running it gets nowhere. Denying needs no confirmation
/// (it discloses nothing). The decision is recorded as `human:cli`.
pub fn run_decide(
    global: &crate::Global,
    args: DecideArgs,
    allow: bool,
) -> anyhow::Result<ExitCode> {
    if allow {
        require_terminal()?;
    }
    let client = Client::from_data_dir(global)?;
    let parked = parked(&client, &args.id)?;
    if allow && !confirm_at_terminal(&args.id, &parked)? {
        eprintln!("not approved: call {} still waits for a decision", args.id);
        return Ok(ExitCode::from(1));
    }
    // The digest of the question printed (a deny answers the one the call asks now): the node
    // refuses the decision (`question_changed`) if the call asks another by the time it lands.
    let body = json!({
        "decision": if allow { "allow" } else { "deny" },
        "remember": args.remember,
        "via": "cli",
        "question": parked["question"],
    });
    let bytes = serde_json::to_vec(&body).context("encoding the decision")?;
    let path = format!("/approvals/{}", enc(&args.id));
    let body = Some(("application/json", bytes));
    if let Some(b) = client.ask(Method::POST, &path, body, args.json)? {
        say!("call {} {}", args.id, b["state"].as_str().unwrap_or(""));
    }
    Ok(ExitCode::SUCCESS)
}

/// The message an approval without a terminal gets (fixed; the tests look for `terminal`).
pub const NO_TERMINAL: &str = "skillbox approve asks a person to confirm at a terminal, and stdin or stderr is not one: approve on the node's dashboard (Approvals), or run `skillbox approve` yourself in a terminal. An agent cannot approve a call";

fn require_terminal() -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        Ok(())
    } else {
        anyhow::bail!(NO_TERMINAL)
    }
}

/// Call `id` as `GET /approvals` shows it: its question and the question's digest.
fn parked(client: &Client, id: &str) -> anyhow::Result<Value> {
    let list = client.send(Method::GET, "/approvals", None)?.body;
    let Some(c) = list["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["id"].as_str() == Some(id))
    else {
        anyhow::bail!(
            "call {id} is not awaiting consent (see `skillbox calls --state awaiting_consent`)"
        );
    };
    Ok(c.clone())
}

/// Show what approving the parked call `c` discloses (the node's own words) and read the
/// person's answer: `yes` approves, anything else leaves the call parked.
fn confirm_at_terminal(id: &str, c: &Value) -> anyhow::Result<bool> {
    use std::io::{BufRead, Write};
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "call {id}: {} side, peer {}, skill {}",
        crate::peer_text::line(&c["role"], 16),
        crate::peer_text::line(&c["peer"], 128),
        crate::peer_text::line(&c["skill"], 64)
    )?;
    if let Some(text) = c
        .pointer("/disclosure/text")
        .map(|t| crate::peer_text::line(t, QUESTION_SHOWN))
        .filter(|t| !t.is_empty())
    {
        writeln!(err, "  {text}")?;
    }
    if let Some(request) = c
        .pointer("/disclosure/request")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        write!(err, "{}", whole_request(request))?;
    }
    write!(
        err,
        "Approve? Type yes to approve, anything else to leave it waiting: "
    )?;
    err.flush()?;
    drop(err);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim() == "yes")
}

/// An agent's request as the human reads it before approving: all of it, whatever the question
/// quoted of it (at most 2,000 characters escaped), its lines kept, each cleaned as a peer's
/// field is (`peer_text::text`: no control, escape, bidi or invisible character) and behind a
/// gutter (`  | `), between the node's words saying where it starts and ends. So what the
/// human approves to leave is what they saw, and no line of it reads as the node's own (review
/// 32 A32-7: a request of up to 64 KiB was approved with only its first 2,000 characters shown).
fn whole_request(request: &str) -> String {
    let lines: Vec<&str> = request.lines().collect();
    let mut out = format!(
        "  The agent's whole request ({} characters, {} line{}), each line after `| `:\n",
        request.chars().count(),
        lines.len(),
        if lines.len() == 1 { "" } else { "s" }
    );
    for line in lines {
        out.push_str("  | ");
        out.push_str(&crate::peer_text::text(line, line.len()));
        out.push('\n');
    }
    out.push_str("  (End of the agent's whole request.)\n");
    out
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("text_from").required(true).multiple(false)))]
pub struct AskArgs {
    /// What you want done, in words: matched against the skills the board offers right now, and
    /// the request of the call it starts. Every user of this machine sees a command line: for
    /// anything private use --text-file.
    #[arg(group = "text_from")]
    pub text: Option<String>,
    /// Read the text from this file, or from standard input with `-` (off the command line).
    #[arg(long, value_name = "PATH", group = "text_from")]
    pub text_file: Option<PathBuf>,
    /// Follow the call to its end and print the answer.
    #[arg(long)]
    pub wait: bool,
    /// Print the pick as JSON: `{skill, peer, score, runnerUp, callId}` (with `--wait`, also
    /// `call`: the final record).
    #[arg(long)]
    pub json: bool,
}

/// `skillbox ask TEXT`: the skill intent.
pub fn run_ask(global: &crate::Global, args: AskArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_data_dir(global)?;
    let text = match (args.text, &args.text_file) {
        (Some(text), None) => text,
        (None, Some(path)) => read_request(path)?,
        _ => anyhow::bail!("usage: skillbox ask (TEXT | --text-file PATH | --text-file -)"),
    };
    let bytes = serde_json::to_vec(&json!({ "text": text })).context("encoding")?;
    let ans = client.send(
        Method::POST,
        "/intents/skill",
        Some(("application/json", bytes)),
    )?;
    let b = ans.body;
    let id = b["callId"].as_str().context("no call id")?.to_owned();
    let mut pick = json!({
        "skill": b["skill"], "peer": b["peer"], "score": b["score"],
        "runnerUp": b["runnerUp"], "callId": id,
    });
    if !args.json {
        say!(
            "picked {} of {} (score {:.2}{})",
            crate::peer_text::line(&b["skill"], 64),
            crate::peer_text::line(&b["peer"], 128),
            b["score"].as_f64().unwrap_or(0.0),
            match b["runnerUp"].as_object() {
                Some(r) => format!(
                    "; runner-up {} at {:.2}",
                    crate::peer_text::line(r.get("skill").unwrap_or(&Value::Null), 64),
                    r.get("score").and_then(Value::as_f64).unwrap_or(0.0)
                ),
                None => String::new(),
            }
        );
        say!("call {id}");
    }
    if !args.wait {
        if args.json {
            print_json(&pick)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let last = follow(&client, &id, args.json)?;
    let code = exit_for(last["state"].as_str().unwrap_or(""));
    if args.json {
        pick["call"] = last;
        print_json(&pick)?;
    } else {
        show(&last);
    }
    Ok(code)
}
