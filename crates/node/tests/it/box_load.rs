//! Spread over boxes: a caller that accepts several boxes able to run a call sends it to the
//! least loaded (those its calls of the same peer and skill used today first), so a burst of
//! calls of several skills is shared, and a box that answers `busy` hands the call to another
//! before anything is staked.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{ProviderLog, tagged_pair};
use serde_json::Value;
use skillbox_jc::run::BoxConfig;

const LIMIT: Duration = Duration::from_secs(60);

/// `n` calls at once from a caller to an owner offering `taste` and the `more` skills, both
/// accepting `boxes`, the calls taking the skills in turn: each call's ended record of the
/// caller and of the owner, once both nodes stopped. Every call was answered and ran exactly
/// once at the provider.
async fn answered_burst(
    provider: &ProviderLog,
    boxes: &[String],
    n: usize,
    more: &[&str],
) -> Vec<(Value, Value)> {
    let accept = |c: &mut skillbox_node::Config| c.boxes.accept = boxes.to_vec();
    let (owner, caller) = tagged_pair(&boxes[0], "LOAD-1", accept).await;
    for skill in more {
        owner
            .add_skill(&support::skill_doc(
                skill,
                &format!("BODY-LOAD-{skill}"),
                &[],
            ))
            .await;
        caller.wait_board(&owner.peer_id, skill).await;
    }
    let skills: Vec<&str> = std::iter::once("taste")
        .chain(more.iter().copied())
        .collect();
    let mut ids = Vec::new();
    for i in 0..n {
        let skill = skills[i % skills.len()];
        ids.push(
            caller
                .start_call(&owner.peer_id, skill, &format!("REQ-LOAD-{i}"))
                .await,
        );
    }
    let mut ended = Vec::new();
    for id in ids {
        let c = caller.wait_call(&id, LIMIT).await;
        assert_eq!(c["state"], "answered", "{c}");
        let o = owner.wait_call(&id, LIMIT).await;
        ended.push((c, o));
    }
    let ran = provider.0.lock().expect("provider log").len();
    assert_eq!(ran, n, "each call ran exactly once");
    caller.stop().await;
    owner.stop().await;
    ended
}

/// A burst of 4 calls to a pair accepting a box on `refusing` (listed first) and an ordinary
/// one: every call ends answered, each caller's record naming the ordinary box. Its URL and the
/// [`answered_burst`] records.
async fn burst_beside(
    provider_url: &str,
    provider: &ProviderLog,
    refusing: BoxConfig,
) -> (String, Vec<(Value, Value)>) {
    let refusing = support::start_box_configured(provider_url, refusing).await;
    let open = support::start_box(provider_url).await;
    let ended = answered_burst(provider, &[refusing, open.clone()], 4, &[]).await;
    for (c, _) in &ended {
        assert_eq!(c["box"], open.as_str(), "{c}");
    }
    (open, ended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_calls_of_several_skills_is_shared_by_the_boxes_both_sides_accept() {
    let (provider_url, provider) = support::provider_double(Duration::from_millis(400)).await;
    let boxes = vec![
        support::start_box(&provider_url).await,
        support::start_box(&provider_url).await,
    ];
    // Calls of four skills: those of one skill stay on the boxes it used today (the owner pins
    // a peer's day of a skill to its box instances, `coverage::day_pin`), the skills spread.
    let ended = answered_burst(&provider, &boxes, 8, &["sip", "sniff", "swirl"]).await;
    let mut per_box = BTreeMap::<String, usize>::new();
    for (c, o) in &ended {
        assert_eq!(c["box"], o["box"], "both sides name the same box: {c} {o}");
        *per_box
            .entry(c["box"].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    for b in &boxes {
        assert!(
            per_box.get(b).copied().unwrap_or(0) >= 2,
            "8 calls at once were not shared: {per_box:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_box_hands_the_call_to_another_before_anything_is_staked() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    // A box that takes no run at all, beside an ordinary one: half of a burst picks the full
    // box first (it reports no load), is refused `busy`, and must move.
    let full = BoxConfig {
        max_runs: 0,
        ..BoxConfig::default()
    };
    let (open, ended) = burst_beside(&provider_url, &provider, full).await;
    for (_, o) in &ended {
        assert_eq!(
            o["box"],
            open.as_str(),
            "the owner was told the box that ran: {o}"
        );
    }
}

/// The box's per-client rate (`--client-rate`) set so low that opens and stakes from the two
/// nodes (one loopback address) are refused `rate_limited` (429): the refusals pass, the calls
/// retry with the machine's backoff and are all answered, each run exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limited_box_is_retried_until_the_calls_are_answered() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let slow = support::start_box_configured(
        &provider_url,
        BoxConfig {
            client_rate: skillbox_jc::run::Rate {
                burst: 2.0,
                per_sec: 4.0,
            },
            ..BoxConfig::default()
        },
    )
    .await;
    // Three calls at once need nine tokens (an open and two stakes each) from a bucket of two.
    let ended = answered_burst(&provider, &[slow], 3, &[]).await;
    for (_, o) in &ended {
        assert_eq!(o["state"], "ran", "{o}");
    }
}

/// A box that serves only its operator's nodes (`--allow-key`) refuses this pair's programs
/// `key_not_allowed`: lasting at that box, so the calls that picked it move to the next box
/// the program lists instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_that_refuses_the_program_hands_the_call_to_another() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let closed = BoxConfig {
        allowed_keys: Some(vec!["00".repeat(32)]),
        ..BoxConfig::default()
    };
    let (_, ended) = burst_beside(&provider_url, &provider, closed).await;
    for (_, o) in &ended {
        assert_eq!(o["state"], "ran", "{o}");
    }
}
