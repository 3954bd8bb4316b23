//! The board at 10,000 peers: what `GET /board` costs (the bar: p50 <= 5 ms) and its memory.
//! Run: `cargo bench -p skillbox-peers --bench board` (prints figures; env BOARD_PEERS,
//! BOARD_SKILLS, BOARD_ROUNDS override the sizes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use skillbox_peers::advert::sign_advert;
use skillbox_peers::{AcceptedBox, Board, BoardConfig, Offer, OfferedSkill};
use skillbox_testkit::bench::{env_usize, ms, peer_key, percentile};
use skillbox_testkit::skills::offered_skill;

/// Counts live heap bytes, so the board's memory is measured, not estimated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// CPU time of this thread: unlike wall time, not inflated by other work on a shared machine.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let peers = env_usize("BOARD_PEERS", 10_000);
    let skills = env_usize("BOARD_SKILLS", 2);
    let rounds = env_usize("BOARD_ROUNDS", 200);
    let now: u64 = 1_800_000_000_000;

    // Synthetic peers: each its own key, `skills` skills with realistic text sizes.
    let t = Instant::now();
    let adverts: Vec<Vec<u8>> = (0..peers)
        .map(|i| {
            let key = peer_key(i);
            let offer = Offer {
                skills: (0..skills)
                    .map(|s| OfferedSkill {
                        // Each its own digest, as real declarations have.
                        declaration_digest: format!("sha256:{:064x}", i * 31 + s),
                        ..offered_skill(
                            &format!("skill-{s}-of-{i}"),
                            &format!(
                                "Skill {s} of peer {i}: summarizes listening history into a \
                                 short report with highlights, trends and three recommendations."
                            ),
                            "openrouter",
                            &["spotify_songs", "calendar"],
                        )
                    })
                    .collect(),
                boxes: vec![AcceptedBox {
                    platform: "insecure-dev".into(),
                    measurement: "0".repeat(64),
                    url: Some("http://127.0.0.1:7300".into()),
                }],
            };
            sign_advert(&key, now - (i as u64 % 60_000), now, &offer)
                .expect("signing a synthetic advert")
        })
        .collect();
    let sign_time = t.elapsed();
    let wire_bytes: usize = adverts.iter().map(|a| a.len()).sum();

    let before = LIVE.load(Ordering::Relaxed);
    let mut board = Board::new(BoardConfig::default());
    let t = Instant::now();
    for a in &adverts {
        board
            .ingest(a, None, now)
            .expect("a synthetic advert is valid");
    }
    let ingest_time = t.elapsed();
    let board_bytes = LIVE.load(Ordering::Relaxed) - before;
    drop(adverts);

    let mut fast = Vec::with_capacity(rounds);
    let mut fast_cpu = Vec::with_capacity(rounds);
    let mut json_len = 0;
    let peak_before = LIVE.load(Ordering::Relaxed);
    PEAK.store(peak_before, Ordering::Relaxed);
    for r in 0..rounds {
        let (t, c) = (Instant::now(), thread_cpu());
        let json = board.snapshot_json(now + r as u64);
        fast.push(t.elapsed());
        fast_cpu.push(thread_cpu() - c);
        json_len = json.len();
        std::hint::black_box(json);
    }
    let snapshot_peak = PEAK.load(Ordering::Relaxed) - peak_before;

    let mut typed = Vec::with_capacity(rounds.min(50));
    for r in 0..rounds.min(50) {
        let t = Instant::now();
        let json = serde_json::to_vec(&board.snapshot(now + r as u64)).expect("rows serialize");
        typed.push(t.elapsed());
        std::hint::black_box(json);
    }
    fast.sort();
    fast_cpu.sort();
    typed.sort();

    let rows = peers * skills;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine load average (1/5/15 min): {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("board bench: {peers} peers x {skills} skills = {rows} rows, {rounds} rounds");
    println!(
        "  sign adverts (setup)          {:>9.1} ms ({:.0} adverts/s)",
        ms(sign_time),
        peers as f64 / sign_time.as_secs_f64()
    );
    println!(
        "  ingest (verify + insert)      {:>9.1} ms ({:.0} adverts/s, {:.1} MiB on the wire)",
        ms(ingest_time),
        peers as f64 / ingest_time.as_secs_f64(),
        mib(wire_bytes)
    );
    println!(
        "  GET /board body (snapshot_json) p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  ({:.1} MiB JSON)",
        ms(percentile(&fast, 0.50)),
        ms(percentile(&fast, 0.99)),
        ms(*fast.last().expect("rounds > 0")),
        mib(json_len)
    );
    println!(
        "    same, thread CPU time           p50 {:.3} ms  p99 {:.3} ms",
        ms(percentile(&fast_cpu, 0.50)),
        ms(percentile(&fast_cpu, 0.99))
    );
    println!(
        "  typed rows + serde_json       p50 {:.3} ms  p99 {:.3} ms",
        ms(percentile(&typed, 0.50)),
        ms(percentile(&typed, 0.99))
    );
    println!(
        "  memory: board {:.1} MiB ({} bytes/peer), extra peak while rendering {:.1} MiB",
        mib(board_bytes),
        board_bytes / peers.max(1),
        mib(snapshot_peak)
    );
    let bar = Duration::from_millis(5);
    println!(
        "  bar GET /board p50 <= 5 ms: {}",
        if percentile(&fast, 0.50) <= bar {
            "met"
        } else {
            "NOT met"
        }
    );
}
