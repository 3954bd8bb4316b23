//! Fuzz the TDX quote path: our layout parse and signature check, then dcap-qvl with the
//! sample's collateral — an error or a verdict, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_attest::tdx;
use skillbox_fuzz::Unpinned;

const COLLATERAL: &[u8] =
    include_bytes!("../../crates/attest/tests/data/tdx/dcapqvl-tdx_quote_collateral.json");
const NOW: u64 = 1_751_000_000_000;

static VERIFIER: Unpinned<tdx::Evidence> = Unpinned::new(tdx::Policy::unpinned);

fuzz_target!(|data: &[u8]| {
    let _ = tdx::Quote::parse(data);
    VERIFIER.verify(tdx::Evidence::from_files(data, COLLATERAL), NOW);
    let _ = tdx::Evidence::from_files(data, data);
});
