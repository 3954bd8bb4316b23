//! Canonical bytes of a program-sized document (about 1 KB: nested objects, hex strings,
//! integers, an escaped string), typed and parsed, by this crate and by the reference
//! (`serde_json_canonicalizer`). Run: `cargo bench -p skillbox-jcs --bench canonical`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Serialize)]
struct Party {
    node_key: String,
    peer: String,
    hpke: String,
    role: &'static str,
}

#[derive(Serialize)]
struct Document {
    version: u32,
    call_id: String,
    parties: Vec<Party>,
    skill: &'static str,
    digest: String,
    limits: Value,
    created_at: u64,
    expires_at: u64,
    nonce: String,
    sources: Vec<&'static str>,
    request_digest: String,
}

fn document() -> Document {
    Document {
        version: 1,
        call_id: format!("c-{:032x}", 0x0123_4567_89ab_cdef_u64),
        parties: (0..2)
            .map(|i| Party {
                node_key: format!("{i:064x}"),
                peer: "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdef".into(),
                hpke: format!("{:064x}", i + 7),
                role: if i == 0 { "caller" } else { "owner" },
            })
            .collect(),
        skill: "taste",
        digest: format!("sha256:{:064x}", 5),
        limits: json!({"max_tokens": 512, "timeout_ms": 30000, "daily": 100,
            "nested": {"z": 1, "a": [1, 2, "x\n\u{1}é"]}}),
        created_at: 1_765_000_000,
        expires_at: 1_765_000_600,
        nonce: format!("{:032x}", 9),
        sources: vec!["a", "b"],
        request_digest: format!("{:064x}", 11),
    }
}

fn canonical(c: &mut Criterion) {
    let typed = document();
    let parsed = serde_json::to_value(&typed).expect("serializes");
    assert_eq!(
        skillbox_jcs::to_vec(&typed).expect("serializes"),
        serde_json_canonicalizer::to_vec(&typed).expect("serializes")
    );
    c.bench_function("typed/jcs", |b| {
        b.iter(|| skillbox_jcs::to_vec(black_box(&typed)))
    });
    c.bench_function("typed/reference", |b| {
        b.iter(|| serde_json_canonicalizer::to_vec(black_box(&typed)))
    });
    c.bench_function("parsed/jcs", |b| {
        b.iter(|| skillbox_jcs::value_to_vec(black_box(&parsed)))
    });
    c.bench_function("parsed/reference", |b| {
        b.iter(|| serde_json_canonicalizer::to_vec(black_box(&parsed)))
    });
}

criterion_group!(benches, canonical);
criterion_main!(benches);
