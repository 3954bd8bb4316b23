//! Any bytes as a SKILL.md: parse, project and validate must return, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = skillbox_skill::check_skill(data, Some("fuzzed"), skillbox_skill::openwop::DEFAULT_NAMESPACE);
    // Front matter split at an arbitrary point: the YAML reader gets structured-looking input.
    let mut framed = b"---\n".to_vec();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\n---\nbody\n");
    let _ = skillbox_skill::document::parse(&framed, None);
});
