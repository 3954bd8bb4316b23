//! The hardware verifiers behind the box's attestation check, on a real SEV-SNP report
//! (virtee/sev's Milan vector, `tests/data/sev-snp/`, Apache-2.0): the adapter reaches the
//! report's signature, chain, measurement pin and report-data binding, and each refusal keeps its
//! own closed code.

use crate::support::*;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use skillbox_attest::snp;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    Attestation, Statement, Verifier as _, VerifyPolicy, provider_table_hash, verify_attestation,
};
use skillbox_jc::dsse::approved_program;
use skillbox_jc::hardware::{HardwarePolicy, HardwareVerifier};
use skillbox_jc::program::{BoxIdentity, Program};
use skillbox_testkit::floors::{
    DCAPQVL_TDX_EVAL, DCAPQVL_TDX_IDENTITY, DCAPQVL_TDX_IDENTITY_V1, DCAPQVL_TDX_MR_TD,
    DCAPQVL_TDX_RTMR0, DCAPQVL_TDX_RTMR1, DCAPQVL_TDX_RTMR2, dcapqvl_tdx_td, virtee_snp_floor,
};

const MEASUREMENT: &str = "7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1a0dc39b2c60bd95b9c480cd81841f";
const REPORT_DATA: &str = "d447b55d197491bfe15cf298f9de9986b7a7c4be2468b4f6e2d53b71d7c645810b0f2cdfca0040433be063fc1a8293f0f3f8dae7b79fecb3d1cd82bd6a93ebfd";
/// 2025-01-01, inside the vector's certificate window.
const T_2025_SECS: u64 = 1_735_689_600;

fn evidence() -> serde_json::Value {
    let ev = snp::Evidence::from_files(
        &data("sev-snp/virtee-report_milan.hex"),
        &[
            &data("sev-snp/virtee-vcek_milan.der"),
            &data("sev-snp/virtee-cert_chain_milan.pem"),
        ],
    )
    .expect("the vector parses");
    serde_json::to_value(ev).expect("evidence json")
}

/// dcap-qvl's TDX sample quote and its collateral, as a box's evidence (JSON).
fn tdx_evidence() -> serde_json::Value {
    let ev = skillbox_attest::tdx::Evidence::from_files(
        &data("tdx/dcapqvl-tdx_quote"),
        &data("tdx/dcapqvl-tdx_quote_collateral.json"),
    )
    .expect("the sample parses");
    serde_json::to_value(ev).expect("evidence json")
}

fn policy(measurement: &str) -> VerifyPolicy {
    let hw = HardwarePolicy::from_value(
        "sev-snp",
        Some(virtee_snp_floor()),
        &[measurement.to_owned()],
    )
    .expect("policy");
    VerifyPolicy::new(false).with_verifier(Box::new(HardwareVerifier::new(hw).expect("verifier")))
}

#[tokio::test]
async fn a_real_snp_report_passes_signature_chain_and_pin_and_is_bound_to_the_statement() {
    let f = start(None).await;
    let mut p: Program = f.program();
    p.boxes = vec![BoxIdentity {
        platform: "sev-snp".into(),
        measurement: MEASUREMENT.into(),
    }];
    p.expires_at = T_2025_SECS + 600;
    let approved = approved_program(&f.approve(&p)).expect("approved");
    let providers =
        std::collections::BTreeMap::from([("local".to_owned(), "in-process".to_owned())]);
    let statement = Statement {
        platform: "sev-snp".into(),
        measurement: MEASUREMENT.into(),
        program_hash: approved.hash.to_hex(),
        run_id: "r".repeat(32),
        hpke_public_key: "11".repeat(32),
        receipt_public_key: "22".repeat(32),
        nonce: "ab".repeat(16),
        expires_at: T_2025_SECS + 60,
        providers: provider_table_hash(&providers).expect("hash"),
        // The configuration hash this genuine report's HOST_DATA carries (its host set zeros).
        config_sha256: Some("00".repeat(32)),
        ..Statement::default()
    };
    let att = Attestation {
        platform: "sev-snp".into(),
        statement: STANDARD.encode(statement.to_canonical().expect("canonical")),
        evidence: evidence(),
        providers,
        ..Attestation::default()
    };
    let check = |a: &Attestation, pol: &VerifyPolicy| {
        verify_attestation(
            a,
            &approved,
            &"r".repeat(32),
            &"ab".repeat(16),
            pol,
            T_2025_SECS,
        )
    };
    // Genuine report, pinned measurement: everything holds but the binding — this report was
    // made for another statement, so it cannot vouch for this run.
    let got = check(&att, &policy(MEASUREMENT));
    assert!(
        matches!(got, Err(JcError::HardwareRefused("report_data_mismatch"))),
        "{:?}",
        got.err()
    );
    // The adapter itself, given the report data the report does carry: the pinned measurement
    // is vouched for, another pin is refused.
    let rd: [u8; 64] = hex::decode(REPORT_DATA)
        .expect("hex")
        .try_into()
        .expect("64 bytes");
    let verifier = |m: &str| {
        HardwareVerifier::new(
            HardwarePolicy::from_value("sev-snp", Some(virtee_snp_floor()), &[m.to_owned()])
                .expect("policy"),
        )
        .expect("verifier")
    };
    let now_ms = T_2025_SECS * 1000;
    let vouched = verifier(MEASUREMENT)
        .verify_evidence(&att, &statement, &rd, now_ms)
        .expect("genuine and pinned");
    assert_eq!(vouched.measurement, MEASUREMENT);
    // The TCB verdict travels with it (what `call show` prints), in the verifier's words.
    assert!(
        vouched
            .tcb_status
            .as_deref()
            .is_some_and(|t| t.starts_with("reported_tcb ")),
        "{:?}",
        vouched.tcb_status
    );
    assert!(matches!(
        verifier(&"00".repeat(48)).verify_evidence(&att, &statement, &rd, now_ms),
        Err(JcError::HardwareRefused("measurement_not_allowed"))
    ));
    // Years after its certificates expired.
    assert!(matches!(
        verifier(MEASUREMENT).verify_evidence(&att, &statement, &rd, 4_102_444_800_000),
        Err(JcError::HardwareRefused("certificate_expired"))
    ));
    // One flipped byte inside the signed report.
    let mut tampered = att.clone();
    let mut ev: snp::Evidence = serde_json::from_value(tampered.evidence.clone()).expect("ev");
    ev.report[0x90] ^= 1;
    tampered.evidence = serde_json::to_value(ev).expect("json");
    assert!(matches!(
        check(&tampered, &policy(MEASUREMENT)),
        Err(JcError::HardwareRefused("bad_signature"))
    ));
    // Evidence that is not an SNP report at all.
    let mut junk = att.clone();
    junk.evidence = serde_json::json!({"report": "AAAA"});
    assert!(matches!(
        check(&junk, &policy(MEASUREMENT)),
        Err(JcError::HardwareRefused(_))
    ));
    // A node that pins no SNP box has no verifier for the platform.
    assert!(matches!(
        check(&att, &VerifyPolicy::new(false)),
        Err(JcError::PlatformNotAllowed(_))
    ));
}

#[test]
fn hardware_pins_name_what_is_wrong() {
    let err = HardwarePolicy::from_value("sev-snp", Some(virtee_snp_floor()), &["abc".into()])
        .expect_err("short");
    assert!(err.contains("96 hex digits"), "{err}");
    let err = HardwarePolicy::from_value("tdx", None, &[]).expect_err("no policy");
    assert!(err.contains("policy"), "{err}");
    let err = HardwarePolicy::from_value("nvidia", None, &[]).expect_err("gpu");
    assert!(err.contains("CPU"), "{err}");
    let err = HardwarePolicy::from_value(
        "sev-snp",
        Some(serde_json::json!({"measurements": [], "min_tcb": virtee_snp_floor()["min_tcb"]})),
        &[],
    )
    .expect_err("empty pins");
    assert!(err.contains("policy"), "{err}");
}

/// The box operator chooses the firmware and fetches the collateral. A hardware pin without
/// its TCB floor accepted whatever generation the vendor still signs (a guest on firmware with
/// published flaws, TDX collateral of any age); now it is refused where pins are loaded, naming
/// the field and the command that prints it, and a verifier built in code without one is
/// refused too. Nitro has no TCB here and is untouched.
#[test]
fn a_hardware_pin_without_its_tcb_floor_is_refused_at_load() {
    let m = [MEASUREMENT.to_owned()];
    // SEV-SNP: pinned by its measurement alone (the form a pin took before), or a table
    // without `min_tcb`, or with a null one.
    for policy in [
        None,
        Some(serde_json::json!({"measurements": [MEASUREMENT]})),
        Some(serde_json::json!({"measurements": [MEASUREMENT], "min_tcb": null})),
    ] {
        let err = HardwarePolicy::from_value("sev-snp", policy.clone(), &m)
            .expect_err("an SEV-SNP pin without a floor loads");
        assert!(
            err.contains("policy.min_tcb is required"),
            "{policy:?}: {err}"
        );
        assert!(err.contains("--show-identity"), "{err}");
    }
    // TDX: no `min_tcb_eval_data_number`, or 0 (any collateral generation).
    let accepted = serde_json::json!([dcapqvl_tdx_td()]);
    let err =
        HardwarePolicy::from_value("tdx", Some(serde_json::json!({"accepted": accepted})), &[])
            .expect_err("a TDX pin without a floor loads");
    assert!(
        err.contains("policy.min_tcb_eval_data_number is required"),
        "{err}"
    );
    assert!(err.contains("--show-identity"), "{err}");
    let zero = serde_json::json!({"accepted": accepted, "min_tcb_eval_data_number": 0});
    let err = HardwarePolicy::from_value("tdx", Some(zero), &[]).expect_err("floor 0 loads");
    assert!(err.contains("min_tcb_eval_data_number"), "{err}");
    // A policy built in code without a floor gets no verifier.
    let bare = HardwarePolicy::SevSnp(snp::Policy {
        min_tcb: None,
        ..snp::Policy::unpinned()
    });
    assert!(matches!(
        HardwareVerifier::new(bare),
        Err(JcError::HardwareRefused("tcb_floor_missing"))
    ));
    // With their floors they load.
    HardwarePolicy::from_value("sev-snp", Some(virtee_snp_floor()), &m).expect("snp floor");
    let floored =
        serde_json::json!({"accepted": accepted, "min_tcb_eval_data_number": DCAPQVL_TDX_EVAL});
    HardwarePolicy::from_value("tdx", Some(floored), &[]).expect("tdx floor");
}

/// MRTD measures only the TD's firmware: a TDX pin naming it alone accepted any kernel, initrd
/// and box binary the host booted under that firmware (RTMR1/RTMR2 were optional, skipped when
/// unset), so a host's patched box passed every check. Such a pin no longer loads, naming the
/// field, and a policy built in code without them gets no verifier.
#[test]
fn a_tdx_pin_of_the_firmware_alone_is_refused() {
    let firmware_only = serde_json::json!({"mr_td": DCAPQVL_TDX_MR_TD});
    let mut no_rtmr2 = dcapqvl_tdx_td();
    no_rtmr2["rtmr2"] = serde_json::Value::Null;
    // Review 26 V2: without RTMR0 the host's ACPI code runs in the box under its name.
    let mut no_rtmr0 = dcapqvl_tdx_td();
    no_rtmr0["rtmr0"] = serde_json::Value::Null;
    for (td, field) in [
        (firmware_only.clone(), "rtmr1"),
        (no_rtmr2, "rtmr2"),
        (no_rtmr0.clone(), "rtmr0"),
    ] {
        let policy = serde_json::json!({
            "accepted": [dcapqvl_tdx_td(), td],
            "min_tcb_eval_data_number": DCAPQVL_TDX_EVAL,
        });
        let err = HardwarePolicy::from_value("tdx", Some(policy), &[])
            .expect_err("a TDX pin without its boot chain loads");
        assert!(
            err.contains(&format!("accepted[1].{field} is required")),
            "{err}"
        );
    }
    let td: skillbox_attest::tdx::TdMeasurements =
        serde_json::from_value(firmware_only).expect("an entry");
    let built = HardwarePolicy::Tdx(skillbox_attest::tdx::Policy::pinned(
        vec![td],
        DCAPQVL_TDX_EVAL,
    ));
    assert!(matches!(
        HardwareVerifier::new(built),
        Err(JcError::HardwareRefused("rtmr_pins_missing"))
    ));
    let td: skillbox_attest::tdx::TdMeasurements =
        serde_json::from_value(no_rtmr0).expect("an entry");
    let built = HardwarePolicy::Tdx(skillbox_attest::tdx::Policy::pinned(
        vec![td],
        DCAPQVL_TDX_EVAL,
    ));
    assert!(matches!(
        HardwareVerifier::new(built),
        Err(JcError::HardwareRefused("rtmr_pins_missing"))
    ));
}

/// A TDX pin is named by the box identity (MRTD, RTMR0, RTMR1, RTMR2), as a release log names it: a
/// policy table without `accepted` takes one entry per identity, and the genuine sample is
/// refused by the pin of a box on its firmware and kernel with another RTMR2 (another box
/// binary), accepted by its own, and vouched for under its identity. A pin written when a TDX
/// box was named by its MRTD (old configurations) is refused naming the identity to write.
#[test]
fn a_tdx_pin_names_the_box_identity_and_an_mrtd_name_is_refused() {
    let statement = Statement {
        config_sha256: Some("00".repeat(32)),
        ..Statement::default()
    };
    let rd: [u8; 64] = hex::decode(TDX_REPORT_DATA)
        .expect("hex")
        .try_into()
        .expect("64");
    let att = Attestation {
        evidence: tdx_evidence(),
        ..Attestation::default()
    };
    let floor = serde_json::json!({ "min_tcb_eval_data_number": DCAPQVL_TDX_EVAL });
    let pinned = |identity: &str| {
        HardwareVerifier::new(
            HardwarePolicy::from_value("tdx", Some(floor.clone()), &[identity.into()])
                .expect("an identity is a whole TDX pin"),
        )
        .expect("verifier")
    };
    let mut rtmr2 = hex::decode(DCAPQVL_TDX_RTMR2).expect("hex");
    rtmr2[0] ^= 1;
    let honest = hex::encode(skillbox_attest::tdx::identity(
        &hex::decode(DCAPQVL_TDX_MR_TD)
            .expect("hex")
            .try_into()
            .expect("48"),
        &hex::decode(DCAPQVL_TDX_RTMR0)
            .expect("hex")
            .try_into()
            .expect("48"),
        &hex::decode(DCAPQVL_TDX_RTMR1)
            .expect("hex")
            .try_into()
            .expect("48"),
        &rtmr2.try_into().expect("48"),
    ));
    assert!(matches!(
        pinned(&honest).verify_evidence(&att, &statement, &rd, T_TDX_MS),
        Err(JcError::HardwareRefused("measurement_not_allowed"))
    ));
    let vouched = pinned(DCAPQVL_TDX_IDENTITY)
        .verify_evidence(&att, &statement, &rd, T_TDX_MS)
        .expect("the box its identity names");
    assert_eq!(vouched.measurement, DCAPQVL_TDX_IDENTITY);

    // An old pin: measurements = [MRTD] beside its TD's registers.
    let old = serde_json::json!({
        "accepted": [dcapqvl_tdx_td()],
        "min_tcb_eval_data_number": DCAPQVL_TDX_EVAL,
    });
    let err = HardwarePolicy::from_value("tdx", Some(old.clone()), &[DCAPQVL_TDX_MR_TD.into()])
        .expect_err("a TDX pin naming the firmware loads");
    assert!(
        err.contains("measurements[0] is the mr_td of accepted[0], the firmware alone"),
        "{err}"
    );
    assert!(err.contains(DCAPQVL_TDX_IDENTITY), "{err}");
    // A pin written before review 26 V2: its identity the retired `/1` of the same registers
    // (no RTMR0). Refused at load naming the identity to write, not loaded to match no box; an
    // identity-only pin of it loads (nothing says what it was made of) and refuses the box.
    let err =
        HardwarePolicy::from_value("tdx", Some(old.clone()), &[DCAPQVL_TDX_IDENTITY_V1.into()])
            .expect_err("a TDX pin naming the retired identity loads");
    assert!(
        err.contains("measurements[0] is the retired skillbox/tdx-identity/1 of accepted[0]"),
        "{err}"
    );
    assert!(err.contains(DCAPQVL_TDX_IDENTITY), "{err}");
    assert!(matches!(
        pinned(DCAPQVL_TDX_IDENTITY_V1).verify_evidence(&att, &statement, &rd, T_TDX_MS),
        Err(JcError::HardwareRefused("measurement_not_allowed"))
    ));
    HardwarePolicy::from_value("tdx", Some(old), &[DCAPQVL_TDX_IDENTITY.into()])
        .expect("the same pin by identity");
    // No accepted TD and no identity: nothing names the box.
    let err = HardwarePolicy::from_value("tdx", Some(floor.clone()), &[]).expect_err("empty");
    assert!(err.contains("at least one measurement"), "{err}");
}

/// A genuine box whose evidence reports a TCB (SEV-SNP) or collateral (TDX) below what the
/// party pinned is refused through the adapter with the attest crate's closed code.
#[test]
fn a_box_below_the_pinned_tcb_floor_is_refused() {
    let statement = Statement {
        config_sha256: Some("00".repeat(32)),
        ..Statement::default()
    };
    let rd = |h: &str| -> [u8; 64] { hex::decode(h).expect("hex").try_into().expect("64") };
    let att = Attestation {
        evidence: evidence(),
        ..Attestation::default()
    };
    let snp_floor = |snp: u8| {
        let policy = serde_json::json!({"min_tcb": {"bootloader": 3, "tee": 0, "snp": snp, "microcode": 115}});
        HardwareVerifier::new(
            HardwarePolicy::from_value("sev-snp", Some(policy), &[MEASUREMENT.into()])
                .expect("policy"),
        )
        .expect("verifier")
    };
    let at = T_2025_SECS * 1000;
    snp_floor(8)
        .verify_evidence(&att, &statement, &rd(REPORT_DATA), at)
        .expect("at its floor");
    assert!(matches!(
        snp_floor(9).verify_evidence(&att, &statement, &rd(REPORT_DATA), at),
        Err(JcError::HardwareRefused("tcb_too_low"))
    ));

    let att = Attestation {
        evidence: tdx_evidence(),
        ..att
    };
    let tdx_floor = |eval: u32| {
        let policy =
            serde_json::json!({"accepted": [dcapqvl_tdx_td()], "min_tcb_eval_data_number": eval});
        HardwareVerifier::new(HardwarePolicy::from_value("tdx", Some(policy), &[]).expect("policy"))
            .expect("verifier")
    };
    tdx_floor(DCAPQVL_TDX_EVAL)
        .verify_evidence(&att, &statement, &rd(TDX_REPORT_DATA), T_TDX_MS)
        .expect("at its floor");
    assert!(matches!(
        tdx_floor(DCAPQVL_TDX_EVAL + 1).verify_evidence(
            &att,
            &statement,
            &rd(TDX_REPORT_DATA),
            T_TDX_MS
        ),
        Err(JcError::HardwareRefused("tcb_not_allowed"))
    ));
}

/// A box that claims a configuration its host did not launch it with: genuine reports (the
/// virtee Milan report, HOST_DATA zero; dcap-qvl's TDX sample, MRCONFIGID zero), each given the
/// report data it does carry, under statements that bind another configuration hash. The
/// adapter compares the launch value with the statement's hash and refuses; a statement that
/// binds none is refused too, and a pin may name the hash itself.
#[test]
fn a_report_launched_for_another_configuration_than_the_statement_claims_is_refused() {
    let config = skillbox_jc::attest::BoxConfiguration::new(
        std::collections::BTreeMap::from([("local".to_owned(), "in-process".to_owned())]),
        None,
    );
    let claimed = hex::encode(config.sha256().expect("hash"));
    let with_config = |platform: &str, config: Option<String>| Statement {
        platform: platform.into(),
        config_sha256: config,
        ..Statement::default()
    };
    let rd = |h: &str| -> [u8; 64] { hex::decode(h).expect("hex").try_into().expect("64") };
    let zero = Some("00".repeat(32));

    // SEV-SNP.
    let att = Attestation {
        platform: "sev-snp".into(),
        statement: String::new(),
        evidence: evidence(),
        ..Attestation::default()
    };
    let snp = |pol: Option<serde_json::Value>| {
        let mut pol = pol.unwrap_or_else(virtee_snp_floor);
        pol["min_tcb"] = virtee_snp_floor()["min_tcb"].clone();
        HardwareVerifier::new(
            HardwarePolicy::from_value("sev-snp", Some(pol), &[MEASUREMENT.into()])
                .expect("policy"),
        )
        .expect("verifier")
    };
    let check = |v: &HardwareVerifier, config: Option<String>| {
        v.verify_evidence(
            &att,
            &with_config("sev-snp", config),
            &rd(REPORT_DATA),
            T_2025_SECS * 1000,
        )
    };
    let got = check(&snp(None), Some(claimed.clone()));
    assert!(
        matches!(got, Err(JcError::HardwareRefused("host_data_mismatch"))),
        "{got:?}"
    );
    assert!(matches!(
        check(&snp(None), None),
        Err(JcError::HardwareRefused("config_not_bound"))
    ));
    check(&snp(None), zero.clone()).expect("the configuration it was launched with");
    // A pin naming the configuration hash: another launch value is refused even when the
    // statement agrees with the report.
    let pinned =
        |h: &str| Some(serde_json::json!({"measurements": [MEASUREMENT], "host_data": [h]}));
    assert!(matches!(
        check(&snp(pinned(&claimed)), zero.clone()),
        Err(JcError::HardwareRefused("measurement_not_allowed"))
    ));
    check(&snp(pinned(&"00".repeat(32))), zero.clone()).expect("pinned and launched");

    // TDX.
    let att = Attestation {
        platform: "tdx".into(),
        evidence: tdx_evidence(),
        ..att
    };
    let tdx = HardwareVerifier::new(
        HardwarePolicy::from_value(
            "tdx",
            Some(serde_json::json!({
                "accepted": [dcapqvl_tdx_td()],
                "min_tcb_eval_data_number": DCAPQVL_TDX_EVAL,
            })),
            &[],
        )
        .expect("policy"),
    )
    .expect("verifier");
    let check = |config: Option<String>| {
        tdx.verify_evidence(
            &att,
            &with_config("tdx", config),
            &rd(TDX_REPORT_DATA),
            T_TDX_MS,
        )
    };
    let got = check(Some(claimed));
    assert!(
        matches!(got, Err(JcError::HardwareRefused("config_id_mismatch"))),
        "{got:?}"
    );
    assert!(matches!(
        check(None),
        Err(JcError::HardwareRefused("config_not_bound"))
    ));
    check(zero).expect("the configuration it was launched with");
}

/// Evidence that is not the platform's is `malformed` before anything else is looked at: a
/// statement that binds no configuration does not turn it into `config_not_bound`.
#[test]
fn evidence_of_another_shape_is_malformed_whatever_the_statement_binds() {
    let junk = Attestation {
        evidence: serde_json::json!({"quote": 1}),
        ..Attestation::default()
    };
    let pins = [
        ("sev-snp", virtee_snp_floor()),
        (
            "tdx",
            serde_json::json!({
                "accepted": [dcapqvl_tdx_td()],
                "min_tcb_eval_data_number": DCAPQVL_TDX_EVAL,
            }),
        ),
    ];
    for (platform, pol) in pins {
        let policy =
            HardwarePolicy::from_value(platform, Some(pol), &[MEASUREMENT.into()]).expect("policy");
        let v = HardwareVerifier::new(policy).expect("verifier");
        let unbound = Statement {
            platform: platform.into(),
            ..Statement::default()
        };
        let got = v.verify_evidence(&junk, &unbound, &[0; 64], T_TDX_MS);
        assert!(
            matches!(got, Err(JcError::HardwareRefused("malformed"))),
            "{platform}: {got:?}"
        );
    }
}

const TDX_REPORT_DATA: &str = "9a9d48e7f6799642d3d1b34e1e5e1742d4bb02dd6ddd551862c1211d35c304f9eca3efdbb481601c163cf52493d6e44aed55d51ec39b7e518fadb92c2b523f20";
/// Inside the TDX sample's collateral window.
const T_TDX_MS: u64 = 1_751_000_000_000;
