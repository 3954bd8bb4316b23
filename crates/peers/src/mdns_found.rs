//! The LAN peers mDNS found, kept to be dialed again: which ones, for how long, and how many
//! dials they may have under way. Pure bookkeeping (no swarm): the network task asks it which
//! peers to dial on each prune tick and tells it how each dial ended.
//!
//! Why it is bounded this hard (review 27 F3): any host on the LAN can answer mDNS, naming
//! any peer ids, any addresses and any TTL (libp2p-mdns takes the record's 32-bit TTL as
//! sent). Kept as named, one answer of 256 ids x 8 addresses made every node with mDNS on
//! re-dial 2,048 addresses a minute for ever, public ones included (dials reflected to any
//! host), and those dials, each held pending until the kernel gave up on its SYN, filled the
//! swarm's `max_pending_outgoing`: every other dial of the node was denied. Now:
//! - only LAN addresses are kept (mDNS is a LAN mechanism; a public or loopback address in an
//!   answer is not a LAN peer's), at most [`MAX_PEERS`] peers x [`MAX_ADDRESSES_PER_PEER`];
//! - an entry is kept at most [`KEEP_AT_MOST`] past its discovery or its last connection,
//!   whatever TTL the answer gave, and leaves after [`FAILED_DIALS_MAX`] dials in a row failed;
//! - at most [`PENDING_MAX`] of its dials are under way at once, and none while the node's
//!   outbound peers, connected and pending, fill its discovery target (the caller's room);
//! - the next dial is jittered, so entries found together do not fire on one tick;
//! - peers with the fewest failures are dialed first, and a full set makes room for a new peer
//!   by dropping the one that failed most: an honest LAN peer found after a flood of fake ones
//!   is still dialed (and re-dialed, the purpose of dec7a38: one failed dial must not leave a
//!   LAN peer unreached until mDNS's next query minutes later);
//! - likewise within one peer (review 29 R29-8): its id is public on the LAN (its own answers
//!   name it), so a LAN host can name it with 8 unreachable addresses before its real answer
//!   arrives. Failures are counted per address too, a new address of a peer whose slots are full
//!   takes the place of the one that failed most (never of one that connected, nor of one not
//!   tried yet), and each peer's addresses are dialed those that connected first, then the
//!   fewest failures first.
//!
//! It is also the one owner of which mDNS-found addresses the dial gate admits (review 28
//! R28-4): the gate admits an address when this bookkeeping starts keeping it and revokes it
//! when no peer here keeps it any more, as [`MdnsFound::take_changes`] hands over. The gate
//! once kept a set of its own, fed also with addresses this bookkeeping refused and emptied only
//! by mDNS's own expiry (at the answer's TTL): a LAN host naming 1,024 addresses with a huge TTL
//! made an honest peer found later kept and dialed here and refused there. Only the difference
//! travels (review 29 R29-10): the gate used to be rebuilt from all 2,048 addresses on every
//! change, and a LAN host naming and expiring one address per packet bought that rebuild with
//! each packet.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId};
use tokio::time::Instant;

use crate::dial::dial_key;
use crate::index::Draw;
use crate::reach::mdns_lan;

/// LAN peers remembered for re-dialing, and addresses each: any LAN host can answer mDNS, so
/// both are bounded.
pub(crate) const MAX_PEERS: usize = 256;
pub(crate) const MAX_ADDRESSES_PER_PEER: usize = 8;

/// The first wait before a peer is dialed again; it doubles after each dial up to
/// [`MAX_WAIT`] (each wait jittered down by up to half).
pub(crate) const FIRST_WAIT: Duration = Duration::from_secs(1);
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);

/// The longest an entry is kept past its discovery or its last connection: the mDNS TTL this
/// node honours at most (the answer's own TTL still ends it sooner, through `expired`). An
/// honest peer that stays connected stays kept; one never reached leaves.
pub(crate) const KEEP_AT_MOST: Duration = Duration::from_secs(10 * 60);

/// Dials in a row that failed before an entry leaves: with the doubling wait, about two
/// minutes of a peer not answering (a restart, a busy moment) before it is given up.
pub(crate) const FAILED_DIALS_MAX: u32 = 8;

/// mDNS dials under way at once: far under the swarm's `max_pending_outgoing` (64 by
/// default), so mDNS answers can never fill it.
pub(crate) const PENDING_MAX: usize = 4;

/// A dial this bookkeeping started and heard nothing of for this long is no longer counted as
/// under way (the transport's own timeout ends a dial well before; this only keeps a lost
/// event from stopping mDNS re-dials for good).
const PENDING_FORGOTTEN_AFTER: Duration = Duration::from_secs(120);

/// What became of one address an mDNS discovery named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Discovery {
    /// Not a LAN address: not kept, not dialed, not to be admitted anywhere.
    NotLan,
    /// Kept for dialing.
    Kept,
    /// A LAN address, but the set (or the peer's addresses) is full of peers (addresses) not
    /// failing.
    NotKept,
}

/// What the dial gate is to do with one address, as [`MdnsFound::take_changes`] hands it over:
/// the address as a transport dials it ([`dial_key`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum GateChange {
    /// A peer here keeps it now and none did at the last hand-over.
    Admit(Multiaddr),
    /// No peer here keeps it any more.
    Revoke(Multiaddr),
}

/// One address of a peer mDNS found.
#[derive(Debug)]
struct Address {
    addr: Multiaddr,
    /// `addr` as a transport dials it: what the gate admits and what a dial error names.
    key: Multiaddr,
    /// Dials of the peer in which this address failed (a connection through it resets it).
    failures: u32,
    /// A dial of the peer connected through it: the peer's real address, never displaced.
    connected: bool,
}

/// One LAN peer mDNS found: where, when it is next dialed if still not connected, and until
/// when it is kept.
#[derive(Debug)]
struct Found {
    addrs: Vec<Address>,
    next_dial: Instant,
    wait: Duration,
    /// Dials in a row that failed (a connection resets it).
    failures: u32,
    keep_until: Instant,
}

/// Which dial keys the peers here keep, by how many of their addresses, and which changed
/// since the gate last heard: the gate's copy is this map's keys.
#[derive(Debug, Default)]
struct Kept {
    count: HashMap<Multiaddr, usize>,
    changed: HashSet<Multiaddr>,
}

impl Kept {
    fn add(&mut self, key: &Multiaddr) {
        let n = self.count.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.changed.insert(key.clone());
        }
    }

    fn remove(&mut self, key: &Multiaddr) {
        if let Some(n) = self.count.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.count.remove(key);
                self.changed.insert(key.clone());
            }
        }
    }

    /// A peer's entry left: none of its addresses is kept for it any more.
    fn remove_peer(&mut self, found: &Found) {
        for a in &found.addrs {
            self.remove(&a.key);
        }
    }
}

/// The LAN peers mDNS found and has not expired, and the dials under way to them.
pub(crate) struct MdnsFound {
    peers: HashMap<PeerId, Found>,
    pending: HashMap<ConnectionId, (PeerId, Instant)>,
    draw: Draw,
    kept: Kept,
}

impl MdnsFound {
    /// `draw` jitters the waits (seeded from the OS in a node, by a test to replay).
    pub(crate) fn new(draw: Draw) -> MdnsFound {
        MdnsFound {
            peers: HashMap::new(),
            pending: HashMap::new(),
            draw,
            kept: Kept::default(),
        }
    }

    /// mDNS discovered `peer` at `addr`: a LAN address is kept (and the peer due at once). When
    /// the peer's addresses are full, it takes the place of the one that failed most, if one
    /// failed and never connected (review 29 R29-8).
    pub(crate) fn discovered(&mut self, peer: PeerId, addr: &Multiaddr, now: Instant) -> Discovery {
        if !mdns_lan(addr) {
            return Discovery::NotLan;
        }
        if !self.peers.contains_key(&peer) && !self.make_room() {
            return Discovery::NotKept;
        }
        let found = self.peers.entry(peer).or_insert_with(|| Found {
            addrs: Vec::new(),
            next_dial: now,
            wait: FIRST_WAIT,
            failures: 0,
            keep_until: now + KEEP_AT_MOST,
        });
        if found.addrs.iter().any(|a| a.addr == *addr) {
            return Discovery::Kept;
        }
        if found.addrs.len() >= MAX_ADDRESSES_PER_PEER {
            let worst = found
                .addrs
                .iter()
                .enumerate()
                .filter(|(_, a)| !a.connected && a.failures > 0)
                .max_by_key(|(_, a)| a.failures)
                .map(|(i, _)| i);
            let Some(worst) = worst else {
                return Discovery::NotKept;
            };
            let gone = found.addrs.swap_remove(worst);
            self.kept.remove(&gone.key);
        }
        let key = dial_key(addr);
        self.kept.add(&key);
        found.addrs.push(Address {
            addr: addr.clone(),
            key,
            failures: 0,
            connected: false,
        });
        // A new address is worth a dial now, not at the end of a wait its peer's other
        // addresses' failures doubled (the dials under way stay within PENDING_MAX).
        found.next_dial = found.next_dial.min(now);
        Discovery::Kept
    }

    /// Room for one more peer: free, or made by dropping the peer that failed most (one that
    /// never failed is not dropped for a newcomer, so a flood cannot push out a working peer).
    fn make_room(&mut self) -> bool {
        if self.peers.len() < MAX_PEERS {
            return true;
        }
        let worst = self
            .peers
            .iter()
            .filter(|(_, f)| f.failures > 0)
            .max_by_key(|(_, f)| f.failures)
            .map(|(peer, _)| *peer);
        match worst.and_then(|peer| self.peers.remove(&peer)) {
            Some(gone) => {
                self.kept.remove_peer(&gone);
                true
            }
            None => false,
        }
    }

    /// mDNS expired its discovery of `peer` at `addr`.
    pub(crate) fn expired(&mut self, peer: &PeerId, addr: &Multiaddr) {
        if let Some(found) = self.peers.get_mut(peer) {
            if let Some(at) = found.addrs.iter().position(|a| a.addr == *addr) {
                let gone = found.addrs.swap_remove(at);
                self.kept.remove(&gone.key);
            }
            if found.addrs.is_empty() {
                self.peers.remove(peer);
            }
        }
    }

    /// The peers to dial now, with their addresses: due, not connected, none of this
    /// bookkeeping's dials to them under way; at most `room` (what the node's discovery target
    /// leaves once its connected and pending outbound peers are counted) and at most
    /// [`PENDING_MAX`] under way in all. Each one's next dial is scheduled; the caller reports
    /// the dial with [`MdnsFound::dialing`]. Entries past their keep time leave here, and a
    /// connected peer's is renewed. A peer's addresses come those that connected first, then
    /// the fewest failures first: the swarm tries them in this order.
    pub(crate) fn due(
        &mut self,
        now: Instant,
        room: usize,
        connected: impl Fn(&PeerId) -> bool,
    ) -> Vec<(PeerId, Vec<Multiaddr>)> {
        self.pending
            .retain(|_, (_, since)| now.duration_since(*since) < PENDING_FORGOTTEN_AFTER);
        for (peer, found) in self.peers.iter_mut() {
            if connected(peer) {
                found.failures = 0;
                found.wait = FIRST_WAIT;
                found.keep_until = now + KEEP_AT_MOST;
            }
        }
        let kept = &mut self.kept;
        self.peers.retain(|_, found| {
            let keep = found.keep_until > now;
            if !keep {
                kept.remove_peer(found);
            }
            keep
        });
        let room = room.min(PENDING_MAX.saturating_sub(self.pending.len()));
        if room == 0 {
            return Vec::new();
        }
        let dialing: Vec<PeerId> = self.pending.values().map(|(peer, _)| *peer).collect();
        let mut candidates: Vec<(u32, Instant, PeerId)> = self
            .peers
            .iter()
            .filter(|(peer, found)| {
                found.next_dial <= now && !connected(peer) && !dialing.contains(peer)
            })
            .map(|(peer, found)| (found.failures, found.next_dial, *peer))
            .collect();
        // The fewest failures first: a peer found now goes before ones that keep failing.
        candidates.sort_unstable_by_key(|(failures, next, _)| (*failures, *next));
        let mut dials = Vec::new();
        for (_, _, peer) in candidates.into_iter().take(room) {
            let jitter = self.jitter();
            let Some(found) = self.peers.get_mut(&peer) else {
                continue;
            };
            found.next_dial = now + found.wait.mul_f64(jitter);
            found.wait = (found.wait * 2).min(MAX_WAIT);
            found.addrs.sort_by_key(|a| (!a.connected, a.failures));
            dials.push((peer, found.addrs.iter().map(|a| a.addr.clone()).collect()));
        }
        dials
    }

    /// A factor in [0.5, 1): each wait is shortened by a random part of its half.
    fn jitter(&mut self) -> f64 {
        0.5 + (self.draw.next_u64() % 1_000) as f64 / 2_000.0
    }

    /// The swarm took the dial `due` asked for: it is under way as `connection`.
    pub(crate) fn dialing(&mut self, peer: PeerId, connection: ConnectionId, now: Instant) {
        self.pending.insert(connection, (peer, now));
    }

    /// A dial ended in failure (the swarm's `OutgoingConnectionError`), at the addresses
    /// `failed` (those the error names, with or without `/p2p/<id>`): counted against its
    /// peer, which leaves after [`FAILED_DIALS_MAX`] in a row, and against each of those
    /// addresses of it. Not one of ours: nothing.
    pub(crate) fn dial_failed<'a>(
        &mut self,
        connection: ConnectionId,
        failed: impl IntoIterator<Item = &'a Multiaddr>,
    ) {
        let Some((peer, _)) = self.pending.remove(&connection) else {
            return;
        };
        let Some(found) = self.peers.get_mut(&peer) else {
            return;
        };
        found.failures += 1;
        if found.failures >= FAILED_DIALS_MAX {
            if let Some(gone) = self.peers.remove(&peer) {
                self.kept.remove_peer(&gone);
            }
            return;
        }
        let failed: HashSet<Multiaddr> = failed.into_iter().map(dial_key).collect();
        for a in found.addrs.iter_mut().filter(|a| failed.contains(&a.key)) {
            a.failures += 1;
        }
    }

    /// A connection to `peer` is up (ours as `connection`, or any other; `dialed` the address
    /// this node dialed, if it dialed): the peer answers, so its failures are forgotten and it
    /// is kept [`KEEP_AT_MOST`] from now, and the address it answered at is never displaced.
    pub(crate) fn connected(
        &mut self,
        peer: &PeerId,
        connection: ConnectionId,
        dialed: Option<&Multiaddr>,
        now: Instant,
    ) {
        self.pending.remove(&connection);
        if let Some(found) = self.peers.get_mut(peer) {
            found.failures = 0;
            found.wait = FIRST_WAIT;
            found.keep_until = now + KEEP_AT_MOST;
            if let Some(dialed) = dialed.map(dial_key) {
                for a in found.addrs.iter_mut().filter(|a| a.key == dialed) {
                    a.failures = 0;
                    a.connected = true;
                }
            }
        }
    }

    /// What the dial gate must do since the last call (which clears it) to admit exactly the
    /// addresses kept: one change per address whose being kept flipped, not the whole set. The
    /// caller hands these over after each call that may keep or drop an address (and before
    /// dialing), so they never pile up.
    pub(crate) fn take_changes(&mut self) -> Vec<GateChange> {
        let count = &self.kept.count;
        self.kept
            .changed
            .drain()
            .map(|key| {
                if count.contains_key(&key) {
                    GateChange::Admit(key)
                } else {
                    GateChange::Revoke(key)
                }
            })
            .collect()
    }

    /// Addresses kept, over all peers, at most [`MAX_PEERS`] x [`MAX_ADDRESSES_PER_PEER`].
    #[cfg(test)]
    fn addresses(&self) -> impl Iterator<Item = &Multiaddr> {
        self.peers
            .values()
            .flat_map(|f| f.addrs.iter().map(|a| &a.addr))
    }

    /// Peers kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.peers.len()
    }

    /// Dials under way.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The discovery target the network task passes as room when no outbound peer is up.
    const TARGET: usize = 8;
    /// The prune tick of a node with the default board TTL.
    const TICK: Duration = Duration::from_secs(5);
    /// How long a dial to an address that drops SYNs stays under way: the transport's timeout.
    const DIAL_HELD: Duration = Duration::from_secs(10);

    fn found() -> MdnsFound {
        MdnsFound::new(Draw::seeded([27; 32]))
    }

    fn addr(s: &str) -> Multiaddr {
        s.parse().expect("test multiaddr")
    }

    /// One mDNS answer of 256 fresh peer ids x 8 addresses, `host(i)` naming each address.
    fn flood(
        set: &mut MdnsFound,
        now: Instant,
        host: impl Fn(usize) -> String,
    ) -> Vec<(PeerId, Discovery)> {
        let mut out = Vec::new();
        for _ in 0..256 {
            let peer = PeerId::random();
            for i in 0..8 {
                out.push((peer, set.discovered(peer, &addr(&host(i)), now)));
            }
        }
        out
    }

    /// Review 27 F3, the public half: an answer naming public hosts (a victim's port, an
    /// unrouted address that drops SYNs) keeps nothing, so nothing is ever dialed for it.
    #[test]
    fn an_mdns_answer_naming_public_addresses_keeps_and_dials_nothing() {
        let t0 = Instant::now();
        let mut set = found();
        let public = flood(&mut set, t0, |i| format!("/ip4/93.184.{i}.34/tcp/443"));
        assert!(public.iter().all(|(_, d)| *d == Discovery::NotLan));
        // Loopback and the unspecified address alike: mDNS is the LAN, not this machine.
        for other in [
            "/ip4/127.0.0.1/tcp/6379",
            "/ip6/::1/tcp/1",
            "/ip4/0.0.0.0/tcp/1",
        ] {
            assert_eq!(
                set.discovered(PeerId::random(), &addr(other), t0),
                Discovery::NotLan,
                "{other}"
            );
        }
        assert_eq!(set.len(), 0, "peers kept");
        assert_eq!(set.addresses().count(), 0, "public addresses kept");
        let mut dials = 0;
        for tick in 0..60u32 {
            dials += set.due(t0 + TICK * tick, TARGET, |_| false).len();
        }
        assert_eq!(dials, 0, "dials for an answer naming public hosts");
    }

    /// Review 27 F3, the LAN half: the attacker's own LAN host (dropping SYNs) named as 256
    /// peers x 8 addresses. Every dial is held for the transport's timeout then fails. Dials
    /// under way never pass the pending budget, dials per tick stay under the discovery target,
    /// and every entry is gone after the failure limit, long before ten minutes: one packet
    /// no longer buys dials for ever.
    #[test]
    fn one_flood_of_lan_answers_is_dialed_within_a_budget_and_then_forgotten() {
        let t0 = Instant::now();
        let mut set = found();
        let ds = flood(&mut set, t0, |i| format!("/ip4/10.9.9.9/tcp/{}", 4001 + i));
        assert!(ds.iter().all(|(_, d)| *d == Discovery::Kept));
        assert_eq!(set.len(), 256);
        assert_eq!(set.addresses().count(), 2048);

        // (connection, ends at): each dial fails when the transport's timeout ends it.
        let mut under_way: Vec<(ConnectionId, Instant)> = Vec::new();
        let (mut dials, mut most_per_tick, mut most_pending) = (0usize, 0usize, 0usize);
        let mut per_minute = vec![0usize; 12];
        let mut gone_at = None;
        for tick in 0..(12 * 60 / 5) {
            let now = t0 + TICK * tick;
            under_way.retain(|(c, ends)| {
                if *ends <= now {
                    set.dial_failed(*c, []);
                    false
                } else {
                    true
                }
            });
            let due = set.due(now, TARGET, |_| false);
            most_per_tick = most_per_tick.max(due.len());
            for (peer, addrs) in due {
                assert!(addrs.len() <= MAX_ADDRESSES_PER_PEER);
                let c = ConnectionId::new_unchecked(dials);
                set.dialing(peer, c, now);
                under_way.push((c, now + DIAL_HELD));
                dials += 1;
                per_minute[(tick * 5 / 60) as usize] += 1;
            }
            most_pending = most_pending.max(set.pending());
            if set.len() == 0 && gone_at.is_none() {
                gone_at = Some(tick * 5);
            }
        }
        eprintln!(
            "flood of 256 x 8 LAN addresses: {dials} dials in 12 min, per minute {per_minute:?}, \
             at most {most_per_tick} a tick, {most_pending} under way; all gone at {gone_at:?} s"
        );
        assert!(
            most_pending <= PENDING_MAX,
            "{most_pending} mDNS dials under way at once (budget {PENDING_MAX})"
        );
        assert!(
            most_per_tick <= PENDING_MAX.min(TARGET),
            "{most_per_tick} dials in one tick"
        );
        assert!(
            per_minute.iter().all(|m| *m <= 60 / 5 * PENDING_MAX),
            "dials a minute: {per_minute:?}"
        );
        let gone_at = gone_at.expect("entries still kept after 12 minutes");
        assert!(
            gone_at <= KEEP_AT_MOST.as_secs() as u32,
            "the flood kept for {gone_at} s"
        );
        assert!(
            dials <= 256 * FAILED_DIALS_MAX as usize,
            "{dials} dials for one packet"
        );
        // Nothing left to dial afterwards.
        assert!(
            set.due(t0 + Duration::from_secs(3600), TARGET, |_| false)
                .is_empty()
        );
    }

    /// Whatever TTL the answer carried, an entry nobody could dial (the node's outbound
    /// target full the whole time) leaves after [`KEEP_AT_MOST`]; one whose peer is connected
    /// is renewed and stays.
    #[test]
    fn an_entry_is_kept_at_most_ten_minutes_unless_its_peer_is_connected() {
        let t0 = Instant::now();
        let mut set = found();
        let (idle, live) = (PeerId::random(), PeerId::random());
        set.discovered(idle, &addr("/ip4/10.0.0.7/tcp/4001"), t0);
        set.discovered(live, &addr("/ip4/10.0.0.8/tcp/4001"), t0);
        let mut t = t0;
        while t < t0 + KEEP_AT_MOST - TICK {
            assert!(set.due(t, 0, |p| *p == live).is_empty(), "no room: no dial");
            t += TICK;
        }
        assert_eq!(set.len(), 2, "both kept within ten minutes");
        set.due(t0 + KEEP_AT_MOST, 0, |p| *p == live);
        assert_eq!(set.len(), 1, "the idle entry left at ten minutes");
        set.due(t0 + KEEP_AT_MOST * 3, 0, |p| *p == live);
        assert_eq!(set.len(), 1, "the connected peer's entry is renewed");
        // Disconnected from then on: it leaves ten minutes after it was last seen connected.
        set.due(t0 + KEEP_AT_MOST * 4 + TICK, 0, |_| false);
        assert_eq!(set.len(), 0);
    }

    /// dec7a38's purpose: an honest LAN peer whose first dial failed is dialed again about a
    /// second later (not at mDNS's next query minutes later), and again with a doubling wait;
    /// a connection resets it. And an honest peer found after a flood of fake ones that keep
    /// failing still gets a slot (the set makes room, the fewest failures go first).
    #[test]
    fn an_honest_lan_peer_is_redialed_and_still_dialed_after_a_flood() {
        let t0 = Instant::now();
        let mut set = found();
        let honest = PeerId::random();
        set.discovered(honest, &addr("/ip4/192.168.1.20/tcp/4001"), t0);
        let first = set.due(t0, TARGET, |_| false);
        assert_eq!(first.len(), 1, "dialed at discovery");
        let c = ConnectionId::new_unchecked(1);
        set.dialing(honest, c, t0);
        assert!(set.due(t0, TARGET, |_| false).is_empty(), "not doubled");
        set.dial_failed(c, []);
        let again = set.due(t0 + Duration::from_millis(1_100), TARGET, |_| false);
        assert_eq!(again.len(), 1, "re-dialed a second after the failure");
        set.connected(&honest, ConnectionId::new_unchecked(2), None, t0);

        // A flood that fills the set, each fake failing once.
        let t1 = t0 + Duration::from_secs(5);
        let mut set = found();
        flood(&mut set, t1, |i| format!("/ip4/10.9.9.9/tcp/{}", 4001 + i));
        let mut n = 0;
        let mut t = t1;
        while set.peers.values().any(|f| f.failures == 0) {
            for (peer, _) in set.due(t, TARGET, |_| false) {
                let c = ConnectionId::new_unchecked(n);
                n += 1;
                set.dialing(peer, c, t);
                set.dial_failed(c, []);
            }
            t += TICK;
            assert!(
                t < t1 + Duration::from_secs(3600),
                "the flood never all dialed"
            );
        }
        assert_eq!(set.len(), 256);
        let late = PeerId::random();
        assert_eq!(
            set.discovered(late, &addr("/ip4/192.168.1.21/tcp/4001"), t),
            Discovery::Kept,
            "a full set of failing fakes makes room"
        );
        let next = set.due(t, TARGET, |_| false);
        assert_eq!(
            next.first().map(|(p, _)| *p),
            Some(late),
            "the newcomer is dialed before fakes that failed"
        );
    }

    /// Review 28 R28-4: the dial gate admits what this bookkeeping keeps, as the network task
    /// hands it over (`sync_mdns_gate`): an address refused never enters, and one dropped for
    /// failing, for its keep time or to make room leaves with it.
    #[test]
    fn the_dial_gate_admits_exactly_the_addresses_kept() {
        let gate = crate::dial::DialPolicy::new(false, true, []);
        let sync = |set: &mut MdnsFound| {
            gate.update_discovered(set.take_changes());
            // The gate's copy is exactly the set kept, changed by differences alone.
            let kept: HashSet<Multiaddr> = set.addresses().map(dial_key).collect();
            assert_eq!(
                gate.discovered_count(),
                kept.len(),
                "the gate's copy drifted"
            );
        };
        let t0 = Instant::now();
        let mut set = found();
        // 256 ids x 8 addresses, all distinct: 2,048 kept and admitted (the gate's old set of
        // 1,024 refused the rest).
        let fakes: Vec<PeerId> = (0..MAX_PEERS).map(|_| PeerId::random()).collect();
        let mut n = 0u16;
        for peer in &fakes {
            for _ in 0..MAX_ADDRESSES_PER_PEER {
                let a = addr(&format!("/ip4/10.9.{}.{}/tcp/4001", n / 250, n % 250 + 1));
                assert_eq!(set.discovered(*peer, &a, t0), Discovery::Kept);
                n += 1;
            }
        }
        sync(&mut set);
        assert!(set.take_changes().is_empty(), "a change is told once");
        let kept: Vec<Multiaddr> = set.addresses().cloned().collect();
        assert_eq!(kept.len(), 2_048);
        assert!(
            kept.iter().all(|a| gate.allows(a)),
            "a kept address refused"
        );
        // Refused by this bookkeeping (the ninth address of a peer, a full set of peers that
        // never failed): refused by the gate too.
        let ninth = addr("/ip4/10.8.0.9/tcp/4001");
        assert_eq!(set.discovered(fakes[0], &ninth, t0), Discovery::NotKept);
        let late = PeerId::random();
        let honest = addr("/ip4/192.168.1.21/tcp/4001");
        assert_eq!(set.discovered(late, &honest, t0), Discovery::NotKept);
        sync(&mut set);
        assert!(!gate.allows(&ninth) && !gate.allows(&honest));
        // The first fake fails out: its addresses leave the gate.
        let gone: Vec<Multiaddr> = set.peers[&fakes[0]]
            .addrs
            .iter()
            .map(|a| a.addr.clone())
            .collect();
        for i in 0..FAILED_DIALS_MAX {
            let c = ConnectionId::new_unchecked(i as usize);
            set.dialing(fakes[0], c, t0);
            set.dial_failed(c, []);
        }
        sync(&mut set);
        assert!(
            gone.iter().all(|a| !gate.allows(a)),
            "a failed-out address admitted"
        );
        // The honest peer found again takes the room it left, and is admitted.
        assert_eq!(set.discovered(late, &honest, t0), Discovery::Kept);
        sync(&mut set);
        assert!(
            gate.allows(&honest),
            "the honest peer kept and refused by the gate"
        );
        // Another fake fails once; a newcomer pushes it out, and the gate swaps one for the
        // other.
        let c = ConnectionId::new_unchecked(100);
        set.dialing(fakes[1], c, t0);
        set.dial_failed(c, []);
        let pushed: Vec<Multiaddr> = set.peers[&fakes[1]]
            .addrs
            .iter()
            .map(|a| a.addr.clone())
            .collect();
        let newcomer = addr("/ip4/192.168.1.22/tcp/4001");
        assert_eq!(
            set.discovered(PeerId::random(), &newcomer, t0),
            Discovery::Kept
        );
        assert!(
            !set.peers.contains_key(&fakes[1]),
            "the failing fake made room"
        );
        sync(&mut set);
        assert!(gate.allows(&newcomer));
        assert!(
            pushed.iter().all(|a| !gate.allows(a)),
            "a pushed-out address admitted"
        );
        // Past the keep time every entry leaves, and the gate is empty.
        set.due(t0 + KEEP_AT_MOST + TICK, TARGET, |_| false);
        sync(&mut set);
        assert!(!gate.allows(&honest) && !gate.allows(&kept[2_047]));
    }

    /// Review 29 R29-8: a LAN host names the honest peer P's id (public on the LAN) with 8
    /// unreachable addresses before P's own answer. Once each has failed, P's real address
    /// takes the place of one, is admitted by the gate and dialed first; once it connected, no
    /// address the squatter names again displaces it. Before, P's address was `NotKept` for as
    /// long as the squatter refilled the entry, and refused by the gate too.
    #[test]
    fn an_honest_address_displaces_failing_squatted_ones_of_the_same_peer() {
        let gate = crate::dial::DialPolicy::new(false, true, []);
        let t0 = Instant::now();
        let mut set = found();
        let p = PeerId::random();
        let fakes: Vec<Multiaddr> = (0..MAX_ADDRESSES_PER_PEER)
            .map(|i| addr(&format!("/ip4/10.66.0.{}/tcp/4001", i + 1)))
            .collect();
        for fake in &fakes {
            assert_eq!(set.discovered(p, fake, t0), Discovery::Kept);
        }
        gate.update_discovered(set.take_changes());
        // Not tried yet: the squatter's addresses hold (a newcomer does not push out an
        // address nobody has tried, or a squatter would push out P's).
        let honest = addr("/ip4/192.168.1.20/tcp/4001");
        assert_eq!(set.discovered(p, &honest, t0), Discovery::NotKept);
        // P is dialed at all 8; each fails, named as the swarm names them (with `/p2p/<id>`).
        let due = set.due(t0, TARGET, |_| false);
        assert_eq!(due.len(), 1);
        set.dialing(p, ConnectionId::new_unchecked(1), t0);
        let named: Vec<Multiaddr> = fakes
            .iter()
            .map(|a| a.clone().with(libp2p::multiaddr::Protocol::P2p(p)))
            .collect();
        set.dial_failed(ConnectionId::new_unchecked(1), &named);
        assert!(set.peers[&p].addrs.iter().all(|a| a.failures == 1));
        // P's real answer arrives: kept in place of a failing fake, and admitted by the gate.
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(
            set.discovered(p, &honest, t1),
            Discovery::Kept,
            "the honest address of a squatted peer id not kept"
        );
        gate.update_discovered(set.take_changes());
        assert!(
            gate.allows(&honest),
            "the honest address refused by the dial gate"
        );
        assert_eq!(set.peers[&p].addrs.len(), MAX_ADDRESSES_PER_PEER);
        let displaced: Vec<&Multiaddr> = fakes.iter().filter(|f| !gate.allows(f)).collect();
        assert_eq!(displaced.len(), 1, "one fake gave way: {displaced:?}");
        // Dialed now (not at the end of the doubled wait), the honest address tried first.
        let due = set.due(t1, TARGET, |_| false);
        assert_eq!(due.len(), 1, "the new address is dialed at once");
        assert_eq!(due[0].1.first(), Some(&honest), "the untried address first");
        set.dialing(p, ConnectionId::new_unchecked(2), t1);
        set.connected(
            &p,
            ConnectionId::new_unchecked(2),
            Some(&honest.clone().with(libp2p::multiaddr::Protocol::P2p(p))),
            t1,
        );
        // The squatter keeps naming new addresses for P and they keep failing: they replace
        // one another, never the address P answered at.
        for round in 0..50u32 {
            let now = t1 + Duration::from_secs(u64::from(round) + 1);
            let failing: Vec<Multiaddr> = set.peers[&p]
                .addrs
                .iter()
                .filter(|a| !a.connected)
                .map(|a| a.addr.clone())
                .collect();
            let c = ConnectionId::new_unchecked(10 + round as usize);
            set.dialing(p, c, now);
            set.dial_failed(c, &failing);
            let fresh = addr(&format!("/ip4/10.67.{}.1/tcp/4001", round));
            assert_eq!(set.discovered(p, &fresh, now), Discovery::Kept);
            gate.update_discovered(set.take_changes());
            assert!(gate.allows(&fresh));
            assert!(
                set.peers[&p].addrs.iter().any(|a| a.addr == honest),
                "the connected address displaced at round {round}"
            );
            assert!(gate.allows(&honest));
            set.connected(&p, ConnectionId::new_unchecked(5_000), None, now);
        }
        assert_eq!(gate.discovered_count(), MAX_ADDRESSES_PER_PEER);
    }

    /// Review 29 R29-10: a LAN host keeps one peer id and names and expires one address over
    /// and over, with 2,048 addresses kept. The gate hears one change per flip of that
    /// address; it was handed (and rebuilt) all 2,048 on each, 40,960,000 over these flips.
    #[test]
    fn ten_thousand_flips_of_one_address_hand_the_gate_one_change_each() {
        const FLIPS: usize = 10_000;
        let gate = crate::dial::DialPolicy::new(false, true, []);
        let t0 = Instant::now();
        let mut set = found();
        let peers: Vec<PeerId> = (0..MAX_PEERS).map(|_| PeerId::random()).collect();
        let mut n = 0u16;
        for peer in &peers {
            for _ in 0..MAX_ADDRESSES_PER_PEER {
                let a = addr(&format!("/ip4/10.9.{}.{}/tcp/4001", n / 250, n % 250 + 1));
                assert_eq!(set.discovered(*peer, &a, t0), Discovery::Kept);
                n += 1;
            }
        }
        let first = set.take_changes();
        assert_eq!(first.len(), 2_048);
        gate.update_discovered(first);
        // The flipping peer frees one slot, then its host flips an address in it.
        let flipper = peers[0];
        let slot = set.peers[&flipper].addrs[0].addr.clone();
        set.expired(&flipper, &slot);
        gate.update_discovered(set.take_changes());
        let flip = addr("/ip4/10.99.0.1/tcp/4001");
        let (mut handed, mut most) = (0usize, 0usize);
        let started = std::time::Instant::now();
        for _ in 0..FLIPS {
            assert_eq!(set.discovered(flipper, &flip, t0), Discovery::Kept);
            let changes = set.take_changes();
            (handed, most) = (handed + changes.len(), most.max(changes.len()));
            gate.update_discovered(changes);
            assert!(gate.allows(&flip));
            set.expired(&flipper, &flip);
            let changes = set.take_changes();
            (handed, most) = (handed + changes.len(), most.max(changes.len()));
            gate.update_discovered(changes);
            assert!(!gate.allows(&flip));
        }
        let took = started.elapsed();
        eprintln!(
            "{FLIPS} name/expire flips with 2,047 kept: {handed} addresses handed to the gate \
             (at most {most} at once) in {took:?}; a whole rebuild handed 2,047 or 2,048 each"
        );
        assert_eq!(handed, 2 * FLIPS, "addresses handed to the gate");
        assert_eq!(most, 1);
        // The gate's copy is still exactly the set kept.
        let kept: HashSet<Multiaddr> = set.addresses().map(dial_key).collect();
        assert_eq!(kept.len(), 2_047);
        assert_eq!(gate.discovered_count(), 2_047);
        assert!(kept.iter().all(|a| gate.allows(a)));
    }

    /// The same address kept for two peers (a LAN host may name one address for many ids)
    /// stays admitted until the last of them drops it.
    #[test]
    fn an_address_kept_for_two_peers_stays_admitted_until_both_drop_it() {
        let gate = crate::dial::DialPolicy::new(false, true, []);
        let t0 = Instant::now();
        let mut set = found();
        let (a, b) = (PeerId::random(), PeerId::random());
        let shared = addr("/ip4/10.5.5.5/tcp/4001");
        set.discovered(a, &shared, t0);
        set.discovered(
            b,
            &shared.clone().with(libp2p::multiaddr::Protocol::P2p(b)),
            t0,
        );
        gate.update_discovered(set.take_changes());
        assert!(gate.allows(&shared));
        set.expired(&a, &shared);
        gate.update_discovered(set.take_changes());
        assert!(gate.allows(&shared), "b still keeps it");
        set.expired(
            &b,
            &shared.clone().with(libp2p::multiaddr::Protocol::P2p(b)),
        );
        gate.update_discovered(set.take_changes());
        assert!(!gate.allows(&shared));
        assert_eq!(gate.discovered_count(), 0);
    }

    /// A full set of peers that never failed is not pushed out by newcomers.
    #[test]
    fn a_full_set_of_working_peers_keeps_them() {
        let t0 = Instant::now();
        let mut set = found();
        flood(&mut set, t0, |i| format!("/ip4/10.1.1.1/tcp/{}", 4001 + i));
        assert_eq!(
            set.discovered(PeerId::random(), &addr("/ip4/10.1.1.2/tcp/4001"), t0),
            Discovery::NotKept
        );
        assert_eq!(set.len(), 256);
        let peer = *set.peers.keys().next().expect("a peer");
        for i in 0..MAX_ADDRESSES_PER_PEER {
            set.discovered(peer, &addr(&format!("/ip4/10.1.1.3/tcp/{}", 5000 + i)), t0);
        }
        assert_eq!(set.peers[&peer].addrs.len(), MAX_ADDRESSES_PER_PEER);
    }
}
