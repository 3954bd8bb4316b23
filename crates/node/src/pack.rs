//! OpenWOP `pack.json` (or a bare AgentManifest) imported as skills (§4): each `role:"skill"`
//! agent with an inline `systemPrompt` becomes a SKILL.md — the prompt its body, which then goes
//! to the source store like any other body. Agents without `role:"skill"` are validated and
//! reported but are not skills. Pure: it only builds the documents.

use serde_json::{Value, json};
use skillbox_skill::{SchemaIssue, check_manifest_document};

use crate::error::{NodeError, Result};

/// What a pack turns into.
#[derive(Debug, Clone)]
pub struct PackPlan {
    /// (skill name, SKILL.md text)
    pub skills: Vec<(String, String)>,
    /// Agents that are not skills: `{agentId, role, reason}`.
    pub skipped: Vec<Value>,
}

/// Check a pack (or bare manifest) against the schemas and build one SKILL.md per skill agent.
pub fn plan(doc: &Value) -> Result<PackPlan> {
    let report = check_manifest_document(doc);
    if !report.valid {
        let mut issues: Vec<SchemaIssue> = report.pack_errors.clone();
        for a in &report.agents {
            issues.extend(a.errors.iter().cloned());
        }
        // Schema messages quote the failing instance, and an inline prompt is a skill body:
        // cut it out of every message before the error goes anywhere.
        let prompts = collect_prompts(doc);
        for issue in &mut issues {
            for p in &prompts {
                issue.message = issue.message.replace(p.as_str(), "<systemPrompt redacted>");
            }
        }
        return Err(NodeError::Pack(issues));
    }
    let agents: Vec<(String, &Value)> = match doc.get("agents").and_then(Value::as_array) {
        Some(list) if report.kind == "pack" => list
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("/agents/{i}"), a))
            .collect(),
        _ => vec![(String::new(), doc)],
    };
    let mut plan = PackPlan {
        skills: Vec::new(),
        skipped: Vec::new(),
    };
    for (at, agent) in agents {
        let s = |k: &str| agent.get(k).and_then(Value::as_str);
        let agent_id = s("agentId").unwrap_or_default();
        if s("role") != Some("skill") {
            plan.skipped.push(json!({
                "agentId": agent_id,
                "role": s("role"),
                "reason": "not role:\"skill\" (validated, not imported as a skill)",
            }));
            continue;
        }
        let Some(prompt) = s("systemPrompt") else {
            return Err(NodeError::invalid(
                format!("{at}/systemPrompt"),
                "a role:\"skill\" agent needs its prompt inline (systemPrompt) to be imported; a systemPromptRef points into a pack tarball this node does not have",
            ));
        };
        // The agent's last agentId segment is the skill's name (the node re-namespaces it).
        let name = agent_id
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase()
            .replace('_', "-");
        if let Some(problem) = skillbox_skill::document::name_problem(&name) {
            return Err(NodeError::invalid(
                format!("{at}/agentId"),
                format!("the last segment {name:?} cannot be a skill name: it {problem}"),
            ));
        }
        let description = s("description").or(s("persona")).unwrap_or(agent_id);
        let mut front = format!(
            "---\nname: {}\ndescription: {}\n",
            json!(name),
            json!(description)
        );
        if let Some(mc) = s("modelClass") {
            front.push_str(&format!("modelClass: {}\n", json!(mc)));
        }
        front.push_str("---\n");
        front.push_str(prompt);
        plan.skills.push((name, front));
    }
    Ok(plan)
}

/// Every inline `systemPrompt` in the document, raw and as it appears JSON-escaped (longest
/// first, so a prompt that contains another is cut whole).
fn collect_prompts(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut visit = |a: &Value| {
        if let Some(p) = a
            .get("systemPrompt")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        {
            let escaped = serde_json::to_string(p).unwrap_or_default();
            out.push(escaped.trim_matches('"').to_owned());
            out.push(p.to_owned());
        }
    };
    visit(doc);
    for a in doc
        .get("agents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        visit(a);
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, role: Option<&str>, prompt: Option<&str>) -> Value {
        let mut a = json!({
            "agentId": id, "persona": "Reviewer", "modelClass": "general",
            "memoryShape": {"scratchpad": true, "conversation": false, "longTerm": false},
            "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"},
            "toolAllowlist": []
        });
        if let Some(r) = role {
            a["role"] = json!(r);
        }
        match prompt {
            Some(p) => a["systemPrompt"] = json!(p),
            None => a["systemPromptRef"] = json!("prompts/x.md"),
        }
        a
    }

    #[test]
    fn bare_skill_manifest_becomes_a_skill_md() {
        let p = plan(&agent(
            "vendor.acme.tools.code-reviewer",
            Some("skill"),
            Some("Review the code."),
        ))
        .expect("plan");
        assert_eq!(p.skills.len(), 1);
        let (name, doc) = &p.skills[0];
        assert_eq!(name, "code-reviewer");
        let checked = skillbox_skill::check_skill(doc.as_bytes(), None, "local.skillbox")
            .expect("valid SKILL.md");
        assert_eq!(checked.body.as_str().trim(), "Review the code.");
    }

    #[test]
    fn skill_agent_needs_an_inline_prompt_and_others_are_skipped() {
        let err = plan(&agent("vendor.acme.tools.x", Some("skill"), None)).expect_err("no prompt");
        assert!(err.to_string().contains("systemPrompt"), "{err}");
        let p = plan(&agent(
            "vendor.acme.tools.helper",
            Some("assistant"),
            Some("Hi"),
        ))
        .expect("plan");
        assert!(p.skills.is_empty());
        assert_eq!(p.skipped.len(), 1);
    }

    #[test]
    fn invalid_manifest_is_a_pack_error() {
        let mut a = agent(
            "vendor.acme.tools.x",
            Some("skill"),
            Some("SECRETPROMPT \"quoted\" text"),
        );
        a["memoryShape"]["longTerm"] = json!(true);
        a["persona"] = json!(7);
        let err = plan(&a).expect_err("profile violation");
        let text = err.to_string();
        let NodeError::Pack(issues) = err else {
            panic!("wrong error: {text}")
        };
        assert!(
            issues.iter().any(|i| i.path.contains("memoryShape")),
            "{issues:?}"
        );
        assert!(
            !text.contains("SECRETPROMPT"),
            "the prompt leaks into the error: {text}"
        );
    }
}
