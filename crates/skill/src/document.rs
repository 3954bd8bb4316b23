//! The SKILL.md grammar: front matter between `---` lines, then a markdown body.
//!
//! [`parse`] checks the whole document (size, encoding), splits it, reads the front matter as
//! YAML under hard limits (no anchors or aliases, bounded depth and size) and validates every
//! field of the declaration. The body is returned beside the declaration, never inside it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::declaration::{
    Declaration, Limits, Memory, RESERVED_SOURCE_PREFIXES, is_reserved_source_name,
};
use crate::diagnostic::{Diagnostic, DocumentError};
use crate::provider::ProviderId;

/// Largest front matter accepted (design §3).
pub const MAX_FRONT_MATTER: usize = 64 * 1024;
/// Largest whole document accepted (design §3).
pub const MAX_DOCUMENT: usize = 1024 * 1024;
/// Deepest YAML nesting accepted in front matter; real skills use 3 or fewer levels.
pub const MAX_DEPTH: usize = 16;
/// Agent Skills limits.
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// Longest source name (`key`, `requiredSources`).
pub const MAX_SOURCE_NAME: usize = 128;
/// Most `requiredSources` one skill names: the one cap the import, the node's own offer and
/// every peer's board hold (`skillbox_peers::MAX_REQUIRED_SOURCES` is this constant). No honest
/// skill stakes more than a handful of sources; a skill imported past it would make the node's
/// whole advert invalid, so the import refuses it.
pub const MAX_REQUIRED_SOURCES: usize = 32;

/// Whether a stored skill's `requiredSources` keep what every advert must: at most
/// [`MAX_REQUIRED_SOURCES`], none named twice. A skill imported before the import held these
/// may break them; the node leaves such a skill out of its offer rather than its whole advert.
pub fn required_sources_advertisable(names: &[String]) -> bool {
    if names.len() > MAX_REQUIRED_SOURCES {
        return false;
    }
    let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    !sorted.windows(2).any(|w| w[0] == w[1])
}

/// A skill's instructions. They become a source on import; `Debug` shows only the length so a
/// body cannot end up in a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Body(String);

impl Body {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn into_string(self) -> String {
        self.0
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Body(<{} bytes>)", self.0.len())
    }
}

/// A parsed SKILL.md: the declaration and the body as separate values.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub declaration: Declaration,
    pub body: Body,
    pub warnings: Vec<Diagnostic>,
    /// Line of each top-level front-matter field, to locate later (schema) errors.
    pub(crate) field_lines: BTreeMap<String, usize>,
}

impl Parsed {
    /// The document line where a top-level front-matter field was written.
    pub fn field_line(&self, field: &str) -> Option<usize> {
        self.field_lines.get(field).copied()
    }
}

/// Parse and validate a SKILL.md.
///
/// `fallback_name` is the name given at import (the folder or file name, or `?name=`); it is used
/// when the front matter has no `name`, and must agree with it when both exist.
pub fn parse(input: &[u8], fallback_name: Option<&str>) -> Result<Parsed, DocumentError> {
    let text = decode(input)?;
    let split = split(text)?;
    let fields = read_front_matter(split.front_matter, split.front_matter_line)?;
    let mut check = FieldCheck::new(fields.lines, split.front_matter_line);
    let declaration = check.declaration(fields.values, fallback_name);
    if !check.errors.is_empty() {
        return Err(DocumentError {
            problems: check.errors,
        });
    }
    let Some(declaration) = declaration else {
        // `declaration` is only None when an error was recorded.
        return Err(DocumentError::one(Diagnostic::document(
            None,
            "invalid front matter",
        )));
    };
    let body = split.body.strip_prefix('\n').unwrap_or(split.body);
    if body.trim().is_empty() {
        check.warnings.push(Diagnostic::document(
            Some(split.body_line),
            "the body is empty: the skill has no instructions",
        ));
    }
    Ok(Parsed {
        declaration,
        body: Body(body.to_owned()),
        warnings: check.warnings,
        field_lines: check.lines,
    })
}

/// Size, UTF-8, NUL and BOM checks on the raw bytes.
fn decode(input: &[u8]) -> Result<&str, DocumentError> {
    if input.len() > MAX_DOCUMENT {
        return Err(DocumentError::one(Diagnostic::document(
            None,
            format!(
                "document is {} bytes, over the limit of {} bytes (1 MiB)",
                input.len(),
                MAX_DOCUMENT
            ),
        )));
    }
    let text = std::str::from_utf8(input).map_err(|e| {
        let line = line_of(&input[..e.valid_up_to()]);
        DocumentError::one(Diagnostic::document(
            Some(line),
            format!(
                "not UTF-8: invalid byte sequence at byte {}",
                e.valid_up_to()
            ),
        ))
    })?;
    if let Some(pos) = text.find('\0') {
        return Err(DocumentError::one(Diagnostic::document(
            Some(line_of(&input[..pos])),
            "NUL byte in the document: a SKILL.md is text",
        )));
    }
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

fn line_of(prefix: &[u8]) -> usize {
    prefix.iter().filter(|&&b| b == b'\n').count() + 1
}

struct Split<'a> {
    front_matter: &'a str,
    /// Document line of the first front-matter line.
    front_matter_line: usize,
    body: &'a str,
    body_line: usize,
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end_matches(['\r', ' ', '\t']) == "---"
}

/// Find the front matter between the opening `---` (first line) and the next `---` line.
fn split(text: &str) -> Result<Split<'_>, DocumentError> {
    let (first, rest) = match text.find('\n') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, ""),
    };
    if !is_delimiter(first) {
        return Err(DocumentError::one(Diagnostic::document(
            Some(1),
            "no front matter: a SKILL.md starts with a `---` line, then YAML fields, then `---`",
        )));
    }
    let mut offset = 0;
    let mut line_no = 2;
    loop {
        if offset > MAX_FRONT_MATTER {
            return Err(DocumentError::one(Diagnostic::document(
                Some(1),
                format!("front matter is over the limit of {MAX_FRONT_MATTER} bytes (64 KiB)"),
            )));
        }
        if offset >= rest.len() {
            return Err(DocumentError::one(Diagnostic::document(
                Some(1),
                "front matter opened on line 1 is never closed by a `---` line",
            )));
        }
        let end = rest[offset..].find('\n').map_or(rest.len(), |i| offset + i);
        if is_delimiter(&rest[offset..end]) {
            let body_start = (end + 1).min(rest.len());
            return Ok(Split {
                front_matter: &rest[..offset],
                front_matter_line: 2,
                body: &rest[body_start..],
                body_line: line_no + 1,
            });
        }
        offset = end + 1;
        line_no += 1;
    }
}

struct Fields {
    values: Vec<(String, Value)>,
    lines: BTreeMap<String, usize>,
}

/// Read the front matter as a YAML mapping, in document order, each field with its line.
fn read_front_matter(yaml: &str, first_line: usize) -> Result<Fields, DocumentError> {
    let normalized;
    let yaml = if yaml.contains('\r') {
        normalized = yaml.replace("\r\n", "\n");
        normalized.as_str()
    } else {
        yaml
    };
    if yaml.trim().is_empty() {
        return Ok(Fields {
            values: Vec::new(),
            lines: BTreeMap::new(),
        });
    }
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_aliases: 0,
            max_anchors: 0,
            max_depth: MAX_DEPTH,
            max_documents: 1,
            max_nodes: 20_000,
            max_events: 100_000,
            max_total_scalar_bytes: MAX_FRONT_MATTER,
            max_merge_keys: 0,
        },
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        merge_keys: serde_saphyr::MergeKeyPolicy::Error,
        with_snippet: false,
        // YAML 1.2 booleans only: `y`, `no`, `on` stay text (the "Norway problem").
        strict_booleans: true,
    };
    let parsed: Result<Option<BTreeMap<String, serde_saphyr::Spanned<Value>>>, _> =
        serde_saphyr::from_str_with_options(yaml, options);
    let map = match parsed {
        Ok(map) => map.unwrap_or_default(),
        Err(err) => return Err(DocumentError::one(yaml_error(&err, yaml, first_line))),
    };
    let mut values: Vec<(usize, String, Value)> = map
        .into_iter()
        .map(|(k, v)| {
            // The span of a block value starts on the line after its key: prefer the key's line.
            let line = key_line(yaml, &k)
                .unwrap_or_else(|| usize::try_from(v.referenced.line()).unwrap_or(1));
            (line + first_line - 1, k, v.value)
        })
        .collect();
    values.sort_by_key(|(line, _, _)| *line);
    let lines = values.iter().map(|(l, k, _)| (k.clone(), *l)).collect();
    Ok(Fields {
        values: values.into_iter().map(|(_, k, v)| (k, v)).collect(),
        lines,
    })
}

/// The 1-based line of the front matter where top-level `key` is written (column 0, plain or
/// quoted).
fn key_line(yaml: &str, key: &str) -> Option<usize> {
    yaml.lines()
        .position(|line| {
            let rest = [key, &format!("\"{key}\""), &format!("'{key}'")]
                .into_iter()
                .find_map(|k| line.strip_prefix(k));
            rest.is_some_and(|r| r.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

/// Turn a YAML error into a diagnostic: the budget refusals get their own words.
fn yaml_error(err: &serde_saphyr::Error, yaml: &str, first_line: usize) -> Diagnostic {
    let line = err
        .location()
        .map(|l| usize::try_from(l.line()).unwrap_or(0))
        .filter(|&l| l > 0)
        .map(|l| l + first_line - 1);
    let raw = err.to_string();
    let lower = raw.to_ascii_lowercase();
    let message = if lower.contains("alias") || lower.contains("anchor") {
        "YAML anchors and aliases are not accepted in front matter".to_owned()
    } else if lower.contains("depth") {
        format!("front matter nests deeper than {MAX_DEPTH} levels")
    } else if lower.contains("merge") {
        "YAML merge keys (`<<`) are not accepted in front matter".to_owned()
    } else if lower.contains("duplicate") {
        format!("duplicate field in front matter: {}", first_line_of(&raw))
    } else if !yaml
        .trim_start()
        .starts_with(|c: char| c.is_alphanumeric() || c == '"' || c == '\'')
        && lower.contains("expected")
        && lower.contains("map")
    {
        "front matter must be a YAML mapping of fields".to_owned()
    } else {
        format!("invalid YAML in front matter: {}", first_line_of(&raw))
    };
    Diagnostic::document(line, message)
}

fn first_line_of(s: &str) -> &str {
    s.lines().next().unwrap_or(s).trim()
}

/// Whether `name` is a valid source name: `/`-separated segments of `[A-Za-z0-9_.-]`, each
/// starting with a letter, digit or `_`, at most 128 bytes. `skill/<name>/body` is one.
pub fn is_valid_source_name(name: &str) -> bool {
    source_name_problem(name).is_none()
}

/// What a `key:` that reads as a provider's API key is refused with. Fixed: the value is the
/// user's key, and a refusal is shown, logged and kept by clients.
pub const KEY_IS_NOT_A_NAME: &str = "looks like a provider's API key, not the name of the source that holds it: nothing was imported; add the key with `skillbox source add NAME --secret` (or `PUT /sources/NAME?kind=secret`), write `key: NAME`, and revoke the pasted key with the provider if the file was shared";

/// What a `requiredSources` item that reads as a provider's API key is refused with, after
/// `item N`. Fixed, like [`KEY_IS_NOT_A_NAME`]: a required source's name goes out in the skill's
/// advert to every peer and into callers' consent questions.
pub const KEY_IS_NOT_A_REQUIRED_SOURCE: &str = "looks like a provider's API key, not the name of a source: nothing was imported; requiredSources names the caller's shareable sources the skill asks for (e.g. `notes`), and every peer sees those names in the skill's advert; revoke the pasted key with the provider if the file was shared";

/// Which part of the source name rule `name` fails (`None` when it is a source name), with a
/// length or a byte position at most: never the text, which may be a key pasted where a name
/// goes. The one diagnosis of the rule: `requiredSources` and the node's source names use it.
pub fn source_name_problem(name: &str) -> Option<String> {
    const RULE: &str = "a source name is '/'-separated segments of letters, digits, '_', '.', '-', each starting with a letter, digit or '_'";
    if name.is_empty() {
        return Some("a source name cannot be empty".to_owned());
    }
    if name.len() > MAX_SOURCE_NAME {
        return Some(format!(
            "a source name is at most {MAX_SOURCE_NAME} bytes; this one is {}",
            name.len()
        ));
    }
    let mut at = 0;
    for segment in name.split('/') {
        let other = segment
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')));
        let found = if segment.is_empty() {
            Some(("an empty segment", 0))
        } else if !segment.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            Some(("a segment starting with another character", 0))
        } else {
            other.map(|i| ("another character", i))
        };
        if let Some((what, i)) = found {
            return Some(format!("{RULE}; this one has {what} at byte {}", at + i));
        }
        at += segment.len() + 1;
    }
    None
}

/// Whether a `key:` value (or a source's name) reads as a provider's API key rather than a
/// name. Names are words, however long (`Family_Photos_2019_Summer`, `customerfeedback2024`,
/// `MyFavoriteSongsFrom2019Playlist`); keys are random. So: a known key prefix on 20 or more
/// characters (`sk-proj-…`, `sk-ant-…`, `sk-or-v1-…`, `AIza…`, `xai-…`), or a run of letters
/// and digits (the value split at every other character) that reads as random: 32 or more hex
/// digits mixing letters and digits, or 20 or more characters of which three or more pieces
/// read as no word ([`reads_as_random`]). A short name that starts like a prefix (`hf_token`,
/// `sk-work`) and a dashed UUID (runs of 8 and 12) stay names.
pub fn looks_like_a_provider_key(value: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "sk-",
        "sk_",
        "pk_",
        "rk_",
        "AIza",
        "xai-",
        "ghp_",
        "gho_",
        "ghs_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "hf_",
        "gsk_",
        "pplx-",
        "r8_",
        "AKIA",
        "ya29.",
        "sbx_",
    ];
    let hex = |run: &str| {
        run.len() >= 32
            && run.bytes().all(|b| b.is_ascii_hexdigit())
            && run.bytes().any(|b| b.is_ascii_digit())
            && run.bytes().any(|b| b.is_ascii_alphabetic())
    };
    (value.len() >= 20 && PREFIXES.iter().any(|p| value.starts_with(p)))
        || value
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|run| hex(run) || (run.len() >= 20 && reads_as_random(run.as_bytes())))
}

/// Whether a run of ASCII letters and digits reads as drawn at random rather than written as
/// words. The run is cut into pieces the way a name is written: a digit run, a lower-case run,
/// a capital with the lower-case run after it (`Photos`), or a capital run (`HTTP` in
/// `HTTPServer`). A piece reads as a word when it is two or more digits (`2019`), two to four
/// capitals (`PDF`), or two or more letters holding a vowel (`My`, `Kyoto`); a lone letter
/// before digits (`Q3`, `v2`) is a tag. Names have at most one or two other pieces (`Hr`); a
/// random base62 run of 32 has about eight (`2|Nd|YBZ|Sx|…`). Three or more read as random:
/// measured over random base62 runs, 99.5% of 32 characters and 99.9% of 40 (93% of 20).
fn reads_as_random(run: &[u8]) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum Class {
        Lower,
        Upper,
        Digit,
    }
    let class = |b: u8| {
        if b.is_ascii_lowercase() {
            Class::Lower
        } else if b.is_ascii_uppercase() {
            Class::Upper
        } else {
            Class::Digit
        }
    };
    let runs: Vec<&[u8]> = run.chunk_by(|a, b| class(*a) == class(*b)).collect();
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(runs.len());
    let mut at = 0;
    let mut i = 0;
    while i < runs.len() {
        let here = runs[i];
        let capitals_then_lower = class(here[0]) == Class::Upper
            && runs.get(i + 1).is_some_and(|n| class(n[0]) == Class::Lower);
        if capitals_then_lower {
            // The last capital starts the word: `HTTPServer` is `HTTP` and `Server`.
            let word_len = 1 + runs[i + 1].len();
            if here.len() > 1 {
                pieces.push(&run[at..at + here.len() - 1]);
            }
            let start = at + here.len() - 1;
            pieces.push(&run[start..start + word_len]);
            at = start + word_len;
            i += 2;
        } else {
            pieces.push(here);
            at += here.len();
            i += 1;
        }
    }
    let word = |p: &[u8]| {
        if p[0].is_ascii_digit() {
            p.len() >= 2
        } else {
            p.len() >= 2
                && ((p.len() <= 4 && p.iter().all(u8::is_ascii_uppercase))
                    || p.iter().any(|b| b"aeiouyAEIOUY".contains(b)))
        }
    };
    let mut other = 0;
    let mut i = 0;
    while i < pieces.len() {
        let tag = pieces[i].len() == 1
            && pieces[i][0].is_ascii_alphabetic()
            && pieces.get(i + 1).is_some_and(|n| n[0].is_ascii_digit());
        if tag {
            i += 2;
            continue;
        }
        if !word(pieces[i]) {
            other += 1;
        }
        i += 1;
    }
    other >= 3
}

/// The Agent Skills `name` rule: 1–64 chars of `[a-z0-9-]`, no leading, trailing or double `-`.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Some(format!(
            "is {} characters, over the limit of {MAX_NAME_CHARS}",
            name.chars().count()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-'))
    {
        return Some(format!(
            "may only contain lowercase letters, digits and `-` (found {c:?})"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("must not start or end with `-`".into());
    }
    if name.contains("--") {
        return Some("must not contain `--`".into());
    }
    None
}

/// Field-by-field validation, collecting every problem.
struct FieldCheck {
    lines: BTreeMap<String, usize>,
    front_matter_line: usize,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl FieldCheck {
    fn new(lines: BTreeMap<String, usize>, front_matter_line: usize) -> Self {
        FieldCheck {
            lines,
            front_matter_line,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn line(&self, field: &str) -> Option<usize> {
        let top = field.split('.').next().unwrap_or(field);
        self.lines.get(top).copied()
    }

    fn error(&mut self, field: &str, message: impl Into<String>) {
        let line = self.line(field).or(Some(self.front_matter_line));
        self.errors
            .push(Diagnostic::new(Some(field), line, message));
    }

    fn warn(&mut self, field: &str, message: impl Into<String>) {
        let line = self.line(field);
        self.warnings
            .push(Diagnostic::new(Some(field), line, message));
    }

    /// A string field; numbers and booleans are refused rather than coerced, so `name: 123`
    /// is an error the author sees.
    fn string(&mut self, field: &str, value: Value) -> Option<String> {
        match value {
            Value::String(s) => Some(s),
            Value::Null => {
                self.error(field, "is empty: expected text");
                None
            }
            other => {
                self.error(
                    field,
                    format!(
                        "must be text, found {} (quote it to make it text)",
                        kind(&other)
                    ),
                );
                None
            }
        }
    }

    fn declaration(
        &mut self,
        fields: Vec<(String, Value)>,
        fallback_name: Option<&str>,
    ) -> Option<Declaration> {
        let mut name = None;
        let mut description = None;
        let mut provider = None;
        let mut model = None;
        let mut key = None;
        let mut required_sources = Vec::new();
        let mut license = None;
        let mut compatibility = None;
        let mut metadata: Option<Map<String, Value>> = None;
        let mut allowed_tools = None;
        let mut model_class = None;
        let mut memory_value = None;
        let mut limits = Limits::default();
        let mut extra = BTreeMap::new();

        for (field, value) in fields {
            match field.as_str() {
                "name" => name = self.string("name", value),
                "description" => description = self.string("description", value),
                "provider" => {
                    if let Some(p) = self.string("provider", value) {
                        match p.parse::<ProviderId>() {
                            Ok(p) => provider = Some(p),
                            Err(e) => self.error("provider", e.to_string()),
                        }
                    }
                }
                "model" => {
                    if let Some(m) = self.string("model", value) {
                        if m.trim().is_empty() || m.len() > 256 {
                            self.error(
                                "model",
                                "must be a provider model id of 1 to 256 characters",
                            );
                        } else {
                            model = Some(m);
                        }
                    }
                }
                "key" => {
                    if let Some(k) = self.string("key", value) {
                        // Before any message that quotes the value: a pasted key is repeated
                        // nowhere, and never kept as the key's name.
                        if looks_like_a_provider_key(&k) {
                            self.error("key", KEY_IS_NOT_A_NAME);
                        } else if is_reserved_source_name(&k) {
                            self.error("key", format!("is under a reserved prefix ({}): the key must be a secret source of the owner's own", RESERVED_SOURCE_PREFIXES.join(", ")));
                        } else if is_valid_source_name(&k) {
                            key = Some(k);
                        } else {
                            self.error("key", "must name a source (letters, digits, `_`, `.`, `-`), e.g. `openrouter-key`");
                        }
                    }
                }
                "requiredSources" => required_sources = self.source_list(value),
                "license" => license = self.string("license", value),
                "compatibility" => {
                    if let Some(c) = self.string("compatibility", value) {
                        let n = c.chars().count();
                        if n == 0 || n > MAX_COMPATIBILITY_CHARS {
                            self.error(
                                "compatibility",
                                format!(
                                    "must be 1 to {MAX_COMPATIBILITY_CHARS} characters, found {n}"
                                ),
                            );
                        } else {
                            compatibility = Some(c);
                        }
                    }
                }
                "metadata" => match value {
                    Value::Object(m) => metadata = Some(m),
                    Value::Null => {}
                    other => self.error(
                        "metadata",
                        format!("must be a mapping, found {}", kind(&other)),
                    ),
                },
                "allowed-tools" => {
                    match &value {
                        Value::String(_) => {}
                        Value::Array(items) if items.iter().all(Value::is_string) => {}
                        other => {
                            self.error(
                                "allowed-tools",
                                format!("must be text or a list of text, found {}", kind(other)),
                            );
                            continue;
                        }
                    }
                    self.warn("allowed-tools", "accepted but unused: a box runs no tools");
                    allowed_tools = Some(value);
                }
                "modelClass" => model_class = self.string("modelClass", value),
                "memory" => memory_value = Some(("memory", value)),
                "limits" => limits = self.limits(value),
                _ => {
                    self.warn(&field, "unknown field, kept but not used");
                    extra.insert(field, value);
                }
            }
        }

        // The OpenWOP reference host reads memory flags from `metadata.memory` too.
        if memory_value.is_none()
            && let Some(m) = metadata.as_ref().and_then(|m| m.get("memory"))
        {
            memory_value = Some(("metadata.memory", m.clone()));
        }
        let memory = match memory_value {
            Some((field, value)) => self.memory(field, value),
            None => Memory::default(),
        };

        let name = match (name, fallback_name) {
            (Some(n), Some(f)) if n != f => {
                self.error(
                    "name",
                    format!("is {n:?} but the skill was imported as {f:?}: they must agree"),
                );
                None
            }
            (Some(n), _) => Some(n),
            (None, Some(f)) => Some(f.to_owned()),
            (None, None) if self.lines.contains_key("name") => None, // already reported
            (None, None) => {
                self.errors.push(Diagnostic::new(
                    Some("name"),
                    Some(self.front_matter_line),
                    "is missing, and no name was given at import",
                ));
                None
            }
        };
        if let Some(n) = &name
            && let Some(problem) = name_problem(n)
        {
            self.error("name", format!("{n:?} {problem}"));
        }
        match &description {
            None if !self.lines.contains_key("description") => self.errors.push(Diagnostic::new(
                Some("description"),
                Some(self.front_matter_line),
                "is missing: every skill says what it does",
            )),
            Some(d) => {
                let n = d.chars().count();
                if d.trim().is_empty() {
                    self.error("description", "must not be blank");
                } else if n > MAX_DESCRIPTION_CHARS {
                    self.error(
                        "description",
                        format!("is {n} characters, over the limit of {MAX_DESCRIPTION_CHARS}"),
                    );
                }
            }
            None => {}
        }
        if !self.errors.is_empty() {
            return None;
        }
        Some(Declaration {
            name: name?,
            description: description?,
            provider,
            model,
            key,
            required_sources,
            license,
            compatibility,
            metadata,
            allowed_tools,
            model_class,
            memory,
            limits,
            extra,
        })
    }

    /// `requiredSources`: a YAML list, or one string separated by commas and/or spaces.
    fn source_list(&mut self, value: Value) -> Vec<String> {
        // Each name with its place in the list as written (1-based), which refusals name.
        let names: Vec<(usize, String)> = match value {
            Value::Null => Vec::new(),
            Value::String(s) => s
                .split([',', ' ', '\t'])
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .enumerate()
                .map(|(i, name)| (i + 1, name))
                .collect(),
            Value::Array(items) => {
                let mut out = Vec::new();
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => out.push((i + 1, s)),
                        other => self.error(
                            "requiredSources",
                            format!(
                                "item {} must be a source name, found {}",
                                i + 1,
                                kind(&other)
                            ),
                        ),
                    }
                }
                out
            }
            other => {
                self.error(
                    "requiredSources",
                    format!(
                        "must be a list of source names or a comma separated string, found {}",
                        kind(&other)
                    ),
                );
                Vec::new()
            }
        };
        // Every refusal names the item by its place in the list, never by its text: an item may
        // be a key pasted where a name goes, and the refusal is shown, logged and kept.
        let mut seen: Vec<(usize, String)> = Vec::with_capacity(names.len());
        for (item, name) in names {
            let reserved = is_reserved_source_name(&name);
            if !reserved && looks_like_a_provider_key(&name) {
                self.error(
                    "requiredSources",
                    format!("item {item} {KEY_IS_NOT_A_REQUIRED_SOURCE}"),
                );
            } else if let Some(problem) = source_name_problem(&name) {
                self.error(
                    "requiredSources",
                    format!("item {item} is not a source name: {problem}"),
                );
            } else if reserved {
                self.error(
                    "requiredSources",
                    format!(
                        "item {item} is under a reserved prefix ({}): a skill may ask only for the caller's own shareable data",
                        RESERVED_SOURCE_PREFIXES.join(", ")
                    ),
                );
            } else if let Some((first, _)) = seen.iter().find(|(_, s)| *s == name) {
                self.warn(
                    "requiredSources",
                    format!("item {item} is listed twice (as item {first})"),
                );
            } else {
                seen.push((item, name));
            }
        }
        // Counted after duplicates are dropped: what is stored and advertised. Over the cap the
        // node's own offer and every peer's board would refuse the advert, so the import does.
        if seen.len() > MAX_REQUIRED_SOURCES {
            self.error(
                "requiredSources",
                format!(
                    "names {} sources, over the limit of {MAX_REQUIRED_SOURCES}: a skill may ask for at most {MAX_REQUIRED_SOURCES} of the caller's sources",
                    seen.len()
                ),
            );
        }
        seen.into_iter().map(|(_, name)| name).collect()
    }

    /// `limits:` — the owner's ceilings, each a whole number in `0..=2^53-1`.
    fn limits(&mut self, value: Value) -> Limits {
        let mut limits = Limits::default();
        let map = match value {
            Value::Null => return limits,
            Value::Object(map) => map,
            other => {
                self.error(
                    "limits",
                    format!(
                        "must be a mapping of ceilings ({}), found {}",
                        Limits::FIELDS.join(", "),
                        kind(&other)
                    ),
                );
                return limits;
            }
        };
        for (field, v) in map {
            let path = format!("limits.{field}");
            let Some(n) = v.as_u64().filter(|n| *n <= Limits::MAX) else {
                self.error(
                    &path,
                    format!(
                        "must be a whole number from 0 to {}, found {}",
                        Limits::MAX,
                        kind(&v)
                    ),
                );
                continue;
            };
            if !limits.set(&field, Some(n)) {
                self.error(
                    &path,
                    format!(
                        "unknown ceiling: expected one of {}",
                        Limits::FIELDS.join(", ")
                    ),
                );
            }
        }
        limits
    }

    fn memory(&mut self, field: &str, value: Value) -> Memory {
        let mut memory = Memory::default();
        let Value::Object(map) = value else {
            self.error(
                field,
                "must be a mapping of memory flags (scratchpad, conversation, longTerm)",
            );
            return memory;
        };
        for (flag, v) in map {
            let path = format!("{field}.{flag}");
            let Value::Bool(b) = v else {
                self.error(&path, format!("must be true or false, found {}", kind(&v)));
                continue;
            };
            match flag.as_str() {
                "scratchpad" => memory.scratchpad = Some(b),
                "conversation" => memory.conversation = Some(b),
                "longTerm" => memory.long_term = Some(b),
                _ => self.error(
                    &path,
                    "unknown memory flag: expected scratchpad, conversation or longTerm",
                ),
            }
        }
        memory
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::{
        KEY_IS_NOT_A_REQUIRED_SOURCE, MAX_REQUIRED_SOURCES, looks_like_a_provider_key, parse,
        required_sources_advertisable,
    };

    fn required_sources(list: &str) -> String {
        format!(
            "---\nname: grab\ndescription: Reads your notes.\nprovider: openai\nkey: openai-key\nrequiredSources: {list}\n---\nbody\n"
        )
    }

    /// A skill naming more than [`MAX_REQUIRED_SOURCES`] sources was imported, and then made
    /// the node's whole offer invalid (every peer refuses such an advert): the import refuses
    /// it, naming the field, the count and the limit; the cap itself imports, and a duplicate
    /// is dropped (with a warning), so what is stored is always advertisable.
    #[test]
    fn required_sources_over_the_advert_cap_are_refused() {
        let names = |n: usize| {
            let list: Vec<String> = (0..n).map(|i| format!("notes{i}")).collect();
            format!("[{}]", list.join(", "))
        };
        let err = parse(
            required_sources(&names(MAX_REQUIRED_SOURCES + 1)).as_bytes(),
            None,
        )
        .expect_err("33 sources imported");
        let [problem] = err.problems.as_slice() else {
            panic!("one problem expected: {err}");
        };
        assert_eq!(problem.field.as_deref(), Some("requiredSources"));
        assert!(
            problem
                .message
                .starts_with("names 33 sources, over the limit of 32"),
            "{}",
            problem.message
        );
        assert!(!err.to_string().contains("notes1"), "{err}");
        let parsed = parse(
            required_sources(&names(MAX_REQUIRED_SOURCES)).as_bytes(),
            None,
        )
        .expect("32 sources import");
        assert_eq!(
            parsed.declaration.required_sources.len(),
            MAX_REQUIRED_SOURCES
        );
        assert!(required_sources_advertisable(
            &parsed.declaration.required_sources
        ));
        // 32 distinct names and one named again: the stored list is the 32, advertisable.
        let doubled = names(MAX_REQUIRED_SOURCES).replace(']', ", notes0]");
        let parsed = parse(required_sources(&doubled).as_bytes(), None).expect("parses");
        assert_eq!(
            parsed.declaration.required_sources.len(),
            MAX_REQUIRED_SOURCES
        );
        assert!(required_sources_advertisable(
            &parsed.declaration.required_sources
        ));
        let twice = vec!["notes".to_owned(), "notes".to_owned()];
        assert!(!required_sources_advertisable(&twice));
        let over: Vec<String> = (0..=MAX_REQUIRED_SOURCES)
            .map(|i| format!("n{i}"))
            .collect();
        assert!(!required_sources_advertisable(&over));
    }

    /// A provider's key pasted into `requiredSources` would become a required source's name:
    /// sent to every peer in the skill's advert, shown in callers' consent questions. Refused
    /// with a fixed text naming the item's place, as a list or as one string; no refusal about
    /// an item quotes it (whatever the rule it fails), and `key:` names nothing either.
    #[test]
    fn a_key_pasted_into_required_sources_is_refused_and_not_repeated() {
        for key in [
            "sk-ant-api03-Xq7PASTEDnAmE9kLw2Rt5Vb8Zc",
            "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
            "1fa036b5a9fa7baa4f1260e831e989a4",
        ] {
            for list in [format!("[notes, {key}]"), format!("\"notes, {key}\"")] {
                let err = parse(required_sources(&list).as_bytes(), None)
                    .err()
                    .unwrap_or_else(|| panic!("{list} was imported"));
                let [problem] = err.problems.as_slice() else {
                    panic!("one problem expected: {err}");
                };
                assert_eq!(problem.field.as_deref(), Some("requiredSources"));
                assert_eq!(
                    problem.message,
                    format!("item 2 {KEY_IS_NOT_A_REQUIRED_SOURCE}")
                );
                for shown in [err.to_string(), format!("{err:?}")] {
                    assert!(!shown.contains(&key[4..12]), "{shown}");
                }
            }
        }
        for (list, says) in [
            ("[notes, 'my WORDS']", "item 2 is not a source name: "),
            ("['WORDS+x']", "another character at byte 5"),
            (
                "[notes, '.WORDS']",
                "a segment starting with another character at byte 0",
            ),
            ("['WORDS//x']", "an empty segment at byte 6"),
            (
                "[notes, 'skill/WORDS/body']",
                "item 2 is under a reserved prefix",
            ),
        ] {
            let err = parse(required_sources(list).as_bytes(), None)
                .err()
                .unwrap_or_else(|| panic!("{list} was imported"));
            let shown = format!("{err} {err:?}");
            assert!(shown.contains(says), "{list}: {shown}");
            assert!(!shown.contains("WORDS"), "{list}: {shown}");
        }
        let parsed =
            parse(required_sources("[notes, WORDS, notes]").as_bytes(), None).expect("parses");
        assert_eq!(parsed.declaration.required_sources, ["notes", "WORDS"]);
        let warned: Vec<String> = parsed.warnings.iter().map(|w| w.to_string()).collect();
        assert!(
            warned
                .iter()
                .any(|w| w.contains("item 3 is listed twice (as item 1)")),
            "{warned:?}"
        );
        let doc = required_sources("[]").replace("key: openai-key", "key: skill/WORDS/body");
        let err = parse(doc.as_bytes(), None).expect_err("a reserved key");
        assert!(!err.to_string().contains("WORDS"), "{err}");
    }

    #[test]
    fn provider_keys_read_as_keys_and_source_names_as_names() {
        for key in [
            "sk-proj-Q3vT9xLm2PASTEDkEy7wZr4Nd8Hs1Fb6",
            "sk-ant-api03-AbCdEf0123456789_xyz",
            "sk-or-v1-0123456789abcdef0123456789abcdef",
            "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
            "xai-abcdefghijklmnopqrstu",
            "1fa036b5a9fa7baa4f1260e831e989a4",
            "2NdYBZSxQoMc0ZLTOoU6CxVCG5cxGecl",
            "work/2NdYBZSxQoMc0ZLTOoU6CxVCG5cxGecl",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            assert!(looks_like_a_provider_key(key), "{key}");
        }
        for name in [
            "openrouter-key",
            "openai-key",
            "hf_token",
            "sk-work",
            "work.openai",
            "openai-api-key-for-work-projects-2024",
            "anthropic_personal_key_main_account",
            // The review's (each was refused as a key).
            "Family_Photos_2019_Summer",
            "Meeting-Notes-2024-Q3-Final",
            "ProjectNotes_Q3_2024_backup",
            "customerfeedback2024",
            "notes/Trip2024ToKyotoPhotos",
            // Words run together, however written: CamelCase, acronyms, tags, long lower case.
            "MyFavoriteSongsFrom2019Playlist",
            "IAmAtTheZooWithMyDadAndMom2024",
            "HTTPServerLogsQ3v2Backup",
            "PDFExportsCRMLeads2024",
            "quarterlyreportdraftversion2",
            "IMG20240315BeachHolidayPhotos",
            "TalkDesignPlans2019Hr",
            "WORKSCHEDULESCAN2023",
            // A dashed UUID is an identifier people name things by, not a credential's shape.
            "backup-3f2504e0-4f89-11d3-9a0c-0305e82c3301",
        ] {
            assert!(!looks_like_a_provider_key(name), "{name}");
        }
    }

    /// A deterministic stream for the generated keys and names (splitmix64).
    struct Draws(u64);

    impl Draws {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % n as u64) as usize
        }

        fn drawn(&mut self, alphabet: &[u8], len: usize) -> String {
            (0..len)
                .map(|_| char::from(alphabet[self.below(alphabet.len())]))
                .collect()
        }
    }

    /// Random keys as providers issue them (base62 of 32 to 64 characters, hex of 32, 40 or 64,
    /// bare or after a prefix of the provider's own that the known list lacks) read as keys:
    /// 99% or more of them (measured: base62 99.95%, hex 100%); and names written from words and
    /// numbers the way people write them read as names, every one.
    #[test]
    fn generated_keys_read_as_keys_and_generated_names_as_names() {
        const BASE62: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        const HEX: &[u8] = b"0123456789abcdef";
        let mut draws = Draws(0x5eed_2026);
        let (mut base62, mut hex) = (0, 0);
        const N: usize = 10_000;
        for i in 0..N {
            let len = 32 + draws.below(33);
            let prefix = ["", "fw_", "key-", "tok_"][i % 4];
            base62 += looks_like_a_provider_key(&format!("{prefix}{}", draws.drawn(BASE62, len)))
                as usize;
            let len = [32, 40, 64][draws.below(3)];
            hex += looks_like_a_provider_key(&draws.drawn(HEX, len)) as usize;
        }
        assert!(
            base62 * 100 >= N * 99,
            "base62 keys caught: {base62} of {N}"
        );
        assert!(hex * 100 >= N * 99, "hex keys caught: {hex} of {N}");

        const WORDS: &[&str] = &[
            "family",
            "photos",
            "summer",
            "meeting",
            "notes",
            "final",
            "project",
            "backup",
            "customer",
            "feedback",
            "trip",
            "kyoto",
            "my",
            "favorite",
            "songs",
            "from",
            "playlist",
            "invoice",
            "tax",
            "return",
            "receipts",
            "budget",
            "quarterly",
            "report",
            "draft",
            "research",
            "thesis",
            "chapter",
            "journal",
            "recipes",
            "health",
            "records",
            "bank",
            "statements",
            "contract",
            "lease",
            "medical",
            "calendar",
            "resume",
            "slides",
            "travel",
            "wedding",
            "guest",
            "list",
            "grocery",
            "books",
            "lyrics",
            "garden",
            "kids",
            "school",
            "team",
            "roster",
            "sales",
            "leads",
            "roadmap",
            "spec",
            "api",
            "client",
            "hr",
            "policy",
            "interview",
            "podcast",
            "script",
            "blog",
            "ideas",
            "to",
            "and",
        ];
        let capital = |w: &str| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        };
        for _ in 0..N {
            let words: Vec<&str> = (0..2 + draws.below(5))
                .map(|_| WORDS[draws.below(WORDS.len())])
                .collect();
            let year = (2015 + draws.below(12)).to_string();
            let tag = format!(
                "{}{}",
                ["Q", "v", "part"][draws.below(3)],
                1 + draws.below(9)
            );
            let at = draws.below(words.len() + 1);
            let mut parts: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            parts.insert(at, year);
            if draws.below(2) == 0 {
                parts.push(tag);
            }
            let name = match draws.below(6) {
                0 => parts.iter().map(|p| capital(p)).collect::<String>(),
                1 => parts.concat(),
                2 => parts.join("_"),
                3 => parts
                    .iter()
                    .map(|p| capital(p))
                    .collect::<Vec<_>>()
                    .join("-"),
                4 => parts.concat().to_ascii_uppercase(),
                _ => format!(
                    "{}/{}",
                    words[0],
                    parts.iter().map(|p| capital(p)).collect::<String>()
                ),
            };
            assert!(!looks_like_a_provider_key(&name), "{name}");
        }
    }
}
