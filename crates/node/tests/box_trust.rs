//! Box trust with real nodes, a real box and a man in the middle: a box that cannot sign with
//! the pinned key is refused before anything is staked, and a box that would send plaintext to a
//! provider host the nodes do not pin is refused by both.

mod support;

use std::time::Duration;

use serde_json::json;
use skillbox_node::config::BoxPin;
use support::{TestNode, skill_doc};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_on_the_pinned_url_with_another_key_is_refused_before_any_stake() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    // The box both nodes pinned, and another one a man in the middle puts on the pinned URL,
    // whose /healthz claims the pinned box's key.
    let (_pinned_url, pinned_key) = support::start_box_keyed(&provider_url).await;
    let (other_url, other_key) = support::start_box_keyed(&provider_url).await;
    assert_ne!(pinned_key, other_key);
    let (proxy_url, seen) = support::start_lying_proxy(&other_url, &pinned_key).await;
    let pin = |c: &mut skillbox_node::Config| {
        c.boxes.pins = vec![BoxPin {
            url: proxy_url.clone(),
            platform: "insecure-dev".into(),
            measurements: vec!["ab".repeat(48)],
            key: Some(pinned_key.clone()),
            policy: None,
        }];
    };
    let owner = TestNode::start(&proxy_url, vec![], pin).await;
    owner.put_source("openai-key", "secret", "sk-TRUST-1").await;
    owner
        .add_skill(&skill_doc("taste", "BODY-TRUST-1", &[]))
        .await;
    let caller = TestNode::start(&proxy_url, vec![owner.p2p.clone()], pin).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    let a = caller
        .post_json(
            "/calls",
            json!({"peer": owner.peer_id, "skill": "taste", "request": "REQ-TRUST-1"}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let id = a.body["id"].as_str().expect("id").to_owned();
    let c = caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed", "{c}");
    assert!(
        c["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("box_key_not_pinned")),
        "{c}"
    );
    // Nothing was staked through the man in the middle, and no provider saw a prompt.
    let paths = seen.lock().expect("log").clone();
    assert!(
        paths.iter().any(|p| p.contains("/attestation")),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains("/stakes")), "{paths:?}");
    assert!(provider.0.lock().expect("log").is_empty());
    owner.stop().await;
    caller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_whose_provider_points_elsewhere_is_not_used() {
    // The box's operator points `openai` at a host of its own (never contacted here).
    let box_url = support::start_box("https://llm.attacker.example/v1").await;
    let owner = TestNode::start(&box_url, vec![], |_| {}).await;
    owner.put_source("openai-key", "secret", "sk-TRUST-2").await;
    owner
        .add_skill(&skill_doc("taste", "BODY-TRUST-2", &[]))
        .await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], |_| {}).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    let a = caller
        .post_json(
            "/calls",
            json!({"peer": owner.peer_id, "skill": "taste", "request": "REQ-TRUST-2"}),
        )
        .await;
    assert_eq!(a.body["error"], "no_box_for_provider", "{}", a.body);
    // Pinned by the node's operator, the same host is fine.
    let pinned = TestNode::start(&box_url, vec![owner.p2p.clone()], |c| {
        c.boxes.provider_hosts.insert(
            "openai".into(),
            vec!["https://llm.attacker.example/v1".into()],
        );
    })
    .await;
    pinned.wait_board(&owner.peer_id, "taste").await;
    let a = pinned
        .post_json(
            "/calls",
            json!({"peer": owner.peer_id, "skill": "taste", "request": "REQ-TRUST-2"}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    // The owner does not pin it: it refuses the program, so its key never goes there.
    let id = a.body["id"].as_str().expect("id").to_owned();
    let c = pinned.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "failed", "{c}");
    assert!(
        c["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("program_mismatch")),
        "{c}"
    );
    owner.stop().await;
    caller.stop().await;
    pinned.stop().await;
}
