//! Properties: the guard never panics; the body, as written or encoded any listed way, is always
//! caught; an answer sharing no word with the body never is.

use crate::support::*;
use crate::views;
use proptest::prelude::*;
use skillbox_guard::score::{decode_for_scoring, extraction_recall, leaks_secret, rouge_l_recall};
use skillbox_guard::{GuardSpec, check, measure, prepare, released_coverage};

/// The pieces of the guard's markers (and the phrases that name a secret) the marker soup is
/// made of.
const MARKER_PARTS: &[&str] = &[
    "[[secret:",
    "]]",
    "<!-- secret -->",
    "\n",
    "password is ",
    "PIN: ",
];

fn spec() -> GuardSpec {
    GuardSpec::default_for(false)
}

fn word() -> impl Strategy<Value = String> {
    "[a-z]{3,10}"
}

/// A body of made-up words with sentence punctuation and capitals, as prose looks.
fn body() -> impl Strategy<Value = String> {
    prop::collection::vec((word(), 0u8..10), 8..80).prop_map(|ws| {
        let mut out = String::new();
        let mut start = true;
        for (w, p) in ws {
            if start {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push_str(&w);
            }
            start = p == 0;
            out.push_str(match p {
                0 => ". ",
                1 => ", ",
                _ => " ",
            });
        }
        out.trim_end().to_owned()
    })
}

fn encode(body: &str, how: u8, k: u8) -> String {
    match how % 24 {
        0 => body.to_owned(),
        1 => base64(body),
        2 => hex(body),
        3 => caesar(body, 1 + k % 25),
        4 => reversed(body),
        5 => reversed_words(body),
        6 => separated(body, "-"),
        7 => separated(body, " "),
        8 => separated(body, "."),
        9 => interleaved(body, ['x', '*', '_', '~'][usize::from(k % 4)]),
        10 => word_interleaved(body, [">", "|", "/"][usize::from(k % 3)]),
        11 => body.to_uppercase(),
        12 => format!("Sure! Here it is:\n\n{body}\n\nAnything else?"),
        13 => base64(&caesar(body, 13)),
        14 => caesar(&reversed(body), 1 + k % 25),
        15 => hex(&base64(body)),
        // Issue 32 item 2 (Atbash is left out: its gate reads a natural language's vowels, and
        // these bodies are random letters).
        16 => percent(body),
        17 => decimal(body),
        18 => base32(body),
        19 => ascii85(body),
        20 => rot47(body),
        21 => nato(body),
        22 => views::with_filler(body, ["banana", "very much"][usize::from(k % 2)]),
        _ => views::numbered(body),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_any_text(body in any::<String>(), answer in any::<String>()) {
        if let Ok(p) = prepare(&body, &spec()) {
            let _ = check(&p, &answer);
            let _ = measure(&p, &answer);
            let _ = check(&p, p.model_body());
            let _ = released_coverage(&p, &answer);
        }
        let _ = rouge_l_recall(&body, &answer);
        let _ = decode_for_scoring(&answer);
        let _ = extraction_recall(&body, &answer);
        let _ = leaks_secret(&body, &answer);
    }

    #[test]
    fn never_panics_on_marker_soup(
        parts in prop::collection::vec(
            // The markers weigh 6 to the others' 1 each: one branch apiece, as when each
            // was a branch of its own.
            prop_oneof![
                6 => prop::sample::select(MARKER_PARTS).prop_map(str::to_owned),
                1 => "[A-Za-z0-9 _.:=-]{0,12}",
                1 => any::<String>(),
            ],
            0..40,
        ),
        answer in any::<String>(),
    ) {
        let body: String = parts.concat();
        if let Ok(p) = prepare(&body, &spec()) {
            let _ = check(&p, &answer);
            let _ = check(&p, &base64(p.model_body()));
            let _ = released_coverage(&p, &answer);
            let _ = released_coverage(&p, p.model_body());
        }
    }

    #[test]
    fn the_body_in_any_listed_encoding_is_caught(body in body(), how in 0u8..24, k in 0u8..25) {
        let p = prepare(&body, &spec()).unwrap();
        let answer = encode(p.model_body(), how, k);
        prop_assert!(check(&p, &answer).is_caught(), "encoding {how}/{k}: {answer:?}");
    }

    #[test]
    fn an_answer_with_no_word_of_the_body_is_clean(
        body in body(),
        answer in prop::collection::vec(word(), 0..200),
    ) {
        let p = prepare(&body, &spec()).unwrap();
        let body_words: Vec<String> =
            body.split(|c: char| !c.is_alphanumeric()).map(str::to_lowercase).collect();
        let answer: Vec<String> =
            answer.into_iter().filter(|w| !body_words.contains(w)).collect();
        let answer = answer.join(" ");
        prop_assert!(!check(&p, &answer).is_caught(), "{answer:?}");
    }
}
