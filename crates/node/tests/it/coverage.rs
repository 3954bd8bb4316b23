//! Coverage across calls, end to end (issue 32 item 4): a caller asks an obedient model for the
//! skill body a third per call and for an access code three characters per call, each answer
//! under the guard's per-answer limits. The owner's stake gives the box its `[guard]` thresholds
//! (`day_limits`); the box unions the regions and sums the secret levels of the released
//! answers per owner, caller, skill and day, withholds the answer that would take the day to
//! them, and fails the run that would start past them (`coverage_exceeded`, fixed words); the owner's node learns only that refusal and refuses
//! the peer's later calls of the skill that day at admission. A 4-digit PIN two digits per call
//! likewise, and calls sent at the same time add up as calls one after the other do. With the
//! thresholds off the same calls all pass: the attack works without the fix. The owner itself
//! reads nothing of which regions an answer touched (a codebook body read 16 bits of the
//! caller's sources a call off its note). Real box, nodes and stores; the provider double
//! obeys.

use std::time::Duration;

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use skillbox_testkit::prompt::{body_of, request_of};

use crate::support::{TestNode, start_box};

const LIMIT: Duration = Duration::from_secs(30);

/// 120 made-up words (no digits: no canary in them), one line.
fn lore() -> String {
    let (c, v) = (
        ["b", "d", "g", "k", "l", "m", "n", "r", "s", "t"],
        ["a", "e", "i", "o", "u", "y"],
    );
    (0..120)
        .map(|i| {
            format!(
                "{}{}{}{}o",
                c[i % 10],
                v[(i / 10) % 6],
                c[(i / 60 + i * 3) % 10],
                v[i % 6]
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

const VAULT: &str = "Open the shed first, then water the roses. The shed code is [[secret:K7PM2Q]]";

/// A PIN written in, nothing marked (an automatic canary), as the extraction bench's bodies.
const PIN: &str = "Greet the guests and show them the garden. Your PIN is 8919";

/// An OpenAI-compatible model that does what it is told with its instructions: `words A B`
/// answers words A..B of the system prompt's first line, `code A B` characters A..B of its last
/// word; anything else gets a fixed sentence.
async fn obedient(Json(req): Json<Value>) -> Json<Value> {
    // The owner's body without the box's notice, the request out of its suffixed block.
    let system = body_of(req["messages"][0]["content"].as_str().unwrap_or(""));
    let request = request_of(req["messages"][1]["content"].as_str().unwrap_or(""));
    let args: Vec<&str> = request.split_whitespace().collect();
    let span = |a: &str, b: &str, len: usize| {
        let a: usize = a.parse().unwrap_or(0);
        let b: usize = b.parse().unwrap_or(0);
        (a.min(len), b.min(len).max(a.min(len)))
    };
    let answer = match args.as_slice() {
        ["words", a, b] => {
            let w: Vec<&str> = system.lines().next().unwrap_or("").split(' ').collect();
            let (a, b) = span(a, b, w.len());
            format!("Here it is: {}", w[a..b].join(" "))
        }
        ["code", a, b] => {
            let code: Vec<char> = system
                .split_whitespace()
                .last()
                .unwrap_or("")
                .chars()
                .collect();
            let (a, b) = span(a, b, code.len());
            format!("That part is {}.", code[a..b].iter().collect::<String>())
        }
        _ => "I can help with the task itself.".to_owned(),
    };
    Json(json!({
        "id": "chatcmpl-obedient",
        "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": answer } }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    }))
}

fn doc(name: &str, body: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: Answers questions about the valley.\nprovider: openai\nmodel: gpt-test\nkey: openai-key\n---\n{body}\n"
    )
}

struct Valley {
    owner: TestNode,
    caller: TestNode,
    box_url: String,
}

/// An owner offering `lore` and `vault` with its `[guard]` coverage thresholds as given, and a
/// caller that sees them.
async fn valley(coverage_permille: u32, canary_coverage_permille: u32) -> Valley {
    let box_url = obedient_box().await;
    valley_at(box_url, coverage_permille, canary_coverage_permille).await
}

/// A box whose provider is the obedient model: its URL.
async fn obedient_box() -> String {
    let app = axum::Router::new().route("/v1/chat/completions", post(obedient));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the provider");
    let provider = format!("http://{}/v1", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    start_box(&provider).await
}

/// [`valley`] around the box at `box_url` (one behind a proxy, say).
async fn valley_at(
    box_url: String,
    coverage_permille: u32,
    canary_coverage_permille: u32,
) -> Valley {
    let owner = TestNode::start(&box_url, vec![], |c| {
        c.guard.coverage_permille = coverage_permille;
        c.guard.canary_coverage_permille = canary_coverage_permille;
    })
    .await;
    owner
        .put_source("openai-key", "secret", "sk-coverage")
        .await;
    owner.add_skill(&doc("lore", &lore())).await;
    owner.add_skill(&doc("vault", VAULT)).await;
    owner.add_skill(&doc("pin", PIN)).await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], |_| {}).await;
    caller.wait_board(&owner.peer_id, "lore").await;
    caller.wait_board(&owner.peer_id, "vault").await;
    caller.wait_board(&owner.peer_id, "pin").await;
    Valley {
        owner,
        caller,
        box_url,
    }
}

impl Valley {
    async fn call(&self, skill: &str, request: &str) -> Value {
        let id = self
            .caller
            .start_call(&self.owner.peer_id, skill, request)
            .await;
        let c = self.caller.wait_call(&id, LIMIT).await;
        if c["state"] == "answered" {
            // The owner counts an answer when its side of the call ends (it fetches the outcome
            // on its own); the record is read after that.
            self.owner.wait_call(&id, LIMIT).await;
        }
        c
    }

    /// Every row of the owner's `guard_coverage`, each column as text, whatever columns the
    /// table has: what the owner's node keeps of the peers' days.
    fn coverage_rows(&self) -> Vec<String> {
        let db = rusqlite::Connection::open(self.owner.dir.path().join("node.db")).expect("db");
        let mut q = db.prepare("SELECT * FROM guard_coverage").expect("query");
        let n = q.column_count();
        let names: Vec<String> = q.column_names().map(str::to_owned).collect();
        q.query_map([], |r| {
            Ok((0..n)
                .map(|i| {
                    let v: rusqlite::types::Value = r.get(i)?;
                    Ok(format!("{}={v:?}", names[i]))
                })
                .collect::<rusqlite::Result<Vec<_>>>()?
                .join(" "))
        })
        .expect("rows")
        .collect::<rusqlite::Result<Vec<_>>>()
        .expect("rows")
    }

    /// Whether the owner refuses the caller `skill` for the rest of today: the box refused it a
    /// run (its day used up).
    fn refused_today(&self, skill: &str) -> bool {
        let db = rusqlite::Connection::open(self.owner.dir.path().join("node.db")).expect("db");
        db.query_row(
            "SELECT COUNT(*) FROM guard_coverage WHERE peer = ?1 AND skill = ?2",
            [&self.caller.peer_id, skill],
            |r| r.get::<_, i64>(0),
        )
        .expect("count")
            > 0
    }

    /// A call of `skill` the box refused at its run's start for the day: both sides end with
    /// `coverage_exceeded` and its fixed words, and the owner refuses the skill from now on.
    async fn refused_by_the_box(&self, skill: &str, request: &str) {
        let id = self
            .caller
            .start_call(&self.owner.peer_id, skill, request)
            .await;
        let c = self.caller.wait_call(&id, LIMIT).await;
        refused_for_coverage(&c);
        // The box's word, whichever of the two sides heard it first.
        assert_eq!(c["failure"]["code"], "coverage_exceeded", "{c}");
        let o = self.owner.wait_call(&id, LIMIT).await;
        assert_eq!(o["failure"]["code"], "coverage_exceeded", "{o}");
        assert!(o["runId"].is_string(), "the box was asked to run it: {o}");
        assert!(
            self.refused_today(skill),
            "the owner kept no refusal of {skill}: guard_coverage {:?}",
            self.coverage_rows()
        );
    }

    /// A call of `skill` the owner refuses at admission (the box refused the skill today): no
    /// run, nothing staked.
    async fn refused_at_admission(&self, skill: &str, request: &str) {
        let c = self.call(skill, request).await;
        refused_for_coverage(&c);
        assert!(c["runId"].is_null(), "{c}");
    }

    /// The code of `skill` asked for a part (`code A B`) at a time: each call answered, the
    /// parts joined.
    async fn code_in_parts(&self, skill: &str, parts: &[(usize, usize)]) -> String {
        let mut code = String::new();
        for (a, b) in parts {
            let c = self.call(skill, &format!("code {a} {b}")).await;
            assert_eq!(c["state"], "answered", "{c}");
            let t = c["answer"].as_str().expect("answer");
            code.push_str(t.trim_start_matches("That part is ").trim_end_matches('.'));
        }
        code
    }

    /// Both nodes stopped, the caller first.
    async fn stop(self) {
        self.caller.stop().await;
        self.owner.stop().await;
    }

    /// The caller's history and each answered call's view say nothing of the guard or of
    /// what the owner counts.
    async fn caller_sees_nothing_of_the_counting(&self, answered: &[Value]) {
        let history = self.caller.get("/calls").await;
        assert_eq!(history.status, 200, "{}", history.body);
        for view in answered {
            let id = view["id"].as_str().expect("id");
            let listed = history.body.to_string();
            assert!(listed.contains(id), "{listed}");
            let mut v = view.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("answer");
            }
            let text = v.to_string().to_lowercase();
            for word in ["guard", "acted", "coverage", "permille"] {
                assert!(!text.contains(word), "{word} in the caller's view: {text}");
            }
        }
        let text = history.body.to_string().to_lowercase();
        for word in ["guard", "acted", "permille"] {
            assert!(
                !text.contains(word),
                "{word} in the caller's history: {text}"
            );
        }
    }
}

fn refused_for_coverage(c: &Value) {
    assert_eq!(c["state"], "failed", "{c}");
    let m = c["failure"]["message"].as_str().unwrap_or("");
    assert!(m.contains("coverage_exceeded"), "{c}");
    // The fixed words only: nothing of how much was taken.
    assert!(!m.chars().any(|ch| ch.is_ascii_digit()), "{m}");
}

/// The box's answer to the call whose answer would take the day to the owner's limits: what a
/// catch gets (review 24b G0), never the slice.
fn withheld(c: &Value) {
    assert_eq!(c["state"], "answered", "{c}");
    assert_eq!(c["answer"], skillbox_jc::run::WITHHELD_ANSWER, "{c}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slices_and_halves_add_up_and_the_owner_refuses_the_call_past_them() {
    // Limits a slice stays under (at 350/500 the first slice alone reaches them and is withheld).
    let v = valley(500, 750).await;
    let mut answered = Vec::new();
    // The body a third per call: each third passes the per-answer guard...
    let c = v.call("lore", "words 0 40").await;
    assert_eq!(c["state"], "answered", "{c}");
    assert!(
        c["answer"]
            .as_str()
            .is_some_and(|t| t.starts_with("Here it is: ")),
        "{c}"
    );
    answered.push(c);
    // ...but a third touches 6 of the body's 16 regions: the second would take the day to 11,
    // past what the owner lets one peer take in a day, so the box withholds it and charges it;
    // it fails the third call's run at its start, before any provider request, and the fourth
    // is refused at the owner's admission.
    withheld(&v.call("lore", "words 40 80").await);
    v.refused_by_the_box("lore", "words 80 120").await;
    v.refused_at_admission("lore", "words 80 120").await;

    // The access code in halves of three characters (each under the check's fragments): the
    // first half is half the code, the second would make it whole and is withheld, and the next
    // call is refused.
    let c = v.call("vault", "code 0 3").await;
    assert_eq!(c["state"], "answered", "{c}");
    assert_eq!(c["answer"], "That part is K7P.", "{c}");
    answered.push(c);
    withheld(&v.call("vault", "code 3 6").await);
    v.refused_by_the_box("vault", "code 3 6").await;

    // A 4-digit PIN in halves of two digits: half the PIN, the second half withheld, refused.
    let c = v.call("pin", "code 0 2").await;
    assert_eq!(c["answer"], "That part is 89.", "{c}");
    answered.push(c);
    withheld(&v.call("pin", "code 2 4").await);
    v.refused_by_the_box("pin", "code 2 4").await;
    v.refused_at_admission("pin", "code 2 4").await;

    v.caller_sees_nothing_of_the_counting(&answered).await;
    v.stop().await;
}

/// Calls sent at the same time: four calls, each for another quarter of the body (250 permille,
/// under the per-answer guard), started together. Runs started side by side are each checked
/// against the box's tally from before them all: every one got out — the whole body. The owner
/// submits one call of a peer and skill at a time, each after the outcome of the one before,
/// so each run starts against every answer before it (past 350 permille after the second
/// quarter: the rest are refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_sent_at_the_same_time_add_up_as_one_after_the_other() {
    let v = valley(350, 500).await;
    let vr = &v;
    let ask = |a: usize| async move {
        let request = format!("words {a} {}", a + 30);
        vr.caller
            .start_call(&vr.owner.peer_id, "lore", &request)
            .await
    };
    let (a, b, c, d) = tokio::join!(ask(0), ask(30), ask(60), ask(90));
    let mut answered = Vec::new();
    let mut refused = 0;
    for id in [a, b, c, d] {
        let c = v.caller.wait_call(&id, LIMIT).await;
        if c["state"] == "answered" {
            v.owner.wait_call(&id, LIMIT).await;
            answered.push(c);
        } else {
            // The owner refuses it at its submit, when the caller may have submitted already:
            // the caller learns it from the owner or from the box (the run ended), and the
            // owner's record names the code.
            assert_eq!(c["state"], "failed", "{c}");
            let o = v.owner.wait_call(&id, LIMIT).await;
            assert_eq!(o["failure"]["code"], "coverage_exceeded", "{o}");
            refused += 1;
        }
    }
    // The first call always runs; on a loaded machine a later one may be refused for waiting
    // past its turn, never let through.
    assert!(
        (1..=2).contains(&answered.len()) && refused == 4 - answered.len(),
        "{} answered, {refused} refused",
        answered.len()
    );
    v.caller_sees_nothing_of_the_counting(&answered).await;
    v.stop().await;
}

/// The same calls with the owner's coverage thresholds off (its stake tells the box so): every
/// slice and half gets out — the attack the thresholds stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_thresholds_off_every_slice_gets_out() {
    let v = valley(0, 0).await;
    let mut body = Vec::new();
    for (a, b) in [(0, 40), (40, 80), (80, 120)] {
        let c = v.call("lore", &format!("words {a} {b}")).await;
        assert_eq!(c["state"], "answered", "{c}");
        let t = c["answer"].as_str().expect("answer");
        body.push(t.trim_start_matches("Here it is: ").to_owned());
    }
    assert_eq!(body.join(" "), lore(), "the whole body, a third at a time");
    assert_eq!(v.code_in_parts("vault", &[(0, 3), (3, 6)]).await, "K7PM2Q");
    assert_eq!(v.code_in_parts("pin", &[(0, 2), (2, 4)]).await, "8919");
    assert!(v.coverage_rows().is_empty(), "{:?}", v.coverage_rows());
    v.stop().await;
}

/// The owner's turns are rows of its store, so they outlive a restart; a row left by a call the
/// restarted node no longer has (gone from its store) holds nothing: the next call of that peer
/// and skill takes the turn and is answered, instead of waiting until it expires. (A turn held
/// by a call still submitted across a restart is kept: `calls::coverage` unit tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_left_by_a_call_gone_after_a_restart_holds_nothing() {
    let v = valley(350, 500).await;
    {
        let db = rusqlite::Connection::open(v.owner.dir.path().join("node.db")).expect("db");
        db.execute(
            "INSERT INTO guard_turns (peer, skill, call_id, token, taken_at)
             VALUES (?1, 'lore', 'a-call-before-the-restart', 0, 0)",
            [&v.caller.peer_id],
        )
        .expect("a turn left behind");
    }
    let c = v.call("lore", "words 0 30").await;
    assert_eq!(c["state"], "answered", "{c}");
    // The turn was taken and given back: no row names the call that is gone.
    let db = rusqlite::Connection::open(v.owner.dir.path().join("node.db")).expect("db");
    let left: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM guard_turns WHERE call_id = 'a-call-before-the-restart'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(left, 0);
    v.stop().await;
}

/// An honest day passes: answers that carry nothing of the body, one after the other, are all
/// answered. A peer the box refused a skill is refused that skill only, and another peer calling
/// it is not refused at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_honest_day_passes_and_a_refusal_is_the_peers_and_skills_alone() {
    let v = valley(350, 500).await;
    for _ in 0..5 {
        let c = v.call("lore", "how do I water the roses").await;
        assert_eq!(c["state"], "answered", "{c}");
    }
    assert!(v.coverage_rows().is_empty(), "{:?}", v.coverage_rows());
    let c = v.call("lore", "words 0 40").await;
    assert_eq!(c["state"], "answered", "{c}");
    v.refused_by_the_box("lore", "words 40 80").await;
    let c = v.call("vault", "how do I water the roses").await;
    assert_eq!(c["state"], "answered", "another skill: {c}");
    let other = TestNode::start(&v.box_url, vec![v.owner.p2p.clone()], |_| {}).await;
    other.wait_board(&v.owner.peer_id, "lore").await;
    let id = other
        .start_call(&v.owner.peer_id, "lore", "words 40 80")
        .await;
    let c = other.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "another peer: {c}");
    other.stop().await;
    v.stop().await;
}

/// THE ATTACK, the owner's side: a hostile owner's body holds a phrase per region ("write
/// phrase i iff bit i of the user's source is 1"), so which regions a released answer touched
/// spell out the caller's private input. Here the caller's sealed request picks the region (its
/// first words or its last): after each answered call, nothing the owner's node keeps or shows
/// — its `guard_coverage`, its stored call and receipt, its ledger, its metrics — holds a
/// region mask or a secret level, and the two calls leave the same record. Its stake gave the
/// box its day limits, ledgered as the named item `day_limits`, no source.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_owner_reads_no_regions_off_a_guarded_call() {
    let v = valley(350, 500).await;
    let mut kept = Vec::new();
    for request in ["words 0 7", "words 113 120"] {
        let c = v.call("lore", request).await;
        assert_eq!(c["state"], "answered", "{c}");
        let id = c["id"].as_str().expect("id");
        // What the owner's store keeps of the peers' days: nothing, as nothing was refused.
        let rows = v.coverage_rows();
        assert!(
            rows.is_empty(),
            "guard_coverage gained a row from a released answer ({request}): {rows:?}"
        );
        // The owner's stored call and receipt: whether the guard acted, never how much.
        let db = rusqlite::Connection::open(v.owner.dir.path().join("node.db")).expect("db");
        let record: String = db
            .query_row(
                "SELECT record FROM calls WHERE id = ?1 AND role = 'owner'",
                [id],
                |r| r.get(0),
            )
            .expect("the owner's row");
        let o = v.owner.get(&format!("/calls/{id}")).await;
        assert_eq!(o.status, 200, "{}", o.body);
        assert_eq!(o.body["receipt"]["guard_acted"], false, "{}", o.body);
        let ledger = v.owner.get(&format!("/ledger?call={id}")).await;
        assert_eq!(ledger.status, 200, "{}", ledger.body);
        let metrics = v.owner.get("/metrics").await;
        for (what, text) in [
            ("stored record", record),
            ("call view", o.body.to_string()),
            ("ledger", ledger.body.to_string()),
            ("metrics", metrics.body.to_string()),
        ] {
            let text = text.to_lowercase();
            for word in ["coverage", "region", "canary", "levels"] {
                assert!(!text.contains(word), "{word} in the owner's {what}: {text}");
            }
        }
        // The stake's day limits: a named item, no source.
        let items: Vec<&Value> = ledger.body["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["kind"] == "stake")
            .flat_map(|e| e["items"].as_array().into_iter().flatten())
            .collect();
        let day = items
            .iter()
            .find(|i| i["stake"] == "day_limits")
            .unwrap_or_else(|| panic!("no day_limits item: {items:?}"));
        assert!(day.get("source").is_none(), "{day}");
        assert!(items.iter().all(|i| i.get("source").is_none()), "{items:?}");
        kept.push((rows, o.body["receipt"]["guard_acted"].clone()));
    }
    assert_eq!(kept[0], kept[1], "the owner told the two calls apart");
    v.stop().await;
}

/// Which owner call holds the turn of `peer`'s calls of `taste`, if any (the owner's
/// `guard_turns`).
fn turn_holder(owner: &TestNode, peer: &str) -> Option<String> {
    turn_holder_of(owner, peer, "taste")
}

/// Which owner call holds the turn of `peer`'s calls of `skill`, if any.
fn turn_holder_of(owner: &TestNode, peer: &str, skill: &str) -> Option<String> {
    let db = rusqlite::Connection::open(owner.dir.path().join("node.db")).expect("db");
    db.query_row(
        "SELECT call_id FROM guard_turns WHERE peer = ?1 AND skill = ?2",
        [peer, skill],
        |r| r.get(0),
    )
    .ok()
}

/// Review 22 F3, the owner's side: a caller that fails its call once both sides submitted (its
/// human cancels it; a hostile caller sends `call.failed`) ends the owner's side while the run
/// goes on at the box. The owner gave its one-at-a-time turn back at once, so the next call
/// of that peer and skill submitted and started beside the first — each checked against a day
/// tally without the other's answer. Now the failed call keeps the turn until its run's
/// outcome is in (the owner keeps fetching it), and only then does the next call submit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_failed_once_both_submitted_keeps_the_turn_until_its_run_ends() {
    let (provider_url, provider) = crate::support::provider_double(Duration::from_secs(12)).await;
    let box_url = start_box(&provider_url).await;
    // The owner's `[guard]` thresholds as shipped (on): its calls take turns.
    let (owner, caller) = crate::support::tagged_pair(&box_url, "turn", |_| {}).await;
    let first = caller
        .start_call(&owner.peer_id, "taste", "the first")
        .await;
    owner.wait_state(&first, &["submitted"], LIMIT).await;
    let at_the_provider = std::time::Instant::now() + LIMIT;
    while provider.0.lock().expect("log").is_empty() {
        assert!(
            std::time::Instant::now() < at_the_provider,
            "run 1 never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Run 1 is at the provider (12 s): the caller fails the call.
    let cancelled = caller
        .post_json(&format!("/calls/{first}/cancel"), json!({}))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    let o = owner.wait_state(&first, &["failed"], LIMIT).await;
    assert_eq!(o["failure"]["code"], "peer_failed", "{o}");

    let second = caller
        .start_call(&owner.peer_id, "taste", "the second")
        .await;
    owner
        .wait_state(&second, &["submitting", "submitted"], LIMIT)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let o2 = owner.get(&format!("/calls/{second}")).await;
    assert_eq!(
        o2.body["state"], "submitting",
        "the second call submitted while run 1 was at the box: {}",
        o2.body
    );
    assert_eq!(
        turn_holder(&owner, &caller.peer_id).as_deref(),
        Some(first.as_str()),
        "the failed call's turn was given to the next while its run was at the box"
    );
    assert_eq!(
        provider.0.lock().expect("log").len(),
        1,
        "two runs side by side"
    );

    // Run 1 ends at the box: its outcome gives the turn back, and the second call runs.
    let c2 = caller.wait_call(&second, Duration::from_secs(60)).await;
    assert_eq!(c2["state"], "answered", "{c2}");
    let o = owner.wait_call(&first, LIMIT).await;
    assert_eq!(o["state"], "failed", "the failed call stays failed: {o}");
    // Given back in the background once the second's outcome is in.
    let given_back = std::time::Instant::now() + LIMIT;
    while let Some(holder) = turn_holder(&owner, &caller.peer_id) {
        assert!(
            std::time::Instant::now() < given_back,
            "{holder} kept the turn"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    caller.stop().await;
    owner.stop().await;
}

/// The owner's call of `lore` ended holding its turn while the box's `coverage_exceeded` for its
/// run was not had yet: one call answered, then the owner's result requests held (the caller's
/// omit the note and pass), so the caller heard the box refuse the next run and its
/// `call.failed coverage_exceeded` ended the owner's call once the box's word was not had in
/// 5 s. The valley, the proxy holding the owner's fetch and the ended call's id.
async fn ended_with_the_boxs_word_held() -> (Valley, crate::support::Holding, String) {
    let box_url = obedient_box().await;
    let (front, holding) = crate::support::start_holding_proxy(&box_url, "omit_note=false").await;
    let v = valley_at(front, 350, 500).await;
    let c = v.call("lore", "words 0 40").await;
    assert_eq!(c["state"], "answered", "{c}");

    holding.hold();
    let id = v
        .caller
        .start_call(&v.owner.peer_id, "lore", "words 40 80")
        .await;
    let c = v.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["failure"]["code"], "coverage_exceeded", "{c}");
    let o = v.owner.wait_call(&id, LIMIT).await;
    assert_eq!(
        o["failure"]["code"], "peer_failed",
        "the owner's call ended on the peer's word, its fetch stalled: {o}"
    );
    assert!(holding.held() >= 1, "the owner's fetch was not stalled");
    assert!(!v.refused_today("lore"), "kept before the box's word came");
    (v, holding, id)
}

impl Valley {
    /// The box's refusal of ended call `id`'s run kept within `within` (`lost`: what failed
    /// otherwise), the call still failed on its peer's word, and the peer's next call of `lore`
    /// refused at admission.
    async fn kept_the_late_refusal(&self, id: &str, within: Duration, lost: &str) {
        let kept = std::time::Instant::now() + within;
        while !self.refused_today("lore") {
            assert!(
                std::time::Instant::now() < kept,
                "{lost}: guard_coverage {:?}",
                self.coverage_rows()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let o = self.owner.wait_call(id, LIMIT).await;
        assert_eq!(
            o["failure"]["code"], "peer_failed",
            "failed stays failed: {o}"
        );
        self.refused_at_admission("lore", "words 80 120").await;
    }

    /// The caller's turn of `lore` given back within `within` (`kept`: what failed otherwise,
    /// followed by the call still holding it).
    async fn turn_given_back(&self, within: Duration, kept: &str) {
        let by = std::time::Instant::now() + within;
        while let Some(holder) = turn_holder_of(&self.owner, &self.caller.peer_id, "lore") {
            assert!(std::time::Instant::now() < by, "{kept}: {holder}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Review 22 F3, the owner's side: the box's `coverage_exceeded` for a run whose call already
/// ended here. The owner's own fetch of the outcome stalls, the peer's `call.failed
/// coverage_exceeded` ends the owner's call once the box's word is not had in 5 s, and the
/// stalled fetch then fails (503): the call being over, nothing asked the box again, and the
/// refusal was never kept — the peer's later calls of the skill that day were admitted and run.
/// The owner keeps asking for the run's outcome while the call holds its turn, and keeps the
/// day refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_days_refusal_the_box_gives_after_the_call_ended_is_kept() {
    let (v, holding, id) = ended_with_the_boxs_word_held().await;
    // The stalled fetch fails; the box still has the run's outcome.
    holding.release();
    v.kept_the_late_refusal(
        &id,
        LIMIT,
        "the box's refusal of a run whose call had ended was never kept",
    )
    .await;
    v.stop().await;
}

/// Review 22b R2's residual: an owner call ended holding its turn, and its box then said
/// nothing of the run (every result request the owner sent failed at once) for three asks over
/// 30 s, so the owner gave the turn back. The box was only slow: once it answered again, its
/// run was refused `coverage_exceeded` — and nothing asked it any more, so the owner's record of
/// the peer's day missed that refusal and the peer's next call of the skill that day was
/// admitted. Now the owner goes on asking after the run without the turn and keeps the
/// refusal, once, the turn staying given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_coverage_exceeded_after_the_turn_was_given_back_for_silence_is_kept() {
    let (v, holding, id) = ended_with_the_boxs_word_held().await;
    let holder = || turn_holder_of(&v.owner, &v.caller.peer_id, "lore");
    assert_eq!(
        holder().as_deref(),
        Some(id.as_str()),
        "the ended call does not hold its turn"
    );

    // The box goes silent to the owner: the fetch it held and every ask since fail at once.
    holding.fail();
    v.turn_given_back(
        Duration::from_secs(120),
        "the turn was not given back for the box's silence",
    )
    .await;
    assert!(!v.refused_today("lore"), "kept before the box's word came");

    // The box was only slow: it answers again, the run refused for the day.
    holding.release();
    v.kept_the_late_refusal(
        &id,
        Duration::from_secs(60),
        "the box's coverage_exceeded after the turn was given back for its silence was never kept",
    )
    .await;
    assert_eq!(v.coverage_rows().len(), 1, "{:?}", v.coverage_rows());
    assert_eq!(holder(), None, "the late word took the turn back");
    v.stop().await;
}

/// Review 22b R2's note, the call's own fetch: an owner call ended holding its turn while its
/// box held the call's own result fetch open, and answered every other request. The settling
/// task took that fetch, still running, for the box's word, so the turn — and the box's
/// `coverage_exceeded`, which any other request had — waited for the client's 120 s request
/// timeout. Now a fetch out longer than a box holds one request (30 s) stands for nothing: the
/// box is asked alongside it, and its refusal is kept and the turn given back about 30 s after
/// the call ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fetch_the_box_holds_open_does_not_stand_for_its_word() {
    let (v, holding, id) = ended_with_the_boxs_word_held().await;
    holding.keep();
    v.kept_the_late_refusal(
        &id,
        Duration::from_secs(75),
        "the box's refusal waited behind the fetch it held open",
    )
    .await;
    v.turn_given_back(LIMIT, "the turn was kept").await;
    v.stop().await;
}

/// The day pinned to a box instance (review 22 F1, F2): each box keeps its own day book, and a
/// box with hardware isolation keeps it in memory only. The owner's node pins a peer's day of a
/// skill to the instance (its attested TLS key) of its first run, and counts the calls that go
/// to another: past `[guard] day_box_moves` such a call is refused `coverage_exceeded` before
/// the owner stakes, so neither more boxes nor a restarted box give a caller a fresh day.
mod day_pin {
    use std::time::Duration;

    use serde_json::Value;
    use skillbox_testkit::box_fixture::PathSwitch;

    use super::turn_holder;
    use crate::support::{
        self, TestNode, assert_failed_naming, dev_attester, start_tls_box_behind, tagged_pair,
    };

    const LIMIT: Duration = Duration::from_secs(60);

    /// An owner offering `taste` and a caller, both accepting `urls`, `day_box_moves` = `moves`.
    async fn pair(urls: &[String], tag: &str, moves: u32) -> (TestNode, TestNode) {
        tagged_pair(&urls[0], tag, move |c| {
            c.boxes.accept = urls.to_vec();
            c.guard.day_box_moves = moves;
        })
        .await
    }

    /// Two TLS boxes whose provider is at `provider_url`, each behind a pass-through of its own
    /// (steered to target 3, there is none: the box answers nothing, as a dead one).
    async fn two_boxes(provider_url: &str) -> (PathSwitch, PathSwitch) {
        let (a, b) = (PathSwitch::start().await, PathSwitch::start().await);
        let box_a = start_tls_box_behind(provider_url, &a.host, dev_attester()).await;
        let box_b = start_tls_box_behind(provider_url, &b.host, dev_attester()).await;
        a.relay_to(&[&box_a]);
        b.relay_to(&[&box_b]);
        (a, b)
    }

    /// One call of `taste`, to its end: the caller's record.
    async fn call(owner: &TestNode, caller: &TestNode, request: &str) -> Value {
        let id = caller.start_call(&owner.peer_id, "taste", request).await;
        caller.wait_call(&id, LIMIT).await
    }

    /// The attack (F2): the owner accepts two boxes, each with its own day book; the caller's
    /// first call runs at one, its next at the other. With `day_box_moves = 0` the second is
    /// refused `coverage_exceeded` before anything runs; a call back on the first box, where
    /// the day is pinned, is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_callers_day_does_not_move_to_another_box_past_day_box_moves() {
        let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
        let (a, b) = two_boxes(&provider_url).await;
        let urls = [a.url.clone(), b.url.clone()];
        let (owner, caller) = pair(&urls, "PIN-1", 0).await;
        // The caller is steered: the box it must not use answers nothing (no target 3).
        b.send_to(3).await;
        let first = call(&owner, &caller, "REQ-PIN-1a").await;
        assert_eq!(first["state"], "answered", "{first}");
        assert_eq!(first["box"], a.url.as_str(), "{first}");
        a.send_to(3).await;
        b.send_to(0).await;
        let moved = call(&owner, &caller, "REQ-PIN-1b").await;
        assert_failed_naming(&moved, "coverage_exceeded");
        assert_eq!(provider.0.lock().expect("log").len(), 1, "nothing ran at b");
        // Back where the day is pinned: answered.
        b.send_to(3).await;
        a.send_to(0).await;
        let back = call(&owner, &caller, "REQ-PIN-1c").await;
        assert_eq!(back["state"], "answered", "{back}");
        assert_eq!(provider.0.lock().expect("log").len(), 2);
        support::stop_all([owner, caller]).await;
    }

    /// F1: a box restarted (the same URL and evidence key, a TLS key made afresh, its day book
    /// gone) is another instance. The default `day_box_moves` (1) lets an honest day survive
    /// one restart; the second restart of the day refuses the caller's next call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_box_restarted_twice_in_a_day_is_a_move_too_many() {
        let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
        let path = PathSwitch::start().await;
        let attester = dev_attester();
        let mut starts = Vec::new();
        for _ in 0..3 {
            starts.push(start_tls_box_behind(&provider_url, &path.host, attester.clone()).await);
        }
        path.relay_to(&starts.iter().map(String::as_str).collect::<Vec<_>>());
        let urls = [path.url.clone()];
        let (owner, caller) = pair(&urls, "PIN-2", 1).await;
        let first = call(&owner, &caller, "REQ-PIN-2a").await;
        assert_eq!(first["state"], "answered", "{first}");
        path.send_to(1).await;
        let after_one = call(&owner, &caller, "REQ-PIN-2b").await;
        assert_eq!(after_one["state"], "answered", "one restart: {after_one}");
        path.send_to(2).await;
        let after_two = call(&owner, &caller, "REQ-PIN-2c").await;
        assert_failed_naming(&after_two, "coverage_exceeded");
        assert_eq!(provider.0.lock().expect("log").len(), 2);
        support::stop_all([owner, caller]).await;
    }

    /// Review 22b R2: an owner call fails while its run is at a box that then dies (killed, or
    /// a hostile operator that stops answering). The failed call kept the (peer, skill) turn
    /// until its run's outcome or its program's expiry (15 min), so the caller's next call of
    /// the skill, sent to another box, waited `submitting` behind it all that time. Now the
    /// owner gives the turn back once the dead box has said nothing of the run for a while
    /// (three asks over 30 s), and the next call — one box move, which `day_box_moves`
    /// allows — is answered well before the program's expiry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_dead_boxs_run_does_not_hold_the_turn_until_its_program_expires() {
        // Run 1 sits at the provider long past the test; any other is answered at once. One
        // provider for both boxes: a run moves only to a box with the program's provider host.
        static SITTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        fn first_sits(_system: &str, user: &str) -> String {
            if user.contains("REQ-DEAD-1a") {
                SITTING.store(true, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(600));
            }
            "answered".to_owned()
        }
        let (provider_url, provider) =
            skillbox_testkit::provider::blocking::provider_double_by(first_sits);
        let (a, b) = two_boxes(&provider_url).await;
        let urls = [a.url.clone(), b.url.clone()];
        let (owner, caller) = pair(&urls, "DEAD-1", 1).await;
        // The first call goes to a: b answers nothing for now.
        b.send_to(3).await;
        let first = caller
            .start_call(&owner.peer_id, "taste", "REQ-DEAD-1a")
            .await;
        owner.wait_state(&first, &["submitted"], LIMIT).await;
        let at_the_provider = std::time::Instant::now() + LIMIT;
        while !SITTING.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < at_the_provider,
                "run 1 never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Run 1 is at box a's provider: box a dies (every connection cut, none taken since),
        // and the caller fails the call. The owner's side fails holding the turn.
        a.send_to(3).await;
        let cancelled = caller
            .post_json(&format!("/calls/{first}/cancel"), serde_json::json!({}))
            .await;
        assert_eq!(cancelled.status, 200, "{}", cancelled.body);
        let failed = owner.wait_state(&first, &["failed"], LIMIT).await;
        let died = std::time::Instant::now();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis();
        let expires_in = Duration::from_millis(
            u64::try_from(
                u128::from(failed["expiresAt"].as_u64().unwrap_or(0)).saturating_sub(now_ms),
            )
            .unwrap_or(0),
        );
        // Well before: the turn of a failed call is given back at its program's expiry anyway.
        // The give-back itself takes ~30 s (3 silent asks); the bound leaves room for a loaded
        // machine (a full suite beside it once took past 120 s) and stays far from the expiry.
        let bound = Duration::from_secs(240);
        assert!(
            expires_in > bound * 3,
            "the program expires in {expires_in:?}"
        );

        b.send_to(0).await;
        let second = caller
            .start_call(&owner.peer_id, "taste", "REQ-DEAD-1b")
            .await;
        let done = std::time::Instant::now() + bound;
        let c2 = loop {
            let c = caller.get(&format!("/calls/{second}")).await.body;
            if ["answered", "ran", "failed"].contains(&c["state"].as_str().unwrap_or("")) {
                break c;
            }
            assert!(
                std::time::Instant::now() < done,
                "the caller's next call stalled {:?} behind the dead box's turn ({c}; the owner's side: {}, the turn held by {:?})",
                died.elapsed(),
                owner.get(&format!("/calls/{second}")).await.body,
                turn_holder(&owner, &caller.peer_id)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(c2["state"], "answered", "{c2}");
        assert_eq!(c2["box"], b.url.as_str(), "{c2}");
        // The provider logs a request once answered: run 2's only.
        assert_eq!(provider.0.lock().expect("log").len(), 1, "run 2 ran at b");
        support::stop_all([owner, caller]).await;
    }

    /// The pin's honest cost: a caller accepting three boxes sent a burst of one skill to the
    /// least loaded each time, so its third box's calls were refused `coverage_exceeded` under
    /// the owner's default `day_box_moves` (1). The caller's node now sends a (peer, skill)'s
    /// calls to the boxes it used today first: every call of the burst is answered, on at most
    /// `1 + day_box_moves` boxes, while a call of another skill started in the middle of the
    /// burst still goes to a less loaded box.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_honest_burst_of_one_skill_over_three_boxes_is_answered() {
        let (provider_url, provider) = support::provider_double(Duration::from_millis(200)).await;
        let mut urls = Vec::new();
        for _ in 0..3 {
            urls.push(support::start_box(&provider_url).await);
        }
        let (owner, caller) =
            pair(&urls, "PIN-3", skillbox_node::config::DEFAULT_DAY_BOX_MOVES).await;
        owner
            .add_skill(&support::skill_doc("sip", "BODY-PIN-3-SIP", &[]))
            .await;
        caller.wait_board(&owner.peer_id, "sip").await;
        let mut burst = Vec::new();
        for i in 0..6 {
            burst.push(
                caller
                    .start_call(&owner.peer_id, "taste", &format!("REQ-PIN-3-{i}"))
                    .await,
            );
        }
        let other = caller
            .start_call(&owner.peer_id, "sip", "REQ-PIN-3-SIP")
            .await;
        let mut used = std::collections::BTreeMap::<String, usize>::new();
        for id in &burst {
            let c = caller.wait_call(id, LIMIT).await;
            assert_eq!(c["state"], "answered", "{c}");
            *used.entry(c["box"].to_string()).or_default() += 1;
        }
        assert!(used.len() <= 2, "one skill's day spread over {used:?}");
        let sip = caller.wait_call(&other, LIMIT).await;
        assert_eq!(sip["state"], "answered", "{sip}");
        assert!(
            !used.contains_key(&sip["box"].to_string()),
            "another skill's call did not spread: {sip} beside {used:?}"
        );
        assert_eq!(provider.0.lock().expect("log").len(), 7);
        support::stop_all([owner, caller]).await;
    }
}
