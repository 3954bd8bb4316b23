//! Text folding and the shift-invariant symbol stream both the body and the answer go through.
//!
//! Folding closes the alphabet a model can be asked to write in: ASCII letters lower-cased;
//! every other character through one fold ([`fold`]) — decimal digits of any script to ASCII
//! digits, compatibility decomposition (NFKD: mathematical alphanumerics, full-width forms,
//! ligatures, circled and superscript letters, letter-like symbols) with combining marks dropped
//! (precomposed accents), small capitals and common Cyrillic/Greek look-alikes by a small table,
//! and what is left by its Unicode confusables skeleton (UTS #39); everything that is not then a
//! letter or digit is dropped (so case, punctuation, whitespace and separator characters between
//! letters all disappear). The body, the canaries and the answer all go through this one fold.
//! The folded stream is then encoded so that a Caesar shift does not change it: an ASCII letter
//! becomes its distance (mod 26) from the previous ASCII letter, a digit becomes `26 + digit`,
//! any other alphanumeric keeps its UTF-8 bytes (all `>= 0x80`). A body n-gram is searched as its
//! encoding *without* its first letter (whose symbol depends on what precedes it), so one pass over
//! the answer finds it under every shift.

use unicode_general_category::{GeneralCategory as Gc, get_general_category};
use unicode_normalization::char::{decompose_compatible, is_combining_mark};

/// Fold one character: emits nothing when it is not alphanumeric, else its folded form(s) (one
/// character may fold to several: `ﬁ` to `fi`, `æ` to `ae`, `㎏` to `kg`).
#[inline]
pub fn fold(c: char, mut emit: impl FnMut(char)) {
    if c.is_ascii() {
        if c.is_ascii_alphanumeric() {
            emit(c.to_ascii_lowercase());
        }
        return;
    }
    fold_wide(c, &mut emit);
}

/// The fold of a non-ASCII character (kept out of line: the ASCII path is the hot one).
#[inline(never)]
fn fold_wide(c: char, emit: &mut dyn FnMut(char)) {
    match get_general_category(c) {
        Gc::DecimalNumber => {
            if let Some(d) = decimal_value(c) {
                emit(d);
            }
            return;
        }
        // Punctuation, spaces, controls and marks never fold to a letter: skip the tables (curly
        // quotes and dashes are the common non-ASCII characters of an ordinary answer).
        Gc::ConnectorPunctuation
        | Gc::DashPunctuation
        | Gc::OpenPunctuation
        | Gc::ClosePunctuation
        | Gc::InitialPunctuation
        | Gc::FinalPunctuation
        | Gc::OtherPunctuation
        | Gc::SpaceSeparator
        | Gc::LineSeparator
        | Gc::ParagraphSeparator
        | Gc::Control
        | Gc::Format
        | Gc::NonspacingMark
        | Gc::SpacingMark
        | Gc::EnclosingMark => return,
        _ => {}
    }
    if let Some(a) = lookalike(c) {
        emit(a);
        return;
    }
    if ('\u{AC00}'..='\u{D7A3}').contains(&c) {
        // A Hangul syllable decomposes into its jamo, letters rather than marks: kept whole, so
        // a syllable stays one symbol and a reversed text reverses syllables, not jamo.
        emit(c);
        return;
    }
    decompose_compatible(c, |d| {
        if is_combining_mark(d) {
            return;
        }
        if d.is_ascii() {
            if d.is_ascii_alphanumeric() {
                emit(d.to_ascii_lowercase());
            }
            return;
        }
        if let Some(a) = lookalike(d) {
            emit(a);
            return;
        }
        if get_general_category(d) == Gc::DecimalNumber {
            if let Some(v) = decimal_value(d) {
                emit(v);
            }
            return;
        }
        confusable(d, emit);
    });
}

/// The value of a decimal digit (`Nd`) of any script as an ASCII digit. Unicode encodes every
/// `Nd` digit in a contiguous run from 0 to 9 (a stability policy), so the value is the distance
/// from the start of the run, mod 10 (runs may abut: the mathematical digits are five in a row).
fn decimal_value(c: char) -> Option<char> {
    let mut u = c as u32;
    let mut n = 0u32;
    while n < 60
        && let Some(p) = u.checked_sub(1).and_then(char::from_u32)
        && get_general_category(p) == Gc::DecimalNumber
    {
        u -= 1;
        n += 1;
    }
    char::from_digit(n % 10, 10)
}

/// A character NFKD left alone, by its UTS #39 confusables prototype (`ꜱ` to `s`, `ᴏ` to `o`, `×`
/// to `x`, a capital-I look-alike to `i`): its prototype's letters, or the character itself lower-cased when it has none. A
/// letter never becomes a digit this way (the skeleton of Cyrillic `б` is `6`, of `З` is `3`),
/// so words of other scripts keep their letter/digit shape, which canary matching relies on.
fn confusable(d: char, emit: &mut dyn FnMut(char)) {
    let mut buf = [0u8; 4];
    let mut proto = ['\0'; 8];
    let mut n = 0;
    let mut usable = true;
    for p in unicode_security::skeleton(d.encode_utf8(&mut buf)) {
        if is_combining_mark(p) {
            continue;
        }
        if n == proto.len() || (p.is_ascii_digit() && !d.is_numeric()) {
            usable = false;
            break;
        }
        proto[n] = p;
        n += 1;
    }
    // The prototype of every capital-I look-alike is `l` (UTS #39 folds `I` and `l` together);
    // ASCII `I` folds to `i` here, so a look-alike that is not a lower-case letter must too.
    if n == 1 && proto[0] == 'l' && !d.is_lowercase() {
        proto[0] = 'i';
    }
    let changed = !(n == 1 && proto[0] == d);
    if usable && changed && n > 0 {
        for &p in &proto[..n] {
            if p.is_ascii() {
                if p.is_ascii_alphanumeric() {
                    emit(p.to_ascii_lowercase());
                }
            } else if let Some(a) = lookalike(p) {
                emit(a);
            } else if let Some(l) = p.to_lowercase().find(|l| l.is_alphanumeric()) {
                emit(l);
            }
        }
        return;
    }
    if d.is_alphanumeric() {
        // The first alphanumeric of its lower case.
        if let Some(l) = d.to_lowercase().find(|l| l.is_alphanumeric()) {
            emit(l);
        }
    }
}

/// Atom of a character dropped by folding (punctuation, symbols).
pub const DROP: u32 = 36;
/// Atom of a whitespace character (dropped too, but it separates tokens).
pub const SPACE: u32 = 37;
const NON_ASCII: u32 = 0x100;

/// A text folded into atoms, one per folded character (one or more per character of the text; a
/// dropped character is one [`DROP`]): `0..26` an ASCII letter, `26..36` a digit (already its
/// symbol), [`DROP`], [`SPACE`], or `0x100 + c` for another folded alphanumeric `c`. Views
/// rearrange atoms; a [`Sink`] encodes them.
pub fn atoms(s: &str) -> Vec<u32> {
    let mut out = Vec::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        // ASCII by table, a byte at a time (most of most answers).
        if b.is_ascii() {
            out.push(ASCII_ATOMS[usize::from(b)]);
            i += 1;
            continue;
        }
        let Some(c) = s.get(i..).and_then(|rest| rest.chars().next()) else {
            break;
        };
        i += c.len_utf8();
        if c.is_whitespace() {
            out.push(SPACE);
            continue;
        }
        let before = out.len();
        fold(c, |f| {
            out.push(match f {
                'a'..='z' => f as u32 - 'a' as u32,
                '0'..='9' => 26 + (f as u32 - '0' as u32),
                _ => NON_ASCII + f as u32,
            })
        });
        if out.len() == before {
            out.push(DROP);
        }
    }
    out
}

/// The atom of each ASCII character.
const ASCII_ATOMS: [u32; 128] = {
    let mut t = [DROP; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        t[b] = match c {
            b'a'..=b'z' => (c - b'a') as u32,
            b'A'..=b'Z' => (c - b'A') as u32,
            b'0'..=b'9' => 26 + (c - b'0') as u32,
            _ if c.is_ascii_whitespace() => SPACE,
            _ => DROP,
        };
        b += 1;
    }
    t
};

/// Encodes atoms into shift-invariant symbols (the same symbols as [`Encoder`]), written into a
/// slice sized up front ([`Sink::room`]) and without a branch per atom on the ASCII path: the
/// views of an answer are most of the check's work, and text such as ROT47 or byte codes mixes
/// letters, digits and punctuation in no order a branch predictor can learn. (A slice, not a
/// `Vec`: a byte written through a `Vec` may alias its length, which the compiler then reloads
/// for every byte.)
pub struct Sink<'a> {
    prev: u32,
    len: usize,
    out: &'a mut [u8],
}

impl<'a> Sink<'a> {
    /// The bytes that encoding every atom of `atoms` once takes at most: a view takes each atom
    /// at most once.
    pub fn room(atoms: &[u32]) -> usize {
        atoms
            .iter()
            .map(|&a| if a >= NON_ASCII { 4 } else { 1 })
            .sum()
    }

    /// A sink writing into `out` (of at least [`Sink::room`] bytes for the atoms pushed; what
    /// does not fit is dropped).
    pub fn new(out: &'a mut [u8]) -> Self {
        Sink {
            prev: 0,
            len: 0,
            out,
        }
    }

    /// How many symbols were written (`out[..len]`).
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub fn push(&mut self, a: u32) {
        if a >= NON_ASCII {
            // Out of line and by value, so the sink's state stays in registers.
            self.len = wide(self.out, self.len, a);
            return;
        }
        // A letter is its distance from the previous letter, a digit itself (`26..36`);
        // `DROP` and `SPACE` are written and not counted. Masks rather than branches.
        let letter = u32::from(a < 26).wrapping_neg();
        let d = a + 26 - self.prev;
        let d = if d >= 26 { d - 26 } else { d };
        let v = (d & letter) | (a & !letter);
        if let Some(slot) = self.out.get_mut(self.len) {
            *slot = v as u8;
            self.len += usize::from(a < DROP);
        }
        self.prev ^= (self.prev ^ a) & letter;
    }

    /// [`Sink::push`] when `take`, else nothing — without a branch on `take` (views that pick
    /// atoms by a rule, every k-th of a token or no digits, in one pass over the text).
    #[inline(always)]
    pub fn push_if(&mut self, a: u32, take: bool) {
        if a >= NON_ASCII {
            if take {
                self.len = wide(self.out, self.len, a);
            }
            return;
        }
        let letter = u32::from(take && a < 26).wrapping_neg();
        let d = a + 26 - self.prev;
        let d = if d >= 26 { d - 26 } else { d };
        let v = (d & letter) | (a & !letter);
        if let Some(slot) = self.out.get_mut(self.len) {
            *slot = v as u8;
            self.len += usize::from(take && a < DROP);
        }
        self.prev ^= (self.prev ^ a) & letter;
    }
}

/// Write the UTF-8 bytes of a non-ASCII atom at `len` (if they fit); the new length.
#[cold]
#[inline(never)]
fn wide(out: &mut [u8], len: usize, a: u32) -> usize {
    let Some(c) = char::from_u32(a - NON_ASCII) else {
        return len;
    };
    let mut buf = [0u8; 4];
    let bytes = c.encode_utf8(&mut buf).as_bytes();
    match out.get_mut(len..len + bytes.len()) {
        Some(slot) => {
            slot.copy_from_slice(bytes);
            len + bytes.len()
        }
        None => len,
    }
}

/// Full-width forms, small capitals and the Cyrillic/Greek letters that render like ASCII
/// letters. Neither NFKD nor the confusables skeleton maps most small capitals (`ᴀ`, `ʙ`, `ᴅ`,
/// `ʀ`, `ᴛ` stay themselves), so they are listed; `ǫ` is the `q` of small-capital text (there is
/// no small capital Q in common fonts), and folds to `q` rather than to `o` with its ogonek.
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
        // Small capitals (IPA and phonetic extensions, Latin extended-D).
        'ᴀ' => 'a',
        'ʙ' => 'b',
        'ᴄ' => 'c',
        'ᴅ' => 'd',
        'ᴇ' => 'e',
        'ꜰ' => 'f',
        'ɢ' => 'g',
        'ʜ' => 'h',
        'ɪ' => 'i',
        'ᴊ' => 'j',
        'ᴋ' => 'k',
        'ʟ' => 'l',
        'ᴍ' => 'm',
        'ɴ' => 'n',
        'ᴏ' => 'o',
        'ᴘ' => 'p',
        'ꞯ' | 'ǫ' => 'q',
        'ʀ' => 'r',
        'ꜱ' => 's',
        'ᴛ' => 't',
        'ᴜ' => 'u',
        'ᴠ' => 'v',
        'ᴡ' => 'w',
        'ʏ' => 'y',
        'ᴢ' => 'z',
        _ => return None,
    })
}

/// `s` with every script's decimal digits as ASCII digits (`２５` is `25`) and format
/// characters dropped (zero-width spaces and joiners, direction marks), everything else as
/// written: for readers of numbers and the marks between them (A1Z26), which the full fold
/// would drop. Borrowed when `s` is ASCII.
pub fn digits_folded(s: &str) -> std::borrow::Cow<'_, str> {
    if s.is_ascii() {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        match get_general_category(c) {
            Gc::Format => {}
            Gc::DecimalNumber => out.push(decimal_value(c).unwrap_or(c)),
            _ => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
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

/// The folded words of `s` (as [`words`]) written one after another into `out`, the end of each
/// in `ends` (both cleared first): no allocation per word, for the per-text scans.
pub fn words_into(s: &str, out: &mut String, ends: &mut Vec<usize>) {
    out.clear();
    ends.clear();
    let mut last = 0;
    for c in s.chars() {
        let before = out.len();
        fold(c, |f| out.push(f));
        if out.len() == before && before > last {
            ends.push(before);
            last = before;
        }
    }
    if out.len() > last {
        ends.push(out.len());
    }
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

/// `s` through the [`Encoder`], as the views hand text to the matcher (the decoders' tests'
/// expected bytes).
#[cfg(test)]
pub(crate) fn enc(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    let mut e = Encoder::new(&mut v);
    s.chars().for_each(|c| e.push(c));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_drops_case_punctuation_and_lookalikes() {
        assert_eq!(compact("P-E-L-I-C-A-N, 42!"), "pelican42");
        assert_eq!(compact("ＰＥＬＩＣＡＮ４２"), "pelican42");
        // Cyrillic "р", "е", "о" that render like Latin letters.
        assert_eq!(compact("реliсаn"), "pelican");
        assert_eq!(compact("Straße Ünïcode"), "straßeunicode");
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
            let atoms = atoms(s);
            let mut b = vec![0; Sink::room(&atoms)];
            let mut sink = Sink::new(&mut b);
            atoms.into_iter().for_each(|x| sink.push(x));
            let n = sink.len();
            assert_eq!(a, b[..n], "{s:?}");
        }
        // One atom per character, except where a character folds to several.
        assert_eq!(atoms("ab, c").len(), 5);
        assert_eq!(atoms("ﬁx").len(), 3);
    }

    proptest::proptest! {
        /// Atoms read a byte at a time (ASCII by table) are the atoms of each character as
        /// [`fold`] gives them.
        #[test]
        fn atoms_are_the_fold_of_each_character(s in proptest::prelude::any::<String>()) {
            let mut want = Vec::new();
            for c in s.chars() {
                let before = want.len();
                if c.is_ascii_whitespace() || (!c.is_ascii() && c.is_whitespace()) {
                    want.push(SPACE);
                    continue;
                }
                fold(c, |f| {
                    want.push(match f.to_digit(36) {
                        Some(d) if f.is_ascii() && d >= 10 => d - 10,
                        Some(d) if f.is_ascii() => 26 + d,
                        _ => NON_ASCII + f as u32,
                    })
                });
                if want.len() == before {
                    want.push(DROP);
                }
            }
            proptest::prop_assert_eq!(atoms(&s), want);
        }
    }
}

/// The fold that closes the alphabet: each family a model can be asked to write in folds to the
/// ASCII the body is written in, and a near-miss beside each stays apart.
#[cfg(test)]
mod fold_tests {
    use super::*;

    #[test]
    fn mathematical_alphanumerics_fold_to_ascii() {
        assert_eq!(compact("𝐏𝐄𝐋𝐈𝐂𝐀𝐍 𝟒𝟐"), "pelican42");
        assert_eq!(
            compact("𝑝𝑒𝑙𝑖𝑐𝑎𝑛 𝓅ℯ𝓁𝒾𝒸𝒶𝓃 𝔭𝔢𝔩 𝕡𝕖𝕝 𝚙𝚎𝚕"),
            "pelicanpelicanpelpelpel"
        );
        // Near-miss: a different word in bold stays different.
        assert_ne!(compact("𝐏𝐄𝐋𝐈𝐂𝐀𝐒"), "pelican");
    }

    #[test]
    fn small_capitals_fold_to_ascii() {
        assert_eq!(
            compact("ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘǫʀꜱᴛᴜᴠᴡxʏᴢ"),
            "abcdefghijklmnopqrstuvwxyz"
        );
        assert_eq!(words("ᴡʀɪᴛᴇ ᴄʟᴇᴀʀ ᴄᴏᴍᴍɪᴛ"), ["write", "clear", "commit"]);
        assert_ne!(compact("ᴡʀɪᴛᴇ"), compact("wrote"));
    }

    #[test]
    fn precomposed_and_combining_accents_are_dropped() {
        assert_eq!(compact("Crème brûlée, naïve café"), "cremebruleenaivecafe");
        // The same with combining marks written separately.
        assert_eq!(compact("Cre\u{300}me\u{301}"), "creme");
        assert_eq!(compact("ＰＥＬＩＣＡＮ ⓟⓔⓛ ﬁ ㎏ ℌ"), "pelicanpelfikgh");
        // Near-miss: accents go, letters stay; `ß` and `ø` are not `ss`/`o` under NFKD alone,
        // but fold the same in body and answer.
        assert_eq!(compact("résumé"), "resume");
        assert_ne!(compact("résumé"), compact("resumes"));
        assert_eq!(compact("Straße"), compact("STRAẞE"));
    }

    #[test]
    fn decimal_digits_of_every_script_fold_to_ascii() {
        assert_eq!(compact("٤٨٢١"), "4821"); // Arabic-Indic
        assert_eq!(compact("۴۸۲۱"), "4821"); // Extended Arabic-Indic (Persian)
        assert_eq!(compact("४८२१ ৪৮২১ ๔๘๒๑"), "482148214821"); // Devanagari, Bengali, Thai
        assert_eq!(compact("٠١٢٣٤٥٦٧٨٩ 𝟎𝟗 𝟬𝟵"), "01234567890909");
        assert_eq!(compact("①② ²"), "122");
        // Near-miss: letters whose confusables prototype is a digit stay letters (`б` is not
        // `6`, `З` is not `3`), so a word of another script does not turn into a code.
        let russian = compact("Забыл был");
        assert!(!russian.chars().any(|c| c.is_ascii_digit()), "{russian}");
    }

    #[test]
    fn confusables_fold_to_their_prototype() {
        // Latin look-alikes of other scripts the table does not list.
        assert_eq!(compact("ꓑꓰꓡꓲꓚꓮꓠ"), "pelican"); // Lisu
        assert_eq!(compact("℮ⅼ×"), "elx");
        // Near-miss: punctuation stays punctuation.
        assert_eq!(compact("“quoted” — dashes… ‘x’"), "quoteddashesx");
    }
}
