//! `POST /intents/skill` over a real board: an owner offering 32 skills with real descriptions
//! (from the SKILL.md corpus) and 32 phrased requests from a caller node; each pick starts a
//! real call. Prints the hit rate (must be ≥ 90%); an unrelated request picks nothing; a skill
//! the caller could not call, or one that left the board, is not picked.

use std::time::{Duration, Instant};

use crate::support;
use crate::support::{TestNode, provider_double, start_box};
use serde_json::{Value, json};
use skillbox_testkit::skills::{assert_hit_rate, corpus_declaration, intent_cases};

/// A corpus skill's name and description as an offered `provider: openai` skill.
fn offered_doc(folder: &str) -> (String, String) {
    let d = corpus_declaration(folder);
    // A JSON string is a YAML double-quoted scalar: any description survives.
    let doc = format!(
        "---\nname: {}\ndescription: {}\nprovider: openai\nmodel: gpt-test\nkey: openai-key\n---\nDo the task well.\n",
        d.name,
        serde_json::to_string(&d.description).expect("json")
    );
    (d.name, doc)
}

async fn board_has(node: &TestNode, skill: &str) -> bool {
    let b = node.get("/board").await.body;
    b["board"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["skill"].as_str() == Some(skill))
}

async fn ask(node: &TestNode, text: &str) -> (u16, Value) {
    let a = node
        .post_json("/intents/skill", json!({ "text": text }))
        .await;
    (a.status, a.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_intent_routes_requests_to_the_board_s_skills() {
    let (provider_url, _log) = provider_double(Duration::ZERO).await;
    let box_url = start_box(&provider_url).await;
    // 30 calls a minute per peer is the default admission; this test makes ~35 in seconds.
    let owner = TestNode::start(&box_url, vec![], |c| {
        c.policy.admission.calls_per_minute = 1000
    })
    .await;
    owner.put_source("openai-key", "secret", "sk-test").await;
    let cases = intent_cases();
    assert!(cases.len() >= 30);
    for (folder, _) in &cases {
        let (_, doc) = offered_doc(folder);
        owner.add_skill(&doc).await;
    }
    // A skill needing a source the caller does not hold (yet).
    owner
        .add_skill(&support::skill_doc("music-taste", "B", &["songs"]).replace(
            "Builds a music-taste profile from listening history.",
            "Describes someone's music taste from their listening history.",
        ))
        .await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], |_| {}).await;
    caller.wait_board(&owner.peer_id, "music-taste").await;
    let rows = caller.get("/board").await.body["board"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(rows >= 33, "{rows} rows on the board");

    let mut hits = 0;
    for (folder, request) in &cases {
        let (want, _) = offered_doc(folder);
        let (status, b) = ask(&caller, request).await;
        match (status, b["skill"].as_str()) {
            (201, Some(got)) if got == want => {
                hits += 1;
                assert_eq!(b["peer"], owner.peer_id.as_str());
                assert!(b["score"].as_f64().unwrap_or(0.0) >= 4.0, "{b}");
                let id = b["callId"].as_str().expect("callId");
                assert_eq!(b["call"]["id"], id);
                assert_eq!(b["call"]["skill"], want.as_str());
                if let Some(r) = b["runnerUp"].as_object() {
                    assert!(r["score"].as_f64() <= b["score"].as_f64(), "{b}");
                }
            }
            _ => println!("MISS {request:?}: {status} {b}"),
        }
    }
    assert_hit_rate("intent hit rate over the route", hits, cases.len());
    // Each pick started a real call: they all end answered.
    let calls = caller.get("/calls?role=caller").await.body;
    assert_eq!(calls["total"].as_u64(), Some(hits as u64), "{calls}");
    for c in calls["calls"].as_array().into_iter().flatten() {
        let id = c["id"].as_str().expect("id");
        let done = caller.wait_call(id, Duration::from_secs(30)).await;
        assert_eq!(done["state"], "answered", "{done}");
    }

    // Unrelated requests pick nothing, and say why.
    for text in [
        "what's the weather in Paris tomorrow",
        "give me a recipe for chocolate cake",
    ] {
        let (status, b) = ask(&caller, text).await;
        assert_eq!(status, 409, "{text}: {b}");
        assert_eq!(b["error"], "no_offered_skill");
        assert_eq!(b["details"]["reason"], "no_match", "{b}");
        assert!(b["message"].as_str().unwrap_or("").contains("below"), "{b}");
    }

    // A skill requiring sources this node holds none of is not a candidate ...
    let taste = "describe my music taste from my listening history";
    let (status, b) = ask(&caller, taste).await;
    assert!(status == 409 || b["skill"] != "music-taste", "{status} {b}");
    // ... until the node holds one.
    caller
        .put_source("songs", "text", "Bonobo - Kerala\n")
        .await;
    let (status, b) = ask(&caller, taste).await;
    assert_eq!(
        (status, b["skill"].as_str()),
        (201, Some("music-taste")),
        "{b}"
    );
    assert_eq!(
        b["call"]["sources"],
        json!(["songs"]),
        "sources omitted: the held required ones"
    );

    // A skill that leaves the board stops being picked at once.
    let gone = "create-readme";
    let del = owner
        .req(reqwest::Method::DELETE, &format!("/skills/{gone}"), None)
        .await;
    assert_eq!(del.status, 204);
    let deadline = Instant::now() + Duration::from_secs(20);
    while board_has(&caller, gone).await {
        assert!(Instant::now() < deadline, "{gone} never left the board");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, b) = ask(&caller, "write a README file for this project").await;
    assert!(status == 409 || b["skill"] != gone, "{status} {b}");
}

type Counter = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// The caller's board, counting the searches of the skill index the intent makes (each would
/// send index keys to DHT peers) and its passes over the board, and passing everything to the
/// real network.
struct CountingSearches {
    inner: skillbox_peers::PeersHandle,
    searches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    passes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl skillbox_node::calls::Directory for CountingSearches {
    fn offered(&self, peer: &str, skill: &str) -> Option<skillbox_node::calls::Offered> {
        skillbox_node::calls::Directory::offered(&self.inner, peer, skill)
    }
    fn rows(&self) -> Vec<skillbox_peers::BoardRow> {
        self.inner.board()
    }
    fn each_row(&self, f: &mut dyn FnMut(&skillbox_calls::intent::Candidate<'_>, &[String])) {
        self.passes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        skillbox_node::calls::Directory::each_row(&self.inner, f)
    }
    fn search<'a>(
        &'a self,
        text: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        self.searches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        skillbox_node::calls::Directory::search(&self.inner, text)
    }
    fn search_scope(&self) -> skillbox_peers::index::SearchScope {
        self.inner.search_scope()
    }
}

/// A private request the board already answers goes nowhere else under the default
/// `index.search = "category"`: before, every intent searched the index with the request's
/// rarest words first, so DHT peers on the lookup path learnt them even when the board held the
/// skill. A request the board cannot answer still searches (by its category alone, which the
/// peers tests watch from a DHT server), and under `board` nothing is searched at all.
///
/// And the board is read no more than the answer needs: under `category` the pick the board
/// made while deciding is the answer (two passes, BM25's count and its scoring), where it was
/// ranked again after (four); a request it cannot answer reads it twice more after the search
/// (the search may have added to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intent_the_board_answers_searches_no_index() {
    let (provider_url, _log) = provider_double(Duration::ZERO).await;
    let box_url = start_box(&provider_url).await;
    let owner = TestNode::start(&box_url, vec![], |_| {}).await;
    owner.put_source("openai-key", "secret", "sk-test").await;
    let (folder, request) = intent_cases().into_iter().next().expect("a case");
    let (skill, doc) = offered_doc(&folder);
    owner.add_skill(&doc).await;
    let counting = |scope| {
        let searches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let passes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = (searches.clone(), passes.clone());
        let owner_p2p = owner.p2p.clone();
        let box_url = box_url.clone();
        async move {
            let caller = TestNode::start_with_directory(
                &box_url,
                vec![owner_p2p],
                |c| {
                    if let Some(scope) = scope {
                        c.index.search = scope;
                    }
                },
                |h| {
                    std::sync::Arc::new(CountingSearches {
                        inner: h,
                        searches,
                        passes,
                    })
                },
            )
            .await;
            (caller, seen)
        }
    };
    let searched = |(n, _): &(Counter, Counter)| n.load(std::sync::atomic::Ordering::SeqCst);
    let passes = |(_, n): &(Counter, Counter)| n.load(std::sync::atomic::Ordering::SeqCst);

    let (caller, searches) = counting(None).await;
    caller.wait_board(&owner.peer_id, &skill).await;
    let (status, b) = ask(&caller, &request).await;
    assert_eq!(
        (status, b["skill"].as_str()),
        (201, Some(skill.as_str())),
        "{b}"
    );
    assert_eq!(
        searched(&searches),
        0,
        "the board answered: no index search"
    );
    assert_eq!(
        passes(&searches),
        2,
        "the board answered: read once to pick"
    );
    let (status, b) = ask(&caller, "give me a recipe for chocolate cake").await;
    assert_eq!(status, 409, "{b}");
    assert_eq!(
        searched(&searches),
        1,
        "no candidate on the board: one search"
    );
    assert_eq!(
        passes(&searches),
        2 + 4,
        "no pick: ranked again after the search"
    );

    let (caller, searches) = counting(Some(skillbox_peers::index::SearchScope::Board)).await;
    caller.wait_board(&owner.peer_id, &skill).await;
    let (status, _) = ask(&caller, "give me a recipe for chocolate cake").await;
    assert_eq!(status, 409);
    assert_eq!(searched(&searches), 0, "board: never a search");
    assert_eq!(passes(&searches), 2);

    let (caller, searches) = counting(Some(skillbox_peers::index::SearchScope::Terms)).await;
    caller.wait_board(&owner.peer_id, &skill).await;
    let (status, _) = ask(&caller, &request).await;
    assert_eq!(status, 201);
    assert_eq!(searched(&searches), 1, "terms: the index first, as before");
    assert_eq!(passes(&searches), 2);
}
