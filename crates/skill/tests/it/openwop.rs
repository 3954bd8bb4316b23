//! OpenWOP: RFC 0131's conformance cases, the shared fixtures (each gets its folder's verdict),
//! the projection of a SKILL.md, and the handoff schemas.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use skillbox_skill::openwop::{self, Schema};
use skillbox_skill::{CheckError, check_manifest_document, check_skill};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/openwop-fixtures")
}

fn json_files(dir: &Path) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v = serde_json::from_str(&std::fs::read_to_string(&p).expect("read"))
                .expect("fixture is JSON");
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                v,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn valid(manifest: &Value) -> bool {
    openwop::validate(Schema::AgentManifest, manifest).is_ok()
}

fn skill_manifest() -> Value {
    json!({
        "agentId": "local.skillbox.reviewer",
        "role": "skill",
        "persona": "Reviewer",
        "modelClass": "general",
        "systemPromptRef": "skill/reviewer/body",
        "memoryShape": {"scratchpad": true, "conversation": false, "longTerm": false},
        "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"}
    })
}

// ---- RFC 0131 Conformance, case by case

#[test]
fn rfc0131_skill_with_handoff_and_scratchpad_is_valid() {
    assert!(valid(&skill_manifest()));
}

#[test]
fn rfc0131_skill_with_long_term_memory_is_invalid() {
    let mut m = skill_manifest();
    m["memoryShape"]["longTerm"] = json!(true);
    assert!(!valid(&m));
}

#[test]
fn rfc0131_skill_with_conversation_memory_is_invalid() {
    let mut m = skill_manifest();
    m["memoryShape"]["conversation"] = json!(true);
    assert!(!valid(&m));
}

#[test]
fn rfc0131_skill_without_handoff_is_invalid() {
    let mut m = skill_manifest();
    m.as_object_mut().expect("object").remove("handoff");
    assert!(!valid(&m));
}

#[test]
fn rfc0131_assistant_with_rich_memory_and_handoff_is_valid() {
    let mut m = skill_manifest();
    m["role"] = json!("assistant");
    m["memoryShape"] = json!({"scratchpad": true, "conversation": true, "longTerm": true});
    assert!(valid(&m));
    m.as_object_mut().expect("object").remove("handoff");
    assert!(valid(&m), "an assistant needs no handoff");
}

#[test]
fn rfc0131_no_role_with_any_memory_is_valid() {
    let mut m = skill_manifest();
    m.as_object_mut().expect("object").remove("role");
    m["memoryShape"] = json!({"conversation": true, "longTerm": true});
    assert!(valid(&m));
    m.as_object_mut().expect("object").remove("handoff");
    assert!(valid(&m));
}

#[test]
fn rfc0131_role_agent_is_invalid() {
    let mut m = skill_manifest();
    m["role"] = json!("agent");
    assert!(!valid(&m));
}

// ---- the shared fixtures

#[test]
fn manifest_fixtures_get_their_folders_verdict() {
    for (verdict, want) in [("valid", true), ("invalid", false)] {
        let files = json_files(&fixtures().join("manifests").join(verdict));
        assert!(files.len() >= 6, "{verdict}: {} fixtures", files.len());
        for (name, doc) in files {
            let got = openwop::validate(Schema::AgentManifest, &doc);
            assert_eq!(got.is_ok(), want, "{verdict}/{name}: {got:?}");
            assert_eq!(
                check_manifest_document(&doc).valid,
                want,
                "manifest check agrees on {name}"
            );
        }
    }
}

#[test]
fn wire_fixtures_get_their_folders_verdict() {
    for (verdict, want) in [("valid", true), ("invalid", false)] {
        let files = json_files(&fixtures().join("wire").join(verdict));
        assert!(files.len() >= 6);
        for (name, doc) in files {
            let schema_name = doc["schema"].as_str().expect("fixture names its schema");
            let schema = Schema::from_file_name(schema_name)
                .unwrap_or_else(|| panic!("{name}: unknown schema {schema_name}"));
            let got = openwop::validate(schema, &doc["document"]);
            assert_eq!(
                got.is_ok(),
                want,
                "{verdict}/{name} against {schema_name}: {got:?}"
            );
        }
    }
}

#[test]
fn every_embedded_schema_is_a_valid_2020_12_schema_with_the_published_id() {
    for s in Schema::ALL {
        let v: Value = serde_json::from_str(s.text()).expect("schema is JSON");
        assert!(jsonschema::meta::is_valid(&v), "{}", s.file_name());
        assert_eq!(v["$id"], json!(s.id()), "{}", s.file_name());
    }
}

// ---- the projection

#[test]
fn a_skill_md_projects_to_a_valid_skill_manifest() {
    let text = "---\nname: music-taste\ndescription: Builds a taste profile.\nprovider: local\nmodelClass: writing\n---\nSECRET-BODY\n";
    let c = check_skill(text.as_bytes(), None, openwop::DEFAULT_NAMESPACE).expect("valid");
    assert_eq!(c.agent_id, "local.skillbox.music-taste");
    let m = &c.manifest;
    assert_eq!(m["role"], "skill");
    assert_eq!(m["persona"], "music-taste");
    assert_eq!(m["modelClass"], "writing");
    assert_eq!(m["systemPromptRef"], "skill/music-taste/body");
    assert!(m.get("systemPrompt").is_none(), "the body is never inlined");
    assert_eq!(
        m["memoryShape"],
        json!({"scratchpad": true, "conversation": false, "longTerm": false})
    );
    assert_eq!(m["handoff"]["taskSchemaRef"], openwop::TASK_SCHEMA_PATH);
    assert!(!m.to_string().contains("SECRET-BODY"));
    assert!(valid(m));
}

#[test]
fn a_name_not_starting_with_a_letter_gets_the_s_prefix() {
    assert_eq!(
        openwop::agent_id("local.skillbox", "3d-print"),
        "local.skillbox.s-3d-print"
    );
    let c = check_skill(
        b"---\nname: 3d-print\ndescription: d\n---\nb\n",
        None,
        "local.skillbox",
    )
    .expect("valid");
    assert_eq!(c.manifest["agentId"], "local.skillbox.s-3d-print");
    assert!(valid(&c.manifest));
}

#[test]
fn a_long_description_is_cut_in_the_manifest_with_a_warning() {
    let d = "word ".repeat(150);
    let c = check_skill(
        format!("---\nname: s\ndescription: {d}\n---\nb\n").as_bytes(),
        None,
        "local.skillbox",
    )
    .expect("valid");
    assert_eq!(
        c.manifest["description"]
            .as_str()
            .map(|s| s.chars().count()),
        Some(500)
    );
    let w = c
        .warnings
        .iter()
        .find(|w| w.field.as_deref() == Some("description"))
        .expect("a warning");
    assert!(w.message.contains("500"));
    assert_eq!(w.line, Some(3));
}

#[test]
fn a_skill_asking_for_long_term_or_conversation_memory_is_rejected_not_degraded() {
    for (front, flag) in [
        ("memory:\n  longTerm: true", "longTerm"),
        ("memory:\n  conversation: true", "conversation"),
        ("metadata:\n  memory:\n    longTerm: true", "longTerm"),
    ] {
        let text = format!("---\nname: s\ndescription: d\n{front}\n---\nbody\n");
        match check_skill(text.as_bytes(), None, "local.skillbox") {
            Err(CheckError::Manifest { issues, located }) => {
                assert!(
                    issues
                        .iter()
                        .any(|i| i.path == format!("/memoryShape/{flag}")),
                    "{issues:?}"
                );
                assert!(located.iter().all(|d| d.line == Some(4)), "{located:?}");
            }
            other => panic!("{flag}: expected a schema reject, got {other:?}"),
        }
    }
}

#[test]
fn an_unknown_model_class_is_a_schema_error_on_its_line() {
    let text = "---\nname: s\ndescription: d\nmodelClass: poetry\n---\nb\n";
    match check_skill(text.as_bytes(), None, "local.skillbox") {
        Err(CheckError::Manifest { located, .. }) => {
            assert_eq!(located[0].field.as_deref(), Some("modelClass"));
            assert_eq!(located[0].line, Some(4));
        }
        other => panic!("expected a schema reject, got {other:?}"),
    }
}

// ---- the handoff schemas

#[test]
fn handoff_schemas_are_valid_2020_12_and_describe_task_and_return() {
    for text in [openwop::TASK_SCHEMA, openwop::RETURN_SCHEMA] {
        let v: Value = serde_json::from_str(text).expect("JSON");
        assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert!(jsonschema::meta::is_valid(&v));
    }
    assert!(
        openwop::validate_task(&json!({"request": "hi", "sources": ["spotify_songs"]})).is_ok()
    );
    assert!(openwop::validate_task(&json!({"request": "hi", "sources": []})).is_ok());
    assert!(
        openwop::validate_task(&json!({"sources": []})).is_err(),
        "request required"
    );
    assert!(
        openwop::validate_task(&json!({"request": "hi", "body": "x"})).is_err(),
        "closed"
    );
    assert!(openwop::validate_return(&json!({"answer": "a", "truncated": false})).is_ok());
    assert!(openwop::validate_return(&json!({"answer": "a"})).is_err());
}

// ---- packs

#[test]
fn a_pack_is_checked_whole_and_per_agent() {
    let mut assistant = skill_manifest();
    assistant["agentId"] = json!("local.skillbox.helper");
    assistant["role"] = json!("assistant");
    let pack = json!({
        "name": "private.local.skills", "version": "1.0.0", "engines": {"openwop": ">=1.0.0"},
        "runtime": {"language": "remote", "entry": "https://skills.example/"},
        "agents": [skill_manifest(), assistant]
    });
    let r = check_manifest_document(&pack);
    assert_eq!(r.kind, "pack");
    assert_eq!(r.agents.len(), 2);
    assert!(r.agents.iter().all(|a| a.valid), "{r:#?}");
    assert!(r.valid && r.pack_errors.is_empty(), "{r:#?}");
    let mut unnamed = pack.clone();
    unnamed["name"] = json!("@local/skills");
    let r = check_manifest_document(&unnamed);
    assert!(
        !r.valid && r.pack_errors.iter().any(|e| e.path == "/name"),
        "{r:#?}"
    );
    let mut bad = pack.clone();
    bad["agents"][0]["memoryShape"]["longTerm"] = json!(true);
    let r = check_manifest_document(&bad);
    assert!(!r.valid);
    assert!(!r.agents[0].valid && r.agents[1].valid);
    assert!(
        r.agents[0]
            .errors
            .iter()
            .all(|e| e.path.starts_with("/agents/0")),
        "{r:#?}"
    );
}
