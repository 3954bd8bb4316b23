//! Fuzz the SEV-SNP report path: any bytes as a report (raw or hex) and as certificate files,
//! then the full check of a report against a verified chain — an error or a verdict, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_attest::snp;
use skillbox_fuzz::Unpinned;

const VCEK: &[u8] = include_bytes!("../../crates/attest/tests/data/sev-snp/virtee-vcek_milan.der");
const CHAIN: &[u8] =
    include_bytes!("../../crates/attest/tests/data/sev-snp/virtee-cert_chain_milan.pem");
const NOW: u64 = 1_735_689_600_000;

static VERIFIER: Unpinned<snp::Evidence> = Unpinned::new(snp::Policy::unpinned);

fuzz_target!(|data: &[u8]| {
    let _ = snp::Report::parse(data);
    let _ = snp::Evidence::from_files(data, &[data]);
    VERIFIER.verify(snp::Evidence::from_files(data, &[VCEK, CHAIN]), NOW);
    let _ = snp::verify_chain(data, &[data.to_vec()]);
});
