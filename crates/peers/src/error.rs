//! The one error type of this crate.

use libp2p::{Multiaddr, PeerId};

/// Everything that can go wrong in the peer network, named so a caller can tell what to fix.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    #[error("invalid peers config: {0}")]
    InvalidConfig(String),
    #[error("invalid node key: {0}")]
    InvalidKey(String),
    #[error("invalid offer: {0}")]
    InvalidOffer(String),
    #[error("invalid payload: {0}")]
    InvalidPayload(String),
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: Multiaddr, reason: String },
    #[error("cannot dial {addr}: {reason}")]
    Dial { addr: Multiaddr, reason: String },
    #[error("payload of {size} bytes is larger than the limit of {max} bytes")]
    PayloadTooLarge { size: usize, max: usize },
    #[error("peer {peer} refused the payload: {reason}")]
    Refused { peer: PeerId, reason: String },
    #[error("peer {peer} unreachable after {attempts} attempts: {last_error}")]
    Unreachable {
        peer: PeerId,
        attempts: u32,
        last_error: String,
    },
    #[error("cannot publish advert: {0}")]
    Publish(String),
    #[error("encoding failed: {0}")]
    Encoding(String),
    #[error("the peer network has stopped")]
    Stopped,
}
