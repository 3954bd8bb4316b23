//! AMD SEV-SNP on the real vectors (virtee/sev, trustee, go-sev-guest), each at its time.

use crate::support::*;
use proptest::prelude::*;
use skillbox_attest::snp::{self, Expected, MinTcb, Policy, Product};
use skillbox_attest::{Hex, Platform, Refusal};

const VIRTEE_MEASUREMENT: &str = "7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1a0dc39b2c60bd95b9c480cd81841f";
const VIRTEE_REPORT_DATA: &str = "d447b55d197491bfe15cf298f9de9986b7a7c4be2468b4f6e2d53b71d7c645810b0f2cdfca0040433be063fc1a8293f0f3f8dae7b79fecb3d1cd82bd6a93ebfd";
const VIRTEE_CHIP_ID: &str = "d49554ec717f4e5b0fe6b143bcf0405bd7ae304727edf46603f2a76aef6a3abc15d7af38db757039029f0efacfd08e244324884738c72b082e2f87a44d541eb6";
/// The virtee report's REPORTED_TCB (= its VCEK's): bootloader 3, tee 0, snp 8, microcode 115.
const VIRTEE_TCB: MinTcb = MinTcb {
    bootloader: 3,
    tee: 0,
    snp: 8,
    microcode: 0x73,
    fmc: None,
};
const TRUSTEE_MEASUREMENT: &str = "a1f3930413247bb38cfc171579ea3c12d5fe4901f0c792f63fd75d98f1ef827c23500644e0e692e6be917f9050d3d38c";

#[test]
fn virtee_report_verifies_at_its_time() {
    let v = snp_virtee().verified_at(T_2025);
    assert_eq!(v.platform, Platform::SevSnp);
    assert_eq!(v.measurement, VIRTEE_MEASUREMENT);
    assert_eq!(v.report_data.as_deref(), Some(VIRTEE_REPORT_DATA));
    assert_eq!(v.attribute("policy"), Some("0x30000"));
    assert_eq!(v.attribute("vmpl"), Some("0"));
    assert_eq!(v.attribute("product"), Some("milan"));
    assert_eq!(v.attribute("signing_key"), Some("vcek"));
    assert_eq!(v.attribute("host_data"), Some("0".repeat(64).as_str()));
    assert!(
        v.tcb_status
            .as_deref()
            .unwrap()
            .starts_with("reported_tcb 0300000000000873")
    );
    // hwID = CHIP_ID was checked; the chip id is what the VCEK names.
    assert_eq!(v.instance_id.as_deref(), Some(VIRTEE_CHIP_ID));
    assert!(!v.measurements_pinned && !v.report_data_checked);
    // VCEK 2023-04-03..2030-04-03 ∩ ASK/ARK.
    assert!(v.valid_from_ms <= T_2025 && T_2025 <= v.valid_until_ms);
    assert_eq!(v.valid_from_ms, 1_680_549_823_000);
}

#[test]
fn trustee_report_verifies_at_its_time() {
    let v = snp_trustee().verified_at(T_2025);
    assert_eq!(v.measurement, TRUSTEE_MEASUREMENT);
    assert_eq!(v.attribute("policy"), Some("0x3001f"));
    let rd = v.report_data.unwrap();
    assert!(rd.starts_with("ec6c52d7533cc2c4"));
    assert!(
        rd[64..].bytes().all(|b| b == b'0'),
        "REPORT_DATA[32..] is zero"
    );
}

#[test]
fn pins_and_expectations_are_compared() {
    let ev = snp_virtee();
    let m: [u8; 48] = hex_arr(VIRTEE_MEASUREMENT);
    let rd: [u8; 64] = hex_arr(VIRTEE_REPORT_DATA);
    let good = Expected {
        report_data: Some(rd),
        host_data: Some([0; 32]),
    };
    let v = snp::verify(&ev, &good, &Policy::pinned(vec![m], VIRTEE_TCB), T_2025).unwrap();
    assert!(v.measurements_pinned && v.report_data_checked);
    assert_eq!(v.attribute("host_data_checked"), Some("true"));

    let mut other = m;
    other[0] ^= 1;
    assert_eq!(
        refused(snp::verify(
            &ev,
            &good,
            &Policy::pinned(vec![other], VIRTEE_TCB),
            T_2025
        )),
        Refusal::MeasurementNotAllowed("MEASUREMENT")
    );
    let mut bad_rd = rd;
    bad_rd[63] ^= 1;
    let wrong = Expected {
        report_data: Some(bad_rd),
        host_data: None,
    };
    assert_eq!(
        refused(ev.verify_expecting(&wrong, T_2025)).code(),
        "report_data_mismatch"
    );
    let wrong_host = Expected {
        report_data: Some(rd),
        host_data: Some([1; 32]),
    };
    assert_eq!(
        refused(ev.verify_expecting(&wrong_host, T_2025)).code(),
        "host_data_mismatch"
    );
}

#[test]
fn chip_allow_list_tcb_minimum_and_products() {
    let ev = snp_virtee();
    let mut p = Policy::unpinned();
    p.chip_ids = vec![Hex(hex_arr(VIRTEE_CHIP_ID))];
    assert!(ev.verify_under(&p, T_2025).is_ok());
    p.chip_ids = vec![Hex([7; 64])];
    assert_eq!(ev.refusal_under(&p, T_2025), Refusal::InstanceNotAllowed);

    let mut p = Policy::unpinned();
    p.min_tcb = Some(MinTcb {
        bootloader: 3,
        tee: 0,
        snp: 8,
        microcode: 0x73,
        fmc: None,
    });
    assert!(ev.verify_under(&p, T_2025).is_ok());
    p.min_tcb = Some(MinTcb {
        bootloader: 3,
        tee: 0,
        snp: 9,
        microcode: 0,
        fmc: None,
    });
    assert_eq!(ev.refusal_under(&p, T_2025), Refusal::TcbTooLow);

    let mut p = Policy::unpinned();
    p.products = vec![Product::Genoa, Product::Turin];
    assert_eq!(ev.refusal_under(&p, T_2025), Refusal::ProductNotAllowed);
}

#[test]
fn vlek_report_is_refused_for_vmpl_1_and_its_expired_vlek() {
    let ev = snp_vlek();
    // Inside the VLEK's year: signature and chain verify, VMPL 1 is the reason.
    assert_eq!(ev.refusal_at(T_VLEK), Refusal::VmplNotZero);
    // After 2025-12-10 the VLEK has expired; before 2024-12-10 it was not valid yet.
    assert_eq!(ev.refusal_at(T_2026), Refusal::CertificateExpired);
    assert_eq!(
        ev.refusal_at(1_717_200_000_000),
        Refusal::CertificateNotYetValid
    );
}

#[test]
fn debug_policy_is_refused() {
    assert_eq!(
        snp_debug().refusal_at(T_2025),
        Refusal::DebugEnabled("guest policy DEBUG bit")
    );
}

#[test]
fn expired_vcek_is_refused() {
    // virtee's VCEK ends 2030-04-03.
    assert_eq!(
        snp_virtee().refusal_at(1_900_000_000_000 + 10_000_000_000),
        Refusal::CertificateExpired
    );
}

#[test]
fn invalid_vcek_is_refused_with_a_clear_reason() {
    let ev = snp::Evidence::from_files(
        &data("sev-snp/trustee-test-report.bin"),
        &[
            &data("sev-snp/trustee-test-vcek-invalid-new.der"),
            &data("sev-snp/trustee-milan_ask_ark_asvk.pem"),
        ],
    )
    .expect("it parses as a certificate");
    assert_eq!(
        ev.refusal_at(T_2025),
        Refusal::BadChain("ASK signature over the VCEK/VLEK")
    );
}

#[test]
fn a_self_made_amd_chain_is_a_foreign_root() {
    let ev = snp::Evidence::from_files(
        &data("sev-snp/virtee-report_milan.hex"),
        &[
            &data("forged/amd-vcek.der"),
            &data("forged/amd-ask-ark.pem"),
        ],
    )
    .unwrap();
    assert_eq!(ev.refusal_at(T_2025), Refusal::ForeignRoot);
}

#[test]
fn a_vcek_alone_chains_through_the_builtin_ask_and_ark() {
    let ev = snp::Evidence::from_files(
        &data("sev-snp/virtee-report_milan.hex"),
        &[&data("sev-snp/virtee-vcek_milan.der")],
    )
    .unwrap();
    assert!(ev.chain.is_empty());
    let v = ev.verify_unpinned(T_2025).unwrap();
    assert_eq!(v.measurement, VIRTEE_MEASUREMENT);
}

#[test]
fn another_vcek_does_not_verify_the_report() {
    // trustee's report with virtee's VCEK: the chain is fine, the signature is not theirs.
    let ev = snp::Evidence::from_files(
        &data("sev-snp/trustee-test-report.bin"),
        &[
            &data("sev-snp/virtee-vcek_milan.der"),
            &data("sev-snp/virtee-cert_chain_milan.pem"),
        ],
    )
    .unwrap();
    assert_eq!(
        ev.refusal_at(T_2025),
        Refusal::BadSignature("report signature")
    );
}

#[test]
fn the_cached_verifier_agrees_and_still_checks_time() {
    let ev = snp_virtee();
    let verifier = snp::Verifier::new(Policy::unpinned()).unwrap();
    let cold = ev.verify_unpinned(T_2025).unwrap();
    for _ in 0..3 {
        assert_eq!(
            verifier.verify(&ev, &Expected::default(), T_2025).unwrap(),
            cold
        );
    }
    assert_eq!(
        verifier
            .verify(&ev, &Expected::default(), 2_000_000_000_000)
            .unwrap_err(),
        Refusal::CertificateExpired
    );
    // A different report under the same cached chain is still checked on its own.
    let mut tampered = ev.clone();
    tampered.report[0x90] ^= 1;
    assert_eq!(
        verifier
            .verify(&tampered, &Expected::default(), T_2025)
            .unwrap_err()
            .code(),
        "bad_signature"
    );
}

#[test]
fn evidence_travels_as_json_and_policy_loads_from_toml() {
    let ev = snp_virtee();
    let json = serde_json::to_value(&ev).unwrap();
    let back: snp::Evidence = serde_json::from_value(json).unwrap();
    assert_eq!(back, ev);

    let toml_text = format!(
        "measurements = [\"{VIRTEE_MEASUREMENT}\"]\nchip_ids = [\"{VIRTEE_CHIP_ID}\"]\n\
         products = [\"milan\"]\n[min_tcb]\nbootloader = 3\ntee = 0\nsnp = 8\nmicrocode = 115\n"
    );
    let p: Policy = toml::from_str(&toml_text).expect("policy loads");
    assert!(ev.verify_under(&p, T_2025).is_ok());
    assert!(!p.allow_migration_agent && p.allow_vlek);

    // A policy that pins nothing, a short pin or an unknown key does not load.
    let floor = "\n[min_tcb]\nbootloader = 3\ntee = 0\nsnp = 8\nmicrocode = 115\n";
    let unknown = format!("allow_debug = true\nmeasurements = [\"{VIRTEE_MEASUREMENT}\"]{floor}");
    policies_refused::<Policy>(&[
        &format!("measurements = []{floor}"),
        &format!("chip_ids = []{floor}"),
        &format!("measurements = [\"7a1e\"]{floor}"),
        &unknown,
    ]);
}

/// The box operator chooses the firmware: a pin without a TCB floor took any TCB AMD still
/// certifies, firmware with published flaws included. Such a pin does not load, naming the
/// field (before: it loaded, with no floor), nor one of all zeros; the floor is the evidence's
/// reported TCB, and a box reporting a TCB below the pinned floor is refused with its code.
#[test]
fn an_sev_snp_pin_names_its_tcb_floor_and_a_lower_tcb_is_refused() {
    let pinned = format!("measurements = [\"{VIRTEE_MEASUREMENT}\"]\n");
    let err = toml::from_str::<Policy>(&pinned).expect_err("a pin without a floor loads");
    assert!(err.to_string().contains("min_tcb"), "{err}");
    let zeros = format!("{pinned}[min_tcb]\nbootloader = 0\ntee = 0\nsnp = 0\nmicrocode = 0\n");
    let err = toml::from_str::<Policy>(&zeros).expect_err("a floor of zeros loads");
    assert!(err.to_string().contains("all zeros"), "{err}");

    let ev = snp_virtee();
    assert_eq!(ev.tcb_floor(), Ok(VIRTEE_TCB));
    let m: [u8; 48] = hex_arr(VIRTEE_MEASUREMENT);
    assert!(
        ev.verify_under(&Policy::pinned(vec![m], VIRTEE_TCB), T_2025)
            .is_ok()
    );
    // Each component one above the box's: its firmware is below the floor.
    let raise: [fn(&mut MinTcb); 4] = [
        |t| t.bootloader += 1,
        |t| t.tee += 1,
        |t| t.snp += 1,
        |t| t.microcode += 1,
    ];
    for bump in raise {
        let mut floor = VIRTEE_TCB;
        bump(&mut floor);
        let policy = Policy::pinned(vec![m], floor);
        assert_eq!(ev.refusal_under(&policy, T_2025), Refusal::TcbTooLow);
        assert_eq!(ev.refusal_under(&policy, T_2025).code(), "tcb_too_low");
    }
    // The floor is read only from evidence that verifies: a report whose signed bytes were
    // altered names none.
    let mut tampered = ev.clone();
    tampered.report[0x180] ^= 1;
    assert_eq!(
        tampered.tcb_floor().map_err(|r| r.code()),
        Err("bad_signature")
    );
}

#[test]
fn malformed_inputs_are_errors() {
    let report = data("sev-snp/virtee-report_milan.hex");
    let vcek = data("sev-snp/virtee-vcek_milan.der");
    assert_eq!(
        snp::Evidence::from_files(&report[..100], &[&vcek]).unwrap_err(),
        Refusal::Malformed("SEV-SNP report (1184 bytes)")
    );
    assert_eq!(
        snp::Evidence::from_files(&report, &[]).unwrap_err(),
        Refusal::Malformed("no VCEK or VLEK certificate given")
    );
    assert!(snp::Evidence::from_files(&report, &[&vcek[..500]]).is_err());
    assert!(snp::Evidence::from_files(&report, &[&vcek, &vcek]).is_err());
    // Wire-form evidence with a short report.
    let mut ev = snp_virtee();
    ev.report.truncate(1000);
    assert_eq!(ev.verify_unpinned(T_2025).unwrap_err().code(), "malformed");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bit flipped anywhere in the signed region `[0, 0x2A0)` or in the signature itself
    /// is refused as a bad signature, never accepted, never another reason (on the virtee and
    /// the trustee report).
    #[test]
    fn any_tampered_byte_is_a_bad_signature(
        sample in 0usize..2,
        flip in bit_flip(),
    ) {
        let mut ev = [snp_virtee, snp_trustee][sample]();
        flip.apply(&mut ev.report, 0x2A0 + 144);
        let r = snp::Evidence::verifier().verify(&ev, &Expected::default(), T_2025);
        prop_assert_eq!(r.unwrap_err().code(), "bad_signature");
    }

    /// Random bytes as report or certificate are errors, never panics.
    #[test]
    fn random_inputs_never_panic(report in proptest::collection::vec(any::<u8>(), 0..1300),
                                 cert in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let _ = snp::Evidence::from_files(&report, &[&cert]);
        let ev = snp::Evidence { report, vek: cert.clone(), chain: vec![cert] };
        prop_assert!(ev.verify_unpinned(T_2025).is_err());
    }
}
