//! Pack import: a multi-agent pack with role:"skill" agents (built from the fixtures' shapes).

use serde_json::{Value, json};
use skillbox_skill::pack::{PackError, import};
use skillbox_skill::{Schema, openwop};

fn pack() -> Value {
    json!({
        "name": "community.acme.review-crew", "version": "1.2.0", "engines": {"openwop": ">=1.0.0"},
        "runtime": {"language": "remote", "entry": "https://agents.acme.example/crew"},
        "agents": [
            {"agentId": "community.acme.crew.code_reviewer", "role": "skill", "persona": "Code Reviewer",
             "description": "Reviews a change.", "modelClass": "coding",
             "systemPrompt": "PROMPT-MARKER-1 You review code.",
             "memoryShape": {"scratchpad": true, "conversation": false, "longTerm": false},
             "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"}},
            {"agentId": "community.acme.crew.summarizer", "role": "skill", "persona": "Summarizer",
             "modelClass": "writing", "systemPrompt": "Summarize.",
             "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"}},
            {"agentId": "community.acme.crew.lead", "role": "assistant", "persona": "Crew Lead", "modelClass": "general",
             "systemPrompt": "You lead.", "memoryShape": {"conversation": true, "longTerm": true}},
            {"agentId": "community.acme.crew.legacy", "persona": "Legacy", "modelClass": "general", "systemPromptRef": "prompts/l.md"}
        ]
    })
}

#[test]
fn skill_agents_become_skills_others_stay_agents() {
    let imp = import(&pack()).expect("valid pack");
    assert_eq!(imp.skills.len(), 2);
    assert_eq!(imp.agents.len(), 2);
    let s = &imp.skills[0];
    assert_eq!(s.declaration.name, "code-reviewer");
    assert_eq!(s.declaration.description, "Reviews a change.");
    assert_eq!(s.declaration.model_class.as_deref(), Some("coding"));
    assert!(s.declaration.provider.is_none(), "declared but not offered");
    assert!(s.body.as_str().contains("PROMPT-MARKER-1"));
    assert_eq!(s.manifest["systemPromptRef"], "skill/code-reviewer/body");
    assert!(s.manifest.get("systemPrompt").is_none());
    assert!(
        !s.manifest.to_string().contains("PROMPT-MARKER-1"),
        "the prompt left the manifest"
    );
    assert!(
        !serde_json::to_string(&s.declaration)
            .expect("ser")
            .contains("PROMPT-MARKER-1")
    );
    assert!(openwop::validate(Schema::AgentManifest, &s.manifest).is_ok());
    assert_eq!(
        imp.skills[1].declaration.description, "Summarizer",
        "persona when no description"
    );
    assert!(
        imp.warnings
            .iter()
            .all(|w| w.field.as_deref() == Some("provider"))
    );
}

#[test]
fn a_pack_whose_skill_agent_declares_long_term_memory_is_refused_whole() {
    let mut p = pack();
    p["agents"][1]["memoryShape"] = json!({"longTerm": true});
    match import(&p) {
        Err(PackError::Invalid(report)) => {
            assert!(!report.agents[1].valid);
            assert!(report.agents[0].valid);
            let issues = PackError::Invalid(report).issues();
            assert!(
                issues
                    .iter()
                    .any(|i| i.path == "/agents/1/memoryShape/longTerm"),
                "{issues:?}"
            );
        }
        other => panic!("expected the whole pack refused, got {other:?}"),
    }
}

#[test]
fn other_refusals() {
    assert!(matches!(
        import(&json!({"agentId": "x"})),
        Err(PackError::NotAPack(_))
    ));
    let mut p = pack();
    p["agents"][0]
        .as_object_mut()
        .expect("obj")
        .remove("systemPrompt");
    p["agents"][0]["systemPromptRef"] = json!("prompts/x.md");
    assert!(
        matches!(import(&p), Err(PackError::Agent { .. })),
        "a skill needs its prompt inline here"
    );
    let mut p = pack();
    p["agents"][1]["agentId"] = json!("community.acme.other.code_reviewer");
    assert!(
        matches!(import(&p), Err(PackError::Agent { .. })),
        "two skills, one name"
    );
}
