//! The calls logic sends payloads and receives them through [`PayloadTransport`], so its state
//! machine can be tested without sockets ([`MemoryNetwork`]) and run over libp2p
//! ([`crate::PeersHandle`]) unchanged.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use libp2p::PeerId;
use libp2p::identity::Keypair;
use tokio::sync::mpsc;

use crate::PeersError;
use crate::payload::{
    Inbox, InboxConfig, IncomingPayload, Payload, Received, SeqClock, SignedPayload,
};
use crate::time::unix_ms;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Payloads received, in order, each once: the calls logic's inbound event stream.
pub type PayloadReceiver = mpsc::Receiver<IncomingPayload>;

/// Sending side of the payload channel between nodes.
pub trait PayloadTransport: Send + Sync {
    /// This node's id.
    fn local_peer_id(&self) -> PeerId;
    /// Sign and deliver `payload` to `to`. `Ok` means the peer acknowledged it (delivered now, or
    /// already before: a retry of something that arrived is acknowledged as a duplicate).
    fn send(&self, to: PeerId, payload: Payload) -> BoxFuture<'_, Result<(), PeersError>>;
}

struct MemoryPeer {
    inbox: Inbox,
    tx: mpsc::Sender<IncomingPayload>,
}

/// An in-process network of nodes for state-machine tests: real signatures, real replay and
/// rate checks (the same [`Inbox`] as libp2p uses), no sockets.
#[derive(Clone, Default)]
pub struct MemoryNetwork {
    peers: Arc<Mutex<HashMap<PeerId, MemoryPeer>>>,
}

impl MemoryNetwork {
    pub fn new() -> MemoryNetwork {
        MemoryNetwork::default()
    }

    /// Add a node; returns its transport and its payload stream.
    pub fn join(
        &self,
        keypair: Keypair,
        config: InboxConfig,
        queue: usize,
    ) -> (MemoryTransport, PayloadReceiver) {
        let peer = keypair.public().to_peer_id();
        let (tx, rx) = mpsc::channel(queue.max(1));
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.insert(
            peer,
            MemoryPeer {
                inbox: Inbox::new(peer, config),
                tx,
            },
        );
        (
            MemoryTransport {
                network: self.clone(),
                keypair: Arc::new(keypair),
                seq: Arc::new(Mutex::new(SeqClock::default())),
            },
            rx,
        )
    }

    /// Take a node off the network: sends to it fail as unreachable.
    pub fn leave(&self, peer: &PeerId) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.remove(peer);
    }

    fn deliver(
        &self,
        from: &PeerId,
        to: &PeerId,
        signed: &SignedPayload,
    ) -> Result<Received, PeersError> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(target) = peers.get_mut(to) else {
            return Err(PeersError::Unreachable {
                peer: *to,
                attempts: 1,
                last_error: "not on the memory network".into(),
            });
        };
        if target.tx.capacity() == 0 {
            return Err(PeersError::Unreachable {
                peer: *to,
                attempts: 1,
                last_error: "receiver queue full".into(),
            });
        }
        let received = target.inbox.receive(from, signed, unix_ms());
        if let Received::New(incoming) = &received
            && target.tx.try_send((**incoming).clone()).is_err()
        {
            return Err(PeersError::Unreachable {
                peer: *to,
                attempts: 1,
                last_error: "receiver stopped".into(),
            });
        }
        Ok(received)
    }
}

/// One node's end of a [`MemoryNetwork`].
#[derive(Clone)]
pub struct MemoryTransport {
    network: MemoryNetwork,
    keypair: Arc<Keypair>,
    seq: Arc<Mutex<SeqClock>>,
}

impl MemoryTransport {
    /// Deliver already-signed bytes as they are (to show a replay changes nothing).
    pub fn send_signed(&self, to: PeerId, signed: &SignedPayload) -> Result<Received, PeersError> {
        self.network
            .deliver(&self.keypair.public().to_peer_id(), &to, signed)
    }

    /// Sign a payload for `to` without sending it.
    pub fn sign(&self, to: &PeerId, payload: &Payload) -> Result<SignedPayload, PeersError> {
        SeqClock::sign_next(&self.seq, &self.keypair, to, payload)
    }
}

impl PayloadTransport for MemoryTransport {
    fn local_peer_id(&self) -> PeerId {
        self.keypair.public().to_peer_id()
    }

    fn send(&self, to: PeerId, payload: Payload) -> BoxFuture<'_, Result<(), PeersError>> {
        Box::pin(async move {
            let signed = self.sign(&to, &payload)?;
            match self.send_signed(to, &signed)? {
                Received::New(_) | Received::Duplicate => Ok(()),
                Received::Refused(r) => Err(PeersError::Refused {
                    peer: to,
                    reason: r.to_string(),
                }),
                Received::RateLimited => Err(PeersError::Unreachable {
                    peer: to,
                    attempts: 1,
                    last_error: "rate limited".into(),
                }),
            }
        })
    }
}
