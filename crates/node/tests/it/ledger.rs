//! The disclosure ledger through real nodes and a real box: every stake each side made and
//! every consent decision, with who decided, the box and the provider; signed and chained;
//! filtered and exported; and never a byte of what was staked. A stake is recorded before its
//! bytes leave (a box that stalls or loses the run cannot make it vanish), and edits of the
//! database under the ledger — its index, its columns, a rollback, a wipe — are seen.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::{TestNode, World, provider_double, world, world_holding_songs};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use skillbox_node::ledger::{self, Entry, Head, Line, Redaction};
use skillbox_testkit::answer::field_of_each;
use skillbox_testkit::old_node::PASTED_KEYS;

const LIMIT: Duration = Duration::from_secs(30);

async fn ledger(node: &TestNode, query: &str) -> Vec<Value> {
    let a = node.get(&format!("/ledger{query}")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.body["entries"].as_array().expect("entries").clone()
}

/// The entries a node's ledger holds for one call, oldest first.
async fn of_call(node: &TestNode, id: &str) -> Vec<Value> {
    let all = ledger(node, "").await;
    all.into_iter().filter(|e| e["call"] == id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_side_records_its_decision_and_its_stake_signed_and_without_content() {
    let w = world_holding_songs(
        "BODY-LEDGER-7",
        "sk-test-KEY-LEDGER-7",
        &["songs"],
        "SOURCE-LEDGER-MARK\n",
    )
    .await;
    let id = w.call_answered("REQUEST-LEDGER-MARK", LIMIT).await;

    // Caller: the policy's default allowed, then the request and `songs` were sealed.
    let mine = of_call(&w.caller, &id).await;
    assert_eq!(mine.len(), 3, "{mine:?}");
    let (decision, stake) = (&mine[0], &mine[1]);
    // The stake was written ahead of its bytes; the box's answer follows it.
    assert_eq!(mine[2]["kind"], "stake_taken", "{mine:?}");
    assert_eq!(mine[2]["answers"], stake["seq"], "{mine:?}");
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
    assert_eq!(
        field_of_each(stake, "items", "stake"),
        ["request", "source"],
        "{stake}"
    );
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

    // Owner: its consent rules' decision first, then body, model and key, and its day limits
    // for the box (no source), staked once allowed — the stake names the decision it follows
    // (review 23 F4: it was staked on admission and decided after). No caller source is named.
    let theirs = of_call(&w.owner, &id).await;
    assert_eq!(theirs.len(), 3, "{theirs:?}");
    assert_eq!(theirs[0]["role"], "owner");
    assert_eq!(theirs[0]["kind"], "decision", "{theirs:?}");
    assert_eq!(theirs[0]["decision"], "allow");
    assert_eq!(theirs[0]["decidedBy"], "default");
    let stake = &theirs[1];
    assert_eq!(stake["kind"], "stake");
    assert_eq!(stake["decidedBy"], "default", "{stake}");
    assert_eq!(stake["sources"], json!([]));
    assert_eq!(
        field_of_each(stake, "items", "stake"),
        ["body", "model", "key", "day_limits"],
        "{stake}"
    );
    assert_eq!(theirs[2]["kind"], "stake_taken");
    assert_eq!(theirs[2]["answers"], stake["seq"], "{theirs:?}");

    // Both verify, chained from their genesis entry.
    for node in [&w.caller, &w.owner] {
        let v = node.get("/ledger/verify").await.body;
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["entries"], 4, "{v}");
        let all = ledger(node, "").await;
        assert_eq!(all[0]["kind"], "genesis", "{all:?}");
        assert_eq!(all[0]["peer"], node.peer_id.as_str());
        assert_eq!(v["signedHead"]["seq"], 4, "{v}");
    }

    // Filters and exports.
    assert_eq!(ledger(&w.caller, "?source=songs").await.len(), 2);
    assert!(ledger(&w.caller, "?source=diary").await.is_empty());
    assert_eq!(
        ledger(&w.caller, &format!("?peer={}", w.owner.peer_id))
            .await
            .len(),
        3
    );
    assert!(ledger(&w.caller, "?since=1h").await.len() == 4);
    assert!(ledger(&w.caller, "?since=99999999999999").await.is_empty());
    let csv = w.caller.get("/ledger?format=csv").await.body;
    let csv = csv.as_str().expect("csv text");
    assert!(csv.starts_with("seq,at,kind,call,"), "{csv}");
    assert_eq!(csv.lines().count(), 5, "{csv}");
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
    let w = world(
        "BODY-LEDGER-8",
        "sk-test-KEY-LEDGER-8",
        &["songs"],
        |_| {},
        support::caller_asks(Some(&["songs"])),
    )
    .await;
    w.caller
        .put_source("songs", "text", "Bonobo - Kerala\n")
        .await;
    let decide = |id: String, body: Value| {
        let w = &w;
        async move {
            w.caller.wait_state(&id, &["awaiting_consent"], LIMIT).await;
            w.caller.decide(&id, body).await;
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
    let d = of_call(&w.caller, &denied).await;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0]["decision"].as_str(), d[0]["decidedBy"].as_str()),
        (Some("deny"), Some("human:api"))
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
    let a = of_call(&w.caller, &allowed).await;
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(a[0]["decidedBy"], "human:api+remember");
    assert_eq!(a[1]["kind"], "stake");
    assert_eq!(a[1]["decidedBy"], "human:api+remember");

    // The remembered rule now decides, and says so.
    let third = w
        .caller
        .start_call(&w.owner.peer_id, "taste", "third")
        .await;
    assert_eq!(w.caller.wait_call(&third, LIMIT).await["state"], "answered");
    let t = of_call(&w.caller, &third).await;
    assert_eq!(t[0]["decidedBy"], "rule:1", "{t:?}");
    assert_eq!(t[1]["decidedBy"], "rule:1", "{t:?}");
    let v = w.caller.get("/ledger/verify").await.body;
    assert_eq!(
        (v["ok"].as_bool(), v["entries"].as_u64()),
        (Some(true), Some(8)),
        "{v}"
    );
}

// ---- a stake is written ahead of its bytes

/// What the box proxy does with a stake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stalling {
    /// Forward it (the box takes it); once both sides' stakes are at the box, hold the answers
    /// `hold` more, then answer `run_not_found`: the box "lost" the run, and answers so to
    /// everything about it from then on.
    ThenLost { hold: Duration },
    /// Forward the first two (both sides' first stakes), hold each answer until the test
    /// releases them, then answer 503 (no answer the node can use); pass the rest through.
    ThenUnavailable,
}

#[derive(Clone)]
struct StallingProxy {
    target: String,
    mode: Stalling,
    http: reqwest::Client,
    /// Stake requests forwarded to the box, and runs the proxy says are lost.
    forwarded: Arc<Mutex<usize>>,
    lost: Arc<Mutex<Vec<String>>>,
    release: Arc<tokio::sync::Notify>,
    released: Arc<Mutex<bool>>,
}

fn run_id_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/runs/")?;
    Some(rest.split(['/', '?']).next()?.to_owned())
}

async fn stalling(
    axum::extract::State(p): axum::extract::State<StallingProxy>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = support::path_of(&req);
    let run = run_id_of(&path);
    let lost = || {
        (
            axum::http::StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "run_not_found", "message": "no such run"})),
        )
            .into_response()
    };
    if run
        .as_ref()
        .is_some_and(|r| p.lost.lock().expect("lost").contains(r))
    {
        return lost();
    }
    let is_stake = req.method() == axum::http::Method::POST && path.contains("/stakes");
    let Some(answer) = support::forward(&p.http, &p.target, req).await else {
        return axum::http::StatusCode::BAD_GATEWAY.into_response();
    };
    let status = answer.status().as_u16();
    let bytes = answer.bytes().await.unwrap_or_default().to_vec();
    if is_stake {
        let n = {
            let mut f = p.forwarded.lock().expect("count");
            *f += 1;
            *f
        };
        match p.mode {
            Stalling::ThenLost { hold } => {
                let both = Instant::now() + LIMIT;
                while *p.forwarded.lock().expect("count") < 2 && Instant::now() < both {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(hold).await;
                if let Some(r) = run {
                    p.lost.lock().expect("lost").push(r);
                }
                return lost();
            }
            Stalling::ThenUnavailable if n <= 2 => {
                while !*p.released.lock().expect("released") {
                    let notified = p.release.notified();
                    if *p.released.lock().expect("released") {
                        break;
                    }
                    notified.await;
                }
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({"error": "unavailable", "message": "try later"})),
                )
                    .into_response();
            }
            Stalling::ThenUnavailable => {}
        }
    }
    (
        axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
        [("content-type", "application/json")],
        bytes,
    )
        .into_response()
}

/// A real loopback HTTP proxy in front of the real test box.
async fn start_stalling_proxy(target: &str, mode: Stalling) -> (String, StallingProxy) {
    let proxy = StallingProxy {
        target: target.to_owned(),
        mode,
        http: reqwest::Client::new(),
        forwarded: Arc::default(),
        lost: Arc::default(),
        release: Arc::default(),
        released: Arc::default(),
    };
    let app = axum::Router::new()
        .fallback(stalling)
        .with_state(proxy.clone());
    (support::serve_loopback(app).await, proxy)
}

/// Owner and caller whose one accepted box is the proxy in front of the real box.
async fn world_behind(
    mode: Stalling,
    tune_caller: impl FnOnce(&mut skillbox_node::Config),
) -> (World, StallingProxy) {
    let (provider_url, provider) = provider_double(Duration::ZERO).await;
    let real_box = support::start_box(&provider_url).await;
    let (box_url, proxy) = start_stalling_proxy(&real_box, mode).await;
    let skill = ("BODY-STALL", "sk-test-STALL", &["songs"][..]);
    let world = support::world_at(box_url, provider, skill, |_| {}, tune_caller).await;
    (world, proxy)
}

async fn source_digest(node: &TestNode, name: &str) -> String {
    let listed = node.get("/sources").await.body;
    listed["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["name"] == name)
        .and_then(|s| s["digest"].as_str())
        .expect("source listed")
        .to_owned()
}

/// Wait until this call's ledger on `node` holds an entry of `kind`; its entries.
async fn wait_entry(node: &TestNode, id: &str, kind: &str) -> Vec<Value> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let all = ledger(node, &format!("?call={id}")).await;
        if all.iter().any(|e| e["kind"] == kind) {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "no {kind} entry for {id}: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stake_the_box_took_is_recorded_though_the_box_stalled_then_lost_the_run() {
    // The box takes both stakes; the proxy holds its answer past the caller's stall limit,
    // then says the run does not exist. The bytes left: each side's ledger must say so.
    let (w, _proxy) = world_behind(
        Stalling::ThenLost {
            hold: Duration::from_secs(7),
        },
        |c| c.schedules.stall_limit_secs = 4,
    )
    .await;
    w.caller
        .put_source("songs", "text", "SOURCE-STALL-MARK\n")
        .await;
    let songs = source_digest(&w.caller, "songs").await;
    let id = w.caller.start_call(&w.owner.peer_id, "taste", "r").await;
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed", "{c}");
    assert!(
        ["stalled", "box_failed"].contains(&c["failure"]["code"].as_str().unwrap_or("")),
        "{c}"
    );
    for (node, kinds) in [
        (&w.caller, &["request", "source"][..]),
        (&w.owner, &["body", "model", "key", "day_limits"][..]),
    ] {
        let all = wait_entry(node, &id, "stake_refused").await;
        let stake = all
            .iter()
            .find(|e| e["kind"] == "stake")
            .unwrap_or_else(|| panic!("no stake entry though the bytes left: {all:?}"));
        assert_eq!(field_of_each(stake, "items", "stake"), kinds, "{stake}");
        let refused = all
            .iter()
            .find(|e| e["kind"] == "stake_refused")
            .expect("refused");
        assert_eq!(refused["answers"], stake["seq"], "{all:?}");
        assert_eq!(refused["boxCode"], "run_not_found", "{all:?}");
        assert!(!all.iter().any(|e| e["kind"] == "stake_taken"), "{all:?}");
        let v = node.get("/ledger/verify").await.body;
        assert_eq!(v["ok"], true, "{v}");
    }
    let mine = ledger(&w.caller, "?source=songs").await;
    let stake = mine
        .iter()
        .find(|e| e["kind"] == "stake" && e["call"] == id.as_str())
        .expect("songs' stake");
    assert_eq!(stake["items"][1]["digest"], songs.as_str(), "{stake}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_stake_records_the_bytes_that_left_not_the_source_as_it_is_now() {
    // The box takes the stake but the node hears nothing it can use; meanwhile the human edits
    // the source. The retry must not record the new content as what left (nor send it).
    let (w, proxy) = world_behind(Stalling::ThenUnavailable, |_| {}).await;
    w.caller
        .put_source("songs", "text", "Bonobo - Kerala\n")
        .await;
    let before = source_digest(&w.caller, "songs").await;
    let id = w.caller.start_call(&w.owner.peer_id, "taste", "r").await;
    let deadline = Instant::now() + LIMIT;
    while *proxy.forwarded.lock().expect("count") < 2 {
        assert!(
            Instant::now() < deadline,
            "both stakes never reached the box"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.caller
        .put_source("songs", "text", "Aphex Twin - Avril 14th\n")
        .await;
    let after = source_digest(&w.caller, "songs").await;
    assert_ne!(before, after);
    *proxy.released.lock().expect("released") = true;
    proxy.release.notify_waiters();
    let c = w.caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    let all = ledger(&w.caller, &format!("?call={id}")).await;
    let stakes: Vec<&Value> = all.iter().filter(|e| e["kind"] == "stake").collect();
    assert_eq!(stakes.len(), 1, "{all:?}");
    assert_eq!(
        stakes[0]["items"][1]["digest"],
        before.as_str(),
        "the ledger must name the bytes that left: {all:?}"
    );
    let taken = all
        .iter()
        .find(|e| e["kind"] == "stake_taken")
        .expect("taken");
    assert_eq!(taken["answers"], stakes[0]["seq"]);
    assert_eq!(taken["boxCode"], "already_staked", "{taken}");
    // Nothing more was sent: the two first stakes only.
    assert_eq!(*proxy.forwarded.lock().expect("count"), 2);
}

// ---- edits of the database under the ledger

fn db(node: &TestNode) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(node.dir.path().join("node.db")).expect("open db");
    c.busy_timeout(Duration::from_secs(5)).expect("timeout");
    // An attacker with the file drops the append-only triggers first.
    c.execute_batch(
        "DROP TRIGGER IF EXISTS ledger_no_update; DROP TRIGGER IF EXISTS ledger_no_delete;
         DROP TRIGGER IF EXISTS ledger_sources_no_update;
         DROP TRIGGER IF EXISTS ledger_sources_no_delete;",
    )
    .expect("drop triggers");
    c
}

async fn verdict(node: &TestNode) -> (bool, String) {
    let v = node.get("/ledger/verify").await.body;
    (
        v["ok"].as_bool().unwrap_or(false),
        v["reason"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn edits_of_the_database_under_the_ledger_are_seen() {
    let w = world_holding_songs(
        "BODY-EDIT",
        "sk-test-KEY-EDIT",
        &["songs"],
        "Moderat - A New Error\n",
    )
    .await;
    let first = w.caller.start_call(&w.owner.peer_id, "taste", "one").await;
    assert_eq!(w.caller.wait_call(&first, LIMIT).await["state"], "answered");
    // The database as it was after the first call (what a restored backup would hold).
    let c = db(&w.caller);
    let old_head: Vec<u8> = c
        .query_row(
            "SELECT value FROM meta WHERE key = 'ledger_head'",
            [],
            |r| r.get(0),
        )
        .expect("head");
    let old_last: i64 = c
        .query_row("SELECT max(seq) FROM ledger", [], |r| r.get(0))
        .expect("seq");
    let second = w.caller.start_call(&w.owner.peer_id, "taste", "two").await;
    assert_eq!(
        w.caller.wait_call(&second, LIMIT).await["state"],
        "answered"
    );
    assert_eq!(verdict(&w.caller).await, (true, String::new()));
    let songs = ledger(&w.caller, "?source=songs").await.len();
    assert_eq!(songs, 4, "two decisions and two stakes name songs");

    // 1. The per-source index: every `songs` row removed. The view still lists them (it reads
    // the entries), and verify names the edit.
    c.execute("DELETE FROM ledger_sources WHERE name = 'songs'", [])
        .expect("edit index");
    assert_eq!(ledger(&w.caller, "?source=songs").await.len(), songs);
    assert_eq!(verdict(&w.caller).await, (false, "index_mismatch".into()));
    c.execute(
        "INSERT INTO ledger_sources (name, seq)
         SELECT 'songs', seq FROM ledger WHERE entry LIKE '%\"songs\"%'",
        [],
    )
    .expect("restore index");
    assert_eq!(verdict(&w.caller).await, (true, String::new()));

    // 2. The unsigned columns: peer, call id, time — each edit hides nothing from its filter
    // and is named by verify.
    let owner = w.owner.peer_id.clone();
    for (edit, query, expect) in [
        (
            "UPDATE ledger SET peer = '12D3KooWSomeoneElse' WHERE kind = 'stake'",
            format!("?peer={owner}"),
            6,
        ),
        (
            &*format!("UPDATE ledger SET call_id = 'elsewhere' WHERE call_id = '{first}'"),
            format!("?call={first}"),
            3,
        ),
        ("UPDATE ledger SET at = 0", "?since=1h".to_owned(), 7),
    ] {
        c.execute(edit, []).expect("edit column");
        assert_eq!(ledger(&w.caller, &query).await.len(), expect, "{edit}");
        assert_eq!(
            verdict(&w.caller).await,
            (false, "index_mismatch".into()),
            "{edit}"
        );
        c.execute_batch(
            "UPDATE ledger SET peer = json_extract(entry, '$.peer'),
                 call_id = json_extract(entry, '$.call'), at = json_extract(entry, '$.at')",
        )
        .expect("restore columns");
        assert_eq!(verdict(&w.caller).await, (true, String::new()), "{edit}");
    }

    // 3. Rolled back to the database as it was after the first call: its rows and its head
    // agree with each other, but not with the head kept outside the database.
    c.execute("DELETE FROM ledger WHERE seq > ?1", [old_last])
        .expect("cut");
    c.execute("DELETE FROM ledger_sources WHERE seq > ?1", [old_last])
        .expect("cut index");
    c.execute(
        "UPDATE meta SET value = ?1 WHERE key = 'ledger_head'",
        [&old_head],
    )
    .expect("old head");
    assert_eq!(verdict(&w.caller).await, (false, "rolled_back".into()));

    // 4. Wiped: every entry and the head.
    c.execute_batch(
        "DELETE FROM ledger; DELETE FROM ledger_sources; DELETE FROM meta WHERE key = 'ledger_head';",
    )
    .expect("wipe");
    let (ok, reason) = verdict(&w.caller).await;
    assert!(!ok, "a wiped ledger verified");
    assert!(
        ["no_genesis", "rolled_back"].contains(&reason.as_str()),
        "{reason}"
    );
}

#[test]
fn a_database_restored_from_an_older_copy_does_not_verify_nor_is_covered_up() {
    use skillbox_node::ledger::EntryKind;
    use skillbox_node::store::Store;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = skillbox_node::DataDir::new(dir.path());
    data.init(&skillbox_node::Config::default()).expect("init");
    drop(skillbox_node::Node::open(dir.path()).expect("open"));
    let key = ed25519_dalek::SigningKey::from_bytes(data.load_node_key().expect("key").seed());
    let vk = key.verifying_key();
    let db = dir.path().join("node.db");
    let entry = |call: &str| Entry {
        at: 1_700_000_000_000,
        skill: "taste".into(),
        decision: "allow".into(),
        decided_by: "rule:1".into(),
        sources: vec!["songs".into()],
        ..Entry::naming(EntryKind::Decision, call, "caller", "12D3KooWPeer")
    };
    let append = |calls: &[&str]| {
        let store = Store::open(&db).expect("store");
        for c in calls {
            ledger::append_now(&store, &key, entry(c)).expect("append");
        }
        let v = ledger::verify_store(&store, &vk).expect("verify");
        drop(store);
        v
    };
    let v = append(&["c1"]);
    assert!(v.ok, "{v:?}");
    assert_eq!(v.entries, 2, "the genesis and one decision");
    let copy = dir.path().join("older.db");
    std::fs::copy(&db, &copy).expect("copy");
    assert!(append(&["c2", "c3"]).ok);
    // The older copy put back (as a backup restore or a sync tool would).
    std::fs::copy(&copy, &db).expect("restore");
    for side in ["node.db-wal", "node.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(side));
    }
    // The node still opens (its owner must be able to look), and says what happened.
    drop(skillbox_node::Node::open(dir.path()).expect("open"));
    let store = Store::open(&db).expect("store");
    let v = ledger::verify_store(&store, &vk).expect("verify");
    assert_eq!(
        (v.ok, v.entries, v.reason.map(|r| r.as_str())),
        (false, 2, Some("rolled_back")),
        "{v:?}"
    );
    drop(store);
    // New entries past the old length do not cover it up: the head file is never moved to a
    // ledger that does not extend it.
    let v = append(&["c4", "c5", "c6"]);
    assert_eq!(v.reason.map(|r| r.as_str()), Some("rewritten"), "{v:?}");
    // The whole database removed: a new genesis is not the old ledger either.
    std::fs::remove_file(&db).expect("rm db");
    for side in ["node.db-wal", "node.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(side));
    }
    drop(skillbox_node::Node::open(dir.path()).expect("open"));
    let store = Store::open(&db).expect("store");
    let v = ledger::verify_store(&store, &vk).expect("verify");
    assert!(!v.ok, "{v:?}");
}

// ---- what an export and a saved head vouch for (review 25)

/// A node (no box: its ledger is only written to here) and its node key, what whoever takes
/// the data dir holds.
async fn node_and_key() -> (TestNode, SigningKey) {
    let node = TestNode::start("http://127.0.0.1:9", vec![], |_| {}).await;
    let key = skillbox_testkit::old_node::node_key_of(node.dir.path());
    (node, key)
}

/// What `GET /ledger?format=jsonl` exports, as its text and its lines, and the node key in hex
/// as `GET /ledger` names it.
async fn exported(node: &TestNode) -> (String, Vec<Line>, String) {
    let a = node.get("/ledger?format=jsonl").await;
    assert_eq!(a.status, 200, "{}", a.body);
    // One line of JSON Lines is one JSON value, which the answer reads as JSON: back to a line.
    let text = match a.body {
        Value::String(text) => text,
        one => format!("{one}\n"),
    };
    let lines = ledger::parse_jsonl(&text)
        .into_iter()
        .map(|l| l.expect("an entry"))
        .collect();
    let page = node.get("/ledger").await.body;
    let node_key = page["nodeKey"].as_str().expect("nodeKey").to_owned();
    (text, lines, node_key)
}

/// What /tmp/rv25/forge.py did with the node key, offline: rewrite what `line` says, mark it
/// redacted and sign it as shown — the node's own formula (its domain, then each part's
/// length and bytes: the hash, the redaction, the RFC 8785 entry as shown).
fn forge(line: &mut Line, key: &SigningKey, rewrite: impl FnOnce(&mut Entry)) {
    use ed25519_dalek::Signer;
    rewrite(&mut line.entry);
    line.redacted = Some(Redaction::SourceNames);
    let shown = skillbox_jc::jcs::to_canonical(&line.entry).expect("jcs");
    let mut message = b"skillbox-ledger-shown-v1\0".to_vec();
    for part in [line.hash.as_bytes(), b"source_names".as_slice(), &shown] {
        message.extend_from_slice(&(part.len() as u64).to_be_bytes());
        message.extend_from_slice(part);
    }
    line.shown_sig = Some(hex::encode(key.sign(&message).to_bytes()));
}

/// Review 25 R1 against a real node's export: with the node key, the genesis (never redacted)
/// rewritten to name another peer and the redacted stake turned into a refusal that staked
/// nothing into another box, each marked redacted and signed as shown. Against the head `GET
/// /ledger/verify` gives to save (version 2) the forged export is `rewritten` at its first
/// forged line (it verified before), while the node's own export verifies; against the
/// database's head (version 1, as every head saved before) even the node's own export is
/// `unpinned_redaction`, never `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_head_holds_an_exported_redacted_entry_to_what_it_said() {
    let (node, key) = node_and_key().await;
    // What an older node wrote for a call that staked sources stored under pasted keys:
    // entries 2 and 3, which every export shows redacted.
    let store = skillbox_node::store::Store::open(&node.dir.path().join("node.db")).expect("store");
    skillbox_testkit::old_node::ledger_a_stake_into(&store, &key, &PASTED_KEYS);
    let v = node.get("/ledger/verify").await.body;
    assert_eq!(v["ok"], true, "{v}");
    let saved: Head = serde_json::from_value(v["signedHead"].clone()).expect("a head");
    assert_eq!((saved.version(), saved.seq), (2, 3), "{v}");
    let (text, lines, node_key) = exported(&node).await;
    let check = |text: &str, anchor: Option<&Head>| {
        let v = ledger::verify_export_anchored(text, &node_key, anchor).expect("the node key");
        (v.ok, v.broken_at, v.reason.map(|r| r.as_str()), v.redacted)
    };
    assert_eq!(check(&text, Some(&saved)), (true, None, None, vec![2, 3]));

    let mut forged = lines.clone();
    forge(&mut forged[0], &key, |e| {
        e.peer = "12D3KooWForgedPeer".into()
    });
    forge(&mut forged[2], &key, |e| {
        e.decision = "deny".into();
        e.decided_by = "rule:1".into();
        e.items.clear();
        e.box_url = Some("https://other.example".into());
    });
    let forged = ledger::to_jsonl(&forged).expect("jsonl");
    assert_eq!(
        check(&forged, None),
        (true, None, None, vec![1, 2, 3]),
        "without a saved head the node key vouches for any view"
    );
    assert_eq!(
        check(&forged, Some(&saved)),
        (false, Some(1), Some("rewritten"), vec![])
    );

    let v1: Head = serde_json::from_slice(
        &db(&node)
            .query_row(
                "SELECT value FROM meta WHERE key = 'ledger_head'",
                [],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .expect("the database's head"),
    )
    .expect("a head");
    assert_eq!((v1.version(), v1.seq), (1, 3));
    assert_eq!(
        check(&text, Some(&v1)),
        (false, Some(2), Some("unpinned_redaction"), vec![])
    );
    assert_eq!(
        check(&forged, Some(&v1)),
        (false, Some(1), Some("unpinned_redaction"), vec![])
    );
}

/// Review 25 R2: with write access to node.db alone, the genesis entry's row edited (another
/// peer, and a key-shaped source name) under dropped triggers. The node's own check says
/// `hash_mismatch`; `GET /ledger` masked the name and signed the edited text as shown, so the
/// export verified offline. It now masks without signing: the export is `bad_redaction` at
/// that entry and holds no part of the name, and no head is given to save.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_edited_in_the_database_is_not_exported_as_a_verified_redaction() {
    let (node, _) = node_and_key().await;
    let pasted = PASTED_KEYS[0];
    let c = db(&node);
    let edited = c
        .execute(
            "UPDATE ledger SET entry = json_set(entry, '$.peer', '12D3KooWForgedPeer',
                 '$.sources', json_array(?1)) WHERE seq = 1",
            [pasted],
        )
        .expect("edit the row");
    assert_eq!(edited, 1);
    let v = node.get("/ledger/verify").await.body;
    assert_eq!(
        (&v["ok"], &v["reason"]),
        (&json!(false), &json!("hash_mismatch")),
        "{v}"
    );
    assert!(v["signedHead"].is_null(), "{v}");
    let (text, lines, node_key) = exported(&node).await;
    assert_eq!(lines[0].redacted, Some(Redaction::SourceNames), "{text}");
    skillbox_testkit::leak::assert_no_part_of("the export", &text, pasted);
    let v = ledger::verify_export(&text, &node_key).expect("the node key");
    assert_eq!(
        (v.ok, v.broken_at, v.reason.map(|r| r.as_str())),
        (false, Some(1), Some("bad_redaction")),
        "{v:?}"
    );
}
