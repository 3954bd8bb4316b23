//! The intent's background document frequencies (`src/intent_background.txt`) are exactly what
//! the corpus gives through the ranking's own `terms`: rebuilt here and compared. To rebuild the
//! file after changing the tokenizer: `SKILLBOX_REGENERATE=1 cargo test -p skillbox-calls --test
//! it -- intent_background::`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use skillbox_calls::intent::{BACKGROUND, terms};

fn skill_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("corpus dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            skill_files(&p, out);
        } else if p.file_name().is_some_and(|n| n == "SKILL.md") {
            out.push(p);
        }
    }
}

fn rebuild() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skill/tests/data/skills-corpus");
    let mut files = Vec::new();
    skill_files(&root, &mut files);
    let mut n = 0u32;
    let mut df: BTreeMap<String, u32> = BTreeMap::new();
    for f in files {
        let bytes = std::fs::read(&f).expect("read");
        let folder = f
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str())
            .map(str::to_owned);
        // The corpus holds invalid documents on purpose: they are not part of the background.
        let Ok(parsed) = skillbox_skill::document::parse(&bytes, folder.as_deref()) else {
            continue;
        };
        let d = parsed.declaration;
        let name = d.name.replace('-', " ");
        let mut words: BTreeSet<String> = terms(&name).into_iter().collect();
        words.extend(terms(&d.description));
        n += 1;
        for w in words {
            *df.entry(w).or_default() += 1;
        }
    }
    let mut out = format!("N {n}\n");
    for (t, d) in df {
        out.push_str(&format!("{t} {d}\n"));
    }
    out
}

#[test]
fn background_frequencies_match_the_corpus() {
    let fresh = rebuild();
    if std::env::var_os("SKILLBOX_REGENERATE").is_some() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/intent_background.txt");
        std::fs::write(&path, &fresh).expect("write background");
        return;
    }
    let docs: u32 = fresh
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("N "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(docs >= 300, "only {docs} corpus documents parsed");
    assert!(
        fresh == BACKGROUND,
        "src/intent_background.txt is stale: rebuild it with SKILLBOX_REGENERATE=1"
    );
}
