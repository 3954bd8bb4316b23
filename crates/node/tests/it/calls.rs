//! Calls end to end in one process: two real nodes (stores, APIs, libp2p on 127.0.0.1), a real
//! box (HTTP, insecure-dev attestation) and a loopback double of an OpenAI-compatible provider.
//! Every source-selection and board rule refused with its own code; consent parks and resumes;
//! admission refuses; cancel ends both sides.

use crate::support;

use std::time::Duration;

use crate::support::{TestNode, world, world_holding_songs};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_is_answered_and_the_owner_keeps_a_receipt() {
    let w = world_holding_songs(
        "BODY-1",
        "sk-test-KEY-1",
        &["songs", "diary"],
        "Radiohead - Weird Fishes\n",
    )
    .await;
    // The owner's advert names the box it accepts: identity from the box's /healthz, and URL.
    let owner_peer: skillbox_peers::PeerId = w.owner.peer_id.parse().expect("peer id");
    let boxes = w
        .caller
        .peers
        .with_board(|b, now| b.advert(&owner_peer, now).map(|a| a.boxes.clone()))
        .expect("owner's advert on the caller's board");
    assert_eq!(boxes.len(), 1, "{boxes:?}");
    assert_eq!(boxes[0].platform, "insecure-dev");
    assert_eq!(boxes[0].measurement, "ab".repeat(48));
    assert_eq!(boxes[0].url.as_deref(), Some(w.box_url.as_str()));
    let a = w
        .caller
        .ask_call(&w.owner.peer_id, "taste", "what do I like?")
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(a.body["state"], "requested");
    // Omitted sources: the required ones this node holds (songs, not diary).
    assert_eq!(a.body["sources"], json!(["songs"]));
    let id = a.body["id"].as_str().expect("id").to_owned();
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    assert_eq!(c["role"], "caller");
    let answer = c["answer"].as_str().expect("answer");
    assert!(answer.starts_with("The double read"), "{answer}");
    let o = w.owner.wait_call(&id, LIMIT).await;
    assert_eq!(o["state"], "ran", "{o}");
    assert_eq!(o["role"], "owner");
    assert!(o.get("answer").is_none(), "the owner never has the answer");
    assert_eq!(o["receipt"]["status"], "ok", "{o}");
    assert_eq!(o["receipt"]["run_id"], c["runId"]);
    assert_eq!(o["programHash"], c["programHash"]);
    // The box called the provider once, with the owner's key, and the prompt carried the body,
    // the request and the source.
    let seen = w.provider.0.lock().expect("log").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, "Bearer sk-test-KEY-1");
    let prompt = seen[0].1.to_string();
    for part in ["BODY-1", "what do I like?", "Weird Fishes"] {
        assert!(prompt.contains(part), "prompt lacks {part}");
    }
    // Lists: each side one record with its role.
    let list = w.caller.get("/calls").await.body;
    assert_eq!(list["total"], 1);
    assert_eq!(list["calls"][0]["state"], "answered");
    let list = w.owner.get("/calls?role=owner&state=ran").await.body;
    assert_eq!(list["total"], 1);
    // The request and the result key are gone from the caller's store; the answer is a source.
    let sources = w.caller.get("/sources").await.body.to_string();
    assert!(!sources.contains("/request"), "{sources}");
    assert!(!sources.contains("/result-key"), "{sources}");
    assert!(sources.contains(&format!("call/{id}/answer")), "{sources}");
    // The metrics saw it end, and timed the box's operations and the run.
    let text = |v: Value| v.as_str().unwrap_or_default().to_owned();
    let (caller_m, owner_m) = (
        text(w.caller.get("/metrics").await.body),
        text(w.owner.get("/metrics").await.body),
    );
    for (m, side, end) in [
        (&caller_m, "caller", "answered"),
        (&owner_m, "owner", "ran"),
    ] {
        let finished =
            format!(r#"skillbox_calls_finished_total{{role="{side}",state="{end}",code=""}} 1"#);
        assert!(m.contains(&finished), "{finished} in {m}");
        let (ops, not): (&[&str], &[&str]) = match side {
            // The caller opens the run, and the box answers the open with the run's
            // attestation: the caller asks for none of its own (issue 33). The owner checks
            // that attestation, forwarded in `call.session` (it was asked for both sides'
            // joint nonce), and asks the box for none either. The caller's submit goes with
            // its stake: it makes no submit request of its own.
            "caller" => (&["open", "stake"], &["attest", "submit"]),
            _ => (&["stake", "submit"], &["open", "attest"]),
        };
        for op in ops {
            assert!(m.contains(&format!(r#"op="{op}""#)), "{side} {op}: {m}");
        }
        for op in not {
            assert!(!m.contains(&format!(r#"op="{op}""#)), "{side} {op}: {m}");
        }
        let run = format!(r#"skillbox_run_duration_seconds_count{{role="{side}"}} 1"#);
        assert!(m.contains(&run), "{run} in {m}");
    }
    // Each side's disclosure ledger holds this call's stake exactly once.
    for node in [&w.caller, &w.owner] {
        let l = node.get(&format!("/ledger?call={id}")).await.body;
        let stakes = l["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .filter(|e| e["kind"] == "stake")
            .count();
        assert_eq!(stakes, 1, "{l}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn source_selection_and_board_rules_refuse_with_their_codes() {
    let w = world(
        "BODY-2",
        "sk-test-KEY-2",
        &["songs", "diary"],
        |_| {},
        |_| {},
    )
    .await;
    let peer = w.owner.peer_id.clone();
    let start = |body: Value| {
        let caller = &w.caller;
        async move { caller.post_json("/calls", body).await }
    };
    // Holding none of the required sources, omitted: refused where it starts.
    let a = start(json!({"peer": peer, "skill": "taste", "request": "x"})).await;
    a.assert_refused(422, "required_sources_not_held");
    w.caller.put_source("songs", "text", "a song\n").await;
    // A name outside requiredSources is refused, naming it.
    let a =
        start(json!({"peer": peer, "skill": "taste", "request": "x", "sources": ["passwords"]}))
            .await;
    a.assert_refused(400, "source_not_required");
    assert!(
        a.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("passwords")
    );
    // A required name this node does not hold.
    let a =
        start(json!({"peer": peer, "skill": "taste", "request": "x", "sources": ["diary"]})).await;
    a.assert_refused(400, "source_not_held");
    let a = start(
        json!({"peer": peer, "skill": "taste", "request": "x", "sources": ["songs", "songs"]}),
    )
    .await;
    a.assert_refused(400, "duplicate_source");
    // A skill not on the board, and a peer not on the board.
    let a = start(json!({"peer": peer, "skill": "nope", "request": "x"})).await;
    a.assert_refused(409, "skill_not_offered");
    let a = start(json!({"peer": w.caller.peer_id, "skill": "taste", "request": "x"})).await;
    a.assert_refused(409, "skill_not_offered");
    // Malformed bodies.
    let a = start(json!({"peer": peer, "skill": "taste"})).await;
    a.assert_refused(400, "validation_error");
    let a = start(json!({"peer": peer, "skill": "taste", "request": "x", "extra": 1})).await;
    assert_eq!(a.status, 400, "{}", a.body);
    // Nothing was recorded by any refusal.
    assert_eq!(w.caller.get("/calls").await.body["total"], 0);
    // An empty list: none, the request alone — accepted.
    let a = start(json!({"peer": peer, "skill": "taste", "request": "x", "sources": []})).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(a.body["sources"], json!([]));
    let c = w
        .caller
        .wait_call(a.body["id"].as_str().expect("id"), LIMIT)
        .await;
    assert_eq!(c["state"], "answered", "{c}");

    // The skill leaves the board when its key source goes: then 409 at once.
    let del = w
        .owner
        .req(reqwest::Method::DELETE, "/sources/openai-key", None)
        .await;
    assert_eq!(del.status, 204);
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let a = start(json!({"peer": peer, "skill": "taste", "request": "x", "sources": []})).await;
        if a.status == 409 {
            assert_eq!(a.body["error"], "skill_not_offered");
            break;
        }
        // Until the new advert arrives the call may still start; the owner refuses it then.
        assert!(
            std::time::Instant::now() < deadline,
            "skill never left the board"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `POST /calls` and `POST /intents/skill` take `application/json` only: a body that would start
/// a call, sent as text or a form (what a page's form or a careless client sends), is a 415 and
/// starts nothing; the same bytes as JSON start the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_body_that_is_not_json_is_refused_and_starts_nothing() {
    let w = world("BODY-MT", "sk-test-KEY-MT", &[], |_| {}, |_| {}).await;
    let start = json!({"peer": w.owner.peer_id, "skill": "taste", "request": "x"}).to_string();
    let intent = json!({"text": "taste"}).to_string();
    for ct in ["text/plain", "application/x-www-form-urlencoded"] {
        for (path, body) in [("/calls", &start), ("/intents/skill", &intent)] {
            let a = w
                .caller
                .req(
                    reqwest::Method::POST,
                    path,
                    Some((ct, body.as_bytes().to_vec())),
                )
                .await;
            a.assert_refused(415, "unsupported_media_type");
        }
    }
    assert_eq!(w.caller.get("/calls").await.body["total"], 0);
    assert_eq!(w.owner.get("/calls").await.body["total"], 0);
    // The refusal was the media type's: the same start body as JSON starts the call.
    let start: serde_json::Value = serde_json::from_str(&start).expect("json");
    let a = w.caller.post_json("/calls", start).await;
    assert_eq!(a.status, 201, "{}", a.body);
}

/// Review 23 F4: the owner staked the skill's body, model and key into the box, then asked its
/// policy and human — whose question said "Approving stakes the skill's body, model and key
/// into …" — so on a box without hardware isolation its operator held the key before the human
/// said no. A box in the middle counts the stakes it forwards: the caller parks on its own
/// human (it stakes nothing), the owner's rule asks, the owner's human denies. Nothing of the
/// owner's reaches the box, before or after the question; the ledger shows the decision and no
/// stake.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owners_no_leaves_nothing_of_the_skill_in_the_box() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let real_box = support::start_box(&provider_url).await;
    let (box_url, seen, _) = support::start_rewriting_proxy(&real_box, |_| {}).await;
    let owner_asks = |c: &mut skillbox_node::Config| {
        c.policy.rules.insert(
            0,
            skillbox_calls::Rule {
                side: skillbox_calls::Side::Owner,
                sources: None,
                ..skillbox_calls::Rule::ask_before_disclosure()
            },
        )
    };
    let skill = ("BODY-F4", "sk-test-KEY-F4", &[][..]);
    let w = support::world_at(
        box_url,
        provider,
        skill,
        owner_asks,
        support::caller_asks(None),
    )
    .await;
    let stakes = || {
        seen.lock()
            .expect("log")
            .iter()
            .filter(|p| p.contains("/stakes"))
            .count()
    };
    let id = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "hello")
        .await;
    w.caller.wait_state(&id, &["awaiting_consent"], LIMIT).await;
    let parked = w.owner.wait_state(&id, &["awaiting_consent"], LIMIT).await;
    assert_eq!(stakes(), 0, "staked before its human was asked: {parked}");
    w.owner.decide(&id, json!({"decision": "deny"})).await;
    let o = w.owner.wait_call(&id, LIMIT).await;
    assert_eq!(o["failure"]["code"], "consent_denied", "{o}");
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed", "{c}");
    assert_eq!(stakes(), 0, "the owner's stake reached the box");
    let entries = w.owner.get(&format!("/ledger?call={id}")).await.body;
    let kinds = skillbox_testkit::answer::field_of_each(&entries, "entries", "kind");
    assert!(kinds.contains(&"decision"), "{entries}");
    assert!(!kinds.iter().any(|k| k.starts_with("stake")), "{entries}");
    assert!(
        w.provider.0.lock().expect("log").is_empty(),
        "no run happened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ask_parks_each_side_until_its_human_decides() {
    let ask = |c: &mut skillbox_node::Config| {
        c.policy.rules.push(skillbox_calls::Rule {
            side: skillbox_calls::Side::Any,
            sources: None,
            ..skillbox_calls::Rule::ask_before_disclosure()
        })
    };
    let w = world("BODY-3", "sk-test-KEY-3", &[], ask, ask).await;
    let id = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "hello")
        .await;
    w.caller.wait_state(&id, &["awaiting_consent"], LIMIT).await;
    w.owner.wait_state(&id, &["awaiting_consent"], LIMIT).await;
    let ap = w.caller.get("/approvals").await.body;
    assert_eq!(ap["total"], 1, "{ap}");
    assert_eq!(ap["approvals"][0]["id"], id.as_str());
    // Nothing runs while either side waits.
    assert!(w.provider.0.lock().expect("log").is_empty());
    let bad = w
        .caller
        .post_json(&format!("/approvals/{id}"), json!({"decision": "maybe"}))
        .await;
    assert_eq!(bad.status, 400);
    let question = ap["approvals"][0]["question"].clone();
    w.caller
        .decide(&id, json!({"decision": "allow", "question": question}))
        .await;
    // Deciding again: it is no longer waiting.
    let again = w
        .caller
        .post_json(
            &format!("/approvals/{id}"),
            json!({"decision": "allow", "question": question}),
        )
        .await;
    assert_eq!(
        (again.status, again.body["error"].as_str()),
        (409, Some("not_awaiting_consent"))
    );
    // The owner's human denies: both sides fail, with a reason.
    w.owner.decide(&id, json!({"decision": "deny"})).await;
    let o = w.owner.wait_call(&id, LIMIT).await;
    assert_eq!(o["failure"]["code"], "consent_denied", "{o}");
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed");
    // Either the owner's call.failed or the cancelled run reaches the caller first; both end
    // the call with a reason. The owner's human said no, but the caller reads a refusal only
    // (`policy_denied`), never how the owner's side decided (review 23 F6).
    let code = c["failure"]["code"].as_str().unwrap_or("");
    let message = c["failure"]["message"].as_str().unwrap_or("");
    assert!(!message.contains("consent_denied"), "{c}");
    assert!(
        (code == "peer_failed" && message.contains("policy_denied"))
            || (code == "box_failed" && message.contains("run_spent")),
        "{c}"
    );
    assert!(
        w.provider.0.lock().expect("log").is_empty(),
        "no run happened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owner_admission_refuses_a_denied_peer_and_cancel_ends_a_call() {
    let w = world("BODY-4", "sk-test-KEY-4", &[], |_| {}, |_| {}).await;
    // Deny the caller by policy set through the API.
    let policy = json!({"default": "allow", "admission": {"deny_peers": [w.caller.peer_id], "calls_per_minute": 30}, "rules": []});
    let put = w.owner.put_json("/policy", &policy).await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(
        w.owner.get("/policy").await.body["admission"]["deny_peers"][0],
        w.caller.peer_id.as_str()
    );
    let a = w.caller.ask_call(&w.owner.peer_id, "taste", "hi").await;
    let id = a.body["id"].as_str().expect("id").to_owned();
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed");
    assert!(
        c["failure"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("not_admitted"),
        "{c}"
    );
    // A refused request leaves nothing on the owner's side (issue 12: no row before admission).
    assert_eq!(w.owner.get(&format!("/calls/{id}")).await.status, 404);
    assert_eq!(w.owner.get("/calls").await.body["total"], 0);

    // Allowed again, with consent parking the owner; the caller cancels.
    let policy = json!({"default": "allow", "admission": {"calls_per_minute": 30},
        "rules": [{"side": "owner", "decision": "ask"}]});
    let put = w.owner.put_json("/policy", &policy).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let a = w.caller.ask_call(&w.owner.peer_id, "taste", "hi").await;
    let id = a.body["id"].as_str().expect("id").to_owned();
    w.owner.wait_state(&id, &["awaiting_consent"], LIMIT).await;
    let x = w
        .caller
        .post_json(&format!("/calls/{id}/cancel"), json!({}))
        .await;
    assert_eq!(x.status, 200, "{}", x.body);
    assert_eq!(x.body["failure"]["code"], "cancelled");
    let o = w.owner.wait_call(&id, LIMIT).await;
    assert_eq!(o["state"], "failed");
    assert_eq!(o["failure"]["code"], "peer_failed", "{o}");
    let missing = w.caller.get("/calls/nope").await;
    assert_eq!(missing.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_common_box_the_call_is_refused() {
    let (provider_url, _log) = support::provider_double(Duration::ZERO).await;
    let box_a = support::start_box(&provider_url).await;
    let owner = TestNode::start(&box_a, vec![], |_| {}).await;
    owner.offer_taste("B", "sk-x", &[]).await;
    // The caller accepts no box at all.
    let caller = TestNode::start(&box_a, vec![owner.p2p.clone()], |c| c.boxes.accept.clear()).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    let a = caller.ask_call(&owner.peer_id, "taste", "x").await;
    a.assert_refused(409, "no_common_box");
}

/// The caller's human is asked before anything of the call is staked: while it waits, the box
/// holds no caller stake; a "no" ends the call with the request and the source never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_callers_stake_waits_for_its_human() {
    let w = world(
        "BODY-9",
        "sk-test-KEY-9",
        &["songs"],
        |_| {},
        support::caller_asks(None),
    )
    .await;
    w.caller
        .put_source("songs", "text", "SOURCE-MARK-UNSTAKED\n")
        .await;
    let start = |request: &'static str| {
        let w = &w;
        async move {
            let id = w
                .caller
                .start_call(&w.owner.peer_id, "taste", request)
                .await;
            let c = w.caller.wait_state(&id, &["awaiting_consent"], LIMIT).await;
            let run = c["runId"]
                .as_str()
                .unwrap_or_else(|| panic!("a run is open while consent is asked: {c}"))
                .to_owned();
            (id, run)
        }
    };
    let run_status = |run: String| {
        let url = format!("{}/v1/runs/{run}", w.box_url);
        async move {
            reqwest::get(&url)
                .await
                .expect("box status")
                .json::<serde_json::Value>()
                .await
                .expect("json")
        }
    };

    // Denied: nothing of the caller's reached the box, and nothing ran.
    let (id, run) = start("REQUEST-MARK-DENIED").await;
    let st = run_status(run.clone()).await;
    let staked = st["staked"].to_string();
    assert!(
        !staked.contains("caller"),
        "caller staked before consent: {st}"
    );
    let ap = w.caller.get("/approvals").await.body;
    assert_eq!(ap["approvals"][0]["id"], id.as_str(), "{ap}");
    w.caller.decide(&id, json!({"decision": "deny"})).await;
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["failure"]["code"], "consent_denied", "{c}");
    assert!(w.provider.0.lock().expect("log").is_empty(), "no run");

    // Allowed: the stake goes in after the yes, and the call is answered.
    let (id, run) = start("REQUEST-MARK-ALLOWED").await;
    let before = run_status(run.clone()).await;
    assert!(!before["staked"].to_string().contains("caller"), "{before}");
    w.caller.decide(&id, json!({"decision": "allow"})).await;
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    let seen: String = w
        .provider
        .0
        .lock()
        .expect("log")
        .iter()
        .map(|(_, body)| body.to_string())
        .collect();
    assert!(
        seen.contains("REQUEST-MARK-ALLOWED"),
        "the allowed request ran"
    );
    assert!(seen.contains("SOURCE-MARK-UNSTAKED"), "with its source");
    assert!(
        !seen.contains("REQUEST-MARK-DENIED"),
        "the denied one never did"
    );
}

/// The store's acknowledged writes so far (`GET /metrics`).
async fn store_writes(node: &TestNode) -> u64 {
    let answer = node.get("/metrics").await;
    let text = answer.body.as_str().unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("skillbox_store_writes_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no store_writes in {text}"))
}

/// Issue 33: on a call's critical path every commit is an fsync (and a ledger entry's a head
/// file write besides). The box's answer to a stake is recorded in the transaction of the
/// `Staked` step it brings, not in one of its own: one durable write fewer on each side, with
/// the entry still there, after the stake it answers. The fewest writes of three calls: a step
/// that sometimes comes in between (an event that crossed another) does not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stakes_answer_is_committed_with_the_staked_step() {
    let w = support::world("BODY-COMMITS", "sk-test-KEY-COMMITS", &[], |_| {}, |_| {}).await;
    let (mut caller, mut owner) = (u64::MAX, u64::MAX);
    for _ in 0..3 {
        let before = (store_writes(&w.caller).await, store_writes(&w.owner).await);
        let id = w.call_answered("how many commits?", LIMIT).await;
        let after = (store_writes(&w.caller).await, store_writes(&w.owner).await);
        caller = caller.min(after.0 - before.0);
        owner = owner.min(after.1 - before.1);
        for node in [&w.caller, &w.owner] {
            let all = node.get(&format!("/ledger?call={id}")).await.body;
            let entries = all["entries"].as_array().expect("entries");
            let kinds: Vec<&str> = entries.iter().filter_map(|e| e["kind"].as_str()).collect();
            let at = |k: &str| kinds.iter().position(|x| *x == k);
            let (Some(stake), Some(taken)) = (at("stake"), at("stake_taken")) else {
                panic!("{kinds:?}");
            };
            assert!(stake < taken, "{kinds:?}");
            // The answer repeats the decision the stake followed.
            assert_eq!(entries[taken]["decidedBy"], entries[stake]["decidedBy"]);
            assert_eq!(entries[taken]["answers"], entries[stake]["seq"]);
        }
    }
    eprintln!("store writes for one call (fewest of three): caller {caller}, owner {owner}");
    assert!(caller <= CALLER_WRITES, "caller: {caller} writes");
    assert!(owner <= OWNER_WRITES, "owner: {owner} writes");
    for node in [&w.caller, &w.owner] {
        assert_eq!(node.get("/ledger/verify").await.body["ok"], true);
    }
}

/// A call's store writes on each side: the request, the policy's decision, the run opened and
/// verified, the stake written ahead, the box's answer with `Staked`, the submit, the outcome.
const CALLER_WRITES: u64 = 9;
const OWNER_WRITES: u64 = 11;
