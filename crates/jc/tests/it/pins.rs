//! Pins, not claims: a party checks the box's evidence key against its pin and the provider
//! table the box attests against the program and its own provider-host pins — before it seals
//! anything. Real box over loopback.

use std::sync::Arc;

use crate::support::*;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    IN_PROCESS, InsecureDevAttester, VerifyPolicy, provider_table_hash, verify_attestation,
};
use skillbox_jc::run::now_secs;

#[tokio::test]
async fn a_box_signing_with_another_key_than_the_pinned_one_is_refused() {
    let f = start(None).await;
    let (approved, run_id) = open_unattested(&f).await;
    let own = f.client.health().await.expect("health").key.expect("key");
    let other = InsecureDevAttester::with_measurement(MEASUREMENT.into()).public_key_hex();
    assert_ne!(own, other);
    let err = f
        .client
        .attest(
            &approved,
            &run_id,
            &VerifyPolicy::new(true).with_box_keys(vec![other]),
        )
        .await
        .expect_err("another box");
    assert!(matches!(err, JcError::BoxKeyNotPinned), "{err}");
    // Its own key, in any case: verified.
    f.client
        .attest(
            &approved,
            &run_id,
            &VerifyPolicy::new(true).with_box_keys(vec![own.to_uppercase()]),
        )
        .await
        .expect("the pinned box verifies");
}

#[tokio::test]
async fn the_provider_table_is_bound_and_checked_against_the_program_and_the_pins() {
    let f = start(None).await;
    let opened = f.open_attested(&f.program()).await;
    let att = &opened.attestation;
    assert_eq!(
        att.providers.get("local").map(String::as_str),
        Some(IN_PROCESS)
    );
    let policy = VerifyPolicy::new(true);
    let check = |a: &skillbox_jc::attest::Attestation, p: &VerifyPolicy| {
        let o = &opened;
        verify_attestation(a, &o.approved, &o.run_id, &o.nonce, p, now_secs())
    };
    check(att, &policy).expect("as served, it verifies");

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
        check(att, &strict),
        Err(JcError::ProviderHostNotPinned)
    ));
}

/// The configuration an attestation carries is the one its statement binds (the hash the
/// hardware's HOST_DATA / MRCONFIGID is compared with), and its provider table is the attested
/// one: a box cannot bind one configuration and show another.
#[tokio::test]
async fn the_configuration_shown_is_the_one_the_statement_binds() {
    use skillbox_jc::attest::{Attester as _, BoxConfiguration, Statement};
    let f = start(None).await;
    let opened = f.open_attested(&f.program()).await;
    let att = &opened.attestation;
    let served: Statement = att.statement().expect("statement").1;
    let dev = InsecureDevAttester::with_measurement(served.measurement.clone());
    // Signed afresh (a software key: this party pins none) with `bound` in the statement and
    // `shown` in the attestation.
    let attest = |bound: Option<&BoxConfiguration>, shown: Option<&BoxConfiguration>| {
        let st = Statement {
            config_sha256: bound.map(|c| hex::encode(c.sha256().expect("hash"))),
            ..served.clone()
        };
        let mut a = dev.attest(&st).expect("attests");
        a.providers = att.providers.clone();
        a.config = shown.cloned();
        let o = &opened;
        let policy = VerifyPolicy::new(true);
        verify_attestation(&a, &o.approved, &o.run_id, &o.nonce, &policy, now_secs())
    };
    let config = BoxConfiguration::new(att.providers.clone(), None);
    attest(Some(&config), Some(&config)).expect("bound and shown");
    let restricted = BoxConfiguration::new(att.providers.clone(), Some(&["ab".repeat(32)]));
    let mut elsewhere = config.clone();
    elsewhere
        .providers
        .insert("openai".into(), "https://api.openai.com/v1".into());
    for (bound, shown, what) in [
        (
            Some(&config),
            Some(&restricted),
            "box configuration differs",
        ),
        (Some(&config), None, "box configuration differs"),
        (None, Some(&config), "box configuration differs"),
        (Some(&elsewhere), Some(&elsewhere), "box configuration's"),
    ] {
        let got = attest(bound, shown);
        assert!(
            matches!(&got, Err(JcError::Evidence(m)) if m.contains(what)),
            "{what}: {got:?}"
        );
    }
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

/// Issue 30 item 2 at the verifier: a party that accepts insecure-dev boxes and pins one box as
/// SEV-SNP. That box's operator answers with a software attestation for a key of its own (the
/// program lists an insecure-dev box too); it verified while the box's claimed platform chose
/// the verifier, and is refused now that the pin's platform does.
#[tokio::test]
async fn a_hardware_pinned_box_cannot_answer_with_a_software_attestation() {
    use skillbox_jc::hardware::{HardwarePolicy, HardwareVerifier};
    let f = start(None).await;
    let (approved, run_id) = open_unattested(&f).await;
    let hw = || {
        let floor = Some(skillbox_testkit::floors::virtee_snp_floor());
        let p = HardwarePolicy::from_value("sev-snp", floor, &["7a".repeat(48)]).expect("policy");
        Box::new(HardwareVerifier::new(p).expect("verifier"))
    };
    let attest = async |policy: &VerifyPolicy| f.client.attest(&approved, &run_id, policy).await;
    let pinned = VerifyPolicy::new(true)
        .with_verifier(hw())
        .only_platform("sev-snp");
    let err = attest(&pinned)
        .await
        .expect_err("a software attestation on a hardware pin");
    assert!(matches!(err, JcError::PlatformNotAllowed(_)), "{err}");
    // A verifier added after the platform was chosen is still not taken.
    let late = VerifyPolicy::new(false)
        .only_platform("sev-snp")
        .with_verifier(Box::new(skillbox_jc::attest::InsecureDevVerifier));
    let late = VerifyPolicy {
        allow_insecure_dev: true,
        ..late
    };
    let err = attest(&late)
        .await
        .expect_err("still the pin's platform only");
    assert!(matches!(err, JcError::PlatformNotAllowed(_)), "{err}");
    // The same box pinned as what it is: verified.
    attest(&VerifyPolicy::new(true).only_platform("insecure-dev"))
        .await
        .expect("an insecure-dev pin takes an insecure-dev box");
}

/// A box double that answers every request with `size` bytes of JSON-looking junk, its length
/// announced or not (then streamed until the connection closes): raw HTTP/1.1 over loopback.
async fn oversized_box(size: usize, announced: bool) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut req = [0u8; 4096];
                let _ = sock.read(&mut req).await;
                let head = if announced {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
                    )
                } else {
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
                        .to_owned()
                };
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; 64 * 1024];
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if sock.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn an_oversized_box_answer_is_refused_not_read() {
    use skillbox_jc::client::{BoxClient, MAX_RESPONSE_BYTES};
    for announced in [true, false] {
        let url = oversized_box(MAX_RESPONSE_BYTES + 64 * 1024, announced).await;
        let client = BoxClient::new(&url).expect("client");
        let err = client.health().await.expect_err("oversized");
        assert!(
            matches!(err, JcError::ResponseTooLarge { limit } if limit == MAX_RESPONSE_BYTES),
            "announced {announced}: {err}"
        );
        assert_eq!(err.code(), "box_response_too_large");
        let err = client
            .result(&"a".repeat(32))
            .await
            .expect_err("oversized result");
        assert!(matches!(err, JcError::ResponseTooLarge { .. }), "{err}");
    }
    // Under the cap, the same double is read (and refused only as not understood).
    let url = oversized_box(1024, false).await;
    let err = BoxClient::new(&url)
        .expect("client")
        .health()
        .await
        .expect_err("spaces are not a health answer");
    assert!(matches!(err, JcError::Transport(_)), "{err}");
}
