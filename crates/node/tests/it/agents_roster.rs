//! Tenants, the roster (RFC 0086) and the org chart (RFC 0087) through the real router of a
//! node opened on disk, mirroring OpenWOP's conformance scenarios: shapes validate exactly,
//! attribution, cross-tenant 404s, acyclic graphs, deduplicated responsibilities, no
//! authority-bearing field, and every refusal a 400 with `details.reason` that stores nothing.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use skillbox_node::{DataDir, Node};
use skillbox_skill::Schema;
use skillbox_skill::openwop::validate;

/// A node with two tenant tokens: acme/growth (the fixtures' owner) and globex.
struct Env {
    _dir: tempfile::TempDir,
    node: Node,
    router: axum::Router,
    operator: String,
    acme: String,
    globex: String,
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/openwop/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: Value = serde_json::from_str(&text).expect("fixture JSON");
    // Wire fixtures wrap the document; manifest fixtures are the document.
    v.get("document").cloned().unwrap_or(v)
}

fn env_with(edit_config: impl FnOnce(String) -> String) -> Env {
    let dir = common::init_dir();
    let config = DataDir::new(dir.path()).config();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, edit_config(text)).expect("write config");
    let acme = skillbox_node::tenants::add_token(&config, "acme", Some("growth")).expect("acme");
    let globex = skillbox_node::tenants::add_token(&config, "globex", None).expect("globex");
    let node = Node::open(dir.path()).expect("open");
    let operator = DataDir::new(dir.path()).load_api_token().expect("token");
    let router = node.router();
    Env {
        _dir: dir,
        node,
        router,
        operator,
        acme,
        globex,
    }
}

fn env() -> Env {
    env_with(|t| t)
}

impl Env {
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let req = match body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(v.to_string())),
            None => b.body(Body::empty()),
        }
        .expect("request");
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("router is infallible");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let v = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON answer")
        };
        (status, v)
    }

    async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        self.call("GET", path, Some(token), None).await
    }

    async fn put(&self, path: &str, token: &str, body: &Value) -> (StatusCode, Value) {
        self.call("PUT", path, Some(token), Some(body)).await
    }

    /// The operator imports a published-shape pack: an assistant (inline prompt), an agent
    /// without a role (a prompt ref), and a skill agent.
    async fn import_pack(&self) {
        let (status, body) = self
            .call("POST", "/skills", Some(&self.operator), Some(&pack()))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
}

fn manifest(id: &str, role: Option<&str>, prompt: Option<&str>) -> Value {
    let mut a = json!({
        "agentId": id, "persona": "Writer", "modelClass": "general",
        "memoryShape": {"scratchpad": true, "conversation": false, "longTerm": false},
        "toolAllowlist": []
    });
    if let Some(r) = role {
        a["role"] = json!(r);
        if r == "skill" {
            a["handoff"] = json!({"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"});
        }
    }
    match prompt {
        Some(p) => a["systemPrompt"] = json!(p),
        None => a["systemPromptRef"] = json!("prompts/x.md"),
    }
    a
}

fn pack() -> Value {
    json!({
        "name": "core.openwop.agents", "version": "1.2.0", "engines": {"openwop": ">=1.0 <2.0.0"},
        "runtime": {"language": "remote", "entry": "https://example.invalid/agents"},
        "agents": [
            manifest("core.openwop.agents.brief-writer", Some("assistant"), Some("BRIEFPROMPT write briefs")),
            manifest("core.openwop.agents.cmo", None, None),
            manifest("core.openwop.agents.copy-check", Some("skill"), Some("SKILLPROMPT check the copy")),
        ]
    })
}

fn entry(id: &str, agent: &str, workflows: &[&str], owner: Value) -> Value {
    json!({"rosterId": id, "persona": id.trim_start_matches("host:"), "agentRef": {"agentId": agent},
           "workflows": workflows, "owner": owner})
}

fn acme_owner() -> Value {
    json!({"tenantId": "acme", "workspaceId": "growth"})
}

/// Where acme writes (and removes) Sally's roster entry.
const SALLY: &str = "/v1/host/skillbox/roster/host:sally-marketing";

/// Sally's roster entry as the fixture has it, naming the pack's brief-writer (an assistant).
fn sally() -> Value {
    let mut sally = fixture("roster-entry.good.json");
    sally["agentRef"]["agentId"] = json!("core.openwop.agents.brief-writer");
    sally
}

/// The fixtures' two members, as acme/growth roster entries.
async fn sally_and_morgan(e: &Env) {
    let (status, body) = e
        .put(SALLY, &e.acme, &fixture("roster-entry.good.json"))
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "brief-writer is not installed yet: {body}"
    );
    assert_eq!(body["details"]["reason"], json!("unknown_agent"), "{body}");
    e.import_pack().await;
    let sally = sally();
    let (status, body) = e.put(SALLY, &e.acme, &sally).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body, sally, "the stored entry is served as written");
    let (status, _) = e
        .put(
            "/v1/host/skillbox/roster/host:morgan-cmo",
            &e.acme,
            &entry(
                "host:morgan-cmo",
                "core.openwop.agents.cmo",
                &["quarterly-plan", "marketing-email-campaign"],
                acme_owner(),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

fn collect_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                collect_keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_keys(x, out)),
        _ => {}
    }
}

/// No authority-bearing field anywhere in a served body (RFC 0087 §B).
fn assert_no_authority(v: &Value) {
    let mut keys = Vec::new();
    collect_keys(v, &mut keys);
    for k in keys {
        let lower = k.to_ascii_lowercase();
        for word in [
            "permission",
            "scope",
            "authority",
            "candispatch",
            "grant",
            "role_",
        ] {
            assert!(
                !lower.contains(word),
                "authority-bearing field {k:?} in {v}"
            );
        }
    }
}

#[tokio::test]
async fn roster_shape_and_attribution() {
    let e = env();
    sally_and_morgan(&e).await;
    // Replacing answers 200 and keeps one entry.
    let (status, _) = e.put(SALLY, &e.acme, &sally()).await;
    assert_eq!(status, StatusCode::OK);

    let (status, roster) = e.get("/v1/agents/roster", &e.acme).await;
    assert_eq!(status, StatusCode::OK);
    validate(Schema::AgentRosterResponse, &roster).expect("roster response validates");
    let list = roster["roster"].as_array().expect("array");
    assert_eq!(roster["total"], json!(list.len()), "total == roster.length");
    assert_eq!(list.len(), 2);
    let ids: Vec<&str> = list
        .iter()
        .map(|x| x["rosterId"].as_str().expect("id"))
        .collect();
    assert_eq!(
        ids,
        vec!["host:morgan-cmo", "host:sally-marketing"],
        "rosterId-sorted"
    );
    let (_, inventory) = e.get("/v1/agents", &e.acme).await;
    validate(Schema::AgentInventoryResponse, &inventory).expect("inventory validates");
    for x in list {
        assert!(x["rosterId"].as_str().expect("id").starts_with("host:"));
        assert_eq!(x["owner"], acme_owner(), "owner is the caller's");
        // agentRef resolves to an installed manifest listed in the inventory.
        let agent = x["agentRef"]["agentId"].as_str().expect("agentId");
        let (status, one) = e.get(&format!("/v1/agents/{agent}"), &e.acme).await;
        assert_eq!(status, StatusCode::OK, "{agent}");
        skillbox_node::openwop::validate_entry(&one).expect("entry validates");
        // The inventory projects this instance onto its manifest (attribution).
        let projected = one["roster"].as_array().expect("roster[] projection");
        assert!(
            projected.iter().any(|p| p["rosterId"] == x["rosterId"]
                && p["persona"] == x["persona"]
                && p["workflows"] == x["workflows"]),
            "{one}"
        );
        let (status, single) = e
            .get(
                &format!("/v1/agents/roster/{}", x["rosterId"].as_str().expect("id")),
                &e.acme,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        validate(Schema::AgentRosterEntry, &single).expect("entry validates");
        assert_eq!(&single, x);
    }
    // Another tenant sees the same manifests but none of acme's instances.
    let (_, theirs) = e.get("/v1/agents", &e.globex).await;
    validate(Schema::AgentInventoryResponse, &theirs).expect("inventory validates");
    assert_eq!(theirs["total"], inventory["total"]);
    for a in theirs["agents"].as_array().expect("agents") {
        assert_eq!(a["roster"], json!([]), "{a}");
    }
    assert_no_authority(&roster);
    assert_no_authority(&inventory);
}

#[tokio::test]
async fn another_tenants_entry_and_department_are_404_like_missing_ones() {
    let e = env();
    sally_and_morgan(&e).await;
    let chart = fixture("org-chart.agent-org-chart-shape-CHART.json");
    let (status, body) = e.put("/v1/host/skillbox/org-chart", &e.acme, &chart).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    for (path, missing) in [
        (
            "/v1/agents/roster/host:sally-marketing",
            "/v1/agents/roster/host:nobody",
        ),
        (
            "/v1/agents/org-chart/dept-marketing",
            "/v1/agents/org-chart/dept-nowhere",
        ),
    ] {
        let (status, theirs) = e.get(path, &e.globex).await;
        let (status_missing, none) = e.get(missing, &e.globex).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {theirs}");
        assert_eq!(status_missing, StatusCode::NOT_FOUND);
        common::assert_envelope(&theirs, "not_found");
        // Same shape and words, only the id differs.
        let strip = |v: &Value, id: &str| v["message"].as_str().expect("message").replace(id, "ID");
        let id = path.rsplit('/').next().expect("id");
        let id_missing = missing.rsplit('/').next().expect("id");
        assert_eq!(strip(&theirs, id), strip(&none, id_missing));
        assert_eq!(
            theirs.as_object().map(|o| o.len()),
            none.as_object().map(|o| o.len())
        );
        // The owner still sees it.
        assert_eq!(e.get(path, &e.acme).await.0, StatusCode::OK, "{path}");
    }
    // Their DELETE is a 404 too and removes nothing.
    let (status, _) = e.call("DELETE", SALLY, Some(&e.globex), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        e.get("/v1/agents/roster", &e.acme).await.1["total"],
        json!(2)
    );
    // Never a global list: globex's roster and chart are its own (empty).
    let (_, theirs) = e.get("/v1/agents/roster", &e.globex).await;
    assert_eq!(theirs, json!({"roster": [], "total": 0}));
    let (_, chart) = e.get("/v1/agents/org-chart", &e.globex).await;
    validate(Schema::AgentOrgChart, &chart).expect("empty chart validates");
    assert_eq!(
        chart,
        json!({"owner": {"tenantId": "globex"}, "departments": [], "members": []})
    );
    // The same rosterId in another tenant is another entry: no conflict, nothing disclosed.
    let (status, body) = e
        .put(
            SALLY,
            &e.globex,
            &entry(
                "host:sally-marketing",
                "core.openwop.agents.cmo",
                &["other"],
                json!({"tenantId": "globex"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, mine) = e
        .get("/v1/agents/roster/host:sally-marketing", &e.acme)
        .await;
    assert_eq!(mine["persona"], json!("Sally"), "acme's entry is untouched");
    // A member of a chart cannot be removed from under it.
    let (status, body) = e.call("DELETE", SALLY, Some(&e.acme), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Writing as another owner than the caller is refused.
    let (status, body) = e
        .put(
            "/v1/host/skillbox/roster/host:spy",
            &e.globex,
            &entry("host:spy", "core.openwop.agents.cmo", &[], acme_owner()),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["reason"], json!("tenant_mismatch"));
}

#[tokio::test]
async fn served_chart_validates_exactly_and_the_tree_resolves() {
    let e = env();
    sally_and_morgan(&e).await;
    for (id, agent, workflows) in [
        (
            "host:ops-lead",
            "core.openwop.agents.cmo",
            vec!["deploy", "quarterly-plan"],
        ),
        (
            "host:ops-dev",
            "core.openwop.agents.brief-writer",
            vec!["deploy", "on-call"],
        ),
    ] {
        let (status, _) = e
            .put(
                &format!("/v1/host/skillbox/roster/{id}"),
                &e.acme,
                &entry(id, agent, &workflows, acme_owner()),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let chart = json!({
        "owner": acme_owner(),
        "departments": [
            {"departmentId": "dept-marketing", "name": "Marketing", "parentDepartmentId": null,
             "roles": [{"roleId": "role-cm", "name": "Campaign Manager"}, {"roleId": "role-bw", "name": "Brief Writer"}]},
            {"departmentId": "dept-ops", "name": "Operations", "parentDepartmentId": "dept-marketing",
             "roles": [{"roleId": "role-lead", "name": "Lead"}, {"roleId": "role-dev", "name": "Developer"}]},
            {"departmentId": "dept-oncall", "name": "On call", "parentDepartmentId": "dept-ops",
             "roles": [{"roleId": "role-pager", "name": "Pager"}]}
        ],
        "members": [
            {"rosterId": "host:morgan-cmo", "departmentId": "dept-marketing", "roleId": "role-cm", "reportsTo": null},
            {"rosterId": "host:sally-marketing", "departmentId": "dept-marketing", "roleId": "role-bw", "reportsTo": "host:morgan-cmo"},
            {"rosterId": "host:ops-lead", "departmentId": "dept-ops", "roleId": "role-lead", "reportsTo": "host:morgan-cmo"},
            {"rosterId": "host:ops-dev", "departmentId": "dept-oncall", "roleId": "role-pager", "reportsTo": "host:ops-lead"}
        ]
    });
    let (status, body) = e.put("/v1/host/skillbox/org-chart", &e.acme, &chart).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, again) = e.put("/v1/host/skillbox/org-chart", &e.acme, &chart).await;
    assert_eq!(status, StatusCode::OK, "a whole-chart replace");
    assert_eq!(again, body);

    let (status, served) = e.get("/v1/agents/org-chart", &e.acme).await;
    assert_eq!(status, StatusCode::OK);
    validate(Schema::AgentOrgChart, &served).expect("served chart validates");
    assert_eq!(
        served["members"], chart["members"],
        "members served as written"
    );
    assert_eq!(served["owner"], chart["owner"]);
    // The department tree resolves: every parent exists, and walking up always ends.
    let depts = served["departments"].as_array().expect("departments");
    let parent = |id: &str| {
        depts
            .iter()
            .find(|d| d["departmentId"] == json!(id))
            .and_then(|d| d["parentDepartmentId"].as_str())
            .map(str::to_owned)
    };
    for d in depts {
        let mut at = d["departmentId"].as_str().expect("id").to_owned();
        let mut steps = 0;
        while let Some(p) = parent(&at) {
            assert!(
                depts.iter().any(|x| x["departmentId"] == json!(p)),
                "{p} resolves"
            );
            at = p;
            steps += 1;
            assert!(steps <= depts.len(), "department nesting is acyclic");
        }
    }

    // Recursive by default: marketing's view holds every member, workflows deduplicated.
    let (status, view) = e.get("/v1/agents/org-chart/dept-marketing", &e.acme).await;
    assert_eq!(status, StatusCode::OK);
    validate(Schema::OrgChartResponsibilityView, &view).expect("view validates");
    assert_eq!(view["members"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        view["responsibilities"],
        json!([
            "quarterly-plan",
            "marketing-email-campaign",
            "deploy",
            "on-call"
        ]),
        "first-seen order, each once"
    );
    let (_, explicit) = e
        .get(
            "/v1/agents/org-chart/dept-marketing?recursive=true",
            &e.acme,
        )
        .await;
    assert_eq!(explicit, view);
    // recursive=false: the same shape, only the department's own members.
    let (status, flat) = e
        .get("/v1/agents/org-chart/dept-ops?recursive=false", &e.acme)
        .await;
    assert_eq!(status, StatusCode::OK);
    validate(Schema::OrgChartResponsibilityView, &flat).expect("flat view validates");
    assert_eq!(flat["members"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        flat["responsibilities"],
        json!(["deploy", "quarterly-plan"])
    );
    let (_, deep) = e.get("/v1/agents/org-chart/dept-ops", &e.acme).await;
    assert_eq!(
        deep["responsibilities"],
        json!(["deploy", "quarterly-plan", "on-call"])
    );
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&flat), keys(&deep));
    let (status, body) = e
        .get("/v1/agents/org-chart/dept-ops?recursive=maybe", &e.acme)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    common::assert_envelope(&body, "validation_error");
    // No authority-bearing field on any member, department or view.
    for v in [&served, &view, &flat, &deep] {
        assert_no_authority(v);
    }
}

#[tokio::test]
async fn refusals_are_400_with_a_reason_and_store_nothing() {
    let e = env();
    sally_and_morgan(&e).await;
    let good = fixture("org-chart.agent-org-chart-shape-CHART.json");
    assert_eq!(
        e.put("/v1/host/skillbox/org-chart", &e.acme, &good).await.0,
        StatusCode::CREATED
    );
    // globex's own entry: a member of another tenant for acme.
    let (status, _) = e
        .put(
            "/v1/host/skillbox/roster/host:spy",
            &e.globex,
            &entry(
                "host:spy",
                "core.openwop.agents.cmo",
                &[],
                json!({"tenantId": "globex"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let mutate = |f: &dyn Fn(&mut Value)| {
        let mut c = good.clone();
        f(&mut c);
        c
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "reportsTo cycle",
            mutate(&|c| c["members"][1]["reportsTo"] = json!("host:sally-marketing")),
            "reports_to_cycle",
        ),
        (
            "self-report",
            mutate(&|c| c["members"][0]["reportsTo"] = json!("host:sally-marketing")),
            "self_report",
        ),
        (
            "member of another tenant",
            mutate(&|c| c["members"][0]["rosterId"] = json!("host:spy")),
            "unknown_roster_entry",
        ),
        (
            "unknown department",
            mutate(&|c| c["members"][0]["departmentId"] = json!("dept-sales")),
            "unknown_department",
        ),
        (
            "unknown role",
            mutate(&|c| c["members"][0]["roleId"] = json!("role-ceo")),
            "unknown_role",
        ),
        (
            "nesting cycle",
            mutate(&|c| {
                c["departments"][0]["parentDepartmentId"] = json!("dept-sub");
                c["departments"]
                    .as_array_mut()
                    .expect("array")
                    .push(json!({"departmentId": "dept-sub", "name": "Sub", "parentDepartmentId": "dept-marketing", "roles": []}));
            }),
            "department_cycle",
        ),
        (
            "extra field permissions",
            mutate(&|c| c["members"][1]["permissions"] = json!(["approve-spend"])),
            "schema",
        ),
        (
            "fixture: member with scopes",
            fixture("org-chart.member-with-scopes.json"),
            "schema",
        ),
        (
            "fixture: member with a non-host rosterId",
            fixture("org-chart.member-non-host-rosterId.json"),
            "schema",
        ),
        (
            "fixture: the stored-record shape",
            fixture("org-chart.stored-record-shape.json"),
            "schema",
        ),
        (
            "another tenant's chart",
            mutate(&|c| c["owner"] = json!({"tenantId": "globex"})),
            "tenant_mismatch",
        ),
    ];
    let (_, before) = e.get("/v1/agents/org-chart", &e.acme).await;
    for (what, doc, reason) in cases {
        let (status, body) = e.put("/v1/host/skillbox/org-chart", &e.acme, &doc).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        common::assert_envelope(&body, "validation_error");
        assert_eq!(body["details"]["reason"], json!(reason), "{what}: {body}");
        assert!(
            body["details"]["errors"]
                .as_array()
                .is_some_and(|e| !e.is_empty()),
            "{what}"
        );
        let (_, after) = e.get("/v1/agents/org-chart", &e.acme).await;
        assert_eq!(after, before, "{what}: nothing stored");
    }

    // Roster refusals, each leaving the roster as it was.
    let mut skill = entry("host:bot", "local.skillbox.copy-check", &[], acme_owner());
    skill["agentRef"]["channel"] = json!("stable");
    let roster_cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "non-host rosterId (fixture)",
            "core.openwop.agents.sally",
            fixture("roster-entry.non-host-rosterId.json"),
            "schema",
        ),
        (
            "version and channel (fixture)",
            "host:sally-marketing",
            fixture("roster-entry.version-and-channel.json"),
            "schema",
        ),
        (
            "duplicate workflows",
            "host:dup",
            entry(
                "host:dup",
                "core.openwop.agents.cmo",
                &["a", "a"],
                acme_owner(),
            ),
            "schema",
        ),
        (
            "an extra field",
            "host:x",
            {
                let mut x = entry("host:x", "core.openwop.agents.cmo", &[], acme_owner());
                x["permissions"] = json!(["admin"]);
                x
            },
            "schema",
        ),
        (
            "path is not the body",
            "host:other",
            entry("host:x", "core.openwop.agents.cmo", &[], acme_owner()),
            "roster_id_mismatch",
        ),
        (
            "unknown agent",
            "host:x",
            entry("host:x", "core.openwop.agents.nobody", &[], acme_owner()),
            "unknown_agent",
        ),
        (
            "a skill holds no roster presence",
            "host:bot",
            skill,
            "skill_in_roster",
        ),
        (
            "owner is not the caller",
            "host:x",
            entry(
                "host:x",
                "core.openwop.agents.cmo",
                &[],
                json!({"tenantId": "acme"}),
            ),
            "tenant_mismatch",
        ),
    ];
    let (_, roster_before) = e.get("/v1/agents/roster", &e.acme).await;
    for (what, id, doc, reason) in roster_cases {
        let (status, body) = e
            .put(&format!("/v1/host/skillbox/roster/{id}"), &e.acme, &doc)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        common::assert_envelope(&body, "validation_error");
        assert_eq!(body["details"]["reason"], json!(reason), "{what}: {body}");
        let (_, after) = e.get("/v1/agents/roster", &e.acme).await;
        assert_eq!(after, roster_before, "{what}: nothing stored");
    }
    // Not JSON: 415, and malformed JSON: 400.
    let req = Request::builder()
        .method("PUT")
        .uri("/v1/host/skillbox/org-chart")
        .header("authorization", format!("Bearer {}", e.acme))
        .header("content-type", "text/plain")
        .body(Body::from("{}"))
        .expect("request");
    let resp = e.router.clone().oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn nesting_off_is_advertised_and_enforced() {
    let e = env_with(|t| t.replace("department_nesting = true", "department_nesting = false"));
    let (status, d) = e.call("GET", "/.well-known/openwop", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d["agents"]["orgChart"]["departmentNesting"], json!(false));
    sally_and_morgan(&e).await;
    let mut chart = fixture("org-chart.agent-org-chart-shape-CHART.json");
    chart["departments"]
        .as_array_mut()
        .expect("array")
        .push(json!({"departmentId": "dept-sub", "name": "Sub", "parentDepartmentId": "dept-marketing", "roles": []}));
    let (status, body) = e.put("/v1/host/skillbox/org-chart", &e.acme, &chart).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["reason"], json!("nesting_disabled"));
    // A flat chart (null parents) is fine.
    let flat = fixture("org-chart.agent-org-chart-shape-CHART.json");
    assert_eq!(
        e.put("/v1/host/skillbox/org-chart", &e.acme, &flat).await.0,
        StatusCode::CREATED
    );
}

/// Review 25 T1, performed: one tenant PUT of 13,601 departments chained child-first (the most
/// a 1 MiB body holds) made every view of the root a minute of a core. Over
/// `agents.max_departments` (1,000 by default) the chart is refused by a reason naming the
/// limit and stores nothing; a chain at the limit is taken, and its root's view walks it whole.
#[tokio::test]
async fn a_chart_over_the_department_limit_is_refused_and_one_at_it_is_viewed() {
    let e = env();
    let chain = |n: usize| {
        let departments: Vec<Value> = (0..n)
            .rev()
            .map(|i| {
                let parent = (i > 0).then(|| format!("d{}", i - 1));
                json!({"departmentId": format!("d{i}"), "name": "d", "parentDepartmentId": parent, "roles": []})
            })
            .collect();
        json!({"owner": {"tenantId": "acme", "workspaceId": "growth"}, "departments": departments, "members": []})
    };
    let (_, before) = e.get("/v1/agents/org-chart", &e.acme).await;
    let attack = chain(13_601);
    assert!(
        attack.to_string().len() < 1 << 20,
        "the review's chart fits the body limit"
    );
    let (status, body) = e.put("/v1/host/skillbox/org-chart", &e.acme, &attack).await;
    // Not the body in the message: a stored chart is echoed back whole (1 MiB).
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the review's chart is refused"
    );
    common::assert_envelope(&body, "validation_error");
    assert_eq!(body["details"]["reason"], json!("too_many_departments"));
    assert_eq!(
        body["message"],
        json!("the chart has 13601 departments, over this host's limit of 1000")
    );
    let (_, after) = e.get("/v1/agents/org-chart", &e.acme).await;
    assert_eq!(after, before, "nothing stored");

    let (status, body) = e
        .put("/v1/host/skillbox/org-chart", &e.acme, &chain(1_000))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, view) = e.get("/v1/agents/org-chart/d0", &e.acme).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["department"]["departmentId"], json!("d0"));
}

#[tokio::test]
async fn discovery_advertises_what_is_served() {
    let e = env();
    let (status, d) = e.call("GET", "/.well-known/openwop", None, None).await;
    assert_eq!(status, StatusCode::OK);
    validate(Schema::Capabilities, &d).expect("discovery validates");
    for agents in [&d["agents"], &d["capabilities"]["agents"]] {
        assert_eq!(agents["roster"]["supported"], json!(true));
        assert_eq!(agents["orgChart"]["supported"], json!(true));
        assert_eq!(agents["orgChart"]["responsibilityView"], json!(true));
        assert_eq!(agents["orgChart"]["departmentNesting"], json!(true));
        // A roster cannot be scoped differently from its manifests (RFC 0086).
        assert_eq!(
            agents["roster"]["installScope"],
            agents["manifestRuntime"]["installScope"]
        );
        assert_eq!(
            agents["orgChart"]["installScope"],
            agents["roster"]["installScope"]
        );
    }
    // installScope "tenant" is true: the same route answers each tenant with its own items.
    let scope = d["agents"]["roster"]["installScope"].clone();
    assert_eq!(scope, json!("tenant"));
    e.import_pack().await;
    let (s1, _) = e
        .put(
            "/v1/host/skillbox/roster/host:a",
            &e.acme,
            &entry("host:a", "core.openwop.agents.cmo", &[], acme_owner()),
        )
        .await;
    assert_eq!(s1, StatusCode::CREATED);
    assert_eq!(
        e.get("/v1/agents/roster", &e.acme).await.1["total"],
        json!(1)
    );
    assert_eq!(
        e.get("/v1/agents/roster", &e.globex).await.1["total"],
        json!(0)
    );
    // Every advertised surface answers 200 (not 404/501).
    for path in ["/v1/agents", "/v1/agents/roster", "/v1/agents/org-chart"] {
        assert_eq!(e.get(path, &e.globex).await.0, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn tokens_reach_what_they_should() {
    let e = env();
    // No token: 401 on every agent surface, never a list.
    for (m, path) in [
        ("GET", "/v1/agents"),
        ("GET", "/v1/agents/core.openwop.agents.cmo"),
        ("GET", "/v1/agents/roster"),
        ("GET", "/v1/agents/roster/host:a"),
        ("GET", "/v1/agents/org-chart"),
        ("GET", "/v1/agents/org-chart/d"),
        ("PUT", "/v1/host/skillbox/roster/host:a"),
        ("DELETE", "/v1/host/skillbox/roster/host:a"),
        ("PUT", "/v1/host/skillbox/org-chart"),
    ] {
        for token in [None, Some("sbx_t_0000000000000000000000000000000000")] {
            let (status, body) = e.call(m, path, token, Some(&json!({}))).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{m} {path}");
            common::assert_envelope(&body, "unauthenticated");
        }
    }
    // A tenant token does not reach the operator's routes.
    for (m, path) in [
        ("GET", "/skills"),
        ("POST", "/skills"),
        ("PATCH", "/skills/x"),
        ("GET", "/sources"),
        ("GET", "/node"),
        ("GET", "/metrics"),
    ] {
        let (status, body) = e.call(m, path, Some(&e.acme), Some(&pack())).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{m} {path}: {body}");
        common::assert_envelope(&body, "forbidden");
    }
    assert_eq!(
        e.get("/skills", &e.operator).await.1["total"],
        json!(0),
        "nothing imported"
    );
    // The operator is tenant "local" on the agent surfaces.
    let (_, chart) = e.get("/v1/agents/org-chart", &e.operator).await;
    assert_eq!(chart["owner"], json!({"tenantId": "local"}));
    // A token added while the node runs is accepted at once; config keeps only its digest.
    let config = e.node.data_dir().config();
    let late = skillbox_node::tenants::add_token(&config, "initech", None).expect("add");
    let (status, chart) = e.get("/v1/agents/org-chart", &late).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chart["owner"], json!({"tenantId": "initech"}));
    let text = std::fs::read_to_string(&config).expect("config");
    for t in [&late, &e.acme, &e.globex] {
        assert!(
            !text.contains(t.as_str()),
            "a token is written in config.toml"
        );
        assert!(text.contains(&skillbox_node::tenants::token_digest(t)));
    }
    // Bad tenant ids are refused and leave config as it was.
    let err = skillbox_node::tenants::add_token(&config, "", None).expect_err("empty tenant");
    assert!(err.to_string().contains("tenant"), "{err}");
    // The operator's own tenant id: its token would read and rewrite the operator's roster.
    let err = skillbox_node::tenants::add_token(&config, "local", None).expect_err("operator's id");
    assert!(err.to_string().contains("operator"), "{err}");
    assert_eq!(std::fs::read_to_string(&config).expect("config"), text);
    // A token taken out of config.toml while the node runs stops at once (it stayed in force
    // until a restart, or until someone presented an unknown token).
    let digest = skillbox_node::tenants::token_digest(&late);
    let at = text.find(&digest).expect("the token's entry");
    let start = text[..at].rfind("[[tenants.tokens]]").expect("its table");
    let end = at + text[at..].find('\n').unwrap_or(text.len() - at);
    let revoked = format!("{}{}", &text[..start], &text[end..]);
    std::fs::write(&config, &revoked).expect("write config");
    let (status, body) = e.get("/v1/agents/org-chart", &late).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(
        e.get("/v1/agents/org-chart", &e.acme).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn routes_and_openapi_agree_on_who_reaches_them() {
    let doc = skillbox_node::openapi::document();
    for route in skillbox_node::api::route_paths() {
        let item = &doc["paths"][route.openapi.as_str()];
        for (m, op) in item.as_object().expect("path item") {
            if m == "parameters" {
                continue;
            }
            let tenant = op.get("x-skillbox-tenant") == Some(&json!(true));
            assert_eq!(tenant, route.tenant, "{m} {}", route.openapi);
            let has_403 = op["responses"].get("403").is_some();
            assert_eq!(
                has_403,
                !route.public && !route.tenant,
                "{m} {}: 403 documented",
                route.openapi
            );
        }
    }
}

/// One tenant cannot fill the operator's store: its roster entries, across every workspace it
/// holds a token for, stop at `agents.max_roster_entries`; replacing one still works, removing
/// one frees room, and another tenant's room is its own.
#[tokio::test]
async fn a_tenants_roster_stops_at_its_quota_across_workspaces() {
    let e = env_with(|t| t.replace("max_roster_entries = 1000", "max_roster_entries = 3"));
    e.import_pack().await;
    // A second workspace of acme's, its token issued while the node runs.
    let config = DataDir::new(e._dir.path()).config();
    let other = skillbox_node::tenants::add_token(&config, "acme", Some("other")).expect("token");
    let e = &e;
    let put = |i: usize, token: &str, ws: &'static str| {
        let id = format!("host:flood-{i}");
        let body = entry(
            &id,
            "core.openwop.agents.cmo",
            &[],
            json!({"tenantId": "acme", "workspaceId": ws}),
        );
        let token = token.to_owned();
        async move {
            e.put(&format!("/v1/host/skillbox/roster/{id}"), &token, &body)
                .await
        }
    };
    for (i, token, ws) in [
        (0, &e.acme, "growth"),
        (1, &e.acme, "growth"),
        (2, &other, "other"),
    ] {
        let (status, body) = put(i, token, ws).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for (token, ws) in [(&e.acme, "growth"), (&other, "other")] {
        let (status, body) = put(3, token, ws).await;
        assert_eq!(status, StatusCode::CONFLICT, "{ws}: {body}");
        common::assert_envelope(&body, "conflict");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("agents.max_roster_entries")),
            "{body}"
        );
        let (status, _) = e.get("/v1/agents/roster/host:flood-3", token).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "nothing was stored in {ws}");
    }
    // A replacement at the ceiling is no new row.
    let (status, body) = put(2, &other, "other").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Another tenant's room is its own.
    let (status, body) = e
        .put(
            "/v1/host/skillbox/roster/host:globex-1",
            &e.globex,
            &entry(
                "host:globex-1",
                "core.openwop.agents.cmo",
                &[],
                json!({"tenantId": "globex"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Removing one frees room for one.
    let (status, _) = e
        .call(
            "DELETE",
            "/v1/host/skillbox/roster/host:flood-0",
            Some(&e.acme),
            None,
        )
        .await;
    assert!(status.is_success(), "{status}");
    let (status, body) = put(3, &other, "other").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
