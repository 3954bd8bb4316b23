//! The check: is an answer carrying the body or one of its secrets?

use std::borrow::Cow;

use crate::canary::CanaryOrigin;
use crate::decode::{self, Decoded, View};
use crate::prepare::Prepared;
use crate::text;

/// How deep decoders nest (base64 inside hex, base64 inside base64, ROT47 inside base32).
const MAX_DEPTH: usize = 2;
/// Uncovered words a copied passage may skip and still count as one passage.
const PASSAGE_GAP: usize = 2;

/// Where a catch was found: the decoded text and the view of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Via {
    pub decoded: Decoded,
    pub view: View,
}

/// Why an answer was caught. For tests and metrics inside the owner's node only: it must never
/// reach the caller, and the receipt carries no more than "the guard acted".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The answer covers at least `threshold_permille` of the body's words.
    Containment,
    /// The answer copies a passage of at least `max_copied_words` body words.
    CopiedWords,
    /// An n-gram of a line the owner marked `secret`.
    SecretLine,
    /// A canary, in some form.
    Canary(CanaryOrigin),
}

impl Reason {
    /// A stable code for metrics.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Containment => "containment",
            Reason::CopiedWords => "copied_words",
            Reason::SecretLine => "secret_line",
            Reason::Canary(_) => "canary",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Catch {
    pub reason: Reason,
    pub via: Via,
}

/// The guard's verdict on one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Clean,
    Caught(Catch),
}

impl Verdict {
    pub fn is_caught(&self) -> bool {
        matches!(self, Verdict::Caught(_))
    }
}

/// The full measure of an answer against a body (no early exit): what the check decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measure {
    /// Body words covered by n-grams the answer contains (in any decoded form).
    pub covered_words: usize,
    /// Covered words in the longest copied passage (gaps of up to two words bridged).
    pub longest_passage: usize,
    /// The covered words, per mille of the body's words.
    pub covered_permille: u32,
    pub secret_line: bool,
    pub canary: bool,
}

struct Scan<'p> {
    p: &'p Prepared,
    matched: Vec<bool>,
    new_matches: bool,
    secret: Option<Via>,
    canary: Option<(usize, Via)>,
    buf: Vec<u8>,
    window: crate::window::Scratch,
    /// The walked text split for the word games' tables.
    reading: crate::transforms::Reading,
}

impl<'p> Scan<'p> {
    fn new(p: &'p Prepared) -> Self {
        Scan {
            p,
            matched: vec![false; p.gram_patterns],
            new_matches: false,
            secret: None,
            canary: None,
            buf: Vec::new(),
            window: Default::default(),
            reading: Default::default(),
        }
    }

    fn stream(&mut self, syms: &[u8], via: Via) {
        let p = self.p;
        // Every k-th word joins words an ordinary answer holds apart (`the pelican is 42` would
        // be `pelican42`): that view is for body words with filler words between them, so it
        // finds n-grams only, never a canary.
        let canaries = !matches!(via.view, View::EveryKthWord { .. });
        p.index.scan(syms, |id| {
            let id = id as usize;
            if id < p.gram_patterns {
                self.gram(id, via);
            } else if canaries && self.canary.is_none() {
                self.canary = Some((p.long_canary[id - p.gram_patterns], via));
            }
        });
    }

    /// The body n-gram pattern `id` was found.
    fn gram(&mut self, id: usize, via: Via) {
        if !self.matched[id] {
            self.matched[id] = true;
            self.new_matches = true;
            if self.p.secret_gram[id] && self.secret.is_none() {
                self.secret = Some(via);
            }
        }
    }

    /// Body n-grams whose words all occur within a short window of the text's words. Splits
    /// `text` into the words (and tokens) [`Scan::transformed`] reads too.
    fn windows(&mut self, text: &str, decoded: Decoded) {
        let p = self.p;
        if p.windows.is_empty() && p.transformed.tables.is_empty() {
            return;
        }
        let via = Via {
            decoded,
            view: View::WordWindow,
        };
        let mut scratch = std::mem::take(&mut self.window);
        scratch.split(text);
        p.windows
            .scan_split(&mut scratch, |id| self.gram(id as usize, via));
        self.window = scratch;
        if !p.transformed.tables.is_empty() {
            self.reading.split(text);
        }
    }

    /// The same for the n-grams as the `t`-th transform spells them, in the words the last
    /// [`Scan::windows`] split: a token split by marks inside it read whole too (`e-thay`,
    /// `q**rt*rly`), a list's numbers left out, and the words within a wider window (a filler
    /// word after each; `transforms.rs`).
    fn transformed(&mut self, t: usize, via: Via) {
        let p = self.p;
        let mut scratch = std::mem::take(&mut self.window);
        let mut reading = std::mem::take(&mut self.reading);
        p.transformed.scan(t, &mut reading, &mut scratch, |id| {
            self.gram(id as usize, via)
        });
        self.window = scratch;
        self.reading = reading;
    }

    /// Canaries as whole tokens (also reversed, spaced out, or with a filler inside), or as
    /// their parts within a short window (`parts.rs`); in the text as written and with its
    /// numbers written as words read as digits (`numbers.rs`: `forty-eight twenty-one`).
    /// `known` is the text's reading when the caller has it already (the answer's, read once
    /// per check); otherwise it is read here, only when a canary may still be found.
    fn tokens(&mut self, text: &str, known: Option<Option<&str>>, decoded: Decoded) {
        if self.p.token_canaries.is_empty() || self.canary.is_some() {
            return;
        }
        let read;
        let reading = match known {
            Some(r) => r,
            None => {
                read = crate::numbers::read(text);
                read.as_deref()
            }
        };
        let texts = [Some(text), reading];
        let hit = texts.iter().flatten().find_map(|t| {
            self.token_hit(t, decoded)
                .or_else(|| self.parts_hit(t, decoded))
        });
        if hit.is_some() {
            self.canary = hit;
        }
    }

    /// The first canary whose parts all stand within a window of `text`'s words.
    fn parts_hit(&self, text: &str, decoded: Decoded) -> Option<(usize, Via)> {
        let mut hit = None;
        self.p.parts.scan(text, |i| {
            hit = Some(i);
            true
        });
        let view = View::WordWindow;
        hit.map(|i| (i, Via { decoded, view }))
    }

    /// The first canary `text` writes as a token (see [`Scan::tokens`]).
    fn token_hit(&self, text: &str, decoded: Decoded) -> Option<(usize, Via)> {
        let check = |word: &str, view: View| -> Option<(usize, Via)> {
            let n = word.chars().count();
            if !self.p.token_lens.contains(&n) {
                return None;
            }
            let canon = text::shift_canonical(word);
            if let Some(&i) = self.p.token_canaries.get(&canon) {
                return Some((i, Via { decoded, view }));
            }
            let rev: String = word.chars().rev().collect();
            let via = Via {
                decoded,
                view: View::Reversed,
            };
            self.p
                .token_canaries
                .get(&text::shift_canonical(&rev))
                .map(|&i| (i, via))
        };
        // A word, and its letter and digit runs when it mixes them (`PIN4821`, or
        // `thepinis4821` from spaced-out letters without word breaks).
        let check_runs = |w: &str| -> Option<(usize, Via)> {
            check(w, View::Plain).or_else(|| {
                let mixed =
                    w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(|c| !c.is_ascii_digit());
                if !mixed {
                    return None;
                }
                let mut start = 0;
                let mut hit = None;
                let b: Vec<(usize, char)> = w.char_indices().collect();
                for k in 1..=b.len() {
                    let boundary =
                        k == b.len() || b[k].1.is_ascii_digit() != b[k - 1].1.is_ascii_digit();
                    if boundary {
                        let end = if k == b.len() { w.len() } else { b[k].0 };
                        hit = hit.or_else(|| check(&w[b[start].0..end], View::Plain));
                        start = k;
                    }
                }
                hit
            })
        };
        let mut hit = first_token(text, check_runs);
        if hit.is_none() {
            for tok in text.split_whitespace() {
                for offset in 0..2 {
                    let t: String = tok.chars().skip(offset).step_by(2).collect();
                    let f = text::compact(&t);
                    let view = View::TokenInterleaved {
                        k: 2,
                        offset: offset as u8,
                    };
                    hit = hit.or_else(|| check(&f, view));
                }
            }
        }
        if hit.is_none() && !self.p.fragment_keys.is_empty() {
            // Fragments: a slice of a canary written as a token (forwards or backwards), one
            // per answer — the halves of a code asked for over two calls.
            let fragment = |w: &str| -> Option<(usize, Via)> {
                if let Some(i) = self.p.fragment(w) {
                    let view = View::Plain;
                    return Some((i, Via { decoded, view }));
                }
                let rev: String = w.chars().rev().collect();
                let view = View::Reversed;
                self.p.fragment(&rev).map(|i| (i, Via { decoded, view }))
            };
            hit = first_token(text, fragment);
        }
        hit
    }

    /// (body words covered, covered words in the longest passage). A passage is a stretch of
    /// covered words with gaps of at most [`PASSAGE_GAP`] words: a chunk copied with a slip here
    /// and there, as opposed to common phrases scattered over a long body.
    fn covered(&self) -> (usize, usize) {
        let mut until = 0;
        let mut covered = 0;
        let (mut passage, mut best, mut gap) = (0, 0, 0);
        for (i, &(id, len)) in self.p.gram_at.iter().enumerate() {
            if id != u32::MAX && self.matched[id as usize] {
                until = until.max(i + len as usize);
            }
            if i < until {
                covered += 1;
                passage += 1;
                gap = 0;
                best = best.max(passage);
            } else {
                gap += 1;
                if gap > PASSAGE_GAP {
                    passage = 0;
                }
            }
        }
        (covered, best)
    }

    /// The catch the state so far amounts to, if any.
    fn verdict(&mut self, via: Via) -> Option<Catch> {
        if let Some((i, via)) = self.canary {
            let origin = self.p.canaries()[i].origin();
            return Some(Catch {
                reason: Reason::Canary(origin),
                via,
            });
        }
        if let Some(via) = self.secret {
            return Some(Catch {
                reason: Reason::SecretLine,
                via,
            });
        }
        if !self.new_matches {
            return None;
        }
        self.new_matches = false;
        let spec = &self.p.spec;
        let (covered, passage) = self.covered();
        let w = self.p.word_count;
        if w > 0 && covered * 1000 >= spec.threshold_permille as usize * w {
            return Some(Catch {
                reason: Reason::Containment,
                via,
            });
        }
        if spec.max_copied_words != 0 && passage >= spec.max_copied_words as usize {
            return Some(Catch {
                reason: Reason::CopiedWords,
                via,
            });
        }
        None
    }
}

/// Run every decoder and view over `answer`, calling `step` after each scanned view; `step`
/// returns `true` to stop. `reading` is the answer's numbers read as digits (`numbers::read`),
/// when the caller has it (read once per answer: the pieces rule and coverage need it too).
fn walk(
    scan: &mut Scan<'_>,
    answer: &str,
    reading: Option<Option<&str>>,
    mut step: impl FnMut(&mut Scan<'_>, Via) -> bool,
) {
    // Decoded text is bounded by the answer's own size, so a hostile answer cannot make the
    // guard do more than a fixed multiple of its length.
    let mut budget = answer.len().saturating_mul(2) + 1024;
    let mut queue: Vec<(Cow<'_, str>, Decoded, usize)> =
        vec![(Cow::Borrowed(answer), Decoded::None, 0)];
    let mut next = 0;
    while next < queue.len() {
        let decoded = queue[next].1;
        let depth = queue[next].2;
        let atoms = text::atoms(&queue[next].0);
        let mut buf = std::mem::take(&mut scan.buf);
        let mut stop = false;
        decode::views(&atoms, &mut buf, |view, syms| {
            let via = Via { decoded, view };
            scan.stream(syms, via);
            stop = step(scan, via);
            !stop
        });
        scan.buf = buf;
        if stop {
            return;
        }
        // The text's own tokens, then its word windows: each a pass of its own that `step` sees.
        let known = if next == 0 { reading } else { None };
        scan.tokens(&queue[next].0, known, decoded);
        let view = View::Plain;
        if step(scan, Via { decoded, view }) {
            return;
        }
        scan.windows(&queue[next].0, decoded);
        let view = View::WordWindow;
        if step(scan, Via { decoded, view }) {
            return;
        }
        // The body spelled as a word game spells it (pig latin, vowels dropped, ...), read in the
        // same words.
        let p = scan.p;
        for (t, &(kind, _)) in p.transformed.tables.iter().enumerate() {
            let via = Via {
                decoded,
                view: View::Transformed(kind),
            };
            scan.transformed(t, via);
            if step(scan, via) {
                return;
            }
        }
        if depth < MAX_DEPTH {
            for d in decode::DECODERS {
                if let Some(t) = (d.decode)(&queue[next].0)
                    && t.len() <= budget
                {
                    budget -= t.len();
                    let kind = if decoded == Decoded::None {
                        d.kind
                    } else {
                        decoded
                    };
                    queue.push((Cow::Owned(t), kind, depth + 1));
                }
            }
        }
        next += 1;
    }
}

/// [`walk`] over `answer`, then over its parts put back in the order their labels state
/// (`part 3: …, part 1: …`, see `slices.rs`): a body cut into parts of a few characters, given
/// out of order, holds no n-gram of it until then. No longer than the answer.
fn walk_answer(
    scan: &mut Scan<'_>,
    answer: &str,
    reading: Option<&str>,
    mut step: impl FnMut(&mut Scan<'_>, Via) -> bool,
) {
    let mut stopped = false;
    walk(scan, answer, Some(reading), |s, via| {
        stopped = step(s, via);
        stopped
    });
    if stopped {
        return;
    }
    if let Some(parts) = crate::slices::reassembled(&crate::slices::stated(answer)) {
        walk(scan, &parts, None, step);
    }
}

/// Check one answer against a prepared body. Clean when the guard is disabled.
pub fn check(prepared: &Prepared, answer: &str) -> Verdict {
    check_covering(prepared, answer).0
}

/// What the check's walk of a clean answer found that the answer's coverage needs again.
pub(crate) struct Walked {
    /// The body words the answer covers ([`covered_words`]).
    pub words: Vec<bool>,
    /// The answer's numbers read as digits (`numbers::read`).
    pub reading: Option<String>,
}

/// [`check`], and for a clean answer the body words it covers ([`covered_words`]) from the
/// same walk: a clean answer is walked to its end, every decoder and view, which is all that
/// [`covered_words`] walks — so the box, which reports a released answer's coverage, walks it
/// once, not twice. `None` for a caught answer (nothing of it is released), a disabled guard
/// or an empty answer (the check walked nothing).
pub(crate) fn check_covering(prepared: &Prepared, answer: &str) -> (Verdict, Option<Walked>) {
    if !prepared.spec.enabled || answer.is_empty() {
        return (Verdict::Clean, None);
    }
    let mut scan = Scan::new(prepared);
    let mut caught = None;
    // Read once: the walk's tokens, the pieces rule and the coverage all read it.
    let reading = crate::numbers::read(answer);
    walk_answer(&mut scan, answer, reading.as_deref(), |s, via| {
        caught = s.verdict(via);
        caught.is_some()
    });
    // A secret in pieces each shorter than a fragment (`K7P ... M2Q`, a PIN's halves): caught
    // as the canary it is.
    let pieces = || {
        let pieces = |a: &str| crate::coverage::pieces_of_one_secret(prepared, a);
        pieces(answer)
            .or_else(|| reading.as_deref().and_then(pieces))
            .map(|origin| Catch {
                reason: Reason::Canary(origin),
                via: Via {
                    decoded: Decoded::None,
                    view: View::Plain,
                },
            })
    };
    match caught.or_else(pieces) {
        Some(c) => (Verdict::Caught(c), None),
        None => {
            let words = words_of(prepared, &scan);
            (Verdict::Clean, Some(Walked { words, reading }))
        }
    }
}

/// Everything the check measures, without stopping at the first catch (for tests and for
/// choosing thresholds). Independent of `enabled`.
pub fn measure(prepared: &Prepared, answer: &str) -> Measure {
    let mut scan = Scan::new(prepared);
    let reading = crate::numbers::read(answer);
    walk_answer(&mut scan, answer, reading.as_deref(), |_, _| false);
    let (covered, passage) = scan.covered();
    let w = prepared.word_count.max(1);
    Measure {
        covered_words: covered,
        longest_passage: passage,
        covered_permille: (covered * 1000 / w) as u32,
        secret_line: scan.secret.is_some(),
        canary: scan.canary.is_some(),
    }
}

/// Per body word: whether an n-gram covering it is contained in `answer`, in any decoded form
/// and view (the words [`measure`] counts). For the coverage a released answer reports
/// (`coverage.rs`). Independent of `enabled`. `reading` is the answer's `numbers::read`.
pub(crate) fn covered_words(prepared: &Prepared, answer: &str, reading: Option<&str>) -> Vec<bool> {
    let mut scan = Scan::new(prepared);
    walk_answer(&mut scan, answer, reading, |_, _| false);
    words_of(prepared, &scan)
}

/// The body words covered by the n-grams `scan` matched.
fn words_of(prepared: &Prepared, scan: &Scan<'_>) -> Vec<bool> {
    let mut out = vec![false; prepared.word_count];
    let mut until = 0;
    for (i, &(id, len)) in prepared.gram_at.iter().enumerate() {
        if id != u32::MAX && scan.matched[id as usize] {
            until = until.max(i + len as usize);
        }
        if let Some(w) = out.get_mut(i) {
            *w = i < until;
        }
    }
    out
}

/// The first hit of `f` where an answer writes a token: its words, its whitespace tokens with
/// their separators folded away (`4821-tango`), then the words of its spaced-out letters.
fn first_token<T>(text: &str, f: impl Fn(&str) -> Option<T>) -> Option<T> {
    let (mut words, mut ends) = (String::new(), Vec::new());
    let mut in_words = |t: &str| {
        text::words_into(t, &mut words, &mut ends);
        let mut from = 0;
        ends.iter().find_map(|&end| {
            let w = &words[from..end];
            from = end;
            f(w)
        })
    };
    in_words(text)
        .or_else(|| {
            text.split_whitespace()
                .filter(|tok| tok.chars().any(|c| !c.is_alphanumeric()))
                .find_map(|tok| f(&text::compact(tok)))
        })
        .or_else(|| in_words(&decode::unspace(text)))
}
