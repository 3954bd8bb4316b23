//! The board: the newest valid advert of each peer. Pure data, no I/O; `now` is passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use libp2p::PeerId;
use serde::{Deserialize, Serialize};

use crate::advert::{
    Advert, AdvertRefusal, DEFAULT_MAX_ADVERT_BYTES, OfferedSkill, VerifiedAdvert, parse_advert,
    verify_advert, verify_parsed,
};

/// Limits of the board.
#[derive(Clone, Debug)]
pub struct BoardConfig {
    /// An entry goes after this long without a fresh advert (3 missed adverts).
    pub ttl_ms: u64,
    /// How far in the future an advert's time may be (clock skew between nodes).
    pub max_skew_ms: u64,
    pub max_advert_bytes: usize,
    /// Peers held at most; a new one beyond this evicts the entry that expires first (the
    /// oldest advert), so the board is a bounded cache whoever sends what.
    pub max_entries: usize,
    /// Bytes the entries may hold in all ([`Board::held_bytes`]: each advert as received,
    /// parsed, and its rows rendered), under the same rules as `max_entries`. The count alone
    /// let 100,000 adverts of 128 KiB each, signed by keys that cost nothing, hold tens of GB.
    pub max_total_bytes: usize,
}

/// Default cap of the board: peers held at once.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// Default byte budget of the board: 256 MiB, about 100,000 typical adverts (a few skills
/// each), or 680 of the largest.
pub const DEFAULT_MAX_TOTAL_BYTES: usize = 256 << 20;

impl Default for BoardConfig {
    fn default() -> Self {
        BoardConfig {
            ttl_ms: 180_000,
            max_skew_ms: 30_000,
            max_advert_bytes: DEFAULT_MAX_ADVERT_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

/// One offered skill of one peer: a row of `GET /board`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoardRow {
    /// The peer id (base58).
    pub peer: String,
    pub skill: String,
    pub description: String,
    pub provider: String,
    pub required_sources: Vec<String>,
    /// The owner's ceilings for the skill.
    #[serde(default, skip_serializing_if = "crate::advert::Limits::is_empty")]
    pub limits: crate::advert::Limits,
    /// The owner's body allowance in force, in tokens, as advertised (absent from adverts of
    /// nodes older than review 29): a program for the skill states it, and a caller's request
    /// and sources get the model's room less it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_max_tokens: Option<u64>,
    /// The remote model context the owner declares, in tokens, as advertised (never for `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_context_tokens: Option<u64>,
    /// The declaration's commitment, as advertised.
    pub digest: String,
    /// Seconds since the peer signed the advert this row comes from.
    pub age: u64,
}

/// What happened to an advert the board took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ingested {
    pub peer: PeerId,
    pub seq: u64,
    /// The peer was not on the board before.
    pub new_peer: bool,
    /// The peer whose entry made room for this one (the board was full).
    pub evicted: Option<String>,
}

struct Entry {
    advert: Advert,
    raw: Arc<[u8]>,
    expires_at: u64,
    /// When the signer came onto the board (a count of arrivals, kept across its re-signed
    /// adverts): the order board sync answers in, which re-signing cannot buy.
    first_seen: u64,
    /// Each row's JSON up to and including `"age":`, rendered once at ingest into one buffer
    /// (`row_ends` splits it): a snapshot then only copies bytes and writes the age, which keeps
    /// `GET /board` fast at 10,000 peers.
    rendered: String,
    row_ends: Vec<usize>,
}

impl Entry {
    /// What the entry counts for against [`BoardConfig::max_total_bytes`].
    fn cost(&self) -> usize {
        entry_cost(self.raw.len(), self.rendered.len())
    }
}

/// An entry's bytes: the advert as received, about as much again parsed, and its rows.
fn entry_cost(raw: usize, rendered: usize) -> usize {
    raw.saturating_mul(2).saturating_add(rendered)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RowPrefix<'a> {
    peer: &'a str,
    skill: &'a str,
    description: &'a str,
    provider: &'a str,
    required_sources: &'a [String],
    #[serde(skip_serializing_if = "crate::advert::Limits::is_empty")]
    limits: crate::advert::Limits,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_context_tokens: Option<u64>,
    digest: &'a str,
}

/// The newest valid advert per peer.
pub struct Board {
    config: BoardConfig,
    // Keyed by the base58 peer id so rows come out in a stable order.
    entries: BTreeMap<String, Entry>,
    /// (expires_at, peer) of every entry: the oldest is the first.
    by_expiry: BTreeSet<(u64, String)>,
    /// Sum of the rendered rows' lengths, so a snapshot allocates its buffer once.
    rendered_bytes: usize,
    rendered_rows: usize,
    /// Sum of the entries' [`Entry::cost`].
    held_bytes: usize,
    /// The next [`Entry::first_seen`].
    arrivals: u64,
}

/// A board row as the intent ranks it.
impl<'a> From<&'a BoardRow> for skillbox_calls::intent::Candidate<'a> {
    fn from(r: &'a BoardRow) -> Self {
        skillbox_calls::intent::Candidate {
            peer: &r.peer,
            skill: &r.skill,
            description: &r.description,
        }
    }
}

/// A borrowed row as the intent ranks it.
impl<'a> From<RowRef<'a>> for skillbox_calls::intent::Candidate<'a> {
    fn from(r: RowRef<'a>) -> Self {
        skillbox_calls::intent::Candidate {
            peer: r.peer,
            skill: &r.skill.name,
            description: &r.skill.description,
        }
    }
}

impl Board {
    pub fn new(config: BoardConfig) -> Board {
        Board {
            config,
            entries: BTreeMap::new(),
            by_expiry: BTreeSet::new(),
            rendered_bytes: 0,
            rendered_rows: 0,
            held_bytes: 0,
            arrivals: 0,
        }
    }

    pub fn config(&self) -> &BoardConfig {
        &self.config
    }

    /// Verify and take an advert received as bytes. `gossip_source` is the publisher gossip
    /// authenticated (None when the advert was relayed by board sync: the signature alone vouches).
    pub fn ingest(
        &mut self,
        bytes: &[u8],
        gossip_source: Option<&PeerId>,
        now_ms: u64,
    ) -> Result<Ingested, AdvertRefusal> {
        let verified = self.verify_from(bytes, gossip_source)?;
        self.insert_verified(verified, now_ms)
    }

    /// Verify `bytes` and, when the sender is known, that it signed them.
    fn verify_from(
        &self,
        bytes: &[u8],
        source: Option<&PeerId>,
    ) -> Result<VerifiedAdvert, AdvertRefusal> {
        let verified = verify_advert(bytes, self.config.max_advert_bytes)?;
        if let Some(source) = source
            && *source != verified.peer
        {
            return Err(AdvertRefusal::SourceMismatch {
                node: verified.advert.node,
                source_peer: source.to_base58(),
            });
        }
        Ok(verified)
    }

    /// Verify and take an advert this node did not ask for (gossip on a live topic, board sync;
    /// `source` as for [`Board::ingest`]). Two rules [`Board::ingest`] does not have: a newer
    /// advert is taken only if `admit` allows its signer one more (the caller's rate; a repeat
    /// of the advert held costs nothing), and it never evicts — on a full board an unasked
    /// newcomer is refused, so a flood of fresh identities cannot push out the entries held.
    /// Only what a search fetched (the board as a cache of what this node looked for) and the
    /// node's own advert may evict the oldest entry. `admit` is told whether the signer is new
    /// here (no unexpired entry): a new signer takes room, so the caller charges whoever
    /// delivered it (the gossip forwarder, the board-sync answer), not only the signer, whose
    /// identity costs nothing.
    pub fn ingest_unasked(
        &mut self,
        bytes: &[u8],
        source: Option<&PeerId>,
        now_ms: u64,
        admit: impl FnOnce(&PeerId, bool) -> bool,
    ) -> Result<Ingested, AdvertRefusal> {
        // What the advert claims is judged before its signature is checked (an Ed25519
        // verification, tens of µs): one not from the publisher gossip authenticated, or a copy
        // of an advert held, is refused for the parse alone. A forged claim gains nothing:
        // it is refused either way, and only a verified advert changes the board.
        let signed = parse_advert(bytes, self.config.max_advert_bytes)?;
        if let Some(source) = source
            && source.to_base58() != signed.advert.node
        {
            return Err(AdvertRefusal::SourceMismatch {
                node: signed.advert.node,
                source_peer: source.to_base58(),
            });
        }
        if let Some(existing) = self.entries.get(&signed.advert.node)
            && signed.advert.seq <= existing.advert.seq
        {
            return Err(AdvertRefusal::Stale {
                seq: signed.advert.seq,
                newest: existing.advert.seq,
            });
        }
        let verified = verify_parsed(signed, bytes)?;
        let new_signer = self
            .entries
            .get(&verified.advert.node)
            .is_none_or(|e| e.expires_at <= now_ms);
        if !admit(&verified.peer, new_signer) {
            return Err(AdvertRefusal::TooFrequent);
        }
        let full = |b: &Board| b.entries.len() >= b.config.max_entries.max(1);
        if !self.entries.contains_key(&verified.advert.node) && full(self) {
            self.expire(now_ms);
            if full(self) {
                return Err(AdvertRefusal::BoardFull);
            }
        }
        self.insert(verified, now_ms, false)
    }

    /// Take an advert whose signature has been checked; apply freshness rules. On a full board
    /// (entries or bytes) the oldest entries make room.
    pub fn insert_verified(
        &mut self,
        verified: VerifiedAdvert,
        now_ms: u64,
    ) -> Result<Ingested, AdvertRefusal> {
        self.insert(verified, now_ms, true)
    }

    /// [`Self::insert_verified`]; without `may_evict`, an advert that does not fit the byte
    /// budget once expired entries are gone is refused `BoardFull`.
    fn insert(
        &mut self,
        verified: VerifiedAdvert,
        now_ms: u64,
        may_evict: bool,
    ) -> Result<Ingested, AdvertRefusal> {
        let VerifiedAdvert {
            peer,
            mut advert,
            raw,
        } = verified;
        if advert.time > now_ms.saturating_add(self.config.max_skew_ms) {
            return Err(AdvertRefusal::FromTheFuture {
                time: advert.time,
                now: now_ms,
                skew_ms: self.config.max_skew_ms,
            });
        }
        // Expiry counts from when it was signed (never later than when it arrived), so a relayed
        // or replayed old advert cannot live longer than the original.
        let expires_at = advert.time.min(now_ms).saturating_add(self.config.ttl_ms);
        if expires_at <= now_ms {
            return Err(AdvertRefusal::Expired {
                time: advert.time,
                now: now_ms,
            });
        }
        let key = advert.node.clone();
        let mut new_peer = true;
        let mut first_seen = self.arrivals;
        if let Some(existing) = self.entries.get(&key) {
            // An expired entry still holds its sequence number until it is pruned; a replay of an
            // older advert is refused by the expiry rule above anyway.
            if advert.seq <= existing.advert.seq {
                return Err(AdvertRefusal::Stale {
                    seq: advert.seq,
                    newest: existing.advert.seq,
                });
            }
            new_peer = existing.expires_at <= now_ms;
            if !new_peer {
                first_seen = existing.first_seen;
            }
        }
        // Rows come out in skill order: the advert's skills are kept in that order, so the
        // i-th rendered row is the i-th skill and a borrowed row ([`RowRef`]) needs no index.
        advert.skills.sort_by(|a, b| a.name.cmp(&b.name));
        let mut rendered = String::new();
        let mut row_ends = Vec::with_capacity(advert.skills.len());
        for s in &advert.skills {
            rendered.push_str(&render_prefix(&key, s));
            row_ends.push(rendered.len());
        }
        let seq = advert.seq;
        let cost = entry_cost(raw.len(), rendered.len());
        let budget = self.config.max_total_bytes;
        if cost > budget {
            return Err(AdvertRefusal::BoardFull);
        }
        // What the board would hold with this entry in place of the peer's present one.
        let after = |b: &Board| b.held_bytes - b.entries.get(&key).map_or(0, Entry::cost) + cost;
        let mut evicted = None;
        if after(self) > budget {
            if may_evict {
                while after(self) > budget {
                    let Some(oldest) = self
                        .by_expiry
                        .iter()
                        .map(|(_, k)| k)
                        .find(|k| **k != key)
                        .cloned()
                    else {
                        break;
                    };
                    self.remove_key(&oldest);
                    evicted.get_or_insert(oldest);
                }
            } else {
                self.expire(now_ms);
                if after(self) > budget {
                    return Err(AdvertRefusal::BoardFull);
                }
            }
        }
        if !self.entries.contains_key(&key)
            && self.entries.len() >= self.config.max_entries.max(1)
            && let Some((_, oldest)) = self.by_expiry.first().cloned()
        {
            self.remove_key(&oldest);
            evicted.get_or_insert(oldest);
        }
        if first_seen == self.arrivals {
            self.arrivals += 1;
        }
        self.held_bytes += cost;
        self.rendered_bytes += rendered.len();
        self.rendered_rows += row_ends.len();
        self.by_expiry.insert((expires_at, key.clone()));
        let old = self.entries.insert(
            key,
            Entry {
                advert,
                raw,
                expires_at,
                first_seen,
                rendered,
                row_ends,
            },
        );
        if let Some(old) = old {
            self.by_expiry
                .remove(&(old.expires_at, old.advert.node.clone()));
            self.uncount(&old);
        }
        Ok(Ingested {
            peer,
            seq,
            new_peer,
            evicted,
        })
    }

    fn remove_key(&mut self, key: &str) -> bool {
        match self.entries.remove(key) {
            Some(old) => {
                self.by_expiry
                    .remove(&(old.expires_at, old.advert.node.clone()));
                self.uncount(&old);
                true
            }
            None => false,
        }
    }

    /// Bytes the entries hold, expired or not (at most `max_total_bytes`).
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Number of entries held, expired or not (at most `max_entries`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drop entries past their TTL; returns the peers that left the board.
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let gone: Vec<String> = self
            .by_expiry
            .iter()
            .take_while(|(exp, _)| *exp <= now_ms)
            .map(|(_, k)| k.clone())
            .collect();
        for k in &gone {
            self.remove_key(k);
        }
        gone
    }

    /// Forget a peer at once (e.g. this node's own entry when it stops offering).
    pub fn remove(&mut self, peer: &PeerId) -> bool {
        self.remove_key(&peer.to_base58())
    }

    /// Take an entry that left out of the board's sums (its bytes, its rendered rows).
    fn uncount(&mut self, old: &Entry) {
        self.held_bytes -= old.cost();
        self.rendered_bytes -= old.rendered.len();
        self.rendered_rows -= old.row_ends.len();
    }

    fn live(&self, now_ms: u64) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries
            .iter()
            .filter(move |(_, e)| e.expires_at > now_ms)
    }

    /// Number of rows [`Board::snapshot`] would give (offered skills of unexpired adverts),
    /// without building them.
    pub fn row_count(&self, now_ms: u64) -> usize {
        self.live(now_ms).map(|(_, e)| e.advert.skills.len()).sum()
    }

    /// Number of peers with an unexpired advert.
    pub fn peer_count(&self, now_ms: u64) -> usize {
        self.live(now_ms).count()
    }

    /// The newest unexpired advert of a peer (for the calls layer: boxes, digests).
    pub fn advert(&self, peer: &PeerId, now_ms: u64) -> Option<&Advert> {
        self.entries
            .get(&peer.to_base58())
            .filter(|e| e.expires_at > now_ms)
            .map(|e| &e.advert)
    }

    /// The boxes a peer's unexpired advert accepts, the peer named as [`BoardRow::peer`] names
    /// it (none once the advert expired).
    pub fn boxes_of(&self, peer: &str, now_ms: u64) -> Vec<crate::AcceptedBox> {
        self.entries
            .get(peer)
            .filter(|e| e.expires_at > now_ms)
            .map(|e| e.advert.boxes.clone())
            .unwrap_or_default()
    }

    /// The signed bytes of a peer's unexpired advert, as received.
    pub fn signed_advert(&self, peer: &PeerId, now_ms: u64) -> Option<Arc<[u8]>> {
        self.entries
            .get(&peer.to_base58())
            .filter(|e| e.expires_at > now_ms)
            .map(|e| e.raw.clone())
    }

    /// The skill `name` if `peer` offers it right now.
    pub fn offered(&self, peer: &PeerId, name: &str, now_ms: u64) -> Option<&OfferedSkill> {
        self.advert(peer, now_ms)?
            .skills
            .iter()
            .find(|s| s.name == name)
    }

    /// The signed bytes of every unexpired advert, longest held first, within `max_total_bytes`
    /// and `max_count`: what a peer relays to a joining node so it need not wait for the next
    /// round of adverts. Newest signed first let a signer that re-signs every few seconds (its
    /// advert rate allows one each 2 s) fill every answer; when a signer came is fixed, so
    /// re-signing buys nothing and a flood of fresh signers comes after the entries held.
    pub fn signed_adverts(
        &self,
        now_ms: u64,
        max_total_bytes: usize,
        max_count: usize,
    ) -> Vec<Arc<[u8]>> {
        let mut live: Vec<&Entry> = self.live(now_ms).map(|(_, e)| e).collect();
        live.sort_by_key(|e| e.first_seen);
        let mut total = 0usize;
        let mut out = Vec::new();
        for e in live.into_iter().take(max_count) {
            total += e.raw.len();
            if total > max_total_bytes {
                break;
            }
            out.push(e.raw.clone());
        }
        out
    }

    /// One row per offered skill of every peer on the board, ordered by peer then skill.
    pub fn snapshot(&self, now_ms: u64) -> Vec<BoardRow> {
        self.rows_after(now_ms, None)
            .map(|r| BoardRow {
                peer: r.peer.to_owned(),
                skill: r.skill.name.clone(),
                description: r.skill.description.clone(),
                provider: r.skill.provider.clone(),
                required_sources: r.skill.required_sources.clone(),
                limits: r.skill.limits,
                body_max_tokens: r.skill.body_max_tokens,
                model_context_tokens: r.skill.model_context_tokens,
                digest: r.skill.declaration_digest.clone(),
                age: r.age,
            })
            .collect()
    }

    /// The same rows as [`Board::snapshot`], as a JSON array, from the pre-rendered rows.
    pub fn snapshot_json(&self, now_ms: u64) -> String {
        // Each row adds a comma, at most 20 digits of age and a brace to its prefix.
        let mut out = String::with_capacity(self.rendered_bytes + self.rendered_rows * 22 + 2);
        out.push('[');
        for (i, r) in self.rows_after(now_ms, None).enumerate() {
            if i > 0 {
                out.push(',');
            }
            r.push_json(&mut out);
        }
        out.push(']');
        out
    }

    /// The rows of unexpired adverts, borrowed, in board order (peer, then skill), starting
    /// after the row `(peer, skill)` when given (that row need not be on the board any more).
    /// What a search or a page reads under the board's lock without copying the board: the
    /// map is entered at `after`'s peer, so a page costs the rows it reads, not the rows before.
    pub fn rows_after<'a>(
        &'a self,
        now_ms: u64,
        after: Option<(&'a str, &'a str)>,
    ) -> impl Iterator<Item = RowRef<'a>> + 'a {
        use std::ops::Bound;
        let start = after.map_or(Bound::Unbounded, |(peer, _)| Bound::Included(peer));
        self.entries
            .range::<str, _>((start, Bound::Unbounded))
            .filter(move |(_, e)| e.expires_at > now_ms)
            .flat_map(move |(peer, e)| {
                let age = age_secs(e.advert.time, now_ms);
                let starts = std::iter::once(0).chain(e.row_ends.iter().copied());
                e.advert
                    .skills
                    .iter()
                    .zip(starts.zip(e.row_ends.iter().copied()))
                    .map(move |(skill, (from, to))| RowRef {
                        peer,
                        skill,
                        age,
                        prefix: &e.rendered[from..to],
                    })
            })
            .skip_while(move |r| {
                after.is_some_and(|(peer, skill)| r.peer == peer && r.skill.name.as_str() <= skill)
            })
    }
}

/// One row of the board borrowed from it: the skill as the peer advertised it, and its JSON
/// rendered at ingest.
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    /// The peer id (base58).
    pub peer: &'a str,
    pub skill: &'a OfferedSkill,
    /// Seconds since the peer signed the advert this row comes from.
    pub age: u64,
    /// The row's JSON up to and including `"age":`.
    prefix: &'a str,
}

impl RowRef<'_> {
    /// The most bytes [`RowRef::push_json`] writes: the prefix, 20 digits and a brace.
    pub fn json_len(&self) -> usize {
        self.prefix.len() + 21
    }

    /// Write the row as `GET /board` answers it (a [`BoardRow`] as JSON), from its rendered text.
    pub fn push_json(&self, out: &mut String) {
        let mut digits = [0u8; 20];
        out.push_str(self.prefix);
        out.push_str(format_u64(self.age, &mut digits));
        out.push('}');
    }
}

/// Decimal digits of `n` without allocating (this runs once per row written).
fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[i..]).expect("ASCII digits")
}

fn age_secs(time: u64, now_ms: u64) -> u64 {
    now_ms.saturating_sub(time) / 1000
}

fn render_prefix(peer: &str, s: &OfferedSkill) -> String {
    let row = RowPrefix {
        peer,
        skill: &s.name,
        description: &s.description,
        provider: &s.provider,
        required_sources: &s.required_sources,
        limits: s.limits,
        body_max_tokens: s.body_max_tokens,
        model_context_tokens: s.model_context_tokens,
        digest: &s.declaration_digest,
    };
    // Serializing borrowed strings into a String cannot fail.
    let mut json = serde_json::to_string(&row).expect("serializing a struct of strings");
    json.pop(); // the closing brace; the age goes after it
    json.push_str(",\"age\":");
    json
}
