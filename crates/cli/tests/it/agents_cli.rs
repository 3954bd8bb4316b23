//! The real binary for tenants and packs: `token add` (the token printed once, only its digest
//! in config.toml, picked up by a running node), `skill add PACK.json` and `skill set`.

use std::fs;
use std::path::Path;

use crate::support::procs::{LOOPBACK_INIT, ServedNode, cli as skillbox, raw_http, text};

/// One GET over a plain socket; returns the status.
fn get_status(addr: &str, path: &str, token: &str) -> u16 {
    raw_http(addr, "GET", path, Some(token)).0
}

fn token_add(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["token", "add"];
    all.extend_from_slice(args);
    let o = skillbox(dir, &all);
    assert!(o.status.success(), "token add: {}", text(&o));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert!(token.starts_with("sbx_t_") && token.len() == 70, "{token}");
    token
}

#[test]
fn tenant_tokens_and_pack_import_through_the_cli() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("node");
    let o = skillbox(&dir, &LOOPBACK_INIT);
    assert!(o.status.success(), "init: {}", text(&o));

    let acme = token_add(&dir, &["--tenant", "acme", "--workspace", "growth"]);
    let config = fs::read_to_string(dir.join("config.toml")).expect("config");
    assert!(
        !config.contains(&acme),
        "the token itself is in config.toml"
    );
    assert!(config.contains("tenant = \"acme\"") && config.contains("workspace = \"growth\""));
    let o = skillbox(&dir, &["token", "add", "--tenant", ""]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("tenant"), "{}", text(&o));
    assert_eq!(
        fs::read_to_string(dir.join("config.toml")).expect("config"),
        config,
        "a refused token add leaves config.toml as it was"
    );

    let node = ServedNode::start(&dir, "node.log");
    assert_eq!(get_status(&node.addr, "/v1/agents/roster", &acme), 200);
    assert_eq!(get_status(&node.addr, "/skills", &acme), 403);
    // Added while the node runs: accepted without a restart.
    let late = token_add(&dir, &["--tenant", "late"]);
    assert_eq!(get_status(&node.addr, "/v1/agents/org-chart", &late), 200);
    assert_eq!(
        get_status(&node.addr, "/v1/agents/org-chart", "sbx_t_wrong"),
        401
    );

    let pack = serde_json::json!({
        "name": "core.openwop.agents", "version": "1.0.0", "engines": {"openwop": ">=1.0 <2.0.0"},
        "runtime": {"language": "remote", "entry": "https://example.invalid/agents"},
        "agents": [
            {"agentId": "core.openwop.agents.reviewer", "role": "skill", "persona": "Reviewer",
             "modelClass": "general", "systemPrompt": "Review it.", "toolAllowlist": [],
             "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"}},
            {"agentId": "core.openwop.agents.planner", "role": "assistant", "persona": "Planner",
             "modelClass": "general", "systemPrompt": "Plan it."}
        ]
    });
    let pack_path = root.path().join("pack.json");
    fs::write(&pack_path, pack.to_string()).expect("write pack");
    let o = skillbox(
        &dir,
        &["skill", "add", pack_path.to_str().expect("utf-8 path")],
    );
    assert!(o.status.success(), "skill add pack: {}", text(&o));
    let out = text(&o);
    assert!(out.contains("added skill reviewer"), "{out}");
    assert!(out.contains("not offered: no provider declared"), "{out}");
    assert!(
        out.contains("added agent core.openwop.agents.planner"),
        "{out}"
    );

    let o = skillbox(&dir, &["skill", "set", "reviewer", "provider=local"]);
    assert!(o.status.success(), "skill set: {}", text(&o));
    assert!(text(&o).contains("  offered"), "{}", text(&o));
    // The owner's body allowance: set and shown; a context for `local` and a number that is
    // none are refused naming the field.
    let o = skillbox(&dir, &["skill", "set", "reviewer", "bodyMaxTokens=2048"]);
    assert!(o.status.success(), "skill set: {}", text(&o));
    assert!(
        text(&o).contains("body allowance 2048 tokens"),
        "{}",
        text(&o)
    );
    for bad in [
        "modelContextTokens=32768",
        "bodyMaxTokens=lots",
        "bodyMaxTokens=0",
    ] {
        let o = skillbox(&dir, &["skill", "set", "reviewer", bad]);
        assert_eq!(o.status.code(), Some(1), "{bad}: {}", text(&o));
        let field = bad.split('=').next().unwrap_or_default();
        assert!(text(&o).contains(field), "{bad}: {}", text(&o));
    }
    let o = skillbox(&dir, &["skill", "set", "reviewer", "colour=red"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = skillbox(&dir, &["skill", "set", "reviewer", "provider=nope"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("provider"), "{}", text(&o));
    let o = skillbox(&dir, &["skill", "list"]);
    assert!(text(&o).contains("reviewer"), "{}", text(&o));
    assert!(text(&o).contains("local"), "{}", text(&o));
}
