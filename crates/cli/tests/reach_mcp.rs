//! skillbox's MCP server driven by real clients written by others, against real processes:
//! the Python `mcp` SDK (Streamable HTTP on both revisions, and stdio through `skillbox mcp`),
//! the `fastmcp` CLI, the MCP conformance suite; and raw requests for the refusals. Every test
//! scans what it saw for the owner's body, model and key and the caller source's content.
//! The clients come from `scripts/reach-clients` (`.ci/run` runs it); a missing one fails.

mod support {
    pub mod procs;
    pub mod reach;
}

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use support::procs::{self, BIN, assert_no_markers};
use support::reach::{self, World};

/// The tests start processes and the model: one at a time keeps two cores usable.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const TOOLS: [&str; 5] = [
    "apply_skill",
    "ask",
    "call_status",
    "list_skills",
    "list_sources",
];

fn mcp_python(
    w: &World,
    transport: &str,
    mode: &str,
    skill: &str,
    consent: &str,
) -> (Value, String) {
    let mut cmd = reach::python("mcp_client.py");
    match transport {
        "http" => {
            cmd.args(["http", &w.mcp_url(), &w.caller.token]);
        }
        _ => {
            cmd.arg("stdio").arg(BIN).arg(&w.caller.dir);
        }
    }
    cmd.args([
        mode,
        skill,
        &w.owner.peer_id,
        "Autumn leaves on a quiet river.",
        consent,
    ]);
    reach::run_json(&format!("mcp_client.py {transport} {mode}"), &mut cmd)
}

/// What every Python SDK run must show, whatever the transport and revision.
fn check_common(out: &Value, mode: &str, skill: &str) {
    let want = if mode == "legacy" { "2025-11-25" } else { mode };
    assert_eq!(out["protocolVersion"], want, "{out}");
    assert!(
        out["capabilities"]["extensions"]["io.modelcontextprotocol/skills"].is_object(),
        "skills extension not declared: {}",
        out["capabilities"]
    );
    let tools: BTreeSet<&str> = out["tools"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(tools, TOOLS.into_iter().collect(), "{}", out["tools"]);
    for t in out["tools"]["tools"].as_array().expect("tools") {
        let d = t["description"].as_str().unwrap_or("");
        if ["list_skills", "apply_skill", "ask"].contains(&t["name"].as_str().unwrap_or("")) {
            assert!(
                d.contains("untrusted"),
                "{} lacks the untrusted frame: {d}",
                t["name"]
            );
        }
    }
    let apply_desc = out["tools"]["tools"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == "apply_skill"))
        .and_then(|t| t["description"].as_str())
        .unwrap_or("");
    assert!(
        apply_desc.contains(&format!("- {skill} (peer ")) && apply_desc.contains("«peer text:"),
        "apply_skill's description does not list {skill} from the adverts: {apply_desc}"
    );
    // list_skills: deterministic order, the advert's public fields only.
    let skills = out["list_skills"]["structuredContent"]["skills"]
        .as_array()
        .expect("list_skills structured");
    let names: Vec<&str> = skills.iter().filter_map(|s| s["skill"].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let taste = skills
        .iter()
        .find(|s| s["skill"] == "taste")
        .expect("taste listed");
    assert_eq!(taste["provider"], "openai");
    assert_eq!(taste["requiredSources"], json!(["songs"]));
    assert_eq!(taste["boxPlatforms"], json!(["insecure-dev"]));
    // list_sources: names, kinds, sizes, shareable; never content.
    let sources = &out["list_sources"]["structuredContent"]["sources"];
    let songs = sources
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "songs"))
        .expect("songs listed");
    assert_eq!(songs["kind"], "text");
    assert!(songs["size"].as_u64().unwrap_or(0) > 0);
    assert!(songs.get("shareable").is_some_and(Value::is_boolean));
    // Stubs: one skill:// resource per board skill, front matter + "call apply_skill".
    let stubs = out["stubs"].as_array().expect("stubs");
    assert!(stubs.len() >= 2, "{}", out["resources"]);
    for s in stubs {
        let text = s["contents"][0]["text"].as_str().unwrap_or("");
        assert!(text.starts_with("---\nname: "), "{text}");
        assert!(text.contains("`apply_skill`"), "{text}");
    }
    // The call itself.
    let apply = &out["apply"];
    assert_ne!(apply["isError"], true, "{apply}");
    let sc = &apply["structuredContent"];
    assert_eq!(sc["state"], "answered", "{apply}");
    let answer = sc["answer"].as_str().unwrap_or("");
    assert!(!answer.trim().is_empty(), "empty answer: {apply}");
    assert_eq!(apply["content"][0]["text"], answer);
    assert_eq!(sc["hardwareIsolation"], false, "insecure-dev box: {sc}");
    assert!(
        sc["receipt"]["runId"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{sc}"
    );
    assert_eq!(out["status"]["structuredContent"]["callId"], sc["callId"]);
    assert_eq!(out["status"]["structuredContent"]["state"], "answered");
    // Progress notifications followed the call's states.
    let progress = out["progress"].as_array().expect("progress");
    assert!(!progress.is_empty(), "no progress notifications ({mode})");
    assert!(
        progress.iter().any(|p| p["message"]
            .as_str()
            .is_some_and(|m| m.contains("answered"))),
        "{progress:?}"
    );
    // Bad arguments: a tool error naming the problem; an unknown tool: -32602.
    assert_eq!(out["bad_args"]["isError"], true, "{}", out["bad_args"]);
    assert!(
        out["bad_args"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("bad arguments for apply_skill")),
        "{}",
        out["bad_args"]
    );
    assert!(
        out["unknown_tool"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("unknown tool")),
        "{}",
        out["unknown_tool"]
    );
}

#[test]
fn python_mcp_sdk_applies_a_skill_with_the_embedded_model_over_http_on_both_revisions_and_over_stdio()
 {
    let _g = serial();
    let w = reach::world(true, |t| t);
    let mut seen = String::new();
    for (transport, mode) in [
        ("http", "2026-07-28"),
        ("http", "legacy"),
        ("stdio", "2026-07-28"),
    ] {
        let (out, raw) = mcp_python(&w, transport, mode, "haiku", "none");
        check_common(&out, mode, "haiku");
        seen.push_str(&raw);
    }
    // The owner's material was staked (the box ran the body) but never came back.
    assert_no_markers("MCP responses", &seen, &reach::markers());
    assert_no_markers("the processes' logs", &w.logs(), &reach::markers());
}

#[test]
fn fastmcp_cli_lists_skills_and_stubs_and_calls_a_tool() {
    let _g = serial();
    let w = reach::world(false, |t| t);
    let c = procs::reach_clients();
    let url = w.mcp_url();
    let (list, raw_list) = reach::run_json(
        "fastmcp list",
        Command::new(&c.fastmcp).args([
            "list",
            &url,
            "--auth",
            &w.caller.token,
            "--json",
            "--resources",
            "--skills",
        ]),
    );
    let text = list.to_string();
    for t in TOOLS {
        assert!(
            text.contains(&format!("\"{t}\"")),
            "fastmcp list misses {t}: {list}"
        );
    }
    assert!(
        text.contains("skill://"),
        "no skill stubs in fastmcp list: {list}"
    );
    let (call, raw_call) = reach::run_json(
        "fastmcp call",
        Command::new(&c.fastmcp).args([
            "call",
            &url,
            "apply_skill",
            "skill=brief",
            "request=two lines please",
            "--auth",
            &w.caller.token,
            "--json",
        ]),
    );
    let call_text = call.to_string();
    assert!(
        call_text.contains("The double read") && call_text.contains("answered"),
        "fastmcp call did not come back answered: {call}"
    );
    // The provider double saw the owner's key and body: they were staked, inside the box only.
    let log = w.provider.0.lock().expect("log").clone();
    assert!(
        log.iter().any(
            |(auth, body)| auth == &format!("Bearer {}", reach::KEY_MARK)
                && body.to_string().contains(reach::BODY_MARK)
        ),
        "the box never called the provider with the owner's key and body"
    );
    // A stdio client of another make, through `skillbox mcp`.
    let (stdio, raw_stdio) = reach::run_json(
        "fastmcp list --command",
        Command::new(&c.fastmcp).args([
            "list",
            "--command",
            &format!("{BIN} --data-dir {} mcp", w.caller.dir.display()),
            "--json",
        ]),
    );
    assert!(stdio.to_string().contains("\"apply_skill\""), "{stdio}");
    let seen = format!("{raw_list}{raw_call}{raw_stdio}");
    assert_no_markers("fastmcp output", &seen, &reach::markers());
    assert_no_markers("the processes' logs", &w.logs(), &reach::markers());
}

#[test]
fn consent_parks_the_call_and_the_human_decides() {
    let _g = serial();
    let ask = |t: String| {
        t.replace(
            "rules = []",
            "\n[[policy.rules]]\nside = \"caller\"\nsources = [\"songs\"]\ndecision = \"ask\"\n",
        )
    };
    let w = reach::world(false, ask);
    // 2026-07-28 with elicitation: input_required, the client asks its human, the call goes on.
    let (out, raw1) = mcp_python(&w, "http", "2026-07-28", "taste", "approve");
    assert_eq!(
        out["apply"]["structuredContent"]["state"], "answered",
        "{}",
        out["apply"]
    );
    let asked = out["elicitations"].as_array().expect("elicitations");
    assert_eq!(asked.len(), 1, "{out}");
    assert!(
        asked[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("songs") && m.contains("NO hardware isolation")),
        "the question names the source and says the insecure-dev box has no hardware isolation: {asked:?}"
    );
    // 2026-07-28, the human says no: the call fails as consent_denied.
    let (out, raw2) = mcp_python(&w, "http", "2026-07-28", "taste", "deny");
    assert_eq!(
        out["apply"]["structuredContent"]["state"], "failed",
        "{}",
        out["apply"]
    );
    assert_eq!(
        out["apply"]["structuredContent"]["failure"]["code"],
        "consent_denied"
    );
    // 2025-11-25 (no input_required): a clear result naming the pending approval, no hang.
    let (out, raw3) = mcp_python(&w, "http", "legacy", "taste", "none");
    let sc = &out["apply"]["structuredContent"];
    assert_eq!(sc["state"], "awaiting_consent", "{}", out["apply"]);
    let id = sc["pendingApproval"]
        .as_str()
        .expect("pendingApproval")
        .to_owned();
    assert!(
        out["apply"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("skillbox approve {id}"))
                && t.contains("NO hardware isolation")),
        "{}",
        out["apply"]
    );
    let o = w.cli(&["approve", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let done = w
        .caller
        .api()
        .wait_state(&id, &["answered", "failed"], Duration::from_secs(60))
        .expect("the approved call finished");
    assert_eq!(done["state"], "answered", "{done}");
    let seen = format!("{raw1}{raw2}{raw3}");
    assert_no_markers("MCP responses", &seen, &reach::markers());
    assert_no_markers("the processes' logs", &w.logs(), &reach::markers());
}

// ---- raw requests: refusals

fn modern(method: &str, params: Value) -> Vec<u8> {
    let mut p = params;
    p["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "raw", "version": "1" }
    });
    serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": p }))
        .expect("json")
}

#[test]
fn bad_input_gets_proper_mcp_errors_and_the_server_stays_up() {
    let _g = serial();
    let w = reach::world(false, |t| t);
    let url = w.mcp_url();
    let auth = format!("Bearer {}", w.caller.token);
    let std_h = |method: &'static str| {
        vec![
            ("authorization", auth.clone()),
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", method.to_owned()),
        ]
    };
    let h = |v: &[(&'static str, String)]| -> Vec<(&'static str, String)> { v.to_vec() };
    fn as_refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        v.iter().map(|(k, s)| (*k, s.as_str())).collect()
    }
    let mut seen = String::new();

    // Missing token, wrong token: 401 with a challenge and a JSON-RPC error body.
    for hdrs in [vec![], vec![("authorization", "Bearer nope".to_owned())]] {
        let (status, body, headers) =
            reach::post_json(&url, &as_refs(&hdrs), modern("server/discover", json!({})));
        assert_eq!(status, 401, "{body}");
        assert!(headers.get("www-authenticate").is_some());
        assert_eq!(body["error"]["code"], -32001, "{body}");
        seen.push_str(&body.to_string());
    }
    // A foreign Origin (403), a foreign Host (421): DNS rebinding, refused even with the token
    // by the node's guard in front of every route, in JSON-RPC on this path.
    let mut foreign = std_h("server/discover");
    foreign.push(("origin", "http://evil.example".to_owned()));
    let (status, body, _) = reach::post_json(
        &url,
        &as_refs(&foreign),
        modern("server/discover", json!({})),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let mut host = std_h("server/discover");
    host.push(("host", "evil.example".to_owned()));
    let (status, body, _) =
        reach::post_json(&url, &as_refs(&host), modern("server/discover", json!({})));
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["code"], "host_not_allowed", "{body}");
    // An oversized request: 413 with a JSON-RPC error, before anything reads it.
    let big = "x".repeat(512 * 1024);
    let (status, body, _) = reach::post_json(
        &url,
        &as_refs(&std_h("tools/call")),
        modern(
            "tools/call",
            json!({ "name": "apply_skill", "arguments": { "skill": "brief", "request": big } }),
        ),
    );
    assert_eq!(status, 413, "{body}");
    // Not JSON: a parse error, not a crash.
    let (status, body, _) =
        reach::post_json(&url, &as_refs(&std_h("tools/call")), b"{not json".to_vec());
    assert!((400..500).contains(&status), "{status} {body}");
    // server/discover works and names both revisions.
    let (status, body, _) = reach::post_json(
        &url,
        &as_refs(&h(&std_h("server/discover"))),
        modern("server/discover", json!({})),
    );
    assert_eq!(status, 200, "{body}");
    let versions = body["result"]["supportedVersions"].to_string();
    assert!(
        versions.contains("2026-07-28") && versions.contains("2025-11-25"),
        "{body}"
    );
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
    // tools/list carries ttlMs and cacheScope on 2026-07-28.
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&std_h("tools/list")),
        modern("tools/list", json!({})),
    );
    assert!(body["result"]["ttlMs"].is_u64(), "{body}");
    assert_eq!(body["result"]["cacheScope"], "private", "{body}");
    seen.push_str(&body.to_string());
    // Unknown tool: -32602 naming it. Bad arguments: a tool error naming the field.
    let mut call_h = std_h("tools/call");
    call_h.push(("mcp-name", "no_such_tool".to_owned()));
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&call_h),
        modern(
            "tools/call",
            json!({ "name": "no_such_tool", "arguments": {} }),
        ),
    );
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_tool"))
    );
    let mut call_h = std_h("tools/call");
    call_h.push(("mcp-name", "apply_skill".to_owned()));
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&call_h),
        modern(
            "tools/call",
            json!({ "name": "apply_skill", "arguments": { "skill": "brief", "request": 3, "extra": true } }),
        ),
    );
    assert_eq!(body["result"]["isError"], true, "{body}");
    // A skill nobody offers: a tool error, no call started.
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&call_h),
        modern(
            "tools/call",
            json!({ "name": "apply_skill", "arguments": { "skill": "nope", "request": "hi" } }),
        ),
    );
    assert_eq!(body["result"]["isError"], true, "{body}");
    // call_status of an unknown id; a stub that does not exist.
    let mut st = std_h("tools/call");
    st.push(("mcp-name", "call_status".to_owned()));
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&st),
        modern(
            "tools/call",
            json!({ "name": "call_status", "arguments": { "callId": "../../sources" } }),
        ),
    );
    assert_eq!(body["result"]["isError"], true, "{body}");
    let mut rr = std_h("resources/read");
    rr.push(("mcp-name", "skill://nobody/none/SKILL.md".to_owned()));
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&rr),
        modern(
            "resources/read",
            json!({ "uri": "skill://nobody/none/SKILL.md" }),
        ),
    );
    assert_eq!(body["error"]["code"], -32602, "{body}");
    // skills/list (SEP-2640): stubs with digests of the stub bytes.
    let (_, body, _) = reach::post_json(
        &url,
        &as_refs(&std_h("skills/list")),
        modern("skills/list", json!({})),
    );
    let skills = body["result"]["skills"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        skills.iter().any(|s| s["frontmatter"]["name"] == "brief"),
        "{body}"
    );
    for s in skills {
        let d = s["resources"][0]["digest"].as_str().unwrap_or("");
        assert!(d.starts_with("sha256:") && d.len() == 71, "{s}");
    }
    seen.push_str(&body.to_string());
    // The node is still up and answering.
    assert_eq!(w.caller.api().get("/healthz").status, 200);
    assert_no_markers("MCP error responses", &seen, &reach::markers());
    assert_no_markers("the processes' logs", &w.logs(), &reach::markers());
}

// ---- the conformance suite

/// Scenarios of `@modelcontextprotocol/conformance` that apply to this server, and the
/// revision each runs at. The rest test fixtures this server does not have (the suite's
/// "everything" server's `test_*` tools, prompts, templates, logging, sampling); see the
/// ARCHITECTURE's list.
const SCENARIOS: &[(&str, &str)] = &[
    ("server-initialize", "2025-11-25"),
    ("server-session-lifecycle", "2025-11-25"),
    ("ping", "2025-11-25"),
    ("tools-list", "2025-11-25"),
    ("resources-list", "2025-11-25"),
    ("dns-rebinding-protection", "2025-11-25"),
    ("server-stateless", "2026-07-28"),
    ("tools-list", "2026-07-28"),
    ("resources-list", "2026-07-28"),
    ("sep-2164-resource-not-found", "2026-07-28"),
    ("dns-rebinding-protection", "2026-07-28"),
    ("caching", "2026-07-28"),
    ("http-header-validation", "2026-07-28"),
    ("sep-2640-skills-enumeration", "2026-07-28"),
    ("sep-2640-skills-manifest", "2026-07-28"),
];

/// Checks that test something this server does not have, each with why.
const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "sep-2575-server-rejects-undeclared-capability",
        "needs the suite's diagnostic tool `test_missing_capability`",
    ),
    (
        "sep-2575-missing-capability-http-400",
        "needs the suite's diagnostic tool `test_missing_capability`",
    ),
    (
        "sep-2575-http-server-no-independent-requests-on-stream",
        "needs the suite's diagnostic tool `test_streaming_elicitation`",
    ),
    (
        "sep-2575-server-no-log-without-loglevel",
        "needs the suite's diagnostic tool `test_logging_tool`; this server sends no log messages",
    ),
    (
        "sep-2549-prompts-list-caching-hints",
        "this server has no prompts (the capability is not declared, so prompts/list is -32601)",
    ),
];

#[test]
fn conformance_suite_applicable_server_scenarios_pass() {
    let _g = serial();
    let w = reach::world(false, |t| t);
    let c = procs::reach_clients();
    let target = w.caller.base.trim_start_matches("http://").to_owned();
    let proxy = procs::token_proxy(&target, &w.caller.token);
    let url = format!(
        "http://localhost:{}/mcp",
        proxy.rsplit(':').next().unwrap_or("")
    );
    let mut failures = Vec::new();
    let mut ran = 0;
    for (scenario, version) in SCENARIOS {
        let out_dir = w.root.path().join(format!("conf-{scenario}-{version}"));
        let o = Command::new(&c.node)
            .arg(&c.conformance)
            .args([
                "server",
                "--url",
                &url,
                "--scenario",
                scenario,
                "--spec-version",
                version,
                "--force",
                "-o",
            ])
            .arg(&out_dir)
            .output()
            .expect("run the conformance suite");
        let checks = find_checks(&out_dir);
        assert!(
            !checks.is_empty(),
            "{scenario}@{version}: no checks.json (exit {}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        for ch in checks {
            ran += 1;
            let id = ch["id"].as_str().unwrap_or("").to_owned();
            let status = ch["status"].as_str().unwrap_or("");
            if matches!(status, "SUCCESS" | "INFO" | "SKIPPED") {
                continue;
            }
            if NOT_APPLICABLE.iter().any(|(n, _)| *n == id) {
                continue;
            }
            failures.push(format!(
                "{scenario}@{version}: {id} {status}: {}",
                ch["errorMessage"].as_str().unwrap_or("")
            ));
        }
    }
    assert!(ran > 20, "only {ran} checks ran");
    assert!(
        failures.is_empty(),
        "conformance failures:\n{}",
        failures.join("\n")
    );
    assert_no_markers("the processes' logs", &w.logs(), &reach::markers());
}

fn find_checks(dir: &std::path::Path) -> Vec<Value> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(find_checks(&p));
        } else if p.file_name().is_some_and(|n| n == "checks.json")
            && let Ok(text) = std::fs::read_to_string(&p)
            && let Ok(Value::Array(a)) = serde_json::from_str::<Value>(&text)
        {
            out.extend(a);
        }
    }
    out
}
