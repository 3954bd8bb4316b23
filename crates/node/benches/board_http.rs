//! `GET /board` over real HTTP with a board fed 10,000 synthetic peers' signed adverts: its
//! first page, and a search no row matches (it reads every row, up to 20,000). Prints p50/p99
//! latency (bar: p50 <= 5 ms) and the response size.
//!
//! Run: `cargo bench -p skillbox-node --bench board_http` (release profile).
//! `BOARD_PEERS`, `BOARD_SKILLS` (per peer) and `BOARD_ROUNDS` override the defaults.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use skillbox_node::{Config, DataDir, Node};
use skillbox_peers::advert::sign_advert;
use skillbox_peers::{Board, BoardConfig, Offer};
use skillbox_testkit::bench::{env_usize, ms, peer_key, percentile};
use skillbox_testkit::skills::offered_skill;

fn main() {
    let peers = env_usize("BOARD_PEERS", 10_000);
    let skills = env_usize("BOARD_SKILLS", 1);
    let rounds = env_usize("BOARD_ROUNDS", 200);

    let now = skillbox_peers::now_ms();
    let mut board = Board::new(BoardConfig::default());
    let t = Instant::now();
    for p in 0..peers {
        let key = peer_key(p);
        let offer = Offer {
            skills: (0..skills)
                .map(|i| {
                    offered_skill(
                        &format!("skill-{i}"),
                        &format!("Synthetic skill {i} of peer {p}, for the board bench."),
                        "openrouter",
                        &["spotify_songs"],
                    )
                })
                .collect(),
            boxes: vec![],
        };
        let bytes = sign_advert(&key, now, 1, &offer).expect("sign");
        board
            .ingest(&bytes, None, now)
            .expect("a synthetic advert is valid");
    }
    println!(
        "fed {peers} peers x {skills} skills in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.api.listen = "127.0.0.1:0".parse().expect("addr");
    DataDir::new(dir.path()).init(&config).expect("init");
    let token = DataDir::new(dir.path()).load_api_token().expect("token");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let node = Node::open(dir.path()).expect("open");
        node.attach_board(Arc::new(Mutex::new(board))).expect("attach");
        let listener = node.bind(None).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(node.serve(listener, async move {
            let _ = stopped.await;
        }));
        // The operator's token goes only over the node's socket (the URL's host is not read).
        let http = reqwest::Client::builder()
            .unix_socket(dir.path().join("api.sock"))
            .no_proxy()
            .build()
            .expect("a socket client");
        for (path, what) in [
            ("/board", "first page"),
            ("/board?q=astronomy", "search, no match"),
        ] {
            let url = format!("http://{addr}{path}");
            let mut times = Vec::with_capacity(rounds);
            let mut size = 0;
            let mut rows = 0;
            for r in 0..rounds + 5 {
                let t = Instant::now();
                let resp = http.get(&url).bearer_auth(&token).send().await.expect("GET /board");
                assert!(resp.status().is_success(), "{}", resp.status());
                let body = resp.bytes().await.expect("body");
                let took = t.elapsed();
                if r == 0 {
                    let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
                    rows = v["board"].as_array().map(Vec::len).unwrap_or(0);
                }
                size = body.len();
                // The first few warm the connection and allocator.
                if r >= 5 {
                    times.push(took);
                }
            }
            times.sort();
            println!(
                "GET {path} ({what}) over HTTP: {rows} rows, {:.1} KiB, {rounds} rounds: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms (bar p50 <= 5 ms)",
                size as f64 / 1024.0,
                ms(percentile(&times, 0.50)),
                ms(percentile(&times, 0.99)),
                ms(percentile(&times, 1.0)),
            );
        }
        let _ = stop.send(());
        let _ = server.await;
    });
}
