//! Coverage across calls, end to end (issue 32 item 4): a caller asks an obedient model for the
//! skill body a third per call and for an access code three characters per call, each answer
//! under the guard's per-answer limits. The box tells the owner (sealed to it) which of the
//! body's 16 regions each released answer touched and its secret's share rounded up to a
//! level; the owner unions the regions and sums the levels per peer, skill and day and refuses
//! the call that would take more (`coverage_exceeded`, fixed words); a 4-digit PIN two digits
//! per call likewise, and
//! calls sent at the same time add up as calls one after the other do. With the thresholds off
//! the same calls all pass: the attack works without the fix. Real box, nodes and stores; the
//! provider double obeys.

use std::time::Duration;

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use skillbox_guard::{permille_of, regions_permille};
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
}

/// An owner offering `lore` and `vault` with its `[guard]` coverage thresholds as given, and a
/// caller that sees them.
async fn valley(coverage_permille: u32, canary_coverage_permille: u32) -> Valley {
    let app = axum::Router::new().route("/v1/chat/completions", post(obedient));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the provider");
    let provider = format!("http://{}/v1", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let box_url = start_box(&provider).await;
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
    Valley { owner, caller }
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

    /// The owner's record of how much the caller took of `skill` today: the body's regions
    /// covered and the most covered secret's summed levels, per mille.
    fn tally(&self, skill: &str) -> (u64, u64) {
        let db = rusqlite::Connection::open(self.owner.dir.path().join("node.db")).expect("db");
        let (regions, canary): (i64, i64) = db
            .query_row(
                "SELECT regions, canary FROM guard_coverage WHERE peer = ?1 AND skill = ?2",
                [&self.caller.peer_id, skill],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("the owner keeps the peer's coverage");
        let parts = |n: i64| u64::try_from(n).expect("a sum is never negative");
        let regions = u16::try_from(regions).expect("a mask of 16 regions");
        (regions_permille(regions), permille_of(parts(canary)))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slices_and_halves_add_up_and_the_owner_refuses_the_call_past_them() {
    let v = valley(350, 500).await;
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
    // ...but a third touches 6 of the body's 16 regions, 375 per mille, past what the owner
    // lets one peer take in a day: the second call is refused before anything is staked
    // (with the union of positions the owner was told before, the third was).
    refused_for_coverage(&v.call("lore", "words 40 80").await);
    refused_for_coverage(&v.call("lore", "words 80 120").await);
    assert_eq!(v.tally("lore").0, 375);

    // The access code in halves of three characters (each under the check's fragments): the
    // first half is half the code, and the second call is refused.
    let c = v.call("vault", "code 0 3").await;
    assert_eq!(c["state"], "answered", "{c}");
    assert_eq!(c["answer"], "That part is K7P.", "{c}");
    answered.push(c);
    refused_for_coverage(&v.call("vault", "code 3 6").await);
    assert_eq!(v.tally("vault").1, 500);

    // A 4-digit PIN in halves of two digits: half the PIN, and the second half is refused.
    let c = v.call("pin", "code 0 2").await;
    assert_eq!(c["answer"], "That part is 89.", "{c}");
    answered.push(c);
    refused_for_coverage(&v.call("pin", "code 2 4").await);
    assert_eq!(v.tally("pin").1, 500);

    v.caller_sees_nothing_of_the_counting(&answered).await;
    v.stop().await;
}

/// Calls sent at the same time: four calls, each for another quarter of the body (250 permille,
/// under the per-answer guard), started together. Each checked against the sums from before
/// them all, every one got out — the whole body. The owner runs one call of a peer and skill at a
/// time, each checked against the answers before it, so the sums stay where calls one after
/// the other leave them (past 350 permille after the second quarter: the rest are refused).
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
    let tally = v.tally("lore");
    assert!(
        (1..=2).contains(&answered.len()) && refused == 4 - answered.len(),
        "{} answered, {refused} refused, {tally:?}",
        answered.len()
    );
    assert!(tally.0 <= 500, "{tally:?}");
    v.caller_sees_nothing_of_the_counting(&answered).await;
    v.stop().await;
}

/// The same calls with the owner's coverage thresholds off: every slice and half gets out — the
/// attack the thresholds stop. The owner still keeps the record.
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
    assert!(v.tally("lore").0 >= 950);
    assert_eq!(v.code_in_parts("vault", &[(0, 3), (3, 6)]).await, "K7PM2Q");
    assert_eq!(v.tally("vault").1, 1000);
    assert_eq!(v.code_in_parts("pin", &[(0, 2), (2, 4)]).await, "8919");
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
