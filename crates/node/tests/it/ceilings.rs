//! Review 26 V3 with real nodes, a real box and real libp2p: the owner's `[ceilings]` hold at
//! every call, not only at import. A skill stored before imports were held (2^53-1 calls a
//! day), or imported asking exactly the `[ceilings]` of its day, follows them when the owner
//! lowers them; a ceiling the owner set with `skill set` still holds as set.

use std::time::Duration;

use crate::support::{self, TestNode, skill_doc, world};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

/// `taste`'s SKILL.md (body `BODY-{tag}`) asking for the ceilings `limits` (lines under
/// `limits:`).
fn taste_asking(tag: &str, limits: &str) -> String {
    skill_doc("taste", &format!("BODY-{tag}"), &[]).replace(
        "key: openai-key\n",
        &format!("key: openai-key\nlimits:\n  {limits}\n"),
    )
}

/// `calls` calls of `taste` from `caller` to `owner` answered, and the next one refused
/// `daily_limit`.
async fn answered_then_daily_limit(caller: &TestNode, owner: &TestNode, calls: usize) {
    for i in 0..calls {
        let id = caller
            .start_call(&owner.peer_id, "taste", &format!("call {i}"))
            .await;
        let c = caller.wait_call(&id, LIMIT).await;
        assert_eq!(c["state"], "answered", "call {i}: {c}");
    }
    let id = caller.start_call(&owner.peer_id, "taste", "one more").await;
    let c = caller.wait_call(&id, LIMIT).await;
    support::assert_failed_naming(&c, "daily_limit");
}

/// Attack 2 (later tightening): a SKILL.md asking exactly the default `[ceilings]` is imported
/// with no warning and stored as it asks; the owner sets `[ceilings] calls_per_day = 2` and
/// restarts its node. The third call of the day is refused `daily_limit`, and the skill's
/// listing (what its advert carries) says 2. Without the fix the skill kept 1000 a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_skill_imported_at_the_ceilings_follows_them_lowered_after_a_restart() {
    let (provider_url, _provider) =
        support::provider_double_answering(Duration::ZERO, support::Answering::Normally).await;
    let box_url = support::start_box(&provider_url).await;
    let owner = TestNode::start(&box_url, vec![], |_| {}).await;
    owner.put_source("openai-key", "secret", "sk-C1").await;
    let doc = taste_asking("C1", "callsPerDay: 1000\n  callsPerPeerPerDay: 100");
    let imported = owner
        .req(
            reqwest::Method::POST,
            "/skills",
            Some(("text/markdown", doc.into_bytes())),
        )
        .await;
    imported.assert_written("taste");
    assert_eq!(imported.body["warnings"], json!([]), "{}", imported.body);
    assert_eq!(imported.body["spends"]["limits"]["callsPerDay"], 1000);

    let owner = owner
        .restarted(|config| {
            let lowered: Vec<String> = config
                .lines()
                .map(|l| match l.starts_with("calls_per_day = ") {
                    true => "calls_per_day = 2".to_owned(),
                    false => l.to_owned(),
                })
                .collect();
            assert_ne!(
                lowered.join("\n"),
                config.trim_end(),
                "the ceiling is in the file"
            );
            lowered.join("\n") + "\n"
        })
        .await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], |_| {}).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    answered_then_daily_limit(&caller, &owner, 2).await;
    let listed = owner.get("/skills").await;
    assert_eq!(
        listed.body["skills"][0]["limits"]["callsPerDay"], 2,
        "{}",
        listed.body
    );
    support::stop_all([caller, owner]).await;
}

/// Attack 1 (upgrade): a skill row as a node from before imports were held stored review 25's
/// SKILL.md (2^53-1 calls a day, 64 MiB answers), as the migration leaves it (no ceiling the
/// owner's). Under `[ceilings] calls_per_day = 2` the third call of the day is refused
/// `daily_limit`. Without the fix it was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_skill_stored_before_imports_were_held_is_held_to_the_ceilings_at_a_call() {
    let w = world(
        "BODY-C2",
        "sk-C2",
        &[],
        |c| c.ceilings.calls_per_day = 2,
        |_| {},
    )
    .await;
    {
        let db = rusqlite::Connection::open(w.owner.dir.path().join("node.db")).expect("db");
        db.busy_timeout(Duration::from_secs(5)).expect("timeout");
        let n = db
            .execute(
                "UPDATE skills SET declaration = json_set(declaration,
                     '$.limits', json('{\"callsPerDay\": 9007199254740991,
                         \"callsPerPeerPerDay\": 9007199254740991, \"maxOutputBytes\": 67108864}'))
                 WHERE name = 'taste'",
                [],
            )
            .expect("the old row");
        assert_eq!(n, 1);
    }
    let stored = w.owner.get("/skills/taste").await;
    assert_eq!(
        stored.body["declaration"]["limits"]["callsPerDay"], 9007199254740991u64,
        "{}",
        stored.body
    );
    answered_then_daily_limit(&w.caller, &w.owner, 2).await;
    support::stop_all([w.caller, w.owner]).await;
}

/// The owner's own word stands: `skill set` (`PATCH /skills/taste`) raises `callsPerDay` to 3
/// above `[ceilings] calls_per_day = 1`, and the skill takes three calls a day, then refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owners_skill_set_above_the_ceilings_still_applies_at_a_call() {
    let w = world(
        "BODY-C3",
        "sk-C3",
        &[],
        |c| c.ceilings.calls_per_day = 1,
        |_| {},
    )
    .await;
    let set = w
        .owner
        .patch_json("/skills/taste", json!({"limits": {"callsPerDay": 3}}))
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    w.caller
        .wait_offer(&w.owner.peer_id, "taste", "limits", |s| {
            s.limits.calls_per_day == Some(3)
        })
        .await;
    answered_then_daily_limit(&w.caller, &w.owner, 3).await;
    support::stop_all([w.caller, w.owner]).await;
}
