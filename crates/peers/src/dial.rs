//! Which addresses this node dials: the door every outbound connection passes.
//!
//! Peers hand a node addresses in many ways — Kademlia's closer peers and provider records,
//! identify's listen addresses (kept in identify's and request-response's address books), an
//! AutoNAT v2 client's "dial me back here", DCUtR's hole-punch candidates, a relayed address's
//! relay. Each ends in one call: the transport's `dial`. [`DialGate`] wraps the whole transport
//! (TCP, QUIC, the in-process memory one; the relay client's circuits dial their relay through
//! it too), so one check covers every path, present and future, where a check in each
//! behaviour would miss the addresses the others add to a dial.
//!
//! The rule ([`DialPolicy::allows`]): a globally routable address is dialed; an address the
//! operator gave (bootstrap peers, relays, an explicit dial) is dialed whatever it is; a LAN
//! address with `dial_private_addresses`, or with mDNS on only the very address an mDNS
//! discovery named (a node that asked for mDNS asked for the LAN peers it finds, not for every
//! LAN address a peer hands it: identify, Kademlia, an AutoNAT v2 dial-back request and DCUtR
//! carry addresses any internet peer chose, and opening all of the LAN to them let it probe the
//! node's LAN through its AutoNAT server); a loopback address (this machine) and the
//! in-process memory transport only with `dial_private_addresses`; multicast, broadcast,
//! reserved, IPv4-mapped or translated IPv6 and DNS names never (a name is judged only after it
//! resolves, and this node's transports resolve none: a name a peer gives is not dialed).
//! Without this, a hostile peer made the node connect to services on its own machine or LAN
//! and learned from the outcome which ports were open.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use libp2p::Multiaddr;
use libp2p::core::transport::{DialOpts, ListenerId, Transport, TransportError, TransportEvent};
use libp2p::multiaddr::Protocol;

use crate::mdns_found::GateChange;
use crate::reach::{DialScope, dial_scope};

/// Explicitly dialed addresses remembered at most (the operator alone adds them; the bound only
/// keeps a long-running node's set from growing for ever).
const MAX_OPERATOR_ADDRESSES: usize = 4_096;

/// mDNS-discovered LAN addresses admitted at most: what [`crate::mdns_found::MdnsFound`] keeps
/// at most, which bounds them already (any LAN host can answer mDNS); this only keeps the gate
/// bounded on its own.
const MAX_DISCOVERED_ADDRESSES: usize =
    crate::mdns_found::MAX_PEERS * crate::mdns_found::MAX_ADDRESSES_PER_PEER;

/// What [`DialGate`] lets through (shared with the network task, which adds the operator's
/// explicit dials).
#[derive(Debug)]
pub(crate) struct DialPolicy {
    /// LAN ranges (RFC 1918, link-local, CGNAT, unique-local, documentation, benchmarking):
    /// `dial_private_addresses`.
    lan: bool,
    /// mDNS on: the LAN addresses it discovered (and only those) are dialed.
    mdns: bool,
    /// Loopback, the unspecified address and the in-process memory transport.
    local: bool,
    /// Addresses the operator configured (bootstrap peers, relays) and dialed explicitly,
    /// without their `/p2p/<id>` (what a transport dials).
    configured: HashSet<Multiaddr>,
    explicit: Mutex<HashSet<Multiaddr>>,
    /// The LAN addresses [`crate::mdns_found::MdnsFound`] keeps, without `/p2p/<id>`: a copy
    /// it alone changes ([`DialPolicy::update_discovered`]), so the two never disagree.
    discovered: Mutex<HashSet<Multiaddr>>,
}

impl DialPolicy {
    /// `private`: `dial_private_addresses`; `mdns`: multicast discovery on (the LAN addresses it
    /// discovers allowed, through [`DialPolicy::update_discovered`]).
    pub(crate) fn new(
        private: bool,
        mdns: bool,
        operator: impl IntoIterator<Item = Multiaddr>,
    ) -> DialPolicy {
        DialPolicy {
            lan: private,
            mdns,
            local: private,
            configured: operator
                .into_iter()
                .flat_map(|a| operator_keys(&a))
                .collect(),
            explicit: Mutex::new(HashSet::new()),
            discovered: Mutex::new(HashSet::new()),
        }
    }

    /// What changed in the LAN addresses mDNS found and [`crate::mdns_found::MdnsFound`] keeps:
    /// these (and no others) are dialed for mDNS. An address it stopped keeping (failed, kept
    /// too long, pushed out, expired) leaves with it, and one it never kept never enters
    /// (review 28 R28-4). Only the difference comes, not the whole set rebuilt on each change
    /// (review 29 R29-10: up to 2,048 addresses for one address a LAN host named or expired).
    /// Without mDNS, or for an address an mDNS answer may not name
    /// ([`crate::reach::mdns_lan`]), nothing is admitted.
    pub(crate) fn update_discovered(&self, changes: impl IntoIterator<Item = GateChange>) {
        let mut set = self.discovered.lock().unwrap_or_else(|p| p.into_inner());
        for change in changes {
            match change {
                GateChange::Admit(addr) => {
                    let admissible = self.mdns && crate::reach::mdns_lan(&addr);
                    if admissible && set.len() < MAX_DISCOVERED_ADDRESSES {
                        set.insert(dial_key(&addr));
                    }
                }
                GateChange::Revoke(addr) => {
                    set.remove(&dial_key(&addr));
                }
            }
        }
    }

    /// mDNS-found addresses admitted now.
    #[cfg(test)]
    pub(crate) fn discovered_count(&self) -> usize {
        self.discovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// The operator dialed `addr` explicitly (`skillbox peer add`): dialed whatever it is.
    pub(crate) fn allow_operator(&self, addr: &Multiaddr) {
        let mut set = self.explicit.lock().unwrap_or_else(|p| p.into_inner());
        if set.len() >= MAX_OPERATOR_ADDRESSES {
            // Only the operator's own dials got here: start over rather than grow for ever.
            set.clear();
        }
        set.extend(operator_keys(addr));
    }

    /// Whether the transport may dial `addr`.
    pub(crate) fn allows(&self, addr: &Multiaddr) -> bool {
        let allowed = match dial_scope(addr) {
            DialScope::Public => true,
            DialScope::Lan => self.lan,
            DialScope::Local => self.local,
            DialScope::Never => false,
        };
        if allowed {
            return true;
        }
        let key = dial_key(addr);
        self.configured.contains(&key)
            || self
                .explicit
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&key)
            // Only LAN addresses enter the set, and only with mDNS on.
            || self
                .discovered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&key)
    }
}

/// What an address the operator gave admits: the address as a transport dials it and, for a
/// circuit address (`<relay>/p2p-circuit/p2p/<target>`), the relay's own address, which the
/// relay client dials through this gate (a LAN relay was refused otherwise).
fn operator_keys(addr: &Multiaddr) -> Vec<Multiaddr> {
    let mut keys = vec![dial_key(addr)];
    if let Some(at) = addr.iter().position(|p| matches!(p, Protocol::P2pCircuit)) {
        let relay: Multiaddr = addr.iter().take(at).collect();
        keys.push(dial_key(&relay));
    }
    keys
}

/// `addr` without its trailing `/p2p/<id>`s: the swarm appends the peer id to what it dials,
/// the operator may or may not have written one.
pub(crate) fn dial_key(addr: &Multiaddr) -> Multiaddr {
    let mut key = addr.clone();
    while matches!(key.iter().last(), Some(Protocol::P2p(_))) {
        key.pop();
    }
    key
}

/// A transport that dials only what [`DialPolicy`] allows; listening is untouched.
pub(crate) struct DialGate<T> {
    inner: T,
    policy: Arc<DialPolicy>,
}

impl<T> DialGate<T> {
    pub(crate) fn new(inner: T, policy: Arc<DialPolicy>) -> DialGate<T> {
        DialGate { inner, policy }
    }
}

impl<T: Transport + Unpin> Transport for DialGate<T> {
    type Output = T::Output;
    type Error = T::Error;
    type ListenerUpgrade = T::ListenerUpgrade;
    type Dial = T::Dial;

    fn listen_on(
        &mut self,
        id: ListenerId,
        addr: Multiaddr,
    ) -> Result<(), TransportError<Self::Error>> {
        self.inner.listen_on(id, addr)
    }

    fn remove_listener(&mut self, id: ListenerId) -> bool {
        self.inner.remove_listener(id)
    }

    fn dial(
        &mut self,
        addr: Multiaddr,
        opts: DialOpts,
    ) -> Result<Self::Dial, TransportError<Self::Error>> {
        if !self.policy.allows(&addr) {
            tracing::debug!(%addr, "not dialing an address outside the dial policy");
            // "Not supported": the swarm tries the peer's other addresses, none of which the
            // refused one's owner learns about.
            return Err(TransportError::MultiaddrNotSupported(addr));
        }
        self.inner.dial(addr, opts)
    }

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<TransportEvent<Self::ListenerUpgrade, Self::Error>> {
        Pin::new(&mut self.inner).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Multiaddr {
        s.parse().expect("test multiaddr")
    }

    #[test]
    fn peers_addresses_are_dialed_only_when_global_unless_the_operator_named_them() {
        let id = libp2p::PeerId::random();
        let off = DialPolicy::new(
            false,
            false,
            [addr(&format!("/ip4/10.1.2.3/tcp/4001/p2p/{id}"))],
        );
        let mdns = DialPolicy::new(false, true, []);
        let on = DialPolicy::new(true, false, []);
        for public in [
            "/ip4/8.8.8.8/tcp/4001",
            "/ip6/2606:4700::1/udp/4001/quic-v1",
        ] {
            assert!(off.allows(&addr(public)), "{public}");
        }
        for lan in [
            "/ip4/192.168.1.7/tcp/22",
            "/ip4/10.0.0.1/tcp/80",
            "/ip4/169.254.169.254/tcp/80",
            "/ip4/100.64.0.1/tcp/80",
            "/ip6/fd00::1/tcp/80",
            "/ip6/fe80::1/tcp/80",
        ] {
            assert!(!off.allows(&addr(lan)), "{lan}");
            // mDNS admits only what it discovered (see the test below): a LAN address from
            // any other source is a peer's choice, and dialing it probed the LAN for that peer.
            assert!(!mdns.allows(&addr(lan)), "{lan}");
            assert!(on.allows(&addr(lan)), "{lan}");
        }
        for local in [
            "/ip4/127.0.0.1/tcp/6379",
            "/ip6/::1/tcp/6379",
            "/ip6/::/tcp/6379",
            "/memory/7",
        ] {
            assert!(!off.allows(&addr(local)), "{local}");
            assert!(
                !mdns.allows(&addr(local)),
                "mDNS is the LAN, not this machine: {local}"
            );
            assert!(on.allows(&addr(local)), "{local}");
        }
        for never in [
            "/ip4/0.0.0.0/tcp/6379",
            "/ip6/::ffff:127.0.0.1/tcp/6379",
            "/ip4/224.0.0.1/tcp/80",
            "/ip4/255.255.255.255/tcp/80",
            "/dns4/localhost/tcp/6379",
            "/dns/internal.example/tcp/80",
        ] {
            assert!(!on.allows(&addr(never)), "{never}");
        }
        // The operator's bootstrap peer, with or without its id, and nothing else at that host.
        assert!(off.allows(&addr("/ip4/10.1.2.3/tcp/4001")));
        assert!(off.allows(&addr(&format!("/ip4/10.1.2.3/tcp/4001/p2p/{id}"))));
        assert!(!off.allows(&addr("/ip4/10.1.2.3/tcp/22")));
        assert!(!off.allows(&addr("/ip4/10.1.2.3/udp/4001/quic-v1")));
        off.allow_operator(&addr("/ip4/127.0.0.1/tcp/4002"));
        assert!(off.allows(&addr("/ip4/127.0.0.1/tcp/4002")));
    }

    /// Review 23b P5: with mDNS on, an internet peer named LAN addresses (identify, Kademlia, an
    /// AutoNAT v2 dial-back request) and the node dialed them, probing its own LAN for the peer.
    /// Now only the address an mDNS discovery named is dialed, and only while it is kept.
    #[test]
    fn with_mdns_only_the_lan_addresses_mdns_discovered_are_dialed() {
        let mdns = DialPolicy::new(false, true, []);
        let ssh = addr("/ip4/10.0.0.1/tcp/22");
        let found = addr("/ip4/10.0.0.1/tcp/4001");
        assert!(
            !mdns.allows(&ssh),
            "a LAN address nobody discovered is refused"
        );
        assert!(!mdns.allows(&found), "not yet discovered");
        assert!(!mdns.allows(&addr("/ip4/169.254.169.254/tcp/80")));
        let named = addr(&format!(
            "/ip4/10.0.0.1/tcp/4001/p2p/{}",
            libp2p::PeerId::random()
        ));
        mdns.update_discovered([GateChange::Admit(named.clone())]);
        assert!(mdns.allows(&found), "the discovered address is dialed");
        assert!(
            !mdns.allows(&ssh),
            "the discovered host's other ports are not"
        );
        assert!(!mdns.allows(&addr("/ip4/10.0.0.2/tcp/4001")));
        // An mDNS answer naming loopback opens nothing: mDNS is the LAN, not this machine.
        // Nor a tailnet or the metadata service (review 28 R28-9).
        let loopback = addr("/ip4/127.0.0.1/tcp/4001");
        let tailnet = addr("/ip4/100.100.1.1/tcp/4001");
        let metadata = addr("/ip4/169.254.169.254/tcp/80");
        mdns.update_discovered(
            [&loopback, &tailnet, &metadata].map(|a| GateChange::Admit(a.clone())),
        );
        assert!(mdns.allows(&found));
        for refused in [&loopback, &tailnet, &metadata] {
            assert!(!mdns.allows(refused), "{refused}");
        }
        mdns.update_discovered([GateChange::Revoke(named)]);
        assert!(!mdns.allows(&found), "no longer kept, no longer dialed");
        // Without mDNS a discovery (which cannot happen) opens nothing either.
        let off = DialPolicy::new(false, false, []);
        off.update_discovered([GateChange::Admit(found.clone())]);
        assert!(!off.allows(&found));
    }

    /// Ranges that looked global and are not: local-use NAT64 reaches the LAN's IPv4, site-local
    /// is a LAN, IPv4-compatible goes out as IPv4 in IPv6 to the address it embeds.
    #[test]
    fn nat64_local_use_site_local_and_ipv4_compatible_addresses_are_not_global() {
        let off = DialPolicy::new(false, false, []);
        let on = DialPolicy::new(true, false, []);
        for never in [
            "/ip6/64:ff9b:1::a00:1/tcp/80",
            "/ip6/64:ff9b::a00:1/tcp/80",
            "/ip6/::7f00:1/tcp/6379",
            "/ip6/::a00:1/tcp/80",
        ] {
            assert_eq!(dial_scope(&addr(never)), DialScope::Never, "{never}");
            assert!(!on.allows(&addr(never)), "{never}");
        }
        assert_eq!(
            dial_scope(&addr("/ip6/fec0::1/tcp/80")),
            DialScope::Lan,
            "site-local"
        );
        assert!(!off.allows(&addr("/ip6/fec0::1/tcp/80")));
        assert!(on.allows(&addr("/ip6/fec0::1/tcp/80")));
        // `::` and `::1` are in `::/96` and stay this machine's.
        assert_eq!(dial_scope(&addr("/ip6/::1/tcp/80")), DialScope::Local);
        assert_eq!(dial_scope(&addr("/ip6/::/tcp/80")), DialScope::Local);
    }

    /// An operator's circuit address through a LAN relay: the relay client dials the relay's
    /// own address through the gate, which is admitted with it; the relay's other ports are not.
    #[test]
    fn an_operators_circuit_address_admits_its_relay() {
        let (relay, target) = (libp2p::PeerId::random(), libp2p::PeerId::random());
        let circuit = addr(&format!(
            "/ip4/10.0.0.5/tcp/4001/p2p/{relay}/p2p-circuit/p2p/{target}"
        ));
        let explicit = DialPolicy::new(false, false, []);
        assert!(!explicit.allows(&addr("/ip4/10.0.0.5/tcp/4001")));
        explicit.allow_operator(&circuit);
        let configured = DialPolicy::new(false, false, [circuit]);
        for policy in [&explicit, &configured] {
            assert!(policy.allows(&addr("/ip4/10.0.0.5/tcp/4001")));
            assert!(policy.allows(&addr(&format!("/ip4/10.0.0.5/tcp/4001/p2p/{relay}"))));
            assert!(!policy.allows(&addr("/ip4/10.0.0.5/tcp/22")));
        }
    }
}
