//! The leak scans: markers (unique strings in a skill body, a key, a source) must not appear
//! where they do not belong — answers, logs, payloads, another party's store.

use std::path::Path;

/// Panic, quoting the place, when any of `markers` is in `haystack` (`what` names it).
pub fn assert_no_markers(what: &str, haystack: &str, markers: &[&str]) {
    for m in markers {
        if let Some(i) = haystack.find(m) {
            let around = &haystack[floor(haystack, i.saturating_sub(200))
                ..ceil(haystack, (i + m.len() + 200).min(haystack.len()))];
            panic!("marker {m:?} leaked into {what}: …{around}…");
        }
    }
}

/// [`assert_no_markers`] for every 8-byte stretch of `secret`: no part of it long enough to
/// tell it (a key pasted where a name goes must not come back even cut short or half quoted).
pub fn assert_no_part_of(what: &str, haystack: &str, secret: &str) {
    let parts: Vec<&str> = (0..=secret.len().saturating_sub(8))
        .filter_map(|i| secret.get(i..i + 8))
        .collect();
    assert_no_markers(what, haystack, &parts);
}

fn floor(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Whether `needle` stands anywhere in `hay` (bytes: a store file is not text).
pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Every byte of a node's store files in `dir` (the database, its WAL and shared memory).
pub fn store_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for f in ["node.db", "node.db-wal", "node.db-shm"] {
        if let Ok(b) = std::fs::read(dir.join(f)) {
            out.extend(b);
        }
    }
    out
}

/// Every byte of every file under `root` (a data dir: its store, config, keys, logs), for a leak
/// scan of everything a node or a test left there.
pub fn every_file_under(root: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.extend(b);
            }
        }
    }
    out
}
