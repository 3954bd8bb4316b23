//! The skill index's keys on Kademlia, and the rules a DHT server applies to provider records
//! it is asked to keep. Pure: no swarm, no clock of its own.
//!
//! A node *provides* (Kademlia ADD_PROVIDER) under one key per term of each offered skill's
//! [`Vocabulary`]; a search looks up the keys of its request's vocabulary, gets provider peer
//! ids, and fetches each provider's signed advert point to point. A key is the SHA-256 of a
//! domain-separated term and shard: a common term is spread over
//! [`skillbox_calls::vocabulary::shards`] keys, the provider registering under the one its peer
//! id selects, the searcher looking up all of them, so a server's bounded list per key
//! ([`MAX_PROVIDERS_PER_KEY`]) never hides the providers of a popular term.
//!
//! A full key does not keep its first holders for ever ([`key_slot`]): a peer id's shard is
//! ground offline in a few tries, so first come let ~160 free ids hold every slot of every
//! category key. A newcomer takes the slot of a held provider drawn at random from the address
//! group (IPv4 /24, IPv6 /48, as the server saw the connection) that holds the most slots, and
//! one group holds at most [`MAX_SLOTS_PER_GROUP`] slots of a key.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv6Addr;

use libp2p::kad::RecordKey;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use sha2::{Digest, Sha256};
use skillbox_calls::vocabulary::{CATEGORY_SHARDS, Vocabulary, shards};

use crate::rate::Buckets;

/// Keys a search looks up at most (in parallel).
pub const MAX_LOOKUPS: usize = 16;
/// Providers a DHT server keeps per key: libp2p's default (k = 20). Past it a newcomer takes a
/// held provider's slot by [`key_slot`]'s rule (libp2p's own, first come for ever, let ground
/// ids hold a key against every later provider). Sharding keeps a popular term's providers
/// under it per shard.
pub const MAX_PROVIDERS_PER_KEY: usize = libp2p::kad::K_VALUE.get();
/// Slots of one key that providers from one address group ([`AddressGroup`]) hold on a server
/// at most: a fifth of the key, so ids from one /24 or /48, however many, leave most of it to
/// others. A fifth newcomer from a full group takes one of its own group's slots.
pub const MAX_SLOTS_PER_GROUP: usize = 4;

const DOMAIN: &[u8] = b"skillbox/index/1";

/// The length of every index key: a SHA-256 digest ([`term_key`]). A DHT server refuses a
/// provider record under a key of any other length: no node of ours provides one.
pub const KEY_LEN: usize = 32;
/// Addresses a DHT server keeps with a provider record at most ([`record_addresses`]).
pub const MAX_RECORD_ADDRESSES: usize = 4;
/// Bytes of addresses a DHT server keeps with a provider record at most, all of them together.
/// Kademlia takes a record's addresses from the sender's ADD_PROVIDER as they come, up to its
/// 16 KiB message: kept whole, one identity held 16 KiB per key (256 keys a server), and a
/// GET_PROVIDERS answer naming such a record passed the 16 KiB a searcher reads, so every
/// searcher dropped every answer for the key and its honest providers were never found. 20
/// providers of 256 bytes each leave most of an answer to the closer peers.
pub const MAX_RECORD_ADDRESS_BYTES: usize = 256;

/// The index key of `term`'s shard `shard`.
pub fn term_key(term: &str, shard: u32) -> RecordKey {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update([0]);
    h.update(term.as_bytes());
    h.update([0]);
    h.update(shard.to_be_bytes());
    RecordKey::new(&h.finalize())
}

/// The term a category is indexed as (keywords are alphanumeric, so no keyword is one).
fn category_term(category: &str) -> String {
    format!("category:{category}")
}

/// Which of a term's `n` shards `peer` registers under: fixed per (peer, term), spread evenly.
fn shard_of(peer: &PeerId, term: &str, n: u32) -> u32 {
    let digest = Sha256::new()
        .chain_update(peer.to_bytes())
        .chain_update([0])
        .chain_update(term.as_bytes())
        .finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % n.max(1)
}

/// The keys `peer` provides a skill with this vocabulary under: one per keyword, plus the
/// category.
pub fn provide_keys(peer: &PeerId, vocab: &Vocabulary) -> Vec<RecordKey> {
    let mut keys: Vec<RecordKey> = vocab
        .keywords
        .iter()
        .map(|k| term_key(k, shard_of(peer, k, shards(k))))
        .collect();
    let category = category_term(vocab.category);
    keys.push(term_key(
        &category,
        shard_of(peer, &category, CATEGORY_SHARDS),
    ));
    keys
}

/// The keys a search for this vocabulary looks up, in two stages: every shard of each keyword
/// (rarest keyword first; a searcher takes the first [`MAX_LOOKUPS`]), then — only when those
/// named no provider — the category's shards. A category is shared by a fifteenth of all
/// skills, so its keys name the providers of the request least well; as a fallback they cost
/// nothing when a keyword found someone.
pub fn lookup_keys(vocab: &Vocabulary) -> LookupKeys {
    let mut keywords = Vec::new();
    for k in &vocab.keywords {
        for shard in 0..shards(k) {
            keywords.push(term_key(k, shard));
        }
    }
    keywords.truncate(MAX_LOOKUPS);
    let category = category_term(vocab.category);
    LookupKeys {
        keywords,
        category: (0..CATEGORY_SHARDS)
            .map(|shard| term_key(&category, shard))
            .collect(),
    }
}

/// What a search may tell DHT peers of the request (`index.search`). Every key a search looks
/// up reaches each DHT server on the lookup path with the searcher's peer id and address, and
/// a key is the unsalted SHA-256 of a public domain and the term: a dictionary reverses it, and
/// a Sybil placed near the key of a chosen word sees who asks for it. The request's rarest
/// words, the ones the keyword stage sends, are its most identifying.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchScope {
    /// Nothing: a request is ranked against the board (gossip, board syncs) only.
    Board,
    /// The request's category key only (one of fifteen categories), and — by the node's rule —
    /// only when the board holds no candidate for it.
    #[default]
    Category,
    /// The request's rarest words' keys first, then its category's: finds the providers the
    /// board lacks best, and tells DHT peers on the path those words.
    Terms,
}

/// The keys a search under `scope` looks up: [`lookup_keys`] under `terms`, the category's
/// alone under `category`, none under `board`.
pub fn search_keys(scope: SearchScope, vocab: &Vocabulary) -> LookupKeys {
    match scope {
        SearchScope::Board => LookupKeys::default(),
        SearchScope::Category => LookupKeys {
            keywords: Vec::new(),
            category: lookup_keys(vocab).category,
        },
        SearchScope::Terms => lookup_keys(vocab),
    }
}

/// What [`lookup_keys`] returns: the keyword keys, and the category's as the fallback.
#[derive(Clone, Debug, Default)]
pub struct LookupKeys {
    pub keywords: Vec<RecordKey>,
    pub category: Vec<RecordKey>,
}

impl LookupKeys {
    /// Both stages, keywords first.
    pub fn all(&self) -> impl Iterator<Item = &RecordKey> {
        self.keywords.iter().chain(&self.category)
    }
}

/// The union of [`provide_keys`] over several skills, without repeats.
pub fn offer_keys<'a>(
    peer: &PeerId,
    skills: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeSet<Vec<u8>> {
    skills
        .into_iter()
        .flat_map(|(name, description)| {
            provide_keys(
                peer,
                &skillbox_calls::vocabulary::skill_vocabulary(name, description),
            )
        })
        .map(|k| k.to_vec())
        .collect()
}

/// The addresses a DHT server keeps with a provider record: in the sender's order, the first
/// [`MAX_RECORD_ADDRESSES`] that fit in [`MAX_RECORD_ADDRESS_BYTES`] together (one longer than
/// what is left is skipped, a later shorter one may still fit). A record left without any is
/// answered with what the server's routing table holds for the provider (Kademlia's own rule).
pub fn record_addresses(addresses: Vec<Multiaddr>) -> Vec<Multiaddr> {
    let mut left = MAX_RECORD_ADDRESS_BYTES;
    let mut kept = Vec::new();
    for addr in addresses {
        if kept.len() == MAX_RECORD_ADDRESSES {
            break;
        }
        let len = addr.as_ref().len();
        if len <= left && !kept.contains(&addr) {
            left -= len;
            kept.push(addr);
        }
    }
    kept
}

/// Why a DHT server did not keep a provider record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderRefusal {
    /// The key is not [`KEY_LEN`] bytes: no index key. Refused before the gate is charged.
    MalformedKey,
    /// The key already names its [`MAX_PROVIDERS_PER_KEY`] providers and none of them may
    /// give up its slot (only the server's own record is held so). The gate is not charged.
    KeyFull,
    /// The server's store refused the record; the gate forgot the key again.
    StoreFull,
    /// The provider sent records faster than its rate.
    RateLimited,
    /// The provider already has its share of keys on this server.
    TooManyKeys,
}

/// What a DHT server allows one provider: a rate of new records and a number of keys held.
#[derive(Clone, Copy, Debug)]
pub struct ProviderLimits {
    pub rate_per_sec: f64,
    pub burst: f64,
    pub max_keys_per_provider: usize,
}

/// One key a provider holds on the server.
#[derive(Clone, Copy, Debug)]
struct Share {
    expires_ms: u64,
    group: AddressGroup,
}

/// The server side's bookkeeping per provider: a token bucket for new records and the keys
/// held, so one node flooding ADD_PROVIDER gets only its share and honest records stay.
pub struct ProviderGate {
    limits: ProviderLimits,
    rate: Buckets,
    /// Keys held per provider, with when each expires and the address group the provider
    /// registered it from (what [`key_slot`] counts the slot under).
    shares: HashMap<PeerId, HashMap<Vec<u8>, Share>>,
    /// Providers tracked at most; beyond this the ones whose keys all expired go first.
    max_providers: usize,
}

impl ProviderGate {
    pub fn new(limits: ProviderLimits, max_providers: usize) -> ProviderGate {
        ProviderGate {
            limits,
            rate: Buckets::new(limits.rate_per_sec, limits.burst),
            shares: HashMap::new(),
            max_providers,
        }
    }

    /// May `provider`'s record for `key` (expiring at `expires_ms`), sent from `group`, be kept?
    /// A new key spends one token of the provider's rate and needs room in its share; a refresh
    /// of a key held is free and keeps the group the key was registered from (a provider moving
    /// its ids to one group by refreshes would pass [`MAX_SLOTS_PER_GROUP`]).
    pub fn admit(
        &mut self,
        provider: PeerId,
        key: &[u8],
        group: AddressGroup,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<(), ProviderRefusal> {
        if !self.shares.contains_key(&provider) && self.shares.len() >= self.max_providers {
            self.shares.retain(|_, keys| {
                keys.retain(|_, s| s.expires_ms > now_ms);
                !keys.is_empty()
            });
            if self.shares.len() >= self.max_providers {
                return Err(ProviderRefusal::TooManyKeys);
            }
        }
        let keys = self.shares.entry(provider).or_default();
        keys.retain(|_, s| s.expires_ms > now_ms);
        if let Some(share) = keys.get_mut(key) {
            // A refresh of a key held (the provider's periodic republish) takes no new space
            // and spends no rate: an honest node republishing all its keys at once is never
            // refused, whatever its interval.
            share.expires_ms = expires_ms;
            return Ok(());
        }
        if !self.rate.take(&provider, now_ms) {
            return Err(ProviderRefusal::RateLimited);
        }
        if keys.len() >= self.limits.max_keys_per_provider {
            return Err(ProviderRefusal::TooManyKeys);
        }
        keys.insert(key.to_vec(), Share { expires_ms, group });
        Ok(())
    }

    /// The address group `provider` registered `key` from, while it holds it.
    pub fn group(&self, provider: &PeerId, key: &[u8]) -> Option<AddressGroup> {
        self.shares.get(provider)?.get(key).map(|s| s.group)
    }

    /// Forget `provider`'s `key` again: the record [`admit`](Self::admit) took was not stored,
    /// so it takes no room in the provider's share.
    pub fn forget(&mut self, provider: &PeerId, key: &[u8]) {
        if let Some(keys) = self.shares.get_mut(provider) {
            keys.remove(key);
            if keys.is_empty() {
                self.shares.remove(provider);
            }
        }
    }

    /// Keys currently held for `provider`.
    pub fn held(&self, provider: &PeerId, now_ms: u64) -> usize {
        self.shares.get(provider).map_or(0, |keys| {
            keys.values().filter(|s| s.expires_ms > now_ms).count()
        })
    }
}

/// Where a connection came from, as coarsely as one party's addresses usually are: an IPv4
/// /24, an IPv6 /48 (a site's allocation), or, on the in-process memory transport, the one
/// address (no remote party reaches it). A relayed connection counts under its relay's address:
/// the one the server sees. [`key_slot`] counts a key's slots per group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressGroup {
    V4([u8; 3]),
    V6([u8; 6]),
    Memory(u64),
    /// No IP address in the connection's: all such count as one group.
    Unknown,
}

impl AddressGroup {
    /// The group of a connection's remote address.
    pub fn of(addr: &Multiaddr) -> AddressGroup {
        for p in addr.iter() {
            match p {
                Protocol::Ip4(ip) => {
                    let [a, b, c, _] = ip.octets();
                    return AddressGroup::V4([a, b, c]);
                }
                Protocol::Ip6(ip) => return AddressGroup::of_ip6(ip),
                Protocol::Memory(port) => return AddressGroup::Memory(port),
                _ => {}
            }
        }
        AddressGroup::Unknown
    }

    fn of_ip6(ip: Ipv6Addr) -> AddressGroup {
        // An IPv4 peer seen through a dual-stack socket is its IPv4 /24, not one /48 for all.
        if let Some(v4) = ip.to_ipv4_mapped() {
            let [a, b, c, _] = v4.octets();
            return AddressGroup::V4([a, b, c]);
        }
        let o = ip.octets();
        AddressGroup::V6([o[0], o[1], o[2], o[3], o[4], o[5]])
    }
}

/// Draws the random choices of the index rules: SHA-256 of a seed and a counter. Seeded from
/// the OS's random source in a node, so a provider cannot
/// predict which slot its record takes; seeded by a test to replay the same draws.
pub struct Draw {
    seed: [u8; 32],
    counter: u64,
}

impl Draw {
    pub fn seeded(seed: [u8; 32]) -> Draw {
        Draw { seed, counter: 0 }
    }

    /// A draw no outsider can replay: its seed comes from the OS's random source (not from
    /// std's hash keys, which within one thread differ only by a counter).
    pub fn unpredictable() -> Draw {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the OS random source is available");
        Draw::seeded(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let digest = Sha256::new()
            .chain_update(self.seed)
            .chain_update(self.counter.to_be_bytes())
            .finalize();
        self.counter = self.counter.wrapping_add(1);
        let mut v = [0u8; 8];
        v.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(v)
    }

    /// A number in `0..n` (`0` for `n == 0`); the bias of the modulo is below 2^-40 for the
    /// small `n` of these rules.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % (n.max(1) as u64)) as usize
    }
}

/// Distinct providers one search keeps track of at most: a hostile server's answer can name
/// hundreds of made-up ids; names past this are not fetched.
pub const MAX_NAMED: usize = 1_024;

/// The providers a search's lookups named: how many answers (one per DHT server asked) named
/// each, and a key that named it. A search fetches once its lookups ended, by [`Named::plan`],
/// not in the order answers came: a hostile server answering first with made-up ids took every
/// fetch of the cap before an honest server's answer arrived.
#[derive(Default)]
pub struct Named {
    /// In the order first named (what `plan` draws from, so a seeded draw replays).
    order: Vec<PeerId>,
    by: HashMap<PeerId, Naming>,
}

struct Naming {
    answers: usize,
    key: RecordKey,
}

impl Named {
    /// One server's answer under `key`, naming `providers` (each once): the ones new to the
    /// search, in the answer's order.
    pub fn answer(
        &mut self,
        key: &RecordKey,
        providers: impl IntoIterator<Item = PeerId>,
    ) -> Vec<PeerId> {
        let mut new = Vec::new();
        for p in providers {
            if let Some(n) = self.by.get_mut(&p) {
                n.answers += 1;
            } else if self.order.len() < MAX_NAMED {
                self.by.insert(
                    p,
                    Naming {
                        answers: 1,
                        key: key.clone(),
                    },
                );
                self.order.push(p);
                new.push(p);
            }
        }
        new
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// A key whose answer named `provider` (looked up again to reach it).
    pub fn key_of(&self, provider: &PeerId) -> Option<&RecordKey> {
        self.by.get(provider).map(|n| &n.key)
    }

    /// Every named provider in the order to fetch them: named by more answers first (an honest
    /// provider's record sits on the ~20 servers closest to its key, a made-up id only where
    /// the attacker placed it), ties in a random order (never the order answers came).
    pub fn plan(&self, draw: &mut Draw) -> Vec<PeerId> {
        let mut ranked: Vec<(std::cmp::Reverse<usize>, u64, PeerId)> = self
            .order
            .iter()
            .map(|p| {
                let answers = self.by.get(p).map_or(0, |n| n.answers);
                (std::cmp::Reverse(answers), draw.next_u64(), *p)
            })
            .collect();
        ranked.sort();
        ranked.into_iter().map(|(_, _, p)| p).collect()
    }
}

/// Where a provider record a server was sent goes in its key ([`key_slot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySlot {
    /// The provider holds a slot already: a refresh.
    Held,
    /// A slot is free.
    Free,
    /// The newcomer takes this held provider's slot.
    Replace(PeerId),
}

/// The slot a key's server gives `newcomer`'s record sent from `group`, the key's live
/// providers being `held` (each with the group it registered from; `None` for a record that
/// never gives up its slot: the server's own). The rule, bounded by the key's 20 slots:
/// - a held provider refreshes its slot, free;
/// - a group holding [`MAX_SLOTS_PER_GROUP`] slots already gives one of them (drawn) up;
/// - else a free slot is taken;
/// - else the newcomer takes a slot drawn from the group holding the most — its own group if
///   that holds as many. A provider alone in its group loses its slot only when every slot is
///   held by a different group: ids from k groups hold at most `k × MAX_SLOTS_PER_GROUP` slots
///   and push out no provider of a group holding fewer slots than theirs.
pub fn key_slot(
    held: &[(PeerId, Option<AddressGroup>)],
    newcomer: &PeerId,
    group: AddressGroup,
    draw: &mut Draw,
) -> Result<KeySlot, ProviderRefusal> {
    if held.iter().any(|(p, _)| p == newcomer) {
        return Ok(KeySlot::Held);
    }
    let members = |g: AddressGroup| -> Vec<PeerId> {
        held.iter()
            .filter(|(_, hg)| *hg == Some(g))
            .map(|(p, _)| *p)
            .collect()
    };
    let own = members(group);
    if own.len() >= MAX_SLOTS_PER_GROUP {
        return Ok(KeySlot::Replace(own[draw.below(own.len())]));
    }
    if held.len() < MAX_PROVIDERS_PER_KEY {
        return Ok(KeySlot::Free);
    }
    let mut counts: BTreeMap<AddressGroup, usize> = BTreeMap::new();
    for g in held.iter().filter_map(|(_, g)| *g) {
        *counts.entry(g).or_default() += 1;
    }
    let Some(most) = counts.values().copied().max() else {
        return Err(ProviderRefusal::KeyFull);
    };
    let candidates: Vec<PeerId> = if !own.is_empty() && own.len() >= most {
        own
    } else {
        held.iter()
            .filter(|(_, g)| g.is_some_and(|g| counts.get(&g) == Some(&most)))
            .map(|(p, _)| *p)
            .collect()
    };
    Ok(KeySlot::Replace(candidates[draw.below(candidates.len())]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox_calls::vocabulary::{query_vocabulary, skill_vocabulary};

    /// Two nodes (or one node's two starts) draw apart: a provider that could replay a
    /// node's draws would know which slot its record takes.
    #[test]
    fn unpredictable_draws_differ_between_starts() {
        let (mut a, mut b) = (Draw::unpredictable(), Draw::unpredictable());
        let a: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let b: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_ne!(a, b, "two unpredictable draws replayed each other");
    }

    /// The group the gate's own tests register from (the gate stores it, judges nothing by it).
    const G: AddressGroup = AddressGroup::Unknown;

    #[test]
    fn a_scope_short_of_terms_looks_up_no_key_of_the_request_s_words() {
        let vocab = query_vocabulary("rotate the staging vault credentials of our payroll service");
        assert!(!vocab.keywords.is_empty());
        let words = lookup_keys(&vocab).keywords;
        let category = lookup_keys(&vocab).category;
        assert!(
            search_keys(SearchScope::Board, &vocab)
                .all()
                .next()
                .is_none()
        );
        let by_category = search_keys(SearchScope::Category, &vocab);
        assert!(by_category.keywords.is_empty());
        assert_eq!(by_category.category, category);
        assert!(by_category.all().all(|k| !words.contains(k)));
        assert_eq!(search_keys(SearchScope::Terms, &vocab).keywords, words);
        assert_eq!(SearchScope::default(), SearchScope::Category);
    }

    #[test]
    fn a_search_looks_up_a_key_its_skill_provides() {
        let peer = PeerId::random();
        let skill = skill_vocabulary(
            "terraform-review",
            "Review Terraform modules for drift and unsafe defaults before they are applied.",
        );
        let provided: BTreeSet<Vec<u8>> = provide_keys(&peer, &skill)
            .into_iter()
            .map(|k| k.to_vec())
            .collect();
        let query = query_vocabulary("check my terraform module for unsafe defaults");
        let looked: Vec<Vec<u8>> = lookup_keys(&query)
            .keywords
            .iter()
            .map(|k| k.to_vec())
            .collect();
        assert!(looked.iter().any(|k| provided.contains(k)));
    }

    #[test]
    fn keys_are_domain_separated_by_term_and_shard() {
        assert_ne!(term_key("review", 0), term_key("review", 1));
        assert_ne!(term_key("review", 0), term_key("reviews", 0));
        assert_eq!(term_key("review", 3), term_key("review", 3));
    }

    #[test]
    fn each_provider_lands_in_one_of_the_shards_a_search_reads() {
        let vocab = Vocabulary {
            category: "testing",
            keywords: vec!["test".into()],
        };
        let looked: BTreeSet<Vec<u8>> = lookup_keys(&vocab).all().map(|k| k.to_vec()).collect();
        let mut used = BTreeSet::new();
        for _ in 0..200 {
            let peer = PeerId::random();
            for k in provide_keys(&peer, &vocab) {
                assert!(looked.contains(&k.to_vec()));
                used.insert(k.to_vec());
            }
        }
        // 200 providers spread over more than one shard of "test" and of the category.
        assert!(used.len() > 2, "{}", used.len());
    }

    /// A gate taking `rate_per_sec` records a second (bursts of `burst`) from each of at most
    /// `providers` providers, five keys each.
    fn gate(rate_per_sec: f64, burst: f64, providers: usize) -> ProviderGate {
        let limits = ProviderLimits {
            rate_per_sec,
            burst,
            max_keys_per_provider: 5,
        };
        ProviderGate::new(limits, providers)
    }

    #[test]
    fn the_gate_rate_limits_and_caps_one_provider_without_touching_another() {
        let mut gate = gate(1.0, 10.0, 100);
        let flooder = PeerId::random();
        let honest = PeerId::random();
        let now = 1_000_000;
        let mut kept = 0;
        let mut too_many = 0;
        let mut limited = 0;
        for i in 0..50u32 {
            match gate.admit(flooder, &i.to_be_bytes(), G, now + 60_000, now) {
                Ok(()) => kept += 1,
                Err(ProviderRefusal::TooManyKeys) => too_many += 1,
                Err(ProviderRefusal::RateLimited) => limited += 1,
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(kept, 5);
        assert_eq!(too_many, 5);
        assert_eq!(limited, 40);
        assert_eq!(gate.held(&flooder, now), 5);
        // Its tokens are spent, yet republishing a key it holds is still taken.
        for _ in 0..100 {
            assert_eq!(
                gate.admit(flooder, &0u32.to_be_bytes(), G, now + 90_000, now),
                Ok(())
            );
        }
        assert_eq!(gate.admit(honest, b"k", G, now + 60_000, now), Ok(()));
        // After its records expire (the refreshed one later), the flooder's share is free again.
        assert_eq!(gate.held(&flooder, now + 61_000), 1);
        assert_eq!(gate.held(&flooder, now + 91_000), 0);
        assert_eq!(
            gate.admit(flooder, b"later", G, now + 200_000, now + 61_000),
            Ok(())
        );
    }

    #[test]
    fn index_keys_are_key_len_bytes() {
        assert_eq!(term_key("review", 0).to_vec().len(), KEY_LEN);
    }

    #[test]
    fn a_record_keeps_a_few_short_addresses() {
        let short: Multiaddr = "/ip4/203.0.113.7/tcp/4001".parse().expect("addr");
        let long: Multiaddr = format!("/dns4/{}/tcp/1", "a".repeat(300))
            .parse()
            .expect("addr");
        // A long one is skipped, short ones after it still fit; repeats are kept once.
        let mut sent = vec![long.clone(), short.clone(), short.clone()];
        sent.extend((0..100u16).map(|p| format!("/ip4/10.0.0.1/tcp/{p}").parse().expect("addr")));
        let kept = record_addresses(sent);
        assert_eq!(kept.len(), MAX_RECORD_ADDRESSES);
        assert_eq!(kept[0], short);
        assert!(!kept.contains(&long));
        assert!(kept.iter().map(|a| a.as_ref().len()).sum::<usize>() <= MAX_RECORD_ADDRESS_BYTES);
        // A relay's circuit address over IPv6 and QUIC (over 100 bytes) is kept whole.
        let id = || {
            libp2p::identity::Keypair::generate_ed25519()
                .public()
                .to_peer_id()
        };
        let circuit: Multiaddr = format!(
            "/ip6/2001:db8::1/udp/4001/quic-v1/p2p/{}/p2p-circuit/p2p/{}",
            id(),
            id()
        )
        .parse()
        .expect("addr");
        assert!(circuit.as_ref().len() > 100, "{}", circuit.as_ref().len());
        assert_eq!(record_addresses(vec![circuit.clone()]), vec![circuit]);
        assert!(record_addresses(vec![long]).is_empty());
    }

    #[test]
    fn a_forgotten_key_takes_no_room() {
        let mut gate = gate(100.0, 100.0, 3);
        let p = PeerId::random();
        assert_eq!(gate.admit(p, b"k", G, 2_000, 1_000), Ok(()));
        gate.forget(&p, b"k");
        assert_eq!(gate.held(&p, 1_000), 0);
    }

    #[test]
    fn the_gate_tracks_a_bounded_number_of_providers() {
        let mut gate = gate(100.0, 100.0, 3);
        for _ in 0..3 {
            assert_eq!(gate.admit(PeerId::random(), b"k", G, 2_000, 1_000), Ok(()));
        }
        assert_eq!(
            gate.admit(PeerId::random(), b"k", G, 2_000, 1_000),
            Err(ProviderRefusal::TooManyKeys)
        );
        // Once the held records expired, a newcomer has room.
        assert_eq!(gate.admit(PeerId::random(), b"k", G, 9_000, 3_000), Ok(()));
    }

    /// A key on a server: its held providers with their groups, applying [`key_slot`]'s answer
    /// as the server's store does. Whether `newcomer` is held afterwards.
    fn register(
        held: &mut Vec<(PeerId, Option<AddressGroup>)>,
        newcomer: PeerId,
        group: AddressGroup,
        draw: &mut Draw,
    ) -> Result<KeySlot, ProviderRefusal> {
        let slot = key_slot(held, &newcomer, group, draw)?;
        match slot {
            KeySlot::Held => {}
            KeySlot::Free => held.push((newcomer, Some(group))),
            KeySlot::Replace(victim) => {
                held.retain(|(p, _)| *p != victim);
                held.push((newcomer, Some(group)));
            }
        }
        assert!(held.len() <= MAX_PROVIDERS_PER_KEY);
        Ok(slot)
    }

    fn v4(a: u8, b: u8, c: u8) -> AddressGroup {
        AddressGroup::V4([a, b, c])
    }

    /// P2: 20 ground ids sent from one /24 used to hold a key's every slot for ever, and a
    /// provider registering later was refused `KeyFull`. One group holds a fifth of a key; the
    /// later provider is held, and stays held however many more ids the group sends.
    #[test]
    fn twenty_sybils_from_one_24_leave_a_key_to_an_honest_provider_from_another() {
        for seed in 0..20u8 {
            let mut draw = Draw::seeded([seed; 32]);
            let mut held = Vec::new();
            let sybil_group = v4(198, 51, 100);
            for _ in 0..MAX_PROVIDERS_PER_KEY {
                register(&mut held, PeerId::random(), sybil_group, &mut draw).expect("sybil");
            }
            let honest = PeerId::random();
            assert_ne!(
                register(&mut held, honest, v4(203, 0, 113), &mut draw),
                Err(ProviderRefusal::KeyFull),
                "the honest provider is refused a key ground ids filled first"
            );
            for _ in 0..1_000 {
                register(&mut held, PeerId::random(), sybil_group, &mut draw).expect("sybil");
                // Its refresh stays free.
                assert_eq!(
                    register(&mut held, honest, v4(203, 0, 113), &mut draw),
                    Ok(KeySlot::Held)
                );
            }
            let sybils = held.iter().filter(|(_, g)| *g == Some(sybil_group)).count();
            assert!(sybils <= MAX_SLOTS_PER_GROUP, "{sybils}");
        }
    }

    /// Ids from fewer groups than a key has slots never push out a provider alone in its group
    /// (each of theirs holds as many); from more groups they can, one slot drawn in twenty.
    #[test]
    fn a_provider_alone_in_its_group_gives_its_slot_up_only_to_more_groups_than_slots() {
        let mut draw = Draw::seeded([7; 32]);
        let honest = PeerId::random();
        let mut held = vec![(honest, Some(v4(203, 0, 113)))];
        for i in 0..10_000u32 {
            let g = v4(198, 51, (i % (MAX_PROVIDERS_PER_KEY as u32 - 1)) as u8);
            register(&mut held, PeerId::random(), g, &mut draw).expect("sybil");
            assert!(held.iter().any(|(p, _)| *p == honest), "evicted at {i}");
        }
        assert_eq!(held.len(), MAX_PROVIDERS_PER_KEY);
        let mut evicted_after = None;
        for i in 0..10_000u32 {
            let g = v4(198, 51, (i % 40) as u8);
            register(&mut held, PeerId::random(), g, &mut draw).expect("sybil");
            if !held.iter().any(|(p, _)| *p == honest) {
                evicted_after = Some(i);
                break;
            }
        }
        assert!(
            evicted_after.is_some(),
            "40 groups never drew the honest slot"
        );
    }

    /// The server's own record under a key is never the one drawn, and a key holding only such
    /// records refuses a newcomer.
    #[test]
    fn the_server_s_own_record_keeps_its_slot() {
        let mut draw = Draw::seeded([3; 32]);
        let own = PeerId::random();
        let mut held = vec![(own, None)];
        for i in 0..5_000u32 {
            let g = v4(10, (i / 256) as u8, i as u8);
            register(&mut held, PeerId::random(), g, &mut draw).expect("newcomer");
            assert!(held.iter().any(|(p, _)| *p == own), "evicted at {i}");
        }
        let only_own: Vec<_> = (0..MAX_PROVIDERS_PER_KEY)
            .map(|_| (PeerId::random(), None))
            .collect();
        assert_eq!(
            key_slot(&only_own, &PeerId::random(), v4(1, 2, 3), &mut draw),
            Err(ProviderRefusal::KeyFull)
        );
    }

    #[test]
    fn the_same_seed_draws_the_same_slots() {
        let ids: Vec<PeerId> = (0..200).map(|_| PeerId::random()).collect();
        let run = |seed: u8| {
            let mut draw = Draw::seeded([seed; 32]);
            let mut held = Vec::new();
            for (i, p) in ids.iter().enumerate() {
                let _ = register(&mut held, *p, v4(1, 1, (i % 30) as u8), &mut draw);
            }
            held
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn address_groups_are_a_24_a_48_or_the_relay_s() {
        let g = |a: &str| AddressGroup::of(&a.parse::<Multiaddr>().expect("addr"));
        assert_eq!(
            g("/ip4/198.51.100.7/tcp/1"),
            g("/ip4/198.51.100.200/udp/9/quic-v1")
        );
        assert_ne!(g("/ip4/198.51.100.7/tcp/1"), g("/ip4/198.51.101.7/tcp/1"));
        assert_eq!(
            g("/ip6/2001:db8:1::1/tcp/1"),
            g("/ip6/2001:db8:1:ffff::2/tcp/1")
        );
        assert_ne!(g("/ip6/2001:db8:1::1/tcp/1"), g("/ip6/2001:db8:2::1/tcp/1"));
        assert_eq!(
            g("/ip6/::ffff:198.51.100.9/tcp/1"),
            g("/ip4/198.51.100.7/tcp/1")
        );
        let relay = libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id();
        assert_eq!(
            g(&format!(
                "/ip4/203.0.113.5/tcp/4001/p2p/{relay}/p2p-circuit"
            )),
            g("/ip4/203.0.113.1/tcp/1")
        );
        assert_ne!(g("/memory/5"), g("/memory/6"));
        assert_eq!(g("/dns4/example.org/tcp/1"), AddressGroup::Unknown);
    }

    /// P2: answers naming 100 Sybils first and the honest provider last used to spend every
    /// fetch of the cap (32) on the Sybils. The honest one, named by more servers, is fetched.
    #[test]
    fn a_search_fetches_the_provider_more_servers_name_however_late() {
        let key = term_key("category:testing", 0);
        let honest = PeerId::random();
        for seed in 0..50u8 {
            let mut named = Named::default();
            let sybils: Vec<PeerId> = (0..100).map(|_| PeerId::random()).collect();
            // Five hostile servers answer first, twenty made-up ids each.
            for chunk in sybils.chunks(20) {
                named.answer(&key, chunk.iter().copied());
            }
            // Then three honest servers holding the honest record (and a few Sybils).
            for i in 0..3 {
                let mut answer = sybils[i * 5..i * 5 + 5].to_vec();
                answer.push(honest);
                named.answer(&key, answer);
            }
            let fetched: Vec<PeerId> = named
                .plan(&mut Draw::seeded([seed; 32]))
                .into_iter()
                .take(32)
                .collect();
            assert!(
                fetched.contains(&honest),
                "the honest provider named last is not among the fetches"
            );
        }
    }

    /// Among providers named as often, the order is drawn, not the answers': an honest one named
    /// once after 100 Sybils named once is fetched in about a third of searches (32 of 101).
    #[test]
    fn providers_named_as_often_are_fetched_in_a_drawn_order() {
        let key = term_key("category:testing", 0);
        let honest = PeerId::random();
        let sybils: Vec<PeerId> = (0..100).map(|_| PeerId::random()).collect();
        let mut named = Named::default();
        named.answer(&key, sybils.iter().copied());
        named.answer(&key, [honest]);
        let mut draw = Draw::seeded([9; 32]);
        let runs = 1_000;
        let found = (0..runs)
            .filter(|_| named.plan(&mut draw)[..32].contains(&honest))
            .count();
        assert!((200..450).contains(&found), "{found} of {runs}");
        assert_eq!(named.key_of(&honest), Some(&key));
        // A flood of names past the bound is not kept.
        let mut flood = Named::default();
        flood.answer(&key, (0..MAX_NAMED + 10).map(|_| PeerId::random()));
        assert_eq!(flood.plan(&mut draw).len(), MAX_NAMED);
    }
}
