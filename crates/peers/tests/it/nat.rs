//! The NAT test (issue 18): two nodes, each behind its own masquerading NAT in a Linux network
//! namespace, and one public relay node (`scripts/nat-netns` builds the namespaces, documentation
//! addresses, no route out). The callee offers a skill; the caller finds it through the skill
//! index (the relay is the only DHT server), fetches its advert and sends it a call payload —
//! over a hole-punched direct connection if DCUtR managed one, else through the relay. The test
//! prints which. Needs root, `ip` and `nft`: without them it says so loudly and does nothing.
//!
//! Each node is a child process of this test binary, started inside its namespace with
//! `ip netns exec` and told its part by `SKILLBOX_NAT_ROLE` (see [`nat_role_process`]).

use std::time::{Duration, Instant};

use serde_json::json;
use skillbox_peers::reach::is_relayed;
use skillbox_peers::{
    Multiaddr, NetworkEvent, Payload, PayloadKind, PeerId, PeersConfig, PeersHandle,
    keypair_from_seed, start,
};
use skillbox_testkit::nat::{
    NAT1_PUBLIC_IP, Namespaces, NsProc, PUBLIC_IP, exit_with_parent, missing_capability, skipped,
};
use tokio::sync::broadcast::error::RecvError;

const ROLE_ENV: &str = "SKILLBOX_NAT_ROLE";
const RELAY_IP: &str = PUBLIC_IP;
/// The callee's NAT's public address: a direct connection to the callee comes from here.
const CALLEE_NAT_IP: &str = NAT1_PUBLIC_IP;
const SKILL: &str = "nat-haiku";
const DESCRIPTION: &str = "writes a haiku about network address translation and relays";
const CHILD_LIMIT: Duration = Duration::from_secs(150);

fn seed(role: &str) -> [u8; 32] {
    let mut s = [0u8; 32];
    s[0] = match role {
        "relay" => 201,
        "callee" => 202,
        _ => 203,
    };
    s
}

fn peer_of(role: &str) -> PeerId {
    keypair_from_seed(&seed(role))
        .expect("key")
        .public()
        .to_peer_id()
}

fn relay_addr() -> Multiaddr {
    format!("/ip4/{RELAY_IP}/tcp/4001/p2p/{}", peer_of("relay"))
        .parse()
        .expect("relay multiaddr")
}

/// Relay, callee and caller in their namespaces (`prefix` names them); the caller's call is
/// received. Returns how it went (`direct` or `relayed`) and over which address, or `None`
/// when this machine cannot build namespaces (the test `what` says so loudly). `strict`: the
/// callee and caller keep the shipped dial policy (private addresses off), where the
/// namespaces' documentation-range "public" addresses count as private.
fn call_across_nats(what: &str, prefix: &str, strict: bool) -> Option<(String, Multiaddr)> {
    if let Some(missing) = missing_capability() {
        skipped(what, &missing);
        return None;
    }
    let ns = Namespaces::up(prefix);
    let node = |namespace: String, role: &str| {
        let role = if strict && role != "relay" {
            format!("{role}{STRICT}")
        } else {
            role.to_owned()
        };
        NsProc::role(&namespace, "nat::nat_role_process", ROLE_ENV, &role)
    };
    let relay = node(ns.public(), "relay");
    relay.wait_line("READY", Duration::from_secs(60));
    let callee = node(ns.host(1), "callee");
    callee.wait_line("READY", Duration::from_secs(60));
    let caller = node(ns.host(2), "caller");
    let path = caller.wait_line("PATH", CHILD_LIMIT);
    let received = callee.wait_line("RECEIVED", Duration::from_secs(30));
    assert_eq!(received, "nat-call-1");
    let (how, over) = path.split_once(' ').expect("PATH <how> <address>");
    Some((how.to_owned(), over.parse().expect("an address")))
}

/// A role's suffix: the node keeps the shipped dial policy.
const STRICT: &str = "/strict";

/// DCUtR's dials pass the dial gate too: with private dials off, the callee's NAT address (a
/// documentation range here, so not global) is not dialed for a hole punch, and the call stays
/// on the relay. Before the gate the hole punch dialed whatever address the peer observed
/// (here it went direct).
#[test]
fn a_hole_punch_dials_no_address_outside_the_dial_policy() {
    let Some((how, over)) = call_across_nats("the strict NAT test", "sbxs", true) else {
        return;
    };
    assert_eq!(how, "relayed", "the hole punch dialed {over}");
    assert!(is_relayed(&over), "{over}");
}

#[test]
fn two_nodes_behind_their_own_nats_find_each_other_and_call_directly_or_through_the_relay() {
    let Some((how, over)) = call_across_nats("the NAT test", "sbx", false) else {
        return;
    };
    println!("NAT test: the call went {how} {over}");
    match how.as_str() {
        "relayed" => assert!(is_relayed(&over), "{over}"),
        "direct" => assert!(
            !is_relayed(&over) && over.to_string().contains(CALLEE_NAT_IP),
            "a direct connection reaches the callee at its NAT's public address: {over}"
        ),
        other => panic!("unknown path {other}"),
    }
}

/// The entry point of the node processes the NAT test starts (inside a namespace, with
/// `SKILLBOX_NAT_ROLE` set); without that variable it has nothing to do.
#[test]
fn nat_role_process() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    exit_with_parent();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        tokio::time::timeout(CHILD_LIMIT, run_role(&role))
            .await
            .expect("the node process finished in time");
    });
}

fn listen(ip: &str) -> Vec<Multiaddr> {
    [
        format!("/ip4/{ip}/tcp/4001"),
        format!("/ip4/{ip}/udp/4001/quic-v1"),
    ]
    .iter()
    .map(|a| a.parse().expect("listen multiaddr"))
    .collect()
}

async fn run_role(role: &str) {
    let (role, strict) = match role.strip_suffix(STRICT) {
        Some(role) => (role, true),
        None => (role, false),
    };
    let key = keypair_from_seed(&seed(role)).expect("key");
    let config = match role {
        "relay" => PeersConfig {
            listen: listen(RELAY_IP),
            relay_server: true,
            kad_server: Some(true),
            // The namespaces' "public" addresses are documentation ranges: private to the dial
            // policy, so this test deployment allows them.
            dial_private_addresses: true,
            ..PeersConfig::default()
        },
        _ => PeersConfig {
            listen: listen("0.0.0.0"),
            // The relay is the bootstrap peer too (a relay dialled twice at start lost its
            // reservation before `dial_bootstrap` left relays to the relay client).
            bootstrap: vec![relay_addr()],
            relays: vec![relay_addr()],
            dial_private_addresses: !strict,
            ..PeersConfig::default()
        },
    };
    let (node, mut inbox) = start(config, key).await.expect("node starts");
    match role {
        "relay" => {
            println!("READY");
            tokio::time::sleep(CHILD_LIMIT).await;
        }
        "callee" => {
            let mut events = node.subscribe();
            let circuit = wait_relayed_listen(&node).await;
            println!("RESERVED {circuit}");
            let skills = vec![(SKILL.to_string(), DESCRIPTION.to_string())];
            node.set_offer(crate::index::offer(&skills))
                .await
                .expect("offer");
            println!("READY {circuit}");
            let got = inbox.recv().await.expect("a payload");
            println!("RECEIVED {}", got.payload.call_id);
            // Stay up while the caller watches for a hole punch; say how ours went (the side
            // that accepted the relayed connection starts DCUtR).
            let _ = tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    match events.recv().await {
                        Ok(NetworkEvent::HolePunch { peer, direct }) => {
                            println!("HOLE-PUNCH {peer} direct={direct}");
                        }
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => break,
                    }
                }
            })
            .await;
        }
        _ => caller(&node).await,
    }
    node.shutdown().await;
}

async fn wait_relayed_listen(node: &PeersHandle) -> Multiaddr {
    let mut n = 0u32;
    loop {
        n += 1;
        if n.is_multiple_of(50) {
            println!(
                "WAITING listen {:?} peers {:?} reach {:?}",
                node.listen_addrs().await,
                node.peers().await.map(|p| p.len()),
                node.reachability().await
            );
        }
        if let Some(a) = node
            .listen_addrs()
            .await
            .expect("addrs")
            .into_iter()
            .find(is_relayed)
        {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn caller(node: &PeersHandle) {
    let callee = peer_of("callee");
    let mut events = node.subscribe();
    wait_relayed_listen(node).await;
    // The callee's records reach the relay (the only DHT server) after its reservation.
    loop {
        let outcome = node.search(DESCRIPTION).await.expect("search runs");
        if outcome.peers.contains(&callee) {
            println!("FOUND {SKILL} at {callee} ({} lookups)", outcome.lookups);
            break;
        }
        println!(
            "SEARCHED named {} fetched {} refused {}",
            outcome.named.len(),
            outcome.fetched,
            outcome.refused
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let payload = Payload {
        kind: PayloadKind::CallRequest,
        call_id: "nat-call-1".into(),
        body: json!({"skill": SKILL, "program": {"bytes": "e30="}}),
    };
    node.send(callee, payload).await.expect("delivered");
    // DCUtR runs on the relayed connection; give it its attempts, then report the path.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut punched = None;
    while punched.is_none() && Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Ok(Ok(NetworkEvent::HolePunch { peer, direct })) =
            tokio::time::timeout(left, events.recv()).await
            && peer == callee
        {
            punched = Some(direct);
        }
    }
    println!("HOLE-PUNCH {punched:?}");
    let addrs: Vec<Multiaddr> = node
        .peers()
        .await
        .expect("peers")
        .into_iter()
        .filter(|p| p.peer == callee.to_base58())
        .flat_map(|p| p.addresses)
        .filter_map(|a| a.parse().ok())
        .collect();
    match addrs.iter().find(|a| !is_relayed(a)) {
        Some(direct) => println!("PATH direct {direct}"),
        None => {
            let relayed = addrs.first().expect("still connected to the callee");
            println!("PATH relayed {relayed}");
        }
    }
}
