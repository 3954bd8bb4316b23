//! The skill document: SKILL.md grammar, the declaration, and the OpenWOP projection.
//!
//! Pure: nothing in this crate does I/O. Parsing returns the declaration and the body as separate
//! values so the caller decides where the body goes (the node writes it to the source store and
//! drops it); [`Declaration`] has no field that can hold the body.
//!
//! - [`document`]: the grammar — front matter between `---` lines, fields validated, limits.
//! - [`Declaration`]: what the protocol reads; [`Advertised`]: what peers may see of it.
//! - [`openwop`]: the AgentManifest projection and validation against the embedded schemas.
//! - [`agents`]: roster entries and the org chart — the rules beyond their schemas.
//! - [`check_skill`] and [`check_manifest_document`]: the import checks, all of the above at once.
//! - [`text`]: what a reader cannot see in someone else's text (the one rule the node's logs and
//!   reach's cleaning keep).

pub mod agents;
mod declaration;
mod diagnostic;
pub mod document;
pub mod openwop;
mod provider;
pub mod text;

use serde::Serialize;
use serde_json::Value;

pub use declaration::{
    Advertised, Declaration, DeclarationGap, Limits, Memory, RESERVED_SOURCE_PREFIXES, SALT_LEN,
    body_source_name, is_reserved_source_name, model_source_name, salt_source_name,
};
pub use diagnostic::{Diagnostic, DocumentError};
pub use document::{
    Body, KEY_IS_NOT_A_NAME, MAX_REQUIRED_SOURCES, Parsed, is_valid_source_name,
    looks_like_a_provider_key, required_sources_advertisable,
};
pub use openwop::{Schema, SchemaIssue};
pub use provider::{ProviderId, UnknownProvider};

/// A SKILL.md that parsed, projected and validated: ready to import.
#[derive(Debug, Clone)]
pub struct CheckedSkill {
    pub declaration: Declaration,
    pub body: Body,
    /// The OpenWOP AgentManifest, valid against `agent-manifest.schema.json`.
    pub manifest: Value,
    pub agent_id: String,
    pub warnings: Vec<Diagnostic>,
}

/// Why a document cannot be imported as a skill.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckError {
    /// The SKILL.md itself is wrong (grammar, a field, a limit).
    #[error("invalid SKILL.md: {0}")]
    Document(#[from] DocumentError),
    /// The declaration is fine as a document but its manifest fails the OpenWOP schema
    /// (e.g. the Skill profile): RFC 0131 §B reject, `pack_validation_failed`.
    #[error("manifest fails the OpenWOP schema: {}", join(.issues))]
    Manifest {
        issues: Vec<SchemaIssue>,
        /// The same problems located in the SKILL.md where possible.
        located: Vec<Diagnostic>,
    },
}

fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Parse, project and validate a SKILL.md in one call.
pub fn check_skill(
    input: &[u8],
    fallback_name: Option<&str>,
    namespace: &str,
) -> Result<CheckedSkill, CheckError> {
    let parsed = document::parse(input, fallback_name)?;
    let projection = openwop::project(&parsed.declaration, namespace);
    if let Err(issues) = openwop::validate(Schema::AgentManifest, &projection.manifest) {
        let located = issues.iter().map(|i| locate(&parsed, i)).collect();
        return Err(CheckError::Manifest { issues, located });
    }
    let agent_id = openwop::agent_id(namespace, &parsed.declaration.name);
    let mut warnings = parsed.warnings;
    warnings.extend(projection.warnings.into_iter().map(|mut w| {
        if let Some(field) = &w.field {
            w.line = parsed.field_lines.get(field).copied();
        }
        w
    }));
    Ok(CheckedSkill {
        declaration: parsed.declaration,
        body: parsed.body,
        manifest: projection.manifest,
        agent_id,
        warnings,
    })
}

/// Map a manifest schema issue back to the front-matter field that caused it.
fn locate(parsed: &Parsed, issue: &SchemaIssue) -> Diagnostic {
    let top = issue
        .path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("");
    let field = match top {
        "memoryShape" => {
            if parsed.field_lines.contains_key("memory") {
                "memory"
            } else {
                "metadata"
            }
        }
        "persona" | "label" | "agentId" => "name",
        other => other,
    };
    let line = parsed.field_lines.get(field).copied();
    Diagnostic::new(Some(field), line, issue.to_string())
}

/// What `manifest check` says of one agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentVerdict {
    #[serde(rename = "agentId", skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub valid: bool,
    pub errors: Vec<SchemaIssue>,
}

/// What `manifest check` says of one document: a bare AgentManifest or a `pack.json`.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestReport {
    /// `"manifest"` or `"pack"`.
    pub kind: &'static str,
    pub valid: bool,
    /// Errors of the pack itself (outside `agents[]`); empty for a bare manifest.
    #[serde(rename = "packErrors")]
    pub pack_errors: Vec<SchemaIssue>,
    pub agents: Vec<AgentVerdict>,
}

/// Check a bare AgentManifest, or a `pack.json` (an object with `agents[]`) whole and per agent.
pub fn check_manifest_document(doc: &Value) -> ManifestReport {
    let verdict = |agent: &Value, prefix: &str| {
        let errors = match openwop::validate(Schema::AgentManifest, agent) {
            Ok(()) => Vec::new(),
            Err(issues) => issues
                .into_iter()
                .map(|i| SchemaIssue {
                    path: format!("{prefix}{}", i.path),
                    message: i.message,
                })
                .collect(),
        };
        AgentVerdict {
            agent_id: agent
                .get("agentId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            role: agent.get("role").and_then(Value::as_str).map(str::to_owned),
            valid: errors.is_empty(),
            errors,
        }
    };
    match doc.get("agents").and_then(Value::as_array) {
        Some(agents) if doc.get("agentId").is_none() => {
            let agents: Vec<AgentVerdict> = agents
                .iter()
                .enumerate()
                .map(|(i, a)| verdict(a, &format!("/agents/{i}")))
                .collect();
            // Whole-pack errors, minus those inside agents[] (already attributed above).
            let pack_errors: Vec<SchemaIssue> =
                match openwop::validate(Schema::NodePackManifest, doc) {
                    Ok(()) => Vec::new(),
                    Err(issues) => issues
                        .into_iter()
                        .filter(|i| !i.path.starts_with("/agents/"))
                        .collect(),
                };
            let valid = pack_errors.is_empty() && agents.iter().all(|a| a.valid);
            ManifestReport {
                kind: "pack",
                valid,
                pack_errors,
                agents,
            }
        }
        _ => {
            let v = verdict(doc, "");
            ManifestReport {
                kind: "manifest",
                valid: v.valid,
                pack_errors: Vec::new(),
                agents: vec![v],
            }
        }
    }
}
