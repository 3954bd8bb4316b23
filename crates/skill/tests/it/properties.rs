//! Property tests: the parser never panics, and what it accepts it reads back exactly.

use proptest::prelude::*;
use skillbox_skill::document;

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,3}"
}

fn description() -> impl Strategy<Value = String> {
    // Printable text including YAML-significant characters, quoted safely below.
    "[ -~]{1,200}".prop_filter("not blank", |s| !s.trim().is_empty())
}

fn yaml_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = document::parse(&bytes, None);
    }

    #[test]
    fn arbitrary_front_matter_never_panics(fm in "[ -~\n]{0,600}", body in "[ -~\n]{0,100}") {
        let text = format!("---\n{fm}\n---\n{body}");
        if let Err(e) = document::parse(text.as_bytes(), Some("fallback")) {
            prop_assert!(!e.problems.is_empty());
            for p in &e.problems {
                prop_assert!(!p.message.is_empty());
            }
        }
    }

    #[test]
    fn written_fields_read_back(
        n in name(),
        d in description(),
        sources in proptest::collection::btree_set("[a-z_][a-z0-9_]{0,10}", 0..4),
        crlf in any::<bool>(),
        bom in any::<bool>(),
        body in "[ -~]{0,80}",
    ) {
        let sources: Vec<String> = sources.into_iter().collect();
        let mut text = format!(
            "---\nname: '{n}'\ndescription: {}\nprovider: local\nrequiredSources: [{}]\n---\n{body}\n",
            yaml_quote(&d),
            sources.join(", ")
        );
        if crlf {
            text = text.replace('\n', "\r\n");
        }
        if bom {
            text.insert(0, '\u{feff}');
        }
        let p = document::parse(text.as_bytes(), None).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&p.declaration.name, &n);
        prop_assert_eq!(&p.declaration.description, &d);
        prop_assert_eq!(&p.declaration.required_sources, &sources);
        prop_assert_eq!(p.body.as_str().trim_end(), body.trim_end());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Issue 12: ceilings read back exactly; anything else under `limits:` is an error naming
    /// the field, never a panic or a silently dropped value.
    #[test]
    fn limits_read_back_or_are_refused_by_field(
        request in proptest::option::of(0u64..(1u64 << 53)),
        day in proptest::option::of(0u64..(1u64 << 53)),
        junk_key in "[a-zA-Z]{1,12}",
        junk_value in "[ -~]{0,12}",
    ) {
        let mut lines = String::new();
        if let Some(r) = request { lines.push_str(&format!("  maxRequestBytes: {r}\n")); }
        if let Some(d) = day { lines.push_str(&format!("  callsPerDay: {d}\n")); }
        let text = format!("---\nname: s\ndescription: d\nlimits:\n{lines}---\nb\n");
        let parsed = document::parse(text.as_bytes(), None);
        if request.is_none() && day.is_none() {
            // `limits:` with nothing under it is an empty mapping.
            prop_assert!(parsed.is_ok());
        } else {
            let d = parsed.expect("valid ceilings parse").declaration;
            prop_assert_eq!(d.limits.max_request_bytes, request);
            prop_assert_eq!(d.limits.calls_per_day, day);
        }
        let text = format!(
            "---\nname: s\ndescription: d\nlimits:\n  {junk_key}: {}\n---\nb\n",
            serde_json::to_string(&junk_value).expect("json string")
        );
        let e = document::parse(text.as_bytes(), None).expect_err("a string is no ceiling");
        let field = format!("limits.{junk_key}");
        prop_assert!(e.problems.iter().any(|p| p.field.as_deref() == Some(field.as_str())));
    }

    /// Issue 12: no spelling of a reserved name gets through `requiredSources`.
    #[test]
    fn reserved_required_sources_are_always_refused(
        prefix in prop::sample::select(vec!["skill", "agent", "call"]),
        rest in "[a-z0-9_.-]{1,20}(/[a-z0-9_.-]{1,10}){0,2}",
        other in "[a-z][a-z0-9_]{0,10}",
    ) {
        let reserved = format!("{prefix}/{rest}");
        let text = format!("---\nname: s\ndescription: d\nrequiredSources: [{other}, '{reserved}']\n---\nb\n");
        if let Ok(p) = document::parse(text.as_bytes(), None) {
            prop_assert!(
                !p.declaration.required_sources.iter().any(|s| skillbox_skill::is_reserved_source_name(s)),
                "{} accepted", reserved
            );
        }
    }
}
