//! What the real-node tests (`network`, `reach`) share: nodes on 127.0.0.1 from a fixed seed,
//! their addresses, and waits that each end at a deadline with the thing waited for named.

use std::future::Future;
use std::time::{Duration, Instant};

use skillbox_peers::{
    IncomingPayload, Multiaddr, NetworkEvent, Payload, PayloadKind, PayloadReceiver, PeerId,
    PeersConfig, PeersHandle, Protocol, keypair_from_seed, start,
};
use tokio::sync::broadcast;

/// Longest any single wait in these tests may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// Listening on each of `listen` (none: a node reachable only by what it dials or a relay), with
/// gossip quick enough for a test, and dialing the loopback addresses its peers give (every
/// node here is on 127.0.0.1: a test deployment).
pub fn config(listen: &[&str]) -> PeersConfig {
    PeersConfig {
        listen: listen
            .iter()
            .map(|a| a.parse().expect("test multiaddr"))
            .collect(),
        gossip_heartbeat: Duration::from_millis(200),
        dial_private_addresses: true,
        ..PeersConfig::default()
    }
}

/// [`config`] on loopback TCP, an ephemeral port.
pub fn tcp() -> PeersConfig {
    config(&["/ip4/127.0.0.1/tcp/0"])
}

pub async fn node(seed: u8, config: PeersConfig) -> (PeersHandle, PayloadReceiver) {
    start(config, keypair_from_seed(&[seed; 32]).expect("key"))
        .await
        .expect("node starts")
}

/// A node for each of `seeds`, all on `config`: the usual start of a test of several peers.
pub async fn nodes<const N: usize>(
    seeds: [u8; N],
    config: PeersConfig,
) -> [(PeersHandle, PayloadReceiver); N] {
    let mut started = Vec::with_capacity(N);
    for seed in seeds {
        started.push(node(seed, config.clone()).await);
    }
    match started.try_into() {
        Ok(all) => all,
        Err(_) => unreachable!("one node per seed"),
    }
}

/// The node's first listen address, without `/p2p/<id>` (a bootstrap address may omit it).
pub async fn addr(h: &PeersHandle) -> Multiaddr {
    h.listen_addrs().await.expect("addrs")[0].clone()
}

/// The node's first listen address with `/p2p/<id>`.
pub async fn full_addr(h: &PeersHandle) -> Multiaddr {
    addr(h).await.with(Protocol::P2p(h.local_peer_id()))
}

/// Runs a test body under an overall limit, so a hung network fails the test instead of CI.
pub async fn within<T>(limit: Duration, body: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, body)
        .await
        .expect("test finished in time")
}

pub async fn shutdown<const N: usize>(nodes: [PeersHandle; N]) {
    for h in nodes {
        h.shutdown().await;
    }
}

pub fn request(call: &str, body: serde_json::Value) -> Payload {
    Payload {
        kind: PayloadKind::CallRequest,
        call_id: call.into(),
        body,
    }
}

/// The next payload handed to this node, within [`WAIT`].
pub async fn received(rx: &mut PayloadReceiver) -> IncomingPayload {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a payload in time")
        .expect("the payload channel is open")
}

/// The remote addresses of `h`'s open connections to `peer`.
pub async fn connection_addrs(h: &PeersHandle, peer: &PeerId) -> Vec<Multiaddr> {
    h.peers()
        .await
        .expect("peers")
        .into_iter()
        .filter(|p| p.peer == peer.to_base58())
        .flat_map(|p| p.addresses)
        .map(|a| a.parse().expect("a connection address parses"))
        .collect()
}

/// The peer ids `h` holds connections to.
pub async fn peer_ids(h: &PeersHandle) -> Vec<String> {
    h.peers()
        .await
        .expect("peers")
        .into_iter()
        .map(|p| p.peer)
        .collect()
}

/// Until `h` holds a connection to `peer`, within [`WAIT`].
pub async fn wait_connected(h: &PeersHandle, peer: &PeerId) {
    let deadline = Instant::now() + WAIT;
    let listed =
        |peers: Vec<skillbox_peers::PeerInfo>| peers.iter().any(|p| p.peer == peer.to_base58());
    while !listed(h.peers().await.expect("peers")) {
        assert!(Instant::now() < deadline, "never connected to {peer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first event `pick` accepts, within [`WAIT`].
pub async fn wait_event<T>(
    events: &mut broadcast::Receiver<NetworkEvent>,
    what: &str,
    mut pick: impl FnMut(&NetworkEvent) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Ok(e)) => {
                if let Some(t) = pick(&e) {
                    return t;
                }
            }
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(e)) => panic!("event stream ended waiting for {what}: {e}"),
            Err(_) => panic!("no {what} within {WAIT:?}"),
        }
    }
}
