//! Automatic canaries: secrets written in the body that the owner did not mark.
//!
//! Two heuristics, tuned to miss ordinary prose (words, dates, times, units, versions, common
//! numbers): a value that follows a secret keyword (`password is …`, `access code: …`,
//! `PIN 4821`), and a token that looks generated (`PELICAN-42`, `sk-…`, long letter/digit mixes).
//! Both err towards not flagging: an owner who wants a word kept secret marks it.

/// Why a token became a canary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CanaryOrigin {
    /// `[[secret:…]]` in the body.
    Marked,
    /// A line ending in `<!-- secret -->`.
    SecretLine,
    /// The value after a secret keyword (password, passcode, access code, PIN, API key, …).
    Keyword,
    /// A token that looks generated (an API key prefix, a long letter/digit mix, `WORD-42`).
    Entropy,
}

/// A token of the body with its byte offset.
#[derive(Debug, Clone)]
struct Tok<'a> {
    text: &'a str,
    at: usize,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    /// Ends a sentence: the keyword window never crosses it.
    Stop,
    /// `:` or `=`: links a keyword to its value.
    Link,
    Quote,
    Other,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

fn is_quote(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | '`' | '“' | '”' | '‘' | '’' | '«' | '»' | '„'
    )
}

fn tokens(s: &str) -> Vec<Tok<'_>> {
    let mut out = Vec::new();
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if is_word_char(c) {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = it.peek() {
                if !is_word_char(d) {
                    break;
                }
                end = j + d.len_utf8();
                it.next();
            }
            let text = s[i..end].trim_matches(|c| c == '-' || c == '_');
            if !text.is_empty() {
                let at = i + s[i..end].find(text).unwrap_or(0);
                out.push(Tok {
                    text,
                    at,
                    kind: Kind::Word,
                });
            }
        } else if c.is_whitespace() {
            // A blank line ends a sentence; one newline does not (a value may follow on the next).
            if c == '\n' {
                let mut blank = false;
                while let Some(&(_, d)) = it.peek() {
                    if d == '\n' {
                        blank = true;
                    }
                    if !d.is_whitespace() {
                        break;
                    }
                    it.next();
                }
                if blank {
                    out.push(Tok {
                        text: "\n\n",
                        at: i,
                        kind: Kind::Stop,
                    });
                }
            }
        } else {
            let kind = match c {
                '.' | '!' | '?' | ';' | ',' | '(' | ')' | '[' | ']' => Kind::Stop,
                ':' | '=' => Kind::Link,
                q if is_quote(q) => Kind::Quote,
                _ => Kind::Other,
            };
            out.push(Tok {
                text: &s[i..i + c.len_utf8()],
                at: i,
                kind,
            });
        }
    }
    out
}

/// Keywords whose value is a secret whatever it looks like.
const STRONG: &[&str] = &[
    "password",
    "passwd",
    "passcode",
    "passphrase",
    "passkey",
    "pin",
    "pincode",
    "codeword",
    "safeword",
    "watchword",
    "passwort",
];
/// First words of two-word strong keywords, and the second words they take.
const STRONG_PAIRS: &[(&[&str], &[&str])] = &[
    (
        &[
            "access",
            "secret",
            "unlock",
            "door",
            "pin",
            "entry",
            "security",
            "verification",
            "activation",
            "license",
            "licence",
            "admin",
            "master",
            "root",
            "wifi",
            "vault",
            "safe",
            "alarm",
            "gate",
            "login",
            "promo",
            "coupon",
            "discount",
            "voucher",
            "invite",
            "invitation",
            "referral",
        ],
        &["code", "password", "pin", "passcode", "number"],
    ),
    (
        &[
            "api",
            "secret",
            "private",
            "access",
            "license",
            "licence",
            "product",
            "master",
            "encryption",
            "auth",
            "bearer",
            "session",
            "refresh",
            "signing",
            "client",
        ],
        &["key", "token", "secret"],
    ),
    (
        &["secret", "magic", "safe", "code", "pass", "key"],
        &["word", "phrase"],
    ),
];
/// Keywords whose value is a secret only when it looks like one (`the key is …` is usually prose).
const WEAK: &[&str] = &["key", "secret", "token", "code", "combination", "cipher"];

const LINK_WORDS: &[&str] = &["is", "was", "are", "equals", "reads", "remains", "be"];

/// Words that follow `password is` in prose, not as the password.
const NOT_VALUES: &[&str] = &[
    "the",
    "a",
    "an",
    "this",
    "that",
    "these",
    "those",
    "it",
    "its",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "to",
    "of",
    "in",
    "on",
    "at",
    "for",
    "from",
    "by",
    "with",
    "as",
    "and",
    "or",
    "but",
    "not",
    "no",
    "none",
    "nothing",
    "never",
    "always",
    "also",
    "only",
    "just",
    "very",
    "too",
    "so",
    "same",
    "different",
    "your",
    "my",
    "our",
    "their",
    "his",
    "her",
    "any",
    "some",
    "all",
    "each",
    "every",
    "one",
    "two",
    "here",
    "there",
    "below",
    "above",
    "required",
    "needed",
    "necessary",
    "mandatory",
    "optional",
    "incorrect",
    "correct",
    "wrong",
    "right",
    "invalid",
    "valid",
    "secret",
    "private",
    "hidden",
    "confidential",
    "important",
    "unknown",
    "known",
    "empty",
    "blank",
    "strong",
    "weak",
    "long",
    "short",
    "simple",
    "case",
    "safe",
    "secure",
    "unique",
    "new",
    "old",
    "default",
    "available",
    "missing",
    "ready",
    "visible",
    "set",
    "sent",
    "kept",
    "what",
    "which",
    "who",
    "how",
    "where",
    "when",
    "why",
    "you",
    "we",
    "they",
    "he",
    "she",
    "i",
    "me",
    "them",
    "us",
    "can",
    "will",
    "should",
    "must",
    "may",
    "might",
    "could",
    "would",
    "has",
    "have",
    "had",
    "do",
    "does",
    "did",
    "if",
    "then",
    "than",
    "because",
    "given",
    "shown",
    "listed",
    "following",
    "attached",
    "provided",
    "included",
    "user",
    "users",
    "account",
    "admin",
    "key",
    "code",
    "password",
    "pin",
    "token",
    "word",
    "phrase",
    "number",
    "string",
    "value",
    "text",
    "field",
    "example",
    "placeholder",
    "null",
    "true",
    "false",
    "yes",
    "ok",
    "fine",
    "good",
    "bad",
    "easy",
    "hard",
    "too",
    "now",
    "still",
    "already",
    "usually",
    "typically",
    "often",
    "sometimes",
    "rarely",
    "generally",
    "about",
    "like",
    "such",
    "more",
    "less",
    "most",
    "least",
    "over",
    "under",
    "between",
    "into",
    "out",
    "up",
    "down",
    "off",
    "again",
    "once",
    "least",
    "first",
    "last",
    "next",
    "other",
    "another",
    "enough",
    "something",
    "anything",
    "everything",
    "someone",
    "anyone",
    "everyone",
    "unlike",
];
/// First words that make `passphrase is …` prose rather than the phrase.
const PHRASE_PROSE_STARTS: &[&str] = &[
    "not",
    "never",
    "the",
    "a",
    "an",
    "to",
    "be",
    "in",
    "on",
    "at",
    "for",
    "of",
    "required",
    "needed",
    "always",
    "also",
    "only",
    "given",
    "shown",
    "stored",
    "set",
    "below",
    "above",
    "here",
    "there",
    "case",
    "your",
    "my",
    "our",
    "their",
    "what",
    "how",
    "used",
    "kept",
    "sent",
    "too",
    "very",
    "at",
    "made",
    "chosen",
    "generated",
    "secret",
    "private",
    "hidden",
];
const PROSE_SUFFIXES: &[&str] = &[
    "ed", "ing", "ly", "able", "ible", "ive", "ous", "ful", "less",
];

/// Upper-case words that precede a number in ordinary identifiers (`COVID-19`, `ROOM-12`).
const NAMED_NUMBERS: &[&str] = &[
    "covid", "sars", "html", "http", "https", "mpeg", "ecma", "windows", "office", "python",
    "iphone", "galaxy", "pixel", "xbox", "ipad", "cuda", "geforce", "ryzen", "intel", "core",
    "node", "java", "fifa", "euro", "boeing", "airbus", "route", "ansi", "ieee", "ascii",
    "unicode", "nasa", "model", "type", "class", "order", "part", "item", "case", "step", "phase",
    "level", "version", "room", "gate", "flight", "zone", "line", "table", "figure", "chapter",
    "section", "page", "rule", "article", "team", "group", "plan", "tier", "error", "code", "http",
    "year", "week", "day", "unit", "lesson", "module", "task", "issue", "ticket", "test", "round",
    "grade", "size", "area", "block", "floor", "building", "apollo", "agent", "mark", "mach",
    "form", "note", "annex", "appendix", "exhibit", "volume", "series", "season", "episode", "top",
    "gpt", "llama", "claude", "gemini", "mistral", "sha", "ipv",
];

/// Known prefixes of generated API keys and tokens.
const KEY_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "pk_",
    "rk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxs-",
    "glpat-",
    "hf_",
    "npm_",
    "pypi-",
    "AKIA",
    "ASIA",
    "AIza",
];

fn alnum_count(s: &str) -> usize {
    s.chars().filter(|c| c.is_alphanumeric()).count()
}

/// A lower-case dictionary-looking word that reads as prose after `password is`.
fn prose_word(v: &str) -> bool {
    let l = v.to_lowercase();
    if NOT_VALUES.contains(&l.as_str()) {
        return true;
    }
    let plain = v.chars().all(|c| c.is_ascii_lowercase());
    plain && l.len() > 4 && PROSE_SUFFIXES.iter().any(|s| l.ends_with(s))
}

/// A token that looks generated, on its own (no keyword needed).
pub fn looks_generated(t: &str) -> bool {
    let n = alnum_count(t);
    for p in KEY_PREFIXES {
        if let Some(rest) = t.strip_prefix(p)
            && alnum_count(rest) >= 10
        {
            return true;
        }
    }
    let letters = t.chars().filter(|c| c.is_ascii_alphabetic()).count();
    let digits = t.chars().filter(|c| c.is_ascii_digit()).count();
    let upper = t.chars().filter(|c| c.is_ascii_uppercase()).count();
    let lower = t.chars().filter(|c| c.is_ascii_lowercase()).count();
    let class = |c: char| {
        if c.is_ascii_digit() {
            0
        } else if c.is_ascii_uppercase() {
            1
        } else if c.is_ascii_lowercase() {
            2
        } else {
            3
        }
    };
    let classes: Vec<u8> = t
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(class)
        .collect();
    let transitions = classes.windows(2).filter(|w| w[0] != w[1]).count();
    // Letter/digit changes, not case changes: hashes, keys, UUIDs.
    let ld_transitions = classes
        .windows(2)
        .filter(|w| (w[0] == 0) != (w[1] == 0))
        .count();
    if n >= 16 && letters >= 3 && digits >= 3 && ld_transitions >= 4 {
        return true;
    }
    if (8..16).contains(&n) && upper >= 2 && lower >= 2 && digits >= 2 && transitions >= 5 {
        return true;
    }
    shout_number(t)
}

/// `PELICAN-42`, `ORCHID_7731`, `TANGO42`: upper-case letter parts and digit parts, one of each at
/// least, the letters not a common name that precedes numbers.
fn shout_number(t: &str) -> bool {
    let mut parts: Vec<&str> = t.split(['-', '_']).filter(|p| !p.is_empty()).collect();
    if parts.len() == 1 {
        // Split a glued `TANGO42` at its letter/digit boundary.
        let p = parts[0];
        match p.find(|c: char| c.is_ascii_digit()) {
            Some(i) if i > 0 && p[i..].chars().all(|c| c.is_ascii_digit()) => {
                parts = vec![&p[..i], &p[i..]];
            }
            _ => return false,
        }
    }
    if parts.len() > 4 {
        return false;
    }
    let caps = |p: &&str| p.chars().all(|c| c.is_ascii_uppercase());
    let nums = |p: &&str| p.chars().all(|c| c.is_ascii_digit());
    if !parts.iter().all(|p| caps(p) || nums(p)) {
        return false;
    }
    let has_word = parts.iter().any(|p| caps(p) && p.len() >= 4);
    let has_num = parts.iter().any(|p| nums(p) && p.len() >= 2);
    let named = parts
        .iter()
        .any(|p| caps(p) && NAMED_NUMBERS.contains(&p.to_ascii_lowercase().as_str()));
    has_word && has_num && !named
}

/// Looks like a secret value after a weak keyword.
fn secret_shaped(v: &str) -> bool {
    let n = alnum_count(v);
    let digits = v.chars().filter(|c| c.is_ascii_digit()).count();
    let all_caps = v.chars().filter(|c| c.is_alphabetic()).count() >= 4
        && v.chars().all(|c| !c.is_lowercase());
    n >= 4 && (digits >= 1 && !prose_word(v) || all_caps || looks_generated(v))
}

/// One found secret: its text as written and the byte offset where it starts.
pub struct Found {
    pub text: String,
    pub at: usize,
    pub origin: CanaryOrigin,
}

fn keyword_at(toks: &[Tok<'_>], i: usize) -> Option<(usize, bool, bool)> {
    // (tokens the keyword spans, strong, takes a phrase)
    let w = |k: usize| {
        toks.get(k)
            .filter(|t| t.kind == Kind::Word)
            .map(|t| t.text.to_lowercase())
    };
    let first = w(i)?;
    if let Some(second) = w(i + 1) {
        for (firsts, seconds) in STRONG_PAIRS {
            if firsts.contains(&first.as_str()) && seconds.contains(&second.as_str()) {
                return Some((2, true, second == "phrase"));
            }
        }
    }
    if STRONG.contains(&first.as_str()) {
        return Some((1, true, first == "passphrase"));
    }
    if WEAK.contains(&first.as_str()) {
        return Some((1, false, false));
    }
    None
}

/// Values after secret keywords.
fn keyword_values(body: &str, toks: &[Tok<'_>], out: &mut Vec<Found>) {
    let mut i = 0;
    while i < toks.len() {
        let Some((span, strong, phrase)) = keyword_at(toks, i) else {
            i += 1;
            continue;
        };
        let mut j = i + span;
        // Up to four words before a linking word ("the access code for the vault is …").
        let mut linked = false;
        let mut gap = 0;
        let start = j;
        while let Some(t) = toks.get(j) {
            match t.kind {
                Kind::Link => {
                    linked = true;
                    j += 1;
                }
                Kind::Word if LINK_WORDS.contains(&t.text.to_lowercase().as_str()) => {
                    linked = true;
                    j += 1;
                }
                Kind::Word if !linked && gap < 4 => {
                    gap += 1;
                    j += 1;
                }
                _ => break,
            }
            if linked {
                // Further links ("is:") are skipped; the next non-link token is the value.
                while let Some(t) = toks.get(j) {
                    let more = t.kind == Kind::Link
                        || (t.kind == Kind::Word
                            && LINK_WORDS.contains(&t.text.to_lowercase().as_str()));
                    if !more {
                        break;
                    }
                    j += 1;
                }
                break;
            }
        }
        if !linked {
            // No linking word: only a strong keyword directly followed by a generated-looking
            // value counts ("access code 7719", "PIN 4821").
            j = start;
            if let Some(t) = toks.get(j)
                && strong
                && t.kind == Kind::Word
                && (t.text.chars().filter(|c| c.is_ascii_digit()).count() >= 4
                    || looks_generated(t.text))
            {
                out.push(Found {
                    text: t.text.to_owned(),
                    at: t.at,
                    origin: CanaryOrigin::Keyword,
                });
            }
            i += span;
            continue;
        }
        match toks.get(j) {
            Some(q) if q.kind == Kind::Quote => {
                // A quoted value: everything up to the closing quote on the same line.
                let from = q.at + q.text.len();
                let rest = &body[from..];
                let end = rest
                    .find(|c: char| is_quote(c) || c == '\n')
                    .unwrap_or(rest.len())
                    .min(200);
                let mut end = end;
                while !rest.is_char_boundary(end) {
                    end -= 1;
                }
                let v = rest[..end].trim();
                if alnum_count(v) >= 3 && (strong || secret_shaped(v) || !prose_word(v)) {
                    out.push(Found {
                        text: v.to_owned(),
                        at: from,
                        origin: CanaryOrigin::Keyword,
                    });
                }
            }
            Some(t) if t.kind == Kind::Word => {
                if phrase {
                    // A passphrase runs to the end of its sentence (at most eight words).
                    let words: Vec<&Tok<'_>> = toks[j..]
                        .iter()
                        .take_while(|t| t.kind == Kind::Word)
                        .take(8)
                        .collect();
                    if let (Some(a), Some(b)) = (words.first(), words.last()) {
                        let v = &body[a.at..b.at + b.text.len()];
                        let prose = if words.len() == 1 {
                            prose_word(a.text)
                        } else {
                            PHRASE_PROSE_STARTS.contains(&a.text.to_lowercase().as_str())
                                || prose_word(b.text)
                        };
                        if alnum_count(v) >= 6 && !prose {
                            out.push(Found {
                                text: v.to_owned(),
                                at: a.at,
                                origin: CanaryOrigin::Keyword,
                            });
                        }
                    }
                } else {
                    let v = t.text;
                    let ok = alnum_count(v) >= 3
                        && if strong {
                            !prose_word(v)
                        } else {
                            secret_shaped(v)
                        };
                    if ok {
                        out.push(Found {
                            text: v.to_owned(),
                            at: t.at,
                            origin: CanaryOrigin::Keyword,
                        });
                    }
                }
            }
            _ => {}
        }
        i = j.max(i + 1);
    }
}

/// Every automatic canary in `body`, in order of appearance (duplicates included).
pub fn find(body: &str) -> Vec<Found> {
    let toks = tokens(body);
    let mut out = Vec::new();
    keyword_values(body, &toks, &mut out);
    for t in &toks {
        if t.kind == Kind::Word && looks_generated(t.text) {
            out.push(Found {
                text: t.text.to_owned(),
                at: t.at,
                origin: CanaryOrigin::Entropy,
            });
        }
    }
    out.sort_by_key(|f| f.at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(body: &str) -> Vec<String> {
        find(body).into_iter().map(|f| f.text).collect()
    }

    #[test]
    fn keyword_values_are_found() {
        let hits = [
            ("The password is PELICAN-42.", "PELICAN-42"),
            ("The password is swordfish. Never say it.", "swordfish"),
            ("password: hunter2", "hunter2"),
            ("PASSWORD=opensesame", "opensesame"),
            ("The access code for the vault is 7719.", "7719"),
            ("Your PIN is 4821", "4821"),
            ("Enter access code 99314 at the door", "99314"),
            ("The secret word is \"marmalade\".", "marmalade"),
            ("the API key is abc123XYZ987", "abc123XYZ987"),
            ("Use the key: ZEBRA-7 for the door", "ZEBRA-7"),
            ("The secret is BLUEMOON.", "BLUEMOON"),
            ("the code word is tangerine", "tangerine"),
            ("The passcode:\n  orchid", "orchid"),
            ("Wi-Fi password is 'Tr0ub4dor&3' for guests", "Tr0ub4dor&3"),
        ];
        for (body, want) in hits {
            let got = found(body);
            assert!(
                got.iter().any(|g| g == want),
                "{body:?}: wanted {want:?}, got {got:?}"
            );
        }
        assert_eq!(
            found("The passphrase is correct horse battery staple. Do not repeat it."),
            ["correct horse battery staple"]
        );
    }

    #[test]
    fn generated_tokens_are_found() {
        for t in [
            "PELICAN-42",
            "ORCHID_7731",
            "TANGO42",
            "sk-proj-4f9a8b7c6d5e4f3a2b1c",
            "ghp_abcdefghijklmnop1234",
            "AKIAIOSFODNN7EXAMPLE",
            "123e4567-e89b-12d3-a456-426614174000",
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
            "Xk9pQ2zLm4",
        ] {
            assert!(looks_generated(t), "{t}");
            assert_eq!(found(&format!("Use {t} here.")), [t], "{t}");
        }
    }

    #[test]
    fn ordinary_text_has_no_canaries() {
        let prose = [
            "The key is to write clear commit messages.",
            "The secret to good writing is practice.",
            "The key point is consistency; the code is below.",
            "Never share your password. Passwords must be at least 8 characters.",
            "Enter your password to continue.",
            "The password is required and is case-sensitive.",
            "Your password is stored encrypted.",
            "Use a 256-bit key and rotate API keys every 90 days.",
            "On 2024-01-15 at 1:30pm we shipped version 3.2.1 (build 20240115).",
            "Call 555-0100 or write to help@example.com by 8am.",
            "Launch three EC2 instances behind Route 53 in us-east-1 with S3 and 5V power.",
            "COVID-19 cases rose; GPT-4 and UTF-8 and SHA-256 and ISO-8601 are standards.",
            "Read chapter 12, ROOM-101 and TABLE-3, then iPhone15 and McDonald2024 notes.",
            "npm ERR! code ERESOLVE unable to resolve dependency tree",
            "the members have a key which is typically a single letter",
            "Key benefit: nice good. Token limit: 500 words. Pin the tweet 2 times.",
            "I want you to act as a software developer and write code for a secure app.",
            "The combination of steps is simple; the token is a word piece.",
            "Write a python code which creates a passphrase. The first part should be random.",
            "state-of-the-art models in 2023, x86_64, loop1000.py, #Qatar2022, 16ms, 3rd",
        ];
        for p in prose {
            assert!(found(p).is_empty(), "{p:?} gave {:?}", found(p));
        }
    }
}
