//! A box's TLS key bound into its attestation, with real nodes (issue 31 item 2): two nodes
//! call through a box serving HTTPS with a key it made at start, and the same call through a
//! TLS front with its own key in front of that box fails `tls_key_not_attested` before anything
//! is staked and before any provider is asked.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, start_tls_box, tagged_pair};
use skillbox_testkit::box_fixture::start_tls_front;

const LIMIT: Duration = Duration::from_secs(30);

/// One call from a caller to an owner, both pointed at `box_url`: the caller's record when it
/// ended.
async fn one_call(box_url: &str, tag: &str) -> serde_json::Value {
    let (owner, caller) = tagged_pair(box_url, tag, |_| {}).await;
    let id = caller
        .start_call(&owner.peer_id, "taste", &format!("REQ-{tag}"))
        .await;
    let c = caller.wait_call(&id, LIMIT).await;
    support::stop_all([owner, caller]).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_through_an_https_box_is_answered() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let box_url = start_tls_box(&provider_url).await;
    let c = one_call(&box_url, "TLS-1").await;
    assert_eq!(c["state"], "answered", "{c}");
    assert_eq!(c["box"], box_url.as_str(), "{c}");
    assert_eq!(provider.0.lock().expect("log").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_front_before_a_real_box_is_refused_before_any_stake() {
    let (provider_url, provider) = support::provider_double(Duration::ZERO).await;
    let box_url = start_tls_box(&provider_url).await;
    let (front_url, seen) = start_tls_front(&box_url).await;
    let c = one_call(&front_url, "TLS-2").await;
    assert_eq!(c["failure"]["code"], "attestation_rejected", "{c}");
    support::assert_failed_naming(&c, "tls_key_not_attested");
    support::assert_refused_before_any_stake(&seen, &provider);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_reaches_the_box_of_its_verified_runs_again() {
    use skillbox_jc::JcError;
    use skillbox_node::calls::boxes::Boxes;
    use skillbox_node::store::Store;
    let (f, spki) = skillbox_testkit::box_fixture::start_tls(None, true).await;
    let (_, run) = f.open(&f.program()).await;
    assert_eq!(run.tls_spki_sha256.as_deref(), Some(spki.as_str()));
    // The node's store as it stood before the restart: a call whose run it verified.
    let dir = tempfile::tempdir().expect("dir");
    let store = Arc::new(Store::open(&dir.path().join("node.db")).expect("store"));
    let record = serde_json::to_string(&run.to_record()).expect("record");
    store
        .write(|tx| {
            Ok(tx.execute(
                "INSERT INTO calls (id, role, peer, skill, state, record, box_url, verified, \
                 created_at, updated_at) VALUES ('c1', 'caller', 'p', 's', 'staked', '{}', ?1, \
                 ?2, 0, 0)",
                [f.url.as_str(), record.as_str()],
            )?)
        })
        .expect("row");
    let urls = [f.url.clone()];
    // The run's status asked of the box by the node's client for it.
    let status = async |boxes: Boxes| {
        let client = boxes.client(&f.url).expect("client");
        client.status(&run.run_id).await
    };
    let forgetful = Boxes::new(&urls, true, &[], &Default::default());
    let err = status(forgetful)
        .await
        .expect_err("no key attested to a fresh client");
    assert!(matches!(err, JcError::TlsKeyNotAttested), "{err}");
    let restarted = Boxes::new(&urls, true, &[], &Default::default())
        .remembering(store)
        .expect("remembering");
    let view = status(restarted)
        .await
        .expect("the run's key, from the node's own record");
    assert_eq!(view.run_id, run.run_id);
}
