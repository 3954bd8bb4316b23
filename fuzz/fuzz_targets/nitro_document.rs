//! Fuzz the Nitro document path: COSE_Sign1 and the CBOR payload (definite and indefinite
//! lengths, duplicate keys, sizes), then the chain and signature — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_attest::nitro;
use skillbox_fuzz::Unpinned;

const NOW: u64 = 1_665_651_482_136;

static VERIFIER: Unpinned<nitro::Evidence> = Unpinned::new(nitro::Policy::unpinned);

fuzz_target!(|data: &[u8]| {
    let _ = nitro::parse(data);
    VERIFIER.verify(nitro::Evidence::from_file(data).map(|(ev, _)| ev), NOW);
});
