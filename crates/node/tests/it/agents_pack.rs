//! OpenWOP pack import through a real node (§4): a published multi-agent pack's `role:"skill"`
//! agents become skills, declared but not offered until `PATCH /skills/{name}` sets a provider;
//! its other agents are listed in the inventory, never offered; one invalid agent (a skill
//! agent declaring `longTerm` memory) refuses the whole pack and stores nothing.

use crate::common::*;
use reqwest::Method;
use serde_json::{Value, json};
use skillbox_skill::Schema;
use skillbox_skill::openwop::validate;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/openwop/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// A pack in the published shape, built from the manifest fixtures: the RFC 0131 code reviewer
/// (a skill, its prompt inlined), the assistant demo, and a second skill.
fn published_pack() -> Value {
    let mut reviewer = fixture("rfc0131-skill-code-reviewer.json");
    let m = reviewer.as_object_mut().expect("object");
    m.remove("systemPromptRef");
    m.insert(
        "systemPrompt".into(),
        json!("REVIEWERPROMPT Review the diff for bugs."),
    );
    let mut assistant = fixture("assistant-rich-memory-handoff.json");
    assistant["systemPrompt"] = json!("ASSISTANTPROMPT plan the work");
    let mut summarizer = reviewer.clone();
    summarizer["agentId"] = json!("core.openwop.agents.summarizer");
    summarizer["persona"] = json!("Summarizer");
    summarizer["systemPrompt"] = json!("SUMMARYPROMPT Summarize.");
    json!({
        "name": "core.openwop.agents", "version": "2.0.0", "engines": {"openwop": ">=1.0 <2.0.0"},
        "runtime": {"language": "remote", "entry": "https://example.invalid/agents"},
        "agents": [reviewer, assistant, summarizer]
    })
}

async fn post_json(node: &TestNode, body: &Value) -> (u16, Value, String) {
    let rb = node
        .req(Method::POST, "/skills")
        .await
        .header("content-type", "application/json")
        .body(body.to_string());
    node.call(rb).await
}

pub(crate) async fn patch(node: &TestNode, name: &str, body: Value) -> (u16, Value, String) {
    let rb = node
        .req(Method::PATCH, &format!("/skills/{name}"))
        .await
        .header("content-type", "application/json")
        .body(body.to_string());
    node.call(rb).await
}

const PROMPTS: &[&str] = &["REVIEWERPROMPT", "ASSISTANTPROMPT", "SUMMARYPROMPT"];

#[tokio::test]
async fn a_published_pack_imports_skills_and_lists_its_other_agents() {
    let node = TestNode::start().await;
    let pack = published_pack();
    assert!(
        skillbox_skill::check_manifest_document(&pack).valid,
        "the pack is valid"
    );
    let (status, body, _) = post_json(&node, &pack).await;
    assert_eq!(status, 201, "{body}");
    let skills: Vec<&str> = skillbox_testkit::answer::names(&body, "skills");
    assert_eq!(skills, vec!["default", "summarizer"]);
    assert_eq!(
        body["agents"][0]["agentId"],
        json!("core.openwop.agents.demo")
    );
    assert_eq!(body["agents"][0]["packName"], json!("core.openwop.agents"));
    assert_eq!(body["agents"][0]["packVersion"], json!("2.0.0"));

    // Declared, not offered: no provider yet.
    let (_, list, _) = node.get("/skills").await;
    for s in list["skills"].as_array().expect("skills") {
        assert_eq!(s["offered"], json!(false), "{s}");
        assert!(
            s["reason"]
                .as_str()
                .expect("reason")
                .contains("no provider"),
            "{s}"
        );
    }
    // Every prompt went to the source store; the listings never carry one.
    node.assert_sources_listed(&[
        "agent/core.openwop.agents.demo/prompt",
        "skill/default/body",
        "skill/default/salt",
        "skill/summarizer/body",
        "skill/summarizer/salt",
    ])
    .await;
    let (status, inv, text) = node.get("/v1/agents").await;
    assert_eq!(status, 200);
    validate(Schema::AgentInventoryResponse, &inv).expect("inventory validates");
    let ids: Vec<&str> = inv["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["agentId"].as_str().expect("id"))
        .collect();
    assert_eq!(
        ids,
        vec![
            "core.openwop.agents.demo",
            "local.skillbox.default",
            "local.skillbox.summarizer"
        ],
        "the assistant is listed beside the skills, agentId-sorted"
    );
    let (status, demo, _) = node.get("/v1/agents/core.openwop.agents.demo").await;
    assert_eq!(status, 200);
    skillbox_node::openwop::validate_entry(&demo).expect("entry validates");
    assert_eq!(demo["packName"], json!("core.openwop.agents"));
    let routes = [
        "/skills",
        "/skills/default",
        "/v1/agents",
        "/v1/agents/core.openwop.agents.demo",
    ];
    node.assert_routes_hide(&routes, PROMPTS).await;
    assert!(!text.contains("systemPrompt"), "{text}");

    // `skill set default provider=local` offers it (local needs no key); others stay declared.
    let (status, detail, _) = patch(&node, "default", json!({"provider": "local"})).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["state"]["offered"], json!(true), "{detail}");
    let digest_local = detail["digest"].clone();
    // A provider that spends a key is declared, not offered, until a key is named; the key is
    // named only once its secret source exists (a name the node does not hold is refused).
    let (status, detail, _) = patch(
        &node,
        "summarizer",
        json!({"provider": "openrouter", "model": "anthropic/claude-sonnet-4.5"}),
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["state"]["offered"], json!(false));
    let (status, err, _) = patch(&node, "summarizer", json!({"key": "or-key"})).await;
    assert_eq!(status, 400, "{err}");
    assert_envelope(&err, "validation_error");
    assert_eq!(
        node.put_source("or-key", "secret", b"sk-or-v1-secret")
            .await
            .0,
        201
    );
    let (status, detail, _) = patch(&node, "summarizer", json!({"key": "or-key"})).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["state"]["offered"], json!(true), "{detail}");
    // null clears; the digest follows the declaration.
    let (status, detail, _) = patch(&node, "default", json!({"provider": null})).await;
    assert_eq!(status, 200);
    assert_eq!(detail["state"]["offered"], json!(false));
    assert_ne!(detail["digest"], digest_local);
    // Bad changes are refused by name and change nothing.
    for (body, needle) in [
        (json!({"provider": "nope"}), "provider"),
        (json!({"key": "../etc"}), "key"),
        // Another skill's body or a pack's prompt as the key: refused as the import does.
        (json!({"key": "skill/default/body"}), "reserved prefix"),
        (
            json!({"key": "agent/local.skillbox.x/prompt"}),
            "reserved prefix",
        ),
        (json!({"model": " "}), "model"),
        (json!({"temperature": "1"}), "temperature"),
        (json!({"model": 7}), "model"),
    ] {
        let (status, err, _) = patch(&node, "summarizer", body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_envelope(&err, "validation_error");
        assert!(
            err["message"].as_str().expect("message").contains(needle),
            "{err}"
        );
    }
    let (_, still, _) = node.get("/skills/summarizer").await;
    assert_eq!(still["state"]["offered"], json!(true));
    assert_eq!(
        patch(&node, "nobody", json!({"provider": "local"})).await.0,
        404
    );

    // Re-importing the same pack replaces: 200, nothing duplicated.
    let (status, body, _) = post_json(&node, &pack).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(node.get("/v1/agents").await.1["total"], json!(3));
    node.stop().await;
}

#[tokio::test]
async fn one_invalid_agent_refuses_the_whole_pack() {
    let node = TestNode::start().await;
    // The skill agent declares long-term memory (the Skill profile forbids it).
    let mut pack = published_pack();
    let long_term = fixture("skill-longterm-true.json");
    assert_eq!(long_term["role"], json!("skill"));
    assert_eq!(long_term["memoryShape"]["longTerm"], json!(true));
    let mut bad = long_term.clone();
    bad["agentId"] = json!("core.openwop.agents.memory-hog");
    bad["systemPrompt"] = json!("LONGTERMPROMPT remember everything");
    pack["agents"].as_array_mut().expect("agents").push(bad);
    let (status, body, text) = post_json(&node, &pack).await;
    assert_eq!(status, 400, "{body}");
    assert_envelope(&body, "pack_validation_failed");
    assert!(
        body["details"]["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .any(|e| e["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/agents/3"))),
        "{body}"
    );
    for p in PROMPTS.iter().chain(&["LONGTERMPROMPT"]) {
        assert!(!text.contains(p), "the error leaks {p}: {text}");
    }
    // Nothing of the pack landed: not its valid skills, not its assistant, not a prompt.
    assert_eq!(node.get("/skills").await.1["total"], json!(0));
    assert_eq!(node.get("/sources").await.1["total"], json!(0));
    assert_eq!(node.get("/v1/agents").await.1["total"], json!(0));

    // So does an invalid assistant beside valid skills.
    let mut pack = published_pack();
    pack["agents"][1]["canDispatch"] = json!(true);
    let (status, body, _) = post_json(&node, &pack).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(node.get("/skills").await.1["total"], json!(0));
    assert_eq!(node.get("/v1/agents").await.1["total"], json!(0));

    // And a pack whose non-skill agent takes a skill's agentId is a conflict, all or nothing.
    assert_eq!(node.post_skill(LOCAL, None).await.0, 201);
    let mut pack = published_pack();
    pack["agents"][1]["agentId"] = json!("local.skillbox.haiku");
    let (status, body, _) = post_json(&node, &pack).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(node.get("/skills").await.1["total"], json!(1));
    assert_eq!(node.get("/v1/agents").await.1["total"], json!(1));
    node.stop().await;
}
