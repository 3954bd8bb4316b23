//! Roster and org chart rules (RFC 0086/0087 conformance shapes): attribution, tenants,
//! acyclic graphs, no authority-bearing field, deduplicated responsibilities.

use serde_json::{Value, json};
use skillbox_skill::Schema;
use skillbox_skill::agents::*;
use skillbox_skill::openwop;

fn acme() -> Owner {
    Owner {
        tenant_id: "acme".into(),
        workspace_id: None,
    }
}

fn installed(id: &str) -> Option<InstalledRole> {
    match id {
        "local.skillbox.helper" => Some(InstalledRole::Assistant),
        "local.skillbox.worker" => Some(InstalledRole::Unset),
        "local.skillbox.music-taste" => Some(InstalledRole::Skill),
        _ => None,
    }
}

fn entry(roster_id: &str, agent: &str) -> Value {
    json!({"rosterId": roster_id, "persona": "Helper", "agentRef": {"agentId": agent, "channel": "stable"},
           "workflows": ["triage", "billing"], "owner": {"tenantId": "acme"}})
}

#[test]
fn a_good_roster_entry_passes() {
    let e = check_roster_entry(
        &entry("host:helper", "local.skillbox.helper"),
        "host:helper",
        &acme(),
        installed,
    )
    .expect("ok");
    assert_eq!(e.agent_ref.channel.as_deref(), Some("stable"));
}

#[test]
fn roster_entry_refusals() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (entry("helper", "local.skillbox.helper"), "helper", "schema"), // not host:
        (
            json!({"rosterId": "host:h", "persona": "H", "agentRef": {"agentId": "local.skillbox.helper", "version": "1", "channel": "s"}, "owner": {"tenantId": "acme"}}),
            "host:h",
            "schema",
        ),
        (
            json!({"rosterId": "host:h", "persona": "H", "agentRef": {"agentId": "local.skillbox.helper"}, "owner": {"tenantId": "acme"}, "workflows": ["a", "a"]}),
            "host:h",
            "schema",
        ),
        (
            json!({"rosterId": "host:h", "persona": "H", "agentRef": {"agentId": "local.skillbox.helper"}, "owner": {"tenantId": "acme"}, "permissions": ["admin"]}),
            "host:h",
            "schema",
        ),
        (
            entry("host:helper", "local.skillbox.helper"),
            "host:other",
            "roster_id_mismatch",
        ),
        (
            entry("host:helper", "local.skillbox.nobody"),
            "host:helper",
            "unknown_agent",
        ),
        (
            entry("host:helper", "local.skillbox.music-taste"),
            "host:helper",
            "skill_in_roster",
        ),
    ];
    for (doc, path, reason) in cases {
        let e = check_roster_entry(&doc, path, &acme(), installed).expect_err(reason);
        assert_eq!(e.reason(), reason, "{e}");
    }
    let other = Owner {
        tenant_id: "globex".into(),
        workspace_id: None,
    };
    let e = check_roster_entry(
        &entry("host:helper", "local.skillbox.helper"),
        "host:helper",
        &other,
        installed,
    )
    .unwrap_err();
    assert_eq!(e.reason(), "tenant_mismatch");
}

/// A host's department limit, above every chart here but the one that tests it.
const MAX: usize = 1_000;

fn roster_owner(id: &str) -> Option<Owner> {
    match id {
        "host:ceo" | "host:cto" | "host:dev1" | "host:dev2" | "host:ops" => Some(acme()),
        "host:spy" => Some(Owner {
            tenant_id: "globex".into(),
            workspace_id: None,
        }),
        _ => None,
    }
}

fn chart() -> Value {
    json!({
        "owner": {"tenantId": "acme"},
        "departments": [
            {"departmentId": "exec", "name": "Executive", "parentDepartmentId": null, "roles": [{"roleId": "chief", "name": "Chief"}]},
            {"departmentId": "eng", "name": "Engineering", "parentDepartmentId": "exec", "roles": [{"roleId": "lead", "name": "Lead"}, {"roleId": "dev", "name": "Developer"}]},
            {"departmentId": "ops", "name": "Operations", "parentDepartmentId": "eng", "roles": [{"roleId": "sre", "name": "SRE"}]}
        ],
        "members": [
            {"rosterId": "host:ceo", "departmentId": "exec", "roleId": "chief", "reportsTo": null},
            {"rosterId": "host:cto", "departmentId": "eng", "roleId": "lead", "reportsTo": "host:ceo"},
            {"rosterId": "host:dev1", "departmentId": "eng", "roleId": "dev", "reportsTo": "host:cto"},
            {"rosterId": "host:dev2", "departmentId": "eng", "roleId": "dev", "reportsTo": "host:cto"},
            {"rosterId": "host:ops", "departmentId": "ops", "roleId": "sre", "reportsTo": "host:cto"}
        ]
    })
}

fn workflows(id: &str) -> Vec<String> {
    match id {
        "host:cto" => vec!["review".into(), "hiring".into()],
        "host:dev1" => vec!["review".into(), "build".into()],
        "host:dev2" => vec!["build".into()],
        "host:ops" => vec!["deploy".into(), "review".into()],
        _ => vec![],
    }
}

#[test]
fn a_good_chart_passes_and_validates_exactly() {
    let c = check_org_chart(&chart(), &acme(), true, MAX, roster_owner).expect("ok");
    assert_eq!(c.members.len(), 5);
    let served = serde_json::to_value(&c).expect("ser");
    assert!(openwop::validate(Schema::AgentOrgChart, &served).is_ok());
}

#[test]
fn chart_refusals_each_with_a_reason() {
    // Each case: the good chart with the field at one JSON pointer set (added where the chart
    // has none), and the reason.
    #[rustfmt::skip] // a table: one case a line
    let cases = [
        ("/members/0/reportsTo", json!("host:dev1"), "reports_to_cycle"),
        ("/members/2/reportsTo", json!("host:dev1"), "self_report"),
        ("/members/2/rosterId", json!("host:spy"), "unknown_roster_entry"),
        ("/members/2/rosterId", json!("host:ghost"), "unknown_roster_entry"),
        ("/members/2/departmentId", json!("sales"), "unknown_department"),
        ("/members/2/roleId", json!("chief"), "unknown_role"),
        ("/members/2/reportsTo", json!("host:nobody"), "unknown_manager"),
        ("/departments/0/parentDepartmentId", json!("ops"), "department_cycle"),
        ("/departments/1/parentDepartmentId", json!("nowhere"), "unknown_parent_department"),
        ("/departments/2/departmentId", json!("eng"), "duplicate_department"),
        ("/members/3/rosterId", json!("host:dev1"), "duplicate_member"),
        ("/members/1/permissions", json!(["approve"]), "schema"),
        ("/departments/0/scopes", json!(["*"]), "schema"),
        ("/owner", json!({"tenantId": "globex"}), "tenant_mismatch"),
    ];
    let cases = cases.map(|(pointer, value, reason)| {
        let (parent, key) = pointer.rsplit_once('/').expect("a JSON pointer");
        let mut c = chart();
        c.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .expect("the pointer's parent is an object")
            .insert(key.to_owned(), value);
        (c, reason)
    });
    for (doc, reason) in cases {
        let e = check_org_chart(&doc, &acme(), true, MAX, roster_owner).expect_err(reason);
        assert_eq!(e.reason(), reason, "{e}");
    }
    let e = check_org_chart(&chart(), &acme(), false, MAX, roster_owner).unwrap_err();
    assert_eq!(e.reason(), "nesting_disabled");
}

/// One department over the host's limit is refused by a reason of its own, naming the count and
/// the limit, before the schema is read: the chart here is otherwise not even valid.
#[test]
fn a_chart_over_the_department_limit_is_refused_naming_the_limit() {
    let mut doc = chart();
    let one = json!({"departmentId": "x", "name": "X", "roles": []});
    doc["departments"] = Value::Array(vec![one; 4]);
    let e = check_org_chart(&doc, &acme(), true, 3, roster_owner).expect_err("over the limit");
    assert_eq!(e.reason(), "too_many_departments", "{e}");
    assert_eq!(
        e.to_string(),
        "the chart has 4 departments, over this host's limit of 3"
    );
    let at = check_org_chart(&chart(), &acme(), true, 3, roster_owner).expect("3 is at the limit");
    assert_eq!(at.departments.len(), 3);
}

#[test]
fn responsibility_view_is_recursive_by_default_and_deduplicated() {
    let c = check_org_chart(&chart(), &acme(), true, MAX, roster_owner).expect("ok");
    let view = responsibility_view(&c, "eng", true, workflows).expect("eng exists");
    assert!(
        openwop::validate(Schema::OrgChartResponsibilityView, &view).is_ok(),
        "{view}"
    );
    assert_eq!(
        view["responsibilities"],
        json!(["review", "hiring", "build", "deploy"])
    );
    assert_eq!(
        view["members"].as_array().map(Vec::len),
        Some(4),
        "eng's 3 and ops' 1"
    );
    let flat = responsibility_view(&c, "eng", false, workflows).expect("eng exists");
    assert!(openwop::validate(Schema::OrgChartResponsibilityView, &flat).is_ok());
    assert_eq!(
        flat["responsibilities"],
        json!(["review", "hiring", "build"])
    );
    assert_eq!(flat["members"].as_array().map(Vec::len), Some(3));
    assert!(responsibility_view(&c, "sales", true, workflows).is_none());
    for v in [&view, &flat] {
        let text = v.to_string();
        for word in ["permission", "scope", "authority", "grant"] {
            assert!(!text.contains(word), "{word} in {text}");
        }
    }
}
