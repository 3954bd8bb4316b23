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
