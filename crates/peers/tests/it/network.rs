//! Real nodes on 127.0.0.1 in one process (ephemeral ports, mDNS off). Every wait has a deadline.

use std::time::{Duration, Instant};

use serde_json::json;
use skillbox_peers::Protocol;
use skillbox_peers::advert::{SignedAdvert, sign_advert};
use skillbox_peers::{
    Delivery, NetworkEvent, Offer, Payload, PayloadKind, PayloadReceiver, PeerId, PeersConfig,
    PeersError, PeersHandle, keypair_from_seed, start,
};
use tokio::sync::broadcast;

use crate::support::{
    WAIT, addr, node, nodes, peer_ids, received, request, shutdown, tcp, wait_connected,
    wait_event, within,
};

/// This module's nodes listen on loopback TCP.
fn config() -> PeersConfig {
    tcp()
}

/// [`config`] with the few settings a test is about changed by `tune`.
fn config_with(tune: impl FnOnce(&mut PeersConfig)) -> PeersConfig {
    let mut c = config();
    tune(&mut c);
    c
}

/// [`config`] with a sender that tries a payload `attempts` times, backing off from `backoff`.
fn retrying(attempts: u32, backoff: Duration) -> PeersConfig {
    config_with(|c| {
        c.send_attempts = attempts;
        c.send_backoff = backoff;
    })
}

fn offer(names: &[&str]) -> Offer {
    let skills: Vec<(String, String)> = names
        .iter()
        .map(|n| (n.to_string(), format!("the {n} skill")))
        .collect();
    crate::index::offer(&skills)
}

fn skills_of(h: &PeersHandle, peer: &PeerId) -> Vec<String> {
    h.board()
        .into_iter()
        .filter(|r| r.peer == peer.to_base58())
        .map(|r| r.skill)
        .collect()
}

/// Waits until every one of `boards` lists exactly `skills` as `peer`'s offer.
async fn until_offered(what: &str, boards: &[&PeersHandle], peer: &PeerId, skills: &[&str]) {
    wait_until(what, WAIT, || {
        boards.iter().all(|h| skills_of(h, peer) == skills)
    })
    .await;
}

fn on_board(h: &PeersHandle, peer: &PeerId) -> bool {
    h.with_board(|b, now| b.advert(peer, now).is_some())
}

async fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each node dials the one before it (the ends are not connected: what reaches the last from
/// the first is gossip through the middle), and each dial reaches the peer it was meant for.
async fn line_up(nodes: &[&PeersHandle]) {
    for w in nodes.windows(2) {
        let before = w[0].local_peer_id();
        assert_eq!(w[1].dial(addr(w[0]).await).await.unwrap(), before);
    }
}

/// Three nodes on this module's config, lined up (see [`line_up`]), the first offering `skills`
/// and seen offering them on the other two boards: where a test of what follows an offer starts.
async fn first_offering(
    seeds: [u8; 3],
    skills: &[&str],
) -> ([(PeersHandle, PayloadReceiver); 3], PeerId) {
    let started = nodes(seeds, config()).await;
    let [(first, _), (second, _), (third, _)] = &started;
    let offering = first.local_peer_id();
    line_up(&[first, second, third]).await;
    first.set_offer(offer(skills)).await.unwrap();
    until_offered(
        "the others see the first node's offer",
        &[second, third],
        &offering,
        skills,
    )
    .await;
    (started, offering)
}

async fn next_refusal(events: &mut broadcast::Receiver<NetworkEvent>, what: &str) -> String {
    wait_event(events, what, |e| match e {
        NetworkEvent::AdvertRefused { reason, .. } => Some(reason.clone()),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advert_reaches_a_node_through_an_intermediate_peer() {
    within(Duration::from_secs(60), async {
        let [(a, _ra), (b, _rb), (c, _rc)] = nodes([11, 12, 13], config()).await;
        let pa = a.local_peer_id();
        line_up(&[&a, &b, &c]).await;
        // C learns of A (its empty advert) before A offers anything: what follows is gossip.
        wait_until("C has A's first advert", WAIT, || on_board(&c, &pa)).await;
        a.set_offer(offer(&["haiku"])).await.unwrap();
        until_offered("C sees A's haiku", &[&c], &pa, &["haiku"]).await;
        let c_peers = c.peers().await.unwrap();
        assert!(
            c_peers.iter().all(|p| p.peer != pa.to_base58()),
            "C must not be connected to A directly: {c_peers:?}"
        );
        assert_eq!(c_peers.len(), 1);
        assert!(!c_peers[0].addresses.is_empty());
        // The advert interval is the default 60 s: only the immediate publish explains this.
        shutdown([a, b, c]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_sees_the_board_within_5_seconds_of_connecting() {
    within(Duration::from_secs(60), async {
        let [(a, _ra), (b, _rb)] = nodes([21, 22], config()).await;
        let (pa, pb) = (a.local_peer_id(), b.local_peer_id());
        a.set_offer(offer(&["haiku"])).await.unwrap();
        b.set_offer(offer(&["summarize"])).await.unwrap();
        b.dial(addr(&a).await).await.unwrap();
        until_offered("B sees A's haiku", &[&b], &pa, &["haiku"]).await;

        // C joins through its bootstrap config (no /p2p/ in the address).
        let boot = addr(&b).await;
        let joined = Instant::now();
        let (c, _rc) = node(23, config_with(|c| c.bootstrap = vec![boot])).await;
        wait_until("C sees A's and B's skills", Duration::from_secs(5), || {
            skills_of(&c, &pa) == ["haiku"] && skills_of(&c, &pb) == ["summarize"]
        })
        .await;
        let took = joined.elapsed();
        assert!(took < Duration::from_secs(5), "took {took:?}");
        let rows = c.board();
        assert!(rows.iter().all(|r| r.age < 60), "{rows:?}");
        shutdown([a, b, c]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_peer_leaves_the_board_after_its_ttl() {
    within(Duration::from_secs(60), async {
        let short = || PeersConfig {
            advert_interval: Duration::from_millis(300),
            board_ttl: Duration::from_millis(1500),
            ..config()
        };
        let [(a, _ra), (b, _rb), (c, _rc)] = nodes([31, 32, 33], short()).await;
        let (pa, pb) = (a.local_peer_id(), b.local_peer_id());
        a.set_offer(offer(&["haiku"])).await.unwrap();
        b.set_offer(offer(&["summarize"])).await.unwrap();
        line_up(&[&a, &b, &c]).await;
        wait_until("C sees A and B", WAIT, || {
            skills_of(&c, &pa) == ["haiku"] && skills_of(&c, &pb) == ["summarize"]
        })
        .await;
        let mut events = c.subscribe();
        a.shutdown().await;
        let stopped = Instant::now();
        wait_until("A leaves C's board", WAIT, || !on_board(&c, &pa)).await;
        let gone_after = stopped.elapsed();
        assert!(
            gone_after <= Duration::from_millis(1500) + Duration::from_secs(2),
            "{gone_after:?}"
        );
        // B keeps advertising, so it stays well past one TTL.
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert_eq!(skills_of(&c, &pb), ["summarize"]);
        let mut left = false;
        while let Ok(e) = events.try_recv() {
            left |= e
                == NetworkEvent::LeftBoard {
                    peer: pa.to_base58(),
                };
        }
        assert!(left, "C reported A leaving the board");
        shutdown([b, c]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_removed_from_the_offer_disappears_from_peers_boards() {
    within(Duration::from_secs(60), async {
        // B and C see both skills.
        let ([(a, _ra), (b, _rb), (c, _rc)], pa) =
            first_offering([41, 42, 43], &["haiku", "summarize"]).await;
        // The node drops "haiku" from its offer (e.g. its key source was removed).
        a.set_offer(offer(&["summarize"])).await.unwrap();
        until_offered(
            "haiku leaves B's and C's boards",
            &[&b, &c],
            &pa,
            &["summarize"],
        )
        .await;
        shutdown([a, b, c]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_oversized_adverts_are_refused_on_the_wire() {
    within(Duration::from_secs(90), async {
        // m: mallory. B and M see A's haiku.
        let ([(a, _ra), (b, _rb), (m, _rm)], pa) = first_offering([51, 52, 53], &["haiku"]).await;
        let old = a.signed_advert(&pa).expect("A's own advert");
        a.set_offer(offer(&["haiku", "summarize"])).await.unwrap();
        until_offered("B sees A's new offer", &[&b], &pa, &["haiku", "summarize"]).await;
        let mut events = b.subscribe();

        // 1. A replays its own older advert: the sequence number is not newer.
        a.publish_raw_advert(old.clone()).await.unwrap();
        let r = next_refusal(&mut events, "replayed advert").await;
        assert!(r.contains("not newer"), "{r}");

        // 2. Mallory forwards A's genuine advert as its own publication.
        m.publish_raw_advert(old.clone()).await.unwrap();
        let r = next_refusal(&mut events, "advert published by someone else").await;
        assert!(r.contains("published by"), "{r}");

        // 3. Mallory edits A's advert (keeps A's signature) and publishes it.
        let mut forged: SignedAdvert = serde_json::from_slice(&old).unwrap();
        forged.advert.skills[0].description = "free, send your keys".into();
        forged.advert.seq += 1_000_000;
        m.publish_raw_advert(serde_json::to_vec(&forged).unwrap())
            .await
            .unwrap();
        let r = next_refusal(&mut events, "forged advert").await;
        assert!(r.contains("published by") || r.contains("signature"), "{r}");

        // 4. Mallory signs its own advert with a bad signature.
        let mk = keypair_from_seed(&[53; 32]).unwrap();
        let now = skillbox_peers::now_ms();
        let mine = sign_advert(&mk, now, now + 10_000, &offer(&["trap"])).unwrap();
        let mut bad: SignedAdvert = serde_json::from_slice(&mine).unwrap();
        bad.signature = "00".repeat(64);
        m.publish_raw_advert(serde_json::to_vec(&bad).unwrap())
            .await
            .unwrap();
        let r = next_refusal(&mut events, "bad signature").await;
        assert!(r.contains("bad signature"), "{r}");

        // 5. An oversized advert, correctly signed.
        let mut big = offer(&["big"]);
        big.skills[0].description = "x".repeat(140 * 1024);
        let huge = sign_advert(&mk, now, now + 20_000, &big).unwrap();
        m.publish_raw_advert(huge).await.unwrap();
        let r = next_refusal(&mut events, "oversized advert").await;
        assert!(r.contains("exceeds the limit"), "{r}");

        // Nothing of it reached the board.
        assert_eq!(skills_of(&b, &pa), ["haiku", "summarize"]);
        assert!(
            b.board()
                .iter()
                .all(|r| r.skill != "trap" && r.skill != "big")
        );
        assert!(b.board().iter().all(|r| !r.description.contains("keys")));
        shutdown([a, b, m]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_round_trips_between_two_nodes() {
    within(Duration::from_secs(60), async {
        let [(a, mut ra), (b, mut rb)] = nodes([61, 62], config()).await;
        let (pa, pb) = (a.local_peer_id(), b.local_peer_id());
        a.dial(addr(&b).await).await.unwrap();
        // `peer add` of a peer already connected, with its /p2p/ id, is not an error.
        let full = addr(&b).await.with(Protocol::P2p(pb));
        assert_eq!(a.dial(full).await.unwrap(), pb);
        let body = json!({"skill": "haiku", "program": {"bytes": "e30="}});
        a.send(pb, request("call-1", body.clone())).await.unwrap();
        let got = received(&mut rb).await;
        assert_eq!(got.from, pa);
        assert_eq!(got.payload.kind, PayloadKind::CallRequest);
        assert_eq!(got.payload.call_id, "call-1");
        assert_eq!(got.payload.body, body);
        let answer = Payload {
            kind: PayloadKind::CallAccepted,
            call_id: "call-1".into(),
            body: json!({"signature": "ab"}),
        };
        b.send(pa, answer.clone()).await.unwrap();
        let back = received(&mut ra).await;
        assert_eq!(back.from, pb);
        assert_eq!(back.payload, answer);
        // A node calling its own skill sends to itself: same checks, no socket.
        a.send(pa, request("call-2", json!({}))).await.unwrap();
        let own = received(&mut ra).await;
        assert_eq!((own.from, own.payload.call_id.as_str()), (pa, "call-2"));
        shutdown([a, b]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_replayed_payloads_are_refused_on_the_wire() {
    within(Duration::from_secs(60), async {
        // A allows itself 4 MiB, so the 1 MiB limit that refuses is B's own.
        let (a, _ra) = node(71, config_with(|c| c.max_payload_bytes = 4 * 1024 * 1024)).await;
        let (b, mut rb) = node(72, config()).await;
        let (pa, pb) = (a.local_peer_id(), b.local_peer_id());
        a.dial(addr(&b).await).await.unwrap();
        let mut events = b.subscribe();

        let big = request("call-big", json!({"program": "x".repeat(1536 * 1024)}));
        let err = a.send(pb, big.clone()).await.unwrap_err();
        match &err {
            PeersError::Refused { peer, reason } => {
                assert_eq!(*peer, pb);
                assert_eq!(reason, "too_large");
            }
            other => panic!("expected a refusal, got {other}"),
        }
        let refused = wait_event(&mut events, "the payload refusal", |e| match e {
            NetworkEvent::PayloadRefused { from, .. } => Some(*from),
            _ => None,
        })
        .await;
        assert_eq!(refused, pa);
        // The sender's own limit refuses before anything is sent.
        let err = b.send(pa, big).await.unwrap_err();
        assert!(matches!(err, PeersError::PayloadTooLarge { .. }), "{err}");

        let signed = a.sign(&pb, &request("call-3", json!({"n": 1}))).unwrap();
        assert_eq!(
            a.send_signed(pb, signed.clone()).await.unwrap(),
            Delivery::Delivered
        );
        assert_eq!(
            a.send_signed(pb, signed).await.unwrap(),
            Delivery::Duplicate
        );
        let got = received(&mut rb).await;
        assert_eq!(got.payload.call_id, "call-3");
        assert!(
            rb.try_recv().is_err(),
            "the replay was handed on, or the oversized one was"
        );
        shutdown([a, b]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_sender_gets_through_with_backoff_and_an_absent_peer_is_reported() {
    within(Duration::from_secs(60), async {
        let (a, _ra) = node(81, retrying(8, Duration::from_millis(100))).await;
        let (b, mut rb) = node(
            82,
            config_with(|c| {
                c.payload_rate_per_sec = 4.0;
                c.payload_burst = 1;
            }),
        )
        .await;
        let pb = b.local_peer_id();
        a.dial(addr(&b).await).await.unwrap();
        for i in 0..4 {
            a.send(pb, request(&format!("call-{i}"), json!({"i": i})))
                .await
                .unwrap();
        }
        for i in 0..4 {
            let got = received(&mut rb).await;
            assert_eq!(got.payload.call_id, format!("call-{i}"));
        }

        let (c, _rc) = node(83, retrying(3, Duration::from_millis(50))).await;
        let nobody = keypair_from_seed(&[99; 32]).unwrap().public().to_peer_id();
        let err = c
            .send(nobody, request("call-x", json!({})))
            .await
            .unwrap_err();
        match err {
            PeersError::Unreachable { peer, attempts, .. } => {
                assert_eq!(peer, nobody);
                assert_eq!(attempts, 3);
            }
            other => panic!("expected unreachable, got {other}"),
        }
        shutdown([a, b, c]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_and_unusable_addresses_are_clear_errors() {
    let err = start(
        PeersConfig {
            board_ttl: Duration::from_secs(10),
            advert_interval: Duration::from_secs(60),
            ..config()
        },
        keypair_from_seed(&[91; 32]).unwrap(),
    )
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("board_ttl"), "{err}");

    let (a, _ra) = node(92, config()).await;
    let taken = addr(&a).await;
    let err = start(
        PeersConfig {
            listen: vec![taken.clone()],
            ..config()
        },
        keypair_from_seed(&[93; 32]).unwrap(),
    )
    .await
    .err()
    .expect("address in use is refused");
    assert!(err.to_string().contains(&taken.to_string()), "{err}");

    // Nothing listens on port 1.
    let err = a
        .dial("/ip4/127.0.0.1/tcp/1".parse().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, PeersError::Dial { .. }), "{err}");
    a.shutdown().await;
    assert!(matches!(a.peers().await.unwrap_err(), PeersError::Stopped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_denied() {
    within(Duration::from_secs(60), async {
        let (a, _ra) = node(81, config_with(|c| c.max_connections = 1)).await;
        let [(b, _rb), (c, _rc)] = nodes([82, 83], config()).await;
        let pa = a.local_peer_id();
        let pb = b.local_peer_id();
        assert_eq!(b.dial(addr(&a).await).await.unwrap(), pa);
        // a holds b's connection before the second peer tries.
        wait_connected(&a, &pb).await;
        // The second peer is over a's limit: its dial fails, or its connection is closed at once.
        let _ = c.dial(addr(&a).await).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let held = peer_ids(&a).await;
        assert_eq!(held, vec![pb.to_base58()], "a holds only its first peer");
        let c_peers = peer_ids(&c).await;
        assert!(
            !c_peers.contains(&pa.to_base58()),
            "c is not connected to a: {c_peers:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_connection_limits_and_board_cap_are_config_errors() {
    for bad in [
        PeersConfig {
            max_connections: 0,
            ..config()
        },
        PeersConfig {
            max_pending_incoming: 0,
            ..config()
        },
        PeersConfig {
            board_max_entries: 0,
            ..config()
        },
    ] {
        let err = start(bad, keypair_from_seed(&[84; 32]).unwrap())
            .await
            .err()
            .expect("refused");
        assert!(matches!(err, PeersError::InvalidConfig(_)), "{err}");
    }
}

/// Every payload is padded to at least `payload::MIN_PADDED_BYTES`: a payload limit below that
/// was taken (anything from 1,024) and then every send failed `PayloadTooLarge`. It is refused
/// at start, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_limit_below_the_smallest_padded_payload_is_a_config_error() {
    use skillbox_peers::payload::MIN_PADDED_BYTES;
    let bad = PeersConfig {
        max_payload_bytes: MIN_PADDED_BYTES - 1,
        ..config()
    };
    let err = start(bad, keypair_from_seed(&[85; 32]).unwrap())
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(&err, PeersError::InvalidConfig(m) if m.contains("max_payload_bytes")),
        "{err}"
    );
    let (a, _ra) = node(86, config_with(|c| c.max_payload_bytes = MIN_PADDED_BYTES)).await;
    shutdown([a]).await;
}

/// A burst of payloads both ways at once, each given a single attempt: every one is delivered.
/// libp2p drops inbound streams past 100 per connection; the sender's window keeps a burst
/// under that instead of letting its tail be dropped (and, with one attempt, lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_payloads_both_ways_is_delivered_without_a_retry() {
    within(Duration::from_secs(120), async {
        let burst = PeersConfig {
            send_attempts: 1,
            payload_rate_per_sec: 100_000.0,
            payload_burst: 100_000,
            ..config()
        };
        let [(a, ra), (b, rb)] = nodes([71, 72], burst).await;
        let (pa, pb) = (a.local_peer_id(), b.local_peer_id());
        a.dial(addr(&b).await).await.unwrap();
        // Both sides hold the connection before the burst (else b would dial a's source port).
        wait_connected(&a, &pb).await;
        wait_connected(&b, &pa).await;
        const N: usize = 400;
        let drain = |mut rx: PayloadReceiver| {
            tokio::spawn(async move {
                let mut ids = std::collections::HashSet::new();
                while ids.len() < N {
                    match tokio::time::timeout(WAIT, rx.recv()).await {
                        Ok(Some(p)) => {
                            ids.insert(p.payload.call_id);
                        }
                        _ => break,
                    }
                }
                ids.len()
            })
        };
        let (got_a, got_b) = (drain(ra), drain(rb));
        let mut sends = Vec::new();
        for i in 0..N {
            for (from, to) in [(a.clone(), pb), (b.clone(), pa)] {
                sends.push(tokio::spawn(async move {
                    from.send(to, request(&format!("burst-{i}"), json!({})))
                        .await
                }));
            }
        }
        let mut failed = Vec::new();
        for s in sends {
            if let Err(e) = s.await.unwrap() {
                failed.push(e.to_string());
            }
        }
        assert!(
            failed.is_empty(),
            "{} of {} sends failed: {:?}",
            failed.len(),
            2 * N,
            failed.first()
        );
        assert_eq!(got_a.await.unwrap(), N, "a received all of b's");
        assert_eq!(got_b.await.unwrap(), N, "b received all of a's");
        shutdown([a, b]).await;
    })
    .await;
}

/// Two nodes, V hearing H; H's advert offering "first" is heard (the positive control), then H
/// publishes `count` of `flood(i)` and V refuses at least `refusals` of them with a reason
/// containing `refused_as`. What V hears of H next is the test's.
async fn after_a_flood_of_adverts(
    seeds: [u8; 2],
    (count, refusals): (u64, usize),
    flood: impl Fn(u64) -> Vec<u8>,
    refused_as: &str,
) -> (PeersHandle, PeersHandle, PeerId) {
    let [(v, _rv), (h, _rh)] = nodes(seeds, config_with(|c| c.board_sync = false)).await;
    let ph = h.local_peer_id();
    line_up(&[&v, &h]).await;
    h.set_offer(offer(&["first"])).await.unwrap();
    until_offered("V sees H's first offer", &[&v], &ph, &["first"]).await;
    let mut events = v.subscribe();
    for i in 0..count {
        h.publish_raw_advert(flood(i)).await.unwrap();
    }
    let mut refused = 0;
    while refused < refusals {
        let r = next_refusal(&mut events, "a flooded advert refused").await;
        assert!(r.contains(refused_as), "{r}");
        refused += 1;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    (v, h, ph)
}

/// [`after_a_flood_of_adverts`], then H offers "second": V hears it (H was not graylisted).
async fn still_heard_after(seeds: [u8; 2], flood: impl Fn(u64) -> Vec<u8>, refused_as: &str) {
    let (v, h, ph) = after_a_flood_of_adverts(seeds, (20, 9), flood, refused_as).await;
    h.set_offer(offer(&["second"])).await.unwrap();
    until_offered(
        &format!("V still hears H after its adverts refused as {refused_as:?}"),
        &[&v],
        &ph,
        &["second"],
    )
    .await;
    shutdown([v, h]).await;
}

/// [`after_a_flood_of_adverts`], then H offers "second": V does not hear it (a graylisted
/// peer's gossip is dropped unread).
async fn graylisted_after(
    seeds: [u8; 2],
    shape: (u64, usize),
    flood: impl Fn(u64) -> Vec<u8>,
    refused_as: &str,
) {
    let (v, h, ph) = after_a_flood_of_adverts(seeds, shape, flood, refused_as).await;
    h.set_offer(offer(&["second"])).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        skills_of(&v, &ph),
        ["first"],
        "the peer whose adverts were refused as {refused_as:?} was still heard"
    );
    shutdown([v, h]).await;
}

/// H's own advert of `offer`, signed by H with `seq`.
fn signed_offer(seed: u8, seq: u64, offer: &Offer) -> Vec<u8> {
    let key = keypair_from_seed(&[seed; 32]).unwrap();
    let now = skillbox_peers::now_ms();
    sign_advert(&key, now, now + 1_000 + seq, offer).unwrap()
}

/// H's own advert, signed by H with `seq`, whose JSON `change` edits before it is sent.
fn advert_of(seed: u8, seq: u64, change: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let bytes = signed_offer(seed, seq, &offer(&["flood"]));
    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    change(&mut json);
    serde_json::to_vec(&json).unwrap()
}

/// Gossipsub peer scoring: a peer that keeps publishing adverts our check rejects (here: its
/// own, with a signature no key made) loses score and is graylisted — what it sends next on
/// gossip, its own valid advert included, is dropped unread. Before, it could publish invalid
/// adverts without end, each one checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_publishing_invalid_adverts_is_graylisted() {
    within(Duration::from_secs(90), async {
        let bad_signature = |i| advert_of(62, i, |a| a["signature"] = json!("00".repeat(64)));
        graylisted_after([61, 62], (20, 9), bad_signature, "bad signature").await;
    })
    .await;
}

/// A node of a newer version forwards adverts valid to it: another version, or a field this
/// version does not know (the advert types refuse unknown fields). They are refused here but
/// ignored, not rejected: rejecting them cost the forwarder score, and after 9 every older node
/// graylisted it, splitting the mesh by version during an upgrade. H publishes 20 such adverts
/// and its next valid advert is still heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_forwarding_adverts_of_a_newer_format_is_not_graylisted() {
    within(Duration::from_secs(90), async {
        let newer = |i: u64| {
            advert_of(64, i, |a| {
                if i.is_multiple_of(2) {
                    a["advert"]["v"] = json!(2);
                } else {
                    a["advert"]["reachableVia"] = json!(["a field of a newer version"]);
                }
            })
        };
        still_heard_after([63, 64], newer, "version").await;
    })
    .await;
}

/// A skill naming a provider kind a newer version added is valid to that version's nodes, which
/// forward it; it was refused as malformed after its signature check and rejected, so the
/// forwarder lost score and after 9 was graylisted by every older node (the mesh split by
/// version). Now it is a newer format: refused here, ignored by scoring. H publishes 20 adverts
/// offering a `mistral` skill and its next valid advert is still heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_forwarding_skills_of_a_newer_provider_kind_is_not_graylisted() {
    within(Duration::from_secs(90), async {
        let newer_provider = |i: u64| {
            let mut o = offer(&["flood"]);
            o.skills[0].provider = "mistral".into();
            signed_offer(66, i, &o)
        };
        still_heard_after([65, 66], newer_provider, "provider kind").await;
    })
    .await;
}

/// Adverts of a newer format are ignored, but a peer publishing made-up versions forever cost a
/// parse each and was never graylisted. Past its budget of newer-format adverts (a burst of 120,
/// then 2 a second) they count as invalid: H publishes 200 adverts of version 7, V refuses
/// the burst and 9 more, and H's next valid advert is dropped unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_making_up_advert_formats_without_end_is_graylisted() {
    within(Duration::from_secs(120), async {
        let made_up = |i: u64| advert_of(68, i, |a| a["advert"]["v"] = json!(7));
        graylisted_after([67, 68], (200, 129), made_up, "version").await;
    })
    .await;
}
