//! Text folding and the shift-invariant symbol stream both the body and the answer go through.
//!
//! Folding: lower case, full-width and common Cyrillic/Greek look-alike letters to ASCII, and
//! everything that is not alphanumeric dropped (so case, punctuation, whitespace and separator
//! characters between letters all disappear). The folded stream is then encoded so that a Caesar
//! shift does not change it: an ASCII letter becomes its distance (mod 26) from the previous ASCII
//! letter, a digit becomes `26 + digit`, any other alphanumeric keeps its UTF-8 bytes (all
//! `>= 0x80`). A body n-gram is searched as its encoding *without* its first letter (whose symbol
//! depends on what precedes it), so one pass over the answer finds it under every shift.

/// Fold one character: emits nothing when it is not alphanumeric, else its folded form(s).
#[inline]
pub fn fold(c: char, mut emit: impl FnMut(char)) {
    if c.is_ascii() {
        if c.is_ascii_alphanumeric() {
            emit(c.to_ascii_lowercase());
        }
        return;
    }
    if let Some(a) = lookalike(c) {
        emit(a);
        return;
    }
    if c.is_alphanumeric() {
        // One character in, at most one out (the first alphanumeric of its lower case), so a
        // text's characters and its folded atoms line up one to one.
        if let Some(l) = c.to_lowercase().find(|l| l.is_alphanumeric()) {
            emit(l);
        }
    }
}

/// Atom of a character dropped by folding (punctuation, symbols).
pub const DROP: u32 = 36;
/// Atom of a whitespace character (dropped too, but it separates tokens).
pub const SPACE: u32 = 37;
const NON_ASCII: u32 = 0x100;

/// A text folded one atom per character: `0..26` an ASCII letter, `26..36` a digit (already its
/// symbol), [`DROP`], [`SPACE`], or `0x100 + c` for another folded alphanumeric `c`. Views
/// rearrange atoms; a [`Sink`] encodes them.
pub fn atoms(s: &str) -> Vec<u32> {
    s.chars()
        .map(|c| {
            if c.is_ascii() {
                let b = c as u8;
                return match b {
                    b'a'..=b'z' => u32::from(b - b'a'),
                    b'A'..=b'Z' => u32::from(b - b'A'),
                    b'0'..=b'9' => 26 + u32::from(b - b'0'),
                    _ if c.is_ascii_whitespace() => SPACE,
                    _ => DROP,
                };
            }
            if c.is_whitespace() {
                return SPACE;
            }
            let mut out = DROP;
            fold(c, |f| {
                out = match f {
                    'a'..='z' => f as u32 - 'a' as u32,
                    '0'..='9' => 26 + (f as u32 - '0' as u32),
                    _ => NON_ASCII + f as u32,
                }
            });
            out
        })
        .collect()
}

/// Encodes atoms into shift-invariant symbols (the same symbols as [`Encoder`]).
pub struct Sink<'a> {
    prev: u32,
    out: &'a mut Vec<u8>,
}

impl<'a> Sink<'a> {
    pub fn new(out: &'a mut Vec<u8>, capacity: usize) -> Self {
        out.clear();
        out.reserve(capacity);
        Sink { prev: 0, out }
    }

    #[inline(always)]
    pub fn push(&mut self, a: u32) {
        if a < 26 {
            self.out.push(((a + 26 - self.prev) % 26) as u8);
            self.prev = a;
        } else if a < DROP {
            self.out.push(a as u8);
        } else if a >= NON_ASCII
            && let Some(c) = char::from_u32(a - NON_ASCII)
        {
            let mut buf = [0u8; 4];
            self.out
                .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
}

/// Full-width forms and the Cyrillic/Greek letters that render like ASCII letters.
fn lookalike(c: char) -> Option<char> {
    let u = c as u32;
    // Full-width digits and letters.
    if (0xFF10..=0xFF19).contains(&u) {
        return char::from_u32(u - 0xFF10 + u32::from(b'0'));
    }
    if (0xFF21..=0xFF3A).contains(&u) {
        return char::from_u32(u - 0xFF21 + u32::from(b'a'));
    }
    if (0xFF41..=0xFF5A).contains(&u) {
        return char::from_u32(u - 0xFF41 + u32::from(b'a'));
    }
    Some(match c {
        'а' | 'А' | 'α' | 'Α' => 'a',
        'В' | 'Β' | 'в' => 'b',
        'с' | 'С' | 'ϲ' => 'c',
        'ԁ' => 'd',
        'е' | 'Е' | 'Ε' => 'e',
        'һ' | 'Н' | 'Η' | 'н' => 'h',
        'і' | 'І' | 'Ι' | 'ι' => 'i',
        'ј' | 'Ј' => 'j',
        'К' | 'Κ' | 'к' | 'κ' => 'k',
        'ӏ' => 'l',
        'М' | 'Μ' | 'м' => 'm',
        'Ν' => 'n',
        'о' | 'О' | 'ο' | 'Ο' => 'o',
        'р' | 'Р' | 'ρ' | 'Ρ' => 'p',
        'ѕ' | 'Ѕ' => 's',
        'Т' | 'Τ' | 'т' => 't',
        'υ' | 'Υ' | 'у' | 'У' => 'y',
        'ν' => 'v',
        'х' | 'Х' | 'χ' | 'Χ' => 'x',
        'Ζ' => 'z',
        _ => return None,
    })
}

/// Fold a whole string to its compact form (folded alphanumerics only).
pub fn compact(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        fold(c, |f| out.push(f));
    }
    out
}

/// Words: maximal runs of characters that fold to something, each folded.
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        let before = cur.len();
        fold(c, |f| cur.push(f));
        if cur.len() == before && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Streams folded characters into shift-invariant symbols.
pub struct Encoder<'a> {
    prev: u8,
    out: &'a mut Vec<u8>,
}

impl<'a> Encoder<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.clear();
        Encoder { prev: b'a', out }
    }

    /// Push a raw (unfolded) character.
    #[cfg(test)]
    pub fn push(&mut self, c: char) {
        if c.is_ascii() {
            // The hot path: no closure, no allocation.
            if c.is_ascii_alphabetic() {
                self.letter(c.to_ascii_lowercase() as u8);
            } else if c.is_ascii_digit() {
                self.out.push(26 + (c as u8 - b'0'));
            }
            return;
        }
        fold(c, |f| self.folded(f));
    }

    /// Push an already folded character.
    #[inline]
    pub fn folded(&mut self, f: char) {
        if f.is_ascii_lowercase() {
            self.letter(f as u8);
        } else if f.is_ascii_digit() {
            self.out.push(26 + (f as u8 - b'0'));
        } else {
            let mut buf = [0u8; 4];
            self.out
                .extend_from_slice(f.encode_utf8(&mut buf).as_bytes());
        }
    }

    #[inline]
    fn letter(&mut self, l: u8) {
        self.out.push((l + 26 - self.prev) % 26);
        self.prev = l;
    }
}

/// The pattern that finds a folded string under any Caesar shift: its encoding with everything
/// up to and including its first ASCII letter removed (the rest does not depend on context).
pub fn shift_pattern(folded: &str) -> Vec<u8> {
    let mut enc = Vec::with_capacity(folded.len());
    let mut e = Encoder::new(&mut enc);
    let mut cut = None;
    for f in folded.chars() {
        if cut.is_none() && f.is_ascii_lowercase() {
            e.folded(f);
            cut = Some(e.out.len());
        } else {
            e.folded(f);
        }
    }
    match cut {
        Some(c) => enc[c..].to_vec(),
        None => enc,
    }
}

/// A folded string with its ASCII letters shifted so the first one is `a`: two strings are equal
/// up to a Caesar shift exactly when their canonical forms are equal.
pub fn shift_canonical(folded: &str) -> String {
    let first = folded.bytes().find(u8::is_ascii_lowercase).unwrap_or(b'a');
    folded
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                (b'a' + (c as u8 + 26 - first) % 26) as char
            } else {
                c
            }
        })
        .collect()
}

/// Undo a Caesar shift of `shift` on ASCII letters (case kept).
pub fn unshift(s: &str, shift: u8) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                (b'a' + (c as u8 - b'a' + 26 - shift % 26) % 26) as char
            } else if c.is_ascii_uppercase() {
                (b'A' + (c as u8 - b'A' + 26 - shift % 26) % 26) as char
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        let mut e = Encoder::new(&mut v);
        for c in s.chars() {
            e.push(c);
        }
        v
    }

    #[test]
    fn folding_drops_case_punctuation_and_lookalikes() {
        assert_eq!(compact("P-E-L-I-C-A-N, 42!"), "pelican42");
        assert_eq!(compact("ＰＥＬＩＣＡＮ４２"), "pelican42");
        // Cyrillic "р", "е", "о" that render like Latin letters.
        assert_eq!(compact("реliсаn"), "pelican");
        assert_eq!(compact("Straße Ünïcode"), "straßeünïcode");
        assert_eq!(
            words("Write clear, commit-messages!"),
            ["write", "clear", "commit", "messages"]
        );
        assert!(words(" ...  ").is_empty());
    }

    #[test]
    fn encoding_is_the_same_under_every_shift() {
        let plain = "Write clear commit messages 42";
        let pat = shift_pattern(&compact(plain));
        for shift in 0..26u8 {
            let shifted = unshift(plain, 26 - shift);
            let stream = enc(&format!("x {shifted} y"));
            assert!(
                stream.windows(pat.len()).any(|w| w == pat.as_slice()),
                "shift {shift}"
            );
        }
        let other = enc("Write clean commit messages 42");
        assert!(!other.windows(pat.len()).any(|w| w == pat.as_slice()));
    }

    #[test]
    fn canonical_forms_match_exactly_the_shifts() {
        assert_eq!(shift_canonical("pelican42"), shift_canonical("qfmjdbo42"));
        assert_ne!(shift_canonical("pelican42"), shift_canonical("pelican43"));
        assert_eq!(shift_canonical("4821"), "4821");
        assert_eq!(unshift("Uryyb", 13), "Hello");
    }
}

#[cfg(test)]
mod sink_tests {
    use super::*;

    #[test]
    fn atoms_encode_like_the_encoder() {
        for s in [
            "Hello, World 42!",
            "Straße ＰＥＬＩＣＡＮ реlicаn",
            "x+x −3−2=7",
            "",
        ] {
            let mut a = Vec::new();
            let mut e = Encoder::new(&mut a);
            s.chars().for_each(|c| e.push(c));
            let mut b = Vec::new();
            let mut sink = Sink::new(&mut b, 0);
            atoms(s).into_iter().for_each(|x| sink.push(x));
            assert_eq!(a, b, "{s:?}");
            assert_eq!(atoms(s).len(), s.chars().count());
        }
    }
}
