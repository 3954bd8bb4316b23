//! Body transforms: the body's words spelled as a word game spells them (pig latin, vowels
//! dropped, the first three letters of each word, ubbi-dubbi), looked for in the answer with the
//! word windows of the plain body (`window.rs`).
//!
//! Undoing these games is ambiguous without a dictionary (`ingstray` may be `string` or
//! `gstrin`; `brwn` may be `brown` or `brawn`; `str` is the start of a hundred words), but doing
//! them is not: each is a function of one word. So the body is encoded forward, once per run at
//! `prepare`, one [`Windows`] per transform whose words are the encoded body words, and an answer
//! is read word by word against each (no decoding, no new text: the walk splits each text into
//! words once for the plain windows and every transform's). A match counts as the plain n-gram
//! it encodes (the same pattern id), so the check's containment and copied-passage rules and the
//! owner's coverage and levels count it like a plain copy.
//!
//! A spelling that is an ordinary word or a stub proves nothing (`the` has no vowel to drop but
//! `th`; the first three letters of `format` are `for`; `a` without its vowel is nothing). A body
//! word is *marked* for a transform when its spelling differs from the word, has 2+ characters,
//! is no common function word and no word of the plain body; an n-gram is looked for when it holds
//! [`MIN_MARKED`] distinct marked words (a prototype of this rule, every ordinary text against the
//! 200 published prompts: with one, 18 of 45,000 matched an n-gram, `ct … s` for `cut … is` with
//! vowels dropped; with two, none), a copy with one word changed needs two among the words left,
//! a marked word's other spellings stand for it only when they are marked too (`act` is `ct` with
//! its first vowel kept, and a word), and an answer word is never read with a filler character
//! taken out (a 3-letter spelling with one of four answer letters out is too easy).
//! A word whose spelling is empty (`a`, `I` without vowels) is left out of the n-gram.
//!
//! Each game has conventions, so each word has a few spellings (at most [`MAX_SPELLINGS`]): the
//! first is the one its id is made of, the rest are aliases of it. Memory: per transform, at most
//! the plain body's n-grams, and the spellings of its distinct words.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use crate::window::{self, Builder, Fast, Scratch, Windows};

/// The word games a caller asks the model to write the body in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transform {
    /// `ingstray` for `string`, `appleway` for `apple` (`-yay`, `-ay`, `-hay` too; `qu` moved
    /// whole or not; `y` a vowel inside a word or not).
    PigLatin,
    /// `th qck brwn fx`: `a e i o u` dropped (or all but a first letter: `abt`). Vowels masked
    /// (`th* q**ck`) read the same: a word is read without the marks inside it.
    VowelsDropped,
    /// The first `k` letters of each word (`the qui bro fox` for 3); a word with a digit may
    /// stay whole.
    FirstLetters(u8),
    /// The last `k` letters of each word (`the ick own fox` for 3).
    LastLetters(u8),
    /// Ubbi-dubbi: `ub` before each vowel sound (`hubellubo`; before every vowel letter, no `ub`
    /// before a silent final `e`, `y` a vowel inside a word). Other syllables put before each
    /// vowel (Obbish `ob`, Aigy-Paigy `ag`, Javanais `av`, `ithag`, `arp`) are read as `ub`.
    UbbiDubbi,
    /// The body words each in any of the games above or as written, mixed word by word (pig
    /// latin and the plain word alternating); an n-gram still needs two marked game spellings.
    Mixed,
    /// Each word without its first `k` letters (`ou re  elpful`).
    FirstDropped(u8),
    /// Each vowel the next (`a→e→i→o→u→a`: `yuo eri e hilpfal`) or the one before.
    VowelsRotated,
    /// Each word's letters in another order: its middle reversed or scrambled (`hlpufel`), its
    /// letter pairs swapped, its letters sorted. Read by the letters' sorted key: an answer
    /// word counts as marked only when it is no body word and no common word.
    Anagram,
    /// Every `k`-th word of the body (`k` = 2, 3): a half or a third of it in order, the rest
    /// in another call. The body's skip-grams, read as consecutive answer words.
    EveryKthWord(u8),
}

/// One transform of the table: its name in a [`crate::Via`] and its spellings of a folded word
/// (written into the vector, which is cleared first; the first is the canonical one, an empty
/// first spelling means the word disappears).
struct Entry {
    kind: Transform,
    spell: fn(&str, &mut Vec<String>),
    /// How an answer word is read against the spellings: as written (`None`), or by a key made
    /// of it ([`Transform::Anagram`]).
    key: Option<KeyOf>,
}

/// Writes the key an answer word is read by into the string.
type KeyOf = fn(&str, &mut String);

/// Every transform the check reads. A new one is one entry here (and its [`Transform`] name).
/// The order is the mixed table's too: a spelling two games give two words stands for the
/// word of the first game.
const TRANSFORMS: &[Entry] = &[
    Entry {
        kind: Transform::PigLatin,
        spell: |w, out| by_letter_runs(w, out, pig_latin),
        key: None,
    },
    Entry {
        kind: Transform::VowelsDropped,
        spell: |w, out| by_letter_runs(w, out, vowels_dropped),
        key: None,
    },
    Entry {
        kind: Transform::FirstLetters(3),
        spell: |w, out| truncated(w, out, 3, true),
        key: None,
    },
    Entry {
        kind: Transform::UbbiDubbi,
        spell: |w, out| by_letter_runs(w, out, ubbi_dubbi),
        key: None,
    },
    Entry {
        kind: Transform::FirstLetters(4),
        spell: |w, out| truncated(w, out, 4, true),
        key: None,
    },
    Entry {
        kind: Transform::FirstLetters(2),
        spell: |w, out| truncated(w, out, 2, true),
        key: None,
    },
    Entry {
        kind: Transform::FirstLetters(5),
        spell: |w, out| truncated(w, out, 5, true),
        key: None,
    },
    Entry {
        kind: Transform::LastLetters(3),
        spell: |w, out| truncated(w, out, 3, false),
        key: None,
    },
    Entry {
        kind: Transform::FirstDropped(1),
        spell: |w, out| first_dropped(w, out, 1),
        key: None,
    },
    Entry {
        kind: Transform::FirstDropped(2),
        spell: |w, out| first_dropped(w, out, 2),
        key: None,
    },
    Entry {
        kind: Transform::VowelsRotated,
        spell: |w, out| by_letter_runs(w, out, vowels_rotated),
        key: None,
    },
    Entry {
        kind: Transform::Anagram,
        spell: |w, out| {
            out.clear();
            let mut k = String::new();
            sorted_letters(w, &mut k);
            out.push(k);
        },
        key: Some(sorted_letters),
    },
];

/// The skip-grams read: every second and every third body word.
const SKIPS: &[usize] = &[2, 3];

/// Marked words an n-gram must hold to be looked for in a transform's spelling.
pub const MIN_MARKED: usize = 2;
/// The most spellings one word has in one transform.
pub const MAX_SPELLINGS: usize = 8;
/// The longest syllable read as ubbi-dubbi's `ub` (`ithag`).
const MAX_SYLLABLE: usize = 5;

/// The body's n-grams in every transform's spelling (built once per run by `prepare`).
#[derive(Default)]
pub struct Transformed {
    pub(crate) tables: Vec<(Transform, Windows)>,
    /// Per table: the key an answer word is read by (`None`: as written).
    keys: Vec<Option<KeyOf>>,
    /// The plain body words: in the [`Transform::Mixed`] table a word read as written counts
    /// for its n-gram but is not marked.
    plain: HashSet<String, BuildHasherDefault<Fast>>,
    /// The longest body word in bytes: a longer answer word is no key of one.
    max_word: usize,
}

impl Transformed {
    /// `words`: the body's folded words; `gram_at`: as for [`Windows::build`].
    pub fn build(words: &[String], gram_at: &[(u32, u32)]) -> Transformed {
        let plain: HashSet<String, BuildHasherDefault<Fast>> = words.iter().cloned().collect();
        // A spelling tells a copy from prose when it is no word prose writes anyway.
        let telling =
            |s: &str| s.chars().count() >= 2 && !window::is_common(s) && !plain.contains(s);
        let mut tables = Vec::new();
        let mut keys = Vec::new();
        let mut spellings = Vec::new();
        // The mixed table: one id per distinct body word, every game's telling spellings its
        // aliases.
        let mut mixed = Builder::new(false, MIN_MARKED);
        mixed.wide();
        let mut mixed_ids: HashMap<&str, u32> = HashMap::new();
        let mut mixed_aliases: Vec<(String, u32)> = Vec::new();
        for w in words {
            let next = mixed_ids.len() as u32;
            mixed_ids.entry(w).or_insert(next);
        }
        // Per mixed id: marked (for the n-gram's rule) once some game spells it tellingly.
        let mut mixed_marked = vec![false; mixed_ids.len()];
        for t in TRANSFORMS {
            let mut b = Builder::new(false, MIN_MARKED);
            b.wide();
            // Per distinct body word: its id in this spelling (`None`: it disappears), and the
            // aliases to add once every word has its id.
            let mut seen: HashMap<&str, Option<u32>> = HashMap::new();
            let mut aliases: Vec<(String, u32)> = Vec::new();
            let mut ids: Vec<Option<u32>> = Vec::with_capacity(words.len());
            for w in words {
                if let Some(&id) = seen.get(w.as_str()) {
                    if let Some(id) = id {
                        b.again(id);
                    }
                    ids.push(id);
                    continue;
                }
                (t.spell)(w, &mut spellings);
                let id = match spellings.first() {
                    Some(first) if !first.is_empty() => {
                        // A key tells only what its word does: one of three letters or more,
                        // no common word.
                        let marked = if t.key.is_some() {
                            w.chars().count() >= 3 && !window::is_common(w)
                        } else {
                            telling(first)
                        };
                        let id = b.word(first, marked);
                        // A marked word's other spellings stand for it only when they tell as
                        // much (`act` is `ct` with its first vowel kept, and a word of prose).
                        aliases.extend(
                            spellings[1..]
                                .iter()
                                .filter(|s| !s.is_empty() && (!marked || telling(s)))
                                .map(|s| (s.clone(), id)),
                        );
                        Some(id)
                    }
                    _ => None,
                };
                // A key is no spelling an answer writes, and a word without its first letters
                // or with its vowels rotated is too often another word (`url` of `curl`) to be
                // read word by word among plain words: not in the mixed table.
                if let Some(&mid) = mixed_ids.get(w.as_str())
                    && t.key.is_none()
                    && !matches!(
                        t.kind,
                        Transform::FirstDropped(_) | Transform::VowelsRotated
                    )
                {
                    for s in spellings.iter().filter(|s| telling(s)) {
                        mixed_marked[mid as usize] = true;
                        mixed_aliases.push((s.clone(), mid));
                    }
                }
                seen.insert(w, id);
                ids.push(id);
            }
            for (s, id) in &aliases {
                b.alias(s, *id);
            }
            grams_into(&mut b, gram_at, &ids);
            let w = b.finish();
            if !w.is_empty() {
                tables.push((t.kind, w));
                keys.push(t.key);
            }
        }
        // The mixed table's words in the order of their ids, so its ids are `mixed_ids`'.
        let mut by_id: Vec<(&str, u32)> = mixed_ids.iter().map(|(w, &id)| (*w, id)).collect();
        by_id.sort_unstable_by_key(|&(_, id)| id);
        for (w, id) in by_id {
            let got = mixed.word(w, mixed_marked[id as usize]);
            debug_assert_eq!(got, id);
        }
        for w in words {
            if let Some(&id) = mixed_ids.get(w.as_str()) {
                mixed.again(id);
            }
        }
        for (s, id) in &mixed_aliases {
            mixed.alias(s, *id);
        }
        let ids: Vec<Option<u32>> = words
            .iter()
            .map(|w| mixed_ids.get(w.as_str()).copied())
            .collect();
        grams_into(&mut mixed, gram_at, &ids);
        let w = mixed.finish();
        if !w.is_empty() {
            tables.push((Transform::Mixed, w));
            keys.push(None);
        }
        // Every k-th body word: the words as written, an n-gram of the body's k-th words from
        // each start an n-gram is indexed at, counted as that n-gram (its words are the body's
        // passage it spans, a k-th of it given). Two marked words (three letters or more, no
        // common word: a URL's numbers and parts repeat in any technical answer), side by side
        // only: the body never writes these words in that sequence, an answer does when it
        // copies them.
        for &k in SKIPS {
            let mut b = Builder::new(false, MIN_MARKED);
            b.tight();
            let ids: Vec<u32> = words
                .iter()
                .map(|w| {
                    let letters = w.chars().filter(|c| c.is_alphabetic()).count();
                    b.word(w, letters >= 3 && !window::is_common(w))
                })
                .collect();
            for (start, &(pat, len)) in gram_at.iter().enumerate() {
                let len = len as usize;
                if pat == u32::MAX || len < 2 || start + k * (len - 1) >= ids.len() {
                    continue;
                }
                b.gram(pat, (0..len).map(|i| ids[start + k * i]).collect());
            }
            let w = b.finish();
            if !w.is_empty() {
                tables.push((Transform::EveryKthWord(k as u8), w));
                keys.push(None);
            }
        }
        let max_word = words.iter().map(String::len).max().unwrap_or(0);
        Transformed {
            tables,
            keys,
            plain,
            max_word,
        }
    }

    /// Read the text last split into `r` against the `t`-th table: `found` gets the pattern id
    /// of every body n-gram its words spell. Per answer word at most `2 + MAX_SYLLABLE` lookups.
    pub(crate) fn scan(&self, t: usize, r: &mut Reading, s: &mut Scratch, found: impl FnMut(u32)) {
        let Some((kind, table)) = self.tables.get(t) else {
            return;
        };
        if table.is_empty() {
            return;
        }
        let mixed = *kind == Transform::Mixed;
        let syllables = mixed || *kind == Transform::UbbiDubbi;
        let key = self.keys.get(t).copied().flatten();
        let max_word = self.max_word;
        let Reading {
            words,
            ends,
            tokens,
            ids,
            marks,
            candidates,
        } = r;
        ids.clear();
        marks.clear();
        // The id of an answer word in this table, and whether it was read through a game's
        // spelling (in the mixed table, a plain body word is read but not marked).
        let mut keyed = String::new();
        let mut read = |w: &str| -> Option<(u32, bool)> {
            if let Some(key) = key {
                // A word longer than any body word is no key of one (and is not sorted).
                if w.len() > max_word {
                    return None;
                }
                key(w, &mut keyed);
                let marked = !self.plain.contains(w) && !window::is_common(w);
                return table.id(&keyed).map(|id| (id, marked));
            }
            if mixed && self.plain.contains(w) {
                return table.id(w).map(|id| (id, false));
            }
            if let Some(id) = table.id(w) {
                return Some((id, true));
            }
            if syllables {
                syllable_as_ub(w, candidates);
                return candidates
                    .iter()
                    .find_map(|c| table.id(c))
                    .map(|id| (id, true));
            }
            None
        };
        let start = |i: usize| if i == 0 { 0 } else { ends[i - 1] };
        for &(a, b) in tokens.iter() {
            let (a, b) = (a as usize, b as usize);
            // A token whose marks split it into words (`e-thay`, `q**rt*rly`): read whole
            // first, as the game's word it is.
            if b - a > 1
                && let Some((id, true)) = read(&words[start(a)..ends[b - 1]])
            {
                ids.push(id);
                marks.push(true);
                continue;
            }
            for i in a..b {
                let w = &words[start(i)..ends[i]];
                match read(w) {
                    Some((id, m)) => {
                        ids.push(id);
                        marks.push(m);
                    }
                    // A list's numbers (`1.`, `2)`) are no word of the game: left out, so a
                    // word per numbered line reads as the words.
                    None if w.bytes().all(|c| c.is_ascii_digit()) => {}
                    None => {
                        ids.push(u32::MAX);
                        marks.push(false);
                    }
                }
            }
        }
        let marked = mixed || key.is_some();
        table.scan_ids(ids, marked.then_some(&marks[..]), s, found);
    }
}

/// The n-grams of `gram_at` in the words' ids of one table (a word that disappears is left out).
fn grams_into(b: &mut Builder, gram_at: &[(u32, u32)], ids: &[Option<u32>]) {
    for (start, &(pat, len)) in gram_at.iter().enumerate() {
        let len = len as usize;
        if pat == u32::MAX || start + len > ids.len() {
            continue;
        }
        b.gram(
            pat,
            ids[start..start + len].iter().flatten().copied().collect(),
        );
    }
}

/// A text split for the transforms' tables: its folded words, grouped by whitespace token.
#[derive(Default)]
pub struct Reading {
    words: String,
    /// The end of each word in `words`.
    ends: Vec<usize>,
    /// Per whitespace token with a word in it: its words, `[a, b)` in `ends`.
    tokens: Vec<(u32, u32)>,
    ids: Vec<u32>,
    marks: Vec<bool>,
    candidates: Vec<String>,
}

impl Reading {
    /// Split `text` (as `text::words_into` does, tokens kept).
    pub fn split(&mut self, text: &str) {
        self.words.clear();
        self.ends.clear();
        self.tokens.clear();
        for tok in text.split_whitespace() {
            let a = self.ends.len();
            let mut last = self.words.len();
            for c in tok.chars() {
                let before = self.words.len();
                crate::text::fold(c, |f| self.words.push(f));
                if self.words.len() == before && before > last {
                    self.ends.push(before);
                    last = before;
                }
            }
            if self.words.len() > last {
                self.ends.push(self.words.len());
            }
            if self.ends.len() > a {
                self.tokens.push((a as u32, self.ends.len() as u32));
            }
        }
    }
}

/// An answer word whose every vowel run has one syllable before it, read with `ub` for that
/// syllable (`thobe`, `thage`, `thave` → `thube`): the syllable games are ubbi-dubbi with
/// another syllable. The syllable starts at the word's first vowel (the game put it there),
/// ends before a vowel, is 2 to [`MAX_SYLLABLE`] letters and ends with a consonant: at most four
/// candidates.
fn syllable_as_ub(w: &str, out: &mut Vec<String>) {
    out.clear();
    let b = w.as_bytes();
    if !b.iter().all(u8::is_ascii_lowercase) {
        return;
    }
    let Some(i) = b.iter().position(|&c| vowel(c)) else {
        return;
    };
    for l in 2..=MAX_SYLLABLE {
        if i + l >= b.len() {
            break;
        }
        let x = &b[i..i + l];
        if vowel(x[l - 1]) || !vowel(b[i + l]) || x == b"ub" {
            continue;
        }
        let mut s = String::with_capacity(b.len());
        let mut j = 0;
        while j < b.len() {
            if b[j..].starts_with(x) && j + l < b.len() && vowel(b[j + l]) {
                s.push_str("ub");
                j += l;
            } else {
                s.push(char::from(b[j]));
                j += 1;
            }
        }
        out.push(s);
    }
}

fn vowel(c: u8) -> bool {
    matches!(c, b'a' | b'e' | b'i' | b'o' | b'u')
}

/// The spellings of `w` with `f` applied to each run of ASCII letters (digits and other
/// letters kept as they are: `u32` is `uway32` in pig latin), the runs' spellings combined, at
/// most [`MAX_SPELLINGS`].
fn by_letter_runs(w: &str, out: &mut Vec<String>, f: fn(&str, &mut Vec<String>)) {
    out.clear();
    out.push(String::new());
    let mut run_spellings = Vec::new();
    let b = w.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let letters = b[i].is_ascii_lowercase();
        let mut j = i;
        while j < b.len() && b[j].is_ascii_lowercase() == letters {
            j += 1;
        }
        // `j` is at a char boundary: ASCII letters are single bytes, and the other run ends
        // only before one.
        let run = &w[i..j];
        if letters {
            f(run, &mut run_spellings);
            let mut next = Vec::with_capacity(out.len() * run_spellings.len());
            for o in out.iter() {
                for s in &run_spellings {
                    if next.len() < MAX_SPELLINGS {
                        next.push(format!("{o}{s}"));
                    }
                }
            }
            *out = next;
        } else {
            for o in out.iter_mut() {
                o.push_str(run);
            }
        }
        i = j;
    }
    dedup(out);
}

/// Pig latin of a run of letters: the consonants before the first vowel moved to the end and
/// `ay` added; a run that starts with a vowel gets `way` (or `yay`, `ay`, `hay`).
fn pig_latin(r: &str, out: &mut Vec<String>) {
    out.clear();
    let b = r.as_bytes();
    for y_vowel in [false, true] {
        for qu in [false, true] {
            let is_vowel = |i: usize| vowel(b[i]) || (y_vowel && i > 0 && b[i] == b'y');
            let mut i = (0..b.len()).find(|&i| is_vowel(i)).unwrap_or(b.len());
            if qu && i > 0 && i < b.len() && b[i] == b'u' && b[i - 1] == b'q' {
                i += 1;
            }
            if i == 0 {
                for end in ["way", "yay", "ay", "hay"] {
                    out.push(format!("{r}{end}"));
                }
            } else {
                out.push(format!("{}{}ay", &r[i..], &r[..i]));
            }
        }
    }
    dedup(out);
}

/// `out` without its repeats, in order (a few spellings: a quadratic pass is the cheap one).
fn dedup(out: &mut Vec<String>) {
    let mut k = 1;
    while k < out.len() {
        if out[..k].contains(&out[k]) {
            out.remove(k);
        } else {
            k += 1;
        }
    }
}

/// A run of letters without its vowels; also with a first vowel kept (`abt`).
fn vowels_dropped(r: &str, out: &mut Vec<String>) {
    out.clear();
    out.push(r.chars().filter(|&c| !vowel(c as u8)).collect());
    let mut first = r.chars();
    if let Some(c) = first.next() {
        let mut kept = String::from(c);
        kept.extend(first.filter(|&c| !vowel(c as u8)));
        out.push(kept);
    }
}

/// A word without its first `k` characters; a word with a digit is also kept whole, first (as
/// [`truncated`]). A word of `k` characters or fewer disappears.
fn first_dropped(w: &str, out: &mut Vec<String>, k: usize) {
    out.clear();
    let cut: String = w.chars().skip(k).collect();
    if w.chars().any(|c| c.is_ascii_digit()) {
        out.push(w.to_owned());
        if !cut.is_empty() {
            out.push(cut);
        }
    } else {
        out.push(cut);
    }
}

/// A run of letters with each vowel the next (`a→e→i→o→u→a`), and with each the one before.
fn vowels_rotated(r: &str, out: &mut Vec<String>) {
    const V: &[u8] = b"aeiou";
    out.clear();
    for by in [1, V.len() - 1] {
        out.push(
            r.bytes()
                .map(|c| match V.iter().position(|&v| v == c) {
                    Some(i) => char::from(V[(i + by) % V.len()]),
                    None => char::from(c),
                })
                .collect(),
        );
    }
}

/// A word's characters sorted (the key of every order of its letters), into `out`.
fn sorted_letters(w: &str, out: &mut String) {
    let mut c: Vec<char> = w.chars().collect();
    c.sort_unstable();
    out.clear();
    out.extend(c);
}

/// The spellings of a word in the games a passphrase's words are read through too
/// (`parts.rs`): every game of [`TRANSFORMS`] that changes each letter's place or drops a
/// vowel or a first letter, not the truncations (`vel` is the start of many words) and not
/// the keyed ones (read by their key, [`anagram_key`]). At most [`MAX_SPELLINGS`] per game.
/// Without `drops`, not the first letters dropped either (`bright` is `right` without its
/// first letter: for a secret of one word, too common a word).
pub(crate) fn game_spellings(w: &str, out: &mut Vec<String>, drops: bool) {
    out.clear();
    let mut one = Vec::new();
    for t in TRANSFORMS {
        if t.key.is_some()
            || matches!(
                t.kind,
                Transform::FirstLetters(_) | Transform::LastLetters(_)
            )
            || (!drops && matches!(t.kind, Transform::FirstDropped(_)))
        {
            continue;
        }
        (t.spell)(w, &mut one);
        out.extend(one.drain(..).filter(|s| !s.is_empty() && s != w));
    }
    dedup(out);
}

/// The key every order of a word's letters shares (its letters sorted).
pub(crate) fn anagram_key(w: &str, out: &mut String) {
    sorted_letters(w, out);
}

/// Ubbi-dubbi of a run of letters: `ub` before each run of vowels; also before every vowel,
/// without one before a silent final `e` (`mubake`), and with `y` a vowel inside the word.
fn ubbi_dubbi(r: &str, out: &mut Vec<String>) {
    out.clear();
    let b = r.as_bytes();
    for y_vowel in [false, true] {
        let is_vowel = |i: usize| vowel(b[i]) || (y_vowel && i > 0 && b[i] == b'y');
        let vowels = (0..b.len()).filter(|&i| is_vowel(i)).count();
        // A final `e` after a consonant is silent when the word has another vowel.
        let silent =
            b.len() >= 3 && b[b.len() - 1] == b'e' && !is_vowel(b.len() - 2) && vowels >= 2;
        for (each, keep_silent) in [(false, false), (true, false), (false, true)] {
            if keep_silent && !silent {
                continue;
            }
            let mut s = String::with_capacity(r.len() * 2);
            for (i, &c) in b.iter().enumerate() {
                let starts = is_vowel(i) && (each || i == 0 || !is_vowel(i - 1));
                let quiet = keep_silent && i == b.len() - 1;
                if starts && !quiet {
                    s.push_str("ub");
                }
                s.push(char::from(c));
            }
            out.push(s);
        }
    }
    dedup(out);
}

/// The first (or last) `k` characters of a word; a word with a digit is also kept whole, first
/// (a number is written as it is).
fn truncated(w: &str, out: &mut Vec<String>, k: usize, first: bool) {
    out.clear();
    let n = w.chars().count();
    let cut: String = if first {
        w.chars().take(k).collect()
    } else {
        w.chars().skip(n.saturating_sub(k)).collect()
    };
    if w.chars().any(|c| c.is_ascii_digit()) {
        out.push(w.to_owned());
        if cut != w {
            out.push(cut);
        }
    } else {
        out.push(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spell(t: Transform, w: &str) -> Vec<String> {
        let e = TRANSFORMS.iter().find(|e| e.kind == t).unwrap();
        let mut out = Vec::new();
        (e.spell)(w, &mut out);
        out
    }

    #[test]
    fn each_transform_spells_a_word_as_its_game_does() {
        use Transform::*;
        assert_eq!(spell(PigLatin, "string")[0], "ingstray");
        assert_eq!(spell(PigLatin, "apple")[0], "appleway");
        assert!(spell(PigLatin, "apple").contains(&"appleyay".to_owned()));
        assert!(spell(PigLatin, "quick").contains(&"ickquay".to_owned()));
        assert!(spell(PigLatin, "quick").contains(&"uickqay".to_owned()));
        assert!(spell(PigLatin, "rhythm").contains(&"ythmrhay".to_owned()));
        assert_eq!(spell(PigLatin, "u32")[0], "uway32");
        assert_eq!(spell(VowelsDropped, "quick")[0], "qck");
        assert_eq!(spell(VowelsDropped, "about"), ["bt", "abt"]);
        assert_eq!(spell(VowelsDropped, "a")[0], "");
        assert_eq!(spell(FirstLetters(3), "brown"), ["bro"]);
        assert_eq!(spell(FirstLetters(3), "fox"), ["fox"]);
        assert_eq!(spell(FirstLetters(3), "2024"), ["2024", "202"]);
        assert_eq!(spell(UbbiDubbi, "hello")[0], "hubellubo");
        assert_eq!(spell(UbbiDubbi, "speak")[0], "spubeak");
        assert!(spell(UbbiDubbi, "speak").contains(&"spubeubak".to_owned()));
        assert!(spell(UbbiDubbi, "make").contains(&"mubake".to_owned()));
        assert!(spell(UbbiDubbi, "happy").contains(&"hubappuby".to_owned()));
        assert_eq!(spell(FirstLetters(2), "quarterly"), ["qu"]);
        assert_eq!(spell(FirstLetters(4), "quarterly"), ["quar"]);
        assert_eq!(spell(LastLetters(3), "quarterly"), ["rly"]);
        assert_eq!(spell(LastLetters(3), "v2.1x"), ["v2.1x", ".1x"]);
        for t in TRANSFORMS {
            let mut out = Vec::new();
            (t.spell)("antidisestablishmentarianism42x7y", &mut out);
            assert!(out.len() <= MAX_SPELLINGS);
            (t.spell)("", &mut out);
            assert!(out.iter().all(String::is_empty));
        }
    }

    #[test]
    fn another_syllable_before_each_vowel_is_read_as_ubbi_dubbis() {
        let read = |w: &str| {
            let mut out = Vec::new();
            syllable_as_ub(w, &mut out);
            out
        };
        assert!(read("thobe").contains(&"thube".to_owned()));
        assert!(read("qaguartagerly").contains(&"qubuartuberly".to_owned()));
        assert!(read("rithagepithagort").contains(&"rubepubort".to_owned()));
        // Bounded: one candidate per syllable length, none for a word without a vowel or with
        // a letter outside a-z.
        assert!(read("abracadabra").len() < MAX_SYLLABLE);
        assert!(read("rhythm").is_empty());
        assert!(read("h\u{e9}llo").is_empty());
    }

    #[test]
    fn a_token_is_read_whole_and_as_its_words() {
        let mut r = Reading::default();
        r.split("1. e-thay, q**rt*rly x");
        assert_eq!(r.words, "1ethayqrtrlyx");
        assert_eq!(r.ends, [1, 2, 6, 7, 9, 12, 13]);
        assert_eq!(r.tokens, [(0, 1), (1, 3), (3, 6), (6, 7)]);
    }

    #[test]
    fn n_grams_of_stubs_and_ordinary_spellings_are_not_looked_for() {
        let words: Vec<String> = "a cut is a cut".split(' ').map(str::to_owned).collect();
        let gram_at = vec![(0, 4), (1, 4), (u32::MAX, 0), (u32::MAX, 0), (u32::MAX, 0)];
        let t = Transformed::build(&words, &gram_at);
        // Pig latin marks every word; vowels dropped leaves `ct` (marked) and `s` (a stub).
        let kinds: Vec<Transform> = t.tables.iter().map(|(k, _)| *k).collect();
        assert!(kinds.contains(&Transform::PigLatin));
        assert!(!kinds.contains(&Transform::VowelsDropped));
        // The first three letters of short words are the words.
        assert!(!kinds.contains(&Transform::FirstLetters(3)));
    }
}
