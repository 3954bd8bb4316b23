//! The `skill` intent: pick the board skill that best fits a request, or none.
//!
//! BM25 over each candidate's name and description (name terms count twice: a skill's name is
//! its most deliberate summary). Candidates are what the board offers *right now*, minus what
//! this node could not call; the caller passes them in. Below [`MIN_SCORE`] nothing is picked:
//! an unrelated request must never start a call on an unrelated skill.

use std::collections::HashMap;

use serde::Serialize;

/// A board entry that may be picked.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub peer: &'a str,
    pub skill: &'a str,
    pub description: &'a str,
}

/// One ranked candidate.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scored {
    pub peer: String,
    pub skill: String,
    pub score: f64,
}

/// The pick, with the runner-up so a person can see how close it was.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pick {
    pub peer: String,
    pub skill: String,
    pub score: f64,
    #[serde(rename = "runnerUp", skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<Scored>,
}

/// Why nothing was picked.
#[derive(Clone, Debug, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NoPick {
    #[error("the board offers no skill this node could call")]
    NoCandidates,
    #[error(
        "no offered skill matches the request (best score {best_score:.2} is below {threshold:.2})"
    )]
    NoMatch {
        best: Option<Scored>,
        best_score: f64,
        threshold: f64,
    },
}

/// Scores below this pick nothing. BM25 scores are sums over matched query terms of
/// idf × tf-saturation, with idf against the background of real skills ([`BACKGROUND`]). Over
/// a 32-skill board of real descriptions and 32 phrased requests (`tests/it/intent.rs` prints them)
/// right picks score 14 and up while the best *wrong* skill reaches 8.4, and unrelated requests
/// stay under 4: 10 keeps a wrong skill from being picked when the right one is not offered.
pub const MIN_SCORE: f64 = 10.0;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Words that say nothing about which skill fits.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "asks", "at", "be",
    "before", "by", "can", "could", "do", "does", "for", "from", "get", "give", "has", "have",
    "help", "how", "i", "if", "in", "into", "is", "it", "its", "just", "like", "make", "me", "my",
    "need", "new", "not", "of", "on", "or", "our", "out", "please", "should", "skill", "so",
    "some", "that", "the", "their", "them", "then", "there", "these", "this", "to", "too", "up",
    "us", "use", "used", "user", "uses", "using", "want", "we", "what", "when", "where", "which",
    "while", "who", "why", "will", "with", "without", "would", "you", "your",
];

/// Lowercase words of two or more letters and digits, stopwords dropped, lightly stemmed.
pub fn terms(text: &str) -> Vec<String> {
    words_of(text).collect()
}

/// [`terms`] one at a time, so a reader that stops at the first it wants reads no further.
fn words_of(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
}

/// Whether a candidate's name or description holds one of `words` (sorted), read as the intent
/// reads it ([`terms`]): what `GET /board?q=` lists. The words are read one at a time and the
/// first that is one of `words` ends the reading.
pub fn mentions(c: &Candidate<'_>, words: &[String]) -> bool {
    words_of(c.skill)
        .chain(words_of(c.description))
        .any(|t| words.binary_search(&t).is_ok())
}

/// A small suffix stripper: enough that "reviews", "reviewing" and "reviewed" meet "review".
fn stem(word: &str) -> String {
    if word.chars().count() <= 3 || word.chars().any(|c| c.is_ascii_digit()) {
        return word.to_owned();
    }
    for (suffix, keep_min) in [
        ("ations", 4),
        ("ation", 4),
        ("ments", 4),
        ("ment", 4),
        ("ness", 4),
        ("ings", 3),
        ("ing", 3),
        ("ies", 3),
        ("ied", 3),
        ("ers", 3),
        ("er", 4),
        ("ed", 3),
        ("es", 4),
        ("ly", 4),
        ("s", 3),
    ] {
        if let Some(stemmed) = word.strip_suffix(suffix)
            && stemmed.chars().count() >= keep_min
            && !(suffix == "s" && stemmed.ends_with('s'))
        {
            let mut out = stemmed.to_owned();
            if suffix == "ies" || suffix == "ied" {
                out.push('y');
            }
            return out;
        }
    }
    word.to_owned()
}

/// Document frequencies over a background of real skills: the 419 SKILL.md of the corpus
/// (name twice + description, through [`terms`]). The board alone is too small a collection
/// for inverse document frequency — on a board of one skill every word would weigh almost
/// nothing — so a term's rarity is judged against typical skill descriptions plus the board.
/// First line `N <documents>`, then `term df` lines; `tests/it/intent_background.rs` rebuilds it.
pub const BACKGROUND: &str = include_str!("intent_background.txt");

struct Background {
    n: f64,
    df: HashMap<&'static str, f64>,
}

fn background() -> &'static Background {
    static BG: std::sync::OnceLock<Background> = std::sync::OnceLock::new();
    BG.get_or_init(|| {
        let mut lines = BACKGROUND.lines();
        let n = lines
            .next()
            .and_then(|l| l.strip_prefix("N "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0);
        let df = lines
            .filter_map(|l| {
                let (t, d) = l.split_once(' ')?;
                Some((t, d.trim().parse().ok()?))
            })
            .collect();
        Background { n, df }
    })
}

/// How many background skills use `term` (0 when none does).
pub fn background_df(term: &str) -> f64 {
    background().df.get(term).copied().unwrap_or(0.0)
}

/// How many skills the background holds.
pub fn background_documents() -> f64 {
    background().n
}

/// A candidate's words as BM25 reads them: its name twice (a skill's name is its most
/// deliberate summary), then its description. The name is read once and its words repeated
/// (a `-` splits words as any other character that is not a letter or digit does).
fn document(c: &Candidate<'_>) -> Vec<String> {
    let name = terms(c.skill);
    let mut t = Vec::with_capacity(2 * name.len() + c.description.len() / 4);
    t.extend(name.iter().cloned());
    t.extend(name);
    t.extend(words_of(c.description));
    t
}

/// What BM25 needs of a collection for one request, gathered a candidate at a time: how many
/// candidates, their words in all, and how many hold each of the request's words. So a caller
/// that can only borrow its candidates a stretch at a time (the board, under its lock) scores
/// them in two passes, [`Collection::add`] over all then [`Collection::score`], without holding
/// them whole; [`rank`] scores the same way.
pub struct Collection {
    /// The request's words, sorted, each once.
    query: Vec<String>,
    docs: usize,
    words: usize,
    /// Candidates holding each of `query`'s words.
    df: Vec<usize>,
}

impl Collection {
    pub fn new(text: &str) -> Collection {
        let mut query = terms(text);
        query.sort_unstable();
        query.dedup();
        let df = vec![0; query.len()];
        Collection {
            query,
            docs: 0,
            words: 0,
            df,
        }
    }

    /// Count a candidate into the collection.
    pub fn add(&mut self, c: &Candidate<'_>) {
        self.add_document(&document(c));
    }

    fn add_document(&mut self, doc: &[String]) {
        self.docs += 1;
        self.words += doc.len();
        for (q, df) in self.query.iter().zip(&mut self.df) {
            if doc.contains(q) {
                *df += 1;
            }
        }
    }

    /// A candidate's score against the collection counted so far.
    pub fn score(&self, c: &Candidate<'_>) -> f64 {
        self.score_document(&document(c))
    }

    fn score_document(&self, doc: &[String]) -> f64 {
        let bg = background();
        let n = self.docs as f64 + bg.n;
        let avg_len = (self.words as f64 / (self.docs as f64).max(1.0)).max(1.0);
        let len = doc.len() as f64;
        self.query
            .iter()
            .zip(&self.df)
            .map(|(q, df)| {
                let tf = doc.iter().filter(|t| *t == q).count() as f64;
                if tf == 0.0 {
                    return 0.0;
                }
                let df = *df as f64 + bg.df.get(q.as_str()).copied().unwrap_or(0.0);
                let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg_len))
            })
            .sum()
    }
}

/// Rank every candidate for `text`, best first (ties by skill then peer, for stable output).
pub fn rank(text: &str, candidates: &[Candidate<'_>]) -> Vec<Scored> {
    let docs: Vec<Vec<String>> = candidates.iter().map(document).collect();
    let mut collection = Collection::new(text);
    for d in &docs {
        collection.add_document(d);
    }
    let mut scored: Vec<Scored> = candidates
        .iter()
        .zip(&docs)
        .map(|(c, d)| Scored {
            peer: c.peer.to_owned(),
            skill: c.skill.to_owned(),
            score: collection.score_document(d),
        })
        .collect();
    scored.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.skill.cmp(&b.skill))
            .then_with(|| a.peer.cmp(&b.peer))
    });
    scored
}

/// Pick the best candidate for `text`, or say why none fits.
pub fn pick(text: &str, candidates: &[Candidate<'_>]) -> Result<Pick, NoPick> {
    pick_over(text, |f| candidates.iter().for_each(f))
}

/// [`pick`] over candidates `each` hands out, twice (the board lent a stretch at a time, never
/// copied): the first pass counts the collection, the second scores each candidate and keeps
/// the best two in [`rank`]'s order (score, then skill, then peer).
pub fn pick_over(
    text: &str,
    mut each: impl FnMut(&mut dyn FnMut(&Candidate<'_>)),
) -> Result<Pick, NoPick> {
    let mut collection = Collection::new(text);
    each(&mut |c| collection.add(c));
    if collection.docs == 0 {
        return Err(NoPick::NoCandidates);
    }
    // Whether `(score, c)` ranks before `than`.
    let before = |score: f64, c: &Candidate<'_>, than: &Scored| {
        score
            .total_cmp(&than.score)
            .reverse()
            .then_with(|| c.skill.cmp(&than.skill))
            .then_with(|| c.peer.cmp(&than.peer))
            .is_lt()
    };
    let (mut best, mut runner_up) = (None::<Scored>, None::<Scored>);
    each(&mut |c| {
        let score = collection.score(c);
        let scored = || Scored {
            peer: c.peer.to_owned(),
            skill: c.skill.to_owned(),
            score,
        };
        if best.as_ref().is_none_or(|b| before(score, c, b)) {
            runner_up = best.replace(scored());
        } else if runner_up.as_ref().is_none_or(|r| before(score, c, r)) {
            runner_up = Some(scored());
        }
    });
    match best {
        Some(best) if best.score >= MIN_SCORE => Ok(Pick {
            peer: best.peer,
            skill: best.skill,
            score: best.score,
            runner_up: runner_up.filter(|r| r.score > 0.0),
        }),
        best => Err(NoPick::NoMatch {
            best_score: best.as_ref().map_or(0.0, |b| b.score),
            best,
            threshold: MIN_SCORE,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules moved: a document reads its name once (its words repeated), and `GET /board`'s
    /// search reads a row through [`mentions`] instead of tokenising it apart. Both answer as
    /// the rules they replace, a name's `-` included.
    #[test]
    fn a_row_reads_as_it_did_before_its_name_was_read_once() {
        let rows = [
            (
                "summarize-meeting-notes",
                "Summaries of meeting notes, by attendee.",
            ),
            ("a-b-c", "the THE reviews, reviewing; reviewed"),
            ("x", ""),
            (
                "music-taste",
                "Describes someone's music taste from listening history.",
            ),
        ];
        for (skill, description) in rows {
            let c = Candidate {
                peer: "P",
                skill,
                description,
            };
            let name = skill.replace('-', " ");
            let mut before = terms(&name);
            before.extend(terms(&name));
            before.extend(terms(description));
            assert_eq!(document(&c), before, "{skill}");
            for q in [
                "meeting",
                "taste history",
                "review",
                "zzz",
                "summary attendee",
                "a b",
            ] {
                let mut words = terms(q);
                words.sort_unstable();
                let was = terms(&name)
                    .iter()
                    .chain(terms(description).iter())
                    .any(|t| words.binary_search(t).is_ok());
                assert_eq!(mentions(&c, &words), was, "{skill} {q}");
            }
        }
    }
}
