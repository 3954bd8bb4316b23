//! skillbox-peers: the peer network a node embeds.
//!
//! - [`advert`]: the signed presence advert (what a node offers; never model, key or body).
//! - [`board`]: the newest valid advert per peer, expiring after its TTL. Pure, no I/O.
//! - [`payload`]: signed call payloads and the receiving side's checks (size, signature,
//!   recipient, window, replay, rate). Pure, no I/O.
//! - [`transport`]: the [`PayloadTransport`] trait the calls logic uses, with an in-memory
//!   network for tests without sockets.
//! - [`index`]: the skill index's Kademlia keys and a DHT server's per-provider limits. Pure.
//! - `dial`: the dial gate every outbound connection passes (peers' addresses only when
//!   globally routable; the operator's whatever they are).
//! - `mdns_found`: the LAN peers mDNS found, kept and re-dialed within budgets a LAN host's
//!   answers cannot exhaust. Pure.
//! - [`reach`]: reachability decisions (DHT server only with a confirmed direct address, relay
//!   serving, which addresses are relayed). Pure.
//! - [`network`]: rust-libp2p (TCP and QUIC, noise + yamux, gossipsub, request-response,
//!   identify, Kademlia, AutoNAT v2, Circuit Relay v2, DCUtR, opt-in mDNS) driving all of the
//!   above; [`start`] returns a [`PeersHandle`].

pub mod advert;
mod announce;
pub mod board;
mod dial;
mod error;
pub mod index;
mod mdns_found;
pub mod network;
pub mod payload;
mod rate;
pub mod reach;
mod time;
pub mod transport;
mod wire;

pub use advert::{AcceptedBox, Advert, AdvertRefusal, Offer, OfferedSkill};
pub use board::{Board, BoardConfig, BoardRow, RowRef};
pub use error::PeersError;
pub use network::{
    Delivery, NetworkEvent, PeerInfo, PeersConfig, PeersHandle, SearchOutcome, start,
};
pub use payload::{Ack, IncomingPayload, Payload, PayloadKind, SignedPayload};
pub use reach::Reachability;
pub use transport::{MemoryNetwork, MemoryTransport, PayloadReceiver, PayloadTransport};

/// Re-exported so the node needs no direct libp2p dependency.
pub use libp2p::{Multiaddr, PeerId, identity::Keypair, multiaddr::Protocol};

/// The node's libp2p identity from its 32-byte Ed25519 secret seed (`<data_dir>/node.key`).
pub fn keypair_from_seed(seed: &[u8; 32]) -> Result<Keypair, PeersError> {
    let mut bytes = *seed;
    Keypair::ed25519_from_bytes(&mut bytes).map_err(|e| PeersError::InvalidKey(e.to_string()))
}

/// Current unix time in milliseconds, the clock the board is read with.
pub fn now_ms() -> u64 {
    time::unix_ms()
}
