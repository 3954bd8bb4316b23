//! The 419 real SKILL.md files of `tests/data/skills-corpus`: every one parses without a panic,
//! and where our verdict differs from the Agent Skills reference validator (`skills-ref`), the
//! folder is listed in `tests/data/corpus-differences.tsv` with the reason. This test keeps that
//! table exact: a new difference, or a listed one that went away, fails it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use skillbox_skill::{CheckError, check_skill, openwop};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Our verdict per corpus folder: `Ok(())` or the first error.
fn our_verdicts() -> BTreeMap<String, Result<(), String>> {
    let corpus = data().join("skills-corpus");
    let manifest = std::fs::read_to_string(corpus.join("manifest.tsv")).expect("manifest.tsv");
    let mut out = BTreeMap::new();
    for line in manifest.lines().skip(1) {
        let path = line.split('\t').next().expect("a path column");
        let file = corpus.join(path);
        let folder = Path::new(path).parent().expect("SKILL.md sits in a folder");
        let name = folder
            .file_name()
            .and_then(|n| n.to_str())
            .expect("folder name");
        let bytes = std::fs::read(&file).expect("corpus file");
        let verdict = match check_skill(&bytes, Some(name), openwop::DEFAULT_NAMESPACE) {
            Ok(_) => Ok(()),
            Err(CheckError::Document(e)) => Err(e.to_string()),
            Err(e @ CheckError::Manifest { .. }) => Err(e.to_string()),
        };
        out.insert(folder.to_string_lossy().into_owned(), verdict);
    }
    out
}

/// Why skills-ref and we disagree, from skills-ref's own error text.
fn reason(skills_ref_errors: &[String], ours_valid: bool) -> &'static str {
    let all = skills_ref_errors.join("\n");
    if ours_valid && all.starts_with("Unexpected fields in frontmatter") {
        "extension-fields-are-warnings"
    } else if ours_valid && all.contains("flow") {
        "flow-lists-accepted"
    } else {
        "unexplained"
    }
}

fn differences() -> BTreeMap<String, (bool, bool, &'static str)> {
    let expected: BTreeMap<String, Vec<String>> = serde_json::from_str(
        &std::fs::read_to_string(data().join("skills-corpus/expected-skills-ref.json"))
            .expect("expected file"),
    )
    .expect("expected-skills-ref.json is JSON");
    let ours = our_verdicts();
    assert_eq!(ours.len(), 419, "the corpus has 419 SKILL.md files");
    let mut diffs = BTreeMap::new();
    for (folder, verdict) in &ours {
        let theirs = expected
            .get(folder)
            .unwrap_or_else(|| panic!("{folder} missing from expected file"));
        let theirs_valid = theirs.is_empty();
        let ours_valid = verdict.is_ok();
        if theirs_valid != ours_valid {
            diffs.insert(
                folder.clone(),
                (theirs_valid, ours_valid, reason(theirs, ours_valid)),
            );
        }
    }
    diffs
}

#[test]
fn corpus_differences_match_the_checked_in_table() {
    let diffs = differences();
    let table = std::fs::read_to_string(data().join("corpus-differences.tsv"))
        .expect("corpus-differences.tsv");
    let listed: BTreeMap<String, (bool, bool, String)> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                cols.len(),
                4,
                "row {l:?} needs folder, skills-ref, ours, reason"
            );
            (
                cols[0].to_owned(),
                (cols[1] == "valid", cols[2] == "valid", cols[3].to_owned()),
            )
        })
        .collect();
    let computed: BTreeMap<String, (bool, bool, String)> = diffs
        .into_iter()
        .map(|(k, (a, b, r))| (k, (a, b, r.to_owned())))
        .collect();
    if computed != listed {
        let mut regenerated = String::from("folder\tskills-ref\tours\treason\n");
        for (k, (a, b, r)) in &computed {
            let v = |x: &bool| if *x { "valid" } else { "invalid" };
            regenerated.push_str(&format!("{k}\t{}\t{}\t{r}\n", v(a), v(b)));
        }
        panic!("corpus differences changed; the table should now read:\n{regenerated}");
    }
    assert!(
        computed.values().all(|(_, _, r)| r != "unexplained"),
        "every difference from skills-ref must have a known reason"
    );
}

#[test]
fn directory_name_mismatches_are_errors_like_skills_ref() {
    // 15 nested qdrant skills whose `name` differs from their folder: both validators refuse them.
    let ours = our_verdicts();
    let refused: Vec<_> = ours
        .iter()
        .filter(|(_, v)| v.as_ref().is_err_and(|e| e.contains("imported as")))
        .collect();
    assert_eq!(refused.len(), 15, "{refused:#?}");
}
