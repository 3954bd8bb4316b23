//! Pins, not claims: a party checks the box's evidence key against its pin and the provider
//! table the box attests against the program and its own provider-host pins — before it seals
//! anything. Real box over loopback.

mod common;

use std::sync::Arc;

use common::*;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    IN_PROCESS, InsecureDevAttester, VerifyPolicy, provider_table_hash, verify_attestation,
};
use skillbox_jc::client::new_nonce;
use skillbox_jc::dsse::approved_program;
use skillbox_jc::run::now_secs;

#[tokio::test]
async fn a_box_signing_with_another_key_than_the_pinned_one_is_refused() {
    let f = start(None).await;
    let env = f.approve(&f.program());
    let approved = approved_program(&env).expect("approved");
    let opened = f.client.open(&env).await.expect("open");
    let own = f.client.health().await.expect("health").key.expect("key");
    let other = InsecureDevAttester::with_measurement(MEASUREMENT.into()).public_key_hex();
    assert_ne!(own, other);
    let err = f
        .client
        .attest(
            &approved,
            &opened.run_id,
            &VerifyPolicy::new(true).with_box_keys(vec![other]),
        )
        .await
        .expect_err("another box");
    assert!(matches!(err, JcError::BoxKeyNotPinned), "{err}");
    // Its own key, in any case: verified.
    f.client
        .attest(
            &approved,
            &opened.run_id,
            &VerifyPolicy::new(true).with_box_keys(vec![own.to_uppercase()]),
        )
        .await
        .expect("the pinned box verifies");
}

#[tokio::test]
async fn the_provider_table_is_bound_and_checked_against_the_program_and_the_pins() {
    let f = start(None).await;
    let env = f.approve(&f.program());
    let approved = approved_program(&env).expect("approved");
    let opened = f.client.open(&env).await.expect("open");
    let nonce = new_nonce();
    let att = f
        .client
        .attestation(&opened.run_id, &nonce)
        .await
        .expect("attestation");
    assert_eq!(
        att.providers.get("local").map(String::as_str),
        Some(IN_PROCESS)
    );
    let policy = VerifyPolicy::new(true);
    let check = |a: &skillbox_jc::attest::Attestation, p: &VerifyPolicy| {
        verify_attestation(a, &approved, &opened.run_id, &nonce, p, now_secs())
    };
    check(&att, &policy).expect("as served, it verifies");

    // A table other than the one the statement binds.
    let mut shown = att.clone();
    shown
        .providers
        .insert("openai".into(), "https://api.openai.com/v1".into());
    assert_ne!(
        provider_table_hash(&shown.providers).expect("hash"),
        provider_table_hash(&att.providers).expect("hash")
    );
    assert!(matches!(
        check(&shown, &policy),
        Err(JcError::Evidence(m)) if m.contains("provider table")
    ));

    // This party pins no such host for the provider: refused.
    let strict = VerifyPolicy::new(true).with_provider_hosts(Arc::new(|_, _| false));
    assert!(matches!(
        check(&att, &strict),
        Err(JcError::ProviderHostNotPinned)
    ));
}

#[test]
fn the_box_key_file_keeps_one_identity_and_a_bad_one_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("box").join("insecure-dev.key");
    let a = InsecureDevAttester::with_key_file(&path, MEASUREMENT.into()).expect("made");
    let b = InsecureDevAttester::with_key_file(&path, MEASUREMENT.into()).expect("loaded");
    assert_eq!(a.public_key_hex(), b.public_key_hex());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "the key file is the owner's only");
    }
    std::fs::write(&path, "not hex").expect("write");
    let err = match InsecureDevAttester::with_key_file(&path, MEASUREMENT.into()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a bad key file is refused"),
    };
    assert!(err.contains("64 hex digits"), "{err}");
}
