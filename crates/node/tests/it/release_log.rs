//! Release-log pins (issue 31 item 3) with a real box: a node whose `[[boxes.pins]]` entry names
//! a release log instead of measurements accepts the box only when a release manifest naming
//! its measurement is signed by the pinned signer and logged with a valid inclusion proof and
//! signed checkpoint in the pinned log. The log is this project's in-test log; what verifies is
//! `skillbox_attest::release_log` (sigstore-verify), as for Rekor.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;
use skillbox_attest::release_log::test_log::{ReleaseSigner, TestLog};
use skillbox_node::calls::boxes::Boxes;
use skillbox_node::config::{BoxPin, Config, ReleaseLogPin};

use crate::support;

/// What the test box runs: `support::start_box_keyed` attests this insecure-dev measurement
/// (see ARCHITECTURE "What a node pins").
fn box_measurement() -> String {
    "ab".repeat(48)
}

fn manifest(insecure_dev: &str) -> Vec<u8> {
    format!(
        r#"{{"skillbox_box_release":1,"release":"v0.2.0","measurements":{{"insecure-dev":["{insecure_dev}"],"sev-snp":["{}"]}}}}"#,
        "cd".repeat(48)
    )
    .into_bytes()
}

/// A log holding other releases around `manifest`; the bundle of `manifest`, then `tamper`ed.
fn publish(
    dir: &Path,
    log: &mut TestLog,
    signer: &ReleaseSigner,
    manifest: &[u8],
    tamper: impl FnOnce(&mut Value),
) {
    let other = ReleaseSigner::new(77);
    for i in 0..3u8 {
        log.append(&other, &[i; 32]);
    }
    let index = log.append(signer, manifest);
    log.append(&other, b"a later entry");
    let mut bundle: Value =
        serde_json::from_str(&log.bundle(index).expect("bundle")).expect("json");
    tamper(&mut bundle);
    std::fs::write(dir.join("v0.2.0.json"), manifest).expect("write");
    std::fs::write(
        dir.join("v0.2.0.json.sigstore.json"),
        serde_json::to_vec(&bundle).expect("json"),
    )
    .expect("write");
}

/// A release signer and a test log made from `seed`, under a new directory holding the log's
/// trusted root and an empty releases directory.
struct Releases {
    _dir: tempfile::TempDir,
    signer: ReleaseSigner,
    log: TestLog,
    root: std::path::PathBuf,
    releases: std::path::PathBuf,
}

fn releases(seed: u8) -> Releases {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = TestLog::new(seed);
    let root = dir.path().join("trusted_root.json");
    std::fs::write(&root, log.trusted_root_json()).expect("write");
    let releases = dir.path().join("releases");
    std::fs::create_dir(&releases).expect("mkdir");
    Releases {
        _dir: dir,
        signer: ReleaseSigner::new(seed),
        log,
        root,
        releases,
    }
}

fn proof(bundle: &mut Value) -> &mut Value {
    &mut bundle["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]
}

/// The pin a node's human would write for `box_url`: its key, and a release log instead of
/// measurements.
fn pin(box_url: &str, key: &str, dir: &Path, signer: &ReleaseSigner, root: &Path) -> BoxPin {
    BoxPin {
        url: box_url.into(),
        platform: "insecure-dev".into(),
        measurements: vec![],
        key: Some(key.into()),
        policy: None,
        release_log: Some(ReleaseLogPin {
            releases: dir.display().to_string(),
            identity: None,
            issuer: None,
            key: Some(B64.encode(signer.spki_der())),
            trusted_root: Some(root.display().to_string()),
        }),
        gpu: None,
    }
}

/// Start a box, publish its release (tampered by `tamper`) in a log the node pins, and return
/// the refusal the node's box check gives it (`None`: accepted).
async fn node_verdict(manifest_names: &str, tamper: impl FnOnce(&mut Value)) -> Option<String> {
    let (provider_url, _provider) = support::provider_double(Duration::ZERO).await;
    let (box_url, key) = support::start_box_keyed(&provider_url).await;
    let Releases {
        _dir,
        signer,
        mut log,
        root,
        releases,
    } = releases(11);
    publish(
        &releases,
        &mut log,
        &signer,
        &manifest(manifest_names),
        tamper,
    );
    let pins = vec![pin(&box_url, &key, &releases, &signer, &root)];
    let boxes = Boxes::new(
        std::slice::from_ref(&box_url),
        true,
        &pins,
        &BTreeMap::new(),
    );
    boxes.refresh().await;
    let status = boxes.status();
    let check = status[0].last_check.clone().expect("the box was asked");
    if check.refusal.is_none() {
        let known = status[0].known.clone().expect("known");
        assert_eq!(known.measurement, box_measurement());
    }
    check.refusal.map(String::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_whose_measurement_is_in_a_verified_logged_release_is_accepted() {
    assert_eq!(node_verdict(&box_measurement(), |_| {}).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_whose_measurement_no_logged_release_names_is_refused() {
    assert_eq!(
        node_verdict(&"ef".repeat(48), |_| {}).await.as_deref(),
        Some("pin_mismatch")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_whose_release_has_an_altered_inclusion_proof_is_refused() {
    let verdict = node_verdict(&box_measurement(), |b| {
        let h = &mut proof(b)["hashes"][0];
        let mut bytes = B64.decode(h.as_str().expect("b64")).expect("b64");
        bytes[5] ^= 0x10;
        *h = Value::String(B64.encode(bytes));
    })
    .await;
    assert_eq!(verdict.as_deref(), Some("pin_mismatch"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_whose_release_has_an_altered_checkpoint_is_refused() {
    let verdict = node_verdict(&box_measurement(), |b| {
        let c = &mut proof(b)["checkpoint"]["envelope"];
        let text = c.as_str().expect("note").to_string();
        let (head, sig) = text.trim_end().rsplit_once(' ').expect("signature line");
        let mut bytes = B64.decode(sig).expect("b64");
        bytes[12] ^= 1;
        *c = Value::String(format!("{head} {}\n", B64.encode(bytes)));
    })
    .await;
    assert_eq!(verdict.as_deref(), Some("pin_mismatch"));
}

#[test]
fn the_pin_names_only_what_verifies_and_each_refusal_has_its_reason() {
    let Releases {
        _dir: dir,
        signer,
        mut log,
        root,
        releases,
    } = releases(12);
    publish(
        &releases,
        &mut log,
        &signer,
        &manifest(&box_measurement()),
        |_| {},
    );
    let p = pin(
        "http://127.0.0.1:1",
        &"00".repeat(32),
        &releases,
        &signer,
        &root,
    );
    let log_pin = p.release_log.clone().expect("release log");
    assert_eq!(
        skillbox_node::pins::logged_measurements(&log_pin, "insecure-dev"),
        [box_measurement()]
    );
    assert_eq!(
        skillbox_node::pins::logged_measurements(&log_pin, "sev-snp"),
        ["cd".repeat(48)]
    );
    assert!(skillbox_node::pins::logged_measurements(&log_pin, "tdx").is_empty());
    // Another log's key pinned: the same release names nothing.
    let foreign = dir.path().join("foreign.json");
    std::fs::write(&foreign, TestLog::new(13).trusted_root_json()).expect("write");
    let mut other = log_pin.clone();
    other.trusted_root = Some(foreign.display().to_string());
    assert!(skillbox_node::pins::logged_measurements(&other, "insecure-dev").is_empty());
    // Another signer pinned: nothing either.
    let mut other = log_pin.clone();
    other.key = Some(B64.encode(ReleaseSigner::new(99).spki_der()));
    assert!(skillbox_node::pins::logged_measurements(&other, "insecure-dev").is_empty());
    // A forged manifest beside the honest bundle.
    std::fs::write(releases.join("v0.2.0.json"), manifest(&"ef".repeat(48))).expect("write");
    assert!(skillbox_node::pins::logged_measurements(&log_pin, "insecure-dev").is_empty());
}

#[test]
fn a_release_log_pin_round_trips_through_config_and_bad_ones_are_refused() {
    let dir = Path::new("/var/lib/skillbox/releases");
    let signer = ReleaseSigner::new(14);
    let mut c = Config::default();
    c.boxes.accept = vec!["https://box.example:7480".into()];
    c.boxes.pins = vec![pin(
        "https://box.example:7480",
        &"ab".repeat(32),
        dir,
        &signer,
        Path::new("/etc/skillbox/trusted_root.json"),
    )];
    c.boxes.pins[0].platform = "sev-snp".into();
    c.boxes.pins[0].key = None;
    // Its TCB floor (a hardware pin names one); the log names its measurements.
    c.boxes.pins[0].policy =
        Some(toml::from_str(skillbox_testkit::floors::VIRTEE_SNP_MIN_TCB).expect("toml"));
    let path = Path::new("config.toml");
    let back = Config::parse(&c.render(), path).expect("parses");
    assert_eq!(back.boxes.pins, c.boxes.pins);
    // Keyless: identity and issuer, Sigstore's public-good log by default.
    let keyless = ReleaseLogPin {
        releases: "/r".into(),
        identity: Some(
            "https://github.com/o/skillbox/.github/workflows/release.yml@refs/tags/v0.2.0".into(),
        ),
        issuer: Some("https://token.actions.githubusercontent.com".into()),
        key: None,
        trusted_root: None,
    };
    c.boxes.pins[0].release_log = Some(keyless.clone());
    let back = Config::parse(&c.render(), path).expect("parses");
    assert_eq!(back.boxes.pins, c.boxes.pins);
    // Measurements beside a log, two signers, or none: refused.
    let mut bad = c.clone();
    bad.boxes.pins[0].measurements = vec!["ab".repeat(48)];
    let err = Config::parse(&bad.render(), path).expect_err("refused");
    assert!(err.to_string().contains("release_log"), "{err}");
    let mut bad = c.clone();
    bad.boxes.pins[0].release_log = Some(ReleaseLogPin {
        key: Some(B64.encode(signer.spki_der())),
        ..keyless.clone()
    });
    let err = Config::parse(&bad.render(), path).expect_err("refused");
    assert!(err.to_string().contains("name the signer"), "{err}");
    let mut bad = c;
    bad.boxes.pins[0].release_log = Some(ReleaseLogPin {
        identity: None,
        ..keyless
    });
    let err = Config::parse(&bad.render(), path).expect_err("refused");
    assert!(err.to_string().contains("name the signer"), "{err}");
}

/// A TDX release log named the firmware (MRTD) alone, which every box binary booted under it
/// shares, and a TDX release-log pin loaded only with a hand-written `policy.accepted`. A format
/// 2 manifest names the box identity (MRTD, RTMR1, RTMR2): the pin loads with its collateral
/// floor alone, resolves to the identities its verified releases name, and its verifier accepts
/// the genuine sample box those name; a format 1 release's TDX entry (an MRTD) is refused
/// (`tdx_firmware_only`) and names nothing.
#[test]
fn a_tdx_release_log_pin_names_box_identities_and_needs_no_hand_written_td() {
    use skillbox_testkit::floors::{DCAPQVL_TDX_EVAL, DCAPQVL_TDX_IDENTITY, DCAPQVL_TDX_MR_TD};
    let mut r = releases(15);
    for (name, format, tdx) in [
        ("v0.1.0.json", 1, DCAPQVL_TDX_MR_TD),
        ("v0.2.0.json", 2, DCAPQVL_TDX_IDENTITY),
    ] {
        let manifest = format!(
            r#"{{"skillbox_box_release":{format},"release":"{name}","measurements":{{"tdx":["{tdx}"]}}}}"#
        );
        let index = r.log.append(&r.signer, manifest.as_bytes());
        std::fs::write(r.releases.join(name), &manifest).expect("write");
        std::fs::write(
            r.releases.join(format!("{name}.sigstore.json")),
            r.log.bundle(index).expect("bundle"),
        )
        .expect("write");
    }
    let url = "https://tdx.example:7480";
    let mut p = pin(url, "", &r.releases, &r.signer, &r.root);
    p.platform = "tdx".into();
    p.key = None;
    // The collateral floor only: no `accepted`, the log names the TDs.
    p.policy = Some(
        toml::from_str(&format!("min_tcb_eval_data_number = {DCAPQVL_TDX_EVAL}")).expect("toml"),
    );
    let mut c = Config::default();
    c.boxes.accept = vec![url.into()];
    c.boxes.pins = vec![p.clone()];
    Config::parse(&c.render(), Path::new("config.toml"))
        .expect("a TDX release-log pin without a hand-written TD loads");

    let resolved = skillbox_node::pins::resolve(std::slice::from_ref(&p));
    assert_eq!(resolved[0].measurements, [DCAPQVL_TDX_IDENTITY]);
    let Some(skillbox_jc::hardware::HardwarePolicy::Tdx(policy)) = resolved[0]
        .hardware_policy()
        .expect("the resolved pin loads")
    else {
        panic!("a TDX policy");
    };
    let identity: [u8; 48] = hex::decode(DCAPQVL_TDX_IDENTITY)
        .expect("hex")
        .try_into()
        .expect("48 bytes");
    assert_eq!(
        policy.accepted,
        [skillbox_attest::tdx::TdMeasurements::of_identity(identity)]
    );
    let data = |f: &str| {
        std::fs::read(format!(
            "{}/../attest/tests/data/tdx/{f}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("the attest crate's TDX sample")
    };
    let ev = skillbox_attest::tdx::Evidence::from_files(
        &data("dcapqvl-tdx_quote"),
        &data("dcapqvl-tdx_quote_collateral.json"),
    )
    .expect("the sample");
    // Inside the sample collateral's window.
    let verified = skillbox_attest::tdx::verify(
        &ev,
        &skillbox_attest::tdx::Expected::default(),
        &policy,
        1_751_000_000_000,
    )
    .expect("the box the log names");
    assert_eq!(verified.measurement, DCAPQVL_TDX_IDENTITY);
    assert!(verified.measurements_pinned);
}
