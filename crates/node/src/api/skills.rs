//! Skills: import (a SKILL.md or a pack), list, read, set what the owner stakes, remove.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;

use super::bodies::*;
use super::extract::{
    Doc, JsonBody, Media, NoSuchSkill, NotJson, Param, Removed, SkillPath, TooLarge, blocking,
    change_offered, json, media_type, named_routes, offering, query, read_body, read_one,
    remove_offered, written,
};
use super::{ApiError, AppState};
use crate::skills::{OwnerTokens, SkillDetail};

/// Media types `POST /skills` accepts for a SKILL.md.
pub const SKILL_MEDIA_TYPES: &[&str] = &["text/markdown", "text/plain", "text/x-markdown"];
/// Everything `POST /skills` takes: a SKILL.md, or a pack.json / AgentManifest as JSON.
const ACCEPTED_ON_POST_SKILLS: &[&str] = &[
    "text/markdown",
    "text/plain",
    "text/x-markdown",
    "application/json",
];

named_routes! {
    list "/skills" => list_skills(s)
        "Every declared skill, with whether it is offered and why not."
        ok(SkillList, "Skills.") = s.skills.list();
}

#[utoipa::path(
    post, path = "/skills",
    summary = "Import a SKILL.md: the body becomes source `skill/<name>/body`, the declaration is stored (one transaction). Re-import replaces.",
    description = "With `application/json`: an OpenWOP pack.json (agents[]) or a bare AgentManifest; each role:\"skill\" agent with an inline systemPrompt becomes a skill (all or nothing); other agents are stored as pack agents (listed in /v1/agents, never offered); one invalid agent refuses the whole pack.",
    params(("name" = Option<String>, Query, description = "Fallback skill name when the front matter has none.", pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64, min_length = 1)),
    request_body(content(
        (String = "text/markdown"),
        (String = "text/plain"),
        (Object = "application/json"),
    )),
    responses(
        (status = 201, description = "Imported (a pack: `{skills, agents}`).", body = SkillImported),
        (status = 200, description = "Replaced an existing skill (a pack: replaced every one).", body = SkillImported),
        (status = 400, description = "Invalid SKILL.md or malformed JSON (`validation_error`), or a manifest/pack that fails the OpenWOP schema (`pack_validation_failed`, details.errors = schema errors with paths)."),
        (status = 409, description = "Another skill or pack agent already has this agentId (`conflict`)."),
        (status = 413, description = "Body over the SKILL.md limit (`payload_too_large`)."),
        (status = 415, description = "Not text/markdown, text/plain or application/json (`unsupported_media_type`)."),
    )
)]
pub(super) async fn post_skill(
    State(s): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let q = query(&uri, &["name"])?;
    let media = media_type(&headers);
    if media.as_deref() == Some("application/json") {
        return post_pack(s, &headers, body).await;
    }
    if !media
        .as_deref()
        .is_some_and(|m| SKILL_MEDIA_TYPES.contains(&m))
    {
        return Err(ApiError::unsupported_media_type(
            media.as_deref(),
            ACCEPTED_ON_POST_SKILLS,
        ));
    }
    let bytes = read_body(body, &headers, s.limits.max_skill_bytes).await?;
    let fallback = q.get("name").cloned();
    let imported = offering(
        &s,
        |_| true,
        move |s| s.skills.import(&bytes, fallback.as_deref()),
    )
    .await?;
    Ok(written(!imported.replaced, SkillImported::Skill(imported)))
}

/// `POST /skills` with `application/json`: an OpenWOP pack.json (or a bare AgentManifest); its
/// `role:"skill"` agents are imported together, all or nothing.
pub(super) async fn post_pack(
    s: AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let doc: Value = json(
        headers,
        body,
        Media::Any,
        s.limits.max_skill_bytes,
        "malformed JSON",
    )
    .await?;
    if !doc.is_object() {
        return Err(ApiError::validation(
            "body",
            "expected a JSON object: a pack.json or an AgentManifest",
        ));
    }
    let plan = crate::pack::plan(&doc, s.skills.namespace())?;
    let (imported, agents) = offering(
        &s,
        |_| true,
        move |s| {
            let docs: Vec<(&[u8], Option<&str>)> = plan
                .skills
                .iter()
                .map(|(_, d)| (d.as_bytes(), None))
                .collect();
            s.skills.import_pack(&docs, &plan.agents)
        },
    )
    .await?;
    // 201 when the import created a skill or agent; 200 when it only replaced.
    let created = imported.iter().any(|i| !i.replaced) || agents.iter().any(|a| !a.replaced);
    Ok(written(
        created,
        SkillImported::Pack(PackImported {
            skills: imported,
            agents,
        }),
    ))
}

named_routes! {
    get "/skills/{name}" => get_skill(s, Param(name))
        "One skill: declaration, manifest, offer state, body source metadata — never the body."
        params(SkillPath) ok(SkillDetail, "Skill.") [NoSuchSkill]
        = "skill"(name) |n| s.skills.detail(n);
    /// `PATCH /skills/{name}` `{provider?, model?, key?, limits?, bodyMaxTokens?,
    /// modelContextTokens?}`: each a value to set or `null` to clear; what the owner stakes, so a
    /// pack-imported skill can be offered. `key` must name a secret source the node holds
    /// (`Skills::set`), refused in words that never repeat it. `bodyMaxTokens` /
    /// `modelContextTokens` are the skill's body allowance and remote model context
    /// (`skills::OwnerTokens`): null is the provider's default; checked against the provider the
    /// skill has after the change.
    patch "/skills/{name}" => patch_skill(s, Param(name), doc: Doc)
        "Set what the owner stakes for a skill: provider, model, key (the name of a secret source this node holds), limits (ceilings, each a whole number), bodyMaxTokens (the body allowance in tokens, 1 to 2^20: a remote provider is sent a body of at most that many bytes) and modelContextTokens (a remote model's context in tokens, 1 to 2^24, never for local: your model server's real context). A value sets a field, null clears it (the tokens back to the provider's defaults); a pack-imported skill is offered once these and its sources are present, and a remote skill once its body fits its allowance."
        params(SkillPath) request_body = SkillPatch
        ok(SkillDetail, "The skill after the change.")
        bad("Unknown field or bad value, a key that names no secret source of this node's, or a body allowance that with the box's notice, the frame and the smallest answer does not fit the model context (`validation_error` naming the field; the message never repeats a key).") [NoSuchSkill]
        let change = skill_change(&doc)?;
        = "skill"(name) |s, n| s.skills.set(n, &change);
    delete "/skills/{name}" => delete_skill(s, Param(name))
        "Remove a skill: its declaration and its body source."
        params(SkillPath) [NoSuchSkill]
        = "skill"(name) |s, n| s.skills.delete(n);
}

/// A `PATCH /skills/{name}` body read: the fields it sets or clears, each ceiling named among
/// them the owner's own (`SkillChange::limits`, merged in `Skills::set`'s transaction); a field
/// or value it does not take is a 400.
fn skill_change(doc: &Value) -> Result<crate::skills::SkillChange, ApiError> {
    let Some(obj) = doc.as_object() else {
        return Err(ApiError::validation(
            "body",
            "expected an object {provider?, model?, key?, limits?, bodyMaxTokens?, modelContextTokens?}",
        ));
    };
    let mut change = crate::skills::SkillChange::default();
    for (k, v) in obj {
        if k == "limits" {
            // Each ceiling given is set (a whole number) or cleared (null); the rest stay.
            let Some(fields) = v.as_object() else {
                return Err(ApiError::validation(
                    "limits",
                    "expected an object of ceilings (maxRequestBytes, maxSourceBytes, maxOutputBytes, callsPerPeerPerDay, callsPerDay)",
                ));
            };
            for (f, n) in fields {
                let n = match n {
                    Value::Null => None,
                    v => Some(
                        v.as_u64()
                            .filter(|n| *n <= skillbox_skill::Limits::MAX)
                            .ok_or_else(|| {
                                ApiError::validation(
                                    &format!("limits.{f}"),
                                    "must be a whole number (or null to clear it)",
                                )
                            })?,
                    ),
                };
                if !skillbox_skill::Limits::FIELDS.contains(&f.as_str()) {
                    return Err(ApiError::validation(
                        &format!("limits.{f}"),
                        format!(
                            "unknown ceiling (accepted: {})",
                            skillbox_skill::Limits::FIELDS.join(", ")
                        ),
                    ));
                }
                change.limits.push((f.clone(), n));
            }
            continue;
        }
        if k == OwnerTokens::BODY || k == OwnerTokens::CONTEXT {
            // A whole number of tokens sets it, null clears it to the provider's default; the
            // ranges and the fit with the provider are `Skills::set`'s.
            let n = match v {
                Value::Null => None,
                v => Some(v.as_u64().ok_or_else(|| {
                    ApiError::validation(
                        k,
                        "must be a whole number of tokens (or null for the provider's default)",
                    )
                })?),
            };
            if k == OwnerTokens::BODY {
                change.body_max_tokens = Some(n);
            } else {
                change.model_context_tokens = Some(n);
            }
            continue;
        }
        let v = match v {
            Value::Null => None,
            Value::String(t) => Some(t.clone()),
            _ => {
                return Err(ApiError::validation(
                    k,
                    "must be a string, or null to clear it",
                ));
            }
        };
        match k.as_str() {
            "provider" => change.provider = Some(v),
            "model" => change.model = Some(v),
            "key" => change.key = Some(v),
            other => {
                return Err(ApiError::validation(
                    other,
                    "unknown field (accepted: provider, model, key, limits, bodyMaxTokens, modelContextTokens)",
                ));
            }
        }
    }
    Ok(change)
}
