//! Fuzz the box's program parser and approval check: any bytes must give a program or an error,
//! never a panic, and an accepted program must re-canonicalize to exactly the input bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_jc::dsse::{Envelope, approved_program};
use skillbox_jc::program::{PROGRAM_PAYLOAD_TYPE, Program};

fuzz_target!(|data: &[u8]| {
    if let Ok(program) = Program::from_canonical(data) {
        let again = program.to_canonical().expect("an accepted program serializes");
        assert_eq!(again, data, "accepted bytes must be the program's own canonical form");
    }
    let _ = skillbox_jc::jcs::parse_canonical(data);
    let _ = approved_program(&Envelope::new(PROGRAM_PAYLOAD_TYPE, data));
    let _ = Envelope::from_json(data).map(|env| approved_program(&env));
});
