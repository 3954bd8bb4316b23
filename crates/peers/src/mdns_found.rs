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
//!   LAN peer unreached until mDNS's next query minutes later).
//!
//! It is also the one owner of which mDNS-found addresses the dial gate admits (review 28
//! R28-4): the gate's set is replaced by [`MdnsFound::addresses`] whenever
//! [`MdnsFound::take_change`] says it changed. The gate kept a set of its own, fed also with
//! addresses this bookkeeping refused and emptied only by mDNS's own expiry (at the answer's
//! TTL): a LAN host naming 1,024 addresses with a huge TTL filled it for good, and an honest
//! peer found later was kept and dialed here and refused there.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId};
use tokio::time::Instant;

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
    /// A LAN address, but the set (or the peer's addresses) is full of peers not failing.
    NotKept,
}

/// One LAN peer mDNS found: where, when it is next dialed if still not connected, and until
/// when it is kept.
#[derive(Debug)]
struct Found {
    addrs: Vec<Multiaddr>,
    next_dial: Instant,
    wait: Duration,
    /// Dials in a row that failed (a connection resets it).
    failures: u32,
    keep_until: Instant,
}

/// The LAN peers mDNS found and has not expired, and the dials under way to them.
pub(crate) struct MdnsFound {
    peers: HashMap<PeerId, Found>,
    pending: HashMap<ConnectionId, (PeerId, Instant)>,
    draw: Draw,
    /// An address was kept or dropped since [`MdnsFound::take_change`] last said so: the dial
    /// gate's copy is stale.
    changed: bool,
}

impl MdnsFound {
    /// `draw` jitters the waits (seeded from the OS in a node, by a test to replay).
    pub(crate) fn new(draw: Draw) -> MdnsFound {
        MdnsFound {
            peers: HashMap::new(),
            pending: HashMap::new(),
            draw,
            changed: false,
        }
    }

    /// mDNS discovered `peer` at `addr`: a LAN address is kept (and the peer due at once).
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
        if found.addrs.contains(addr) {
            return Discovery::Kept;
        }
        if found.addrs.len() >= MAX_ADDRESSES_PER_PEER {
            return Discovery::NotKept;
        }
        found.addrs.push(addr.clone());
        self.changed = true;
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
        match worst {
            Some(peer) => {
                self.peers.remove(&peer);
                self.changed = true;
                true
            }
            None => false,
        }
    }

    /// mDNS expired its discovery of `peer` at `addr`.
    pub(crate) fn expired(&mut self, peer: &PeerId, addr: &Multiaddr) {
        if let Some(found) = self.peers.get_mut(peer) {
            let before = found.addrs.len();
            found.addrs.retain(|a| a != addr);
            self.changed |= found.addrs.len() != before;
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
    /// connected peer's is renewed.
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
        let before = self.peers.len();
        self.peers.retain(|_, found| found.keep_until > now);
        self.changed |= self.peers.len() != before;
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
            dials.push((peer, found.addrs.clone()));
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

    /// A dial ended in failure (the swarm's `OutgoingConnectionError`): counted against its
    /// peer, which leaves after [`FAILED_DIALS_MAX`] in a row. Not one of ours: nothing.
    pub(crate) fn dial_failed(&mut self, connection: ConnectionId) {
        let Some((peer, _)) = self.pending.remove(&connection) else {
            return;
        };
        if let Some(found) = self.peers.get_mut(&peer) {
            found.failures += 1;
            if found.failures >= FAILED_DIALS_MAX {
                self.peers.remove(&peer);
                self.changed = true;
            }
        }
    }

    /// A connection to `peer` is up (ours as `connection`, or any other): the peer answers, so
    /// its failures are forgotten and it is kept [`KEEP_AT_MOST`] from now.
    pub(crate) fn connected(&mut self, peer: &PeerId, connection: ConnectionId, now: Instant) {
        self.pending.remove(&connection);
        if let Some(found) = self.peers.get_mut(peer) {
            found.failures = 0;
            found.wait = FIRST_WAIT;
            found.keep_until = now + KEEP_AT_MOST;
        }
    }

    /// Whether an address was kept or dropped since the last call (which clears it): the
    /// caller then hands [`MdnsFound::addresses`] to the dial gate.
    pub(crate) fn take_change(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Addresses kept, over all peers: what the dial gate admits for mDNS, at most
    /// [`MAX_PEERS`] x [`MAX_ADDRESSES_PER_PEER`].
    pub(crate) fn addresses(&self) -> impl Iterator<Item = &Multiaddr> {
        self.peers.values().flat_map(|f| f.addrs.iter())
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
                    set.dial_failed(*c);
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
        set.dial_failed(c);
        let again = set.due(t0 + Duration::from_millis(1_100), TARGET, |_| false);
        assert_eq!(again.len(), 1, "re-dialed a second after the failure");
        set.connected(&honest, ConnectionId::new_unchecked(2), t0);

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
                set.dial_failed(c);
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
            if set.take_change() {
                gate.set_discovered(set.addresses());
            }
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
        assert!(!set.take_change(), "a change is told once");
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
        let gone = set.peers[&fakes[0]].addrs.clone();
        for i in 0..FAILED_DIALS_MAX {
            let c = ConnectionId::new_unchecked(i as usize);
            set.dialing(fakes[0], c, t0);
            set.dial_failed(c);
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
        set.dial_failed(c);
        let pushed = set.peers[&fakes[1]].addrs.clone();
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
