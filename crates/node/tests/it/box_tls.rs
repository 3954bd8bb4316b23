//! A box's TLS key bound into its attestation, with real nodes (issue 31 item 2): two nodes
//! call through a box serving HTTPS with a key it made at start; a TLS front with its own key in
//! front of that box is refused at the box's attestation, so neither node takes the box and
//! nothing is staked or asked of a provider; a front forging the box's `/healthz` moves no
//! figure a node acts on.

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
    // Each node asks the box's `/healthz` over its attested key only, and the box's own
    // attestation came over the front's: neither takes the box, so the call does not start.
    let (owner, caller) = tagged_pair(&front_url, "TLS-2", |_| {}).await;
    let a = caller.ask_call(&owner.peer_id, "taste", "REQ-TLS-2").await;
    support::stop_all([owner, caller]).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert_eq!(a.body["error"], "no_common_box", "{}", a.body);
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

/// Audit P2: `/healthz` was asked over a connection showing any key, so a man in the middle on
/// the path answered it: it hid the box's provider, added one the box does not run and reported
/// no load, and the node took those figures (what it advertises, which box a call may use and
/// which it tries first). The figures now come over a connection showing the attested box's
/// key: the front answering in the box's place is not asked at all, and the node keeps what the
/// box itself last said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_man_in_the_middle_forging_healthz_moves_no_figure_the_node_acts_on() {
    use skillbox_node::calls::boxes::Boxes;
    use skillbox_node::config::BoxPin;
    use skillbox_testkit::box_fixture::{
        MEASUREMENT, PathSwitch, start_tls_front_forging, start_tls_named,
    };
    let path = PathSwitch::start().await;
    let (real, _) = start_tls_named(None, true, std::slice::from_ref(&path.host)).await;
    // One run open at the box: its own load is not zero.
    let _open = real.open(&real.program()).await;
    let own = real.client.health().await.expect("the box's own health");
    assert!(own.runs_in_flight > 0);
    let key = own.key.clone().expect("an insecure-dev key");
    // The man in the middle shows the box's identity, hides its provider, adds one and says
    // the box is idle.
    let forged = serde_json::json!({
        "status": "ok",
        "platform": own.platform,
        "measurement": own.measurement,
        "no_hardware_isolation": true,
        "key": key,
        "providers": [{ "id": "openai", "available": true, "host": "https://api.openai.com/v1" }],
        "runs_in_flight": 0,
    });
    let (front_url, front) = start_tls_front_forging(&real.url, Some(forged)).await;
    path.relay_to(&[&real.url, &front_url]);
    let pin = BoxPin {
        url: path.url.clone(),
        platform: own.platform.clone(),
        measurements: vec![MEASUREMENT.to_owned()],
        key: Some(key),
        policy: None,
        release_log: None,
        gpu: None,
    };
    let boxes = Boxes::new(
        std::slice::from_ref(&path.url),
        true,
        &[pin],
        &Default::default(),
    );
    let figures = |boxes: &Boxes| {
        let status = boxes.status().remove(0);
        let known = status.known.expect("the box is known");
        (
            known.offers("local"),
            known.offers("openai"),
            known.runs_in_flight,
            status.last_check.expect("asked").refusal,
        )
    };
    boxes.refresh().await;
    assert_eq!(figures(&boxes), (true, false, own.runs_in_flight, None));
    // The man in the middle takes the path.
    path.send_to(1).await;
    boxes.refresh().await;
    let paths = front.paths.lock().expect("log").clone();
    assert_eq!(
        figures(&boxes),
        (
            true,
            false,
            own.runs_in_flight,
            Some("tls_key_not_attested")
        ),
        "the node took the front's figures; it was asked {paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.starts_with("/healthz")),
        "{paths:?}"
    );
}
