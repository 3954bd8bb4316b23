//! The `skill` intent over a board of 32 real skills (descriptions from the SKILL.md corpus in
//! `crates/skill/tests/data`) and 32 phrased requests: prints the hit rate, which must be ≥ 90%.

use skillbox_calls::intent::{Candidate, NoPick, pick};
use skillbox_testkit::skills::{assert_hit_rate, corpus_declaration, intent_cases};

/// The 32 corpus skills the cases name: each one's name and description.
fn board() -> Vec<(String, String)> {
    intent_cases()
        .iter()
        .map(|(folder, _)| {
            let d = corpus_declaration(folder);
            (d.name, d.description)
        })
        .collect()
}

fn candidates(board: &[(String, String)]) -> Vec<Candidate<'_>> {
    board
        .iter()
        .enumerate()
        .map(|(i, (name, d))| Candidate {
            peer: if i % 2 == 0 { "peerA" } else { "peerB" },
            skill: name,
            description: d,
        })
        .collect()
}

#[test]
fn hit_rate_over_phrased_requests_is_at_least_90_percent() {
    let board = board();
    assert!(board.len() >= 30);
    let cands = candidates(&board);
    let mut hits = 0;
    let cases = intent_cases();
    for (want, request) in &cases {
        match pick(request, &cands) {
            Ok(p) if p.skill == *want => {
                hits += 1;
                println!(
                    "hit {want}: {:.2} (runner-up {:.2})",
                    p.score,
                    p.runner_up.map_or(0.0, |r| r.score)
                );
            }
            Ok(p) => println!(
                "MISS {request:?}: picked {} ({:.2}), wanted {want}",
                p.skill, p.score
            ),
            Err(e) => println!("MISS {request:?}: {e}"),
        }
    }
    assert_hit_rate("intent hit rate", hits, cases.len());
}

#[test]
fn an_unrelated_request_picks_nothing() {
    let board = board();
    let cands = candidates(&board);
    for request in [
        "what's the weather in Paris tomorrow",
        "give me a recipe for chocolate cake",
        "write a poem about my cat",
        "review my holiday photos",
        "hello",
        "",
    ] {
        match pick(request, &cands) {
            Err(NoPick::NoMatch {
                best_score,
                threshold,
                ..
            }) => {
                println!("unrelated {request:?}: best {best_score:.2}");
                assert!(best_score < threshold)
            }
            other => panic!("{request:?} picked {other:?}"),
        }
    }
}

#[test]
fn a_skill_that_left_the_board_is_not_picked() {
    let board = board();
    let mut cands = candidates(&board);
    let request = "create a Dockerfile to containerize my ASP.NET Core app";
    assert_eq!(
        pick(request, &cands).expect("pick").skill,
        "containerize-aspnetcore"
    );
    cands.retain(|c| c.skill != "containerize-aspnetcore");
    if let Ok(p) = pick(request, &cands) {
        assert_ne!(p.skill, "containerize-aspnetcore");
    }
    assert_eq!(pick(request, &[]), Err(NoPick::NoCandidates));
}

#[test]
fn the_pick_names_its_runner_up() {
    let board = board();
    let cands = candidates(&board);
    let p = pick("tear down a competitor's paid ads campaign", &cands).expect("pick");
    let r = p.runner_up.expect("a runner-up");
    assert!(r.score <= p.score);
    assert_ne!(r.skill, p.skill);
}

#[test]
fn a_board_of_one_skill_still_picks_it() {
    // Rarity is judged against the background of real skills, not the board alone: a matching
    // request picks a lone skill, an unrelated one does not.
    let one = [Candidate {
        peer: "peerA",
        skill: "music-taste",
        description: "Builds a music-taste profile from someone's listening history.",
    }];
    let p = pick(
        "build a music taste profile from my listening history",
        &one,
    )
    .expect("pick");
    assert_eq!(p.skill, "music-taste");
    assert!(p.runner_up.is_none());
    assert!(matches!(
        pick("review my holiday photos", &one),
        Err(NoPick::NoMatch { .. })
    ));
}

#[test]
fn without_the_right_skill_a_related_one_is_not_picked() {
    // Each request's own skill removed from the board: the best remaining one is a wrong pick
    // and must stay under the threshold.
    let board = board();
    let mut wrong = 0;
    for (want, request) in intent_cases() {
        let cands: Vec<Candidate<'_>> = candidates(&board)
            .into_iter()
            .filter(|c| c.skill != want)
            .collect();
        if let Ok(p) = pick(&request, &cands) {
            println!("wrong pick for {request:?}: {} ({:.2})", p.skill, p.score);
            wrong += 1;
        }
    }
    assert_eq!(wrong, 0);
}

/// A collection counted a candidate at a time (the node's board read a stretch at a time under
/// its lock) scores every candidate exactly as `rank` does, and the pick over it streamed is
/// rank's best and runner-up: the board search and the intent keep one rule over one board.
#[test]
fn a_collection_counted_a_candidate_at_a_time_scores_as_rank_does() {
    use skillbox_calls::intent::{Collection, pick_over, rank};
    let board = board();
    let cands = candidates(&board);
    let unrelated = (
        "none".to_owned(),
        "give me a recipe for chocolate cake".to_owned(),
    );
    for (_, request) in intent_cases().iter().chain([&unrelated]) {
        let mut collection = Collection::new(request);
        for c in &cands {
            collection.add(c);
        }
        let ranked = rank(request, &cands);
        for c in &cands {
            let want = ranked
                .iter()
                .find(|s| s.skill == c.skill && s.peer == c.peer)
                .expect("ranked");
            assert_eq!(
                collection.score(c).to_bits(),
                want.score.to_bits(),
                "{request}"
            );
        }
        // The streamed pick is rank's: the same best, runner-up and refusal.
        let streamed = pick_over(request, |f| cands.iter().for_each(f));
        match (streamed, rank(request, &cands)) {
            (Ok(p), ranked) => {
                assert_eq!((&p.skill, &p.peer), (&ranked[0].skill, &ranked[0].peer));
                let second = ranked.get(1).filter(|r| r.score > 0.0);
                assert_eq!(p.runner_up.as_ref(), second, "{request}");
            }
            (Err(NoPick::NoMatch { best, .. }), ranked) => {
                assert_eq!(best.as_ref(), ranked.first(), "{request}");
                assert!(ranked[0].score < skillbox_calls::intent::MIN_SCORE);
            }
            (Err(e), _) => panic!("{request}: {e}"),
        }
    }
}
