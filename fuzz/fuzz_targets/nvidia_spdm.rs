//! Fuzz the NVIDIA SPDM GET_MEASUREMENTS path: transcript layout and measurement blocks, then
//! the signature under the sample's verified chain — never a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use skillbox_attest::nvidia;

const CHAIN: &[u8] =
    include_bytes!("../../crates/attest/tests/data/nvidia/trustee-hopper_cert_chain_case1.pem");
const NOW: u64 = 1_735_689_600_000;

static VERIFIER: LazyLock<nvidia::Verifier> =
    LazyLock::new(|| nvidia::Verifier::new(nvidia::Policy::unpinned()).expect("pinned root"));

fuzz_target!(|data: &[u8]| {
    let _ = nvidia::Transcript::parse(data);
    if let Ok(ev) = nvidia::Evidence::from_files(data, &[CHAIN]) {
        let _ = VERIFIER.verify(&ev, &nvidia::Expected::default(), NOW);
    }
    let _ = nvidia::Evidence::from_files(data, &[data]);
});
