//! The SKILL.md grammar: splitting, every field of design §3, errors that name field and line,
//! warnings, and hostile input refused in bounded time and memory.

use skillbox_skill::document::{self, MAX_DOCUMENT, MAX_FRONT_MATTER};
use skillbox_skill::{Diagnostic, DocumentError, ProviderId};

fn parse(text: &str) -> Result<document::Parsed, DocumentError> {
    document::parse(text.as_bytes(), None)
}

fn problems(text: &str) -> Vec<Diagnostic> {
    match parse(text) {
        Ok(p) => panic!("expected an error, parsed {:?}", p.declaration),
        Err(e) => e.problems,
    }
}

/// The single problem about `field`, with its line.
fn problem_for<'a>(ps: &'a [Diagnostic], field: &str) -> &'a Diagnostic {
    ps.iter()
        .find(|p| p.field.as_deref() == Some(field))
        .unwrap_or_else(|| panic!("no problem about {field}: {ps:?}"))
}

/// `text` is refused with a problem about `field` whose message says `needle`.
fn assert_problem(text: &str, field: &str, needle: &str) {
    let ps = problems(text);
    let p = problem_for(&ps, field);
    assert!(p.message.contains(needle), "{p:?}");
}

const SEED_EXAMPLE: &str = "---
description: Builds a music-taste profile from someone's listening history.
provider: openrouter
model: anthropic/claude-sonnet-4.5
key: openrouter-key
requiredSources: spotify_songs
---
You are a music analyst. Read the listening history and describe the taste.
";

#[test]
fn the_seed_example_parses_with_the_import_name() {
    let p = document::parse(SEED_EXAMPLE.as_bytes(), Some("music-taste")).expect("valid");
    let d = &p.declaration;
    assert_eq!(d.name, "music-taste");
    assert_eq!(d.provider, Some(ProviderId::OpenRouter));
    assert_eq!(d.model.as_deref(), Some("anthropic/claude-sonnet-4.5"));
    assert_eq!(d.key.as_deref(), Some("openrouter-key"));
    assert_eq!(d.required_sources, vec!["spotify_songs".to_owned()]);
    assert!(p.body.as_str().starts_with("You are a music analyst."));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(d.body_source_name(), "skill/music-taste/body");
}

#[test]
fn the_declaration_never_holds_the_body() {
    let marker = "BODY-MARKER-7f3a9c";
    let text = format!("---\nname: s\ndescription: d\n---\n{marker}\n");
    let p = parse(&text).expect("valid");
    let json = serde_json::to_string(&p.declaration).expect("serializes");
    assert!(!json.contains(marker));
    assert!(!format!("{:?}", p.declaration).contains(marker));
    assert!(
        !format!("{:?}", p.body).contains(marker),
        "Body's Debug shows only its length"
    );
    assert!(
        !serde_json::to_string(&p.declaration.advertised(p.declaration.digest(&[0; 32])))
            .expect("ser")
            .contains(marker)
    );
}

#[test]
fn advertised_leaves_out_model_and_key() {
    let p = document::parse(SEED_EXAMPLE.as_bytes(), Some("music-taste")).expect("valid");
    let ad = serde_json::to_string(&p.declaration.advertised(p.declaration.digest(&[7; 32])))
        .expect("ser");
    assert!(!ad.contains("claude-sonnet"), "{ad}");
    assert!(!ad.contains("openrouter-key"), "{ad}");
    assert!(
        ad.contains("spotify_songs") && ad.contains("\"provider\":\"openrouter\""),
        "{ad}"
    );
}

#[test]
fn digest_changes_with_any_field_and_the_salt() {
    let salt = [3u8; 32];
    let declared = |text: &str| parse(text).expect("valid").declaration;
    let a = declared("---\nname: s\ndescription: one\n---\n");
    let b = declared("---\nname: s\ndescription: two\n---\n");
    let c = declared("---\nname: s\ndescription: one\nmodel: m\n---\n");
    let d = declared("---\nname: s\ndescription: one\nkey: k\n---\n");
    let da = a.digest(&salt);
    assert!(da.starts_with("sha256:") && da.len() == 7 + 64);
    assert_ne!(da, b.digest(&salt));
    assert_ne!(da, c.digest(&salt));
    assert_ne!(da, d.digest(&salt));
    assert_ne!(da, a.digest(&[4u8; 32]), "a new salt is a new commitment");
    assert_eq!(
        da,
        parse("---\ndescription: one\nname: s\n---\nother body\n")
            .expect("v")
            .declaration
            .digest(&salt),
        "field order and the body do not change the commitment"
    );
}

/// Issue 12: the advertised digest must not let anyone confirm the private fields by guessing.
/// An attacker who sees the advert (every public field) and tries a list of model ids and key
/// names — the attack that recovered both from an unsalted hash in under a second — never
/// reproduces the advertised value without the owner's salt.
#[test]
fn brute_forcing_the_private_fields_does_not_reproduce_the_digest() {
    let p = document::parse(SEED_EXAMPLE.as_bytes(), Some("music-taste")).expect("valid");
    let decl = p.declaration;
    let mut salt = [0u8; 32];
    for (i, b) in salt.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    let advertised = decl.advertised(decl.digest(&salt)).digest;
    let models = [
        "anthropic/claude-sonnet-4.5",
        "anthropic/claude-opus-4",
        "openai/gpt-4o",
        "openai/gpt-4o-mini",
        "google/gemini-2.5-pro",
        "meta-llama/llama-3.1-70b-instruct",
        "mistralai/mistral-large",
    ];
    let keys = ["openrouter-key", "openai-key", "anthropic-key", "key"];
    let mut guess = decl.clone();
    let mut tried = 0;
    for model in models {
        for key in keys {
            guess.model = Some(model.to_owned());
            guess.key = Some(key.to_owned());
            // The attacker's best guesses of the salt: none, zeros, the public digest.
            for s in [[0u8; 32], [0xff; 32], [1u8; 32]] {
                tried += 1;
                assert_ne!(guess.digest(&s), advertised, "{model} / {key} confirmed");
            }
            // The old scheme: a plain hash of the whole declaration.
            let plain = format!(
                "sha256:{}",
                sha256_hex(&serde_json::to_vec(&guess).expect("ser"))
            );
            assert_ne!(plain, advertised);
        }
    }
    assert!(tried > 50);
    // With the salt, the right guess is exactly the commitment: it really does bind them.
    guess.model = Some("anthropic/claude-sonnet-4.5".into());
    guess.key = Some("openrouter-key".into());
    assert_eq!(guess.digest(&salt), advertised);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn required_sources_and_key_under_reserved_prefixes_are_refused() {
    for (field, line_text) in [
        (
            "requiredSources",
            "requiredSources: [spotify_songs, skill/code-reviewer/body]",
        ),
        ("requiredSources", "requiredSources: call/abc/answer"),
        ("requiredSources", "requiredSources:\n  - agent/x.y/prompt"),
        ("key", "key: skill/other/body"),
    ] {
        let text = format!(
            "---\nname: hostile\ndescription: d\nprovider: openrouter\n{line_text}\n---\nbody\n"
        );
        let ps = problems(&text);
        let p = problem_for(&ps, field);
        assert_eq!(p.line, Some(5), "{line_text}: {p}");
        assert!(p.message.contains("reserved prefix"), "{p}");
    }
    // Near names are fine: the prefix is a whole path segment.
    let ok = parse(
        "---\nname: s\ndescription: d\nrequiredSources: [skills, calls/x, agentic]\n---\nb\n",
    )
    .expect("valid");
    assert_eq!(ok.declaration.required_sources.len(), 3);
}

#[test]
fn limits_are_parsed_and_checked() {
    let p = parse("---\nname: s\ndescription: d\nlimits:\n  maxRequestBytes: 4096\n  callsPerDay: 10\n---\nb\n")
        .expect("valid");
    assert_eq!(p.declaration.limits.max_request_bytes, Some(4096));
    assert_eq!(p.declaration.limits.calls_per_day, Some(10));
    assert_eq!(p.declaration.limits.max_output_bytes, None);
    for (bad, field) in [
        ("limits: 5", "limits"),
        ("limits:\n  maxRequestBytes: -1", "limits.maxRequestBytes"),
        ("limits:\n  maxRequestBytes: 1.5", "limits.maxRequestBytes"),
        (
            "limits:\n  maxRequestBytes: \"10\"",
            "limits.maxRequestBytes",
        ),
        ("limits:\n  maxTokens: 10", "limits.maxTokens"),
    ] {
        let ps = problems(&format!("---\nname: s\ndescription: d\n{bad}\n---\nb\n"));
        let p = problem_for(&ps, field);
        assert_eq!(p.line, Some(4), "{bad}: {p}");
    }
}

#[test]
fn bom_and_crlf_are_accepted() {
    let text = "\u{feff}---\r\nname: crlf-skill\r\ndescription: Works with CRLF.\r\nrequiredSources: [a, b]\r\n---\r\nBody line\r\n";
    let p = parse(text).expect("valid");
    assert_eq!(p.declaration.name, "crlf-skill");
    assert_eq!(p.declaration.description, "Works with CRLF.");
    assert_eq!(p.declaration.required_sources, vec!["a", "b"]);
    assert!(p.body.as_str().starts_with("Body line"));
}

#[test]
fn missing_front_matter_and_missing_close_are_errors_on_line_1() {
    let ps = problems("# Just markdown\n");
    assert_eq!(ps[0].line, Some(1));
    assert!(ps[0].message.contains("no front matter"), "{ps:?}");
    let ps = problems("---\nname: x\ndescription: y\n# no closing line\n");
    assert_eq!(ps[0].line, Some(1));
    assert!(ps[0].message.contains("never closed"), "{ps:?}");
    let ps = problems("");
    assert!(ps[0].message.contains("no front matter"));
}

#[test]
fn empty_body_is_a_warning() {
    let p = parse("---\nname: s\ndescription: d\n---").expect("valid");
    assert!(p.body.is_empty());
    assert!(
        p.warnings
            .iter()
            .any(|w| w.message.contains("body is empty")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn name_rules() {
    for bad in [
        "Upper",
        "-lead",
        "trail-",
        "dou--ble",
        "sp ace",
        "ünï",
        &"a".repeat(65),
    ] {
        let ps = problems(&format!("---\nname: \"{bad}\"\ndescription: d\n---\n"));
        let p = problem_for(&ps, "name");
        assert_eq!(p.line, Some(2), "{bad}: {p:?}");
    }
    assert!(
        parse(&format!(
            "---\nname: {}\ndescription: d\n---\n",
            "a".repeat(64)
        ))
        .is_ok()
    );
    assert!(parse("---\nname: 3d-printing\ndescription: d\n---\n").is_ok());
}

#[test]
fn name_falls_back_to_the_import_name_and_must_agree() {
    let p = document::parse(b"---\ndescription: d\n---\n", Some("from-folder")).expect("valid");
    assert_eq!(p.declaration.name, "from-folder");
    let e = document::parse(
        b"---\nname: other\ndescription: d\n---\n",
        Some("from-folder"),
    )
    .unwrap_err();
    let p = problem_for(&e.problems, "name");
    assert!(p.message.contains("must agree"), "{p:?}");
    assert_eq!(p.line, Some(2));
    let e = document::parse(b"---\ndescription: d\n---\n", None).unwrap_err();
    assert!(problem_for(&e.problems, "name").message.contains("missing"));
}

#[test]
fn description_rules() {
    assert_problem("---\nname: s\n---\n", "description", "missing");
    let long = "x".repeat(1025);
    let ps = problems(&format!(
        "---\nname: s\nlicense: MIT\ndescription: {long}\n---\n"
    ));
    let p = problem_for(&ps, "description");
    assert_eq!(p.line, Some(4));
    assert!(p.message.contains("1025"), "{p:?}");
    assert!(
        parse(&format!(
            "---\nname: s\ndescription: {}\n---\n",
            "é".repeat(1024)
        ))
        .is_ok(),
        "chars, not bytes"
    );
    assert_problem(
        "---\nname: s\ndescription: 42\n---\n",
        "description",
        "must be text",
    );
    assert_problem(
        "---\nname: s\ndescription: \"  \"\n---\n",
        "description",
        "blank",
    );
}

#[test]
fn provider_forms() {
    for (text, want) in [
        ("openrouter", ProviderId::OpenRouter),
        ("openai", ProviderId::OpenAi),
        ("anthropic", ProviderId::Anthropic),
        ("ollama", ProviderId::Ollama),
        ("local", ProviderId::Local),
        (
            "openai-compatible:vllm-1",
            ProviderId::OpenAiCompatible("vllm-1".into()),
        ),
    ] {
        let p = parse(&format!(
            "---\nname: s\ndescription: d\nprovider: {text}\n---\n"
        ))
        .expect(text);
        assert_eq!(p.declaration.provider, Some(want.clone()));
        assert_eq!(want.to_string(), text, "Display round-trips");
    }
    for bad in [
        "gpt",
        "openai-compatible:",
        "openai-compatible:a b",
        "LOCAL",
    ] {
        let ps = problems(&format!(
            "---\nname: s\ndescription: d\nprovider: \"{bad}\"\n---\n"
        ));
        let p = problem_for(&ps, "provider");
        assert_eq!(p.line, Some(4));
        assert!(p.message.contains("unknown provider"), "{p:?}");
    }
}

#[test]
fn required_sources_as_list_or_separated_string() {
    let a = parse("---\nname: s\ndescription: d\nrequiredSources: a, b c,d\n---\n").expect("v");
    assert_eq!(a.declaration.required_sources, vec!["a", "b", "c", "d"]);
    let b =
        parse("---\nname: s\ndescription: d\nrequiredSources:\n  - a\n  - b\n---\n").expect("v");
    assert_eq!(b.declaration.required_sources, vec!["a", "b"]);
    let dup = parse("---\nname: s\ndescription: d\nrequiredSources: [a, a]\n---\n").expect("v");
    assert_eq!(dup.declaration.required_sources, vec!["a"]);
    assert!(dup.warnings.iter().any(|w| w.message.contains("twice")));
    assert_problem(
        "---\nname: s\ndescription: d\nrequiredSources: [\"../etc\"]\n---\n",
        "requiredSources",
        "not a source name",
    );
    let ps = problems("---\nname: s\ndescription: d\nrequiredSources: {a: 1}\n---\n");
    assert_eq!(problem_for(&ps, "requiredSources").line, Some(4));
}

#[test]
fn key_must_name_a_source() {
    let ps = problems("---\nname: s\ndescription: d\nkey: \"sk-or-v1 secret value\"\n---\n");
    let p = problem_for(&ps, "key");
    assert!(
        !p.message.contains("secret value"),
        "an error never echoes what may be a secret"
    );
}

#[test]
fn unknown_keys_are_kept_with_a_warning() {
    let p = parse(
        "---\nname: s\ndescription: d\nargument-hint: \"[file]\"\nuser-invocable: true\n---\n",
    )
    .expect("v");
    assert_eq!(p.declaration.extra.len(), 2);
    assert_eq!(
        p.declaration.extra["user-invocable"],
        serde_json::Value::Bool(true)
    );
    let w: Vec<_> = p
        .warnings
        .iter()
        .filter(|w| w.message.contains("unknown field"))
        .collect();
    assert_eq!(w.len(), 2);
    assert_eq!(w[0].field.as_deref(), Some("argument-hint"));
    assert_eq!(w[0].line, Some(4));
}

#[test]
fn allowed_tools_is_accepted_with_a_warning() {
    for form in [
        "allowed-tools: Bash Read",
        "allowed-tools: [Bash, Read]",
        "allowed-tools:\n  - Bash",
    ] {
        let p = parse(&format!("---\nname: s\ndescription: d\n{form}\n---\n")).expect(form);
        assert!(p.declaration.allowed_tools.is_some());
        assert!(
            p.warnings
                .iter()
                .any(|w| w.field.as_deref() == Some("allowed-tools")
                    && w.message.contains("no tools"))
        );
    }
    let ps = problems("---\nname: s\ndescription: d\nallowed-tools: 3\n---\n");
    problem_for(&ps, "allowed-tools");
}

#[test]
fn memory_flags() {
    let p = parse("---\nname: s\ndescription: d\nmemory:\n  scratchpad: true\n---\n").expect("v");
    assert_eq!(p.declaration.memory.scratchpad, Some(true));
    let p = parse("---\nname: s\ndescription: d\nmetadata:\n  memory:\n    longTerm: true\n---\n")
        .expect("v");
    assert_eq!(
        p.declaration.memory.long_term,
        Some(true),
        "metadata.memory is read too"
    );
    assert_problem(
        "---\nname: s\ndescription: d\nmemory:\n  longTerm: yes please\n---\n",
        "memory.longTerm",
        "true or false",
    );
    assert_problem(
        "---\nname: s\ndescription: d\nmemory:\n  forever: true\n---\n",
        "memory.forever",
        "unknown memory flag",
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let ps = problems("---\nname: Bad\ndescription: 3\nprovider: nope\ncompatibility: \"\"\n---\n");
    for f in ["name", "description", "provider", "compatibility"] {
        problem_for(&ps, f);
    }
}

#[test]
fn yaml_errors_name_the_line() {
    let ps = problems("---\nname: s\ndescription: d\nbroken: [unclosed\n---\n");
    assert!(ps[0].message.contains("invalid YAML"), "{ps:?}");
    assert!(ps[0].line.is_some_and(|l| l >= 4), "{ps:?}");
    let ps = problems("---\nname: s\nname: t\ndescription: d\n---\n");
    assert!(ps[0].message.contains("duplicate"), "{ps:?}");
    let ps = problems("---\n- a list\n- not a mapping\n---\n");
    assert!(!ps.is_empty());
    let ps = problems("---\nname: s\ndescription: d\n<<: {a: 1}\n---\n");
    assert!(!ps.is_empty(), "merge keys refused");
}

// ---- hostile input: each a clear error in bounded time and memory

#[test]
fn alias_bomb_is_refused() {
    let mut y = String::from("---\nname: s\ndescription: d\na: &a [x, x, x, x, x, x, x, x, x]\n");
    for i in 0..9 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        y.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    y.push_str("---\nbody\n");
    let ps = problems(&y);
    assert!(ps[0].message.contains("anchors and aliases"), "{ps:?}");
    // One anchor alone is refused too: no expansion at all.
    let ps = problems("---\nname: s\ndescription: &d text\nlicense: *d\n---\n");
    assert!(ps[0].message.contains("anchors and aliases"), "{ps:?}");
}

#[test]
fn ten_mib_of_front_matter_is_refused_by_size() {
    let mut y = String::from("---\nname: s\ndescription: d\n");
    while y.len() < 10 * 1024 * 1024 {
        y.push_str(
            "padding: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
        );
    }
    y.push_str("---\n");
    let ps = problems(&y);
    assert!(ps[0].message.contains("1 MiB"), "{ps:?}");
    // Just over the front-matter limit, inside the document limit.
    let mut y = String::from("---\nname: s\ndescription: d\n");
    while y.len() <= MAX_FRONT_MATTER + 10 {
        y.push_str("# comment line padding the front matter out past its limit....\n");
    }
    y.push_str("---\n");
    assert!(y.len() < MAX_DOCUMENT);
    let ps = problems(&y);
    assert!(ps[0].message.contains("64 KiB"), "{ps:?}");
}

#[test]
fn invalid_utf8_is_refused_with_its_line() {
    let mut bytes = b"---\nname: s\ndescription: ok\n".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
    bytes.extend_from_slice(b"---\n");
    let e = document::parse(&bytes, None).unwrap_err();
    assert!(e.problems[0].message.contains("not UTF-8"), "{e:?}");
    assert_eq!(e.problems[0].line, Some(4));
}

#[test]
fn nul_byte_is_refused() {
    let e = document::parse(b"---\nname: s\ndescription: a\0b\n---\n", None).unwrap_err();
    assert!(e.problems[0].message.contains("NUL"), "{e:?}");
    assert_eq!(e.problems[0].line, Some(3));
}

#[test]
fn deep_nesting_is_refused() {
    let depth = 10_000;
    let y = format!(
        "---\nname: s\ndescription: d\nx: {}{}\n---\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let ps = problems(&y);
    assert!(
        ps[0].message.contains("nest") || ps[0].message.contains("invalid YAML"),
        "{ps:?}"
    );
    let mut block = String::from("---\nname: s\ndescription: d\nx:\n");
    for i in 0..200 {
        block.push_str(&format!("{}k{i}:\n", "  ".repeat(i + 1)));
    }
    block.push_str("---\n");
    let ps = problems(&block);
    assert!(ps[0].message.contains("nests deeper"), "{ps:?}");
}

#[test]
fn many_small_nodes_are_bounded() {
    let mut y = String::from("---\nname: s\ndescription: d\nx: [");
    for _ in 0..30_000 {
        y.push_str("1,");
    }
    y.push_str("1]\n---\n");
    assert!(parse(&y).is_err(), "node budget refuses 30,000 items");
}
