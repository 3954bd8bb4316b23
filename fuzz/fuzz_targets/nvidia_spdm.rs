//! Fuzz the NVIDIA SPDM GET_MEASUREMENTS path: transcript layout and measurement blocks, then
//! the signature under the sample's verified chain — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_attest::nvidia;
use skillbox_fuzz::Unpinned;

const CHAIN: &[u8] =
    include_bytes!("../../crates/attest/tests/data/nvidia/trustee-hopper_cert_chain_case1.pem");
const NOW: u64 = 1_735_689_600_000;

static VERIFIER: Unpinned<nvidia::Evidence> = Unpinned::new(nvidia::Policy::unpinned);

fuzz_target!(|data: &[u8]| {
    let _ = nvidia::Transcript::parse(data);
    VERIFIER.verify(nvidia::Evidence::from_files(data, &[CHAIN]), NOW);
    let _ = nvidia::Evidence::from_files(data, &[data]);
});
