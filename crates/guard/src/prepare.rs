//! Body preparation: strip the owner's secret markers, collect the canaries, build the index.
//!
//! # Marker syntax (in the SKILL.md body)
//!
//! - `[[secret:PELICAN-42]]` marks one token (any text up to `]]` on the same line). The model
//!   sees `PELICAN-42`; the guard treats it as a canary.
//! - A line ending in `<!-- secret -->` (an HTML comment, so Markdown viewers hide it; any case,
//!   spaces inside optional) marks the whole line: the model sees the line without the comment;
//!   the line is a canary, and any n-gram of it in the answer is caught (not only a fraction).
//!
//! A marker that is not closed, is empty, or marks fewer than three letters or digits is an error
//! naming its line: such a canary would either not work or catch every answer.

use std::collections::HashMap;

use crate::canary::{self, CanaryOrigin};
use crate::index::Index;
use crate::parts::Parts;
use crate::spec::{GuardSpec, SpecError};
use crate::text;
use crate::transforms::Transformed;
use crate::window::Windows;

/// Largest body the guard prepares (a SKILL.md body is far smaller; this bounds the index).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Most canaries one body may hold (marked and found together).
pub const MAX_CANARIES: usize = 256;
/// Fewest letters and digits a canary may have.
pub const MIN_CANARY_CHARS: usize = 3;
/// From this many letters and digits on, a canary is searched anywhere in the folded answer
/// (across separators, under every Caesar shift); shorter ones only as whole tokens (or the
/// letter and digit runs of one).
pub const LONG_CANARY_CHARS: usize = 6;
/// Body n-grams whose pattern is shorter than this many symbols are not indexed: a match that
/// short means nothing once word boundaries are folded away.
const MIN_PATTERN: usize = 8;
const _: () =
    assert!(MIN_PATTERN >= crate::index::MIN_KEY && LONG_CANARY_CHARS > crate::index::MIN_KEY);
/// The n-gram size never shrinks below this for short bodies.
const MIN_NGRAM_SHORT_BODY: usize = 4;

/// A slice of a canary this long or longer, written as a token of the answer, is a fragment of
/// it (the two halves of an access code asked for over two calls). See [`Prepared::fragment`].
pub const FRAGMENT_CHARS: usize = 4;

const INLINE_OPEN: &str = "[[secret:";
const INLINE_CLOSE: &str = "]]";

/// A body the guard cannot prepare, with the line (1-based) named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("skill body is {len} bytes, more than the guard's {max}")]
    BodyTooLarge { len: usize, max: usize },
    #[error("line {line}: `[[secret:` is not closed by `]]` on the same line")]
    UnterminatedMarker { line: usize },
    #[error("line {line}: a secret marker marks nothing")]
    EmptyMarker { line: usize },
    #[error("line {line}: a secret must have at least {min} letters or digits")]
    CanaryTooShort { line: usize, min: usize },
    #[error("the body has more than {max} secrets")]
    TooManyCanaries { max: usize },
}

/// One canary: a secret that must never appear in an answer in any form.
#[derive(Clone, PartialEq, Eq)]
pub struct Canary {
    text: String,
    folded: String,
    origin: CanaryOrigin,
    line: usize,
    /// The places in `folded` a separator of `text` stands before (`BODY-MARK-LOCAL-7a21`: 4,
    /// 8 and 13): where the secret's words end, though the fold runs them together.
    breaks: Vec<usize>,
}

impl Canary {
    /// Where the written secret's words end (the places in its folded characters a separator
    /// stands before).
    pub(crate) fn breaks(&self) -> &[usize] {
        &self.breaks
    }

    /// The secret as written in the body.
    pub fn text(&self) -> &str {
        &self.text
    }
    pub fn origin(&self) -> CanaryOrigin {
        self.origin
    }
    /// 1-based line of the body it was found on.
    pub fn line(&self) -> usize {
        self.line
    }
}

/// Never prints the secret.
impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary")
            .field("origin", &self.origin)
            .field("line", &self.line)
            .field("chars", &self.folded.chars().count())
            .finish()
    }
}

/// A body ready to guard answers: what the model sees, the canaries, the n-gram index.
pub struct Prepared {
    pub(crate) spec: GuardSpec,
    model_body: String,
    canaries: Vec<Canary>,
    pub(crate) word_count: usize,
    pub(crate) ngram: usize,
    /// Per body word: the pattern id of the n-gram starting there (`u32::MAX` when not indexed)
    /// and how many words it spans (the n-gram size, more for runs of very short words).
    pub(crate) gram_at: Vec<(u32, u32)>,
    /// Pattern ids below this are n-grams; the rest are long canaries.
    pub(crate) gram_patterns: usize,
    /// Per n-gram pattern: it lies inside a `secret` line.
    pub(crate) secret_gram: Vec<bool>,
    /// Per long-canary pattern (id - gram_patterns): the canary's index.
    pub(crate) long_canary: Vec<usize>,
    /// Shift-canonical folded form of each canary, for whole-token matching.
    pub(crate) token_canaries: HashMap<String, usize>,
    pub(crate) token_lens: Vec<usize>,
    /// The first [`FRAGMENT_CHARS`] characters of every slice of a canary that a fragment may be
    /// (see [`Prepared::fragment`]) -> the canaries that hold it.
    pub(crate) fragment_keys: HashMap<String, Vec<usize>>,
    pub(crate) index: Index,
    /// The n-grams again, by words, for a window of the answer's words (gaps, local order).
    pub(crate) windows: Windows,
    /// The canaries' parts, for a secret given part by part with words between (`parts.rs`).
    pub(crate) parts: Parts,
    /// The n-grams again in each word game's spelling (`transforms.rs`: pig latin, ...).
    pub(crate) transformed: Transformed,
}

/// Never prints the body or a secret.
impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("body_bytes", &self.model_body.len())
            .field("words", &self.word_count)
            .field("ngram", &self.ngram)
            .field("canaries", &self.canaries.len())
            .finish()
    }
}

impl Prepared {
    /// The body as the model must see it: markers stripped, everything else unchanged.
    pub fn model_body(&self) -> &str {
        &self.model_body
    }
    pub fn canaries(&self) -> &[Canary] {
        &self.canaries
    }
    /// The spec this body was prepared under (the check applies it).
    pub fn spec(&self) -> &GuardSpec {
        &self.spec
    }
    /// The n-gram size in use: the spec's, shrunk for a short body to a quarter of its words
    /// (never below four, never above the body's length) so that a leak of half a short body
    /// still contains n-grams.
    pub fn ngram(&self) -> usize {
        self.ngram
    }
    pub fn word_count(&self) -> usize {
        self.word_count
    }

    /// The canary `f` (a folded token of the answer) is a fragment of, if any: a slice of at
    /// least [`FRAGMENT_CHARS`] characters, shorter than the canary, that carries enough of it to
    /// be told from ordinary text (see [`fragment_counts`]). Marked and automatic canaries only:
    /// a `secret` line's slices are words, and its n-grams are caught already.
    pub(crate) fn fragment(&self, f: &str) -> Option<usize> {
        let n = f.chars().count();
        if n < FRAGMENT_CHARS {
            return None;
        }
        let key_end = f
            .char_indices()
            .nth(FRAGMENT_CHARS)
            .map_or(f.len(), |(i, _)| i);
        let ids = self.fragment_keys.get(&f[..key_end])?;
        ids.iter().copied().find(|&i| {
            let c = &self.canaries[i];
            n < c.folded.chars().count() && fragment_counts(f, &c.folded, &c.breaks)
        })
    }
}

/// The places in `text::compact(text)` a character of `text` that folds to nothing (a
/// separator: `-`, `_`, a space) stands before, each once, none at either end.
fn breaks_of(text: &str) -> Vec<usize> {
    let (mut breaks, mut n) = (Vec::new(), 0);
    for ch in text.chars() {
        let before = n;
        text::fold(ch, |_| n += 1);
        if n == before && n > 0 && breaks.last() != Some(&n) {
            breaks.push(n);
        }
    }
    if breaks.last() == Some(&n) {
        breaks.pop();
    }
    breaks
}

/// Whether the slice `start..end` of the folded canary `c` (a slice of letters) cuts one of its
/// letter runs as written — starts or ends inside one — or spans a separator (`marklocal` of
/// `BODY-MARK-LOCAL-7a21`). A whole run is a word the secret holds (`pelican` of `PELICAN-42`,
/// `mark` of `BODY-MARK-LOCAL-7a21`), which ordinary prose writes too: runs end at the
/// separators of the secret as written (`breaks`, see [`Canary::breaks`]) as well as at
/// digits, else a word-made secret's words, folded into one run, each cut it.
pub(crate) fn cuts_a_letter_run(c: &[char], breaks: &[usize], start: usize, end: usize) -> bool {
    let inside = |k: usize| {
        k > 0
            && k < c.len()
            && !breaks.contains(&k)
            && !c[k - 1].is_ascii_digit()
            && !c[k].is_ascii_digit()
    };
    inside(start) || inside(end) || breaks.iter().any(|&b| start < b && b < end)
}

/// Whether `f`, a slice of the folded canary `c`, is a fragment the guard catches. A slice of a
/// secret can also be a piece of ordinary text, so only slices that are not:
/// - fewer than three distinct characters never count (`1111`, `0000`, `2020`, `aaaa`);
/// - letters and digits mixed: always (`an42`, `k7pm`, `2qxz`, `ter2x`); a random token rarely
///   holds a slice that is also a word of ordinary text (`utf8`, `ipv4` would be the cost);
/// - digits only: four or more, not a year 1900-2099 (`4432` of `77194432`);
/// - letters only: five or more (two distinct 4-character slices, never one English 4-letter
///   word), of a canary that mixes letters and digits (a code, not a password word: the slices
///   of `swordfish` are `sword` and `fish`), and cutting one of its letter runs as written
///   (`pelic`, `elican`; the whole run `pelican` of `PELICAN-42` may be the bird, `local` of
///   `BODY-MARK-LOCAL-7a21` a haiku's word: see [`cuts_a_letter_run`]).
fn fragment_counts(f: &str, c: &str, breaks: &[usize]) -> bool {
    let n = f.chars().count();
    let digits = f.chars().filter(char::is_ascii_digit).count();
    let letters = n - digits;
    let mut distinct: Vec<char> = f.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 3 {
        return false;
    }
    if digits > 0 && letters > 0 {
        return c.contains(f);
    }
    if letters == 0 {
        let year = n == 4 && (f.starts_with("19") || f.starts_with("20"));
        return !year && c.contains(f);
    }
    if n < 5 || !c.chars().any(|x| x.is_ascii_digit()) {
        return false;
    }
    let chars: Vec<char> = c.chars().collect();
    c.match_indices(f).any(|(at, _)| {
        let start = c[..at].chars().count();
        cuts_a_letter_run(&chars, breaks, start, start + n)
    })
}

/// Strip the markers from one line, returning the model's line and the inline canaries.
fn strip_inline(line: &str, lineno: usize) -> Result<(String, Vec<String>), PrepareError> {
    let mut out = String::with_capacity(line.len());
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(INLINE_OPEN) {
        out.push_str(&rest[..i]);
        let after = &rest[i + INLINE_OPEN.len()..];
        let Some(j) = after.find(INLINE_CLOSE) else {
            return Err(PrepareError::UnterminatedMarker { line: lineno });
        };
        let token = after[..j].trim();
        if token.is_empty() {
            return Err(PrepareError::EmptyMarker { line: lineno });
        }
        out.push_str(token);
        found.push(token.to_owned());
        rest = &after[j + INLINE_CLOSE.len()..];
    }
    out.push_str(rest);
    Ok((out, found))
}

/// `Some(text before the marker)` when the line ends in `<!-- secret -->`.
fn secret_line(line: &str) -> Option<&str> {
    let t = line.trim_end();
    let inner = t.strip_suffix("-->")?;
    let open = inner.rfind("<!--")?;
    if inner[open + 4..].trim().eq_ignore_ascii_case("secret") {
        Some(t[..open].trim_end())
    } else {
        None
    }
}

/// Prepare `body` (the SKILL.md body as the owner wrote it) for guarding under `spec`.
pub fn prepare(body: &str, spec: &GuardSpec) -> Result<Prepared, PrepareError> {
    spec.validate()?;
    if body.len() > MAX_BODY_BYTES {
        return Err(PrepareError::BodyTooLarge {
            len: body.len(),
            max: MAX_BODY_BYTES,
        });
    }
    let mut model_body = String::with_capacity(body.len());
    let mut canaries: Vec<Canary> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    // Word ranges of `secret` lines.
    let mut secret_ranges: Vec<(usize, usize)> = Vec::new();
    // Byte offset in the model body where each line starts (for auto-canary line numbers).
    let mut line_starts: Vec<usize> = Vec::new();

    fn add(
        canaries: &mut Vec<Canary>,
        text: &str,
        origin: CanaryOrigin,
        line: usize,
        strict: bool,
    ) -> Result<(), PrepareError> {
        let folded = text::compact(text);
        if folded.chars().count() < MIN_CANARY_CHARS {
            return if strict {
                Err(PrepareError::CanaryTooShort {
                    line,
                    min: MIN_CANARY_CHARS,
                })
            } else {
                Ok(())
            };
        }
        if canaries.iter().any(|c| c.folded == folded) {
            return Ok(());
        }
        if canaries.len() >= MAX_CANARIES {
            return Err(PrepareError::TooManyCanaries { max: MAX_CANARIES });
        }
        canaries.push(Canary {
            text: text.to_owned(),
            folded,
            origin,
            line,
            breaks: breaks_of(text),
        });
        Ok(())
    }

    for (i, raw) in body.split('\n').enumerate() {
        let lineno = i + 1;
        if i > 0 {
            model_body.push('\n');
        }
        line_starts.push(model_body.len());
        let (marked_line, is_secret) = match secret_line(raw) {
            Some(before) => (before, true),
            None => (raw, false),
        };
        let (line, inline) = strip_inline(marked_line, lineno)?;
        if is_secret && text::compact(&line).is_empty() {
            return Err(PrepareError::EmptyMarker { line: lineno });
        }
        let first_word = words.len();
        words.extend(text::words(&line));
        if spec.canaries {
            for t in &inline {
                add(&mut canaries, t, CanaryOrigin::Marked, lineno, true)?;
            }
            if is_secret {
                add(
                    &mut canaries,
                    line.trim(),
                    CanaryOrigin::SecretLine,
                    lineno,
                    true,
                )?;
                secret_ranges.push((first_word, words.len()));
            }
        }
        model_body.push_str(&line);
    }
    if spec.auto_canaries {
        for f in canary::find(&model_body) {
            let line = line_starts.partition_point(|&s| s <= f.at);
            add(&mut canaries, &f.text, f.origin, line, false)?;
        }
    }
    index(spec, model_body, canaries, words, &secret_ranges)
}

fn index(
    spec: &GuardSpec,
    model_body: String,
    canaries: Vec<Canary>,
    words: Vec<String>,
    secret_ranges: &[(usize, usize)],
) -> Result<Prepared, PrepareError> {
    let w = words.len();
    let ngram = (spec.ngram as usize)
        .min((w / 4).max(MIN_NGRAM_SHORT_BODY))
        .min(w)
        .max(1);
    let mut patterns: Vec<Vec<u8>> = Vec::new();
    let mut ids: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut gram_at = vec![(u32::MAX, 0u32); w];
    let mut secret_gram: Vec<bool> = Vec::new();
    let mut joined = String::new();
    let starts = w.saturating_sub(ngram - 1);
    for (start, slot) in gram_at.iter_mut().enumerate().take(starts) {
        // An n-gram of short words ("R S R", "x + x") is extended word by word until its pattern
        // is long enough to mean something once separators are folded away.
        joined.clear();
        let mut end = start;
        let mut pat = Vec::new();
        while end < w && (end - start < ngram || pat.len() < MIN_PATTERN) {
            joined.push_str(&words[end]);
            end += 1;
            if end - start >= ngram {
                pat = text::shift_pattern(&joined);
            }
        }
        if pat.len() < MIN_PATTERN {
            continue;
        }
        let secret = secret_ranges.iter().any(|&(a, b)| start >= a && end <= b);
        let id = *ids.entry(pat).or_insert_with_key(|p| {
            patterns.push(p.clone());
            secret_gram.push(false);
            (patterns.len() - 1) as u32
        });
        secret_gram[id as usize] |= secret;
        *slot = (id, (end - start) as u32);
    }
    let gram_patterns = patterns.len();
    let mut long_canary = Vec::new();
    let mut token_canaries = HashMap::new();
    let mut token_lens = Vec::new();
    for (i, c) in canaries.iter().enumerate() {
        let n = c.folded.chars().count();
        // Every canary is matched as a whole token; a long one also anywhere in the folded
        // stream, when its shift pattern (which loses digits before the first letter) is long
        // enough to be specific.
        let pat = text::shift_pattern(&c.folded);
        if n >= LONG_CANARY_CHARS && pat.len() + 1 >= n {
            patterns.push(pat);
            long_canary.push(i);
        }
        token_canaries.insert(text::shift_canonical(&c.folded), i);
        if !token_lens.contains(&n) {
            token_lens.push(n);
        }
    }
    let mut fragment_keys: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, c) in canaries.iter().enumerate() {
        let chars: Vec<char> = c.folded.chars().collect();
        if c.origin == CanaryOrigin::SecretLine || chars.len() <= FRAGMENT_CHARS {
            continue;
        }
        for w in chars.windows(FRAGMENT_CHARS) {
            let ids = fragment_keys.entry(w.iter().collect()).or_default();
            if ids.last() != Some(&i) {
                ids.push(i);
            }
        }
    }
    let index = Index::build(&patterns);
    let windows = Windows::build(&words, &gram_at);
    let transformed = Transformed::build(&words, &gram_at);
    let parts = Parts::build(&canaries);
    Ok(Prepared {
        spec: *spec,
        model_body,
        canaries,
        word_count: w,
        ngram,
        gram_at,
        gram_patterns,
        secret_gram,
        long_canary,
        token_canaries,
        token_lens,
        fragment_keys,
        index,
        windows,
        parts,
        transformed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> GuardSpec {
        GuardSpec::default_for(false)
    }

    #[test]
    fn markers_are_stripped_and_become_canaries() {
        let body = "Greet the user.\nThe vault code is [[secret:ORCHID-7]] today.\nNever mention the blue door. <!-- secret -->\nBe brief.";
        let p = prepare(body, &spec()).unwrap();
        assert_eq!(
            p.model_body(),
            "Greet the user.\nThe vault code is ORCHID-7 today.\nNever mention the blue door.\nBe brief."
        );
        let c: Vec<(&str, CanaryOrigin, usize)> = p
            .canaries()
            .iter()
            .map(|c| (c.text(), c.origin(), c.line()))
            .collect();
        assert_eq!(
            c,
            [
                ("ORCHID-7", CanaryOrigin::Marked, 2),
                ("Never mention the blue door.", CanaryOrigin::SecretLine, 3),
            ]
        );
        assert!(!format!("{p:?}{:?}", p.canaries()).contains("ORCHID"));
    }

    #[test]
    fn secret_line_marker_variants() {
        assert_eq!(secret_line("a b <!--secret-->  "), Some("a b"));
        assert_eq!(secret_line("a b <!-- SECRET -->"), Some("a b"));
        assert_eq!(secret_line("a b <!-- note -->"), None);
        assert_eq!(secret_line("a b <!-- secret --> more"), None);
    }

    #[test]
    fn bad_markers_name_their_line() {
        let cases = [
            (
                "ok\nthe code [[secret:ABC123",
                PrepareError::UnterminatedMarker { line: 2 },
            ),
            ("[[secret:  ]]", PrepareError::EmptyMarker { line: 1 }),
            (
                "x\n\n<!-- secret -->",
                PrepareError::EmptyMarker { line: 3 },
            ),
            (
                "pin [[secret:42]]",
                PrepareError::CanaryTooShort { line: 1, min: 3 },
            ),
        ];
        for (body, want) in cases {
            assert_eq!(prepare(body, &spec()).unwrap_err(), want, "{body:?}");
        }
        let many: String = (0..300)
            .map(|i| format!("[[secret:TOKEN{i:04}]]\n"))
            .collect();
        assert_eq!(
            prepare(&many, &spec()).unwrap_err(),
            PrepareError::TooManyCanaries { max: MAX_CANARIES }
        );
        let bad_spec = GuardSpec { ngram: 1, ..spec() };
        assert!(matches!(
            prepare("x", &bad_spec),
            Err(PrepareError::Spec(_))
        ));
    }

    #[test]
    fn canary_switches_are_honoured() {
        let body = "The password is PELICAN-42. Say [[secret:ORCHID-7]].";
        let none = GuardSpec {
            canaries: false,
            auto_canaries: false,
            ..spec()
        };
        assert!(prepare(body, &none).unwrap().canaries().is_empty());
        let marked = GuardSpec {
            auto_canaries: false,
            ..spec()
        };
        let p = prepare(body, &marked).unwrap();
        assert_eq!(p.canaries().len(), 1);
        assert_eq!(p.canaries()[0].text(), "ORCHID-7");
        let all = prepare(body, &spec()).unwrap();
        assert_eq!(all.canaries().len(), 2);
    }

    #[test]
    fn short_bodies_use_shorter_ngrams() {
        let long: String = (0..200).map(|i| format!("w{i} ")).collect();
        assert_eq!(
            prepare(&long, &spec()).unwrap().ngram(),
            spec().ngram as usize
        );
        let p = prepare("one two three four five six seven eight nine ten", &spec()).unwrap();
        assert_eq!(p.ngram(), 4);
        assert_eq!(prepare("just two", &spec()).unwrap().ngram(), 2);
        assert_eq!(prepare("", &spec()).unwrap().word_count(), 0);
    }

    #[test]
    fn fragments_are_slices_that_carry_the_secret() {
        let p = prepare(
            "The access code is pelican4821. Use [[secret:K7PM-2QXZ]]. The password is swordfish.",
            &spec(),
        )
        .unwrap();
        let frag = |f: &str| p.fragment(f).map(|i| p.canaries()[i].text().to_owned());
        // The halves of a code, each four characters or more.
        assert_eq!(frag("pelic").as_deref(), Some("pelican4821"));
        assert_eq!(frag("an4821").as_deref(), Some("pelican4821"));
        assert_eq!(frag("4821").as_deref(), Some("pelican4821"));
        assert_eq!(frag("k7pm").as_deref(), Some("K7PM-2QXZ"));
        assert_eq!(frag("2qxz").as_deref(), Some("K7PM-2QXZ"));
        // Near-misses: a 4-letter word, the whole letter run (the bird), slices of a password
        // word, the whole canary (matched as a token elsewhere), something not in any canary.
        for f in [
            "peli",
            "pelican",
            "sword",
            "fish",
            "pelican4821",
            "pelicans",
            "48210",
        ] {
            assert_eq!(frag(f), None, "{f}");
        }
    }

    #[test]
    fn a_word_made_secrets_whole_words_are_no_fragments() {
        let p = prepare("Never mention [[secret:BODY-MARK-LOCAL-7a21]].", &spec()).unwrap();
        assert_eq!(p.canaries()[0].breaks(), [4, 8, 13]);
        // Its words as prose writes them (`Local birds take flight`).
        assert_eq!(p.fragment("local"), None);
        // Slices that cut a word, or join two as the secret does.
        for f in ["ocal7a", "bodym", "marklocal", "ocal"] {
            assert_eq!(p.fragment(f).is_some(), f != "ocal", "{f}");
        }
    }

    #[test]
    fn fragment_rules_keep_ordinary_slices_out() {
        assert!(fragment_counts("an42", "pelican42", &[]));
        assert!(fragment_counts("ter2x", "hunter2x9", &[]));
        assert!(fragment_counts("4432", "77194432", &[]));
        assert!(!fragment_counts("1944", "77194432", &[]), "a year");
        assert!(
            !fragment_counts("1111", "4111111111111111", &[]),
            "two distinct digits"
        );
        assert!(fragment_counts("2qxz", "k7pm2qxz", &[]));
        assert!(!fragment_counts("2qxy", "k7pm2qxz", &[]), "not a slice");
        assert!(
            !fragment_counts("hunter", "hunterhunter", &[]),
            "no digit in the canary"
        );
    }
}
