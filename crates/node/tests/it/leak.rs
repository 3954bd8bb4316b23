//! The leak scan over a whole call: unique markers in the skill body, the model, the key, the
//! request and a source. Body, model and key never appear in the caller's store, any payload,
//! the adverts or the logs; request and source never in the owner's store, any payload, the
//! adverts or the logs; no store holds any of them in plaintext. Logs are captured at debug
//! level from every crate of this process (both nodes and the box run here).

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BODY: &str = "BODYMARKER-c41d7";
const MODEL: &str = "model-MARKER-2b9e";
const KEY: &str = "sk-KEYMARKER-88f0a";
const REQUEST: &str = "REQUESTMARKER-5e6b what do I like?";
const SOURCE: &str = "SOURCEMARKER-71aa Radiohead - Weird Fishes";

#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn store_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for f in ["node.db", "node.db-wal"] {
        if let Ok(b) = std::fs::read(dir.join(f)) {
            out.extend(b);
        }
    }
    assert!(!out.is_empty(), "no store files in {}", dir.display());
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The first word of each marker is what is searched: unique, and survives JSON escaping.
fn marker(m: &str) -> &str {
    m.split(' ').next().unwrap_or(m)
}

/// Every log line of this process at debug level, from the first test that asks on.
/// None of the other side's `markers` in `whose` call record (`view`) nor in its store.
fn holds_none_of(markers: &[&String], whose: &str, view: &str, store: &[u8]) {
    for m in markers {
        assert!(
            !view.contains(marker(m)),
            "{m} in the {whose}'s record: {view}"
        );
        assert!(!contains(store, marker(m)), "{m} in the {whose}'s store");
    }
}

pub(crate) fn captured_logs() -> Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .init();
        logs
    })
    .clone()
}

/// The owner's `taste` declared again with `body` and `model` (markers of its own), the
/// caller's `songs` source set to `source`, and the caller's board showing the new declaration
/// (the model changed its digest; it arrives with the next advert).
async fn redeclared(w: &support::World, body: &str, model: &str, source: &str) {
    let doc = support::skill_doc("taste", body, &["songs"]).replace("gpt-test", model);
    w.owner.add_skill(&doc).await;
    w.caller.put_source("songs", "text", source).await;
    let digest = w.owner.get("/skills/taste").await.body["digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    w.caller
        .wait_offer(&w.owner.peer_id, "taste", "the new digest", |s| {
            s.declaration_digest == digest
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_material_appears_where_it_does_not_belong() {
    let logs = captured_logs();

    let w = support::world(BODY, KEY, &["songs"], |_| {}, |_| {}).await;
    // The world's skill names model gpt-test: replace it with one carrying a marker.
    redeclared(&w, BODY, MODEL, SOURCE).await;
    let owner_peer: skillbox_peers::PeerId = w.owner.peer_id.parse().expect("peer id");

    let id = w.call_answered(REQUEST, Duration::from_secs(30)).await;
    // The material did reach the provider inside the box (so the scan is not vacuous).
    let seen = w.provider.0.lock().expect("log").clone();
    let prompt = serde_json::to_string(&seen).expect("json");
    for m in [BODY, KEY, MODEL, REQUEST, SOURCE] {
        assert!(
            contains(prompt.as_bytes(), marker(m)),
            "{m} never reached the provider"
        );
    }
    // Let the last writes and log lines land.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let owner_side = [BODY, MODEL, KEY];
    let caller_side = [REQUEST, SOURCE];
    let all = [BODY, MODEL, KEY, REQUEST, SOURCE];

    // Stores: nothing in plaintext anywhere (the owner's body and key are sealed sources, the
    // caller's request, result key and answer too).
    let caller_store = store_bytes(w.caller.dir.path());
    let owner_store = store_bytes(w.owner.dir.path());
    for m in all {
        assert!(
            !contains(&caller_store, marker(m)),
            "{m} in the caller's store"
        );
        assert!(
            !contains(&owner_store, marker(m)),
            "{m} in the owner's store"
        );
    }
    // Payloads, both ways.
    let payloads: Vec<String> = {
        let mut p = w.caller.sent.lock().expect("sent").clone();
        p.extend(w.owner.sent.lock().expect("sent").iter().cloned());
        p
    };
    // call.request and call.session from the caller, call.accepted from the owner.
    assert!(payloads.len() >= 3, "{} payloads recorded", payloads.len());
    for p in &payloads {
        for m in all {
            assert!(!p.contains(marker(m)), "{m} in a payload: {p}");
        }
    }
    // Adverts: the signed bytes the caller holds of the owner, and both boards.
    let advert = w
        .caller
        .peers
        .signed_advert(&owner_peer)
        .expect("owner's advert");
    for m in all {
        assert!(!contains(&advert, marker(m)), "{m} in the owner's advert");
    }
    for node in [&w.caller, &w.owner] {
        let board = node.get("/board").await.body.to_string();
        let inventory = node.get("/v1/agents").await.body.to_string();
        for m in all {
            assert!(!board.contains(marker(m)), "{m} on a board");
            assert!(!inventory.contains(marker(m)), "{m} in an inventory");
        }
    }
    // Each side's API about the call shows none of the other side's material.
    let owner_view = w.owner.get(&format!("/calls/{id}")).await.body.to_string();
    let caller_view = w.caller.get(&format!("/calls/{id}")).await.body.to_string();
    for m in caller_side {
        assert!(
            !owner_view.contains(marker(m)),
            "{m} in the owner's call record"
        );
    }
    for m in owner_side {
        assert!(
            !caller_view.contains(marker(m)),
            "{m} in the caller's call record"
        );
    }
    // Logs of the whole process at debug level: two nodes, the box, libp2p, the HTTP layers.
    let text = String::from_utf8_lossy(&logs.0.lock().expect("logs")).into_owned();
    assert!(
        text.contains("call requested"),
        "the capture saw the driver's logs"
    );
    for m in all {
        assert!(!text.contains(marker(m)), "{m} in the logs");
    }
}

/// Issue 12: a provider whose errors quote its input (the whole prompt, the key) carries none of
/// it across. The run fails with a closed code on both sides; neither side's store, API, the
/// payloads between them nor any log line of the process (both nodes and the box run here)
/// holds the other side's material — where before, the provider's 200 characters went into the
/// run error, both call records, `call.failed` and INFO logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provider_echoing_its_input_in_errors_carries_nothing_across() {
    let logs = captured_logs();
    for (i, answering) in [
        support::Answering::EchoingErrors,
        support::Answering::EchoingInBand,
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!("ECHOBODY{i}-9f3");
        let model = format!("echo-model{i}-MARK");
        let key = format!("sk-ECHOKEY{i}-7d1");
        let request = format!("ECHOREQ{i}-a83 what do I like?");
        let source = format!("ECHOSRC{i}-0c2 Portishead - Roads");
        let w = support::world_answering(&body, &key, &["songs"], answering, |_| {}, |_| {}).await;
        redeclared(&w, &body, &model, &source).await;
        let id = w
            .caller
            .start_call(&w.owner.peer_id, "taste", &request)
            .await;
        let c = w.caller.wait_call(&id, Duration::from_secs(30)).await;
        let o = w.owner.wait_call(&id, Duration::from_secs(30)).await;
        assert_eq!(c["state"], "failed", "{c}");
        assert_eq!(o["state"], "failed", "{o}");
        // Whichever side fetched the result first failed it and told the other: either way
        // only closed codes.
        skillbox_testkit::answer::assert_failed_upstream(&c);
        // The provider really did echo everything (so the scan is not vacuous).
        let seen = serde_json::to_string(&w.provider.0.lock().expect("log").clone()).expect("json");
        for m in [&body, &key, &model, &request, &source] {
            assert!(
                contains(seen.as_bytes(), marker(m)),
                "{m} never reached the provider"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let owner_side = [&body, &model, &key];
        let caller_side = [&request, &source];
        let caller_view = w.caller.get(&format!("/calls/{id}")).await.body.to_string();
        let owner_view = w.owner.get(&format!("/calls/{id}")).await.body.to_string();
        let caller_store = store_bytes(w.caller.dir.path());
        let owner_store = store_bytes(w.owner.dir.path());
        holds_none_of(&owner_side, "caller", &caller_view, &caller_store);
        holds_none_of(&caller_side, "owner", &owner_view, &owner_store);
        let mut payloads = w.caller.sent.lock().expect("sent").clone();
        payloads.extend(w.owner.sent.lock().expect("sent").iter().cloned());
        assert!(
            payloads
                .iter()
                .any(|p| p.contains("call.failed") || p.contains("CallFailed"))
        );
        for p in &payloads {
            for m in owner_side.iter().chain(caller_side.iter()) {
                assert!(!p.contains(marker(m)), "{m} in a payload: {p}");
            }
        }
        let text = String::from_utf8_lossy(&logs.0.lock().expect("logs")).into_owned();
        for m in owner_side.iter().chain(caller_side.iter()) {
            assert!(!text.contains(marker(m)), "{m} in the logs");
        }
    }
}
