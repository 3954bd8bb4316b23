//! Group commit's effect: W writers at once, each making 200 writes the size of a call
//! transition (one row updated in its own atomic change) to a file store (WAL,
//! synchronous=FULL). Prints writes/s, commits (fsyncs) per write and the mean latency of an
//! acknowledged write for W = 1, 8, 64, 256. With one commit per write (the store before group
//! commit) throughput stays at the W = 1 figure whatever W is: the W = 1 row is that baseline.
//!
//! `cargo bench -p skillbox-node --bench store`

use std::time::{Duration, Instant};

use skillbox_node::store::Store;

const PER_WRITER: usize = 200;

fn run(writers: usize) -> (f64, f64, Duration) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&tmp.path().join("node.db")).expect("open");
    let record = "x".repeat(1500);
    store
        .write(|tx| {
            for w in 0..writers {
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2)",
                    (format!("call-{w}"), record.as_bytes()),
                )?;
            }
            Ok(())
        })
        .expect("seed");
    let before = store.write_stats();
    let barrier = std::sync::Barrier::new(writers);
    let started = Instant::now();
    let latency: Duration = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (store, barrier, record) = (&store, &barrier, &record);
                s.spawn(move || {
                    barrier.wait();
                    let mut total = Duration::ZERO;
                    for i in 0..PER_WRITER {
                        let t = Instant::now();
                        store
                            .write(|tx| {
                                tx.execute(
                                    "UPDATE meta SET value = ?2 WHERE key = ?1",
                                    (format!("call-{w}"), format!("{i}{record}").as_bytes()),
                                )?;
                                Ok(())
                            })
                            .expect("write");
                        total += t.elapsed();
                    }
                    total
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).sum()
    });
    let took = started.elapsed().as_secs_f64();
    let after = store.write_stats();
    let writes = (after.writes - before.writes) as f64;
    let commits = (after.commits - before.commits) as f64;
    (
        writes / took,
        commits / writes.max(1.0),
        latency / (writers * PER_WRITER) as u32,
    )
}

fn main() {
    println!("writers  writes/s  commits/write  mean latency");
    let mut base = None;
    for writers in [1usize, 8, 64, 256] {
        let (rate, per, lat) = run(writers);
        let b = *base.get_or_insert(rate);
        println!(
            "{writers:>7} {rate:>9.0} {per:>14.3} {:>10.2} ms   ({:.1}× the one-writer rate)",
            lat.as_secs_f64() * 1000.0,
            rate / b
        );
    }
}
