//! The skill index at internet scale, simulated: 100,000 peers (1,000,000 with
//! `INDEX_SIM_PEERS=1000000`), each offering a few skills drawn from the corpus's SKILL.md
//! descriptions, on Kademlia's own key and XOR distance types (`libp2p::kad::KBucketKey`,
//! `KBucketDistance`), no sockets. Prints lookup hops, messages per query, provider records and
//! announcements per DHT server, and the share of queries that find the right skill's provider.
//! Run: `cargo bench --workspace --bench index_sim` (env INDEX_SIM_PEERS, INDEX_SIM_SKILLS,
//! INDEX_SIM_QUERIES override the sizes).
//!
//! Assumptions, printed with the figures:
//! - every peer is online, reachable and a DHT server; no churn, no failed or slow answers;
//! - each routing table is full: for every k-bucket, up to k = 20 peers drawn at random from the
//!   peers at that distance (a stable network's table; real ones prefer long-lived peers);
//! - lookups are libp2p-kad's iterative ones: alpha = 3 requests a round, ending when the k
//!   closest peers seen have all answered; a round is a hop;
//! - a provider's ADD_PROVIDER reaches the k peers closest to the key (the provider's own lookup
//!   is measured separately: the share of the true k closest it reaches);
//! - a server keeps the first `MAX_PROVIDERS_PER_KEY` providers per key (libp2p's rule), in the
//!   order the providers announced (random);
//! - a search is the node's: the request's keyword keys (`lookup_keys`, at most `MAX_LOOKUPS`)
//!   looked up in parallel, the category's shards after them only if they named nobody, at most
//!   `search_max_fetches` (32) providers' adverts fetched point to point,
//!   ranked with the intent's BM25; the request is the skill's description;
//! - skills repeat: the corpus has a few hundred descriptions, so at 100,000 peers each is
//!   offered by hundreds of peers. "Found" means a provider *of that skill* was fetched (any of
//!   them serves the call), not one given peer.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

use libp2p::PeerId;
use libp2p::kad::{ALPHA_VALUE, K_VALUE, KBucketDistance, KBucketKey, RecordKey, U256};
use skillbox_calls::vocabulary::{query_vocabulary, skill_vocabulary};
use skillbox_peers::index::{MAX_PROVIDERS_PER_KEY, lookup_keys, provide_keys};
use skillbox_testkit::bench::env_usize;

const SEARCH_MAX_FETCHES: usize = 32;

/// A small deterministic mixer: which peers fill a routing table, which skills a peer offers.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// (name, description) of the corpus's valid skills, descriptions only (no bodies): the files
/// `manifest.tsv` lists (first column, a path under the corpus folder).
fn corpus() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skill/tests/data/skills-corpus");
    let manifest = std::fs::read_to_string(root.join("manifest.tsv")).unwrap_or_default();
    let mut skills: Vec<(String, String)> = manifest
        .lines()
        .skip(1)
        .filter_map(|line| {
            let path = root.join(line.split('\t').next()?);
            let parsed = skillbox_skill::document::parse(&std::fs::read(path).ok()?, None).ok()?;
            Some((parsed.declaration.name, parsed.declaration.description))
        })
        .collect();
    skills.sort();
    skills.dedup_by(|a, b| a.0 == b.0);
    assert!(!skills.is_empty(), "no corpus at {}", root.display());
    skills
}

fn key_int(hashed: &[u8]) -> U256 {
    U256::from_big_endian(hashed)
}

/// The network: every peer's Kademlia key, sorted, so a k-bucket (the peers sharing a prefix
/// with one bit flipped) is one contiguous range.
struct Net {
    sorted: Vec<U256>,
    k: usize,
}

impl Net {
    fn range(&self, lo: U256, len_bits: usize) -> (usize, usize) {
        let hi = if len_bits >= 256 {
            None
        } else {
            lo.checked_add(U256::one() << len_bits)
        };
        let a = self.sorted.partition_point(|x| *x < lo);
        let b = match hi {
            Some(hi) => self.sorted.partition_point(|x| *x < hi),
            None => self.sorted.len(),
        };
        (a, b)
    }

    /// Peer `y`'s k-bucket `i`: up to k peers at distance [2^i, 2^(i+1)), fixed per (y, i).
    fn bucket(&self, y: usize, i: usize, out: &mut Vec<usize>) {
        let ky = self.sorted[y];
        let low_mask = if i == 0 {
            U256::zero()
        } else {
            (U256::one() << i) - U256::one()
        };
        let lo = (ky ^ (U256::one() << i)) & !low_mask;
        let (a, b) = self.range(lo, i);
        let n = b - a;
        if n <= self.k {
            out.extend(a..b);
        } else {
            for j in 0..self.k {
                let h = mix((y as u64) << 20 ^ (i as u64) << 8 ^ j as u64);
                out.push(a + (h % n as u64) as usize);
            }
        }
    }

    /// The k peers `y` knows that are closest to `target` (what a FIND_NODE answer holds).
    fn closest_known(&self, y: usize, target: U256, out: &mut Vec<usize>) {
        out.clear();
        let d = KBucketDistance(self.sorted[y] ^ target);
        let Some(top) = d.ilog2() else {
            out.push(y);
            return;
        };
        let mut i = top as i64;
        // The bucket holding the target first, then nearer buckets (all farther from the
        // target than the first) until k candidates.
        while i >= 0 && out.len() < self.k * 2 {
            self.bucket(y, i as usize, out);
            i -= 1;
        }
        out.push(y);
        out.sort_unstable_by_key(|p| KBucketDistance(self.sorted[*p] ^ target));
        out.dedup();
        out.truncate(self.k);
    }

    /// The true k closest peers to `target` (where provider records are stored).
    fn closest(&self, target: U256) -> Vec<usize> {
        let mut bits = 0;
        // The smallest subtree around the target holding at least 2k peers contains the k
        // closest.
        let (a, b) = loop {
            let mask = if bits >= 256 {
                U256::MAX
            } else {
                (U256::one() << bits) - U256::one()
            };
            let (a, b) = self.range(target & !mask, bits);
            if b - a >= 2 * self.k || bits >= 256 {
                break (a, b);
            }
            bits += 1;
        };
        let mut v: Vec<usize> = (a..b).collect();
        v.sort_unstable_by_key(|p| KBucketDistance(self.sorted[*p] ^ target));
        v.truncate(self.k);
        v
    }

    /// An iterative lookup from `from`: the peers asked, and the rounds (hops) it took.
    fn lookup(&self, from: usize, target: U256) -> (Vec<usize>, usize) {
        let alpha = ALPHA_VALUE.get();
        let mut shortlist: Vec<usize> = Vec::new();
        self.closest_known(from, target, &mut shortlist);
        let mut asked: HashSet<usize> = HashSet::new();
        asked.insert(from);
        let mut order = Vec::new();
        let mut rounds = 0;
        let mut answer = Vec::new();
        loop {
            let next: Vec<usize> = shortlist
                .iter()
                .take(self.k)
                .filter(|p| !asked.contains(p))
                .take(alpha)
                .copied()
                .collect();
            if next.is_empty() {
                break;
            }
            rounds += 1;
            for p in next {
                asked.insert(p);
                order.push(p);
                self.closest_known(p, target, &mut answer);
                shortlist.extend_from_slice(&answer);
            }
            shortlist.sort_unstable_by_key(|p| KBucketDistance(self.sorted[*p] ^ target));
            shortlist.dedup();
            shortlist.truncate(self.k * 4);
        }
        (order, rounds)
    }
}

struct Stat(Vec<f64>);

impl Stat {
    fn line(&mut self, what: &str) {
        let v = &mut self.0;
        if v.is_empty() {
            println!("  {what}: none");
            return;
        }
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
        println!(
            "  {what}: mean {mean:.1}, p50 {:.0}, p99 {:.0}, max {:.0}",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
}

fn main() {
    let peers = env_usize("INDEX_SIM_PEERS", 100_000);
    let per_peer = env_usize("INDEX_SIM_SKILLS", 3);
    let queries = env_usize("INDEX_SIM_QUERIES", 2_000);
    let k = K_VALUE.get();
    let skills = corpus();
    let started = Instant::now();

    // Peers, their keys and their skills (drawn from the corpus).
    let ids: Vec<PeerId> = (0..peers).map(|_| PeerId::random()).collect();
    let mut keyed: Vec<(U256, usize)> = ids
        .iter()
        .enumerate()
        .map(|(i, p)| (key_int(KBucketKey::from(*p).hashed_bytes()), i))
        .collect();
    keyed.sort_unstable_by_key(|(k, _)| *k);
    let net = Net {
        sorted: keyed.iter().map(|(k, _)| *k).collect(),
        k,
    };
    // Positions in `net.sorted` stand for peers from here on.
    let id_at: Vec<PeerId> = keyed.iter().map(|(_, i)| ids[*i]).collect();
    drop(keyed);
    drop(ids);
    let offers: Vec<Vec<u16>> = (0..peers)
        .map(|p| {
            let mut s: Vec<u16> = (0..per_peer)
                .map(|j| (mix((p as u64) << 8 | j as u64) % skills.len() as u64) as u16)
                .collect();
            s.sort_unstable();
            s.dedup();
            s
        })
        .collect();
    let vocab: Vec<_> = skills.iter().map(|(n, d)| skill_vocabulary(n, d)).collect();

    // Provider records: per index key, the providers in announcement order (random).
    let mut announce: Vec<usize> = (0..peers).collect();
    announce.sort_unstable_by_key(|p| mix(*p as u64 ^ 0xA11CE));
    let mut providers: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    let mut keys_provided = 0usize;
    for &p in &announce {
        let mut mine: HashSet<Vec<u8>> = HashSet::new();
        for &s in &offers[p] {
            for key in provide_keys(&id_at[p], &vocab[s as usize]) {
                mine.insert(key.to_vec());
            }
        }
        keys_provided += mine.len();
        for key in mine {
            providers.entry(key).or_default().push(p);
        }
    }
    // Where each key lives, what each server holds and how many announcements it receives.
    let mut held: HashMap<usize, usize> = HashMap::new();
    let mut received: HashMap<usize, usize> = HashMap::new();
    let mut stored_at: HashMap<Vec<u8>, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for (key, provs) in &providers {
        let target = key_int(KBucketKey::from(RecordKey::new(key)).hashed_bytes());
        let servers = net.closest(target);
        let kept: Vec<usize> = provs.iter().take(MAX_PROVIDERS_PER_KEY).copied().collect();
        for s in &servers {
            *held.entry(*s).or_default() += kept.len();
            *received.entry(*s).or_default() += provs.len();
        }
        stored_at.insert(key.clone(), (servers, kept));
    }
    let setup = started.elapsed();

    // A provider's own lookup for a sample of keys: does it reach the k closest?
    let mut reach = 0usize;
    let mut reach_total = 0usize;
    for (n, (key, (servers, _))) in stored_at.iter().enumerate().take(300) {
        let target = key_int(KBucketKey::from(RecordKey::new(key)).hashed_bytes());
        let from = (mix(n as u64 ^ 0xBEEF) % peers as u64) as usize;
        let (asked, _) = net.lookup(from, target);
        let asked: HashSet<usize> = asked.into_iter().collect();
        reach += servers.iter().filter(|s| asked.contains(s)).count();
        reach_total += servers.len();
    }

    // Searches: a random peer asks for a random offered skill by its description.
    let mut hops = Stat(Vec::new());
    let mut messages = Stat(Vec::new());
    let mut lookups_n = Stat(Vec::new());
    let (mut named, mut fetched_right, mut first) = (0usize, 0usize, 0usize);
    for q in 0..queries {
        let searcher = (mix(q as u64 ^ 0x5EA) % peers as u64) as usize;
        let owner = (mix(q as u64 ^ 0x0FF) % peers as u64) as usize;
        let right = offers[owner][q % offers[owner].len()] as usize;
        let description = &skills[right].1;
        let stages = lookup_keys(&query_vocabulary(description));
        let mut found: Vec<usize> = Vec::new();
        let mut seen = HashSet::new();
        let (mut max_rounds, mut msgs, mut looked) = (0, 0, 0);
        // The keywords' keys in parallel; the category's only if they named nobody.
        for (stage, keys) in [&stages.keywords, &stages.category].into_iter().enumerate() {
            if stage == 1 && !found.is_empty() {
                break;
            }
            let mut stage_rounds = 0;
            for key in keys {
                let target = key_int(KBucketKey::from(key.clone()).hashed_bytes());
                let (asked, rounds) = net.lookup(searcher, target);
                stage_rounds = stage_rounds.max(rounds);
                msgs += asked.len();
                looked += 1;
                if let Some((servers, kept)) = stored_at.get(key.as_ref())
                    && asked.iter().any(|a| servers.contains(a))
                {
                    for p in kept {
                        if seen.insert(*p) {
                            found.push(*p);
                        }
                    }
                }
            }
            max_rounds += stage_rounds;
        }
        if found.iter().any(|p| offers[*p].contains(&(right as u16))) {
            named += 1;
        }
        let fetched: Vec<usize> = found.into_iter().take(SEARCH_MAX_FETCHES).collect();
        msgs += fetched.len();
        if fetched.iter().any(|p| offers[*p].contains(&(right as u16))) {
            fetched_right += 1;
        }
        let rows: Vec<(String, usize)> = fetched
            .iter()
            .flat_map(|p| offers[*p].iter().map(move |s| (p.to_string(), *s as usize)))
            .collect();
        let candidates: Vec<skillbox_calls::intent::Candidate<'_>> = rows
            .iter()
            .map(|(peer, s)| skillbox_calls::intent::Candidate {
                peer,
                skill: &skills[*s].0,
                description: &skills[*s].1,
            })
            .collect();
        let ranked = skillbox_calls::intent::rank(description, &candidates);
        if ranked.first().is_some_and(|r| r.skill == skills[right].0) {
            first += 1;
        }
        hops.0.push(max_rounds as f64);
        messages.0.push(msgs as f64);
        lookups_n.0.push(looked as f64);
    }

    let pct = |n: usize, of: usize| 100.0 * n as f64 / of.max(1) as f64;
    println!(
        "skill index simulation: {peers} peers, {per_peer} skills each drawn from {} corpus \
         descriptions, k = {k}, alpha = {}, {MAX_PROVIDERS_PER_KEY} providers kept per key, \
         {queries} searches (setup {:.1?}, searches {:.1?})",
        skills.len(),
        ALPHA_VALUE.get(),
        setup,
        started.elapsed() - setup
    );
    println!(
        "  index keys: {} distinct, {:.1} provided per peer",
        providers.len(),
        keys_provided as f64 / peers as f64
    );
    let mut held_all: Vec<f64> = (0..peers)
        .map(|p| *held.get(&p).unwrap_or(&0) as f64)
        .collect();
    let holders = held.len();
    Stat(held_all.clone()).line("provider records held per DHT server (all servers)");
    held_all.retain(|h| *h > 0.0);
    Stat(held_all).line(&format!(
        "provider records per server holding any ({holders})"
    ));
    Stat(received.values().map(|v| *v as f64).collect())
        .line("ADD_PROVIDER announcements received per republish interval, per holding server");
    println!(
        "  a provider's lookup reaches {:.1} % of the key's true {k} closest servers",
        pct(reach, reach_total)
    );
    lookups_n
        .line("keys looked up per search (keywords in parallel, category shards if none named)");
    hops.line("hops per search (rounds of the slowest lookup)");
    messages.line("messages per search (lookup requests + advert fetches)");
    println!(
        "  searches whose lookups named a provider of the right skill: {:.2} %",
        pct(named, queries)
    );
    println!(
        "  ... and fetched one (at most {SEARCH_MAX_FETCHES} fetches): {:.2} %",
        pct(fetched_right, queries)
    );
    println!(
        "  ... and the intent ranked the right skill first: {:.2} %",
        pct(first, queries)
    );
}
