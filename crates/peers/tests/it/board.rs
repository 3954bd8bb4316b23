//! The board as a pure data structure: every refusal rule, expiry and the JSON rows.

use skillbox_peers::advert::{SignedAdvert, sign_advert, verify_advert};
use skillbox_peers::{
    AcceptedBox, AdvertRefusal, Board, BoardConfig, BoardRow, Offer, OfferedSkill,
    keypair_from_seed,
};
use skillbox_testkit::skills::offered_skill;

const T0: u64 = 1_800_000_000_000;

fn skill(name: &str) -> OfferedSkill {
    offered_skill(
        name,
        &format!("{name} does things \"quoted\" \u{e9}"),
        "local",
        &["spotify_songs"],
    )
}

fn offer(names: &[&str]) -> Offer {
    Offer {
        skills: names.iter().map(|n| skill(n)).collect(),
        boxes: vec![AcceptedBox {
            platform: "insecure-dev".into(),
            measurement: "a1".into(),
            url: Some("http://127.0.0.1:7000".into()),
        }],
    }
    .normalized()
    .expect("a valid offer")
}

fn board() -> Board {
    Board::new(BoardConfig {
        ttl_ms: 180_000,
        max_skew_ms: 30_000,
        max_advert_bytes: 64 * 1024,
        max_entries: 100_000,
        ..BoardConfig::default()
    })
}

/// The skills of the board's rows at `now`, in the order it lists them.
fn skills_listed(b: &Board, now: u64) -> Vec<String> {
    b.snapshot(now).into_iter().map(|r| r.skill).collect()
}

#[test]
fn takes_a_valid_advert_and_lists_one_row_per_skill() {
    let key = keypair_from_seed(&[1; 32]).unwrap();
    let peer = key.public().to_peer_id();
    let mut b = board();
    let bytes = sign_advert(&key, T0, T0, &offer(&["summarize", "haiku"])).unwrap();
    let got = b.ingest(&bytes, Some(&peer), T0 + 10).unwrap();
    assert_eq!(got.peer, peer);
    assert!(got.new_peer);
    let rows = b.snapshot(T0 + 5_000);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].skill, "haiku");
    assert_eq!(rows[1].skill, "summarize");
    assert_eq!(rows[0].peer, peer.to_base58());
    assert_eq!(rows[0].age, 5);
    assert_eq!(rows[0].required_sources, vec!["spotify_songs".to_string()]);
    assert_eq!(b.offered(&peer, "haiku", T0 + 1).unwrap().provider, "local");
    assert!(b.offered(&peer, "nope", T0 + 1).is_none());
}

#[test]
fn rows_carry_the_owners_allowance_and_context_as_advertised() {
    // A caller (or its human, or an agent) reads from the board how much of the model is the
    // body's: a remote skill's allowance and declared context, a local skill's allowance.
    let mut remote = offered_skill("remote", "asks a hosted model", "ollama", &[]);
    remote.body_max_tokens = Some(2048);
    remote.model_context_tokens = Some(8192);
    let mut local = skill("local");
    local.body_max_tokens = Some(64);
    let legacy = skill("legacy");
    let offer = Offer {
        skills: vec![remote, local, legacy],
        ..offer(&[])
    }
    .normalized()
    .expect("a valid offer");
    let key = keypair_from_seed(&[9; 32]).unwrap();
    let mut b = board();
    b.ingest(
        &sign_advert(&key, T0 + 1, T0, &offer).unwrap(),
        None,
        T0 + 10,
    )
    .unwrap();
    let now = T0 + 1_000;
    let rows = b.snapshot(now);
    let by_name = |n: &str| rows.iter().find(|r| r.skill == n).expect("row");
    assert_eq!(
        (
            by_name("remote").body_max_tokens,
            by_name("remote").model_context_tokens
        ),
        (Some(2048), Some(8192))
    );
    assert_eq!(
        (
            by_name("local").body_max_tokens,
            by_name("local").model_context_tokens
        ),
        (Some(64), None)
    );
    // An older node's advert states neither: the row says nothing rather than a guess.
    assert_eq!(
        (
            by_name("legacy").body_max_tokens,
            by_name("legacy").model_context_tokens
        ),
        (None, None)
    );
    // The rendered rows say the same, under the API's names, and only where advertised.
    let json = b.snapshot_json(now);
    assert_eq!(json, serde_json::to_string(&rows).unwrap());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let row = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["skill"] == n)
            .expect("json row")
            .clone()
    };
    assert_eq!(row("remote")["bodyMaxTokens"], 2048);
    assert_eq!(row("remote")["modelContextTokens"], 8192);
    assert_eq!(row("local")["bodyMaxTokens"], 64);
    assert!(row("local").get("modelContextTokens").is_none());
    assert!(row("legacy").get("bodyMaxTokens").is_none());
}

#[test]
fn json_snapshot_equals_the_typed_rows() {
    let mut b = board();
    for i in 1..=5u8 {
        let key = keypair_from_seed(&[i; 32]).unwrap();
        let bytes = sign_advert(&key, T0 + i as u64, T0, &offer(&["a-skill", "b-skill"])).unwrap();
        b.ingest(&bytes, None, T0 + 100).unwrap();
    }
    let now = T0 + 42_000;
    let typed = serde_json::to_string(&b.snapshot(now)).unwrap();
    assert_eq!(b.snapshot_json(now), typed);
    assert_eq!(b.row_count(now), b.snapshot(now).len());
    let back: Vec<BoardRow> = serde_json::from_str(&b.snapshot_json(now)).unwrap();
    assert_eq!(back.len(), 10);
    let v: serde_json::Value = serde_json::from_str(&typed).unwrap();
    let keys: Vec<&String> = v[0].as_object().unwrap().keys().collect();
    for k in [
        "peer",
        "skill",
        "description",
        "provider",
        "requiredSources",
        "age",
    ] {
        assert!(keys.iter().any(|x| *x == k), "row lacks {k}: {keys:?}");
    }
}

/// A page read borrowed from a row on (`GET /board`'s `after`) is the rest of the snapshot, row
/// for row and byte for byte, also when that row has left the board.
#[test]
fn rows_after_a_row_are_the_rest_of_the_snapshot() {
    let mut b = board();
    let mut peers = Vec::new();
    for i in 1..=4u8 {
        let key = keypair_from_seed(&[i; 32]).unwrap();
        peers.push(key.public().to_peer_id());
        // Offered out of order: rows still come skill by skill.
        let bytes = sign_advert(&key, T0, T0, &offer(&["c-skill", "a-skill", "b-skill"])).unwrap();
        b.ingest(&bytes, None, T0 + 100).unwrap();
    }
    let now = T0 + 1_000;
    let all = b.snapshot(now);
    assert_eq!(all.len(), 12);
    let json = |rows: Vec<skillbox_peers::RowRef<'_>>| {
        let mut out = String::new();
        for r in rows {
            r.push_json(&mut out);
        }
        out
    };
    for (i, row) in all.iter().enumerate() {
        let rest: Vec<_> = b.rows_after(now, Some((&row.peer, &row.skill))).collect();
        let want: String = all[i + 1..]
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        assert_eq!(json(rest), want, "after row {i}");
    }
    // After a row that left (its peer gone): the rows of the peers after it.
    let gone = all[4].clone();
    b.remove(&gone.peer.parse().unwrap());
    let rest: Vec<String> = b
        .rows_after(now, Some((&gone.peer, &gone.skill)))
        .map(|r| format!("{}/{}", r.peer, r.skill.name))
        .collect();
    let want: Vec<String> = all[6..]
        .iter()
        .map(|r| format!("{}/{}", r.peer, r.skill))
        .collect();
    assert_eq!(rest, want);
}

#[test]
fn refuses_a_bad_signature() {
    let key = keypair_from_seed(&[2; 32]).unwrap();
    let bytes = sign_advert(&key, T0, T0, &offer(&["haiku"])).unwrap();
    let mut signed: SignedAdvert = serde_json::from_slice(&bytes).unwrap();
    signed.advert.skills[0].description = "now free of charge".into();
    let forged = serde_json::to_vec(&signed).unwrap();
    let mut b = board();
    assert_eq!(
        b.ingest(&forged, None, T0).unwrap_err(),
        AdvertRefusal::BadSignature
    );
    // A signature by another key over the same content is refused too.
    let other = keypair_from_seed(&[3; 32]).unwrap();
    let by_other = sign_advert(&other, T0, T0, &offer(&["haiku"])).unwrap();
    let other_signed: SignedAdvert = serde_json::from_slice(&by_other).unwrap();
    let mut mixed: SignedAdvert = serde_json::from_slice(&bytes).unwrap();
    mixed.signature = other_signed.signature;
    assert_eq!(
        b.ingest(&serde_json::to_vec(&mixed).unwrap(), None, T0)
            .unwrap_err(),
        AdvertRefusal::BadSignature
    );
    assert_eq!(b.peer_count(T0), 0);
}

#[test]
fn refuses_a_claimed_node_id_that_is_not_the_signer() {
    let key = keypair_from_seed(&[4; 32]).unwrap();
    let victim = keypair_from_seed(&[5; 32]).unwrap().public().to_peer_id();
    let bytes = sign_advert(&key, T0, T0, &offer(&["haiku"])).unwrap();
    let mut signed: SignedAdvert = serde_json::from_slice(&bytes).unwrap();
    signed.advert.node = victim.to_base58();
    let err = board()
        .ingest(&serde_json::to_vec(&signed).unwrap(), None, T0)
        .unwrap_err();
    assert!(matches!(err, AdvertRefusal::NodeIdMismatch { .. }), "{err}");
    // A genuine advert arriving as gossip from a publisher that is not its node is refused.
    let err = board().ingest(&bytes, Some(&victim), T0).unwrap_err();
    assert!(matches!(err, AdvertRefusal::SourceMismatch { .. }), "{err}");
}

#[test]
fn refuses_replayed_and_equal_sequence_numbers() {
    let key = keypair_from_seed(&[6; 32]).unwrap();
    let mut b = board();
    let old = sign_advert(&key, T0, 100, &offer(&["haiku", "summarize"])).unwrap();
    let new = sign_advert(&key, T0 + 1_000, 101, &offer(&["haiku"])).unwrap();
    b.ingest(&old, None, T0).unwrap();
    b.ingest(&new, None, T0 + 1_000).unwrap();
    assert_eq!(
        b.ingest(&old, None, T0 + 2_000).unwrap_err(),
        AdvertRefusal::Stale {
            seq: 100,
            newest: 101
        }
    );
    assert!(matches!(
        b.ingest(&new, None, T0 + 2_000).unwrap_err(),
        AdvertRefusal::Stale { .. }
    ));
    // The replay did not bring the removed skill back.
    assert_eq!(skills_listed(&b, T0 + 2_000), ["haiku"]);
}

#[test]
fn refuses_adverts_from_the_future_and_oversized_ones() {
    let key = keypair_from_seed(&[7; 32]).unwrap();
    let mut b = board();
    let future = sign_advert(&key, T0 + 31_000, 1, &offer(&["haiku"])).unwrap();
    assert!(matches!(
        b.ingest(&future, None, T0).unwrap_err(),
        AdvertRefusal::FromTheFuture { .. }
    ));
    let within_skew = sign_advert(&key, T0 + 29_000, 2, &offer(&["haiku"])).unwrap();
    b.ingest(&within_skew, None, T0).unwrap();

    let mut big = offer(&["haiku"]);
    big.skills[0].description = "x".repeat(70 * 1024);
    let bytes = sign_advert(&key, T0, 3, &big).unwrap();
    assert!(matches!(
        b.ingest(&bytes, None, T0).unwrap_err(),
        AdvertRefusal::TooLarge { .. }
    ));
    assert!(matches!(
        b.ingest(b"{not json", None, T0).unwrap_err(),
        AdvertRefusal::Malformed(_)
    ));
}

#[test]
fn an_entry_expires_after_the_ttl_and_an_old_advert_cannot_revive_it() {
    let key = keypair_from_seed(&[8; 32]).unwrap();
    let peer = key.public().to_peer_id();
    let mut b = board();
    let bytes = sign_advert(&key, T0, 1, &offer(&["haiku"])).unwrap();
    b.ingest(&bytes, Some(&peer), T0).unwrap();
    assert_eq!(b.snapshot(T0 + 179_999).len(), 1);
    // The boxes it accepts, by the id a row names, until it expires with the rest.
    let row_peer = &b.snapshot(T0)[0].peer;
    assert_eq!(b.boxes_of(row_peer, T0 + 179_999), offer(&[]).boxes);
    assert!(b.boxes_of(row_peer, T0 + 180_000).is_empty());
    assert!(b.boxes_of("not-a-peer", T0).is_empty());
    assert!(b.snapshot(T0 + 180_000).is_empty());
    assert!(b.advert(&peer, T0 + 180_000).is_none());
    assert_eq!(b.expire(T0 + 180_000), vec![peer.to_base58()]);
    // Gone from the map; the same bytes replayed later are too old to come back.
    assert!(matches!(
        b.ingest(&bytes, Some(&peer), T0 + 200_000).unwrap_err(),
        AdvertRefusal::Expired { .. }
    ));
    // A fresh advert brings the peer back as new.
    let fresh = sign_advert(&key, T0 + 200_000, 2, &offer(&["haiku"])).unwrap();
    assert!(
        b.ingest(&fresh, Some(&peer), T0 + 200_000)
            .unwrap()
            .new_peer
    );
}

#[test]
fn a_removed_skill_leaves_the_board_with_the_next_advert() {
    let key = keypair_from_seed(&[9; 32]).unwrap();
    let mut b = board();
    b.ingest(
        &sign_advert(&key, T0, 1, &offer(&["haiku", "summarize"])).unwrap(),
        None,
        T0,
    )
    .unwrap();
    assert_eq!(b.snapshot(T0).len(), 2);
    b.ingest(
        &sign_advert(&key, T0 + 1, 2, &offer(&["summarize"])).unwrap(),
        None,
        T0 + 1,
    )
    .unwrap();
    assert_eq!(skills_listed(&b, T0 + 1), ["summarize"]);
}

#[test]
fn an_advert_has_no_field_for_model_key_or_body() {
    let key = keypair_from_seed(&[10; 32]).unwrap();
    let bytes = sign_advert(&key, T0, 1, &offer(&["haiku"])).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let mut advert_keys: Vec<&str> = v["advert"]
        .as_object()
        .unwrap()
        .keys()
        .map(|s| s.as_str())
        .collect();
    advert_keys.sort();
    assert_eq!(
        advert_keys,
        ["boxes", "node", "publicKey", "seq", "skills", "time", "v"]
    );
    let mut skill_keys: Vec<&str> = v["advert"]["skills"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(|s| s.as_str())
        .collect();
    skill_keys.sort();
    assert_eq!(
        skill_keys,
        [
            "declarationDigest",
            "description",
            "name",
            "provider",
            "requiredSources"
        ]
    );
    // A peer that adds a model (or key, or body) to its advert is refused, not trimmed (as a
    // field this version does not know: gossip does not blame its forwarder).
    let mut tampered = v.clone();
    tampered["advert"]["skills"][0]["model"] = "gpt-secret".into();
    let err = verify_advert(&serde_json::to_vec(&tampered).unwrap(), 64 * 1024).unwrap_err();
    assert!(
        matches!(err, AdvertRefusal::UnknownFormat(ref m) if m.contains("model")),
        "{err}"
    );
}

#[test]
fn an_offer_naming_a_skill_twice_is_refused() {
    let err = Offer {
        skills: vec![skill("haiku"), skill("haiku")],
        boxes: vec![],
    }
    .normalized()
    .unwrap_err();
    assert!(err.to_string().contains("haiku"), "{err}");
}

/// The board's bytes are bounded, not only its entries: adverts of the largest size, each
/// signed by a fresh key (keys cost nothing), fill the byte budget; past it an advert nobody
/// asked for is refused `BoardFull` and holds nothing, and one this node fetched makes room
/// by evicting the oldest. Before, 100,000 entries of 128 KiB each were allowed.
#[test]
fn a_board_of_large_adverts_stays_within_its_bytes() {
    let budget = 600 * 1024;
    let mut b = Board::new(BoardConfig {
        max_total_bytes: budget,
        ..BoardConfig::default()
    });
    // One skill with the longest description the grammar lets through, many times: about
    // 60 KiB an advert.
    let large = |i: u8| {
        let skills: Vec<OfferedSkill> = (0..40)
            .map(|n| OfferedSkill {
                description: "d".repeat(1024),
                ..skill(&format!("skill-{n}"))
            })
            .collect();
        let k = keypair_from_seed(&[i; 32]).unwrap();
        let t = T0 + u64::from(i);
        let offer = Offer {
            skills,
            boxes: vec![],
        }
        .normalized()
        .expect("a valid offer");
        (
            k.public().to_peer_id(),
            sign_advert(&k, t, t, &offer).unwrap(),
        )
    };
    let now = T0 + 1000;
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 1..=40u8 {
        let (peer, bytes) = large(i);
        match b.ingest_unasked(&bytes, None, now, |_, _| true) {
            Ok(_) => held.push(peer),
            Err(AdvertRefusal::BoardFull) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(b.held_bytes() <= budget, "{} > {budget}", b.held_bytes());
    }
    assert!(
        held.len() >= 3 && refused > 0,
        "held {}, refused {refused}",
        held.len()
    );
    // Those held first are still held: unasked adverts never push them out.
    assert!(held.iter().all(|p| b.advert(p, now).is_some()));
    // An advert this node fetched evicts the oldest to fit.
    let (peer, bytes) = large(41);
    let got = b.ingest(&bytes, None, now).expect("fetched: room is made");
    assert_eq!(got.evicted, Some(held[0].to_base58()));
    assert!(b.advert(&peer, now).is_some() && b.held_bytes() <= budget);
    // Entries that leave give their bytes back.
    b.expire(now + 10_000_000);
    assert_eq!((b.len(), b.held_bytes()), (0, 0));
}

#[test]
fn a_full_board_evicts_the_oldest_entry_and_keeps_its_cap() {
    let mut b = Board::new(BoardConfig {
        max_entries: 3,
        ..BoardConfig::default()
    });
    let keys: Vec<_> = (1..=5u8)
        .map(|i| keypair_from_seed(&[i; 32]).unwrap())
        .collect();
    let peer = |i: usize| keys[i].public().to_peer_id();
    // Three peers, signed one second apart: peer 0 is the oldest.
    for (i, k) in keys.iter().enumerate().take(3) {
        let t = T0 + i as u64 * 1000;
        let bytes = sign_advert(k, t, t, &offer(&["haiku"])).unwrap();
        let got = b.ingest(&bytes, None, T0 + 3000).unwrap();
        assert_eq!(got.evicted, None);
    }
    assert_eq!(b.len(), 3);
    // A fourth evicts peer 0.
    let t = T0 + 3000;
    let bytes = sign_advert(&keys[3], t, t, &offer(&["haiku"])).unwrap();
    let got = b.ingest(&bytes, None, t).unwrap();
    assert_eq!(got.evicted, Some(peer(0).to_base58()));
    assert_eq!(b.len(), 3);
    assert!(b.advert(&peer(0), t).is_none());
    // A fresh advert of a peer already held replaces its entry and evicts nobody; it is no
    // longer the oldest, so the next newcomer evicts peer 2 (now the oldest).
    let t1 = T0 + 4000;
    let bytes = sign_advert(&keys[1], t1, t1, &offer(&["summarize"])).unwrap();
    assert_eq!(b.ingest(&bytes, None, t1).unwrap().evicted, None);
    let bytes = sign_advert(&keys[4], t1, t1 + 1, &offer(&["haiku"])).unwrap();
    let got = b.ingest(&bytes, None, t1).unwrap();
    assert_eq!(got.evicted, Some(peer(2).to_base58()));
    let mut held: Vec<String> = (0..5)
        .filter(|&i| b.advert(&peer(i), t1).is_some())
        .map(|i| peer(i).to_base58())
        .collect();
    held.sort();
    let mut want = vec![
        peer(1).to_base58(),
        peer(3).to_base58(),
        peer(4).to_base58(),
    ];
    want.sort();
    assert_eq!(held, want);
    // Rows follow the entries (the rendered cache stays consistent after evictions).
    assert_eq!(b.snapshot(t1).len(), 3);
    assert_eq!(b.row_count(t1), 3);
    let json: serde_json::Value = serde_json::from_str(&b.snapshot_json(t1)).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3);
    // Expiry uses the same order: everything goes once past its TTL.
    let gone = b.expire(t1 + 180_000);
    assert_eq!(gone.len(), 3);
    assert!(b.is_empty());
    assert_eq!(b.row_count(t1 + 180_000), 0);
}

/// A board sync or gossip that repeats an advert held (25,000 copies in one sync answer, say)
/// costs a parse each, not a signature check each: its (node, seq) is judged first. A copy with
/// its signature broken shows the order: refused as stale, never reaching the signature.
#[test]
fn a_copy_of_a_held_advert_is_refused_before_its_signature_is_checked() {
    let k = keypair_from_seed(&[61; 32]).unwrap();
    let bytes = sign_advert(&k, T0, 5, &offer(&["haiku"])).unwrap();
    let mut b = board();
    b.ingest_unasked(&bytes, None, T0, |_, _| true)
        .expect("first copy taken");
    let mut forged: SignedAdvert = serde_json::from_slice(&bytes).unwrap();
    forged.signature = "00".repeat(64);
    let forged = serde_json::to_vec(&forged).unwrap();
    let mut admitted = 0;
    for _ in 0..3 {
        let err = b
            .ingest_unasked(&forged, None, T0, |_, _| {
                admitted += 1;
                true
            })
            .unwrap_err();
        assert!(
            matches!(err, AdvertRefusal::Stale { seq: 5, newest: 5 }),
            "{err}"
        );
    }
    assert_eq!(
        admitted, 0,
        "a stale copy took a token of its signer's rate"
    );
    // A newer advert with a broken signature still meets the signature check.
    let newer = sign_advert(&k, T0 + 1, 6, &offer(&["haiku"])).unwrap();
    let mut newer: SignedAdvert = serde_json::from_slice(&newer).unwrap();
    newer.signature = "00".repeat(64);
    let newer = serde_json::to_vec(&newer).unwrap();
    // Gossip from a publisher that is not the claimed node: refused for that alone.
    let other = keypair_from_seed(&[62; 32]).unwrap().public().to_peer_id();
    let err = b
        .ingest_unasked(&newer, Some(&other), T0 + 1, |_, _| true)
        .unwrap_err();
    assert!(matches!(err, AdvertRefusal::SourceMismatch { .. }), "{err}");
    let err = b
        .ingest_unasked(&newer, None, T0 + 1, |_, _| true)
        .unwrap_err();
    assert_eq!(err, AdvertRefusal::BadSignature);
}

/// P1 (c): board sync answered newest-signed first, so a signer re-signing every few seconds
/// (its advert rate allows one each 2 s) owned every answer an honest node gave a joiner. Now
/// the answer comes longest-held first: re-signing keeps a signer's place, never improves it.
#[test]
fn a_frequent_re_signer_does_not_fill_the_board_sync_answer() {
    let honest = keypair_from_seed(&[101; 32]).unwrap();
    let resigner = keypair_from_seed(&[102; 32]).unwrap();
    let mut b = board();
    let first = sign_advert(&honest, T0, 1, &offer(&["haiku"])).unwrap();
    b.ingest_unasked(&first, None, T0, |_, _| true).unwrap();
    let mut last = Vec::new();
    for seq in 1..=20u64 {
        let at = T0 + seq * 2_000;
        last = sign_advert(&resigner, at, seq, &offer(&["haiku"])).unwrap();
        b.ingest_unasked(&last, None, at, |_, _| true).unwrap();
    }
    let now = T0 + 41_000;
    let answer = b.signed_adverts(now, usize::MAX, 1);
    assert_eq!(answer.len(), 1);
    assert!(answer[0][..] == first[..], "the re-signer took the answer");
    // Both are still relayed when there is room, the re-signer's newest advert among them.
    let both = b.signed_adverts(now, usize::MAX, 10);
    assert_eq!(both.len(), 2);
    assert!(both[1][..] == last[..], "not the re-signer's newest");
}
