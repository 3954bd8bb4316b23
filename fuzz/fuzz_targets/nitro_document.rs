//! Fuzz the Nitro document path: COSE_Sign1 and the CBOR payload (definite and indefinite
//! lengths, duplicate keys, sizes), then the chain and signature — never a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use skillbox_attest::nitro;

const NOW: u64 = 1_665_651_482_136;

static VERIFIER: LazyLock<nitro::Verifier> =
    LazyLock::new(|| nitro::Verifier::new(nitro::Policy::unpinned()).expect("pinned root"));

fuzz_target!(|data: &[u8]| {
    let _ = nitro::parse(data);
    if let Ok((ev, _)) = nitro::Evidence::from_file(data) {
        let _ = VERIFIER.verify(&ev, &nitro::Expected::default(), NOW);
    }
});
