//! The release log (issue 31 item 3): real public Sigstore bundles verify offline against the
//! compiled-in public-good root; each tampered or foreign one is refused with its closed code;
//! and bundles this project signs and logs in an in-test log go through the same verifier.

use serde_json::Value;
use skillbox_attest::release_log::test_log::{ReleaseSigner, TestLog};
use skillbox_attest::release_log::{ReleaseLog, ReleaseLogError, ReleaseManifest, Signer};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/release-log");

fn read(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DIR}/{name}")).expect("test vector")
}

/// sigstore-rust's managed-key sample: a cosign `--key` signature logged in Rekor (production).
fn managed() -> (ReleaseLog, Vec<u8>, Vec<u8>) {
    let pem = String::from_utf8(read("sigstore-rust-managed-key-key.pub")).expect("utf-8");
    let log = ReleaseLog::new(Signer::key_from_pem(&pem).expect("key"), None).expect("log");
    (
        log,
        read("sigstore-rust-managed-key-artifact.txt"),
        read("sigstore-rust-managed-key-bundle.sigstore.json"),
    )
}

/// sigstore-rust's cosign v3 keyless sample: a Fulcio certificate for an e-mail identity.
fn keyless() -> (ReleaseLog, Vec<u8>, Vec<u8>) {
    let signer = Signer::Identity {
        identity: "w.vollprecht@gmail.com".into(),
        issuer: "https://github.com/login/oauth".into(),
    };
    (
        ReleaseLog::new(signer, None).expect("log"),
        read("sigstore-rust-bundles-cosign-v3-blob.txt"),
        read("sigstore-rust-bundles-cosign-v3-blob.sigstore.json"),
    )
}

fn edit(bundle: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(bundle).expect("json");
    f(&mut v);
    serde_json::to_vec(&v).expect("json")
}

fn entry(v: &mut Value) -> &mut Value {
    &mut v["verificationMaterial"]["tlogEntries"][0]
}

/// Flip one bit of a base64 string's decoded bytes at `at`.
fn flip_b64(s: &Value, at: usize) -> Value {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut bytes = b64.decode(s.as_str().expect("string")).expect("base64");
    bytes[at] ^= 1;
    Value::String(b64.encode(bytes))
}

fn refused(r: Result<(), ReleaseLogError>) -> &'static str {
    r.expect_err("must be refused").code()
}

#[test]
fn real_public_bundles_verify_offline_with_the_compiled_in_log_key() {
    let (log, artifact, bundle) = managed();
    log.verify(&artifact, &bundle).expect("managed-key bundle");
    let (log, artifact, bundle) = keyless();
    log.verify(&artifact, &bundle).expect("keyless bundle");
}

#[test]
fn a_real_bundle_with_an_altered_inclusion_proof_hash_is_refused() {
    for (log, artifact, bundle) in [managed(), keyless()] {
        let bad = edit(&bundle, |v| {
            let h = &mut entry(v)["inclusionProof"]["hashes"][3];
            *h = flip_b64(h, 7);
        });
        assert_eq!(refused(log.verify(&artifact, &bad)), "bad_inclusion_proof");
    }
}

#[test]
fn a_real_bundle_with_an_altered_checkpoint_is_refused() {
    for (log, artifact, bundle) in [managed(), keyless()] {
        // The tree size in the signed note: its signature no longer holds.
        let bad = edit(&bundle, |v| {
            let c = &mut entry(v)["inclusionProof"]["checkpoint"]["envelope"];
            let text = c.as_str().expect("note").to_string();
            let mut lines: Vec<String> = text.split('\n').map(String::from).collect();
            lines[1] = format!("{}", lines[1].parse::<u64>().expect("size") + 1);
            *c = Value::String(lines.join("\n"));
        });
        assert_eq!(refused(log.verify(&artifact, &bad)), "bad_checkpoint");
        // One bit of the log's signature on the note.
        let bad = edit(&bundle, |v| {
            let c = &mut entry(v)["inclusionProof"]["checkpoint"]["envelope"];
            let text = c.as_str().expect("note").to_string();
            let (head, sig) = text.trim_end().rsplit_once(' ').expect("signature line");
            let sig = flip_b64(&Value::String(sig.into()), 20);
            *c = Value::String(format!("{head} {}\n", sig.as_str().expect("b64")));
        });
        assert_eq!(refused(log.verify(&artifact, &bad)), "bad_checkpoint");
        // The proof's root no longer the checkpoint's: refused when the bundle is read.
        let bad = edit(&bundle, |v| {
            let e = entry(v);
            let root = flip_b64(&e["inclusionProof"]["rootHash"], 0);
            e["inclusionProof"]["rootHash"] = root;
        });
        assert_eq!(refused(log.verify(&artifact, &bad)), "malformed_bundle");
    }
}

#[test]
fn a_real_bundle_checked_against_a_foreign_log_key_is_refused() {
    // The node pins another log (this project's test log): Rekor's checkpoint and entry
    // timestamp are signed by a key it does not know.
    let foreign = TestLog::new(9).trusted_root_json();
    let pem = String::from_utf8(read("sigstore-rust-managed-key-key.pub")).expect("utf-8");
    let log =
        ReleaseLog::new(Signer::key_from_pem(&pem).expect("key"), Some(&foreign)).expect("log");
    let (_, artifact, bundle) = managed();
    let code = refused(log.verify(&artifact, &bundle));
    assert!(
        ["bad_checkpoint", "unknown_log", "bad_inclusion_promise"].contains(&code),
        "{code}"
    );
}

#[test]
fn a_real_bundle_over_another_artefact_or_signer_is_refused() {
    let (log, mut artifact, bundle) = managed();
    artifact[0] ^= 1;
    assert_eq!(refused(log.verify(&artifact, &bundle)), "artifact_mismatch");
    let (log, mut artifact, bundle) = keyless();
    artifact[0] ^= 1;
    assert_eq!(refused(log.verify(&artifact, &bundle)), "artifact_mismatch");
    // The same keyless bundle, another pinned identity.
    let (_, artifact, bundle) = keyless();
    let other = ReleaseLog::new(
        Signer::Identity {
            identity: "release@skillbox.invalid".into(),
            issuer: "https://github.com/login/oauth".into(),
        },
        None,
    )
    .expect("log");
    assert_eq!(refused(other.verify(&artifact, &bundle)), "signer_mismatch");
    // The managed-key bundle, another pinned key.
    let (_, artifact, bundle) = managed();
    let other = ReleaseLog::new(Signer::Key(ReleaseSigner::new(1).spki_der()), None).expect("log");
    let code = refused(other.verify(&artifact, &bundle));
    assert!(
        ["entry_mismatch", "bad_signature"].contains(&code),
        "{code}"
    );
}

#[test]
fn a_real_bundle_without_its_inclusion_proof_is_refused_even_with_the_log_promise() {
    let (log, artifact, bundle) = managed();
    let bad = edit(&bundle, |v| {
        entry(v)
            .as_object_mut()
            .expect("entry")
            .remove("inclusionProof");
    });
    assert_eq!(refused(log.verify(&artifact, &bad)), "no_inclusion_proof");
    assert_eq!(
        refused(log.verify(&artifact, b"{not json")),
        "malformed_bundle"
    );
}

fn manifest(measurement: &str) -> Vec<u8> {
    format!(
        r#"{{"skillbox_box_release":1,"release":"v0.2.0","measurements":{{"insecure-dev":["{measurement}"],"sev-snp":["{}"]}}}}"#,
        "cd".repeat(48)
    )
    .into_bytes()
}

/// Our manifest (`measurement` on insecure-dev) signed by release signer 1 and logged among
/// others in test log 1: the signer, the log, the manifest and its index there.
fn logged_manifest(measurement: &str) -> (ReleaseSigner, TestLog, Vec<u8>, usize) {
    let signer = ReleaseSigner::new(1);
    let mut tlog = TestLog::new(1);
    let m = manifest(measurement);
    let index = logged(&mut tlog, &signer, &m);
    (signer, tlog, m, index)
}

/// A log with other entries around ours, so the proof has several levels.
fn logged(log: &mut TestLog, signer: &ReleaseSigner, artifact: &[u8]) -> usize {
    let other = ReleaseSigner::new(200);
    for i in 0..5u8 {
        log.append(&other, &[i; 10]);
    }
    let index = log.append(signer, artifact);
    for i in 5..11u8 {
        log.append(&other, &[i; 10]);
    }
    index
}

#[test]
fn a_manifest_this_project_signs_and_logs_verifies_and_names_its_measurements() {
    let (signer, tlog, m, index) = logged_manifest(&"AB".repeat(48));
    let bundle = tlog.bundle(index).expect("bundle");
    let pinned = tlog
        .release_log(Signer::key_from_pem(&signer.public_pem()).expect("key"))
        .expect("log");
    let verified = pinned
        .verify_manifest(&m, bundle.as_bytes())
        .expect("verifies");
    assert_eq!(verified.release, "v0.2.0");
    assert_eq!(verified.on("insecure-dev"), Ok(&["ab".repeat(48)][..]));
    assert_eq!(verified.on("sev-snp"), Ok(&["cd".repeat(48)][..]));
    assert_eq!(verified.on("tdx"), Ok(&[][..]));
    // Every entry of the log verifies, whatever its place in the tree.
    for i in 0..12 {
        let other = tlog
            .release_log(Signer::Key(ReleaseSigner::new(200).spki_der()))
            .expect("log");
        if i != index {
            let artifact = [if i < index { i as u8 } else { i as u8 - 1 }; 10];
            other
                .verify(&artifact, tlog.bundle(i).expect("bundle").as_bytes())
                .unwrap_or_else(|e| panic!("entry {i}: {}", e.code()));
        }
    }
}

#[test]
fn a_manifest_this_project_logs_is_refused_when_tampered_or_from_a_foreign_log() {
    let (signer, tlog, m, index) = logged_manifest(&"ab".repeat(48));
    let bundle = tlog.bundle(index).expect("bundle").into_bytes();
    let key = Signer::Key(signer.spki_der());
    let pinned = tlog.release_log(key.clone()).expect("log");
    pinned
        .verify_manifest(&m, &bundle)
        .expect("honest one verifies");

    let bad = edit(&bundle, |v| {
        let h = &mut entry(v)["inclusionProof"]["hashes"][1];
        *h = flip_b64(h, 31);
    });
    assert_eq!(refused(pinned.verify(&m, &bad)), "bad_inclusion_proof");

    let bad = edit(&bundle, |v| {
        let c = &mut entry(v)["inclusionProof"]["checkpoint"]["envelope"];
        let text = c.as_str().expect("note").replacen(
            "skillbox-test-log-1 - 1",
            "skillbox-test-log-1 - 2",
            1,
        );
        *c = Value::String(text);
    });
    assert_eq!(refused(pinned.verify(&m, &bad)), "bad_checkpoint");

    // The same bundle shape from another log the node does not pin.
    let mut foreign = TestLog::new(2);
    let i = logged(&mut foreign, &signer, &m);
    let other_bundle = foreign.bundle(i).expect("bundle");
    assert_eq!(
        refused(pinned.verify(&m, other_bundle.as_bytes())),
        "bad_checkpoint"
    );

    // Another manifest than the one logged (a measurement swapped in).
    let forged = manifest(&"ef".repeat(48));
    assert_eq!(
        pinned
            .verify_manifest(&forged, &bundle)
            .expect_err("refused")
            .code(),
        "artifact_mismatch"
    );
}

#[test]
fn a_manifest_must_be_well_formed_even_when_signed() {
    for bad in [
        &br#"{"skillbox_box_release":3,"release":"v1","measurements":{"tdx":["00"]}}"#[..],
        br#"{"skillbox_box_release":0,"release":"v1","measurements":{"nitro":["00"]}}"#,
        br#"{"skillbox_box_release":1,"release":"v1","measurements":{"tdx":["00"]}}"#,
        br#"{"skillbox_box_release":1,"release":"v1","measurements":{"gpu":[]}}"#,
        br#"{"skillbox_box_release":1,"release":"","measurements":{}}"#,
        br#"{"skillbox_box_release":1,"release":"v1","measurements":{},"extra":1}"#,
    ] {
        assert_eq!(
            ReleaseManifest::parse(bad).expect_err("malformed").code(),
            "malformed_manifest"
        );
    }
    let signer = ReleaseSigner::new(3);
    let mut tlog = TestLog::new(3);
    let body = br#"{"skillbox_box_release":1,"release":"v1","measurements":{"tdx":["00"]}}"#;
    let i = tlog.append(&signer, body);
    let pinned = tlog
        .release_log(Signer::Key(signer.spki_der()))
        .expect("log");
    let bundle = tlog.bundle(i).expect("bundle");
    pinned
        .verify(body, bundle.as_bytes())
        .expect("the bundle itself verifies");
    assert_eq!(
        pinned
            .verify_manifest(body, bundle.as_bytes())
            .expect_err("malformed")
            .code(),
        "malformed_manifest"
    );
}

/// A format 1 manifest named a TDX release by MRTD, the firmware alone, which every box binary
/// booted under it shares; format 2 names the box identity (MRTD, RTMR1, RTMR2). The two cannot
/// be told apart by their form, so a format 1 manifest's TDX entry is refused with its own code
/// (read as identities, its MRTDs would match no box without saying why) while its other
/// platforms are read as before.
#[test]
fn a_format_1_manifest_names_no_tdx_box_and_format_2_names_tdx_identities() {
    let text = |format: u32| {
        format!(
            r#"{{"skillbox_box_release":{format},"release":"v1","measurements":{{"sev-snp":["{}"],"tdx":["{}"]}}}}"#,
            "cd".repeat(48),
            "EF".repeat(48)
        )
    };
    let old = ReleaseManifest::parse(text(1).as_bytes()).expect("format 1 is read");
    let refused = old.on("tdx").expect_err("MRTDs taken as identities");
    assert_eq!(refused.code(), "tdx_firmware_only");
    assert!(refused.to_string().contains("MRTD"), "{refused}");
    assert_eq!(old.on("sev-snp"), Ok(&["cd".repeat(48)][..]));
    let new = ReleaseManifest::parse(text(2).as_bytes()).expect("format 2");
    assert_eq!(new.on("tdx"), Ok(&["ef".repeat(48)][..]));
    assert_eq!(skillbox_attest::release_log::FORMAT, 2);
}

/// sigstore-python's staging samples (Sigstore's staging instance, its root compiled into
/// `sigstore-trust-root` too): a Rekor v2 entry (hashedrekord 0.0.2, a checkpoint with no
/// separate proof root) and a Rekor v1 one.
fn staging(
    artifact: &str,
    bundle: &str,
    identity: &str,
) -> (ReleaseLog, ReleaseLog, Vec<u8>, Vec<u8>) {
    let signer = Signer::Identity {
        identity: identity.into(),
        issuer: "https://github.com/login/oauth".into(),
    };
    let root = sigstore_verify::trust_root::SIGSTORE_STAGING_TRUSTED_ROOT;
    (
        ReleaseLog::new(signer.clone(), Some(root)).expect("log"),
        ReleaseLog::new(signer, None).expect("production"),
        read(artifact),
        read(bundle),
    )
}

#[test]
fn real_staging_bundles_rekor_v1_and_v2_verify_and_refuse_an_altered_proof() {
    for (log, production, artifact, bundle) in [
        staging(
            "sigstore-python-staging-rekor-v2.txt",
            "sigstore-python-staging-rekor-v2.txt.sigstore.json",
            "jku@goto.fi",
        ),
        staging(
            "sigstore-python-bundle_v3.txt",
            "sigstore-python-integration-bundle_v3.txt.sigstore",
            "william@yossarian.net",
        ),
    ] {
        log.verify(&artifact, &bundle).expect("verifies");
        let bad = edit(&bundle, |v| {
            let h = &mut entry(v)["inclusionProof"]["hashes"][0];
            *h = flip_b64(h, 3);
        });
        assert_eq!(refused(log.verify(&artifact, &bad)), "bad_inclusion_proof");
        // The same signer pinned with the production root, which knows neither the staging CA
        // nor its logs.
        let code = refused(production.verify(&artifact, &bundle));
        assert!(
            [
                "bad_certificate",
                "bad_checkpoint",
                "bad_inclusion_promise",
                "bad_timestamp",
                "unknown_log",
            ]
            .contains(&code),
            "{code}"
        );
    }
}
