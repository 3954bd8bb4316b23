//! The box's TLS key bound into its attestation (issue 31 item 2): a box serving HTTPS with a
//! key made at start works end to end, and a node refuses — before any stake — a TLS front with
//! its own key relaying a real box, a box whose attestation binds no key, and a box whose key
//! changes under a verified run. Real boxes, real TLS (rustls), on loopback.

use crate::support::*;
use skillbox_jc::JcError;
use skillbox_jc::client::{BoxClient, open_result};
use skillbox_jc::dsse::ApprovedProgram;

#[tokio::test]
async fn an_https_box_binds_its_tls_key_and_a_run_goes_end_to_end() {
    let (f, spki) = start_tls(Some("song b, then song a"), true).await;
    assert!(f.url.starts_with("https://") && f.client.is_tls());
    let health = f.client.health().await.expect("health over TLS");
    assert_eq!(health.status, "ok");
    let (_, run) = f.open(&f.program()).await;
    assert_eq!(run.tls_spki_sha256.as_deref(), Some(spki.as_str()));
    // The key survives the party's record (a restarted node pins it again).
    let back = skillbox_jc::attest::VerifiedRun::from_record(&run.to_record()).expect("record");
    assert_eq!(back.tls_spki_sha256, run.tls_spki_sha256);
    f.run_all(&run, "which song first?", "You pick songs.")
        .await;
    let view = f.result(&run).await;
    let out = open_result(&view, &f.result_key, &run).expect("caller opens");
    assert_eq!(out.answer, "song b, then song a");
}

#[tokio::test]
async fn a_tls_front_relaying_a_real_box_is_refused_before_any_stake() {
    let (real, _) = start_tls(None, true).await;
    let (front_url, seen) = start_tls_front(&real.url).await;
    let f = Fixture::at(&front_url);
    // Nothing secret goes before the attestation: the front relays open and the report.
    let (approved, run_id) = opened_with_tls_key_refused(&f, "the front shows its own key").await;
    // The report itself was genuine: straight from the box it verifies.
    let direct = real
        .client
        .attest(&approved, &run_id, &real.policy)
        .await
        .expect("the real box verifies directly");
    // Even with a run verified elsewhere, nothing is staked through the front: its key was
    // never attested, so the handshake is refused before a byte of the stake leaves.
    let err = f
        .stake_as_caller(&direct, "q", b"s", &f.caller)
        .await
        .expect_err("stake through the front");
    assert!(matches!(err, JcError::TlsKeyNotAttested), "{err}");
    let paths = seen.lock().expect("log").clone();
    assert!(
        paths.iter().any(|p| p.contains("/attestation")),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains("/stakes")), "{paths:?}");
    let status = real.client.status(&run_id).await;
    assert!(
        status.is_err() || status.is_ok_and(|s| s.staked.is_empty()),
        "nothing staked at the box"
    );
}

#[tokio::test]
async fn an_https_box_whose_attestation_binds_no_tls_key_is_refused() {
    let (f, _) = start_tls(None, false).await;
    opened_with_tls_key_refused(&f, "no key bound").await;
}

/// The fixture's program opened at `f`'s box, whose attestation the client refuses (`why`) as
/// coming over a TLS key the report does not bind: the approval and the run id.
async fn opened_with_tls_key_refused(f: &Fixture, why: &str) -> (ApprovedProgram, String) {
    let (approved, run_id) = open_unattested(f).await;
    let err = f
        .client
        .attest(&approved, &run_id, &f.policy)
        .await
        .expect_err(why);
    assert!(matches!(err, JcError::TlsKeyNotAttested), "{err}");
    assert_eq!(err.code(), "tls_key_not_attested");
    (approved, run_id)
}

#[tokio::test]
async fn a_run_verified_on_one_key_stakes_nowhere_else() {
    // Two honest boxes: a run verified at the first cannot be staked at the second URL
    // through the first's client (another key, never attested to this client).
    let (a, _) = start_tls(None, true).await;
    let (b, _) = start_tls(None, true).await;
    let (_, run_a) = a.open(&a.program()).await;
    let b_client_holding_nothing = BoxClient::new(&b.url).expect("client");
    let err = b_client_holding_nothing
        .status(&run_a.run_id)
        .await
        .expect_err("no key attested to this client yet");
    assert!(matches!(err, JcError::TlsKeyNotAttested), "{err}");
    // The client of the first box talks to it on the key it verified.
    a.client.status(&run_a.run_id).await.expect("status");
}

#[test]
fn plain_http_is_for_loopback_only() {
    for url in [
        "http://10.0.0.5:7480",
        "http://box.example",
        "http://127.0.0.1@evil.example/",
        "ftp://127.0.0.1/",
    ] {
        assert!(
            matches!(BoxClient::new(url), Err(JcError::BadRequest(_))),
            "{url}"
        );
    }
    for url in [
        "http://127.0.0.1:7480",
        "http://localhost:7480",
        "http://[::1]:7480",
        "https://box.example",
    ] {
        BoxClient::new(url).expect(url);
    }
}

#[test]
fn the_tls_key_follows_the_storage_key_across_restarts() {
    use skillbox_jc::run::store::KeyFile;
    use skillbox_jc::tls::BoxTls;
    let dir = tempfile::tempdir().expect("dir");
    let first = KeyFile::load_or_create(&dir.path().join("store.key")).expect("key");
    let again = KeyFile::load_or_create(&dir.path().join("store.key")).expect("same key");
    let other = KeyFile::load_or_create(&dir.path().join("other.key")).expect("other key");
    let names = ["box.example:7480".to_owned()];
    let a = BoxTls::derived(&first, &names).expect("tls");
    // A restarted box on the same store serves the key its runs' attestations bound.
    assert_eq!(
        a.spki_sha256(),
        BoxTls::derived(&again, &[]).expect("tls").spki_sha256()
    );
    assert_ne!(
        a.spki_sha256(),
        BoxTls::derived(&other, &names).expect("tls").spki_sha256()
    );
    assert_ne!(
        BoxTls::generate(&[]).expect("fresh").spki_sha256(),
        BoxTls::generate(&[]).expect("fresh").spki_sha256()
    );
}
