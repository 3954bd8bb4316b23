//! Source selection (design §7) and policy (§9): every rule and refusal.

use skillbox_calls::policy::Surface;
use skillbox_calls::*;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn held(n: &str) -> bool {
    matches!(n, "spotify_songs" | "calendar")
}

#[test]
fn a_list_is_exactly_those_sources() {
    let req = names(&["spotify_songs", "calendar", "emails"]);
    assert_eq!(
        select_sources(&req, held, Some(&names(&["calendar"]))),
        Ok(names(&["calendar"]))
    );
    assert_eq!(
        select_sources(&req, held, Some(&names(&["spotify_songs", "calendar"]))),
        Ok(names(&["spotify_songs", "calendar"]))
    );
}

#[test]
fn a_name_outside_required_sources_is_refused_naming_it() {
    let req = names(&["spotify_songs"]);
    let e = select_sources(&req, held, Some(&names(&["spotify_songs", "calendar"]))).unwrap_err();
    assert_eq!(e.code(), "source_not_required");
    assert_eq!(e.http_status(), 400);
    assert!(e.to_string().contains("\"calendar\""), "{e}");
}

#[test]
fn an_unheld_name_is_refused() {
    let req = names(&["spotify_songs", "emails"]);
    let e = select_sources(&req, held, Some(&names(&["emails"]))).unwrap_err();
    assert_eq!(
        e,
        SelectionError::SourceNotHeld {
            name: "emails".into()
        }
    );
    assert_eq!(e.code(), "source_not_held");
}

#[test]
fn a_duplicate_is_refused() {
    let req = names(&["spotify_songs"]);
    let e = select_sources(
        &req,
        held,
        Some(&names(&["spotify_songs", "spotify_songs"])),
    )
    .unwrap_err();
    assert_eq!(e.code(), "duplicate_source");
}

#[test]
fn an_empty_list_is_none() {
    assert_eq!(
        select_sources(&names(&["spotify_songs"]), held, Some(&[])),
        Ok(vec![])
    );
    assert_eq!(
        select_sources(&names(&["emails"]), held, Some(&[])),
        Ok(vec![]),
        "even when none are held"
    );
}

#[test]
fn omitted_is_required_intersect_held() {
    let req = names(&["emails", "spotify_songs"]);
    assert_eq!(
        select_sources(&req, held, None),
        Ok(names(&["spotify_songs"]))
    );
    assert_eq!(
        select_sources(&[], held, None),
        Ok(vec![]),
        "a skill requiring nothing runs on its request"
    );
}

#[test]
fn omitted_with_none_held_is_refused_where_it_starts() {
    let e = select_sources(&names(&["emails", "photos"]), held, None).unwrap_err();
    assert_eq!(e.code(), "required_sources_not_held");
    assert_eq!(e.http_status(), 422);
}

/// A disclosure's facts as a remembered rule holds them.
fn told() -> Told {
    Told {
        declaration_digest: format!("sha256:{}", "ab".repeat(32)),
        provider: "openai".into(),
        provider_host: Some("https://api.openai.com/v1".into()),
        platform: "tdx".into(),
        hardware_isolation: true,
    }
}

/// A yes remembered for peer `P`'s `taste` over `sources`, from `surface`, after being told
/// what [`told`] holds: the rule most of these tests start from.
fn remembered_yes(sources: &[String], surface: Surface) -> Rule {
    Rule::remembered("P", "taste", sources, surface, told(), Decision::Allow)
}

fn q<'a>(role: Role, peer: &'a str, skill: &'a str, sources: &'a [String]) -> SubmitQuestion<'a> {
    SubmitQuestion {
        role,
        peer,
        skill,
        sources,
        from_agent: false,
        agent_token: false,
        told: None,
    }
}

/// Issue 30 item 8: a remembered yes holds for what the human was told, not for whatever
/// the (peer, skill, sources) call turns into later; a rule written by hand binds nothing.
#[test]
fn a_remembered_rule_matches_only_what_the_human_was_told() {
    let sources = vec!["songs".to_owned()];
    let r = remembered_yes(&sources, Surface::Human);
    let p = Policy {
        rules: vec![r.clone(), Rule::ask_before_disclosure()],
        default: Decision::Allow,
    };
    let decide = |t: Option<&Told>| {
        p.decide_with_rule(&SubmitQuestion {
            told: t,
            ..q(Role::Caller, "P", "taste", &sources)
        })
    };
    assert_eq!(decide(Some(&told())), (Decision::Allow, Some(0)));
    type Change = (&'static str, fn(&mut Told));
    let changes: [Change; 5] = [
        ("the declaration", |t| {
            t.declaration_digest = format!("sha256:{}", "cd".repeat(32))
        }),
        ("the provider", |t| t.provider = "openrouter".into()),
        ("the provider's host", |t| {
            t.provider_host = Some("https://attacker.example/v1".into())
        }),
        ("the box platform", |t| t.platform = "insecure-dev".into()),
        ("the box isolation", |t| t.hardware_isolation = false),
    ];
    for (what, change) in changes {
        let mut now = told();
        change(&mut now);
        assert_eq!(
            decide(Some(&now)),
            (Decision::Ask, Some(1)),
            "{what} changed: asked again"
        );
    }
    assert_eq!(decide(None), (Decision::Ask, Some(1)), "facts unknown");
    // Written by hand (no `told`): matches as before, whatever the disclosure says.
    let by_hand: Rule =
        serde_json::from_str(r#"{"peer": "P", "skill": "taste", "decision": "allow"}"#)
            .expect("rule");
    let p = Policy {
        rules: vec![by_hand],
        default: Decision::Ask,
    };
    for t in [None, Some(&told())] {
        assert_eq!(
            p.decide(&SubmitQuestion {
                told: t,
                ..q(Role::Caller, "P", "taste", &sources)
            }),
            Decision::Allow
        );
    }
    // The remembered rule round-trips through the stored policy with its facts.
    let back: Rule =
        serde_json::from_str(&serde_json::to_string(&r).expect("json")).expect("parse");
    assert_eq!(back, r);
    assert!(r.same_but_decision(&Rule {
        decision: Decision::Deny,
        ..r.clone()
    }));
    let mut other = r.clone();
    other.told = Some(Told {
        provider: "openrouter".into(),
        ..told()
    });
    assert!(!r.same_but_decision(&other));
}

#[test]
fn policy_first_matching_rule_decides() {
    let policy = Policy {
        rules: vec![
            Rule {
                side: Side::Caller,
                peer: Pattern::any(),
                skill: Pattern::any(),
                sources: Some(names(&["spotify_songs"])),
                sources_within: None,
                decision: Decision::Ask,
                surface: None,
                told: None,
            },
            Rule {
                side: Side::Owner,
                peer: Pattern("12D3Bad".into()),
                skill: Pattern::any(),
                sources: None,
                sources_within: None,
                decision: Decision::Deny,
                surface: None,
                told: None,
            },
            Rule {
                side: Side::Any,
                peer: Pattern::any(),
                skill: Pattern("music-*".into()),
                sources: None,
                sources_within: None,
                decision: Decision::Allow,
                surface: None,
                told: None,
            },
        ],
        default: Decision::Deny,
    };
    let songs = names(&["spotify_songs"]);
    let cal = names(&["calendar"]);
    assert_eq!(
        policy.decide(&q(Role::Caller, "p", "music-taste", &songs)),
        Decision::Ask
    );
    assert_eq!(
        policy.decide(&q(Role::Caller, "p", "music-taste", &cal)),
        Decision::Allow
    );
    assert_eq!(
        policy.decide(&q(Role::Owner, "p", "music-taste", &songs)),
        Decision::Allow,
        "source rule is caller-side"
    );
    assert_eq!(
        policy.decide(&q(Role::Owner, "12D3Bad", "music-taste", &[])),
        Decision::Deny
    );
    assert_eq!(
        policy.decide(&q(Role::Caller, "p", "code-review", &cal)),
        Decision::Deny,
        "default"
    );
    assert_eq!(
        Policy::default().decide(&q(Role::Owner, "p", "x", &[])),
        Decision::Allow
    );
}

#[test]
fn policy_reads_from_json_config() {
    let p: Policy = serde_json::from_str(
        r#"{"rules":[{"side":"caller","sources":["spotify_songs"],"decision":"ask"}]}"#,
    )
    .expect("parses");
    assert_eq!(p.default, Decision::Allow);
    assert_eq!(p.rules[0].peer, Pattern::any());
}

#[test]
fn admission_lists() {
    let mut b = RateBuckets::default();
    let a = Admission {
        allow_peers: Some(names(&["friend"])),
        deny_peers: names(&["foe"]),
        calls_per_minute: 10,
    };
    assert_eq!(a.admit(&mut b, "friend", 0), Ok(()));
    assert_eq!(a.admit(&mut b, "stranger", 0), Err(Refusal::PeerDenied));
    let open = Admission {
        deny_peers: names(&["foe"]),
        ..Admission::default()
    };
    assert_eq!(open.admit(&mut b, "foe", 0), Err(Refusal::PeerDenied));
    assert_eq!(open.admit(&mut b, "anyone", 0), Ok(()));
}

#[test]
fn admission_rate_limit_refills_over_time() {
    let mut b = RateBuckets::default();
    let a = Admission {
        calls_per_minute: 3,
        ..Admission::default()
    };
    for _ in 0..3 {
        assert_eq!(a.admit(&mut b, "p", 1_000), Ok(()));
    }
    assert_eq!(
        a.admit(&mut b, "p", 1_000),
        Err(Refusal::RateLimited { per_minute: 3 })
    );
    assert_eq!(
        a.admit(&mut b, "other", 1_000),
        Ok(()),
        "buckets are per peer"
    );
    assert_eq!(
        a.admit(&mut b, "p", 1_000 + 20_000),
        Ok(()),
        "one token back after a third of a minute"
    );
    assert!(a.admit(&mut b, "p", 1_000 + 20_001).is_err());
}

/// Issue 12: the shipped consent asks before any disclosure; `approve --remember` allows that
/// (peer, skill, source set) — and only it — from then on.
#[test]
fn default_consent_asks_before_disclosure_and_remembers_a_set() {
    let q = |peer: &'static str, skill: &'static str, sources: &'static [&'static str]| {
        (peer, skill, names(sources))
    };
    let seen = told();
    let ask = |p: &Policy, (peer, skill, sources): (&str, &str, Vec<String>)| {
        p.decide(&SubmitQuestion {
            role: Role::Caller,
            peer,
            skill,
            sources: &sources,
            from_agent: false,
            agent_token: false,
            told: Some(&seen),
        })
    };
    let mut p = Policy {
        rules: vec![Rule::ask_before_disclosure()],
        default: Decision::Allow,
    };
    assert_eq!(ask(&p, q("P", "taste", &["songs"])), Decision::Ask);
    assert_eq!(
        ask(&p, q("P", "taste", &[])),
        Decision::Allow,
        "no sources: no one asked"
    );
    let owner_side = p.decide(&SubmitQuestion {
        role: Role::Owner,
        peer: "P",
        skill: "taste",
        sources: &[],
        from_agent: false,
        agent_token: false,
        told: Some(&seen),
    });
    assert_eq!(owner_side, Decision::Allow);
    p.rules.insert(
        0,
        remembered_yes(&names(&["songs", "diary"]), Surface::Human),
    );
    assert_eq!(ask(&p, q("P", "taste", &["songs"])), Decision::Allow);
    assert_eq!(
        ask(&p, q("P", "taste", &["diary", "songs"])),
        Decision::Allow
    );
    assert_eq!(
        ask(&p, q("P", "taste", &["songs", "bank"])),
        Decision::Ask,
        "a new source asks again"
    );
    assert_eq!(
        ask(&p, q("Q", "taste", &["songs"])),
        Decision::Ask,
        "another peer asks again"
    );
    assert_eq!(
        ask(&p, q("P", "other", &["songs"])),
        Decision::Ask,
        "another skill asks again"
    );
    let (d, rule) = p.decide_with_rule(&SubmitQuestion {
        role: Role::Caller,
        peer: "P",
        skill: "taste",
        sources: &names(&["songs"]),
        from_agent: false,
        agent_token: false,
        told: Some(&seen),
    });
    assert_eq!((d, rule), (Decision::Allow, Some(0)));
    // Source patterns: a prefix matches by prefix.
    let p = Policy {
        rules: vec![Rule {
            side: Side::Caller,
            peer: Pattern::any(),
            skill: Pattern::any(),
            sources: Some(names(&["health/*"])),
            sources_within: None,
            decision: Decision::Deny,
            surface: None,
            told: None,
        }],
        default: Decision::Allow,
    };
    assert_eq!(ask(&p, q("P", "s", &["health/steps"])), Decision::Deny);
    assert_eq!(ask(&p, q("P", "s", &["healthy"])), Decision::Allow);
}

#[test]
fn a_surface_rule_matches_only_the_calls_an_agent_started() {
    let p = Policy {
        rules: vec![Rule::ask_from_agent()],
        default: Decision::Allow,
    };
    let seen = told();
    let q = |from_agent| SubmitQuestion {
        role: Role::Caller,
        peer: "12D3Peer",
        skill: "brief",
        sources: &[],
        from_agent,
        agent_token: false,
        told: Some(&seen),
    };
    assert_eq!(p.decide_with_rule(&q(true)), (Decision::Ask, Some(0)));
    assert_eq!(p.decide_with_rule(&q(false)), (Decision::Allow, None));
    // Remembered for (peer, skill), ahead of it: the agent is not asked again.
    let mut p = p;
    p.rules.insert(
        0,
        Rule::remembered(
            "12D3Peer",
            "brief",
            &[],
            Surface::Agent,
            told(),
            Decision::Allow,
        ),
    );
    assert_eq!(p.decide_with_rule(&q(true)), (Decision::Allow, Some(0)));
    // The config spelling.
    let r: Rule =
        serde_json::from_str(r#"{"side": "caller", "surface": "agent", "decision": "ask"}"#)
            .expect("rule");
    assert_eq!(r, Rule::ask_from_agent());
}

/// The shipped policy with `remembered` ahead of its rules.
fn shipped(remembered: Rule) -> Policy {
    Policy {
        rules: vec![
            remembered,
            Rule::ask_before_disclosure(),
            Rule::ask_from_agent(),
        ],
        default: Decision::Allow,
    }
}

/// A yes remembered for a call that staked no source covers only calls that stake none, and
/// only from the surface it was given on: before, the rule it recorded named no sources at all
/// (so it matched every later source set, ahead of the shipped rules) and no surface (so a
/// human's yes answered an agent's first call).
#[test]
fn a_remembered_yes_without_sources_covers_no_sources_and_no_other_surface() {
    let seen = told();
    let decide = |p: &Policy, sources: &[&str], from_agent: bool| {
        p.decide_with_rule(&SubmitQuestion {
            role: Role::Caller,
            peer: "P",
            skill: "taste",
            sources: &names(sources),
            from_agent,
            agent_token: false,
            told: Some(&seen),
        })
    };
    // An agent's "hi" without sources, approved with --remember.
    let p = shipped(remembered_yes(&[], Surface::Agent));
    assert_eq!(decide(&p, &[], true), (Decision::Allow, Some(0)));
    assert_eq!(
        decide(&p, &["songs"], true),
        (Decision::Ask, Some(1)),
        "a remembered yes over no sources let a later call stake one"
    );
    assert_eq!(
        decide(&p, &["songs", "diary"], false),
        (Decision::Ask, Some(1))
    );
    // A human's call without sources, approved with --remember (its policy asked everything).
    let mut p = shipped(remembered_yes(&[], Surface::Human));
    p.default = Decision::Ask;
    assert_eq!(decide(&p, &[], false), (Decision::Allow, Some(0)));
    assert_eq!(
        decide(&p, &[], true),
        (Decision::Ask, Some(2)),
        "a human's remembered yes answered an agent's first call"
    );
    // With sources, as before: that set (or a subset), never none, from the same surface.
    let p = shipped(remembered_yes(&names(&["songs", "diary"]), Surface::Human));
    assert_eq!(decide(&p, &["songs"], false), (Decision::Allow, Some(0)));
    assert_eq!(
        decide(&p, &["diary", "songs"], false),
        (Decision::Allow, Some(0))
    );
    assert_eq!(
        decide(&p, &["songs", "bank"], false),
        (Decision::Ask, Some(1))
    );
    assert_eq!(decide(&p, &[], false), (Decision::Allow, None));
    assert_eq!(decide(&p, &["songs"], true), (Decision::Ask, Some(1)));
    // The empty set survives the stored policy: it is not read back as "any sources".
    let r = remembered_yes(&[], Surface::Agent);
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(json["sources_within"], serde_json::json!([]));
    assert_eq!(json["surface"], "agent");
    assert_eq!(serde_json::from_value::<Rule>(json).expect("parse"), r);

    // A rule remembered in the older form (no source set, no surface) is read as narrow as
    // the answer it recorded: over no sources, for a human's calls.
    let mut old = serde_json::to_value(&r).expect("json");
    let o = old.as_object_mut().expect("object");
    o.remove("sources_within");
    o.remove("surface");
    let mut old: Rule = serde_json::from_value(old).expect("the older form parses");
    let p = shipped(old.clone());
    assert_eq!(
        decide(&p, &["songs"], false),
        (Decision::Allow, Some(0)),
        "the older form, as stored, covers any sources"
    );
    assert!(old.narrow_as_remembered());
    let p = shipped(old.clone());
    assert_eq!(decide(&p, &[], false), (Decision::Allow, Some(0)));
    assert_eq!(decide(&p, &["songs"], false), (Decision::Ask, Some(1)));
    assert_eq!(decide(&p, &[], true), (Decision::Ask, Some(2)));
    assert!(!old.narrow_as_remembered(), "narrowed once");
    // A rule written by hand (no `told`) is left as written.
    let mut by_hand = Rule::ask_before_disclosure();
    assert!(!by_hand.narrow_as_remembered());
    assert_eq!(by_hand, Rule::ask_before_disclosure());
}

/// Audit 32 A32-1's follow-up: a yes remembered for a local agent (`skillbox mcp`, over the
/// node's socket) does not cover an HTTP client holding the agent token — which whoever held
/// the node's port while it was down may hold — nor the other way round; a rule written for
/// agents (`agent`) covers both, so the shipped ask holds for the agent token's calls too.
/// Before, the remembered rule named `agent`, and the token's holder staked the same sources
/// unasked.
#[test]
fn a_yes_remembered_for_a_local_agent_does_not_cover_the_agent_token() {
    let seen = told();
    let songs = names(&["songs"]);
    let decide = |p: &Policy, from_agent: bool, agent_token: bool| {
        p.decide_with_rule(&SubmitQuestion {
            role: Role::Caller,
            peer: "P",
            skill: "taste",
            sources: &songs,
            from_agent,
            agent_token,
            told: Some(&seen),
        })
    };
    let local = shipped(remembered_yes(&songs, Surface::AgentLocal));
    assert_eq!(decide(&local, true, false), (Decision::Allow, Some(0)));
    assert_eq!(
        decide(&local, true, true),
        (Decision::Ask, Some(1)),
        "a yes remembered for skillbox mcp answered the agent token's call"
    );
    assert_eq!(decide(&local, false, false), (Decision::Ask, Some(1)));
    let token = shipped(remembered_yes(&songs, Surface::AgentToken));
    assert_eq!(decide(&token, true, true), (Decision::Allow, Some(0)));
    assert_eq!(decide(&token, true, false), (Decision::Ask, Some(1)));
    let any = shipped(remembered_yes(&songs, Surface::Agent));
    assert_eq!(decide(&any, true, true), (Decision::Allow, Some(0)));
    assert_eq!(decide(&any, true, false), (Decision::Allow, Some(0)));
    assert_eq!(decide(&any, false, false), (Decision::Ask, Some(1)));
    let without_sources = |agent_token| {
        shipped(remembered_yes(&songs, Surface::Human)).decide_with_rule(&SubmitQuestion {
            role: Role::Caller,
            peer: "P",
            skill: "taste",
            sources: &[],
            from_agent: true,
            agent_token,
            told: Some(&seen),
        })
    };
    assert_eq!(without_sources(true), (Decision::Ask, Some(2)));
    // The config's spellings.
    for (word, surface) in [
        ("agent_local", Surface::AgentLocal),
        ("agent_token", Surface::AgentToken),
    ] {
        let r: Rule = serde_json::from_str(&format!(
            r#"{{"side": "caller", "surface": "{word}", "decision": "allow"}}"#
        ))
        .expect("rule");
        assert_eq!(r.surface, Some(surface));
    }
    // A yes remembered as `agent` before the agent token existed was a local agent's (HTTP
    // clients then sent the operator's token, which the agent surfaces refuse over TCP now).
    let mut old = remembered_yes(&songs, Surface::Agent);
    assert!(old.narrow_as_remembered());
    assert_eq!(old.surface, Some(Surface::AgentLocal));
    assert!(!old.narrow_as_remembered(), "narrowed once");
    let mut by_hand: Rule =
        serde_json::from_str(r#"{"side": "caller", "surface": "agent", "decision": "allow"}"#)
            .expect("rule");
    assert!(
        !by_hand.narrow_as_remembered(),
        "a rule written by hand stays"
    );
}
