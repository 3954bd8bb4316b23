//! The disclosure ledger's cost: appending an entry (hash, sign, insert, move the signed head, in
//! one transaction as a call transition does, then the head file beside the store) and verifying
//! the whole ledger (chain, signatures, both heads, the index), for 1,000 and 10,000 entries in a
//! file-backed store (WAL, synchronous=FULL). Prints its figures.
//!
//! `cargo bench -p skillbox-node --bench ledger`

use std::time::Instant;

use ed25519_dalek::SigningKey;
use skillbox_node::ledger::{self, Entry, EntryKind, Item};
use skillbox_node::store::Store;

fn entry(i: u64) -> Entry {
    Entry {
        seq: 0,
        at: 1_700_000_000_000 + i,
        kind: if i.is_multiple_of(2) {
            EntryKind::Decision
        } else {
            EntryKind::Stake
        },
        call: format!("{i:032x}"),
        role: "caller".into(),
        peer: "12D3KooWBenchPeerIdBenchPeerIdBenchPeerIdBench".into(),
        skill: "taste".into(),
        box_url: Some("https://box.example:7443".into()),
        run: None,
        platform: Some("sev-snp".into()),
        measurement: Some("ab".repeat(48)),
        hardware_isolation: true,
        provider: Some("openai".into()),
        provider_host: Some("https://api.openai.com/v1".into()),
        decision: "allow".into(),
        decided_by: "rule:1".into(),
        sources: vec!["songs".into(), "diary".into()],
        items: if i.is_multiple_of(2) {
            vec![]
        } else {
            vec![
                Item {
                    stake: "request".into(),
                    source: None,
                    size_bucket: 1024,
                    digest: format!("hmac-sha256:{}", "0".repeat(64)),
                },
                Item {
                    stake: "source".into(),
                    source: Some("songs".into()),
                    size_bucket: 4096,
                    digest: format!("hmac-sha256:{}", "1".repeat(64)),
                },
            ]
        },
        answers: None,
        box_code: None,
        prev: String::new(),
    }
}

fn main() {
    let key = SigningKey::from_bytes(&[7u8; 32]);
    for n in [1_000u64, 10_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("node.db")).expect("store");
        let t = Instant::now();
        for i in 0..n {
            ledger::append_now(&store, &key, entry(i)).expect("append");
        }
        let append = t.elapsed();
        let t = Instant::now();
        let v = ledger::verify_store(&store, &key.verifying_key()).expect("verify");
        let verify = t.elapsed();
        assert!(v.ok && v.entries == n, "{v:?}");
        let t = Instant::now();
        let lines = ledger::list(
            &store,
            &ledger::Filter {
                source: Some("songs".into()),
                ..Default::default()
            },
        )
        .expect("list");
        let list = t.elapsed();
        let t = Instant::now();
        let csv = ledger::to_csv(&lines).expect("csv");
        let export = t.elapsed();
        println!(
            "ledger n={n}: append {:.0} µs/entry (own fsync'd transaction and head file each), verify all {:.1} ms ({:.1} µs/entry), list by source {:.1} ms, CSV {:.1} ms ({} KiB)",
            append.as_secs_f64() * 1e6 / n as f64,
            verify.as_secs_f64() * 1e3,
            verify.as_secs_f64() * 1e6 / n as f64,
            list.as_secs_f64() * 1e3,
            export.as_secs_f64() * 1e3,
            csv.len() / 1024
        );
    }
}
