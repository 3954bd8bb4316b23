//! What a reader cannot see in text someone else wrote: the one rule every surface that shows a
//! peer's text keeps (the agent surfaces' cleaning in `skillbox-reach`, the node's log lines).
//! Here, at the bottom of the crates, because both the node and reach read it and neither may
//! keep a copy that drifts (the log escaping once named the bidi embeddings and isolates but not
//! the marks, zero-width and tag characters the cleaning already took out).

use unicode_general_category::{GeneralCategory, get_general_category};

/// Whether `c` is a character a reader does not see, which would let a peer hide or reorder
/// text for the human reading it while a model or a parser still reads it: every format
/// character (Unicode's `Cf`: the bidi controls and marks — U+200E/U+200F, U+061C, U+202A-202E,
/// U+2066-2069 —, zero-width marks, U+FEFF, the tag block U+E0000-E007F that spells ASCII
/// invisibly), and the invisible ones outside it — variation selectors, the combining grapheme
/// joiner, Mongolian free variation selectors, Hangul and Khmer fillers. Control characters
/// (`char::is_control`) are not in it: each surface decides what it keeps of those (a call's
/// answer keeps its newlines).
pub fn is_invisible(c: char) -> bool {
    get_general_category(c) == GeneralCategory::Format
        || matches!(c,
            '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FFA0}'
            | '\u{E0000}'..='\u{E0FFF}')
}

#[cfg(test)]
mod tests {
    use super::is_invisible;

    /// The marks and invisibles a peer has used to hide or reorder text, each in the rule, and
    /// the text around them not.
    #[test]
    fn the_marks_zero_widths_and_tags_are_invisible_and_letters_are_not() {
        for c in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{200E}',
            '\u{200F}',
            '\u{061C}',
            '\u{202A}',
            '\u{202E}',
            '\u{2066}',
            '\u{2069}',
            '\u{2060}',
            '\u{FEFF}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{FE0F}',
            '\u{034F}',
            '\u{3164}',
            '\u{180E}',
        ] {
            assert!(is_invisible(c), "U+{:04X}", c as u32);
        }
        for c in ['a', 'Z', '7', ' ', '-', 'é', 'ж', '中', '\u{1F600}'] {
            assert!(!is_invisible(c), "U+{:04X}", c as u32);
        }
    }
}
