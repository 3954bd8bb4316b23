//! The skill index's bounds on libp2p's memory transport: a node flooding adverts is
//! rate-limited and fresh identities evict no honest entry. Real skills from the corpus; every
//! wait has a deadline. (The 52-node search test is not landed yet: wip/index_52_nodes.rs.)

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use skillbox_peers::{
    AcceptedBox, Multiaddr, NetworkEvent, Offer, OfferedSkill, PayloadReceiver, PeerId,
    PeersConfig, PeersHandle, Protocol, keypair_from_seed, start,
};
use tokio::sync::broadcast::error::TryRecvError;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../skill/tests/data/skills-corpus/awesome-copilot")
}

fn find_skill_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            find_skill_files(&p, out);
        } else if p.file_name().is_some_and(|n| n == "SKILL.md") {
            out.push(p);
        }
    }
}

/// (name, description) of the corpus's valid skills, by name, without repeats.
fn corpus_skills() -> Vec<(String, String)> {
    let mut files = Vec::new();
    find_skill_files(&corpus_dir(), &mut files);
    let mut skills: Vec<(String, String)> = files
        .iter()
        .filter_map(|f| {
            let bytes = std::fs::read(f).ok()?;
            let parsed = skillbox_skill::document::parse(&bytes, None).ok()?;
            Some((parsed.declaration.name, parsed.declaration.description))
        })
        .collect();
    skills.sort();
    skills.dedup_by(|a, b| a.0 == b.0);
    assert!(skills.len() >= 200, "corpus too small");
    skills
}

/// An offer of these (name, description) skills (the network tests use it too).
pub(crate) fn offer(skills: &[(String, String)]) -> Offer {
    Offer {
        skills: skills
            .iter()
            .map(|(name, description)| OfferedSkill {
                name: name.clone(),
                description: description.clone(),
                provider: "local".into(),
                required_sources: vec![],
                limits: Default::default(),
                declaration_digest: format!("sha256:{}", "cd".repeat(32)),
                guard: None,
            })
            .collect(),
        boxes: vec![AcceptedBox {
            platform: "insecure-dev".into(),
            measurement: "ab".into(),
            url: None,
        }],
    }
}

async fn node(seed: u8, config: PeersConfig) -> (PeersHandle, PayloadReceiver) {
    let mut key = [7u8; 32];
    key[0] = seed;
    start(config, keypair_from_seed(&key).expect("key"))
        .await
        .expect("node starts")
}

async fn full_addr(h: &PeersHandle) -> Multiaddr {
    let a = h.listen_addrs().await.expect("addrs")[0].clone();
    a.with(Protocol::P2p(h.local_peer_id()))
}

/// Memory-transport settings for the advert flood: live topics on, no index traffic needed.
fn live_config(board_max_entries: usize) -> PeersConfig {
    PeersConfig {
        listen: vec!["/memory/0".parse().expect("memory addr")],
        board_sync: false,
        board_max_entries,
        advert_rate_per_sec: 0.5,
        advert_burst: 5,
        gossip_heartbeat: Duration::from_millis(200),
        ..PeersConfig::default()
    }
}

async fn wait_on_board(observer: &PeersHandle, peers: &[PeerId], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = observer.board();
        if peers
            .iter()
            .all(|p| rows.iter().any(|r| r.peer == p.to_base58()))
        {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never reached the board");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flooding_adverts_is_rate_limited_and_fresh_identities_evict_no_honest_entry() {
    let skills = corpus_skills();
    // The observer's board holds 4 entries: itself and two honest nodes leave one free.
    let (observer, _o) = node(100, live_config(4)).await;
    observer
        .set_offer(offer(&skills[0..1]))
        .await
        .expect("offer");
    let boot = full_addr(&observer).await;
    let mut events = observer.subscribe();
    let mut keep = Vec::new();
    let mut honest = Vec::new();
    for (i, seed) in [101u8, 102].into_iter().enumerate() {
        let (h, inbox) = node(seed, live_config(64)).await;
        h.dial(boot.clone()).await.expect("dial");
        h.set_offer(offer(&skills[i + 1..i + 2]))
            .await
            .expect("offer");
        honest.push(h.local_peer_id());
        keep.push((h, inbox));
    }
    wait_on_board(&observer, &honest, "the honest adverts").await;

    // One node re-advertising as fast as it can (a new offer each time, so each is newer).
    let (flooder, _f) = node(103, live_config(64)).await;
    flooder.dial(boot.clone()).await.expect("dial");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    for i in 0..200 {
        let k = 3 + i % 50;
        flooder
            .set_offer(offer(&skills[k..k + 1]))
            .await
            .expect("offer");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let elapsed = started.elapsed().as_secs_f64() + 2.0;
    let (mut accepted, mut too_frequent) = (0, 0);
    let flooder_id = flooder.local_peer_id();
    loop {
        match events.try_recv() {
            Ok(NetworkEvent::AdvertAccepted { peer, .. }) if peer == flooder_id => accepted += 1,
            Ok(NetworkEvent::AdvertRefused { from, reason })
                if from == flooder_id && reason.contains("faster than its rate") =>
            {
                too_frequent += 1
            }
            Ok(_) | Err(TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    println!(
        "advert flood: {accepted} of the flooder's adverts taken, {too_frequent} refused as too \
         frequent, in {elapsed:.1} s"
    );
    // Burst 5, then 0.5 a second.
    assert!(
        f64::from(accepted) <= 5.0 + 0.5 * elapsed + 1.0,
        "{accepted} adverts taken in {elapsed:.1} s"
    );
    assert!(too_frequent >= 50, "only {too_frequent} refused");

    // Fresh identities, each advertising once: the board fills, nobody held is pushed out.
    for seed in 110u8..118 {
        let (s, inbox) = node(seed, live_config(64)).await;
        s.dial(boot.clone()).await.expect("dial");
        s.set_offer(offer(
            &skills[60 + usize::from(seed)..61 + usize::from(seed)],
        ))
        .await
        .expect("offer");
        keep.push((s, inbox));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rows = observer.board();
    let on_board: HashSet<String> = rows.iter().map(|r| r.peer.clone()).collect();
    assert!(on_board.len() <= 4, "{on_board:?}");
    for h in &honest {
        assert!(
            on_board.contains(&h.to_base58()),
            "an honest entry was evicted by fresh identities"
        );
    }
    drop(keep);
}
