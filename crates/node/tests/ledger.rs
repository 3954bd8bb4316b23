//! The disclosure ledger through real nodes and a real box: every stake each side made and
//! every consent decision, with who decided, the box and the provider; signed and chained;
//! filtered and exported; and never a byte of what was staked.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{TestNode, world};

const LIMIT: Duration = Duration::from_secs(30);

async fn ledger(node: &TestNode, query: &str) -> Vec<Value> {
    let a = node.get(&format!("/ledger{query}")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.body["entries"].as_array().expect("entries").clone()
}

fn of_call<'a>(entries: &'a [Value], id: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["call"] == id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_side_records_its_decision_and_its_stake_signed_and_without_content() {
    let w = world(
        "BODY-LEDGER-7",
        "sk-test-KEY-LEDGER-7",
        &["songs"],
        |_| {},
        |_| {},
    )
    .await;
    w.caller
        .put_source("songs", "text", "SOURCE-LEDGER-MARK\n")
        .await;
    let id = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "REQUEST-LEDGER-MARK")
        .await;
    assert_eq!(w.caller.wait_call(&id, LIMIT).await["state"], "answered");
    assert_eq!(w.owner.wait_call(&id, LIMIT).await["state"], "ran");

    // Caller: the policy's default allowed, then the request and `songs` were sealed.
    let mine = ledger(&w.caller, "").await;
    let mine = of_call(&mine, &id);
    assert_eq!(mine.len(), 2, "{mine:?}");
    let (decision, stake) = (mine[0], mine[1]);
    assert_eq!(decision["kind"], "decision");
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["decidedBy"], "default");
    assert_eq!(decision["sources"], json!(["songs"]));
    assert_eq!(stake["kind"], "stake");
    assert_eq!(
        stake["decidedBy"], "default",
        "the stake names the decision it follows"
    );
    assert_eq!(stake["box"], w.box_url.as_str());
    assert_eq!(stake["platform"], "insecure-dev");
    assert_eq!(stake["hardwareIsolation"], false);
    assert_eq!(stake["measurement"], "ab".repeat(48));
    assert_eq!(stake["provider"], "openai");
    assert!(stake["providerHost"].as_str().is_some(), "{stake}");
    let items = stake["items"].as_array().expect("items");
    let kinds: Vec<&str> = items.iter().filter_map(|i| i["stake"].as_str()).collect();
    assert_eq!(kinds, ["request", "source"], "{stake}");
    // The digest is the source store's keyed digest: the one the source listing shows.
    let listed = w.caller.get("/sources").await.body;
    let songs = listed["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["name"] == "songs")
        .expect("songs listed")
        .clone();
    assert_eq!(items[1]["source"], "songs");
    assert_eq!(items[1]["digest"], songs["digest"], "{songs}");
    assert_eq!(items[1]["sizeBucket"], 1024);

    // Owner: body, model and key, staked once it admitted the call; then its consent rules'
    // decision on the submit. No caller source is named.
    let theirs = ledger(&w.owner, "").await;
    let theirs = of_call(&theirs, &id);
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    assert_eq!(theirs[0]["role"], "owner");
    assert_eq!(theirs[0]["kind"], "stake");
    assert_eq!(theirs[0]["decidedBy"], "admission");
    assert_eq!(theirs[0]["sources"], json!([]));
    let owner_kinds: Vec<&str> = theirs[0]["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["stake"].as_str())
        .collect();
    assert_eq!(owner_kinds, ["body", "model", "key"], "{}", theirs[0]);
    assert_eq!(theirs[1]["kind"], "decision");
    assert_eq!(theirs[1]["decidedBy"], "default");

    // Both verify, chained from the first entry.
    for node in [&w.caller, &w.owner] {
        let v = node.get("/ledger/verify").await.body;
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["entries"], 2, "{v}");
    }

    // Filters and exports.
    assert_eq!(ledger(&w.caller, "?source=songs").await.len(), 2);
    assert!(ledger(&w.caller, "?source=diary").await.is_empty());
    assert_eq!(
        ledger(&w.caller, &format!("?peer={}", w.owner.peer_id))
            .await
            .len(),
        2
    );
    assert!(ledger(&w.caller, "?since=1h").await.len() == 2);
    assert!(ledger(&w.caller, "?since=99999999999999").await.is_empty());
    let csv = w.caller.get("/ledger?format=csv").await.body;
    let csv = csv.as_str().expect("csv text");
    assert!(csv.starts_with("seq,at,kind,call,"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let jsonl = w.caller.get("/ledger?format=jsonl").await;
    assert_eq!(jsonl.status, 200);
    for (q, field) in [
        ("?format=xml", "query.format"),
        ("?since=3w", "query.since"),
        ("?limit=x", "query.limit"),
        ("?sorce=songs", "query.sorce"),
    ] {
        let a = w.caller.get(&format!("/ledger{q}")).await;
        assert_eq!(a.status, 400, "{q}: {}", a.body);
        assert_eq!(a.body["error"], "validation_error", "{q}");
        assert!(a.body.to_string().contains(field), "{q}: {}", a.body);
    }

    // Nothing staked appears anywhere in either ledger, in any format.
    let mut seen = String::new();
    for node in [&w.caller, &w.owner] {
        for q in ["", "?format=jsonl", "?format=csv"] {
            seen.push_str(&node.get(&format!("/ledger{q}")).await.body.to_string());
        }
    }
    for secret in [
        "BODY-LEDGER-7",
        "sk-test-KEY-LEDGER-7",
        "SOURCE-LEDGER-MARK",
        "REQUEST-LEDGER-MARK",
        "gpt-test",
    ] {
        assert!(!seen.contains(secret), "{secret} is in a ledger");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_and_the_humans_answers_are_recorded() {
    let ask = |c: &mut skillbox_node::Config| {
        c.policy.rules.insert(
            0,
            skillbox_calls::Rule {
                side: skillbox_calls::Side::Caller,
                peer: skillbox_calls::Pattern::any(),
                skill: skillbox_calls::Pattern::any(),
                sources: Some(vec!["songs".into()]),
                sources_within: None,
                decision: skillbox_calls::Decision::Ask,
            },
        )
    };
    let w = world(
        "BODY-LEDGER-8",
        "sk-test-KEY-LEDGER-8",
        &["songs"],
        |_| {},
        ask,
    )
    .await;
    w.caller
        .put_source("songs", "text", "Bonobo - Kerala\n")
        .await;
    let decide = |id: String, body: Value| {
        let w = &w;
        async move {
            w.caller.wait_state(&id, &["awaiting_consent"], LIMIT).await;
            let a = w.caller.post_json(&format!("/approvals/{id}"), body).await;
            assert_eq!(a.status, 200, "{}", a.body);
            w.caller.wait_call(&id, LIMIT).await
        }
    };

    // Denied by the human: one decision, nothing staked.
    let denied = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "first")
        .await;
    let c = decide(denied.clone(), json!({"decision": "deny"})).await;
    assert_eq!(c["failure"]["code"], "consent_denied");
    let all = ledger(&w.caller, "").await;
    let d = of_call(&all, &denied);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0]["decision"].as_str(), d[0]["decidedBy"].as_str()),
        (Some("deny"), Some("human"))
    );
    assert_eq!(d[0]["sources"], json!(["songs"]));
    assert_eq!(d[0]["box"], w.box_url.as_str(), "the refused box is named");

    // Allowed and remembered: the stake follows the human's yes.
    let allowed = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "second")
        .await;
    let c = decide(
        allowed.clone(),
        json!({"decision": "allow", "remember": true}),
    )
    .await;
    assert_eq!(c["state"], "answered", "{c}");
    let all = ledger(&w.caller, "").await;
    let a = of_call(&all, &allowed);
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0]["decidedBy"], "human+remember");
    assert_eq!(a[1]["kind"], "stake");
    assert_eq!(a[1]["decidedBy"], "human+remember");

    // The remembered rule now decides, and says so.
    let third = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "third")
        .await;
    assert_eq!(w.caller.wait_call(&third, LIMIT).await["state"], "answered");
    let all = ledger(&w.caller, "").await;
    let t = of_call(&all, &third);
    assert_eq!(t[0]["decidedBy"], "rule:1", "{t:?}");
    assert_eq!(t[1]["decidedBy"], "rule:1", "{t:?}");
    let v = w.caller.get("/ledger/verify").await.body;
    assert_eq!(
        (v["ok"].as_bool(), v["entries"].as_u64()),
        (Some(true), Some(5)),
        "{v}"
    );
}
