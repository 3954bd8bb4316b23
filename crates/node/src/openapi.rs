//! The OpenAPI 3.1 document of the node's HTTP API, written by hand (it is the contract clients
//! read; a test walks the router and this document and checks they name the same routes and
//! methods).

use serde_json::{Value, json};
use skillbox_skill::openwop::{RETURN_SCHEMA_PATH, TASK_SCHEMA_PATH};

fn err(desc: &str) -> Value {
    json!({ "description": desc, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } })
}

fn ok_json(desc: &str, schema: Value) -> Value {
    json!({ "description": desc, "content": { "application/json": { "schema": schema } } })
}

fn r(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The Agent Skills name rule (1–64 of `[a-z0-9-]`, no leading, trailing or double `-`).
pub const SKILL_NAME_PATTERN: &str = "^[a-z0-9]+(-[a-z0-9]+)*$";
/// The source name rule (`/`-separated segments of `[A-Za-z0-9_.-]`, each starting with a
/// letter, digit or `_`).
pub const SOURCE_NAME_PATTERN: &str =
    "^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$";

fn path_param(name: &str, desc: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": desc, "schema": { "type": "string", "minLength": 1 } })
}

fn path_param_pattern(name: &str, desc: &str, pattern: &str, max: usize) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": desc,
            "schema": { "type": "string", "minLength": 1, "maxLength": max, "pattern": pattern } })
}

/// An operation with the error responses every protected route can give.
fn op(summary: &str, mut responses: serde_json::Map<String, Value>, public: bool) -> Value {
    if !public {
        responses.insert(
            "401".into(),
            err("Missing or wrong bearer token (`unauthenticated`)."),
        );
        responses.insert(
            "403".into(),
            err("A tenant token: this route is the node operator's (`forbidden`)."),
        );
    }
    let mut o = json!({ "summary": summary, "responses": responses });
    if public {
        o["security"] = json!([]);
    }
    o
}

/// An OpenWOP agent surface: any token reaches it (`x-skillbox-tenant`), and it answers for
/// the caller's owner only — another tenant's item is a 404 like a missing one.
fn tenant_op(summary: &str, responses: serde_json::Map<String, Value>) -> Value {
    let mut o = op(summary, responses, false);
    if let Some(r) = o["responses"].as_object_mut() {
        r.remove("403");
    }
    o["x-skillbox-tenant"] = json!(true);
    o
}

/// A JSON body that is refused whole: `validation_error` with `details.reason`.
fn agent_write(summary: &str, body: Value, created: Value, extra: Vec<(&str, Value)>) -> Value {
    let mut responses = map(vec![
        ("201", ok_json("Created.", created.clone())),
        ("200", ok_json("Replaced.", created)),
        (
            "400",
            err(
                "Refused, nothing stored (`validation_error`; `details.reason` names the rule: schema, roster_id_mismatch, tenant_mismatch, unknown_agent, skill_in_roster, duplicate_department, unknown_parent_department, nesting_disabled, department_cycle, duplicate_role, duplicate_member, unknown_roster_entry, unknown_department, unknown_role, self_report, unknown_manager, reports_to_cycle; `details.errors` the schema errors).",
            ),
        ),
        ("413", err("Body too large (`payload_too_large`).")),
        (
            "415",
            err("Not application/json (`unsupported_media_type`)."),
        ),
    ]);
    for (k, v) in extra {
        responses.insert(k.to_owned(), v);
    }
    let mut o = tenant_op(summary, responses);
    o["requestBody"] =
        json!({ "required": true, "content": { "application/json": { "schema": body } } });
    o
}

fn map(pairs: Vec<(&str, Value)>) -> serde_json::Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The roster and org-chart paths (RFC 0086/0087), read and management.
fn agent_paths() -> Value {
    json!({
            "/v1/agents/roster": { "get": tenant_op("The caller's standing roster (RFC 0086): rosterId-sorted, `total == roster.length`.", map(vec![
                ("200", ok_json("AgentRosterResponse.", r("AgentRoster"))),
                ("400", err("Unknown query parameter (`validation_error`).")),
            ])) },
            "/v1/agents/roster/{rosterId}": {
                "parameters": [path_param("rosterId", "A `host:<id>` roster id.")],
                "get": tenant_op("One of the caller's roster entries.", map(vec![
                    ("200", ok_json("AgentRosterEntry.", r("AgentRosterEntry"))),
                    ("404", err("No such entry for this tenant (`not_found`) — another tenant's answers the same.")),
                ]))
            },
            "/v1/agents/org-chart": { "get": tenant_op("The caller's org chart (RFC 0087), exactly the AgentOrgChart shape; empty until one is written.", map(vec![
                ("200", ok_json("AgentOrgChart.", r("AgentOrgChart"))),
                ("400", err("Unknown query parameter (`validation_error`).")),
            ])) },
            "/v1/agents/org-chart/{departmentId}": {
                "parameters": [
                    path_param("departmentId", "A department of the caller's chart."),
                    { "name": "recursive", "in": "query", "required": false, "description": "Include nested departments' members (default true).", "schema": { "type": "string", "enum": ["true", "false"] } }
                ],
                "get": tenant_op("The responsibility view: the department, its members (recursively by default) and the deduplicated union of their workflows.", map(vec![
                    ("200", ok_json("OrgChartResponsibilityView.", r("OrgChartResponsibilityView"))),
                    ("400", err("Bad `recursive` or unknown query parameter (`validation_error`).")),
                    ("404", err("No such department for this tenant (`not_found`).")),
                ]))
            },
            "/v1/host/skillbox/roster/{rosterId}": {
                "parameters": [path_param("rosterId", "The `host:<id>` roster id; must equal the body's.")],
                "put": agent_write(
                    "Write one of the caller's roster entries: the schema, rosterId path = body, owner = the caller's, agentRef an installed manifest that is not a skill, version xor channel, unique workflows.",
                    r("AgentRosterEntry"), r("AgentRosterEntry"), vec![]),
                "delete": tenant_op("Remove one of the caller's roster entries.", map(vec![
                    ("204", json!({ "description": "Removed." })),
                    ("404", err("No such entry for this tenant (`not_found`).")),
                    ("409", err("The entry is a member of the caller's org chart (`conflict`).")),
                ]))
            },
            "/v1/host/skillbox/org-chart": {
                "put": agent_write(
                    "Write the caller's whole org chart: closed schema (no authority-bearing field), members are the caller's roster entries, departments and roles exist, reportsTo names a member and is acyclic, departments nest as a tree (refused when nesting is off).",
                    r("AgentOrgChart"), r("AgentOrgChart"), vec![])
            }
    })
}

/// The document served at `GET /openapi.json`.
pub fn document() -> Value {
    let mut doc = base_document();
    add_calls(&mut doc);
    if let (Some(paths), Value::Object(more)) = (doc["paths"].as_object_mut(), agent_paths()) {
        paths.extend(more);
    }
    forbid_tenants(&mut doc);
    doc
}

/// Every operation a tenant token does not reach answers it 403: say so on each (the
/// hand-written operations included), so the document cannot drift from the router.
fn forbid_tenants(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            if method == "parameters"
                || op.get("security") == Some(&json!([]))
                || op.get("x-skillbox-tenant") == Some(&json!(true))
            {
                continue;
            }
            if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                responses.entry("403").or_insert_with(|| {
                    err("A tenant token: this route is the node operator's (`forbidden`).")
                });
            }
        }
    }
}

fn base_document() -> Value {
    let text = |desc: &str| json!({ "description": desc, "content": { "text/plain": { "schema": { "type": "string" } } } });
    let schema_doc = |desc: &str| json!({ "description": desc, "content": { "application/schema+json": { "schema": { "type": "object" } } } });
    let source_name = path_param_pattern(
        "name",
        "Source name; may contain `/` (e.g. `skill/<name>/body`), sent as is or percent-encoded.",
        SOURCE_NAME_PATTERN,
        crate::sources::MAX_NAME_LEN,
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "skillbox node API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of a skillbox node: skills, sources and the OpenWOP agent surfaces. Loopback only by default; bearer token from `<data_dir>/api.token`. Every error is `{error, message, details?}`."
        },
        "servers": [{ "url": "http://127.0.0.1:7420" }],
        "security": [{ "bearer": [] }],
        "paths": {
            "/healthz": { "get": op("Liveness: the API answers and the store is readable.", map(vec![
                ("200", ok_json("Healthy.", json!({ "type": "object", "required": ["status"], "properties": { "status": { "const": "ok" } } }))),
            ]), true) },
            "/.well-known/openwop": { "get": op("OpenWOP discovery (a Capabilities document; `agents` at the root and under `capabilities`).", map(vec![
                ("200", ok_json("Capabilities.", json!({ "type": "object", "required": ["protocolVersion", "supportedEnvelopes", "schemaVersions", "limits"] }))),
            ]), true) },
            "/openapi.json": { "get": op("This document.", map(vec![
                ("200", ok_json("OpenAPI 3.1 document.", json!({ "type": "object" }))),
            ]), true) },
            TASK_SCHEMA_PATH: { "get": op("The skill handoff task schema (`{request, sources}`), JSON Schema 2020-12.", map(vec![
                ("200", schema_doc("The task schema.")),
            ]), true) },
            RETURN_SCHEMA_PATH: { "get": op("The skill handoff return schema (`{answer, truncated}`), JSON Schema 2020-12.", map(vec![
                ("200", schema_doc("The return schema.")),
            ]), true) },
            "/metrics": { "get": op("Metrics in the OpenMetrics text format (prometheus-client): HTTP requests, calls by side and state, call/box/run latency histograms, skills, sources, board and peer gauges.", map(vec![
                ("200", text("Counters, histograms and gauges.")),
            ]), false) },
            "/node": { "get": op("This node's identity.", map(vec![
                ("200", ok_json("Node identity.", r("NodeInfo"))),
            ]), false) },
            "/v1/agents": { "get": tenant_op("OpenWOP agent inventory: every declared skill and pack agent as an AgentInventoryEntry, agentId-sorted, each with the caller's `roster[]` instances of it.", map(vec![
                ("200", ok_json("AgentInventoryResponse.", r("AgentInventory"))),
            ])) },
            "/v1/agents/{agentId}": {
                "parameters": [path_param("agentId", "The OpenWOP agentId (`<namespace>.<skill>`).")],
                "get": tenant_op("One agent's inventory entry.", map(vec![
                    ("200", ok_json("AgentInventoryEntry.", json!({ "type": "object" }))),
                    ("404", err("No such agent (`not_found`).")),
                ]))
            },
            "/skills": {
                "get": op("Every declared skill, with whether it is offered and why not.", map(vec![
                    ("200", ok_json("Skills.", r("SkillList"))),
                ]), false),
                "post": {
                    "summary": "Import a SKILL.md: the body becomes source `skill/<name>/body`, the declaration is stored (one transaction). Re-import replaces.",
                    "parameters": [{ "name": "name", "in": "query", "required": false, "description": "Fallback skill name when the front matter has none.", "schema": { "type": "string", "minLength": 1, "maxLength": 64, "pattern": SKILL_NAME_PATTERN } }],
                    "requestBody": { "required": true, "content": {
                        "text/markdown": { "schema": { "type": "string" } },
                        "text/plain": { "schema": { "type": "string" } },
                        "application/json": { "schema": { "type": "object", "description": "An OpenWOP pack.json (agents[]) or a bare AgentManifest: each role:\"skill\" agent with an inline systemPrompt becomes a skill (all or nothing); other agents are stored as pack agents (listed in /v1/agents, never offered); one invalid agent refuses the whole pack. The answer is {skills: [Imported], agents: [{agentId, role?, packName, packVersion, replaced}]}." } }
                    } },
                    "responses": {
                        "201": ok_json("Imported (a pack: `{skills, agents}`).", json!({ "oneOf": [r("Imported"), { "type": "object", "required": ["skills", "agents"] }] })),
                        "200": ok_json("Replaced an existing skill.", json!({ "oneOf": [r("Imported"), { "type": "object", "required": ["skills", "agents"] }] })),
                        "400": err("Invalid SKILL.md or malformed JSON (`validation_error`), or a manifest/pack that fails the OpenWOP schema (`pack_validation_failed`, details.errors = schema errors with paths)."),
                        "401": err("Missing or wrong bearer token."),
                        "403": err("A tenant token (`forbidden`)."),
                        "409": err("Another skill or pack agent already has this agentId (`conflict`)."),
                        "413": err("Body over the SKILL.md limit (`payload_too_large`)."),
                        "415": err("Not text/markdown, text/plain or application/json (`unsupported_media_type`).")
                    }
                }
            },
            "/skills/{name}": {
                "parameters": [path_param_pattern("name", "Skill name.", SKILL_NAME_PATTERN, 64)],
                "get": op("One skill: declaration, manifest, offer state, body source metadata — never the body.", map(vec![
                    ("200", ok_json("Skill.", r("SkillDetail"))),
                    ("404", err("No such skill.")),
                ]), false),
                "patch": {
                    "summary": "Set what the owner stakes for a skill: provider, model, key (a source name). A string sets a field, null clears it; a pack-imported skill is offered once these and its sources are present.",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": {
                        "type": "object", "additionalProperties": false,
                        "properties": {
                            "provider": { "type": ["string", "null"] }, "model": { "type": ["string", "null"] }, "key": { "type": ["string", "null"] }
                        }
                    } } } },
                    "responses": {
                        "200": ok_json("The skill after the change.", r("SkillDetail")),
                        "400": err("Unknown field or bad value (`validation_error`)."),
                        "401": err("Missing or wrong bearer token."),
                        "403": err("A tenant token (`forbidden`)."),
                        "404": err("No such skill."),
                        "415": err("Not application/json (`unsupported_media_type`).")
                    }
                },
                "delete": op("Remove a skill: its declaration and its body source.", map(vec![
                    ("204", json!({ "description": "Removed." })),
                    ("404", err("No such skill.")),
                ]), false)
            },
            "/board": { "get": op("What peers offer right now: one row per offered skill of every peer's newest unexpired advert.", map(vec![
                ("200", ok_json("The board.", r("Board"))),
                ("400", err("Unknown query parameter (`validation_error`).")),
                ("503", err("The peer network is not running (`peers_unavailable`).")),
            ]), false) },
            "/peers": {
                "get": op("This node's peer id and listen addresses, and the peers it is connected to.", map(vec![
                    ("200", ok_json("Peers.", r("PeerList"))),
                    ("503", err("The peer network is not running (`peers_unavailable`).")),
                ]), false),
                "post": {
                    "summary": "Dial a peer by multiaddr (`/p2p/<peer id>` may be omitted); answers once connected.",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": {
                        "type": "object", "required": ["addr"], "properties": { "addr": { "type": "string", "minLength": 1, "description": "A multiaddr, e.g. /ip4/127.0.0.1/tcp/4001." } }
                    } } } },
                    "responses": {
                        "200": ok_json("Connected.", json!({ "type": "object", "required": ["peer", "addr"], "properties": { "peer": { "type": "string" }, "addr": { "type": "string" } } })),
                        "400": err("Missing or malformed addr (`validation_error`)."),
                        "401": err("Missing or wrong bearer token."),
                        "403": err("A tenant token (`forbidden`)."),
                        "413": err("Body too large (`payload_too_large`)."),
                        "415": err("Not application/json (`unsupported_media_type`)."),
                        "502": err("The peer could not be reached (`dial_failed`)."),
                        "503": err("The peer network is not running (`peers_unavailable`).")
                    }
                }
            },
            "/sources": { "get": op("Every source: name, kind, size, digest — never content.", map(vec![
                ("200", ok_json("Sources.", r("SourceList"))),
            ]), false) },
            "/sources/{name}": {
                "parameters": [source_name],
                "get": op("One source's metadata (never content).", map(vec![
                    ("200", ok_json("Source metadata.", r("SourceMeta"))),
                    ("400", err("Bad source name (`validation_error`).")),
                    ("404", err("No such source.")),
                ]), false),
                "put": {
                    "summary": "Store or replace a source; the body is the content, encrypted at rest. Names under `skill/` are refused (skill import writes them).",
                    "parameters": [
                        { "name": "kind", "in": "query", "required": false, "description": "text | secret | file (or header X-Source-Kind). Default: text when UTF-8, file otherwise.", "schema": { "type": "string", "enum": ["text", "secret", "file"] } },
                        { "name": "shareable", "in": "query", "required": false, "description": "Mark the source as user data a call may stake (default false; never a secret).", "schema": { "type": "boolean" } }
                    ],
                    "requestBody": { "required": true, "content": { "*/*": { "schema": { "type": "string", "format": "binary" } } } },
                    "responses": {
                        "201": ok_json("Created.", r("SourceMeta")),
                        "200": ok_json("Replaced.", r("SourceMeta")),
                        "400": err("Bad name, kind or content (`validation_error`)."),
                        "401": err("Missing or wrong bearer token."),
                        "403": err("A tenant token (`forbidden`)."),
                        "413": err("Body over the source limit (`payload_too_large`).")
                    }
                },
                "patch": {
                    "summary": "Mark a source shareable (a call may stake it) or not, without its content.",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["shareable"], "additionalProperties": false, "properties": { "shareable": { "type": "boolean" } } } } } },
                    "responses": {
                        "200": ok_json("The source's metadata.", r("SourceMeta")),
                        "400": err("A secret or reserved source cannot be shareable (`validation_error`)."),
                        "401": err("Missing or wrong bearer token."),
                        "403": err("A tenant token (`forbidden`)."),
                        "404": err("No such source."),
                        "415": err("Not application/json.")
                    }
                },
                "delete": op("Remove a source.", map(vec![
                    ("204", json!({ "description": "Removed." })),
                    ("400", err("Bad source name.")),
                    ("404", err("No such source.")),
                ]), false)
            }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer", "description": "The operator's token in `<data_dir>/api.token` (every route, tenant `tenants.operator`), or a tenant token from `skillbox token add` (only the `x-skillbox-tenant` agent surfaces, scoped to its owner)." } },
            "schemas": {
                "Error": {
                    "type": "object", "required": ["error", "message"], "additionalProperties": false,
                    "properties": {
                        "error": { "type": "string", "minLength": 1, "description": "Machine-readable code: validation_error, pack_validation_failed, unauthenticated, forbidden, not_found, method_not_allowed, conflict, payload_too_large, unsupported_media_type, bad_request, internal_error, peers_unavailable, dial_failed." },
                        "message": { "type": "string", "minLength": 1 },
                        "details": { "type": "object", "description": "For validation errors: `errors: [{path|field, line?, message}]`." }
                    }
                },
                "NodeInfo": {
                    "type": "object", "required": ["nodeId", "publicKey", "version", "namespace"],
                    "properties": { "nodeId": { "type": "string" }, "publicKey": { "type": "string" }, "version": { "type": "string" }, "namespace": { "type": "string" } }
                },
                "OfferState": {
                    "type": "object", "required": ["offered", "reasons"],
                    "properties": { "offered": { "type": "boolean" }, "reasons": { "type": "array", "items": { "type": "string" } } }
                },
                "SkillSummary": {
                    "type": "object", "required": ["name", "agentId", "description", "requiredSources", "digest", "offered", "reasons"],
                    "properties": {
                        "name": { "type": "string" }, "agentId": { "type": "string" }, "description": { "type": "string" },
                        "provider": { "type": "string" }, "requiredSources": { "type": "array", "items": { "type": "string" } },
                        "digest": { "type": "string" }, "offered": { "type": "boolean" },
                        "reason": { "type": "string", "description": "Present when not offered: the reasons joined." },
                        "reasons": { "type": "array", "items": { "type": "string" } },
                        "createdAt": { "type": "integer" }, "updatedAt": { "type": "integer" }
                    }
                },
                "SkillList": {
                    "type": "object", "required": ["skills", "total"],
                    "properties": { "skills": { "type": "array", "items": r("SkillSummary") }, "total": { "type": "integer" } }
                },
                "SkillDetail": {
                    "type": "object", "required": ["name", "agentId", "digest", "declaration", "manifest", "state"],
                    "properties": {
                        "name": { "type": "string" }, "agentId": { "type": "string" }, "digest": { "type": "string" },
                        "declaration": { "type": "object" }, "manifest": { "type": "object" }, "state": r("OfferState"),
                        "warnings": { "type": "array" }, "bodySource": r("SourceMeta"),
                        "createdAt": { "type": "integer" }, "updatedAt": { "type": "integer" }
                    }
                },
                "Imported": {
                    "type": "object", "required": ["name", "agentId", "digest", "replaced", "state"],
                    "properties": {
                        "name": { "type": "string" }, "agentId": { "type": "string" }, "digest": { "type": "string" },
                        "replaced": { "type": "boolean" }, "state": r("OfferState"), "warnings": { "type": "array" }
                    }
                },
                "SourceMeta": {
                    "type": "object", "required": ["name", "kind", "size", "digest", "shareable"],
                    "properties": {
                        "name": { "type": "string" }, "kind": { "type": "string", "enum": ["text", "secret", "file"] },
                        "size": { "type": "integer", "minimum": 0 }, "digest": { "type": "string" },
                        "shareable": { "type": "boolean", "description": "Its human marked it as data a call may stake." },
                        "createdAt": { "type": "integer" }, "updatedAt": { "type": "integer" }
                    }
                },
                "SourceList": {
                    "type": "object", "required": ["sources", "total"],
                    "properties": { "sources": { "type": "array", "items": r("SourceMeta") }, "total": { "type": "integer" } }
                },
                "BoardRow": {
                    "type": "object", "required": ["peer", "skill", "description", "provider", "requiredSources", "age"],
                    "properties": {
                        "peer": { "type": "string", "description": "The offering peer's id." }, "skill": { "type": "string" },
                        "description": { "type": "string" }, "provider": { "type": "string" },
                        "requiredSources": { "type": "array", "items": { "type": "string" } },
                        "age": { "type": "integer", "minimum": 0, "description": "Seconds since the advert was made." }
                    }
                },
                "Board": {
                    "type": "object", "required": ["board", "peerCount"],
                    "properties": { "board": { "type": "array", "items": r("BoardRow") }, "peerCount": { "type": "integer", "minimum": 0 } }
                },
                "PeerInfo": {
                    "type": "object", "required": ["peer", "addresses", "listenAddrs"],
                    "properties": {
                        "peer": { "type": "string" }, "addresses": { "type": "array", "items": { "type": "string" } },
                        "listenAddrs": { "type": "array", "items": { "type": "string" } }, "agentVersion": { "type": "string" }
                    }
                },
                "PeerList": {
                    "type": "object", "required": ["peerId", "listenAddrs", "peers", "total"],
                    "properties": {
                        "peerId": { "type": "string" }, "listenAddrs": { "type": "array", "items": { "type": "string" } },
                        "peers": { "type": "array", "items": r("PeerInfo") }, "total": { "type": "integer" }
                    }
                },
                "AgentRosterEntry": {
                    "type": "object", "required": ["rosterId", "persona", "agentRef", "owner"],
                    "description": "OpenWOP AgentRosterEntry (agent-roster-entry.schema.json), closed."
                },
                "AgentRoster": {
                    "type": "object", "required": ["roster", "total"],
                    "description": "OpenWOP AgentRosterResponse (agent-roster-response.schema.json).",
                    "properties": { "roster": { "type": "array", "items": r("AgentRosterEntry") }, "total": { "type": "integer", "minimum": 0 } }
                },
                "AgentOrgChart": {
                    "type": "object", "required": ["owner", "departments", "members"],
                    "description": "OpenWOP AgentOrgChart (agent-org-chart.schema.json), closed: no authority-bearing field."
                },
                "OrgChartResponsibilityView": {
                    "type": "object", "required": ["department", "members", "responsibilities"],
                    "description": "OpenWOP OrgChartResponsibilityView (org-chart-responsibility-view.schema.json)."
                },
                "AgentInventory": {
                    "type": "object", "required": ["agents", "total"],
                    "description": "OpenWOP AgentInventoryResponse (agent-inventory-response.schema.json).",
                    "properties": { "agents": { "type": "array", "items": { "type": "object" } }, "total": { "type": "integer", "minimum": 0 } }
                }
            }
        }
    })
}

/// Calls, approvals and policy (§7, §9).
fn add_calls(doc: &mut Value) {
    let unavailable =
        || err("The peer network is not running, so neither are calls (`calls_unavailable`).");
    let id = path_param("id", "The call id.");
    let paths = json!({
        "/calls": {
            "get": op("Calls on both sides, newest first; filter by state, role, peer.", map(vec![
                ("200", ok_json("Calls.", json!({ "type": "object", "required": ["calls", "total"], "properties": { "calls": { "type": "array", "items": r("Call") }, "total": { "type": "integer" } } }))),
                ("400", err("Unknown parameter or value (`validation_error`).")),
                ("503", unavailable()),
            ]), false),
            "post": {
                "summary": "Start a call as caller: a peer's skill on the board right now, applied to the request and the chosen sources (omitted: the skill's requiredSources this node holds; []: none).",
                "requestBody": { "required": true, "content": { "application/json": { "schema": {
                    "type": "object", "required": ["peer", "skill", "request"], "additionalProperties": false,
                    "properties": { "peer": { "type": "string" }, "skill": { "type": "string" }, "request": { "type": "string" },
                                    "sources": { "type": "array", "items": { "type": "string" } } }
                } } } },
                "responses": {
                    "201": ok_json("The call, `requested`.", r("Call")),
                    "400": err("Bad body (`validation_error`), a source outside requiredSources (`source_not_required`), one this node does not hold (`source_not_held`), named twice (`duplicate_source`)."),
                    "401": err("Missing or wrong bearer token."),
                    "409": err("The skill is not on the board right now (`skill_not_offered`), or no box both sides accept (`no_common_box`)."),
                    "413": err("Body too large (`payload_too_large`)."),
                    "422": err("The skill requires sources and this node holds none of them (`required_sources_not_held`)."),
                    "503": unavailable()
                }
            }
        },
        "/calls/{id}": {
            "parameters": [id.clone()],
            "get": op("One call; on the caller's side with the answer once `answered`.", map(vec![
                ("200", ok_json("The call.", r("Call"))),
                ("404", err("No such call.")),
                ("503", unavailable()),
            ]), false)
        },
        "/calls/{id}/cancel": {
            "parameters": [id.clone()],
            "post": op("Fail the call here (`cancelled`), cancel its run, tell the peer.", map(vec![
                ("200", ok_json("The call.", r("Call"))),
                ("404", err("No such call.")),
                ("503", unavailable()),
            ]), false)
        },
        "/intents/skill": {
            "post": {
                "summary": "The skill intent: rank the skills the board offers right now (that this node could call) against the text by BM25 over name and description, and start a call on the best with sources omitted. Nothing below the score threshold is picked.",
                "requestBody": { "required": true, "content": { "application/json": { "schema": {
                    "type": "object", "required": ["text"], "additionalProperties": false,
                    "properties": { "text": { "type": "string" } } } } } },
                "responses": {
                    "201": ok_json("The pick and the call it started.", json!({ "type": "object", "required": ["skill", "peer", "score", "callId", "call"],
                        "properties": { "skill": { "type": "string" }, "peer": { "type": "string" }, "score": { "type": "number" },
                            "runnerUp": { "type": "object", "properties": { "skill": { "type": "string" }, "peer": { "type": "string" }, "score": { "type": "number" } } },
                            "callId": { "type": "string" }, "call": r("Call") } })),
                    "400": err("Bad body (`validation_error`)."),
                    "401": err("Missing or wrong bearer token."),
                    "409": err("Nothing on the board matches (`no_offered_skill`, details.reason `no_candidates` or `no_match` with the best score and the threshold)."),
                    "503": unavailable()
                }
            }
        },
        "/approvals": {
            "get": op("Calls waiting for this node's human (policy said `ask`).", map(vec![
                ("200", ok_json("Approvals.", json!({ "type": "object", "required": ["approvals", "total"], "properties": { "approvals": { "type": "array", "items": r("Call") }, "total": { "type": "integer" } } }))),
                ("503", unavailable()),
            ]), false)
        },
        "/approvals/{id}": {
            "parameters": [id],
            "post": {
                "summary": "Decide a parked call: `allow` submits, `deny` fails it (`consent_denied`).",
                "requestBody": { "required": true, "content": { "application/json": { "schema": {
                    "type": "object", "required": ["decision"], "additionalProperties": false,
                    "properties": {
                        "decision": { "type": "string", "enum": ["allow", "deny"] },
                        "remember": { "type": "boolean", "description": "Also record the decision as a policy rule for this peer, skill and source set." }
                    } } } } },
                "responses": {
                    "200": ok_json("The call.", r("Call")),
                    "400": err("Bad body (`validation_error`)."),
                    "401": err("Missing or wrong bearer token."),
                    "404": err("No such call."),
                    "409": err("The call is not awaiting consent (`not_awaiting_consent`)."),
                    "503": unavailable()
                }
            }
        },
        "/policy": {
            "get": op("The consent rules and admission in force.", map(vec![
                ("200", ok_json("Policy.", r("Policy"))),
                ("503", unavailable()),
            ]), false),
            "put": {
                "summary": "Replace the consent rules and admission (kept in the store; they win over config.toml).",
                "requestBody": { "required": true, "content": { "application/json": { "schema": r("Policy") } } },
                "responses": {
                    "200": ok_json("Policy.", r("Policy")),
                    "400": err("Bad policy (`validation_error`)."),
                    "401": err("Missing or wrong bearer token."),
                    "503": unavailable()
                }
            }
        },
        "/ledger": {
            "get": {
                "summary": "The disclosure ledger: every stake this node made into a box and every consent decision that allowed or refused one, in order, each hash-chained and signed with the node key. Names, size buckets and keyed digests only, never content. Never pruned with the calls.",
                "parameters": [
                    { "name": "source", "in": "query", "schema": { "type": "string" }, "description": "Entries naming this source." },
                    { "name": "peer", "in": "query", "schema": { "type": "string" } },
                    { "name": "call", "in": "query", "schema": { "type": "string" } },
                    { "name": "since", "in": "query", "schema": { "type": "string" }, "description": "Unix milliseconds, or a span back from now (`30m`, `24h`, `7d`)." },
                    { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 0 } },
                    { "name": "format", "in": "query", "schema": { "type": "string", "enum": ["json", "jsonl", "csv"] } }
                ],
                "responses": {
                    "200": {
                        "description": "The entries (JSON: with the node key they verify under; JSON Lines: one signed entry per line; CSV: one row per entry).",
                        "content": {
                            "application/json": { "schema": { "type": "object", "required": ["entries", "total", "nodeKey"], "properties": {
                                "entries": { "type": "array", "items": r("LedgerLine") }, "total": { "type": "integer" }, "nodeKey": { "type": "string" } } } },
                            "application/jsonl": { "schema": r("LedgerLine") },
                            "text/csv": { "schema": { "type": "string" } }
                        }
                    },
                    "400": err("Bad query (`validation_error`)."),
                    "401": err("Missing or wrong bearer token."),
                    "503": unavailable()
                }
            }
        },
        "/ledger/verify": {
            "get": op("Check the whole ledger: sequence, hashes, chain, signatures and the signed head. `ok: false` names the first entry that fails and why (`sequence_gap`, `hash_mismatch`, `broken_chain`, `bad_signature`, `truncated`, `bad_head`, `unreadable`).", map(vec![
                ("200", ok_json("The verdict.", json!({ "type": "object", "required": ["ok", "entries"], "properties": {
                    "ok": { "type": "boolean" }, "entries": { "type": "integer" }, "head": { "type": "string" },
                    "brokenAt": { "type": "integer" }, "reason": { "type": "string" } } }))),
                ("503", unavailable()),
            ]), false)
        }
    });
    let schemas = json!({
        "LedgerLine": {
            "type": "object",
            "required": ["seq", "at", "kind", "call", "role", "peer", "skill", "hardwareIsolation", "decision", "decidedBy", "sources", "prev", "hash", "sig"],
            "properties": {
                "seq": { "type": "integer" }, "at": { "type": "integer", "description": "Unix milliseconds." },
                "kind": { "type": "string", "enum": ["decision", "stake"] },
                "call": { "type": "string" }, "role": { "type": "string", "enum": ["caller", "owner"] },
                "peer": { "type": "string" }, "skill": { "type": "string" },
                "box": { "type": "string" }, "platform": { "type": "string" }, "measurement": { "type": "string" },
                "hardwareIsolation": { "type": "boolean" },
                "provider": { "type": "string" }, "providerHost": { "type": "string" },
                "decision": { "type": "string", "enum": ["allow", "deny"] },
                "decidedBy": { "type": "string", "description": "`rule:N`, `default`, `human`, `human+remember` or `unrecorded`." },
                "sources": { "type": "array", "items": { "type": "string" } },
                "items": { "type": "array", "items": { "type": "object", "required": ["stake", "sizeBucket", "digest"], "properties": {
                    "stake": { "type": "string", "enum": ["request", "source", "body", "model", "key"] },
                    "source": { "type": "string" }, "sizeBucket": { "type": "integer" }, "digest": { "type": "string" } } } },
                "prev": { "type": "string" }, "hash": { "type": "string" }, "sig": { "type": "string" }
            }
        },
        "Call": {
            "type": "object", "required": ["id", "role", "peer", "skill", "state", "sources", "createdAt", "progressedAt", "expiresAt"],
            "properties": {
                "id": { "type": "string" }, "role": { "type": "string", "enum": ["caller", "owner"] },
                "peer": { "type": "string" }, "skill": { "type": "string" },
                "state": { "type": "string", "enum": ["requested", "received", "accepted", "opened", "staked", "awaiting_consent", "submitting", "submitted", "answered", "ran", "failed"] },
                "programHash": { "type": "string" }, "runId": { "type": "string" }, "box": { "type": "string" },
                "attested": { "type": "object", "description": "The box as this side verified it.", "required": ["platform", "measurement", "hardwareIsolation"], "properties": {
                    "platform": { "type": "string" }, "measurement": { "type": "string" }, "hardwareIsolation": { "type": "boolean" } } },
                "sources": { "type": "array", "items": { "type": "string" } },
                "createdAt": { "type": "integer" }, "progressedAt": { "type": "integer" }, "expiresAt": { "type": "integer" },
                "failure": { "type": "object", "required": ["code", "message"], "properties": { "code": { "type": "string" }, "message": { "type": "string" } } },
                "receipt": { "type": "object" },
                "answer": { "type": "string" }
            }
        },
        "Policy": {
            "type": "object",
            "properties": {
                "default": { "type": "string", "enum": ["allow", "deny", "ask"] },
                "admission": { "type": "object", "properties": {
                    "allow_peers": { "type": "array", "items": { "type": "string" } },
                    "deny_peers": { "type": "array", "items": { "type": "string" } },
                    "calls_per_minute": { "type": "integer", "minimum": 0 } } },
                "rules": { "type": "array", "items": { "type": "object", "required": ["decision"], "properties": {
                    "side": { "type": "string", "enum": ["caller", "owner", "any"] },
                    "peer": { "type": "string" }, "skill": { "type": "string" },
                    "sources": { "type": "array", "items": { "type": "string" } },
                    "decision": { "type": "string", "enum": ["allow", "deny", "ask"] } } } }
            }
        }
    });
    if let (Some(p), Some(new)) = (doc["paths"].as_object_mut(), paths.as_object()) {
        p.extend(new.clone());
    }
    if let (Some(s), Some(new)) = (
        doc["components"]["schemas"].as_object_mut(),
        schemas.as_object(),
    ) {
        s.extend(new.clone());
    }
}
