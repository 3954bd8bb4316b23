//! Reachability on real libp2p in one process (issue 18 item 2): a QUIC dial carries a call
//! payload; a node that listens nowhere but on a relay's circuit gets adverts and payloads
//! through it (hole punching has nothing to punch here, so the relay carries the call); AutoNAT
//! v2 confirmation turns a node into a DHT server while an unconfirmed one stays a client; the
//! per-peer and pending connection limits refuse the connection past them. Every wait has a
//! deadline.

use std::time::{Duration, Instant};

use serde_json::json;
use skillbox_peers::reach::is_relayed;
use skillbox_peers::{Multiaddr, NetworkEvent, Payload, PeersConfig, PeersError, Protocol};

use crate::support::{
    WAIT, config, connection_addrs, full_addr, node, peer_ids, received, request, shutdown, tcp,
    wait_connected, wait_event, within,
};

/// Evaluate `$get` (an `Option`, may `.await`) until it is `Some`, within [`WAIT`].
macro_rules! wait_for {
    ($what:expr, $get:expr) => {{
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = $get {
                break v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {}", $what);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }};
}
const TEST_LIMIT: Duration = Duration::from_secs(90);

fn call(id: &str) -> Payload {
    request(id, json!({"skill": "haiku", "program": {"bytes": "e30="}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_dial_carries_a_call_payload() {
    within(TEST_LIMIT, async {
        let quic = "/ip4/127.0.0.1/udp/0/quic-v1";
        let (a, mut ra) = node(101, config(&[quic])).await;
        let (b, _rb) = node(102, config(&[quic])).await;
        let (pa, pb) = (a.local_peer_id(), b.local_peer_id());
        let target = full_addr(&a).await;
        assert!(
            target.iter().any(|p| matches!(p, Protocol::QuicV1)),
            "{target}"
        );
        assert_eq!(b.dial(target).await.expect("QUIC dial"), pa);
        b.send(pa, call("quic-1")).await.expect("delivered");
        let got = received(&mut ra).await;
        assert_eq!((got.from, got.payload.call_id.as_str()), (pb, "quic-1"));
        let over = connection_addrs(&a, &pb).await;
        assert!(
            !over.is_empty()
                && over
                    .iter()
                    .all(|a| a.iter().any(|p| matches!(p, Protocol::QuicV1))),
            "the call went over QUIC: {over:?}"
        );
        shutdown([a, b]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reachable_only_through_a_relay_gets_adverts_and_payloads_through_it() {
    within(TEST_LIMIT, async {
        // The relay: publicly reachable (forced, so its listen address counts as confirmed).
        let (relay, _rr) = node(
            111,
            PeersConfig {
                relay_server: true,
                kad_server: Some(true),
                ..tcp()
            },
        )
        .await;
        let relay_addr = full_addr(&relay).await;
        wait_for!(
            "the relay to serve",
            relay
                .reachability()
                .await
                .expect("reach")
                .relay_serving
                .then_some(())
        );
        // The private node listens nowhere: only a reservation on the relay reaches it.
        let (private, mut rp) = node(
            112,
            PeersConfig {
                relays: vec![relay_addr.clone()],
                ..config(&[])
            },
        )
        .await;
        let pp = private.local_peer_id();
        let circuit = wait_for!(
            "the relay's reservation",
            private
                .listen_addrs()
                .await
                .expect("addrs")
                .into_iter()
                .find(is_relayed)
        );
        let circuit = match circuit.iter().last() {
            Some(Protocol::P2p(p)) if p == pp => circuit,
            _ => circuit.with(Protocol::P2p(pp)),
        };
        // A relayed address is confirmed (it goes into provider records) but is not direct:
        // the private node stays a DHT client.
        let seen = private.reachability().await.expect("reach");
        assert!(
            !seen.dht_server,
            "a relayed node is no DHT server: {seen:?}"
        );
        // The caller listens nowhere either: no direct address on either side, so DCUtR has
        // nothing to punch and the relay carries the call.
        let (caller, _rc) = node(113, config(&[])).await;
        let pc = caller.local_peer_id();
        assert_eq!(caller.dial(circuit.clone()).await.expect("dial"), pp);
        let over = connection_addrs(&caller, &pp).await;
        assert!(
            !over.is_empty() && over.iter().all(is_relayed),
            "connected through the relay only: {over:?}"
        );
        // An advert: the private node's offer reaches the caller's board over the circuit.
        let skills = vec![("haiku".to_string(), "writes a haiku".to_string())];
        private
            .set_offer(crate::index::offer(&skills))
            .await
            .expect("offer");
        wait_for!(
            "the private node's advert at the caller",
            caller
                .with_board(|b, now| b.advert(&pp, now).is_some())
                .then_some(())
        );
        // A call payload, sealed end to end by the caller; the relay sees only bytes.
        caller.send(pp, call("relayed-1")).await.expect("delivered");
        let got = received(&mut rp).await;
        assert_eq!((got.from, got.payload.call_id.as_str()), (pc, "relayed-1"));
        let still = connection_addrs(&caller, &pp).await;
        assert!(
            still.iter().all(is_relayed),
            "no direct connection appeared: {still:?}"
        );
        shutdown([caller, private, relay]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autonat_confirmation_makes_a_dht_server_and_an_unconfirmed_node_stays_a_client() {
    within(TEST_LIMIT, async {
        // The AutoNAT server every node runs by default.
        let (server, _rs) = node(121, tcp()).await;
        let target = full_addr(&server).await;
        // Reachable: it listens on loopback TCP, so a dial-back gets through.
        let (reachable, _rr) = node(122, tcp()).await;
        let mut reachable_events = reachable.subscribe();
        assert!(!reachable.reachability().await.expect("reach").dht_server);
        // Unreachable: it listens nowhere, like a node behind NAT without a port forward; its
        // only address candidate is the ephemeral port the server saw it dial from.
        let (hidden, _rh) = node(123, config(&[])).await;
        let mut hidden_events = hidden.subscribe();
        reachable.dial(target.clone()).await.expect("dial");
        hidden.dial(target).await.expect("dial");

        let own = reachable.listen_addrs().await.expect("addrs")[0].clone();
        let confirmed = wait_event(&mut reachable_events, "a confirmed address", |e| match e {
            NetworkEvent::AddressConfirmed { address } => Some(address.clone()),
            _ => None,
        })
        .await;
        assert_eq!(confirmed, own, "AutoNAT confirmed the listen address");
        wait_event(&mut reachable_events, "DHT server mode", |e| {
            (*e == NetworkEvent::DhtServer(true)).then_some(())
        })
        .await;
        let r = reachable.reachability().await.expect("reach");
        assert!(r.dht_server && r.confirmed == vec![own], "{r:?}");

        let refused = wait_event(&mut hidden_events, "a failed dial-back", |e| match e {
            NetworkEvent::AddressUnreachable { address, .. } => Some(address.clone()),
            _ => None,
        })
        .await;
        let h = hidden.reachability().await.expect("reach");
        assert!(
            !h.dht_server && h.confirmed.is_empty(),
            "{refused} was not reachable, so the node stays a client: {h:?}"
        );
        shutdown([hidden, reachable, server]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_past_the_per_peer_and_pending_limits_is_refused() {
    within(TEST_LIMIT, async {
        let (a, _ra) = node(131, tcp()).await;
        let (b, _rb) = node(
            132,
            PeersConfig {
                max_connections_per_peer: 1,
                max_pending_outgoing: 1,
                ..tcp()
            },
        )
        .await;
        let pa = a.local_peer_id();
        // Without /p2p/<id> `dial` cannot tell it is connected already and opens another.
        let plain = a.listen_addrs().await.expect("addrs")[0].clone();
        assert_eq!(b.dial(plain.clone()).await.expect("first connection"), pa);
        let second = b.dial(plain).await;
        assert!(
            matches!(second, Err(PeersError::Dial { .. })),
            "the second connection to one peer is refused: {second:?}"
        );
        assert_eq!(connection_addrs(&b, &pa).await.len(), 1);

        // A peer that accepts TCP but never speaks: the dial to it stays pending (the noise
        // handshake waits), so the next dial is one past the pending limit.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = silent.local_addr().expect("addr").port();
        let hanging: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}").parse().expect("addr");
        let pending = {
            let b = b.clone();
            tokio::spawn(async move { b.dial(hanging).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (c, _rc) = node(133, tcp()).await;
        let over = b.dial(full_addr(&c).await).await;
        assert!(
            matches!(over, Err(PeersError::Dial { .. })),
            "a dial past the pending limit is refused: {over:?}"
        );
        pending.abort();
        drop(silent);
        shutdown([a, b, c]).await;
    })
    .await;
}

/// Strangers connecting in (peer ids cost nothing) take at most the inbound share of the
/// connection limit: the node can still dial out. With one limit for both directions, as many
/// inbound connections as `max_connections` locked it out of every outbound one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbound_connections_cannot_take_the_room_for_outbound_ones() {
    within(TEST_LIMIT, async {
        let limited = PeersConfig {
            max_connections: 4,
            ..tcp()
        };
        assert_eq!(limited.incoming_limit(), 3);
        let (t, _rt) = node(141, limited).await;
        let target = full_addr(&t).await;
        let mut strangers = Vec::new();
        for seed in 142..146u8 {
            let (s, rs) = node(seed, tcp()).await;
            // The fourth is past the inbound limit: its dial fails (or the connection is
            // closed at once); the first three connect.
            let _ = s.dial(target.clone()).await;
            strangers.push((s, rs));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let inbound = t.peers().await.expect("peers").len();
        assert!(inbound <= 3, "{inbound} strangers connected in");
        let (h, _rh) = node(146, tcp()).await;
        let dialed = t.dial(full_addr(&h).await).await;
        assert_eq!(
            dialed.expect("the node dials out past the strangers"),
            h.local_peer_id()
        );
        for (s, _) in strangers {
            s.shutdown().await;
        }
        shutdown([t, h]).await;
    })
    .await;
}

/// A TCP listener on loopback standing for a service on the node's machine (a database, an
/// admin port): the address a hostile peer hands the node, and a count of connections to it.
async fn service_on_this_machine() -> (
    Multiaddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((_conn, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let addr = format!("/ip4/127.0.0.1/tcp/{port}")
        .parse()
        .expect("multiaddr");
    (addr, seen, task)
}

fn dialing_private(on: bool) -> PeersConfig {
    PeersConfig {
        dial_private_addresses: on,
        send_attempts: 2,
        ..tcp()
    }
}

/// A peer's identify says it listens on a loopback service of ours; once it has gone, a payload
/// to it makes the node dial what identify's and request-response's address books hold.
/// Returns the connections the service saw.
async fn identify_attack(seed: u8, dial_private: bool) -> usize {
    let (service, seen, task) = service_on_this_machine().await;
    let (victim, _rv) = node(seed, dialing_private(dial_private)).await;
    let (hostile, _rh) = node(
        seed + 1,
        PeersConfig {
            external_addresses: vec![service.clone()],
            ..tcp()
        },
    )
    .await;
    let ph = hostile.local_peer_id();
    hostile.dial(full_addr(&victim).await).await.expect("dial");
    wait_for!("identify's listen addresses", {
        victim
            .peers()
            .await
            .expect("peers")
            .iter()
            .any(|p| p.peer == ph.to_base58() && p.listen_addrs.contains(&service.to_string()))
            .then_some(())
    });
    hostile.shutdown().await;
    wait_for!("the hostile peer gone", {
        (!crate::support::peer_ids(&victim)
            .await
            .contains(&ph.to_base58()))
        .then_some(())
    });
    let sent = victim.send(ph, call("lure-1")).await;
    assert!(sent.is_err(), "the hostile peer is gone: {sent:?}");
    // A dial the swarm started still connecting: give it a moment to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = seen.load(std::sync::atomic::Ordering::SeqCst);
    task.abort();
    victim.shutdown().await;
    n
}

/// The attack: a peer's identify hands the node the address of a service on its own machine,
/// and the node connects there (SSRF-like probing; the outcome tells the peer the port is
/// open). With `dial_private_addresses` off the service sees no connection; on (a LAN or test
/// deployment) it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_address_from_identify_is_not_dialed_unless_private_dials_are_on() {
    within(TEST_LIMIT, async {
        assert_eq!(
            identify_attack(150, false).await,
            0,
            "the node dialed a loopback service a peer named"
        );
        assert!(
            identify_attack(152, true).await > 0,
            "the switch on dials it"
        );
    })
    .await;
}

/// Kademlia's closer peers: a DHT server answers the node's bootstrap query with a peer whose
/// address is a service on the node's machine; the node's query dials the peers it is given.
async fn kad_attack(seed: u8, dial_private: bool) -> usize {
    let (service, seen, task) = service_on_this_machine().await;
    // The DHT server dials nothing private itself: any connection to the service is the
    // victim's.
    let (server, _rs) = node(
        seed,
        PeersConfig {
            kad_server: Some(true),
            ..dialing_private(false)
        },
    )
    .await;
    let (lure, _rl) = node(
        seed + 1,
        PeersConfig {
            kad_server: Some(true),
            external_addresses: vec![service.clone()],
            ..tcp()
        },
    )
    .await;
    lure.dial(full_addr(&server).await).await.expect("dial");
    // The server's routing table holds the lure under the service's address (identify, then
    // `routable_for_dht`: loopback over loopback) before the victim asks.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (victim, _rv) = node(
        seed + 2,
        PeersConfig {
            bootstrap: vec![full_addr(&server).await],
            ..dialing_private(dial_private)
        },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline && seen.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = seen.load(std::sync::atomic::Ordering::SeqCst);
    task.abort();
    shutdown([victim, lure, server]).await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_address_among_kademlias_closer_peers_is_not_dialed_unless_private_dials_are_on()
{
    within(TEST_LIMIT, async {
        assert_eq!(
            kad_attack(155, false).await,
            0,
            "the node dialed a loopback service a DHT server named"
        );
        assert!(kad_attack(158, true).await > 0, "the switch on dials it");
    })
    .await;
}

/// AutoNAT v2: a client asks the node's AutoNAT server to dial back an address of its choice
/// (here its own loopback listener: a service on the node's machine). With private dials off
/// the server does not dial it, and the client hears its address is unreachable; on, the dial
/// goes out and the address is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autonat_client_cannot_make_the_server_dial_a_loopback_address() {
    within(TEST_LIMIT, async {
        for (seed, dial_private) in [(161u8, false), (163, true)] {
            let (server, _rs) = node(seed, dialing_private(dial_private)).await;
            let (client, _rc) = node(seed + 1, tcp()).await;
            let mut events = client.subscribe();
            let own = client.listen_addrs().await.expect("addrs")[0].clone();
            client.dial(full_addr(&server).await).await.expect("dial");
            let confirmed = wait_event(&mut events, "the dial-back's outcome", |e| match e {
                NetworkEvent::AddressConfirmed { address } if *address == own => Some(true),
                NetworkEvent::AddressUnreachable { address, .. } if *address == own => Some(false),
                _ => None,
            })
            .await;
            assert_eq!(
                confirmed, dial_private,
                "the server dialed a loopback address back: {confirmed}"
            );
            shutdown([client, server]).await;
        }
    })
    .await;
}

/// P6: a node whose only connections are strangers that connected in re-dials its bootstrap
/// peer. It used to re-dial only when it had no connection at all: once the bootstrap peer
/// went away, peers that connected in (ids cost nothing, all perhaps one party's) were its
/// whole view of the network for as long as they stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_left_with_inbound_peers_only_re_dials_its_bootstrap() {
    within(TEST_LIMIT, async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let at = format!("/ip4/127.0.0.1/tcp/{port}");
        let (b, _rb) = node(161, config(&[at.as_str()])).await;
        let bootstrap = full_addr(&b).await;
        let bp = b.local_peer_id();
        let (t, _rt) = node(
            162,
            PeersConfig {
                bootstrap: vec![bootstrap],
                advert_interval: Duration::from_millis(500),
                ..tcp()
            },
        )
        .await;
        wait_connected(&t, &bp).await;
        let (s, _rs) = node(163, tcp()).await;
        s.dial(full_addr(&t).await)
            .await
            .expect("the stranger connects in");
        b.shutdown().await;
        wait_for!("the bootstrap peer gone", {
            let ids = peer_ids(&t).await;
            (!ids.contains(&bp.to_base58())).then_some(())
        });
        // The bootstrap peer is back at its address; the stranger is still connected.
        let (b, _rb) = node(161, config(&[at.as_str()])).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !peer_ids(&t).await.contains(&bp.to_base58()) {
            assert!(
                Instant::now() < deadline,
                "never re-dialed the bootstrap peer while a stranger was connected in"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(peer_ids(&t).await.contains(&s.local_peer_id().to_base58()));
        shutdown([t, s, b]).await;
    })
    .await;
}

/// Review 23b P5: with mDNS on and private dials off, the dial gate admits only what mDNS
/// discovered — so two nodes on one machine still find and connect to each other by mDNS (at
/// the machine's LAN address; loopback stays refused without private dials).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_with_mdns_find_each_other_through_the_dial_gate() {
    // mDNS runs on LAN interfaces only (libp2p-mdns skips loopback): a machine whose only
    // interface is loopback cannot carry this test, and the gate's rule itself is covered by
    // `dial::tests::with_mdns_only_the_lan_addresses_mdns_discovered_are_dialed`. Said, not hidden.
    let Some(lan) = multicast_source() else {
        eprintln!(
            "two_nodes_with_mdns: not run: this machine has no non-loopback IPv4 route to \
             224.0.0.251 (mDNS's group)"
        );
        return;
    };
    within(TEST_LIMIT, async {
        let mdns = PeersConfig {
            mdns: true,
            dial_private_addresses: false,
            ..config(&["/ip4/0.0.0.0/tcp/0"])
        };
        let (a, _ra) = node(171, mdns.clone()).await;
        let (b, _rb) = node(172, mdns).await;
        eprintln!("two_nodes_with_mdns: multicast goes out from {lan}");
        wait_connected(&a, &b.local_peer_id()).await;
        shutdown([a, b]).await;
    })
    .await;
}

/// The IPv4 address this machine sends mDNS's multicast from, when it is not loopback.
fn multicast_source() -> Option<std::net::Ipv4Addr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("224.0.0.251:5353").ok()?;
    match socket.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(v4),
        _ => None,
    }
}

/// Review 27 F3: one hostile mDNS answer — 256 fresh peer ids x 8 addresses of a LAN host that
/// accepts TCP and never speaks (the dial stays pending the way it does at a host dropping
/// SYNs) — made the node dial them all at once and keep every dial pending: the swarm's
/// `max_pending_outgoing` (64) filled and the node's own dial to a real peer was denied. Now
/// mDNS dials keep to their own small budget, and the node's dial to a peer goes through while
/// the flood's dials hang. (The answer is handed to the node as mDNS would hand it: no
/// multicast responder is needed, and none sends a packet off this machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_mdns_answers_at_a_silent_lan_host_leaves_room_for_the_nodes_own_dials() {
    let Some(lan) = multicast_source().filter(|ip| lan_range(*ip)) else {
        eprintln!(
            "mdns flood: not run: this machine has no LAN-range IPv4 address of its own (the \
             silent host must be one mDNS may name, and must be this machine)"
        );
        return;
    };
    within(TEST_LIMIT, async {
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut silent_hosts = Vec::new();
        let mut addrs: Vec<Multiaddr> = Vec::new();
        for _ in 0..8 {
            let listener = tokio::net::TcpListener::bind((lan, 0)).await.expect("bind");
            let port = listener.local_addr().expect("addr").port();
            addrs.push(format!("/ip4/{lan}/tcp/{port}").parse().expect("multiaddr"));
            let seen = accepted.clone();
            silent_hosts.push(tokio::spawn(async move {
                // Accept, hold, never answer: the dialer's handshake waits.
                let mut held = Vec::new();
                while let Ok((conn, _)) = listener.accept().await {
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    held.push(conn);
                }
            }));
        }
        let (a, _ra) = node(
            181,
            PeersConfig {
                mdns: true,
                dial_private_addresses: false,
                ..tcp()
            },
        )
        .await;
        let (b, _rb) = node(182, tcp()).await;
        let answer: Vec<(skillbox_peers::PeerId, Multiaddr)> = (0..256)
            .flat_map(|_| {
                let peer = skillbox_peers::PeerId::random();
                addrs.iter().map(move |addr| (peer, addr.clone()))
            })
            .collect();
        a.mdns_discovered(answer)
            .await
            .expect("the answer handed over");
        wait_for!(
            "the flood's first dial to reach the silent host",
            (accepted.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
        );
        // Let every dial the answer causes get under way.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let dialed = a.dial(full_addr(&b).await).await;
        let held = accepted.load(std::sync::atomic::Ordering::SeqCst);
        eprintln!("mdns flood: the silent host holds {held} connections from the node");
        assert_eq!(
            dialed.expect("the node's own dial while the flood's dials hang"),
            b.local_peer_id()
        );
        // The mDNS budget (4 dials under way) x 8 addresses each, dialed concurrently.
        assert!(
            held <= 4 * 8,
            "{held} connections to the silent host at once"
        );
        for host in silent_hosts {
            host.abort();
        }
        shutdown([a, b]).await;
    })
    .await;
}

/// Review 28 R28-4: a LAN host naming over 1,024 distinct LAN addresses with a TTL that never
/// ends filled the dial gate's own set of mDNS addresses for good (it took every LAN address an
/// answer named, kept or not, and forgot one only at mDNS's expiry). An honest LAN peer found
/// after that was kept and dialed by the node's mDNS bookkeeping and refused by the gate,
/// until restart. Now the gate admits exactly what that bookkeeping keeps: the flood's
/// addresses (closed ports on this machine's LAN address: each dial fails at once) fail, and
/// the honest peer found after them is dialed and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_lan_peer_found_after_a_flood_of_over_1024_mdns_addresses_connects() {
    let Some(lan) = multicast_source().filter(|ip| lan_range(*ip)) else {
        eprintln!(
            "mdns gate flood: not run: this machine has no LAN-range IPv4 address of its own \
             (the flooded and the honest addresses must be ones mDNS may name, on this machine)"
        );
        return;
    };
    within(TEST_LIMIT, async {
        let listen = format!("/ip4/{lan}/tcp/0");
        let (b, _rb) = node(192, config(&[listen.as_str()])).await;
        let honest = crate::support::addr(&b).await;
        let honest_port = honest.iter().fold(0, |port, p| match p {
            Protocol::Tcp(p) => p,
            _ => port,
        });
        // 1,040 distinct closed ports at the LAN address (not the honest peer's): bound,
        // noted, released.
        let mut ports = std::collections::BTreeSet::new();
        while ports.len() < 1_040 {
            let mut batch = Vec::new();
            for _ in 0..256 {
                let l = std::net::TcpListener::bind((lan, 0)).expect("bind");
                let port = l.local_addr().expect("addr").port();
                if port != honest_port {
                    ports.insert(port);
                }
                batch.push(l);
            }
        }
        let flood: Vec<Multiaddr> = ports
            .iter()
            .take(1_040)
            .map(|port| format!("/ip4/{lan}/tcp/{port}").parse().expect("multiaddr"))
            .collect();
        let (a, _ra) = node(
            191,
            PeersConfig {
                mdns: true,
                dial_private_addresses: false,
                ..tcp()
            },
        )
        .await;
        // 130 peer ids x 8 addresses, all distinct: one answer naming 1,040 LAN addresses.
        let answer: Vec<(skillbox_peers::PeerId, Multiaddr)> = flood
            .chunks(8)
            .flat_map(|addrs| {
                let peer = skillbox_peers::PeerId::random();
                addrs.iter().map(move |addr| (peer, addr.clone()))
            })
            .collect();
        assert_eq!(answer.len(), 1_040);
        a.mdns_discovered(answer)
            .await
            .expect("the answer handed over");
        // The honest peer answers mDNS after the flood, at its LAN address.
        a.mdns_discovered(vec![(b.local_peer_id(), honest.clone())])
            .await
            .expect("the honest answer handed over");
        // Each discovery handed over runs the node's mDNS dials (as its prune tick does): an
        // empty one pumps them at once, so the test need not wait out ticks for the flood's
        // 130 ids to be dialed and fail before the honest peer's turn.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !peer_ids(&a).await.contains(&b.local_peer_id().to_base58()) {
            assert!(
                Instant::now() < deadline,
                "the honest LAN peer found after the flood never connected"
            );
            a.mdns_discovered(Vec::new()).await.expect("a pump");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let at: Vec<Multiaddr> = connection_addrs(&a, &b.local_peer_id())
            .await
            .iter()
            .map(|c| {
                c.iter()
                    .filter(|p| !matches!(p, Protocol::P2p(_)))
                    .collect()
            })
            .collect();
        assert!(at.contains(&honest), "connected at {at:?}, not at {honest}");
        shutdown([a, b]).await;
    })
    .await;
}

/// An address in a range an mDNS answer may name (RFC 1918, link-local, the IPv4
/// documentation ranges: `reach::mdns_lan`); CGNAT and benchmarking are not (review 28 R28-9).
fn lan_range(ip: std::net::Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_private()
        || (ip.is_link_local() && ip != std::net::Ipv4Addr::new(169, 254, 169, 254))
        || (a, b, c) == (192, 0, 2)
        || (a, b, c) == (198, 51, 100)
        || (a, b, c) == (203, 0, 113)
}

/// Review 29 R29-8: the honest LAN peer's id is public on the LAN (its own answers name it). A
/// LAN host names that id with 8 addresses that refuse connections (closed ports at this
/// machine's LAN address), before and again after each of the peer's own answers, refilling
/// the entry whenever it leaves. The peer's real address was `NotKept` (its 8 slots full) and
/// refused by the dial gate, so the node never reached it over mDNS; now it takes the place of
/// a failed fake, is dialed first and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_lan_peer_whose_id_a_lan_host_squats_connects() {
    let Some(lan) = multicast_source().filter(|ip| lan_range(*ip)) else {
        eprintln!(
            "mdns squat: not run: this machine has no LAN-range IPv4 address of its own (the \
             squatted and the honest addresses must be ones mDNS may name, on this machine)"
        );
        return;
    };
    within(TEST_LIMIT, async {
        let listen = format!("/ip4/{lan}/tcp/0");
        let (b, _rb) = node(194, config(&[listen.as_str()])).await;
        let honest = crate::support::addr(&b).await;
        let honest_port = honest.iter().fold(0, |port, p| match p {
            Protocol::Tcp(p) => p,
            _ => port,
        });
        // 8 closed ports at the LAN address: bound, noted, released.
        let mut held = Vec::new();
        let mut squat: Vec<Multiaddr> = Vec::new();
        while squat.len() < 8 {
            let l = std::net::TcpListener::bind((lan, 0)).expect("bind");
            let port = l.local_addr().expect("addr").port();
            if port != honest_port {
                squat.push(format!("/ip4/{lan}/tcp/{port}").parse().expect("multiaddr"));
            }
            held.push(l);
        }
        drop(held);
        let (a, _ra) = node(
            193,
            PeersConfig {
                mdns: true,
                dial_private_addresses: false,
                ..tcp()
            },
        )
        .await;
        let squatted: Vec<(skillbox_peers::PeerId, Multiaddr)> = squat
            .iter()
            .map(|addr| (b.local_peer_id(), addr.clone()))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut rounds = 0u32;
        while !peer_ids(&a).await.contains(&b.local_peer_id().to_base58()) {
            assert!(
                Instant::now() < deadline,
                "the honest LAN peer whose id a LAN host squats never connected ({rounds} rounds)"
            );
            // The squatter answers first, every time; then the peer's own answer.
            a.mdns_discovered(squatted.clone())
                .await
                .expect("the squatter's answer handed over");
            a.mdns_discovered(vec![(b.local_peer_id(), honest.clone())])
                .await
                .expect("the honest answer handed over");
            rounds += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("mdns squat: connected after {rounds} rounds of answers");
        let at: Vec<Multiaddr> = connection_addrs(&a, &b.local_peer_id())
            .await
            .iter()
            .map(|c| {
                c.iter()
                    .filter(|p| !matches!(p, Protocol::P2p(_)))
                    .collect()
            })
            .collect();
        assert!(at.contains(&honest), "connected at {at:?}, not at {honest}");
        shutdown([a, b]).await;
    })
    .await;
}
