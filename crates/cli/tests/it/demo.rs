//! `skillbox demo` as a user runs it: a real process that starts a box and two nodes on
//! loopback and runs one call end to end with the embedded model. Needs the model
//! (`SKILLBOX_MODEL`, else the default path; `scripts/test` fetches it first).

use std::path::PathBuf;
use std::process::{Command, Output};

/// The caller's private source in the demo, line by line.
const SOURCE_LINES: [&str; 6] = [
    "Radiohead - Weird Fishes",
    "Bonobo - Kerala",
    "Massive Attack - Teardrop",
    "Portishead - Roads",
    "Thom Yorke - Dawn Chorus",
    "Boards of Canada - Roygbiv",
];

fn demo(args: &[&std::ffi::OsStr]) -> Output {
    let model = match std::env::var_os("SKILLBOX_MODEL").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME"))
            .join(".local/share/skillbox/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    assert!(
        model.is_file(),
        "the embedded model is missing at {}: run `skillbox model fetch`",
        model.display()
    );
    let home = tempfile::tempdir().expect("tempdir");
    Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .arg("demo")
        .args(args)
        .env("SKILLBOX_MODEL", &model)
        .env("SKILLBOX_DATA_DIR", home.path())
        .output()
        .expect("run demo")
}

/// Template slots a small model writes when it does not follow the request: `[genre]`,
/// `{artist}`, `<your name>`, and the prompt's own tags echoed back (`<request>`, `</source>`).
fn template_slots(answer: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (open, close) in [('[', ']'), ('{', '}'), ('<', '>')] {
        for (i, _) in answer.match_indices(open) {
            let Some(inner) = answer[i + 1..].split(close).next() else {
                continue;
            };
            let closed = answer[i + 1..].contains(close);
            if closed && !inner.is_empty() && inner.len() < 30 && !inner.contains('\n') {
                found.push(format!("{open}{inner}{close}"));
            }
        }
    }
    found
}

#[test]
fn the_slot_check_finds_what_the_weak_answer_had() {
    // The answers the 135M model gave before the demo was tuned: the check must catch them.
    assert_eq!(
        template_slots("I enjoy [genre] music, mostly in a [mood] mood."),
        ["[genre]", "[mood]"]
    );
    assert_eq!(
        template_slots("<response>\nName a playlist made of my songs.\n</response>"),
        ["<response>", "</response>"]
    );
    assert_eq!(template_slots("Dear {name}, try it."), ["{name}"]);
    assert!(template_slots("Melancholic and introspective (mostly trip-hop).").is_empty());
}

#[test]
fn demo_runs_one_call_end_to_end_with_the_embedded_model() {
    let out = demo(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    for step in [
        "loaded (",
        "box at http://127.0.0.1:",
        "owner installed skill \"song-mood\"",
        "owner set the skill's body allowance to 64 tokens",
        "caller stored private source \"spotify_songs\"",
        "the caller's board shows the owner's skill",
        "caller: requested",
        "caller: answered",
        "owner:  ran",
        "answer (only the caller can open it):",
        "\"status\": \"ok\"",
        "no hardware isolation",
    ] {
        assert!(
            stdout.contains(step),
            "demo output lacks {step:?}:\n{stdout}"
        );
    }
    let answer = stdout
        .split("answer (only the caller can open it):\n")
        .nth(1)
        .and_then(|rest| rest.split("\nreceipt").next())
        .unwrap_or("")
        .trim();
    // An answer a person would keep: the model's own sentence about the songs, not a template,
    // not the prompt or the list handed back, and finished rather than cut at the cap.
    assert!(answer.len() > 20, "empty answer:\n{stdout}");
    let slots = template_slots(answer);
    assert!(
        slots.is_empty(),
        "the answer holds template slots {slots:?}:\n{answer}"
    );
    let copied: Vec<_> = SOURCE_LINES
        .iter()
        .filter(|line| answer.contains(*line))
        .collect();
    assert!(
        copied.is_empty(),
        "the answer repeats the listening history {copied:?}:\n{answer}"
    );
    assert!(
        !answer.contains("Describe the mood of these songs"),
        "the answer repeats the request:\n{answer}"
    );
    // The request asks for one sentence; a few is still an answer, a page is not.
    let sentences = answer
        .split_inclusive(['.', '!', '?'])
        .filter(|s| s.trim().len() > 1)
        .count();
    assert!(
        sentences <= 3,
        "{sentences} sentences for a one-sentence request:\n{answer}"
    );
    assert!(
        answer.ends_with(['.', '!', '?', '"', ')']),
        "the answer stops mid-sentence:\n{answer}"
    );
    // It speaks of the user's songs, not of a persona's own taste (the weak answer began "I'm a
    // music analyst. I enjoy listening to artists like Radiohead").
    let persona: Vec<_> = ["I'm a ", "I am a ", "I enjoy", "I love", "I like"]
        .into_iter()
        .filter(|p| answer.contains(p))
        .collect();
    assert!(
        persona.is_empty(),
        "the answer speaks of its own taste {persona:?}:\n{answer}"
    );
    // It speaks of the songs it was given: their mood, or the artists by name.
    let lower = answer.to_lowercase();
    let about = [
        "mood",
        "melanchol",
        "introspect",
        "dream",
        "atmospher",
        "moody",
        "mellow",
    ]
    .iter()
    .any(|w| lower.contains(w))
        || SOURCE_LINES
            .iter()
            .filter_map(|l| l.split(" - ").next())
            .any(|artist| answer.contains(artist));
    assert!(about, "the answer is not about the songs:\n{answer}");
}

#[test]
fn demo_with_a_model_that_is_missing_or_no_gguf_stops_before_starting_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("qwen-1.5b-instruct.gguf");
    let out = demo(&["--model".as_ref(), missing.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no such file"), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("fetching"),
        "a user's --model is never replaced by a download"
    );

    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF but not really a model").expect("write");
    let out = demo(&["--model".as_ref(), bad.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("not a valid GGUF file"), "{stderr}");
    assert!(
        !stdout.contains("box at"),
        "nothing starts on a bad model:\n{stdout}"
    );
}
