#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_finds_skills_by_their_words_survives_a_flood_and_forgets_who_left() {
    let skills = corpus_skills();
    let mut nodes: Vec<PeersHandle> = Vec::new();
    let mut _inboxes = Vec::new();
    let (first, inbox) = node(0, config()).await;
    let boot = full_addr(&first).await;
    nodes.push(first);
    _inboxes.push(inbox);
    for i in 1..NODES {
        let (h, inbox) = node(
            i as u8,
            PeersConfig {
                bootstrap: vec![boot.clone()],
                ..config()
            },
        )
        .await;
        // A second, random-ish contact, so the network is not a star around node 0.
        let other = full_addr(&nodes[(i * 7) % nodes.len()]).await;
        let _ = h.dial(other).await;
        nodes.push(h);
        _inboxes.push(inbox);
    }
    // Let every routing table fill (each node bootstraps on its first connection).
    tokio::time::sleep(Duration::from_secs(4)).await;

    let mut announced: Vec<_> = nodes.iter().map(PeersHandle::subscribe).collect();
    for (i, h) in nodes.iter().enumerate() {
        let mine = &skills[i * SKILLS_PER_NODE..(i + 1) * SKILLS_PER_NODE];
        h.set_offer(offer(mine)).await.expect("offer");
    }
    // Every node's provider records have reached the servers closest to each key (on a loaded
    // machine this takes a while: the wait is for the announcements, not a fixed time).
    let deadline = Instant::now() + Duration::from_secs(240);
    for rx in &mut announced {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx.recv()).await {
                Ok(Ok(NetworkEvent::Indexed { .. })) => break,
                Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) | Err(_) => panic!("a node never finished announcing"),
            }
        }
    }

    // Every skill is searched from two other nodes by its description.
    let mut asks = Vec::new();
    for (k, (name, description)) in skills[..NODES * SKILLS_PER_NODE].iter().enumerate() {
        let provider = k / SKILLS_PER_NODE;
        for hop in [1, NODES / 2] {
            let searcher = (provider + hop + k) % NODES;
            let searcher = if searcher == provider {
                (searcher + 1) % NODES
            } else {
                searcher
            };
            asks.push((searcher, provider, name.clone(), description.clone()));
        }
    }
    let mut found = 0;
    let mut top = 0;
    let mut missed = Vec::new();
    for chunk in asks.chunks(4) {
        let results = join_all(
            chunk
                .iter()
                .map(|(s, p, _, d)| finds(&nodes[*s], d, &nodes[*p])),
        )
        .await;
        for ((s, p, name, description), ok) in chunk.iter().zip(results) {
            if ok {
                found += 1;
                // The fetched advert is on the searcher's board, and the intent's scoring puts
                // the right skill first among what the board now holds.
                let rows = nodes[*s].board();
                assert!(
                    rows.iter().any(
                        |r| r.peer == nodes[*p].local_peer_id().to_base58() && &r.skill == name
                    ),
                    "{name} not cached on the searcher's board"
                );
                let candidates: Vec<skillbox_calls::intent::Candidate<'_>> =
                    rows.iter().map(Into::into).collect();
                let ranked = skillbox_calls::intent::rank(description, &candidates);
                if ranked.first().is_some_and(|r| &r.skill == name) {
                    top += 1;
                }
            } else {
                missed.push(name.clone());
            }
        }
    }
    let rate = found as f64 / asks.len() as f64;
    println!(
        "index: {found}/{} searches found the provider ({:.1} %), {top} ranked it first; missed: {missed:?}",
        asks.len(),
        rate * 100.0
    );
    assert!(
        rate >= 0.99,
        "find rate {rate:.3} below 0.99; missed {missed:?}"
    );

    // A flooder: thousands of provider records, some under honest skills' keys.
    let mut events: Vec<_> = nodes.iter().map(PeersHandle::subscribe).collect();
    let (flooder, _flood_inbox) = node(
        200,
        PeersConfig {
            bootstrap: vec![boot.clone()],
            ..config()
        },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while flooder.peers().await.expect("peers").is_empty() {
        assert!(Instant::now() < deadline, "the flooder did not connect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut keys: Vec<Vec<u8>> = (0..1000u32)
        .map(|i| skillbox_peers::index::term_key(&format!("flood{i}"), 0).to_vec())
        .collect();
    for (_, description) in &skills[..10] {
        let vocab = skillbox_calls::vocabulary::query_vocabulary(description);
        keys.extend(lookup_keys(&vocab).all().map(|k| k.to_vec()));
    }
    flooder.provide_raw_keys(keys).await.expect("flood");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let flooder_id = flooder.local_peer_id();
    let mut refused = 0;
    for rx in &mut events {
        loop {
            match rx.try_recv() {
                Ok(NetworkEvent::ProviderRecordRefused {
                    provider,
                    reason: ProviderRefusal::RateLimited,
                }) if provider == flooder_id => refused += 1,
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(_) => break,
            }
        }
    }
    println!("flood: servers refused {refused} of the flooder's provider records for its rate");
    assert!(
        refused > 1000,
        "the flood was not limited: {refused} refused"
    );
    // Honest skills are still found, the flooded ones included.
    let mut after = 0;
    let checks: Vec<&(usize, usize, String, String)> = asks.iter().step_by(4).collect();
    for chunk in checks.chunks(4) {
        let results = join_all(
            chunk
                .iter()
                .map(|(s, p, _, d)| finds(&nodes[*s], d, &nodes[*p])),
        )
        .await;
        after += results.into_iter().filter(|ok| *ok).count();
    }
    let after_rate = after as f64 / checks.len() as f64;
    println!("after the flood: {after}/{} found", checks.len());
    assert!(
        after_rate >= 0.99,
        "after the flood only {after_rate:.3} found"
    );

    // A provider that leaves is no longer named once its records' TTL has passed.
    let leaving = 1;
    let (_, description) = &skills[leaving * SKILLS_PER_NODE];
    nodes[leaving].shutdown().await;
    let left_at = Instant::now();
    let searcher = &nodes[(leaving + 3) % NODES];
    let gone = nodes[leaving].local_peer_id();
    // Its records outlive it until their TTL: the index still names it now (so what follows
    // shows the TTL at work, not a failed fetch).
    let outcome = searcher.search(description).await.expect("search");
    assert!(
        outcome.named.contains(&gone),
        "a provider gone for only {:?} is no longer named",
        left_at.elapsed()
    );
    tokio::time::sleep(TTL + Duration::from_secs(3)).await;
    let outcome = searcher.search(description).await.expect("search");
    assert!(
        !outcome.named.contains(&gone) && !outcome.peers.contains(&gone),
        "a provider gone for {:?} is still found",
        left_at.elapsed()
    );
    // While a staying provider of another skill is still found: its node republished.
    let stay = 2;
    assert!(
        finds(
            &nodes[(stay + 5) % NODES],
            &skills[stay * SKILLS_PER_NODE].1,
            &nodes[stay]
        )
        .await,
        "a staying provider was forgotten past the TTL"
    );
    let _ = flooder;
    let live: HashSet<_> = nodes.iter().map(PeersHandle::local_peer_id).collect();
    assert_eq!(live.len(), NODES);
}


fn config() -> PeersConfig {
    PeersConfig {
        listen: vec!["/memory/0".parse().expect("memory addr")],
        kad_server: true,
        live_categories: vec![],
        board_sync: false,
        index_ttl: TTL,
        index_republish: Duration::from_secs(15),
        // An honest node here provides 18 keys; the flooder's ~400 a server run past both.
        index_rate_per_sec: 1.0,
        index_burst: 64,
        index_max_keys_per_provider: 128,
        // A loaded 2-core machine runs 52 nodes in debug builds: generous, as the wait for
        // announcements above.
        search_timeout: Duration::from_secs(30),
        ..PeersConfig::default()
    }
}


/// Search `text` from `searcher`; whether `provider`'s verified advert came back.
async fn finds(searcher: &PeersHandle, text: &str, provider: &PeersHandle) -> bool {
    let started = Instant::now();
    let outcome = searcher.search(text).await.expect("search runs");
    let ok = outcome.peers.contains(&provider.local_peer_id());
    if !ok || std::env::var_os("INDEX_TEST_VERBOSE").is_some() {
        println!(
            "search {:?}: {} lookups, {} named, {} fetched, {} refused, {} on board in {:?}",
            text.chars().take(40).collect::<String>(),
            outcome.lookups,
            outcome.named.len(),
            outcome.fetched,
            outcome.refused,
            outcome.peers.len(),
            started.elapsed()
        );
    }
    ok
}

