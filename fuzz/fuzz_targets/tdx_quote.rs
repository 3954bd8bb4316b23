//! Fuzz the TDX quote path: our layout parse and signature check, then dcap-qvl with the
//! sample's collateral — an error or a verdict, never a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use skillbox_attest::tdx;

const COLLATERAL: &[u8] =
    include_bytes!("../../crates/attest/tests/data/tdx/dcapqvl-tdx_quote_collateral.json");
const NOW: u64 = 1_751_000_000_000;

static VERIFIER: LazyLock<tdx::Verifier> =
    LazyLock::new(|| tdx::Verifier::new(tdx::Policy::unpinned()).expect("pinned root"));

fuzz_target!(|data: &[u8]| {
    let _ = tdx::Quote::parse(data);
    if let Ok(ev) = tdx::Evidence::from_files(data, COLLATERAL) {
        let _ = VERIFIER.verify(&ev, &tdx::Expected::default(), NOW);
    }
    let _ = tdx::Evidence::from_files(data, data);
});
