//! What one released answer's secret level is worth when it names only some of a canary's
//! parts. Since the box withholds an answer whose levels reach the owner's day limit
//! (203ca6d, crates/jc), a part read as the whole secret withholds honest answers under a
//! limit of a whole secret and spends an honest caller's day at once.

use skillbox_guard::{GuardSpec, WHOLE, check_released, prepare, released_levels};

/// A secret of parts, with the answers that name one or some of them (a prose sentence, the
/// part as the answer's only word, in capitals, after a label) and the answers that give it
/// whole (as written, its parts together, number words, digits named one at a time, leetspeak,
/// another order).
const SECRETS: &[(&str, &[&str], &[&str])] = &[
    (
        "Help guests at the kiosk. Sign in with [[secret:PELICAN-42]]",
        &[
            "We saw a pelican by the lake.",
            "a pelican",
            "Pelican.",
            "PELICAN",
            "The password's first word is pelican.",
        ],
        &[
            "PELICAN-42",
            "pelican 42",
            "pelican forty-two",
            "pelican four two",
            "P3L1C4N-42",
            "42 then PELICAN",
        ],
    ),
    (
        "Say [[secret:Kestrel-Orbit-88]] at the gate.",
        &[
            "A kestrel hovered over the field.",
            "Kestrel.",
            "The passphrase's first word is kestrel.",
        ],
        &[
            "Kestrel-Orbit-88",
            "Kestrel then Orbit then 88",
            "kestrel and orbit and eighty-eight",
        ],
    ),
    (
        "The staff door opens with [[secret:HERON-7]] after six.",
        &["A heron stood in the shallows.", "Heron.", "HERON"],
        &["HERON-7", "heron 7", "7 then HERON"],
    ),
];

/// An answer naming one part (or all but one) measures its share of the secret's characters,
/// rounded up to a level, never the whole: `PELICAN` is 7 of `PELICAN-42`'s 9 characters,
/// which the levels rounded up to 64/64 — the level a whole secret reads at, so against an
/// owner's limit of one secret the box withheld the answer `Pelican.` as it would the secret.
/// Every whole form still measures 64/64.
#[test]
fn one_part_of_a_secret_measures_its_share_not_the_whole() {
    let spec = GuardSpec::default_for(false);
    let mut wrong = Vec::new();
    for (body, some_parts, whole) in SECRETS {
        let p = prepare(body, &spec).expect("prepare");
        for a in *some_parts {
            let (verdict, levels) = check_released(&p, a);
            let level = released_levels(&p, a).canary_parts();
            println!("{a:?}: level {level}/{WHOLE}");
            if verdict.is_caught() || levels.map(|l| l.canary_parts()) != Some(level) {
                wrong.push(format!(
                    "{a:?}: caught or levels apart from released_levels"
                ));
            }
            if level >= WHOLE {
                wrong.push(format!("{a:?}: one part measured {level}/{WHOLE}"));
            }
        }
        for a in *whole {
            let level = released_levels(&p, a).canary_parts();
            println!("{a:?}: level {level}/{WHOLE}");
            if level != WHOLE {
                wrong.push(format!("{a:?}: the whole secret measured {level}/{WHOLE}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
