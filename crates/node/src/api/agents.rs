//! The OpenWOP agent surfaces (tenant tokens reach them): the inventory, each caller's roster and
//! org chart.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::bodies::*;
use super::extract::{
    Caller, Doc, JsonBody, NoQuery, NotJson, Param, Removed, TooLarge, UnknownQuery, Written,
    answers, blocking, flag, named_routes, query, read_one, removed, written,
};
use super::{ApiError, AppState, Shared};

/// The `{agentId}` of `GET /v1/agents/{agentId}` (read with [`Param`]), declared for the document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path, rename_all = "camelCase")]
#[allow(dead_code)] // the document's parameter; the handler reads it with `Param`
struct AgentPath {
    /// The OpenWOP agentId (`<namespace>.<skill>`).
    agent_id: String,
}

/// The `{rosterId}` of the roster routes (read with [`Param`]), declared once for the document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path, rename_all = "camelCase")]
#[allow(dead_code)] // the document's parameter; the handler reads it with `Param`
struct RosterPath {
    /// A `host:<id>` roster id.
    roster_id: String,
}

answers! {
    NoSuchAgent = 404, "No such agent (`not_found`).";
    /// A roster entry the caller does not hold.
    NoSuchEntry = 404, "No such entry for this tenant (`not_found`) — another tenant's answers the same.";
    /// What the roster and org-chart writes refuse (every rule they check).
    Refused = 400, "Refused, nothing stored (`validation_error`; `details.reason` names the rule: schema, roster_id_mismatch, tenant_mismatch, unknown_agent, skill_in_roster, duplicate_department, unknown_parent_department, nesting_disabled, department_cycle, duplicate_role, duplicate_member, unknown_roster_entry, unknown_department, unknown_role, self_report, unknown_manager, reports_to_cycle, too_many_departments (over `agents.max_departments`); `details.errors` the schema errors).";
}

/// Every installed manifest's inventory entry, each with the caller's `roster[]` projection.
pub(super) fn entries(
    s: &Shared,
    owner: &skillbox_skill::agents::Owner,
) -> crate::Result<Vec<Value>> {
    let ns = s.skills.namespace().to_owned();
    let mut roster = s.agents.roster_projection(owner)?;
    let mut out: Vec<Value> = s
        .skills
        .manifests()?
        .iter()
        .map(|(manifest, digest)| crate::openwop::inventory_entry(manifest, &ns, digest))
        .collect();
    out.extend(
        s.agents
            .pack_agents()?
            .iter()
            .map(|a| crate::openwop::inventory_entry(&a.manifest, &a.pack_name, &a.pack_version)),
    );
    for e in &mut out {
        let id = e["agentId"].as_str().unwrap_or_default().to_owned();
        e["roster"] = Value::Array(roster.remove(&id).unwrap_or_default());
    }
    Ok(out)
}

#[utoipa::path(
    get, path = "/v1/agents",
    summary = "OpenWOP agent inventory: every declared skill and pack agent as an AgentInventoryEntry, agentId-sorted, each with the caller's `roster[]` instances of it.",
    responses((status = 200, description = "AgentInventoryResponse.", body = AgentInventory))
)]
pub(super) async fn list_agents(
    State(s): State<AppState>,
    Caller(owner): Caller,
) -> Result<Json<Value>, ApiError> {
    let list = blocking(move || entries(&s, &owner)).await?;
    Ok(Json(crate::openwop::inventory(list)))
}

named_routes! {
    get "/v1/agents/{agentId}" => get_agent(s, Caller(owner), Param(id))
        "One agent's inventory entry."
        params(AgentPath) ok(AgentInventoryEntry, "AgentInventoryEntry.") as Value [NoSuchAgent]
        = "agent"(id) |id| {
            let entry = match s.skills.record_by_agent_id(id)? {
                Some(r) => Some(crate::openwop::inventory_entry(
                    &r.manifest,
                    s.skills.namespace(),
                    &r.digest,
                )),
                None => s.agents.pack_agent(id)?.map(|a| {
                    crate::openwop::inventory_entry(&a.manifest, &a.pack_name, &a.pack_version)
                }),
            };
            Ok(match entry {
                Some(mut e) => {
                    let mine = s.agents.roster_projection(&owner)?.remove(id);
                    e["roster"] = Value::Array(mine.unwrap_or_default());
                    Some(e)
                }
                None => None,
            })
        };
    get "/v1/agents/roster/{rosterId}" => get_roster_entry(s, Caller(owner), Param(id))
        "One of the caller's roster entries."
        params(RosterPath) ok(AgentRosterEntry, "AgentRosterEntry.") as Value [NoSuchEntry]
        = "roster entry"(id) |i| Ok(s.agents.roster_entry(&owner, i)?.map(|e| json!(e)));
}

/// The caller's whole documents (its roster, its org chart): [`Caller`] and [`NoQuery`] (whose
/// refusal, `UnknownQuery`, the table lists), read on the blocking pool for the caller's owner
/// and answered as JSON. A row says its path, name, summary, answer and read.
macro_rules! caller_documents {
    ($(
        get $path:literal => $name:ident
            $summary:literal
            ok($body:ident, $ok:literal) = |$s:ident, $owner:ident| $read:expr;
    )*) => {$(
        #[utoipa::path(
            get, path = $path,
            summary = $summary,
            responses((status = 200, description = $ok, body = $body), UnknownQuery)
        )]
        pub(super) async fn $name(
            State($s): State<AppState>,
            Caller($owner): Caller,
            _: NoQuery,
        ) -> Result<Json<Value>, ApiError> {
            Ok(Json(blocking(move || $read).await?))
        }
    )*};
}

caller_documents! {
    get "/v1/agents/roster" => list_roster
        "The caller's standing roster (RFC 0086): rosterId-sorted, `total == roster.length`."
        ok(AgentRoster, "AgentRosterResponse.") = |s, owner| {
            let roster = s.agents.roster(&owner)?;
            let total = roster.len();
            Ok(json!({ "roster": roster, "total": total }))
        };
    get "/v1/agents/org-chart" => get_org_chart
        "The caller's org chart (RFC 0087), exactly the AgentOrgChart shape; empty until one is written."
        ok(AgentOrgChart, "AgentOrgChart.") = |s, owner| Ok(json!(s.agents.chart(&owner)?));
}

#[utoipa::path(
    put, path = "/v1/host/skillbox/roster/{rosterId}",
    summary = "Write one of the caller's roster entries: the schema, rosterId path = body, owner = the caller's, agentRef an installed manifest that is not a skill, version xor channel, unique workflows.",
    params(("rosterId" = String, Path, description = "The `host:<id>` roster id; must equal the body's.")),
    request_body = AgentRosterEntry,
    responses(
        Written<AgentRosterEntry>,
        Refused,
        TooLarge,
        NotJson,
    )
)]
pub(super) async fn put_roster(
    State(s): State<AppState>,
    Caller(owner): Caller,
    Param(id): Param,
    JsonBody(doc, _): Doc,
) -> Result<Response, ApiError> {
    let (entry, created) = blocking(move || s.agents.put_roster(&owner, &id, &doc)).await?;
    Ok(written(created, json!(entry)))
}

#[utoipa::path(
    delete, path = "/v1/host/skillbox/roster/{rosterId}",
    summary = "Remove one of the caller's roster entries.",
    params(RosterPath),
    responses(
        Removed,
        NoSuchEntry,
        (status = 409, description = "The entry is a member of the caller's org chart (`conflict`)."),
    )
)]
pub(super) async fn delete_roster(
    State(s): State<AppState>,
    Caller(owner): Caller,
    Param(id): Param,
) -> Result<StatusCode, ApiError> {
    let i = id.clone();
    let done = blocking(move || s.agents.delete_roster(&owner, &i)).await?;
    removed(done, "roster entry", &id)
}

#[utoipa::path(
    put, path = "/v1/host/skillbox/org-chart",
    summary = "Write the caller's whole org chart: closed schema (no authority-bearing field), members are the caller's roster entries, departments and roles exist, reportsTo names a member and is acyclic, departments nest as a tree (refused when nesting is off).",
    request_body = AgentOrgChart,
    responses(
        Written<AgentOrgChart>,
        Refused,
        TooLarge,
        NotJson,
    )
)]
pub(super) async fn put_org_chart(
    State(s): State<AppState>,
    Caller(owner): Caller,
    JsonBody(doc, _): Doc,
) -> Result<Response, ApiError> {
    let (chart, created) = blocking(move || s.agents.put_chart(&owner, &doc)).await?;
    Ok(written(created, json!(chart)))
}

#[utoipa::path(
    get, path = "/v1/agents/org-chart/{departmentId}",
    summary = "The responsibility view: the department, its members (recursively by default) and the deduplicated union of their workflows.",
    params(
        ("departmentId" = String, Path, description = "A department of the caller's chart."),
        ("recursive" = Option<bool>, Query, description = "Include nested departments' members (default true)."),
    ),
    responses(
        (status = 200, description = "OrgChartResponsibilityView.", body = OrgChartResponsibilityView),
        (status = 400, description = "Bad `recursive` or unknown query parameter (`validation_error`)."),
        (status = 404, description = "No such department for this tenant (`not_found`)."),
    )
)]
pub(super) async fn get_department(
    State(s): State<AppState>,
    Caller(owner): Caller,
    Param(id): Param,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let q = query(&uri, &["recursive"])?;
    let recursive = flag(&q, "recursive", true)?;
    read_one("department", &id, move |d| {
        s.agents.view(&owner, d, recursive)
    })
    .await
}
