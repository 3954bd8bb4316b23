//! Property tests for canonicalization: canonical bytes round-trip exactly, anything else is
//! refused, and no input panics the program parser.

use proptest::prelude::*;
use serde_json::Value;
use skillbox_jc::JcError;
use skillbox_jc::jcs::{parse_canonical, to_canonical};
use skillbox_jc::program::Program;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::from(n >> 11)), // within I-JSON's exact integers
        (-1e15f64..1e15).prop_map(|f| serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn sample_program() -> Program {
    let bytes = include_bytes!("../data/program.json");
    let v: Value = serde_json::from_slice(bytes).expect("test data is JSON");
    serde_json::from_value(v).expect("test data is a program")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn canonical_round_trips_and_is_idempotent(v in json_value()) {
        let c = to_canonical(&v).expect("canonical");
        let back = parse_canonical(&c).expect("canonical bytes are accepted");
        prop_assert_eq!(to_canonical(&back).expect("again"), c);
    }

    #[test]
    fn whitespace_anywhere_is_refused(v in json_value(), at in any::<prop::sample::Index>()) {
        let c = to_canonical(&v).expect("canonical");
        let i = at.index(c.len() + 1);
        let mut spaced = c.clone();
        spaced.insert(i, b' ');
        // A space inside a string changes the value and is canonical; anywhere else it is refused.
        if let Ok(v2) = parse_canonical(&spaced) {
            prop_assert_ne!(v2, v);
        }
    }

    #[test]
    fn program_fields_round_trip(max in 1u64..1_000_000, call in "[a-z0-9-]{1,40}", exp in 1u64..9_000_000_000_000_000) {
        let mut p = sample_program();
        p.output.max_bytes = max;
        p.call_id = call;
        p.expires_at = exp;
        let bytes = p.to_canonical().expect("canonical");
        prop_assert_eq!(Program::from_canonical(&bytes).expect("parses"), p);
    }

    #[test]
    fn no_input_panics_the_parser(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Program::from_canonical(&bytes);
    }

    #[test]
    fn mutated_programs_are_refused_or_differ(flip in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let p = sample_program();
        let mut bytes = p.to_canonical().expect("canonical");
        let i = flip.index(bytes.len());
        prop_assume!(bytes[i] != byte);
        bytes[i] = byte;
        match Program::from_canonical(&bytes) {
            Ok(q) => prop_assert_ne!(q, p),
            Err(JcError::Internal(e)) => prop_assert!(false, "internal error on bad input: {}", e),
            Err(_) => {}
        }
    }
}
