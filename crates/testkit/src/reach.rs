//! The world the MCP and A2A tests run in: a box, an owner node offering skills, a caller node
//! whose agent surfaces (`/mcp`, A2A, `skillbox mcp`) the clients drive. Real processes, from
//! [`crate::procs`]. Markers for the owner's body, model and key, and for a caller source's
//! content, so every test can scan what it saw; and one for the agent's request, which the
//! responses may carry back (an answer, the consent question) but no process may log.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::procs::{self, BoxProc, NodeDir};
use crate::provider::blocking::{self, ProviderLog};

pub const BODY_MARK: &str = "BODY-MARK-3f9c1d";
pub const LOCAL_BODY_MARK: &str = "BODY-MARK-LOCAL-7a21";
pub const MODEL_MARK: &str = "gpt-MODEL-MARK-58e0";
pub const KEY_MARK: &str = "sk-KEY-MARK-c4d71b";
pub const SOURCE_MARK: &str = "SOURCE-MARK-9d0e42";
/// `haiku`'s body allowance: its body is ~40 tokens, and the default (1,024) pads every prompt
/// of the embedded model to it (with it, `reach_mcp`'s three calls took 144 s of a quiet
/// machine; with this and the answer cap below, 54 s).
pub const HAIKU_BODY_MAX_TOKENS: u64 = 96;
/// The caller's answer cap in the model world (its config's `calls.output_max_bytes`): the
/// answer's budget is the cap / 3 tokens, and the 135M model often writes on to it.
pub const HAIKU_ANSWER_MAX_BYTES: u64 = 240;
/// In every request the tests' agents send (`apply_skill`, `ask`, A2A messages).
pub const REQUEST_MARK: &str = "REQUEST-MARK-61e5a8";

/// What no response may carry: the owner's material and the caller source's content.
pub fn markers() -> [&'static str; 5] {
    [
        BODY_MARK,
        LOCAL_BODY_MARK,
        MODEL_MARK,
        KEY_MARK,
        SOURCE_MARK,
    ]
}

/// What no process's log may carry: [`markers`] and the agent's request (rmcp logs every
/// request it receives at debug, its messages at trace).
pub fn log_markers() -> [&'static str; 6] {
    [
        BODY_MARK,
        LOCAL_BODY_MARK,
        MODEL_MARK,
        KEY_MARK,
        SOURCE_MARK,
        REQUEST_MARK,
    ]
}

/// An agent's request carrying [`REQUEST_MARK`].
pub fn request(text: &str) -> String {
    format!("{text} ({REQUEST_MARK})")
}

/// `SKILLBOX_LOG` for the world's nodes and for `skillbox mcp`: the most verbose a filter can
/// ask for, naming the dependencies that log message contents too. The binary's own filter
/// (`init_logs` in `crates/cli/src/main.rs`, what every entry point uses) must keep them quiet
/// whatever this says.
pub const MOST_VERBOSE: &str = "trace,rmcp=trace,rmcp::service=trace,\
rmcp::transport::streamable_http_server=trace,hyper=trace,hyper_util=trace,h2=trace,\
reqwest=trace,axum=trace,tower_http=trace";

/// Where `skillbox mcp` on stdio logs in a world (the Python client sends its stderr there).
pub const STDIO_LOG: &str = "mcp-stdio.log";

pub struct World {
    pub root: tempfile::TempDir,
    pub provider: ProviderLog,
    pub bx: BoxProc,
    pub owner: NodeDir,
    pub caller: NodeDir,
}

/// `taste`: the openai double, the owner's key and model (markers), requires `songs`.
/// `brief`: the same without sources. `haiku` (only `with_model`): the embedded model.
pub fn world(with_model: bool, caller_edit: impl FnOnce(String) -> String) -> World {
    let root = tempfile::tempdir().expect("tempdir");
    let (provider_url, provider) = blocking::provider_double(Duration::ZERO);
    let log = root.path().join("box.log");
    let bx = if with_model {
        procs::start_box_with(
            "127.0.0.1:0",
            &provider_url,
            &log,
            &procs::model_path().to_string_lossy(),
        )
    } else {
        procs::start_box("127.0.0.1:0", &provider_url, &log)
    };
    // The owner's daily coverage limits off: `haiku`'s body names its secret in words
    // (`BODY-MARK-LOCAL-…`) and the 135M model often repeats pieces of its instructions, so
    // three calls of it a minute added up past the limits now and then and the third was
    // refused `coverage_exceeded` — the limits doing their job, not what these tests are
    // about (node `coverage` tests cover them). The per-answer guard still acts.
    let (owner, caller) = procs::owner_and_caller_with(
        root.path(),
        &bx.url,
        &[("SKILLBOX_LOG", MOST_VERBOSE)],
        |t| {
            ["coverage_permille", "canary_coverage_permille"]
                .iter()
                .fold(t, |t, key| {
                    let line = format!("\n{key} = ");
                    assert!(t.contains(&line), "the owner's config has no {key}");
                    t.replace(&line, &format!("\n{key} = 0 # "))
                })
        },
        |t| {
            let t = caller_edit(t);
            if !with_model {
                return t;
            }
            // A haiku needs a few lines; the default cap (4,096 bytes) let each call decode
            // ~1,365 tokens.
            let line = "\noutput_max_bytes = ";
            assert!(
                t.contains(line),
                "the caller's config has no output_max_bytes"
            );
            t.replace(line, &format!("{line}{HAIKU_ANSWER_MAX_BYTES} # "))
        },
    );
    let o = owner.api();
    o.put_source("openai-key", "secret", KEY_MARK);
    o.add_skill(&format!(
        "---\nname: taste\ndescription: Builds a music-taste profile from listening history.\nprovider: openai\nmodel: {MODEL_MARK}\nkey: openai-key\nrequiredSources: [songs]\n---\nYou are a music critic ({BODY_MARK}). Describe the taste.\n"
    ));
    o.add_skill(&format!(
        "---\nname: brief\ndescription: Writes a two-line brief of a request.\nprovider: openai\nmodel: {MODEL_MARK}\nkey: openai-key\n---\nWrite a brief ({BODY_MARK}).\n"
    ));
    if with_model {
        o.add_skill(&format!(
            "---\nname: haiku\ndescription: Writes a short haiku about the request.\nprovider: local\n---\nWrite a short haiku about what the user says. Never mention [[secret:{LOCAL_BODY_MARK}]].\n"
        ));
        o.set_body_allowance("haiku", HAIKU_BODY_MAX_TOKENS);
    }
    let c = caller.api();
    c.put_source(
        "songs",
        "text",
        &format!("Bonobo - Kerala ({SOURCE_MARK})\n"),
    );
    for s in ["taste", "brief"] {
        c.wait_board(&owner.peer_id, s, Duration::from_secs(30));
    }
    if with_model {
        c.wait_board_allowance(
            &owner.peer_id,
            "haiku",
            HAIKU_BODY_MAX_TOKENS,
            Duration::from_secs(30),
        );
    }
    World {
        root,
        provider,
        bx,
        owner,
        caller,
    }
}

impl World {
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.caller.base)
    }
    /// Logs of all three processes, and of `skillbox mcp` on stdio if it ran.
    pub fn logs(&self) -> String {
        let mut s = self.owner.log();
        s.push_str(&self.caller.log());
        s.push_str(&std::fs::read_to_string(self.root.path().join("box.log")).unwrap_or_default());
        s.push_str(&std::fs::read_to_string(self.stdio_log()).unwrap_or_default());
        s
    }
    /// Where `skillbox mcp` on stdio writes its stderr.
    pub fn stdio_log(&self) -> std::path::PathBuf {
        self.root.path().join(STDIO_LOG)
    }
    /// No log holds any of [`log_markers`], and the nodes logged at trace: a scan of logs the
    /// filter kept quiet proves nothing.
    pub fn assert_logs_clean(&self) {
        for (who, log) in [("owner", self.owner.log()), ("caller", self.caller.log())] {
            assert!(
                log.contains(" TRACE "),
                "the {who} node did not log at trace (SKILLBOX_LOG={MOST_VERBOSE})"
            );
        }
        crate::leak::assert_no_markers("the processes' logs", &self.logs(), &log_markers());
    }
    /// The owner offers `journal`, which requires the caller's `diary`; the caller holds one,
    /// its human has not marked it shareable. Waits until the caller's board shows it.
    pub fn offer_a_skill_needing_a_private_source(&self) {
        self.owner.api().add_skill(&format!(
            "---\nname: journal\ndescription: Reads a diary.\nprovider: openai\nmodel: {MODEL_MARK}\nkey: openai-key\nrequiredSources: [diary]\n---\nSummarise the diary ({BODY_MARK}).\n"
        ));
        let c = self.caller.api();
        c.put_private_source("diary", "text", &format!("Dear diary ({SOURCE_MARK})\n"));
        c.wait_board(&self.owner.peer_id, "journal", Duration::from_secs(30));
    }
    /// `skillbox` on the caller's data dir.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(procs::bin())
            .arg("--data-dir")
            .arg(&self.caller.dir)
            .args(args)
            .output()
            .expect("run skillbox")
    }
}

/// A refusal an agent's model reads: it names no command (marking a source shareable is the
/// human's act, and an agent with a shell runs what it is shown) and quotes none of the
/// skill's `requiredSources` (`diary`: the peer's advert wrote it).
pub fn assert_refusal_for_an_agent(what: &str, text: &str) {
    assert!(!text.is_empty(), "{what}: no refusal text");
    for bad in ["skillbox", "share NAME", "diary"] {
        assert!(!text.contains(bad), "{what}: {bad:?} in {text:?}");
    }
}

/// Run a client; its stdout must be one JSON document.
pub fn run_json(what: &str, cmd: &mut Command) -> (serde_json::Value, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let v = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("{what}: stdout is not JSON ({e}):\n{stdout}\nstderr: {stderr}")
    });
    (v, format!("{stdout}\n{stderr}"))
}

/// The string at `pointer` in a client's JSON output holds every one of `needles` (a missing or
/// non-string value fails too); the failure shows the JSON it looked in.
pub fn assert_text(v: &serde_json::Value, pointer: &str, needles: &[&str]) {
    let text = v.pointer(pointer).and_then(serde_json::Value::as_str);
    assert!(
        text.is_some_and(|t| needles.iter().all(|n| t.contains(n))),
        "{pointer} lacks {needles:?}: {v}"
    );
}

pub fn python(script: &str) -> Command {
    let c = procs::reach_clients();
    let mut cmd = Command::new(c.python);
    cmd.arg(procs::reach_data(script))
        .env("PYTHONUNBUFFERED", "1");
    cmd
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// POST `body` as JSON to `url` with `headers`: the status, the JSON answer (or, for an SSE
/// stream, the first event carrying an `id`; else the text as a string) and the headers.
pub fn post_json(
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, serde_json::Value, reqwest::header::HeaderMap) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut r = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let resp = r.send().await.expect("send");
        let status = resp.status().as_u16();
        let h = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or_else(|_| {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
                .find(|v| v.get("id").is_some())
                .unwrap_or(serde_json::Value::String(text.clone()))
        });
        (status, v, h)
    })
}
