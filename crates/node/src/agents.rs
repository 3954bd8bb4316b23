//! The OpenWOP agent records a node keeps beside its skills: pack agents that are not skills
//! (validated, listed in the inventory, never offered), roster entries (RFC 0086) and org charts
//! (RFC 0087). Roster entries and charts belong to an owner `{tenantId, workspaceId?}`; every
//! read and write here takes the caller's owner and sees nothing else, so another tenant's
//! item is absent exactly like a missing one. The rules themselves are pure, in
//! `skillbox_skill::agents`; this module only gives them the stored facts and writes what passes,
//! each change in one transaction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::store::Tx;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::{Value, json};
use skillbox_skill::agents::{
    self as rules, InstalledRole, OrgChart, Owner, RosterEntry, responsibility_view,
};

use crate::crypto::DataKey;
use crate::error::{NodeError, Result};
use crate::sources::{self, SourceKind};
use crate::store::{Store, now_secs};

/// Where a pack agent's inline `systemPrompt` is kept: `agent/<agentId>/prompt`.
pub fn prompt_source_name(agent_id: &str) -> String {
    format!("{}{agent_id}/prompt", sources::AGENT_PREFIX)
}

/// A pack agent that is not a skill, ready to store: its manifest carries a `systemPromptRef`
/// to the prompt source instead of the prompt.
#[derive(Clone)]
pub struct PackAgent {
    pub agent_id: String,
    pub role: Option<String>,
    pub manifest: Value,
    /// The inline prompt, moved out of the manifest (sealed into the source store on write).
    pub prompt: Option<String>,
    pub pack_name: String,
    pub pack_version: String,
}

impl std::fmt::Debug for PackAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The prompt is material: only its length.
        f.debug_struct("PackAgent")
            .field("agent_id", &self.agent_id)
            .field("role", &self.role)
            .field("prompt_len", &self.prompt.as_ref().map(String::len))
            .field("pack_name", &self.pack_name)
            .field("pack_version", &self.pack_version)
            .finish()
    }
}

/// What the import answers for a pack agent.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StoredAgent {
    #[serde(rename = "agentId")]
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(rename = "packName")]
    pub pack_name: String,
    #[serde(rename = "packVersion")]
    pub pack_version: String,
    pub replaced: bool,
}

/// A stored pack agent: manifest, pack name and version.
#[derive(Debug, Clone)]
pub struct PackAgentRecord {
    pub manifest: Value,
    pub pack_name: String,
    pub pack_version: String,
}

fn owner_key(o: &Owner) -> (&str, &str) {
    (&o.tenant_id, o.workspace_id.as_deref().unwrap_or(""))
}

/// Write pack agents inside the caller's transaction (a pack lands whole, skills included).
pub(crate) fn put_pack_agents_in(
    tx: &Tx<'_>,
    key: &DataKey,
    agents: &[PackAgent],
) -> Result<Vec<StoredAgent>> {
    let mut out = Vec::with_capacity(agents.len());
    for a in agents {
        let skill: Option<String> = tx
            .query_row(
                "SELECT name FROM skills WHERE agent_id = ?1",
                params![a.agent_id],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(skill) = skill {
            return Err(NodeError::Conflict(format!(
                "skill {skill:?} already has agentId {:?}",
                a.agent_id
            )));
        }
        let now = now_secs();
        let manifest = a.manifest.to_string();
        let row = params![
            a.agent_id,
            a.role,
            manifest,
            a.pack_name,
            a.pack_version,
            now
        ];
        let replaced = tx.execute(
            "UPDATE pack_agents SET role = ?2, manifest = ?3, pack_name = ?4, pack_version = ?5,
                 updated_at = ?6 WHERE agent_id = ?1",
            row,
        )? > 0;
        if !replaced {
            tx.execute(
                "INSERT INTO pack_agents (agent_id, role, manifest, pack_name, pack_version,
                     created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                row,
            )?;
        }
        let prompt_name = prompt_source_name(&a.agent_id);
        match &a.prompt {
            Some(p) => {
                sources::put_in(tx, key, &prompt_name, SourceKind::Text, p.as_bytes())?;
            }
            None => {
                // A re-import that now points elsewhere leaves no stale prompt behind.
                tx.execute("DELETE FROM sources WHERE name = ?1", params![prompt_name])?;
            }
        };
        out.push(StoredAgent {
            agent_id: a.agent_id.clone(),
            role: a.role.clone(),
            pack_name: a.pack_name.clone(),
            pack_version: a.pack_version.clone(),
            replaced,
        });
    }
    Ok(out)
}

/// Every installed manifest agentId and its role (skills and pack agents).
fn installed_in(c: &Connection) -> Result<HashMap<String, InstalledRole>> {
    let mut out = HashMap::new();
    let mut stmt = c.prepare("SELECT agent_id FROM skills")?;
    for id in stmt.query_map([], |r| r.get::<_, String>(0))? {
        out.insert(id?, InstalledRole::Skill);
    }
    let mut stmt = c.prepare("SELECT agent_id, role FROM pack_agents")?;
    for row in stmt.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
    })? {
        let (id, role) = row?;
        let role = match role.as_deref() {
            Some("assistant") => InstalledRole::Assistant,
            _ => InstalledRole::Unset,
        };
        out.insert(id, role);
    }
    Ok(out)
}

fn roster_in(c: &Connection, owner: &Owner) -> Result<Vec<RosterEntry>> {
    let (t, w) = owner_key(owner);
    let mut stmt = c.prepare(
        "SELECT roster_id, entry FROM roster WHERE tenant_id = ?1 AND workspace_id = ?2
         ORDER BY roster_id",
    )?;
    let rows: Vec<(String, String)> = stmt
        .query_map(params![t, w], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(|(id, entry)| {
            serde_json::from_str(&entry).map_err(|e| NodeError::stored_row("roster entry", &id, e))
        })
        .collect()
}

/// The roster ids `owner` holds: all a chart's members are checked against.
fn roster_ids_in(c: &Connection, owner: &Owner) -> Result<HashSet<String>> {
    let (t, w) = owner_key(owner);
    let mut stmt =
        c.prepare("SELECT roster_id FROM roster WHERE tenant_id = ?1 AND workspace_id = ?2")?;
    let ids = stmt
        .query_map(params![t, w], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

fn chart_in(c: &Connection, owner: &Owner) -> Result<Option<OrgChart>> {
    let (t, w) = owner_key(owner);
    let text: Option<String> = c
        .query_row(
            "SELECT chart FROM org_charts WHERE tenant_id = ?1 AND workspace_id = ?2",
            params![t, w],
            |r| r.get(0),
        )
        .optional()?;
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| NodeError::stored_row("org chart", &owner.tenant_id, e))
    })
    .transpose()
}

/// The node's agent records.
#[derive(Debug, Clone)]
pub struct Agents {
    store: Arc<Store>,
    nesting: bool,
    max_roster_entries: usize,
    max_departments: usize,
}

impl Agents {
    /// `max_roster_entries`: config `agents.max_roster_entries`, counted per tenant;
    /// `max_departments`: config `agents.max_departments`, per chart.
    pub fn new(
        store: Arc<Store>,
        department_nesting: bool,
        max_roster_entries: usize,
        max_departments: usize,
    ) -> Agents {
        Agents {
            store,
            nesting: department_nesting,
            max_roster_entries,
            max_departments,
        }
    }

    /// Whether org charts may nest departments (config `agents.department_nesting`).
    pub fn department_nesting(&self) -> bool {
        self.nesting
    }

    /// Every pack agent, agentId-sorted.
    pub fn pack_agents(&self) -> Result<Vec<PackAgentRecord>> {
        self.pack_agent_rows(None)
    }

    pub fn pack_agent(&self, agent_id: &str) -> Result<Option<PackAgentRecord>> {
        Ok(self.pack_agent_rows(Some(agent_id))?.pop())
    }

    fn pack_agent_rows(&self, id: Option<&str>) -> Result<Vec<PackAgentRecord>> {
        self.store.read(|c| {
            type Cols = (String, String, String, String);
            let map = |r: &rusqlite::Row<'_>| Cols::try_from(r);
            let base = "SELECT agent_id, manifest, pack_name, pack_version FROM pack_agents";
            let rows: Vec<(String, String, String, String)> = match id {
                Some(id) => c
                    .prepare(&format!("{base} WHERE agent_id = ?1"))?
                    .query_map(params![id], map)?
                    .collect::<rusqlite::Result<_>>()?,
                None => c
                    .prepare(&format!("{base} ORDER BY agent_id"))?
                    .query_map([], map)?
                    .collect::<rusqlite::Result<_>>()?,
            };
            rows.into_iter()
                .map(|(id, manifest, pack_name, pack_version)| {
                    Ok(PackAgentRecord {
                        manifest: serde_json::from_str(&manifest)
                            .map_err(|e| NodeError::stored_row("pack agent manifest", &id, e))?,
                        pack_name,
                        pack_version,
                    })
                })
                .collect()
        })
    }

    /// `PUT …/roster/{rosterId}` by `owner`: checked (schema, path = body, owner = caller,
    /// agentRef resolves to an installed manifest that is not a skill), then stored. Returns the
    /// entry and whether it was created (not replaced).
    pub fn put_roster(
        &self,
        owner: &Owner,
        path_id: &str,
        doc: &Value,
    ) -> Result<(RosterEntry, bool)> {
        self.store.write(|tx| {
            let installed = installed_in(tx)?;
            let entry = rules::check_roster_entry(doc, path_id, owner, |id| installed.get(id).copied())?;
            let text = serde_json::to_string(&entry).map_err(|e| NodeError::stored_row("roster entry", path_id, e))?;
            let (t, w) = owner_key(owner);
            let now = now_secs();
            let replaced = tx.execute(
                "UPDATE roster SET agent_id = ?4, entry = ?5, updated_at = ?6
                 WHERE tenant_id = ?1 AND workspace_id = ?2 AND roster_id = ?3",
                params![t, w, entry.roster_id, entry.agent_ref.agent_id, text, now],
            )? > 0;
            if !replaced {
                // Counted in the transaction that inserts, so concurrent writes of one tenant
                // cannot each see room for one more. Per tenant, not per workspace: a tenant
                // names its workspaces itself.
                let held: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM roster WHERE tenant_id = ?1",
                    params![t],
                    |r| r.get(0),
                )?;
                if usize::try_from(held).unwrap_or(usize::MAX) >= self.max_roster_entries {
                    return Err(NodeError::Conflict(format!(
                        "the tenant's roster holds its limit of {} entries (agents.max_roster_entries); remove one first",
                        self.max_roster_entries
                    )));
                }
                tx.execute(
                    "INSERT INTO roster (tenant_id, workspace_id, roster_id, agent_id, entry,
                         created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                    params![t, w, entry.roster_id, entry.agent_ref.agent_id, text, now],
                )?;
            }
            tracing::info!(tenant = %owner.tenant_id, roster_id = %entry.roster_id, replaced, "roster entry written");
            Ok((entry, !replaced))
        })
    }

    /// Remove one of `owner`'s roster entries. A member of the owner's org chart is refused
    /// (the chart would name an entry that no longer exists): take it out of the chart first.
    pub fn delete_roster(&self, owner: &Owner, roster_id: &str) -> Result<bool> {
        self.store.write(|tx| {
            let (t, w) = owner_key(owner);
            let exists = tx
                .query_row(
                    "SELECT 1 FROM roster WHERE tenant_id = ?1 AND workspace_id = ?2 AND roster_id = ?3",
                    params![t, w, roster_id],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            if !exists {
                return Ok(false);
            }
            if chart_in(tx, owner)?.is_some_and(|c| c.members.iter().any(|m| m.roster_id == roster_id)) {
                return Err(NodeError::Conflict(format!(
                    "{roster_id:?} is a member of the org chart; put a chart without it first"
                )));
            }
            tx.execute(
                "DELETE FROM roster WHERE tenant_id = ?1 AND workspace_id = ?2 AND roster_id = ?3",
                params![t, w, roster_id],
            )?;
            tracing::info!(tenant = %owner.tenant_id, %roster_id, "roster entry removed");
            Ok(true)
        })
    }

    /// `owner`'s roster, rosterId-sorted.
    pub fn roster(&self, owner: &Owner) -> Result<Vec<RosterEntry>> {
        self.store.read(|c| roster_in(c, owner))
    }

    pub fn roster_entry(&self, owner: &Owner, roster_id: &str) -> Result<Option<RosterEntry>> {
        Ok(self
            .roster(owner)?
            .into_iter()
            .find(|e| e.roster_id == roster_id))
    }

    /// The inventory's `roster[]` projection for `owner`: agentId → `{rosterId, persona,
    /// workflows}` of each of the owner's entries that instantiate it.
    pub fn roster_projection(&self, owner: &Owner) -> Result<HashMap<String, Vec<Value>>> {
        let mut out: HashMap<String, Vec<Value>> = HashMap::new();
        for e in self.roster(owner)? {
            out.entry(e.agent_ref.agent_id.clone())
                .or_default()
                .push(json!({
                    "rosterId": e.roster_id,
                    "persona": e.persona,
                    "workflows": e.workflows,
                }));
        }
        Ok(out)
    }

    /// `PUT /v1/host/skillbox/org-chart` by `owner`: the whole chart, checked against the
    /// schema and the owner's roster, then stored in place of the old one. Returns the chart and
    /// whether the owner had none before.
    pub fn put_chart(&self, owner: &Owner, doc: &Value) -> Result<(OrgChart, bool)> {
        // The whole check (schema over up to the body limit, then the graphs) runs on a read
        // connection, not in the store's one writer, which every call step and ledger entry
        // waits on. Inside the write only the members are held to the roster as it is then.
        let mine = self.store.read(|c| roster_ids_in(c, owner))?;
        let chart = rules::check_org_chart(doc, owner, self.nesting, self.max_departments, |id| {
            mine.contains(id).then(|| owner.clone())
        })?;
        self.store.write(|tx| {
            let mine = roster_ids_in(tx, owner)?;
            if let Some(gone) = chart.members.iter().find(|m| !mine.contains(&m.roster_id)) {
                // Removed since the check: refused as the check refuses a missing entry.
                return Err(rules::AgentsError::UnknownRosterEntry(gone.roster_id.clone()).into());
            }
            let text = serde_json::to_string(&chart)
                .map_err(|e| NodeError::stored_row("org chart", &owner.tenant_id, e))?;
            let (t, w) = owner_key(owner);
            let now = now_secs();
            let replaced = tx.execute(
                "UPDATE org_charts SET chart = ?3, updated_at = ?4 WHERE tenant_id = ?1 AND workspace_id = ?2",
                params![t, w, text, now],
            )? > 0;
            if !replaced {
                tx.execute(
                    "INSERT INTO org_charts (tenant_id, workspace_id, chart, updated_at) VALUES (?1, ?2, ?3, ?4)",
                    params![t, w, text, now],
                )?;
            }
            tracing::info!(tenant = %owner.tenant_id, departments = chart.departments.len(), members = chart.members.len(), "org chart written");
            Ok((chart, !replaced))
        })
    }

    /// `owner`'s org chart; an owner who never wrote one has the empty chart (so the read is
    /// always the schema's shape and never another owner's).
    pub fn chart(&self, owner: &Owner) -> Result<OrgChart> {
        Ok(self
            .store
            .read(|c| chart_in(c, owner))?
            .unwrap_or_else(|| OrgChart {
                owner: owner.clone(),
                departments: Vec::new(),
                members: Vec::new(),
            }))
    }

    /// The responsibility view of one of `owner`'s departments; `None` when it has none such.
    pub fn view(
        &self,
        owner: &Owner,
        department_id: &str,
        recursive: bool,
    ) -> Result<Option<Value>> {
        let (chart, roster) = self
            .store
            .read(|c| Ok((chart_in(c, owner)?, roster_in(c, owner)?)))?;
        let Some(chart) = chart else {
            return Ok(None);
        };
        let workflows: HashMap<String, Vec<String>> = roster
            .into_iter()
            .map(|e| (e.roster_id, e.workflows))
            .collect();
        Ok(responsibility_view(
            &chart,
            department_id,
            recursive,
            |id| workflows.get(id).cloned().unwrap_or_default(),
        ))
    }
}
