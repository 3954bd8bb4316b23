//! The OpenWOP surfaces of a node (§4): the discovery document and the agent inventory, built
//! from stored manifests only. Pure: no I/O, so the shapes are unit-tested against the schemas.

use serde_json::{Map, Value, json};
use skillbox_skill::openwop::{Schema, SchemaIssue, validate};

/// The OpenWOP protocol version the node speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The `agents` capability block (truthful advertisement, RFC 0031): the manifest runtime
/// (RFC 0070), the roster (RFC 0086) and the org chart (RFC 0087), all `installScope: "tenant"`
/// because every agent surface answers only for the caller's owner (the roster's scope must
/// equal the manifest runtime's). Installed manifests are the operator's, available to every
/// tenant of the node; roster entries and charts are each tenant's own. Nothing fires portfolio
/// runs here, so `portfolioTriggerSources` is empty.
pub fn agents_capability(department_nesting: bool) -> Value {
    json!({
        "supported": true,
        "manifestRuntime": {
            "supported": true,
            "handoffValidation": false,
            "installScope": "tenant"
        },
        "roster": {
            "supported": true,
            "installScope": "tenant",
            "portfolioTriggerSources": []
        },
        "orgChart": {
            "supported": true,
            "installScope": "tenant",
            "departmentNesting": department_nesting,
            "responsibilityView": true
        }
    })
}

/// `GET /.well-known/openwop`: a Capabilities document with the `agents` block at the root and
/// mirrored under `capabilities` (for clients that read the nested form).
pub fn discovery(department_nesting: bool) -> Value {
    let agents = agents_capability(department_nesting);
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "supportedEnvelopes": [],
        "schemaVersions": {},
        "limits": { "clarificationRounds": 0, "schemaRounds": 0, "envelopesPerTurn": 0 },
        "implementation": { "name": "skillbox", "version": env!("CARGO_PKG_VERSION"), "vendor": "skillbox" },
        "agents": agents.clone(),
        "capabilities": { "agents": agents },
    })
}

/// Project a stored AgentManifest to an inventory entry (RFC 0072): never the body, a key or a
/// resolved handoff schema, only the fields the entry schema names.
pub fn inventory_entry(manifest: &Value, pack_name: &str, pack_version: &str) -> Value {
    let s = |k: &str| manifest.get(k).and_then(Value::as_str);
    let persona = s("persona").unwrap_or_default();
    let mut e = Map::new();
    e.insert("agentId".into(), json!(s("agentId").unwrap_or_default()));
    e.insert("persona".into(), json!(persona));
    e.insert("label".into(), json!(s("label").unwrap_or(persona)));
    if let Some(d) = s("description") {
        e.insert("description".into(), json!(d));
    }
    e.insert(
        "modelClass".into(),
        json!(s("modelClass").unwrap_or("general")),
    );
    e.insert("packName".into(), json!(pack_name));
    e.insert("packVersion".into(), json!(pack_version));
    let tools: Vec<&str> = manifest
        .get("toolAllowlist")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    e.insert("toolAllowlist".into(), json!(tools));
    e.insert(
        "hasHandoffSchemas".into(),
        json!(manifest.get("handoff").is_some()),
    );
    if let Some(Value::Object(shape)) = manifest.get("memoryShape") {
        let flags: Map<String, Value> = ["scratchpad", "conversation", "longTerm"]
            .iter()
            .filter_map(|k| {
                shape
                    .get(*k)
                    .filter(|v| v.is_boolean())
                    .map(|v| ((*k).to_owned(), v.clone()))
            })
            .collect();
        e.insert("memoryShape".into(), Value::Object(flags));
    }
    if let Some(t) = manifest
        .pointer("/confidence/defaultThreshold")
        .and_then(Value::as_f64)
        && (0.0..=1.0).contains(&t)
    {
        e.insert("confidenceThreshold".into(), json!(t));
    }
    Value::Object(e)
}

/// `GET /v1/agents`: entries sorted by agentId, `total == agents.length`.
pub fn inventory(mut entries: Vec<Value>) -> Value {
    entries.sort_by(|a, b| {
        let id = |v: &Value| {
            v.get("agentId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        id(a).cmp(&id(b))
    });
    let total = entries.len();
    json!({ "agents": entries, "total": total })
}

/// Validate one inventory entry (the body of `GET /v1/agents/{agentId}`) against the entry
/// definition, by validating a one-entry inventory (the schema publishes the entry as a `$def`).
pub fn validate_entry(entry: &Value) -> Result<(), Vec<SchemaIssue>> {
    validate(
        Schema::AgentInventoryResponse,
        &json!({ "agents": [entry], "total": 1 }),
    )
    .map_err(|issues| {
        issues
            .into_iter()
            .map(|i| SchemaIssue {
                path: i.path.trim_start_matches("/agents/0").to_owned(),
                message: i.message,
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox_skill::check_skill;

    #[test]
    fn discovery_validates_and_mirrors_agents() {
        for nesting in [true, false] {
            let d = discovery(nesting);
            validate(Schema::Capabilities, &d).expect("discovery is a Capabilities document");
            assert_eq!(d["agents"]["manifestRuntime"]["supported"], json!(true));
            assert_eq!(d["capabilities"]["agents"], d["agents"]);
            let a = &d["agents"];
            // RFC 0086: the roster's scope equals the manifest runtime's; RFC 0087 requires the roster.
            assert_eq!(
                a["roster"]["installScope"],
                a["manifestRuntime"]["installScope"]
            );
            assert_eq!(a["orgChart"]["installScope"], a["roster"]["installScope"]);
            assert_eq!(a["roster"]["supported"], json!(true));
            assert_eq!(a["orgChart"]["departmentNesting"], json!(nesting));
        }
    }

    #[test]
    fn inventory_from_a_projected_skill_validates_and_hides_refs() {
        let doc = b"---\nname: taste\ndescription: Builds a taste profile.\nprovider: local\n---\nSECRET BODY\n";
        let checked = check_skill(doc, None, "local.skillbox").expect("valid skill");
        let entry = inventory_entry(&checked.manifest, "local.skillbox", "sha256:00");
        validate_entry(&entry).expect("entry validates");
        let inv = inventory(vec![entry.clone()]);
        validate(Schema::AgentInventoryResponse, &inv).expect("inventory validates");
        assert_eq!(inv["total"], json!(1));
        let text = inv.to_string();
        assert!(!text.contains("SECRET BODY"));
        assert!(!text.contains("systemPromptRef"));
        assert!(!text.contains("taskSchemaRef"));
        assert_eq!(entry["hasHandoffSchemas"], json!(true));
    }

    #[test]
    fn inventory_sorts_by_agent_id() {
        let inv = inventory(vec![json!({"agentId": "b"}), json!({"agentId": "a"})]);
        assert_eq!(inv["agents"][0]["agentId"], json!("a"));
        assert_eq!(inv["total"], json!(2));
    }
}
