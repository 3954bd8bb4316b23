//! OpenWOP: a declaration projected to an `AgentManifest` with `role: "skill"` (RFC 0131), and
//! validation of any OpenWOP document against the schemas embedded in the binary.
//!
//! Every schema is registered by its `$id` before a validator is built, so `$ref`s between them
//! (`prompt-ref` → `prompt-kind`, the roster and org-chart `$defs`) resolve offline.

use std::sync::OnceLock;

use serde::Serialize;
use serde_json::{Value, json};

use crate::declaration::Declaration;
use crate::diagnostic::Diagnostic;

pub const DEFAULT_NAMESPACE: &str = "local.skillbox";
/// The manifest's `description` limit.
pub const MAX_MANIFEST_DESCRIPTION: usize = 500;
/// Where the node serves the handoff schemas.
pub const TASK_SCHEMA_PATH: &str = "/v1/host/skillbox/schemas/task.schema.json";
pub const RETURN_SCHEMA_PATH: &str = "/v1/host/skillbox/schemas/return.schema.json";
/// The task (`{request, sources}`) and return (`{answer, truncated}`) schemas, 2020-12.
pub const TASK_SCHEMA: &str = include_str!("../schemas/skillbox/task.schema.json");
pub const RETURN_SCHEMA: &str = include_str!("../schemas/skillbox/return.schema.json");

const SCHEMA_BASE: &str = "https://openwop.dev/spec/v1/";

macro_rules! schemas {
    ($($variant:ident => $file:literal),* $(,)?) => {
        /// The OpenWOP schemas this crate embeds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Schema { $($variant),* }

        impl Schema {
            pub const ALL: &'static [Schema] = &[$(Schema::$variant),*];

            pub fn file_name(self) -> &'static str {
                match self { $(Schema::$variant => $file),* }
            }

            /// The schema's JSON text, as published.
            pub fn text(self) -> &'static str {
                match self { $(Schema::$variant => include_str!(concat!("../schemas/openwop/", $file))),* }
            }
        }
    };
}

schemas! {
    AgentManifest => "agent-manifest.schema.json",
    AgentInventoryResponse => "agent-inventory-response.schema.json",
    AgentRosterEntry => "agent-roster-entry.schema.json",
    AgentRosterResponse => "agent-roster-response.schema.json",
    AgentOrgChart => "agent-org-chart.schema.json",
    OrgChartResponsibilityView => "org-chart-responsibility-view.schema.json",
    AgentRef => "agent-ref.schema.json",
    ErrorEnvelope => "error-envelope.schema.json",
    Capabilities => "capabilities.schema.json",
    NodePackManifest => "node-pack-manifest.schema.json",
    PackLockfile => "pack-lockfile.schema.json",
    RegistryVersionManifest => "registry-version-manifest.schema.json",
    PromptRef => "prompt-ref.schema.json",
    PromptKind => "prompt-kind.schema.json",
}

impl Schema {
    pub fn from_file_name(name: &str) -> Option<Schema> {
        Schema::ALL.iter().copied().find(|s| s.file_name() == name)
    }

    /// The schema's `$id`.
    pub fn id(self) -> String {
        format!("{SCHEMA_BASE}{}", self.file_name())
    }
}

/// One schema violation: where in the instance, and what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SchemaIssue {
    /// JSON pointer into the validated document (`""` for the root).
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for SchemaIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

struct Validators {
    by_schema: Vec<(Schema, jsonschema::Validator)>,
    task: jsonschema::Validator,
    ret: jsonschema::Validator,
}

fn validators() -> &'static Validators {
    static VALIDATORS: OnceLock<Validators> = OnceLock::new();
    VALIDATORS.get_or_init(|| {
        // The schemas are part of the binary and tested; failing here is a build defect.
        let parse = |text: &str, what: &str| -> Value {
            serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("embedded schema {what} is not JSON: {e}"))
        };
        let mut registry = jsonschema::Registry::new();
        for s in Schema::ALL {
            registry = registry
                .add(s.id(), parse(s.text(), s.file_name()))
                .unwrap_or_else(|e| panic!("registering {}: {e}", s.file_name()));
        }
        let registry = registry
            .prepare()
            .unwrap_or_else(|e| panic!("preparing schema registry: {e}"));
        let build = |schema: &Value, what: &str| {
            jsonschema::options()
                .with_registry(&registry)
                .should_validate_formats(true)
                .build(schema)
                .unwrap_or_else(|e| panic!("building validator for {what}: {e}"))
        };
        let by_schema = Schema::ALL
            .iter()
            .map(|s| (*s, build(&parse(s.text(), s.file_name()), s.file_name())))
            .collect();
        Validators {
            by_schema,
            task: build(&parse(TASK_SCHEMA, "task"), "task"),
            ret: build(&parse(RETURN_SCHEMA, "return"), "return"),
        }
    })
}

fn issues(validator: &jsonschema::Validator, doc: &Value) -> Result<(), Vec<SchemaIssue>> {
    if validator.is_valid(doc) {
        return Ok(());
    }
    Err(validator
        .iter_errors(doc)
        .map(|e| SchemaIssue {
            path: e.instance_path().to_string(),
            message: e.to_string(),
        })
        .collect())
}

/// Validate `doc` against one of the embedded OpenWOP schemas.
pub fn validate(schema: Schema, doc: &Value) -> Result<(), Vec<SchemaIssue>> {
    let v = validators();
    let (_, validator) = v
        .by_schema
        .iter()
        .find(|(s, _)| *s == schema)
        .expect("every Schema variant has a validator");
    issues(validator, doc)
}

/// Validate a skill task (`{request, sources?}`) against the handoff task schema.
pub fn validate_task(doc: &Value) -> Result<(), Vec<SchemaIssue>> {
    issues(&validators().task, doc)
}

/// Validate a skill return (`{answer, truncated}`) against the handoff return schema.
pub fn validate_return(doc: &Value) -> Result<(), Vec<SchemaIssue>> {
    issues(&validators().ret, doc)
}

/// `<namespace>.<name>`; a name segment that does not start with a letter gets the prefix `s-`
/// (the manifest's agentId pattern wants a letter there).
pub fn agent_id(namespace: &str, name: &str) -> String {
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        format!("{namespace}.{name}")
    } else {
        format!("{namespace}.s-{name}")
    }
}

/// A declaration as an AgentManifest, and what the projection had to change.
#[derive(Clone, Debug)]
pub struct Projection {
    pub manifest: Value,
    pub warnings: Vec<Diagnostic>,
}

/// Project a declaration to an OpenWOP AgentManifest (`role: "skill"`).
///
/// The body is referenced (`systemPromptRef` = its source name), never inlined. `memoryShape` is
/// scratchpad-only unless the declaration asks for more, in which case the Skill profile of the
/// schema rejects the manifest — a reject, never a degrade (RFC 0131 §B).
pub fn project(decl: &Declaration, namespace: &str) -> Projection {
    let mut warnings = Vec::new();
    let description: String = if decl.description.chars().count() > MAX_MANIFEST_DESCRIPTION {
        warnings.push(Diagnostic::new(
            Some("description"),
            None,
            format!("cut to {MAX_MANIFEST_DESCRIPTION} characters in the OpenWOP manifest"),
        ));
        decl.description
            .chars()
            .take(MAX_MANIFEST_DESCRIPTION)
            .collect()
    } else {
        decl.description.clone()
    };
    let label: String = decl.name.chars().take(100).collect();
    let mut memory = serde_json::Map::new();
    memory.insert(
        "scratchpad".into(),
        Value::Bool(decl.memory.scratchpad.unwrap_or(true)),
    );
    memory.insert(
        "conversation".into(),
        Value::Bool(decl.memory.conversation.unwrap_or(false)),
    );
    memory.insert(
        "longTerm".into(),
        Value::Bool(decl.memory.long_term.unwrap_or(false)),
    );
    let manifest = json!({
        "agentId": agent_id(namespace, &decl.name),
        "role": "skill",
        "persona": decl.name,
        "label": label,
        "description": description,
        "modelClass": decl.model_class.as_deref().unwrap_or("general"),
        "systemPromptRef": decl.body_source_name(),
        "memoryShape": memory,
        "handoff": {
            "taskSchemaRef": TASK_SCHEMA_PATH,
            "returnSchemaRef": RETURN_SCHEMA_PATH,
        },
    });
    Projection { manifest, warnings }
}
