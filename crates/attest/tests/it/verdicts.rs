//! The verdict table: every shared vector (and the negative cases made from them) → verdict →
//! reason, computed here and kept exact in `tests/data/verdicts.md` (regenerate with
//! `SKILLBOX_BLESS=1 cargo test -p skillbox-attest --test it -- verdicts`).

use crate::support::*;
use skillbox_attest::{Refusal, Verified, nitro, nvidia, snp, tdx};

struct Row {
    platform: &'static str,
    vector: &'static str,
    at_ms: u64,
    expect: Result<(), &'static str>,
    got: Result<Verified, Refusal>,
}

/// A TDX row: vector, quote file, the collateral stored beside it, a time inside that
/// collateral's window, the verdict.
type Sample = (
    &'static str,
    &'static str,
    &'static str,
    u64,
    Result<(), &'static str>,
);

fn flip(mut v: Vec<u8>, at: usize) -> Vec<u8> {
    v[at] ^= 0x01;
    v
}

fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    let mut add = |platform, vector, at_ms, expect, got| {
        rows.push(Row {
            platform,
            vector,
            at_ms,
            expect,
            got,
        })
    };

    // AMD SEV-SNP
    add(
        "sev-snp",
        "virtee-report_milan.hex + virtee-vcek_milan.der + virtee-cert_chain_milan.pem",
        T_2025,
        Ok(()),
        snp_virtee().verify_unpinned(T_2025),
    );
    add(
        "sev-snp",
        "trustee-test-report.bin + trustee-test-vcek.der + trustee-milan_ask_ark_asvk.pem",
        T_2025,
        Ok(()),
        snp_trustee().verify_unpinned(T_2025),
    );
    add(
        "sev-snp",
        "trustee-test-vlek-report.bin + trustee-test-vlek.der (VLEK valid)",
        T_VLEK,
        Err("vmpl_not_zero"),
        snp_vlek().verify_unpinned(T_VLEK),
    );
    add(
        "sev-snp",
        "trustee-test-vlek-report.bin + trustee-test-vlek.der (after 2025-12-10)",
        T_2026,
        Err("certificate_expired"),
        snp_vlek().verify_unpinned(T_2026),
    );
    add(
        "sev-snp",
        "gosevguest-attestation-debug.bin + gosevguest-vcek.der",
        T_2025,
        Err("debug_enabled"),
        snp_debug().verify_unpinned(T_2025),
    );
    let invalid = snp::Evidence::from_files(
        &data("sev-snp/trustee-test-report.bin"),
        &[
            &data("sev-snp/trustee-test-vcek-invalid-new.der"),
            &data("sev-snp/trustee-milan_ask_ark_asvk.pem"),
        ],
    );
    add(
        "sev-snp",
        "trustee-test-report.bin + trustee-test-vcek-invalid-new.der",
        T_2025,
        Err("bad_chain"),
        invalid.and_then(|ev| ev.verify_unpinned(T_2025)),
    );
    let mut tampered = snp_virtee();
    tampered.report = flip(tampered.report, 0x90);
    add(
        "sev-snp",
        "virtee report, one MEASUREMENT bit flipped",
        T_2025,
        Err("bad_signature"),
        tampered.verify_unpinned(T_2025),
    );
    add(
        "sev-snp",
        "virtee report, another REPORT_DATA expected",
        T_2025,
        Err("report_data_mismatch"),
        snp_virtee().verify_expecting(
            &snp::Expected {
                report_data: Some([0; 64]),
                host_data: None,
            },
            T_2025,
        ),
    );
    let forged = snp::Evidence::from_files(
        &data("sev-snp/virtee-report_milan.hex"),
        &[
            &data("forged/amd-vcek.der"),
            &data("forged/amd-ask-ark.pem"),
        ],
    );
    add(
        "sev-snp",
        "virtee report under a self-made ARK-Milan chain",
        T_2025,
        Err("foreign_root"),
        forged.and_then(|ev| ev.verify_unpinned(T_2025)),
    );

    // Intel TDX
    add(
        "tdx",
        "dcapqvl-tdx_quote + dcapqvl-tdx_quote_collateral.json",
        T_TDX,
        Ok(()),
        tdx_valid().verify_unpinned(T_TDX),
    );
    add(
        "tdx",
        "dcapqvl-tdx_quote + collateral, after its window",
        1_753_000_000_000,
        Err("collateral_expired"),
        tdx_valid().verify_unpinned(1_753_000_000_000),
    );
    add(
        "tdx",
        "dcapqvl-tdx_quote_outdated + its collateral",
        T_TDX_OUTDATED,
        Err("tcb_not_allowed"),
        tdx_outdated().verify_unpinned(T_TDX_OUTDATED),
    );
    let mut tampered = tdx_valid();
    tampered.quote = flip(tampered.quote, 48 + 136);
    add(
        "tdx",
        "dcapqvl-tdx_quote, one MRTD bit flipped",
        T_TDX,
        Err("bad_signature"),
        tampered.verify_unpinned(T_TDX),
    );
    add(
        "tdx",
        "dcapqvl-tdx_quote, another REPORT_DATA expected",
        T_TDX,
        Err("report_data_mismatch"),
        tdx_valid().verify_expecting(
            &tdx::Expected {
                report_data: Some([0; 64]),
                mr_config_id: None,
            },
            T_TDX,
        ),
    );

    let outdated_col = "tdx/dcapqvl-tdx_quote_outdated_collateral.json";
    let valid_col = "tdx/dcapqvl-tdx_quote_collateral.json";
    let gotdx_col = "tdx/gotdx-collateral-50806f.json";
    let samples: [Sample; 13] = [
        (
            "dcapqvl-tdx_quote_td15ex (v5, TD 1.5 ex body) + its collateral",
            "tdx/dcapqvl-tdx_quote_td15ex",
            "tdx/dcapqvl-tdx_quote_td15ex_collateral.json",
            T_TD15EX,
            Ok(()),
        ),
        (
            "gotdx-quote_v5_sample.dat (v5, TD 1.5 body) + dcap-qvl's FMSPC 90C06F collateral",
            "tdx/gotdx-quote_v5_sample.dat",
            outdated_col,
            T_TDX_OUTDATED,
            Ok(()),
        ),
        (
            "dstack quote-report.json quote (v4) + dcap-qvl's FMSPC 90C06F collateral",
            "tdx/dstack-quote-report.quote.hex",
            outdated_col,
            T_TDX_OUTDATED,
            Ok(()),
        ),
        (
            "trustee-tdx_quote_5.dat (v5, TD 1.5 body) + dcap-qvl's FMSPC 90C06F collateral",
            "tdx/trustee-tdx_quote_5.dat",
            outdated_col,
            T_TDX_OUTDATED,
            Err("tcb_not_allowed"),
        ),
        (
            "dcapqvl-tdx-quote.hex (v4) + dcapqvl-tdx_quote_collateral.json",
            "tdx/dcapqvl-tdx-quote.hex",
            valid_col,
            T_TDX,
            Err("tcb_not_allowed"),
        ),
        (
            "dcapqvl-quote-from-tappd.hex (v4) + dcapqvl-tdx_quote_collateral.json",
            "tdx/dcapqvl-quote-from-tappd.hex",
            valid_col,
            T_TDX,
            Err("tcb_not_allowed"),
        ),
        (
            "dstack tdx-lite-getquote.json quote (v4, PCK from 2026-04-15) + FMSPC 90C06F collateral of 2026-02",
            "tdx/dstack-tdx-lite-getquote.quote.hex",
            outdated_col,
            T_TDX_OUTDATED,
            Err("collateral_expired"),
        ),
        (
            "trustee-tdx_quote_4.dat (v4, a debug TD) + go-tdx-guest's FMSPC 50806F collateral",
            "tdx/trustee-tdx_quote_4.dat",
            gotdx_col,
            T_GOTDX_2023,
            Err("debug_enabled"),
        ),
        (
            "gotdx-tdx_prod_quote_SPR_E4.dat (v4, text appended on purpose) + go-tdx-guest's collateral",
            "tdx/gotdx-tdx_prod_quote_SPR_E4.dat",
            gotdx_col,
            T_GOTDX_2023,
            Err("malformed"),
        ),
        (
            "gotdx-cos-113-tdx-quote.dat (v4, FMSPC 00806F05, no collateral published)",
            "tdx/gotdx-cos-113-tdx-quote.dat",
            valid_col,
            T_TDX,
            Err("collateral_invalid"),
        ),
        (
            "trustee-az-tdx-vtpm-td-quote.bin (v4, FMSPC 00806F05, no collateral published)",
            "tdx/trustee-az-tdx-vtpm-td-quote.bin",
            valid_col,
            T_TDX,
            Err("collateral_invalid"),
        ),
        (
            "trustee-tdx_quote_6.dat (v4, FMSPC 00A06D08, no collateral published)",
            "tdx/trustee-tdx_quote_6.dat",
            valid_col,
            T_TDX,
            Err("collateral_invalid"),
        ),
        (
            "trustee-occlum_quote.dat (SGX quote v3)",
            "tdx/trustee-occlum_quote.dat",
            valid_col,
            T_TDX,
            Err("unsupported"),
        ),
    ];
    for (vector, quote, collateral, at, expect) in samples {
        let got = tdx_ev(quote, collateral).verify_unpinned(at);
        add("tdx", vector, at, expect, got);
    }
    let mut ev = tdx_ev("tdx/gotdx-tdx_prod_quote_SPR_E4.dat", gotdx_col);
    ev.quote.truncate(4935);
    add(
        "tdx",
        "gotdx-tdx_prod_quote_SPR_E4.dat, the appended text cut + go-tdx-guest's collateral",
        T_GOTDX_2023,
        Err("tcb_not_allowed"),
        ev.verify_unpinned(T_GOTDX_2023),
    );

    // AWS Nitro
    let ever = || nitro_doc("nitro/evervault-valid-attestation-doc-bytes");
    add(
        "nitro",
        "evervault-valid-attestation-doc-bytes",
        T_NITRO_EVERVAULT,
        Ok(()),
        ever().verify_unpinned(T_NITRO_EVERVAULT),
    );
    add(
        "nitro",
        "dstack-nitro_attestation-indefinite-cbor.cose (indefinite-length map)",
        T_NITRO_DSTACK,
        Ok(()),
        nitro_doc("nitro/dstack-nitro_attestation-indefinite-cbor.cose")
            .verify_unpinned(T_NITRO_DSTACK),
    );
    add(
        "nitro",
        "evervault-valid-attestation-doc-base64 (PCR0–2 zero)",
        T_NITRO_EVERVAULT_B64,
        Err("debug_enabled"),
        nitro_doc("nitro/evervault-valid-attestation-doc-base64")
            .verify_unpinned(T_NITRO_EVERVAULT_B64),
    );
    add(
        "nitro",
        "evervault-debug-mode-attestation-doc-bytes",
        T_NITRO_DEBUG,
        Err("debug_enabled"),
        nitro_doc("nitro/evervault-debug-mode-attestation-doc-bytes")
            .verify_unpinned(T_NITRO_DEBUG),
    );
    add(
        "nitro",
        "evervault document, another nonce expected",
        T_NITRO_EVERVAULT,
        Err("nonce_mismatch"),
        ever().verify_expecting(
            &nitro::Expected {
                nonce: Some(vec![0; 32]),
                ..Default::default()
            },
            T_NITRO_EVERVAULT,
        ),
    );
    let mut tampered = ever();
    let last = tampered.document.len() - 1;
    tampered.document = flip(tampered.document, last);
    add(
        "nitro",
        "evervault document, one signature bit flipped",
        T_NITRO_EVERVAULT,
        Err("bad_signature"),
        tampered.verify_unpinned(T_NITRO_EVERVAULT),
    );
    add(
        "nitro",
        "evervault document, an hour later",
        T_NITRO_EVERVAULT + 3_600_000,
        Err("evidence_stale"),
        ever().verify_unpinned(T_NITRO_EVERVAULT + 3_600_000),
    );

    // NVIDIA Hopper
    let nonce = nvidia::Expected {
        nonce: Some(hex_arr(NVIDIA_NONCE)),
    };
    add(
        "nvidia",
        "trustee-hopperAttestationReport.hex + trustee-hopper_cert_chain_case1.pem",
        T_2025,
        Ok(()),
        nvidia_hopper().verify_expecting(&nonce, T_2025),
    );
    add(
        "nvidia",
        "hopper report, another nonce expected",
        T_2025,
        Err("nonce_mismatch"),
        nvidia_hopper().verify_expecting(
            &nvidia::Expected {
                nonce: Some([0; 32]),
            },
            T_2025,
        ),
    );
    let mut tampered = nvidia_hopper();
    tampered.transcript = flip(tampered.transcript, 37 + 8 + 55 + 7);
    add(
        "nvidia",
        "hopper report, one measurement bit flipped",
        T_2025,
        Err("bad_signature"),
        tampered.verify_expecting(&nonce, T_2025),
    );
    let mut foreign = nvidia_hopper();
    let last = foreign.chain.len() - 1;
    foreign.chain[last] = data("forged/p384-root.der");
    add(
        "nvidia",
        "hopper chain ending in a self-made root",
        T_2025,
        Err("foreign_root"),
        foreign.verify_expecting(&nonce, T_2025),
    );
    let nv_row = |vector: &'static str, report: &str, chain: &str, expect| {
        let ev = nvidia_ev(report, chain);
        let got = ev.verify_expecting(&requester_nonce(&ev), T_2025);
        (vector, expect, got)
    };
    for (vector, expect, got) in [
        nv_row(
            "trustee-hopper_coco_report1.hex + trustee-hopper_coco_certs1.pem (Hopper, driver 580.95.05, another host; 1 zero byte after the signature)",
            "nvidia/trustee-hopper_coco_report1.hex",
            "nvidia/trustee-hopper_coco_certs1.pem",
            Ok(()),
        ),
        nv_row(
            "nvat-hopperAttestationReport.hex + nvat-hopperCertChain.pem (Hopper, driver 580.159.03)",
            "nvidia/nvat-hopperAttestationReport.hex",
            "nvidia/nvat-hopperCertChain.pem",
            Ok(()),
        ),
        nv_row(
            "nvat-sample-hopperAttestationReport.hex + nvat-sample-hopperCertChain.pem (Hopper, driver 535.86.09)",
            "nvidia/nvat-sample-hopperAttestationReport.hex",
            "nvidia/nvat-sample-hopperCertChain.pem",
            Ok(()),
        ),
        nv_row(
            "nvat-sample-blackwellAttestationReport.hex + nvat-sample-blackwellCertChain.pem (Blackwell, driver 575.32)",
            "nvidia/nvat-sample-blackwellAttestationReport.hex",
            "nvidia/nvat-sample-blackwellCertChain.pem",
            Ok(()),
        ),
        nv_row(
            "nvat-sample-hopperAttestationReportExpired.hex + …CertChainExpired.pem (driver 570.124.03; the SDK's expired driver RIM is online, not in the evidence)",
            "nvidia/nvat-sample-hopperAttestationReportExpired.hex",
            "nvidia/nvat-sample-hopperCertChainExpired.pem",
            Ok(()),
        ),
        nv_row(
            "nvat-sample-hopperAttestationReportInvalidSignature.hex + nvat-sample-hopperCertChain.pem",
            "nvidia/nvat-sample-hopperAttestationReportInvalidSignature.hex",
            "nvidia/nvat-sample-hopperCertChain.pem",
            Err("bad_signature"),
        ),
        nv_row(
            "trustee-hopperAttestationReport.hex + trustee-hopper_cert_chain_case2.pem (the root only)",
            "nvidia/trustee-hopperAttestationReport.hex",
            "nvidia/trustee-hopper_cert_chain_case2.pem",
            Err("malformed"),
        ),
        nv_row(
            "trustee-hopperAttestationReport.hex + trustee-hopper_cert_chain_case3.pem (an intermediate missing)",
            "nvidia/trustee-hopperAttestationReport.hex",
            "nvidia/trustee-hopper_cert_chain_case3.pem",
            Err("foreign_root"),
        ),
        nv_row(
            "trustee-hopperAttestationReport.hex + trustee-hopper_cert_chain_case4.pem (the leaf missing)",
            "nvidia/trustee-hopperAttestationReport.hex",
            "nvidia/trustee-hopper_cert_chain_case4.pem",
            Err("bad_chain"),
        ),
    ] {
        add("nvidia", vector, T_2025, expect, got);
    }
    let nv = nvidia::Verifier::new(nvidia::Policy::unpinned()).expect("pinned root");
    for (vector, file, expect) in [
        (
            "nvat-multi_gpu_hopper.json (4 Hoppers, driver 590.12, the SDK's evidence list)",
            "nvidia/nvat-multi_gpu_hopper.json",
            Ok(()),
        ),
        (
            "nvat-hopper_evidence.json (1 Hopper, driver 590.12)",
            "nvidia/nvat-hopper_evidence.json",
            Ok(()),
        ),
        (
            "nvat-hopper_evidence_cert_hold.json (driver 570.86.10; the SDK's OCSP \"on hold\" is online)",
            "nvidia/nvat-hopper_evidence_cert_hold.json",
            Ok(()),
        ),
    ] {
        let got = nvidia::Evidence::list_from_sdk_json(&data(file)).and_then(|list| {
            let expected = requester_nonce(&list[0]);
            nv.verify_all(&list, &expected, T_2025)
                .map(|mut all| all.swap_remove(0))
        });
        add("nvidia", vector, T_2025, expect, got);
    }
    rows
}

/// Where a vector comes from, by its file-name prefix (`tests/data/SOURCES.md` has the commits).
fn source(vector: &str) -> &'static str {
    const BY_PREFIX: [(&str, &str); 9] = [
        ("virtee", "virtee/sev (Apache-2.0)"),
        ("trustee", "confidential-containers/trustee (Apache-2.0)"),
        ("gosevguest", "google/go-sev-guest (Apache-2.0)"),
        ("gotdx", "google/go-tdx-guest (Apache-2.0)"),
        ("dcapqvl", "Phala-Network/dcap-qvl (MIT)"),
        ("dstack", "Dstack-TEE/dstack (Apache-2.0)"),
        (
            "evervault",
            "evervault/attestation-doc-validation (Apache-2.0)",
        ),
        ("nvat", "NVIDIA/attestation-sdk (Apache-2.0)"),
        ("hopper", "confidential-containers/trustee (Apache-2.0)"),
    ];
    BY_PREFIX
        .iter()
        .find(|(p, _)| vector.starts_with(p))
        .map(|(_, s)| *s)
        .unwrap_or("this project")
}

fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "# Verdicts on the attestation vectors\n\n\
         Produced by `crates/attest/tests/it/verdicts.rs` (kept exact by that test). Unpinned \
         policies: signature, chain to the pinned root, time, debug, VMPL, TCB status; \
         measurements shown, not compared.\n\n\
         | platform | vector | at (Unix ms) | verdict | reason | measurement | source (licence) |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let (verdict, reason, m) = match &r.got {
            Ok(v) => (
                "verified",
                v.tcb_status
                    .as_deref()
                    .map(|s| s.split(" (").next().unwrap_or(s).to_owned())
                    .unwrap_or_else(|| "—".into()),
                format!("`{}…`", &v.measurement[..16]),
            ),
            Err(e) => ("refused", format!("`{}`", e.code()), String::new()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.platform,
            r.vector,
            r.at_ms,
            verdict,
            reason,
            m,
            source(r.vector)
        ));
    }
    out
}

#[test]
fn every_vector_gets_its_expected_verdict_and_the_table_is_current() {
    let rows = rows();
    for r in &rows {
        match (&r.expect, &r.got) {
            (Ok(()), Ok(_)) => {}
            (Err(code), Err(e)) => assert_eq!(e.code(), *code, "{}: {}", r.platform, r.vector),
            (want, got) => panic!(
                "{} {}: expected {:?}, got {:?}",
                r.platform,
                r.vector,
                want,
                got.as_ref().map(|v| &v.measurement).map_err(|e| e.code())
            ),
        }
    }
    let table = render(&rows);
    let file = path("verdicts.md");
    if std::env::var_os("SKILLBOX_BLESS").is_some() {
        std::fs::write(&file, &table).unwrap();
    }
    let kept = std::fs::read_to_string(&file).unwrap_or_default();
    assert_eq!(
        kept, table,
        "tests/data/verdicts.md is stale: rerun with SKILLBOX_BLESS=1"
    );
}
