//! The skill index's vocabulary: the few terms a skill is found under, and the few terms a
//! search looks up.
//!
//! Both sides derive them with the same pure functions, so a provider and a searcher agree on
//! the index keys without talking. A skill is indexed under one category from the fixed
//! [`CATEGORIES`] list plus its rarest [`MAX_KEYWORDS`] words (idf, repetition breaking ties), idf against the
//! background of real skills the `skill` intent uses ([`crate::intent::BACKGROUND`]); a search
//! uses its request's rarest [`MAX_QUERY_TERMS`] terms, the ones most likely to be some skill's
//! keyword and least likely to be shared by unrelated skills. Terms are the intent's own
//! ([`crate::intent::terms`]: stop-words dropped, lightly stemmed), so "reviewing pull requests"
//! and "review a pull request" meet.
//!
//! A term common across skills would collect more providers than one index key keeps (a DHT
//! server holds a bounded list per key), so [`shards`] spreads it over several keys: a provider
//! registers under one shard (chosen by its peer id), a searcher looks up all of them.

use std::collections::HashMap;

use crate::intent::{background_df, background_documents, terms};

/// Keywords a skill is indexed under (besides its category).
pub const MAX_KEYWORDS: usize = 8;
/// Terms of a request a search looks up (besides the category).
pub const MAX_QUERY_TERMS: usize = 4;
/// The most shards a term is spread over.
pub const MAX_SHARDS: u32 = 16;
/// Categories are the most popular terms of all, but a search reads every shard: eight.
pub const CATEGORY_SHARDS: u32 = 8;
/// The category of a skill no other category fits.
pub const GENERAL: &str = "general";

/// The fixed category list with the words that place a skill in each (matched after
/// [`terms`], so stems meet). Order breaks ties: earlier wins.
pub const CATEGORIES: &[(&str, &[&str])] = &[
    (
        "testing",
        &[
            "test",
            "tests",
            "testing",
            "unit",
            "e2e",
            "playwright",
            "coverage",
            "jest",
            "pytest",
            "qa",
            "assertion",
            "mock",
        ],
    ),
    (
        "security",
        &[
            "security",
            "vulnerability",
            "secure",
            "auth",
            "authentication",
            "threat",
            "secret",
            "owasp",
            "cve",
            "permission",
            "encryption",
            "compliance",
        ],
    ),
    (
        "cloud",
        &[
            "azure",
            "aws",
            "gcp",
            "cloud",
            "kubernetes",
            "docker",
            "terraform",
            "bicep",
            "infrastructure",
            "container",
            "serverless",
            "deploy",
            "deployment",
        ],
    ),
    (
        "devops",
        &[
            "ci",
            "cd",
            "pipeline",
            "workflow",
            "workflows",
            "github",
            "actions",
            "release",
            "build",
            "git",
            "commit",
            "branch",
            "pr",
            "pull",
        ],
    ),
    (
        "data",
        &[
            "data",
            "database",
            "sql",
            "query",
            "queries",
            "csv",
            "analytics",
            "dataset",
            "postgres",
            "postgresql",
            "schema",
            "etl",
            "spreadsheet",
            "excel",
        ],
    ),
    (
        "ai",
        &[
            "ai",
            "llm",
            "model",
            "models",
            "prompt",
            "prompts",
            "agent",
            "agents",
            "mcp",
            "copilot",
            "embedding",
            "rag",
            "openai",
        ],
    ),
    (
        "web",
        &[
            "web",
            "frontend",
            "html",
            "css",
            "react",
            "vue",
            "angular",
            "ui",
            "component",
            "components",
            "browser",
            "javascript",
            "typescript",
            "nextjs",
        ],
    ),
    (
        "code",
        &[
            "code",
            "refactor",
            "refactoring",
            "debug",
            "debugging",
            "function",
            "api",
            "python",
            "rust",
            "java",
            "csharp",
            "dotnet",
            "go",
            "library",
            "sdk",
            "review",
        ],
    ),
    (
        "docs",
        &[
            "documentation",
            "docs",
            "readme",
            "markdown",
            "doc",
            "docstring",
            "comment",
            "comments",
            "specification",
            "spec",
        ],
    ),
    (
        "design",
        &[
            "design",
            "diagram",
            "diagrams",
            "architecture",
            "figma",
            "mermaid",
            "wireframe",
            "ux",
            "accessibility",
            "visual",
        ],
    ),
    (
        "writing",
        &[
            "write",
            "writing",
            "blog",
            "article",
            "email",
            "content",
            "tone",
            "copy",
            "edit",
            "editing",
            "story",
            "translate",
            "translation",
        ],
    ),
    (
        "media",
        &[
            "image",
            "images",
            "video",
            "audio",
            "pdf",
            "presentation",
            "slide",
            "slides",
            "powerpoint",
            "chart",
            "charts",
            "photo",
        ],
    ),
    (
        "business",
        &[
            "plan",
            "planning",
            "project",
            "meeting",
            "product",
            "market",
            "marketing",
            "sales",
            "customer",
            "strategy",
            "finance",
            "budget",
            "roadmap",
        ],
    ),
    (
        "operations",
        &[
            "monitor",
            "monitoring",
            "log",
            "logs",
            "incident",
            "performance",
            "observability",
            "alert",
            "metrics",
            "troubleshoot",
            "troubleshooting",
            "diagnose",
        ],
    ),
    (GENERAL, &[]),
];

/// What a skill is indexed under, or what a search looks up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocabulary {
    /// One of [`CATEGORIES`].
    pub category: &'static str,
    /// Keywords, best first (for a search: rarest first). Never empty words, never stop-words.
    pub keywords: Vec<String>,
}

/// The category and keywords a skill is indexed under. Name terms count twice, as in the
/// intent's scoring: a skill's name is its most deliberate summary.
pub fn skill_vocabulary(name: &str, description: &str) -> Vocabulary {
    let name = name.replace('-', " ");
    let mut words = terms(&name);
    words.extend(terms(&name));
    words.extend(terms(description));
    let mut tf: HashMap<String, u32> = HashMap::new();
    for w in &words {
        *tf.entry(w.clone()).or_default() += 1;
    }
    // Rarity first, as a search orders its terms: the words a request shares with its skill
    // are the specific ones. Repetition only breaks ties.
    let scored = tf
        .into_iter()
        .map(|(t, n)| (idf(&t) + 0.01 * f64::from(n), t));
    Vocabulary {
        category: category_of(&words),
        keywords: best(scored, MAX_KEYWORDS),
    }
}

/// The category and rarest terms of a request, as a search looks them up.
pub fn query_vocabulary(text: &str) -> Vocabulary {
    let words = terms(text);
    let mut unique = words.clone();
    unique.sort_unstable();
    unique.dedup();
    Vocabulary {
        category: category_of(&words),
        keywords: best(unique.into_iter().map(|t| (idf(&t), t)), MAX_QUERY_TERMS),
    }
}

/// The `n` terms of highest weight (ties: alphabetical, so both sides agree).
fn best(scored: impl Iterator<Item = (f64, String)>, n: usize) -> Vec<String> {
    let mut scored: Vec<(f64, String)> = scored.collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().take(n).map(|(_, t)| t).collect()
}

/// How many index keys `term` is spread over: more the more skills of the background use it,
/// so no one key collects more providers than a DHT server keeps for it.
pub fn shards(term: &str) -> u32 {
    let n = background_documents().max(1.0);
    let share = background_df(term) / n;
    match share {
        s if s < 0.02 => 1,
        s if s < 0.05 => 2,
        s if s < 0.10 => 4,
        s if s < 0.20 => 8,
        _ => MAX_SHARDS,
    }
}

/// Inverse document frequency against the background. A term the background never saw
/// weighs as one seen once: rare, but not infinitely so.
pub fn idf(term: &str) -> f64 {
    let n = background_documents();
    let df = background_df(term).max(1.0);
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
}

/// The category whose words the text uses most (ties: the earlier category), or [`GENERAL`].
fn category_of(words: &[String]) -> &'static str {
    static STEMMED: std::sync::OnceLock<Vec<(&'static str, Vec<String>)>> =
        std::sync::OnceLock::new();
    let stemmed = STEMMED.get_or_init(|| {
        CATEGORIES
            .iter()
            .map(|(c, seeds)| {
                let mut s: Vec<String> = seeds.iter().flat_map(|w| terms(w)).collect();
                s.sort_unstable();
                s.dedup();
                (*c, s)
            })
            .collect()
    });
    let mut best = (0usize, GENERAL);
    for (category, seeds) in stemmed {
        let hits = words
            .iter()
            .filter(|w| seeds.binary_search(w).is_ok())
            .count();
        if hits > best.0 {
            best = (hits, category);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_is_indexed_under_its_rare_words_not_its_common_ones() {
        let v = skill_vocabulary(
            "terraform-review",
            "Review Terraform modules for drift and unsafe defaults before they are applied.",
        );
        assert_eq!(v.category, "cloud");
        assert!(v.keywords.contains(&"terraform".to_string()), "{v:?}");
        assert!(v.keywords.len() <= MAX_KEYWORDS);
        for stop in ["the", "for", "and", "are"] {
            assert!(!v.keywords.contains(&stop.to_string()), "{stop} in {v:?}");
        }
    }

    #[test]
    fn a_request_and_the_skill_it_wants_share_a_term() {
        let skill = skill_vocabulary(
            "terraform-review",
            "Review Terraform modules for drift and unsafe defaults before they are applied.",
        );
        let query = query_vocabulary("please look at my terraform module for unsafe defaults");
        assert!(query.keywords.len() <= MAX_QUERY_TERMS);
        assert!(
            query.keywords.iter().any(|k| skill.keywords.contains(k)),
            "{query:?} vs {skill:?}"
        );
    }

    #[test]
    fn rarest_terms_come_first() {
        let q = query_vocabulary("write a test for the mermaid diagram");
        let idfs: Vec<f64> = q.keywords.iter().map(|k| idf(k)).collect();
        assert!(idfs.windows(2).all(|w| w[0] >= w[1]), "{q:?} {idfs:?}");
    }

    #[test]
    fn an_empty_or_stopword_request_has_no_keywords() {
        assert_eq!(
            query_vocabulary("  the of and , ").keywords,
            Vec::<String>::new()
        );
        assert_eq!(query_vocabulary("").category, GENERAL);
    }

    #[test]
    fn common_terms_get_more_shards_than_rare_ones() {
        assert!(
            shards("test") > shards("terraform"),
            "{} {}",
            shards("test"),
            shards("terraform")
        );
        assert_eq!(shards("zzzunseen"), 1);
        assert!((1..=MAX_SHARDS).contains(&shards("code")));
    }

    #[test]
    fn every_category_but_general_has_seed_words() {
        for (c, seeds) in CATEGORIES {
            assert_eq!(seeds.is_empty(), *c == GENERAL, "{c}");
        }
    }
}
