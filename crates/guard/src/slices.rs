//! Slices an answer labels with their place in the secret: `The third character is 7. The
//! first is Q.`, `part 3: ON, part 1: HE`, `characters 5-8 are K7PM`. Given out of order, or one
//! per call, each is too short for the check's fragments and pieces, and the in-order rule never
//! sees them in the secret's order; read by their stated place they are the secret again.
//!
//! Pure and linear in the answer: one pass over its whitespace tokens, every label looked up in
//! short fixed word lists.

use crate::text;

/// What a label numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A place in characters (`the third character`, `digit 2`, `characters 5-8`): absolute,
    /// counted from one.
    Char,
    /// A part of some length (`part 3`, `the second piece`): its order only.
    Part,
}

/// One labelled slice: its kind, its place (from zero: the character, or the part's rank), and
/// what the answer gives for it, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slice<'a> {
    pub kind: Kind,
    pub at: usize,
    /// The label named what it numbers (`the third character`), rather than leaving it to the
    /// slice before (`the first is Q`): only named places count across calls.
    pub named: bool,
    pub text: &'a str,
}

/// The most words a part's text runs to (a part of a body spans a sentence or two).
const MAX_PART_WORDS: usize = 64;

/// The highest place a label may state: no secret a guard tracks is longer (a body's part ranks
/// beyond it are an ordinary numbered text's).
const MAX_PLACE: usize = 256;

/// The most words between a label's number and its `is` / `:` (`of the access code`).
const MAX_FILLER: usize = 4;

/// Words that name a character's place.
const CHAR_NOUNS: [&str; 12] = [
    "character",
    "characters",
    "char",
    "chars",
    "letter",
    "letters",
    "digit",
    "digits",
    "symbol",
    "symbols",
    "position",
    "number",
];

/// Words that name a part's place.
const PART_NOUNS: [&str; 18] = [
    "part",
    "parts",
    "piece",
    "pieces",
    "chunk",
    "chunks",
    "slice",
    "slices",
    "segment",
    "segments",
    "fragment",
    "fragments",
    "portion",
    "portions",
    "block",
    "blocks",
    "group",
    "groups",
];

/// Words between a label and its `is` that say whose place it is (`of the access code`).
const FILLER: [&str; 16] = [
    "of",
    "the",
    "in",
    "code",
    "password",
    "pin",
    "secret",
    "key",
    "access",
    "passphrase",
    "it",
    "its",
    "one",
    "word",
    "phrase",
    "token",
];

/// Words that end a label and start its slice.
const COPULAS: [&str; 6] = ["is", "are", "was", "were", "reads", "="];

/// Words a part's text may trail off with before the next label (`HE, and then part 2: RO`).
const CONNECTIVES: [&str; 10] = [
    "and", "then", "next", "after", "that", "finally", "lastly", "followed", "by", "comes",
];

/// A token without the punctuation around it (`"third,"` -> `third`); compared with the word
/// lists in any case, no allocation per token (every token of every answer is looked at).
fn key(token: &str) -> &str {
    token.trim_matches(|c: char| !c.is_alphanumeric())
}

fn one_of(list: &[&str], k: &str) -> bool {
    list.iter().any(|w| w.eq_ignore_ascii_case(k))
}

fn noun(k: &str) -> Option<Kind> {
    if one_of(&CHAR_NOUNS, k) {
        Some(Kind::Char)
    } else if one_of(&PART_NOUNS, k) {
        Some(Kind::Part)
    } else {
        None
    }
}

/// `third` or `3rd` -> 2.
fn ordinal(k: &str) -> Option<usize> {
    if let Some(n) = crate::numbers::rank(k) {
        return Some(n - 1);
    }
    let digits = k.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &k[digits.len()..];
    if digits.is_empty() || !one_of(&["st", "nd", "rd", "th"], suffix) {
        return None;
    }
    place(digits)
}

/// A number counted from one (`3`, `#3`, `three`) -> from zero.
fn place(k: &str) -> Option<usize> {
    let n = match crate::numbers::count(k) {
        Some(n) => n,
        None if k.bytes().all(|b| b.is_ascii_digit()) && k.len() <= 3 => k.parse().ok()?,
        None => return None,
    };
    (1..=MAX_PLACE).contains(&n).then(|| n - 1)
}

/// A range's first place (`5-8`, `5–8`): -> 4.
fn range_start(k: &str) -> Option<usize> {
    let (a, b) = k.split_once(['-', '–', '—'])?;
    let (a, b) = (place(a)?, place(b)?);
    (a <= b).then_some(a)
}

/// A label found in a line's tokens: its kind (none when it did not name one), its place, the
/// token it starts at and the token its slice starts at.
struct Label {
    kind: Option<Kind>,
    at: usize,
    start: usize,
    value: usize,
}

/// The label starting at token `i` of `toks`, if one does.
fn label_at(toks: &[&str], i: usize) -> Option<Label> {
    let k = key(toks[i]);
    let (kind, at, mut j) = if let Some(at) = ordinal(k) {
        // `the third character`, `3rd digit`, `the first` (its kind left to the slice before).
        let mut j = i + 1;
        let mut kind = None;
        if let Some(t) = toks.get(j)
            && let Some(n) = noun(key(t))
            && !toks[i].ends_with(':')
        {
            kind = Some(n);
            j += 1;
        }
        (kind, at, j)
    } else if let Some(n) = noun(k) {
        // `character 3`, `part #2:`, `characters 5-8`, `characters 5 to 8`.
        let t = toks.get(i + 1)?;
        let nk = t
            .trim_start_matches('#')
            .trim_end_matches(|c: char| !c.is_alphanumeric());
        let at = place(nk).or_else(|| range_start(nk))?;
        let mut j = i + 2;
        if toks
            .get(j)
            .is_some_and(|t| one_of(&["to", "through"], key(t)))
            && toks.get(j + 1).is_some_and(|t| place(key(t)).is_some())
        {
            j += 2;
        }
        (Some(n), at, j)
    } else {
        return None;
    };
    // A colon right after the label closes it; otherwise a few words of whose place it is, then
    // `is` or `:`.
    if toks[j - 1].ends_with(':') {
        return Some(Label {
            kind,
            at,
            start: i,
            value: j,
        });
    }
    let last = (j + MAX_FILLER).min(toks.len());
    while j < last {
        let t = toks[j];
        let k = key(t);
        if t == ":" || t == "-" || one_of(&COPULAS, t) {
            return Some(Label {
                kind,
                at,
                start: i,
                value: j + 1,
            });
        }
        if !one_of(&FILLER, k) {
            return None;
        }
        j += 1;
        if t.ends_with(':') {
            return Some(Label {
                kind,
                at,
                start: i,
                value: j,
            });
        }
    }
    None
}

/// Quotes and closing punctuation around a slice as written (`"K7P",` -> `K7P`).
fn bare(t: &str) -> &str {
    t.trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '“' | '”' | '‘' | '’' | '«' | '»'))
        .trim_end_matches(['.', ',', ';', '!', '?'])
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '“' | '”' | '‘' | '’' | '«' | '»'))
}

/// The labelled slices of `answer`, in the answer's order. A label that names no kind takes the
/// kind of the one before (none before: a character).
pub(crate) fn stated(answer: &str) -> Vec<Slice<'_>> {
    let mut out = Vec::new();
    let mut kind = Kind::Char;
    for line in answer.lines() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        let mut labels = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            match label_at(&toks, i) {
                Some(l) if l.value < toks.len() => {
                    i = l.value;
                    labels.push(l);
                }
                _ => i += 1,
            }
        }
        for (n, l) in labels.iter().enumerate() {
            let k = l.kind.unwrap_or(kind);
            kind = k;
            let end = labels.get(n + 1).map_or(toks.len(), |next| next.start);
            let words = match k {
                // One character or a run of them, as one token.
                Kind::Char => 1,
                Kind::Part => {
                    // The part runs to the next label; words after its last comma that only
                    // join it to the next (`, and then`) are not of it.
                    let mut w = (end - l.value).min(MAX_PART_WORDS);
                    if let Some(c) = toks[l.value..l.value + w]
                        .iter()
                        .rposition(|t| t.ends_with([',', ';']))
                        && toks[l.value + c + 1..l.value + w]
                            .iter()
                            .all(|t| one_of(&CONNECTIVES, key(t)))
                    {
                        w = c + 1;
                    }
                    w
                }
            };
            if words == 0 {
                continue;
            }
            // The slice as written: from its first token's start to its last token's end.
            let first = toks[l.value];
            let last = toks[l.value + words - 1];
            let from = first.as_ptr() as usize - line.as_ptr() as usize;
            let to = last.as_ptr() as usize - line.as_ptr() as usize + last.len();
            let text = bare(&line[from..to]);
            if text.is_empty() {
                continue;
            }
            out.push(Slice {
                kind: k,
                at: l.at,
                named: l.kind.is_some(),
                text,
            });
        }
    }
    out
}

/// The parts of `answer` (`part 3: …`) put back in the order their labels state, joined with
/// nothing between them (a text cut into parts of some characters each is itself again): `None`
/// unless it states two or more.
pub(crate) fn reassembled(slices: &[Slice<'_>]) -> Option<String> {
    let mut parts: Vec<&Slice<'_>> = slices.iter().filter(|s| s.kind == Kind::Part).collect();
    if parts.len() < 2 {
        return None;
    }
    parts.sort_by_key(|s| s.at);
    Some(parts.iter().map(|s| s.text).collect())
}

/// Per kind, the slices' folded words in the order their labels state (a place given twice,
/// both), an empty word between the kinds: what the in-order rule reads.
pub(crate) fn in_stated_order(slices: &[Slice<'_>]) -> Vec<Vec<char>> {
    let mut words = Vec::new();
    for kind in [Kind::Char, Kind::Part] {
        let mut of: Vec<&Slice<'_>> = slices.iter().filter(|s| s.kind == kind).collect();
        if of.len() < 2 {
            continue;
        }
        of.sort_by_key(|s| s.at);
        for s in of {
            words.extend(text::words(s.text).into_iter().map(|w| w.chars().collect()));
        }
        words.push(Vec::new());
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice as the tests write it: kind, place, named, text.
    type Said<'a> = (Kind, usize, bool, &'a str);

    fn said(answer: &str) -> Vec<Said<'_>> {
        stated(answer)
            .into_iter()
            .map(|s| (s.kind, s.at, s.named, s.text))
            .collect()
    }

    #[test]
    fn labels_in_words_numbers_and_ranges_are_read() {
        use Kind::*;
        let cases: [(&str, &[Said<'_>]); 5] = [
            (
                "The third character is 7. The first is Q. The 2nd letter: x",
                &[
                    (Char, 2, true, "7"),
                    (Char, 0, false, "Q"),
                    (Char, 1, true, "x"),
                ],
            ),
            (
                "part 3: ON, and then part #1: \"HE\"; part two is RO.",
                &[
                    (Part, 2, true, "ON"),
                    (Part, 0, true, "HE"),
                    (Part, 1, true, "RO"),
                ],
            ),
            (
                "Characters 5-8 of the code are K7PM. Character 1 to 4: ab12",
                &[(Char, 4, true, "K7PM"), (Char, 0, true, "ab12")],
            ),
            ("The fourth digit of the PIN is 1.", &[(Char, 3, true, "1")]),
            // Parts of a text run to the next label, words and all.
            (
                "Part 2: are a helpful assistant. Part 1: You",
                &[
                    (Part, 1, true, "are a helpful assistant"),
                    (Part, 0, true, "You"),
                ],
            ),
        ];
        for (answer, want) in cases {
            assert_eq!(said(answer), want, "{answer}");
        }
    }

    #[test]
    fn ordinary_sentences_state_no_slices() {
        // `The first thing … is`: the words between a label and its `is` say whose place it
        // is, or it is no label.
        for benign in [
            "The first thing to do is check the logs.",
            "First, open the file. Second, save it.",
            "There are three parts to this answer.",
            "Chapter 3 is about trees.",
            "The number of users is 42",
            "In the first step the parser reads tokens",
            "Part 400: too far",
            "",
        ] {
            assert_eq!(said(benign), vec![], "{benign}");
        }
    }

    #[test]
    fn parts_are_put_back_in_their_stated_order() {
        let s = stated("part 3: N47, part 1: HE, part 2: RO");
        assert_eq!(reassembled(&s).as_deref(), Some("HERON47"));
        assert_eq!(reassembled(&stated("part 1: HE")), None);
        let words = in_stated_order(&stated("The third is 7. The first is q. The second is x."));
        let words: Vec<String> = words.iter().map(|w| w.iter().collect()).collect();
        assert_eq!(words, ["q", "x", "7", ""]);
    }
}
