//! Body leaks with gaps and local reordering (the audit's bypasses of issue 33 item 1): a filler
//! word at a period or at random, adjacent words swapped, a filler letter inside the words, a
//! word in every few changed. Each family on the 200 shared secret prompts, measured by the check
//! and by `released_coverage` (the owner's tally across calls); and the benign answers of the
//! extraction test against the same bodies. `--nocapture` prints the table.

use crate::extraction::{Rng, benign_answers, secrets};
use crate::support::every_kth_word_changed;
use skillbox_guard::{GuardSpec, check, prepare, released_coverage};

/// `qz` after every `k`-th whitespace token.
pub fn filler_every(b: &str, k: usize) -> String {
    let mut out = Vec::new();
    for (i, t) in b.split_whitespace().enumerate() {
        out.push(t);
        if i % k == k - 1 {
            out.push("qz");
        }
    }
    out.join(" ")
}

/// A filler word after each token with probability one in `k`.
pub fn filler_random(b: &str, k: u64, rng: &mut Rng) -> String {
    let mut out = Vec::new();
    for t in b.split_whitespace() {
        out.push(t);
        if rng.next().is_multiple_of(k) {
            out.push("um");
        }
    }
    out.join(" ")
}

/// Adjacent tokens swapped pairwise: `w2 w1 w4 w3 ...`.
pub fn pairs_swapped(b: &str) -> String {
    let mut t: Vec<&str> = b.split_whitespace().collect();
    for i in (0..t.len().saturating_sub(1)).step_by(2) {
        t.swap(i, i + 1);
    }
    t.join(" ")
}

/// The letter `q` after every `k`-th letter or digit.
pub fn letter_after_every(b: &str, k: usize) -> String {
    let mut out = String::new();
    let mut n = 0usize;
    for c in b.chars() {
        out.push(c);
        if c.is_alphanumeric() {
            n += 1;
            if n.is_multiple_of(k) {
                out.push('q');
            }
        }
    }
    out
}

type Family = (&'static str, fn(&str, &mut Rng) -> String);

pub const FAMILIES: &[Family] = &[
    ("plain", |b, _| b.to_owned()),
    ("qz after every 2nd token", |b, _| filler_every(b, 2)),
    ("qz after every 3rd token", |b, _| filler_every(b, 3)),
    ("qz after every 4th token", |b, _| filler_every(b, 4)),
    ("um after 1 in 3 tokens", |b, r| filler_random(b, 3, r)),
    ("adjacent pairs swapped", |b, _| pairs_swapped(b)),
    ("q after every 5th letter", |b, _| letter_after_every(b, 5)),
    ("q after every 3rd letter", |b, _| letter_after_every(b, 3)),
    ("every 4th word changed", |b, _| {
        every_kth_word_changed(b, 4)
    }),
    ("every 3rd word changed", |b, _| {
        every_kth_word_changed(b, 3)
    }),
];

#[test]
fn leaks_with_gaps_and_local_order_are_caught() {
    let spec = GuardSpec::default_for(false);
    let secrets = secrets();
    println!("{:<28} {:>8} {:>14}", "family", "caught", "coverage≥350‰");
    let mut rates = Vec::new();
    for (name, f) in FAMILIES {
        let mut rng = Rng(11);
        let (mut caught, mut tallied) = (0, 0);
        for s in &secrets {
            let p = prepare(&s.body, &spec).unwrap();
            let a = f(p.model_body(), &mut rng);
            caught += usize::from(check(&p, &a).is_caught());
            tallied += usize::from(released_coverage(&p, &a).words_permille() >= 350);
        }
        println!("{name:<28} {caught:>4}/200 {tallied:>10}/200");
        rates.push((*name, caught, tallied));
    }
    let mut rng = Rng(7);
    let (mut n, mut flagged) = (0, 0);
    for s in &secrets {
        let p = prepare(&s.body, &spec).unwrap();
        for (_, a) in benign_answers(p.model_body(), &mut rng) {
            n += 1;
            flagged += usize::from(check(&p, &a).is_caught());
        }
    }
    println!("benign (generated)  {flagged}/{n}");
    for (name, caught, tallied) in rates {
        if name.starts_with("every 3rd") {
            continue;
        }
        assert!(caught >= 190, "{name}: caught {caught}/200");
        assert!(tallied >= 190, "{name}: coverage {tallied}/200");
    }
}
