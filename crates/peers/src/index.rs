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

use std::collections::{BTreeSet, HashMap};

use libp2p::kad::RecordKey;
use libp2p::{Multiaddr, PeerId};
use sha2::{Digest, Sha256};
use skillbox_calls::vocabulary::{CATEGORY_SHARDS, Vocabulary, shards};

use crate::rate::Buckets;

/// Keys a search looks up at most (in parallel).
pub const MAX_LOOKUPS: usize = 16;
/// Providers a DHT server keeps per key: libp2p's default (k = 20), first come, later ones
/// ignored (libp2p's own rule, which keeps a flood of fresh identities from evicting the
/// providers already held). Sharding keeps a popular term's providers under it per shard.
pub const MAX_PROVIDERS_PER_KEY: usize = libp2p::kad::K_VALUE.get();

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
    /// The key already names its [`MAX_PROVIDERS_PER_KEY`] providers (first come: a newcomer
    /// is not kept). The gate is not charged.
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

/// The server side's bookkeeping per provider: a token bucket for new records and the keys
/// held, so one node flooding ADD_PROVIDER gets only its share and honest records stay.
pub struct ProviderGate {
    limits: ProviderLimits,
    rate: Buckets,
    /// Keys held per provider, with when each expires.
    shares: HashMap<PeerId, HashMap<Vec<u8>, u64>>,
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

    /// May `provider`'s record for `key` (expiring at `expires_ms`) be kept? A new key spends one
    /// token of the provider's rate and needs room in its share; a refresh of a key held is free.
    pub fn admit(
        &mut self,
        provider: PeerId,
        key: &[u8],
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<(), ProviderRefusal> {
        if !self.shares.contains_key(&provider) && self.shares.len() >= self.max_providers {
            self.shares.retain(|_, keys| {
                keys.retain(|_, e| *e > now_ms);
                !keys.is_empty()
            });
            if self.shares.len() >= self.max_providers {
                return Err(ProviderRefusal::TooManyKeys);
            }
        }
        let keys = self.shares.entry(provider).or_default();
        keys.retain(|_, e| *e > now_ms);
        if let Some(expiry) = keys.get_mut(key) {
            // A refresh of a key held (the provider's periodic republish) takes no new space
            // and spends no rate: an honest node republishing all its keys at once is never
            // refused, whatever its interval.
            *expiry = expires_ms;
            return Ok(());
        }
        if !self.rate.take(&provider, now_ms) {
            return Err(ProviderRefusal::RateLimited);
        }
        if keys.len() >= self.limits.max_keys_per_provider {
            return Err(ProviderRefusal::TooManyKeys);
        }
        keys.insert(key.to_vec(), expires_ms);
        Ok(())
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
        self.shares
            .get(provider)
            .map_or(0, |keys| keys.values().filter(|e| **e > now_ms).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox_calls::vocabulary::{query_vocabulary, skill_vocabulary};

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
            match gate.admit(flooder, &i.to_be_bytes(), now + 60_000, now) {
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
                gate.admit(flooder, &0u32.to_be_bytes(), now + 90_000, now),
                Ok(())
            );
        }
        assert_eq!(gate.admit(honest, b"k", now + 60_000, now), Ok(()));
        // After its records expire (the refreshed one later), the flooder's share is free again.
        assert_eq!(gate.held(&flooder, now + 61_000), 1);
        assert_eq!(gate.held(&flooder, now + 91_000), 0);
        assert_eq!(
            gate.admit(flooder, b"later", now + 200_000, now + 61_000),
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
        assert_eq!(gate.admit(p, b"k", 2_000, 1_000), Ok(()));
        gate.forget(&p, b"k");
        assert_eq!(gate.held(&p, 1_000), 0);
    }

    #[test]
    fn the_gate_tracks_a_bounded_number_of_providers() {
        let mut gate = gate(100.0, 100.0, 3);
        for _ in 0..3 {
            assert_eq!(gate.admit(PeerId::random(), b"k", 2_000, 1_000), Ok(()));
        }
        assert_eq!(
            gate.admit(PeerId::random(), b"k", 2_000, 1_000),
            Err(ProviderRefusal::TooManyKeys)
        );
        // Once the held records expired, a newcomer has room.
        assert_eq!(gate.admit(PeerId::random(), b"k", 9_000, 3_000), Ok(()));
    }
}
