//! Fuzz the call payload parser: any bytes give a signed payload whose envelope opens, or an
//! error — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_peers::SignedPayload;

fuzz_target!(|data: &[u8]| {
    if let Ok(signed) = serde_json::from_slice::<SignedPayload>(data) {
        let _ = signed.open();
    }
});
