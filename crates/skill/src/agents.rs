//! OpenWOP roster (RFC 0086) and org chart (RFC 0087): the rules beyond the schema, pure.
//!
//! The schemas close every object (so no authority-bearing field such as `permissions` or
//! `scopes` can enter); these checks add what a schema cannot see: references that must
//! resolve, tenants that must match, graphs that must be acyclic. Position describes, it never
//! authorizes: nothing here grants anything.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::openwop::{self, Schema, SchemaIssue};

/// `{tenantId, workspaceId?}`: who owns a roster entry or an org chart.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    #[serde(rename = "tenantId")]
    pub tenant_id: String,
    #[serde(rename = "workspaceId", skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRef {
    #[serde(rename = "agentId")]
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RosterEntry {
    #[serde(rename = "rosterId")]
    pub roster_id: String,
    pub persona: String,
    #[serde(rename = "agentRef")]
    pub agent_ref: AgentRef,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<String>,
    pub owner: Owner,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    #[serde(rename = "roleId")]
    pub role_id: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Department {
    #[serde(rename = "departmentId")]
    pub department_id: String,
    pub name: String,
    #[serde(
        rename = "parentDepartmentId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub parent_department_id: Option<String>,
    pub roles: Vec<Role>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    #[serde(rename = "rosterId")]
    pub roster_id: String,
    #[serde(rename = "departmentId")]
    pub department_id: String,
    #[serde(rename = "roleId")]
    pub role_id: String,
    #[serde(rename = "reportsTo")]
    pub reports_to: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgChart {
    pub owner: Owner,
    pub departments: Vec<Department>,
    pub members: Vec<Member>,
}

/// Why a roster entry or org chart was refused. `reason()` is the stable `details.reason`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgentsError {
    #[error("does not match the OpenWOP schema: {}", issues.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Schema { issues: Vec<SchemaIssue> },
    #[error("the rosterId in the body ({body:?}) is not the one in the path ({path:?})")]
    RosterIdMismatch { path: String, body: String },
    #[error("owner {found:?} is not the caller's tenant")]
    TenantMismatch { found: String },
    #[error("agentRef.agentId {0:?} is not an installed manifest")]
    UnknownAgent(String),
    #[error("{0:?} is a role:\"skill\" manifest, which holds no roster presence (RFC 0131 §B)")]
    SkillInRoster(String),
    #[error("department {0:?} is listed twice")]
    DuplicateDepartment(String),
    #[error("department {department:?} names parent {parent:?}, which does not exist")]
    UnknownParentDepartment { department: String, parent: String },
    #[error("department nesting is disabled on this host, but {0:?} names a parent")]
    NestingDisabled(String),
    #[error("department nesting has a cycle through {0:?}")]
    DepartmentCycle(String),
    #[error("role {role:?} is listed twice in department {department:?}")]
    DuplicateRole { department: String, role: String },
    #[error("member {0:?} is listed twice")]
    DuplicateMember(String),
    #[error("member {0:?} is not a roster entry of this tenant")]
    UnknownRosterEntry(String),
    #[error("member {member:?} is in department {department:?}, which does not exist")]
    UnknownDepartment { member: String, department: String },
    #[error("member {member:?} has role {role:?}, which department {department:?} does not define")]
    UnknownRole {
        member: String,
        department: String,
        role: String,
    },
    #[error("member {0:?} reports to itself")]
    SelfReport(String),
    #[error("member {member:?} reports to {manager:?}, who is not a member of this chart")]
    UnknownManager { member: String, manager: String },
    #[error("reportsTo has a cycle through {0:?}")]
    ReportsToCycle(String),
    #[error("the chart has {count} departments, over this host's limit of {limit}")]
    TooManyDepartments { count: usize, limit: usize },
}

impl AgentsError {
    pub fn reason(&self) -> &'static str {
        match self {
            AgentsError::Schema { .. } => "schema",
            AgentsError::RosterIdMismatch { .. } => "roster_id_mismatch",
            AgentsError::TenantMismatch { .. } => "tenant_mismatch",
            AgentsError::UnknownAgent(_) => "unknown_agent",
            AgentsError::SkillInRoster(_) => "skill_in_roster",
            AgentsError::DuplicateDepartment(_) => "duplicate_department",
            AgentsError::UnknownParentDepartment { .. } => "unknown_parent_department",
            AgentsError::NestingDisabled(_) => "nesting_disabled",
            AgentsError::DepartmentCycle(_) => "department_cycle",
            AgentsError::DuplicateRole { .. } => "duplicate_role",
            AgentsError::DuplicateMember(_) => "duplicate_member",
            AgentsError::UnknownRosterEntry(_) => "unknown_roster_entry",
            AgentsError::UnknownDepartment { .. } => "unknown_department",
            AgentsError::UnknownRole { .. } => "unknown_role",
            AgentsError::SelfReport(_) => "self_report",
            AgentsError::UnknownManager { .. } => "unknown_manager",
            AgentsError::ReportsToCycle(_) => "reports_to_cycle",
            AgentsError::TooManyDepartments { .. } => "too_many_departments",
        }
    }
}

fn schema_then<T: for<'de> Deserialize<'de>>(
    schema: Schema,
    doc: &Value,
) -> Result<T, AgentsError> {
    openwop::validate(schema, doc).map_err(|issues| AgentsError::Schema { issues })?;
    // The schema closes every object, so a shape it accepts deserializes.
    serde_json::from_value(doc.clone()).map_err(|e| AgentsError::Schema {
        issues: vec![SchemaIssue {
            path: String::new(),
            message: e.to_string(),
        }],
    })
}

/// What the host knows of an installed manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstalledRole {
    Skill,
    Assistant,
    Unset,
}

/// Check a roster entry written at `PUT …/roster/{path_roster_id}` by `tenant`.
/// `installed` looks an agentId up among the tenant's installed manifests.
pub fn check_roster_entry(
    doc: &Value,
    path_roster_id: &str,
    tenant: &Owner,
    installed: impl Fn(&str) -> Option<InstalledRole>,
) -> Result<RosterEntry, AgentsError> {
    let entry: RosterEntry = schema_then(Schema::AgentRosterEntry, doc)?;
    if entry.roster_id != path_roster_id {
        return Err(AgentsError::RosterIdMismatch {
            path: path_roster_id.into(),
            body: entry.roster_id,
        });
    }
    if entry.owner != *tenant {
        return Err(AgentsError::TenantMismatch {
            found: entry.owner.tenant_id,
        });
    }
    match installed(&entry.agent_ref.agent_id) {
        None => Err(AgentsError::UnknownAgent(entry.agent_ref.agent_id)),
        Some(InstalledRole::Skill) => Err(AgentsError::SkillInRoster(entry.agent_ref.agent_id)),
        Some(_) => Ok(entry),
    }
}

/// Check a whole org chart written by `tenant`. `roster_owner` gives the owner of a roster entry
/// of this host (any tenant), so a member of another tenant is told apart from none at all —
/// both are refused with the same reason so the answer does not reveal another tenant's ids.
/// More than `max_departments` departments are refused before anything else is read of the
/// chart: a tenant writes it, and every later pass over it (the checks here, each view) is
/// bounded by that number, not by the body limit (1 MiB holds ~13,600 departments).
pub fn check_org_chart(
    doc: &Value,
    tenant: &Owner,
    nesting_allowed: bool,
    max_departments: usize,
    roster_owner: impl Fn(&str) -> Option<Owner>,
) -> Result<OrgChart, AgentsError> {
    let count = doc
        .get("departments")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if count > max_departments {
        return Err(AgentsError::TooManyDepartments {
            count,
            limit: max_departments,
        });
    }
    let chart: OrgChart = schema_then(Schema::AgentOrgChart, doc)?;
    if chart.owner != *tenant {
        return Err(AgentsError::TenantMismatch {
            found: chart.owner.tenant_id,
        });
    }
    let mut departments: HashMap<&str, &Department> = HashMap::new();
    for d in &chart.departments {
        if departments.insert(&d.department_id, d).is_some() {
            return Err(AgentsError::DuplicateDepartment(d.department_id.clone()));
        }
        let mut roles = HashSet::new();
        for r in &d.roles {
            if !roles.insert(&r.role_id) {
                return Err(AgentsError::DuplicateRole {
                    department: d.department_id.clone(),
                    role: r.role_id.clone(),
                });
            }
        }
    }
    for d in &chart.departments {
        if let Some(parent) = &d.parent_department_id {
            if !nesting_allowed {
                return Err(AgentsError::NestingDisabled(d.department_id.clone()));
            }
            if !departments.contains_key(parent.as_str()) {
                return Err(AgentsError::UnknownParentDepartment {
                    department: d.department_id.clone(),
                    parent: parent.clone(),
                });
            }
        }
    }
    if let Some(at) = find_cycle(departments.keys().copied(), |id| {
        departments
            .get(id)
            .and_then(|d| d.parent_department_id.as_deref())
    }) {
        return Err(AgentsError::DepartmentCycle(at.to_owned()));
    }
    let mut members: HashMap<&str, &Member> = HashMap::new();
    for m in &chart.members {
        if members.insert(&m.roster_id, m).is_some() {
            return Err(AgentsError::DuplicateMember(m.roster_id.clone()));
        }
        if roster_owner(&m.roster_id).as_ref() != Some(tenant) {
            return Err(AgentsError::UnknownRosterEntry(m.roster_id.clone()));
        }
        let Some(dept) = departments.get(m.department_id.as_str()) else {
            return Err(AgentsError::UnknownDepartment {
                member: m.roster_id.clone(),
                department: m.department_id.clone(),
            });
        };
        if !dept.roles.iter().any(|r| r.role_id == m.role_id) {
            return Err(AgentsError::UnknownRole {
                member: m.roster_id.clone(),
                department: m.department_id.clone(),
                role: m.role_id.clone(),
            });
        }
    }
    for m in &chart.members {
        match &m.reports_to {
            Some(manager) if *manager == m.roster_id => {
                return Err(AgentsError::SelfReport(m.roster_id.clone()));
            }
            Some(manager) if !members.contains_key(manager.as_str()) => {
                return Err(AgentsError::UnknownManager {
                    member: m.roster_id.clone(),
                    manager: manager.clone(),
                });
            }
            _ => {}
        }
    }
    if let Some(at) = find_cycle(members.keys().copied(), |id| {
        members.get(id).and_then(|m| m.reports_to.as_deref())
    }) {
        return Err(AgentsError::ReportsToCycle(at.to_owned()));
    }
    Ok(chart)
}

/// In a graph where each node has at most one successor, a node on a cycle, if any.
fn find_cycle<'a>(
    nodes: impl Iterator<Item = &'a str>,
    next: impl Fn(&str) -> Option<&'a str>,
) -> Option<&'a str> {
    let mut done: HashSet<&str> = HashSet::new();
    let mut starts: Vec<&str> = nodes.collect();
    starts.sort_unstable(); // deterministic error messages
    for start in starts {
        // A set, not a scan of the path: a chart of one long chain (a tenant's 1 MiB body holds
        // ~16k departments) cost a quadratic scan inside the store's one writer.
        let mut path: HashSet<&str> = HashSet::new();
        let mut at = Some(start);
        while let Some(id) = at {
            if done.contains(id) {
                break;
            }
            if !path.insert(id) {
                return Some(id);
            }
            at = next(id);
        }
        done.extend(path);
    }
    None
}

/// The responsibility view of one department: the department, its members (and, when
/// `recursive`, those of every department nested under it), and the deduplicated union of their
/// roster entries' workflows, in first-seen order. `None` when the department does not exist.
pub fn responsibility_view(
    chart: &OrgChart,
    department_id: &str,
    recursive: bool,
    workflows_of: impl Fn(&str) -> Vec<String>,
) -> Option<Value> {
    let department = chart
        .departments
        .iter()
        .find(|d| d.department_id == department_id)?;
    let included = if recursive {
        departments_under(chart, department_id).0
    } else {
        HashSet::from([department_id])
    };
    let members: Vec<&Member> = chart
        .members
        .iter()
        .filter(|m| included.contains(m.department_id.as_str()))
        .collect();
    let mut seen = HashSet::new();
    let mut responsibilities = Vec::new();
    for m in &members {
        for w in workflows_of(&m.roster_id) {
            if seen.insert(w.clone()) {
                responsibilities.push(w);
            }
        }
    }
    Some(serde_json::json!({
        "department": department,
        "members": members,
        "responsibilities": responsibilities,
    }))
}

/// `root` and every department nested under it, with how many department entries were looked
/// at to find them (the walk's work, which a test bounds), in time linear in the chart: the
/// children of each department are gathered in one pass, then walked from `root` with a stack.
/// (Growing the set by rescanning every department until a pass added none took a pass per
/// level: a chain of 13,601 departments listed child-first cost a minute of a core per view,
/// on a tenant's GET.)
/// The chart is acyclic (`check_org_chart`), and a department already taken in is not walked
/// again, so a stored chart that were not still ends.
fn departments_under<'a>(chart: &'a OrgChart, root: &'a str) -> (HashSet<&'a str>, usize) {
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for d in &chart.departments {
        if let Some(parent) = d.parent_department_id.as_deref() {
            children.entry(parent).or_default().push(&d.department_id);
        }
    }
    let mut looked_at = chart.departments.len();
    let mut included = HashSet::from([root]);
    let mut stack = vec![root];
    while let Some(at) = stack.pop() {
        for &child in children.get(at).into_iter().flatten() {
            looked_at += 1;
            if included.insert(child) {
                stack.push(child);
            }
        }
    }
    (included, looked_at)
}

#[cfg(test)]
mod tests {
    use super::{departments_under, find_cycle};
    use std::collections::HashMap;

    /// A long chain (what a tenant's largest chart can be) has no cycle, and the same chain
    /// closed on itself has one, found on it; a node leading into a cycle is not on it.
    #[test]
    fn cycles_are_found_on_long_chains() {
        let ids: Vec<String> = (0..20_000).map(|i| format!("d{i:05}")).collect();
        let mut next: HashMap<&str, &str> = ids
            .windows(2)
            .map(|w| (w[0].as_str(), w[1].as_str()))
            .collect();
        fn of<'a>(next: &HashMap<&'a str, &'a str>, id: &str) -> Option<&'a str> {
            next.get(id).copied()
        }
        assert_eq!(
            find_cycle(ids.iter().map(String::as_str), |id| of(&next, id)),
            None
        );
        next.insert(ids[19_999].as_str(), ids[100].as_str());
        let found =
            find_cycle(ids.iter().map(String::as_str), |id| of(&next, id)).expect("a cycle");
        let pos = ids.iter().position(|i| i == found).expect("known");
        assert!(pos >= 100, "{found} leads into the cycle, not on it");
    }

    /// A chart of 13,601 departments chained child-first (review 25 T1: the largest a 1 MiB
    /// body holds, `d13600 → … → d1 → d0` listed in that order) is viewed from its root by
    /// looking at each department at most twice: once to gather children, once as a child.
    #[test]
    fn a_reversed_chain_of_departments_is_viewed_in_linear_time() {
        let n = 13_601;
        let departments = (0..n)
            .rev()
            .map(|i| super::Department {
                department_id: format!("d{i}"),
                name: format!("D{i}"),
                parent_department_id: (i > 0).then(|| format!("d{}", i - 1)),
                roles: Vec::new(),
            })
            .collect();
        let chart = super::OrgChart {
            owner: super::Owner {
                tenant_id: "acme".into(),
                workspace_id: None,
            },
            departments,
            members: Vec::new(),
        };
        let (under, looked_at) = departments_under(&chart, "d0");
        assert_eq!(under.len(), n, "every department is under d0");
        assert!(
            looked_at <= 2 * n,
            "looked at {looked_at} department entries for {n} departments"
        );
        let (under, looked_at) = departments_under(&chart, "d13600");
        assert_eq!(under.len(), 1);
        assert!(looked_at <= 2 * n, "{looked_at}");
    }
}
