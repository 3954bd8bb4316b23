//! The pattern index: finds every body n-gram and canary pattern in a symbol stream in one pass.
//!
//! Every pattern is at least [`MIN_KEY`] symbols long. Patterns are keyed by their first eight
//! symbols (or four, for the few shorter canary patterns) packed into an integer; a scan keeps the
//! last eight symbols in a register, so each position costs one bit test in a 64 Kib filter and,
//! rarely, one hash lookup plus a slice compare per candidate. Cheaper to build and to scan than
//! a general multi-pattern automaton, for the one kind of pattern set the guard has.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The shortest pattern the index takes.
pub const MIN_KEY: usize = 4;
const LONG_KEY: usize = 8;
const FILTER_BITS: u32 = 16;

/// Keys are already mixed: the hasher passes them through.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Fibonacci hashing: the top bits (the filter's) depend on every key bit; the fold brings them
/// down for the hash map's bucket bits.
#[inline(always)]
fn mix(k: u64) -> u64 {
    let z = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^ (z >> 29)
}

#[derive(Default)]
struct Table {
    /// Mixed key -> range in `ids`.
    map: HashMap<u64, (u32, u32), BuildHasherDefault<PassThrough>>,
    ids: Vec<u32>,
    filter: Vec<u64>,
}

impl Table {
    fn build(mut entries: Vec<(u64, u32)>) -> Table {
        entries.sort_unstable();
        let mut t = Table {
            filter: vec![0; 1 << (FILTER_BITS - 6)],
            ..Table::default()
        };
        let mut i = 0;
        while i < entries.len() {
            let key = entries[i].0;
            let start = t.ids.len() as u32;
            while i < entries.len() && entries[i].0 == key {
                t.ids.push(entries[i].1);
                i += 1;
            }
            t.map.insert(key, (start, t.ids.len() as u32 - start));
            let bit = (key >> (64 - FILTER_BITS)) as usize;
            t.filter[bit >> 6] |= 1 << (bit & 63);
        }
        t
    }

    #[inline(always)]
    fn get(&self, key: u64) -> &[u32] {
        let bit = (key >> (64 - FILTER_BITS)) as usize;
        if self.filter[bit >> 6] & (1 << (bit & 63)) == 0 {
            return &[];
        }
        match self.map.get(&key) {
            Some(&(s, n)) => &self.ids[s as usize..(s + n) as usize],
            None => &[],
        }
    }

    fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Patterns by id, and the tables that find them.
#[derive(Default)]
pub struct Index {
    flat: Vec<u8>,
    spans: Vec<(u32, u32)>,
    long: Table,
    short: Table,
}

fn pack(s: &[u8]) -> u64 {
    s.iter().fold(0u64, |k, &b| (k << 8) | u64::from(b))
}

impl Index {
    /// Build from patterns (each at least [`MIN_KEY`] symbols; shorter ones are never found).
    /// Pattern ids are positions in `patterns`.
    pub fn build(patterns: &[Vec<u8>]) -> Index {
        let mut flat = Vec::with_capacity(patterns.iter().map(Vec::len).sum());
        let mut spans = Vec::with_capacity(patterns.len());
        let mut long = Vec::new();
        let mut short = Vec::new();
        for (id, p) in patterns.iter().enumerate() {
            spans.push((flat.len() as u32, p.len() as u32));
            flat.extend_from_slice(p);
            if p.len() >= LONG_KEY {
                long.push((mix(pack(&p[..LONG_KEY])), id as u32));
            } else if p.len() >= MIN_KEY {
                short.push((mix(pack(&p[..MIN_KEY])), id as u32));
            }
        }
        Index {
            flat,
            spans,
            long: Table::build(long),
            short: Table::build(short),
        }
    }

    fn pattern(&self, id: u32) -> &[u8] {
        let (s, n) = self.spans[id as usize];
        &self.flat[s as usize..(s + n) as usize]
    }

    /// Call `found` with the id of every pattern occurrence in `stream` (overlapping ones too).
    pub fn scan(&self, stream: &[u8], mut found: impl FnMut(u32)) {
        let mut window = 0u64;
        let short = !self.short.is_empty();
        for (i, &b) in stream.iter().enumerate() {
            window = (window << 8) | u64::from(b);
            if short && i + 1 >= MIN_KEY {
                let start = i + 1 - MIN_KEY;
                for &id in self.short.get(mix(window & 0xffff_ffff)) {
                    if stream[start..].starts_with(self.pattern(id)) {
                        found(id);
                    }
                }
            }
            if i + 1 >= LONG_KEY {
                let start = i + 1 - LONG_KEY;
                for &id in self.long.get(mix(window)) {
                    if stream[start..].starts_with(self.pattern(id)) {
                        found(id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find_all(idx: &Index, s: &[u8]) -> Vec<(u32, usize)> {
        let mut out = Vec::new();
        let mut n = 0;
        idx.scan(s, |id| {
            out.push((id, n));
            n += 1;
        });
        out
    }

    #[test]
    fn finds_every_occurrence_of_every_pattern() {
        let pats: Vec<Vec<u8>> = vec![
            b"abcdefgh".to_vec(),
            b"abcdefghij".to_vec(),
            b"cdefghijkl".to_vec(),
            b"wxyz".to_vec(),
            b"wxyzw".to_vec(),
            b"abc".to_vec(), // shorter than MIN_KEY: never found
        ];
        let idx = Index::build(&pats);
        let ids: Vec<u32> = find_all(&idx, b"..abcdefghijkl..wxyzwxyzw..abcdefgh")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let count = |id| ids.iter().filter(|&&x| x == id).count();
        assert_eq!(count(0), 2);
        assert_eq!(count(1), 1);
        assert_eq!(count(2), 1);
        assert_eq!(count(3), 2);
        assert_eq!(count(4), 2);
        assert_eq!(count(5), 0);
        assert!(find_all(&idx, b"abcdefg").is_empty());
        assert!(find_all(&Index::build(&[]), b"anything at all").is_empty());
    }

    #[test]
    fn agrees_with_a_naive_search() {
        // Deterministic pseudo-random patterns over a small alphabet (many shared prefixes).
        let mut x = 1u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            (x >> 60) as u8 % 3
        };
        let hay: Vec<u8> = (0..3000).map(|_| next()).collect();
        let pats: Vec<Vec<u8>> = (0..200)
            .map(|i| {
                let len = 4 + i % 9;
                let at = (i * 13) % (hay.len() - len);
                if i % 2 == 0 {
                    hay[at..at + len].to_vec()
                } else {
                    (0..len).map(|_| next()).collect()
                }
            })
            .collect();
        let idx = Index::build(&pats);
        let mut got = vec![0usize; pats.len()];
        idx.scan(&hay, |id| got[id as usize] += 1);
        for (id, p) in pats.iter().enumerate() {
            let want = hay.windows(p.len()).filter(|w| *w == p.as_slice()).count();
            assert_eq!(got[id], want, "pattern {id}");
        }
    }
}
