//! OpenWOP `pack.json` (or a bare AgentManifest) imported as skills (§4): each `role:"skill"`
//! agent with an inline `systemPrompt` becomes a SKILL.md — the prompt its body, which then goes
//! to the source store like any other body. Agents without `role:"skill"` are validated and
//! stored as pack agents (listed in the inventory, never offered; their inline prompt too goes
//! to the source store). One invalid agent refuses the whole pack. Pure: it only builds what
//! the import writes.

use serde_json::{Value, json};
use skillbox_skill::{SchemaIssue, check_manifest_document};

use crate::agents::{PackAgent, prompt_source_name};
use crate::error::{NodeError, Result};

/// What a pack turns into.
#[derive(Clone)]
pub struct PackPlan {
    /// (skill name, SKILL.md text)
    pub skills: Vec<(String, String)>,
    /// Agents that are not skills.
    pub agents: Vec<PackAgent>,
}

impl std::fmt::Debug for PackPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A SKILL.md text holds its body: names only.
        f.debug_struct("PackPlan")
            .field(
                "skills",
                &self.skills.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("agents", &self.agents)
            .finish()
    }
}

/// Check a pack (or bare manifest) against the schemas and build one SKILL.md per skill agent
/// and one [`PackAgent`] per other agent. `namespace` names the pack of a bare manifest.
pub fn plan(doc: &Value, namespace: &str) -> Result<PackPlan> {
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
    // A pack names itself; a bare manifest is its own pack, versioned by its content.
    let (pack_name, pack_version) = match (
        report.kind,
        doc.get("name").and_then(Value::as_str),
        doc.get("version").and_then(Value::as_str),
    ) {
        ("pack", Some(n), Some(v)) => (n.to_owned(), v.to_owned()),
        _ => {
            use sha2::{Digest, Sha256};
            (
                namespace.to_owned(),
                format!(
                    "sha256:{}",
                    hex::encode(Sha256::digest(doc.to_string().as_bytes()))
                ),
            )
        }
    };
    let mut plan = PackPlan {
        skills: Vec::new(),
        agents: Vec::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for (at, agent) in agents {
        let s = |k: &str| agent.get(k).and_then(Value::as_str);
        let agent_id = s("agentId").unwrap_or_default();
        if !seen.insert(agent_id.to_owned()) {
            return Err(NodeError::invalid(
                format!("{at}/agentId"),
                format!("{agent_id:?} appears twice in the pack"),
            ));
        }
        if s("role") != Some("skill") {
            let mut manifest = agent.clone();
            let prompt = match manifest
                .as_object_mut()
                .and_then(|m| m.remove("systemPrompt"))
            {
                Some(Value::String(p)) => {
                    let name = prompt_source_name(agent_id);
                    if crate::sources::check_name(&name).is_err() {
                        return Err(NodeError::invalid(
                            format!("{at}/agentId"),
                            "too long to name its prompt source (agent/<agentId>/prompt is at most 128 bytes)",
                        ));
                    }
                    manifest["systemPromptRef"] = json!(name);
                    Some(p)
                }
                _ => None,
            };
            plan.agents.push(PackAgent {
                agent_id: agent_id.to_owned(),
                role: s("role").map(str::to_owned),
                manifest,
                prompt,
                pack_name: pack_name.clone(),
                pack_version: pack_version.clone(),
            });
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
        let p = plan(
            &agent(
                "vendor.acme.tools.code-reviewer",
                Some("skill"),
                Some("Review the code."),
            ),
            "local.skillbox",
        )
        .expect("plan");
        assert_eq!(p.skills.len(), 1);
        let (name, doc) = &p.skills[0];
        assert_eq!(name, "code-reviewer");
        let checked = skillbox_skill::check_skill(doc.as_bytes(), None, "local.skillbox")
            .expect("valid SKILL.md");
        assert_eq!(checked.body.as_str().trim(), "Review the code.");
    }

    #[test]
    fn skill_agent_needs_an_inline_prompt_and_others_become_pack_agents() {
        let err = plan(
            &agent("vendor.acme.tools.x", Some("skill"), None),
            "local.skillbox",
        )
        .expect_err("no prompt");
        assert!(err.to_string().contains("systemPrompt"), "{err}");
        let p = plan(
            &agent("vendor.acme.tools.helper", Some("assistant"), Some("Hi")),
            "local.skillbox",
        )
        .expect("plan");
        assert!(p.skills.is_empty());
        assert_eq!(p.agents.len(), 1);
        let a = &p.agents[0];
        assert_eq!(a.prompt.as_deref(), Some("Hi"));
        assert!(a.manifest.get("systemPrompt").is_none());
        assert_eq!(
            a.manifest["systemPromptRef"],
            json!("agent/vendor.acme.tools.helper/prompt")
        );
        // The stored manifest still passes the schema.
        skillbox_skill::openwop::validate(skillbox_skill::Schema::AgentManifest, &a.manifest)
            .expect("stored manifest validates");
        assert_eq!(a.pack_name, "local.skillbox");
        assert!(!format!("{p:?}").contains("Hi\""), "Debug leaks the prompt");
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
        let err = plan(&a, "local.skillbox").expect_err("profile violation");
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
