//! Fuzz the output guard: any body and any answer give a verdict, never a panic. The input is
//! `body \0 answer`; the first byte picks spec variations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_guard::{Action, GuardSpec, check, measure, prepare, score};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (body, answer) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let body = String::from_utf8_lossy(body);
    let answer = String::from_utf8_lossy(answer);
    let spec = GuardSpec {
        ngram: 3 + u32::from(flags % 8),
        canaries: flags & 0x10 == 0,
        auto_canaries: flags & 0x20 == 0,
        max_copied_words: if flags & 0x40 == 0 { 80 } else { 0 },
        action: Action::Withhold,
        ..GuardSpec::default_for(false)
    };
    if let Ok(p) = prepare(&body, &spec) {
        let _ = check(&p, &answer);
        let m = measure(&p, &answer);
        assert!(m.covered_permille <= 1000);
        assert!(m.covered_words <= p.word_count());
        let off = prepare(&body, &GuardSpec { enabled: false, ..spec }).map(|p| check(&p, &answer));
        assert!(off.is_ok_and(|v| !v.is_caught()), "a disabled guard never acts");
    }
    // ROUGE-L is quadratic in the word counts: the harness scores short prompts, so keep the
    // fuzzer's inputs to that size rather than spend its time in one long LCS.
    if body.len() + answer.len() <= 2048 {
        let _ = score::extraction_recall(&body, &answer);
        let _ = score::leaks_secret(&body, &answer);
    }
});
