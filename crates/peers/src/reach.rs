//! Reachability (issue 18 item 2), on libp2p's own machinery: QUIC beside TCP, AutoNAT v2 to
//! confirm a direct address, Circuit Relay v2 (client everywhere, server on public nodes),
//! DCUtR hole punching. This module holds the pure decisions; `network` wires the behaviours.
//!
//! What decides what:
//! - An address goes into the DHT (our provider records, what identify tells peers) only once
//!   the swarm holds it as a *confirmed* external address: AutoNAT v2 confirmed it (a server
//!   dialled it back on a fresh port), the operator declared it (`external_addresses`), or a
//!   relay granted a reservation (a `/p2p-circuit` address, reachable through that relay).
//! - The node is a Kademlia (DHT) server only with a confirmed *direct* address — a circuit
//!   address does not count: a relayed node answering DHT queries would route all of them
//!   through its relay. [`crate::PeersConfig::kad_server`] overrides either way.
//! - The relay server (when configured) serves only while the node has a confirmed direct
//!   address: a node behind NAT relaying for others would only add a hop.

use libp2p::Multiaddr;
use libp2p::multiaddr::Protocol;

/// Whether `addr` goes through a relay (`.../p2p-circuit/...`).
pub fn is_relayed(addr: &Multiaddr) -> bool {
    addr.iter().any(|p| matches!(p, Protocol::P2pCircuit))
}

/// Whether the node answers DHT queries: the operator's override, else whether any confirmed
/// external address is direct (not through a relay).
pub fn dht_server<'a>(
    forced: Option<bool>,
    confirmed: impl IntoIterator<Item = &'a Multiaddr>,
) -> bool {
    forced.unwrap_or_else(|| has_direct(confirmed))
}

/// Whether a configured relay server serves: only with a confirmed direct address.
pub fn relay_serves<'a>(
    configured: bool,
    confirmed: impl IntoIterator<Item = &'a Multiaddr>,
) -> bool {
    configured && has_direct(confirmed)
}

fn has_direct<'a>(confirmed: impl IntoIterator<Item = &'a Multiaddr>) -> bool {
    confirmed.into_iter().any(|a| !is_relayed(a))
}

/// How far an address reaches: the internet, a private network (loopback, RFC 1918, link-local,
/// CGNAT, documentation and benchmarking ranges, unique-local, site-local), nowhere a peer
/// should be sent (multicast, broadcast, reserved, the IPv4 "this network" block, IPv4-mapped,
/// IPv4-compatible and translated IPv6 — local-use NAT64 included —, 6to4, discard), or none of these (the in-process memory transport, DNS names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Public,
    Private,
    Never,
    Other,
}

fn scope_v4(ip: std::net::Ipv4Addr) -> Scope {
    let [a, b, c, _] = ip.octets();
    if a == 0 || ip.is_multicast() || a >= 240 {
        // "This network", multicast, reserved and the limited broadcast address.
        return Scope::Never;
    }
    let private = ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_documentation()
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (18..20).contains(&b))
        || (a == 192 && b == 0 && c == 0);
    if private {
        Scope::Private
    } else {
        Scope::Public
    }
}

fn scope_v6(ip: std::net::Ipv6Addr) -> Scope {
    let seg = ip.segments();
    // IPv4-compatible (`::a.b.c.d`, deprecated), not `::` or `::1`: Linux sends it to sit0 as
    // IPv4 in IPv6, towards whatever IPv4 address it embeds.
    let v4_compatible = seg[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback();
    if ip.is_multicast()
        || ip.to_ipv4_mapped().is_some()
        || v4_compatible
        // `64:ff9b::/96` (well-known NAT64) and `64:ff9b:1::/48` (local-use NAT64, RFC 8215,
        // which reaches the LAN's IPv4): the whole `64:ff9b::/32`.
        || (seg[0] == 0x0064 && seg[1] == 0xff9b)
        || seg[0] == 0x2002
        || (seg[0] == 0x0100 && seg[1..4] == [0, 0, 0])
    {
        // Mapped, compatible or translated IPv4 (judged, if at all, as IPv4), 6to4, discard: no
        // peer is sent there.
        return Scope::Never;
    }
    let private = ip.is_loopback()
        || ip.is_unspecified()
        || (seg[0] & 0xfe00) == 0xfc00
        || (seg[0] & 0xffc0) == 0xfe80
        // Site-local (`fec0::/10`): deprecated, still routed inside some legacy LANs.
        || (seg[0] & 0xffc0) == 0xfec0
        || (seg[0] == 0x2001 && seg[1] == 0x0db8)
        || (seg[0] == 0x3fff && seg[1] < 0x1000);
    if private {
        Scope::Private
    } else {
        Scope::Public
    }
}

fn scope(addr: &Multiaddr) -> Scope {
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => scope_v4(ip),
        Some(Protocol::Ip6(ip)) => scope_v6(ip),
        _ => Scope::Other,
    }
}

/// How far a dial to an address reaches, for the dial policy (`dial`): the internet, the LAN,
/// this machine (loopback, the unspecified address, which connects to it, and the in-process
/// memory transport), or nowhere a peer should send this node (multicast, broadcast, reserved,
/// mapped or translated IPv6, DNS names, which no transport here resolves, anything else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DialScope {
    Public,
    Lan,
    Local,
    Never,
}

pub(crate) fn dial_scope(addr: &Multiaddr) -> DialScope {
    let (scope, local) = match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => (scope_v4(ip), ip.is_loopback()),
        Some(Protocol::Ip6(ip)) => (scope_v6(ip), ip.is_loopback() || ip.is_unspecified()),
        Some(Protocol::Memory(_)) => return DialScope::Local,
        _ => return DialScope::Never,
    };
    match scope {
        Scope::Public => DialScope::Public,
        Scope::Private if local => DialScope::Local,
        Scope::Private => DialScope::Lan,
        Scope::Never | Scope::Other => DialScope::Never,
    }
}

/// Whether an address an mDNS answer named is a LAN peer's, to be kept and dialed (review 28
/// R28-9): a [`DialScope::Lan`] address, less the ranges that are private without being the
/// LAN. Any LAN host can answer mDNS naming any address, and the node then dials it from its
/// own position, so an address the node reaches and the LAN host does not is refused:
/// - `100.64.0.0/10` (carrier-grade NAT, and the tailnets of Tailscale and Headscale);
/// - `198.18.0.0/15` (benchmarking, also the "fake IP" range of some VPN clients);
/// - `192.0.0.0/24` (IETF protocol assignments: the DS-Lite AFTR `192.0.0.1`, PCP and TURN
///   anycast `192.0.0.9`/`.10`, on the ISP's side and reached over the default route, like
///   carrier-grade NAT; review 29 R29-9);
/// - the cloud service endpoints on link-local addresses, `169.254.169.0/24` and
///   `169.254.170.0/24` (instance metadata `.169.254`, Amazon DNS `.169.253`, time sync
///   `.169.123`, container credentials `169.254.170.2`, pod identity `.170.23`) and
///   `fd00:ec2::/32` (their IPv6 twins): services of the node's host, never LAN peers (R29-9);
/// - site-local `fec0::/10` (deprecated; the LAN's peers have link-local or ULA addresses).
///
/// A libp2p dial sends only multistream and Noise bytes, so dialing these leaks no credential;
/// what it gives a LAN host is a probe of services from the node's position.
///
/// What stays: RFC 1918, the rest of link-local (`169.254/16`, `fe80::/10`), unique-local
/// `fc00::/7`, and
/// the IPv4 documentation ranges, which route nowhere real and which test networks (this
/// project's own test hosts among them) number their LANs from. Loopback was never LAN.
pub(crate) fn mdns_lan(addr: &Multiaddr) -> bool {
    if dial_scope(addr) != DialScope::Lan {
        return false;
    }
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => {
            let [a, b, c, _] = ip.octets();
            let cgnat = a == 100 && (64..128).contains(&b);
            let benchmarking = a == 198 && (18..20).contains(&b);
            let protocol_assignments = a == 192 && b == 0 && c == 0;
            let cloud_services = a == 169 && b == 254 && (c == 169 || c == 170);
            !(cgnat || benchmarking || protocol_assignments || cloud_services)
        }
        Some(Protocol::Ip6(ip)) => {
            let seg = ip.segments();
            let site_local = (seg[0] & 0xffc0) == 0xfec0;
            let cloud_services = seg[0] == 0xfd00 && seg[1] == 0x0ec2;
            // The IPv6 documentation ranges are as unrouted as IPv4's, but no test network
            // here uses them and a LAN peer has link-local or ULA addresses.
            let documentation =
                (seg[0] == 0x2001 && seg[1] == 0x0db8) || (seg[0] == 0x3fff && seg[1] < 0x1000);
            !(site_local || cloud_services || documentation)
        }
        _ => false,
    }
}

/// Whether a DHT server's self-reported address may enter our routing table (from where peers
/// learn it): a public address, or one in the scope of the connection it came over (a LAN or a
/// single machine is its own network). A loopback or LAN address learned over the internet is
/// meaningless to everyone else — go-libp2p's public DHT filters its routing table the same way.
/// Relayed addresses never: a DHT server is reached directly.
pub fn routable_for_dht(addr: &Multiaddr, via: &Multiaddr) -> bool {
    if is_relayed(addr) {
        return false;
    }
    match scope(addr) {
        Scope::Public => true,
        Scope::Never => false,
        s => s == scope(via),
    }
}

/// What this node knows of its own reachability (`PeersHandle::reachability`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reachability {
    /// Kademlia server mode now (answers DHT queries, stores provider records).
    pub dht_server: bool,
    /// The relay server is serving reservations and circuits now.
    pub relay_serving: bool,
    /// Confirmed external addresses: what goes into the DHT and identify.
    pub confirmed: Vec<Multiaddr>,
}

/// Why a relay address in the config is unusable, if it is.
pub(crate) fn relay_addr_problem(addr: &Multiaddr) -> Option<&'static str> {
    if is_relayed(addr) {
        return Some("a relay address must be the relay's own, without /p2p-circuit");
    }
    if !matches!(addr.iter().last(), Some(Protocol::P2p(_))) {
        return Some("a relay address must end with /p2p/<relay peer id>");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Multiaddr {
        s.parse().expect("test multiaddr")
    }

    fn relay() -> String {
        format!("/ip4/192.0.2.1/tcp/4001/p2p/{}", libp2p::PeerId::random())
    }

    /// Review 28 R28-9: an mDNS answer naming a tailnet, benchmarking, metadata or site-local
    /// address is not a LAN peer's; the LAN's own ranges are.
    #[test]
    fn mdns_admits_the_lan_ranges_and_refuses_private_ranges_that_are_not_the_lan() {
        for refused in [
            "/ip4/100.64.0.1/tcp/4001",
            "/ip4/100.100.1.1/tcp/1",
            "/ip4/100.127.255.254/tcp/4001",
            "/ip4/198.18.0.1/tcp/4001",
            "/ip4/198.19.255.1/tcp/4001",
            "/ip4/169.254.169.254/tcp/80",
            "/ip6/fd00:ec2::254/tcp/80",
            // Review 29 R29-9: the ISP side's anycast and the other cloud service endpoints.
            "/ip4/192.0.0.1/tcp/4001",
            "/ip4/192.0.0.9/udp/5351/quic-v1",
            "/ip4/192.0.0.10/tcp/3478",
            "/ip4/192.0.0.255/tcp/4001",
            "/ip4/169.254.169.253/tcp/4001",
            "/ip4/169.254.169.123/tcp/123",
            "/ip4/169.254.169.0/tcp/4001",
            "/ip4/169.254.170.2/tcp/80",
            "/ip4/169.254.170.23/tcp/80",
            "/ip4/169.254.170.255/tcp/80",
            "/ip6/fd00:ec2::23/tcp/80",
            "/ip6/fd00:ec2::123/tcp/123",
            "/ip6/fd00:ec2:ffff::1/tcp/4001",
            "/ip6/fec0::1/tcp/4001",
            "/ip6/2001:db8::1/tcp/4001",
            "/ip6/3fff::1/tcp/4001",
            // Never LAN before either: loopback, the unspecified address, public, memory.
            "/ip4/127.0.0.1/tcp/4001",
            "/ip6/::1/tcp/4001",
            "/ip4/0.0.0.0/tcp/4001",
            "/ip4/93.184.216.34/tcp/443",
            "/memory/1",
        ] {
            assert!(!mdns_lan(&addr(refused)), "{refused} admitted");
        }
        for admitted in [
            "/ip4/10.1.2.3/tcp/4001",
            "/ip4/172.16.0.9/tcp/4001",
            "/ip4/172.31.255.9/tcp/4001",
            "/ip4/192.168.1.20/udp/4001/quic-v1",
            "/ip4/169.254.10.20/tcp/4001",
            // The rest of link-local stays, up to the cloud blocks' edges.
            "/ip4/169.254.168.255/tcp/4001",
            "/ip4/169.254.171.0/tcp/4001",
            "/ip4/192.0.2.2/tcp/4001",
            "/ip4/198.51.100.7/tcp/4001",
            "/ip4/203.0.113.7/tcp/4001",
            "/ip6/fe80::1/tcp/4001",
            "/ip6/fd12:3456::1/tcp/4001",
            "/ip6/fc00::1/tcp/4001",
            "/ip6/fd00:ec3::1/tcp/4001",
            "/ip6/fd00:ec1:ffff::1/tcp/4001",
        ] {
            assert!(mdns_lan(&addr(admitted)), "{admitted} refused");
        }
        // The edges of the refused IPv4 blocks are LAN's neighbours, not the LAN: public.
        assert!(!mdns_lan(&addr("/ip4/100.63.255.255/tcp/1")));
        assert!(!mdns_lan(&addr("/ip4/100.128.0.1/tcp/1")));
    }

    #[test]
    fn only_a_direct_confirmed_address_makes_a_dht_server() {
        let direct = addr("/ip4/198.51.100.7/udp/4001/quic-v1");
        let circuit = addr(&format!("{}/p2p-circuit", relay()));
        assert!(!dht_server(None, []), "nothing confirmed: client");
        assert!(!dht_server(None, [&circuit]), "relayed only: client");
        assert!(dht_server(None, [&circuit, &direct]));
        assert!(dht_server(Some(true), []), "forced server");
        assert!(!dht_server(Some(false), [&direct]), "forced client");
        assert!(!relay_serves(true, [&circuit]));
        assert!(relay_serves(true, [&direct]));
        assert!(!relay_serves(false, [&direct]));
    }

    #[test]
    fn only_public_or_same_network_addresses_enter_the_routing_table() {
        let public_conn = addr("/ip4/1.1.1.9/tcp/4001");
        let lan_conn = addr("/ip4/192.168.1.9/tcp/51000");
        assert!(routable_for_dht(
            &addr("/ip4/8.8.4.4/udp/4001/quic-v1"),
            &public_conn
        ));
        assert!(!routable_for_dht(
            &addr("/ip4/127.0.0.1/tcp/4001"),
            &public_conn
        ));
        assert!(!routable_for_dht(
            &addr("/ip4/10.0.0.5/tcp/4001"),
            &public_conn
        ));
        assert!(!routable_for_dht(
            &addr("/ip6/fe80::1/tcp/4001"),
            &public_conn
        ));
        assert!(routable_for_dht(
            &addr("/ip4/192.168.1.7/tcp/4001"),
            &lan_conn
        ));
        assert!(routable_for_dht(&addr("/memory/7"), &addr("/memory/9")));
        assert!(!routable_for_dht(&addr("/memory/7"), &public_conn));
        let circuit = addr(&format!("{}/p2p-circuit", relay()));
        assert!(!routable_for_dht(&circuit, &lan_conn));
        // Addresses that looked public and are not: none enters over the internet, and those
        // no peer should be sent to enter over no connection at all.
        for never in [
            "/ip6/::ffff:10.0.0.1/tcp/4001",
            "/ip6/::ffff:127.0.0.1/tcp/4001",
            "/ip6/64:ff9b::a00:1/tcp/4001",
            "/ip6/2002:a00:1::1/tcp/4001",
            "/ip6/ff02::1/tcp/4001",
            "/ip4/0.1.2.3/tcp/4001",
            "/ip4/224.0.0.1/tcp/4001",
            "/ip4/255.255.255.255/tcp/4001",
            "/ip4/240.0.0.1/tcp/4001",
        ] {
            assert!(!routable_for_dht(&addr(never), &public_conn), "{never}");
            assert!(!routable_for_dht(&addr(never), &lan_conn), "{never}");
            assert!(!routable_for_dht(&addr(never), &addr(never)), "{never}");
        }
        for private in ["/ip4/198.18.0.1/tcp/4001", "/ip4/192.0.0.8/tcp/4001"] {
            assert!(!routable_for_dht(&addr(private), &public_conn), "{private}");
            assert!(routable_for_dht(&addr(private), &lan_conn), "{private}");
        }
    }

    #[test]
    fn relay_addresses_must_name_the_relay_and_not_be_circuits() {
        let relay = relay();
        assert_eq!(relay_addr_problem(&addr(&relay)), None);
        assert!(relay_addr_problem(&addr("/ip4/192.0.2.1/tcp/4001")).is_some());
        assert!(relay_addr_problem(&addr(&format!("{relay}/p2p-circuit"))).is_some());
    }
}
