//! `skillbox attestation verify` run as a person would, on every shared attestation vector
//! (read from `crates/attest/tests/data`, the copies kept with their licences), checking the
//! verdict, the reason and the exit code: 0 verified, 1 refused or invalid, 2 usage.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_skillbox");

fn data(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../attest/tests/data")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

const T_2025: &str = "1735689600000";
const T_VLEK: &str = "1748736000000";
const T_2026: &str = "1767225600000";
const T_TDX: &str = "1751000000000";
const T_TDX_OUTDATED: &str = "1772000000000";
const NVIDIA_NONCE: &str = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb";

fn verify(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["attestation", "verify"])
        .args(args)
        .output()
        .expect("run skillbox")
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs with `--json`, checks exit code and verdict, returns the JSON.
fn expect(args: Vec<String>, code: i32, verdict: Result<(), &str>) -> Value {
    let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
    a.push("--json");
    let out = verify(&a);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {text}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
    match verdict {
        Ok(()) => assert_eq!(v["verdict"], "verified", "{args:?}: {text}"),
        Err(c) => {
            assert_eq!(v["verdict"], "refused", "{args:?}: {text}");
            assert_eq!(v["code"], c, "{args:?}: {text}");
        }
    }
    v
}

fn snp(report: &str, certs: &[&str], at: &str) -> Vec<String> {
    let mut a = owned(&["--platform", "sev-snp", "--at", at]);
    a.push("--evidence".into());
    a.push(data(report));
    for c in certs {
        a.push("--chain".into());
        a.push(data(c));
    }
    a
}

#[test]
fn every_sev_snp_vector_gets_its_verdict() {
    let virtee = [
        "sev-snp/virtee-vcek_milan.der",
        "sev-snp/virtee-cert_chain_milan.pem",
    ];
    let v = expect(
        snp("sev-snp/virtee-report_milan.hex", &virtee, T_2025),
        0,
        Ok(()),
    );
    assert!(
        v["verified"]["measurement"]
            .as_str()
            .unwrap()
            .starts_with("7a1e5c266c0108db")
    );
    assert_eq!(v["pinned"], false);
    let trustee = [
        "sev-snp/trustee-test-vcek.der",
        "sev-snp/trustee-milan_ask_ark_asvk.pem",
    ];
    expect(
        snp("sev-snp/trustee-test-report.bin", &trustee, T_2025),
        0,
        Ok(()),
    );
    let vlek = [
        "sev-snp/trustee-test-vlek.der",
        "sev-snp/trustee-milan_ask_ark_asvk.pem",
    ];
    expect(
        snp("sev-snp/trustee-test-vlek-report.bin", &vlek, T_VLEK),
        1,
        Err("vmpl_not_zero"),
    );
    expect(
        snp("sev-snp/trustee-test-vlek-report.bin", &vlek, T_2026),
        1,
        Err("certificate_expired"),
    );
    expect(
        snp(
            "sev-snp/trustee-test-report.bin",
            &[
                "sev-snp/trustee-test-vcek-invalid-new.der",
                "sev-snp/trustee-milan_ask_ark_asvk.pem",
            ],
            T_2025,
        ),
        1,
        Err("bad_chain"),
    );
    expect(
        snp(
            "sev-snp/gosevguest-attestation-debug.bin",
            &[
                "sev-snp/gosevguest-vcek.der",
                "sev-snp/virtee-cert_chain_milan.pem",
            ],
            T_2025,
        ),
        1,
        Err("debug_enabled"),
    );
    expect(
        snp(
            "sev-snp/virtee-report_milan.hex",
            &["forged/amd-vcek.der", "forged/amd-ask-ark.pem"],
            T_2025,
        ),
        1,
        Err("foreign_root"),
    );

    // The report data the person expects.
    let rd = "d447b55d197491bfe15cf298f9de9986b7a7c4be2468b4f6e2d53b71d7c645810b0f2cdfca0040433be063fc1a8293f0f3f8dae7b79fecb3d1cd82bd6a93ebfd";
    let mut a = snp("sev-snp/virtee-report_milan.hex", &virtee, T_2025);
    a.extend(owned(&["--report-data", rd]));
    let v = expect(a, 0, Ok(()));
    assert_eq!(v["verified"]["report_data_checked"], true);
    let mut a = snp("sev-snp/virtee-report_milan.hex", &virtee, T_2025);
    a.extend(owned(&["--report-data", &"00".repeat(64)]));
    expect(a, 1, Err("report_data_mismatch"));
}

fn tdx(quote: &str, collateral: &str, at: &str) -> Vec<String> {
    vec![
        "--platform".into(),
        "tdx".into(),
        "--evidence".into(),
        data(quote),
        "--collateral".into(),
        data(collateral),
        "--at".into(),
        at.into(),
    ]
}

#[test]
fn every_tdx_vector_gets_its_verdict() {
    let v = expect(
        tdx(
            "tdx/dcapqvl-tdx_quote",
            "tdx/dcapqvl-tdx_quote_collateral.json",
            T_TDX,
        ),
        0,
        Ok(()),
    );
    assert_eq!(v["verified"]["tcb_status"], "UpToDate");
    // The floor this collateral meets, as a pin's policy names it.
    assert_eq!(v["tcb_floor"], "min_tcb_eval_data_number = 17");
    // The box identity (MRTD, RTMR1, RTMR2), not the MRTD alone.
    assert_eq!(
        v["verified"]["measurement"],
        skillbox_testkit::floors::DCAPQVL_TDX_IDENTITY
    );
    expect(
        tdx(
            "tdx/dcapqvl-tdx_quote",
            "tdx/dcapqvl-tdx_quote_collateral.json",
            "1753000000000",
        ),
        1,
        Err("collateral_expired"),
    );
    expect(
        tdx(
            "tdx/dcapqvl-tdx_quote_outdated",
            "tdx/dcapqvl-tdx_quote_outdated_collateral.json",
            T_TDX_OUTDATED,
        ),
        1,
        Err("tcb_not_allowed"),
    );
}

fn nitro(doc: &str, at: &str) -> Vec<String> {
    vec![
        "--platform".into(),
        "nitro".into(),
        "--evidence".into(),
        data(doc),
        "--at".into(),
        at.into(),
    ]
}

#[test]
fn every_nitro_vector_gets_its_verdict() {
    let v = expect(
        nitro(
            "nitro/evervault-valid-attestation-doc-bytes",
            "1665651482136",
        ),
        0,
        Ok(()),
    );
    assert!(
        v["verified"]["measurement"]
            .as_str()
            .unwrap()
            .starts_with("f4d48b81a460c991")
    );
    let v = expect(
        nitro(
            "nitro/dstack-nitro_attestation-indefinite-cbor.cose",
            "1766668537578",
        ),
        0,
        Ok(()),
    );
    assert!(v["notes"][0].as_str().unwrap().contains("151 bytes"));
    expect(
        nitro(
            "nitro/evervault-valid-attestation-doc-base64",
            "1695049410860",
        ),
        1,
        Err("debug_enabled"),
    );
    expect(
        nitro(
            "nitro/evervault-debug-mode-attestation-doc-bytes",
            "1665582606081",
        ),
        1,
        Err("debug_enabled"),
    );
    let mut a = nitro(
        "nitro/evervault-valid-attestation-doc-bytes",
        "1665651482136",
    );
    a.extend(owned(&["--nonce", "00"]));
    expect(a, 1, Err("nonce_mismatch"));
    // An hour after the document: stale.
    expect(
        nitro(
            "nitro/evervault-valid-attestation-doc-bytes",
            "1665655082136",
        ),
        1,
        Err("evidence_stale"),
    );
}

fn nvidia(nonce: &str) -> Vec<String> {
    vec![
        "--platform".into(),
        "nvidia".into(),
        "--evidence".into(),
        data("nvidia/trustee-hopperAttestationReport.hex"),
        "--chain".into(),
        data("nvidia/trustee-hopper_cert_chain_case1.pem"),
        "--at".into(),
        T_2025.into(),
        "--nonce".into(),
        nonce.into(),
    ]
}

#[test]
fn the_nvidia_vector_gets_its_verdict() {
    let v = expect(nvidia(NVIDIA_NONCE), 0, Ok(()));
    assert_eq!(v["verified"]["nonce_checked"], true);
    assert_eq!(v["verified"]["instance_id"], "41431D480FE5E87274");
    expect(nvidia(&"11".repeat(32)), 1, Err("nonce_mismatch"));
}

#[test]
fn text_output_says_what_was_verified_and_what_was_not() {
    let virtee = [
        "sev-snp/virtee-vcek_milan.der",
        "sev-snp/virtee-cert_chain_milan.pem",
    ];
    let a = snp("sev-snp/virtee-report_milan.hex", &virtee, T_2025);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = verify(&a);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "verified: sev-snp (AMD SEV-SNP) at 1735689600000 (2025-01-01T00:00:00Z)",
        "measurement      7a1e5c266c0108db",
        "not compared: no --report-data",
        "policy",
        "0x30000",
        "reported_tcb 0300000000000873",
        // The floor this report meets, as a pin's policy names it.
        "tcb floor        min_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }",
        "chip/instance    d49554ec717f4e5b",
        "valid            2023-04-03T19:23:43Z",
        "measurements were NOT compared",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }

    let a = snp(
        "sev-snp/gosevguest-attestation-debug.bin",
        &[
            "sev-snp/gosevguest-vcek.der",
            "sev-snp/virtee-cert_chain_milan.pem",
        ],
        T_2025,
    );
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = verify(&a);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("refused: sev-snp (AMD SEV-SNP) at 1735689600000"),
        "{text}"
    );
    assert!(text.contains("debug_enabled"), "{text}");
}

#[test]
fn usage_errors_exit_2_and_unreadable_input_exits_1() {
    let report = data("sev-snp/virtee-report_milan.hex");
    let vcek = data("sev-snp/virtee-vcek_milan.der");
    let snp = ["--platform", "sev-snp", "--evidence", &report];
    let chained = |more: &[&'static str]| [&snp[..], &["--chain", &vcek], more].concat();
    for args in [
        // A nonce for SEV-SNP, a short report data, no chain.
        chained(&["--nonce", "00"]),
        chained(&["--report-data", "00"]),
        snp.to_vec(),
        // Not hex; both report data and nonce; an unknown platform; TDX without collateral.
        chained(&["--report-data", "zz"]),
        vec![
            "--platform",
            "nitro",
            "--evidence",
            &report,
            "--report-data",
            "00",
            "--nonce",
            "00",
        ],
        vec!["--platform", "sgx", "--evidence", &report],
        vec!["--platform", "tdx", "--evidence", &report],
    ] {
        let out = verify(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The refusals name the flag the platform takes instead, and the certificates it needs.
    for (args, said) in [
        (
            chained(&["--nonce", "00"]),
            "sev-snp has no nonce: use --report-data",
        ),
        (
            snp.to_vec(),
            "sev-snp needs --chain with the VCEK or VLEK (and the ASK/ARK)",
        ),
    ] {
        let err = String::from_utf8_lossy(&verify(&args).stderr).into_owned();
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let out = verify(&["--platform", "nitro", "--evidence", "/nonexistent/evidence"]);
    assert_eq!(out.status.code(), Some(1));
    // A file that is not evidence at all: refused as malformed, exit 1.
    let out = verify(&["--platform", "nitro", "--evidence", &vcek, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["code"], "malformed");
}
