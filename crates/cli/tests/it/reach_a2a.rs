//! skillbox as an A2A 1.0 agent, driven by the A2A Python SDK (`a2a-sdk`) against real
//! processes: the card, a message that comes back answered as a task artifact, GetTask,
//! CancelTask; and raw JSON-RPC for the refusals. Scans everything for the owner's material.

use std::sync::Mutex;

use crate::support::procs::assert_no_markers;
use crate::support::reach;
use serde_json::{Value, json};

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn a2a_sdk_client_reads_the_card_and_a_message_comes_back_answered() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let w = reach::world(false, |t| t);
    let skill_id = card_id(&w, "brief");
    let (out, raw) = reach::run_json(
        "a2a_client.py",
        reach::python("a2a_client.py").args([
            &w.caller.base,
            &w.caller.agent_token,
            &skill_id,
            &reach::request("Summarize: the river runs."),
        ]),
    );
    let card = &out["card"];
    let skills = card["skills"].as_array().expect("skills");
    let brief = skills
        .iter()
        .find(|s| s["id"] == Value::String(skill_id.clone()))
        .unwrap_or_else(|| panic!("brief not on the card: {card}"));
    // A peer's skill name reaches the agent framed as peer text (4319c69), the frame's nonce
    // this process's own.
    let name = brief["name"].as_str().unwrap_or("");
    assert!(
        name.starts_with("⟦peer text ") && name.contains(" brief ⟦end "),
        "{brief}"
    );
    assert_eq!(brief["inputModes"], json!(["text/plain"]));
    assert_eq!(brief["outputModes"], json!(["text/plain"]));
    assert!(
        brief["tags"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("provider:openai")))
    );
    assert!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"]
            .as_str()
            .is_some_and(|s| s.eq_ignore_ascii_case("bearer")),
        "{card}"
    );
    let task = out["events"]
        .as_array()
        .and_then(|e| e.iter().find_map(|e| e.get("task")))
        .unwrap_or_else(|| panic!("no task: {out}"));
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let answer = task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(answer.contains("The double read"), "{task}");
    assert_eq!(out["get"]["id"], task["id"]);
    assert_eq!(out["get"]["status"]["state"], "TASK_STATE_COMPLETED");
    // A finished task cannot be cancelled; an unknown one is not found.
    reach::assert_text(&out, "/cancel/text", &["nothing to cancel"]);
    reach::assert_text(&out, "/missing/type", &["NotFound"]);
    assert_no_markers("A2A responses", &raw, &reach::markers());
    w.assert_logs_clean();
}

/// The A2A id of the owner's skill `name`, as a client finds it: on the caller's card, by the
/// name the card shows framed as peer text and the peer its description names. The id carries
/// no text of the peer's (a digest of the name), so a client takes it from the card.
fn card_id(w: &reach::World, name: &str) -> String {
    let card = w
        .caller
        .agent_api()
        .get("/.well-known/agent-card.json")
        .body;
    let framed = format!(" {name} ⟦end ");
    let offered_by = format!("Offered by peer {}.", w.owner.peer_id);
    let skill = card["skills"]
        .as_array()
        .and_then(|skills| {
            skills.iter().find(|s| {
                s["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("⟦peer text ") && n.contains(&framed))
                    && s["description"]
                        .as_str()
                        .is_some_and(|d| d.starts_with(&offered_by))
            })
        })
        .unwrap_or_else(|| panic!("{name} of the owner not on the card: {card}"));
    let id = skill["id"].as_str().unwrap_or_default().to_owned();
    assert!(
        !id.contains(name) && id.starts_with(&format!("{}/", w.owner.peer_id)),
        "{id}"
    );
    id
}

/// The status, the JSON answer and the `A2A-Version` the server answered with.
fn rpc(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, Value, Option<String>) {
    let (status, v, h) = reach::post_json(url, headers, body);
    let version = h
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // A body that is not JSON reads as Null here, as the A2A checks expect.
    let v = if v.is_string() { Value::Null } else { v };
    (status, v, version)
}

fn call(method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": "1", "method": method, "params": params }))
        .expect("json")
}

#[test]
fn a2a_bad_input_gets_a2a_errors() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let w = reach::world(false, |t| t);
    let url = format!("{}/a2a", w.caller.base);
    let auth = format!("Bearer {}", w.caller.agent_token);
    let ok = [("authorization", auth.as_str()), ("a2a-version", "1.0")];
    let msg = |text: &str, skill: &str| {
        json!({ "message": { "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": text }],
                             "metadata": { "skill": skill } } })
    };
    let mut seen = String::new();
    // No token.
    let (status, body, _) = rpc(
        &url,
        &[("a2a-version", "1.0")],
        call("GetTask", json!({ "id": "x" })),
    );
    assert_eq!(status, 401, "{body}");
    assert!(body["error"]["code"].is_i64(), "{body}");
    // The operator's token over TCP (audit 32 A32-1): 403 naming agent.token.
    let operator = format!("Bearer {}", w.caller.token);
    let (status, body, _) = rpc(
        &url,
        &[("authorization", operator.as_str()), ok[1]],
        call("GetTask", json!({ "id": "x" })),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        skillbox_reach::guard::OPERATOR_TOKEN_OVER_TCP,
        "{body}"
    );
    // A foreign Origin.
    let (status, _, _) = rpc(
        &url,
        &[ok[0], ok[1], ("origin", "http://evil.example")],
        call("GetTask", json!({ "id": "x" })),
    );
    assert_eq!(status, 403);
    // No version header, another version: VersionNotSupportedError.
    let (_, body, version) = rpc(&url, &ok[..1], call("GetTask", json!({ "id": "x" })));
    assert_eq!(body["error"]["code"], -32009, "{body}");
    assert_eq!(version.as_deref(), Some("1.0"));
    let (_, body, _) = rpc(
        &url,
        &[ok[0], ("a2a-version", "0.3")],
        call("GetTask", json!({ "id": "x" })),
    );
    assert_eq!(body["error"]["code"], -32009, "{body}");
    // Not JSON, not JSON-RPC, an unknown method, bad params, an unknown task.
    let (_, body, _) = rpc(&url, &ok, b"{nope".to_vec());
    assert_eq!(body["error"]["code"], -32700, "{body}");
    let (_, body, _) = rpc(&url, &ok, br#"{"id":1,"method":"GetTask"}"#.to_vec());
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let (_, body, _) = rpc(&url, &ok, call("message/send", json!({})));
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let (_, body, _) = rpc(&url, &ok, call("SendMessage", json!({ "message": 3 })));
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let (_, body, _) = rpc(&url, &ok, call("GetTask", json!({ "id": "no-such-task" })));
    assert_eq!(body["error"]["code"], -32001, "{body}");
    let (_, body, _) = rpc(&url, &ok, call("SendStreamingMessage", msg("hi", "brief")));
    assert_eq!(body["error"]["code"], -32004, "{body}");
    // A skill nobody offers; a non-text part.
    let (_, body, _) = rpc(&url, &ok, call("SendMessage", msg("hi", "nope")));
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let (_, body, _) = rpc(
        &url,
        &ok,
        call(
            "SendMessage",
            json!({ "message": { "messageId": "m", "role": "ROLE_USER", "parts": [{ "url": "file:///etc/passwd" }] } }),
        ),
    );
    assert_eq!(body["error"]["code"], -32005, "{body}");
    // A skill requiring a source this node holds but its human has not marked shareable: the
    // error names no command for the agent to run and quotes no name of the peer's.
    w.offer_a_skill_needing_a_private_source();
    let (_, body, _) = rpc(
        &url,
        &ok,
        call("SendMessage", msg(&reach::request("read it"), "journal")),
    );
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let text = body["error"]["message"].as_str().unwrap_or("");
    assert!(text.contains("required_sources_not_held"), "{body}");
    reach::assert_refusal_for_an_agent("SendMessage, sources omitted", text);
    seen.push_str(&body.to_string());
    // metadata.sources without metadata.skill: refused, not dropped (the intent would stake
    // every source its pick requires); no call starts.
    let calls = w.caller.api().get("/calls").body["total"].clone();
    for sources in [json!([]), json!(["songs"])] {
        let (_, body, _) = rpc(
            &url,
            &ok,
            call(
                "SendMessage",
                json!({ "message": { "messageId": "m2", "role": "ROLE_USER",
                                     "parts": [{ "text": reach::request("my music taste") }],
                                     "metadata": { "sources": sources } } }),
            ),
        );
        assert_eq!(body["error"]["code"], -32602, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("metadata.sources needs metadata.skill")),
            "{body}"
        );
    }
    assert_eq!(w.caller.api().get("/calls").body["total"], calls);
    // Oversized: 413 before anything reads it.
    let big = "x".repeat(512 * 1024);
    let (status, _, _) = rpc(&url, &ok, call("SendMessage", msg(&big, "brief")));
    assert_eq!(status, 413);
    // returnImmediately: the task comes back at once, then GetTask finds it answered.
    let mut p = msg(&reach::request("two lines"), &card_id(&w, "brief"));
    p["configuration"] = json!({ "returnImmediately": true });
    let (_, body, _) = rpc(&url, &ok, call("SendMessage", p));
    let id = body["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned();
    let api = w.caller.api();
    api.wait_state(&id, &["answered"], std::time::Duration::from_secs(60))
        .expect("answered");
    let (_, body, _) = rpc(&url, &ok, call("GetTask", json!({ "id": id })));
    assert_eq!(
        body["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    seen.push_str(&body.to_string());
    // A task is a call an agent started: one the human made from the CLI is no task to an A2A
    // client, which can neither read its answer nor cancel it.
    let human = crate::reach_mcp::a_call_the_human_made(&w);
    for method in ["GetTask", "CancelTask"] {
        let (_, body, _) = rpc(&url, &ok, call(method, json!({ "id": human })));
        assert_eq!(body["error"]["code"], -32001, "{method}: {body}");
        assert!(!body.to_string().contains("The double read"), "{body}");
    }
    let still = w.caller.api().get(&format!("/calls/{human}")).body;
    assert_eq!(still["state"], "answered", "{still}");
    // The card is behind the token too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let status = rt.block_on(async {
        reqwest::get(format!("{}/.well-known/agent-card.json", w.caller.base))
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    });
    assert_eq!(status, 401);
    assert_eq!(w.caller.api().get("/healthz").status, 200);
    assert_no_markers("A2A responses", &seen, &reach::markers());
    w.assert_logs_clean();
}
