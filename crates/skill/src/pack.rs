//! Importing an OpenWOP `pack.json`: every agent validated, each `role: "skill"` agent with an
//! inline `systemPrompt` becomes a skill (the prompt becomes its body, bound for the source
//! store), other agents are kept as manifests for the inventory. A pack with one invalid agent
//! is refused whole.

use serde_json::Value;

use crate::declaration::{Declaration, Memory, body_source_name};
use crate::diagnostic::Diagnostic;
use crate::document::{Body, MAX_DESCRIPTION_CHARS, name_problem};
use crate::openwop::{self, Schema, SchemaIssue};
use crate::{ManifestReport, check_manifest_document};

/// A skill taken from a pack: declared, not offered until a provider (and key) is set.
#[derive(Debug, Clone)]
pub struct PackSkill {
    pub declaration: Declaration,
    pub body: Body,
    /// The pack's manifest with `systemPrompt` replaced by `systemPromptRef` to the body source.
    pub manifest: Value,
    pub agent_id: String,
}

#[derive(Debug, Clone, Default)]
pub struct PackImport {
    pub skills: Vec<PackSkill>,
    /// Agents that are not skills (`role: "assistant"` or no role), listed in the inventory only.
    pub agents: Vec<Value>,
    pub warnings: Vec<Diagnostic>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum PackError {
    #[error("not a pack.json: {0}")]
    NotAPack(&'static str),
    #[error("the pack fails the OpenWOP schemas")]
    Invalid(Box<ManifestReport>),
    #[error("agent {agent_id:?}: {message}")]
    Agent { agent_id: String, message: String },
}

impl PackError {
    /// Schema issues for an error body's `details`.
    pub fn issues(&self) -> Vec<SchemaIssue> {
        match self {
            PackError::Invalid(report) => report
                .pack_errors
                .iter()
                .cloned()
                .chain(report.agents.iter().flat_map(|a| a.errors.iter().cloned()))
                .collect(),
            PackError::NotAPack(m) => vec![SchemaIssue {
                path: String::new(),
                message: (*m).to_owned(),
            }],
            PackError::Agent { message, .. } => vec![SchemaIssue {
                path: "/agents".into(),
                message: message.clone(),
            }],
        }
    }
}

/// The skill name of a pack agent: the last segment of its agentId, lowercased, `_` as `-`.
fn skill_name(agent_id: &str) -> String {
    agent_id
        .rsplit('.')
        .next()
        .unwrap_or(agent_id)
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// Validate a pack and split it into skills and other agents.
pub fn import(doc: &Value) -> Result<PackImport, PackError> {
    let Some(agents) = doc.get("agents").and_then(Value::as_array) else {
        return Err(PackError::NotAPack("a pack.json has an `agents` array"));
    };
    if doc.get("agentId").is_some() {
        return Err(PackError::NotAPack(
            "this is a bare AgentManifest, not a pack",
        ));
    }
    let report = check_manifest_document(doc);
    if !report.valid {
        return Err(PackError::Invalid(Box::new(report)));
    }
    let mut out = PackImport::default();
    let mut names: Vec<String> = Vec::new();
    for agent in agents {
        let agent_id = agent
            .get("agentId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let fail = |message: String| PackError::Agent {
            agent_id: agent_id.clone(),
            message,
        };
        if agent.get("role").and_then(Value::as_str) != Some("skill") {
            out.agents.push(agent.clone());
            continue;
        }
        let Some(prompt) = agent.get("systemPrompt").and_then(Value::as_str) else {
            return Err(fail("a skill agent needs an inline systemPrompt to become a skill here (systemPromptRef points into a tarball this host does not have)".into()));
        };
        let name = skill_name(&agent_id);
        if let Some(problem) = name_problem(&name) {
            return Err(fail(format!(
                "skill name {name:?} (from the agentId) {problem}"
            )));
        }
        if names.contains(&name) {
            return Err(fail(format!(
                "two skill agents would both be named {name:?}"
            )));
        }
        names.push(name.clone());
        let persona = agent
            .get("persona")
            .and_then(Value::as_str)
            .unwrap_or(&name);
        let description: String = agent
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.trim().is_empty())
            .unwrap_or(persona)
            .chars()
            .take(MAX_DESCRIPTION_CHARS)
            .collect();
        let flag = |f: &str| {
            agent
                .get("memoryShape")
                .and_then(|m| m.get(f))
                .and_then(Value::as_bool)
        };
        let declaration = Declaration {
            name: name.clone(),
            description,
            provider: None,
            model: None,
            key: None,
            required_sources: Vec::new(),
            license: None,
            compatibility: None,
            metadata: None,
            allowed_tools: None,
            model_class: agent
                .get("modelClass")
                .and_then(Value::as_str)
                .map(str::to_owned),
            memory: Memory {
                scratchpad: flag("scratchpad"),
                conversation: flag("conversation"),
                long_term: flag("longTerm"),
            },
            extra: Default::default(),
        };
        let mut manifest = agent.clone();
        if let Some(m) = manifest.as_object_mut() {
            m.remove("systemPrompt");
            m.insert(
                "systemPromptRef".into(),
                Value::String(body_source_name(&name)),
            );
        }
        if let Err(issues) = openwop::validate(Schema::AgentManifest, &manifest) {
            let text = issues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(fail(format!(
                "manifest invalid after moving the prompt out: {text}"
            )));
        }
        out.warnings.push(Diagnostic::new(
            Some("provider"),
            None,
            format!("skill {name:?} from the pack declares no provider: declared but not offered until one is set"),
        ));
        out.skills.push(PackSkill {
            declaration,
            body: Body::new(prompt.to_owned()),
            manifest,
            agent_id,
        });
    }
    Ok(out)
}
