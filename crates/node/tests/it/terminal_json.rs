//! The `--json` writer (`skillbox_node::terminal_json`, what the CLI prints a node's answers
//! with): what a terminal obeys or hides in a peer's text goes out as `\uXXXX`, and the JSON
//! still parses to the same strings. The CLI's own `--json` runs against a hostile peer are in
//! the cli crate's `hostile.rs`.

use proptest::prelude::*;
use serde_json::{Value, json};
use skillbox_node::terminal_json as writer;

/// Review 24a L2: a board row's description and a call's answer carrying a C1 CSI (no ESC
/// needed: U+009B), DEL, a right-to-left override and a tag character. serde_json wrote each raw.
#[test]
fn a_peers_c1_bidi_and_tag_characters_are_escaped_and_parse_back() {
    let peer = "a\u{9b}31mb\u{202e}c\u{e0041}\u{7f}d\u{9d}52;c;ZXZpbA==\u{9c}";
    let v = json!({ "description": peer, "answer": peer, peer: [peer] });
    let out = writer::to_string(&v).expect("written");
    let raw: Vec<char> = out
        .chars()
        .filter(|&c| writer::escaped(c) && c != '\n')
        .collect();
    assert!(raw.is_empty(), "raw {raw:?} in {out:?}");
    for escape in [
        "\\u009b",
        "\\u202e",
        "\\udb40\\udc41",
        "\\u007f",
        "\\u009d",
        "\\u009c",
    ] {
        assert!(out.contains(escape), "{escape} not in {out}");
    }
    let back: Value = serde_json::from_str(&out).expect("still JSON");
    assert_eq!(back, v);
    // The layout is serde_json's pretty one: only the strings' escapes differ.
    let plain = json!({ "a": [1, "b", { "c": null }], "d": true });
    assert_eq!(
        writer::to_string(&plain).expect("written"),
        serde_json::to_string_pretty(&plain).expect("written")
    );
}

proptest! {
    /// Any text, as a key and as a value: nothing [`writer::escaped`] is written raw (the pretty
    /// layout's own newlines aside), and the output parses back to the same value.
    #[test]
    fn any_text_goes_out_escaped_and_parses_back_the_same(
        s in any::<String>(),
        peerish in proptest::collection::vec(
            prop_oneof![
                Just(0x7fu32), 0x80u32..0xa0, 0x200bu32..0x2010, 0x2028u32..0x2030,
                0x2066u32..0x206a, 0xe0000u32..0xe0080, 0xfe00u32..0xfe10, Just(0xfeffu32),
                0x20u32..0x7f, 0x10000u32..0x10ffff,
            ].prop_filter_map("a scalar value", char::from_u32),
            0..24,
        ),
    ) {
        let t: String = peerish.into_iter().collect();
        let v = json!({ s.clone(): t.clone(), t.clone(): [s.clone(), t.clone()] });
        let out = writer::to_string(&v).expect("written");
        prop_assert!(!out.chars().any(|c| writer::escaped(c) && c != '\n'), "{:?}", out);
        let back: Value = serde_json::from_str(&out).expect("still JSON");
        prop_assert_eq!(back, v);
    }
}
