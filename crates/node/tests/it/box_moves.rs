//! A box that dies (issue 33 item 4): a run whose box stopped answering before anything was
//! staked moves to another box both sides accept, and the caller's history names the move; a
//! box that dies after this side staked is not left silently — the stake is sealed to that
//! run, so the call waits for it (the box may come back with its runs) and ends with the usual
//! reason, its program's expiry, when it does not.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::hostile::offers_taste;
use crate::support::{self, RawPeer, TestNode, skill_doc, start_box_named, tagged_pair};

const LIMIT: Duration = Duration::from_secs(60);

/// A box reached through a TCP relay the test can cut, as when the box's process dies: the
/// port then refuses new connections and the open ones are closed mid-request. The box answers
/// to the relay's name (its `Host` guard).
struct Relay {
    url: String,
    accept: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn boxed(provider_url: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let name = listener.local_addr().expect("addr").to_string();
        let target = start_box_named(provider_url, &name).await;
        let conns = Arc::new(Mutex::new(Vec::new()));
        let held = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                held.lock().expect("relay").push(conn);
            }
        });
        Relay {
            url: format!("http://{name}"),
            accept,
            conns,
        }
    }

    /// The box dies: nothing listens on its port any more, and every open connection ends.
    async fn kill(self) {
        self.accept.abort();
        // Once the accept loop is gone no connection is added behind the drain.
        let _ = self.accept.await;
        for c in self.conns.lock().expect("relay").drain(..) {
            c.abort();
        }
    }
}

/// An owner offering `taste` and a caller, both accepting `boxes`, the caller's programs valid
/// for `expiry_secs`.
async fn pair(boxes: &[String], expiry_secs: u64) -> (TestNode, TestNode) {
    pair_tuned(boxes, expiry_secs, |_| {}).await
}

/// [`pair`], with `more` applied to both nodes' config.
async fn pair_tuned(
    boxes: &[String],
    expiry_secs: u64,
    more: impl Fn(&mut skillbox_node::Config) + Copy,
) -> (TestNode, TestNode) {
    let tune = move |c: &mut skillbox_node::Config| {
        c.boxes.accept = boxes.to_vec();
        c.calls.expiry_secs = expiry_secs;
        more(c);
    };
    tagged_pair(&boxes[0], "MOVE-1", tune).await
}

/// A call of `request` between a pair ([`pair_tuned`]) accepting two boxes on one provider
/// double answering after `delay`, followed on the caller's side to `state`: the box it is on
/// (`victim`, for the test to kill) and the other one it may move to.
struct OnOneOfTwo {
    provider: support::ProviderLog,
    victim: Relay,
    other: Relay,
    owner: TestNode,
    caller: TestNode,
    id: String,
    /// The caller's view of the call once in `state`.
    call: Value,
}

async fn on_one_of_two(
    delay: Duration,
    expiry_secs: u64,
    more: impl Fn(&mut skillbox_node::Config) + Copy,
    request: &str,
    state: &str,
) -> OnOneOfTwo {
    let (provider_url, provider) = support::provider_double(delay).await;
    let a = Relay::boxed(&provider_url).await;
    let b = Relay::boxed(&provider_url).await;
    let urls = [a.url.clone(), b.url.clone()];
    let (owner, caller) = pair_tuned(&urls, expiry_secs, more).await;
    let id = caller.start_call(&owner.peer_id, "taste", request).await;
    let call = caller.wait_state(&id, &[state], LIMIT).await;
    let on = call["box"].as_str().expect("box");
    let (victim, other) = if on == a.url { (a, b) } else { (b, a) };
    assert_eq!(victim.url, on);
    OnOneOfTwo {
        provider,
        victim,
        other,
        owner,
        caller,
        id,
        call,
    }
}

/// [`on_one_of_two`] parked for the caller's human ([`caller_asks`]), programs valid 15 min.
async fn parked_on_one_of_two(request: &str) -> OnOneOfTwo {
    on_one_of_two(
        Duration::ZERO,
        900,
        caller_asks,
        request,
        "awaiting_consent",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_that_died_before_any_stake_hands_the_run_to_another_and_the_history_says_so() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let dying = Relay::boxed(&provider_url).await;
    let alive = support::start_box(&provider_url).await;
    let dead = dying.url.clone();
    // Both nodes know both boxes (and advertise them) before the first one dies.
    let (owner, caller) = pair(&[dead.clone(), alive.clone()], 900).await;
    owner
        .add_skill(&skill_doc("sip", "BODY-MOVE-SIP", &[]))
        .await;
    caller.wait_board(&owner.peer_id, "sip").await;
    dying.kill().await;
    // Equal load: the first calls of two skills pick the two boxes (a skill's later calls
    // follow the boxes it used today), so one skill's first call picks the dead one.
    let mut ids = Vec::new();
    for i in 0..4 {
        let skill = ["taste", "sip"][i % 2];
        ids.push(
            caller
                .start_call(&owner.peer_id, skill, &format!("REQ-MOVE-{i}"))
                .await,
        );
    }
    let mut moved = 0;
    for id in &ids {
        let c = caller.wait_call(id, LIMIT).await;
        let o = owner.wait_call(id, LIMIT).await;
        assert_eq!(c["state"], "answered", "{c}");
        assert_eq!(o["state"], "ran", "{o}");
        assert_eq!(c["box"], alive.as_str(), "{c}");
        assert_eq!(o["box"], alive.as_str(), "the owner followed the run: {o}");
        // The owner never saw the dead box (the session names the box that opened the run).
        assert!(o.get("moves").is_none(), "{o}");
        if let Some(moves) = c.get("moves") {
            let moves = moves.as_array().expect("moves");
            assert_eq!(moves.len(), 1, "{c}");
            assert_eq!(moves[0]["from"], dead.as_str(), "{c}");
            assert_eq!(moves[0]["to"], alive.as_str(), "{c}");
            assert_eq!(moves[0]["reason"], "box_unreachable", "{c}");
            assert!(moves[0]["atMs"].as_u64().is_some_and(|t| t > 0), "{c}");
            moved += 1;
        }
    }
    assert!(moved >= 1, "no call had picked the dead box");
    assert_eq!(
        provider.0.lock().expect("provider log").len(),
        4,
        "each call ran exactly once"
    );
    support::stop_all([caller, owner]).await;
}

/// The owner's attestation of the caller's run fails for a moment (the box restarting behind
/// its address): the owner verifies the run again at its next retry and the call is answered.
/// It used to wait for another `call.session`, which the caller does not send once one was
/// delivered, until the call stalled (the crash harness, box killed at `staked`, found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_whose_attestation_failed_for_a_moment_verifies_again_and_the_call_is_answered() {
    // The owner asks the box itself (it does not take the caller's forwarded attestation); the
    // caller's attestation comes with its open: the only one asked for on its own is the
    // owner's.
    let asked = answered_with_attestations_refused("FALTER-1", 1, false).await;
    assert_eq!(asked, 2, "one refused, one verified");
}

/// The owner checks the attestation the caller's open got for their joint nonce, forwarded in
/// `call.session`, and asks the box for none (issue 33: a round trip and a step fewer): with
/// every attestation asked on its own refused by the box, the call is still answered. The
/// caller's own comes with its open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_checks_the_forwarded_attestation_and_asks_the_box_for_none() {
    let asked = answered_with_attestations_refused("FORWARD-1", usize::MAX, true).await;
    assert_eq!(asked, 0, "attestations asked on their own");
}

/// A call through a box whose first `refused` attestations asked on their own (`GET
/// .../attestation`) answer 503, the owner taking forwarded attestations or not: answered on
/// both sides, one provider request. Answers how many attestations were asked for.
async fn answered_with_attestations_refused(tag: &str, refused: usize, forwarded: bool) -> usize {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let box_url = support::start_box(&provider_url).await;
    let (proxy_url, seen) = support::start_faltering_proxy(&box_url, "/attestation", refused).await;
    let tune = move |c: &mut skillbox_node::Config| {
        c.schedules.stall_limit_secs = 10;
        c.schedules.sweep_secs = 1;
        c.calls.forwarded_attestations = forwarded;
    };
    let (owner, caller) = tagged_pair(&proxy_url, tag, tune).await;
    let id = caller
        .start_call(&owner.peer_id, "taste", &format!("REQ-{tag}"))
        .await;
    let c = caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    let o = owner.wait_call(&id, LIMIT).await;
    assert_eq!(o["state"], "ran", "{o}");
    let asked = attestations_asked(&seen);
    assert_eq!(provider.0.lock().expect("log").len(), 1);
    support::stop_all([owner, caller]).await;
    asked
}

/// How many attestations a proxy's log shows asked for on their own.
fn attestations_asked(seen: &Mutex<Vec<String>>) -> usize {
    let log = seen.lock().expect("log");
    log.iter().filter(|p| p.contains("/attestation")).count()
}

/// A hostile caller forwards a genuine attestation of its run, but one its open asked for its
/// own nonce, not the joint one with the owner's half (a replay of a report the owner's nonce
/// had no part in): the owner does not take it, asks the box itself, and stakes only after its
/// own check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_attestation_without_the_owners_half_is_not_taken() {
    use skillbox_peers::PayloadKind;
    let (provider_url, _provider) = support::provider_double(Duration::ZERO).await;
    let box_url = support::start_box(&provider_url).await;
    let (proxy_url, seen) = support::start_faltering_proxy(&box_url, "/attestation", 0).await;
    let accept = vec![proxy_url.clone()];
    let owner = TestNode::start(&proxy_url, vec![], move |c| c.boxes.accept = accept).await;
    let id = "00112233445566778899aabbccddee02";
    let (hostile, env, accepted) = admitted_hostile_caller(
        &owner,
        "FWD-H",
        79,
        |o| !o.boxes.is_empty(),
        id,
        &provider_url,
    )
    .await;
    let owner_half = accepted.body["nonce"].as_str().unwrap_or_default();
    assert!(
        skillbox_jc::client::is_nonce_half(owner_half),
        "the owner's half: {:?}",
        accepted.body
    );
    // The open asks for the caller's own nonce: the report is genuine, the owner's half absent.
    let client = skillbox_jc::client::BoxClient::new(&proxy_url).expect("client");
    let own = skillbox_jc::client::new_nonce();
    let opened = client
        .open_attesting_for(&env, own.clone())
        .await
        .expect("open");
    let (att, _) = opened.attestation().expect("attested");
    let run = opened.opened.run_id.clone();
    let asked_before = attestations_asked(&seen);
    hostile
        .send(
            PayloadKind::CallSession,
            id,
            serde_json::json!({"box": proxy_url, "runId": run, "attestation": att, "nonce": own}),
        )
        .await;
    // The owner stakes into the run only once it checked it itself.
    staked_into(&owner, id, &run).await;
    let asked = attestations_asked(&seen);
    assert_eq!(
        asked - asked_before,
        1,
        "the owner asked the box for its own"
    );
    owner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_that_died_after_the_stake_is_not_left_and_the_call_fails_with_its_reason() {
    // The provider takes its time, so the box dies while the run is on it. A run whose box
    // died is waited for (the box may come back with it) until its program expires: short
    // here. Submitted: this side's stake is in (written ahead in the ledger, taken by the box).
    let staked = on_one_of_two(
        Duration::from_secs(3),
        15,
        |_| {},
        "REQ-MOVE-STAKED",
        "submitted",
    )
    .await;
    let (caller, owner, id, other) = (staked.caller, staked.owner, staked.id, staked.other);
    let (on, provider) = (staked.victim.url.clone(), staked.provider);
    staked.victim.kill().await;
    let c = caller.wait_call(&id, LIMIT).await;
    let o = owner.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed", "{c}");
    let code = c["failure"]["code"].as_str().unwrap_or_default();
    assert!(["expired", "peer_failed"].contains(&code), "{c}");
    assert_eq!(c["box"], on.as_str(), "the call stayed on its box: {c}");
    assert!(c.get("moves").is_none(), "no move after a stake: {c}");
    assert_eq!(o["state"], "failed", "{o}");
    assert_eq!(o["box"], on.as_str(), "{o}");
    // Nothing went to the other box: at most the one run on the dead box reached the provider.
    assert!(provider.0.lock().expect("provider log").len() <= 1);
    let stakes = entries(&caller, &id, "stake").await;
    assert_eq!(stakes.len(), 1, "this side had staked: {stakes:?}");
    assert_eq!(stakes[0]["box"], on.as_str(), "{stakes:?}");
    other.kill().await;
    support::stop_all([caller, owner]).await;
}

/// `owner` offering `taste` (its key and body marked `tag`) and a hostile caller speaking the
/// protocol itself (a raw peer of key `seed`), admitted to call `id` once the owner's advert
/// offers `taste` and passes `listed`: the peer, the program (provider at `provider_url`) signed
/// by the caller and then by the owner (the signature its `call.accepted` carries), and that
/// `call.accepted`.
async fn admitted_hostile_caller(
    owner: &TestNode,
    tag: &str,
    seed: u8,
    listed: impl Fn(&skillbox_peers::Advert) -> bool,
    id: &str,
    provider_url: &str,
) -> (
    RawPeer,
    skillbox_jc::dsse::Envelope,
    skillbox_peers::Payload,
) {
    owner
        .offer_taste(&format!("BODY-{tag}"), &format!("sk-{tag}"), &[])
        .await;
    let mut hostile = RawPeer::start(seed, owner).await;
    let offered = hostile
        .advert(LIMIT, |o| listed(o) && offers_taste(o))
        .await;
    let mut program = crate::hostile::admissible_program(&offered, &hostile.key, id);
    program.provider.host = Some(provider_url.to_owned());
    let mut env = skillbox_jc::dsse::sign_program(&program, &hostile.key).expect("sign");
    let wire: Value = serde_json::from_slice(&env.to_json()).expect("json");
    let accepted = hostile
        .request(
            id,
            serde_json::json!({"skill": "taste", "program": wire}),
            LIMIT,
        )
        .await;
    assert_eq!(
        accepted.kind,
        skillbox_peers::PayloadKind::CallAccepted,
        "{:?}",
        accepted.body
    );
    env.signatures
        .push(serde_json::from_value(accepted.body["signature"].clone()).expect("signature"));
    (hostile, env, accepted)
}

/// `owner`'s stake entries of call `id` once one of them is into `run` (within [`LIMIT`]).
async fn staked_into(owner: &TestNode, id: &str, run: &str) -> Vec<Value> {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let stakes = entries(owner, id, "stake").await;
        if stakes.iter().any(|e| e["run"] == run) {
            return stakes;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stake into {run}: {stakes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The caller's human is asked before every stake (the owner's side allows).
fn caller_asks(c: &mut skillbox_node::Config) {
    // The shipped rule, for every call (not only those with sources).
    c.policy.rules.push(skillbox_calls::Rule {
        sources: None,
        ..skillbox_calls::Rule::ask_before_disclosure()
    })
}

/// The call's record once it waits for its human with its run on `box_url`.
async fn asked_on(node: &TestNode, id: &str, box_url: &str) -> Value {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let c = node.get(&format!("/calls/{id}")).await.body;
        if c["state"] == "awaiting_consent" && c["box"] == box_url {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never asked on {box_url}: {c}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn approve(node: &TestNode, id: &str) {
    node.decide(id, serde_json::json!({"decision": "allow"}))
        .await;
}

/// A node's ledger entries of `kind` for call `id`.
async fn entries(node: &TestNode, id: &str, kind: &str) -> Vec<Value> {
    let ledger = node.get(&format!("/ledger?call={id}")).await;
    assert_eq!(ledger.status, 200, "{}", ledger.body);
    ledger.body["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

/// Issue 33 item 4, the rest: the box dies after it opened the run and before the caller's
/// stake (its human had not said yes yet; the owner had staked its body already). The caller's
/// stake finds the box gone, leaves the run for a new one on the other box (fresh run, fresh
/// keys), asks its human again naming that box, and the owner follows the new `call.session`
/// and stakes afresh. Each side staked once per run, the owner's body never into the dead box
/// after it died; both histories name the move, and the call is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_that_died_between_the_open_and_the_callers_stake_hands_the_run_to_another() {
    let parked = parked_on_one_of_two("REQ-MOVE-OPENED").await;
    let (caller, owner, id, other) = (parked.caller, parked.owner, parked.id, parked.other);
    let (on, provider, victim) = (parked.victim.url.clone(), parked.provider, parked.victim);
    let first_run = parked.call["runId"].as_str().expect("run").to_owned();
    // The owner verified that run and staked its body into it; its submit waits for the
    // caller's stake.
    owner.wait_state(&id, &["submitting"], LIMIT).await;
    let before = entries(&owner, &id, "stake").await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["run"], first_run.as_str());
    victim.kill().await;
    approve(&caller, &id).await;
    // A new run on the other box: the question names it, and is asked again.
    let c = asked_on(&caller, &id, &other.url).await;
    let second_run = c["runId"].as_str().expect("run").to_owned();
    assert_ne!(second_run, first_run);
    approve(&caller, &id).await;
    let c = caller.wait_call(&id, LIMIT).await;
    let o = owner.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    assert_eq!(o["state"], "ran", "{o}");
    for view in [&c, &o] {
        assert_eq!(view["box"], other.url.as_str(), "{view}");
        assert_eq!(view["runId"], second_run.as_str(), "{view}");
    }
    // The history: the caller knows why it left; the owner only that the caller moved.
    for (view, reason) in [(&c, "box_unreachable"), (&o, "caller_moved")] {
        let moves = view["moves"].as_array().expect("moves");
        assert_eq!(moves.len(), 1, "{view}");
        assert_eq!(moves[0]["from"], on.as_str(), "{view}");
        assert_eq!(moves[0]["to"], other.url.as_str(), "{view}");
        assert_eq!(moves[0]["reason"], reason, "{view}");
        assert_eq!(moves[0]["run"], first_run.as_str(), "{view}");
    }
    // The owner's body: once into each run, into the dead box only before it died.
    let stakes = entries(&owner, &id, "stake").await;
    let runs: Vec<(&str, &str)> = stakes
        .iter()
        .map(|e| {
            (
                e["run"].as_str().unwrap_or(""),
                e["box"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            (first_run.as_str(), on.as_str()),
            (second_run.as_str(), other.url.as_str())
        ],
        "{stakes:?}"
    );
    assert_eq!(
        stakes[0]["seq"], before[0]["seq"],
        "no stake at the dead box after it died"
    );
    // The caller's request: at most an unanswered attempt at the dead box (it refused the
    // connection), never one it took; taken once at the new run.
    let stakes = entries(&caller, &id, "stake").await;
    let taken = entries(&caller, &id, "stake_taken").await;
    assert!(
        stakes
            .iter()
            .filter(|e| e["run"] == first_run.as_str())
            .count()
            <= 1,
        "{stakes:?}"
    );
    assert_eq!(
        stakes
            .iter()
            .filter(|e| e["run"] == second_run.as_str())
            .count(),
        1,
        "{stakes:?}"
    );
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0]["run"], second_run.as_str(), "{taken:?}");
    assert_eq!(
        provider.0.lock().expect("provider log").len(),
        1,
        "one run ran"
    );
    other.kill().await;
    support::stop_all([caller, owner]).await;
}

/// A yes is bound to the question it answers. The call parks on `ask` on one box and its
/// human approves; the box dies before the stake is taken and the call parks again on the
/// other box (a fresh run), asking a new question. A yes to the first question given late —
/// a second dashboard tab, an MCP elicitation answered after the move — is refused
/// `question_changed`: no decision is written and the call still waits. A decision naming no
/// question is refused naming the field. The yes to the new question is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_yes_to_the_question_before_the_box_was_lost_does_not_approve_the_new_one() {
    let parked = parked_on_one_of_two("REQ-QUESTION").await;
    let (caller, owner, id, other) = (parked.caller, parked.owner, parked.id, parked.other);
    // The question the human is shown, in the approvals list and the call's view alike.
    let first = caller.question(&id).await;
    let c = parked.call;
    assert_eq!(c["question"], first.as_str(), "{c}");
    owner.wait_state(&id, &["submitting"], LIMIT).await;
    parked.victim.kill().await;
    caller
        .decide(
            &id,
            serde_json::json!({"decision": "allow", "question": first}),
        )
        .await;
    asked_on(&caller, &id, &other.url).await;
    let second = caller.question(&id).await;
    assert_ne!(second, first, "the question names the new box and run");
    let decided = entries(&caller, &id, "decision").await.len();
    let late = caller
        .post_json(
            &format!("/approvals/{id}"),
            serde_json::json!({"decision": "allow", "question": first}),
        )
        .await;
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(late.body["error"], "question_changed", "{}", late.body);
    let bare = caller
        .post_json(
            &format!("/approvals/{id}"),
            serde_json::json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(bare.status, 400, "{}", bare.body);
    assert_eq!(bare.body["error"], "validation_error", "{}", bare.body);
    assert!(
        bare.body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("question")),
        "{}",
        bare.body
    );
    assert_eq!(
        entries(&caller, &id, "decision").await.len(),
        decided,
        "a refused decision writes nothing"
    );
    let c = caller.get(&format!("/calls/{id}")).await.body;
    assert_eq!(c["state"], "awaiting_consent", "{c}");
    assert_eq!(c["box"], other.url.as_str(), "{c}");
    assert_eq!(c["question"], second.as_str(), "{c}");
    caller
        .decide(
            &id,
            serde_json::json!({"decision": "allow", "question": second}),
        )
        .await;
    let c = caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    other.kill().await;
    support::stop_all([caller, owner]).await;
}

/// A hostile caller speaking the protocol itself: admitted, it opens a run of the program on
/// each accepted box in turn and names each in a `call.session`, as if every box died — to
/// have the owner stake its body into many boxes. The owner follows at most `MAX_MOVES` moves
/// (one stake into each of `MAX_MOVES + 1` runs, none twice), ignores a session naming a run it
/// left, and fails the call `too_many_moves` at the next, telling the caller that code.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_cannot_spread_the_owners_body_over_boxes_by_moving_the_run() {
    use skillbox_calls::MAX_MOVES;
    use skillbox_peers::PayloadKind;
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let mut urls = Vec::new();
    for _ in 0..MAX_MOVES + 2 {
        urls.push(support::start_box(&provider_url).await);
    }
    let accept = urls.clone();
    // Every box here may take a run of the day (`[guard] day_box_moves`, which would refuse
    // the third box before the call's own move cap): this is about that cap.
    let owner = TestNode::start(&urls[0], vec![], move |c| {
        c.boxes.accept = accept;
        c.guard.day_box_moves = MAX_MOVES as u32 + 2;
    })
    .await;
    let id = "00112233445566778899aabbccddee01";
    // Admitted once the owner's advert lists every box.
    let (mut hostile, env, _) = admitted_hostile_caller(
        &owner,
        "MOVE-H",
        78,
        |o| o.boxes.len() == urls.len(),
        id,
        &provider_url,
    )
    .await;
    let mut runs = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let client = skillbox_jc::client::BoxClient::new(url).expect("client");
        let run = client.open(&env).await.expect("open").run_id;
        hostile
            .send(
                PayloadKind::CallSession,
                id,
                serde_json::json!({"box": url, "runId": run}),
            )
            .await;
        runs.push(run.clone());
        if i > MAX_MOVES {
            break;
        }
        staked_into(&owner, id, &run).await;
        if i == 1 {
            // Back to the run the owner left: ignored, nothing staked there again.
            hostile
                .send(
                    PayloadKind::CallSession,
                    id,
                    serde_json::json!({"box": urls[0], "runId": runs[0]}),
                )
                .await;
        }
    }
    let o = owner.wait_call(id, LIMIT).await;
    assert_eq!(o["state"], "failed", "{o}");
    assert_eq!(o["failure"]["code"], "too_many_moves", "{o}");
    assert_eq!(o["moves"].as_array().map(Vec::len), Some(MAX_MOVES), "{o}");
    // Told to the caller by its code and fixed words.
    let told = loop {
        let got = hostile.next(LIMIT).await;
        if got.kind == PayloadKind::CallFailed {
            break got.body;
        }
    };
    assert_eq!(told["code"], "too_many_moves", "{told}");
    assert_eq!(told["message"], "the run moved to another box too often");
    // The body went into the first MAX_MOVES + 1 runs, once each, and never into the last.
    let stakes = entries(&owner, id, "stake").await;
    let into: Vec<&str> = stakes
        .iter()
        .map(|e| e["run"].as_str().unwrap_or(""))
        .collect();
    let expected: Vec<&str> = runs[..=MAX_MOVES].iter().map(String::as_str).collect();
    assert_eq!(into, expected, "{stakes:?}");
    assert!(
        provider.0.lock().expect("provider log").is_empty(),
        "nothing ran"
    );
    // Each run the owner left, and the one it failed in, is deleted at its box: the body
    // does not stay there until the program expires.
    for (url, run) in urls.iter().zip(&runs).take(MAX_MOVES + 1) {
        let client = skillbox_jc::client::BoxClient::new(url).expect("client");
        let deadline = std::time::Instant::now() + LIMIT;
        while client.status(run).await.is_ok() {
            assert!(std::time::Instant::now() < deadline, "{run} still at {url}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    hostile.handle.shutdown().await;
    owner.stop().await;
}
