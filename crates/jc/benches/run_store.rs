//! What the run store adds to a run, printed as figures: `cargo bench --bench run_store`.
//!
//! The writes one run makes (open, two stakes, a submit, "at the provider", the result with
//! its stakes removed, the delete), with the sizes of a small call (a 4 KiB program record, two
//! 3 KiB stakes, a 6 KiB result), one run after the other on one thread: the time is the cost
//! the store's connection lock serialises, per run. WAL, `synchronous=NORMAL` (see store.rs).

use std::time::{Duration, Instant};

use skillbox_jc::program::Role;
use skillbox_jc::run::store::{KeyFile, RunStore};

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // `cargo test --benches` runs bench targets with no work to do; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let key = KeyFile::load_or_create(&dir.path().join("store.key")).expect("key");
    let store = RunStore::open(&dir.path().join("runs.sqlite"), &key).expect("store");
    let (record, stake, result) = (vec![7u8; 4096], vec![8u8; 3072], vec![9u8; 6144]);
    let n = 2000;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("{i:032x}");
        let t = Instant::now();
        store.put_run(&id, 1, &record).expect("open");
        store.put_stake(&id, Role::Owner, &stake).expect("stake");
        store.put_stake(&id, Role::Caller, &stake).expect("stake");
        store.put_run(&id, 2, &record).expect("submit");
        store.put_run(&id, 3, &record).expect("at provider");
        store.finish(&id, 4, &result).expect("result");
        store.delete(&[id]).expect("delete");
        times.push(t.elapsed());
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / n as u32;
    println!(
        "run store writes per run (7 writes: open, 2 stakes, submit, at provider, result, delete; {n} runs):"
    );
    println!(
        "  p50 {:?}  p99 {:?}  mean {:?}  max {:?}  => at most {:.0} runs/s through the store's lock",
        pct(&times, 0.5),
        pct(&times, 0.99),
        mean,
        times[n - 1],
        1.0 / mean.as_secs_f64()
    );
}
