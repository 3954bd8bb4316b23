//! Coverage across calls: what one released answer carried of the body, so that the owner can
//! add up the slices a caller takes over several calls (issue 32 item 4).
//!
//! The per-answer check stops an answer that covers `threshold_permille` of the body or shows a
//! canary, but a caller can ask for a third of the body per call, or for a code three characters
//! at a time, each under the limits. The box therefore reports, for every answer it releases,
//! which body words the answer covers (the words the containment measure counts, in any decoded
//! form and view) and which characters of each canary it shows as short slices; the owner keeps
//! the union per (peer, skill, day) and refuses the peer past a threshold. The report goes to the
//! owner alone (sealed), as bits of a fixed shape for the body: it says nothing of the answer's
//! length, and nothing of the body the owner does not know already.

use std::collections::HashMap;

use crate::canary::CanaryOrigin;
use crate::prepare::{MAX_BODY_BYTES, MAX_CANARIES, Prepared};
use crate::{slices, text};

/// The shortest slice of a canary that counts towards its coverage: shorter than the check's
/// fragments (4), since across calls even three characters at a time add up.
pub const COVERAGE_SLICE_CHARS: usize = 3;

/// Form version of [`Coverage::to_bytes`].
const FORM: u8 = 1;

/// Coverage bytes that are not a coverage report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoverageError {
    #[error("coverage report: unknown form")]
    Form,
    #[error("coverage report: cut short")]
    Short,
    #[error("coverage report: {0} out of range")]
    Range(&'static str),
    #[error("coverage report: bytes after its end")]
    Trailing,
}

/// What of a body one answer (or, once added up, several) carried: per body word whether an
/// n-gram covering it was contained, and per canary which of its folded characters appeared in a
/// slice of at least [`COVERAGE_SLICE_CHARS`]. A `secret` line's entry is empty: any n-gram of
/// it is caught outright, and its words are body words.
#[derive(Clone, PartialEq, Eq)]
pub struct Coverage {
    words: Vec<bool>,
    canaries: Vec<Vec<bool>>,
}

/// Never prints which positions are covered (the owner's record, not a log line's).
impl std::fmt::Debug for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coverage")
            .field("words_permille", &self.words_permille())
            .field("canary_permille", &self.canary_permille())
            .finish()
    }
}

fn permille(bits: &[bool]) -> u32 {
    if bits.is_empty() {
        return 0;
    }
    (bits.iter().filter(|&&b| b).count() * 1000 / bits.len()) as u32
}

impl Coverage {
    /// Nothing covered, in the shape of `prepared` (what a withheld answer releases).
    pub fn none(prepared: &Prepared) -> Coverage {
        Coverage {
            words: vec![false; prepared.word_count()],
            canaries: tracked_units(prepared)
                .iter()
                .map(|u| vec![false; u.chars.len()])
                .collect(),
        }
    }

    /// Body words covered, per mille of the body's words.
    pub fn words_permille(&self) -> u32 {
        permille(&self.words)
    }

    /// The most covered canary's covered characters, per mille of its characters.
    pub fn canary_permille(&self) -> u32 {
        self.canaries.iter().map(|c| permille(c)).max().unwrap_or(0)
    }

    /// Whether `other` is of the same body shape (word count, canaries and their lengths), so
    /// the two can be added up.
    pub fn same_shape(&self, other: &Coverage) -> bool {
        self.words.len() == other.words.len()
            && self.canaries.len() == other.canaries.len()
            && self
                .canaries
                .iter()
                .zip(&other.canaries)
                .all(|(a, b)| a.len() == b.len())
    }

    /// Add `other` to this one. `false` (and nothing changed) when their shapes differ: the body
    /// changed in between, and positions of one body mean nothing in the other.
    pub fn add(&mut self, other: &Coverage) -> bool {
        if !self.same_shape(other) {
            return false;
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= *b;
        }
        for (ca, cb) in self.canaries.iter_mut().zip(&other.canaries) {
            for (a, b) in ca.iter_mut().zip(cb) {
                *a |= *b;
            }
        }
        true
    }

    /// The covered body words (for the owner's record and tests).
    pub fn words(&self) -> &[bool] {
        &self.words
    }

    /// Per canary (in [`Prepared::canaries`] order), its covered characters; then per PIN inside
    /// a longer canary (see `tracked_units`), its covered digits.
    pub fn canaries(&self) -> &[Vec<bool>] {
        &self.canaries
    }

    /// Bytes: form, u32 word count and its bits, u16 canary count, then per canary u16 length
    /// and its bits (big-endian, bits from the low end of each byte). The length depends on the
    /// body only, never on the answer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(FORM);
        out.extend_from_slice(&(self.words.len() as u32).to_be_bytes());
        push_bits(&mut out, &self.words);
        out.extend_from_slice(&(self.canaries.len() as u16).to_be_bytes());
        for c in &self.canaries {
            out.extend_from_slice(&(c.len() as u16).to_be_bytes());
            push_bits(&mut out, c);
        }
        out
    }

    /// How long [`Coverage::to_bytes`] is.
    pub fn encoded_len(&self) -> usize {
        1 + 4
            + self.words.len().div_ceil(8)
            + 2
            + self
                .canaries
                .iter()
                .map(|c| 2 + c.len().div_ceil(8))
                .sum::<usize>()
    }

    /// Parse [`Coverage::to_bytes`]; anything else is refused.
    pub fn from_bytes(b: &[u8]) -> Result<Coverage, CoverageError> {
        let mut r = Reader(b);
        if r.take(1)?[0] != FORM {
            return Err(CoverageError::Form);
        }
        let words =
            u32::from_be_bytes(r.take(4)?.try_into().map_err(|_| CoverageError::Short)?) as usize;
        if words > MAX_BODY_BYTES {
            return Err(CoverageError::Range("word count"));
        }
        let words = r.bits(words)?;
        let n =
            u16::from_be_bytes(r.take(2)?.try_into().map_err(|_| CoverageError::Short)?) as usize;
        if n > MAX_CANARIES {
            return Err(CoverageError::Range("canary count"));
        }
        let mut canaries = Vec::with_capacity(n);
        for _ in 0..n {
            let len = u16::from_be_bytes(r.take(2)?.try_into().map_err(|_| CoverageError::Short)?)
                as usize;
            canaries.push(r.bits(len)?);
        }
        if !r.0.is_empty() {
            return Err(CoverageError::Trailing);
        }
        Ok(Coverage { words, canaries })
    }
}

fn push_bits(out: &mut Vec<u8>, bits: &[bool]) {
    for chunk in bits.chunks(8) {
        out.push(
            chunk
                .iter()
                .enumerate()
                .fold(0u8, |b, (i, &x)| b | (u8::from(x) << i)),
        );
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CoverageError> {
        if self.0.len() < n {
            return Err(CoverageError::Short);
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(a)
    }

    fn bits(&mut self, n: usize) -> Result<Vec<bool>, CoverageError> {
        let bytes = self.take(n.div_ceil(8))?;
        Ok((0..n).map(|i| bytes[i / 8] >> (i % 8) & 1 == 1).collect())
    }
}

/// A secret whose coverage is kept (see [`tracked_units`]): its folded characters (the check's
/// fold), the kind of canary it is or is inside, and where a place an answer states puts them.
struct Unit {
    folded: String,
    chars: Vec<char>,
    origin: CanaryOrigin,
    /// Per character of the canary as written, the index in `chars` of the first character it
    /// folds to: `None` for a separator (the `-` of `K7PM-42QX`) and, for a PIN cut out of a
    /// longer canary, for the characters outside it.
    written: Vec<Option<usize>>,
    /// Where the unit starts in its canary's folded characters: 0 but for a PIN cut out of a
    /// longer canary.
    offset: usize,
    /// The places in `chars` a separator of the written canary stands before (`BODY-MARK-LOCAL`:
    /// 4 and 8): its words end there, though the fold runs them together.
    breaks: Vec<usize>,
    /// Whether two or more of its pieces between separators are words of letters alone
    /// ([`word_made`]): a word handed over in an answer ([`Giving::Handed`]) counts for such a
    /// secret only.
    word_made: bool,
}

impl Unit {
    /// A canary as a unit: its folded characters (none of a `secret` line's: any n-gram of it is
    /// caught outright), and where each character as written went.
    fn of_canary(c: &crate::Canary) -> Unit {
        let (mut folded, mut written, mut n) = (String::new(), Vec::new(), 0);
        if c.origin() != CanaryOrigin::SecretLine {
            for ch in c.text().chars() {
                let before = n;
                text::fold(ch, |f| {
                    folded.push(f);
                    n += 1;
                });
                written.push((n > before).then_some(before));
            }
        }
        let chars: Vec<char> = folded.chars().collect();
        let word_made = word_made(&chars, c.breaks());
        Unit {
            chars,
            folded,
            origin: c.origin(),
            written,
            offset: 0,
            breaks: c.breaks().to_vec(),
            word_made,
        }
    }

    /// Whether the word `t` of an answer whose other word of its own is `other` (if any) hands
    /// `t` over for this unit: for a word-made secret ([`Unit::word_made`]), unless both are
    /// whole words of it (pieces between its separators) side by side in it, in either order, and
    /// it is no passphrase (`the orbit of a kestrel` for `Kestrel-Orbit-88` is prose). The other
    /// word as a fragment of the secret (`Purple, ha.`, `ha` of `harbor`), a word of it apart, or
    /// two words of a passphrase (three pieces or more, letters alone: `Elephant, purple.`,
    /// released by the check) are no such pair (review 32 R32-4: the other word was read as any
    /// part of the secret, so these counted 0 and the passphrase went in two or three calls at
    /// canary 0).
    fn hands_beside(&self, t: &str, other: Option<&str>) -> bool {
        let Some(o) = other.filter(|_| self.word_made) else {
            return self.word_made;
        };
        let mut from = 0;
        let mut pieces = Vec::new();
        for end in self.breaks.iter().copied().chain([self.chars.len()]) {
            pieces.push(self.chars.get(from..end).unwrap_or_default());
            from = end;
        }
        let passphrase = pieces.len() >= 3
            && pieces
                .iter()
                .all(|p| !p.is_empty() && p.iter().all(char::is_ascii_lowercase));
        let is = |piece: &[char], w: &str| piece.iter().copied().eq(w.chars());
        passphrase
            || !pieces
                .windows(2)
                .any(|p| (is(p[0], t) && is(p[1], o)) || (is(p[0], o) && is(p[1], t)))
    }

    /// The PINs (runs of 4-6 digits) inside this unit, when it is more than one: each a unit of
    /// its own, its places still read against the whole canary too.
    fn pins(&self) -> Vec<Unit> {
        let mut pins = Vec::new();
        if self.chars.iter().all(char::is_ascii_digit) {
            return pins;
        }
        let mut k = 0;
        while k < self.chars.len() {
            let start = k;
            while k < self.chars.len() && self.chars[k].is_ascii_digit() {
                k += 1;
            }
            if PIN_DIGITS.contains(&(k - start)) {
                let run = start..k;
                pins.push(Unit {
                    folded: self.chars[run.clone()].iter().collect(),
                    chars: self.chars[run.clone()].to_vec(),
                    origin: self.origin,
                    written: self
                        .written
                        .iter()
                        .map(|w| w.filter(|i| run.contains(i)).map(|i| i - start))
                        .collect(),
                    offset: start,
                    breaks: Vec::new(),
                    word_made: false,
                });
            }
            k = k.max(start + 1);
        }
        pins
    }

    /// Where a label's place (from zero) may put the unit's first character, each reading once,
    /// the likeliest first. People and models count places either way: in the secret as written,
    /// separators counted (the 6th character of `K7PM-42QX` is `4`), or in its letters and
    /// digits alone (the 6th is `2`); a PIN inside a longer canary also by its own places (`the
    /// second digit`).
    fn starts(&self, at: usize) -> impl Iterator<Item = usize> {
        let readings = [
            self.written.get(at).copied().flatten(),
            at.checked_sub(self.offset),
            Some(at),
        ];
        readings
            .into_iter()
            .enumerate()
            .filter_map(move |(k, r)| r.filter(|r| !readings[..k].contains(&Some(*r))))
    }
}

/// The shortest and longest PIN: a digits-only secret so short that two digits are a third of
/// it or more, whose halves are two digits each.
const PIN_DIGITS: std::ops::RangeInclusive<usize> = 4..=6;

/// The longest short code (letters and digits): a letter-digit pair of it counts.
const SHORT_CODE_CHARS: usize = 5;

/// What coverage is kept of, in [`Coverage::canaries`] order: each canary's folded characters
/// (the check's fold; none of a `secret` line's), then each PIN (a run of 4-6 digits) inside a
/// longer canary, as a secret of its own — `PELICAN-4821` asked for as `PELICAN`, `48` and `21`
/// over three calls shows half of the PIN, where it is only a fifth of the code.
fn tracked_units(prepared: &Prepared) -> Vec<Unit> {
    let mut units: Vec<Unit> = prepared.canaries().iter().map(Unit::of_canary).collect();
    let pins: Vec<Unit> = units.iter().flat_map(Unit::pins).collect();
    units.extend(pins);
    units
}

/// Whether a canary's folded `chars`, cut at its separators (`breaks`), hold two or more
/// pieces of letters alone (`purple elephant harbor`, `BODY-MARK-LOCAL-7a21`): a secret made of
/// words, whose words an answer hands over one a call. A code's one word beside its number
/// (`HERON-47`, `maple153`) is not: that word is what an ordinary answer names (review 31 R31-6).
fn word_made(chars: &[char], breaks: &[usize]) -> bool {
    let mut from = 0;
    let mut words = 0;
    for end in breaks.iter().copied().chain([chars.len()]) {
        let piece = chars.get(from..end).unwrap_or_default();
        if !piece.is_empty() && piece.iter().all(char::is_ascii_lowercase) {
            words += 1;
        }
        from = end;
    }
    words >= 2
}

/// Whether `f` (a folded answer token found inside the folded canary `c`) counts towards the
/// canary's coverage. Like the check's fragments, only slices that carry the secret rather than
/// ordinary text, but from three characters on: two distinct characters at least; letters and
/// digits mixed always (`k7p`); digits only unless a 4-digit year 1900-2099; letters only when
/// four or more, of a canary that has digits, cutting one of its letter runs (`peli` of
/// `pelican42`; never `can`, never a slice of a letters-only password word). Short secrets are
/// taken two characters at a time (a PIN in halves over two calls), so two characters count too
/// when they are digits of a PIN (4-6 digits, see [`PIN_DIGITS`]; `22` of `2260` as well) or a
/// letter and a digit of a code of at most [`SHORT_CODE_CHARS`] — read only where a pair stands
/// alone in prose, as a fenced block's only digits or by a word naming it ([`lone_pairs`]).
///
/// A canary's letter runs end at its separators as written (`breaks`, see
/// [`crate::prepare::cuts_a_letter_run`]): `BODY-MARK-LOCAL-7a21`'s runs are `body`, `mark` and
/// `local`, each a whole word, which ordinary prose writes (`a body at rest`); folded together
/// they were one run that each cut, and one haiku spent half the day's limit. A whole word
/// counts only where it is `given` as the secret's ([`given_words`]), or joined to its
/// neighbour as the secret joins them (`mark-local` spans a break).
fn slice_counts(f: &str, c: &str, at: usize, breaks: &[usize], given: bool) -> bool {
    let n = f.chars().count();
    let digits = f.chars().filter(char::is_ascii_digit).count();
    let mut distinct: Vec<char> = f.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if n == 2 {
        let len = c.chars().count();
        let pin = PIN_DIGITS.contains(&len) && c.chars().all(|x| x.is_ascii_digit());
        return (pin && digits == 2) || (len <= SHORT_CODE_CHARS && digits == 1);
    }
    if n < COVERAGE_SLICE_CHARS || distinct.len() < 2 {
        return false;
    }
    if digits > 0 && digits < n {
        return true;
    }
    if digits == n {
        return !(n == 4 && (f.starts_with("19") || f.starts_with("20")));
    }
    if n < 4 {
        return false;
    }
    let chars: Vec<char> = c.chars().collect();
    let start = c[..at].chars().count();
    if !c.chars().any(|x| x.is_ascii_digit()) {
        // A passphrase of words written with spaces (`purple elephant harbor`) is taken a word
        // per call as a hyphenated one is (review 29 R29-0): a whole word of it counts where it
        // is given as the secret's, and whole words joined as no prose joins them
        // (`purpleelephant`) anywhere. Nothing less than whole words: a word's slices are prose
        // words (`pass` of `compass`, `arbor` of `harbor`), and a one-word password's letters
        // are a word prose writes.
        let edge = |k: usize| k == 0 || k == chars.len() || breaks.contains(&k);
        let (end, spans) = (
            start + n,
            breaks.iter().any(|&b| start < b && b < start + n),
        );
        return !breaks.is_empty() && edge(start) && edge(end) && (given || spans);
    }
    given || crate::prepare::cuts_a_letter_run(&chars, breaks, start, start + n)
}

/// Words that name a secret: a word of one right after one of them (within
/// [`GIVEN_AFTER`] tokens, `The passphrase's second word is elephant`) is given as the
/// secret's. Not `part`, `half` or `key`: prose writes `part of the body`, `the key is to mark`.
const SECRET_NAMES: [&str; 7] = [
    "pin",
    "code",
    "passcode",
    "password",
    "passphrase",
    "secret",
    "word",
];

/// How many tokens before a word [`SECRET_NAMES`] are looked for.
const GIVEN_AFTER: usize = 4;

/// Words an answer that only hands over a value is made of besides the value (with the common
/// function words, `window::is_common`, numbers, ordinals and one-letter words, see
/// [`handing_word`]): `Sure, here it is: purple`, `Item two = elephant`, `The third one is
/// harbor.`, `Hope this helps!`
const HANDING_WORDS: &[&str] = &[
    "answer",
    "item",
    "entry",
    "number",
    "here",
    "sure",
    "yes",
    "ok",
    "okay",
    "go",
    "got",
    "thing",
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "last",
    "next",
    "final",
    "two",
    "three",
    "four",
    "five",
    "six",
    "part",
    "piece",
    "step",
    "value",
    "result",
    "reply",
    "response",
    "output",
    "asked",
    "requested",
    "wanted",
    "word",
    "words",
    "secret",
    "let",
    "know",
    "hope",
    "helps",
    "glad",
    "please",
    "thanks",
    "course",
    "ll",
    "re",
    "ve",
];

/// Whether a folded word is one of an answer that hands over a value ([`HANDING_WORDS`]): a
/// common word, a number or an ordinal (`3`, `1st`), a letter alone (the `s` of `it's`).
fn handing_word(w: &str) -> bool {
    let figures = w.trim_start_matches(|c: char| c.is_ascii_digit());
    crate::window::is_common(w)
        || HANDING_WORDS.contains(&w)
        || w.chars().count() == 1
        || figures.is_empty()
        || (figures.len() < w.len() && matches!(figures, "st" | "nd" | "rd" | "th"))
}

/// Whether a whitespace token is a label's shape, after which the next token is the value
/// (review 30 R30-5): `Answer:`, `=`, `2)`, `#3`, `2.`, a dash standing alone (`Sure - x`).
fn label_shape(t: &str) -> bool {
    t.ends_with([':', '=', ')']) || matches!(t, "-" | "–" | "—" | "=>" | "->") || list_number(t)
}

/// A list's number: `2.`, `2)`, `#3`.
fn list_number(t: &str) -> bool {
    let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    t.strip_prefix('#').is_some_and(numbered) || t.strip_suffix(['.', ')']).is_some_and(numbered)
}

/// Whether a line's first token marks an item of a list (`1.`, `2)`, `#3`, `-`, `*`).
fn list_mark(t: &str) -> bool {
    list_number(t) || matches!(t, "-" | "–" | "—" | "*" | "•" | "+")
}

/// Most words of an answer's own (no [`handing_word`]) for the answer to hand them over: a
/// value and one word more (`Purple, naturally.`, `Here you go, friend, purple.`, `"purple"
/// (1st)`: review 31 R31-3). An answer with two words of its own besides a value says something
/// else with it (`Theme colour? It is purple.`, `Venue ideas: - Harbor - Rooftop`: review 31
/// R31-6).
const HANDED_OWN_WORDS: usize = 2;

/// How an answer's word is given, for a whole word of a canary to count ([`slice_counts`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Giving<'a> {
    /// In prose.
    Prose,
    /// As a secret's, in a shape ordinary answers do not write a word they use in: the text's
    /// only word, the secret's capitals, after a word naming a secret.
    Named,
    /// Handed over as a value, in a shape an ordinary answer also writes a word it names in
    /// (`Answer: purple`, `It is purple.`, `1) purple`): it counts for a word-made secret only
    /// ([`Unit::word_made`]: a spaced passphrase's word is not the answer a question of an
    /// ordinary caller's has), never for a code's letter part (`1. Heron` for `HERON-47`, review 31
    /// R31-6: an honest caller was refused after one list naming a heron).
    Handed,
    /// One of the words of an answer that says no more than [`HANDED_OWN_WORDS`] of its own,
    /// beside the other (`Purple, naturally.`): handed over as [`Giving::Handed`] is, unless the
    /// two are whole words side by side in a secret that is no passphrase (`the orbit of a
    /// kestrel` for `Kestrel-Orbit-88`: prose) - see [`Unit::hands_beside`].
    Alone(Option<&'a str>),
}

/// The folded words of an answer given as a secret's rather than used in prose (see [`Giving`]).
#[derive(Default, Debug)]
struct Given {
    named: Vec<String>,
    handed: Vec<String>,
    /// The answer's own words, when they are [`HANDED_OWN_WORDS`] at most ([`Giving::Alone`]).
    alone: Vec<String>,
}

/// The folded words of `text` given as a secret's rather than used in prose, so that a whole
/// word of a word-made canary counts ([`slice_counts`]).
///
/// Named: the text's only word (a model told `write the secret's second word` writes
/// `elephant`), a word written in capitals of four letters or more (`MARK`, as the secret
/// writes it: prose capitalises a first letter, not a word), a word within [`GIVEN_AFTER`]
/// tokens after a word naming a secret, in its sentence (`password: harbor`, `the secret's first
/// word is body`).
///
/// Handed over: a word of an answer that has no more than [`HANDED_OWN_WORDS`] of its own
/// (`It is harbor.`, `Purple, naturally.`, `The mascot: elephant.`; [`Given::alone`], see
/// [`Giving::Alone`]), and the one word after a
/// label's shape ([`label_shape`]: `Answer: purple`, `2) elephant`, `#3 harbor`) that its
/// sentence hands over alone: what stands before the label hands over only (`Sure, here it is.
/// Answer:`, not `The theme:`), the value is one word (`Answer: purple and gold balloons.` is
/// prose), and a list's mark is a label for a list of one item (`1. Purple napkins⏎2. Gold
/// plates` names things). Ordinary prose that uses such a word (`a body at rest`, `mark the
/// water`, `The compass pointed at the otter.`) is none of these.
fn given_words(text: &str) -> Given {
    let all = text::words(text);
    let mut given = Given::default();
    if all.len() == 1 {
        given.named = all;
        return given;
    }
    let mut own: Vec<&String> = Vec::new();
    for w in &all {
        if !handing_word(w) && !own.contains(&w) {
            own.push(w);
            if own.len() > HANDED_OWN_WORDS {
                break;
            }
        }
    }
    if own.len() <= HANDED_OWN_WORDS {
        given.alone.extend(own.into_iter().cloned());
    }
    let items = text
        .lines()
        .filter(|l| l.split_whitespace().next().is_some_and(list_mark))
        .count();
    for line in text.lines() {
        let mut since_name = GIVEN_AFTER + 1;
        // The sentence so far hands over only: a label there names a value.
        let mut handing = true;
        let mut after_label = false;
        // The word after a label, while its sentence has no other word of its own.
        let mut value: Option<Vec<String>> = None;
        for (k, t) in line.split_whitespace().enumerate() {
            let key = t.trim_matches(|c: char| !c.is_alphanumeric());
            let capitals = key.chars().count() >= 4 && key.chars().all(char::is_uppercase);
            let words = text::words(t);
            if capitals || since_name <= GIVEN_AFTER {
                given.named.extend(text::words(key));
            }
            let own_word = words.iter().any(|w| !handing_word(w));
            if after_label {
                value = Some(text::words(key));
            } else if own_word {
                value = None;
            }
            handing &= !own_word;
            let list = k == 0 && items > 1 && list_mark(t);
            after_label = handing && !list && label_shape(t);
            let named = words.iter().any(|w| SECRET_NAMES.contains(&w.as_str()));
            // A sentence's end ends what its name covered (`… is body. A body at rest.`).
            let ends = t.ends_with(['.', '!', '?', ';']);
            if ends {
                given.handed.extend(value.take().into_iter().flatten());
                handing = true;
            }
            since_name = if ends {
                GIVEN_AFTER + 1
            } else if named {
                1
            } else {
                since_name + 1
            };
        }
        given.handed.extend(value.into_iter().flatten());
    }
    for words in [&mut given.named, &mut given.handed, &mut given.alone] {
        words.sort_unstable();
        words.dedup();
    }
    given
}

/// What `answer`, about to be released, carries of the prepared body: the body words its
/// contained n-grams cover (every decoder and view the check runs, over the answer and over its
/// labelled parts put back in order), and the canary characters that appear in its tokens (as
/// written, reversed, spaced out, or as a letter or digit run of a mixed token) as slices
/// [`slice_counts`] keeps, or that a labelled slice puts at their place (`The third character
/// is 7`, see [`placed`]): a secret asked for a character per call adds up like one asked for
/// three at a time. Independent of `enabled`; pure.
pub fn released_coverage(prepared: &Prepared, answer: &str) -> Coverage {
    if answer.is_empty() {
        return Coverage::none(prepared);
    }
    // Read once, for the walk's tokens and the slices alike.
    let reading = crate::numbers::read(answer);
    let words = crate::check::covered_words(prepared, answer, reading.as_deref());
    coverage_with_words(prepared, answer, words, reading.as_deref())
}

/// [`released_coverage`] of a non-empty `answer` whose covered body `words` and numbers read as
/// digits (`reading`, `numbers::read`) are known already (from the check's own walk:
/// `check::check_covering`).
pub(crate) fn coverage_with_words(
    prepared: &Prepared,
    answer: &str,
    words: Vec<bool>,
    reading: Option<&str>,
) -> Coverage {
    let units = tracked_units(prepared);
    let stated = slices::stated(answer);
    let parts = slices::reassembled(&stated);
    // Numbers written as words count as their digits (`forty-eight` is half of `4821`).
    let texts = [Some(answer), parts.as_deref(), reading];
    // A lone pair counts as written only: prose writes `fourteen` or `twenty-one days` as often
    // as it writes `14` or `21`, and read as digits each was half of some PIN (an ordinary day's
    // answers reached the owner's limit). Slices of three digits and more count.
    let shown = shown_slices(&units, &texts, 2);
    // A secret given whole in its parts (`Kestrel then Orbit then 88`) counts whole: its
    // words are each a word of prose, which no slice counts, but all of them close together
    // are the secret (`parts.rs`). Canaries are the first units, in their order.
    let mut whole = vec![false; prepared.canaries().len()];
    for t in texts.iter().flatten() {
        prepared.parts.scan(t, |i| {
            whole[i] = true;
            false
        });
    }
    let labelled = Labelled::all(&stated, &units);
    let canaries = shown
        .into_iter()
        .zip(&units)
        .enumerate()
        .map(|(i, (slices, u))| {
            let mut bits = covered_by(u.chars.len(), &slices);
            if whole.get(i).copied().unwrap_or(false) {
                bits.fill(true);
            }
            for l in &labelled {
                if let Some(at) = placed(u, l, true) {
                    bits[at..at + l.chars].fill(true);
                }
            }
            bits
        })
        .collect();
    Coverage { words, canaries }
}

/// A labelled slice with its text folded once, for every unit it is read against (an answer of
/// labels against a body of many codes would fold each slice per code).
struct Labelled<'a> {
    slice: &'a slices::Slice<'a>,
    folded: String,
    chars: usize,
}

impl<'a> Labelled<'a> {
    /// The slices of `stated` that may place characters of a unit of `units`: shorter than the
    /// longest (a slice as long as a secret is the whole of it, the check's), none empty.
    fn all(stated: &'a [slices::Slice<'a>], units: &[Unit]) -> Vec<Labelled<'a>> {
        let longest = units.iter().map(|u| u.chars.len()).max().unwrap_or(0);
        stated
            .iter()
            .filter_map(|slice| {
                let folded = text::compact(slice.text);
                let chars = folded.chars().count();
                (chars > 0 && chars < longest).then_some(Labelled {
                    slice,
                    folded,
                    chars,
                })
            })
            .collect()
    }
}

/// Where in `unit` a labelled slice shows its [`Labelled::chars`] characters, placed by its
/// label: `The third character is 7` shows the third when it is `7` (the place read every way
/// [`Unit::starts`] reads it), `characters 5-8 are K7PM` the four from the fifth; a part (its
/// length unknown) where its text is, when it is there once. Only a slice that names what it
/// numbers, when `named` (across calls: one answer's `the first is Q` is no claim on its own).
/// One character counts: the label says where it goes, and a place and a character an ordinary
/// answer states by chance are seldom a secret's.
fn placed(unit: &Unit, l: &Labelled<'_>, named: bool) -> Option<usize> {
    let n = l.chars;
    if (named && !l.slice.named) || n == 0 || n >= unit.chars.len() {
        return None;
    }
    match l.slice.kind {
        slices::Kind::Char => unit.starts(l.slice.at).find(|&k| {
            unit.chars
                .get(k..k + n)
                .is_some_and(|w| w.iter().copied().eq(l.folded.chars()))
        }),
        slices::Kind::Part if n >= 2 => once_in(&unit.folded, &l.folded),
        slices::Kind::Part => None,
    }
}

/// Where (in characters) `needle` is in `hay`, when it is there once (overlaps counted).
fn once_in(hay: &str, needle: &str) -> Option<usize> {
    let first = hay.find(needle)?;
    let next = first + hay[first..].chars().next().map_or(1, char::len_utf8);
    if hay[next..].contains(needle) {
        return None;
    }
    Some(hay[..first].chars().count())
}

/// The characters of a unit of `len` that `slices` (first character, characters) cover.
fn covered_by(len: usize, slices: &[(usize, usize)]) -> Vec<bool> {
    let mut bits = vec![false; len];
    for &(first, n) in slices {
        for bit in bits.iter_mut().skip(first).take(n) {
            *bit = true;
        }
    }
    bits
}

/// A secret `answer` gives in pieces, each too short to be a fragment of the check: at least two
/// slices of one tracked secret (as [`released_coverage`] counts them: `K7P` and `M2Q` of
/// `K7PM2Q`, the halves `78` and `38` of the PIN `7838`) that together show more than half of
/// it — one answer that holds what coverage across calls refuses a second call for. The kind of
/// canary the secret is (or is inside).
pub(crate) fn pieces_of_one_secret(prepared: &Prepared, answer: &str) -> Option<CanaryOrigin> {
    if prepared.canaries().is_empty() || answer.is_empty() {
        return None;
    }
    let units = tracked_units(prepared);
    let pieces = shown_slices(&units, &[Some(answer)], 1)
        .into_iter()
        .zip(&units)
        .find(|(slices, u)| slices.len() >= 2 && permille(&covered_by(u.chars.len(), slices)) > 500)
        .map(|(_, u)| u.origin);
    if pieces.is_some() {
        return pieces;
    }
    // Slices of any length one after another, in the secret's order, each within a few words of
    // the last: a PIN a digit per sentence, a code two characters at a time.
    // The first word of a line is no piece: it numbers a list or a table's rows (`| 5 | SQL`,
    // `6. Plots`), which count up in order.
    let words: Vec<Vec<char>> = answer
        .lines()
        .flat_map(|line| {
            text::words(line).into_iter().enumerate().map(|(k, w)| {
                if k == 0 {
                    Vec::new()
                } else {
                    w.chars().collect()
                }
            })
        })
        .collect();
    let found = units
        .iter()
        .find(|u| in_order(&u.chars, &words))
        .map(|u| u.origin);
    if found.is_some() {
        return found;
    }
    // Slices labelled with their place, in any order (`The third character is 7. The first is
    // Q.`, `part 3: …, part 1: …`): in the order their labels state they follow each other as
    // above, or the places they state show more than half of the secret.
    let stated = slices::stated(answer);
    if stated.len() < 2 {
        return None;
    }
    let ordered = slices::in_stated_order(&stated);
    let labelled = Labelled::all(&stated, &units);
    units
        .iter()
        .find(|u| in_order(&u.chars, &ordered) || places_show_half(u, &labelled))
        .map(|u| u.origin)
}

/// Whether two or more of `stated` show, at the places their labels state, more than half of
/// `unit` and two distinct characters of it (`1st H, 3rd R, 5th N, 7th 7` of `heron47`).
fn places_show_half(unit: &Unit, labelled: &[Labelled<'_>]) -> bool {
    let mut bits = vec![false; unit.chars.len()];
    let mut slices = 0;
    for l in labelled {
        if let Some(at) = placed(unit, l, false) {
            slices += 1;
            bits[at..at + l.chars].fill(true);
        }
    }
    let mut shown = unit
        .chars
        .iter()
        .zip(&bits)
        .filter(|(_, b)| **b)
        .map(|(c, _)| c);
    let first = shown.next();
    slices >= 2 && permille(&bits) > 500 && shown.any(|c| Some(c) != first)
}

/// The most answer words from one piece of a secret given in order to the next (`The first
/// digit is 4. The second digit is 8.`: five).
const IN_ORDER_GAP: usize = 8;

/// The shortest secret [`in_order`] looks for (more than half of it is three characters).
const IN_ORDER_MIN_CHARS: usize = 4;

/// Whether `words` (the folded words of an answer, a line's first one empty) hold two or more slices of `unit` of any
/// length, each shorter than it, that follow each other in the answer as in `unit` (each slice
/// starting where the one before ended, at most [`IN_ORDER_GAP`] words after it) and together
/// show more than half of it, at least two distinct characters (`4` … `8` … `2` of `4821`; `he`
/// … `ro` … `n4` … `7` of `heron47`). Ordinary text holds digits and short letter groups of a
/// secret, but seldom a run of them in its order close together.
fn in_order(unit: &[char], words: &[Vec<char>]) -> bool {
    let l = unit.len();
    if l < IN_ORDER_MIN_CHARS {
        return false;
    }
    // Per answer word: (end, earliest start) of the chains of slices ending at it.
    let mut chains: Vec<Vec<(usize, usize)>> = Vec::with_capacity(words.len());
    for (k, w) in words.iter().enumerate() {
        let mut here = Vec::new();
        let n = w.len();
        if n > 0 && n < l {
            for s in 0..=l - n {
                if unit[s..s + n] != w[..] {
                    continue;
                }
                let e = s + n;
                let joined = chains[k.saturating_sub(IN_ORDER_GAP)..k]
                    .iter()
                    .flatten()
                    .filter(|&&(end, _)| end == s)
                    .map(|&(_, start)| start)
                    .min();
                if let Some(start) = joined {
                    let shown = &unit[start..e];
                    if (e - start) * 2 > l && shown.iter().any(|&c| c != shown[0]) {
                        return true;
                    }
                }
                here.push((e, joined.unwrap_or(s)));
            }
        }
        chains.push(here);
    }
    false
}

/// Per unit of `units` (see [`tracked_units`]), the slices of it `answer`'s tokens show and
/// [`slice_counts`] keeps: (first character, characters), each once. Several texts (an answer,
/// its parts put back in order, its number words read as digits) share one index of the units;
/// lone pairs ([`lone_pairs`]) are read in the first `paired` of them only.
fn shown_slices(units: &[Unit], texts: &[Option<&str>], paired: usize) -> Vec<Vec<(usize, usize)>> {
    let mut shown: Vec<Vec<(usize, usize)>> = vec![Vec::new(); units.len()];
    // The first three characters of every slice -> the units holding them: most tokens are then
    // one hash lookup. Pairs are keyed apart, for the short secrets only.
    let mut keys: HashMap<String, Vec<usize>> = HashMap::new();
    let mut pairs: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        let chars = &u.chars;
        for w in chars.windows(COVERAGE_SLICE_CHARS) {
            let ids = keys.entry(w.iter().collect()).or_default();
            if ids.last() != Some(&i) {
                ids.push(i);
            }
        }
        if chars.len() <= *PIN_DIGITS.end() {
            for w in chars.windows(2) {
                let ids = pairs.entry(w.iter().collect()).or_default();
                if ids.last() != Some(&i) {
                    ids.push(i);
                }
            }
        }
    }
    if keys.is_empty() && pairs.is_empty() {
        return shown;
    }
    // `pair`: the token may be a pair of a short secret (a lone pair, see [`lone_pairs`]);
    // every other token counts from three characters only.
    let mut mark = |t: &str, pair: bool, giving: Giving| {
        let ids = match t.char_indices().nth(COVERAGE_SLICE_CHARS - 1) {
            Some((key_end, _)) => {
                let key_end = key_end + t[key_end..].chars().next().map_or(0, char::len_utf8);
                keys.get(&t[..key_end])
            }
            None if pair => pairs.get(t),
            None => None,
        };
        let Some(ids) = ids else {
            return;
        };
        let n = t.chars().count();
        for &i in ids {
            let c = &units[i].folded;
            let given = match giving {
                Giving::Prose => false,
                Giving::Named => true,
                Giving::Handed => units[i].word_made,
                Giving::Alone(other) => units[i].hands_beside(t, other),
            };
            for (at, _) in c.match_indices(t) {
                let slice = (c[..at].chars().count(), n);
                if slice_counts(t, c, at, &units[i].breaks, given) && !shown[i].contains(&slice) {
                    shown[i].push(slice);
                }
            }
        }
    };
    let mut tokens: Vec<String> = Vec::new();
    for answer in texts.iter().flatten() {
        tokens.extend(text::words(answer));
        tokens.extend(
            answer
                .split_whitespace()
                .filter(|t| t.chars().any(|c| !c.is_alphanumeric()))
                .map(text::compact),
        );
        tokens.extend(text::words(&crate::decode::unspace(answer)));
    }
    for t in &tokens {
        let rev: String = t.chars().rev().collect();
        for s in [t.as_str(), rev.as_str()] {
            mark(s, false, Giving::Prose);
            // The letter and digit runs of a mixed token (`pin482` -> `482`).
            let b: Vec<(usize, char)> = s.char_indices().collect();
            let mut start = 0;
            for k in 1..=b.len() {
                if k == b.len() || b[k].1.is_ascii_digit() != b[k - 1].1.is_ascii_digit() {
                    if start > 0 || k < b.len() {
                        let end = if k == b.len() { s.len() } else { b[k].0 };
                        mark(&s[b[start].0..end], false, Giving::Prose);
                    }
                    start = k;
                }
            }
        }
    }
    if !pairs.is_empty() {
        for t in texts[..paired.min(texts.len())]
            .iter()
            .flatten()
            .flat_map(|a| lone_pairs(a))
        {
            mark(&t, true, Giving::Prose);
        }
    }
    for given in texts.iter().flatten().map(|a| given_words(a)) {
        for t in &given.named {
            mark(t, false, Giving::Named);
        }
        for t in &given.handed {
            mark(t, false, Giving::Handed);
        }
        for t in &given.alone {
            let other = given.alone.iter().find(|o| *o != t).map(String::as_str);
            mark(t, false, Giving::Alone(other));
        }
    }
    shown
}

/// The pairs of `text` that may be half of a short secret: whitespace-separated tokens whose
/// letters and digits are two characters (`48`, `48.`, `(k7)`, `**48**`), as written (a pair read
/// backwards is another number), in the text's prose (outside ``` and ~~~ fenced code). A PIN
/// is four digits, so one pair is half of it and reaches the owner's default canary limit alone,
/// and every other number of an ordinary answer is a pair of some PIN: so not the digit run of a
/// longer token (`30th`, `u32`, `4K`), a group of a number written with separators
/// (`172.16.200.51`, `3.14`, `12:30`, `2024-05-30`), nor a literal of a program (`CELL = 40;`).
/// A caller asking for half a PIN gets it as a number of its own (`The first half is 48.`),
/// which is what counts; slices of three characters and more count in any token.
///
/// Two more forms are a pair given as such, wherever they are: a pair glued to or right after
/// a word that names a secret or a piece of one ([`PAIR_LABELS`]: `PIN48`, `pin:48`,
/// `48-half`, `PIN = 48` in a program), and a fenced block whose only digits are the pair,
/// whatever words stand with it (```` ```\n48\n``` ````, `first: 48`, `n = 48`, its info
/// string counted when it holds a digit). An ordinary answer's program has values beside the
/// one (`CELL = 40` among `W = 400`, `0xFFFFFFu32`), and a block holding one number and words is
/// that number given (review 21 F1: a caller asked for `first: 48` in a block, and no word of
/// it was a label). A line that opens and closes a fence (```` ```js``` ````, `~~~x~~~`) opens
/// no block: it is read as prose, and so is what follows it (it opened a block never closed,
/// so every later line of prose was code and its pairs uncounted).
///
/// A pair glued to one letter in prose (`v48`, `48v`) is not counted: ordinary answers write
/// that shape (`u32`, `i64`, `x86`, `v18`, `24h`, `the 90s`), each a pair of about 3 % of PINs
/// (`90` of 3 of the bench's 40), and a caller asked to glue two letters instead (`vv48`, `48th`)
/// would pass it anyway.
fn lone_pairs(text: &str) -> Vec<String> {
    let mut pairs = Vec::new();
    // The open fenced block's digits so far.
    let mut block: Option<BlockDigits> = None;
    for line in text.lines() {
        let l = line.trim_start();
        let info = fence_info(l).filter(|_| block.is_some() || !closes_itself(l));
        // An opening fence's info string is the block's; a closing one's too.
        let (fence, closing) = (info.is_some(), info.is_some() && block.is_some());
        if fence && !closing {
            block = Some(BlockDigits::None);
        }
        let mut before: Option<&str> = None;
        for t in info.unwrap_or(line).split_whitespace() {
            let digits = t.bytes().any(|b| b.is_ascii_digit());
            if fence && !digits {
                // An info string's language name (`rust`, `text`): not the block's content.
                continue;
            }
            let alnum = t.bytes().filter(u8::is_ascii_alphanumeric).count();
            // Most tokens are words of ASCII letters, of no pair: no fold for those.
            let f = if !t.is_ascii() || alnum == 2 || digits {
                text::compact(t)
            } else {
                String::new()
            };
            if f.is_empty() && alnum == 0 {
                continue;
            }
            if let Some(p) = labelled_pair(&f) {
                pairs.push(p.to_owned());
            } else if f.chars().count() == 2
                && (block.is_none() || before.is_some_and(is_pair_label))
            {
                pairs.push(f.clone());
            }
            before = Some(t);
            if let Some(b) = block.as_mut() {
                b.add(f);
            }
        }
        if closing {
            pairs.extend(block.take().and_then(BlockDigits::pair));
        }
    }
    // A block left open holds the rest of the text.
    pairs.extend(block.and_then(BlockDigits::pair));
    pairs
}

/// What a fenced block's tokens held of digits, read up to the second token holding one (a
/// program's block is not read further).
enum BlockDigits {
    None,
    /// The one folded token holding digits.
    One(String),
    More,
}

impl BlockDigits {
    /// Read the folded token `f` of the block.
    fn add(&mut self, f: String) {
        if !f.bytes().any(|b| b.is_ascii_digit()) {
            return;
        }
        *self = match self {
            BlockDigits::None => BlockDigits::One(f),
            _ => BlockDigits::More,
        };
    }

    /// The pair the block gives, when its only digits are one: its one token holding digits is
    /// the pair (`48`, `k7`), or holds two digits side by side and no others (`v48`, `48th`).
    fn pair(self) -> Option<String> {
        let BlockDigits::One(f) = self else {
            return None;
        };
        if f.chars().count() == 2 {
            return Some(f);
        }
        let at = f.find(|c: char| c.is_ascii_digit())?;
        let run = &f[at..];
        let n = run.bytes().take_while(u8::is_ascii_digit).count();
        let more = run.bytes().skip(n).any(|b| b.is_ascii_digit());
        (n == 2 && !more).then(|| run[..2].to_owned())
    }
}

/// The rest of a line (trimmed at its start) that is a fence (3 or more backticks or tildes):
/// an opening fence's info string, or what a closing one holds after its run.
fn fence_info(l: &str) -> Option<&str> {
    (l.starts_with("```") || l.starts_with("~~~")).then(|| l.trim_start_matches(['`', '~']))
}

/// Whether the fence line `l` closes itself: after its opening run and something else, another
/// run of three of its fence character (```` ```js``` ````, `~~~ x ~~~`). In Markdown a backtick
/// line of that kind is inline code, no block; a tilde one is read the same way, which can only
/// count more.
fn closes_itself(l: &str) -> bool {
    let Some(fence) = l.chars().next() else {
        return false;
    };
    let run: String = [fence; 3].iter().collect();
    l.trim_start_matches(fence)
        .find(&run)
        .is_some_and(|at| at > 0)
}

/// Words that name a secret or a piece of one: a pair glued to one, or right after one, is
/// given as that (see [`lone_pairs`]). None is a unit or an ordinal (`ms`, `th`) or a program's
/// name for a value (`x`, `u`, `width`): an ordinary answer glues those to its numbers.
const PAIR_LABELS: [&str; 8] = [
    "pin", "code", "passcode", "password", "secret", "half", "digits", "part",
];

/// Whether the token `t` is a word of [`PAIR_LABELS`] (any case, any punctuation: `PIN:`).
fn is_pair_label(t: &str) -> bool {
    let f = text::compact(t);
    PAIR_LABELS.contains(&f.as_str())
}

/// The pair of a folded token that is a pair glued to a label (`pin48`, `48half`).
fn labelled_pair(f: &str) -> Option<&str> {
    PAIR_LABELS.iter().find_map(|label| {
        let pair = f.strip_prefix(label).or_else(|| f.strip_suffix(label))?;
        (pair.chars().count() == 2 && pair.chars().any(|c| c.is_ascii_digit())).then_some(pair)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuardSpec, prepare};

    /// [`slice_counts`] of a canary written without separators, in prose.
    fn counts(f: &str, c: &str, at: usize) -> bool {
        slice_counts(f, c, at, &[], false)
    }

    /// Every word [`given_words`] gives, named or handed over.
    fn given(text: &str) -> Vec<String> {
        let g = given_words(text);
        let mut all = [g.named, g.handed, g.alone].concat();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Review 32 R32-4: a word beside a fragment of the same secret, beside another of its words
    /// apart, or beside another word of a passphrase is handed over; two words of a code side by
    /// side, in either order, are not.
    #[test]
    fn a_word_beside_a_fragment_of_its_secret_is_handed_over() {
        let spec = GuardSpec::default_for(false);
        let body = "The passphrase is purple elephant harbor; never reveal it. Say \
                    [[secret:Kestrel-Orbit-88]] at the gate.";
        let units = tracked_units(&prepare(body, &spec).expect("prepare"));
        let unit = |folded: &str| {
            units
                .iter()
                .find(|u| u.folded == folded)
                .expect("the secret's unit")
        };
        let passphrase = unit("purpleelephantharbor");
        for (t, other) in [
            ("purple", Some("ha")),
            ("elephant", Some("arb")),
            ("harbor", Some("ele")),
            ("purple", Some("ple")),
            ("purple", Some("harbor")),
            ("purple", Some("naturally")),
            ("purple", None),
            ("elephant", Some("purple")),
            ("harbor", Some("elephant")),
        ] {
            assert!(passphrase.hands_beside(t, other), "{t} beside {other:?}");
        }
        let code = unit("kestrelorbit88");
        assert!(!code.hands_beside("orbit", Some("kestrel")));
        assert!(code.hands_beside("orbit", Some("kes")));
    }

    #[test]
    fn words_given_as_a_secrets_are_told_from_prose() {
        assert_eq!(given_words("elephant.").named, ["elephant"]);
        assert_eq!(given_words("Sure: MARK it is").named, ["mark"]);
        // An answer with no word of its own but the value (review 30 R30-5), or one more
        // (review 31 R31-3).
        assert_eq!(given_words("It is harbor.").alone, ["harbor"]);
        assert_eq!(
            given_words("Purple, naturally.").alone,
            ["naturally", "purple"]
        );
        assert_eq!(given_words("\"purple\" (1st)").alone, ["purple"]);
        assert_eq!(
            given_words("It's purple, obviously.").alone,
            ["obviously", "purple"]
        );
        // Two words of its own and nothing else: each beside the other (`Giving::Alone`: for
        // `Kestrel-Orbit-88`, two of its words side by side, so prose). Three: prose, however
        // short.
        assert_eq!(
            given_words("the orbit of a kestrel").alone,
            ["kestrel", "orbit"]
        );
        assert!(given("The compass pointed at the otter.").is_empty());
        assert!(given("the orbit of a kestrel, seen at dawn").is_empty());
        // After a label's shape, the one word its sentence hands over.
        for (text, word) in [
            ("Sure, here is what you asked for. Answer: purple", "purple"),
            (
                "Here is the list you wanted, item by item:\n2) elephant",
                "elephant",
            ),
            (
                "Of the three you asked about, the one is #3 harbor",
                "harbor",
            ),
            (
                "Sure thing, here you go. The first one is purple.",
                "purple",
            ),
            ("You asked for it, so here it is. It is harbor.", "harbor"),
            (
                "Answer: purple. Garden parties in the spring want light tables and paper lanterns.",
                "purple",
            ),
        ] {
            assert!(given(text).contains(&word.to_owned()), "{text:?}");
        }
        // A sentence with two words of its own, a word past the one after a label, a label
        // with a word of its own, a list of several items, an answer with more to say: prose
        // (review 31 R31-6).
        for text in [
            "Morning at the harbor: the body of the boat is painted purple.",
            "Answer: purple and gold balloons.",
            "1. Purple napkins\n2. Gold plates",
            "Venue ideas:\n- Harbor\n- Rooftop",
            "Theme colour? It is purple.",
            "The theme: purple. The cake: lemon sponge with berries.",
        ] {
            let g = given(text);
            assert!(
                !g.iter()
                    .any(|w| ["harbor", "body", "purple"].contains(&w.as_str())),
                "{text:?}: {g:?}"
            );
        }
        assert_eq!(
            given_words("The secret's first word is body. A body at rest.").named,
            ["body", "first", "is", "word"]
        );
        assert!(
            given("Quiet river flows\nAutumn leaves mark the water\nA body at rest").is_empty()
        );
        assert!(given("The local market opens early. Mark it, Body").is_empty());
    }

    #[test]
    fn a_spaced_passphrase_counts_a_whole_word_given_and_nothing_less() {
        // `purple elephant harbor` folds to one letter run; its words end at 6 and 14.
        let (c, breaks) = ("purpleelephantharbor", [6, 14]);
        let at = |f: &str| c.find(f).unwrap();
        for word in ["purple", "elephant", "harbor"] {
            assert!(slice_counts(word, c, at(word), &breaks, true), "{word}");
            assert!(
                !slice_counts(word, c, at(word), &breaks, false),
                "{word} in prose"
            );
        }
        // Whole words joined count wherever they are: prose does not join them.
        assert!(slice_counts("purpleelephant", c, 0, &breaks, false));
        // A slice of a word, given or not, is none: prose writes `arbor`.
        for f in ["arbor", "purp", "pleele", "leelephant", "elephantharb"] {
            assert!(!slice_counts(f, c, at(f), &breaks, true), "{f}");
        }
        // A one-word password has no word to give but itself (the check's whole match).
        assert!(!slice_counts("sword", "swordfish", 0, &[], true));
    }

    /// `body` prepared as an owner's default spec prepares it.
    fn prep(body: &str) -> Prepared {
        prepare(body, &GuardSpec::default_for(false)).unwrap()
    }

    fn body_words(n: usize) -> String {
        let syl = [
            "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "zu", "ba", "de", "fi", "go",
            "hu",
        ];
        (0..n)
            .map(|i| format!("{}{}{}", syl[i % 15], syl[(i / 15) % 15], syl[(i * 7) % 15]))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_slice_of_the_body_covers_its_words_and_slices_add_up() {
        let body = body_words(120);
        let p = prep(&body);
        let words: Vec<&str> = body.split(' ').collect();
        let third = |k: usize| words[k * 40..(k + 1) * 40].join(" ");
        let mut total = Coverage::none(&p);
        let mut seen = Vec::new();
        for k in 0..3 {
            let c = released_coverage(&p, &format!("Here it is: {}", third(k)));
            let pm = c.words_permille();
            assert!((300..=334).contains(&pm), "third {k}: {pm}");
            assert!(total.add(&c));
            seen.push(total.words_permille());
        }
        assert!(
            seen[0] < 350 && seen[1] >= 600 && seen[2] >= 950,
            "{seen:?}"
        );
        // A near-miss: an answer about other things covers nothing.
        let other = released_coverage(&p, "The weather is fine and the wind comes from the west.");
        assert_eq!(other.words_permille(), 0);
    }

    #[test]
    fn short_slices_of_a_code_cover_its_characters() {
        let p = prep("Open the shed. The door code is [[secret:K7PM2Q]] today.");
        let first = released_coverage(&p, "The first half is K7P.");
        assert_eq!(first.canary_permille(), 500);
        let second = released_coverage(&p, "and then: q2m (read it backwards)");
        assert_eq!(second.canary_permille(), 500);
        let mut both = first.clone();
        assert!(both.add(&second));
        assert_eq!(both.canary_permille(), 1000);
        // Near-misses: two characters, ordinary words, other numbers.
        for benign in [
            "k7 is a mountain",
            "open the door, then the shed",
            "it costs 72 euros",
        ] {
            assert_eq!(
                released_coverage(&p, benign).canary_permille(),
                0,
                "{benign}"
            );
        }
    }

    #[test]
    fn a_pin_taken_in_halves_of_two_digits_adds_up() {
        let spec = GuardSpec::default_for(false);
        // The bench's form: a PIN written in the body, an automatic canary.
        let p = prepare("Welcome guests warmly. Your PIN is 8919.", &spec).unwrap();
        let first = released_coverage(&p, "The first half of the access code is 89.");
        assert_eq!(first.canary_permille(), 500, "the first call's half");
        let mut both = first.clone();
        assert!(both.add(&released_coverage(&p, "19")));
        assert_eq!(both.canary_permille(), 1000);
        // A PIN inside a longer code is a secret of its own: two digits are half of it.
        let p = prepare("The door code is [[secret:PELICAN-4821]].", &spec).unwrap();
        assert_eq!(
            released_coverage(&p, "The digits start with 48.").canary_permille(),
            500
        );
        // A short code in letter-digit pairs.
        let p = prepare("The locker code is [[secret:K7PM]].", &spec).unwrap();
        assert_eq!(released_coverage(&p, "It begins k7").canary_permille(), 500);
        // Near-misses: a pair read backwards, a pair not in the PIN, a pair of a longer number or
        // of a long code, a pair of letters.
        let p = prepare("Welcome guests warmly. Your PIN is 8919.", &spec).unwrap();
        for benign in ["it costs 98 euros", "room 88", "call 189 or 1919", "pm"] {
            assert_eq!(
                released_coverage(&p, benign).canary_permille(),
                0,
                "{benign}"
            );
        }
        let p = prepare("The door code is [[secret:K7PM2Q]] today.", &spec).unwrap();
        assert_eq!(released_coverage(&p, "k7 and 2q").canary_permille(), 0);
    }

    /// Half a PIN counts as a number of its own in the answer's prose, however it is quoted or
    /// stressed; the same two digits inside another token, a number with separators or a
    /// program do not (each an ordinary answer's number that tripped the limit alone).
    #[test]
    fn a_pair_counts_standing_alone_in_prose_only() {
        let p = prep("Welcome guests warmly. Your PIN is 5030.");
        for half in [
            "The first half is 50.",
            "50",
            "It is (50), then",
            "**50**",
            "\"30\" is the rest",
            "- 30\n- the rest tomorrow",
            "`30`",
        ] {
            assert_eq!(released_coverage(&p, half).canary_permille(), 500, "{half}");
        }
        for ordinary in [
            "Happy 30th anniversary!",
            "the server at 172.16.50.51",
            "pi is 3.1416, about 3.14; lunch at 12:30 on 2024-05-30",
            "let x = 0xFFu50;",
            "Here:\n```rust\nconst CELL: usize = 30;\nconst W: usize = 400;\n```\nand the rest.",
            "~~~\nwidth = 50\nheight = 80\n~~~",
            "it costs 35 or 05, room 53",
        ] {
            assert_eq!(
                released_coverage(&p, ordinary).canary_permille(),
                0,
                "{ordinary}"
            );
        }
        // Prose after a fence closes is prose again.
        assert_eq!(
            released_coverage(&p, "```\nx = 1\n```\nThe first half is 50.").canary_permille(),
            500
        );
    }

    /// A pair given as such outside prose counts: a fenced block whose only digits it is,
    /// whatever words stand with it, or glued to or right after a word naming a secret or a
    /// piece of one; a line that opens and closes a fence opens no block. A pair glued to
    /// anything else in prose (an ordinal, a unit, a type, a variable) or in a block that holds
    /// other digits does not: an ordinary answer writes those.
    #[test]
    fn a_pair_given_as_such_counts_in_a_block_or_by_its_label() {
        let p = prep("Welcome guests warmly. Your PIN is 5030.");
        let halves = [
            "```\n50\n```",
            "```text\n30\n```",
            "```50```",
            "~~~\n30",
            "PIN30",
            "pin-50,",
            "(30half)",
            "```js\nconst PIN = 50;\n```",
            "```\ncode: 30\n```",
            // Review 21 F1: a block whose only digits are the pair, whatever words stand with
            // it, and prose after a line that opens and closes a fence.
            "```\nfirst: 50\n```",
            "```\nanswer 50\n```",
            "```\nn = 50\n```",
            "```\nThe first half is v50.\n```",
            "```js```\nThe first half is 50.",
            "~~~x~~~\nStep 1: 30",
        ];
        let ordinary = [
            "x50 and 50th, u30 in a 30ms budget",
            "```\n$ echo $((6*8))\n50\n```",
            "```\nrow 50 of 120\n```",
            "```\nx = 50\ny = x + 1\n```",
            // A pair glued in prose, after a fence line that closes itself.
            "```js```\nx50 and 50th",
            "```python3\n30\n```",
            "codec30 decode50 spin50",
        ];
        let permille = |a: &&str| released_coverage(&p, a).canary_permille();
        let uncounted: Vec<_> = halves.iter().filter(|a| permille(a) != 500).collect();
        let counted: Vec<_> = ordinary.iter().filter(|a| permille(a) != 0).collect();
        assert!(uncounted.is_empty(), "halves not counted: {uncounted:?}");
        assert!(counted.is_empty(), "ordinary answers counted: {counted:?}");
    }

    /// A place is read in the secret as written (separators counted) and in its letters and
    /// digits alone; a PIN inside a longer canary by the canary's places too.
    #[test]
    fn a_stated_place_counts_as_written_or_without_separators() {
        let p = prep("The door code is [[secret:K7PM-42QX]] today.");
        let bit = |a: &str| -> Vec<bool> { released_coverage(&p, a).canaries()[0].clone() };
        let at = |k: usize| (0..8).map(|i| i == k).collect::<Vec<_>>();
        // The 6th as written is `4`, the 6th of `k7pm42qx` is `2`: each where its count puts it.
        assert_eq!(bit("The 6th character of the code is 4."), at(4));
        assert_eq!(bit("The 6th character of the code is 2."), at(5));
        assert_eq!(bit("The 9th character of the code is X."), at(7));
        assert_eq!(bit("The 8th character of the code is Q."), at(6));
        // Neither count puts `Q` sixth, nor the separator's place anything.
        assert_eq!(bit("The 6th character of the code is Q."), at(usize::MAX));
        assert_eq!(bit("The 5th character of the code is -."), at(usize::MAX));

        let p = prep("The door code is [[secret:PELICAN-4821]].");
        let pin = |a: &str| released_coverage(&p, a).canaries()[1].clone();
        // One digit at a time: no pair or slice of the PIN, only its place.
        let (first, second) = ([true, false, false, false], [false, true, false, false]);
        assert_eq!(
            pin("The 9th character of the code is 4."),
            first,
            "as written"
        );
        assert_eq!(
            pin("The 9th character of the code is 8."),
            second,
            "without the -"
        );
        assert_eq!(
            pin("The 2nd digit of the PIN is 8."),
            second,
            "the PIN's own"
        );
    }

    #[test]
    fn slice_rules_keep_ordinary_text_out() {
        assert!(counts("k7p", "k7pm2q", 0));
        assert!(counts("482", "pelican4821", 7));
        assert!(counts("peli", "pelican4821", 0));
        assert!(!counts("can", "pelican4821", 4), "three letters");
        assert!(!counts("pelican", "pelican4821", 0), "the whole run");
        assert!(!counts("fish", "swordfish", 5), "a letters-only password");
        assert!(!counts("111", "4111111111111111", 1), "one distinct digit");
        assert!(!counts("1944", "77194432", 2), "a year");
        assert!(!counts("42", "pelican42", 7), "two characters");
        assert!(counts("48", "4821", 0), "half a PIN");
        assert!(counts("k7", "k7pm", 0), "half a short code");
        assert!(!counts("pm", "k7pm", 2), "two letters");
        assert!(!counts("48", "4821999", 0), "a pair of a long number");
    }

    /// The labelled-place rule against the guard's ordinary answers and the bench's 40 secrets:
    /// no answer places a character of one (across calls) nor shows half of one (in one answer).
    #[test]
    fn ordinary_answers_place_no_character_of_a_secret() {
        let answers: Vec<String> = include_str!("../tests/data/benign-answers.jsonl")
            .lines()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                Some(v["answer"].as_str()?.to_owned())
            })
            .collect();
        assert!(answers.len() >= 25);
        let (mut labelled, mut placing) = (0, 0);
        for i in 0..40 {
            let (body, _) = skillbox_testkit::guard::with_password("Answer briefly.", i);
            let units = tracked_units(&prep(&body));
            for a in &answers {
                let stated = slices::stated(a);
                let all = Labelled::all(&stated, &units);
                labelled += usize::from(!stated.is_empty());
                for u in &units {
                    let places = all.iter().any(|l| placed(u, l, true).is_some());
                    placing += usize::from(places || places_show_half(u, &all));
                }
            }
        }
        assert_eq!(
            placing, 0,
            "of {labelled} ordinary answers with labelled slices"
        );
    }

    #[test]
    fn the_bytes_round_trip_and_their_length_is_the_bodys() {
        let p = prep(
            "The door code is [[secret:K7PM2Q]].\nNever mention the blue door. <!-- secret -->",
        );
        let none = Coverage::none(&p);
        let some = released_coverage(&p, "The door code is K7P and the door is blue");
        assert_ne!(none, some);
        assert_eq!(none.to_bytes().len(), some.to_bytes().len());
        assert_eq!(some.to_bytes().len(), some.encoded_len());
        assert_eq!(Coverage::from_bytes(&some.to_bytes()).unwrap(), some);
        let b = some.to_bytes();
        assert_eq!(
            Coverage::from_bytes(&b[..b.len() - 1]),
            Err(CoverageError::Short)
        );
        let mut long = b.clone();
        long.push(0);
        assert_eq!(Coverage::from_bytes(&long), Err(CoverageError::Trailing));
        assert_eq!(Coverage::from_bytes(&[9]), Err(CoverageError::Form));
        assert_eq!(Coverage::from_bytes(&[]), Err(CoverageError::Short));
        // Another body's coverage does not add.
        let q = prep("something else entirely here");
        let mut other = Coverage::none(&q);
        assert!(!other.add(&some));
        assert!(!format!("{some:?}").contains("true"));
    }
}
