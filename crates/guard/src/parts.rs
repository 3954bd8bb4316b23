//! Secrets given in their parts (review 24b G0): `[[secret:Kestrel-Orbit-88]]` written
//! `Kestrel then Orbit then 88`, `PELICAN-42` written `Pelican, and the number 42` or `42 then
//! PELICAN`.
//!
//! A secret of two or three short parts has no n-gram of the body and no slice the fragments
//! take (`pelican` alone may be the bird), and a filler word between its parts breaks the
//! folded stream. So each canary of k parts (its letter and digit runs as written: `kestrel`,
//! `orbit`, `88`) is caught when all k parts stand as words of the answer within a window of
//! [`WINDOW_PER_PART`]·k words, in any order — the body's word windows (`window.rs`) applied to
//! the canary's own parts. A part written in leetspeak (`P3L1C4N`) counts as the part: letters
//! and the digits that stand for them are read alike ([`leet`]), for a word that mixes both.
//! Number words are read first by the caller of [`Parts::scan`] (`numbers::read`), so
//! `kestrel and orbit and eighty-eight` is the same.
//!
//! `numbers::read` leaves prose's digit names alone on purpose (a lone `seven`, two names with
//! a filler, `one two` counting up): read as digits everywhere they were half of every PIN. Next
//! to a canary's other parts they are its number part: so the scan itself reads a run of digit
//! names and single figures (`seven`, `four and two`, `one two`, `4 eight`) as the digits it
//! names, and matches a canary's digit part against that run. Only here, within the window of
//! the canary's other parts; the text's reading for every other rule stays as it was.

use std::collections::{HashMap, HashSet};

use crate::canary::CanaryOrigin;
use crate::prepare::Canary;
use crate::{text, window};

/// Answer words a window may span per part of the secret (`PELICAN-42`: six).
pub const WINDOW_PER_PART: usize = 3;

/// Most parts a secret is taken apart into here: a longer one (a passphrase of many words, a
/// marked sentence) is the body's word windows' and the folded stream's.
const MAX_PARTS: usize = 8;

/// Fewest characters of a part read through [`leet`]: a shorter word in digits is a number.
const LEET_MIN_CHARS: usize = 4;

/// Most digits of a part matched against a run of spoken digits (`four two` for `42`): a code's
/// digit part; a longer run is a number the body's other rules read.
const SPOKEN_MAX_DIGITS: usize = 8;

/// Where a part belongs: the entry in [`Parts::canaries`], and its place among the entry's parts.
type Place = (u32, u8);

/// Fewest letters of a passphrase's word read through the word games (`otter` in pig latin,
/// `elvet` without its first letter): a shorter one's spellings are stubs of many words.
const GAME_MIN_LETTERS: usize = 4;

/// Fewest words of a passphrase (letters only) caught by a majority of them: two words in order
/// of three, three of four or five. A phrase of two is caught whole.
const MAJORITY_MIN_WORDS: usize = 3;

/// Endings a passphrase's word of [`GAME_MIN_LETTERS`]+ letters is read without (`otters`,
/// `compasses`, `harbored`, `velveting`).
const STEM_ENDINGS: [&str; 4] = ["es", "s", "ed", "ing"];

/// The canaries' parts, indexed by their folded text and by their [`leet`] reading.
#[derive(Default)]
pub(crate) struct Parts {
    /// Per canary taken apart: its index in the prepared canaries, its number of parts, and
    /// whether it is a passphrase a majority of whose words is caught ([`majority_in_order`]).
    canaries: Vec<(usize, usize, bool)>,
    plain: HashMap<String, Vec<Place>>,
    leet: HashMap<String, Vec<Place>>,
    /// Digit parts (`7`, `42`) by their digits, for a run of digit names (`seven`, `four two`).
    spoken: HashMap<String, Vec<Place>>,
    /// A passphrase's words of [`GAME_MIN_LETTERS`]+ letters by their spellings in the word
    /// games (`transforms::game_spellings`: pig latin, vowels dropped, first letters dropped,
    /// vowels rotated, ubbi-dubbi).
    games: HashMap<String, Vec<Place>>,
    /// The same words by the key every order of their letters shares (`vleevt`, `cmoapss`):
    /// middles scrambled, pairs swapped, letters sorted.
    anagrams: HashMap<String, Vec<Place>>,
    /// The longest word in `anagrams`, in bytes: a longer answer word is not sorted.
    anagram_max: usize,
}

/// The digit a word names or is on its own in a run of spoken digits: a digit name
/// (`numbers::digit_name`) or a single figure (`4 eight 2`).
fn spoken_digit(w: &str) -> Option<char> {
    let mut chars = w.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_digit() => Some(c),
        _ => crate::numbers::digit_name(w),
    }
}

/// The digits the answer's last words name one at a time (`seven`, `four and two`), with at most
/// one `and` between two of them.
#[derive(Default)]
struct SpokenRun {
    digits: String,
    /// A name was in the run: a run of figures alone is matched as written (`plain`).
    named: bool,
    /// The last word was `and` after a digit.
    filler: bool,
}

impl SpokenRun {
    /// Takes the next word; the run's digits when it ended on a digit word.
    fn push(&mut self, w: &str) -> Option<&str> {
        match spoken_digit(w) {
            Some(d) => {
                if self.digits.len() >= SPOKEN_MAX_DIGITS {
                    self.digits.remove(0);
                }
                self.digits.push(d);
                self.named |= !w.starts_with(|c: char| c.is_ascii_digit());
                self.filler = false;
                self.named.then_some(self.digits.as_str())
            }
            None if w == "and" && !self.digits.is_empty() && !self.filler => {
                self.filler = true;
                None
            }
            None => {
                *self = SpokenRun::default();
                None
            }
        }
    }
}

/// A word's letters and the digits that stand for letters, read alike (`p3l1c4n` and `pelican`
/// both `peiican`; `1`, `i` and `l` are one).
fn leet(w: &str) -> String {
    w.chars()
        .map(|c| match c {
            '4' => 'a',
            '8' => 'b',
            '3' => 'e',
            '9' => 'g',
            '1' | 'l' => 'i',
            '0' => 'o',
            '5' => 's',
            '7' => 't',
            c => c,
        })
        .collect()
}

/// Whether more than half of a passphrase's words (`last`: where each was last seen, the newest
/// at `j`) stand in the phrase's order within [`WINDOW_PER_PART`] answer words each: two calls
/// of two words each give a phrase of three (`velvet otter`, then `otter compass`).
fn majority_in_order(last: &[Option<usize>], j: usize) -> bool {
    let need = last.len() / 2 + 1;
    let window = WINDOW_PER_PART * need;
    let mut prev = None;
    let mut count = 0;
    for p in last.iter().flatten() {
        if j - p >= window {
            continue;
        }
        if prev.is_some_and(|q| q >= *p) {
            return false;
        }
        prev = Some(*p);
        count += 1;
    }
    count >= need
}

/// A game's spelling that tells a part from prose: three letters or more, no common word.
fn telling(s: &str) -> bool {
    s.len() >= 3 && !window::is_common(s)
}

fn mixed(w: &str) -> bool {
    w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(|c| !c.is_ascii_digit())
}

/// A canary's parts: its folded words as written, and a single word that is letters then digits
/// (`TANGO42`) at that boundary.
fn parts_of(c: &Canary) -> Vec<String> {
    let mut parts = text::words(c.text());
    if let [one] = parts.as_slice()
        && let Some(at) = one.find(|ch: char| ch.is_ascii_digit())
        && at > 0
        && one[at..].chars().all(|ch| ch.is_ascii_digit())
    {
        let (a, b) = one.split_at(at);
        parts = vec![a.to_owned(), b.to_owned()];
    }
    parts
}

impl Parts {
    /// The parts of every canary a marker, a keyword or its look gave (a `secret` line's
    /// n-grams are caught on their own): k ≥ 2 parts by their text and [`leet`] reading, and a
    /// one-part secret with letters by its reading only (its plain form is a token the check
    /// matches already). A secret's letter-only words are also read through the word games
    /// and by their anagram key (review 28 R28-3: `elvetvay otteray ompasscay`, `vlvt ttr
    /// cmpss`, `vleevt otter cmoapss`).
    pub(crate) fn build(canaries: &[Canary]) -> Parts {
        let mut out = Parts::default();
        let mut spellings = Vec::new();
        let mut key = String::new();
        for (i, c) in canaries.iter().enumerate() {
            if c.origin() == CanaryOrigin::SecretLine {
                continue;
            }
            let parts = parts_of(c);
            if parts.is_empty() || parts.len() > MAX_PARTS {
                continue;
            }
            let entry = out.canaries.len() as u32;
            let mut used = false;
            for (k, p) in parts.iter().enumerate() {
                let place = (entry, k as u8);
                if parts.len() >= 2 {
                    out.plain.entry(p.clone()).or_default().push(place);
                    if p.len() <= SPOKEN_MAX_DIGITS && p.chars().all(|c| c.is_ascii_digit()) {
                        out.spoken.entry(p.clone()).or_default().push(place);
                    }
                    used = true;
                }
                let letters = p.chars().filter(|c| !c.is_ascii_digit()).count();
                if p.chars().count() >= LEET_MIN_CHARS && letters >= 2 {
                    out.leet.entry(leet(p)).or_default().push(place);
                    used = true;
                }
                // A secret of one word: its games without a first letter dropped, and not
                // its anagrams (`garden` and `danger`): too many ordinary words.
                let several = parts.len() >= 2;
                if p.len() >= GAME_MIN_LETTERS && p.bytes().all(|c| c.is_ascii_lowercase()) {
                    crate::transforms::game_spellings(p, &mut spellings, several);
                    for g in spellings.iter().filter(|g| telling(g)) {
                        let e = out.games.entry(g.clone()).or_default();
                        if !e.contains(&place) {
                            e.push(place);
                        }
                    }
                    if several {
                        crate::transforms::anagram_key(p, &mut key);
                        out.anagrams.entry(key.clone()).or_default().push(place);
                        out.anagram_max = out.anagram_max.max(p.len());
                    }
                    used = true;
                }
            }
            if used {
                let phrase = parts.len() >= MAJORITY_MIN_WORDS
                    && parts
                        .iter()
                        .all(|p| p.bytes().all(|c| c.is_ascii_lowercase()));
                out.canaries.push((i, parts.len(), phrase));
            }
        }
        out
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.canaries.is_empty()
    }

    /// The canaries (their index) whose parts all stand as words of `text` within a window of
    /// [`WINDOW_PER_PART`] words per part in their order (k + 1 words in another), each once,
    /// in the order found; `found` returns
    /// `true` to stop. Linear in the words of `text` (one lookup per word).
    pub(crate) fn scan(&self, text: &str, mut found: impl FnMut(usize) -> bool) {
        if self.is_empty() {
            return;
        }
        // Per entry touched: where each part was last seen.
        let mut seen: HashMap<u32, Vec<Option<usize>>> = HashMap::new();
        let mut done: Vec<u32> = Vec::new();
        let mut run = SpokenRun::default();
        let mut roman = RomanRun::default();
        let mut radix = RadixRun::default();
        // A base written as a subscript after the figures (`8F3₁₆` folds to `8f316`): read only
        // in the words written with subscript digits, so `12316` in prose stays a decimal, and
        // a `CO₂` elsewhere makes no year (`2016`) a number in base 16 (review 32 R32-7).
        let subscripted = subscripted_words(text);
        let mut key = String::new();
        let words = text::words(text);
        for (j, w) in words.iter().enumerate() {
            let plain = self.plain.get(w.as_str());
            let read = if mixed(w) {
                self.leet.get(leet(w).as_str())
            } else {
                None
            };
            // A word in a game's spelling, or its letters in another order; an answer word that
            // is the part itself is read as written (`plain`), or is the whole secret's token.
            let game = self.games.get(w.as_str());
            let anagram = if w.len() <= self.anagram_max && !window::is_common(w) {
                crate::transforms::anagram_key(w, &mut key);
                self.anagrams.get(key.as_str())
            } else {
                None
            };
            // Every digit part the run ends with (`one four two` ends `42` and `2`).
            let spoken: Vec<&Vec<Place>> = match run.push(w) {
                Some(digits) if !self.spoken.is_empty() => (0..digits.len())
                    .filter_map(|at| self.spoken.get(&digits[at..]))
                    .collect(),
                _ => Vec::new(),
            };
            // A digit part written as a Roman numeral or `0x` hex of its value (review 29
            // R29-2 d: `AMBERFOX-MMCCXCI`, `AMBERFOX-0x8F3`), or in another base or Roman form
            // (review 30 R30-7: `8F3h`, `0o4363`, `MMCCLXXXXI`; review 31 R31-5: `h8F3`,
            // `100011110011b`, `o4363`, `8F3₁₆`).
            // And one in a base a word beside it names (`AMBERFOX-4363 (octal)`, `4363 in
            // octal`, `base 8`, `binary 100011110011`: review 31's left-open form).
            let numeral: Vec<&Vec<Place>> = if plain.is_none() {
                let named = named_base(&words, j).and_then(|radix| in_radix(w, radix));
                numeral_values(w, subscripted.contains(w.as_str()))
                    .iter()
                    .chain([&named])
                    .flatten()
                    .filter_map(|v| self.plain.get(v.as_str()))
                    .collect()
            } else {
                Vec::new()
            };
            // A Roman numeral spaced or dotted (`MM CC XC I`), a number in a base written in
            // groups (`0b1000_1111_0011`, `0x8 0xF 0x3`): placed where it starts.
            let roman_runs: Vec<(&Vec<Place>, usize)> = if self.spoken.is_empty() {
                Vec::new()
            } else {
                let mut values = roman.push(j, w);
                values.extend(radix.push(j, w));
                values
            }
            .into_iter()
            .filter_map(|(at, v)| self.plain.get(v.as_str()).map(|p| (p, at)))
            .collect();
            // A passphrase's word inflected (`velvets otters compasses`, review 29 R29-2 c): a
            // light stem of a word that is no part as written, for passphrases only.
            let stems: Vec<&Place> = if plain.is_none() && w.len() > GAME_MIN_LETTERS {
                STEM_ENDINGS
                    .iter()
                    .filter_map(|e| w.strip_suffix(e))
                    .filter(|s| s.len() >= GAME_MIN_LETTERS)
                    .filter_map(|s| self.plain.get(s))
                    .flatten()
                    .filter(|&&(entry, _)| self.canaries[entry as usize].2)
                    .collect()
            } else {
                Vec::new()
            };
            let places = plain
                .into_iter()
                .chain(numeral)
                .chain(read)
                .chain(spoken)
                .chain(game)
                .chain(anagram)
                .flatten()
                .chain(stems)
                .map(|p| (p, j))
                .chain(
                    roman_runs
                        .iter()
                        .flat_map(|&(places, at)| places.iter().map(move |p| (p, at))),
                );
            for (&(entry, k), at) in places {
                if done.contains(&entry) {
                    continue;
                }
                let (canary, n, phrase) = self.canaries[entry as usize];
                let last = seen.entry(entry).or_insert_with(|| vec![None; n]);
                last[k as usize] = Some(at);
                let first = last.iter().try_fold(j, |m, p| p.map(|p| m.min(p)));
                // The last part's place: a spaced numeral is placed where it starts.
                let end = last.iter().flatten().copied().max().unwrap_or(j);
                // In the secret's order, a window of a few words per part; in another order,
                // the parts side by side or one word apart (`42 then PELICAN`): prose that names
                // them apart and in another order (`The pier is 42 metres past the pelican
                // statue`) is prose.
                let in_order = last.windows(2).all(|w| w[0] < w[1]);
                let window = if in_order { WINDOW_PER_PART * n } else { n + 1 };
                let whole = first.is_some_and(|first| end - first < window);
                if whole || (phrase && majority_in_order(last, j)) {
                    done.push(entry);
                    if found(canary) {
                        return;
                    }
                }
            }
        }
    }
}

/// Most characters of a numeral read as a code's digit part: a longer word is no code's number.
const NUMERAL_MAX_CHARS: usize = 20;

/// The decimal value of `digits` in `radix`, when every character is one of its digits.
fn in_radix(digits: &str, radix: u32) -> Option<String> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .map(|v| v.to_string())
}

/// The base the words beside a number name for it: the word after it (`4363 octal`, `(hex)`,
/// `binary`), after `in` (`4363 in octal`), `base`/`radix` and the base after it (`4363 base 8`),
/// or the word before it (`octal 4363`). Only a word that is its name: `oct` and `bin` are other
/// words too.
fn named_base(words: &[String], j: usize) -> Option<u32> {
    let at = |k: usize| words.get(k).map(String::as_str);
    let named = |w: Option<&str>| match w? {
        "octal" => Some(8),
        "hex" | "hexadecimal" => Some(16),
        "binary" => Some(2),
        _ => None,
    };
    let numbered = |w: Option<&str>| match w? {
        "2" => Some(2),
        "8" => Some(8),
        "16" => Some(16),
        _ => None,
    };
    named(at(j + 1))
        .or_else(|| (at(j + 1) == Some("in")).then(|| named(at(j + 2)))?)
        .or_else(|| matches!(at(j + 1), Some("base" | "radix")).then(|| numbered(at(j + 2)))?)
        .or_else(|| j.checked_sub(1).and_then(|b| named(at(b))))
}

/// The folded words of `text` written with subscript digits (`264₁₆` gives `26416`, `H₂O`
/// `h2o`): empty, and no work, for a text without them.
fn subscripted_words(text: &str) -> HashSet<String> {
    let is_subscript = |c: char| ('\u{2080}'..='\u{2089}').contains(&c);
    if !text.contains(is_subscript) {
        return HashSet::new();
    }
    // The pieces of the text between marks that hold a subscript digit, folded as words are.
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|piece| piece.contains(is_subscript))
        .flat_map(text::words)
        .collect()
}

/// The radix prefixes of a number in another base (`0x8f3`, `0b1000`, `0o4363`).
const RADIX_PREFIXES: [(&str, u32); 3] = [("0x", 16), ("0b", 2), ("0o", 8)];

/// The decimal values a folded word may be as a code's number in another cheap form (two at
/// most, the likelier first): a Roman numeral of two letters or more, in its one canonical form
/// (`mmccxci` is 2291) or written additively as on clocks (`mmcclxxxxi`, each letter at most
/// four times, never a smaller one before a larger; `dim`, `civil` are neither); hex with `0x`
/// (`0x8f3`), with an `x` or `h` before or an `h` after it (`x8f3`, `h8f3` and BASIC's `&H8F3`,
/// `8f3h`), or bare with a figure and a hex letter both (`#8F3` folds to `8f3`); binary with
/// `0b` or a `b` after (`100011110011b`), octal with `0o` or `o` (`o4363`) (review 30 R30-7,
/// review 31 R31-5); and, where the text writes subscript digits (`subscripts`), the figures
/// before a base of 16, 8 or 2 written after them (`8F3₁₆` folds to `8f316`).
fn numeral_values(w: &str, subscripts: bool) -> [Option<String>; 2] {
    if w.len() < 2 || w.len() > NUMERAL_MAX_CHARS {
        return [None, None];
    }
    for (prefix, radix) in RADIX_PREFIXES {
        if let Some(d) = w.strip_prefix(prefix) {
            return [in_radix(d, radix), None];
        }
    }
    let figure = |d: &&str| d.bytes().any(|b| b.is_ascii_digit());
    let subscript = || {
        [("16", 16), ("8", 8), ("2", 2)]
            .into_iter()
            .find_map(|(base, radix)| {
                w.strip_suffix(base)
                    .filter(figure)
                    .and_then(|d| in_radix(d, radix))
            })
    };
    // A binary number with its `b` after is that alone, never also hex (`100b` is 4, not
    // 0x100b: review 32 R32-7).
    if let Some(v) = w
        .strip_suffix('b')
        .filter(|d| d.len() >= 2)
        .and_then(|d| in_radix(d, 2))
    {
        return [Some(v), None];
    }
    let other = subscripts.then(subscript).flatten().or_else(|| {
        w.strip_prefix('o')
            .filter(figure)
            .and_then(|d| in_radix(d, 8))
    });
    let marked = w
        .strip_prefix('x')
        .or_else(|| w.strip_suffix('h'))
        .or_else(|| w.strip_prefix('h'));
    let hex = marked
        .filter(figure)
        .and_then(|d| in_radix(d, 16))
        .or_else(|| {
            (figure(&w) && w.bytes().any(|b| (b'a'..=b'f').contains(&b)))
                .then(|| in_radix(w, 16))
                .flatten()
        });
    match other {
        Some(v) => [Some(v), hex],
        None => [hex.or_else(|| roman_value(w)), None],
    }
}

/// A number in another base written in groups, after its base's prefix (`0b1000_1111_0011`
/// and `0b 1000 1111 0011` fold to `0b1000 1111 0011`, `0x8_F_3` to `0x8 f 3`, `0o4_363`; or a
/// prefix on each group, `0x8 0xF 0x3`): the groups joined are the number (review 31 R31-5),
/// placed where it starts. At most [`NUMERAL_MAX_CHARS`] digits kept, so each word costs a
/// bounded number of readings.
#[derive(Default)]
struct RadixRun {
    /// The run's base, 0 for no run.
    radix: u32,
    /// The run's digits written together.
    digits: String,
    /// Each word's place in the text and where its digits start in `digits`.
    starts: Vec<(usize, usize)>,
}

impl RadixRun {
    /// Take the next word (at `j`); every value the run now ends with, of two words or more,
    /// with where it starts (one word is [`numeral_values`]'s).
    fn push(&mut self, j: usize, w: &str) -> Vec<(usize, String)> {
        let prefixed = RADIX_PREFIXES
            .iter()
            .find_map(|&(p, radix)| w.strip_prefix(p).map(|d| (d, radix)));
        let group = match prefixed {
            Some((d, radix)) => {
                if radix != self.radix {
                    self.clear();
                    self.radix = radix;
                }
                d
            }
            None => w,
        };
        let digits = self.radix != 0
            && group.len() <= NUMERAL_MAX_CHARS
            && group.chars().all(|c| c.is_digit(self.radix))
            && (prefixed.is_some() || !group.is_empty());
        if !digits {
            self.clear();
            return Vec::new();
        }
        let radix = self.radix;
        run_values(&mut self.digits, &mut self.starts, j, group, |d| {
            in_radix(d, radix)
        })
    }

    fn clear(&mut self) {
        self.radix = 0;
        self.digits.clear();
        self.starts.clear();
    }
}

/// The value of a folded word of Roman letters, canonical or additive (see [`numeral_values`]).
/// No allocation: it is read at every word of a run of Roman words ([`RomanRun`]).
fn roman_value(w: &str) -> Option<String> {
    if w.len() < 2 {
        return None;
    }
    let value = |c: u8| match c {
        b'i' => Some(1u32),
        b'v' => Some(5),
        b'x' => Some(10),
        b'l' => Some(50),
        b'c' => Some(100),
        b'd' => Some(500),
        b'm' => Some(1000),
        _ => None,
    };
    let b = w.as_bytes();
    // Read it the usual way, and additively (no smaller letter before a larger, `v` `l` `d`
    // once, the others four times at most).
    let (mut total, mut sum, mut additive, mut repeat) = (0u32, 0u32, true, 0usize);
    for k in 0..b.len() {
        let v = value(b[k])?;
        let next = match b.get(k + 1) {
            Some(&n) => Some(value(n)?),
            None => None,
        };
        if next.is_some_and(|n| n > v) {
            total = total.wrapping_sub(v);
            additive = false;
        } else {
            total = total.wrapping_add(v);
        }
        sum += v;
        repeat = if k > 0 && b[k - 1] == b[k] {
            repeat + 1
        } else {
            1
        };
        let most = if matches!(v, 5 | 50 | 500) { 1 } else { 4 };
        additive &= repeat <= most;
    }
    // Canonical: the value written back is the word.
    if total > 0 && total < 4000 && is_roman_of(total, b) {
        return Some(total.to_string());
    }
    additive.then(|| sum.to_string())
}

/// Whether `w` is `n` (1-3999) as a lower-case Roman numeral in its canonical form.
fn is_roman_of(mut n: u32, mut w: &[u8]) -> bool {
    for (v, s) in ROMAN_STEPS {
        while n >= v {
            match w.strip_prefix(s.as_bytes()) {
                Some(rest) => w = rest,
                None => return false,
            }
            n -= v;
        }
    }
    w.is_empty()
}

/// Words of Roman letters side by side (`MM CC XC I`, `M.M.C.C.X.C.I` folds to `m m c c x c i`):
/// the last ones read, so a numeral spaced or dotted after a code's letter part is the part.
#[derive(Default)]
struct RomanRun {
    /// The run's words written together, its last [`NUMERAL_MAX_CHARS`] letters at most.
    letters: String,
    /// Each word's place in the text and where it starts in `letters`.
    starts: Vec<(usize, usize)>,
}

impl RomanRun {
    /// Take the next word (at `j`); every value the run now ends with, of two words or more,
    /// with where it starts. A word that is no Roman letters ends the run; the run keeps its last
    /// [`NUMERAL_MAX_CHARS`] letters, so each word costs a bounded number of readings.
    fn push(&mut self, j: usize, w: &str) -> Vec<(usize, String)> {
        if w.is_empty()
            || w.len() > NUMERAL_MAX_CHARS
            || !w.bytes().all(|b| b"ivxlcdm".contains(&b))
        {
            self.letters.clear();
            self.starts.clear();
            return Vec::new();
        }
        run_values(&mut self.letters, &mut self.starts, j, w, roman_value)
    }
}

/// Add the word `w` (at `j`) to a run of words written together (`run`, each word's place and
/// where it starts in `starts`), keep its last [`NUMERAL_MAX_CHARS`] characters and words, and
/// read every value the run ends with, of two words or more, with where it starts
/// ([`RomanRun`], [`RadixRun`]). Bounding the words as well as the characters keeps each word's
/// readings bounded where words add no characters: `0x 0x 0x …` is a run of bare prefixes, each
/// an empty group (review 32 R32-9: kept whole, every word read all the run before it, quadratic
/// in the answer, 17 s for 128 KiB in a release build).
fn run_values(
    run: &mut String,
    starts: &mut Vec<(usize, usize)>,
    j: usize,
    w: &str,
    read: impl Fn(&str) -> Option<String>,
) -> Vec<(usize, String)> {
    starts.push((j, run.len()));
    run.push_str(w);
    while run.len() > NUMERAL_MAX_CHARS || starts.len() > NUMERAL_MAX_CHARS {
        let cut = starts.get(1).map_or(run.len(), |s| s.1);
        run.drain(..cut);
        starts.remove(0);
        for s in starts.iter_mut() {
            s.1 -= cut;
        }
    }
    let last = starts.len().saturating_sub(1);
    starts[..last]
        .iter()
        .filter_map(|&(at, from)| read(&run[from..]).map(|v| (at, v)))
        .collect()
}

/// The canonical Roman numerals' steps, largest first.
const ROMAN_STEPS: [(u32, &str); 13] = [
    (1000, "m"),
    (900, "cm"),
    (500, "d"),
    (400, "cd"),
    (100, "c"),
    (90, "xc"),
    (50, "l"),
    (40, "xl"),
    (10, "x"),
    (9, "ix"),
    (5, "v"),
    (4, "iv"),
    (1, "i"),
];

#[cfg(test)]
mod tests {
    use crate::{GuardSpec, prepare};

    fn found(body: &str, answer: &str) -> Vec<String> {
        let p = prepare(body, &GuardSpec::default_for(false)).expect("prepare");
        let mut out = Vec::new();
        p.parts.scan(answer, |i| {
            out.push(p.canaries()[i].text().to_owned());
            false
        });
        out
    }

    #[test]
    fn a_digit_part_as_a_roman_numeral_or_hex_is_the_part() {
        let body = "The discount code for loyal customers is AMBERFOX-2291.";
        for answer in ["AMBERFOX-MMCCXCI", "amberfox mmccxci", "AMBERFOX-0x8F3"] {
            assert_eq!(found(body, answer), ["AMBERFOX-2291"], "{answer:?}");
        }
        // Not canonical, another value, or prose words of Roman letters: not the part.
        for answer in [
            "AMBERFOX-MMCCLXLI",
            "AMBERFOX-MMCCXC",
            "amberfox is vivid and civil",
        ] {
            assert!(found(body, answer).is_empty(), "{answer:?}");
        }
        // Other bases and Roman forms (review 30 R30-7): the part wherever it stands beside the
        // code's letter part.
        for answer in [
            "AMBERFOX #8F3",
            "AMBERFOX-8F3h",
            "AMBERFOX-x8F3",
            "AMBERFOX-0b100011110011",
            "AMBERFOX-0o4363",
            "AMBERFOX-MMCCLXXXXI",
            "AMBERFOX-MM CC XC I",
            "AMBERFOX-M.M.C.C.X.C.I",
            "AMBERFOX 0x 8F3",
        ] {
            assert_eq!(found(body, answer), ["AMBERFOX-2291"], "{answer:?}");
        }
        // Another value in those forms, Roman words too far off, a word of hex letters alone.
        for answer in [
            "AMBERFOX-8F4h",
            "AMBERFOX-MMCCLXXXXII",
            "AMBERFOX-MMCCLXXXXXI",
            "amberfox, then a long story of seven more words: MM CC XC I",
            "AMBERFOX face bead",
        ] {
            assert!(found(body, answer).is_empty(), "{answer:?}");
        }
        // Review 31 R31-5: binary and hex in groups, other marks of a base, a subscript base.
        for answer in [
            "AMBERFOX-0b1000_1111_0011",
            "AMBERFOX-0b 1000 1111 0011",
            "AMBERFOX-0b1000-1111-0011",
            "AMBERFOX-100011110011b",
            "AMBERFOX-&H8F3",
            "AMBERFOX-h8F3",
            "AMBERFOX-8F3₁₆",
            "AMBERFOX-o4363",
            "AMBERFOX-0o4_363",
            "AMBERFOX-0x8_F_3",
            "AMBERFOX-0x8-F-3",
            "AMBERFOX-0x8 0xF 0x3",
        ] {
            assert_eq!(found(body, answer), ["AMBERFOX-2291"], "{answer:?}");
        }
        // Another value in groups, groups far off, a subscript-free `…16`, versions, colours.
        for answer in [
            "AMBERFOX-0b1000_1111_0010",
            "AMBERFOX-0x8 0xF 0x4",
            "amberfox, then a long story of seven more words: 0x8 0xF 0x3",
            "AMBERFOX-8F316",
            "AMBERFOX v2.2.91, colour #2291FF, h264",
        ] {
            assert!(found(body, answer).is_empty(), "{answer:?}");
        }
        // A base named by a word beside the number (review 31's left-open form).
        for answer in [
            "AMBERFOX-4363 (octal)",
            "AMBERFOX 4363 in octal",
            "AMBERFOX: 4363, base 8",
            "AMBERFOX, octal 4363",
            "AMBERFOX-100011110011 (binary)",
            "AMBERFOX-8F3 (hexadecimal)",
        ] {
            assert_eq!(found(body, answer), ["AMBERFOX-2291"], "{answer:?}");
        }
        // Hex of figures alone is no hex without its name.
        for answer in [
            "PIXEL-264 (hex)",
            "PIXEL 264 in hexadecimal",
            "PIXEL, hex 264",
        ] {
            assert_eq!(
                found("The discount code is PIXEL-612.", answer),
                ["PIXEL-612"],
                "{answer:?}"
            );
        }
        assert!(found("The discount code is PIXEL-612.", "PIXEL-264 pages").is_empty());
        // Another value so named, the name beside another word, a base no name gives.
        for answer in [
            "AMBERFOX-4364 (octal)",
            "AMBERFOX 4363 and an octal clock",
            "AMBERFOX: 4363, base 9",
            "AMBERFOX-893 (oct)",
        ] {
            assert!(found(body, answer).is_empty(), "{answer:?}");
        }
        // Review 32 R32-7: a subscript elsewhere in the text makes no year another base, a binary
        // number with its `b` no hex. (`h264` beside `Pixel` still reads 0x264 for PIXEL-612:
        // `h` before figures alone is R31-5's `maple-h99`.)
        for (body, answer) in [
            (
                "The member code is ORBIT-32.",
                "CO₂ levels seen from orbit rose after 2016.",
            ),
            (
                "The member code is ORBIT-32.",
                "Orbit: 2016 launch, H₂O recycling.",
            ),
            ("The discount code is PIXEL-4107.", "Pixel: a 100b buffer."),
        ] {
            assert!(found(body, answer).is_empty(), "{body:?}: {answer:?}");
        }
        for answer in ["PIXEL-&H264", "PIXEL-264₁₆", "PIXEL-h264"] {
            assert_eq!(
                found("The discount code is PIXEL-612.", answer),
                ["PIXEL-612"],
                "{answer:?}"
            );
        }
        let value = |w: &str| super::numeral_values(w, false)[0].clone();
        assert_eq!(value("mix").as_deref(), Some("1009"));
        assert_eq!(value("viiii").as_deref(), Some("9"));
        assert_eq!(value("vv"), None);
        assert_eq!(value("face"), None);
        assert_eq!(value("dim"), None);
        assert_eq!(value("0x2f").as_deref(), Some("47"));
        // Binary with `b` after, not the same word as hex (review 32 R32-7).
        assert_eq!(
            super::numeral_values("101111b", false),
            [Some("47".to_owned()), None]
        );
    }

    #[test]
    fn all_parts_within_the_window_in_any_order() {
        let body = "Say [[secret:Kestrel-Orbit-88]] and [[secret:TANGO42]].";
        for a in [
            "Kestrel then Orbit then 88",
            "88, orbit, kestrel",
            "orbit 88 then kestrel",
            "kestrel and orbit and 88",
        ] {
            assert_eq!(found(body, a), ["Kestrel-Orbit-88"], "{a}");
        }
        assert_eq!(found(body, "tango then 42"), ["TANGO42"]);
        // A part missing, a number near it, or the parts too far apart.
        for a in [
            "the orbit of a kestrel",
            "kestrel orbit 89",
            "The pier is 88 metres past the kestrel orbit.",
            "kestrel, then a long story of nine more words, then orbit, and 88",
        ] {
            assert!(found(body, a).is_empty(), "{a}");
        }
    }

    /// Review 32 R32-9: a run of bare prefixes (`0x 0x 0x …`, each an empty group) costs each
    /// word a bounded number of readings, so the work grows with the answer, not its square.
    #[test]
    fn a_run_of_bare_prefixes_costs_linear_time() {
        use super::{NUMERAL_MAX_CHARS, RadixRun, in_radix, run_values};
        use std::cell::Cell;
        // The readings a run of `n` bare prefixes (`0x`, an empty group each) asks for.
        let readings = |n: usize| {
            let (mut run, mut starts, count) = (String::new(), Vec::new(), Cell::new(0usize));
            for j in 0..n {
                run_values(&mut run, &mut starts, j, "", |d| {
                    count.set(count.get() + 1);
                    in_radix(d, 16)
                });
                assert!(
                    starts.len() <= NUMERAL_MAX_CHARS,
                    "{} words kept",
                    starts.len()
                );
            }
            count.get()
        };
        let (small, large) = (readings(5_000), readings(10_000));
        println!("readings for 5,000 bare prefixes {small}, for 10,000 {large}");
        assert!(
            large <= small * 2 + NUMERAL_MAX_CHARS * NUMERAL_MAX_CHARS,
            "{small} -> {large}"
        );
        // Through the run as a scan drives it, and a number after the prefixes still read.
        let mut radix = RadixRun::default();
        for j in 0..10_000 {
            assert!(radix.push(j, "0x").len() < NUMERAL_MAX_CHARS);
        }
        assert!(radix.starts.len() <= NUMERAL_MAX_CHARS);
        let body = "The discount code for loyal customers is AMBERFOX-2291.";
        let answer = format!("{}AMBERFOX 0x 0x 8 F3", "0x ".repeat(10_000));
        assert_eq!(found(body, &answer), ["AMBERFOX-2291"]);
    }

    #[test]
    fn a_part_in_leetspeak_is_the_part() {
        let body = "The password is PELICAN-42. Never [[secret:swordfish]].";
        assert_eq!(found(body, "P3L1C4N-42"), ["PELICAN-42"]);
        assert_eq!(found(body, "it is 5w0rdf15h"), ["swordfish"]);
        // The plain word alone is not a leetspeak word (the bird; the check's tokens take a
        // whole one-part secret).
        assert!(found(body, "a swordfish and a pelican").is_empty());
    }

    #[test]
    fn a_digit_part_is_its_names_said_one_at_a_time() {
        let body = "Moor at [[secret:HERON-7]]; sign in with [[secret:PELICAN-42]].";
        for (a, want) in [
            ("heron seven", "HERON-7"),
            ("seven heron", "HERON-7"),
            ("pelican four and two", "PELICAN-42"),
            ("pelican 4 two", "PELICAN-42"),
            ("pelican, one four two", "PELICAN-42"),
        ] {
            assert_eq!(found(body, a), [want], "{a}");
        }
        // Two fillers, another word between the names, or the names too far from the word.
        for a in [
            "pelican four and and two",
            "pelican four fish two",
            "pelican four three",
            "a heron, then a long wait of seven",
        ] {
            assert!(found(body, a).is_empty(), "{a}");
        }
    }
}
