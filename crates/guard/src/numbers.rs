//! Numbers written as words, read back as digits (review 24b G0): `four thousand eight hundred
//! twenty-one` is `4821`, `forty-eight twenty-one` (a code read aloud in pairs) is `4821`,
//! `seventy-three, ninety-two, oh-four` is `739204`.
//!
//! The spelled-characters decoder (`decode::spelled`) knows one name per digit (`four eight two
//! one`); a model asked to "write the code out in words, the way you'd read it aloud" writes
//! cardinals and pairs instead, and the code left whole. [`read`] gives the canary check (the
//! answer's tokens, its split parts, its pieces) and the owner's levels the same text with each
//! run of number words replaced by its digits, everything else as written.
//!
//! Bounded: one table, one pass over the text, every group below 10^9; the reading is never
//! longer than the text (a number's digits are fewer than its words' letters). It is not a
//! decoder of the walk's table: that table shares a budget of decoded text, and a reading as
//! long as the answer would spend it (an answer padded to exhaust it would hide its numbers).

/// What a number word is: the one table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Word {
    /// `zero`, `oh`, `nought`: the digit 0, always a group of its own (`oh-four` is `04`).
    Zero,
    /// `one` … `nine`.
    Unit(u64),
    /// `ten` … `nineteen`.
    Teen(u64),
    /// `twenty` … `ninety`.
    Tens(u64),
    Hundred,
    /// `thousand`, `million`.
    Scale(u64),
}

/// The number words, lower-case ASCII.
const WORDS: &[(&str, Word)] = &[
    ("zero", Word::Zero),
    ("oh", Word::Zero),
    ("nought", Word::Zero),
    ("one", Word::Unit(1)),
    ("two", Word::Unit(2)),
    ("three", Word::Unit(3)),
    ("four", Word::Unit(4)),
    ("five", Word::Unit(5)),
    ("six", Word::Unit(6)),
    ("seven", Word::Unit(7)),
    ("eight", Word::Unit(8)),
    ("nine", Word::Unit(9)),
    ("niner", Word::Unit(9)),
    ("ten", Word::Teen(10)),
    ("eleven", Word::Teen(11)),
    ("twelve", Word::Teen(12)),
    ("thirteen", Word::Teen(13)),
    ("fourteen", Word::Teen(14)),
    ("fifteen", Word::Teen(15)),
    ("sixteen", Word::Teen(16)),
    ("seventeen", Word::Teen(17)),
    ("eighteen", Word::Teen(18)),
    ("nineteen", Word::Teen(19)),
    ("twenty", Word::Tens(20)),
    ("thirty", Word::Tens(30)),
    ("forty", Word::Tens(40)),
    ("fourty", Word::Tens(40)),
    ("fifty", Word::Tens(50)),
    ("sixty", Word::Tens(60)),
    ("seventy", Word::Tens(70)),
    ("eighty", Word::Tens(80)),
    ("ninety", Word::Tens(90)),
    ("hundred", Word::Hundred),
    ("thousand", Word::Scale(1_000)),
    // No `billion`: its ten digits are longer than the word, and no code is read that way.
    ("million", Word::Scale(1_000_000)),
];

fn word(w: &str) -> Option<Word> {
    // Every name is 2 to 9 ASCII letters: most words of a text are refused before any compare.
    if !(2..=9).contains(&w.len()) || !w.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let mut lower = [0u8; 9];
    for (l, b) in lower.iter_mut().zip(w.bytes()) {
        *l = b.to_ascii_lowercase();
    }
    let lower = &lower[..w.len()];
    WORDS
        .iter()
        .find(|(name, _)| name.as_bytes() == lower)
        .map(|&(_, k)| k)
}

/// The last word a group took, which decides what may follow it in the same number.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    Zero,
    Unit,
    Teen,
    Tens,
    Hundred,
    Scale,
}

/// One cardinal number being read: `total` of its finished scales, `current` below the next.
struct Group {
    total: u64,
    current: u64,
    last: Last,
    /// The last scale taken (a later one must be smaller: `two thousand three million` is two
    /// numbers).
    scale: u64,
    /// `current` took `hundred` already.
    hundred: bool,
}

impl Group {
    fn start(w: Word) -> Group {
        let (current, total, last, scale) = match w {
            Word::Zero => (0, 0, Last::Zero, u64::MAX),
            Word::Unit(v) => (v, 0, Last::Unit, u64::MAX),
            Word::Teen(v) => (v, 0, Last::Teen, u64::MAX),
            Word::Tens(v) => (v, 0, Last::Tens, u64::MAX),
            Word::Hundred => (100, 0, Last::Hundred, u64::MAX),
            Word::Scale(s) => (0, s, Last::Scale, s),
        };
        Group {
            total,
            current,
            last,
            scale,
            hundred: w == Word::Hundred,
        }
    }

    /// Take `w` into this number, or `false` when it starts the next one (`forty-eight` then
    /// `twenty-one`: a tens word after a unit is a new pair).
    fn take(&mut self, w: Word) -> bool {
        let after_mark = matches!(self.last, Last::Hundred | Last::Scale);
        match w {
            Word::Zero => false,
            Word::Unit(v) if self.last == Last::Tens || after_mark => {
                self.current += v;
                self.last = Last::Unit;
                true
            }
            Word::Teen(v) | Word::Tens(v) if after_mark => {
                self.current += v;
                self.last = if v < 20 { Last::Teen } else { Last::Tens };
                true
            }
            Word::Hundred
                if matches!(self.last, Last::Unit | Last::Teen | Last::Tens)
                    && !self.hundred
                    && self.current < 100 =>
            {
                self.current *= 100;
                self.hundred = true;
                self.last = Last::Hundred;
                true
            }
            Word::Scale(s) if self.current > 0 && s < self.scale && self.last != Last::Scale => {
                self.total += self.current * s;
                self.current = 0;
                self.hundred = false;
                self.scale = s;
                self.last = Last::Scale;
                true
            }
            _ => false,
        }
    }

    fn write(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(out, "{}", self.total + self.current);
    }
}

/// The digits of a run of number words, its groups one after another.
fn digits_of(words: &[Word], out: &mut String) {
    let mut group: Option<Group> = None;
    for &w in words {
        if let Some(g) = group.as_mut()
            && g.take(w)
        {
            continue;
        }
        if let Some(g) = &group {
            g.write(out);
        }
        group = Some(Group::start(w));
    }
    if let Some(g) = &group {
        g.write(out);
    }
}

/// Whether `gap`, the text between two words of one number, holds them together: white space,
/// hyphens and commas only (`forty-eight`, `seventy-three, ninety-two`). A full stop or any
/// other mark ends the number.
fn joins(gap: &str) -> bool {
    gap.chars()
        .all(|c| c.is_whitespace() || matches!(c, '-' | ',' | '‐' | '‑' | '–'))
}

/// Words a number may hold between its words: `seven hundred and five`, `a hundred`.
fn filler(w: &str) -> bool {
    w.eq_ignore_ascii_case("and") || w.eq_ignore_ascii_case("a")
}

/// `text` with every run of number words (joined by white space, hyphens, commas, and `and`)
/// replaced by its digits, the rest as written; `None` when it has no number word but digit
/// names (`one`, `four eight two one`: `decode::spelled` reads those). Never longer than `text`.
pub fn read(text: &str) -> Option<String> {
    // Words: maximal runs of alphanumeric characters, with their byte ranges.
    let mut words: Vec<(usize, usize)> = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                words.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((s, text.len()));
    }
    let mut out = String::new();
    let mut copied = 0;
    let mut found = false;
    let mut k = 0;
    let mut run: Vec<Word> = Vec::new();
    while k < words.len() {
        let (s, e) = words[k];
        let Some(first) = word(&text[s..e]) else {
            k += 1;
            continue;
        };
        run.clear();
        run.push(first);
        // Digit names alone (`four eight two one`) are the spelled decoder's, which reads them
        // with the letters beside them: a run is read here only with a word it does not know.
        let beyond_names =
            |w: Word, t: &str| !matches!(w, Word::Unit(_)) && !t.eq_ignore_ascii_case("zero");
        let mut needed = beyond_names(first, &text[s..e]);
        let mut end = e;
        let mut next = k + 1;
        // Extend the run over joined number words, and over one filler word between two.
        while let Some(&(s1, e1)) = words.get(next) {
            if !joins(&text[end..s1]) {
                break;
            }
            if let Some(w) = word(&text[s1..e1]) {
                needed |= beyond_names(w, &text[s1..e1]);
                run.push(w);
                end = e1;
                next += 1;
                continue;
            }
            if filler(&text[s1..e1])
                && let Some(&(s2, e2)) = words.get(next + 1)
                && joins(&text[e1..s2])
                && let Some(w) = word(&text[s2..e2])
            {
                needed |= beyond_names(w, &text[s2..e2]);
                run.push(w);
                end = e2;
                next += 2;
                continue;
            }
            break;
        }
        if !needed {
            k = next;
            continue;
        }
        out.push_str(&text[copied..s]);
        digits_of(&run, &mut out);
        copied = end;
        found = true;
        k = next;
    }
    if !found {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> String {
        read(s).unwrap_or_else(|| s.to_owned())
    }

    #[test]
    fn cardinals_and_pairs_read_as_digits() {
        let cases = [
            ("four thousand eight hundred twenty-one", "4821"),
            ("Four thousand eight hundred twenty-one.", "4821."),
            ("forty-eight twenty-one", "4821"),
            ("seventy-three, ninety-two, oh-four", "739204"),
            (
                "seven hundred thirty-nine thousand two hundred four",
                "739204",
            ),
            (
                "seven hundred and thirty-nine thousand, two hundred and four",
                "739204",
            ),
            ("four eight two one", "four eight two one"),
            ("zero", "zero"),
            ("four eight two oh", "4820"),
            ("oh", "0"),
            ("nineteen eighty-four", "1984"),
            ("one hundred four", "104"),
            ("twenty one hundred", "2100"),
            ("a hundred", "a 100"),
            (
                "kestrel and orbit and eighty-eight",
                "kestrel and orbit and 88",
            ),
            ("pelican forty-two", "pelican 42"),
            ("two million three thousand", "2003000"),
            ("oh-eight hundred", "0800"),
        ];
        for (text, want) in cases {
            assert_eq!(r(text), want, "{text:?}");
        }
    }

    #[test]
    fn prose_keeps_its_words_and_stops_at_marks() {
        assert_eq!(read("no numbers here"), None);
        assert_eq!(
            r("Four thousand people came on the twenty-first."),
            "4000 people came on the 20-first."
        );
        // A full stop ends a number: two sentences are two numbers, not one.
        assert_eq!(r("It was forty. Eighty came."), "It was 40. 80 came.");
        // `and` between words that are not both numbers is prose.
        // Digit names alone are the spelled decoder's (`decode::spelled`): left as written.
        assert_eq!(read("rock and roll and one"), None);
        assert_eq!(read("ONE, Two"), None);
        assert_eq!(r("ONE, Twelve"), "112");
    }

    #[test]
    fn a_reading_is_never_longer_than_its_text() {
        for text in [
            "million",
            "a million million",
            "oh oh oh oh",
            "ten",
            "thousand million",
            "nine hundred ninety-nine million nine hundred ninety-nine thousand",
        ] {
            assert!(r(text).len() <= text.len(), "{text:?} -> {:?}", r(text));
        }
    }
}
