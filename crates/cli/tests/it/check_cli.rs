//! `skillbox skill check` and `skillbox manifest check` as a user runs them: the real binary,
//! real files, exit codes and output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn skillbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args(args)
        .output()
        .expect("run skillbox")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn bundled_examples_check_ok() {
    let ex = repo().join("examples/skills");
    let o = skillbox(&[
        "skill",
        "check",
        ex.join("music-taste").to_str().unwrap(),
        ex.join("code-reviewer").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = stdout(&o);
    assert!(
        out.contains("music-taste: ok (local.skillbox.music-taste)"),
        "{out}"
    );
    assert!(
        out.contains("code-reviewer: ok (local.skillbox.code-reviewer)"),
        "{out}"
    );
}

#[test]
fn an_invalid_skill_exits_1_naming_field_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good");
    std::fs::create_dir(&good).expect("mkdir");
    std::fs::write(good.join("SKILL.md"), "---\ndescription: fine\n---\nbody\n").expect("write");
    let bad = dir.path().join("bad.md");
    std::fs::write(
        &bad,
        "---\nname: bad\ndescription: d\nprovider: gpt\nmemory:\n  longTerm: true\n---\nb\n",
    )
    .expect("write");
    let o = skillbox(&[
        "skill",
        "check",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("good: ok (local.skillbox.good)"),
        "folder name is the fallback name: {out}"
    );
    assert!(out.contains("bad.md: INVALID"), "{out}");
    assert!(
        out.contains("error: line 4: provider: unknown provider"),
        "{out}"
    );

    // --json: one object per input with verdict, errors and warnings.
    let o = skillbox(&[
        "skill",
        "check",
        "--json",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON output");
    assert_eq!(v[0]["valid"], true);
    assert_eq!(v[0]["agentId"], "local.skillbox.good");
    assert_eq!(v[1]["valid"], false);
    assert_eq!(v[1]["errors"][0]["field"], "provider");
    assert_eq!(v[1]["errors"][0]["line"], 4);
}

#[test]
fn the_skill_profile_reject_shows_the_schema_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("stateful");
    std::fs::create_dir(&folder).expect("mkdir");
    let f = folder.join("SKILL.md");
    std::fs::write(
        &f,
        "---\nname: stateful\ndescription: d\nmemory:\n  longTerm: true\n---\nb\n",
    )
    .expect("write");
    let o = skillbox(&["skill", "check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("line 4: memory: /memoryShape/longTerm"),
        "{out}"
    );
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let o = skillbox(&["skill", "check", "/nonexistent/skill"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("cannot read"), "{}", stdout(&o));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(skillbox(&["skill", "check"]).status.code(), Some(2));
    assert_eq!(skillbox(&["no-such-command"]).status.code(), Some(2));
}

#[test]
fn manifest_check_gives_each_fixture_its_verdict() {
    let fx = repo().join("crates/skill/tests/data/openwop-fixtures/manifests");
    let valid: Vec<String> = std::fs::read_dir(fx.join("valid"))
        .expect("dir")
        .map(|e| e.expect("entry").path().display().to_string())
        .collect();
    let mut args = vec!["manifest", "check"];
    args.extend(valid.iter().map(String::as_str));
    let o = skillbox(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    let bad = fx.join("invalid/skill-longterm-true.json");
    let o = skillbox(&["manifest", "check", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("/memoryShape/longTerm"),
        "{}",
        stdout(&o)
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let not_json = dir.path().join("x.json");
    std::fs::write(&not_json, "{not json").expect("write");
    let o = skillbox(&["manifest", "check", "--json", not_json.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON output");
    assert!(
        v[0]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("not JSON"))
    );
}

/// A pack of one skill agent that checks ok.
fn reviewer_pack() -> serde_json::Value {
    serde_json::json!({
        "name": "private.local.p", "version": "1.0.0", "engines": {"openwop": ">=1.0.0"},
        "runtime": {"language": "remote", "entry": "https://p.example/"},
        "agents": [{
            "agentId": "local.p.reviewer", "role": "skill", "persona": "R", "modelClass": "coding",
            "systemPrompt": "Review.", "handoff": {"taskSchemaRef": "t.json", "returnSchemaRef": "r.json"}
        }]
    })
}

#[test]
fn manifest_check_reads_a_pack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pack = reviewer_pack();
    let f = dir.path().join("pack.json");
    std::fs::write(&f, pack.to_string()).expect("write");
    let o = skillbox(&["manifest", "check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("agent local.p.reviewer (skill): ok"),
        "{}",
        stdout(&o)
    );
}

/// Review 25 S2, performed: a SKILL.md's front-matter key, and a pack.json's property name,
/// made of ESC, BEL and C1 controls (an OSC 52 clipboard write, a colour, CSI erase) reached the
/// terminal raw through `skill check`'s warning and `manifest check`'s schema error. Both now
/// print them cleaned, as peer text is: the line is there, the controls are not.
#[test]
fn a_hostile_files_names_reach_the_terminal_cleaned() {
    use skillbox_testkit::skills::{HOSTILE_SKILL_MD, holds_terminal_controls};
    let dir = tempfile::tempdir().expect("tempdir");
    let skill = dir.path().join("evil-skill");
    std::fs::create_dir(&skill).expect("mkdir");
    std::fs::write(skill.join("SKILL.md"), HOSTILE_SKILL_MD).expect("write");
    let o = skillbox(&["skill", "check", skill.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("warning: line 11: ]52;c;Y3VybCBldmlsLnNofHNo [31mX: unknown field"),
        "{out:?}"
    );
    assert!(!holds_terminal_controls(&out), "raw controls: {out:?}");
    // And what the file would spend of the owner's, before anyone imports it (S1).
    assert!(
        out.contains("  spends: provider openrouter, model openai/o1-pro, key source openrouter-key\n  asks for ceilings (a node applies at most its [ceilings]): maxOutputBytes 67108864, callsPerPeerPerDay 9007199254740991, callsPerDay 9007199254740991\n"),
        "{out}"
    );

    let mut pack = reviewer_pack();
    pack["\u{1b}]52;c;eA==\u{7}\u{9b}2J"] = serde_json::json!(1);
    let f = dir.path().join("pack.json");
    std::fs::write(&f, pack.to_string()).expect("write");
    let o = skillbox(&["manifest", "check", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(out.contains("]52;c;eA== 2J"), "the name is shown: {out:?}");
    assert!(!holds_terminal_controls(&out), "raw controls: {out:?}");
}
