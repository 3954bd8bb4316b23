//! Intel TDX on the real dcap-qvl samples, with their collateral, at their times.

use crate::support::*;
use proptest::prelude::*;
use skillbox_attest::tdx::{self, Expected, Policy, TcbStatus, TdMeasurements};
use skillbox_attest::{Hex, HexBytes, Platform, Refusal};

const MR_TD: &str = "91eb2b44d141d4ece09f0c75c2c53d247a3c68edd7fafe8a3520c942a604a407de03ae6dc5f87f27428b2538873118b7";
const RTMR0: &str = "44c0197b39157fdd7a4dcc44767f9d6b0bb3977c7a8e347b8492f827fe9d9e5c48aca29b220b80b6a540cf994b9bc9c0";
const RTMR1: &str = "0084452c01668329d4bc06acdf58a7205c26743304509973949e5619bf81a6a7aea8c323c173019b3093d54e579e9378";
const RTMR2: &str = "d833feef2cd945148aa38ead2c53e9b7f138190aaaebfc551dccd829fc207aa3ba80b70870d7330733642e01d48c3132";
/// The sample collateral's TCB evaluation data number (TCB info and QE identity both 17).
const EVAL: u32 = 17;
const REPORT_DATA: &str = "9a9d48e7f6799642d3d1b34e1e5e1742d4bb02dd6ddd551862c1211d35c304f9eca3efdbb481601c163cf52493d6e44aed55d51ec39b7e518fadb92c2b523f20";

/// A TDX box identity as a release pipeline computes it, independently of the crate:
/// SHA-384("skillbox/tdx-identity/2" ‖ MRTD ‖ RTMR0 ‖ RTMR1 ‖ RTMR2).
fn box_identity(mr_td: &str, rtmr0: &str, rtmr1: &str, rtmr2: &str) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha384::new();
    h.update(b"skillbox/tdx-identity/2");
    for register in [mr_td, rtmr0, rtmr1, rtmr2] {
        h.update(hex_arr::<48>(register));
    }
    hex::encode(h.finalize())
}

fn pin(mr_td: &str) -> TdMeasurements {
    TdMeasurements {
        identity: None,
        mr_td: Some(Hex(hex_arr(mr_td))),
        rtmr0: Some(Hex(hex_arr(RTMR0))),
        rtmr1: Some(Hex(hex_arr(RTMR1))),
        rtmr2: Some(Hex(hex_arr(RTMR2))),
        rtmr3: Some(Hex([0; 48])),
        mr_config_id: Some(Hex([0; 48])),
    }
}

#[test]
fn sample_quote_verifies_up_to_date_in_its_window() {
    let v = tdx_valid().verified_at(T_TDX);
    assert_eq!(v.platform, Platform::Tdx);
    assert_eq!(v.tcb_status.as_deref(), Some("UpToDate"));
    assert_eq!(v.measurement, box_identity(MR_TD, RTMR0, RTMR1, RTMR2));
    assert_eq!(v.measurement_named("mr_td"), Some(MR_TD));
    assert_eq!(v.measurement_named("rtmr3"), Some("0".repeat(96).as_str()));
    assert_eq!(v.report_data.as_deref(), Some(REPORT_DATA));
    assert_eq!(v.attribute("fmspc"), Some("b0c06f000000"));
    assert_eq!(v.attribute("debug"), Some("false"));
    // The collateral's window is the README's.
    assert_eq!(v.valid_from_ms, 1_750_329_147_000);
    assert_eq!(v.valid_until_ms, 1_752_919_235_000);
}

#[test]
fn outside_its_window_the_collateral_has_expired() {
    let ev = tdx_valid();
    for at in [1_750_329_146_000, 1_752_919_236_000, T_2026] {
        assert_eq!(ev.refusal_at(at), Refusal::CollateralExpired, "at {at}");
    }
}

#[test]
fn outdated_sample_matches_no_tcb_level_whatever_the_allow_list() {
    let ev = tdx_outdated();
    assert_eq!(
        ev.refusal_at(T_TDX_OUTDATED),
        Refusal::TcbNotAllowed("no TCB level matches the platform")
    );
    let mut lax = Policy::unpinned();
    lax.tcb_statuses = vec![
        TcbStatus::UpToDate,
        TcbStatus::OutOfDate,
        TcbStatus::SWHardeningNeeded,
        TcbStatus::ConfigurationNeeded,
        TcbStatus::ConfigurationAndSWHardeningNeeded,
        TcbStatus::OutOfDateConfigurationNeeded,
    ];
    assert_eq!(
        ev.refusal_under(&lax, T_TDX_OUTDATED).code(),
        "tcb_not_allowed"
    );
}

#[test]
fn a_status_outside_the_allow_list_is_refused() {
    let mut p = Policy::unpinned();
    p.tcb_statuses = vec![TcbStatus::OutOfDate];
    assert_eq!(
        tdx_valid().refusal_under(&p, T_TDX),
        Refusal::TcbNotAllowed("UpToDate")
    );
}

#[test]
fn measurements_are_compared_with_the_pins() {
    let ev = tdx_valid();
    let v = ev
        .verify_under(&Policy::pinned(vec![pin(MR_TD)], EVAL), T_TDX)
        .unwrap();
    assert!(v.measurements_pinned);

    let mut wrong_td = MR_TD.to_owned();
    wrong_td.replace_range(0..2, "00");
    assert_eq!(
        ev.refusal_under(&Policy::pinned(vec![pin(&wrong_td)], EVAL), T_TDX),
        Refusal::MeasurementNotAllowed("MRTD")
    );
    let mut p = pin(MR_TD);
    p.rtmr1 = Some(Hex([1; 48]));
    assert_eq!(
        ev.refusal_under(&Policy::pinned(vec![p.clone()], EVAL), T_TDX),
        Refusal::MeasurementNotAllowed("RTMR1")
    );
    // A second entry that matches wins.
    assert!(
        ev.verify_under(&Policy::pinned(vec![p, pin(MR_TD)], EVAL), T_TDX)
            .is_ok()
    );
    let mut p = pin(MR_TD);
    p.mr_config_id = Some(Hex([2; 48]));
    assert_eq!(
        ev.refusal_under(&Policy::pinned(vec![p], EVAL), T_TDX),
        Refusal::MeasurementNotAllowed("MRCONFIGID")
    );
}

#[test]
fn report_data_and_mr_config_id_are_compared_with_expectations() {
    let ev = tdx_valid();
    let right = Expected {
        report_data: Some(hex_arr(REPORT_DATA)),
        mr_config_id: Some([0; 48]),
    };
    let v = ev.verify_expecting(&right, T_TDX).unwrap();
    assert!(v.report_data_checked);
    let wrong = Expected {
        report_data: Some([0; 64]),
        mr_config_id: None,
    };
    assert_eq!(
        refused(ev.verify_expecting(&wrong, T_TDX)),
        Refusal::ReportDataMismatch
    );
    let wrong = Expected {
        report_data: None,
        mr_config_id: Some([9; 48]),
    };
    assert_eq!(
        refused(ev.verify_expecting(&wrong, T_TDX)),
        Refusal::ConfigIdMismatch
    );
}

#[test]
fn platform_flags_and_the_ppid_allow_list() {
    let ev = tdx_valid();
    let mut p = Policy::unpinned();
    p.allow_smt = false;
    assert_eq!(ev.refusal_under(&p, T_TDX).code(), "attributes_not_allowed");
    let v = ev.verify_unpinned(T_TDX).unwrap();
    let ppid = hex::decode(v.instance_id.unwrap()).unwrap();
    let mut p = Policy::unpinned();
    p.ppids = vec![HexBytes(ppid)];
    assert!(ev.verify_under(&p, T_TDX).is_ok());
    p.ppids = vec![HexBytes(vec![0; 16])];
    assert_eq!(ev.refusal_under(&p, T_TDX), Refusal::InstanceNotAllowed);
}

#[test]
fn collateral_that_is_altered_or_for_another_platform_is_refused() {
    let mut ev = tdx_valid();
    ev.collateral.tcb_info = ev.collateral.tcb_info.replace(
        "\"tcbEvaluationDataNumber\":17",
        "\"tcbEvaluationDataNumber\":18",
    );
    assert_eq!(
        ev.refusal_at(T_TDX),
        Refusal::CollateralInvalid("collateral signature")
    );
    let mut ev = tdx_valid();
    ev.collateral.tcb_info = ev.collateral.tcb_info.replace("UpToDate", "UpToDatf");
    assert_eq!(ev.refusal_at(T_TDX).code(), "collateral_invalid");
    // The outdated sample's collateral (another FMSPC) with this quote, at a time both are valid
    // is impossible (their windows do not overlap), so at the quote's time it has not started.
    let mut ev = tdx_valid();
    ev.collateral = tdx_outdated().collateral;
    assert!(ev.verify_unpinned(T_TDX).is_err());
}

#[test]
fn policy_loads_from_toml_and_pins_are_required() {
    let text = format!(
        "tcb_statuses = [\"UpToDate\", \"SWHardeningNeeded\"]\nmin_tcb_eval_data_number = 17\n\
         [[accepted]]\nmr_td = \"{MR_TD}\"\nrtmr0 = \"{RTMR0}\"\nrtmr1 = \"{RTMR1}\"\n\
         rtmr2 = \"{RTMR2}\"\n"
    );
    let p: Policy = toml::from_str(&text).expect("loads");
    assert!(tdx_valid().verify_under(&p, T_TDX).is_ok());
    let bad_status = format!(
        "tcb_statuses = [\"Fine\"]\nmin_tcb_eval_data_number = 17\n[[accepted]]\nmr_td = \"{MR_TD}\"\n"
    );
    policies_refused::<Policy>(&[
        "accepted = []\nmin_tcb_eval_data_number = 17",
        "tcb_statuses = [\"UpToDate\"]\nmin_tcb_eval_data_number = 17",
        &bad_status,
    ]);
}

/// MRTD measures only the firmware: a policy accepting a TD by `mr_td` alone (RTMRs were
/// optional and skipped when unset) took any kernel, initrd and box binary the host booted under
/// it. An entry without `rtmr1`, `rtmr2` or `rtmr0` no longer loads, naming the entry and the
/// field; with them (RTMR3 left out) the Intel sample still verifies, and a different kernel
/// (RTMR1) is refused.
#[test]
fn a_tdx_policy_pins_the_boot_chain_not_the_firmware_alone() {
    let floor = format!("min_tcb_eval_data_number = {EVAL}\n");
    for (entry, field) in [
        (format!("mr_td = \"{MR_TD}\"\n"), "accepted[0].rtmr1"),
        (
            format!("mr_td = \"{MR_TD}\"\nrtmr1 = \"{RTMR1}\"\n"),
            "accepted[0].rtmr2",
        ),
        (
            format!("mr_td = \"{MR_TD}\"\nrtmr2 = \"{RTMR2}\"\n"),
            "accepted[0].rtmr1",
        ),
        (
            format!("mr_td = \"{MR_TD}\"\nrtmr1 = \"{RTMR1}\"\nrtmr2 = \"{RTMR2}\"\n"),
            "accepted[0].rtmr0",
        ),
    ] {
        let text = format!("{floor}[[accepted]]\n{entry}");
        let err = toml::from_str::<Policy>(&text).expect_err("a firmware-only pin loads");
        assert!(
            err.to_string().contains(&format!("{field} is required")),
            "{err}"
        );
    }
    let boot_chain = format!(
        "{floor}[[accepted]]\nmr_td = \"{MR_TD}\"\nrtmr0 = \"{RTMR0}\"\nrtmr1 = \"{RTMR1}\"\n\
         rtmr2 = \"{RTMR2}\"\n"
    );
    let p: Policy = toml::from_str(&boot_chain).expect("loads");
    let ev = tdx_valid();
    assert!(
        ev.verify_under(&p, T_TDX)
            .expect("verifies")
            .measurements_pinned
    );
    let other_kernel = boot_chain.replace(RTMR1, &"11".repeat(48));
    let p: Policy = toml::from_str(&other_kernel).expect("loads");
    assert_eq!(
        ev.refusal_under(&p, T_TDX),
        Refusal::MeasurementNotAllowed("RTMR1")
    );
}

/// A TDX box was named by its MRTD, the firmware alone: a box running another box binary under
/// the same firmware (its kernel/initrd, so RTMR2, differ) went by the same name, and a program
/// or release log naming the honest box accepted it. The box identity covers RTMR1 and RTMR2:
/// the Intel sample (genuine, signed) is refused by a pin naming the identity of the honest box
/// of the same firmware and kernel whose RTMR2 differs, and accepted by one naming its own.
#[test]
fn a_tdx_box_running_another_binary_on_the_same_firmware_is_another_box() {
    let honest_rtmr2 = format!("{}{}", "00", &RTMR2[2..]);
    let honest = box_identity(MR_TD, RTMR0, RTMR1, &honest_rtmr2);
    let ev = tdx_valid();
    let shown = ev.verified_at(T_TDX).measurement;
    assert_ne!(
        shown, honest,
        "the box on the honest one's firmware goes by the honest box's name"
    );
    assert_eq!(shown, box_identity(MR_TD, RTMR0, RTMR1, RTMR2));
    let by_identity =
        |identity: &str| Policy::pinned(vec![TdMeasurements::of_identity(hex_arr(identity))], EVAL);
    assert_eq!(
        ev.refusal_under(&by_identity(&honest), T_TDX),
        Refusal::MeasurementNotAllowed("identity")
    );
    let own = ev
        .verify_under(&by_identity(&shown), T_TDX)
        .expect("the box its identity names");
    assert!(own.measurements_pinned);
    // Loaded from a table as a release-log pin fills it: the identity alone is a full pin.
    let text = format!(
        "min_tcb_eval_data_number = {EVAL}
[[accepted]]
identity = \"{honest}\"
"
    );
    let p: Policy = toml::from_str(&text).expect("an identity pins the boot chain");
    assert_eq!(
        ev.refusal_under(&p, T_TDX),
        Refusal::MeasurementNotAllowed("identity")
    );
    // An entry naming an identity and registers of another TD names two TDs: refused at load.
    let two = format!(
        "min_tcb_eval_data_number = {EVAL}
[[accepted]]
identity = \"{honest}\"
\
         mr_td = \"{MR_TD}\"\nrtmr0 = \"{RTMR0}\"\nrtmr1 = \"{RTMR1}\"\nrtmr2 = \"{RTMR2}\"\n"
    );
    let err = toml::from_str::<Policy>(&two).expect_err("two TDs in one entry");
    assert!(
        err.to_string()
            .contains("accepted[0].identity is not the identity"),
        "{err}"
    );
    // An entry naming neither: the text says what is required.
    let none = format!(
        "min_tcb_eval_data_number = {EVAL}
[[accepted]]
rtmr1 = \"{RTMR1}\"
"
    );
    let err = toml::from_str::<Policy>(&none).expect_err("no TD named");
    assert!(
        err.to_string()
            .contains("accepted[0].identity (or mr_td, rtmr0, rtmr1 and rtmr2) is required"),
        "{err}"
    );
}

/// Review 26 V2: the identity left out RTMR0, which measures the ACPI tables the host hands the
/// firmware; their AML runs in the box's kernel (ring 0) on events the host raises, so a host
/// booting the honest image under the honest firmware with its own DSDT ran its code inside a
/// box that went by the honest box's name. The genuine Intel sample plays that box: its MRTD,
/// RTMR1 and RTMR2 are the honest box's, its RTMR0 is not (the honest release's tables differ in
/// one byte). A pin written the way a release pipeline or `--show-identity` writes one (the
/// identity of the honest box's registers, or the registers themselves) refuses it; the sample's
/// own identity, RTMR0 and all, is taken. An identity computed under the retired `/1` (no RTMR0)
/// matches no box.
#[test]
fn a_tdx_box_running_the_hosts_acpi_code_is_not_the_honest_box() {
    let honest_rtmr0 = format!("{}{}", "00", &RTMR0[2..]);
    let honest = TdMeasurements {
        mr_td: Some(Hex(hex_arr(MR_TD))),
        rtmr0: Some(Hex(hex_arr(&honest_rtmr0))),
        rtmr1: Some(Hex(hex_arr(RTMR1))),
        rtmr2: Some(Hex(hex_arr(RTMR2))),
        ..TdMeasurements::default()
    };
    let honest_identity = honest.box_identity().expect("the honest box's registers");
    let ev = tdx_valid();
    let shown = ev.verified_at(T_TDX).measurement;
    assert_ne!(
        shown,
        hex::encode(honest_identity),
        "the box running its host's ACPI tables goes by the honest box's name"
    );
    assert_eq!(
        ev.refusal_under(
            &Policy::pinned(vec![TdMeasurements::of_identity(honest_identity)], EVAL),
            T_TDX
        ),
        Refusal::MeasurementNotAllowed("identity")
    );
    assert_eq!(
        ev.refusal_under(&Policy::pinned(vec![honest], EVAL), T_TDX),
        Refusal::MeasurementNotAllowed("RTMR0")
    );
    assert!(
        ev.verify_under(
            &Policy::pinned(vec![TdMeasurements::of_identity(hex_arr(&shown))], EVAL),
            T_TDX
        )
        .expect("the box its own identity names")
        .measurements_pinned
    );
    // A pin or manifest from before: the `/1` identity of the very same registers names no box.
    let retired = tdx::retired_identity_v1(&hex_arr(MR_TD), &hex_arr(RTMR1), &hex_arr(RTMR2));
    assert_eq!(
        ev.refusal_under(
            &Policy::pinned(vec![TdMeasurements::of_identity(retired)], EVAL),
            T_TDX
        ),
        Refusal::MeasurementNotAllowed("identity")
    );
}

/// The box operator fetches the collateral: a pin without a freshness floor (or with 0) took
/// any generation Intel ever signed, one rating a since-flawed TCB `UpToDate` included. Such a
/// pin does not load, naming the field (before: it loaded, the floor 0); the floor is the
/// collateral's evaluation data number as the evidence reads it, and collateral below the
/// pinned floor is refused with its closed code.
#[test]
fn a_tdx_pin_names_its_collateral_floor_and_older_collateral_is_refused() {
    let pinned = format!(
        "[[accepted]]\nmr_td = \"{MR_TD}\"\nrtmr0 = \"{RTMR0}\"\nrtmr1 = \"{RTMR1}\"\n\
         rtmr2 = \"{RTMR2}\"\n"
    );
    let err = toml::from_str::<Policy>(&pinned).expect_err("a pin without a floor loads");
    assert!(
        err.to_string().contains("min_tcb_eval_data_number"),
        "{err}"
    );
    let zero = format!("min_tcb_eval_data_number = 0\n{pinned}");
    let err = toml::from_str::<Policy>(&zero).expect_err("a floor of 0 loads");
    assert!(err.to_string().contains("any age"), "{err}");

    let ev = tdx_valid();
    assert_eq!(ev.tcb_eval_data_number(), Ok(EVAL));
    let at_floor: Policy =
        toml::from_str(&format!("min_tcb_eval_data_number = {EVAL}\n{pinned}")).expect("loads");
    assert!(ev.verify_under(&at_floor, T_TDX).is_ok());
    // A box serving evaluation 17 to a party pinning 18: refused.
    let above = Policy::pinned(vec![pin(MR_TD)], EVAL + 1);
    assert_eq!(
        ev.refusal_under(&above, T_TDX),
        Refusal::TcbNotAllowed("collateral evaluation data number below the pinned floor")
    );
    assert_eq!(ev.refusal_under(&above, T_TDX).code(), "tcb_not_allowed");
}

#[test]
fn evidence_round_trips_as_json_and_malformed_input_is_an_error() {
    let ev = tdx_valid();
    let back: tdx::Evidence = serde_json::from_value(serde_json::to_value(&ev).unwrap()).unwrap();
    assert_eq!(back, ev);
    assert_eq!(
        tdx::Evidence::from_files(&data("tdx/dcapqvl-tdx_quote"), b"{not json").unwrap_err(),
        Refusal::Malformed("TDX collateral JSON")
    );
    let mut short = ev.clone();
    short.quote.truncate(700);
    assert_eq!(
        short.verify_unpinned(T_TDX).unwrap_err().code(),
        "malformed"
    );
    // Hex text of the quote is accepted too.
    let hex_quote = hex::encode(data("tdx/dcapqvl-tdx_quote"));
    let from_hex = tdx::Evidence::from_files(
        hex_quote.as_bytes(),
        &data("tdx/dcapqvl-tdx_quote_collateral.json"),
    )
    .unwrap();
    assert_eq!(from_hex.quote, ev.quote);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any flipped bit of the signed region (header ‖ body) or the signature is refused, on a
    /// quote of each body version: v4 TD 1.0, v5 TD 1.5, v5 TD 1.5 ex. A bad signature, except
    /// in the fields that may decide the layout (version, TEE type, the v5 body type and size),
    /// which may be unsupported or malformed instead, and the auth data length, malformed.
    #[test]
    fn any_tampered_bit_of_the_signed_region_is_refused(
        sample in 0usize..3,
        flip in bit_flip(),
    ) {
        let (mut ev, at_ms) = [
            (tdx_valid(), T_TDX),
            (tdx_v5_gotdx(), T_TDX_OUTDATED),
            (tdx_td15ex(), T_TD15EX),
        ][sample].clone();
        let signed = tdx::Quote::parse(&ev.quote).unwrap().signed_len;
        let at = flip.apply(&mut ev.quote, signed + 4 + 64);
        let r = ev.verify_unpinned(at_ms);
        let code = r.unwrap_err().code();
        let layout = at < 2 || (4..8).contains(&at) || (signed > 48 + 584 && (48..54).contains(&at));
        if layout {
            // (A v5 quote's TEE type does not decide its layout: there it is a bad signature.)
            prop_assert!(
                ["unsupported", "malformed", "bad_signature"].contains(&code),
                "{} at {}",
                code,
                at
            );
        } else if (signed..signed + 4).contains(&at) {
            prop_assert_eq!(code, "malformed");
        } else {
            prop_assert_eq!(code, "bad_signature", "at {}", at);
        }
    }

    /// The auth data's length field must be exact: one less (the last byte of the auth data
    /// read as "padding") or more is malformed, whatever the padding after it.
    #[test]
    fn the_auth_length_must_be_exact(delta in prop_oneof![Just(-1i64), Just(1i64), -64i64..64], pad in 0usize..8) {
        prop_assume!(delta != 0);
        let mut ev = tdx_valid();
        let len = u32::from_le_bytes(ev.quote[632..636].try_into().unwrap()) as i64;
        ev.quote[632..636].copy_from_slice(&((len + delta) as u32).to_le_bytes());
        ev.quote.extend(std::iter::repeat_n(0u8, pad));
        let r = ev.verify_unpinned(T_TDX);
        prop_assert_eq!(r.unwrap_err().code(), "malformed");
    }

    #[test]
    fn random_quotes_never_panic(quote in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut ev = tdx_valid();
        ev.quote = quote;
        prop_assert!(ev.verify_unpinned(T_TDX).is_err());
    }
}

/// `ev`'s v5 quote parsed, after checking that its body is `kind`, `len` bytes signed after the
/// 48-byte header and the 6-byte body descriptor; the quote and the body's bytes.
fn v5_body(ev: &tdx::Evidence, kind: tdx::TdBody, len: usize) -> (tdx::Quote, &[u8]) {
    let q = tdx::Quote::parse(&ev.quote).unwrap();
    assert_eq!(q.report.body, kind);
    assert_eq!(q.signed_len, 48 + 6 + len);
    (q, &ev.quote[54..])
}

/// A TD 1.5 body (quote v5, body type 3) and a TD 1.5 ex body (type 4) verify, and the fields
/// only they carry are read from their places: TEE_TCB_SVN_2 and MRSERVICETD after the TD 1.0
/// fields, the TD id after those (the offsets of Intel's `sgx_quote_5.h`).
#[test]
fn td15_bodies_verify_and_their_fields_are_read_from_their_version() {
    let ev = tdx_v5_gotdx();
    let (q, body) = v5_body(&ev, tdx::TdBody::Td15, 648);
    assert_eq!(q.report.tee_tcb_svn_2.unwrap(), body[584..600]);
    assert_eq!(q.report.mr_service_td.unwrap(), body[600..648]);
    assert_eq!(q.report.mr_td, body[136..184]);
    assert_eq!(q.report.report_data, body[520..584]);
    let v = ev.verified_at(T_TDX_OUTDATED);
    assert_eq!(v.attribute("quote_version"), Some("5"));
    assert_eq!(v.attribute("td_body"), Some("TD 1.5"));
    assert_eq!(
        v.attribute("tee_tcb_svn_2"),
        Some(hex::encode(&body[584..600]).as_str())
    );
    assert_eq!(
        v.measurement_named("mr_service_td"),
        Some(hex::encode(&body[600..648]).as_str())
    );
    // The identity of the TD 1.5 body's MRTD, RTMR0, RTMR1 and RTMR2 (at its own offsets).
    assert_eq!(
        v.measurement,
        box_identity(
            &hex::encode(&body[136..184]),
            &hex::encode(&body[328..376]),
            &hex::encode(&body[376..424]),
            &hex::encode(&body[424..472])
        )
    );

    let ev = tdx_td15ex();
    let (q, body) = v5_body(&ev, tdx::TdBody::Td15Ex, 885);
    assert_eq!(q.report.td_id.unwrap(), body[649..681]);
    let v = ev.verified_at(T_TD15EX);
    assert_eq!(v.attribute("td_body"), Some("TD 1.5 ex"));
    assert_eq!(
        v.attribute("td_id"),
        Some(hex::encode(&body[649..681]).as_str())
    );
    assert_eq!(v.tcb_status.as_deref(), Some("UpToDate"));

    // A v4 quote has no TD 1.5 fields.
    let q = tdx::Quote::parse(&tdx_valid().quote).unwrap();
    assert_eq!(q.report.body, tdx::TdBody::Td10);
    assert!(q.report.tee_tcb_svn_2.is_none() && q.report.mr_service_td.is_none());
}

/// The v5 body header must name a TD body, of exactly its size.
#[test]
fn v5_body_type_and_size_must_agree() {
    let ev = tdx_v5_gotdx();
    for (at, value, code) in [
        (48, 9u8, "unsupported"),
        (50, 0x89, "malformed"),
        // An SGX body (type 1) is 384 bytes, not the 648 the size field says.
        (48, 1, "malformed"),
    ] {
        let mut q = ev.quote.clone();
        q[at] = value;
        assert_eq!(
            tdx::Quote::parse(&q).unwrap_err().code(),
            code,
            "byte {at} = {value}"
        );
    }
}
