//! Body n-grams with gaps and local reordering: a body n-gram counts as contained when its words
//! all occur within a short window of the answer's words, in any order.
//!
//! The symbol scan (`index.rs`) finds an n-gram only where its words are adjacent in some view,
//! and the views take every k-th word for k = 2, 3 only. A filler word after every third word,
//! adjacent words swapped pairwise (`w2 w1 w4 w3`), a filler letter inside every few words, or a
//! filler at no fixed period leave no four body words adjacent in any view. Here the answer is
//! read word by word instead: a body n-gram of `len` words is present when every one of its words
//! (as often as the n-gram holds it) is among [`window`]`(len)` consecutive answer words. A word
//! is a body word as written, or, for a word of [`MIN_FILLED`]+ characters that is none, with
//! one character taken out (a filler letter inside it; two from [`MIN_FILLED_TWICE`]). And a
//! copy with one word in every few changed: `len` consecutive answer words equal to a body
//! n-gram's but at one inner position, when the words left hold two or more that are not
//! common function words (at an end, a changed word would stretch every honest quote by one).
//!
//! Honest answers about the same subject use the body's words, but seldom all four words of one
//! of its n-grams within six words of each other, except in its common phrases: an n-gram made
//! of common function words only (`to the end of`) is not looked for here (its contiguous copy
//! is still found by the scan), see [`crate::prepare`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::text;

/// A multiply-rotate hasher (the words are short; SipHash was most of the window's cost).
#[derive(Default)]
pub struct Fast(u64);

impl Hasher for Fast {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<Fast>>;

/// The answer words a body n-gram of `len` words is looked for among: one and a half times
/// `len` (six for four: a filler after every second word, pairs swapped). Twice `len` flagged
/// 0.7 % of the extraction test's benign answers, against 0.5 % (see `tests/it/gaps.rs`).
fn window(len: usize) -> usize {
    len + len / 2
}
/// The window of a word game's table ([`Builder::wide`]): twice `len`, so a game written with a
/// filler word after every word (`ethay um uarterlyqay um`) or one word per numbered line still
/// holds its n-grams. Its n-grams need two marked spellings, which prose does not write.
fn wide_window(len: usize) -> usize {
    2 * len
}
/// Answer words of at least this many characters that are no body word are also read with one
/// character taken out.
pub const MIN_FILLED: usize = 3;
/// ... and with two characters taken out from this many on.
pub const MIN_FILLED_TWICE: usize = 6;

/// The windowed form of a body's n-grams (built by `prepare`).
#[derive(Default)]
pub struct Windows {
    /// Folded body word (or another spelling of it) -> its id.
    vocab: Map<String, u32>,
    /// How many ids there are.
    ids: usize,
    /// Per body n-gram start indexed here: its word ids (`len` of them, see `gram_at`).
    grams: Vec<(u32, Vec<u32>)>,
    /// Per word id: the indices in `grams` of the n-grams that hold it (each once).
    with_word: Vec<Vec<u32>>,
    /// The longest body word, in characters.
    max_word: usize,
    /// Body n-grams of up to [`SUB_MAX`] words with one word replaced by [`WILD`] -> their
    /// pattern ids: a copy with one word in every few changed.
    subs: Map<[u32; SUB_MAX], Vec<u32>>,
    /// The lengths of the n-grams in `subs`.
    sub_lens: Vec<usize>,
    /// The widest window of any n-gram here.
    widest: usize,
    /// A bit filter on (length, first word, last word) of the keys of `subs`.
    sub_ends: Vec<u64>,
    /// Whether the window is [`wide_window`].
    wide: bool,
    /// Whether the window is the n-gram's own length, and no copy with a word changed is read
    /// ([`Builder::tight`]).
    tight: bool,
    /// Marked words a match needs when the reader marks each answer word ([`Windows::scan_ids`]).
    min_marked: usize,
    /// Per length in characters: whether a body word has it.
    lens: Vec<bool>,
    /// The rolling hashes of the body words ([`hash_word`]).
    hashes: Map<u64, ()>,
    /// `BASE` to the power of the index, up to the longest word looked up.
    pow: Vec<u64>,
}

/// The longest n-gram matched with one word changed.
const SUB_MAX: usize = 8;
/// The changed word of a key in `subs`, and the padding past an n-gram's end.
const WILD: u32 = u32::MAX - 1;
const PAD: u32 = u32::MAX - 2;

impl Windows {
    /// `words`: the body's folded words; `gram_at`: per word, the pattern id of the n-gram
    /// starting there and its length (`u32::MAX` when not indexed). An n-gram of common function
    /// words only is not looked for here (`common_only`), and a word in an answer that is no body
    /// word is also read with a filler character or two taken out.
    pub fn build(words: &[String], gram_at: &[(u32, u32)]) -> Windows {
        let mut b = Builder::new(true, 1);
        let ids: Vec<u32> = words.iter().map(|w| b.word(w, !is_common(w))).collect();
        for (start, &(pat, len)) in gram_at.iter().enumerate() {
            let len = len as usize;
            if pat != u32::MAX && start + len <= words.len() {
                b.gram(pat, ids[start..start + len].to_vec());
            }
        }
        b.finish()
    }

    pub fn is_empty(&self) -> bool {
        self.grams.is_empty()
    }

    /// The id of a word (or another spelling of it) as written.
    pub(crate) fn id(&self, w: &str) -> Option<u32> {
        self.vocab.get(w).copied()
    }

    /// The answer words an n-gram of `len` words is looked for among.
    fn width(&self, len: usize) -> usize {
        if self.tight {
            len
        } else if self.wide {
            wide_window(len)
        } else {
            window(len)
        }
    }

    /// The body word id of an answer word that is none as written: one character taken out (two,
    /// from [`MIN_FILLED_TWICE`] characters on). A removal is looked up by a rolling hash of the
    /// word without that character (no string built unless a body word has that hash), and only
    /// for lengths some body word has.
    fn id_of(&self, w: &str, s: &mut Scratch) -> Option<u32> {
        let has_len = |k: usize| self.lens.get(k).copied().unwrap_or(false);
        let n = w.chars().count();
        // Longer than any body word with two fillers in it: no deletion can find one.
        if n < MIN_FILLED || n > self.max_word + 2 {
            return None;
        }
        let once = has_len(n - 1);
        let twice = n >= MIN_FILLED_TWICE && has_len(n - 2);
        if !once && !twice {
            return None;
        }
        s.cuts.clear();
        s.cuts
            .extend(w.char_indices().map(|(i, c)| (i, i + c.len_utf8())));
        s.pre.clear();
        s.pre.push(0);
        let mut h = 0u64;
        for c in w.chars() {
            h = step(h, c);
            s.pre.push(h);
        }
        let (pre, pw) = (&s.pre, &self.pow);
        // The hash of characters `a..b`.
        let part = |a: usize, b: usize| pre[b].wrapping_sub(pre[a].wrapping_mul(pw[b - a]));
        let buf = &mut s.buf;
        if once {
            for (i, &(a, b)) in s.cuts.iter().enumerate() {
                let h = pre[i]
                    .wrapping_mul(pw[n - 1 - i])
                    .wrapping_add(part(i + 1, n));
                if self.hashes.contains_key(&h) {
                    buf.clear();
                    buf.push_str(&w[..a]);
                    buf.push_str(&w[b..]);
                    if let Some(&id) = self.vocab.get(buf.as_str()) {
                        return Some(id);
                    }
                }
            }
        }
        if !twice {
            return None;
        }
        for (i, &(a, b)) in s.cuts.iter().enumerate() {
            for (j, &(c, d)) in s.cuts.iter().enumerate().skip(i + 1) {
                let h = pre[i]
                    .wrapping_mul(pw[j - i - 1])
                    .wrapping_add(part(i + 1, j))
                    .wrapping_mul(pw[n - 1 - j])
                    .wrapping_add(part(j + 1, n));
                if self.hashes.contains_key(&h) {
                    buf.clear();
                    buf.push_str(&w[..a]);
                    buf.push_str(&w[b..c]);
                    buf.push_str(&w[d..]);
                    if let Some(&id) = self.vocab.get(buf.as_str()) {
                        return Some(id);
                    }
                }
            }
        }
        None
    }

    /// Call `found` with the pattern id of every body n-gram whose words all occur within a
    /// window of the folded words of the text last split into `s` ([`Scratch::split`]; a text
    /// is split once for the plain body's windows and every transform's).
    pub fn scan_split(&self, s: &mut Scratch, found: impl FnMut(u32)) {
        if self.grams.is_empty() {
            return;
        }
        let words = std::mem::take(&mut s.words);
        let ends = std::mem::take(&mut s.ends);
        let mut ids = std::mem::take(&mut s.ids);
        ids.clear();
        {
            // Answer words that are no body word as written, looked up once each.
            let mut misses: Map<&str, u32> = Map::default();
            let mut from = 0;
            for &end in &ends {
                let w = &words[from..end];
                from = end;
                let id = match self.vocab.get(w) {
                    Some(&id) => id,
                    // Spellings are looked up as written only (see `Builder::new`).
                    None if self.lens.is_empty() => u32::MAX,
                    None => match misses.get(w) {
                        Some(&id) => id,
                        None => {
                            let id = self.id_of(w, s).unwrap_or(u32::MAX);
                            misses.insert(w, id);
                            id
                        }
                    },
                };
                ids.push(id);
            }
        }
        self.scan_ids(&ids, None, s, found);
        s.words = words;
        s.ends = ends;
        s.ids = ids;
    }

    /// [`Windows::scan_split`] over answer words already read as ids (`u32::MAX`: no body
    /// word). With `marks` (per answer word: read through a spelling that tells a copy from
    /// prose), a match also needs [`Builder::new`]'s `min_marked` distinct words of the n-gram
    /// marked within its window: a table whose words may be read as plain words too.
    pub(crate) fn scan_ids(
        &self,
        ids: &[u32],
        marks: Option<&[bool]>,
        s: &mut Scratch,
        mut found: impl FnMut(u32),
    ) {
        if self.grams.is_empty() {
            return;
        }
        let mut done = std::mem::take(&mut s.done);
        if !ids.is_empty() {
            self.substituted(ids, marks, &mut found);
            done.clear();
            done.resize(self.grams.len(), false);
            // Per body word: one past the last answer position up to `ahead` that holds it (0:
            // none), so an n-gram with a word nowhere near its anchor is passed over at once.
            let mut near = std::mem::take(&mut s.near);
            near.clear();
            near.resize(self.ids, 0);
            let mut ahead = 0;
            for (j, &id) in ids.iter().enumerate() {
                let reach = (j + self.widest).min(ids.len());
                while ahead < reach {
                    if let Some(n) = near.get_mut(ids[ahead] as usize) {
                        *n = ahead as u32 + 1;
                    }
                    ahead += 1;
                }
                let Some(anchored) = self.with_word.get(id as usize) else {
                    continue;
                };
                for &g in anchored {
                    let g = g as usize;
                    if done[g] {
                        continue;
                    }
                    let (pat, gram) = &self.grams[g];
                    let width = self.width(gram.len());
                    // Every word's last occurrence up to `ahead` is at or past the first
                    // position a window holding `j` can start at.
                    let from = (j + 1).saturating_sub(width) as u32 + 1;
                    if gram.iter().any(|&w| near[w as usize] < from) {
                        continue;
                    }
                    // Some window of `width` words holding the anchor at `j` holds the whole gram.
                    let first = (j + 1).saturating_sub(width);
                    let holds = |s: usize| {
                        let end = (s + width).min(ids.len()) - 1;
                        within(ids, end, width, gram)
                            && marks.is_none_or(|m| {
                                marked_within(ids, m, end, width, gram) >= self.min_marked
                            })
                    };
                    if (first..=j).any(holds) {
                        done[g] = true;
                        found(*pat);
                    }
                }
            }
            s.near = near;
        }
        s.done = done;
    }
}

/// Builds a [`Windows`] from a body's words as some spelling writes them: the plain body
/// ([`Windows::build`]), or the body through one of the transforms of `transforms.rs`, whose
/// words have other spellings too (aliases of one id).
pub(crate) struct Builder {
    /// Word (and alias) -> its id.
    vocab: Map<String, u32>,
    /// Per id: the word as first written.
    words_of: Vec<String>,
    /// Per id: how often the body holds it.
    freq: Vec<u32>,
    /// Per id: whether it tells a copy from ordinary prose (for the plain body: not a common
    /// function word). An n-gram needs `min_marked` such words to be looked for, and a copy
    /// with one word changed two among the words left.
    marked: Vec<bool>,
    grams: Vec<(u32, Vec<u32>)>,
    /// Whether an answer word that is no body word is read with characters taken out.
    fillers: bool,
    min_marked: usize,
    wide: bool,
    tight: bool,
}

impl Builder {
    pub(crate) fn new(fillers: bool, min_marked: usize) -> Builder {
        Builder {
            vocab: Map::default(),
            words_of: Vec::new(),
            freq: Vec::new(),
            marked: Vec::new(),
            grams: Vec::new(),
            fillers,
            min_marked,
            wide: false,
            tight: false,
        }
    }

    /// Read the table's n-grams only as consecutive answer words (in any order), and never with
    /// a word changed: the body's skip-grams (`transforms.rs`), word sequences the body itself
    /// never writes side by side, so an answer holds them side by side only when it copies
    /// every k-th word. (A window of one and a half times the n-gram caught 3 more of 200
    /// bodies written every other word and every third, and flagged a benign answer.)
    pub(crate) fn tight(&mut self) {
        self.tight = true;
    }

    /// Read the table with [`wide_window`]s (a word game's: see there).
    pub(crate) fn wide(&mut self) {
        self.wide = true;
    }

    /// The id of the body word `w`, counted once more; a new id is `marked` as given. Every
    /// body word is added before any alias (an alias never takes a word's place).
    pub(crate) fn word(&mut self, w: &str, marked: bool) -> u32 {
        if let Some(&id) = self.vocab.get(w) {
            self.freq[id as usize] += 1;
            return id;
        }
        let id = self.words_of.len() as u32;
        self.vocab.insert(w.to_owned(), id);
        self.words_of.push(w.to_owned());
        self.freq.push(1);
        self.marked.push(marked);
        id
    }

    /// The body word `id` once more (a word seen before, by its id).
    pub(crate) fn again(&mut self, id: u32) {
        self.freq[id as usize] += 1;
    }

    /// Another spelling of the word `id` (kept only when no word or alias has it already).
    pub(crate) fn alias(&mut self, w: &str, id: u32) {
        if !self.vocab.contains_key(w) {
            self.vocab.insert(w.to_owned(), id);
        }
    }

    /// A body n-gram (its pattern id and word ids), looked for when it holds `min_marked`
    /// distinct marked words.
    pub(crate) fn gram(&mut self, pat: u32, gram: Vec<u32>) {
        let marked = gram
            .iter()
            .enumerate()
            .filter(|&(k, &w)| self.marked[w as usize] && !gram[..k].contains(&w))
            .count();
        if !gram.is_empty() && marked >= self.min_marked {
            self.grams.push((pat, gram));
        }
    }

    pub(crate) fn finish(self) -> Windows {
        let Builder {
            vocab,
            words_of,
            freq,
            marked,
            grams,
            fillers,
            min_marked,
            wide,
            tight,
        } = self;
        let mut subs: Map<[u32; SUB_MAX], Vec<u32>> = Map::default();
        let mut sub_lens = Vec::new();
        let mut sub_ends = vec![0u64; (1 << SUB_ENDS_BITS) / 64];
        let mut with_word = vec![Vec::new(); words_of.len()];
        for (g, (pat, gram)) in grams.iter().enumerate() {
            let (pat, len) = (*pat, gram.len());
            // Looked for where the answer holds its rarest word (in the body), not at every
            // `the` of the answer.
            let anchor = gram
                .iter()
                .copied()
                .min_by_key(|&w| (!marked[w as usize], freq[w as usize]))
                .unwrap_or(gram[0]);
            with_word[anchor as usize].push(g as u32);
            if !tight && (4..=SUB_MAX).contains(&len) {
                for m in 1..len - 1 {
                    // The words left must be more than a common phrase.
                    let rest = (0..len)
                        .filter(|&k| k != m && marked[gram[k] as usize])
                        .count();
                    if rest < 2 {
                        continue;
                    }
                    let mut key = [PAD; SUB_MAX];
                    key[..len].copy_from_slice(gram);
                    key[m] = WILD;
                    let b = Windows::ends_bit(len, gram[0], gram[len - 1]);
                    sub_ends[b / 64] |= 1 << (b % 64);
                    let e = subs.entry(key).or_default();
                    if !e.contains(&pat) {
                        e.push(pat);
                    }
                    if !sub_lens.contains(&len) {
                        sub_lens.push(len);
                    }
                }
            }
        }
        let width = |len| {
            if tight {
                len
            } else if wide {
                wide_window(len)
            } else {
                window(len)
            }
        };
        let widest = grams.iter().map(|(_, g)| width(g.len())).max().unwrap_or(0);
        let (max_word, lens, hashes, pow) = if fillers {
            let max_word = words_of
                .iter()
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(0);
            let mut lens = vec![false; max_word + 1];
            for w in vocab.keys() {
                if let Some(l) = lens.get_mut(w.chars().count()) {
                    *l = true;
                }
            }
            let hashes = vocab.keys().map(|w| (hash_word(w), ())).collect();
            let mut pow = vec![1u64; max_word + 3];
            for k in 1..pow.len() {
                pow[k] = pow[k - 1].wrapping_mul(BASE);
            }
            (max_word, lens, hashes, pow)
        } else {
            // No removals: `id_of` finds no length to try.
            (0, Vec::new(), Map::default(), Vec::new())
        };
        Windows {
            vocab,
            ids: words_of.len(),
            grams,
            with_word,
            max_word,
            subs,
            sub_lens,
            sub_ends,
            widest,
            wide,
            tight,
            min_marked,
            lens,
            hashes,
            pow,
        }
    }
}

/// Scratch space of [`Windows::scan_split`], kept across texts so a scan allocates little.
#[derive(Default)]
pub struct Scratch {
    words: String,
    ends: Vec<usize>,
    ids: Vec<u32>,
    done: Vec<bool>,
    near: Vec<u32>,
    cuts: Vec<(usize, usize)>,
    pre: Vec<u64>,
    buf: String,
}

impl Scratch {
    /// Split `text` into its folded words for [`Windows::scan_split`].
    pub fn split(&mut self, text: &str) {
        text::words_into(text, &mut self.words, &mut self.ends);
    }
}

/// The rolling hash of a word, one character at a time (the removals of `id_of`).
fn step(h: u64, c: char) -> u64 {
    h.wrapping_mul(BASE).wrapping_add(u64::from(c) + 1)
}
const BASE: u64 = 0x9e37_79b9_7f4a_7c15;

/// The rolling hash of a whole word.
fn hash_word(w: &str) -> u64 {
    w.chars().fold(0, step)
}

impl Windows {
    /// Body n-grams copied with one word changed: `len` consecutive answer words equal to the
    /// n-gram's but at one position.
    fn substituted(&self, ids: &[u32], marks: Option<&[bool]>, found: &mut impl FnMut(u32)) {
        for &len in &self.sub_lens {
            for (at, win) in ids.windows(len).enumerate() {
                // The changed word is an inner one: both ends are body words of an n-gram with
                // those ends (a bit filter, most windows stop here).
                let (first, last) = (win[0], win[len - 1]);
                if first == u32::MAX || last == u32::MAX || !self.ends_may_be(len, first, last) {
                    continue;
                }
                // At most one word that is no body word, and then it is the changed one.
                let mut unknown = None;
                let mut several = false;
                for (m, &x) in win.iter().enumerate() {
                    if x == u32::MAX {
                        several |= unknown.is_some();
                        unknown = Some(m);
                    }
                }
                if several {
                    continue;
                }
                let mut key = [PAD; SUB_MAX];
                key[..len].copy_from_slice(win);
                for m in 1..len - 1 {
                    if unknown.is_some_and(|u| u != m) {
                        continue;
                    }
                    // The words left must be read through enough marked spellings too.
                    if let Some(marks) = marks {
                        let marks = &marks[at..at + len];
                        let marked = (0..len)
                            .filter(|&k| k != m && marks[k] && !win[..k].contains(&win[k]))
                            .count();
                        if marked < self.min_marked {
                            continue;
                        }
                    }
                    key[m] = WILD;
                    if let Some(pats) = self.subs.get(&key) {
                        pats.iter().for_each(|&p| found(p));
                    }
                    key[m] = win[m];
                }
            }
        }
    }

    /// The bit of [`Windows::sub_ends`] for an n-gram of `len` words from `first` to `last`.
    fn ends_bit(len: usize, first: u32, last: u32) -> usize {
        let h = (u64::from(first) << 32 | u64::from(last))
            .wrapping_add(len as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - SUB_ENDS_BITS)) as usize
    }

    /// Whether some key of `subs` of `len` words may start with `first` and end with `last`.
    fn ends_may_be(&self, len: usize, first: u32, last: u32) -> bool {
        let b = Self::ends_bit(len, first, last);
        self.sub_ends[b / 64] >> (b % 64) & 1 == 1
    }
}

/// The distinct words of `gram` read through a marked spelling among the `width` answer words
/// ending at `j`.
fn marked_within(ids: &[u32], marks: &[bool], j: usize, width: usize, gram: &[u32]) -> usize {
    let from = (j + 1).saturating_sub(width);
    gram.iter()
        .enumerate()
        .filter(|&(k, w)| !gram[..k].contains(w) && (from..=j).any(|i| ids[i] == *w && marks[i]))
        .count()
}

/// The bits of the filter on the ends of the n-grams matched with one word changed.
const SUB_ENDS_BITS: u32 = 16;

/// Whether every word of `gram` (as often as it holds it) is among the `width` answer words
/// ending at `j`.
fn within(ids: &[u32], j: usize, width: usize, gram: &[u32]) -> bool {
    let window = &ids[(j + 1).saturating_sub(width)..=j];
    gram.iter().all(|&w| {
        let need = gram.iter().filter(|&&x| x == w).count();
        window.iter().filter(|&&x| x == w).count() >= need
    })
}

/// Common English function words: an n-gram of these only is an ordinary phrase, found in a
/// window of any English answer.
const COMMON: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been",
    "but", "by", "can", "could", "do", "does", "each", "for", "from", "has", "have", "he", "her",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "may", "me", "more", "most",
    "must", "my", "no", "not", "of", "on", "one", "only", "or", "other", "our", "out", "over",
    "she", "should", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "up", "us", "use", "very", "was", "we", "were", "what",
    "when", "where", "which", "who", "will", "with", "would", "you", "your",
];

/// Whether `w` (a folded word) is a common function word: an n-gram of these only is an
/// ordinary phrase, and a transform's spelling that is one tells nothing.
pub(crate) fn is_common(w: &str) -> bool {
    COMMON.contains(&w)
}
