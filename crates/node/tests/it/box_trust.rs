//! Box trust with real nodes, a real box and a man in the middle: a box that cannot sign with
//! the pinned key is refused before anything is staked, and a box that would send plaintext to a
//! provider host the nodes do not pin is refused by both.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{TestNode, tagged_pair};
use serde_json::json;
use skillbox_node::calls::boxes::Boxes;
use skillbox_node::config::BoxPin;
use skillbox_node::store::Store;

const LIMIT: Duration = Duration::from_secs(30);

/// A pin of the box at `url` to `platform`, one `measurement` and, if given, its `key` (no
/// policy, release log or GPU).
fn pin(url: &str, platform: &str, measurement: String, key: Option<String>) -> BoxPin {
    BoxPin {
        url: url.to_owned(),
        platform: platform.into(),
        measurements: vec![measurement],
        key,
        policy: None,
        release_log: None,
        gpu: None,
    }
}

/// Two boxes in front of `provider_url`, each with an identity key of its own: each one's URL
/// and key.
async fn two_keyed_boxes(provider_url: &str) -> [(String, String); 2] {
    let first = support::start_box_keyed(provider_url).await;
    let second = support::start_box_keyed(provider_url).await;
    assert_ne!(first.1, second.1, "two boxes, two keys");
    [first, second]
}

/// A loopback box whose key changes: (`url`, `first`, `first_key`, `second`, `target`) - `url`
/// is a proxy in front of `first`, the first of two keyed boxes (its key `first_key`); setting
/// `target` to `second` puts the other box behind the same URL.
async fn key_change() -> (String, String, String, String, Arc<Mutex<String>>) {
    let (provider_url, _) = support::provider_double(Duration::ZERO).await;
    let [(first, first_key), (second, _)] = two_keyed_boxes(&provider_url).await;
    let (url, _, target) = support::start_rewriting_proxy(&first, |_| {}).await;
    (url, first, first_key, second, target)
}

/// One call from a caller to an owner, both configured by `tune` and pointed at `box_url` (a
/// box in the middle whose requests `seen` logs): it must fail with `code` after the box was
/// asked for its attestation, with nothing staked through it and no prompt at any provider.
/// `tag` marks this test's key, body and request.
async fn refused_before_any_stake(
    box_url: &str,
    tune: impl Fn(&mut skillbox_node::Config) + Copy,
    tag: &str,
    code: &str,
    seen: &Mutex<Vec<String>>,
    provider: &support::ProviderLog,
) {
    let (owner, caller) = tagged_pair(box_url, tag, tune).await;
    let id = caller
        .start_call(&owner.peer_id, "taste", &format!("REQ-{tag}"))
        .await;
    let c = caller.wait_call(&id, LIMIT).await;
    support::assert_failed_naming(&c, code);
    support::assert_refused_before_any_stake(seen, provider);
    support::stop_all([owner, caller]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_on_the_pinned_url_with_another_key_is_refused_before_any_stake() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    // The box both nodes pinned, and another one a man in the middle puts on the pinned URL,
    // whose /healthz claims the pinned box's key.
    let [(_, pinned_key), (other_url, _)] = two_keyed_boxes(&provider_url).await;
    let (proxy_url, seen) = support::start_lying_proxy(&other_url, &pinned_key).await;
    let pin = |c: &mut skillbox_node::Config| {
        c.boxes.pins = vec![pin(
            &proxy_url,
            "insecure-dev",
            "ab".repeat(48),
            Some(pinned_key.clone()),
        )];
    };
    refused_before_any_stake(
        &proxy_url,
        pin,
        "TRUST-1",
        "box_key_not_pinned",
        &seen,
        &provider,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_whose_provider_points_elsewhere_is_not_used() {
    // The box's operator points `openai` at a host of its own (never contacted here).
    let box_url = support::start_box("https://llm.attacker.example/v1").await;
    let (owner, caller) = tagged_pair(&box_url, "TRUST-2", |_| {}).await;
    let a = caller
        .ask_call(&owner.peer_id, "taste", "REQ-TRUST-2")
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
        .ask_call(&owner.peer_id, "taste", "REQ-TRUST-2")
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    // The owner does not pin it: it refuses the program, so its key never goes there.
    let id = a.body["id"].as_str().expect("id").to_owned();
    let c = pinned.wait_call(&id, LIMIT).await;
    support::assert_failed_naming(&c, "program_mismatch");
    support::stop_all([owner, caller, pinned]).await;
}

/// Issue 30 item 2: a box pinned as SEV-SNP whose operator answers with an insecure-dev
/// attestation signed by a key of its own. Both nodes accept insecure-dev boxes (an honest one
/// is in the program too), so the software evidence verified: the caller chose the verifier by
/// the platform the box claimed, and staked the request. Now the pin's platform is the only one
/// taken from that URL: the call fails before anything is staked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hardware_pinned_box_answering_as_insecure_dev_is_refused_before_any_stake() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let (operator_box, _) = support::start_box_keyed(&provider_url).await;
    let snp = "7a".repeat(48);
    let shown = snp.clone();
    // Its /healthz shows exactly the pinned hardware identity; every other answer is the
    // software box's.
    let (pinned_url, seen, _) = support::start_rewriting_proxy(&operator_box, move |h| {
        h["platform"] = json!("sev-snp");
        h["measurement"] = json!(shown);
        h["no_hardware_isolation"] = json!(false);
        if let Some(o) = h.as_object_mut() {
            o.remove("key");
        }
    })
    .await;
    // The honest insecure-dev box, on 127.0.0.2 so that the pinned URL sorts first among boxes
    // equally loaded (the caller tries it first).
    let honest = support::start_box_sorting_last(&provider_url).await;
    assert!(pinned_url < honest);
    let tune = |c: &mut skillbox_node::Config| {
        c.boxes.accept = vec![pinned_url.clone(), honest.clone()];
        let mut hardware = pin(&pinned_url, "sev-snp", snp.clone(), None);
        // A hardware pin names its TCB floor.
        hardware.policy =
            Some(toml::from_str(skillbox_testkit::floors::VIRTEE_SNP_MIN_TCB).expect("toml"));
        c.boxes.pins = vec![hardware];
    };
    refused_before_any_stake(
        &pinned_url,
        tune,
        "DOWNGRADE-1",
        "platform_not_allowed",
        &seen,
        &provider,
    )
    .await;
}

/// Issue 30 item 11: the key a loopback box showed first is kept in the node's store. The node
/// stops; another box takes the URL; the node that starts again on the same store refuses it
/// (it took the new key as a first contact before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_box_showing_another_key_after_a_restart_is_refused() {
    let (url, first, first_key, second, target) = key_change().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("store.db");
    let start = || {
        let store = Arc::new(Store::open(&db).expect("store"));
        Boxes::new(std::slice::from_ref(&url), true, &[], &BTreeMap::new())
            .remembering(store)
            .expect("boxes")
    };
    let boxes = start();
    boxes.refresh().await;
    let status = boxes.status();
    assert_eq!(status[0].last_check.as_ref().and_then(|c| c.refusal), None);
    assert_eq!(
        boxes.first_seen_of(&url).and_then(|s| s.key),
        Some(first_key.clone())
    );
    drop(boxes);

    *target.lock().expect("target") = second;
    let boxes = start();
    boxes.refresh().await;
    let status = boxes.status();
    assert_eq!(
        status[0].last_check.as_ref().and_then(|c| c.refusal),
        Some("key_changed")
    );
    assert!(status[0].known.is_none(), "a refused box is not offered");
    // Its attestations would have to carry the first key: the new box cannot verify.
    assert_eq!(boxes.verify_policy(&url).box_keys, [first_key]);

    // An insecure-dev /healthz without a key is not trusted at all, even on first contact.
    let (bare, _, _) = support::start_rewriting_proxy(&first, |h| {
        if let Some(o) = h.as_object_mut() {
            o.remove("key");
        }
    })
    .await;
    let boxes = Boxes::new(std::slice::from_ref(&bare), true, &[], &BTreeMap::new());
    boxes.refresh().await;
    assert_eq!(
        boxes.status()[0]
            .last_check
            .as_ref()
            .and_then(|c| c.refusal),
        Some("key_missing")
    );
    assert!(boxes.verify_policy(&bare).verifiers.is_empty());
}

/// The same through a whole node: `Node::open` loads what its store kept, so the node that
/// starts again (its peer network asks the boxes) refuses the box that took the URL meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_refuses_a_loopback_box_that_changed_its_key() {
    let (url, _, first_key, second, target) = key_change().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = skillbox_node::Config::on_loopback(&url, vec![]);
    skillbox_node::DataDir::new(dir.path())
        .init(&config)
        .expect("init");
    for (round, expected) in [(0, None), (1, Some("key_changed"))] {
        if round == 1 {
            *target.lock().expect("target") = second.clone();
        }
        let mut node = skillbox_node::Node::open(dir.path()).expect("open");
        node.start_peers().await.expect("peers");
        let calls = node.start_calls().expect("calls");
        let status = calls.boxes().status();
        assert_eq!(
            status[0].last_check.as_ref().and_then(|c| c.refusal),
            expected,
            "round {round}"
        );
        assert_eq!(
            calls.boxes().first_seen_of(&url).and_then(|s| s.key),
            Some(first_key.clone()),
            "round {round}"
        );
        drop(calls);
        drop(node);
    }
}

/// A box that takes its requests and never answers (hung, or hostile) is given up after a few
/// seconds in each refresh, asked beside the other boxes, not before them: a call through the
/// honest box is answered. Before, the boxes were asked one after another, each for up to the
/// client's 120 s: the node's start waited on it, and a call's start (which waits a few seconds
/// for a refresh) never got to the honest box after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_box_that_never_answers_does_not_hold_up_the_others() {
    let (provider_url, _provider) = support::provider_double(Duration::ZERO).await;
    let honest = support::start_box_sorting_last(&provider_url).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hung = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    // The hung box sorts first: it is asked first.
    assert!(hung < honest);
    let (hung_url, honest_url) = (&hung, &honest);
    let tune = move |c: &mut skillbox_node::Config| {
        c.boxes.accept = vec![hung_url.clone(), honest_url.clone()];
    };
    // Two nodes started and a call answered, within what a hang is told apart by (the hung
    // box held each node's start for the client's 120 s before).
    tokio::time::timeout(LIMIT * 3, async {
        let (owner, caller) = support::tagged_pair(&honest, "HUNG-1", tune).await;
        let id = caller
            .start_call(&owner.peer_id, "taste", "REQ-HUNG-1")
            .await;
        let c = caller.wait_call(&id, LIMIT).await;
        assert_eq!(c["state"], "answered", "{c}");
        support::stop_all([owner, caller]).await;
    })
    .await
    .expect("a box that never answers held the nodes up");
}
