//! Any bytes as an AgentManifest or pack.json: the check must return, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = skillbox_skill::check_manifest_document(&doc);
    }
});
