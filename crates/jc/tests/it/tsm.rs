//! The configfs-tsm attesters against a directory double of `/sys/kernel/config/tsm/report`
//! holding real evidence (virtee's SEV-SNP Milan report, dcap-qvl's TDX sample quote): the box
//! writes the statement's SHA-512 to `inblob`, packages `outblob` (+ the SNP certificate table
//! in `auxblob`) as the evidence the node's verifier reads, and refuses a guest of the wrong
//! kind. A double cannot sign for our report data, so the node's check ends at the binding.

use skillbox_attest::{Platform, snp, tdx};
use skillbox_jc::JcError;
use skillbox_jc::attest::{Attester as _, Statement, Verifier as _, report_data};
use skillbox_jc::hardware::{HardwarePolicy, HardwareVerifier};
use skillbox_jc::tsm::{ENTRY, TsmAttester, cert_table};

use crate::support::{data, hex_data};
use skillbox_testkit::floors::DCAPQVL_TDX_IDENTITY;

const SNP_MEASUREMENT: &str = "7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1a0dc39b2c60bd95b9c480cd81841f";
const T_2025_MS: u64 = 1_735_689_600_000;

fn statement() -> Statement {
    Statement {
        platform: "sev-snp".into(),
        measurement: SNP_MEASUREMENT.into(),
        program_hash: "00".repeat(32),
        run_id: "r".repeat(32),
        hpke_public_key: "11".repeat(32),
        receipt_public_key: "22".repeat(32),
        nonce: "ab".repeat(16),
        expires_at: 1,
        providers: "33".repeat(32),
        // The genuine report's HOST_DATA (zero), so the check reaches the report data.
        config_sha256: Some("00".repeat(32)),
        ..Statement::default()
    }
}

/// A configfs-tsm directory double: the entry with its provider and the blobs it "generates".
fn double(provider: &str, outblob: &[u8], auxblob: Option<&[u8]>) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let entry = root.path().join(ENTRY);
    std::fs::create_dir(&entry).expect("entry");
    std::fs::write(entry.join("provider"), format!("{provider}\n")).expect("provider");
    std::fs::write(entry.join("outblob"), outblob).expect("outblob");
    if let Some(aux) = auxblob {
        std::fs::write(entry.join("auxblob"), aux).expect("auxblob");
    }
    root
}

/// An SEV-SNP certificate table with one entry (the VCEK).
fn table(der: &[u8]) -> Vec<u8> {
    let mut t = vec![0x8d; 16];
    t.extend_from_slice(&48u32.to_le_bytes());
    t.extend_from_slice(&(der.len() as u32).to_le_bytes());
    t.extend_from_slice(&[0u8; 24]);
    t.extend_from_slice(der);
    t
}

#[test]
fn snp_report_and_certificates_become_the_evidence_the_node_verifies() {
    let report = hex_data("sev-snp/virtee-report_milan.hex");
    let vcek = data("sev-snp/virtee-vcek_milan.der");
    assert_eq!(cert_table(&table(&vcek)), vec![vcek.clone()]);
    let root = double("sev_guest", &report, Some(&table(&vcek)));
    let att = TsmAttester::open(
        root.path(),
        Platform::SevSnp,
        vec![data("sev-snp/virtee-cert_chain_milan.pem")],
        None,
    )
    .expect("opens");
    assert_eq!(att.platform(), "sev-snp");
    assert_eq!(
        att.measurement(),
        SNP_MEASUREMENT,
        "read from the first report"
    );
    let st = statement();
    let a = att.attest(&st).expect("attests");
    let rd = report_data(&st.to_canonical().expect("canonical"));
    assert_eq!(
        std::fs::read(root.path().join(ENTRY).join("inblob")).expect("inblob"),
        rd.to_vec(),
        "the statement's SHA-512 went to the hardware"
    );
    let ev: snp::Evidence = serde_json::from_value(a.evidence.clone()).expect("SNP evidence");
    assert_eq!(ev.vek, vcek, "the VCEK from the certificate table");
    assert!(!ev.chain.is_empty(), "ASK/ARK from the operator's file");
    let verifier = HardwareVerifier::new(
        HardwarePolicy::from_value(
            "sev-snp",
            Some(skillbox_testkit::floors::virtee_snp_floor()),
            &[SNP_MEASUREMENT.into()],
        )
        .expect("policy"),
    )
    .expect("verifier");
    // Genuine, pinned — and made for another statement than this one: refused at the binding.
    assert!(matches!(
        verifier.verify_evidence(&a, &st, &rd, T_2025_MS),
        Err(JcError::HardwareRefused("report_data_mismatch"))
    ));
}

#[test]
fn tdx_quote_with_its_collateral_and_the_wrong_guest_kind_refused() {
    let quote = data("tdx/dcapqvl-tdx_quote");
    let collateral = data("tdx/dcapqvl-tdx_quote_collateral.json");
    let root = double("tdx_guest", &quote, None);
    let att = TsmAttester::open(root.path(), Platform::Tdx, vec![], Some(collateral.clone()))
        .expect("opens");
    assert_eq!(att.measurement(), DCAPQVL_TDX_IDENTITY, "the box identity");
    let a = att.attest(&statement()).expect("attests");
    let ev: tdx::Evidence = serde_json::from_value(a.evidence).expect("TDX evidence");
    assert_eq!(ev.quote, quote);

    // Without collateral, or on an SNP guest, a TDX box does not start.
    let err = TsmAttester::open(root.path(), Platform::Tdx, vec![], None)
        .err()
        .expect("no collateral");
    assert!(err.to_string().contains("collateral"), "{err}");
    let snp_guest = double("sev_guest", &quote, None);
    let err = TsmAttester::open(snp_guest.path(), Platform::Tdx, vec![], Some(collateral))
        .err()
        .expect("wrong guest");
    assert!(err.to_string().contains("not a tdx guest"), "{err}");
    // No configfs-tsm at all: a clear error naming the path.
    let err = TsmAttester::open(
        std::path::Path::new("/nonexistent/tsm/report"),
        Platform::SevSnp,
        vec![],
        None,
    )
    .err()
    .expect("absent");
    assert!(err.to_string().contains("/nonexistent/tsm/report"), "{err}");
}

/// A TDX box named itself by its MRTD, the firmware alone: a host booting another box binary
/// (another kernel/initrd, so another RTMR2) under the same firmware got the honest box's name,
/// and a program listing the honest box listed it. Two boxes on one firmware, differing only in
/// RTMR2 (the double's quote: the box reads, it does not verify, its own report), now go by
/// different identities, and a program naming the honest one does not list the other.
#[test]
fn a_tdx_box_with_another_binary_on_the_same_firmware_is_not_the_programs_box() {
    let quote = data("tdx/dcapqvl-tdx_quote");
    let collateral = data("tdx/dcapqvl-tdx_quote_collateral.json");
    let report = tdx::Quote::parse(&quote).expect("quote").report;
    let at = quote
        .windows(48)
        .position(|w| w == report.rtmr[2])
        .expect("RTMR2 in the quote");
    let mut patched = quote.clone();
    patched[at] ^= 1;
    let open = |q: &[u8]| {
        let root = double("tdx_guest", q, None);
        let att = TsmAttester::open(root.path(), Platform::Tdx, vec![], Some(collateral.clone()))
            .expect("opens");
        att.measurement().to_owned()
    };
    let (honest, other) = (open(&quote), open(&patched));
    let mut program: skillbox_jc::program::Program =
        serde_json::from_slice(&data("program.json")).expect("program");
    program.boxes = vec![skillbox_jc::program::BoxIdentity {
        platform: "tdx".into(),
        measurement: honest.clone(),
    }];
    assert!(program.lists_box("tdx", &honest));
    assert!(
        !program.lists_box("tdx", &other),
        "a box with another RTMR2 on the same firmware is listed as {other}"
    );
}

/// Review 26 V2: the box named itself by MRTD, RTMR1 and RTMR2, not RTMR0, which measures the
/// ACPI tables its host hands the firmware (their AML runs in the box's kernel). The same quote
/// with another RTMR0 (the honest image and firmware under the host's tables) named itself as
/// the honest box, and a program listing that box took it. Now it is another box.
#[test]
fn a_tdx_box_under_its_hosts_acpi_tables_is_not_the_programs_box() {
    let quote = data("tdx/dcapqvl-tdx_quote");
    let collateral = data("tdx/dcapqvl-tdx_quote_collateral.json");
    let report = tdx::Quote::parse(&quote).expect("quote").report;
    let at = quote
        .windows(48)
        .position(|w| w == report.rtmr[0])
        .expect("RTMR0 in the quote");
    let mut patched = quote.clone();
    patched[at] ^= 1;
    let patched_report = tdx::Quote::parse(&patched).expect("quote").report;
    assert_eq!(
        (
            patched_report.mr_td,
            patched_report.rtmr[1],
            patched_report.rtmr[2]
        ),
        (report.mr_td, report.rtmr[1], report.rtmr[2]),
        "only RTMR0 differs"
    );
    let open = |q: &[u8]| {
        let root = double("tdx_guest", q, None);
        let att = TsmAttester::open(root.path(), Platform::Tdx, vec![], Some(collateral.clone()))
            .expect("opens");
        att.measurement().to_owned()
    };
    let (honest, hosts) = (open(&quote), open(&patched));
    let mut program: skillbox_jc::program::Program =
        serde_json::from_slice(&data("program.json")).expect("program");
    program.boxes = vec![skillbox_jc::program::BoxIdentity {
        platform: "tdx".into(),
        measurement: honest.clone(),
    }];
    assert!(program.lists_box("tdx", &honest));
    assert!(
        !program.lists_box("tdx", &hosts),
        "a box under another RTMR0 (its host's ACPI tables) is listed as {hosts}"
    );
}

/// The box checks at start that the host launched it for the configuration it runs: the
/// double's report carries HOST_DATA (SEV-SNP) / MRCONFIGID (TDX) as the host set it. Launched
/// for another configuration (the genuine reports' zeros), the box does not start; launched for
/// its own (the double's report with the field set to the hash: the box reads, it does not
/// verify, its own report), every statement binds the hash and the attestation carries the
/// configuration.
#[test]
fn a_box_starts_only_when_launched_for_its_configuration() {
    use skillbox_jc::attest::{BoxConfiguration, ConfigBound};
    use std::sync::Arc;
    let config = BoxConfiguration::new(
        std::collections::BTreeMap::from([("local".to_owned(), "in-process".to_owned())]),
        Some(&["AB".repeat(32)]),
    );
    let hash = config.sha256().expect("hash");
    let snp_report = hex_data("sev-snp/virtee-report_milan.hex");
    let quote = data("tdx/dcapqvl-tdx_quote");
    let collateral = data("tdx/dcapqvl-tdx_quote_collateral.json");
    // MRCONFIGID follows MRTD in the TD report body.
    let mr_td = tdx::Quote::parse(&quote).expect("quote").report.mr_td;
    let at = quote
        .windows(48)
        .position(|w| w == mr_td)
        .expect("MRTD in the quote")
        + 48;
    let open = |platform: Platform, out: &[u8]| {
        let (provider, certs, collateral) = match platform {
            Platform::Tdx => ("tdx_guest", vec![], Some(collateral.clone())),
            _ => (
                "sev_guest",
                vec![
                    data("sev-snp/virtee-vcek_milan.der"),
                    data("sev-snp/virtee-cert_chain_milan.pem"),
                ],
                None,
            ),
        };
        let root = double(provider, out, None);
        let tsm = TsmAttester::open(root.path(), platform, certs, collateral).expect("opens");
        (root, ConfigBound::new(Arc::new(tsm), config.clone()))
    };
    for (platform, report, offset, field) in [
        (Platform::SevSnp, snp_report, 0xC0, "HOST_DATA"),
        (Platform::Tdx, quote.clone(), at, "MRCONFIGID"),
    ] {
        let (_root, refused) = open(platform, &report);
        let err = refused.err().expect("launched for another configuration");
        assert!(err.to_string().contains(field), "{err}");
        assert!(err.to_string().contains(&hex::encode(hash)), "{err}");

        let mut launched = report.clone();
        launched[offset..offset + 32].copy_from_slice(&hash);
        let (_root, bound) = open(platform, &launched);
        let bound = bound.expect("launched for its configuration");
        let a = bound
            .attest(&Statement {
                platform: platform.as_str().into(),
                config_sha256: None,
                ..statement()
            })
            .expect("attests");
        let st: Statement = a.statement().expect("statement").1;
        assert_eq!(st.config_sha256, Some(hex::encode(hash)), "{platform}");
        assert_eq!(a.config.as_ref(), Some(&config));
    }
}
