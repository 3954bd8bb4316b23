//! Parse + project + validate over the 419-file corpus: documents per second on one core.
//! Bar (design §12): ≥ 20,000 documents/s. Run: `cargo bench -p skillbox-skill --bench corpus`.

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skillbox_skill::{check_skill, openwop};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/skills-corpus");
    let manifest = std::fs::read_to_string(root.join("manifest.tsv")).expect("manifest.tsv");
    manifest
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next())
        .map(|p| {
            let folder = Path::new(p)
                .parent()
                .and_then(|f| f.file_name())
                .and_then(|n| n.to_str());
            (
                folder.unwrap_or("x").to_owned(),
                std::fs::read(root.join(p)).expect("corpus file"),
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let docs = corpus();
    let mut group = c.benchmark_group("skill-document");
    group.throughput(Throughput::Elements(docs.len() as u64));
    group.bench_function("parse+project+validate corpus (419 docs)", |b| {
        b.iter(|| {
            let mut ok = 0usize;
            for (name, bytes) in &docs {
                if check_skill(bytes, Some(name), openwop::DEFAULT_NAMESPACE).is_ok() {
                    ok += 1;
                }
            }
            ok
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
