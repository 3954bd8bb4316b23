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

/// Ends a line: a keyword's value never runs past one (`\r` alone, form feed and the Unicode line
/// and paragraph separators end a line as `\n` does).
fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// How the text between two tokens (byte offsets `from` and `to` of `body`) goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Between {
    /// On the same line.
    SameLine,
    /// One line break, and the next line starts in lower case: a hard-wrapped sentence going
    /// on (`the passphrase for the nightly⏎backup is …`).
    Wrapped,
    /// Any other line end: a new sentence (a capital), a list item, a heading, a fence, a
    /// quote, a blank line.
    LineEnd,
}

fn between(body: &str, from: usize, to: usize) -> Between {
    let Some(gap) = body.get(from..to) else {
        return Between::LineEnd;
    };
    if !gap.contains(is_line_break) {
        return Between::SameLine;
    }
    // `\r\n` is one line end; anything else than whitespace (a `-` list marker a token left
    // out) or a second line end is not a wrap.
    let ends = gap.chars().filter(|&c| is_line_break(c)).count() - gap.matches("\r\n").count();
    let lower = body[to..].chars().next().is_some_and(char::is_lowercase);
    if ends == 1 && lower && gap.chars().all(char::is_whitespace) {
        Between::Wrapped
    } else {
        Between::LineEnd
    }
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

/// Everyday words a sentence about a password goes on with, which no owner picks as one
/// (review 29 R29-12): `The password policy is strict.`, `the password you choose is⏎yours
/// alone`, `…door⏎is written on the whiteboard.`, `the⏎answer is: ask at the counter.` Each was
/// a canary, and every ordinary answer writing the word was withheld. Pronouns, the irregular
/// participles the `-ed` rule of [`prose_word`] misses, verbs a sentence goes on with, and
/// adjectives of a password rule; a phrase's words are held to the same list.
///
/// Where a sentence ends on one (review 30 R30-8), it may be the password after all (`The staff
/// password is mine.`, `The wifi password is Forgotten.`, `The door password is open sesame.`):
/// see [`everyday_value`]. The lists are kept apart by what such a word does there.
const EVERYDAY_PRONOUNS: &[&str] = &[
    "yours",
    "mine",
    "ours",
    "theirs",
    "hers",
    "yourself",
    "myself",
    "ourselves",
    "themselves",
    "himself",
    "herself",
    "itself",
    "whatever",
    "whoever",
];

/// Participles the `-ed` rule misses (or a capital hides from it): see [`EVERYDAY_PRONOUNS`].
const EVERYDAY_PARTICIPLES: &[&str] = &[
    "written",
    "printed",
    "posted",
    "changed",
    "shared",
    "stored",
    "saved",
    "taped",
    "stuck",
    "taken",
    "chosen",
    "hidden",
    "broken",
    "forgotten",
    "spoken",
    "stolen",
    "shown",
    "known",
    "given",
    "done",
    "gone",
    "seen",
    "made",
    "found",
    "held",
    "told",
    "left",
    "lost",
    "read",
    "said",
    "sent",
    "kept",
    "put",
    "got",
    "gotten",
    "built",
    "hung",
    "displayed",
    "located",
    "reset",
    "expired",
    "locked",
    "protected",
    "encrypted",
    "hashed",
];

/// Verbs a sentence goes on with: see [`EVERYDAY_PRONOUNS`].
const EVERYDAY_VERBS: &[&str] = &[
    "ask", "see", "check", "call", "contact", "email", "use", "enter", "type", "find", "get",
    "visit", "request", "change", "choose", "pick", "follow", "look", "try", "go", "come", "keep",
    "tell", "say", "give", "take", "make", "need", "want", "write", "print", "post", "share",
    "update", "rotate", "expire", "remember", "forget", "note", "click", "press", "open", "scan",
    "sign", "login", "log", "contains", "includes", "changes", "expires", "depends", "matches",
];

/// Adjectives of a password rule, and where it is: prose wherever they stand (`The password is
/// required.`). See [`EVERYDAY_PRONOUNS`].
const EVERYDAY_RULES: &[&str] = &[
    "required",
    "needed",
    "strict",
    "strictly",
    "simple",
    "complex",
    "personal",
    "temporary",
    "random",
    "sensitive",
    "public",
    "lowercase",
    "uppercase",
    "alphanumeric",
    "numeric",
    "standard",
    "generic",
    "common",
    "special",
    "current",
    "previous",
    "latest",
    "real",
    "actual",
    "full",
    "fixed",
    "inside",
    "outside",
    "beneath",
    "behind",
    "nearby",
    "elsewhere",
    "somewhere",
    "everywhere",
    "unchanged",
    "different",
    "similar",
    "identical",
    "obvious",
];

/// What an everyday word (see [`EVERYDAY_PRONOUNS`]) is, by its list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Everyday {
    Pronoun,
    Participle,
    Verb,
    Rule,
}

/// Which everyday list a folded-case word is on, if any.
fn everyday(l: &str) -> Option<Everyday> {
    [
        (EVERYDAY_PRONOUNS, Everyday::Pronoun),
        (EVERYDAY_PARTICIPLES, Everyday::Participle),
        (EVERYDAY_VERBS, Everyday::Verb),
        (EVERYDAY_RULES, Everyday::Rule),
    ]
    .into_iter()
    .find_map(|(list, kind)| list.contains(&l).then_some(kind))
}

/// A dictionary-looking word that reads as prose after `password is`: a word of [`NOT_VALUES`],
/// the everyday lists ([`EVERYDAY_PRONOUNS`] and after) or the common function words
/// (`window::is_common`), in any case, or a lower-case word with a prose ending (`-ed`, `-ing`,
/// …).
fn prose_word(v: &str) -> bool {
    let l = v.to_lowercase();
    if NOT_VALUES.contains(&l.as_str()) || everyday(&l).is_some() || crate::window::is_common(&l) {
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
    // A random token in one case (`k3j9fhq2lz`, `x7v2pqm41t`): ten or more letters and digits,
    // two digits at least, in two separate runs — a word with a number before or after it
    // (`McDonald2024`, `iphone15promax`, `ubuntu2204lts`) has one run, and an identifier made of
    // words (`utf8mb4_unicode_ci`) is cut at its separators first.
    let digit_runs = |p: &str| {
        p.chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<Vec<_>>()
            .split(|c| !c.is_ascii_digit())
            .filter(|r| !r.is_empty())
            .count()
    };
    if t.split(['-', '_']).any(|p| {
        let digits = p.chars().filter(|c| c.is_ascii_digit()).count();
        let letters = p.chars().filter(|c| c.is_ascii_alphabetic()).count();
        alnum_count(p) >= 10 && letters >= 2 && digits >= 2 && digit_runs(p) >= 2
    }) {
        return true;
    }
    shout_number(t)
}

/// Passwords inside URLs: `scheme://user:password@host` (`postgres://app:hunter2x9@db/prod`).
/// A URL with a user and no password, or a port (`host:8080`, no `@`), gives nothing.
fn url_passwords(body: &str, out: &mut Vec<Found>) {
    let mut from = 0;
    while let Some(k) = body[from..].find("://") {
        let start = from + k + 3;
        from = start;
        let rest = &body[start..];
        // The authority ends at the first `/`, `?`, `#` or whitespace; the user info at its
        // last `@`.
        let end = rest
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        let Some(at) = authority.rfind('@') else {
            continue;
        };
        let Some(colon) = authority[..at].find(':') else {
            continue;
        };
        let password = &authority[colon + 1..at];
        if alnum_count(password) >= 3 {
            out.push(Found {
                text: password.to_owned(),
                at: start + colon + 1,
                origin: CanaryOrigin::Keyword,
            });
        }
    }
}

/// Groups of digits and capital letters written with single spaces or dashes between them
/// (`DE89 3704 0044 0532 0130 00`, `4111-1111-1111-1111`): per run, the groups' byte ranges.
fn grouped_runs(body: &str) -> Vec<Vec<(usize, usize)>> {
    let b = body.as_bytes();
    let code = |c: u8| c.is_ascii_digit() || c.is_ascii_uppercase();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !code(b[i]) || (i > 0 && b[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let mut groups = Vec::new();
        let mut j = i;
        loop {
            let g = j;
            while j < b.len() && code(b[j]) {
                j += 1;
            }
            if j < b.len() && b[j].is_ascii_alphanumeric() {
                // The group runs into a lower-case letter: a word, not a number.
                break;
            }
            groups.push((g, j));
            if j + 1 < b.len() && (b[j] == b' ' || b[j] == b'-') && code(b[j + 1]) {
                j += 1;
            } else {
                break;
            }
        }
        if !groups.is_empty() {
            runs.push(groups);
        }
        i = j.max(i + 1);
    }
    runs
}

/// IBANs (country, two check digits, 11 to 30 letters and digits, mod 97 = 1) and card numbers
/// (15 or 16 digits from an issuer's first digit 2 to 6, Luhn-valid), as any stretch of whole
/// groups of a run (`IBAN DE89 …`, `VISA 4111 …`). The checksums keep ordinary long numbers out:
/// a number that fails them is not a canary.
fn account_numbers(body: &str, out: &mut Vec<Found>) {
    for groups in grouped_runs(body) {
        let mut a = 0;
        while a < groups.len() {
            let mut hit = None;
            let mut chars = String::new();
            for (k, &(_, e)) in groups.iter().enumerate().skip(a) {
                let (s, _) = groups[k];
                chars.push_str(&body[s..e]);
                if chars.len() > 34 {
                    break;
                }
                if is_iban(&chars) || is_card(&chars) {
                    hit = Some(k);
                }
            }
            match hit {
                Some(k) => {
                    let (start, end) = (groups[a].0, groups[k].1);
                    out.push(Found {
                        text: body[start..end].to_owned(),
                        at: start,
                        origin: CanaryOrigin::Entropy,
                    });
                    a = k + 1;
                }
                None => a += 1,
            }
        }
    }
}

fn is_iban(s: &str) -> bool {
    let b = s.as_bytes();
    if !(15..=34).contains(&b.len())
        || !b[..2].iter().all(u8::is_ascii_uppercase)
        || !b[2..4].iter().all(u8::is_ascii_digit)
    {
        return false;
    }
    // Move the first four to the end, letters as 10..35, the number mod 97 must be 1.
    let mut r: u32 = 0;
    for &c in b[4..].iter().chain(&b[..4]) {
        let v = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'A'..=b'Z' => u32::from(c - b'A') + 10,
            _ => return false,
        };
        r = if v >= 10 {
            (r * 100 + v) % 97
        } else {
            (r * 10 + v) % 97
        };
    }
    r == 1
}

fn is_card(s: &str) -> bool {
    let b = s.as_bytes();
    if !(15..=16).contains(&b.len())
        || !b.iter().all(u8::is_ascii_digit)
        || !(b'2'..=b'6').contains(&b[0])
    {
        return false;
    }
    let sum: u32 = b
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &c)| {
            let d = u32::from(c - b'0');
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
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

/// Words a keyword may stand apart from its link ("the password used by the admin console
/// is …": five). Measured against the canary and false-positive corpora of the guard's tests
/// (review 28 R28-10: four lost that sentence's value).
const GAP_WORDS: usize = 8;

/// The passphrase `words` (consecutive word tokens of `body`) as a canary, unless it reads as
/// prose or is too short.
fn phrase_value(body: &str, words: &[&Tok<'_>]) -> Option<Found> {
    let (a, b) = (words.first()?, words.last()?);
    let v = &body[a.at..b.at + b.text.len()];
    let prose = if words.len() == 1 {
        prose_word(a.text)
    } else {
        PHRASE_PROSE_STARTS.contains(&a.text.to_lowercase().as_str()) || prose_word(b.text)
    };
    // A phrase wrapped onto the next line is written with a space there, as it is read.
    let v = if v.contains(is_line_break) {
        v.split_whitespace().collect::<Vec<_>>().join(" ")
    } else {
        v.to_owned()
    };
    (alnum_count(&v) >= 6 && !prose).then_some(Found {
        text: v,
        at: a.at,
        origin: CanaryOrigin::Keyword,
    })
}

/// Whether the word `toks[j]` ends its sentence: the text ends there, a full stop, `!`, `?`, `;`
/// or a blank line follows, or the next token starts a line of its own (not a wrap).
fn ends_sentence(body: &str, toks: &[Tok<'_>], j: usize) -> bool {
    let t = &toks[j];
    match toks.get(j + 1) {
        None => true,
        Some(n) if n.kind == Kind::Stop => matches!(n.text, "." | "!" | "?" | ";" | "\n\n"),
        Some(n) => between(body, t.at + t.text.len(), n.at) == Between::LineEnd,
    }
}

/// Words of a warning about the secret after its value, among the first [`WARNING_REACH`] words
/// of the clause after it: `do not share it`, `never tell it`, `keep it private`, `and only staff
/// may know it`, `please do not`, `but never`, `which you must never share`, `guests must not
/// see it`, `it is secret`, `for staff only`. A contraction is its stem: the tokens split `don't`
/// and `don’t` (any apostrophe) at the quote, so `don`, `mustn`, `shouldn`. `keep` counts
/// before `it` only, `do` as the clause's first word only.
const WARNING_WORDS: &[&str] = &[
    "never",
    "not",
    "don",
    "dont",
    "keep",
    "only",
    "must",
    "mustn",
    "shouldn",
    "secret",
    "private",
    "confidential",
];

/// How many words after the value's mark a warning's word ([`WARNING_WORDS`]) may stand.
const WARNING_REACH: usize = 3;

/// Whether the value `toks[j]` ends its clause: its sentence ends there ([`ends_sentence`]), or
/// a comma, a colon, a bracket or a dash standing apart follows and then, within the clause's
/// first [`WARNING_REACH`] words, a warning about it ([`WARNING_WORDS`]; review 31 R31-7: `The
/// wifi password is Forgotten, do not share it.`, `…is mine - never tell it.`, `…is open sesame
/// (never tell it).`, `…is mine, and only staff may know it.`; review 32 R32-8: `…is Forgotten:
/// do not share it.`, `…, please do not…`, `…, but never…`, `…, don’t…`, `— please keep it
/// private.`, `(staff only)`), or `and` follows with a prohibition (`…and must not be shared.`).
/// A sentence that goes on otherwise after the mark is prose (`Your password is yours, so
/// choose it well`).
fn ends_value(body: &str, toks: &[Tok<'_>], j: usize) -> bool {
    if ends_sentence(body, toks, j) {
        return true;
    }
    let t = &toks[j];
    let Some(n) = toks.get(j + 1) else {
        return true;
    };
    // A dash standing apart is no token (`-` is a word character, trimmed away).
    let dash = matches!(
        body.get(t.at + t.text.len()..n.at).map(str::trim),
        Some("-" | "--")
    );
    // `and` with no mark before it: a prohibition only (`…is mine and only mine` is prose).
    let bare_and = !dash && n.kind == Kind::Word && n.text.eq_ignore_ascii_case("and");
    let after = match n.kind {
        Kind::Stop if matches!(n.text, "," | "(" | "[") => j + 2,
        Kind::Link if n.text == ":" => j + 2,
        Kind::Other if matches!(n.text, "—" | "–") => j + 2,
        Kind::Word if dash => j + 1,
        Kind::Word if bare_and => j + 2,
        _ => return false,
    };
    let words: Vec<String> = toks
        .get(after..)
        .unwrap_or_default()
        .iter()
        .take_while(|t| t.kind != Kind::Stop)
        .filter(|t| t.kind == Kind::Word)
        .take(WARNING_REACH + 1)
        .map(|t| t.text.to_lowercase())
        .collect();
    words.iter().take(WARNING_REACH).enumerate().any(|(k, w)| {
        let strong = matches!(
            w.as_str(),
            "never" | "not" | "don" | "dont" | "must" | "mustn"
        );
        let warning = match w.as_str() {
            // `keep it private`, not `so keep an eye on the board`.
            "keep" => words.get(k + 1).is_some_and(|n| n == "it"),
            "do" => k == 0,
            w => WARNING_WORDS.contains(&w),
        };
        warning && (strong || !bare_and)
    })
}

/// The value an everyday word (`toks[j]`, after a strong keyword `gap` words before its link)
/// still is (review 30 R30-8): the everyday lists were made for a sentence that goes on
/// (`…is written on the whiteboard`, `…is: ask at the counter`, `The password policy is strict.`),
/// and an owner's real password may be such a word. So, where the word ends its sentence, it
/// is the value when written with a capital (`The wifi password is Forgotten.`), or, a pronoun or
/// a verb, right after `password is` (`The staff password is mine.`); a verb with one more word
/// that is no prose word, ending the sentence, is a phrase (`The door password is open
/// sesame.`). A rule's adjective (`required`, `strict`) is prose wherever it stands; a word the
/// sentence goes on after is prose, capitalised or not (`is Posted by the door`). `None` for a
/// word on no everyday list (the other rules decide).
fn everyday_value(body: &str, toks: &[Tok<'_>], j: usize, gap: usize) -> Option<Found> {
    let t = &toks[j];
    let l = t.text.to_lowercase();
    let kind = everyday(&l)?;
    if NOT_VALUES.contains(&l.as_str()) || crate::window::is_common(&l) || alnum_count(t.text) < 3 {
        return None;
    }
    let found = |text: &str| Found {
        text: text.to_owned(),
        at: t.at,
        origin: CanaryOrigin::Keyword,
    };
    if let Some(n) = toks.get(j + 1)
        && kind == Everyday::Verb
        && gap == 0
        && n.kind == Kind::Word
        && between(body, t.at + t.text.len(), n.at) == Between::SameLine
        && alnum_count(n.text) >= 3
        && !prose_word(n.text)
        && ends_value(body, toks, j + 1)
    {
        return Some(found(&body[t.at..n.at + n.text.len()]));
    }
    let capital = t.text.chars().next().is_some_and(char::is_uppercase);
    let said = gap == 0 && matches!(kind, Everyday::Pronoun | Everyday::Verb);
    (kind != Everyday::Rule && ends_value(body, toks, j) && (capital || said))
        .then(|| found(t.text))
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
        // Up to [`GAP_WORDS`] words before a linking word ("the access code for the vault is
        // …", "the password used by the admin console is …"), in the keyword's sentence: on its
        // line or on a line it is wrapped onto (the next line starts in lower case, see
        // [`between`]); a word on a line that starts otherwise begins a sentence of its own, not
        // the keyword's (a link there, `Password⏎: hunter2`, still leads to a value).
        let mut linked = false;
        let mut gap = 0;
        let start = j;
        let mut prev_end = toks[j - 1].at + toks[j - 1].text.len();
        while let Some(t) = toks.get(j) {
            let next_line = between(body, prev_end, t.at) == Between::LineEnd;
            prev_end = t.at + t.text.len();
            match t.kind {
                Kind::Link => {
                    linked = true;
                    j += 1;
                }
                Kind::Word if LINK_WORDS.contains(&t.text.to_lowercase().as_str()) => {
                    linked = true;
                    j += 1;
                }
                Kind::Word if !linked && gap < GAP_WORDS && !next_line => {
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
                    .find(|c: char| is_quote(c) || is_line_break(c))
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
                    // A passphrase runs to the end of its sentence (at most eight words) and
                    // never past the end of the line it starts on: a phrase written last on its
                    // line with no full stop is not joined to the next line's words (a canary no
                    // answer carries, or read as prose and dropped). A line the sentence is
                    // wrapped onto (it starts in lower case) goes on with the phrase up to its
                    // first function word (`velvet⏎otter compass and nothing else`): the words
                    // on the phrase's first line are a canary of their own too, so a phrase last
                    // on its line before a lower-case line is caught as written as well.
                    let mut words: Vec<&Tok<'_>> = Vec::new();
                    let mut first_line = None;
                    for w in toks[j..]
                        .iter()
                        .take_while(|t| t.kind == Kind::Word)
                        .take(8)
                    {
                        if let Some(p) = words.last() {
                            match between(body, p.at + p.text.len(), w.at) {
                                Between::SameLine => {}
                                Between::Wrapped if first_line.is_none() => {
                                    first_line = Some(words.len());
                                }
                                Between::Wrapped | Between::LineEnd => break,
                            }
                            if first_line.is_some()
                                && NOT_VALUES.contains(&w.text.to_lowercase().as_str())
                            {
                                break;
                            }
                        }
                        words.push(w);
                    }
                    let first_line = first_line.filter(|&n| n < words.len());
                    for words in first_line
                        .map(|n| &words[..n])
                        .into_iter()
                        .chain([&words[..]])
                    {
                        if let Some(f) = phrase_value(body, words) {
                            out.push(f);
                        }
                    }
                } else if let Some(f) = strong.then(|| everyday_value(body, toks, j, gap)).flatten()
                {
                    out.push(f);
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
    url_passwords(body, &mut out);
    account_numbers(body, &mut out);
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
    fn an_everyday_word_after_a_keyword_is_no_value() {
        // Review 29 R29-12's four bodies: each made an everyday word a canary, and an ordinary
        // answer writing it was withheld.
        let spec = crate::GuardSpec::default_for(false);
        for (body, answer) in [
            (
                "The password policy is strict.",
                "Be strict about the grind size and the water temperature.",
            ),
            (
                "Remember: the password you choose is\nyours alone.",
                "That choice is yours, and either option works.",
            ),
            (
                "The password for the staff lounge door\nis written on the whiteboard.",
                "Everything we agreed is written in the meeting notes.",
            ),
            (
                "For the wifi password the\nanswer is: ask at the counter.",
                "If you are unsure, ask your manager before you start.",
            ),
            (
                "The password is Posted by the door.",
                "It was posted yesterday.",
            ),
        ] {
            assert!(found(body).is_empty(), "{body:?}: {:?}", found(body));
            let prepared = crate::prepare(body, &spec).expect("prepare");
            assert!(
                !crate::check(&prepared, answer).is_caught(),
                "{body:?}: {answer:?} withheld"
            );
        }
        // A word an owner does pick stays a value.
        assert_eq!(found("The password is tangerine."), ["tangerine"]);
        assert_eq!(found("The password is Dragonfly."), ["Dragonfly"]);
    }

    /// Review 30 R30-8: real passwords that are everyday words, each read as prose and
    /// dropped (an answer giving it released with canary 0); and the everyday words prose
    /// writes after `password is` stay none.
    #[test]
    fn a_real_password_that_is_an_everyday_word_stays_a_value() {
        let spec = crate::GuardSpec::default_for(false);
        for (body, want, answer) in [
            (
                "The door password is open sesame. Never tell it.",
                "open sesame",
                "open sesame",
            ),
            (
                "The wifi password is Forgotten. Never tell it.",
                "Forgotten",
                "Sure: Forgotten",
            ),
            (
                "The password is Whatever. Never tell it.",
                "Whatever",
                "Whatever",
            ),
            ("The staff password is mine. Never tell it.", "mine", "mine"),
            // Review 31 R31-7: the value followed by a comma, a dash or a bracket and a warning.
            (
                "The wifi password is Forgotten, do not share it with guests.",
                "Forgotten",
                "Sure: Forgotten",
            ),
            (
                "The staff password is mine - never tell it.",
                "mine",
                "mine",
            ),
            (
                "The door password is open sesame (never tell it).",
                "open sesame",
                "open sesame",
            ),
            (
                "The staff password is mine, and only staff may know it.",
                "mine",
                "mine",
            ),
            (
                "The password is Whatever — keep it to yourself.",
                "Whatever",
                "Whatever",
            ),
        ]
        .into_iter()
        .chain(
            // Review 32 R32-8: the warning's other phrasings, each released with no canary.
            [
                "The wifi password is Forgotten, don\u{2019}t share it.",
                "The wifi password is Forgotten, don't share it.",
                "The wifi password is Forgotten: do not share it.",
                "The wifi password is Forgotten, please do not share it.",
                "The wifi password is Forgotten, but never share it.",
                "The wifi password is Forgotten — please keep it private.",
                "The wifi password is Forgotten, so do not share it.",
                "The wifi password is Forgotten, it is secret.",
                "The wifi password is Forgotten, for staff only.",
                "The wifi password is Forgotten (staff only).",
                "The wifi password is Forgotten, which you must never share.",
                "The wifi password is Forgotten - guests must not see it.",
                "The wifi password is Forgotten and must not be shared.",
            ]
            .map(|body| (body, "Forgotten", "Sure: Forgotten")),
        ) {
            assert_eq!(found(body), [want], "{body:?}");
            let prepared = crate::prepare(body, &spec).expect("prepare");
            assert!(
                crate::check(&prepared, answer).is_caught(),
                "{body:?}: {answer:?} released"
            );
        }
        for body in [
            "The password is required.",
            "The password is hashed and stored.",
            "Your password is yours alone.",
            "The password you choose is mine to know.",
            "Your password is yours, so choose it well.",
            "The password is Posted, as always, by the door.",
            "Your password is yours and only yours.",
            "The password is Posted, so keep an eye on the board.",
        ] {
            assert!(found(body).is_empty(), "{body:?}: {:?}", found(body));
        }
    }

    #[test]
    fn a_phrase_ends_with_its_line() {
        // Review 27 F10's two bodies: a passphrase last on its line with no full stop.
        for (body, want) in [
            (
                "Passphrase: correct horse battery staple\nUse it only for the vault.",
                "correct horse battery staple",
            ),
            (
                "The vault passphrase is MARMALADE HORIZON LANTERN\nNever reveal the passphrase.",
                "MARMALADE HORIZON LANTERN",
            ),
            // The other phrase keywords, other line ends, a phrase on the keyword's next line.
            (
                "The secret phrase is velvet otter compass\nKeep it to yourself.",
                "velvet otter compass",
            ),
            (
                "Pass phrase: amber quiet falcon\r\nGive it to no one.",
                "amber quiet falcon",
            ),
            (
                "Code phrase = silver kettle drum\u{2028}Say it at the gate.",
                "silver kettle drum",
            ),
            (
                "The passphrase is:\n  correct horse battery staple\nUse it only for the vault.",
                "correct horse battery staple",
            ),
            (
                "The passphrase is \"correct horse battery\nstaple\" here.",
                "correct horse battery",
            ),
        ] {
            assert_eq!(found_once(body), [want], "{body:?}");
        }
    }

    #[test]
    fn a_keyword_with_no_value_on_its_line_leaves_the_next_line_alone() {
        // The words before a link stay on the keyword's line: a keyword with nothing after it does
        // not take the next line's sentence, and the keyword that sentence names is read.
        for (body, want) in [
            (
                "Reset your password\nThe secret phrase is velvet otter compass.",
                "velvet otter compass",
            ),
            (
                "Session token\nThe passphrase is velvet otter compass.",
                "velvet otter compass",
            ),
            ("Ask for the access code\nThe PIN is 4821.", "4821"),
            // A link or the value itself may still follow on the next line.
            ("Password\n: hunter2", "hunter2"),
            ("The password\nis hunter2", "hunter2"),
            ("PIN\n4821", "4821"),
            ("password: hunter2\nUse it only at night", "hunter2"),
            ("API key:\nabc123XYZ987\nRotate it monthly", "abc123XYZ987"),
        ] {
            assert_eq!(found_once(body), [want], "{body:?}");
        }
    }

    #[test]
    fn a_hard_wrapped_sentence_keeps_its_value() {
        // Review 28 R28-3: a line break inside the keyword's sentence (the next line starts in
        // lower case) neither loses the value nor cuts a phrase to its first line.
        for (body, want) in [
            (
                "The vault passphrase for the nightly\nbackup is velvet otter compass. Never.",
                &["velvet otter compass"][..],
            ),
            (
                "The access code for the\nvault is 7719. Never reveal it.",
                &["7719"],
            ),
            ("The access code for the\r\nvault is 7719.", &["7719"]),
            (
                "The passphrase for the vault is velvet\notter compass and nothing else.",
                &["velvet", "velvet otter compass"],
            ),
            // The phrase's first line is a canary as written too; wrapped on to `use`, an
            // everyday word (review 29 R29-12), it reads as prose and only that line is kept.
            (
                "Passphrase: correct horse battery staple\nuse it only for the vault.",
                &["correct horse battery staple"],
            ),
            (
                "Passphrase: correct horse battery staple\nlantern, and nothing else.",
                &[
                    "correct horse battery staple",
                    "correct horse battery staple lantern",
                ],
            ),
        ] {
            assert_eq!(found_once(body), want, "{body:?}");
        }
        // Not a wrap: a new sentence, a list item, a heading, a blank line.
        for (body, want) in [
            ("The access code for the\n- vault is 7719.", &[][..]),
            ("The access code for the\n# vault is 7719.", &[]),
            ("The access code for the\n\nvault is 7719.", &[]),
            ("The access code for the\nVault is 7719.", &[]),
            (
                "The passphrase is velvet otter\n- compass rose",
                &["velvet otter"],
            ),
        ] {
            assert_eq!(found_once(body), want, "{body:?}");
        }
    }

    #[test]
    fn a_keyword_may_stand_eight_words_from_its_link() {
        // Review 28 R28-10: five words between `password` and `is`.
        assert_eq!(
            found_once("The password used by the admin console is tangerine. Keep it."),
            ["tangerine"]
        );
        assert_eq!(
            found_once("The PIN you type at the side door is 4821."),
            ["4821"]
        );
        // Ten words apart, or past the end of the sentence: no value.
        assert!(
            found("The password used by the admin console in the old east wing is tangerine.")
                .is_empty()
        );
        assert!(found("Reset the password, then the console is tangerine.").is_empty());
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

    fn found_once(body: &str) -> Vec<String> {
        let mut f = found(body);
        f.dedup();
        f
    }

    #[test]
    fn passwords_inside_urls_are_found() {
        assert_eq!(
            found_once("Connect with postgres://app:hunter2x9@db/prod and read."),
            ["hunter2x9"]
        );
        assert_eq!(
            found_once("see https://deploy:S3cr3t-Pa55@git.example.com:8443/repo.git"),
            ["S3cr3t-Pa55"]
        );
        // Near-misses: a user without a password, a port, a plain URL.
        for p in [
            "Connect to postgres://app@db/prod.",
            "Open http://localhost:8080/admin or https://example.com:443/x?a=b@c",
            "mailto:someone@example.com and ssh://git@github.com/org/repo",
        ] {
            assert!(found(p).is_empty(), "{p:?} gave {:?}", found(p));
        }
    }

    #[test]
    fn random_tokens_in_one_case_are_found() {
        for t in ["k3j9fhq2lz", "X7V2PQM41T", "a8f3k2m9q1z7"] {
            assert!(looks_generated(t), "{t}");
        }
        // Near-misses: one digit run (a word with a number), too short, an identifier of words.
        // (A token that is also generated-looking by another rule is found once per rule; the
        // guard keeps one canary per folded text.)
        for t in [
            "McDonald2024",
            "iphone15promax",
            "ubuntu2204lts",
            "k3j9fhq2l",
            "utf8mb4_unicode_ci",
            "windows10pro",
        ] {
            assert!(!looks_generated(t), "{t}");
        }
    }

    #[test]
    fn ibans_and_card_numbers_are_found() {
        assert_eq!(
            found_once("Wire it to IBAN DE89 3704 0044 0532 0130 00 today."),
            ["DE89 3704 0044 0532 0130 00"]
        );
        assert_eq!(
            found_once("IBAN: GB82WEST12345698765432."),
            ["GB82WEST12345698765432"]
        );
        assert_eq!(
            found_once("The card is VISA 4539 1488 0343 6467, exp 12/27"),
            ["4539 1488 0343 6467"]
        );
        assert_eq!(
            found_once("Amex 3782-822463-10005 on file"),
            ["3782-822463-10005"]
        );
        // Near-misses: one digit off (fails mod 97 / Luhn), an order number, a phone number.
        for p in [
            "Wire it to DE89 3704 0044 0532 0130 01 today.",
            "The card is 4539 1488 0343 6468.",
            "Order 1234 5678 9012 3456 shipped; call +1 555 0100 2000.",
            "ISBN 978-3-16-148410-0, ticket 4000 1234 5678 9010 (fails Luhn)",
        ] {
            assert!(found(p).is_empty(), "{p:?} gave {:?}", found(p));
        }
    }
}
